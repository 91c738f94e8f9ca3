"""Host scalars of optimizers, each the binary32 nearest the exact value of its expression.

A *host scalar* is a number the host computes once per step and hands to every
kernel: ``1 - beta``, ``lr / (1 - beta1**t)``, ``sqrt(1 - beta2**t)``,
``1 - lr*wd``. Each is defined as the binary32 value nearest the exact real value
of its expression in its binary32 inputs (ties to even), so it cannot depend on
how a host happens to evaluate it.

Method: interval arithmetic with an exact fallback, never pow. A fast path in
binary64 carries a rigorous enclosure [lo, hi] of the exact value (every rounded
result widened one ulp outward, b**t by squaring); when lo and hi round to the
same binary32 value, that is the answer. Otherwise (a near-tie) the value is
decided with integers: fixed-point bounds on b**t of growing precision, ending in
exact arithmetic (b = m / 2**k, so b**t = m**t / 2**(k*t)). `FALLBACKS["count"]`
counts the calls whose fast path could not decide; ``exact=True`` skips it.

Reproducibility: pure Python. Only +, -, *, / and math.sqrt on binary64 (all
correctly rounded by IEEE 754 on every platform CPython supports), nextafter and
integer arithmetic; no pow, exp, log or numpy, so the bits are the same everywhere.

>>> one_minus_pow(0.5, 3)
0.875
>>> div_one_minus_pow(1.0, 0.5, 1)
2.0
>>> one_minus_pow(0.5, 25)      # 1 - 2**-25 is a binary32 tie: decided exactly, to even
1.0
>>> round_sqrt_fraction(Fraction(9, 4))
1.5
"""
from __future__ import annotations

import math
import operator
from fractions import Fraction

from . import f32

__all__ = ["one_minus", "one_minus_pow", "div_one_minus_pow", "sqrt_one_minus_pow",
           "one_minus_mul", "round_sqrt_fraction", "FALLBACKS"]

FALLBACKS = {"count": 0}  # calls whose binary64 enclosure straddled a rounding boundary

_nx, _INF = math.nextafter, math.inf
_rf = f32.round_float
_START_PREC = 256  # fixed-point bits of the first integer pass; each next one has 4x more


def _decide(lo: float, hi: float):
    """The binary32 value both ends of [lo, hi] round to, or None (signed zeros differ)."""
    r, s = _rf(lo), _rf(hi)
    if r == s and math.copysign(1.0, r) == math.copysign(1.0, s):
        return r
    return None


def _pow64(b: float, t: int) -> tuple[float, float]:
    """Binary64 lo <= b**t <= hi for 0 <= b < 1: each product widened one ulp outward,
    which covers its rounding error whatever the rounding, underflow included."""
    lo = hi = 1.0
    blo = bhi = b
    while True:
        if t & 1:
            if hi == 1.0:  # the first factor: nothing rounded yet (later hi < 1)
                lo, hi = blo, bhi
            else:
                lo, hi = max(_nx(lo * blo, -_INF), 0.0), _nx(hi * bhi, _INF)
        t >>= 1
        if not t:
            return lo, hi
        blo, bhi = max(_nx(blo * blo, -_INF), 0.0), _nx(bhi * bhi, _INF)


def _pow_fixed(blo: int, bhi: int, prec: int, t: int) -> tuple[int, int]:
    """Integers lo <= b**t * 2**prec <= hi from blo <= b * 2**prec <= bhi: squaring, floor and ceil."""
    lo = hi = None
    while True:
        if t & 1:
            if lo is None:
                lo, hi = blo, bhi
            else:
                lo, hi = lo * blo >> prec, -(-hi * bhi >> prec)
        t >>= 1
        if not t:
            return lo, hi
        blo, bhi = blo * blo >> prec, -(-bhi * bhi >> prec)


def _round_ratio(num: int, den: int) -> float:
    """The binary32 nearest num/den (den > 0); like f32.round_fraction, but never builds a
    Fraction, whose gcd would be slow on the huge integers of the exact pass."""
    if num == 0:
        return 0.0
    sign, num = (-1.0, -num) if num < 0 else (1.0, num)
    e = num.bit_length() - den.bit_length()  # then 2**(e-1) <= x < 2**(e+1)
    if (num << max(0, -e)) >= (den << max(0, e)):
        e += 1
    q = max(e - 24, -149)
    n, d = (num, den << q) if q >= 0 else (num << -q, den)
    r, rem = divmod(n, d)  # the quotient has ~25 bits: linear in the size of n
    if 2 * rem > d or (2 * rem == d and r & 1):
        r += 1
    return sign * (_INF if r.bit_length() + q > 128 else math.ldexp(r, q))


