"""The mixed family's GEMM: layers' fold-tree GEMM with each lane step one fused multiply-add.

`gemm_nt_fma(a, b, ...)` is native/layers.py `_gemm_nt` (the same blocks, tiles, lanes,
chunk partials, padding and pairwise tree) with the lane step `lane = fma(x, y, lane)`
instead of `lane = lane + round(x * y)`. The two agree bit for bit whenever every
product x * y is exact in float32: fma rounds lane + x*y once, and so does the add when
x*y needs no rounding. The operands are low-precision values widened exactly
(contracts/mixed.md clauses 6, 9 and 10): two float16 values multiply exactly in float32
(11 + 11 significant bits, products from 2^-48 to below 2^32); two bfloat16 values
exactly when their product lies in float32's normal range, which `exact_products`
checks from the operands' exponent fields (infinities and NaNs excluded: they take the
multiply-then-add kernel, whose NaN payloads are the float32 op's).

`exact_products(a_bits, b_bits, significand)` is one pass of integer min/max over each
operand's float32 patterns: with every nonzero |v| in [2^lo, 2^(hi+1)), every nonzero
product lies in [2^(lo_a+lo_b), 2^(hi_a+hi_b+2)); it is exact when that interval is inside
[2^-126, 2^128) and two significands of `significand` bits fit float32's 24. A float32
subnormal operand counts as 2^-149 from below (a bound, not its exponent: such a call
simply takes the other kernel). Zeros are left out: a zero product is exact.

The FMA is `llvm.fma.v16f32`; without FMA hardware LLVM would lower it to libm calls,
so `HAS_FMA` (the target's features, read once at import) picks the multiply-add
kernel instead: the same bits by the argument above.

Reproducibility: the float32 op's bits (contracts/layers.md) on the widened operands,
for every thread count: threads claim whole blocks, as in native/layers.py.

>>> import numpy as np
>>> a = np.float32([[1.0, 2.0]]); b = np.float32([[3.0, 4.0], [0.5, 0.25]])
>>> exact_products(a.view(np.uint32).reshape(-1), b.view(np.uint32).reshape(-1), 8)
True
>>> out = np.empty(2, np.float32)
>>> gemm_nt_fma(1, a.reshape(-1), b.reshape(-1), 1, 2, 2, np.zeros(16, np.float32), False, False, out)
>>> out.tolist()
[11.0, 1.0]
"""
from __future__ import annotations

import numpy as np
from numba import boolean, int64, njit, prange, types, uint32, void

from . import layers
from .layers import F1, IN1
from .retarget import renamed, retarget
from .simd import vfma, vload
from .target import has_fma
from .threads import Twin

_STRICT = {"cache": True, "error_model": "numpy"}  # fastmath off: the one fma is written out
IN_BITS = types.Array(uint32, 1, "C", readonly=True)


HAS_FMA = has_fma()
NO_EXPONENT = 1 << 20  # the range of an operand without a nonzero value: beyond any exponent
SPECIAL = np.uint32(0x7F800000)  # the exponent field of infinities and NaNs
ABS = np.uint32(0x7FFFFFFF)


RANGE_BLOCK = 1 << 16  # patterns per parallel task of `_exponent_range`


@njit(**_STRICT)
def _block_range(bits):
    """(lo, hi, special) of one block: branch-free integer min/max, so LLVM packs the loop."""
    lo = NO_EXPONENT
    hi = -NO_EXPONENT
    special = 0
    for i in range(bits.size):
        u = bits[i] & ABS
        field = int64(u >> 23)
        top = field - 127
        low = top if field != 0 else -149
        lo = min(lo, low if u != 0 else NO_EXPONENT)
        hi = max(hi, top if u != 0 else -NO_EXPONENT)
        special = max(special, 1 if u >= SPECIAL else 0)
    return lo, hi, special


