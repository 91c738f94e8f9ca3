"""numba CPU kernels for the correctly rounded expf, logf, sinpif and cospif (tanhf, erff: erf_tanh.py).

Each value is computed in binary64 with + - * only, then rounded to binary32 with
a test: the computed y is within 2^-50 |y| of the exact value (the error budget
is in contracts/crmath.md), so when y - 2^-50|y| and y + 2^-50|y| round to the
same binary32 value, so does the exact value. An element the test cannot decide
gets the pattern UNDECIDED (a signalling NaN, which no other path writes) and is
counted; the caller gives those elements the oracle's exact answer.

`exp_elem`, `log_elem`, `sinpi_elem` and `cospi_elem` are written once in terms of
the primitives dadd/dsub/dmul/narrow/widen; `native/cuda/crmath.py` compiles the
same source with libdevice `d*_rn`, and the C kernels in `native/c/crmath.c` are
the second spelling. The tables and coefficients come from
`oracles/crmath.kernel_tables()`, each entry the binary64 value nearest its exact
value. sin(pi x) and cos(pi x) share their pieces, as the C side does: `pi_reduce`
writes |x| = n/2 + r exactly (|r| <= 1/4), `pi_sc` evaluates both Taylor
polynomials, sin(pi r) and cos(pi r), for every element, so that the first pass
over a block has no branch and vectorizes, n mod 4 selects, and `pi_round` is
the rounding test. expf's kernel is native/vexp.py's `_expf`: its first pass runs
16 lanes at a time on explicit vectors (with a shorter first try), then
`expf_finish` here writes the special and undecided slots.

Reproducibility: elementwise, so the thread count cannot reach the bits; the
decided result is the exact value rounded, so it cannot depend on the backend.

>>> import numpy as np
>>> out = np.empty(2, np.float32)
>>> load("identical").expf_into(np.float32([0.0, 1.0]), out), out.tolist()
(0, [1.0, 2.7182817459106445])
>>> load("identical").sinpif_into(np.float32([-2.0, 0.25]), out), out.tolist()
(0, [-0.0, 0.7071067690849304])
"""
from __future__ import annotations

from operator import add as dadd
from operator import mul as dmul
from operator import sub as dsub

import numpy as np
from numba import float32, int64, njit, prange, types, uint32

from ..oracles import crmath as oracle
from .base import NumbaBase

narrow = np.float32  # binary64 -> binary32, round to nearest even
widen = np.float64  # exact
PRIMITIVES = ("dadd", "dsub", "dmul", "narrow", "widen")
_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation

UNDECIDED = 0x7FA00DAD  # a signalling NaN: kernels never write it for anything else
QUIET_BIT = oracle.QUIET_BIT
DEFAULT_NAN = oracle.DEFAULT_NAN_BITS
POS_INF_BITS = oracle.POS_INF_BITS
NEG_INF_BITS = oracle.NEG_INF_BITS
EXP_HUGE = np.float32(oracle.EXP_HUGE)
EXP_TINY = np.float32(oracle.EXP_TINY)
BLOCK = 4096  # elements per parallel task

_T = oracle.kernel_tables()
INV_LN2_32 = np.float64(_T["inv_ln2_32"])
LN2_32_HI = np.float64(_T["ln2_32_hi"][0])
LN2_32_LO = np.float64(_T["ln2_32_lo"][0])
LN2_HI = np.float64(_T["ln2_hi"][0])
LN2_LO = np.float64(_T["ln2_lo"][0])
EXP2_32 = np.array(_T["exp2_32"], np.float64)
POW2 = np.array([2.0 ** q for q in range(-160, 160)], np.float64)  # POW2[q + 160] = 2^q
POW2_BIAS = 160
LOG_INV = np.array(_T["log_inv"], np.float64)
LOG_HI = np.array(_T["log_hi"], np.float64)
LOG_LO = np.array(_T["log_lo"], np.float64)
SQRT2_M24 = oracle.SQRT2_M24
SHIFTER = np.float64(1.5 * 2.0 ** 52)  # t + SHIFTER - SHIFTER rounds t to an integer (ties to even)
ERR = np.float64(2.0 ** -50)  # the error budget, relative
ONE = np.float64(1.0)
TWO_M23 = np.float64(2.0 ** -23)
TWO_M24 = np.float64(2.0 ** -24)
# 1/n! (exp) and (-1)^(n+1)/n (log1p), each the nearest binary64
E2, E3, E4, E5, E6 = (np.float64(1 / f) for f in (2, 6, 24, 120, 720))
L2, L3, L4, L5, L6, L7, L8 = (np.float64((-1) ** (n + 1) / n) for n in range(2, 9))
# sin(pi r) = r (S0 + S1 r^2 + ... + S8 r^16), cos(pi r) = 1 + C1 r^2 + ... + C8 r^16:
# S_k = (-1)^k pi^(2k+1)/(2k+1)!, C_k = (-1)^k pi^(2k)/(2k)!, each the nearest binary64
S0, S1, S2, S3, S4, S5, S6, S7, S8 = (np.float64(v) for v in _T["sinpi"])
C1, C2, C3, C4, C5, C6, C7, C8 = (np.float64(v) for v in _T["cospi"][1:])
ZERO = np.float64(0.0)
HALF = np.float64(0.5)
MINUS_ONE = np.float64(-1.0)
TRIG_BIG = np.float32(2.0 ** 24)  # |x| >= 2^24 is an even integer: clamped to +-2^24, same result
TRIG_INF = np.float32(np.inf)


