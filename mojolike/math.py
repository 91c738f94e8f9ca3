"""Correctly rounded binary32 elementary functions: `expf`, `logf`.

Each result is the float32 nearest the exact real value, so it is the same on
every backend, vendor and thread count (contracts/crmath.md).

>>> import numpy as np
>>> from mojolike.math import expf, logf
>>> expf(np.float32([1.0]), backend="oracle").tolist()   # e rounded once
[2.7182817459106445]
>>> logf(expf(np.float32([0.5]), backend="oracle"), backend="oracle").tolist()
[0.4999999701976776]
"""
from ._crmath import expf, logf

__all__ = ["expf", "logf"]
