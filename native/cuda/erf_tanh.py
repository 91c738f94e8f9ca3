"""CUDA kernels for the correctly rounded tanhf and erff, and torch's GELU on them.

The per-element arithmetic is `native/erf_tanh.py`'s (exp64, tanh_elem, erf_elem and
the GELU slot functions), compiled here with the CUDA primitives (libdevice
`dadd_rn`/`dmul_rn`/`ddiv_rn`/`double2float_rn` and `fadd_rn`/`fmul_rn`/`fsub_rn`
on a GPU, numpy scalars on the simulator), so the order of operations is one text
and the UNDECIDED slots (0x7FA00DAD) are the CPU's. gelu_erf_grad's expf is
native/cuda/crmath.py's exp_elem. Kernels loop grid-stride over elements; the
undecided slots are counted on the host after the copy back (no atomics).

Reproducibility: elementwise, no reductions, every float operation a libdevice `_rn`
call (tests/test_ptx_lint.py compiles these kernels, listed in native/cuda/crmath.py's
KERNELS), so no launch geometry reaches the bits.

>>> sorted(KERNELS)
['erff', 'gelu_erf', 'gelu_erf_grad', 'gelu_tanh', 'gelu_tanh_grad', 'tanhf']
"""
from __future__ import annotations

from numba import cuda, float32, uint32, void

from .. import crmath as cr
from .. import erf_tanh as cpu
from .base import device

# the pieces, each bound with the ones bound before it, as module globals the kernels call
_bound = {"exp_elem": device(cr.exp_elem, cr.PRIMITIVES)}
for _name in cpu.PIECES:
    _bound[_name] = device(cpu.PY[_name], cpu.PRIMITIVES, **_bound)
globals().update(_bound)
del _name


def tanhf_kernel(x, xb, out, ob):
    """out[i] = tanhf(x[i]); xb, ob: uint32 views of x, out."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        tanhf_slot(x[i], xb[i], out, ob, i)  # noqa: F821 (a bound piece)


def erff_kernel(x, xb, out, ob):
    """out[i] = erff(x[i])."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        erff_slot(x[i], xb[i], out, ob, i)  # noqa: F821


def gelu_erf_kernel(x, out, ob):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        gelu_erf_slot(x[i], out, ob, i)  # noqa: F821


def gelu_tanh_kernel(x, out, ob):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        gelu_tanh_slot(x[i], out, ob, i)  # noqa: F821


def gelu_erf_grad_kernel(dy, x, out, ob):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        gelu_erf_grad_slot(dy[i], x[i], out, ob, i)  # noqa: F821


def gelu_tanh_grad_kernel(dy, x, out, ob):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        gelu_tanh_grad_slot(dy[i], x[i], out, ob, i)  # noqa: F821


F32_1D = float32[::1]
U32_1D = uint32[::1]
KERNELS = {
    "tanhf": (tanhf_kernel, void(F32_1D, U32_1D, F32_1D, U32_1D)),
    "erff": (erff_kernel, void(F32_1D, U32_1D, F32_1D, U32_1D)),
    "gelu_erf": (gelu_erf_kernel, void(F32_1D, F32_1D, U32_1D)),
    "gelu_tanh": (gelu_tanh_kernel, void(F32_1D, F32_1D, U32_1D)),
    "gelu_erf_grad": (gelu_erf_grad_kernel, void(F32_1D, F32_1D, F32_1D, U32_1D)),
    "gelu_tanh_grad": (gelu_tanh_grad_kernel, void(F32_1D, F32_1D, F32_1D, U32_1D)),
}
