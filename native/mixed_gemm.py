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

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import boolean, int64, njit, prange, types, uint32, void
from numba.core import cgutils
from numba.core.extending import intrinsic

from .fold import NEG_ZERO
from .layers import (
    _PAD_A,
    _PAD_B,
    A_BLOCK_FLOATS,
    B_BLOCK_ROWS,
    F1,
    IN1,
    TILE_COLS,
    TILE_GROUP,
    TILE_ROWS,
    _claim,
    _fly6,
    _pad,
    _pairwise_at,
    _put,
)
from .simd import WIDTH, vec, vload, vsplat
from .threads import Twin

_STRICT = {"cache": True, "error_model": "numpy"}  # fastmath off: the one fma is written out
_VEC = ir.VectorType(ir.FloatType(), WIDTH)
IN_BITS = types.Array(uint32, 1, "C", readonly=True)


def _target_has_fma() -> bool:
    """Whether the CPU numba compiles for (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, else the host)
    does a fused multiply-add of vectors in an instruction: LLVM's code for one, without a
    call (a target without FMA gets libm's fmaf, which certified paths never use)."""
    cpu = numba.config.CPU_NAME
    if cpu is None or cpu == "host":
        cpu = llvm.get_host_cpu_name()
    features = numba.config.CPU_FEATURES
    if features is None:
        features = llvm.get_host_cpu_features().flatten()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features)
    probe = llvm.parse_assembly(
        "declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)\n"
        "define <4 x float> @probe(<4 x float> %a, <4 x float> %b, <4 x float> %c) {\n"
        "  %d = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b, <4 x float> %c)\n"
        "  ret <4 x float> %d\n}\n")
    probe.triple = triple
    asm = machine.emit_assembly(probe)
    return "call" not in asm and "jmp" not in asm and "fma" in asm


HAS_FMA = _target_has_fma()
NO_EXPONENT = 1 << 20  # the range of an operand without a nonzero value: beyond any exponent
SPECIAL = np.uint32(0x7F800000)  # the exponent field of infinities and NaNs
ABS = np.uint32(0x7FFFFFFF)


@njit(void(IN_BITS, int64[::1]), **_STRICT)
def _exponent_range(bits, out):
    """out = (lo, hi, special): lo <= the exponent of every nonzero value (a subnormal counts
    -149), hi >= it, special = 1 when a pattern is an infinity or a NaN. Branch-free integer
    min/max, so LLVM packs the loop."""
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
    out[0] = lo
    out[1] = hi
    out[2] = special


def exponent_range(bits: np.ndarray) -> tuple[int, int, bool]:
    """(lo, hi, special) of flat float32 patterns (uint32): see `_exponent_range`."""
    out = np.empty(3, np.int64)
    _exponent_range(bits, out)
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


@intrinsic
def vfma(typingctx, a, b, c):
    """Lane by lane a * b + c rounded once (llvm.fma: IEEE fusedMultiplyAdd)."""
    if a != vec or b != vec or c != vec:
        return None

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3),
                                            "llvm.fma.v16f32")
        return builder.call(fn, list(args))
    return vec(a, b, c), codegen


@njit(inline="always", **_STRICT)
def _step6(acc, x, b, rb, o):
    """fma(x, 16 floats of row c of b, acc[c]): each lane step rounded once."""
    return (vfma(x, vload(b, rb[0] + o), acc[0]), vfma(x, vload(b, rb[1] + o), acc[1]),
            vfma(x, vload(b, rb[2] + o), acc[2]), vfma(x, vload(b, rb[3] + o), acc[3]),
            vfma(x, vload(b, rb[4] + o), acc[4]), vfma(x, vload(b, rb[5] + o), acc[5]))


@njit(inline="always", **_STRICT)
def _step2(c0, c1, x, b, r0, r1, o):
    return vfma(x, vload(b, r0 + o), c0), vfma(x, vload(b, r1 + o), c1)


@njit(inline="always", **_STRICT)
def _lanes_4x6(a, b, ra, rb, steps, q, acc):
    """native/layers.py `_lanes_4x6` with the fused step."""
    c0, c1, c2, c3 = acc
    for t in range(steps):
        o = 32 * t + q
        c0 = _step6(c0, vload(a, ra[0] + o), b, rb, o)
        c1 = _step6(c1, vload(a, ra[1] + o), b, rb, o)
        c2 = _step6(c2, vload(a, ra[2] + o), b, rb, o)
        c3 = _step6(c3, vload(a, ra[3] + o), b, rb, o)
    return c0, c1, c2, c3


@njit(inline="always", **_STRICT)
def _lanes_1x6(a, b, ra, rb, steps, q, acc):
    """native/layers.py `_lanes_1x6` with the fused step."""
    if TILE_GROUP == 6:
        for t in range(steps):
            o = 32 * t + q
            acc = _step6(acc, vload(a, ra[0] + o), b, rb, o)
        return acc
    c0, c1, c2, c3, c4, c5 = acc
    for t in range(steps):
        o = 32 * t + q
        c0, c1 = _step2(c0, c1, vload(a, ra[0] + o), b, rb[0], rb[1], o)
    for t in range(steps):
        o = 32 * t + q
        c2, c3 = _step2(c2, c3, vload(a, ra[0] + o), b, rb[2], rb[3], o)
    for t in range(steps):
        o = 32 * t + q
        c4, c5 = _step2(c4, c5, vload(a, ra[0] + o), b, rb[4], rb[5], o)
    return c0, c1, c2, c3, c4, c5


