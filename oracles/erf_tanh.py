"""Correctly rounded binary32 tanh and erf, decided exactly, and torch's GELU on them: the definition.

`tanhf(x)` and `erff(x)` return the binary32 value nearest the exact tanh(x) and
erf(x) (ties to even) for every binary32 x. Each is decided as `oracles/crmath.py`
decides expf: the exact value is enclosed in [lo, hi] (integers scaled by 2^-P,
every bound rounded outward), and when both ends round to the same binary32 value
that value is the answer; otherwise P doubles (from 96 bits; still undecided at
6144 bits raises `oracles.crmath.Undecided` rather than guesses).

tanh. tanh|x| = 1 - 2/(E + 1) = (E - 1)/(E + 1) with E = e^(2|x|), enclosed by
crmath's exp machinery (2|x| is exact; ln 2 from 2 atanh(1/3), e^r from its Taylor
series with a remainder bound); (E - 1)/(E + 1) rises with E, so the ends of E give
the ends of tanh. For small |x|, E - 1 is about 2|x|: the enclosure works with
about -log2|x| more bits, so that its width stays 2^-P relative to tanh|x| down to
the least subnormal (where tanh x rounds to x). tanh is odd; tanh(+-0) = +-0,
tanh(+-inf) = +-1, a NaN comes back quieted with its payload and sign.
When the result is +-1.0: 1 - tanh x = 2/(e^(2x) + 1) is below 2^-25 (half the
ulp under 1, so tanh x rounds to 1) exactly when e^(2x) > 2^26 - 1, that is for
x > ln(2^26 - 1)/2 = 9.0109133398...; the least binary32 above that is
TANH_ONE = 9.010913848876953 (0x41102CB4), so tanhf(x) = +-1.0 exactly for
|x| >= TANH_ONE and for no smaller |x| (tests/test_erf_tanh_oracle.py checks the
enclosure of ln(2^26 - 1) that places TANH_ONE).
No tie: for a nonzero rational x, e^(2x) is transcendental (Lindemann, 1882: e^a is
transcendental for every nonzero algebraic a), and tanh x = q rational would give
e^(2x) = (1 + q)/(1 - q) rational; so tanh x is irrational, never a binary32
midpoint, and the refinement ends.

erf. erf(x) = 2/sqrt(pi) * S, S = sum_n (-1)^n x^(2n+1) / (n! (2n+1)), each term
bounded from below and above in integers; once n + 1 >= x^2 the terms fall for
good, so after the last term kept the tail is bounded by the first omitted term
(alternating series), and the sum stops when that term is below one unit. The
terms first grow to about e^(x^2): the sum carries 1.5 x^2 extra bits for that
cancellation, and about -log2|x| extra bits for tiny x (erf x is about 2x/sqrt(pi):
subnormal inputs round correctly). sqrt(pi) is the integer square root of
Machin's pi (`oracles.schedule.pi_scaled`), rounded outward. erf is odd;
erf(+-0) = +-0, erf(+-inf) = +-1, NaN quieted as for tanh.
When the result is +-1.0: for x > 0, erfc(x) = 2/sqrt(pi) int_x^inf e^(-t^2) dt
< 2/sqrt(pi) int_x^inf (t/x) e^(-t^2) dt = e^(-x^2) / (x sqrt(pi)), and at
ERF_ONE = 3.92578125 (0x407B4000) that bound is below 2^-25 (the test checks it
with crmath's enclosure of e^(-ERF_ONE^2) and Machin's pi); erfc falls, so
erff(x) = +-1.0 for every |x| >= ERF_ONE. Below ERF_ONE the enclosure decides
(the least binary32 with erff = 1 is somewhat smaller; the test names it).
Ties: that erf(q) is irrational for every nonzero rational q is not a theorem
this module relies on (Siegel-Shidlovskii makes the integral of e^(-t^2) from 0 to
q transcendental, but says nothing of its ratio to sqrt(pi)). So every decision is
its own certificate: the loop returns only when the enclosure excludes every
midpoint, which proves the exact value is none; a value that were a midpoint
would run to the precision limit and raise `Undecided`, never round silently.
benchmarks/erf_tanh_exhaustive.py walks the 2^32 inputs.

GELU (torch 2.13's float32 CPU kernels, aten/src/ATen/native/cpu/Gelu.h and the
backward in Activation.cpp), one binary32 operation per step, constants as
binary32 values (torch writes them as binary64 expressions and converts once):
  gelu_erf(x) = (x * 0.5) * (1 + erff(x * ALPHA)), ALPHA = float(M_SQRT1_2).
  gelu_tanh(x) = (0.5 * x) * (1 + tanhf(BETA * (x + KAPPA * ((x * x) * x)))),
    BETA = float(M_SQRT2 * M_2_SQRTPI * 0.5), KAPPA = float(0.044715).
  gelu_erf_grad(dy, x) = dy * (cdf + x * pdf), cdf = 0.5 * (1 + erff(x * ALPHA)),
    pdf = BETA_ERF * expf((x * x) * -0.5), BETA_ERF = float(M_2_SQRTPI * M_SQRT1_2 * 0.5).
  gelu_tanh_grad(dy, x) = dy * (0.5 * (1 + t) + ((0.5 * x) * (1 - t * t))
    * (BETA * (1 + (3 * KAPPA) * (x * x)))), t = tanhf(inner) as in gelu_tanh.
C++ fixes these orders (left to right, the scalar and the vectorized kernels alike).
Where torch itself differs: its scalar path calls libm's tanhf/erff and its
vectorized path SLEEF's tanh and its own polynomial erf, none correctly rounded (a
few ulps near 1 become large relative errors in 1 + erf for negative x); a build
with FMA may contract a product into the following sum; and with oneDNN enabled
(the default) float32 gelu(approximate='none') runs oneDNN's own GELU instead
(+0 where this formula gives -0, for x below about -5.5). This definition
rounds every step as written above.

Reproducibility: integers and `fractions.Fraction` only (and the binary32
operations of `oracles/f32.py` in the GELU formulas).

>>> tanhf(0.5) == 0.46211716532707214, erff(1.0) == 0.8427007794380188
(True, True)
>>> tanhf(-0.0), erff(float("inf")), tanhf(TANH_ONE), erff(-ERF_ONE)
(-0.0, 1.0, 1.0, -1.0)
>>> gelu_erf(1.0) == 0.8413447141647339, gelu_tanh(1.0) == 0.8411920070648193
(True, True)
"""
from __future__ import annotations

