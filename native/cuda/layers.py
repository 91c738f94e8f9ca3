"""CUDA kernels for the layers family: the fold-tree GEMM, row and column folds, RMSNorm, relu.

GEMM (`gemm_nt`): a warp takes a strip of up to STRIP cells of one output row.
Lane l of the warp accumulates, for chunk c of a cell, the rounded products
a[i, k] * b[j, k] at k = 1024c + 32t + l, t = 0, 1, ... from -0.0 (a warp reads
128 contiguous bytes of each operand per step; a's loads serve every cell of the
strip), the shuffle-down butterfly 16/8/4/2/1 leaves the chunk partial in lane 0,
and lane 0 carries the pairwise tree over chunks as a binary counter (at most one
pending partial per level, so O(log chunks) floats): merging whenever the chunk
count gains a trailing zero bit, then folding the pending partials from the newest
down, gives the level-by-level tree's additions, operands in the same order.

Column folds (`col_fold`, `segment_fold`): a thread per output column keeps the
32 lane accumulators (lane = position mod 32 within chunks of 1024 positions);
neighbouring threads read neighbouring columns. RMSNorm: a block per row, its warps
taking the row's chunks, thread 0 the pairwise tree.

Under the simulator (a Python thread per CUDA thread) a block is one warp and the
grid one block; every loop is grid- or warp-stride, so geometry never reaches the bits.

Reproducibility: every float operation is a `prims` call (libdevice `_rn` on a GPU,
no fma; tests/test_ptx_lint.py checks the PTX), and every sum's tree depends on
its length alone: the oracle's bits (oracles/layers.py) on any device.

>>> import numpy as np
>>> from mojolike.core import registry
>>> k = registry.kernels("example", "layers", "cuda-sim")  # a worker process unless this one simulates
>>> out = np.empty((1, 2), np.float32)
>>> k.gemm_nt(np.float32([[1, 2]]), np.float32([[3, 4], [0.5, 0.25]]), np.float32([0.5, -1]), True, out)
>>> out.tolist()
[[11.5, 0.0]]
"""
from __future__ import annotations

import numpy as np
from numba import boolean, cuda, float32, int64, void

from ...oracles.fold import CHUNK, LANES
from ..calls import LayersCalls
from .base import THREADS, CudaBase, device, grid
from .fold import NEG_ZERO
from .prims import WARPS, add, div, mul, shfl_down, sqrt, sub, warp_scratch

STRIP = 4  # cells of one output row per warp
SHORT_K = 64  # up to this K a thread computes a whole cell (gemm_cells_kernel)
STACK = 32  # pending partials of the binary counter: any chunk count below 2**32
STRIP_STACKS = STRIP * STACK  # local array sizes are compile-time constants
LANES_STACK = LANES + STACK
ZERO = np.float32(0.0)
ONE = np.float32(1.0)


@device
def _butterfly(scratch, tid, acc):
    """The fold's lane combine a[j] += a[j + off], off = 16..1, across the warp: lane 0's result."""
    off = 16
    while off >= 1:
        acc = add(acc, shfl_down(scratch, tid, acc, off))
        off = off // 2
    return acc


@device
def _push(stack, base, depth, c, p):
    """Chunk partial p, the c-th of its sum, onto the counter at stack[base:]; the new depth."""
    m = c + 1
    while m & 1 == 0:  # two subtrees of one size: their sum is the next level's partial
        depth -= 1
        p = add(stack[base + depth], p)
        m = m >> 1
    stack[base + depth] = p
    return depth + 1


@device
def _finish(stack, base, depth):
    """The pairwise tree's result: pending partials folded from the newest (an odd carry) down."""
    r = stack[base + depth - 1]
    for d in range(depth - 2, -1, -1):
        r = add(stack[base + d], r)
    return r


@device
def _pairwise(p, k):
    """The pairwise tree over p[0:k], level by level in place (one thread)."""
    while k > 1:
        h = k // 2
        for i in range(h):
            p[i] = add(p[2 * i], p[2 * i + 1])
        if k % 2 == 1:
            p[h] = p[k - 1]
            k = h + 1
        else:
            k = h
    return p[0]