@njit(**_STRICT)
def _gemm_block(a, b, m, n, kk, i_lo, i_hi, j_lo, j_hi, bias, has_bias, chunk_partials, out,
                pa, pb, part):
    """native/layers.py `_gemm_block` (the same loops, padding and partials) on the fused
    lane steps above."""
    nchunks = (kk + 1023) // 1024
    z = vsplat(NEG_ZERO)
    z6 = (z, z, z, z, z, z)
    for ch in range(nchunks):
        base = 1024 * ch
        end = min(base + 1024, kk)
        steps = (end - base) // 32
        k0 = base + 32 * steps
        tail = k0 < end
        for j0 in range(j_lo, j_hi, TILE_COLS):
            cols = min(TILE_COLS, j_hi - j0)
            r = (min(j0, j_hi - 1) * kk, min(j0 + 1, j_hi - 1) * kk, min(j0 + 2, j_hi - 1) * kk,
                 min(j0 + 3, j_hi - 1) * kk, min(j0 + 4, j_hi - 1) * kk, min(j0 + 5, j_hi - 1) * kk)
            rb = (r[0] + base, r[1] + base, r[2] + base, r[3] + base, r[4] + base, r[5] + base)
            if tail:
                for c in range(TILE_COLS):
                    _pad(pb, 32 * c, b, r[c] + k0, end - k0, np.float32(0.0))
            i0 = i_lo
            while TILE_ROWS == 4 and i_hi - i0 >= 4:
                ra = (i0 * kk + base, (i0 + 1) * kk + base, (i0 + 2) * kk + base, (i0 + 3) * kk + base)
                lo = _lanes_4x6(a, b, ra, rb, steps, 0, (z6, z6, z6, z6))
                hi = _lanes_4x6(a, b, ra, rb, steps, 16, (z6, z6, z6, z6))
                if tail:
                    for i in range(4):
                        _pad(pa, 32 * i, a, (i0 + i) * kk + k0, end - k0, NEG_ZERO)
                    lo = _lanes_4x6(pa, pb, _PAD_A, _PAD_B, 1, 0, lo)
                    hi = _lanes_4x6(pa, pb, _PAD_A, _PAD_B, 1, 16, hi)
                for i in range(4):
                    _put(out, part, _fly6(lo[i], hi[i]), i0 + i, j0, cols, ch, m, n, nchunks, i_lo,
                         j_lo, bias, has_bias, chunk_partials)
                i0 += 4
            for i in range(i0, i_hi):
                ra1 = (i * kk + base,)
                lo1 = _lanes_1x6(a, b, ra1, rb, steps, 0, z6)
                hi1 = _lanes_1x6(a, b, ra1, rb, steps, 16, z6)
                if tail:
                    _pad(pa, 0, a, i * kk + k0, end - k0, NEG_ZERO)
                    lo1 = _lanes_1x6(pa, pb, _PAD_A, _PAD_B, 1, 0, lo1)
                    hi1 = _lanes_1x6(pa, pb, _PAD_A, _PAD_B, 1, 16, hi1)
                _put(out, part, _fly6(lo1, hi1), i, j0, cols, ch, m, n, nchunks, i_lo, j_lo, bias,
                     has_bias, chunk_partials)
    if chunk_partials or nchunks == 1:
        return
    for i in range(i_lo, i_hi):
        for j in range(j_lo, j_hi):
            v = _pairwise_at(part, ((i - i_lo) * B_BLOCK_ROWS + j - j_lo) * nchunks, nchunks)
            out[i * n + j] = v + bias[j] if has_bias else v


@njit(void(IN1, IN1, int64, int64, int64, IN1, boolean, boolean, F1), parallel=True, **_STRICT)
def _gemm_nt_fma(a, b, m, n, kk, bias, has_bias, chunk_partials, out):
    """native/layers.py `_gemm_nt` (the same blocks, claimed the same way) on the fused steps."""
    nchunks = (kk + 1023) // 1024
    mb = max(1, min(256 // TILE_ROWS, A_BLOCK_FLOATS // (min(kk, 1024) * TILE_ROWS))) * TILE_ROWS
    nbi = (m + mb - 1) // mb
    nbj = (n + B_BLOCK_ROWS - 1) // B_BLOCK_ROWS
    nblocks = nbi * nbj
    claimed = np.zeros(1, np.int64)
    for _ in prange(nblocks):  # the first iteration on each thread takes all it can
        blk = _claim(claimed)
        if blk >= nblocks:
            continue
        pa = np.empty(32 * 4, np.float32)
        pb = np.empty(32 * TILE_COLS, np.float32)
        part = np.empty(mb * B_BLOCK_ROWS * nchunks if nchunks > 1 else 1, np.float32)
        while blk < nblocks:
            i_lo = blk // nbj * mb
            j_lo = blk % nbj * B_BLOCK_ROWS
            _gemm_block(a, b, m, n, kk, i_lo, min(i_lo + mb, m), j_lo, min(j_lo + B_BLOCK_ROWS, n),
                        bias, has_bias, chunk_partials, out, pa, pb, part)
            blk = _claim(claimed)


gemm_nt_fma = Twin(_gemm_nt_fma)  # called with its work first, as layers' gemm_nt_kernel

# the kernels tests/test_vectorized.py compiles for every target: they alone may hold fused
# multiply-adds (its FMA_ALLOWED), and must where HAS_FMA
FMA_KERNELS = {"mixed_gemm._gemm_nt_fma": _gemm_nt_fma}
