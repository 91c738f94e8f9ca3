"""The mixed suite's contractions chosen by the range of their products (contracts/mixed.md):
float16 over every binade (every product exact in float32, so a fused multiply-add may run),
bfloat16 whose products stay in float32's normal range (exact: FMA eligible), and bfloat16
whose products underflow or overflow float32's normal range (not exact: the kernels must
multiply, round, then add).

A fused multiply-add differs from the rounded product then the rounded add only where a
product is not exact and the lane already holds a value, so every case has 96 terms: three
lane steps per lane, two of them onto a nonzero lane.

>>> [c[0] for c in CASES]
['linear-float16-range', 'linear-bfloat16-wide', 'linear-bfloat16-underflow', 'matmul-bfloat16-overflow']
"""
from __future__ import annotations

import numpy as np

from ..oracles import f32
from ..oracles.fold import fold_tree
from .casegen import SplitMix64

K = 96  # three lane steps per lane of the fold's 32

# id, op, type, shapes, per operand: the biased exponent field range [lo, hi] (both ends
# in) and the mask of the random fraction bits
CASES = (
    # float16 fields 0 (subnormals) to 30: products from 2^-48 to below 2^32, all exact
    ("linear-float16-range", "linear", "float16", ((2, K), (3, K), (3,)),
     ((0, 30, 0x3FF), (0, 30, 0x3FF), (0, 30, 0x3FF))),
    # bfloat16 products in [2^-126, 2^128): exact, the FMA path's inputs
    ("linear-bfloat16-wide", "linear", "bfloat16", ((2, K), (3, K), (3,)),
     ((64, 190, 0x7F), (64, 190, 0x7F), (100, 150, 0x7F))),
    # products in [2^-152, 2^-140), below float32's normal range and around its least
    # subnormal 2^-149; significands of at most 3 bits, so that products rounded to the
    # subnormal grid fall on ties and the lanes' sums round differently from the exact sum
    ("linear-bfloat16-underflow", "linear", "bfloat16", ((2, K), (3, K), (3,)),
     ((51, 56, 0x60), (51, 56, 0x60), (0, 0, 0x7F))),
    # products of lane 0 overflow (see `_overflowing_lane`), the rest in range
    ("matmul-bfloat16-overflow", "matmul", "bfloat16", ((2, K), (K, 3)),
     ((120, 134, 0x7F), (120, 134, 0x7F))),
)

_FORMAT = {"float16": (10, 0x1F), "bfloat16": (7, 0xFF)}  # fraction bits, exponent field max


def operands(cid: str, t: str, shapes, fields) -> tuple[np.ndarray, ...]:
    """Operands as bit patterns: random sign, exponent field in its range, random fraction
    bits under the mask (field 0 gives the type's subnormals), from SplitMix64 keyed by the
    case id."""
    frac, _ = _FORMAT[t]
    out = []
    for i, (shape, (lo, hi, mask)) in enumerate(zip(shapes, fields)):
        r = SplitMix64(f"mixed/{cid}/{i}")
        n = int(np.prod(shape))
        pats = [(r.next() & 1) << 15 | (lo + r.below(hi - lo + 1)) << frac | (r.next() & mask)
                for _ in range(n)]
        out.append(np.array(pats, np.uint16).reshape(shape))
    if cid == "matmul-bfloat16-overflow":
        _overflowing_lane(*out)
    return tuple(out)


def _bf16(sign: int, exp: int, frac: int) -> int:
    """The bfloat16 pattern of (-1)^sign (1 + frac/128) 2^exp."""
    return sign << 15 | (exp + 127) << 7 | frac


def _overflowing_lane(a: np.ndarray, b: np.ndarray) -> None:
    """Lane 0 of row 0's cells: the term k = 0 a product in [2^127, 1.27 2^127), the term
    k = 32 of the other sign in [2^128, 1.27 2^128), so the rounded product is infinite while
    the exact sum of the two is finite (below 1.54 2^127): rounded products give an infinite
    cell, a fused multiply-add a finite one. Column 2 keeps a term k = 32 in range (a finite
    cell either way); row 1 meets the large b terms with its small a (finite products)."""
    r = SplitMix64("mixed/matmul-bfloat16-overflow/lane0")
    a[0, 0], a[0, 32] = _bf16(0, 63, r.below(16)), _bf16(0, 64, r.below(16))
    for j in range(b.shape[1]):
        b[0, j] = _bf16(1, 63, r.below(16))
        b[32, j] = _bf16(0, 63 if j == 2 else 64, r.below(16))


def fused_dot(a, b) -> float:
    """fold of a[i] * b[i] with each lane step a fused multiply-add, lane = fma(a, b, lane),
    rounded once from the exact rational (oracles.f32.fma): the negative control's tree."""
    return fold_tree(list(zip(a, b)), accumulate=lambda acc, p: f32.fma(p[0], p[1], acc))
