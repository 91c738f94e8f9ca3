"""Counter-based random numbers: Philox4x32-10, uniform and normal draws, initializers and dropout (contracts/rng.md).

Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
1, 2, 3", SC'11; the Random123 library) maps a counter of four 32-bit words and
a key of two to four words. A `Generator(seed)` keys it with
(seed mod 2^32, seed >> 32); element i of a draw on stream s is word i mod 4 of
the block with counter (b mod 2^32, b >> 32, s mod 2^32, s >> 32), b = i div 4.
Nothing else reaches a value: not threads, chunks or the device.

A uniform value is u = (w >> 8) 2^-24 (exact) and low + (high - low) u in
binary32; dropout keeps element i when its u >= p and scales it by the binary32
nearest 1 / (1 - p). A normal value at stream position q is Box-Muller on the
pair (w0, w1) (q mod 4 in {0, 1}) or (w2, w3) (q mod 4 in {2, 3}) of block
q div 4: u1 = ((w_a >> 8) + 1) 2^-24, u2 = (w_b >> 8) 2^-23,
r = sqrt(-2 logf(u1)), z = r cospif(u2) for even q and r sinpif(u2) for odd q,
then mean + std z, every step binary32. The initializers' bounds and standard
deviations are the binary32 nearest their exact real value (integer square roots).

Reproducibility: Python integers, `fractions.Fraction`, `oracles/f32.py` and the
correctly rounded `oracles/crmath.py` only.

>>> ["%08x" % w for w in philox4x32_10((0, 0, 0, 0), (0, 0))]    # Random123's first vector
['6627e8d5', 'e169c58d', 'bc57ac4c', '9b00dbd8']
>>> uniform(0, 0, 3)
[0.3990464210510254, 0.8805201649665833, 0.7357127666473389]
>>> normal(0, 0, 4) == normal(0, 0, 1) + normal(0, 0, 3, offset=1)    # positions, not indices
True
>>> kaiming_uniform_bound(6), kaiming_normal_std(2), xavier_uniform_bound(3, 3, 1.0)
(1.0, 1.0, 1.0)
"""
from __future__ import annotations

import math
from fractions import Fraction

from . import crmath, f32
from .scalars import round_sqrt_fraction

M0, M1 = 0xD2511F53, 0xCD9E8D57  # the round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # the key bumps (golden ratio, sqrt(3) - 1)
MASK32 = 0xFFFFFFFF
ROUNDS = 10
TWO64 = 1 << 64  # seeds, streams and positions are below this
TWO_M24 = 2.0 ** -24
TWO_M23 = 2.0 ** -23


def philox4x32_10(counter, key, rounds: int = ROUNDS) -> tuple[int, int, int, int]:
    """Philox4x32 with `rounds` rounds (10 is the generator; others are for negative controls).

    counter: four words, key: two words, each an int in [0, 2^32). One round:
    (hi0, lo0) = M0 c0, (hi1, lo1) = M1 c2 (64-bit products), then
    c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0); the key is bumped by
    (W0, W1) mod 2^32 before every round after the first.
    """
    c0, c1, c2, c3 = (int(c) for c in counter)
    k0, k1 = (int(k) for k in key)
    if not all(0 <= v <= MASK32 for v in (c0, c1, c2, c3, k0, k1)):
        raise ValueError(f"counter and key words must be in [0, 2^32), got {counter!r}, {key!r}")
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
    return c0, c1, c2, c3


def key_of(seed: int) -> tuple[int, int]:
    """The Philox key of Generator(seed): (seed mod 2^32, seed >> 32)."""
    if not 0 <= seed < TWO64:
        raise ValueError(f"seed must be in [0, 2^64), got {seed!r}")
    return seed & MASK32, seed >> 32


def block_counter(b: int, stream: int) -> tuple[int, int, int, int]:
    """The counter of block b on stream s: (b mod 2^32, b >> 32, s mod 2^32, s >> 32)."""
    if not (0 <= b < TWO64 and 0 <= stream < TWO64):
        raise ValueError(f"block and stream must be in [0, 2^64), got {b!r}, {stream!r}")
    return b & MASK32, b >> 32, stream & MASK32, stream >> 32


def words(key: tuple[int, int], stream: int, offset: int, n: int, rounds: int = ROUNDS) -> list[int]:
    """The words at stream positions offset .. offset + n - 1 (each block computed once)."""
    if offset < 0 or n < 0 or offset + n > TWO64:
        raise ValueError(f"positions [{offset}, {offset + n}) leave [0, 2^64)")
    out, block, b = [], None, -1
    for pos in range(offset, offset + n):
        if pos >> 2 != b:
            b = pos >> 2
            block = philox4x32_10(block_counter(b, stream), key, rounds)
        out.append(block[pos & 3])
    return out


