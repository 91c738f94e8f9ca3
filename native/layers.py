"""numba CPU kernels for the layers family: the fold-tree GEMM, column folds, RMSNorm, relu.

`gemm_nt(a, b)` computes out[i, j] = fold over k of a[i, k] * b[j, k]: every cell
is `mojolike.dot(a[i], b[j])` on the library's one tree, so a row's result never
depends on the other rows of the call. The 32 lanes of a cell are 32 contiguous
products (lane l of chunk c holds k = 1024c + 32t + l), so a tile of cells keeps
16 lanes of each cell in one `simd.Vec` accumulator per pass (two passes a chunk)
and shares its loads: 4 rows of a by 6 rows of b with 32 vector registers, 1 x 6
with fewer (`_target_tile`). The butterflies follow in registers, a tile row's six
cells together (each vector addition makes one level for several cells, each cell's
lanes paired as in the fold), and a row's chunk partials go out in one masked store;
then the pairwise tree over chunks, per cell. A block's rows of a for one chunk stay in L2 and a
group of six rows of b in L1 (the layout of native/c/layers.c); threads claim whole blocks, so
neither the thread count nor the other rows reach a cell's arithmetic.

`col_fold(a, b)` folds each column over the rows (lane = row mod 32 within a
chunk of 1024 rows), in tasks of a chunk by a block of columns (native/col_fold.py);
`segment_fold` does the same over a list of rows per segment (the embedding
gradient), 16 columns per vector. `rms_norm` and
`rms_norm_backward` are oracles/layers.py's rounding order, a row per task. Each
kernel runs on the calling thread below native/threads.PARALLEL_MIN elements of work,
counted as native/c/layers.c counts them (the GEMM's multiply-adds over 32).

Reproducibility: identical mode gives the oracle's bits (contracts/layers.md);
no sum is split by thread.

>>> import numpy as np
>>> k = load("identical")
>>> out = np.empty((1, 2), np.float32)
>>> k.gemm_nt(np.float32([[1, 2]]), np.float32([[3, 4], [0.5, 0.25]]), np.float32([0.5, -1]), True, out)
>>> out.tolist()
[[11.5, 0.0]]
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import boolean, float32, int64, njit, prange, types, void
from numba.core.extending import intrinsic

from .base import NumbaBase
from .col_fold import col_fold as _col_fold
from .fold import NEG_ZERO
from .simd import (vadd, vbutterfly, vload, vload_head, vmul, vpairsum, vsplat, vstore,
                   vstore_head, vswap_halves)
from .target import add16_asm, has_zmm
from .threads import Twin, num_threads

_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
IN1 = types.Array(float32, 1, "C", readonly=True)
IN2 = types.Array(float32, 2, "C", readonly=True)
I1 = types.Array(int64, 1, "C", readonly=True)
F1, F2 = float32[::1], float32[:, ::1]
VEC = 16  # columns per vector in the column folds (simd.WIDTH)


@njit(float32(float32[::1], int64), inline="always", **_STRICT)
def _butterfly_at(s, o):
    off = 16
    while off >= 1:
        for j in range(off):
            s[o + j] = s[o + j] + s[o + j + off]
        off //= 2
    return s[o]


@njit(float32(float32[::1], int64, int64, int64), inline="always", **_STRICT)
def _pairwise_strided(p, o, s, k):
    """The pairwise tree over p[o], p[o + s], ..., p[o + (k - 1) s] (overwrites them)."""
    while k > 1:
        h = k // 2
        for i in range(h):
            p[o + i * s] = p[o + 2 * i * s] + p[o + (2 * i + 1) * s]
        if k % 2 == 1:
            p[o + h * s] = p[o + (k - 1) * s]
            k = h + 1
        else:
            k = h
    return p[o]


@njit(float32(float32[::1], int64, int64), inline="always", **_STRICT)
def _pairwise_at(p, o, k):
    """The pairwise tree over p[o : o + k] (overwrites it)."""
    return _pairwise_strided(p, o, 1, k)


@njit(inline="always", **_STRICT)
def _pairwise_vectors(p, o, s, k):
    """`_pairwise_strided` for 16 neighbouring cells at once: the pairwise tree over the
    vectors p[o + i s : o + i s + 16], i < k (overwrites them)."""
    while k > 1:
        h = k // 2
        for i in range(h):
            vstore(p, o + i * s, vadd(vload(p, o + 2 * i * s), vload(p, o + (2 * i + 1) * s)))
        if k % 2 == 1:
            vstore(p, o + h * s, vload(p, o + (k - 1) * s))
            k = h + 1
        else:
            k = h
    return vload(p, o)


def _target_tile() -> tuple[int, int]:
    """The GEMM's register tile for the CPU numba compiles for: (rows of a per tile, rows of b
    per multiply-add group). A tile's accumulators, a row of a and a product must fit the
    vector registers or the loop spills. LLVM lowers the probe's 16-float add to one zmm (32
    registers: 4 x 6 cells, 24 accumulators), two ymm (16 registers: 1 x 6, 12 ymm), or four
    128-bit registers (NEON's 32: 1 x 6; SSE2's 16: 1 x 6 as three groups of 1 x 2)."""
    asm, triple = add16_asm()
    if has_zmm():
        return 4, 6
    if "ymm" in asm or not triple.startswith(("x86_64", "i386", "i686")):
        return 1, 6
    return 1, 2


TILE_ROWS, TILE_GROUP = _target_tile()  # frozen into the kernel; the target is in numba's cache key
TILE_COLS = 6  # rows of b a tile meets: their chunk stays in L1 while the rows of a pass by
A_BLOCK_FLOATS = 128 << 10  # rows of a per block: 512 KiB of one chunk of them stay in L2
B_BLOCK_ROWS = 66  # rows of b per block (a multiple of TILE_COLS); blocks are the parallel work
_PAD_A = (0, 32, 64, 96)  # row offsets in the padded copies of a short last step
_PAD_B = (0, 32, 64, 96, 128, 160)


@intrinsic
def _claim(typingctx, counter):
    """counter[0] += 1 atomically, returning the old value: the next block for whichever
    thread asks (a thread on a busy core takes fewer; no cell depends on which thread)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", ary.data, ir.Constant(ir.IntType(64), 1), "monotonic")
    return types.int64(counter), codegen