def exp_elem(x):
    """(a, decided): a = binary32 e^x when decided, for finite EXP_TINY < x < EXP_HUGE."""
    xd = widen(x)
    t = dmul(xd, INV_LN2_32)
    t = dadd(t, SHIFTER)
    kd = dsub(t, SHIFTER)
    k = int(kd)
    j = k & 31
    q = (k - j) >> 5  # e^x = 2^q * 2^(j/32) * e^r
    r = dsub(xd, dmul(kd, LN2_32_HI))  # exact
    r = dsub(r, dmul(kd, LN2_32_LO))
    # p = e^r - 1 = r (1 + r (1/2 + r (1/6 + r (1/24 + r (1/120 + r/720)))))
    u = dmul(r, E6)
    u = dadd(u, E5)
    u = dmul(r, u)
    u = dadd(u, E4)
    u = dmul(r, u)
    u = dadd(u, E3)
    u = dmul(r, u)
    u = dadd(u, E2)
    u = dmul(r, u)
    u = dadd(u, ONE)
    p = dmul(r, u)
    tj = EXP2_32[j]
    y = dmul(tj, p)
    y = dadd(tj, y)
    y = dmul(y, POW2[q + POW2_BIAS])  # exact
    eb = dmul(y, ERR)
    a = narrow(dsub(y, eb))
    b = narrow(dadd(y, eb))
    return a, a == b


def log_elem(u):
    """(a, decided): a = binary32 ln x when decided, for x with pattern u, 0 < x < inf."""
    ex = (u >> 23) & 0xFF
    m = u & 0x7FFFFF
    if ex == 0:  # subnormal: normalize with integer shifts
        e = -126
        while m < 0x800000:
            m = m << 1
            e = e - 1
    else:
        m = m | 0x800000
        e = ex - 127
    if m >= SQRT2_M24:  # x = 2^(e+1) * t with t = m 2^-24 in [sqrt(1/2), 1)
        e = e + 1
        idx = m >> 16
        scale = TWO_M24
    else:  # x = 2^e * t with t = m 2^-23 in [1, sqrt 2)
        idx = (m >> 16) - 128
        scale = TWO_M23
    t = dmul(widen(m), scale)  # exact
    r = dmul(t, LOG_INV[idx])  # exact: 24 x 12 bits
    r = dsub(r, ONE)  # exact (Sterbenz): |r| <= 2^-7
    ed = widen(e)
    hi = dmul(ed, LN2_HI)  # exact
    hi = dadd(hi, LOG_HI[idx])  # exact: multiples of 2^-44 below 2^8
    lo = dmul(ed, LN2_LO)
    lo = dadd(lo, LOG_LO[idx])
    # log1p(r) = r + r^2 q, q = -1/2 + r (1/3 + r (-1/4 + ... + r (-1/8)))
    w = dmul(r, L8)
    w = dadd(w, L7)
    w = dmul(r, w)
    w = dadd(w, L6)
    w = dmul(r, w)
    w = dadd(w, L5)
    w = dmul(r, w)
    w = dadd(w, L4)
    w = dmul(r, w)
    w = dadd(w, L3)
    w = dmul(r, w)
    w = dadd(w, L2)
    r2 = dmul(r, r)
    w = dmul(r2, w)
    p = dadd(r, w)
    s = dadd(lo, p)
    y = dadd(hi, s)
    eb = dmul(y, ERR)
    if eb < 0:
        eb = -eb
    a = narrow(dsub(y, eb))
    b = narrow(dadd(y, eb))
    return a, a == b


