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
from .prims import SIMULATOR, WARPS, add, mul, shfl_down, warp_scratch

NEG_ZERO = np.float32(-0.0)
BLOCK = 32 * WARPS
TREE_BLOCK = 32 if SIMULATOR else 256


def chunk_partials(a, b, products, n, partials):
    """Partial of chunk c of y[k] = a[k] (fold) or the rounded a[k]*b[k] (dot, sumsq)."""
    scratch = warp_scratch()  # used only by the simulator's shuffle
    tid = cuda.threadIdx.x
    lane = tid & 31
    c = cuda.blockIdx.x * WARPS + (tid >> 5)
    acc = NEG_ZERO
    base = c * CHUNK + lane
    for i in range(LANES):
        k = base + i * LANES
        if k < n:  # padded slots add -0.0: skipping them is the same
            y = a[k]
            if products:  # uniform across the warp: no divergence
                y = mul(y, b[k])
            acc = add(acc, y)
    off = 16
    while off >= 1:
        acc = add(acc, shfl_down(scratch, tid, acc, off))
        off = off // 2
    if lane == 0 and c < partials.size:
        partials[c] = acc


def pair_level(src, k, dst):
    i = cuda.grid(1)
    h = k // 2
    if i < h:
        dst[i] = add(src[2 * i], src[2 * i + 1])
    elif i == h and k % 2 == 1:
        dst[h] = src[k - 1]


F32_1D = float32[::1]
# (python function, signature) for every kernel: the loader jits these, the PTX lint compiles them.
KERNELS = {
    "chunk_partials": (chunk_partials, void(F32_1D, F32_1D, boolean, int64, F32_1D)),
    "pair_level": (pair_level, void(F32_1D, int64, F32_1D)),
}


def _device_details() -> dict:
    if SIMULATOR:
        return {"device": "numba CUDA simulator"}
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    out = {"device": name, "compute_capability": ".".join(map(str, dev.compute_capability))}
    try:
        from numba.cuda.cudadrv.driver import driver
        out["driver"] = ".".join(map(str, driver.get_version()))
    except Exception as e:  # the version is metadata; its absence must not stop a run
        out["driver"] = f"unknown ({type(e).__name__})"
    return out


class CudaFold:
    """fold/sumsq/dot on an NVIDIA GPU (or the simulator). Inputs travel to the device per call."""

    def __init__(self, mode: str):
        self.backend = "cuda-sim" if SIMULATOR else "cuda"
        # Every mode runs the rn kernels: they already keep the strongest promise.
        self.numeric_mode = mode
        self._k = {name: cuda.jit(sig, cache=not SIMULATOR)(fn) for name, (fn, sig) in KERNELS.items()}
        self.details = _device_details()

    def _reduce(self, a, b, products: bool) -> np.float32:
        n = a.size
        nchunks = (n + CHUNK - 1) // CHUNK
        src = cuda.device_array(nchunks, np.float32)
        da = cuda.to_device(a)
        db = da if b is None else cuda.to_device(b)
        self._k["chunk_partials"][(nchunks + WARPS - 1) // WARPS, BLOCK](da, db, products, n, src)
        dst = cuda.device_array(max(1, (nchunks + 1) // 2), np.float32)
        k = nchunks
        while k > 1:
            h = (k + 1) // 2
            self._k["pair_level"][(h + TREE_BLOCK - 1) // TREE_BLOCK, TREE_BLOCK](src, k, dst)
            src, dst, k = dst, src, h
        return np.float32(src[:1].copy_to_host()[0])

    def fold(self, x):
        return self._reduce(x, None, False)

    def dot(self, a, b):
        return self._reduce(a, b, True)

    def sumsq(self, x):
        return self._reduce(x, None, True)  # x travels to the device once


def load(mode: str, backend: str = "cuda") -> CudaFold:
    return CudaFold(mode)