@intrinsic
def _barrier(typingctx):
    """A compiler barrier (an empty asm that clobbers memory): what was stored before it is
    loaded again after it, so its values are not held in registers across it."""
    def codegen(context, builder, sig, args):
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", side_effect=True)
        builder.call(asm, [])
        return context.get_dummy_value()
    return types.void(), codegen


@njit(inline="always", **_STRICT)
def _park(sl, tile):
    """The 4 x 6 accumulators of `tile` into sl[0:384]."""
    for r in range(4):
        row = tile[r]
        for c in range(6):
            vstore(sl, 96 * r + 16 * c, row[c])


@njit(inline="always", **_STRICT)
def _unpark_row(sl, r):
    o = 96 * r
    return (vload(sl, o), vload(sl, o + 16), vload(sl, o + 32), vload(sl, o + 48), vload(sl, o + 64),
            vload(sl, o + 80))


@njit(inline="always", **_STRICT)
def _step6(acc, x, b, rb, o):
    """acc[c] + x * (16 floats of row c of b): each product rounded, then added to its lane."""
    return (vadd(acc[0], vmul(x, vload(b, rb[0] + o))), vadd(acc[1], vmul(x, vload(b, rb[1] + o))),
            vadd(acc[2], vmul(x, vload(b, rb[2] + o))), vadd(acc[3], vmul(x, vload(b, rb[3] + o))),
            vadd(acc[4], vmul(x, vload(b, rb[4] + o))), vadd(acc[5], vmul(x, vload(b, rb[5] + o))))


@njit(inline="always", **_STRICT)
def _step2(c0, c1, x, b, r0, r1, o):
    return vadd(c0, vmul(x, vload(b, r0 + o))), vadd(c1, vmul(x, vload(b, r1 + o)))


@njit(inline="always", **_STRICT)
def _lanes_4x6(a, b, ra, rb, steps, q, acc):
    """acc plus lanes q..q+15 of `steps` steps of a 4 x 6 tile (rows at offsets ra of a and
    rb of b): four rows of 6 accumulators, in registers."""
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
    """The same for one row of a; with TILE_GROUP 2 in three passes of two rows of b."""
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


