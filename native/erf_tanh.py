"""numba CPU kernels for the correctly rounded tanhf and erff, and torch's GELU on them.

The element functions are written once against the primitive names (dadd, dsub,
dmul, ddiv, narrow, widen; add, sub, mul in binary32 for the GELU formulas), so
that native/cuda/erf_tanh.py compiles the same source with libdevice `_rn` calls;
native/c/crmath.c is the second spelling, operation for operation.

tanh, for a = |x| (binary64, exact), u = 2^-53:
  a < 1/4: tanh a = a + a (a^2 P(a^2)), the Taylor series to the a^23 term (its
    coefficients the nearest binary64 values of 2^2n (2^2n - 1) B_2n / (2n)!). The
    series alternates with falling terms, so the truncation is below the first omitted
    term, 2^-63 a; Horner in a^2 <= 1/16 and the two products carry about 3.6u of
    the correction h = a^3 P, |h| <= a/48, and the final sum one u: about 1.1u.
  1/4 <= a < TANH_ONE: E = e^(2a) (2a exact) by `exp64`, tanh a = (E - 1)/(E + 1).
    exp64 is within about 1.6u of e^t (the table entry 0.5u, the last sum u, the
    degree-6 polynomial in |r| <= ln2/64 truncated at 2^-57.8); E - 1 magnifies that
    by E/(E - 1) <= 2.6 (2a >= 1/2), plus u for each of -, + and /: about 8.7u.
  The budget is TANH_ERR = 16u = 2^-49 for both.
erf, for 0 < a < ERF_ONE: erf a = 2/sqrt(pi) a e^(-a^2) S, S = sum_n (2a^2)^n/(2n+1)!!
  (every term positive: no cancellation). Term n is the previous one times 2a^2 and
  divided by 2n+1 (two roundings each, so term n is within 2n u); each partial sum
  rounds once; the loop stops at the first term below 2^-57 S, past the terms' peak,
  where they at least halve, so the tail is below that term. After N terms the sum is
  within 3N u of S; exp64, the constant 2/sqrt(pi) and the three products add about
  5.1u. The budget is ERF_ERR0 + N ERF_ERR1 = (8 + 3N)u, counted in the loop.
Rounding test: y - eb and y + eb (eb = y times the budget, the sign applied to y
exactly) rounded to binary32 must agree, else the slot gets UNDECIDED (0x7FA00DAD)
and is counted. The budget only decides how many slots are undecided; that every
decided value is the correctly rounded one is checked by the exhaustive walk
(benchmarks/erf_tanh_kernels_exhaustive.py) against the oracle, over all 2^32 inputs:
0 errors for both, 4 tanhf and 16 erff inputs undecided (contracts/erf_tanh_hard.py).

Special values as oracles/erf_tanh.py: NaN quieted with its payload, +-0 kept,
+-1 from TANH_ONE / ERF_ONE up (infinities included). The GELU kernels compute the
oracle's binary32 formulas step by step with these tanhf/erff (and crmath's expf
for gelu_erf_grad); a slot whose inner function is undecided is UNDECIDED, and a
NaN result is the canonical 0x7FC00000 (the oracle's GELU keeps no payload).

Reproducibility: elementwise, so the thread count cannot reach the bits; a decided
result is the exact value rounded, so it cannot depend on the backend.

>>> import numpy as np
>>> out = np.empty(3, np.float32)
>>> _tanhf(np.float32([0.5, -0.0, 10.0]), np.float32([0.5, -0.0, 10.0]).view(np.uint32),
...        out, out.view(np.uint32)), out.tolist()
(0, [0.46211716532707214, -0.0, 1.0])
"""
from __future__ import annotations

from fractions import Fraction
from math import comb, factorial, isqrt
from operator import add, mul, sub
from operator import add as dadd
from operator import mul as dmul
from operator import sub as dsub
from operator import truediv as ddiv

import numpy as np
from numba import float32, int64, njit, prange, types, uint32

from ..oracles import erf_tanh as spec
from ..oracles.schedule import pi_scaled
from . import crmath as cr

