"""tanhf and erff on WIDTH lanes at once: the vector spelling of native/erf_tanh.py's
element functions (exp64, round_test, tanh_elem, erf_elem, tanh_any, erf_any), for the
GELU kernels of native/vgelu.py.

Each function is erf_tanh.py's, lane by lane and in its order (binary64 +, -, *, / without
fast-math flags, one rounding each), on native/simd.py's vectors, so a lane's bits and
decided flag are the scalar's:
- branches (NaN, +-0, |x| >= TANH_ONE / ERF_ONE, the polynomial below 1/4 or 1/2, the
  exp64 formula above) are computed on every lane and picked per lane, the error
  budget with them, so round_test sees each lane's own y and eb;
- erf's series runs while some lane is still going; each lane keeps its sum s and budget
  err from the iteration where its scalar loop stops, so they are the scalar's;
- exp64 is native/vexp.py's vexp64 (crmath's constants, erf_tanh.exp64's steps): its
  integer steps read the bit pattern of t / (ln 2 / 32) + SHIFTER, and 2^q is the binary64
  with pattern (k - j) 2^47 + 1023 2^52 (q stays within [-23, 26] on these domains).
Lanes outside a function's domain compute on 1/4 and are then replaced by the special
value, so no lane can keep erf's loop running. benchmarks/vgelu_exhaustive.py compares
vtanh_any and verf_any with the scalars on all 2^32 inputs.

Reproducibility: lanes are independent and each is the scalar's operation sequence, so
neither the lanes' neighbours nor the target can reach a bit.

>>> import numpy as np
>>> from numba import njit
>>> from mojolike.native.simd import vload, vselect, vsplat, vstore
>>> @njit
... def erf16(x, out):
...     r, ok = verf_any(vload(x, 0))
...     vstore(out, 0, r)
...     return mask_bits(ok)
>>> x = np.float32([0.25, 1, -2, 4, np.inf, -0.0, np.nan] + [0] * 9); out = np.empty(16, np.float32)
>>> erf16(x, out), out[:7].tolist()
(65535, [0.27632638812065125, 0.8427007794380188, -0.9953222870826721, 1.0, 1.0, -0.0, nan])
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .erf_tanh import (ERF_ERR0, ERF_ERR1, ERF_ONE_D, ERF_POLY_END, ERF_POLY_ERR, ERF_STOP,
                       MINUS_ONE, ONE, R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, R11, R12, R13,
                       T3, T5, T7, T9, T11, T13, T15, T17, T19, T21, T23, TANH_ERR,
                       TANH_ONE_D, TANH_POLY_END, TANH_POLY_ERR, TWO, TWO_OVER_SQRT_PI, U,
                       ZERO, ZERO32)
from .simd import (vadd, vand, vdiv, veq, vmul, vnarrow, vnot, vor, vselect, vsplat, vsub,
                   vwiden)
from .simd64 import dge, dle, dlt, dselect, mask_bits, vany
from .vexp import vexp64

_jit = njit(inline="always", error_model="numpy")
QUARTER = np.float64(0.25)  # what lanes outside a function's domain compute on
TANH_SMALL = np.float64(1 / 32)  # below it the first try's short series, from it exp64's formula
TANH_TRY_ERR = np.float64(128 * U)  # the first try's budget below TANH_POLY_END
TANH_SERIES = (T23, T21, T19, T17, T15, T13, T11, T9, T7, T5, T3)  # tanh_elem's, highest first
TANH_SHORT = (T9, T7, T5, T3)  # the first try's, below TANH_SMALL


@_jit
def vround_test(y, eb, sg):
    """erf_tanh.round_test lane by lane."""
    ys = vmul(y, sg)  # exact
    a = vnarrow(vsub(ys, eb))
    b = vnarrow(vadd(ys, eb))
    return a, veq(a, b)


@_jit
def vtanh_series(a, coefs):
    """a + a (a^2 P(a^2)) lane by lane, Horner in a^2 over P's coefficients `coefs`, the
    highest first (tanh_elem's steps below TANH_POLY_END with TANH_SERIES)."""
    a2 = vmul(a, a)  # exact
    h = vmul(a2, vsplat(coefs[0]))
    for n in range(1, len(coefs)):
        h = vadd(h, vsplat(coefs[n]))
        h = vmul(a2, h)
    h = vmul(a, h)
    return vadd(a, h)


@_jit
def vtanh_exp(a):
    """(E - 1) / (E + 1), E = exp64(2a), lane by lane: tanh_elem's steps from TANH_POLY_END."""
    e = vexp64(vadd(a, a))
    num = vsub(e, vsplat(ONE))
    den = vadd(e, vsplat(ONE))
    return vdiv(num, den)


@_jit
def vtanh_elem(a, sg):
    """erf_tanh.tanh_elem lane by lane, for 0 < a < TANH_ONE: both branches, picked per lane."""
    poly = dlt(a, vsplat(TANH_POLY_END))
    y = dselect(poly, vtanh_series(a, TANH_SERIES), vtanh_exp(a))
    err = dselect(poly, vsplat(TANH_POLY_ERR), vsplat(TANH_ERR))
    return vround_test(y, vmul(y, err), sg)


@_jit
def verf_poly(a):
    """erf_tanh.erf_elem's y below ERF_POLY_END."""
    a2 = vmul(a, a)  # exact
    h = vmul(a2, vsplat(R13))
    h = vadd(h, vsplat(R12))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R11))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R10))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R9))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R8))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R7))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R6))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R5))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R4))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R3))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R2))
    h = vmul(a2, h)
    h = vadd(h, vsplat(R1))
    h = vmul(a2, h)
    y = vadd(vsplat(R0), h)
    return vmul(a, y)