def pi_reduce(ax):
    """(n, r): |x| = n/2 + r exactly with |r| <= 1/4, for ax = |x| <= 2^24 (C: mj_pi_reduce)."""
    t = dadd(ax, ax)  # exact
    t = dadd(t, SHIFTER)
    nd = dsub(t, SHIFTER)  # n = round(2|x|), ties to even
    r = dsub(ax, dmul(nd, HALF))  # exact
    return int(nd), r


def pi_sc(r, r2):
    """(sin(pi r), cos(pi r)) by their Taylor polynomials, r2 = r * r (C: mj_pi_sc)."""
    # s = r (S0 + r2 (S1 + r2 (S2 + ... + r2 S8)))
    h = dmul(r2, S8)
    h = dadd(h, S7)
    h = dmul(r2, h)
    h = dadd(h, S6)
    h = dmul(r2, h)
    h = dadd(h, S5)
    h = dmul(r2, h)
    h = dadd(h, S4)
    h = dmul(r2, h)
    h = dadd(h, S3)
    h = dmul(r2, h)
    h = dadd(h, S2)
    h = dmul(r2, h)
    h = dadd(h, S1)
    h = dmul(r2, h)
    h = dadd(h, S0)
    s = dmul(r, h)
    # c = 1 + r2 (C1 + r2 (C2 + ... + r2 C8))
    g = dmul(r2, C8)
    g = dadd(g, C7)
    g = dmul(r2, g)
    g = dadd(g, C6)
    g = dmul(r2, g)
    g = dadd(g, C5)
    g = dmul(r2, g)
    g = dadd(g, C4)
    g = dmul(r2, g)
    g = dadd(g, C3)
    g = dmul(r2, g)
    g = dadd(g, C2)
    g = dmul(r2, g)
    g = dadd(g, C1)
    g = dmul(r2, g)
    c = dadd(g, ONE)
    return s, c


def pi_round(y):
    """(a, decided): the rounding test of sinpi and cospi (C: mj_pi_round)."""
    eb = dmul(y, ERR)
    eb = eb if eb > ZERO else dsub(ZERO, eb)  # |eb|, +0 for a zero y
    a = narrow(dsub(y, eb))
    b = narrow(dadd(y, eb))
    return a, a == b


def sinpi_elem(x):
    """(a, decided): a = binary32 sin(pi x) when decided, for finite |x| <= 2^24."""
    xd = widen(x)
    sg = MINUS_ONE if xd < ZERO else ONE  # sin(pi x) is odd; -0 keeps sg = 1 (and r = -0)
    ax = dmul(xd, sg)  # |x|, exact
    n, r = pi_reduce(ax)
    r2 = dmul(r, r)
    s, c = pi_sc(r, r2)
    # sin(pi (n/2 + r)) = s, c, -s, -c for n = 0, 1, 2, 3 mod 4; 0 - v negates exactly
    # and turns the +0 of an integer x into +0, so that the sign of x alone signs a zero
    v = c if n & 1 else s
    v = dsub(ZERO, v) if n & 2 else v
    y = dmul(v, sg)
    return pi_round(y)


def cospi_elem(x):
    """(a, decided): a = binary32 cos(pi x) when decided, for finite |x| <= 2^24."""
    xd = widen(x)
    sg = MINUS_ONE if xd < ZERO else ONE  # cos(pi x) is even
    ax = dmul(xd, sg)  # |x|, exact
    n, r = pi_reduce(ax)
    r2 = dmul(r, r)
    s, c = pi_sc(r, r2)
    # cos(pi (n/2 + r)) = c, -s, -c, s for n = 0, 1, 2, 3 mod 4 (never -0: s = +0 at r = 0)
    v = s if n & 1 else c
    y = dsub(ZERO, v) if (n + 1) & 2 else v
    return pi_round(y)


# sinpi_elem and cospi_elem call the pieces by these names; native/cuda/crmath.py binds them
# to its own compilations of the same source
PI_PIECES = ("pi_reduce", "pi_sc", "pi_round")
PI_PY = {name: globals()[name] for name in PI_PIECES}  # the plain Python sources
for _name in PI_PIECES:  # the CPU versions: the module globals become dispatchers, inlined
    globals()[_name] = njit(inline="always", error_model="numpy")(PI_PY[_name])
del _name

_exp_elem = njit(inline="always", error_model="numpy")(exp_elem)
_log_elem = njit(inline="always", error_model="numpy")(log_elem)
_sinpi_elem = njit(inline="always", error_model="numpy")(sinpi_elem)
_cospi_elem = njit(inline="always", error_model="numpy")(cospi_elem)