from fractions import Fraction
from math import isqrt

from .crmath import (
    QUIET_BIT,
    _cdiv,
    _decide,
    _exp_enclosure,
    _interval,
    expf,
)
from .f32 import add, bits_to_f32, f32_to_bits, mul, sub
from .schedule import pi_scaled

ONE_BITS = 0x3F800000
SIGN_BIT = 0x80000000
TANH_ONE_BITS = 0x41102CB4  # the least binary32 above ln(2^26 - 1)/2
ERF_ONE_BITS = 0x407B4000  # 3.92578125: e^(-x^2)/(x sqrt(pi)) < 2^-25 from here up
TANH_ONE = bits_to_f32(TANH_ONE_BITS)
ERF_ONE = bits_to_f32(ERF_ONE_BITS)
TANH_NEAR_ONE = 64.0  # tanh_interval: 1 - tanh x < 2 e^(-128) < 2^-183 from here up
ERF_NEAR_ONE = 8.0  # erf_interval: erfc x < e^(-64) / (8 sqrt(pi)) < 2^-96 from here up

# torch's constants, each its binary64 expression rounded once to binary32
ALPHA = bits_to_f32(0x3F3504F3)  # float(M_SQRT1_2)
BETA = bits_to_f32(0x3F4C422A)  # float(M_SQRT2 * M_2_SQRTPI * 0.5), sqrt(2/pi)
KAPPA = bits_to_f32(0x3D372713)  # float(0.044715)
BETA_ERF = bits_to_f32(0x3ECC422A)  # float(M_2_SQRTPI * M_SQRT1_2 * 0.5), 1/sqrt(2 pi)


def _extra_bits(a: Fraction) -> int:
    """About -log2 a for 0 < a (never negative): the bits a relative width needs."""
    return max(0, a.denominator.bit_length() - a.numerator.bit_length()) + 2


