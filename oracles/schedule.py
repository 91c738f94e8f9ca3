"""Learning-rate schedules, exactly: the definition (contracts/schedule.md).

Every value is the binary32 nearest the exact real value of its formula in the
binary32 rates and the integer steps. Linear and warmup values are rationals,
rounded once. The cosine value M + (P - M) (1 + cos(pi p)) / 2 is enclosed by
rational intervals (pi from Machin's formula, cos from its Taylor series with the
remainder bounded by the next term), refined until both ends round alike; at the
five p where cos(pi p) is rational (0, 1/3, 1/2, 2/3, 1; Niven) it is exact.

Reproducibility: integers and `fractions.Fraction` only.

>>> lo, hi = pi_interval(80)
>>> float(lo), hi - lo < Fraction(1, 2**70)
(3.141592653589793, True)
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache


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
