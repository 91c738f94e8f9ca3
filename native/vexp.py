"""expf of WIDTH float32 lanes at once on native/simd.py vectors: the vector spelling of
native/crmath.py's `exp_elem` and native/attention.py's `exp_any`, for the row kernels.

The operations are exp_elem's, lane by lane and in its order (binary64 +, -, * without
fast-math flags, one rounding each), after a first try that stops the series two terms
earlier and decides with a wider error budget (`vexp_elem`): a decided lane is the correctly
rounded expf either way, so a lane's bits and its decided flag are the scalar's
(benchmarks/vexp_exhaustive.py checks every binary32 input). Two integer steps are
spelled on the bit pattern of t = x / (ln 2 / 32) + SHIFTER instead of `int(kd)`: since
|k| < 2^51, t = 1.5 * 2^52 + k lies in [2^52, 2^53), where the patterns of t and SHIFTER
differ by exactly k; and the scalar's product by 2^q (POW2[q + 160], q = (k - j) / 32 in
[-151, 129] inside exp_elem's domain) is moved onto the table entry 2^(j/32), whose
exponent field gains (k - j) * 2^47 = q * 2^52 (no arithmetic shift is needed, which the
baseline and AVX2 targets lack for int64): scaling by a power of two commutes with every
rounding while the values stay normal binary64, so the bits are the scalar's. The table is
looked up with simd64's `vlookup32` (permutes on AVX-512, a gather elsewhere).

>>> import numpy as np
>>> from numba import njit
>>> from mojolike.native.simd import vload, vstore
>>> @njit
... def exp16(x, out):
...     e, ok = vexp_any(vload(x, 0))
...     vstore(out, 0, e)
...     return vall(ok)
>>> x = np.float32([0, 1, -1, np.inf, -np.inf, np.nan] + [0] * 10); out = np.empty(16, np.float32)
>>> exp16(x, out), out[:6].tolist()
(True, [1.0, 2.7182817459106445, 0.3678794503211975, inf, 0.0, nan])
"""
from __future__ import annotations

import numpy as np
from numba import int64, njit, prange

from .crmath import (BLOCK, E2, E3, E4, E5, E6, ERR, EXP2_32, EXP_HUGE, EXP_TINY, IN, IN_BITS,
                     INV_LN2_32, LN2_32_HI, LN2_32_LO, ONE, OUT, OUT_BITS, SHIFTER, _exp_elem,
                     expf_finish)
from .simd import (WIDTH, vadd, vall, vand, vbits, vfrombits, veq, vge, vgt, vload, vlt, vmul,
                   vnarrow, vne, vnot, vor, vselect, vshl, vsplat, vstore, vsub, vwiden)
from .simd64 import vlookup32

_jit = njit(inline="always", error_model="numpy")
SHIFTER_BITS = np.int64(np.float64(SHIFTER).view(np.int64))
J_MASK = np.int64(31)
POS_INF = np.float32(np.inf)
ZERO = np.float32(0.0)
Q_SHIFT = np.int64(47)  # (k - j) * 2^47 = q * 2^52
LN2_32 = np.float64(LN2_32_HI + LN2_32_LO)  # ln 2 / 32 to nearest, for the first try's one-step r
# The first try's relative error budget. Its r = t - (kd LN2_32 rounded), the subtraction
# exact (Sterbenz, or kd = 0), is within |kd| ln2/32 2^-52 <= |t| 2^-51 < 2^-44.2 of the exact
# t - kd ln2/32 (|t| < 104 on exp_elem's domain), which moves e^r by a relative 2^-44.1 at
# most. |r| <= ln2/64 (1 + 2^-39) < 0.0109, so the series cut after r^4/24 misses at most
# r^5/120 e^|r| < 1.33e-12 of e^r - 1, a relative 1.35e-12 < 2^-39.4 of e^r >= 0.989; the
# roundings (about ten, of at most 2^-53 each, as in ERR's budget) and the table's 2^-53 add
# less than 2^-48. Together under 2^-39.2: 2^-38 leaves a factor 2.3.
ERR_SHORT = np.float64(2.0 ** -38)


@_jit
def _index(t):
    """(kd, k, j): kd = k = round(t / (ln 2 / 32)) as a binary64 and an integer, j = k mod 32."""
    s = vmul(t, vsplat(INV_LN2_32))
    s = vadd(s, vsplat(SHIFTER))
    kd = vsub(s, vsplat(SHIFTER))
    k = vsub(vbits(s), vsplat(SHIFTER_BITS))  # int(kd), exactly
    return kd, k, vand(k, vsplat(J_MASK))


@_jit
def _exact_r(t, kd):
    """r = t - kd ln2/32 in crmath's two steps (the first exact when t is a widened float32)."""
    r = vsub(t, vmul(kd, vsplat(LN2_32_HI)))
    return vsub(r, vmul(kd, vsplat(LN2_32_LO)))


@_jit
def _table(k, j):
    """2^(j/32) 2^q (q = (k - j) / 32) from the table, the power of two added to the entry's
    exponent: exact, the result a normal binary64 (t within expf's range)."""
    tj = vlookup32(EXP2_32, j)
    return vfrombits(vadd(vbits(tj), vshl(vsub(k, j), vsplat(Q_SHIFT))))


@_jit
def _scaled_table(r, u, ts):
    """ts + ts p, p = r u, ts = 2^(j/32) 2^q: bit for bit the scalar's 2^q (2^(j/32) +
    2^(j/32) p), since scaling by 2^q commutes with each rounding (the values stay normal
    binary64)."""
    p = vmul(r, u)
    y = vmul(ts, p)
    return vadd(ts, y)


