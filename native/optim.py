"""numba CPU kernels for SGD, Adam/AdamW, the clip and gradient accumulation.

The per-element arithmetic (`sgd_elem`, `adam_elem`) is written once here, in
terms of the primitives add/sub/mul/div/sqrt. On the CPU those names are the
plain binary32 operators; `native/cuda/optim.py` compiles the same source with
libdevice `f*_rn` primitives (and the simulator's numpy ones), so the order of
operations cannot drift between the two. The C kernels are the independent
second spelling, and the oracle (`oracles/optim.py`) the definition.

Reproducibility: no reduction here is a float sum except the clip's, which is
the fold tree (native/fold.py); elementwise kernels are parallel over elements,
so the thread count never reaches the bits.

>>> import numpy as np
>>> p, g = np.float32([1.0]), np.float32([0.5])
>>> load("identical").sgd(p, g, np.zeros(1, np.float32), True, 0.1, 0.0, 1.0, 0.0, False, False, False, False)
>>> p
array([0.95], dtype=float32)
"""
from __future__ import annotations

import math
from operator import add, mul, sub
from operator import truediv as div

import numba
import numpy as np
from numba import boolean, float32, njit, prange, types, void

from . import fold
from .fold import IN, NEG_ZERO

sqrt = math.sqrt  # numba lowers math.sqrt of a float32 to the IEEE sqrtss instruction
PRIMITIVES = ("add", "sub", "mul", "div", "sqrt")
_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
F32 = float32[::1]


def sgd_elem(p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov,
             maximize):
    """One element of an SGD step (torch's single-tensor order): returns (p, b)."""
    if maximize:
        g = -g
    if use_decay:
        g = add(g, mul(wd, p))
    if use_momentum:
        if first:
            b = g
        else:
            b = add(mul(b, momentum), mul(one_minus_damp, g))
        if nesterov:
            g = add(g, mul(momentum, b))
        else:
            g = b
    return sub(p, mul(lr, g)), b


def adam_elem(p, g, m, v, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
              param_decay, coupled, decoupled, maximize):
    """One element of an Adam/AdamW step: returns (p, m, v)."""
    if maximize:
        g = -g
    if decoupled:
        p = mul(p, param_decay)
    if coupled:
        g = add(g, mul(wd, p))
    m = add(mul(beta1, m), mul(one_minus_b1, g))
    v = add(mul(beta2, v), mul(one_minus_b2, mul(g, g)))
    d = add(div(sqrt(v), sqrt_bc2), eps)
    return sub(p, mul(step_size, div(m, d))), m, v


_sgd_elem = njit(inline="always", error_model="numpy")(sgd_elem)
_adam_elem = njit(inline="always", error_model="numpy")(adam_elem)


@njit(void(F32, IN, F32, boolean, float32, float32, float32, float32, boolean, boolean, boolean,
           boolean), parallel=True, **_STRICT)
def _sgd(p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize):
    # without momentum b is a 1-element placeholder: never read, never written
    for i in prange(p.size):
        bi = b[i] if use_momentum else NEG_ZERO
        p[i], bi = _sgd_elem(p[i], g[i], bi, first, lr, momentum, one_minus_damp, wd,
                             use_momentum, use_decay, nesterov, maximize)
        if use_momentum:
            b[i] = bi


@njit(void(F32, IN, F32, F32, float32, float32, float32, float32, float32, float32, float32, float32,
           float32, boolean, boolean, boolean), parallel=True, **_STRICT)
def _adam(p, g, m, v, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
          param_decay, coupled, decoupled, maximize):
    for i in prange(p.size):
        p[i], m[i], v[i] = _adam_elem(p[i], g[i], m[i], v[i], beta1, beta2, eps, wd, one_minus_b1,
                                      one_minus_b2, step_size, sqrt_bc2, param_decay, coupled,
                                      decoupled, maximize)


@njit(void(F32, float32), parallel=True, **_STRICT)
def _scale(g, coef):
    for i in prange(g.size):
        g[i] = g[i] * coef


@njit(void(IN, IN, F32), parallel=True, **_STRICT)
def _add(a, b, out):
    for i in prange(out.size):
        out[i] = a[i] + b[i]


@njit(void(IN, types.Array(numba.uint8, 1, "C")), parallel=True, **_STRICT)
def _finite_blocks(x, ok):
    """ok[c] = 1 when block c (4096 elements) holds only finite values."""
    for c in prange(ok.size):
        flag = 1
        for k in range(c * 4096, min(c * 4096 + 4096, x.size)):
            v = x[k]
            if v - v != 0:  # inf - inf and NaN - NaN are NaN; finite - itself is 0
                flag = 0
        ok[c] = flag


@njit(void(IN, F32), **_STRICT)
def _norm_squares(sumsqs, out):
    for j in range(sumsqs.size):
        n = sqrt(sumsqs[j])
        out[j] = n * n


@njit(types.UniTuple(float32, 2)(float32, float32, float32), **_STRICT)
def _clip_finish(total_sq, max_norm, eps):
    total = sqrt(total_sq)
    den = total + eps
    coef = max_norm / den
    if coef > np.float32(1.0):
        coef = np.float32(1.0)
    return total, coef


class NumbaOptim(fold.NumbaThreads):
    """Optimizer kernels on the CPU with numba. Arrays are flat float32 and updated in place."""

    backend = "cpu-numba"
    WRITES = {"sgd": (0, 2), "adam": (0, 2, 3), "scale": (0,), "add": (2,)}

    def __init__(self, mode: str):
        self.numeric_mode = mode
        self.details = {"numba": numba.__version__, "threads": numba.get_num_threads()}

    def new_state(self, n: int):
        return np.zeros(n, np.float32)

    def sgd(self, p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay,
            nesterov, maximize):
        _sgd(p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize)

    def adam(self, p, g, m, v, *scalars_and_flags):
        _adam(p, g, m, v, *scalars_and_flags)

    def scale(self, g, coef):
        _scale(g, coef)

    def add(self, a, b, out):
        _add(a, b, out)

    def all_finite(self, x) -> bool:
        ok = np.empty((x.size + 4095) // 4096, np.uint8)
        _finite_blocks(x, ok)
        return bool(ok.all())

    def segment_sumsq(self, x, offsets):
        return fold.segment_sumsq(x, offsets)

    def clip_coef(self, sumsqs, max_norm, eps):
        """(total, coef): total = sqrt(fold(sqrt(s_j)^2)), coef = min(max_norm / (total + eps), 1)."""
        sq = np.empty(sumsqs.size, np.float32)
        _norm_squares(sumsqs, sq)
        p = fold._workspace(sq.size)
        fold._fold_partials(sq, p)
        total, coef = _clip_finish(fold._pairwise(p), max_norm, eps)
        return np.float32(total), np.float32(coef)


def load(mode: str, backend: str = "cpu-numba") -> NumbaOptim:
    return NumbaOptim(mode)