@njit(inline="always", **_STRICT)
def _fly_row(lo, hi):
    """Levels 16 to 2 of the butterflies of a tile row's six cells, several cells to an
    addition (a cell alone would leave most lanes of each idle): lanes 2c and 2c + 1 hold
    cell c's last two lanes (lanes 12-15 repeat cells 4 and 5), each the sum of the same
    operands, paired as vbutterfly pairs them. vpairsum(r, r2, 1) ends two rows: row r's
    chunk partials in lanes 0-5, row r2's in lanes 8-13."""
    c01 = vpairsum(vadd(lo[0], hi[0]), vadd(lo[1], hi[1]), 8)
    c23 = vpairsum(vadd(lo[2], hi[2]), vadd(lo[3], hi[3]), 8)
    c45 = vpairsum(vadd(lo[4], hi[4]), vadd(lo[5], hi[5]), 8)
    return vpairsum(vpairsum(c01, c23, 4), vpairsum(c45, c45, 4), 2)


@njit(inline="always", **_STRICT)
def _pad(dst, o, src, start, count, pad):
    """dst[o : o + 32] = src[start : start + count], then `pad`: a short last step's copy."""
    for j in range(32):
        dst[o + j] = src[start + j] if j < count else pad


@njit(inline="always", **_STRICT)
def _biased(v, bias, add):
    """v + bias lane by lane where `add` (the output of a one-chunk call with a bias), else v."""
    return vadd(v, bias) if add else v


@njit(**_STRICT)
def _gemm_block(a, b, m, n, kk, i_lo, i_hi, j_lo, j_hi, bias, has_bias, chunk_partials, out,
                pa, pb, part, sl):
    """Rows [i_lo, i_hi) of a by rows [j_lo, j_hi) of b, chunk by chunk of K: the block's
    rows of a for one chunk stay in L2; for each group of six rows of b (their chunk kept
    in L1) they pass by, TILE_ROWS at a time, then one at a time. The cells' chunk partials
    wait in `part` for the pairwise tree after the last chunk. A group past the last row of
    b holds copies of it (computed, not stored). A short last step comes from copies padded
    with -0.0 (a) and +0.0 (b): a padded product is -0.0, which leaves its lane as it was."""
    nchunks = (kk + 1023) // 1024
    z = vsplat(NEG_ZERO)
    z6 = (z, z, z, z, z, z)
    for ch in range(nchunks):
        base = 1024 * ch
        end = min(base + 1024, kk)
        steps = (end - base) // 32
        k0 = base + 32 * steps
        tail = k0 < end
        # a row's cells are contiguous in each destination: the output (+ bias) for one chunk,
        # the chunk-partial output, or `part` (chunk by chunk) for the pairwise tree
        if chunk_partials:
            dst, at, stride = out, ch * m * n, n
        elif nchunks == 1:
            dst, at, stride = out, 0, n
        else:
            dst, at, stride = part, (ch * (i_hi - i_lo) - i_lo) * B_BLOCK_ROWS - j_lo, B_BLOCK_ROWS
        add = has_bias and nchunks == 1 and not chunk_partials
        for j0 in range(j_lo, j_hi, TILE_COLS):
            cols = min(TILE_COLS, j_hi - j0)
            bj = vload_head(bias, j0, cols) if add else z
            r = (min(j0, j_hi - 1) * kk, min(j0 + 1, j_hi - 1) * kk, min(j0 + 2, j_hi - 1) * kk,
                 min(j0 + 3, j_hi - 1) * kk, min(j0 + 4, j_hi - 1) * kk, min(j0 + 5, j_hi - 1) * kk)
            rb = (r[0] + base, r[1] + base, r[2] + base, r[3] + base, r[4] + base, r[5] + base)
            if tail:
                for c in range(TILE_COLS):
                    _pad(pb, 32 * c, b, r[c] + k0, end - k0, np.float32(0.0))
            i0 = i_lo
            while TILE_ROWS == 4 and i_hi - i0 >= 4:
                ra = (i0 * kk + base, (i0 + 1) * kk + base, (i0 + 2) * kk + base, (i0 + 3) * kk + base)
                if tail:
                    for i in range(4):
                        _pad(pa, 32 * i, a, (i0 + i) * kk + k0, end - k0, NEG_ZERO)
                lo = _lanes_4x6(a, b, ra, rb, steps, 0, (z6, z6, z6, z6))
                if tail:
                    lo = _lanes_4x6(pa, pb, _PAD_A, _PAD_B, 1, 0, lo)
                # lanes 0-15's 24 accumulators wait in memory while lanes 16-31 run: held in
                # registers, LLVM spilled and shuffled them inside both loops (23 vector
                # moves and 13-31 stack accesses per step, on znver4 and skylake-avx512)
                _park(sl, lo)
                _barrier()
                hi = _lanes_4x6(a, b, ra, rb, steps, 16, (z6, z6, z6, z6))
                if tail:
                    hi = _lanes_4x6(pa, pb, _PAD_A, _PAD_B, 1, 16, hi)
                lo = (_unpark_row(sl, 0), _unpark_row(sl, 1), _unpark_row(sl, 2), _unpark_row(sl, 3))
                r01 = vpairsum(_fly_row(lo[0], hi[0]), _fly_row(lo[1], hi[1]), 1)
                r23 = vpairsum(_fly_row(lo[2], hi[2]), _fly_row(lo[3], hi[3]), 1)
                o = at + i0 * stride + j0
                vstore_head(dst, o, _biased(r01, bj, add), cols)
                vstore_head(dst, o + stride, _biased(vswap_halves(r01), bj, add), cols)
                vstore_head(dst, o + 2 * stride, _biased(r23, bj, add), cols)
                vstore_head(dst, o + 3 * stride, _biased(vswap_halves(r23), bj, add), cols)
                i0 += 4
            for i in range(i0, i_hi):
                ra1 = (i * kk + base,)
                lo1 = _lanes_1x6(a, b, ra1, rb, steps, 0, z6)
                hi1 = _lanes_1x6(a, b, ra1, rb, steps, 16, z6)
                if tail:
                    _pad(pa, 0, a, i * kk + k0, end - k0, NEG_ZERO)
                    lo1 = _lanes_1x6(pa, pb, _PAD_A, _PAD_B, 1, 0, lo1)
                    hi1 = _lanes_1x6(pa, pb, _PAD_A, _PAD_B, 1, 16, hi1)
                row = _fly_row(lo1, hi1)
                vstore_head(dst, at + i * stride + j0, _biased(vpairsum(row, row, 1), bj, add), cols)
    if chunk_partials or nchunks == 1:
        return
    stride = (i_hi - i_lo) * B_BLOCK_ROWS  # between a cell's chunk partials in `part`
    for i in range(i_lo, i_hi):
        for j in range(j_lo, j_hi):
            v = _pairwise_strided(part, (i - i_lo) * B_BLOCK_ROWS + j - j_lo, stride, nchunks)
            out[i * n + j] = v + bias[j] if has_bias else v