narrow = np.float32
widen = np.float64
PRIMITIVES = ("dadd", "dsub", "dmul", "ddiv", "narrow", "widen", "add", "sub", "mul")
_STRICT = {"cache": True, "error_model": "numpy"}
UNDECIDED = cr.UNDECIDED
QUIET_BIT = cr.QUIET_BIT
DEFAULT_NAN = cr.DEFAULT_NAN
BLOCK = cr.BLOCK

U = 2.0 ** -53
TANH_POLY_ERR = np.float64(4 * U)
TANH_ERR = np.float64(16 * U)
ERF_POLY_ERR = np.float64(4 * U)
ERF_POLY_END = np.float64(0.5)
ERF_ERR0 = np.float64(8 * U)
ERF_ERR1 = np.float64(3 * U)
ERF_STOP = np.float64(2.0 ** 57)  # stop once term * 2^57 <= sum
TANH_POLY_END = np.float64(0.25)
TANH_ONE_D = np.float64(spec.TANH_ONE)
ERF_ONE_D = np.float64(spec.ERF_ONE)
ZERO = np.float64(0.0)
ONE = np.float64(1.0)
TWO = np.float64(2.0)
MINUS_ONE = np.float64(-1.0)


def _tanh_taylor() -> list[float]:
    """c_1, c_3, ..., c_23 of tanh x = sum c_(2n-1) x^(2n-1), each the nearest binary64."""
    b = [Fraction(1)]
    for m in range(1, 25):
        b.append(-sum(comb(m + 1, k) * b[k] for k in range(m)) / (m + 1))
    return [float(Fraction(4 ** n * (4 ** n - 1)) * b[2 * n] / factorial(2 * n)) for n in range(1, 13)]


