"""Case inputs that never change: SplitMix64 in pure Python, seeded by the case id.

numpy's random streams may change between numpy versions, and a card must not,
so every input bit pattern here comes from integer arithmetic alone.

>>> [hex(u) for u in SplitMix64("demo").take(2)] == [hex(u) for u in SplitMix64("demo").take(2)]
True
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

_MASK = (1 << 64) - 1


class SplitMix64:
    """Steele, Lea and Flood's SplitMix64; the seed is the first 8 bytes of sha256(key)."""

    def __init__(self, key: str):
        self.state = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def take(self, n: int) -> list[int]:
        return [self.next() for _ in range(n)]

    def below(self, k: int) -> int:
        return self.next() % k  # bias < 2**-50 for the small k used here


def _pattern(sign: int, exponent: int, mantissa: int) -> int:
    return (sign & 1) << 31 | (exponent & 0xFF) << 23 | (mantissa & 0x7FFFFF)


def _normal(r: SplitMix64, lo: int, hi: int) -> int:
    u = r.next()
    return _pattern(u >> 63, lo + (u >> 23 & 0xFFFF) % (hi - lo + 1), u)


def _bits(r: SplitMix64) -> int:
    u = r.next() & 0xFFFFFFFF
    while (u >> 23 & 0xFF) == 0xFF:  # NaN and inf have families of their own
        u = r.next() & 0xFFFFFFFF
    return u


def _zeros(r: SplitMix64) -> int:
    return (r.next() & 1) << 31


def _subnormal(r: SplitMix64) -> int:
    u = r.next()
    return _pattern(u >> 63, 0, u)


def _huge_tiny(r: SplitMix64) -> int:
    u = r.next()
    return _normal(r, 231, 254) if u & 1 else _normal(r, 1, 24)


def _with_specials(r: SplitMix64, special: int, rate: int, both_signs: bool) -> int:
    """Mostly normal values; about one in `rate` is `special` (inf or NaN), signs as asked."""
    if r.below(rate) == 0:
        return special | ((r.next() & 1) << 31 if both_signs else 0)
    return _normal(r, 117, 137)


INF = 0x7F800000
NAN = 0x7FC00000

# family -> one element drawn from the stream (a 32-bit pattern)
FAMILIES: dict[str, Callable[[SplitMix64], int]] = {
    "normal": lambda r: _normal(r, 117, 137),        # |x| in [2**-10, 2**11)
    "bits": _bits,                                     # every finite pattern, subnormals included
    "subnormal": _subnormal,                           # squares and products underflow
    "zeros": _zeros,                                   # +0.0 / -0.0 mixtures
    "negzero": lambda r: 0x80000000,                   # only -0.0: shows the lane start
    "huge-tiny": _huge_tiny,                           # overflow and underflow together
    "wide": lambda r: _normal(r, 67, 182),             # |x| in [2**-60, 2**56): squares stay finite
    "unit": lambda r: _normal(r, 127, 127),            # |x| in [1, 2): every bit of a sum matters
    "inf": lambda r: _with_specials(r, INF, 64, False),
    "inf-mixed": lambda r: _with_specials(r, INF, 64, True),   # inf - inf = NaN
    "nan": lambda r: _with_specials(r, NAN, 256, False),
}


def cancellation(r: SplitMix64, n: int) -> list[int]:
    """Values and their negations, shuffled, plus small residues: the sum depends on the tree."""
    half = [_normal(r, 107, 147) for _ in range(n // 2)]
    vals = half + [v ^ 0x80000000 for v in half] + [_normal(r, 90, 100) for _ in range(n - 2 * (n // 2))]
    for i in range(len(vals) - 1, 0, -1):  # Fisher-Yates with the same stream
        j = r.below(i + 1)
        vals[i], vals[j] = vals[j], vals[i]
    # nudge a few values by one ulp so that the exact sum is small but not zero
    for _ in range(max(1, n // 64)):
        k = r.below(n)
        vals[k] = vals[k] + 1 if vals[k] & 0x7FFFFF != 0x7FFFFF else vals[k]
    return vals


def f32_array(patterns: list[int]) -> np.ndarray:
    return np.array(patterns, dtype=np.uint32).view(np.float32)


def draw(family: str, key: str, n: int) -> np.ndarray:
    """n float32 values of `family`, from the stream keyed by `key`."""
    r = SplitMix64(key)
    if family == "cancel":
        return f32_array(cancellation(r, n))
    gen = FAMILIES[family]
    return f32_array([gen(r) for _ in range(n)])


def bulk_normal(n: int, key: str) -> np.ndarray:
    """A large input for thread-invariance checks: SplitMix64 over a counter, vectorized
    in numpy uint64 arithmetic (exact, wraps mod 2**64), values normal in [2**-10, 2**11)."""
    seed = np.uint64(SplitMix64(key).next())
    with np.errstate(over="ignore"):
        z = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + seed
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    sign = (z >> np.uint64(63)).astype(np.uint32) << np.uint32(31)
    exponent = (np.uint32(117) + ((z >> np.uint64(23)) % np.uint64(21)).astype(np.uint32)) << np.uint32(23)
    mantissa = (z & np.uint64(0x7FFFFF)).astype(np.uint32)
    return (sign | exponent | mantissa).view(np.float32)