def uniform_word(seed: int, stream: int, i: int) -> int:
    """Word i (C order) of any draw on `stream` of Generator(seed) (clause 2)."""
    return philox4x32_10(block_counter(i >> 2, stream), key_of(seed))[i & 3]


def unit(w: int) -> float:
    """u = (w >> 8) 2^-24: exact, in [0, 1), a binary32 value."""
    return (w >> 8) * TWO_M24


def uniform_value(w: int, low: float, high: float) -> float:
    """low + (high - low) u in binary32 (clause 3); low and high are binary32 values."""
    d = f32.sub(high, low)
    return f32.add(low, f32.mul(d, unit(w)))


def uniform(seed: int, stream: int, n: int, low: float = 0.0, high: float = 1.0,
            offset: int = 0) -> list[float]:
    """The n binary32 values of uniform(n, low, high) on `stream`, from position `offset`.

    low and high are rounded to binary32 first (Python floats: once, to nearest).
    """
    lo, hi = f32.round_float(float(low)), f32.round_float(float(high))
    return [uniform_value(w, lo, hi) for w in words(key_of(seed), stream, offset, n)]


def dropout_scale(p: float) -> float:
    """binary32(1 / (1 - p)) for the binary32 value p in [0, 1): the exact rational rounded once."""
    if not (f32.is_f32(p) and 0.0 <= p < 1.0):
        raise ValueError(f"p must be a binary32 value in [0, 1), got {p!r}")
    return f32.round_fraction(1 / (1 - Fraction(p)))


def kept(w: int, p: float) -> bool:
    """Clause 6: the position is kept when its uniform u >= p."""
    return unit(w) >= p


def dropout(x, p: float, seed: int, stream: int, offset: int = 0) -> list[float]:
    """y_i = x_i * scale where position offset + i is kept, else x_i * 0.0 (clause 6).

    x: binary32 values (Python floats); p: a real in [0, 1), rounded to binary32
    first. x * 0.0 is a signed zero for finite x and NaN for inf or NaN.
    """
    p = f32.round_float(float(p))
    scale = dropout_scale(p)
    ws = words(key_of(seed), stream, offset, len(x))
    return [f32.mul(float(xi), scale if kept(w, p) else 0.0) for xi, w in zip(x, ws)]


def dropout_backward(dy, p: float, seed: int, stream: int, offset: int = 0) -> list[float]:
    """dx_i = dy_i * scale or dy_i * 0.0 with the forward's mask: the same arithmetic as dropout."""
    return dropout(dy, p, seed, stream, offset)


# -- normal draws (clause 4) ------------------------------------------------------------------------

def normal_units(wa: int, wb: int) -> tuple[float, float]:
    """(u1, u2) of the Box-Muller pair (wa, wb): u1 = ((wa >> 8) + 1) 2^-24 in (0, 1],
    u2 = (wb >> 8) 2^-23 in [0, 2); both exact binary32 values."""
    return ((wa >> 8) + 1) * TWO_M24, (wb >> 8) * TWO_M23


def normal_radius(u1: float) -> float:
    """r = sqrt(-2 logf(u1)) in binary32: logf correctly rounded, the product by -2 exact,
    the IEEE square root (r = -0.0 for u1 = 1, where logf gives +0)."""
    return f32.sqrt(f32.mul(-2.0, crmath.logf(u1)))


def normal_z(block, q: int) -> float:
    """The standard normal z of stream position q from its block's four words:
    r cospif(u2) for even q, r sinpif(u2) for odd q (a binary32 product)."""
    a = q & 2  # the pair (w0, w1) for q mod 4 in {0, 1}, (w2, w3) for {2, 3}
    u1, u2 = normal_units(block[a], block[a + 1])
    t = crmath.sinpif(u2) if q & 1 else crmath.cospif(u2)
    return f32.mul(normal_radius(u1), t)


def normal_value(block, q: int, mean: float, std: float) -> float:
    """mean + std z in binary32 (the product, then the sum); mean, std binary32 values."""
    return f32.add(mean, f32.mul(std, normal_z(block, q)))


def normal_values(key: tuple[int, int], stream: int, offset: int, n: int, mean: float, std: float,
                  rounds: int = ROUNDS) -> list[float]:
    """The values at stream positions offset .. offset + n - 1 (each block computed once);
    mean and std binary32 values."""
    if offset < 0 or n < 0 or offset + n > TWO64:
        raise ValueError(f"positions [{offset}, {offset + n}) leave [0, 2^64)")
    out, block, b = [], None, -1
    for q in range(offset, offset + n):
        if q >> 2 != b:
            b = q >> 2
            block = philox4x32_10(block_counter(b, stream), key, rounds)
        out.append(normal_value(block, q, mean, std))
    return out


