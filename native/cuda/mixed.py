"""CUDA kernels for the casts float32 <-> bfloat16 / float16.

The element functions are native/mixed.py's `bf16_elem`, `f16_elem` and
`from_f16_elem` (integer arithmetic on the bit pattern widened to int64), compiled
for this target; widening bfloat16 is a shift. Kernels loop grid-stride over the
elements; low-precision buffers travel as uint16 patterns, float32 ones as their
uint32 views. No float operation is issued at all.

Reproducibility: elementwise integer arithmetic, so no launch geometry, device or
vendor math reaches the bits.

>>> import numpy as np
>>> from mojolike.core import registry
>>> k = registry.kernels("example", "mixed", "cuda-sim")  # a worker process unless this one simulates
>>> out = np.empty(2, np.uint16)
>>> k.to_f16(np.float32([1.0, np.nan]), out); [hex(v) for v in out.tolist()]
['0x3c00', '0x7e00']
"""
from __future__ import annotations

import numpy as np
from numba import cuda, uint16, uint32, void

from .. import mixed as cpu
from .base import THREADS, CudaBase, device, grid

bf16_elem = device(cpu.bf16_elem)
f16_elem = device(cpu.f16_elem)
from_f16_elem = device(cpu.from_f16_elem)


def to_bf16_kernel(xb, out):
    """out[i] = the bfloat16 pattern of the float32 pattern xb[i]."""
    for i in range(cuda.grid(1), xb.size, cuda.gridsize(1)):
        out[i] = np.uint16(bf16_elem(np.int64(xb[i])))


def to_f16_kernel(xb, out):
    """out[i] = the float16 pattern of the float32 pattern xb[i]."""
    for i in range(cuda.grid(1), xb.size, cuda.gridsize(1)):
        out[i] = np.uint16(f16_elem(np.int64(xb[i])))


def from_bf16_kernel(h, ob):
    """ob[i] = the float32 pattern of the bfloat16 pattern h[i]."""
    for i in range(cuda.grid(1), h.size, cuda.gridsize(1)):
        ob[i] = np.uint32(np.int64(h[i]) << 16)


def from_f16_kernel(h, ob):
    """ob[i] = the float32 pattern of the float16 pattern h[i]."""
    for i in range(cuda.grid(1), h.size, cuda.gridsize(1)):
        ob[i] = np.uint32(from_f16_elem(np.int64(h[i])))


U16_1D = uint16[::1]
U32_1D = uint32[::1]
KERNELS = {
    "to_bf16": (to_bf16_kernel, void(U32_1D, U16_1D)),
    "to_f16": (to_f16_kernel, void(U32_1D, U16_1D)),
    "from_bf16": (from_bf16_kernel, void(U16_1D, U32_1D)),
    "from_f16": (from_f16_kernel, void(U16_1D, U32_1D)),
}


class CudaMixed(CudaBase):
    """The casts on an NVIDIA GPU (or the simulator); arguments are flat numpy arrays."""

    takes_pieces = False

    KERNELS = KERNELS

    def _run(self, name: str, src, out) -> None:
        n = out.size
        dsrc = cuda.to_device(src)
        dout = cuda.device_array(n, out.dtype)
        self._k[name][grid(n), THREADS](dsrc, dout)
        dout.copy_to_host(out)

    def to_bf16(self, x, out) -> None:
        """Write the bfloat16 patterns of x (flat float32) into out (flat uint16)."""
        self._run("to_bf16", x.view(np.uint32), out)

    def to_f16(self, x, out) -> None:
        """Write the float16 patterns of x into out (flat uint16)."""
        self._run("to_f16", x.view(np.uint32), out)

    def from_bf16(self, h, out) -> None:
        """Write the bfloat16 patterns h (flat uint16) widened into out (flat float32)."""
        self._run("from_bf16", h, out.view(np.uint32))

    def from_f16(self, h, out) -> None:
        """Write the float16 patterns h widened into out (flat float32)."""
        self._run("from_f16", h, out.view(np.uint32))


def load(mode: str, backend: str = "cuda") -> CudaMixed:
    return CudaMixed(mode)
