"""CUDA kernels for fold, sumsq and dot: a warp per 1024-element chunk, then the pairwise tree.

Pass 1: lane j of the warp for chunk c sums x[c*1024 + i*32 + j], i = 0..31,
from -0.0 (coalesced: a warp reads 128 contiguous bytes per step), then the
shuffle-down butterfly 16/8/4/2/1 leaves the chunk partial in lane 0.
Pass 2: one launch per level of the pairwise tree, (p0+p1), (p2+p3), ..., an
odd last partial copied up. Launch geometry never reaches the bits: the tree
depends on n alone.

Reproducibility: float arithmetic goes through `prims` (libdevice `f*_rn` on a
GPU), so no operation is contracted; tests/test_ptx_lint.py checks the PTX.
"""
from __future__ import annotations

import numpy as np
from numba import boolean, cuda, float32, int64, void

from ...oracles.fold import CHUNK, LANES
from .base import CudaBase
from .prims import SIMULATOR, WARPS, add, mul, shfl_down, warp_scratch

NEG_ZERO = np.float32(-0.0)
BLOCK = 32 * WARPS
TREE_BLOCK = 32 if SIMULATOR else 256


def chunk_blocks(nchunks: int) -> int:
    # a warp per chunk on a GPU; the simulator (a Python thread per CUDA thread) gets one warp
    return 1 if SIMULATOR else max(1, (nchunks + WARPS - 1) // WARPS)


def chunk_partials(a, b, products, starts, stops, partials):
    """Partial of chunk c = [starts[c], stops[c]) of y[k] = a[k] (fold) or the rounded
    a[k]*b[k] (dot, sumsq). Chunks of one segment start every 1024 elements; a new
    segment (a tensor, for the clip) starts a new chunk."""
    scratch = warp_scratch()  # used only by the simulator's shuffle
    tid = cuda.threadIdx.x
    lane = tid & 31
    # warp-stride over chunks: a warp's lanes all take the same trips, so all shuffle together
    for c in range(cuda.blockIdx.x * WARPS + (tid >> 5), partials.size, cuda.gridDim.x * WARPS):
        acc = NEG_ZERO
        base = starts[c] + lane
        stop = stops[c]
        for i in range(LANES):
            k = base + i * LANES
            if k < stop:  # padded slots add -0.0: skipping them is the same
                y = a[k]
                if products:  # uniform across the warp: no divergence
                    y = mul(y, b[k])
                acc = add(acc, y)
        off = 16
        while off >= 1:
            acc = add(acc, shfl_down(scratch, tid, acc, off))
            off = off // 2
        if lane == 0:
            partials[c] = acc


def pair_level(src, k, dst):
    i = cuda.grid(1)
    h = k // 2
    if i < h:
        dst[i] = add(src[2 * i], src[2 * i + 1])
    elif i == h and k % 2 == 1:
        dst[h] = src[k - 1]


F32_1D = float32[::1]
I64_1D = int64[::1]
# (python function, signature) for every kernel: the loader jits these, the PTX lint compiles them.
KERNELS = {
    "chunk_partials": (chunk_partials, void(F32_1D, F32_1D, boolean, I64_1D, I64_1D, F32_1D)),
    "pair_level": (pair_level, void(F32_1D, int64, F32_1D)),
}


class CudaFold(CudaBase):
    """fold/sumsq/dot on an NVIDIA GPU (or the simulator). Inputs travel to the device per call."""

    takes_pieces = False

    KERNELS = KERNELS
    CACHE = not SIMULATOR

    def _segments(self, a, b, products: bool, offsets) -> np.ndarray:
        """fold of y over each segment [offsets[s], offsets[s+1]) in one chunk launch."""
        starts, stops, first = chunk_table(offsets)
        src = cuda.device_array(starts.size, np.float32)
        da = a if not isinstance(a, np.ndarray) else cuda.to_device(a)
        db = da if b is None else b if not isinstance(b, np.ndarray) else cuda.to_device(b)
        self._k["chunk_partials"][chunk_blocks(starts.size), BLOCK](
            da, db, products, cuda.to_device(starts), cuda.to_device(stops), src)
        out = np.empty(len(offsets) - 1, np.float32)
        for s in range(out.size):
            out[s] = self._tree(src[first[s]:first[s + 1]])
        return out

    def _tree(self, src) -> np.float32:
        """The pairwise tree over chunk partials (a device array), one launch per level."""
        k = src.size
        if k > 1:  # the levels overwrite src, this call's own slice of the partials
            dst = cuda.device_array((k + 1) // 2, np.float32)
        while k > 1:
            h = (k + 1) // 2
            self._k["pair_level"][(h + TREE_BLOCK - 1) // TREE_BLOCK, TREE_BLOCK](src, k, dst)
            src, dst, k = dst, src, h
        return np.float32(src[:1].copy_to_host()[0])

    def fold(self, x):
        return self._segments(x, None, False, [0, x.size])[0]

    def dot(self, a, b):
        return self._segments(a, b, True, [0, a.size])[0]

    def sumsq(self, x):
        return self._segments(x, None, True, [0, x.size])[0]  # x travels to the device once

    def segment_sumsq(self, x, offsets) -> np.ndarray:
        return self._segments(x, None, True, offsets)


def chunk_table(offsets) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chunk starts, chunk stops, first chunk of each segment plus the total) for segments
    [offsets[s], offsets[s+1]): chunks of 1024 that restart at every segment start."""
    offsets = np.asarray(offsets, np.int64)
    counts = (np.diff(offsets) + CHUNK - 1) // CHUNK
    first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    seg = np.repeat(np.arange(counts.size), counts)
    starts = offsets[seg] + (np.arange(first[-1]) - first[seg]) * CHUNK
    return starts.astype(np.int64), np.minimum(starts + CHUNK, offsets[seg + 1]).astype(np.int64), first


def load(mode: str, backend: str = "cuda") -> CudaFold:
    return CudaFold(mode)
