"""CUDA kernels for the correctly rounded expf, logf, sinpif and cospif (tanhf, erff, GELU: erf_tanh.py).

The per-element arithmetic is `native/crmath.py`'s exp_elem/log_elem/sinpi_elem/
cospi_elem, compiled
here with the CUDA primitives (libdevice `dadd_rn`/`dmul_rn`/`double2float_rn`
on a GPU, numpy float64 on the simulator), so the CPU and GPU order of
operations is one text and the UNDECIDED slots (the rounding test could not
decide; the pattern 0x7FA00DAD) are the same slots as on the CPU. The per-slot
functions (special values first) are the CPU kernels' too. Kernels loop
grid-stride over elements, one branchy pass; the undecided slots are counted on
the host after the copy back (no atomics).

Bit patterns travel as uint32 views of the same buffers (the input's, to quiet a
NaN; the output's, to write inf, NaN and UNDECIDED patterns).

Reproducibility: elementwise, no reductions, every float operation a libdevice
`_rn` call (tests/test_ptx_lint.py checks the PTX: no fma, every op .rn), so
no launch geometry reaches the bits.

>>> import numpy as np
>>> from mojolike.core import registry
>>> k = registry.kernels("example", "crmath", "cuda-sim")  # a worker process unless this one simulates
>>> out = np.empty(3, np.float32)
>>> int(k.expf_into(np.float32([0.0, 1.0, np.nan]), out)), out.tolist()  # (undecided count, out)
(0, [1.0, 2.7182817459106445, nan])
>>> int(k.logf_into(np.float32([1.0, 2.0, -1.0]), out)), out.view(np.uint32).tolist()[1:]
(0, [1060205080, 2143289344])
>>> int(k.sinpif_into(np.float32([0.5, -1.0, np.inf]), out)), out.view(np.uint32).tolist()
(0, [1065353216, 2147483648, 2143289344])
>>> int(k.cospif_into(np.float32([0.5, 1.0, 0.25]), out)), out.tolist()
(0, [0.0, -1.0, 0.7071067690849304])
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32, void

from .. import crmath as cpu
from . import erf_tanh
from .base import THREADS, CudaBase, device, grid, undecided_slots

UNDECIDED = cpu.UNDECIDED


def bind(fn, **names):
    """`fn` (native/crmath.py's, jitted or not) compiled for this target: its primitives
    this target's, and the `names` it calls (the CPU module's jitted helpers) the versions
    given."""
    return device(fn, cpu.PRIMITIVES, **names)


exp_elem = bind(cpu.exp_elem)
log_elem = bind(cpu.log_elem)
# sinpi and cospi's shared pieces, each bound with the ones bound before it
_pieces = {}
for _name in cpu.PI_PIECES:
    _pieces[_name] = bind(cpu.PI_PY[_name], **_pieces)
del _name
sinpi_elem = bind(cpu.sinpi_elem, **_pieces)
cospi_elem = bind(cpu.cospi_elem, **_pieces)
# The CPU kernels' per-slot functions (special values, then the element function, UNDECIDED
# where it cannot decide), bound here too: one text for the slot logic on both targets.
_pi = dict(_pi_finite=bind(cpu._pi_finite), _pi_clamp=bind(cpu._pi_clamp))
expf_slot = bind(cpu._expf_special, _exp_elem=exp_elem)
logf_slot = bind(cpu._logf_special, _log_elem=log_elem)
sinpif_slot = bind(cpu._sinpif_special, _sinpi_elem=sinpi_elem, **_pi)
cospif_slot = bind(cpu._cospif_special, _cospi_elem=cospi_elem, **_pi)


def expf_kernel(x, xb, out, ob):
    """out[i] = expf(x[i]); xb, ob: uint32 views of x, out."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        expf_slot(x[i], xb[i], out, ob, i)


def logf_kernel(xb, out, ob):
    """out[i] = logf of the binary32 value with pattern xb[i]; ob: uint32 view of out."""
    for i in range(cuda.grid(1), xb.size, cuda.gridsize(1)):
        logf_slot(np.int64(xb[i]), out, ob, i)


