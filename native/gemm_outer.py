"""The layers family's GEMM as outer products: a lane of the fold is a K-block of 32 steps.

`gemm_outer(a, b, ...)` computes out[i, j] = fold over k of a[i, k] * b[j, k], the cells
of native/layers.py's `gemm_nt`, with the arguments of its `_gemm_nt` kernel. Lane l of a
cell's chunk adds the rounded products of k = base + l, base + l + 32, ... in ascending k
from -0.0; the 32 lanes then meet in the butterfly a[l] + a[l + off] (off = 16, 8, 4, 2,
1). That tree, walked depth first, visits the lanes in bit-reversed order (0, 16, 8, 24,
4, ...), and after lane number q (in that order) the partial sums waiting for it are
popped as a binary counter pops its carries: each is added as the left operand, as the
butterfly adds it. So a tile of cells runs its lanes one after another, each a plain
32-step outer-product loop: a tile of 4 rows of a by 96 columns of b holds 24 vector
accumulators, each step 6 loads of b, 4 broadcasts of a and 24 lane steps (6 x 64 tiles,
with 6 broadcasts a step, measured 14% slower on AMD Zen 4), and a lane's 24
accumulators meet the stack of at most 5 waiting tiles at its end (in L1). a's lines, 128
bytes apart from step to step, come from L3 for a tile's first lanes, so each lane
prefetches an eighth of a row of the next tile's (8 lines): at 2048^3 on AMD Zen 4 the
fused kernel took 103 ms against 111 without (paired medians of 9 runs; torch's F.linear
94). The broadcasts themselves cost little there: the FMA with its broadcast folded in
(`{1to16}`, inline assembly in a timing-only test) ran at the rate of the separate
broadcast, both about 105 GFLOP/s a core with every operand in L1 or L2. A 3 x 128 tile
(3 broadcasts and 8 loads of b a step) was no better overall: paired medians of 16 runs,
4% faster at 2048^3 and 1-6% slower at (2048, 3072, 768); 2 x 192 (12 loads a step) 11%
slower at 2048^3, and a lane-major packed copy of a slower still (the pass that packs it
costs more than a's strided lines).

The strip of b a tile reads (96 of its rows, one chunk) is packed first, lane by lane
and step by step (bp[(T l + t) * 96 + c] = b[j0 + c, base + 32 t + l], T the steps of a
lane in a chunk of K), so the loop reads
it in order; a is read as stored. The work is claimed in units of a strip by a block of
rows: the strip is packed once per unit and chunk, and a unit's chunk partials wait in
`part` for the pairwise tree over chunks. Packing costs about 5% of a 2048^3 product
with 1024-row blocks, so the rows are cut into as few blocks as give each thread a few
units (`row_blocks`; the caller's thread count, one block at 2048^3 on 2 threads: 4%
faster than two). The last tile of a block overlaps the one
before it (its rows are computed again by the same operations), and the last strip of b
starts at n - 96 and stores only the columns no other strip stores.

`gemm_outer_nn` takes b stored (K, N) (out[i, j] = fold over k of a[i, k] * b[k, j], the
cells of native/gemm_nn.py): only the packing differs, a row of the strip moved as vectors.
`gemm_outer_tn` takes a stored (K, M) as well (out = a^T b, a linear's weight gradient dy^T x
with dy as stored): a tile's four broadcasts a step read one line, a lane's lines lie M
floats apart. The kernel is 3-8% slower than gemm_outer_nn on a's transposed copy, which
costs more than that to make: linear_backward at 2048 rows, 1024 outputs and 256 inputs took
17.5 ms against 23.5, at (2048, 768, 3072) about the same (medians of 9, Zen 4).
`gemm_outer_low(form, kind)` is gemm_outer_nn ("nn") or gemm_outer_tn ("tn") with b given as
bfloat16 or float16 patterns (uint16), each widened exactly as the strip is packed
(simd.vload_bf16 / vload_f16, native/mixed.py's widening): the tiles read the floats the
widened copy would hold, and no copy is made (a linear's backward on the tape's kept
low-precision input and weight, 1-4% faster than widening first, medians of 7, Zen 4).
`gemm_outer` adds each rounded product to its lane; `gemm_outer_fma` rounds the lane step
once (`vfma`), the same bits wherever every product is exact (native/mixed_gemm.py,
contracts/mixed.md clause 10), which its caller has established. `FAST` says where this
kernel runs: AVX-512 targets (32 vector registers hold the tile), m >= 4, n >= 96; the
caller runs layers' `gemm_nt` elsewhere.

Reproducibility: every cell is `mojolike.dot(a[i], b[j])` on the library's one tree, the
oracle's bits, for every thread count, row blocks and strip (tests/test_gemm_outer.py).

>>> import numpy as np
>>> a = np.ones((4, 40), np.float32); b = np.full((96, 40), 0.5, np.float32)
>>> out = np.empty(4 * 96, np.float32)
>>> gemm_outer(0, a.reshape(-1), b.reshape(-1), 4, 96, 40, np.zeros(16, np.float32), False, False, out)
>>> float(out[0]), float(out[-1])
(20.0, 20.0)
"""
from __future__ import annotations

