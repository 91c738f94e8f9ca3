"""The layers family's GEMM with b stored (K, N) on the CPU: out[i, j] = fold over k of
a[i, k] * b[k, j] (native/layers.py's `gemm_nn`, cpu-numba only).

Each vector holds 16 output cells of one row (16 columns of b), so the fold's tree runs
across registers, never across lanes: lane l of a cell's chunk is one accumulator, the
rounded products a[i, k] * b[k, j..j+16] for k = base + l, base + 32 + l, ... added in
ascending k from -0.0, and the butterfly a[l] + a[l + off] (off = 16, 8, 4, 2, 1) is one
vector addition per pair of lanes. Lanes l and l + 16 run in one loop (the butterfly's
first level); the 8 lanes of a third-level sum are inlined once and a loop visits the
4 such groups depth first, so few of a cell's vectors are live at a time: a tile of 4
rows by 16 columns shares each load of b and fits AVX-512's 32 registers. On targets with
16 (AVX2, SSE2), where a tile could hold one row, gemm_nt on b's transpose measured faster,
so `FAST` is False there and native/layers.py's `gemm_nn` takes that path. Several chunks
end in the pairwise tree over their partials, per cell. The operand b is read as stored: where gemm_nt needs it
transposed (matmul's b, the backward's dY), this kernel needs no copy, and a short K
(matmul's head dimension) pays for no horizontal tree. A strip of b is first packed lane
by lane (its rows N floats apart would share a few cache sets when N is a multiple of a
large power of two), and a block's cells go out row by row.

Threads claim blocks of ROW_BLOCK rows by COL_BLOCK columns; a block's last tile of rows
and last strip of columns overlap its earlier ones rather than run short (the overlapped
cells are computed again, with the same operations, by the same thread), so a cell's
operations never depend on the block it falls in, nor on the thread.

Reproducibility: every cell is `mojolike.dot(a[i], b[:, j])` on the library's one tree,
the oracle's bits, for every thread count and block.

>>> import numpy as np
>>> out = np.empty((2, 16), np.float32)
>>> a = np.float32([[1, 2], [3, 4]]); b = np.arange(32, dtype=np.float32).reshape(2, 16)
>>> gemm_nn(2 * 16 * 2, a.reshape(-1), b.reshape(-1), 2, 16, 2, out.reshape(-1))
>>> out[:, :3].tolist()
[[32.0, 35.0, 38.0], [64.0, 71.0, 78.0]]
"""
from __future__ import annotations

import numpy as np
from numba import int64, njit, prange, void

from ..oracles.fold import CHUNK, LANES
from .fold import NEG_ZERO
from .layers import _STRICT, F1, IN1, _claim, _pairwise_vectors
from .simd import WIDTH, vadd, vload, vmul, vsplat, vstore
from .target import has_zmm
from .threads import Twin

TILE_ROWS = 4  # a tile row's live vectors, 4 times, fit AVX-512's 32 registers
FAST = has_zmm()  # elsewhere (16 registers, a row a tile) gemm_nt on b's transpose is faster
ROW_BLOCK = 64  # rows of a per block
COL_BLOCK = 256  # columns of b per block (16 vectors)


@njit(inline="always", **_STRICT)
def _at(a, i):
    """a[i] for an index known to be in range: unsigned, so numba adds no wraparound test."""
    return vsplat(a[np.uint64(i)])


@njit(inline="always", **_STRICT)
def _products4(a, ra, k, v):
    """The rounded products a[row, k] * v for the tile's 4 rows."""
    return (vmul(_at(a, ra[0] + k), v), vmul(_at(a, ra[1] + k), v), vmul(_at(a, ra[2] + k), v),
            vmul(_at(a, ra[3] + k), v))


@njit(inline="always", **_STRICT)
def _add4(x, y):
    return vadd(x[0], y[0]), vadd(x[1], y[1]), vadd(x[2], y[2]), vadd(x[3], y[3])


