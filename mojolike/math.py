"""Correctly rounded binary32 elementary functions: `expf`, `logf`, `sinpif`, `cospif`, `tanhf`, `erff`.

Each result is the float32 nearest the exact real value, so it is the same on
every backend, vendor and thread count (contracts/crmath.md).

>>> import numpy as np
>>> from mojolike.math import expf, logf
>>> expf(np.float32([1.0]), backend="oracle").tolist()   # e rounded once
[2.7182817459106445]
>>> logf(expf(np.float32([0.5]), backend="oracle"), backend="oracle").tolist()
[0.4999999701976776]
>>> from mojolike.math import sinpif, cospif
>>> sinpif(np.float32([1/6]), backend="oracle").tolist()   # sin(pi x) of the float32 nearest 1/6
[0.5]
>>> cospif(np.float32([0.5, 2.0**24]), backend="oracle").tolist()
[0.0, 1.0]
>>> from mojolike.math import erff, tanhf
>>> tanhf(np.float32([0.5]), backend="oracle").tolist(), erff(np.float32([1.0]), backend="oracle").tolist()
([0.46211716532707214], [0.8427007794380188])
"""
from .ops.crmath import cospif, erff, expf, logf, sinpif, tanhf

__all__ = ["cospif", "erff", "expf", "logf", "sinpif", "tanhf"]
