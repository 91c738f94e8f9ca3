"""Public sums: `fold`, `sumsq`, `dot`, each the canonical tree on any backend.

The tree (32 lanes, 1024-element chunks, -0.0 lane start, butterfly, pairwise
chunk tree) is defined in `mojolike.oracles.fold`; see contracts/fold.md.
"""
from __future__ import annotations

import numpy as np

from ..core.checks import as_f32, shape_of
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..core.registry import kernels


@entry_point("mojolike.fold")
def fold(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.float32:
    """The sum of a float32 buffer by the canonical `fold` tree.

    Parameters: `x` any float32 buffer (numpy array, array.array('f'),
    memoryview), any shape, read in C order; `backend`, `numeric_mode` as in
    `mojolike.backends`. NaN and infinities are legal and follow IEEE 754.

    Reproducibility: in numeric_mode="identical" the result has the oracle's
    bits on every backend and thread count; the tree depends only on x.size.

    Lanes hold every 32nd element, so 1e8 and -1e8 cancel before the 1.0 joins
    (a serial float32 sum would lose the 1.0 and return 0.0):

    >>> import numpy as np, mojolike
    >>> mojolike.fold(np.array([1e8, 1.0, -1e8], np.float32), backend="oracle")
    np.float32(1.0)
    """
    a = as_f32(entry, "x", x)
    return kernels(entry, "fold", backend, numeric_mode).fold(a)


@entry_point("mojolike.sumsq")
def sumsq(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.float32:
    """fold of the rounded squares x[i]*x[i] (no fused multiply-add).

    Reproducibility: as `fold`; each square is rounded to float32 before it is summed.

    >>> import numpy as np, mojolike
    >>> mojolike.sumsq(np.array([3, 4], np.float32), backend="oracle")
    np.float32(25.0)
    """
    a = as_f32(entry, "x", x)
    return kernels(entry, "fold", backend, numeric_mode).sumsq(a)


@entry_point("mojolike.dot")
def dot(a, b, *, backend=None, numeric_mode=None, entry, **unknown) -> np.float32:
    """fold of the rounded products a[i]*b[i]; a and b have the same shape.

    Reproducibility: as `fold`; each product is rounded to float32 before it is summed.

    >>> import numpy as np, mojolike
    >>> mojolike.dot(np.ones(3, np.float32), np.arange(3, dtype=np.float32), backend="oracle")
    np.float32(3.0)
    """
    u = as_f32(entry, "a", a)
    v = as_f32(entry, "b", b)
    shape_a, shape_b = shape_of(a), shape_of(b)
    if shape_a != shape_b:
        refuse(entry, "b", f"has shape {shape_b} but a has shape {shape_a}; dot needs equal "
                           f"shapes")
    return kernels(entry, "fold", backend, numeric_mode).dot(u, v)