@njit(inline="always", **_STRICT)
def _off16_4(a, pk, ra, bo, j, count):
    """t_j = s_j + s_(j+16) (j < 16), the butterfly's first level, for 4 rows (offsets ra of
    the chunk's first k in a) by the 16 columns of a strip of b packed lane by lane (bo: the
    chunk's offset in pk). Lane s_l adds its products in ascending k from -0.0, and
    -0.0 + p is p for every p, so a lane's first product is its start and a lane with no
    product adds nothing. Both lanes run in one loop; lane j may have one step more."""
    hi = j + 16
    z = vsplat(NEG_ZERO)
    s_lo, s_hi = (z, z, z, z), (z, z, z, z)
    o_lo = bo + j * LANES * WIDTH  # a lane's rows of b, packed one after the other
    o_hi = bo + hi * LANES * WIDTH
    k = j
    if hi < count:
        s_lo = _products4(a, ra, j, vload(pk, o_lo))
        s_hi = _products4(a, ra, hi, vload(pk, o_hi))
        k += LANES
        while k + 16 < count:
            o_lo += WIDTH
            o_hi += WIDTH
            s_lo = _add4(s_lo, _products4(a, ra, k, vload(pk, o_lo)))
            s_hi = _add4(s_hi, _products4(a, ra, k + 16, vload(pk, o_hi)))
            k += LANES
        o_lo += WIDTH
    if k < count:
        s_lo = _add4(s_lo, _products4(a, ra, k, vload(pk, o_lo)))
    return _add4(s_lo, s_hi)


@njit(inline="always", **_STRICT)
def _off8_4(a, pk, ra, bo, j, count):
    return _add4(_off16_4(a, pk, ra, bo, j, count), _off16_4(a, pk, ra, bo, j + 8, count))


@njit(inline="always", **_STRICT)
def _group4(a, pk, ra, bo, j, count):
    """v_j = u_j + u_(j+4), the butterfly's third level (j < 4), from its 8 lanes."""
    return _add4(_off8_4(a, pk, ra, bo, j, count), _off8_4(a, pk, ra, bo, j + 4, count))


@njit(inline="always", **_STRICT)
def _chunk4(a, pk, ra, bo, count):
    """The chunk partials of a 4 x 16 tile: (v0 + v2) + (v1 + v3), the butterfly's last two
    levels over its groups of 8 lanes, depth first (a loop: each group is compiled once)."""
    z = vsplat(NEG_ZERO)
    v_held, w_held, x = (z, z, z, z), (z, z, z, z), (z, z, z, z)
    for g in range(4):
        v = _group4(a, pk, ra, bo, (g & 1) * 2 + (g >> 1), count)  # v0, v2, v1, v3
        if g & 1 == 0:
            v_held = v
        elif g == 1:
            w_held = _add4(v_held, v)
        else:
            x = _add4(w_held, _add4(v_held, v))
    return x


