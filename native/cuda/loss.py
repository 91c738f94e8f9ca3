"""CUDA kernel for cross-entropy over class indices (contracts/loss.md): a block per row.

Per row, the block's threads:

1. take mx = max_j z_j (per-thread maxima, then thread 0 over them: exact, any order);
2. fold e_j = expf(z_j - mx): warp w takes chunks w, w + WARPS, ...; lane l of the
   warp sums slots c*1024 + i*32 + l, i = 0..31, from -0.0, the shuffle-down
   butterfly leaves the chunk partial in lane 0, and the pairwise tree runs level
   by level over the row's partials (a per-block slice of `work`, double
   buffered, a barrier between levels); thread 0 takes L = logf(S);
3. with smoothing, fold L - (z_j - mx) the same way;
4. with the gradient, overwrite the e_j kept in grad with (e_j / S - q_j) * g.

expf/logf are native/crmath.py's exp_elem/log_elem as bound for CUDA in
native/cuda/crmath.py. A row with an undecided value gets status 1 (the caller
redoes it). Under the simulator a block is one warp and the grid one block.

Reproducibility: every float operation is a `prims` call (libdevice `_rn`, no
fma; tests/test_ptx_lint.py checks the PTX), and the fold's shape depends on V
alone, so neither launch geometry nor the device reaches the bits.

>>> import numpy as np
>>> from mojolike.core import registry
>>> k = registry.kernels("example", "loss", "cuda-sim")  # a worker process unless this one simulates
>>> rows, status = np.empty(1, np.float32), np.empty(1, np.int32)
>>> int(k.cross_entropy_into(np.float32([[0.0, 0.0]]), np.int64([0]), -100, np.float32(1),
...                          np.float32(0), np.float32(1), False, np.float32(1), False,
...                          np.zeros((1, 1), np.float32), rows, status))
0
>>> rows.tolist(), status.tolist()   # ln 2
([0.6931471824645996], [0])
"""
from __future__ import annotations

import numpy as np
from numba import boolean, cuda, float32, int32, int64, void

from ...oracles.fold import CHUNK, LANES
from ..crmath import EXP_TINY
from ..calls import LossCalls
from . import prims
from .base import MAX_BLOCKS, THREADS, CudaBase, device
from .crmath import exp_elem, log_elem
from .fold import NEG_ZERO
from .prims import WARPS, add, div, mul, shfl_down, sub, warp_scratch

ZERO = np.float32(0.0)

if prims.SIMULATOR:
    def f32_bits(x):
        return np.int64(np.float32(x).view(np.uint32))
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline="always")
    def f32_bits(x):
        return int64(libdevice.float_as_int(x))  # x > 0 here: the int32 is the pattern


def _fold_row(z, r, v, mx, lg, smoothing_pass, want_grad, grad, src, dst, scratch, tid, flag):
    """The fold over the row of e_j = expf(z_j - mx) (storing e_j in grad when want_grad),
    or of L - (z_j - mx) when smoothing_pass; returns it (to every thread)."""
    lane = tid & 31
    nchunks = (v + CHUNK - 1) // CHUNK
    bad = False
    cuda.syncthreads()  # every thread has read the previous fold's result out of src/dst
    # warp-stride over chunks: a warp's lanes take the same trips, so all shuffle together
    for c in range(tid >> 5, nchunks, WARPS):
        acc = NEG_ZERO
        base = c * CHUNK + lane
        for i in range(LANES):
            k = base + i * LANES
            if k < v:  # padded slots add -0.0: skipping them is the same
                d = sub(z[r, k], mx)
                if smoothing_pass:
                    y = sub(lg, d)
                else:
                    y = ZERO
                    if d > EXP_TINY:  # expf(d) = +0 from EXP_TINY down
                        y, ok = exp_elem(d)
                        bad = bad or not ok
                    if want_grad:
                        grad[r, k] = y
                acc = add(acc, y)
        off = 16
        while off >= 1:
            acc = add(acc, shfl_down(scratch, tid, acc, off))
            off = off // 2
        if lane == 0:
            src[c] = acc
    if bad:
        flag[0] = 1  # every writer stores the same value
    cuda.syncthreads()
    # the pairwise tree, level by level; src and dst swap so no level reads what it writes
    k = nchunks
    while k > 1:
        h = k // 2
        for i in range(tid, h, THREADS):
            dst[i] = add(src[2 * i], src[2 * i + 1])
        if tid == 0 and k % 2 == 1:
            dst[h] = src[k - 1]
        cuda.syncthreads()
        src, dst = dst, src
        k = h + k % 2
    return src[0]


