"""Exact casts between binary32 and the two 16-bit storage types, in integer arithmetic.

A value is decoded from its bit pattern into (sign, integer significand, exponent),
so that it equals (-1)^sign * m * 2^e exactly, and encoded into the target format by
one generic rounding: round to nearest, ties to even, at the target's precision and
quantum (subnormals kept), overflow to infinity. No float arithmetic is used, so the
host's float unit (FTZ, DAZ, rounding mode) cannot reach the result.

Formats (bits of significand p with the hidden bit, minimum normal exponent emin,
maximum exponent emax, exponent field width w):

- binary32: p = 24, w = 8, emin = -126, emax = 127;
- bfloat16: p = 8,  w = 8, emin = -126, emax = 127 (the top half of binary32);
- float16 (binary16): p = 11, w = 5, emin = -14, emax = 15.

Narrowing (binary32 -> bfloat16 or float16) rounds as above; every NaN, whatever its
sign and payload, becomes the target's canonical quiet NaN with the sign bit clear
(`BF16_NAN` 0x7FC0, `F16_NAN` 0x7E00). Widening (bfloat16 or float16 -> binary32) is
exact: a finite value or infinity keeps its value and sign; a NaN keeps its sign and
its payload, shifted to the top of the binary32 significand (no quieting, as numpy's
and ml_dtypes' astype and a plain shift do).

Reproducibility: a function of the bit pattern alone.

>>> hex(to_bf16_bits(0x3F808000)), hex(to_bf16_bits(0x3F818000))  # ties: to even
('0x3f80', '0x3f82')
>>> hex(to_f16_bits(0x477FF000)), hex(to_f16_bits(0x33000001))  # overflow, smallest subnormal
('0x7c00', '0x1')
>>> hex(from_f16_bits(0x0001)), hex(from_bf16_bits(0xFFC1))
('0x33800000', '0xffc10000')
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    name: str
    p: int  # significand bits, the hidden bit included
    w: int  # exponent field bits
    emin: int  # exponent of the smallest normal

    @property
    def frac(self) -> int:
        return self.p - 1

    @property
    def bias(self) -> int:
        return (1 << (self.w - 1)) - 1

    @property
    def sign_bit(self) -> int:
        return 1 << (self.w + self.frac)

    @property
    def inf_bits(self) -> int:
        return ((1 << self.w) - 1) << self.frac


F32 = Format("float32", 24, 8, -126)
BF16 = Format("bfloat16", 8, 8, -126)
F16 = Format("float16", 11, 5, -14)
BF16_NAN = 0x7FC0
F16_NAN = 0x7E00


def decode(u: int, fmt: Format) -> tuple[int, int, int] | str:
    """(sign, m, e) with the value (-1)^sign * m * 2^e exactly, or "inf" / "nan" (sign dropped)."""
    sign = (u >> (fmt.w + fmt.frac)) & 1
    field = (u >> fmt.frac) & ((1 << fmt.w) - 1)
    frac = u & ((1 << fmt.frac) - 1)
    if field == (1 << fmt.w) - 1:
        return "inf" if frac == 0 else "nan"
    if field == 0:  # zero or subnormal: quantum 2^(emin - frac)
        return sign, frac, fmt.emin - fmt.frac
    return sign, frac | (1 << fmt.frac), field - fmt.bias - fmt.frac


def round_to(sign: int, m: int, e: int, fmt: Format) -> int:
    """The bit pattern in `fmt` of (-1)^sign * m * 2^e rounded to nearest, ties to even."""
    if m == 0:
        return sign * fmt.sign_bit
    # exponent of the leading bit, then the quantum: one unit in the last place of the
    # p-bit significand at that exponent, never finer than the subnormal quantum
    lead = e + m.bit_length() - 1
    q = max(lead, fmt.emin) - fmt.frac
    if q > e:
        shift = q - e
        r, rem = m >> shift, m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and r & 1):
            r += 1
    else:
        r = m << (e - q)
    # r * 2^q is the rounded value; r may have reached 2^p (a carry into the exponent)
    if r >= 1 << fmt.p:
        r >>= 1
        q += 1
    if r < 1 << fmt.frac:  # subnormal (or zero): field 0
        return sign * fmt.sign_bit | r
    field = q + fmt.frac + fmt.bias
    if field >= (1 << fmt.w) - 1:
        return sign * fmt.sign_bit | fmt.inf_bits
    return sign * fmt.sign_bit | field << fmt.frac | (r - (1 << fmt.frac))


def narrow(u: int, fmt: Format, nan: int) -> int:
    """The binary32 pattern u cast to `fmt` (RNE, subnormals kept, overflow to inf,
    every NaN to the pattern `nan`)."""
    d = decode(u, F32)
    if d == "nan":
        return nan
    if d == "inf":
        return (u >> 31) * fmt.sign_bit | fmt.inf_bits
    return round_to(*d, fmt)


def widen(h: int, fmt: Format) -> int:
    """The `fmt` pattern h as binary32, exactly (a NaN keeps its sign and payload)."""
    sign = (h >> (fmt.w + fmt.frac)) & 1
    d = decode(h, fmt)
    if d in ("inf", "nan"):
        payload = h & ((1 << fmt.frac) - 1)
        return sign << 31 | F32.inf_bits | payload << (F32.frac - fmt.frac)
    return round_to(*d, F32)  # exact: every bfloat16 and float16 value is a binary32 value


def to_bf16_bits(u: int) -> int:
    """binary32 pattern -> bfloat16 pattern."""
    return narrow(u, BF16, BF16_NAN)


def to_f16_bits(u: int) -> int:
    """binary32 pattern -> float16 pattern."""
    return narrow(u, F16, F16_NAN)


def from_bf16_bits(h: int) -> int:
    """bfloat16 pattern -> binary32 pattern (exact)."""
    return widen(h, BF16)


def from_f16_bits(h: int) -> int:
    """float16 pattern -> binary32 pattern (exact)."""
    return widen(h, F16)
