"""CUDA kernels for Philox4x32-10 blocks, uniform and normal draws and dropout (contracts/rng.md).

The element functions are `native/rng.py`'s `philox`, `uniform_elem`,
`dropout_elem` and `normal_pair`, compiled here with the CUDA primitives
(libdevice `fadd_rn`/`fmul_rn`/`fsqrt_rn` on a GPU, numpy float32 on the
simulator) and `native/cuda/crmath.py`'s logf/sinpif/cospif element functions,
so the CPU and GPU order of operations is one text. Philox is integer arithmetic
on uint64 values below 2^32; a 32x32 product is an exact 64-bit product on either
target. A normal slot whose logf, sinpif or cospif is undecided gets the
UNDECIDED pattern; they are counted on the host after the copy back.

Kernels loop grid-stride over the Philox blocks that a draw touches; a thread
computes a block and writes those of its four outputs that fall inside the draw
(the first and last block may be partial), so no launch geometry reaches a value.

Reproducibility: every float operation a libdevice `_rn` call (tests/test_ptx_lint.py
checks the PTX: no fma, every op .rn); each value depends on its stream position
alone.

>>> import numpy as np
>>> from mojolike.core import registry
>>> k = registry.kernels("example", "rng", "cuda-sim")  # a worker process unless this one simulates
>>> out = np.empty(3, np.float32)
>>> int(k.uniform_into(0, 0, 0, 0, np.float32(0), np.float32(1), out)), out.tolist()
(0, [0.3990464210510254, 0.8805201649665833, 0.7357127666473389])
>>> int(k.normal_into(0, 0, 0, 0, np.float32(0), np.float32(1), out)), out.tolist()
(0, [0.9911374449729919, -0.9246627688407898, -0.6176090836524963])
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32, uint64, void

from .. import rng as cpu
from . import crmath as cuda_crmath
from . import prims
from .base import THREADS, CudaBase, device, grid, undecided_slots

U64 = np.uint64
MASK32, SH32, SH2, LOW2 = cpu.MASK32, cpu.SH32, cpu.SH2, cpu.LOW2
UNDECIDED = cpu.UNDECIDED

if prims.SIMULATOR:
    f32_bits = cpu.f32_bits_cpu  # numpy: np.float32(x).view(np.uint32)
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline="always")
    def f32_bits(x):
        """The bit pattern of the binary32 value x, as an int64 (x >= 0 here: no sign bit)."""
        return np.int64(libdevice.float_as_int(x))


def bind(fn):
    """`fn` (native/rng.py's) compiled for this target: its primitives, the crmath element
    functions and `f32_bits` this target's."""
    return device(fn, cpu.PRIMITIVES, **{name: getattr(cuda_crmath, name) for name in cpu.CRMATH},
                  f32_bits=f32_bits)


philox = bind(cpu.philox)
uniform_elem = bind(cpu.uniform_elem)
dropout_elem = bind(cpu.dropout_elem)
normal_pair = bind(cpu.normal_pair)


def philox_kernel(counters, k0, k1, out):
    for i in range(cuda.grid(1), counters.shape[0], cuda.gridsize(1)):
        w0, w1, w2, w3 = philox(U64(counters[i, 0]), U64(counters[i, 1]), U64(counters[i, 2]),
                                U64(counters[i, 3]), k0, k1)
        out[i, 0] = np.uint32(w0)
        out[i, 1] = np.uint32(w1)
        out[i, 2] = np.uint32(w2)
        out[i, 3] = np.uint32(w3)


def _span(offset, n):
    """(first block, blocks) that positions offset .. offset + n - 1 touch (n >= 1)."""
    b_first = offset >> SH2
    return b_first, np.int64(((offset + (n - U64(1))) >> SH2) - b_first) + 1


span = bind(_span)


def uniform_kernel(k0, k1, stream, offset, low, high, out):
    d = prims.sub(high, low)
    s0, s1 = stream & MASK32, stream >> SH32
    n = U64(out.size)
    b_first, nblocks = span(offset, n)
    for q in range(cuda.grid(1), nblocks, cuda.gridsize(1)):
        b = b_first + U64(q)
        w0, w1, w2, w3 = philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
        pos = b << SH2  # word 0's position; the first and last block may lie partly outside
        if pos >= offset and pos - offset < n:
            out[pos - offset] = uniform_elem(w0, low, d)
        pos += U64(1)
        if pos >= offset and pos - offset < n:
            out[pos - offset] = uniform_elem(w1, low, d)
        pos += U64(1)
        if pos >= offset and pos - offset < n:
            out[pos - offset] = uniform_elem(w2, low, d)
        pos += U64(1)
        if pos >= offset and pos - offset < n:
            out[pos - offset] = uniform_elem(w3, low, d)


def dropout_kernel(x, k0, k1, stream, offset, p, scale, y):
    s0, s1 = stream & MASK32, stream >> SH32
    n = U64(y.size)
    b_first, nblocks = span(offset, n)
    for q in range(cuda.grid(1), nblocks, cuda.gridsize(1)):
        b = b_first + U64(q)
        w0, w1, w2, w3 = philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
        pos = b << SH2
        if pos >= offset and pos - offset < n:
            y[pos - offset] = dropout_elem(x[pos - offset], w0, p, scale)
        pos += U64(1)
        if pos >= offset and pos - offset < n:
            y[pos - offset] = dropout_elem(x[pos - offset], w1, p, scale)
        pos += U64(1)
        if pos >= offset and pos - offset < n:
            y[pos - offset] = dropout_elem(x[pos - offset], w2, p, scale)
        pos += U64(1)
        if pos >= offset and pos - offset < n:
            y[pos - offset] = dropout_elem(x[pos - offset], w3, p, scale)


def _put(out, ob, pos, offset, n, v, ok):
    """out[pos - offset] = v (or the UNDECIDED pattern) when position pos lies in the draw."""
    if pos >= offset and pos - offset < n:
        if ok:
            out[pos - offset] = v
        else:
            ob[pos - offset] = UNDECIDED


put = bind(_put)


def normal_kernel(k0, k1, stream, offset, mean, std, out, ob):
    """out[i] = the normal value at position offset + i; ob: the uint32 view of out."""
    s0, s1 = stream & MASK32, stream >> SH32
    n = U64(out.size)
    b_first, nblocks = span(offset, n)
    for q in range(cuda.grid(1), nblocks, cuda.gridsize(1)):
        b = b_first + U64(q)
        w0, w1, w2, w3 = philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
        v0, v1, ok0, ok1 = normal_pair(w0, w1, mean, std)
        v2, v3, ok2, ok3 = normal_pair(w2, w3, mean, std)
        pos = b << SH2
        put(out, ob, pos, offset, n, v0, ok0)
        put(out, ob, pos + U64(1), offset, n, v1, ok1)
        put(out, ob, pos + U64(2), offset, n, v2, ok2)
        put(out, ob, pos + U64(3), offset, n, v3, ok3)


F32_1D = float32[::1]
U32_1D = uint32[::1]
# the float kernels (linted by tests/test_ptx_lint.py)
KERNELS = {
    "uniform": (uniform_kernel, void(uint64, uint64, uint64, uint64, float32, float32, F32_1D)),
    "dropout": (dropout_kernel, void(F32_1D, uint64, uint64, uint64, uint64, float32, float32, F32_1D)),
    "normal": (normal_kernel, void(uint64, uint64, uint64, uint64, float32, float32, F32_1D, U32_1D)),
}
# integer only: no float instruction for the lint to check
INTEGER_KERNELS = {
    "philox": (philox_kernel, void(uint32[:, ::1], uint64, uint64, uint32[:, ::1])),
}


class CudaRng(CudaBase):
    """Philox blocks, uniform and normal draws and dropout on an NVIDIA GPU (or the simulator)."""

    takes_pieces = False

    KERNELS = {**KERNELS, **INTEGER_KERNELS}

    @staticmethod
    def _grid(nblocks: int) -> int:
        return grid(nblocks)

    def philox_into(self, counters, key0, key1, out) -> None:
        """out[i] = Philox4x32-10(counters[i], (key0, key1)); counters and out (n, 4) uint32."""
        n = counters.shape[0]
        if n == 0:
            return
        dc = cuda.to_device(np.ascontiguousarray(counters))
        dout = cuda.device_array((n, 4), np.uint32)
        self._k["philox"][self._grid(n), THREADS](dc, U64(key0), U64(key1), dout)
        dout.copy_to_host(out)

    def uniform_into(self, key0, key1, stream, offset, low, high, out) -> int:
        """out[i] = the uniform at position offset + i of `stream` (float32 low, high); returns 0."""
        if out.size == 0:
            return 0
        dout = cuda.device_array(out.size, np.float32)
        self._k["uniform"][self._grid(out.size // 4 + 2), THREADS](
            U64(key0), U64(key1), U64(stream), U64(offset), np.float32(low), np.float32(high), dout)
        dout.copy_to_host(out)
        return 0

    def dropout_into(self, x, key0, key1, stream, offset, p, scale, y) -> int:
        """y[i] = x[i] * scale where position offset + i is kept, else x[i] * 0.0; returns 0."""
        if y.size == 0:
            return 0
        dx = cuda.to_device(x)
        dy = cuda.device_array(y.size, np.float32)
        self._k["dropout"][self._grid(y.size // 4 + 2), THREADS](
            dx, U64(key0), U64(key1), U64(stream), U64(offset), np.float32(p), np.float32(scale), dy)
        dy.copy_to_host(y)
        return 0

    def normal_into(self, key0, key1, stream, offset, mean, std, out) -> int:
        """out[i] = the normal value at position offset + i of `stream` (float32 mean, std);
        returns the number of slots left UNDECIDED (the caller gives them the oracle's value)."""
        if out.size == 0:
            return 0
        dout = cuda.device_array(out.size, np.float32)
        self._k["normal"][self._grid(out.size // 4 + 2), THREADS](
            U64(key0), U64(key1), U64(stream), U64(offset), np.float32(mean), np.float32(std), dout,
            dout.view(np.uint32))
        dout.copy_to_host(out)
        return undecided_slots(out, UNDECIDED)


def load(mode: str, backend: str = "cuda") -> CudaRng:
    return CudaRng(mode)
