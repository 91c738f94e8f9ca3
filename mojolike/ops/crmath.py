"""Public correctly rounded `expf`, `logf`, `sinpif` and `cospif` on float32 buffers, any backend.

The kernels decide almost every value with a binary64 rounding test and mark
the rest UNDECIDED; `finish` gives those slots the oracle's exact answer, so
the result is the correctly rounded value everywhere (contracts/crmath.md).
"""
from __future__ import annotations

import numpy as np

from ..core import fallbacks
from ..core.checks import as_f32, shape_of
from ..core.entry import entry_point
from ..core.registry import kernels
from ..oracles import crmath as spec

UNDECIDED = 0x7FA00DAD  # the kernels' mark for a slot the fast path could not decide
_EXACT = {"expf": spec.expf_bits, "logf": spec.logf_bits, "sinpif": spec.sinpif_bits,
          "cospif": spec.cospif_bits}


def finish(name: str, x: np.ndarray, out: np.ndarray, undecided: int) -> int:
    """Give the `undecided` UNDECIDED slots of out the oracle's bits, reporting each to
    `fallbacks` (function and input pattern); returns how many."""
    if undecided:
        ob, xb = out.reshape(-1).view(np.uint32), x.reshape(-1).view(np.uint32)
        idx = np.flatnonzero(ob == UNDECIDED)
        assert idx.size == undecided, (idx.size, undecided)
        exact = _EXACT[name]
        for i in idx.tolist():
            u = int(xb[i])
            ob[i] = v = exact(u)
            fallbacks.record("crmath", name, u, v)
    return undecided


def _apply(entry: str, name: str, x, backend, numeric_mode) -> np.ndarray:
    a = as_f32(entry, "x", x)
    k = kernels(entry, "crmath", backend, numeric_mode)
    out = np.empty(a.size, np.float32)
    finish(name, a, out, getattr(k, f"{name}_into")(a, out))
    return out.reshape(shape_of(x))


@entry_point("mojolike.math.expf")
def expf(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """e^x for every element, the float32 nearest the exact value (ties to even).

    `x`: any float32 buffer; the result is a new float32 array of its shape.
    Special values as C99 `expf`: NaN in, NaN out (quieted, payload kept);
    expf(+inf) = +inf, expf(-inf) = +0; overflow gives +inf and underflow the
    correctly rounded subnormal or +0.

    Reproducibility: numeric_mode="identical" gives the oracle's bits on every
    backend; the value is defined by the real e^x alone, so no libm, vendor or
    thread count reaches it.

    >>> import numpy as np, mojolike.math
    >>> mojolike.math.expf(np.float32([0.0, 1.0, -np.inf]), backend="oracle").tolist()
    [1.0, 2.7182817459106445, 0.0]
    """
    return _apply(entry, "expf", x, backend, numeric_mode)


@entry_point("mojolike.math.logf")
def logf(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """ln x for every element, the float32 nearest the exact value (ties to even).

    Special values as C99 `logf`: logf(+-0) = -inf, logf(1) = +0,
    logf(+inf) = +inf, logf(x < 0) = NaN (pattern 0x7FC00000), NaN in, NaN
    out (quieted, payload kept).

    Reproducibility: as `expf`.

    >>> import numpy as np, mojolike.math
    >>> mojolike.math.logf(np.float32([1.0, 2.0, 0.0]), backend="oracle").tolist()
    [0.0, 0.6931471824645996, -inf]
    """
    return _apply(entry, "logf", x, backend, numeric_mode)


@entry_point("mojolike.math.sinpif")
def sinpif(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """sin(pi x) for every element, the float32 nearest the exact value (ties to even).

    `x`: any float32 buffer; the result is a new float32 array of its shape.
    Special values as C23 `sinpi`: NaN in, NaN out (quieted, payload kept);
    sinpif(+-inf) = NaN (pattern 0x7FC00000); sinpif(+-0) = +-0; sinpif is odd,
    and for an integer n, sinpif(n) = +0 when n > 0 and -0 when n < 0 (every
    |x| >= 2^23 is an integer). Multiples of 1/2 give their exact 0 or +-1; no
    other input has a rational value, so none is a tie.

    Reproducibility: numeric_mode="identical" gives the oracle's bits on every
    backend; the value is defined by the real sin(pi x) alone (x is reduced
    exactly, so no pi rounded to binary32 or binary64 reaches it), and no libm,
    vendor or thread count does either.

    >>> import numpy as np, mojolike.math
    >>> mojolike.math.sinpif(np.float32([0.5, 0.25, -3.0, 1e-30]), backend="oracle").tolist()
    [1.0, 0.7071067690849304, -0.0, 3.141592723928534e-30]
    """
    return _apply(entry, "sinpif", x, backend, numeric_mode)


@entry_point("mojolike.math.cospif")
def cospif(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """cos(pi x) for every element, the float32 nearest the exact value (ties to even).

    Special values as C23 `cospi`: NaN in, NaN out (quieted, payload kept);
    cospif(+-inf) = NaN (pattern 0x7FC00000); cospif(+-0) = 1; cospif is even;
    cospif(n + 1/2) = +0 and cospif(n) = +1 or -1 (n even or odd) for every
    integer n (every |x| >= 2^24 is an even integer, so its cospif is 1).

    Reproducibility: as `sinpif`.

    >>> import numpy as np, mojolike.math
    >>> mojolike.math.cospif(np.float32([0.5, 1.0, 0.25, -2.5]), backend="oracle").tolist()
    [0.0, -1.0, 0.7071067690849304, 0.0]
    """
    return _apply(entry, "cospif", x, backend, numeric_mode)