def _odd_interval(x: float, p: int, enclosure, near_one: float, gap_bits: int):
    """[lo, hi] of an odd function rising to 1 (tanh, erf): exact 0 at 0, the fixed
    enclosure [1 - 2^-gap_bits, 1] from `near_one` up, else `enclosure(|x|)` at p bits."""
    a = abs(x)
    if a == 0:
        return Fraction(0), Fraction(0)
    if a >= near_one:
        lo, hi = 1 - Fraction(1, 1 << gap_bits), Fraction(1)
    else:
        lo, hi = _interval(enclosure(a), p)
    return (lo, hi) if x > 0 else (-hi, -lo)


def _odd_bits(u: int, one_bits: int, enclosure) -> int:
    """The binary32 pattern of such a function at pattern u: NaN quieted, +-0 kept, +-1 from
    `one_bits` up (+-inf included), else decided from `enclosure(|x|)`, sign applied."""
    u &= 0xFFFFFFFF
    sign, mag = u & SIGN_BIT, u & 0x7FFFFFFF
    if mag > 0x7F800000:
        return u | QUIET_BIT
    if mag == 0:
        return u
    if mag >= one_bits:
        return sign | ONE_BITS
    return sign | f32_to_bits(_decide(enclosure(bits_to_f32(mag))))


# -- tanh ---------------------------------------------------------------------------------

def _tanh_enclosure(a: float):
    """enclose(p) -> (lo, hi, shift) for tanh a, 0 < a < TANH_NEAR_ONE, as `_decide` takes it."""
    extra = _extra_bits(Fraction(a))
    exp2a = _exp_enclosure(2.0 * a)  # 2a is exact in binary64

    def enclose(p: int):
        w = p + extra
        lo, hi, k = exp2a(w)  # E = e^(2a) in [lo, hi] * 2^(k - w), k >= 0 as 2a >= 0
        big_lo, big_hi, one = lo << k, hi << k, 1 << w  # E * 2^w
        t_lo = ((big_lo - one) << w) // (big_lo + one)  # (E - 1)/(E + 1) * 2^w, outward
        t_hi = _cdiv((big_hi - one) << w, big_hi + one)
        return t_lo, t_hi, -extra

    return enclose


def tanh_interval(x: float, p: int = 200) -> tuple[Fraction, Fraction]:
    """Rationals [lo, hi] enclosing tanh x (x finite), width about 2^-p |tanh x|
    (for |x| >= 64 the fixed enclosure [1 - 2^-183, 1], sign applied)."""
    return _odd_interval(x, p, _tanh_enclosure, TANH_NEAR_ONE, 183)


def tanhf_bits(u: int) -> int:
    """The bit pattern of tanhf for the binary32 input with pattern `u`."""
    return _odd_bits(u, TANH_ONE_BITS, _tanh_enclosure)


def tanhf(x: float) -> float:
    """Correctly rounded tanh x for a binary32 value held as a Python float."""
    return bits_to_f32(tanhf_bits(f32_to_bits(x)))


# -- erf ----------------------------------------------------------------------------------

def _erf_series_scaled(num: int, den: int, w: int) -> tuple[int, int]:
    """[lo, hi] enclosing S * 2^w, S = sum_n (-1)^n a^(2n+1) / (n! (2n+1)), a = num/den > 0."""
    n2, d2 = num * num, den * den
    t_dn, t_up = (num << w) // den, _cdiv(num << w, den)  # a^(2n+1)/n! * 2^w, down / up
    lo = hi = 0
    n = 0
    while True:
        if n % 2 == 0:
            lo, hi = lo + t_dn // (2 * n + 1), hi + _cdiv(t_up, 2 * n + 1)
        else:
            lo, hi = lo - _cdiv(t_up, 2 * n + 1), hi - t_dn // (2 * n + 1)
        n += 1
        t_dn, t_up = t_dn * n2 // (d2 * n), _cdiv(t_up * n2, d2 * n)
        m_up = _cdiv(t_up, 2 * n + 1)  # the first omitted term, rounded up
        # u_(m+1)/u_m = a^2 (2m+1) / ((m+1)(2m+3)) < a^2/(m+1): from n on the terms fall
        if m_up <= 1 and (n + 1) * d2 >= n2:
            return lo - m_up, hi + m_up


