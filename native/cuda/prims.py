"""binary32 primitives for the CUDA kernels, bound per target.

On a GPU every operation is a libdevice `f*_rn` call: it lowers to `add.rn.f32`
and friends, which ptxas never fuses into an `fma` (plain `+`/`*` it may fuse,
and numba-cuda contracts `a*b+c` even without fastmath). Under numba's CUDA
simulator libdevice is an empty stub, so the same names bind to numpy float32
operations, and the warp shuffle (which the simulator lacks) is emulated through
shared memory with the same semantics: lanes whose source is past lane 31 get
their own value back.

The binary64 primitives `dadd`, `dsub`, `dmul`, `ddiv`, `narrow` (binary64 ->
binary32, to nearest) and `widen` (exact) serve the correctly rounded exp/log and
the schedule kernels the same way: libdevice `dadd_rn`/`dmul_rn`/`ddiv_rn`/
`double2float_rn` on a GPU (there is no `dsub_rn`: a - b is `dadd_rn(a, -b)`, the
negation being exact), numpy float64 under the simulator.

Kernels call these names and nothing else for float arithmetic, so one kernel
source serves both targets.
"""
from __future__ import annotations

import re
import warnings

import numba
import numpy as np
from numba import cuda, float32, float64

SIMULATOR = bool(numba.config.ENABLE_CUDASIM)
FULL_MASK = 0xFFFFFFFF
# Warps per block: one warp per 1024-element chunk. The simulator runs a Python
# thread per CUDA thread, so it gets one warp per block to stay small.
WARPS = 1 if SIMULATOR else 8

if SIMULATOR:
    _f32 = np.float32

    # Plain functions: they touch no `cuda` API, and skipping the simulator's
    # device-function wrapper makes each call several times cheaper.
    # Overflow to inf and inf - inf are IEEE results here, not news: numpy's warnings
    # about them are silenced for this module only (the simulator worker's threads
    # also run with numpy's float errors ignored, see simblocks).
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=re.escape(__name__) + "$")

    def add(a, b):
        return _f32(_f32(a) + _f32(b))

    def sub(a, b):
        return _f32(_f32(a) - _f32(b))

    def mul(a, b):
        return _f32(_f32(a) * _f32(b))

    def div(a, b):
        return _f32(_f32(a) / _f32(b))

    def sqrt(a):
        return _f32(np.sqrt(_f32(a)))

    _f64 = np.float64

    def dadd(a, b):
        return _f64(_f64(a) + _f64(b))

    def dsub(a, b):
        return _f64(_f64(a) - _f64(b))

    def dmul(a, b):
        return _f64(_f64(a) * _f64(b))

    def ddiv(a, b):
        return _f64(_f64(a) / _f64(b))

    def narrow(a):
        return _f32(_f64(a))  # beyond the binary32 range: inf, as on the GPU

    def widen(a):
        return _f64(a)

    @cuda.jit(device=True)
    def warp_scratch():
        # The simulator keys shared arrays by source line and creates them
        # without a lock, so threads racing through the first call can get
        # private copies. After a barrier every thread sees the one that won.
        for _ in range(2):
            scratch = cuda.shared.array(32 * WARPS, float32)
            cuda.syncthreads()
        return scratch

    @cuda.jit(device=True)
    def shfl_down(scratch, tid, v, off):
        cuda.syncthreads()  # every lane has read the previous round
        scratch[tid] = v
        cuda.syncthreads()
        if (tid & 31) + off < 32:
            return scratch[tid + off]
        return v

else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline="always")
    def add(a, b):
        return libdevice.fadd_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def sub(a, b):
        return libdevice.fsub_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def mul(a, b):
        return libdevice.fmul_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def div(a, b):
        return libdevice.fdiv_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def sqrt(a):
        return libdevice.fsqrt_rn(a)

    @cuda.jit(device=True, inline="always")
    def dadd(a, b):
        return libdevice.dadd_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def dsub(a, b):
        return libdevice.dadd_rn(a, -b)  # no dsub_rn in libdevice; negation is exact

    @cuda.jit(device=True, inline="always")
    def dmul(a, b):
        return libdevice.dmul_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def ddiv(a, b):
        return libdevice.ddiv_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def narrow(a):
        return libdevice.double2float_rn(a)

    @cuda.jit(device=True, inline="always")
    def widen(a):
        return float64(a)

    @cuda.jit(device=True, inline="always")
    def warp_scratch():
        return cuda.shared.array(1, float32)  # unused: the hardware shuffles registers

    @cuda.jit(device=True, inline="always")
    def shfl_down(scratch, tid, v, off):
        return cuda.shfl_down_sync(FULL_MASK, v, off)
