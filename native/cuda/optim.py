"""CUDA kernels for SGD, Adam/AdamW, the clip and gradient accumulation.

The per-element arithmetic is `native/optim.py`'s source, compiled here with the
CUDA primitives (libdevice `f*_rn` on a GPU, numpy float32 on the simulator), so
the CPU and GPU order of operations is one text. Elementwise kernels loop grid-stride over elements.

Arrays may be numpy arrays (they travel to the device and, when written, back)
or device arrays (they stay): the optimizer keeps its moments resident, and
parameters too after `params_to_device()`. These kernels take flat arrays only
(no `takes_pieces`), so separate parameter arrays arrive packed into one flat
copy (mojolike._params.Registry): host arrays cross to the device at every step
anyway, and one flat transfer and one launch beat a table of per-tensor device
pointers that would need as many transfers; `params_to_device()` keeps the flat
copy resident.

Reproducibility: elementwise kernels have no reductions; the clip's sums are the
fold tree (native/cuda/fold.py), so no launch geometry reaches the bits.
"""
from __future__ import annotations

import types as pytypes

import numpy as np
from numba import boolean, cuda, float32, int32, void

from .. import optim as cpu
from . import prims
from .fold import NEG_ZERO, CudaFold

THREADS = 32 if prims.SIMULATOR else 256
# Elementwise kernels loop grid-stride; the simulator, which runs a Python thread per
# CUDA thread, gets one block, so a launch creates 32 threads instead of one per element.
MAX_BLOCKS = 1 if prims.SIMULATOR else 65535
F32_1D = float32[::1]


def bind(fn):
    """`fn` with the primitive names resolved to this target's primitives."""
    env = dict(fn.__globals__, **{name: getattr(prims, name) for name in cpu.PRIMITIVES})
    bound = pytypes.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
    if prims.SIMULATOR:
        return bound  # plain Python: it calls no CUDA API, and skips the simulator's wrapper
    return cuda.jit(device=True, inline="always")(bound)


sgd_elem = bind(cpu.sgd_elem)
adam_elem = bind(cpu.adam_elem)


def sgd_kernel(p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov,
               maximize):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        bi = b[i] if use_momentum else NEG_ZERO  # without momentum b is a 1-element placeholder
        p[i], bi = sgd_elem(p[i], g[i], bi, first, lr, momentum, one_minus_damp, wd,
                            use_momentum, use_decay, nesterov, maximize)
        if use_momentum:
            b[i] = bi


def adam_kernel(p, g, m, v, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                param_decay, coupled, decoupled, maximize):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        p[i], m[i], v[i] = adam_elem(p[i], g[i], m[i], v[i], beta1, beta2, eps, wd, one_minus_b1,
                                     one_minus_b2, step_size, sqrt_bc2, param_decay, coupled,
                                     decoupled, maximize)


def scale_kernel(g, coef):
    for i in range(cuda.grid(1), g.size, cuda.gridsize(1)):
        g[i] = prims.mul(g[i], coef)


def add_kernel(a, b, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = prims.add(a[i], b[i])


def finite_kernel(x, bad):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        d = prims.sub(x[i], x[i])  # NaN exactly when x[i] is inf or NaN
        if d != d:
            bad[0] = 1  # every writer stores the same value: no race on the result


def norm_squares_kernel(s, out):
    for i in range(cuda.grid(1), s.size, cuda.gridsize(1)):
        n = prims.sqrt(s[i])
        out[i] = prims.mul(n, n)


def clip_finish_kernel(total_sq, max_norm, eps, out):
    if cuda.grid(1) == 0:
        total = prims.sqrt(total_sq)
        coef = prims.div(max_norm, prims.add(total, eps))
        out[0] = total
        out[1] = float32(1.0) if coef > 1.0 else coef  # NaN stays NaN, as in the oracle


_B = boolean
KERNELS = {
    "sgd": (sgd_kernel, void(F32_1D, F32_1D, F32_1D, _B, float32, float32, float32, float32, _B, _B, _B, _B)),
    "adam": (adam_kernel, void(F32_1D, F32_1D, F32_1D, F32_1D, *[float32] * 9, _B, _B, _B)),
    "scale": (scale_kernel, void(F32_1D, float32)),
    "add": (add_kernel, void(F32_1D, F32_1D, F32_1D)),
    "finite": (finite_kernel, void(F32_1D, int32[::1])),
    "norm_squares": (norm_squares_kernel, void(F32_1D, F32_1D)),
    "clip_finish": (clip_finish_kernel, void(float32, float32, float32, F32_1D)),
}


class CudaOptim:
    """Optimizer kernels on an NVIDIA GPU (or the simulator)."""

    device_resident = True  # parameters may stay on the device (params_to_device)

    # argument positions each kernel writes (numpy arguments are copied back after it)
    WRITES = {"sgd": (0, 2), "adam": (0, 2, 3), "scale": (0,), "add": (2,), "finite": (1,),
              "norm_squares": (1,), "clip_finish": (3,)}

    def __init__(self, mode: str):
        self.backend = "cuda-sim" if prims.SIMULATOR else "cuda"
        self.numeric_mode = mode  # every mode runs the rn kernels
        self._k = {name: cuda.jit(sig, cache=False)(fn) for name, (fn, sig) in KERNELS.items()}
        self._fold = CudaFold(mode)
        self.details = dict(self._fold.details)

    def new_state(self, n: int):
        return cuda.to_device(np.zeros(n, np.float32))

    def _run(self, name: str, n: int, *args):
        writes = self.WRITES.get(name, ())
        dev, back = [], []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                d = cuda.to_device(a)
                if i in writes:
                    back.append((a, d))
                a = d
            dev.append(a)
        self._k[name][max(1, min(MAX_BLOCKS, (n + THREADS - 1) // THREADS)), THREADS](*dev)
        for host, d in back:
            d.copy_to_host(host)

    def sgd(self, p, g, b, *scalars_and_flags):
        self._run("sgd", p.size, p, g, b, *scalars_and_flags)

    def adam(self, p, g, m, v, *scalars_and_flags):
        self._run("adam", p.size, p, g, m, v, *scalars_and_flags)

    def scale(self, g, coef):
        self._run("scale", g.size, g, coef)

    def add(self, a, b, out):
        self._run("add", out.size, a, b, out)

    def all_finite(self, x) -> bool:
        bad = cuda.to_device(np.zeros(1, np.int32))
        self._run("finite", x.size, x, bad)
        return int(bad.copy_to_host()[0]) == 0

    def segment_sumsq(self, x, offsets) -> np.ndarray:
        return self._fold.segment_sumsq(x, offsets)

    def clip_coef(self, sumsqs, max_norm, eps):
        sq = cuda.device_array(sumsqs.size, np.float32)
        self._run("norm_squares", sumsqs.size, sumsqs, sq)
        total_sq = self._fold.fold(sq)
        out = np.empty(2, np.float32)
        self._run("clip_finish", 1, total_sq, max_norm, eps, out)
        return out[0], out[1]


def load(mode: str, backend: str = "cuda") -> CudaOptim:
    return CudaOptim(mode)