import numpy as np
from numba import boolean, int64, njit, prange, types, uint16, void

from ..oracles.fold import CHUNK, LANES
from .fold import NEG_ZERO
from .layers import _STRICT, F1, IN1, _claim, _pairwise_strided, _pairwise_vectors
from .retarget import renamed, retarget
from .simd import (vadd, vfma, vload, vload_bf16, vload_f16, vmul, vprefetch, vsplat,
                   vstore)
from .target import has_fma, has_zmm
from .threads import PARALLEL_MIN, Twin, num_threads

ROWS = 4  # rows of a per tile: 4 x 6 accumulators, 6 vectors of b and a broadcast fit 32 registers
STRIP = 96  # columns of the output (rows of b) per tile: 6 vectors
ROW_BLOCK = 2048  # rows per unit of work at most: a strip packed once per chunk serves them
MIN_BLOCK = 256  # rows per unit at least, however many threads
UNITS_PER_THREAD = 4  # units a thread should find, so that none waits long for the last
SIG = void(IN1, IN1, int64, int64, int64, IN1, boolean, boolean, F1, int64)
IN_HALF = types.Array(uint16, 1, "C", readonly=True)
FAST = has_zmm()
HAS_FMA = has_fma()  # where the fused variant may run (its callers check it)
# the lanes in the order the butterfly's tree meets them depth first: q -> bit-reversed q
ORDER = np.array([int(f"{q:05b}"[::-1], 2) for q in range(LANES)], np.int64)
TILE = ROWS * STRIP  # floats of one tile in the stack