def _round_sqrt_ratio(n: int, d: int) -> float:
    """The binary32 nearest sqrt(n/d) for n >= 0, d > 0, decided by integer comparisons."""
    if n == 0:
        return 0.0
    q = max((n.bit_length() - d.bit_length()) // 2 - 24, -149)  # a guess; the loop corrects it
    while True:
        # floor(sqrt(X)) == isqrt(floor(X)) for real X >= 0; X = n / d / 4**q.
        num, den = (n, d << 2 * q) if q >= 0 else (n << -2 * q, d)
        r = math.isqrt(num // den)
        extra = r.bit_length() - 24
        if extra == 0 or (extra < 0 and q == -149):
            break
        q = max(q + extra, -149)
    # sqrt(X) against the midpoint r + 1/2: compare X with (r + 1/2)**2, equality is a tie.
    lhs, rhs = 4 * num, (2 * r + 1) ** 2 * den
    if lhs > rhs or (lhs == rhs and r & 1):
        r += 1
    return _INF if r.bit_length() + q > 128 else math.ldexp(r, q)


def _pow_exact(b: float, t: int, g):
    """g(n, d) at n/d == 1 - b**t, decided with integers (g is monotone and ends in a rounding)."""
    m, d = b.as_integer_ratio()
    k = d.bit_length() - 1  # b == m / 2**k
    prec = _START_PREC
    while prec < k * t:  # below k*t bits the fixed-point bounds are inexact: try to decide
        sh = prec - k
        blo, bhi = (m << sh, m << sh) if sh >= 0 else (m >> -sh, -(-m >> -sh))
        lo, hi = _pow_fixed(blo, bhi, prec, t)
        one = 1 << prec
        if hi < one:
            r = g(one - hi, one)
            if _decide(r, g(one - lo, one)) is not None:
                return r
        prec *= 4
    one = 1 << k * t
    return g(one - m**t, one)  # exact: the only way to settle a true tie


def _check_beta(b, t) -> int:
    if not (0.0 <= b < 1.0 and f32.is_f32(b)):
        raise ValueError(f"beta must be a binary32 value in [0, 1), got {b!r}")
    t = operator.index(t)
    if t < 1:
        raise ValueError(f"step t must be an integer >= 1, got {t!r}")
    return t


def _check_finite(*xs) -> None:
    for x in xs:
        if not (math.isfinite(x) and f32.is_f32(x)):
            raise ValueError(f"host scalar inputs must be finite binary32 values, got {x!r}")


def one_minus(b: float, *, exact: bool = False) -> float:
    """f32(1 - b)."""
    _check_finite(b)
    if not exact:
        x = 1.0 - b
        r = _decide(_nx(x, -_INF), _nx(x, _INF))
        if r is not None:
            return r
        FALLBACKS["count"] += 1
    return f32.round_fraction(1 - Fraction(b))


def one_minus_mul(a: float, b: float, *, exact: bool = False) -> float:
    """f32(1 - a*b); 1 - a*b == 0 gives +0.0."""
    _check_finite(a, b)
    if not exact:
        x = 1.0 - a * b  # a*b is exact in binary64: 48 bits, exponent >= -298
        r = _decide(_nx(x, -_INF), _nx(x, _INF))
        if r is not None:
            return r
        FALLBACKS["count"] += 1
    return f32.round_fraction(1 - Fraction(a) * Fraction(b))


def one_minus_pow(b: float, t: int, *, exact: bool = False) -> float:
    """f32(1 - b**t) for 0 <= b < 1 and integer t >= 1."""
    t = _check_beta(b, t)
    if not exact:
        lo, hi = _pow64(b, t)
        r = _decide(_nx(1.0 - hi, -_INF), _nx(1.0 - lo, _INF))
        if r is not None:
            return r
        FALLBACKS["count"] += 1
    return _pow_exact(b, t, _round_ratio)


def sqrt_one_minus_pow(b: float, t: int, *, exact: bool = False) -> float:
    """f32(sqrt(1 - b**t)), rounded once from the exact root."""
    t = _check_beta(b, t)
    if not exact:
        lo, hi = _pow64(b, t)
        dlo, dhi = max(_nx(1.0 - hi, -_INF), 0.0), _nx(1.0 - lo, _INF)
        r = _decide(_nx(math.sqrt(dlo), -_INF), _nx(math.sqrt(dhi), _INF))
        if r is not None:
            return r
        FALLBACKS["count"] += 1
    return _pow_exact(b, t, _round_sqrt_ratio)


def div_one_minus_pow(a: float, b: float, t: int, *, exact: bool = False) -> float:
    """f32(a / (1 - b**t)), the exact quotient rounded once (not a over a rounded divisor).

    A zero `a` is returned as it is, sign included, as an IEEE division would."""
    t = _check_beta(b, t)
    _check_finite(a)
    if a == 0.0:
        return a
    if not exact:
        lo, hi = _pow64(b, t)
        dlo, dhi = _nx(1.0 - hi, -_INF), _nx(1.0 - lo, _INF)
        if dlo > 0.0:
            qa, qb = a / dhi, a / dlo  # increasing in the divisor when a < 0, decreasing when a > 0
            r = _decide(_nx(min(qa, qb), -_INF), _nx(max(qa, qb), _INF))
            if r is not None:
                return r
        FALLBACKS["count"] += 1
    an, ad = a.as_integer_ratio()
    return _pow_exact(b, t, lambda n, d: _round_ratio(an * d, ad * n))  # a / (n/d)


def round_sqrt_fraction(x: Fraction) -> float:
    """The binary32 nearest sqrt(x) for a rational x >= 0 (ties to even, subnormals kept)."""
    x = Fraction(x)
    if x < 0:
        raise ValueError(f"square root of a negative rational: {x}")
    return _round_sqrt_ratio(x.numerator, x.denominator)
