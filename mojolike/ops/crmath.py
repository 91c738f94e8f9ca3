"""Public correctly rounded `expf`, `logf`, `sinpif`, `cospif`, `tanhf` and `erff` on float32 buffers, any backend.

The kernels decide almost every value with a binary64 rounding test and mark
the rest UNDECIDED; `finish` gives those slots the oracle's exact answer, so
the result is the correctly rounded value everywhere (contracts/crmath.md;
tanhf and erff: contracts/transformer.md clause 6). `finish_gelu` and
`finish_gelu_backward` do the same for the GELU kernels (clause 7), whose slot is
UNDECIDED when its inner tanhf, erff or expf is.

>>> import numpy as np
>>> x = np.float32([1.0, -2.0])
>>> out = np.empty(2, np.float32)
>>> k = kernels("example", "crmath", "cpu-numba")
>>> finish_gelu(x, False, out, k.gelu_into(x, False, out)), out.tolist()
(0, [0.8413447141647339, -0.04550027847290039])
"""
from __future__ import annotations

import numpy as np

from ..core import fallbacks
from ..core.checks import as_f32, shape_of
from ..core.entry import entry_point
from ..core.registry import kernels
from ..oracles import crmath as spec
from ..oracles import erf_tanh
from ..oracles.f32 import bits_to_f32, f32_to_bits

UNDECIDED = 0x7FA00DAD  # the kernels' mark for a slot the fast path could not decide
_EXACT = {"expf": spec.expf_bits, "logf": spec.logf_bits, "sinpif": spec.sinpif_bits,
          "cospif": spec.cospif_bits, "tanhf": erf_tanh.tanhf_bits, "erff": erf_tanh.erff_bits}
_GELU = {False: ("gelu_erf", erf_tanh.gelu_erf), True: ("gelu_tanh", erf_tanh.gelu_tanh)}
_GELU_GRAD = {False: ("gelu_erf_grad", erf_tanh.gelu_erf_grad),
              True: ("gelu_tanh_grad", erf_tanh.gelu_tanh_grad)}


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


def _undecided_slots(out: np.ndarray, undecided: int) -> list[int]:
    """The flat positions of out's UNDECIDED slots: the kernel's own list where it gave one
    (fallbacks.Undecided), else a search of the whole output."""
    ob = out.reshape(-1).view(np.uint32)
    at = getattr(undecided, "at", None)
    if at is None:
        at = np.flatnonzero(ob == UNDECIDED)
    assert len(at) == undecided and (ob[at] == UNDECIDED).all(), (len(at), int(undecided))
    return at.tolist()


def finish_gelu(x: np.ndarray, tanh: bool, out: np.ndarray, undecided: int) -> int:
    """Give the `undecided` UNDECIDED slots of a GELU kernel's out (gelu_tanh if tanh, else
    gelu_erf) the oracle's bits, reporting each to `fallbacks` (kind "gelu_erf" or
    "gelu_tanh", at the x pattern); returns how many."""
    if undecided:
        kind, fn = _GELU[bool(tanh)]
        ob, xb = out.reshape(-1).view(np.uint32), x.reshape(-1).view(np.uint32)
        for i in _undecided_slots(out, undecided):
            u = int(xb[i])
            ob[i] = v = f32_to_bits(fn(bits_to_f32(u)))
            fallbacks.record("crmath", kind, u, v)
    return undecided


def finish_gelu_backward(dy: np.ndarray, x: np.ndarray, tanh: bool, dx: np.ndarray, undecided: int) -> int:
    """The same for a GELU backward kernel's dx (gelu_tanh_grad if tanh, else gelu_erf_grad;
    kinds "gelu_tanh_grad", "gelu_erf_grad", at the x pattern); returns how many."""
    if undecided:
        kind, fn = _GELU_GRAD[bool(tanh)]
        ob, xb, db = dx.reshape(-1).view(np.uint32), x.reshape(-1).view(np.uint32), dy.reshape(-1).view(np.uint32)
        for i in _undecided_slots(dx, undecided):
            u = int(xb[i])
            ob[i] = v = f32_to_bits(fn(bits_to_f32(int(db[i])), bits_to_f32(u)))
            fallbacks.record("crmath", kind, u, v)
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


@entry_point("mojolike.math.tanhf")
def tanhf(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """tanh x for every element, the float32 nearest the exact value (ties to even).

    `x`: any float32 buffer; the result is a new float32 array of its shape.
    NaN in, NaN out (quieted, payload kept); tanhf(+-0) = +-0, tanhf(+-inf) = +-1,
    and +-1 exactly from |x| >= 9.010913848876953 (0x41102CB4) up. No input is a tie
    (contracts/transformer.md clause 6).

    Reproducibility: as `expf`.

    >>> import numpy as np, mojolike.math
    >>> mojolike.math.tanhf(np.float32([0.5, -0.0, 10.0]), backend="oracle").tolist()
    [0.46211716532707214, -0.0, 1.0]
    """
    return _apply(entry, "tanhf", x, backend, numeric_mode)


@entry_point("mojolike.math.erff")
def erff(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """erf x for every element, the float32 nearest the exact value (ties to even).

    NaN in, NaN out (quieted, payload kept); erff(+-0) = +-0, erff(+-inf) = +-1,
    and +-1 exactly from |x| >= 3.92578125 (0x407B4000) up (and for some smaller |x|,
    where erf x rounds to 1).

    Reproducibility: as `expf`.

    >>> import numpy as np, mojolike.math
    >>> mojolike.math.erff(np.float32([1.0, -0.0, np.inf]), backend="oracle").tolist()
    [0.8427007794380188, -0.0, 1.0]
    """
    return _apply(entry, "erff", x, backend, numeric_mode)