def gemm_kernel(a, b, m, n, kk, bias, has_bias, chunk_out, out):
    """out[i*n + j] = fold_k a[i, k] * b[j, k] (+ bias[j]); with chunk_out, out[(c*m + i)*n + j]
    = chunk c's partial of that cell (a (M, K), b (N, K), flat)."""
    scratch = warp_scratch()  # used only by the simulator's shuffle
    tid = cuda.threadIdx.x
    lane = tid & 31
    nchunks = (kk + CHUNK - 1) // CHUNK
    strips = (n + STRIP - 1) // STRIP
    acc = cuda.local.array(STRIP, float32)
    stack = cuda.local.array(STRIP_STACKS, float32)  # lane 0's counters, one per cell
    # warp-stride over strips: a warp's lanes take the same trips, so all shuffle together
    for s in range(cuda.blockIdx.x * WARPS + (tid >> 5), m * strips, cuda.gridDim.x * WARPS):
        i = s // strips
        j0 = (s % strips) * STRIP
        cells = min(STRIP, n - j0)  # uniform across the warp
        depth = 0
        for c in range(nchunks):
            base = c * CHUNK
            steps = (min(base + CHUNK, kk) - base + LANES - 1) // LANES
            for q in range(STRIP):
                acc[q] = NEG_ZERO
            for t in range(steps):
                k = base + t * LANES + lane
                if k < kk:  # padded slots add -0.0: skipping them is the same
                    x = a[i * kk + k]
                    for q in range(STRIP):
                        if q < cells:
                            acc[q] = add(acc[q], mul(x, b[(j0 + q) * kk + k]))
            top = depth
            for q in range(STRIP):
                if q < cells:
                    p = _butterfly(scratch, tid, acc[q])
                    if lane == 0:
                        if chunk_out:
                            out[(c * m + i) * n + j0 + q] = p
                        else:
                            top = _push(stack, q * STACK, depth, c, p)
            depth = top  # every cell's counter has the same shape
        if lane == 0 and not chunk_out:
            for q in range(STRIP):
                if q < cells:
                    v = _finish(stack, q * STACK, depth)
                    if has_bias:
                        v = add(v, bias[j0 + q])
                    out[i * n + j0 + q] = v


def gemm_cells_kernel(a, b, m, n, kk, bias, has_bias, chunk_out, out):
    """gemm_kernel's results with a thread per cell, its 32 lanes in local memory: chosen for a
    short K (a cell is then little work, and a warp per strip would spend it on shuffles)."""
    lanes = cuda.local.array(LANES_STACK, float32)
    nchunks = (kk + CHUNK - 1) // CHUNK
    for cell in range(cuda.grid(1), m * n, cuda.gridsize(1)):
        i = cell // n
        j = cell % n
        depth = 0
        for c in range(nchunks):
            for lane in range(LANES):
                lanes[lane] = NEG_ZERO
            for k in range(c * CHUNK, min(c * CHUNK + CHUNK, kk)):
                lanes[k & 31] = add(lanes[k & 31], mul(a[i * kk + k], b[j * kk + k]))
            p = _lane_butterfly(lanes)
            if chunk_out:
                out[(c * m + i) * n + j] = p
            else:
                depth = _push(lanes, LANES, depth, c, p)
        if not chunk_out:
            v = _finish(lanes, LANES, depth)
            if has_bias:
                v = add(v, bias[j])
            out[i * n + j] = v


@device
def _lane_butterfly(lanes):
    """The fold's butterfly over lanes[0:32] in one thread: a[j] += a[j + off], off = 16..1."""
    off = 16
    while off >= 1:
        for lane in range(off):
            lanes[lane] = add(lanes[lane], lanes[lane + off])
        off = off // 2
    return lanes[0]


