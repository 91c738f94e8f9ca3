"""Learning-rate schedules, exactly: the definition (contracts/schedule.md).

Every value is the binary32 nearest the exact real value of its formula in the
binary32 rates and the integer steps. Linear and warmup values are rationals,
rounded once. The cosine value M + (P - M) (1 + cos(pi p)) / 2 is enclosed by
rational intervals (pi from Machin's formula, cos from its Taylor series with the
remainder bounded by the next term), refined until both ends round alike; at the
five p where cos(pi p) is rational (0, 1/3, 1/2, 2/3, 1; Niven) it is exact.

`value` is the definition; `interval` the enclosure behind it (for measuring
errors); `fast_value` the kernels' binary64 route of clause 6 with its error bound,
spelled in Python floats so that tests can hold both the kernels and the contract's
error budget to it; `kernel_coefficients` the route's polynomial coefficients.

Reproducibility: `value` uses integers and `fractions.Fraction` only (an irrational
value is never a tie, so refining its enclosure always ends); `fast_value` uses
binary64 + - * / only, which CPython performs the same on every platform.

>>> lo, hi = pi_interval(80)
>>> float(lo), hi - lo < Fraction(1, 2**70)
(3.141592653589793, True)
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from .f32 import f32_to_bits, round_float, round_fraction


def _cdiv(a: int, b: int) -> int:
    return -((-a) // b)


def _atan_inv_scaled(n: int, p: int) -> tuple[int, int]:
    """[lo, hi] enclosing atan(1/n) * 2^p for an integer n >= 2 (alternating series)."""
    # atan(1/n) = sum_k (-1)^k / ((2k+1) n^(2k+1)); the terms fall, so the tail after
    # a term is smaller than that term
    lo = hi = 0
    one, n2, den, k = 1 << p, n * n, n, 0
    while True:
        t_lo, t_hi = one // (den * (2 * k + 1)), _cdiv(one, den * (2 * k + 1))
        if k % 2 == 0:
            lo, hi = lo + t_lo, hi + t_hi
        else:
            lo, hi = lo - t_hi, hi - t_lo
        if t_hi <= 1:
            return lo - 1, hi + 1  # the tail: below one unit
        den *= n2
        k += 1


@lru_cache(maxsize=None)
def pi_scaled(p: int) -> tuple[int, int]:
    """[lo, hi] enclosing pi * 2^p: Machin, pi = 16 atan(1/5) - 4 atan(1/239)."""
    a_lo, a_hi = _atan_inv_scaled(5, p)
    b_lo, b_hi = _atan_inv_scaled(239, p)
    return 16 * a_lo - 4 * b_hi, 16 * a_hi - 4 * b_lo


def pi_interval(p: int) -> tuple[Fraction, Fraction]:
    lo, hi = pi_scaled(p)
    return Fraction(lo, 1 << p), Fraction(hi, 1 << p)


COEFF_BITS = 160
SIN_TERMS = 9  # sin(pi u / 2) = sum_k A_k u^(2k+1), k < 9, for 0 <= u <= 1/2
COS_TERMS = 10  # cos(pi w / 2) = sum_k B_k w^(2k), k < 10, for 0 <= w <= 1/2


def _nearest_double(lo: Fraction, hi: Fraction) -> float:
    a, b = float(lo), float(hi)  # Fraction -> float is correctly rounded
    if a != b:
        raise ArithmeticError("coefficient not decided; raise COEFF_BITS")
    return a


@lru_cache(maxsize=1)
def kernel_coefficients() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(A, B): the binary64 values nearest the Taylor coefficients of the fast route.

    A_k = (-1)^k (pi/2)^(2k+1) / (2k+1)!, B_k = (-1)^k (pi/2)^(2k) / (2k)!.
    """
    lo, hi = pi_interval(COEFF_BITS)
    lo, hi = lo / 2, hi / 2
    a, b = [], []
    fact = 1
    for n in range(2 * COS_TERMS):
        fact = fact * n if n > 1 else 1
        sign = -1 if (n // 2) % 2 else 1
        ends = sorted((sign * lo ** n / fact, sign * hi ** n / fact))
        (b if n % 2 == 0 else a).append(_nearest_double(*ends))
    return tuple(a[:SIN_TERMS]), tuple(b[:COS_TERMS])


# -- the exact value (clauses 2 and 5) ------------------------------------------------------

CONSTANT, LINEAR, COSINE = 0, 1, 2
KINDS = ("constant", "linear", "cosine")  # KINDS[kind] is the config name of a kind code
START_BITS = 64  # first working precision of the cosine enclosure (bits after the point)
MAX_BITS = 4096  # still undecided here: raise rather than guess
_SCALE = 149  # a binary32 value times 2^149 is an integer (2^-149: the least subnormal)


class Undecided(ArithmeticError):
    """A cosine value still undecided at MAX_BITS (never observed)."""


def _cos_scaled(x: int, p: int) -> tuple[int, int]:
    """[lo, hi] enclosing cos(x 2^-p) 2^p for 0 <= x 2^-p <= 2 (Taylor series)."""
    # terms alternate and, after the first two, fall (x^2 / ((2k+1)(2k+2)) < 1), so
    # the tail after a term of at most one unit is below one unit
    x2, one = x * x, 1 << p
    lo = hi = t_lo = t_hi = one
    k = 0
    while True:
        k += 1
        d = ((2 * k - 1) * 2 * k) << (2 * p)
        t_lo, t_hi = t_lo * x2 // d, _cdiv(t_hi * x2, d)
        if k % 2:
            lo, hi = lo - t_hi, hi - t_lo
        else:
            lo, hi = lo + t_lo, hi + t_hi
        if t_hi <= 1:
            return lo - 1, hi + 1


def cos_pi_scaled(a: int, b: int, p: int) -> tuple[int, int]:
    """[lo, hi] enclosing cos(pi a / b) 2^p for 0 <= a <= b (b > 0)."""
    flip = 2 * a > b  # cos(pi q) = -cos(pi (1 - q)): reduce to q in [0, 1/2]
    if flip:
        a = b - a
    pi_lo, pi_hi = pi_scaled(p)
    x_lo, x_hi = pi_lo * a // b, _cdiv(pi_hi * a, b)
    lo, hi = _cos_scaled(x_lo, p)
    lo -= x_hi - x_lo  # cos falls on [0, pi] with slope at most 1
    return (-hi, -lo) if flip else (lo, hi)


def _check(kind: int, P: float, M: float) -> None:
    if kind not in (CONSTANT, LINEAR, COSINE):
        raise ValueError(f"kind must be {CONSTANT}, {LINEAR} or {COSINE}, got {kind!r}")
    for name, x in (("P", P), ("M", M)):
        if not (isinstance(x, float) and math.isfinite(x) and round_float(x) == x):
            raise ValueError(f"{name} must be a finite binary32 value as a Python float, got {x!r}")


def _int_scaled(x: float) -> int:
    """x 2^149 as an integer, for a binary32 value x (exact)."""
    return int(math.ldexp(x, _SCALE))  # below 2^278: exact in binary64


def _rational_value(kind: int, P: float, M: float, W: int, T: int, t: int) -> Fraction | None:
    """The exact value when it is rational (all but the cosine's irrational points); else None."""
    _check(kind, P, M)
    if W >= 1 and t <= W:
        return Fraction(P) * t / W
    if kind == CONSTANT:
        return Fraction(P)
    if t >= T:
        return Fraction(M)
    if kind == LINEAR:
        return Fraction(M) + (Fraction(P) - Fraction(M)) * Fraction(T - t, T - W)
    a, b = t - W, T - W
    if 3 * a % b == 0 or 2 * a == b:  # p = 1/3, 1/2, 2/3 (Niven): (1 + cos(pi p)) / 2 = 3/4, 1/2, 1/4
        f = {2: Fraction(3, 4), 3: Fraction(1, 2), 4: Fraction(1, 4)}[6 * a // b]
        return Fraction(M) + (Fraction(P) - Fraction(M)) * f
    return None


def _cosine_scaled(P: float, M: float, W: int, T: int, t: int, p: int) -> tuple[int, int]:
    """[lo, hi] enclosing the cosine value times 2^(150 + p)."""
    c_lo, c_hi = cos_pi_scaled(t - W, T - W, p)
    m, d = _int_scaled(M), _int_scaled(P) - _int_scaled(M)
    # M + D (1 + c) / 2, times 2^(150 + p): m 2^(p+1) + d (2^p + c)
    base, one = m << (p + 1), 1 << p
    lo, hi = base + d * (one + c_lo), base + d * (one + c_hi)
    return (lo, hi) if d >= 0 else (hi, lo)


def interval(kind: int, P: float, M: float, W: int, T: int, t: int,
             bits: int = 200) -> tuple[Fraction, Fraction]:
    """Rationals [lo, hi] enclosing the exact value at step t (lo == hi where it is rational).

    `bits` sets the width of an irrational value's enclosure (about 2^-bits (|M| + |P - M|)),
    for measuring the fast route's error.
    """
    exact = _rational_value(kind, P, M, W, T, t)
    if exact is not None:
        return exact, exact
    lo, hi = _cosine_scaled(P, M, W, T, t, bits)
    return Fraction(lo, 1 << (_SCALE + 1 + bits)), Fraction(hi, 1 << (_SCALE + 1 + bits))


def value(kind: int, P: float, M: float, W: int, T: int, t: int) -> float:
    """The binary32 value at one-based step t, nearest the exact value (clauses 2 and 5).

    kind: CONSTANT, LINEAR or COSINE; P, M: the binary32 peak and minimum rates;
    W, T: warmup and total steps (T unused by CONSTANT). Returns a Python float.

    >>> value(COSINE, 1.0, 0.0, 0, 3, 1), value(COSINE, 1.0, 0.0, 0, 4, 1)
    (0.75, 0.8535534143447876)
    """
    exact = _rational_value(kind, P, M, W, T, t)
    if exact is not None:
        return round_fraction(exact) + 0.0  # + 0.0: a zero rate is +0
    p = START_BITS
    while p <= MAX_BITS:
        lo, hi = _cosine_scaled(P, M, W, T, t, p)
        den = 1 << (_SCALE + 1 + p)
        a, b = round_fraction(Fraction(lo, den)), round_fraction(Fraction(hi, den))
        if f32_to_bits(a) == f32_to_bits(b):
            return a + 0.0
        p *= 2
    raise Undecided(f"cosine schedule value at t={t} (P={P!r}, M={M!r}, W={W}, T={T}) "
                    f"still undecided at 2^-{MAX_BITS}")


# -- the fast route (clause 6), in Python floats: binary64, the kernels' operations -----------

ERR_SCALE = 2.0 ** -44  # E = 2^-44 (|M| + |D f|): 512 units of 2^-53


def fast_value(kind: int, P: float, M: float, W: int, T: int, t: int) -> tuple[float, float]:
    """(v, E): the kernels' binary64 value at step t and its error bound (exact steps: E = 0).

    The exact value lies in [v - E, v + E]; the step is decided when both ends round
    to the same binary32 value. Horner order: `acc = c[-1]; acc = acc * z + c[k]` for
    k descending, then `s = acc * u` for S (no multiply for C).

    >>> fast_value(LINEAR, 1.0, 0.0, 0, 4, 1)
    (0.75, 4.263256414560601e-14)
    """
    _check(kind, P, M)
    if W >= 1 and t <= W:
        v = (P * float(t)) / float(W)
        return v, ERR_SCALE * v
    if kind == CONSTANT:
        return P, 0.0
    if t >= T:
        return M, 0.0
    d = P - M
    if kind == LINEAR:
        r = float(T - t) / float(T - W)
        dr = d * r
        return M + dr, ERR_SCALE * (abs(M) + abs(dr))
    a, b = kernel_coefficients()
    u = float(T - t) / float(T - W)
    if u <= 0.5:
        z = u * u
        acc = a[-1]
        for c in a[-2::-1]:
            acc = acc * z + c
        s = acc * u
    else:
        w = float(t - W) / float(T - W)
        z = w * w
        acc = b[-1]
        for c in b[-2::-1]:
            acc = acc * z + c
        s = acc
    f = s * s
    df = d * f
    return M + df, ERR_SCALE * (abs(M) + abs(df))
