"""Correctly rounded binary32 exp, log, sin(pi x) and cos(pi x), decided exactly: the definition.

`expf(x)`, `logf(x)`, `sinpif(x)` and `cospif(x)` return the binary32 value
nearest the exact real value e^x, ln x, sin(pi x), cos(pi x) (ties to even; a
tie cannot occur except at the exact points handled first). Each is decided by
rational interval arithmetic: the exact value is enclosed in [lo, hi] with
integers scaled by 2^-P (every bound rounded outward), and when both ends round
to the same binary32 value that value is the answer; otherwise P doubles.
Nothing here uses floating-point arithmetic to compute a result: `ln 2` comes
from the series 2*atanh(1/3), e^r from its Taylor series with a remainder bound,
ln m from 2*atanh((m-1)/(m+1)), pi from Machin's formula
(`oracles/schedule.pi_scaled`), sin and cos from their Taylor series with the
remainder bounded by the first omitted term.

Special values are C99's (C23's for sinpi/cospi): expf(NaN), logf(NaN),
sinpif(NaN), cospif(NaN) return the NaN quieted, expf(+inf) = +inf,
expf(-inf) = +0, logf(+-0) = -inf, logf(x < 0) = the default NaN 0x7FC00000,
logf(+inf) = +inf, logf(1) = +0, expf(+-0) = 1; sinpif(+-inf) = cospif(+-inf) =
0x7FC00000, sinpif(+-0) = +-0, sinpif(n) = +0 (n > 0) or -0 (n < 0) for an
integer n, cospif(n + 1/2) = +0, cospif(n) = +-1. The multiples of 1/2 are the
only binary32 inputs with a rational sin(pi x) or cos(pi x) (Niven), so they are
exact and every other value is irrational, never a tie.

The module also builds the tables the kernels use (2^(j/32), the log cells, the
Taylor coefficients of sin(pi r) and cos(pi r)), each entry the binary64 value
nearest its exact value, decided the same way.

Reproducibility: integers and `fractions.Fraction` only; the same on every
platform CPython runs on.

>>> expf(1.0) == 2.7182817459106445
True
>>> logf(2.0) == 0.6931471824645996
True
>>> sinpif(0.25) == 0.7071067690849304, cospif(0.5), sinpif(-2.0)
(True, 0.0, -0.0)
"""
from __future__ import annotations

import struct
from fractions import Fraction
from functools import lru_cache

from .f32 import bits_to_f32, f32_to_bits, round_fraction
from .schedule import pi_scaled

START_BITS = 96  # first working precision (bits after the binary point)
MAX_BITS = 6144  # a value still undecided here raises rather than guesses
QUIET_BIT = 0x00400000
DEFAULT_NAN_BITS = 0x7FC00000
POS_INF_BITS = 0x7F800000
NEG_INF_BITS = 0xFF800000
ONE_BITS = 0x3F800000


class Undecided(ArithmeticError):
    """Raised when a value stays undecided at MAX_BITS (never observed)."""


# -- interval helpers: values are integers v meaning v * 2^-P ---------------------------