_fold_row_dev = device(_fold_row)


def cross_entropy_kernel(z, t, ignore_index, c1, c2, qt, smoothing, g, want_grad, grad, rows, status,
                         work):
    scratch = warp_scratch()  # used only by the simulator's shuffle
    # The simulator keys shared arrays by source line and may hand racing threads
    # private copies on the first call; after a barrier all see the one that won.
    for _ in range(2):
        red = cuda.shared.array(THREADS, float32)
        cuda.syncthreads()
    for _ in range(2):
        flag = cuda.shared.array(1, int32)
        cuda.syncthreads()
    tid = cuda.threadIdx.x
    n, v = z.shape
    nchunks = (v + CHUNK - 1) // CHUNK
    src = work[cuda.blockIdx.x, :nchunks]
    dst = work[cuda.blockIdx.x, nchunks:]
    for r in range(cuda.blockIdx.x, n, cuda.gridDim.x):
        ti = t[r]
        cuda.syncthreads()  # every thread is done with the previous row's shared values
        if ti == ignore_index:  # the same branch for the whole block
            if want_grad:
                for k in range(tid, v, THREADS):
                    grad[r, k] = ZERO
            if tid == 0:
                rows[r] = ZERO
                status[r] = 0
            continue
        m = z[r, 0]
        for k in range(tid, v, THREADS):
            x = z[r, k]
            m = x if x > m else m
        red[tid] = m
        if tid == 0:
            flag[0] = 0
        cuda.syncthreads()
        mx = red[0]
        for j in range(1, THREADS):
            mx = red[j] if red[j] > mx else mx
        s = _fold_row_dev(z, r, v, mx, ZERO, False, want_grad, grad, src, dst, scratch, tid, flag)
        lg, ok = log_elem(f32_bits(s))
        if flag[0] != 0 or not ok:  # the same for every thread (flag was set before a barrier)
            if tid == 0:
                status[r] = 1
            continue
        dt = sub(z[r, ti], mx)
        nll = sub(lg, dt)
        if smoothing:
            a = _fold_row_dev(z, r, v, mx, lg, True, False, grad, src, dst, scratch, tid, flag)
            nll = add(mul(c1, nll), mul(c2, a))
        if tid == 0:
            rows[r] = nll
            status[r] = 0
        if want_grad:
            for k in range(tid, v, THREADS):
                p = div(grad[r, k], s)
                q = qt if k == ti else c2
                grad[r, k] = mul(sub(p, q), g)


F32_1D = float32[::1]
F32_2D = float32[:, ::1]
_B = boolean
# (python function, signature) for every kernel: the loader jits these, the PTX lint compiles them.
KERNELS = {
    "cross_entropy": (cross_entropy_kernel,
                      void(F32_2D, int64[::1], int64, float32, float32, float32, _B, float32, _B,
                           F32_2D, F32_1D, int32[::1], F32_2D)),
}


class CudaLoss(LossCalls, CudaBase):
    """Cross-entropy on an NVIDIA GPU (or the simulator; LossCalls documents the method);
    numpy arguments travel per call."""

    takes_pieces = False
    KERNELS = KERNELS

    def _cross_entropy(self, logits, targets, n, v, ignore, c1, c2, qt, smoothing, g, want_grad,
                       grad, rows, status) -> int:
        blocks = max(1, min(MAX_BLOCKS, n))  # a block per row
        nchunks = (v + CHUNK - 1) // CHUNK
        work = cuda.device_array((blocks, 2 * nchunks), np.float32)
        dgrad = cuda.to_device(grad) if want_grad else cuda.device_array((1, 1), np.float32)
        drows = cuda.device_array(n, np.float32)
        dstatus = cuda.device_array(n, np.int32)
        self._k["cross_entropy"][blocks, THREADS](
            cuda.to_device(logits), cuda.to_device(np.ascontiguousarray(targets, np.int64)), ignore,
            np.float32(c1), np.float32(c2), np.float32(qt), smoothing, np.float32(g), want_grad,
            dgrad, drows, dstatus, work)
        if want_grad:
            dgrad.copy_to_host(grad)
        drows.copy_to_host(rows)
        dstatus.copy_to_host(status)
        return int(np.count_nonzero(status))


def load(mode: str, backend: str = "cuda") -> CudaLoss:
    return CudaLoss(mode)