@njit(void(IN1, IN1, int64, int64, int64, IN1, boolean, boolean, F1), parallel=True, **_STRICT)
def _gemm_nt(a, b, m, n, kk, bias, has_bias, chunk_partials, out):
    """out (M, N) = the cells; with `chunk_partials`, out (nchunks, M, N) = each cell's chunk
    partials before the pairwise tree (for sums that continue over several calls). Threads
    claim blocks until none is left, so one whose core is busy takes fewer."""
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
        sl = np.empty(4 * 6 * 16, np.float32)  # a 4 x 6 tile's parked accumulators
        part = np.empty(mb * B_BLOCK_ROWS * nchunks if nchunks > 1 else 1, np.float32)
        while blk < nblocks:
            i_lo = blk // nbj * mb
            j_lo = blk % nbj * B_BLOCK_ROWS
            _gemm_block(a, b, m, n, kk, i_lo, min(i_lo + mb, m), j_lo, min(j_lo + B_BLOCK_ROWS, n),
                        bias, has_bias, chunk_partials, out, pa, pb, part, sl)
            blk = _claim(claimed)


@njit(void(IN1, IN1, boolean, I1, int64, int64, int64, F1, float32[::1], F1), inline="always",
      **_STRICT)
def _fold_rows_16(a, b, products, rows, count, ncols, j0, acc, parts, out):
    """out[j0:j0+16] = fold over the `count` rows rows[0..count) of a[row, j0:j0+16] (or the
    rounded a*b): lane = position mod 32 within chunks of 1024 positions, 16 columns a vector."""
    nchunks = (count + 1023) // 1024
    for c in range(nchunks):
        for lane in range(32):
            vstore(acc, 16 * lane, vsplat(NEG_ZERO))
        for q in range(c * 1024, min(c * 1024 + 1024, count)):
            o = rows[q] * ncols + j0
            y = vload(a, o)
            if products:
                y = vmul(y, vload(b, o))
            lane = 16 * (q & 31)
            vstore(acc, lane, vadd(vload(acc, lane), y))
        off = 16
        while off >= 1:
            for lane in range(off):
                vstore(acc, 16 * lane, vadd(vload(acc, 16 * lane), vload(acc, 16 * (lane + off))))
            off //= 2
        vstore(parts, 16 * c, vload(acc, 0))
    k = nchunks
    while k > 1:  # the pairwise tree over chunk partials, 16 columns at a time
        h = k // 2
        for i in range(h):
            vstore(parts, 16 * i, vadd(vload(parts, 32 * i), vload(parts, 32 * i + 16)))
        if k % 2 == 1:
            vstore(parts, 16 * h, vload(parts, 16 * (k - 1)))
            k = h + 1
        else:
            k = h
    vstore(out, j0, vload(parts, 0))