IN = types.Array(float32, 1, "C", readonly=True)
IN_BITS = types.Array(uint32, 1, "C", readonly=True)
OUT = float32[::1]
OUT_BITS = uint32[::1]


@njit(inline="always", **_STRICT)
def _expf_special(v, vb, out, ob, i):
    """Slot i for the inputs the main loop clamps, and the undecided; returns 1 if undecided."""
    if v != v:
        ob[i] = vb | QUIET_BIT
    elif v >= EXP_HUGE:
        ob[i] = POS_INF_BITS
    elif v <= EXP_TINY:
        ob[i] = 0
    else:
        a, ok = _exp_elem(v)
        if ok:
            out[i] = a
        else:
            ob[i] = UNDECIDED
            return 1
    return 0


@njit(inline="always", **_STRICT)
def expf_finish(x, xb, out, ob, lo, hi, clamped, unsure):
    """After a block's first pass (out[lo:hi] = exp_elem of each input clamped into its
    domain; `clamped`, `unsure`: whether one was clamped, or undecided): the special slots,
    or, when one was undecided (about 1 in 2^26), the whole block again element by element.
    Returns the block's UNDECIDED slots."""
    undecided = 0
    if unsure:
        for i in range(lo, hi):
            undecided += _expf_special(x[i], xb[i], out, ob, i)
    elif clamped:  # only the clamped slots need their special value
        for i in range(lo, hi):
            v = x[i]
            if not (v > EXP_TINY and v < EXP_HUGE):
                _expf_special(v, xb[i], out, ob, i)
    return undecided


@njit(inline="always", **_STRICT)
def _logf_special(u, out, ob, i):
    if u == 0 or u >= POS_INF_BITS:  # +0, +inf, NaN, or the sign bit set
        if (u & 0x7FFFFFFF) > POS_INF_BITS:
            ob[i] = np.uint32(u | QUIET_BIT)
        elif u == POS_INF_BITS:
            ob[i] = POS_INF_BITS
        elif (u & 0x7FFFFFFF) == 0:
            ob[i] = NEG_INF_BITS
        else:
            ob[i] = DEFAULT_NAN
        return 0
    a, ok = _log_elem(u)
    if ok:
        out[i] = a
        return 0
    ob[i] = UNDECIDED
    return 1


@njit(int64(IN_BITS, OUT, OUT_BITS), parallel=True, **_STRICT)
def _logf(xb, out, ob):
    n = xb.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, n)
        specials = 0
        unsure = 0
        for i in range(lo, hi):
            u = np.int64(xb[i])
            # normal positive inputs only here (no branches); the rest are redone below
            special = (u < 0x800000) or (u >= POS_INF_BITS)
            w = 0x3F800000 if special else u
            a, ok = _log_elem(w)
            out[i] = a
            specials += special
            unsure += not ok
        undecided = 0
        if unsure:  # rare: redo the block element by element
            for i in range(lo, hi):
                undecided += _logf_special(np.int64(xb[i]), out, ob, i)
        elif specials:  # subnormal, zero, negative, inf, NaN: only those slots
            for i in range(lo, hi):
                u = np.int64(xb[i])
                if (u < 0x800000) or (u >= POS_INF_BITS):
                    _logf_special(u, out, ob, i)
        counts[c] = undecided
    return counts.sum()


@njit(inline="always", **_STRICT)
def _pi_finite(v):
    return (v > -TRIG_INF) & (v < TRIG_INF)


@njit(inline="always", **_STRICT)
def _pi_clamp(v):
    """v clamped to [-2^24, 2^24] (NaN to -2^24): every |v| >= 2^24 is an even integer."""
    w = v if v > -TRIG_BIG else -TRIG_BIG
    return w if w < TRIG_BIG else TRIG_BIG


@njit(inline="always", **_STRICT)
def _sinpif_special(v, vb, out, ob, i):
    """Slot i, branch by branch (NaN, inf, undecided); returns 1 if undecided."""
    if v != v:
        ob[i] = vb | QUIET_BIT
        return 0
    if not _pi_finite(v):
        ob[i] = DEFAULT_NAN
        return 0
    a, ok = _sinpi_elem(_pi_clamp(v))
    if ok:
        out[i] = a
        return 0
    ob[i] = UNDECIDED
    return 1


@njit(inline="always", **_STRICT)
def _cospif_special(v, vb, out, ob, i):
    if v != v:
        ob[i] = vb | QUIET_BIT
        return 0
    if not _pi_finite(v):
        ob[i] = DEFAULT_NAN
        return 0
    a, ok = _cospi_elem(_pi_clamp(v))
    if ok:
        out[i] = a
        return 0
    ob[i] = UNDECIDED
    return 1