@_jit
def vexp64(t):
    """exp(t) in binary64 lane by lane: the reduction to k ln2/32 + r, the degree-6
    polynomial in r and 2^(k/32) from the table, each step one rounding, as crmath's scalar
    exp and erf_tanh.exp64 (t within expf's range, so 2^q is a normal binary64)."""
    kd, k, j = _index(t)
    r = _exact_r(t, kd)
    return _scaled_table(r, _poly6(r), _table(k, j))


@_jit
def _poly6(r):
    """1 + r (1/2 + r (1/6 + r (1/24 + r (1/120 + r/720)))): p / r of crmath's exp."""
    u = vmul(r, vsplat(E6))
    u = vadd(u, vsplat(E5))
    u = vmul(r, u)
    u = vadd(u, vsplat(E4))
    return _last_terms(r, vmul(r, u))


@_jit
def _poly4(r):
    """1 + r (1/2 + r (1/6 + r/24)): the first try's, two terms shorter."""
    return _last_terms(r, vmul(r, vsplat(E4)))


@_jit
def _last_terms(r, u):
    """1 + r (1/2 + r (1/6 + u)), in _poly6's order."""
    u = vadd(u, vsplat(E3))
    u = vmul(r, u)
    u = vadd(u, vsplat(E2))
    u = vmul(r, u)
    return vadd(u, vsplat(ONE))


@_jit
def _rounded(y, err):
    """(a, decided): a = y rounded to binary32, decided where every value within y * err of y
    rounds to a."""
    eb = vmul(y, vsplat(err))
    a = vnarrow(vsub(y, eb))
    b = vnarrow(vadd(y, eb))
    return a, veq(a, b)


@_jit
def vexp_elem(x):
    """(a, decided) lane by lane: exp_elem of each float32 lane, for EXP_TINY < x < EXP_HUGE.

    A first try takes r in one rounded step, stops the series at r^4/24 and rounds with the
    budget ERR_SHORT; only a vector with a lane it leaves undecided (about one in 500) runs
    exp_elem's two-step r and degree 6. Both
    decide only where the correctly rounded expf is certain, so a decided lane has the
    scalar's bits, and the first try leaves undecided every lane exp_elem leaves undecided:
    such a lane's e^x lies within 2 ERR of a rounding boundary, well inside ERR_SHORT's
    interval."""
    t = vwiden(x)
    kd, k, j = _index(t)
    ts = _table(k, j)
    r = vsub(t, vmul(kd, vsplat(LN2_32)))
    a, ok = _rounded(_scaled_table(r, _poly4(r), ts), ERR_SHORT)
    if vall(ok):
        return a, ok
    r = _exact_r(t, kd)
    return _rounded(_scaled_table(r, _poly6(r), ts), ERR)


@_jit
def vexp_any(d):
    """(e, decided) lane by lane: exp_any of each float32 lane (any binary32)."""
    tiny, huge, zero = vsplat(EXP_TINY), vsplat(EXP_HUGE), vsplat(ZERO)
    inside = vand(vgt(d, tiny), vlt(d, huge))
    everywhere = vall(inside)
    w = d if everywhere else vselect(inside, d, zero)
    a, ok = vexp_elem(w)
    if everywhere:  # the common case: no lane needs a special value
        return a, ok
    big = vselect(vge(d, huge), vsplat(POS_INF), zero)
    special = vselect(vne(d, d), d, big)
    return vselect(inside, a, special), vor(ok, vnot(inside))


@njit(int64(IN, IN_BITS, OUT, OUT_BITS), parallel=True, cache=True, error_model="numpy")
def _expf(x, xb, out, ob):
    """mojolike.math.expf's kernel (native/crmath.py's NumbaCrmath.expf_into), returning the
    number of UNDECIDED slots: per block of crmath.BLOCK inputs, a first pass clamps each into
    exp_elem's domain (NaN to EXP_TINY) and writes vexp_elem of 16 at a time (the last few one
    by one, exp_elem), noting whether one was clamped or undecided; crmath.expf_finish then
    writes the special slots, or redoes an undecided block element by element. A lane's value
    and decided flag are exp_elem's."""
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, n)
        tiny, huge = vsplat(EXP_TINY), vsplat(EXP_HUGE)
        clamped = 0
        unsure = 0
        vend = lo + (hi - lo) // WIDTH * WIDTH
        for i in range(lo, vend, WIDTH):
            v = vload(x, i)
            w = vselect(vgt(v, tiny), v, tiny)  # NaN too
            w = vselect(vlt(w, huge), w, huge)
            a, ok = vexp_elem(w)
            vstore(out, i, a)
            clamped += not vall(veq(w, v))
            unsure += not vall(ok)
        for i in range(vend, hi):
            v = x[i]
            w = v if v > EXP_TINY else EXP_TINY
            w = w if w < EXP_HUGE else EXP_HUGE
            a, ok = _exp_elem(w)
            out[i] = a
            clamped += w != v
            unsure += not ok
        counts[c] = expf_finish(x, xb, out, ob, lo, hi, clamped, unsure)
    return counts.sum()  # integers: the order cannot matter


# the kernel tests/test_vectorized.py compiles for every target, and the packed operations
# its loops must hold (the expf's binary64 lanes)
HOT_KERNELS = {"vexp._expf": (_expf, ("mulpd", "addpd"))}
