"""CUDA kernel for the learning-rate schedules: the fast route of contracts/schedule.md clause 6.

The per-step arithmetic is `native/schedule.py`'s pieces (`warmup_ve`,
`_decay_ve`, `linear_ve`, `sin_ve`, `cos_ve`, `schedule_ve`, `decide`,
`schedule_elem`), compiled here with the CUDA primitives (libdevice
`dadd_rn`/`dmul_rn`/`ddiv_rn`/`double2float_rn` on a GPU, numpy float64 on the
simulator), so the CPU and GPU order of operations is one text and the UNDECIDED
steps (the rounding test could not decide; the pattern 0x7FA00DAD) are the same
steps as on the CPU. The table of values is built on the device, a grid-stride
loop over its slots, one branchy pass; the undecided steps are counted on the
host after the copy back (no atomics).

Reproducibility: every step depends on (kind, P, M, W, T, t) alone, no reductions,
every float operation a libdevice `_rn` call (tests/test_ptx_lint.py checks the
PTX: no fma, every op .rn, division div.rn.f64), so no launch geometry reaches
the bits.

>>> import numpy as np
>>> from mojolike.core import registry
>>> k = registry.kernels("example", "schedule", "cuda-sim")  # a worker process here
>>> out = np.empty(6, np.float32)
>>> int(k.schedule_into(1, np.float32(1.0), np.float32(0.0), 2, 6, 1, out)), out.tolist()  # linear
(0, [0.5, 1.0, 0.75, 0.5, 0.25, 0.0])
>>> int(k.schedule_into(2, np.float32(1.0), np.float32(0.0), 0, 4, 1, out)), out.tolist()  # cosine
(0, [0.8535534143447876, 0.5, 0.1464466154575348, 0.0, 0.0, 0.0])
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, int64, uint32, void

from .. import schedule as cpu
from . import prims
from .base import THREADS, CudaBase, device, grid, undecided_slots

UNDECIDED = cpu.UNDECIDED


def bind_pieces() -> dict:
    """The pieces of native/schedule.py with the primitive names (and each other's
    names) resolved to this target's versions, bound in dependency order."""
    bound = {name: getattr(prims, name) for name in cpu.PRIMITIVES}
    for name in cpu.PIECES:
        bound[name] = device(cpu._PY[name], **bound)
    return bound


_BOUND = bind_pieces()
schedule_elem = _BOUND["schedule_elem"]


def schedule_kernel(kind, peak, min_lr, warmup, total, t0, out, ob):
    """out[i] = the value of step t0 + i; ob: uint32 view of out (for the UNDECIDED pattern)."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        a, ok = schedule_elem(kind, peak, min_lr, warmup, total, t0 + i)
        if ok:
            out[i] = a
        else:
            ob[i] = UNDECIDED


F32_1D = float32[::1]
U32_1D = uint32[::1]
KERNELS = {
    "schedule": (schedule_kernel,
                 void(int64, float32, float32, int64, int64, int64, F32_1D, U32_1D)),
}


class CudaSchedule(CudaBase):
    """Schedule values on an NVIDIA GPU (or the simulator); out is a flat float32 numpy array."""

    takes_pieces = False

    KERNELS = KERNELS

    def schedule_into(self, kind, peak, min_lr, warmup, total, t0, out) -> int:
        """Write the values of steps t0 .. t0 + out.size - 1 into out; returns the UNDECIDED count.

        The arguments are native/schedule.py's NumbaSchedule.schedule_into's.
        """
        n = out.size
        if n == 0:
            return 0
        dout = cuda.device_array(n, np.float32)
        self._k["schedule"][grid(n), THREADS](int(kind), cpu._rate(peak), cpu._rate(min_lr),
                                             int(warmup), int(total), int(t0), dout,
                                             dout.view(np.uint32))
        dout.copy_to_host(out)
        return undecided_slots(out, UNDECIDED)


def load(mode: str, backend: str = "cuda") -> CudaSchedule:
    return CudaSchedule(mode)