@njit(void(IN1, IN1, boolean, I1, int64, int64, int64, float32[::1], float32[::1], F1), inline="always",
      **_STRICT)
def _fold_rows_1(a, b, products, rows, count, ncols, j, lanes, parts, out):
    """The same fold for one column j (the columns past the last whole vector)."""
    nchunks = (count + 1023) // 1024
    for c in range(nchunks):
        lanes[:] = NEG_ZERO
        for q in range(c * 1024, min(c * 1024 + 1024, count)):
            y = a[rows[q] * ncols + j]
            if products:
                y = y * b[rows[q] * ncols + j]
            lanes[q & 31] = lanes[q & 31] + y
        parts[c] = _butterfly_at(lanes, 0)
    out[j] = _pairwise_at(parts, 0, nchunks)


@njit(void(IN1, I1, int64, int64, int64, float32[::1], F1), inline="always", **_STRICT)
def _fold_few_16(a, rows, count, ncols, j0, acc, out):
    """_fold_rows_16 for count <= 32 positions: one chunk whose lanes past `count` stay -0.0,
    and x + -0.0 is x for every x the lanes hold (each already the result of an addition), so
    the butterfly's additions of untouched lanes are left out: the same bits, far fewer steps."""
    for q in range(count):
        vstore(acc, 16 * q, vadd(vsplat(NEG_ZERO), vload(a, rows[q] * ncols + j0)))
    live = count
    off = 16
    while off >= 1:
        if live > off:
            for lane in range(live - off):
                vstore(acc, 16 * lane, vadd(vload(acc, 16 * lane), vload(acc, 16 * (lane + off))))
            live = off
        off //= 2
    vstore(out, j0, vload(acc, 0))