@njit(void(IN_BITS, int64[::1]), parallel=True, **_STRICT)
def _exponent_range(bits, out):
    """out = (lo, hi, special): lo <= the exponent of every nonzero value (a subnormal counts
    -149), hi >= it, special = 1 when a pattern is an infinity or a NaN; blocks in parallel,
    then min / max over them (integers: any order)."""
    nblocks = (bits.size + RANGE_BLOCK - 1) // RANGE_BLOCK
    part = np.empty((nblocks, 3), np.int64)
    for c in prange(nblocks):
        part[c, 0], part[c, 1], part[c, 2] = _block_range(
            bits[c * RANGE_BLOCK:min(bits.size, c * RANGE_BLOCK + RANGE_BLOCK)])
    out[0] = NO_EXPONENT
    out[1] = -NO_EXPONENT
    out[2] = 0
    for c in range(nblocks):
        out[0] = min(out[0], part[c, 0])
        out[1] = max(out[1], part[c, 1])
        out[2] = max(out[2], part[c, 2])


exponent_range_kernel = Twin(_exponent_range)


def exponent_range(bits: np.ndarray) -> tuple[int, int, bool]:
    """(lo, hi, special) of flat float32 patterns (uint32): see `_exponent_range`."""
    out = np.empty(3, np.int64)
    exponent_range_kernel(bits.size, bits, out)  # on the calling thread below the threshold
    return int(out[0]), int(out[1]), bool(out[2])


def exact_products(a_bits: np.ndarray, b_bits: np.ndarray, significand: int) -> bool:
    """Whether every product a[i] * b[j] of the float32 patterns a_bits, b_bits (flat uint32;
    values of at most `significand` significant bits each, 8 for bfloat16, 11 for float16) is
    exact in float32: finite operands, and every nonzero product in [2^-126, 2^128)."""
    if 2 * significand > 24:
        return False
    lo_a, hi_a, special_a = exponent_range(a_bits)
    lo_b, hi_b, special_b = exponent_range(b_bits)
    if special_a or special_b:
        return False
    if lo_a == NO_EXPONENT or lo_b == NO_EXPONENT:  # an operand of zeros: zero products
        return True
    return lo_a + lo_b >= -126 and hi_a + hi_b <= 126


@njit(inline="always", **_STRICT)
def _step6(acc, x, b, rb, o):
    """fma(x, 16 floats of row c of b, acc[c]): each lane step rounded once."""
    return (vfma(x, vload(b, rb[0] + o), acc[0]), vfma(x, vload(b, rb[1] + o), acc[1]),
            vfma(x, vload(b, rb[2] + o), acc[2]), vfma(x, vload(b, rb[3] + o), acc[3]),
            vfma(x, vload(b, rb[4] + o), acc[4]), vfma(x, vload(b, rb[5] + o), acc[5]))


@njit(inline="always", **_STRICT)
def _step2(c0, c1, x, b, r0, r1, o):
    return vfma(x, vload(b, r0 + o), c0), vfma(x, vload(b, r1 + o), c1)


# layers' tile loops, block walk and thread claims, the same source with the fused steps
# (native/retarget.py): the FMA GEMM cannot drift from the float32 GEMM's order
_lanes_4x6 = retarget(layers._lanes_4x6, njit(inline="always", **_STRICT), _step6=_step6)
_lanes_1x6 = retarget(layers._lanes_1x6, njit(inline="always", **_STRICT), _step6=_step6,
                      _step2=_step2)
_gemm_block = njit(**_STRICT)(renamed(retarget(
    layers._gemm_block, _lanes_4x6=_lanes_4x6, _lanes_1x6=_lanes_1x6), "_gemm_block_fma"))
_gemm_nt_fma = njit(void(IN1, IN1, int64, int64, int64, IN1, boolean, boolean, F1), parallel=True,
                    **_STRICT)(renamed(retarget(layers._gemm_nt, _gemm_block=_gemm_block),
                                        "_gemm_nt_fma"))


gemm_nt_fma = Twin(_gemm_nt_fma)  # called with its work first, as layers' gemm_nt_kernel

# the kernels tests/test_vectorized.py compiles for every target: they alone may hold fused
# multiply-adds (its FMA_ALLOWED), and must where HAS_FMA
FMA_KERNELS = {"mixed_gemm._gemm_nt_fma": _gemm_nt_fma}
