"""Exact conversion between float32 arrays and the oracle's Python floats, in any FP state.

numpy's float32 -> Python float conversion (`tolist`, `float()`) runs on the
host's FP unit, where denormals-are-zero turns a subnormal input into 0, and the
reverse conversion flushes subnormal results under flush-to-zero. The oracle
must stay exact whatever a library did to the process, so it converts through
the bit patterns: integer shifts and masks, plus, for subnormals, an int -> float
conversion below 2^23 and a product by 2^-149 or 2^149 whose operands and result
are normal binary64 numbers. Both are exact, so neither the rounding mode nor
FTZ/DAZ can touch them.

>>> import numpy as np
>>> x = np.uint32([0x00000001, 0x80000000, 0x3F800000, 0x7F800000]).view(np.float32)
>>> decode(x)
[1.401298464324817e-45, -0.0, 1.0, inf]
>>> encode(decode(x)).view(np.uint32).tolist() == x.view(np.uint32).tolist()
True
"""
from __future__ import annotations

import numpy as np

from .f32 import CANONICAL_NAN_BITS

_SUBNORMAL_ULP = 2.0 ** -149
_TO_SUBNORMAL_UNITS = 2.0 ** 149


def _bits32(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.float32:
        raise TypeError(f"codec: expected float32, got {a.dtype}")
    return np.ascontiguousarray(a).reshape(-1).view(np.uint32)


def decode_bits(u: np.ndarray) -> np.ndarray:
    """binary32 bit patterns (uint32) as exactly equal binary64 values (NaN payloads kept)."""
    u = np.asarray(u, np.uint32).astype(np.uint64)
    sign = (u >> np.uint64(31)) << np.uint64(63)
    exp = (u >> np.uint64(23)) & np.uint64(0xFF)
    man = u & np.uint64(0x7FFFFF)
    # normal, infinite and NaN: rebias the exponent (127 -> 1023, 255 -> 2047), widen the fraction
    wide = np.where(exp == 0xFF, np.uint64(0x7FF), exp + np.uint64(1023 - 127))
    d = (sign | (wide << np.uint64(52)) | (man << np.uint64(29))).view(np.float64)
    small = exp == 0  # zeros and subnormals: man * 2^-149, exact
    if small.any():
        mag = man[small].astype(np.float64) * _SUBNORMAL_ULP
        d[small] = np.where(sign[small] != 0, -mag, mag)
    return d


def decode(a) -> list[float]:
    """The values of a float32 array (C order) as Python floats."""
    return decode_bits(_bits32(a)).tolist()


def decode_scalar(v) -> float:
    """One float32 value (numpy scalar or 0-d/1-element array) as a Python float."""
    return decode(np.asarray(v, np.float32).reshape(1))[0] if np.asarray(v).dtype == np.float32 \
        else _not_f32(v)


def _not_f32(v):
    raise TypeError(f"codec: expected a float32 scalar, got {type(v).__name__}")


def encode_bits(values) -> np.ndarray:
    """binary32 bit patterns (uint32) of Python floats that are binary32 values; every NaN is
    0x7FC00000. Raises ValueError for a value binary32 cannot hold exactly."""
    d = np.asarray(values, np.float64).reshape(-1)
    b = d.view(np.uint64)
    sign = ((b >> np.uint64(63)) << np.uint64(31)).astype(np.uint32)
    exp = ((b >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    frac = b & np.uint64((1 << 52) - 1)
    out = np.zeros(d.size, np.uint32)
    nan = (exp == 0x7FF) & (frac != 0)
    inf = (exp == 0x7FF) & (frac == 0)
    normal = (exp >= 1023 - 126) & (exp <= 1023 + 127)
    tiny = (exp < 1023 - 126) & ~((exp == 0) & (frac == 0))  # below 2^-126, not zero
    bad = (normal & (frac & np.uint64((1 << 29) - 1) != 0)) | ((exp > 1023 + 127) & ~nan & ~inf)
    out[normal] = (((exp[normal] - (1023 - 127)).astype(np.uint32) << np.uint32(23))
                   | (frac[normal] >> np.uint64(29)).astype(np.uint32))
    out[inf] = np.uint32(0x7F800000)
    if tiny.any():
        units = np.abs(d[tiny]) * _TO_SUBNORMAL_UNITS  # exact: a normal result below 2^23
        whole = units.astype(np.uint32)
        bad[np.flatnonzero(tiny)[whole != units]] = True
        out[tiny] = whole
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"codec: {d[i]!r} (element {i}) is not a binary32 value")
    out |= sign
    out[nan] = np.uint32(CANONICAL_NAN_BITS)
    return out


def encode(values) -> np.ndarray:
    """A new float32 array holding `values` (binary32 values as Python floats) exactly."""
    return encode_bits(values).view(np.float32)


def store(out: np.ndarray, values) -> None:
    """Write `values` exactly into the float32 array `out` (same number of elements)."""
    out.reshape(-1).view(np.uint32)[:] = encode_bits(values)


def scalar(value: float) -> np.float32:
    """A numpy.float32 holding the binary32 value `value` exactly."""
    return encode([value])[0]