def normal(seed: int, stream: int, n: int, mean: float = 0.0, std: float = 1.0,
           offset: int = 0) -> list[float]:
    """The n binary32 values of normal(n, mean, std) on `stream`, from position `offset`.

    mean and std are rounded to binary32 first. Element i is position offset + i:
    the position (not i) chooses the pair and cos or sin, so a split draw with
    offsets equals the unsplit draw.
    """
    # clause 4: a -0.0 mean is taken as +0.0 (so mean + std * -0 is +0, as the public draw gives)
    mu, sd = f32.round_float(float(mean)) + 0.0, f32.round_float(float(std))
    return normal_values(key_of(seed), stream, offset, n, mu, sd)


def normal_at(seed: int, stream: int, q: int, mean: float, std: float) -> float:
    """The normal value at stream position q (mean, std binary32 values): one position alone."""
    return normal_value(philox4x32_10(block_counter(q >> 2, stream), key_of(seed)), q, mean, std)


# -- initializers (clause 5): host scalars, the binary32 nearest the exact value ---------------------

def _gain2(gain) -> Fraction | None:
    """gain^2 as an exact rational, gain rounded to binary32 first (None: the default)."""
    if gain is None:
        return None
    g = f32.round_float(float(gain))
    if not 0.0 <= g < math.inf:
        raise ValueError(f"gain must be finite and >= 0 in binary32, got {gain!r}")
    return Fraction(g) ** 2


def _positive(*fans: int) -> None:
    for f in fans:
        if isinstance(f, bool) or not isinstance(f, int) or f < 1:
            raise ValueError(f"fan_in and fan_out must be positive integers, got {f!r}")


def kaiming_uniform_bound(fan_in: int, gain: float | None = None) -> float:
    """binary32(gain sqrt(3 / fan_in)); gain None is sqrt(2), exactly: binary32(sqrt(6 / fan_in)).

    gain >= 0, so gain sqrt(x) = sqrt(gain^2 x): one correctly rounded square root of a rational.
    """
    _positive(fan_in)
    g2 = _gain2(gain)
    return round_sqrt_fraction(Fraction(6, fan_in) if g2 is None else 3 * g2 / fan_in)


def kaiming_normal_std(fan_in: int, gain: float | None = None) -> float:
    """binary32(gain / sqrt(fan_in)); gain None is sqrt(2), exactly: binary32(sqrt(2 / fan_in))."""
    _positive(fan_in)
    g2 = _gain2(gain)
    return round_sqrt_fraction(Fraction(2, fan_in) if g2 is None else g2 / fan_in)


def xavier_uniform_bound(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """binary32(gain sqrt(6 / (fan_in + fan_out)))."""
    _positive(fan_in, fan_out)
    return round_sqrt_fraction(6 * _gain2(gain) / (fan_in + fan_out))


def xavier_normal_std(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """binary32(gain sqrt(2 / (fan_in + fan_out)))."""
    _positive(fan_in, fan_out)
    return round_sqrt_fraction(2 * _gain2(gain) / (fan_in + fan_out))


def kaiming_uniform(seed: int, stream: int, n: int, fan_in: int, gain: float | None = None) -> list[float]:
    """uniform(n, -bound, bound) with bound = kaiming_uniform_bound(fan_in, gain)."""
    bound = kaiming_uniform_bound(fan_in, gain)
    return uniform(seed, stream, n, -bound, bound)


def kaiming_normal(seed: int, stream: int, n: int, fan_in: int, gain: float | None = None) -> list[float]:
    """normal(n, 0, std) with std = kaiming_normal_std(fan_in, gain)."""
    return normal(seed, stream, n, 0.0, kaiming_normal_std(fan_in, gain))


def xavier_uniform(seed: int, stream: int, n: int, fan_in: int, fan_out: int,
                   gain: float = 1.0) -> list[float]:
    """uniform(n, -bound, bound) with bound = xavier_uniform_bound(fan_in, fan_out, gain)."""
    bound = xavier_uniform_bound(fan_in, fan_out, gain)
    return uniform(seed, stream, n, -bound, bound)


def xavier_normal(seed: int, stream: int, n: int, fan_in: int, fan_out: int,
                  gain: float = 1.0) -> list[float]:
    """normal(n, 0, std) with std = xavier_normal_std(fan_in, fan_out, gain)."""
    return normal(seed, stream, n, 0.0, xavier_normal_std(fan_in, fan_out, gain))