def sinpif_kernel(x, xb, out, ob):
    """out[i] = sinpif(x[i]); xb, ob: uint32 views of x, out."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        sinpif_slot(x[i], xb[i], out, ob, i)


def cospif_kernel(x, xb, out, ob):
    """out[i] = cospif(x[i]); xb, ob: uint32 views of x, out."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        cospif_slot(x[i], xb[i], out, ob, i)


F32_1D = float32[::1]
U32_1D = uint32[::1]
KERNELS = {
    "expf": (expf_kernel, void(F32_1D, U32_1D, F32_1D, U32_1D)),
    "logf": (logf_kernel, void(U32_1D, F32_1D, U32_1D)),
    "sinpif": (sinpif_kernel, void(F32_1D, U32_1D, F32_1D, U32_1D)),
    "cospif": (cospif_kernel, void(F32_1D, U32_1D, F32_1D, U32_1D)),
    **erf_tanh.KERNELS,
}


class CudaCrmath(CudaBase):
    """expf/logf/sinpif/cospif on an NVIDIA GPU (or the simulator); x and out are flat float32 numpy arrays."""

    takes_pieces = False

    KERNELS = KERNELS

    def _run(self, name: str, x, out) -> int:
        n = out.size
        if n == 0:
            return 0
        dx = cuda.to_device(x)
        dout = cuda.device_array(n, np.float32)
        args = (dx, dx.view(np.uint32), dout, dout.view(np.uint32))
        self._k[name][grid(n), THREADS](*(args[1:] if name == "logf" else args))
        dout.copy_to_host(out)
        return undecided_slots(out, UNDECIDED)

    def expf_into(self, x, out) -> int:
        """Write expf(x) into out (flat float32); returns the number of UNDECIDED slots."""
        return self._run("expf", x, out)

    def logf_into(self, x, out) -> int:
        """Write logf(x) into out; returns the number of UNDECIDED slots."""
        return self._run("logf", x, out)

    def sinpif_into(self, x, out) -> int:
        """Write sinpif(x) into out; returns the number of UNDECIDED slots."""
        return self._run("sinpif", x, out)

    def cospif_into(self, x, out) -> int:
        """Write cospif(x) into out; returns the number of UNDECIDED slots."""
        return self._run("cospif", x, out)

    def tanhf_into(self, x, out) -> int:
        """Write tanhf(x) into out; returns the number of UNDECIDED slots."""
        return self._run("tanhf", x, out)

    def erff_into(self, x, out) -> int:
        """Write erff(x) into out; returns the number of UNDECIDED slots."""
        return self._run("erff", x, out)

    def gelu_into(self, x, tanh: bool, out) -> int:
        """Write gelu_tanh(x) if tanh else gelu_erf(x) into out; returns the UNDECIDED count."""
        n = out.size
        if n == 0:
            return 0
        dx = cuda.to_device(x)
        dout = cuda.device_array(n, np.float32)
        self._k["gelu_tanh" if tanh else "gelu_erf"][grid(n), THREADS](dx, dout, dout.view(np.uint32))
        dout.copy_to_host(out)
        return undecided_slots(out, UNDECIDED)

    def gelu_backward_into(self, dy, x, tanh: bool, dx) -> int:
        """Write gelu_tanh_grad(dy, x) if tanh else gelu_erf_grad(dy, x) into dx; returns the UNDECIDED count."""
        n = dx.size
        if n == 0:
            return 0
        ddy, dxx = cuda.to_device(dy), cuda.to_device(x)
        dout = cuda.device_array(n, np.float32)
        name = "gelu_tanh_grad" if tanh else "gelu_erf_grad"
        self._k[name][grid(n), THREADS](ddy, dxx, dout, dout.view(np.uint32))
        dout.copy_to_host(dx)
        return undecided_slots(dx, UNDECIDED)


def load(mode: str, backend: str = "cuda") -> CudaCrmath:
    return CudaCrmath(mode)