@njit(int64(IN, IN_BITS, OUT, OUT_BITS), parallel=True, **_STRICT)
def _sinpif(x, xb, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, n)
        # first pass without branches: clamp (the result stays right for finite x), flag
        # NaN and inf and the undecided
        specials = 0
        unsure = 0
        for i in range(lo, hi):
            v = x[i]
            a, ok = _sinpi_elem(_pi_clamp(v))
            out[i] = a
            specials += not _pi_finite(v)
            unsure += not ok
        undecided = 0
        if unsure:
            for i in range(lo, hi):
                undecided += _sinpif_special(x[i], xb[i], out, ob, i)
        elif specials:
            for i in range(lo, hi):
                if not _pi_finite(x[i]):
                    _sinpif_special(x[i], xb[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()


@njit(int64(IN, IN_BITS, OUT, OUT_BITS), parallel=True, **_STRICT)
def _cospif(x, xb, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, n)
        specials = 0
        unsure = 0
        for i in range(lo, hi):
            v = x[i]
            a, ok = _cospi_elem(_pi_clamp(v))
            out[i] = a
            specials += not _pi_finite(v)
            unsure += not ok
        undecided = 0
        if unsure:
            for i in range(lo, hi):
                undecided += _cospif_special(x[i], xb[i], out, ob, i)
        elif specials:
            for i in range(lo, hi):
                if not _pi_finite(x[i]):
                    _cospif_special(x[i], xb[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()


# the kernels tests/test_vectorized.py compiles for every target, and the packed operations
# their loops must hold; logf looks up tables per element, which LLVM vectorizes with
# gathers, so it is packed on targets with AVX2 and scalar on baseline x86-64 (SSE2);
# expf's kernel is native/vexp.py's, on explicit vectors
HOT_KERNELS = {"crmath._sinpif": (_sinpif, ("mulpd", "addpd")),
               "crmath._cospif": (_cospif, ("mulpd", "addpd"))}
HOT_KERNELS_AVX2 = {"crmath._logf": (_logf, ("mulpd", "addpd"))}


class NumbaCrmath(NumbaBase):
    """expf/logf/sinpif/cospif on the CPU with numba, parallel over blocks of 4096 elements."""

    takes_pieces = False

    def expf_into(self, x, out) -> int:
        """Write expf(x) into out; returns the number of UNDECIDED slots.

        x and out are flat float32 arrays of one size that must not overlap (the
        second pass rereads x); the public API always passes a fresh out.
        """
        from .vexp import _expf  # it imports this module for exp_elem's pieces
        return int(_expf(x, x.view(np.uint32), out, out.view(np.uint32)))

    def logf_into(self, x, out) -> int:
        """Write logf(x) into out; returns the number of UNDECIDED slots."""
        return int(_logf(x.view(np.uint32), out, out.view(np.uint32)))

    def sinpif_into(self, x, out) -> int:
        """Write sinpif(x) into out; returns the number of UNDECIDED slots (x, out as expf_into)."""
        return int(_sinpif(x, x.view(np.uint32), out, out.view(np.uint32)))

    def cospif_into(self, x, out) -> int:
        """Write cospif(x) into out; returns the number of UNDECIDED slots."""
        return int(_cospif(x, x.view(np.uint32), out, out.view(np.uint32)))

    # tanhf and erff live in native/erf_tanh.py, GELU's vector kernels in native/vgelu.py
    # (imported here, at call time: they import this module for the exp pieces)
    def tanhf_into(self, x, out) -> int:
        """Write tanhf(x) into out; returns the number of UNDECIDED slots (x, out as expf_into)."""
        from . import erf_tanh
        return erf_tanh.tanhf_into(x, out)

    def erff_into(self, x, out) -> int:
        """Write erff(x) into out; returns the number of UNDECIDED slots."""
        from . import erf_tanh
        return erf_tanh.erff_into(x, out)

    def gelu_into(self, x, tanh: bool, out) -> int:
        """Write gelu_tanh(x) if tanh else gelu_erf(x) into out; returns the UNDECIDED count."""
        from . import vgelu
        return vgelu.gelu_into(x, tanh, out)

    def gelu_backward_into(self, dy, x, tanh: bool, dx) -> int:
        """Write gelu_tanh_grad(dy, x) if tanh else gelu_erf_grad(dy, x) into dx; returns the UNDECIDED count."""
        from . import vgelu
        return vgelu.gelu_backward_into(dy, x, tanh, dx)


def load(mode: str, backend: str = "cpu-numba") -> NumbaCrmath:
    return NumbaCrmath(mode)