@njit(void(IN1, int64, I1, I1, I1, F1), parallel=True, **_STRICT)
def _segment_fold(dy, width, order, starts, rows_out, out):
    nvec = width // VEC
    for s in prange(rows_out.size):
        count = starts[s + 1] - starts[s]
        rows = order[starts[s]:starts[s + 1]]
        acc = np.empty(32 * VEC, np.float32)
        parts = np.empty(VEC * ((count + 1023) // 1024), np.float32)
        dst = out[rows_out[s] * width:(rows_out[s] + 1) * width]
        for g in range(nvec):
            if count <= 32:
                _fold_few_16(dy, rows, count, width, g * VEC, acc, dst)
            else:
                _fold_rows_16(dy, dy, False, rows, count, width, g * VEC, acc, parts, dst)
        for j in range(nvec * VEC, width):
            _fold_rows_1(dy, dy, False, rows, count, width, j, acc, parts, dst)


@njit(float32(IN1, int64, int64, float32[::1]), inline="always", **_STRICT)
def _row_sumsq(x, o, d, part):
    """fold of the rounded squares of x[o : o + d] (lanes as vectors for whole steps)."""
    nchunks = (d + 1023) // 1024
    for c in range(nchunks):
        base = o + c * 1024
        end = o + min(c * 1024 + 1024, d)
        steps = (end - base) // 32
        lo = vsplat(NEG_ZERO)
        hi = lo
        for t in range(steps):
            xl = vload(x, base + 32 * t)
            xh = vload(x, base + 32 * t + 16)
            lo = vadd(lo, vmul(xl, xl))
            hi = vadd(hi, vmul(xh, xh))
        r0 = base + 32 * steps
        if r0 == end:
            part[c] = vbutterfly(lo, hi)
        else:
            vstore(part, nchunks, lo)
            vstore(part, nchunks + 16, hi)
            for k in range(r0, end):
                sq = x[k] * x[k]
                part[nchunks + k - r0] = part[nchunks + k - r0] + sq
            part[c] = _butterfly_at(part, nchunks)
    return _pairwise_at(part, 0, nchunks)


@njit(float32(IN1, int64, int64, float32, float32[::1]), inline="always", **_STRICT)
def _rms_scale(x, o, d, eps, part):
    """r = 1 / sqrt(fold(x*x) / D + eps), four roundings in that order."""
    ms = _row_sumsq(x, o, d, part) / np.float32(d)
    return np.float32(1.0) / np.sqrt(ms + eps)


@njit(void(IN1, int64, int64, IN1, boolean, float32, F1), parallel=True, **_STRICT)
def _rms_norm(x, m, d, w, has_w, eps, y):
    for i in prange(m):
        part = np.empty((d + 1023) // 1024 + 32, np.float32)
        o = i * d
        r = _rms_scale(x, o, d, eps, part)
        for j in range(d):
            h = x[o + j] * r
            y[o + j] = h * w[j] if has_w else h


@njit(float32(F1, int64, int64, float32[::1]), inline="always", **_STRICT)
def _fold_slice(y, o, d, part):
    """fold of y[o : o + d]."""
    nchunks = (d + 1023) // 1024
    for c in range(nchunks):
        base = o + c * 1024
        end = o + min(c * 1024 + 1024, d)
        for j in range(32):
            part[nchunks + j] = NEG_ZERO
        for k in range(base, end):
            part[nchunks + ((k - base) & 31)] = part[nchunks + ((k - base) & 31)] + y[k]
        part[c] = _butterfly_at(part, nchunks)
    return _pairwise_at(part, 0, nchunks)


@njit(void(IN1, IN1, int64, int64, IN1, boolean, float32, F1, F1), parallel=True, **_STRICT)
def _rms_norm_backward(dy, x, m, d, w, has_w, eps, dx, hbuf):
    for i in prange(m):
        part = np.empty((d + 1023) // 1024 + 32, np.float32)
        o = i * d
        r = _rms_scale(x, o, d, eps, part)
        # c = fold_j(g_j * h_j) / D with g = dy * w (dy without weight), h = x * r; dx holds g*h first
        for j in range(d):
            h = x[o + j] * r
            g = dy[o + j] * w[j] if has_w else dy[o + j]
            dx[o + j] = g * h
            if has_w:
                hbuf[o + j] = h
        c = _fold_slice(dx, o, d, part) / np.float32(d)
        for j in range(d):
            h = x[o + j] * r
            g = dy[o + j] * w[j] if has_w else dy[o + j]
            dx[o + j] = r * (g - h * c)


@njit(void(IN1, int64, int64, F1), parallel=True, **_STRICT)
def _row_chunk_folds(a, m, c, out):
    nchunks = (c + 1023) // 1024
    for i in prange(m):
        lanes = np.empty(32, np.float32)
        for q in range(nchunks):
            base = i * c + q * 1024
            end = i * c + min(q * 1024 + 1024, c)
            steps = (end - base) // 32
            lo = vsplat(NEG_ZERO)
            hi = lo
            for t in range(steps):
                lo = vadd(lo, vload(a, base + 32 * t))
                hi = vadd(hi, vload(a, base + 32 * t + 16))
            vstore(lanes, 0, lo)
            vstore(lanes, 16, hi)
            r0 = base + 32 * steps
            for k in range(r0, end):
                lanes[k - r0] = lanes[k - r0] + a[k]
            out[i * nchunks + q] = _butterfly_at(lanes, 0)


@njit(void(IN1, F1), parallel=True, **_STRICT)
def _relu(x, out):
    for i in prange(x.size):
        v = x[i]
        out[i] = max(v, np.float32(0.0))  # -0.0 and NaN stay, as in torch


_PLACEHOLDER = np.zeros(16, np.float32)  # the bias / weight argument when there is none

# called with their work first, as native/c/layers.c measures it (the GEMM's multiply-adds over
# 32, the other kernels' elements): below native/threads.PARALLEL_MIN they run on the calling
# thread
gemm_nt_kernel, col_fold_kernel = Twin(_gemm_nt), Twin(_col_fold)
segment_fold_kernel = Twin(_segment_fold)
rms_norm_kernel, rms_norm_backward_kernel = Twin(_rms_norm), Twin(_rms_norm_backward)
row_chunk_folds_kernel, relu_kernel = Twin(_row_chunk_folds), Twin(_relu)


def _gemm_kernel(m: int, n: int, k: int):
    """The kernel for an (m, k) x (n, k) gemm_nt: native/gemm_outer.py's outer products where
    it runs (AVX-512, m >= 4, n >= 96; loaded on its first use), else `_gemm_nt`. Both give
    every cell the fold's bits, so the choice never reaches them."""
    from . import gemm_outer

    return gemm_outer.gemm_outer if gemm_outer.usable(m, n, k) else gemm_nt_kernel


class NumbaLayers(NumbaBase):
    """The layers family's kernels on the CPU with numba (the interface of contracts/layers.md).

    All arrays are C-contiguous float32 (int64 for indices); 2-D arrays as (rows, cols).
    """

    backend = "cpu-numba"
    takes_pieces = False

    def __init__(self, mode: str):
        self.numeric_mode = mode
        self.details = {"numba": numba.__version__, "threads": num_threads()}

    def gemm_nt(self, a, b, bias, has_bias, out):
        """out[i, j] = fold_k a[i, k] * b[j, k] (+ bias[j]); a (M, K), b (N, K), out (M, N)."""
        m, k = a.shape
        n = b.shape[0]
        _gemm_kernel(m, n, k)(m * n * k // 32, a.reshape(-1), b.reshape(-1), m, n, k,
                              bias if has_bias else _PLACEHOLDER, bool(has_bias), False,
                              out.reshape(-1))

    def gemm_nn(self, a, b, out) -> bool:
        """out[i, j] = fold_k a[i, k] * b[k, j]; a (M, K), b (K, N), out (M, N): gemm_nt's
        cells with b as stored, no transposed copy (native/gemm_nn.py, loaded on its first
        call). It runs on AVX-512 targets for N >= 16 and M, K >= 1, returning True;
        elsewhere it writes nothing and returns False, and the caller runs gemm_nt on b's
        transpose (faster there, native/gemm_nn.py). Only cpu-numba has this method."""
        from . import gemm_nn  # imported on first use: a process without matmul compiles nothing

        from . import gemm_outer

        m, k = a.shape
        n = b.shape[1]
        if n < 16 or m == 0 or k == 0 or not gemm_nn.FAST:
            return False
        if gemm_outer.usable(m, n, k):  # the outer-product tiles (native/gemm_outer.py)
            gemm_outer.gemm_outer_nn(m * n * k // 32, a.reshape(-1), b.reshape(-1), m, n, k,
                                     _PLACEHOLDER, False, False, out.reshape(-1))
            return True
        gemm_nn.gemm_nn(m * n * k // 32, a.reshape(-1), b.reshape(-1), m, n, k, out.reshape(-1))
        return True

    def gemm_tn(self, a, b, out) -> bool:
        """out[i, j] = fold_k a[k, i] * b[k, j]; a (K, M), b (K, N), out (M, N): gemm_nn's
        cells on a's transpose without the transposed copy (a linear's weight gradient
        dy^T x reads dy as stored). It runs where native/gemm_outer.py's tiles do (AVX-512,
        M >= 4, N >= 96), returning True; elsewhere it writes nothing and returns False,
        and the caller transposes a. Only cpu-numba has this method."""
        from . import gemm_outer  # imported on first use, as gemm_nn

        k, m = a.shape
        n = b.shape[1]
        if not gemm_outer.usable(m, n, k):
            return False
        gemm_outer.gemm_outer_tn(m * n * k // 32, a.reshape(-1), b.reshape(-1), m, n, k,
                                 _PLACEHOLDER, False, False, out.reshape(-1))
        return True

    def gemm_low(self, form: str, a, b, kind: str, out) -> bool:
        """gemm_nn (form "nn") or gemm_tn ("tn") with b a bfloat16 or float16 buffer (`kind`),
        each value widened exactly inside the kernel's packing (native/gemm_outer.py
        `gemm_outer_low`): the cells of the float32 product on b widened, without the widened
        copy. It runs where gemm_outer's tiles do, returning True; elsewhere it writes nothing
        and returns False. Only cpu-numba has this method."""
        from . import gemm_outer

        m, k = a.shape if form == "nn" else a.shape[::-1]
        n = b.shape[1]
        if not gemm_outer.usable(m, n, k):
            return False
        gemm_outer.gemm_outer_low(form, kind)(m * n * k // 32, a.reshape(-1),
                                              b.view(np.uint16).reshape(-1), m, n, k,
                                              _PLACEHOLDER, False, False, out.reshape(-1))
        return True

    def gemm_nt_chunks(self, a, b, out):
        """out (ceil(K/1024), M, N): the chunk partials of gemm_nt's cells (no pairwise tree)."""
        m, k = a.shape
        n = b.shape[0]
        _gemm_kernel(m, n, k)(m * n * k // 32, a.reshape(-1), b.reshape(-1), m, n, k,
                              _PLACEHOLDER, False, True, out.reshape(-1))

    def row_chunk_folds(self, a, out):
        """out (M, ceil(C/1024)): the fold's chunk partials of every row of a (M, C)."""
        m, c = a.shape
        row_chunk_folds_kernel(m * c, a.reshape(-1), m, c, out.reshape(-1))

    def col_fold(self, a, b, products, out):
        """out[n] = fold over rows m of a[m, n] (with `products`, of the rounded a[m, n] * b[m, n])."""
        m, ncols = a.shape
        col_fold_kernel(m * ncols, a.reshape(-1), (b if products else a).reshape(-1),
                        bool(products), False, False, _PLACEHOLDER, m, ncols, out, out)

    def col_fold_normalized(self, a, x, stats, out_products, out_plain):
        """col_fold(a, h, True, out_products) and col_fold(a, a, False, out_plain) in one pass
        over a, for layer_norm's h = (x - mean) * rstd, each row's (mean, rstd) in stats
        (M, 2): h recomputed with the same two roundings, never stored (dweight and dbias).
        Only cpu-numba has this method."""
        m, ncols = a.shape
        col_fold_kernel(3 * m * ncols, a.reshape(-1), x.reshape(-1), True, True, True,
                        stats.reshape(-1), m, ncols, out_products, out_plain)

    def segment_fold(self, dy, order, starts, rows, out):
        """out[rows[s], :] = fold over q in [starts[s], starts[s+1]) of dy[order[q], :]; out is
        (V, D), its other rows untouched."""
        work = (int(starts[-1]) - int(starts[0])) * dy.shape[1] if starts.size else 0
        segment_fold_kernel(work, dy.reshape(-1), dy.shape[1], order, starts, rows, out.reshape(-1))

    def rms_norm(self, x, w, has_w, eps, y):
        m, d = x.shape
        rms_norm_kernel(m * d, x.reshape(-1), m, d, w if has_w else _PLACEHOLDER, bool(has_w),
                        np.float32(eps), y.reshape(-1))

    def rms_norm_backward(self, dy, x, w, has_w, eps, dx, h):
        """dx; with a weight also h = x * r (for dweight = col_fold(dy, h))."""
        m, d = x.shape
        rms_norm_backward_kernel(m * d, dy.reshape(-1), x.reshape(-1), m, d,
                                 w if has_w else _PLACEHOLDER, bool(has_w), np.float32(eps),
                                 dx.reshape(-1), h.reshape(-1) if has_w else _PLACEHOLDER.copy())

    def relu(self, x, out):
        relu_kernel(x.size, x.reshape(-1), out.reshape(-1))


def load(mode: str, backend: str = "cpu-numba") -> NumbaLayers:
    return NumbaLayers(mode)


HOT_KERNELS = {"layers._gemm_nt": _gemm_nt, "layers._col_fold": _col_fold,
               "layers._segment_fold": _segment_fold}