def row_blocks(m: int, n: int, threads: int) -> int:
    """How many blocks the m rows are cut into: as few as give `threads` threads
    UNITS_PER_THREAD units each (a unit packs its strip of b once per chunk, so fewer blocks
    pack less), blocks of at most ROW_BLOCK and at least MIN_BLOCK rows (or m)."""
    nstrips = (n + STRIP - 1) // STRIP
    want = (UNITS_PER_THREAD * threads + nstrips - 1) // nstrips
    return max((m + ROW_BLOCK - 1) // ROW_BLOCK, min(want, (m + MIN_BLOCK - 1) // MIN_BLOCK))


def usable(m: int, n: int, kk: int) -> bool:
    """Whether gemm_outer takes an (m, kk) x (n, kk) product on this target."""
    return FAST and m >= ROWS and n >= STRIP and kk >= 1


@njit(inline="always", **_STRICT)
def _step(x, v, c):
    """c + x * v per vector: each product rounded, then added to its lane."""
    return (vadd(c[0], vmul(x, v[0])), vadd(c[1], vmul(x, v[1])), vadd(c[2], vmul(x, v[2])),
            vadd(c[3], vmul(x, v[3])), vadd(c[4], vmul(x, v[4])), vadd(c[5], vmul(x, v[5])))


@njit(inline="always", **_STRICT)
def _step_fma(x, v, c):
    """The same rounded once per lane step: exact products only."""
    return (vfma(x, v[0], c[0]), vfma(x, v[1], c[1]), vfma(x, v[2], c[2]), vfma(x, v[3], c[3]),
            vfma(x, v[4], c[4]), vfma(x, v[5], c[5]))


@njit(inline="always", **_STRICT)
def _at(a, i):
    """a[i] splat, for an index known to be in range (unsigned: no wraparound test)."""
    return vsplat(a[np.uint64(i)])


@njit(inline="always", **_STRICT)
def _pop(s, o, c):
    """The waiting row s[o : o + 96] (the left operand) plus c."""
    return (vadd(vload(s, o), c[0]), vadd(vload(s, o + 16), c[1]), vadd(vload(s, o + 32), c[2]),
            vadd(vload(s, o + 48), c[3]), vadd(vload(s, o + 64), c[4]),
            vadd(vload(s, o + 80), c[5]))


@njit(inline="always", **_STRICT)
def _put(s, o, c):
    for v in range(6):
        vstore(s, o + 16 * v, c[v])


@njit(inline="always", **_STRICT)
def _tile(a, rs, ks, ra, bp, tmax, steps, rem, stack, order, dst, o):
    """The chunk partials of a 4 x 96 tile into dst[o + 96 r : o + 96 r + 96] (row r): a[i, k]
    at i * rs + k * ks (`_a_strides`), the tile's first row at the chunk's first k at ra,
    the strip packed in bp; the chunk has `steps` whole steps and `rem` lanes with one step
    more."""
    z = vsplat(NEG_ZERO)
    z6 = (z, z, z, z, z, z)
    c0 = c1 = c2 = c3 = z6
    for q in range(LANES):
        lane = order[q]
        count = steps + 1 if lane < rem else steps
        c0 = c1 = c2 = c3 = z6
        ka = ra + lane * ks
        _prefetch(a, rs, ra, q)
        kb = lane * tmax * STRIP
        step = LANES * ks
        for t in range(count):
            k = ka + step * t
            p = kb + STRIP * t
            v = (vload(bp, p), vload(bp, p + 16), vload(bp, p + 32), vload(bp, p + 48),
                 vload(bp, p + 64), vload(bp, p + 80))
            c0 = _step(_at(a, k), v, c0)
            c1 = _step(_at(a, k + rs), v, c1)
            c2 = _step(_at(a, k + 2 * rs), v, c2)
            c3 = _step(_at(a, k + 3 * rs), v, c3)
        level = 0
        carry = q
        while carry & 1:  # the tiles this lane completes, each the left operand
            w = level * TILE
            c0, c1 = _pop(stack, w, c0), _pop(stack, w + STRIP, c1)
            c2, c3 = _pop(stack, w + 2 * STRIP, c2), _pop(stack, w + 3 * STRIP, c3)
            level += 1
            carry >>= 1
        if q < LANES - 1:
            w = level * TILE
            _put(stack, w, c0)
            _put(stack, w + STRIP, c1)
            _put(stack, w + 2 * STRIP, c2)
            _put(stack, w + 3 * STRIP, c3)
    _put(dst, o, c0)
    _put(dst, o + STRIP, c1)
    _put(dst, o + 2 * STRIP, c2)
    _put(dst, o + 3 * STRIP, c3)


@njit(inline="always", **_STRICT)
def _prefetch(a, rs, ra, q):
    """Before lane number q of a tile: an eighth of a row's chunk of the next tile's a (8
    lines; they may lie past a's end, a prefetch never faults), so the next tile finds a in
    L1. (For a stored (K, M) the next tile's rows share the current tile's lines, and
    these addresses fall on one row of a: no help, no harm.)"""
    pf = ra + 4 * rs + (q >> 3) * rs + (q & 7) * 128
    for f in range(8):
        vprefetch(a, pf + 16 * f)


@njit(inline="always", **_STRICT)
def _a_strides(m, kk):
    """(row stride, k stride) of a stored (M, K)."""
    return kk, 1


@njit(inline="always", **_STRICT)
def _a_strides_t(m, kk):
    """(row stride, k stride) of a stored transposed, (K, M)."""
    return 1, m


@njit(inline="always", **_STRICT)
def _pack(b, n, kk, j0, base, end, tmax, bp):
    """bp[(tmax l + t) * 96 + c] = b[j0 + c, base + 32 t + l] for the chunk [base, end)."""
    for c in range(STRIP):
        row = (j0 + c) * kk
        for k in range(base, end):
            d = k - base
            bp[((d & 31) * tmax + (d >> 5)) * STRIP + c] = b[row + k]


@njit(inline="always", **_STRICT)
def _pack_nn(b, n, kk, j0, base, end, tmax, bp):
    """The same strip of b stored (K, N): bp[(tmax l + t) * 96 + c] = b[base + 32 t + l, j0 + c],
    a row's 96 floats moved as 6 vectors."""
    for k in range(base, end):
        d = k - base
        dst = ((d & 31) * tmax + (d >> 5)) * STRIP
        src = k * n + j0
        for v in range(0, STRIP, 16):
            vstore(bp, dst + v, vload(b, src + v))


@njit(**_STRICT)
def _unit(a, b, m, n, kk, i_lo, i_hi, j0, c_lo, bias, has_bias, chunk_partials, out, tmax, bp,
          stack, part):
    """Rows [i_lo, i_hi) by the strip of columns [j0, j0 + 96), storing columns from j0 + c_lo:
    each chunk's tiles into `part` (chunk by chunk, a row's 96 cells together), then each
    cell's pairwise tree over its chunk partials (+ bias[j]), or with `chunk_partials` the
    partials themselves into out (nchunks, M, N)."""
    nchunks = (kk + CHUNK - 1) // CHUNK
    rows = i_hi - i_lo
    rs, ks = _a_strides(m, kk)
    for ch in range(nchunks):
        base = CHUNK * ch
        end = min(base + CHUNK, kk)
        _pack(b, n, kk, j0, base, end, tmax, bp)
        at = ch * rows * STRIP
        i0 = i_lo
        while i0 < i_hi:
            i = min(i0, i_hi - ROWS)  # the last tile overlaps the one before it
            _tile(a, rs, ks, i * rs + base * ks, bp, tmax, (end - base) // LANES,
                  (end - base) % LANES, stack, ORDER, part, at + (i - i_lo) * STRIP)
            i0 += ROWS
    stride = rows * STRIP  # between a cell's chunk partials in `part`
    for i in range(i_lo, i_hi):
        for c0 in range(0, STRIP, 16):
            o = (i - i_lo) * STRIP + c0
            j = j0 + c0
            if chunk_partials:
                for c in range(max(c0, c_lo), c0 + 16):
                    for ch in range(nchunks):
                        out[(ch * m + i) * n + j + c - c0] = part[ch * stride + o + c - c0]
            elif c0 >= c_lo:  # 16 cells' trees side by side: the same additions per lane
                v = _pairwise_vectors(part, o, stride, nchunks)
                vstore(out, i * n + j, vadd(v, vload(bias, j)) if has_bias else v)
            else:
                for c in range(max(c0, c_lo), c0 + 16):
                    v = _pairwise_strided(part, o + c - c0, stride, nchunks)
                    out[i * n + j + c - c0] = v + bias[j + c - c0] if has_bias else v


@njit(SIG, parallel=True, **_STRICT)
def _gemm_outer(a, b, m, n, kk, bias, has_bias, chunk_partials, out, nblocks):
    """out (M, N) = the cells (layers' `_gemm_nt` arguments; m >= 4, n >= 96), the rows in
    `nblocks` blocks (`row_blocks`). Threads claim units of a strip by a block of rows until
    none is left."""
    nchunks = (kk + CHUNK - 1) // CHUNK
    nstrips = (n + STRIP - 1) // STRIP
    mb = (m + nblocks - 1) // nblocks  # >= ROWS when m >= ROWS (row_blocks)
    units = nstrips * nblocks
    tmax = (min(kk, CHUNK) + LANES - 1) // LANES  # a lane's packed steps: a short K packs less
    claimed = np.zeros(1, np.int64)
    for _ in prange(units):  # the first iteration on each thread takes all it can
        u = _claim(claimed)
        if u >= units:
            continue
        bp = np.empty(LANES * tmax * STRIP, np.float32)
        stack = np.empty(5 * TILE, np.float32)
        part = np.empty(nchunks * mb * STRIP, np.float32)
        while u < units:
            s = u // nblocks
            i_lo = u % nblocks * mb
            i_hi = min(i_lo + mb, m)
            if i_hi - i_lo < ROWS:  # a short last block reaches back into the one before
                i_lo = i_hi - ROWS
            j0 = min(s * STRIP, n - STRIP)
            _unit(a, b, m, n, kk, i_lo, i_hi, j0, s * STRIP - j0, bias, has_bias, chunk_partials,
                  out, tmax, bp, stack, part)
            u = _claim(claimed)


# the same source with the fused lane step (native/retarget.py): the order cannot drift
_tile_fma = retarget(_tile, njit(inline="always", **_STRICT), _step=_step_fma)
_unit_fma = njit(**_STRICT)(renamed(retarget(_unit, _tile=_tile_fma), "_unit_fma"))
_gemm_outer_fma = njit(SIG, parallel=True, **_STRICT)(
    renamed(retarget(_gemm_outer, _unit=_unit_fma), "_gemm_outer_fma"))

# b stored (K, N) (native/gemm_nn.py's operands): the same tiles from another packing
_unit_nn = njit(**_STRICT)(renamed(retarget(_unit, _pack=_pack_nn), "_unit_nn"))
_gemm_outer_nn = njit(SIG, parallel=True, **_STRICT)(
    renamed(retarget(_gemm_outer, _unit=_unit_nn), "_gemm_outer_nn"))

# a stored (K, M) too (out = a^T b: a linear's weight gradient dy^T x, no transposed copy)
_unit_tn = njit(**_STRICT)(renamed(retarget(_unit, _pack=_pack_nn, _a_strides=_a_strides_t),
                                   "_unit_tn"))
_gemm_outer_tn = njit(SIG, parallel=True, **_STRICT)(
    renamed(retarget(_gemm_outer, _unit=_unit_tn), "_gemm_outer_tn"))


# b low-precision patterns (uint16), each widened exactly as the strip is packed (simd's
# vload_bf16 / vload_f16): a linear's backward on a bfloat16 / float16 input and weight
# keeps no float32 copy of either
_pack_nn_bf16 = retarget(_pack_nn, njit(inline="always", **_STRICT), vload=vload_bf16)
_pack_nn_f16 = retarget(_pack_nn, njit(inline="always", **_STRICT), vload=vload_f16)
SIG_LOW = void(IN1, IN_HALF, int64, int64, int64, IN1, boolean, boolean, F1, int64)
_LOW: dict = {}  # (form, kind) -> its OuterTwin, once requested


class OuterTwin(Twin):
    """The kernel's `Twin`, called as layers' gemm_nt_kernel (work first: the multiply-adds
    over 32, then layers' `_gemm_nt` arguments); it adds the row blocks (`row_blocks`) for
    the threads that will run the call, one on the calling thread."""

    def __call__(self, work, a, b, m, n, kk, bias, has_bias, chunk_partials, out):
        threads = 1 if work < PARALLEL_MIN else num_threads()
        return super().__call__(work, a, b, m, n, kk, bias, has_bias, chunk_partials, out,
                                row_blocks(m, n, threads))


gemm_outer, gemm_outer_fma = OuterTwin(_gemm_outer), OuterTwin(_gemm_outer_fma)
gemm_outer_nn, gemm_outer_tn = OuterTwin(_gemm_outer_nn), OuterTwin(_gemm_outer_tn)


def gemm_outer_low(form: str, kind: str) -> OuterTwin:
    """gemm_outer_nn (form "nn") or gemm_outer_tn ("tn") with b as `kind`'s patterns
    ("bfloat16" or "float16", uint16), compiled on its first request: a process that never
    trains in low precision compiles none of the four."""
    twin = _LOW.get((form, kind))
    if twin is None:
        pack = _pack_nn_bf16 if kind == "bfloat16" else _pack_nn_f16
        strides = _a_strides if form == "nn" else _a_strides_t
        unit = njit(**_STRICT)(renamed(retarget(_unit, _pack=pack, _a_strides=strides),
                                       f"_unit_{form}_{kind}"))
        kernel = njit(SIG_LOW, parallel=True, **_STRICT)(
            renamed(retarget(_gemm_outer, _unit=unit), f"_gemm_outer_{form}_{kind}"))
        twin = _LOW[form, kind] = OuterTwin(kernel)
    return twin


HOT_KERNELS = {"gemm_outer._gemm_outer": (_gemm_outer, ("mulps", "addps")),
               "gemm_outer._gemm_outer_nn": (_gemm_outer_nn, ("mulps", "addps")),
               "gemm_outer._gemm_outer_tn": (_gemm_outer_tn, ("mulps", "addps"))}
FMA_KERNELS = {"gemm_outer._gemm_outer_fma": _gemm_outer_fma}