def row_chunks_kernel(a, m, cols, out):
    """out[i*nchunks + c] = the fold's chunk-c partial of row i of a (M, cols), a warp per chunk."""
    scratch = warp_scratch()
    tid = cuda.threadIdx.x
    lane = tid & 31
    nchunks = (cols + CHUNK - 1) // CHUNK
    for w in range(cuda.blockIdx.x * WARPS + (tid >> 5), m * nchunks, cuda.gridDim.x * WARPS):
        i = w // nchunks
        base = (w % nchunks) * CHUNK
        end = min(base + CHUNK, cols)
        acc = NEG_ZERO
        for t in range((end - base + LANES - 1) // LANES):
            k = base + t * LANES + lane
            if k < end:
                acc = add(acc, a[i * cols + k])
        acc = _butterfly(scratch, tid, acc)
        if lane == 0:
            out[w] = acc


@device
def _column_fold(a, b, products, order, use_order, start, count, ncols, j, lanes):
    """fold over positions q < count of y = a[row, j] (or the rounded a[row, j] * b[row, j]),
    row = order[start + q] (q itself without an order); lanes holds 32 + STACK floats."""
    depth = 0
    for c in range((count + CHUNK - 1) // CHUNK):
        for lane in range(LANES):
            lanes[lane] = NEG_ZERO
        for q in range(c * CHUNK, min(c * CHUNK + CHUNK, count)):
            row = order[start + q] if use_order else q
            y = a[row * ncols + j]
            if products:
                y = mul(y, b[row * ncols + j])
            lanes[q & 31] = add(lanes[q & 31], y)
        depth = _push(lanes, LANES, depth, c, _lane_butterfly(lanes))
    return _finish(lanes, LANES, depth)


def col_fold_kernel(a, b, products, m, ncols, order, out):
    """out[j] = fold over rows of a[:, j] (or of a * b), a thread per column."""
    lanes = cuda.local.array(LANES_STACK, float32)
    for j in range(cuda.grid(1), ncols, cuda.gridsize(1)):
        out[j] = _column_fold(a, b, products, order, False, 0, m, ncols, j, lanes)


def segment_fold_kernel(dy, width, order, starts, rows, out):
    """out[rows[s]*width + j] = fold over q in [starts[s], starts[s+1]) of dy[order[q], j],
    a thread per (segment, column)."""
    lanes = cuda.local.array(LANES_STACK, float32)
    for w in range(cuda.grid(1), rows.size * width, cuda.gridsize(1)):
        s = w // width
        j = w % width
        out[rows[s] * width + j] = _column_fold(dy, dy, False, order, True, starts[s],
                                                starts[s + 1] - starts[s], width, j, lanes)


@device
def _term(x, dy, w, has_w, r, grad, o, k):
    """The row fold's value at k: x*x, or (grad) g*h with g = dy*w (dy without weight), h = x*r."""
    if not grad:
        return mul(x[o + k], x[o + k])
    h = mul(x[o + k], r)
    g = mul(dy[o + k], w[k]) if has_w else dy[o + k]
    return mul(g, h)


@device
def _row_fold(x, dy, w, has_w, r, grad, o, d, parts, result, scratch, tid):
    """fold over k < d of _term(k) by the whole block; returns it to every thread."""
    lane = tid & 31
    nchunks = (d + CHUNK - 1) // CHUNK
    cuda.syncthreads()  # every thread has read the previous result
    # warp-stride over chunks: a warp's lanes take the same trips, so all shuffle together
    for c in range(tid >> 5, nchunks, WARPS):
        base = c * CHUNK
        end = min(base + CHUNK, d)
        acc = NEG_ZERO
        for t in range((end - base + LANES - 1) // LANES):
            k = base + t * LANES + lane
            if k < end:
                acc = add(acc, _term(x, dy, w, has_w, r, grad, o, k))
        acc = _butterfly(scratch, tid, acc)
        if lane == 0:
            parts[c] = acc
    cuda.syncthreads()
    if tid == 0:
        result[0] = _pairwise(parts, nchunks)
    cuda.syncthreads()
    return result[0]


def rms_norm_kernel(x, m, d, dd, w, has_w, eps, y, work):
    """y = (x * r) * w per row (x * r without weight), r = 1 / sqrt(fold(x*x) / D + eps);
    dd is D as float32, work holds each block's chunk partials."""
    scratch = warp_scratch()
    # The simulator keys shared arrays by source line and may hand racing threads
    # private copies on the first call; after a barrier all see the one that won.
    for _ in range(2):
        result = cuda.shared.array(1, float32)
        cuda.syncthreads()
    tid = cuda.threadIdx.x
    nchunks = (d + CHUNK - 1) // CHUNK
    parts = work[cuda.blockIdx.x * nchunks:(cuda.blockIdx.x + 1) * nchunks]
    for row in range(cuda.blockIdx.x, m, cuda.gridDim.x):
        o = row * d
        s = _row_fold(x, x, w, has_w, ZERO, False, o, d, parts, result, scratch, tid)
        r = div(ONE, sqrt(add(div(s, dd), eps)))
        for k in range(tid, d, THREADS):
            h = mul(x[o + k], r)
            y[o + k] = mul(h, w[k]) if has_w else h


def rms_norm_backward_kernel(dy, x, m, d, dd, w, has_w, eps, dx, hbuf, work):
    """dx = r * (g - h * c), c = fold(g * h) / D, per row; with a weight also hbuf = h."""
    scratch = warp_scratch()
    for _ in range(2):
        result = cuda.shared.array(1, float32)
        cuda.syncthreads()
    tid = cuda.threadIdx.x
    nchunks = (d + CHUNK - 1) // CHUNK
    parts = work[cuda.blockIdx.x * nchunks:(cuda.blockIdx.x + 1) * nchunks]
    for row in range(cuda.blockIdx.x, m, cuda.gridDim.x):
        o = row * d
        s = _row_fold(x, dy, w, has_w, ZERO, False, o, d, parts, result, scratch, tid)
        r = div(ONE, sqrt(add(div(s, dd), eps)))
        c = div(_row_fold(x, dy, w, has_w, r, True, o, d, parts, result, scratch, tid), dd)
        for k in range(tid, d, THREADS):
            h = mul(x[o + k], r)
            g = mul(dy[o + k], w[k]) if has_w else dy[o + k]
            if has_w:
                hbuf[o + k] = h
            dx[o + k] = mul(r, sub(g, mul(h, c)))


def relu_kernel(x, out):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = x[i]
        out[i] = ZERO if v < ZERO else v  # -0.0 and NaN stay, as in torch


F1 = float32[::1]
I1 = int64[::1]
_B = boolean
# (python function, signature) for every kernel: the loader jits these, the PTX lint compiles them.
KERNELS = {
    "gemm": (gemm_kernel, void(F1, F1, int64, int64, int64, F1, _B, _B, F1)),
    "gemm_cells": (gemm_cells_kernel, void(F1, F1, int64, int64, int64, F1, _B, _B, F1)),
    "row_chunks": (row_chunks_kernel, void(F1, int64, int64, F1)),
    "col_fold": (col_fold_kernel, void(F1, F1, _B, int64, int64, I1, F1)),
    "segment_fold": (segment_fold_kernel, void(F1, int64, I1, I1, I1, F1)),
    "rms_norm": (rms_norm_kernel, void(F1, int64, int64, float32, F1, _B, float32, F1, F1)),
    "rms_norm_backward": (rms_norm_backward_kernel,
                          void(F1, F1, int64, int64, float32, F1, _B, float32, F1, F1, F1)),
}
# Kernels that select and copy but never round: the PTX lint reads float arithmetic, of which
# these have none to show it.
SELECT_KERNELS = {"relu": (relu_kernel, void(F1, F1))}

_NO_ORDER = np.zeros(1, np.int64)


class CudaLayers(LayersCalls, CudaBase):
    """The layers family's kernels on an NVIDIA GPU (or the simulator; LayersCalls documents
    each method). numpy arguments travel to the device per call (and back when written);
    device arrays stay where they are."""

    takes_pieces = False
    KERNELS = dict(KERNELS, **SELECT_KERNELS)

    def _gemm(self, a, b, m, n, kk, bias, has_bias, chunks_out, out):
        if out.size == 0:
            return
        args = (a, b, m, n, kk, bias, has_bias, chunks_out, out)
        if kk <= SHORT_K:  # the shape alone picks the kernel; both give the same bits
            self._launch("gemm_cells", grid(m * n, THREADS), args, writes=(8,))
        else:
            self._launch("gemm", grid(m * ((n + STRIP - 1) // STRIP), WARPS), args, writes=(8,))

    def _row_chunk_folds(self, a, m, c, out):
        if out.size:
            self._launch("row_chunks", grid(out.size, WARPS), (a, m, c, out), writes=(3,))

    def _col_fold(self, a, b, products, m, ncols, out):
        if ncols:
            self._launch("col_fold", grid(ncols, THREADS),
                         (a, b if products else a, products, m, ncols, _NO_ORDER, out), writes=(6,))

    def _segment_fold(self, dy, width, order, starts, rows, out):
        if rows.size and width:
            self._launch("segment_fold", grid(rows.size * width, THREADS),
                         (dy, width, order, starts, rows, out), writes=(5,))

    def _work(self, blocks, d):
        return cuda.device_array(blocks * ((d + CHUNK - 1) // CHUNK), np.float32)

    def _rms_norm(self, x, m, d, w, has_w, eps, y):
        if x.size:
            blocks = grid(m, 1)
            self._launch("rms_norm", blocks,
                         (x, m, d, np.float32(d), w, has_w, np.float32(eps), y, self._work(blocks, d)),
                         writes=(7,))

    def _rms_norm_backward(self, dy, x, m, d, w, has_w, eps, dx, h):
        if x.size:
            blocks = grid(m, 1)
            self._launch("rms_norm_backward", blocks,
                         (dy, x, m, d, np.float32(d), w, has_w, np.float32(eps), dx, h,
                          self._work(blocks, d)), writes=(8, 9) if has_w else (8,))

    def _relu(self, x, out):
        if x.size:
            self._launch("relu", grid(x.size, THREADS), (x, out), writes=(1,))


def load(mode: str, backend: str = "cuda") -> CudaLayers:
    return CudaLayers(mode)