def _sqrt_pi_scaled(w: int) -> tuple[int, int]:
    """[lo, hi] enclosing sqrt(pi) * 2^w (Machin's pi at a multiple of 64 bits, isqrt outward)."""
    wp = -(-w // 64) * 64
    plo, phi = pi_scaled(wp)
    drop = wp - w
    plo, phi = plo >> drop, _cdiv(phi, 1 << drop)  # pi * 2^w, outward
    lo = isqrt(plo << w)
    hi = isqrt(phi << w)
    return lo, hi if hi * hi == phi << w else hi + 1


def _erf_enclosure(a: float):
    """enclose(p) -> (lo, hi, shift) for erf a, 0 < a < ERF_NEAR_ONE, as `_decide` takes it."""
    af = Fraction(a)
    guard = -(-3 * af * af // 2) + 8  # the terms grow to about e^(a^2): 1.5 a^2 bits
    extra = _extra_bits(af) + guard

    def enclose(p: int):
        w = p + extra
        s_lo, s_hi = _erf_series_scaled(af.numerator, af.denominator, w)
        q_lo, q_hi = _sqrt_pi_scaled(w)
        lo = (2 * s_lo << w) // (q_hi if s_lo >= 0 else q_lo)  # 2 S / sqrt(pi) * 2^w, outward
        hi = _cdiv(2 * s_hi << w, q_lo if s_hi >= 0 else q_hi)
        return lo, hi, -extra

    return enclose


def erf_interval(x: float, p: int = 200) -> tuple[Fraction, Fraction]:
    """Rationals [lo, hi] enclosing erf x (x finite), width about 2^-p |erf x|
    (for |x| >= 8 the fixed enclosure [1 - 2^-96, 1], sign applied)."""
    return _odd_interval(x, p, _erf_enclosure, ERF_NEAR_ONE, 96)


def erff_bits(u: int) -> int:
    """The bit pattern of erff for the binary32 input with pattern `u`."""
    return _odd_bits(u, ERF_ONE_BITS, _erf_enclosure)


def erff(x: float) -> float:
    """Correctly rounded erf x for a binary32 value held as a Python float."""
    return bits_to_f32(erff_bits(f32_to_bits(x)))


# -- GELU, torch's float32 formulas -------------------------------------------------------

def gelu_erf(x: float) -> float:
    """torch's gelu(x, approximate='none'): (x * 0.5) * (1 + erff(x * ALPHA))."""
    half_x = mul(x, 0.5)
    cdf2 = add(1.0, erff(mul(x, ALPHA)))
    return mul(half_x, cdf2)


def _tanh_inner(x: float, x_sq: float) -> float:
    """BETA * (x + KAPPA * (x_sq * x)), x_sq = x * x."""
    x_cube = mul(x_sq, x)
    return mul(BETA, add(x, mul(KAPPA, x_cube)))


def gelu_tanh(x: float) -> float:
    """torch's gelu(x, approximate='tanh'): (0.5 * x) * (1 + tanhf(inner))."""
    t = tanhf(_tanh_inner(x, mul(x, x)))
    return mul(mul(0.5, x), add(1.0, t))


def gelu_erf_grad(dy: float, x: float) -> float:
    """torch's gelu_backward(dy, x, approximate='none'): dy * (cdf + x * pdf)."""
    cdf = mul(0.5, add(1.0, erff(mul(x, ALPHA))))
    pdf = mul(BETA_ERF, expf(mul(mul(x, x), -0.5)))
    return mul(dy, add(cdf, mul(x, pdf)))


def gelu_tanh_grad(dy: float, x: float) -> float:
    """torch's gelu_backward(dy, x, approximate='tanh'):
    dy * (left_derivative + right_derivative), in Activation.cpp's steps."""
    x_sq = mul(x, x)
    t = tanhf(_tanh_inner(x, x_sq))
    left = mul(0.5, x)
    right = add(1.0, t)
    left_derivative = mul(0.5, right)
    tanh_derivative = sub(1.0, mul(t, t))
    inner_derivative = mul(BETA, add(1.0, mul(mul(3.0, KAPPA), x_sq)))
    right_derivative = mul(mul(left, tanh_derivative), inner_derivative)
    return mul(dy, add(left_derivative, right_derivative))
