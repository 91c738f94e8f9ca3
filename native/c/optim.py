"""SGD, Adam/AdamW, the clip and accumulation through the C kernels in optim.c.

>>> import numpy as np
>>> p = np.float32([1.0])
>>> load("identical").scale(p, np.float32(0.5)); p
array([0.5], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ...oracles.fold import CHUNK
from .fold import CffiFold


class CffiOptim(CffiFold):
    """Optimizer kernels in C, OpenMP over elements; flat float32 arrays updated in place."""

    WRITES = {"sgd": (0, 2), "adam": (0, 2, 3), "scale": (0,), "add": (2,)}

    def new_state(self, n: int):
        return np.zeros(n, np.float32)

    def sgd(self, p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay,
            nesterov, maximize):
        self._lib.mj_sgd(self._ptr(p), self._ptr(g), self._ptr(b), p.size, first, lr, momentum,
                         one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize)

    def adam(self, p, g, m, v, *scalars_and_flags):
        self._lib.mj_adam(self._ptr(p), self._ptr(g), self._ptr(m), self._ptr(v), p.size,
                          *scalars_and_flags)

    def scale(self, g, coef):
        self._lib.mj_scale(self._ptr(g), g.size, coef)

    def add(self, a, b, out):
        self._lib.mj_add(self._ptr(a), self._ptr(b), self._ptr(out), out.size)

    def all_finite(self, x) -> bool:
        return bool(self._lib.mj_all_finite(self._ptr(x), x.size))

    def segment_sumsq(self, x, offsets):
        offsets = np.ascontiguousarray(offsets, np.int64)
        out = np.empty(offsets.size - 1, np.float32)
        work = np.empty((int(np.diff(offsets).max()) + CHUNK - 1) // CHUNK, np.float32)
        self._lib.mj_segment_sumsq(self._ptr(x), self._ffi.from_buffer("int64_t[]", offsets),
                                   out.size, self._ptr(out), self._ptr(work))
        return out

    def clip_coef(self, sumsqs, max_norm, eps):
        work = np.empty(sumsqs.size + (sumsqs.size + CHUNK - 1) // CHUNK, np.float32)
        out = np.empty(2, np.float32)
        self._lib.mj_clip_coef(self._ptr(sumsqs), sumsqs.size, max_norm, eps, self._ptr(work),
                               self._ptr(out))
        return out[0], out[1]


def load(mode: str, backend: str = "cpu-cffi") -> CffiOptim:
    return CffiOptim(mode)