@_jit
def verf_series(a, series):
    """erf_tanh.erf_elem's (y, budget) at and above ERF_POLY_END, on the lanes in `series`."""
    z = vmul(a, a)  # exact
    e = vexp64(vsub(vsplat(ZERO), z))
    z = vadd(z, z)  # 2 a^2, exact
    t = vsplat(ONE)
    s = t
    k = t
    err = vsplat(ERF_ERR0)
    kept_s, kept_err = s, err
    going = series
    # while a lane is going its k, t, s and err are the scalar's; its kept sum and budget
    # stop where its scalar loop breaks (what runs on is never read: the next division
    # need not wait for the stop test)
    while vany(going):
        k = vadd(k, vsplat(TWO))
        t = vmul(t, z)
        t = vdiv(t, k)
        s = vadd(s, t)
        err = vadd(err, vsplat(ERF_ERR1))
        kept_s = dselect(going, s, kept_s)
        kept_err = dselect(going, err, kept_err)
        going = vand(going, vnot(dle(vmul(t, vsplat(ERF_STOP)), s)))
    y = vmul(vsplat(TWO_OVER_SQRT_PI), a)
    y = vmul(y, e)
    y = vmul(y, kept_s)
    return y, kept_err


@_jit
def verf_elem(a, sg, series):
    """erf_tanh.erf_elem lane by lane, for 0 < a < ERF_ONE; `series` marks the lanes with
    a >= ERF_POLY_END."""
    y, err = verf_series(a, series)
    y = dselect(series, y, verf_poly(a))
    err = dselect(series, err, vsplat(ERF_POLY_ERR))
    return vround_test(y, vmul(y, err), sg)


@_jit
def vsign(v):
    """(a, sg): |v| and its sign in binary64, as erf_tanh's tanh_value / erf_value form them."""
    xd = vwiden(v)
    sg = dselect(dlt(xd, vsplat(ZERO)), vsplat(MINUS_ONE), vsplat(ONE))
    return vmul(xd, sg), sg


@_jit
def vtanh_try(a, sg):
    """(r, decided, final): a first try at vtanh_elem on one formula per lane.

    From TANH_POLY_END up it is vtanh_elem's formula with its budget (final: the scalar's
    own result and flag). Below, vtanh_elem would run both its branches on every lane, the
    series' eleven terms among them; here lanes from TANH_SMALL up take exp64's formula and
    those below the series to the a^9 term (a^2 < 2^-10: the first term left out is under
    2^-56 a), both within 30u (E = e^(2a) within 1.6u, E - 1 >= 1/16 magnifying that by at
    most 16.5; the short series about 1.2u), under the budget TANH_TRY_ERR = 128u. A lane
    the scalar leaves undecided has a rounding boundary within 2 x 4u of tanh (its budget
    TANH_POLY_ERR), inside this try's interval too, so a lane decided here is decided by the
    scalar, to the same correctly rounded value; the few others (about one in 2^21) take
    vtanh_elem (vtanh_any)."""
    y = dselect(dlt(a, vsplat(TANH_SMALL)), vtanh_series(a, TANH_SHORT), vtanh_exp(a))
    final = dge(a, vsplat(TANH_POLY_END))
    err = dselect(final, vsplat(TANH_ERR), vsplat(TANH_TRY_ERR))
    r, ok = vround_test(y, vmul(y, err), sg)
    return r, ok, final


@_jit
def vtanh_any(v):
    """erf_tanh.tanh_any lane by lane: (tanhf(v), decided), NaN passed through."""
    a, sg = vsign(v)
    one = vsplat(TANH_ONE_D)
    inside = vand(dlt(a, one), vnot(veq(v, vsplat(ZERO32))))  # False on NaN
    ain = dselect(inside, a, vsplat(QUARTER))
    r, ok, final = vtanh_try(ain, sg)
    retry = vand(inside, vnot(vor(ok, final)))
    if vany(retry):  # rare: these lanes take the scalar's own two branches
        r2, ok2 = vtanh_elem(ain, sg)
        r = vselect(retry, r2, r)
        ok = vor(vand(retry, ok2), vand(vnot(retry), ok))
    special = vselect(dge(a, one), vnarrow(sg), v)  # +-1 from TANH_ONE; NaN and +-0 kept
    return vselect(inside, r, special), vor(ok, vnot(inside))


@_jit
def verf_parts(v):
    """(a, sg, inside, series) of erf_tanh.erf_any: |v| and its sign in binary64, the lanes
    erf_elem computes (not NaN, not +-0, below ERF_ONE) and those of them on the series."""
    a, sg = vsign(v)
    inside = vand(dlt(a, vsplat(ERF_ONE_D)), vnot(veq(v, vsplat(ZERO32))))  # False on NaN
    return a, sg, inside, vand(inside, dge(a, vsplat(ERF_POLY_END)))


@_jit
def verf_finish(v, a, sg, inside, r, ok):
    """erf_any's (result, decided) from erf_elem's (r, ok) on the lanes inside."""
    special = vselect(dge(a, vsplat(ERF_ONE_D)), vnarrow(sg), v)  # +-1 from ERF_ONE; NaN, +-0 kept
    return vselect(inside, r, special), vor(ok, vnot(inside))


@_jit
def verf_any(v):
    """erf_tanh.erf_any lane by lane: (erff(v), decided), NaN passed through."""
    a, sg, inside, series = verf_parts(v)
    r, ok = verf_elem(dselect(inside, a, vsplat(QUARTER)), sg, series)
    return verf_finish(v, a, sg, inside, r, ok)