@njit(inline="always", **_STRICT)
def _pack(b, n, kk, j, pk):
    """Columns j..j+16 of b (K, N) into pk, chunk by chunk and lane by lane: row base + 32 t + l
    at pk[16 (base + 32 l + t)], so a lane's rows are contiguous."""
    for k in range(kk):
        base = k // CHUNK * CHUNK
        r = k - base
        vstore(pk, WIDTH * (base + LANES * (r % LANES) + r // LANES), vload(b, k * n + j))


@njit(inline="always", **_STRICT)
def _tile(a, pk, m, kk, i0, part):
    """Rows i0..i0+4 (clamped to the last row: a short matrix repeats it, stored once) by the
    packed strip pk: every chunk of K, then the pairwise tree over the chunk partials;
    part[16 r : 16 r + 16] holds row r's cells."""
    nchunks = (kk + CHUNK - 1) // CHUNK
    rows = (i0, min(i0 + 1, m - 1), min(i0 + 2, m - 1), min(i0 + 3, m - 1))
    for ch in range(nchunks):
        base = ch * CHUNK
        ra = (rows[0] * kk + base, rows[1] * kk + base, rows[2] * kk + base, rows[3] * kk + base)
        x0, x1, x2, x3 = _chunk4(a, pk, ra, base * WIDTH, min(CHUNK, kk - base))
        vstore(part, WIDTH * ch, x0)  # row r's chunk partials at part[16 (r nchunks + ch)]
        vstore(part, WIDTH * (nchunks + ch), x1)
        vstore(part, WIDTH * (2 * nchunks + ch), x2)
        vstore(part, WIDTH * (3 * nchunks + ch), x3)
    for r in range(4):  # row r's partials are contiguous vectors: the tree with stride 16
        vstore(part, WIDTH * r, _pairwise_vectors(part, WIDTH * r * nchunks, WIDTH, nchunks))


@njit(_nrt=False, **_STRICT)  # allocates nothing: no reference counts in the tile's loops
def _gemm_block(a, b, m, n, kk, i_lo, i_hi, j_lo, j_hi, pk, part, ob, out):
    """Rows [i_lo, i_hi) by columns [j_lo, j_hi): strip by strip of 16 columns, packed, then
    the rows' tiles, into ob (the block's cells, row by row); then ob's rows into out, whole
    (strips of 16 cells to rows 4 KiB apart made the stores 40% of matmul's time). One
    compiled function that both twins call, so the serial twin's registers are allocated
    as the parallel one's are (inlined into its loops, the tile spilled)."""
    width = j_hi - j_lo
    for js in range(0, width, WIDTH):
        j = min(js, width - WIDTH)  # a short last strip overlaps the one before
        _pack(b, n, kk, j_lo + j, pk)
        for i_s in range(i_lo, i_hi, TILE_ROWS):
            # and so does a short last tile, unless the matrix has fewer rows
            i = min(i_s, i_hi - TILE_ROWS) if i_hi - i_lo >= TILE_ROWS else i_s
            _tile(a, pk, m, kk, i, part)
            for r in range(min(TILE_ROWS, m - i)):
                vstore(ob, (i + r - i_lo) * width + j, vload(part, WIDTH * r))
    for i in range(i_lo, i_hi):
        for js in range(0, width, WIDTH):
            j = min(js, width - WIDTH)
            vstore(out, i * n + j_lo + j, vload(ob, (i - i_lo) * width + j))


@njit(void(IN1, IN1, int64, int64, int64, F1), parallel=True, **_STRICT)
def _gemm_nn(a, b, m, n, kk, out):
    """out (M, N) = a (M, K) b (K, N), N >= 16. Threads claim blocks until none is left, so
    one whose core is busy takes fewer."""
    nchunks = (kk + CHUNK - 1) // CHUNK
    nbi = max(1, m // ROW_BLOCK)  # the last block takes the rows left over: at least one tile
    nbj = max(1, n // COL_BLOCK)  # and at least one strip
    nblocks = nbi * nbj
    claimed = np.zeros(1, np.int64)
    for _ in prange(nblocks):  # the first iteration on each thread takes all it can
        blk = _claim(claimed)
        if blk >= nblocks:
            continue
        part = np.empty(WIDTH * TILE_ROWS * nchunks, np.float32)
        # zeros: lanes past a short last chunk are never read, but defined
        pk = np.zeros(WIDTH * CHUNK * nchunks, np.float32)
        # a block's cells: fewer than 2 ROW_BLOCK rows by 2 COL_BLOCK columns
        ob = np.empty(min(m, 2 * ROW_BLOCK) * min(n, 2 * COL_BLOCK), np.float32)
        while blk < nblocks:
            bi, bj = blk // nbj, blk % nbj
            i_lo, j_lo = bi * ROW_BLOCK, bj * COL_BLOCK
            _gemm_block(a, b, m, n, kk, i_lo, m if bi == nbi - 1 else i_lo + ROW_BLOCK, j_lo,
                        n if bj == nbj - 1 else j_lo + COL_BLOCK, pk, part, ob, out)
            blk = _claim(claimed)


# called with its work first (multiply-adds over 32, as the other GEMM counts it)
gemm_nn = Twin(_gemm_nn)

HOT_KERNELS = {"gemm_nn._gemm_nn": (_gemm_nn, ("mulps", "addps"))}
