"""Exact binary32 arithmetic in pure Python: the definition every kernel is held to.

A binary32 value is carried as a Python float (binary64) that is exactly
representable in binary32. Rounding is round-to-nearest, ties-to-even, with
gradual underflow (subnormals kept) and overflow to infinity where IEEE 754 says.

Each primitive computes in binary64 and rounds once to binary32. For +, -, *, /
and sqrt this double rounding is harmless: binary64 has 53 >= 2*24 + 2 bits, so
rounding the correctly rounded binary64 result to binary32 gives the correctly
rounded binary32 result (Figueroa, "When is double rounding innocuous?", 1995).
`round_fraction` rounds an exact rational once, for host scalars and for the
fused operations that negative controls need.

Reproducibility: nothing here depends on numpy, libm or the host's float32 unit;
Python floats are IEEE binary64 on every platform CPython supports.

>>> add(1.0, 2.0 ** -24)   # a tie: rounds to even
1.0
>>> f32_to_bits(round_float(0.1)) == 0x3DCCCCCD
True
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

FLT_MAX = math.ldexp(2.0**24 - 1.0, 104)
FLT_MIN = math.ldexp(1.0, -126)  # smallest normal
FLT_TRUE_MIN = math.ldexp(1.0, -149)  # smallest subnormal
CANONICAL_NAN_BITS = 0x7FC00000

_MIN_QUANTUM_EXP = -149  # exponent of one ulp among subnormals


def round_float(d: float) -> float:
    """The binary32 value nearest the binary64 value `d` (ties to even)."""
    if d != d or d in (math.inf, -math.inf) or d == 0.0:
        return d
    _, e = math.frexp(d)  # |d| = m * 2**e with 0.5 <= m < 1
    q = max(e - 24, _MIN_QUANTUM_EXP)
    # Scaling by a power of two is exact; round() on a float is ties-to-even.
    r = round(math.ldexp(d, -q))
    if r == 0:
        return math.copysign(0.0, d)
    if abs(r).bit_length() + q > 128:  # |r| * 2**q >= 2**128
        return math.copysign(math.inf, d)
    return math.ldexp(r, q)


def round_fraction(x: Fraction) -> float:
    """The binary32 value nearest the exact rational `x` (ties to even).

    A zero rational gives +0.0; callers that need a signed zero decide the sign.
    """
    if x == 0:
        return 0.0
    sign = -1.0 if x < 0 else 1.0
    num, den = abs(x.numerator), x.denominator
    # Exponent e with 2**(e-1) <= |x| < 2**e.
    e = num.bit_length() - den.bit_length()
    if (num << max(0, -e)) >= (den << max(0, e)):
        e += 1
    q = max(e - 24, _MIN_QUANTUM_EXP)
    # r = |x| / 2**q rounded to an integer, ties to even.
    if q >= 0:
        n, d = num, den << q
    else:
        n, d = num << -q, den
    r, rem = divmod(n, d)
    if 2 * rem > d or (2 * rem == d and r & 1):
        r += 1
    if r.bit_length() + q > 128:
        return sign * math.inf
    return sign * math.ldexp(r, q)


def _f64_bits(d: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", d))[0]  # a copy of the bytes: no FP operation


def f32_to_bits(x: float) -> int:
    """The 32-bit pattern of a binary32 value held as a Python float (other floats are rounded
    to binary32 first; every NaN is 0x7FC00000).

    Integer shifts and masks on the binary64 pattern: no conversion by the host's FP unit,
    so flush-to-zero, denormals-are-zero and the rounding mode cannot change the result.
    """
    if x != x:
        return CANONICAL_NAN_BITS
    x = round_float(x)
    b = _f64_bits(x)
    sign = (b >> 63) << 31
    exp, frac = (b >> 52) & 0x7FF, b & ((1 << 52) - 1)
    if exp == 0x7FF:
        return sign | 0x7F800000
    if exp == 0:
        return sign  # +-0: a binary32 value is never a binary64 subnormal
    if exp >= 1023 - 126:
        return sign | (exp - (1023 - 127)) << 23 | frac >> 29
    # a binary32 subnormal: the significand (with its hidden bit) shifted to units of 2^-149
    return sign | ((1 << 52) | frac) >> (52 - (exp - 1023 + 149))


def bits_to_f32(u: int) -> float:
    """The binary32 value with pattern `u`, as a Python float (NaN payloads are not kept).

    Built from the pattern with integer operations (see `f32_to_bits`).
    """
    u &= 0xFFFFFFFF
    sign, exp, man = u >> 31, (u >> 23) & 0xFF, u & 0x7FFFFF
    if exp == 0xFF:
        return math.nan if man else (-math.inf if sign else math.inf)
    if exp == 0:
        if man == 0:
            return -0.0 if sign else 0.0
        shift = 24 - man.bit_length()  # normalize: the leading bit becomes the hidden bit
        exp, man = 1 - shift, (man << shift) & 0x7FFFFF
    b = sign << 63 | (exp + (1023 - 127)) << 52 | man << 29
    return struct.unpack("<d", struct.pack("<Q", b))[0]


def is_f32(x: float) -> bool:
    """True when the Python float `x` is exactly a binary32 value (NaN included)."""
    return x != x or round_float(x) == x


def same(a: float, b: float) -> bool:
    """Bitwise equality of two binary32 values, all NaNs one class."""
    if a != a or b != b:
        return a != a and b != b
    return f32_to_bits(a) == f32_to_bits(b)


def add(a: float, b: float) -> float:
    return round_float(a + b)


def sub(a: float, b: float) -> float:
    return round_float(a - b)


def mul(a: float, b: float) -> float:
    return round_float(a * b)


def div(a: float, b: float) -> float:
    if b == 0.0:  # Python raises; IEEE gives a signed infinity or NaN
        if a != a or a == 0.0:
            return math.nan
        negative = (math.copysign(1.0, a) < 0) != (math.copysign(1.0, b) < 0)
        return -math.inf if negative else math.inf
    return round_float(a / b)


def sqrt(a: float) -> float:
    if a != a or a < 0.0:
        return math.nan
    # math.sqrt is IEEE's correctly rounded binary64 square root (and keeps -0.0).
    return round_float(math.sqrt(a))


def fma(a: float, b: float, c: float) -> float:
    """a*b + c with one rounding (only negative controls and named contracts use it)."""
    if not all(map(math.isfinite, (a, b, c))):
        return round_float(a * b + c)  # inf/NaN propagate the same way
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        # IEEE: an exact zero sum is +0 unless both addends are -0 (or the product is -0 and c is -0).
        product_negative = (math.copysign(1.0, a) < 0) != (math.copysign(1.0, b) < 0)
        both_negative = product_negative and math.copysign(1.0, c) < 0
        if a * b == 0.0 and c == 0.0:
            return -0.0 if both_negative else 0.0
        return 0.0
    return round_fraction(exact)
