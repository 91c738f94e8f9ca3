"""numba CPU kernels for the correctly rounded expf and logf.

Each value is computed in binary64 with + - * only, then rounded to binary32 with
a test: the computed y is within 2^-50 |y| of the exact value (the error budget
is in contracts/crmath.md), so when y - 2^-50|y| and y + 2^-50|y| round to the
same binary32 value, so does the exact value. An element the test cannot decide
gets the pattern UNDECIDED (a signalling NaN, which no other path writes) and is
counted; the caller gives those elements the oracle's exact answer.

`exp_elem` and `log_elem` are written once in terms of the primitives
dadd/dsub/dmul/narrow; `native/cuda/crmath.py` compiles the same source with
libdevice `d*_rn`, and the C kernels in `native/c/crmath.c` are the second
spelling. The tables come from `oracles/crmath.kernel_tables()`, each entry the
binary64 value nearest its exact value.

Reproducibility: elementwise, so the thread count cannot reach the bits; the
decided result is the exact value rounded, so it cannot depend on the backend.

>>> import numpy as np
>>> out = np.empty(2, np.float32)
>>> load("identical").expf_into(np.float32([0.0, 1.0]), out), out.tolist()
(0, [1.0, 2.7182817459106445])
"""
from __future__ import annotations

from operator import add as dadd
from operator import mul as dmul
from operator import sub as dsub

import numba
import numpy as np
from numba import float32, int64, njit, prange, types, uint32

from ..oracles import crmath as oracle
from .fold import NumbaThreads

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


_exp_elem = njit(inline="always", error_model="numpy")(exp_elem)
_log_elem = njit(inline="always", error_model="numpy")(log_elem)

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


@njit(int64(IN, IN_BITS, OUT, OUT_BITS), parallel=True, **_STRICT)
def _expf(x, xb, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, n)
        # first pass without branches (it vectorizes): clamp into range, flag what to redo
        clamped = 0
        unsure = 0
        for i in range(lo, hi):
            v = x[i]
            w = v if v > EXP_TINY else EXP_TINY  # NaN too
            w = w if w < EXP_HUGE else EXP_HUGE
            a, ok = _exp_elem(w)
            out[i] = a
            clamped += w != v
            unsure += not ok
        undecided = 0
        if unsure:  # rare (about 1 in 2^26): redo the block element by element
            for i in range(lo, hi):
                undecided += _expf_special(x[i], xb[i], out, ob, i)
        elif clamped:  # only the clamped slots need their special value
            for i in range(lo, hi):
                v = x[i]
                if not (v > EXP_TINY and v < EXP_HUGE):
                    _expf_special(v, xb[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()  # integers: the order cannot matter


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


class NumbaCrmath(NumbaThreads):
    """expf/logf on the CPU with numba, parallel over blocks of 4096 elements."""

    backend = "cpu-numba"
    WRITES = {"expf_into": (1,), "logf_into": (1,)}  # argument positions each method writes

    def __init__(self, mode: str):
        self.numeric_mode = mode
        self.details = {"numba": numba.__version__, "threads": numba.get_num_threads()}

    def expf_into(self, x, out) -> int:
        """Write expf(x) into out; returns the number of UNDECIDED slots.

        x and out are flat float32 arrays of one size that must not overlap (the
        second pass rereads x); the public API always passes a fresh out.
        """
        return int(_expf(x, x.view(np.uint32), out, out.view(np.uint32)))

    def logf_into(self, x, out) -> int:
        """Write logf(x) into out; returns the number of UNDECIDED slots."""
        return int(_logf(x.view(np.uint32), out, out.view(np.uint32)))


def load(mode: str, backend: str = "cpu-numba") -> NumbaCrmath:
    return NumbaCrmath(mode)