def _cdiv(a: int, b: int) -> int:
    return -((-a) // b)


@lru_cache(maxsize=None)
def _atanh_scaled(num: int, den: int, p: int) -> tuple[int, int]:
    """[lo, hi] with lo <= atanh(num/den) * 2^p <= hi, for 0 <= num/den <= 1/2."""
    assert 0 <= 2 * num <= den
    n2, d2 = num * num, den * den
    lo_pw = (num << p) // den  # a^(2k+1) * 2^p, rounded down
    hi_pw = _cdiv(num << p, den)  # ... rounded up
    lo = hi = 0
    k = 1
    while hi_pw > 0:
        lo += lo_pw // k
        hi += _cdiv(hi_pw, k)
        lo_pw = lo_pw * n2 // d2
        hi_pw = _cdiv(hi_pw * n2, d2)
        k += 2
        if hi_pw <= 1:
            # tail after this term: a^(2k+1)/(2k+1) * 1/(1 - a^2) <= 2 units for a <= 1/2
            hi += 2
            break
    return lo, hi


@lru_cache(maxsize=None)
def ln2_scaled(p: int) -> tuple[int, int]:
    """[lo, hi] enclosing ln 2 * 2^p (ln 2 = 2 atanh(1/3))."""
    lo, hi = _atanh_scaled(1, 3, p)
    return 2 * lo, 2 * hi


def _exp_pos_scaled(a: int, p: int, upper: bool) -> int:
    """A bound on e^(a 2^-p) * 2^p for 0 <= a 2^-p <= 1/2: lower or upper."""
    one = 1 << p
    term, total, n = one, one, 1
    while True:
        term = _cdiv(term * a, n << p) if upper else (term * a) // (n << p)
        total += term
        n += 1
        if term <= 1:
            # remaining terms sum to at most 2 * term * a / n < 1 unit
            return total + 2 if upper else total


def _exp_scaled(lo: int, hi: int, p: int) -> tuple[int, int]:
    """[L, H] enclosing e^r * 2^p for every r * 2^p in [lo, hi], |r| <= 1/2."""
    def bound(a: int, upper: bool) -> int:
        if a >= 0:
            return _exp_pos_scaled(a, p, upper)
        # e^-b = 1 / e^b: a lower bound of e^b gives an upper bound of e^-b
        den = _exp_pos_scaled(-a, p, not upper)
        return _cdiv(1 << (2 * p), den) if upper else (1 << (2 * p)) // den
    return bound(lo, False), bound(hi, True)


def _round_scaled(v: int, p: int, shift: int) -> float:
    """round_fraction(v * 2^(shift - p))."""
    if shift >= p:
        return round_fraction(Fraction(v << (shift - p)))
    return round_fraction(Fraction(v, 1 << (p - shift)))


def _decide(enclose) -> float:
    """Refine enclose(p) -> (lo, hi, shift) until both ends round alike."""
    p = START_BITS
    while p <= MAX_BITS:
        lo, hi, shift = enclose(p)
        a, b = _round_scaled(lo, p, shift), _round_scaled(hi, p, shift)
        if f32_to_bits(a) == f32_to_bits(b):
            return a
        p *= 2
    raise Undecided("still undecided at 2^-%d" % MAX_BITS)


# -- exp ----------------------------------------------------------------------------------

EXP_HUGE = 89.0  # e^89 > FLT_MAX * (1 + 2^-25): +inf from here up
EXP_TINY = -104.0  # e^-104 < 2^-150 (half the least subnormal): +0 from here down


def _exp_enclosure(x: float):
    xf = Fraction(x)

    def enclose(p: int):
        xs_lo = (xf.numerator << p) // xf.denominator  # x * 2^p, rounded outward
        xs_hi = _cdiv(xf.numerator << p, xf.denominator)
        l2lo, l2hi = ln2_scaled(p)
        k = (2 * xs_lo + l2lo) // (2 * l2lo)  # round(x / ln2); any k keeps the bound valid
        # r = x - k ln2 over the ln2 interval (k's sign picks the ends)
        r_lo = xs_lo - k * (l2hi if k >= 0 else l2lo)
        r_hi = xs_hi - k * (l2lo if k >= 0 else l2hi)
        lo, hi = _exp_scaled(r_lo, r_hi, p)
        return lo, hi, k

    return enclose


def _exp_decided(x: float) -> float:
    return _decide(_exp_enclosure(x))


def _interval(enclose, p: int) -> tuple[Fraction, Fraction]:
    lo, hi, shift = enclose(p)
    scale = Fraction(2) ** (shift - p)
    return lo * scale, hi * scale


def exp_interval(x: float, p: int = 200) -> tuple[Fraction, Fraction]:
    """Rationals [lo, hi] enclosing e^x, hi - lo about 2^-p e^x (for measuring errors)."""
    return _interval(_exp_enclosure(x), p)


def log_interval(x: float, p: int = 200) -> tuple[Fraction, Fraction]:
    """Rationals [lo, hi] enclosing ln x (x > 0, x != 1), width about 2^-p."""
    return _interval(_log_enclosure(x), p)


def expf_bits(u: int) -> int:
    """The bit pattern of expf for the binary32 input with pattern `u`."""
    u &= 0xFFFFFFFF
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return u | QUIET_BIT
    x = bits_to_f32(u)
    if x >= EXP_HUGE:
        return POS_INF_BITS
    if x <= EXP_TINY:
        return 0
    if x == 0.0:
        return ONE_BITS
    return f32_to_bits(_exp_decided(x))


# -- log ----------------------------------------------------------------------------------

def _log_enclosure(x: float):
    xf = Fraction(x)
    # x = m 2^e with 3/4 <= m < 3/2, so that s = (m-1)/(m+1) lies in [-1/7, 1/5]
    e = xf.numerator.bit_length() - xf.denominator.bit_length()
    m = xf / Fraction(2) ** e
    while m >= Fraction(3, 2):
        m, e = m / 2, e + 1
    while m < Fraction(3, 4):
        m, e = m * 2, e - 1
    s = (m - 1) / (m + 1)
    neg = s < 0
    a = -s if neg else s

    def enclose(p: int):
        alo, ahi = _atanh_scaled(a.numerator, a.denominator, p)
        llo, lhi = (-2 * ahi, -2 * alo) if neg else (2 * alo, 2 * ahi)
        l2lo, l2hi = ln2_scaled(p)
        if e >= 0:
            return e * l2lo + llo, e * l2hi + lhi, 0
        return e * l2hi + llo, e * l2lo + lhi, 0

    return enclose


def _log_decided(x: float) -> float:
    return _decide(_log_enclosure(x))


def logf_bits(u: int) -> int:
    """The bit pattern of logf for the binary32 input with pattern `u`."""
    u &= 0xFFFFFFFF
    if (u & 0x7F800000) == 0x7F800000:
        if u & 0x007FFFFF:
            return u | QUIET_BIT
        return POS_INF_BITS if u == POS_INF_BITS else DEFAULT_NAN_BITS
    if (u & 0x7FFFFFFF) == 0:
        return NEG_INF_BITS
    if u & 0x80000000:
        return DEFAULT_NAN_BITS
    if u == ONE_BITS:
        return 0
    return f32_to_bits(_log_decided(bits_to_f32(u)))


def expf(x: float) -> float:
    """Correctly rounded e^x for a binary32 value held as a Python float."""
    return bits_to_f32(expf_bits(f32_to_bits(x)))


def logf(x: float) -> float:
    """Correctly rounded ln x for a binary32 value held as a Python float."""
    return bits_to_f32(logf_bits(f32_to_bits(x)))


# -- sin(pi x) and cos(pi x) -----------------------------------------------------------

TRIG_INTEGER = 2.0 ** 23  # every binary32 of this magnitude or more is an integer


def _sin_scaled(t: int, q: int, upper: bool) -> int:
    """A bound on sin(t 2^-q) 2^q for 0 <= t 2^-q <= 1: lower or upper.

    The series t - t^3/3! + t^5/5! - ... alternates with falling terms, so the
    remainder after a term is at most the first omitted term in magnitude.
    """
    t2, m_dn, m_up, total, k = t * t, t, t, 0, 0
    while True:
        if k % 2 == 0:
            total += m_up if upper else m_dn
        else:
            total -= m_dn if upper else m_up
        k += 1
        div = (2 * k) * (2 * k + 1) << (2 * q)
        m_dn, m_up = m_dn * t2 // div, _cdiv(m_up * t2, div)  # |term k|, rounded down / up
        if m_up <= 1:
            return total + m_up if upper else total - m_up


def _cos_scaled(t: int, q: int, upper: bool) -> int:
    """A bound on cos(t 2^-q) 2^q for 0 <= t 2^-q <= 1: lower or upper (as `_sin_scaled`)."""
    t2, m_dn, m_up, total, k = t * t, 1 << q, 1 << q, 0, 0
    while True:
        if k % 2 == 0:
            total += m_up if upper else m_dn
        else:
            total -= m_dn if upper else m_up
        k += 1
        div = (2 * k - 1) * (2 * k) << (2 * q)
        m_dn, m_up = m_dn * t2 // div, _cdiv(m_up * t2, div)
        if m_up <= 1:
            return total + m_up if upper else total - m_up


def _pi_reduce(x: float) -> tuple[int, Fraction]:
    """(n, r) with x = n/2 + r exactly, n an integer and |r| <= 1/4."""
    xf = Fraction(x)
    n = (4 * xf.numerator + xf.denominator) // (2 * xf.denominator)  # floor(2x + 1/2)
    return n, xf - Fraction(n, 2)


def _pi_trig(x: float, cos: bool):
    """(exact, enclose): the exact value of sin(pi x) (or cos) as a Fraction when it is
    rational (x a multiple of 1/2; the sign of a zero is the caller's), else (None,
    enclose) with enclose(p) -> (lo, hi, shift) as `_decide` takes it."""
    n, r = _pi_reduce(x)
    # sin(pi (n/2 + r)) = s, c, -s, -c and cos(pi (n/2 + r)) = c, -s, -c, s for n = 0..3 mod 4,
    # with s = sin(pi r), c = cos(pi r)
    q = (n + 1) % 4 if cos else n % 4
    if r == 0:
        return Fraction((0, 1, 0, -1)[q]), None
    use_cos = q % 2 == 1
    neg = q >= 2
    a = abs(r)
    if not use_cos and r < 0:  # sin is odd, cos even
        neg = not neg
    # sin(pi a) is about pi a: work with p + extra bits so that its relative width is 2^-p
    extra = 0 if use_cos else max(0, a.denominator.bit_length() - a.numerator.bit_length())

    def enclose(p: int):
        w = p + extra
        plo, phi = pi_scaled(w)
        t_lo = plo * a.numerator // a.denominator  # pi a 2^w, rounded outward
        t_hi = _cdiv(phi * a.numerator, a.denominator)
        if use_cos:  # falling on [0, pi/4]
            lo, hi = _cos_scaled(t_hi, w, False), _cos_scaled(t_lo, w, True)
        else:  # rising on [0, pi/4]
            lo, hi = _sin_scaled(t_lo, w, False), _sin_scaled(t_hi, w, True)
        return (-hi, -lo, -extra) if neg else (lo, hi, -extra)

    return None, enclose


def sinpi_interval(x: float, p: int = 200) -> tuple[Fraction, Fraction]:
    """Rationals [lo, hi] enclosing sin(pi x) (x finite), width about 2^-p |sin(pi x)|."""
    exact, enclose = _pi_trig(x, False)
    return (exact, exact) if enclose is None else _interval(enclose, p)


def cospi_interval(x: float, p: int = 200) -> tuple[Fraction, Fraction]:
    """Rationals [lo, hi] enclosing cos(pi x) (x finite), width about 2^-p |cos(pi x)|."""
    exact, enclose = _pi_trig(x, True)
    return (exact, exact) if enclose is None else _interval(enclose, p)


def _pi_special(u: int) -> int | None:
    """The pattern for NaN and +-inf inputs (the same for sinpif and cospif), else None."""
    if (u & 0x7F800000) == 0x7F800000:
        return u | QUIET_BIT if u & 0x007FFFFF else DEFAULT_NAN_BITS
    return None


def sinpif_bits(u: int) -> int:
    """The bit pattern of sinpif for the binary32 input with pattern `u`."""
    u &= 0xFFFFFFFF
    special = _pi_special(u)
    if special is not None:
        return special
    exact, enclose = _pi_trig(bits_to_f32(u), False)
    if enclose is not None:
        return f32_to_bits(_decide(enclose))
    if exact == 0:
        return u & 0x80000000  # +-0 for +-0, and +0 / -0 for positive / negative integers
    return f32_to_bits(float(exact))


def cospif_bits(u: int) -> int:
    """The bit pattern of cospif for the binary32 input with pattern `u`."""
    u &= 0xFFFFFFFF
    special = _pi_special(u)
    if special is not None:
        return special
    exact, enclose = _pi_trig(bits_to_f32(u), True)
    if enclose is not None:
        return f32_to_bits(_decide(enclose))
    return f32_to_bits(float(exact))  # +0 at half-integers (Fraction(0) is +0.0), +-1 at integers


def sinpif(x: float) -> float:
    """Correctly rounded sin(pi x) for a binary32 value held as a Python float."""
    return bits_to_f32(sinpif_bits(f32_to_bits(x)))


def cospif(x: float) -> float:
    """Correctly rounded cos(pi x) for a binary32 value held as a Python float."""
    return bits_to_f32(cospif_bits(f32_to_bits(x)))


# -- tables for the kernels ---------------------------------------------------------------

def _f64_bits(d: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", d))[0]


def nearest_double(lo: int, hi: int, p: int) -> float:
    """The binary64 value nearest every real in [lo, hi] * 2^-p; both ends must agree."""
    # int / int true division is correctly rounded in CPython
    a, b = lo / (1 << p), hi / (1 << p)
    if _f64_bits(a) != _f64_bits(b):
        raise Undecided("table entry not decided at 2^-%d" % p)
    return a


TABLE_BITS = 200


def exp2_32_table() -> list[float]:
    """T[j] = the binary64 value nearest 2^(j/32), j = 0..31."""
    p = TABLE_BITS
    out = []
    for j in range(32):
        lo, hi = ln2_scaled(p)
        # 2^(j/32) = e^(j ln2 / 32); j ln2 / 32 <= ln2 < 1/2 fails for j >= 24, so halve it
        r_lo, r_hi = (j * lo) // 64, _cdiv(j * hi, 64)
        elo, _ = _exp_scaled(r_lo, r_lo, p)
        _, ehi = _exp_scaled(r_hi, r_hi, p)
        out.append(nearest_double((elo * elo) >> p, _cdiv(ehi * ehi, 1 << p), p))
    return out


def split_hi(lo: int, hi: int, p: int, frac_bits: int) -> tuple[float, float]:
    """(H, L): H a multiple of 2^-frac_bits, L the binary64 nearest value - H.

    The value lies in [lo, hi] * 2^-p; H is taken from lo (both ends must give the
    same H and L).
    """
    h = lo >> (p - frac_bits)
    if hi >> (p - frac_bits) != h:
        raise Undecided("split not decided at 2^-%d" % p)
    hp = h << (p - frac_bits)
    return h / (1 << frac_bits), nearest_double(lo - hp, hi - hp, p)


def log_value_scaled(num: int, den: int, p: int) -> tuple[int, int]:
    """[lo, hi] enclosing ln(num/den) * 2^p for 1/2 <= num/den <= 2."""
    m = Fraction(num, den)
    s = (m - 1) / (m + 1)
    a = abs(s)
    alo, ahi = _atanh_scaled(a.numerator, a.denominator, p)
    return (-2 * ahi, -2 * alo) if s < 0 else (2 * alo, 2 * ahi)


SQRT2_M24 = 0xB504F3  # significands (with the hidden bit) from here up take the m/2 branch
LN2_FRAC_BITS = 44  # LN2_HI and LOG_HI are multiples of 2^-44: e*LN2_HI + LOG_HI is exact
LN2_32_FRAC_BITS = 45  # k*LN2_32_HI (|k| < 2^13) and x - k*LN2_32_HI are exact


def _log_cells() -> list[tuple[int, int]]:
    """(numerator, denominator) of 1/c for each of the 256 log table slots (0/1 if unused).

    Slot j - 128 (j = m24 >> 16 below SQRT2_M24): t = m24 2^-23 in [j/128, (j+1)/128).
    Slot j (j = m24 >> 16 from SQRT2_M24 up): t = m24 2^-24 in [j/256, (j+1)/256).
    The cells next to 1 take 1/c = 1 so that ln t = log1p(t - 1) with no table term.
    """
    cells = [(0, 1)] * 256
    for j in range(128, (SQRT2_M24 >> 16) + 1):
        # 1/c with 10 fraction bits: t * (1/c) is exact in binary64
        cells[j - 128] = (1, 1) if j == 128 else ((2 * 128 * 1024 + (2 * j + 1) // 2) // (2 * j + 1), 1024)
    for j in range(SQRT2_M24 >> 16, 256):
        cells[j] = (1, 1) if j == 255 else ((2 * 256 * 2048 + (2 * j + 1) // 2) // (2 * j + 1), 2048)
    return cells


SINPI_TERMS = 9  # sin(pi r) = sum_k S_k r^(2k+1), k < 9, for |r| <= 1/4
COSPI_TERMS = 9  # cos(pi r) = sum_k C_k r^(2k), k < 9


def pi_taylor(n: int, p: int = TABLE_BITS) -> float:
    """The binary64 value nearest the Taylor coefficient (-1)^(n//2) pi^n / n!."""
    plo, phi = pi_scaled(p)
    fact = 1
    for i in range(2, n + 1):
        fact *= i
    den = fact << (n * p)
    lo, hi = plo ** n, phi ** n
    if (n // 2) % 2:
        lo, hi = -hi, -lo
    # lo/den and hi/den enclose the value; int / int true division rounds correctly
    a, b = lo / den, hi / den
    if _f64_bits(a) != _f64_bits(b):
        raise Undecided("coefficient not decided at 2^-%d" % p)
    return a


@lru_cache(maxsize=None)
def kernel_tables() -> dict[str, list[float]]:
    """The binary64 constants and tables of the fast kernels, each decided exactly."""
    p = TABLE_BITS
    l2lo, l2hi = ln2_scaled(p)
    ln2_hi, ln2_lo = split_hi(l2lo, l2hi, p, LN2_FRAC_BITS)
    ln2_32_hi, ln2_32_lo = split_hi(l2lo // 32, _cdiv(l2hi, 32), p, LN2_32_FRAC_BITS)
    inv, hi, lo = [], [], []
    for num, den in _log_cells():
        if num == 0:
            inv.append(0.0), hi.append(0.0), lo.append(0.0)
            continue
        inv.append(num / den)
        llo, lhi = log_value_scaled(den, num, p)  # ln(1/inv) = -ln(inv)
        h, l = split_hi(llo, lhi, p, LN2_FRAC_BITS) if (llo, lhi) != (0, 0) else (0.0, 0.0)
        hi.append(h), lo.append(l)
    return {
        "inv_ln2_32": (32 << p) / l2lo,  # any nearby value works: it only picks k
        "ln2_32_hi": [ln2_32_hi], "ln2_32_lo": [ln2_32_lo],
        "ln2_hi": [ln2_hi], "ln2_lo": [ln2_lo],
        "exp2_32": exp2_32_table(),
        "log_inv": inv, "log_hi": hi, "log_lo": lo,
        "sinpi": [pi_taylor(2 * k + 1) for k in range(SINPI_TERMS)],  # S_k
        "cospi": [pi_taylor(2 * k) for k in range(COSPI_TERMS)],  # C_k, C_0 = 1
    }