def _two_over_sqrt_pi() -> Fraction:
    """2/sqrt(pi) within 2^-190 relative: isqrt of 4/pi at 2^-200 (Machin's pi at 256 bits)."""
    _, hi = pi_scaled(256)
    return Fraction(isqrt((4 << 656) // hi), 1 << 200)


def _erf_taylor() -> list[float]:
    """R_0 ... R_13 of erf x = x sum R_n x^2n, R_n = 2/sqrt(pi) (-1)^n / (n! (2n+1)), nearest binary64."""
    c = _two_over_sqrt_pi()
    return [float(c * (-1) ** n / (factorial(n) * (2 * n + 1))) for n in range(14)]


_C = _tanh_taylor()
T3, T5, T7, T9, T11, T13, T15, T17, T19, T21, T23 = (np.float64(c) for c in _C[1:])
TWO_OVER_SQRT_PI = np.float64(float(_two_over_sqrt_pi()))
R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, R11, R12, R13 = (np.float64(c) for c in _erf_taylor())
EXP_HUGE = cr.EXP_HUGE
EXP_TINY = cr.EXP_TINY
POS_INF32 = np.float32(np.inf)
ZERO32 = np.float32(0.0)
ONE32 = np.float32(1.0)
HALF32 = np.float32(0.5)
MINUS_HALF32 = np.float32(-0.5)
THREE32 = np.float32(3.0)
ALPHA = np.float32(spec.ALPHA)
BETA = np.float32(spec.BETA)
KAPPA = np.float32(spec.KAPPA)
BETA_ERF = np.float32(spec.BETA_ERF)
# crmath's reduction, for a binary64 argument
INV_LN2_32 = cr.INV_LN2_32
LN2_32_HI = cr.LN2_32_HI
LN2_32_LO = cr.LN2_32_LO
SHIFTER = cr.SHIFTER
EXP2_32 = cr.EXP2_32
POW2 = cr.POW2
POW2_BIAS = cr.POW2_BIAS
E2, E3, E4, E5, E6 = cr.E2, cr.E3, cr.E4, cr.E5, cr.E6


def exp64(t):
    """e^t in binary64 (within about 1.6u), |t| <= 20, t with at most 48 significant bits:
    kd = round(32 t / ln 2) has 10 bits, so kd * LN2_32_HI is exact and so (Sterbenz) is
    t - kd * LN2_32_HI."""
    s = dmul(t, INV_LN2_32)
    s = dadd(s, SHIFTER)
    kd = dsub(s, SHIFTER)
    k = int(kd)
    j = k & 31
    q = (k - j) >> 5
    r = dsub(t, dmul(kd, LN2_32_HI))
    r = dsub(r, dmul(kd, LN2_32_LO))
    w = dmul(r, E6)
    w = dadd(w, E5)
    w = dmul(r, w)
    w = dadd(w, E4)
    w = dmul(r, w)
    w = dadd(w, E3)
    w = dmul(r, w)
    w = dadd(w, E2)
    w = dmul(r, w)
    w = dadd(w, ONE)
    p = dmul(r, w)
    tj = EXP2_32[j]
    y = dmul(tj, p)
    y = dadd(tj, y)
    return dmul(y, POW2[q + POW2_BIAS])  # exact


def round_test(y, eb, sg):
    """(a, decided): a = binary32 of sg * y when y +- eb (y > 0) round alike."""
    ys = dmul(y, sg)  # exact
    a = narrow(dsub(ys, eb))
    b = narrow(dadd(ys, eb))
    return a, a == b


def tanh_elem(a, sg):
    """(r, decided): r = binary32 tanh(sg * a) when decided, for 0 < a < TANH_ONE."""
    if a < TANH_POLY_END:
        a2 = dmul(a, a)  # exact: a has 24 bits
        h = dmul(a2, T23)
        h = dadd(h, T21)
        h = dmul(a2, h)
        h = dadd(h, T19)
        h = dmul(a2, h)
        h = dadd(h, T17)
        h = dmul(a2, h)
        h = dadd(h, T15)
        h = dmul(a2, h)
        h = dadd(h, T13)
        h = dmul(a2, h)
        h = dadd(h, T11)
        h = dmul(a2, h)
        h = dadd(h, T9)
        h = dmul(a2, h)
        h = dadd(h, T7)
        h = dmul(a2, h)
        h = dadd(h, T5)
        h = dmul(a2, h)
        h = dadd(h, T3)
        h = dmul(a2, h)
        h = dmul(a, h)
        y = dadd(a, h)
        return round_test(y, dmul(y, TANH_POLY_ERR), sg)
    e = exp64(dadd(a, a))
    num = dsub(e, ONE)
    den = dadd(e, ONE)
    y = ddiv(num, den)
    return round_test(y, dmul(y, TANH_ERR), sg)


def erf_elem(a, sg):
    """(r, decided): r = binary32 erf(sg * a) when decided, for 0 < a < ERF_ONE."""
    if a < ERF_POLY_END:
        a2 = dmul(a, a)  # exact
        h = dmul(a2, R13)
        h = dadd(h, R12)
        h = dmul(a2, h)
        h = dadd(h, R11)
        h = dmul(a2, h)
        h = dadd(h, R10)
        h = dmul(a2, h)
        h = dadd(h, R9)
        h = dmul(a2, h)
        h = dadd(h, R8)
        h = dmul(a2, h)
        h = dadd(h, R7)
        h = dmul(a2, h)
        h = dadd(h, R6)
        h = dmul(a2, h)
        h = dadd(h, R5)
        h = dmul(a2, h)
        h = dadd(h, R4)
        h = dmul(a2, h)
        h = dadd(h, R3)
        h = dmul(a2, h)
        h = dadd(h, R2)
        h = dmul(a2, h)
        h = dadd(h, R1)
        h = dmul(a2, h)
        y = dadd(R0, h)
        y = dmul(a, y)
        return round_test(y, dmul(y, ERF_POLY_ERR), sg)
    z = dmul(a, a)  # exact
    e = exp64(dsub(ZERO, z))
    z = dadd(z, z)  # 2 a^2, exact
    t = ONE
    s = ONE
    k = ONE
    err = ERF_ERR0
    while True:
        k = dadd(k, TWO)
        t = dmul(t, z)
        t = ddiv(t, k)
        s = dadd(s, t)
        err = dadd(err, ERF_ERR1)
        if dmul(t, ERF_STOP) <= s:
            break
    y = dmul(TWO_OVER_SQRT_PI, a)
    y = dmul(y, e)
    y = dmul(y, s)
    return round_test(y, dmul(y, err), sg)


def tanh_value(v):
    """(tanhf(v), decided) for a binary32 v that is not NaN."""
    if v == ZERO32:
        return v, True
    xd = widen(v)
    sg = MINUS_ONE if xd < ZERO else ONE
    a = dmul(xd, sg)
    if a >= TANH_ONE_D:
        return narrow(sg), True
    return tanh_elem(a, sg)


def erf_value(v):
    """(erff(v), decided) for a binary32 v that is not NaN."""
    if v == ZERO32:
        return v, True
    xd = widen(v)
    sg = MINUS_ONE if xd < ZERO else ONE
    a = dmul(xd, sg)
    if a >= ERF_ONE_D:
        return narrow(sg), True
    return erf_elem(a, sg)


def tanh_any(v):
    """tanh_value, NaN passed through (for the GELU formulas, whose NaN is canonical)."""
    if v != v:
        return v, True
    return tanh_value(v)


def erf_any(v):
    if v != v:
        return v, True
    return erf_value(v)


def exp_any(v):
    """(expf(v), decided), NaN passed through: crmath's exp_elem inside its range."""
    if v != v:
        return v, True
    if v >= EXP_HUGE:
        return POS_INF32, True
    if v <= EXP_TINY:
        return ZERO32, True
    return exp_elem(v)


def put(r, out, ob, i):
    """out[i] = r, a NaN as the canonical pattern."""
    if r != r:
        ob[i] = DEFAULT_NAN
    else:
        out[i] = r


def tanhf_slot(v, vb, out, ob, i):
    """Slot i of tanhf; returns 1 if undecided."""
    if v != v:
        ob[i] = vb | QUIET_BIT
        return 0
    r, ok = tanh_value(v)
    if ok:
        out[i] = r
        return 0
    ob[i] = UNDECIDED
    return 1


def erff_slot(v, vb, out, ob, i):
    if v != v:
        ob[i] = vb | QUIET_BIT
        return 0
    r, ok = erf_value(v)
    if ok:
        out[i] = r
        return 0
    ob[i] = UNDECIDED
    return 1


def gelu_erf_slot(v, out, ob, i):
    """(v * 0.5) * (1 + erff(v * ALPHA)); returns 1 if undecided."""
    half_x = mul(v, HALF32)
    t, ok = erf_any(mul(v, ALPHA))
    if not ok:
        ob[i] = UNDECIDED
        return 1
    put(mul(half_x, add(ONE32, t)), out, ob, i)
    return 0


def tanh_inner(v, x_sq):
    """BETA * (v + KAPPA * (x_sq * v))."""
    x_cube = mul(x_sq, v)
    return mul(BETA, add(v, mul(KAPPA, x_cube)))


def gelu_tanh_slot(v, out, ob, i):
    """(0.5 * v) * (1 + tanhf(inner)); returns 1 if undecided."""
    t, ok = tanh_any(tanh_inner(v, mul(v, v)))
    if not ok:
        ob[i] = UNDECIDED
        return 1
    put(mul(mul(HALF32, v), add(ONE32, t)), out, ob, i)
    return 0


def gelu_erf_grad_slot(d, v, out, ob, i):
    """d * (cdf + v * pdf), cdf = 0.5 (1 + erff(v ALPHA)), pdf = BETA_ERF expf((v v) -0.5)."""
    t, ok = erf_any(mul(v, ALPHA))
    e, ok2 = exp_any(mul(mul(v, v), MINUS_HALF32))
    if not (ok and ok2):
        ob[i] = UNDECIDED
        return 1
    cdf = mul(HALF32, add(ONE32, t))
    pdf = mul(BETA_ERF, e)
    put(mul(d, add(cdf, mul(v, pdf))), out, ob, i)
    return 0


def gelu_tanh_grad_slot(d, v, out, ob, i):
    """Activation.cpp's steps, as oracles/erf_tanh.gelu_tanh_grad."""
    x_sq = mul(v, v)
    t, ok = tanh_any(tanh_inner(v, x_sq))
    if not ok:
        ob[i] = UNDECIDED
        return 1
    left = mul(HALF32, v)
    right = add(ONE32, t)
    left_derivative = mul(HALF32, right)
    tanh_derivative = sub(ONE32, mul(t, t))
    inner_derivative = mul(BETA, add(ONE32, mul(mul(THREE32, KAPPA), x_sq)))
    right_derivative = mul(mul(left, tanh_derivative), inner_derivative)
    put(mul(d, add(left_derivative, right_derivative)), out, ob, i)
    return 0


# Each piece calls the ones before it by name; native/cuda/erf_tanh.py binds the same
# sources in this order to its own compilations (exp_elem is crmath's).
PIECES = ("exp64", "round_test", "tanh_elem", "erf_elem", "tanh_value", "erf_value", "tanh_any",
          "erf_any", "exp_any", "put", "tanh_inner", "tanhf_slot", "erff_slot", "gelu_erf_slot",
          "gelu_tanh_slot", "gelu_erf_grad_slot", "gelu_tanh_grad_slot")
PY = {name: globals()[name] for name in PIECES}
exp_elem = cr._exp_elem
for _name in PIECES:  # CPU versions: the module globals become inlined dispatchers
    globals()[_name] = njit(inline="always", error_model="numpy")(PY[_name])
del _name

IN = types.Array(float32, 1, "C", readonly=True)
IN_BITS = types.Array(uint32, 1, "C", readonly=True)
OUT = float32[::1]
OUT_BITS = uint32[::1]


@njit(int64(IN, IN_BITS, OUT, OUT_BITS), parallel=True, **_STRICT)
def _tanhf(x, xb, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        undecided = 0
        for i in range(c * BLOCK, min(c * BLOCK + BLOCK, n)):
            undecided += tanhf_slot(x[i], xb[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()  # integers: the order cannot matter


@njit(int64(IN, IN_BITS, OUT, OUT_BITS), parallel=True, **_STRICT)
def _erff(x, xb, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        undecided = 0
        for i in range(c * BLOCK, min(c * BLOCK + BLOCK, n)):
            undecided += erff_slot(x[i], xb[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()


@njit(int64(IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_erf(x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        undecided = 0
        for i in range(c * BLOCK, min(c * BLOCK + BLOCK, n)):
            undecided += gelu_erf_slot(x[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()


@njit(int64(IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_tanh(x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        undecided = 0
        for i in range(c * BLOCK, min(c * BLOCK + BLOCK, n)):
            undecided += gelu_tanh_slot(x[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()


@njit(int64(IN, IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_erf_grad(dy, x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        undecided = 0
        for i in range(c * BLOCK, min(c * BLOCK + BLOCK, n)):
            undecided += gelu_erf_grad_slot(dy[i], x[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()


@njit(int64(IN, IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_tanh_grad(dy, x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        undecided = 0
        for i in range(c * BLOCK, min(c * BLOCK + BLOCK, n)):
            undecided += gelu_tanh_grad_slot(dy[i], x[i], out, ob, i)
        counts[c] = undecided
    return counts.sum()


def tanhf_into(x, out) -> int:
    """out = tanhf(x) (flat float32, not overlapping); returns the number of UNDECIDED slots."""
    return int(_tanhf(x, x.view(np.uint32), out, out.view(np.uint32)))


def erff_into(x, out) -> int:
    """out = erff(x); returns the number of UNDECIDED slots."""
    return int(_erff(x, x.view(np.uint32), out, out.view(np.uint32)))


def gelu_into(x, tanh: bool, out) -> int:
    """out = gelu_tanh(x) if tanh else gelu_erf(x); returns the number of UNDECIDED slots."""
    return int((_gelu_tanh if tanh else _gelu_erf)(x, out, out.view(np.uint32)))


def gelu_backward_into(dy, x, tanh: bool, dx) -> int:
    """dx = gelu_tanh_grad(dy, x) if tanh else gelu_erf_grad(dy, x); returns the UNDECIDED count."""
    return int((_gelu_tanh_grad if tanh else _gelu_erf_grad)(dy, x, dx, dx.view(np.uint32)))
