"""SGD, Adam/AdamW, the clip and accumulation through the C kernels in optim.c.

Parameters and gradients are flat float32 arrays or pieces (separate arrays with
their offsets, mojolike._params.Pieces), passed to C as tables of addresses (one
per tensor) with the offsets; the optimizer state is flat.

>>> import numpy as np
>>> p = np.float32([1.0])
>>> load("identical").scale(p, np.float32(0.5)); p
array([0.5], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ...oracles.fold import CHUNK
from ..._params import operands, table
from .fold import CffiFold


class CffiOptim(CffiFold):
    """Optimizer kernels in C, OpenMP over element ranges; updated in place. `takes_pieces`:
    parameters and gradients may be pieces, and sgd/adam take the clip's grad_scale."""

    takes_pieces = True
    WRITES = {"sgd": (0, 2), "adam": (0, 2, 3), "scale": (0,), "add": (2,)}

    def new_state(self, n: int):
        return np.zeros(n, np.float32)

    def _i64(self, a: np.ndarray):
        return self._ffi.from_buffer("int64_t[]", a)

    def sgd(self, p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay,
            nesterov, maximize, *, grad_scale=None):
        """One SGD pass; with grad_scale, g = g * grad_scale first (written back)."""
        (tp, tg), cut = operands(p, g)
        # without momentum b is a placeholder: every entry points at it, none is touched
        tb = table(b, cut if use_momentum else np.zeros_like(cut))
        self._lib.mj_sgd_table(self._i64(tp), self._i64(tg), self._i64(tb), self._i64(cut),
                               cut.size - 1, first, lr, momentum, one_minus_damp, wd, use_momentum,
                               use_decay, nesterov, maximize, *_scaling(grad_scale))

    def adam(self, p, g, m, v, *scalars_and_flags, grad_scale=None):
        """One Adam pass; with grad_scale, g = g * grad_scale first (written back)."""
        tables, cut = operands(p, g, m, v)
        self._lib.mj_adam_table(*map(self._i64, tables), self._i64(cut), cut.size - 1,
                                *scalars_and_flags, *_scaling(grad_scale))

    def scale(self, g, coef):
        (tg,), cut = operands(g)
        self._lib.mj_scale_table(self._i64(tg), self._i64(cut), cut.size - 1, coef)

    def add(self, a, b, out):
        self._lib.mj_add(self._ptr(a), self._ptr(b), self._ptr(out), out.size)

    def all_finite(self, x) -> bool:
        (tx,), cut = operands(x)
        return bool(self._lib.mj_all_finite_table(self._i64(tx), self._i64(cut), cut.size - 1))

    def segment_sumsq(self, x, offsets):
        offsets = np.ascontiguousarray(offsets, np.int64)
        starts = np.zeros(offsets.size, np.int64)
        np.cumsum((np.diff(offsets) + CHUNK - 1) // CHUNK, out=starts[1:])
        partials = np.empty(int(starts[-1]), np.float32)
        out = np.empty(offsets.size - 1, np.float32)
        tx = table(x, offsets)
        self._lib.mj_segment_sumsq_table(self._i64(tx), self._i64(offsets), self._i64(starts),
                                         out.size, self._ptr(partials), self._ptr(out))
        return out

    def clip_coef(self, sumsqs, max_norm, eps):
        work = np.empty(sumsqs.size + (sumsqs.size + CHUNK - 1) // CHUNK, np.float32)
        out = np.empty(2, np.float32)
        self._lib.mj_clip_coef(self._ptr(sumsqs), sumsqs.size, max_norm, eps, self._ptr(work),
                               self._ptr(out))
        return out[0], out[1]


def _scaling(grad_scale) -> tuple:
    return (np.float32(1.0), False) if grad_scale is None else (np.float32(grad_scale), True)


def load(mode: str, backend: str = "cpu-cffi") -> CffiOptim:
    return CffiOptim(mode)
