"""SGD, Adam/AdamW, the clip and accumulation through the C kernels in optim.c.

Parameters and gradients are flat float32 arrays or pieces (separate arrays with
their offsets, mojolike.optim.params.Pieces), passed to C as tables of addresses (one
per tensor) with the offsets; the optimizer state is flat. Cast twins (sgd_twins,
adam_twins) are uint16 pieces or one flat uint16 array, a table of their addresses too.

>>> import numpy as np
>>> p = np.float32([1.0])
>>> load("identical").scale(p, np.float32(0.5)); p
array([0.5], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ...core.pieces import Pieces, address, operands, table
from ...oracles.fold import CHUNK
from .base import CffiBase


class CffiOptim(CffiBase):
    """Optimizer kernels in C, OpenMP over element ranges; updated in place. `takes_pieces`:
    parameters and gradients may be pieces. sgd/adam read each gradient as g * grad_scale and
    store that into g only with write_back."""

    takes_pieces = True

    def new_state(self, n: int):
        return np.zeros(n, np.float32)

    def sgd(self, p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay,
            nesterov, maximize, *, grad_scale=None, write_back=False):
        """One SGD pass reading each gradient as g * grad_scale (None: 1); with write_back the
        scaled gradient is stored into g, else g is left as it was."""
        (tp, tg), cut = operands(p, g)
        # without momentum b is a placeholder: every entry points at it, none is touched
        tb = table(b, cut if use_momentum else np.zeros_like(cut))
        self._lib.mj_sgd_table(self._i64(tp), self._i64(tg), self._i64(tb), self._i64(cut),
                               cut.size - 1, first, lr, momentum, one_minus_damp, wd, use_momentum,
                               use_decay, nesterov, maximize, _coef(grad_scale),
                               bool(write_back))

    def adam(self, p, g, m, v, *scalars_and_flags, grad_scale=None, write_back=False):
        """One Adam pass reading each gradient as g * grad_scale (None: 1); with write_back the
        scaled gradient is stored into g, else g is left as it was."""
        tables, cut = operands(p, g, m, v)
        self._lib.mj_adam_table(*map(self._i64, tables), self._i64(cut), cut.size - 1,
                                *scalars_and_flags, _coef(grad_scale), bool(write_back))

    def sgd_twins(self, p, g, b, tw, kinds, cut, first, lr, momentum, one_minus_damp, wd,
                  use_momentum, use_decay, nesterov, maximize, *, grad_scale=None,
                  write_back=False):
        """`sgd`, writing each element's cast twin in the same pass (optim.c): tw uint16
        pieces or one flat uint16 array, kinds[t] 1 bfloat16, 2 float16, 0 untouched.

        Reproducibility: p and b are `sgd`'s bits, tw[k] mojolike.cast of the new p[k], on
        any OpenMP thread count.

        >>> import numpy as np
        >>> p, tw = np.float32([1.0, 2.0]), np.zeros(2, np.uint16)
        >>> load("identical").sgd_twins(p, np.float32([1.0, 1.0]), np.zeros(1, np.float32),
        ...     tw, np.int64([2, 1]), np.int64([0, 1, 2]), True, np.float32(0.25),
        ...     *map(np.float32, (0.0, 1.0, 0.0)), *[np.bool_(False)] * 4)
        >>> p.tolist(), [hex(v) for v in tw.tolist()]
        ([0.75, 1.75], ['0x3a00', '0x3fe0'])
        """
        cut = np.ascontiguousarray(cut, np.int64)
        tb = table(b, cut if use_momentum else np.zeros_like(cut))
        self._lib.mj_sgd_twins_table(self._i64(table(p, cut)), self._i64(table(g, cut)),
                                     self._i64(tb), self._i64(_twin_table(tw, cut)),
                                     self._i64(np.ascontiguousarray(kinds, np.int64)),
                                     self._i64(cut), cut.size - 1, first, lr, momentum,
                                     one_minus_damp, wd, use_momentum, use_decay, nesterov,
                                     maximize, _coef(grad_scale), bool(write_back))

    def adam_twins(self, p, g, m, v, tw, kinds, cut, *scalars_and_flags, grad_scale=None,
                   write_back=False):
        """`adam`, writing each element's cast twin in the same pass (optim.c), as
        `sgd_twins` does.

        Reproducibility: p, m and v are `adam`'s bits; tw as in `sgd_twins`."""
        cut = np.ascontiguousarray(cut, np.int64)
        tables = [table(x, cut) for x in (p, g, m, v)] + [_twin_table(tw, cut)]
        self._lib.mj_adam_twins_table(*map(self._i64, tables),
                                      self._i64(np.ascontiguousarray(kinds, np.int64)),
                                      self._i64(cut), cut.size - 1, *scalars_and_flags,
                                      _coef(grad_scale), bool(write_back))

    def scale(self, g, coef):
        (tg,), cut = operands(g)
        self._lib.mj_scale_table(self._i64(tg), self._i64(cut), cut.size - 1, coef)

    def add(self, a, b, out):
        self._lib.mj_add(self._ptr(a), self._ptr(b), self._ptr(out), out.size)

    def all_finite(self, x) -> bool:
        (tx,), cut = operands(x)
        return bool(self._lib.mj_all_finite_table(self._i64(tx), self._i64(cut), cut.size - 1))

    def segment_sumsq(self, x, offsets):
        offsets, starts = _chunk_starts(offsets)
        partials = np.empty(int(starts[-1]), np.float32)
        out = np.empty(offsets.size - 1, np.float32)
        tx = table(x, offsets)
        self._lib.mj_segment_sumsq_table(self._i64(tx), self._i64(offsets), self._i64(starts),
                                         out.size, self._ptr(partials), self._ptr(out))
        return out

    def _segment_sums(self, x, offsets, squares: bool):
        offsets, starts = _chunk_starts(offsets)
        nchunks = int(starts[-1])
        partials = np.empty(nchunks, np.float32)
        partials2 = np.empty(nchunks if squares else 0, np.float32)
        sums = np.empty(offsets.size - 1, np.float32)
        sumsqs = np.empty(sums.size if squares else 0, np.float32)
        self._lib.mj_segment_sums_table(self._i64(table(x, offsets)), self._i64(offsets),
                                        self._i64(starts), sums.size, squares, self._ptr(partials),
                                        self._ptr(partials2), self._ptr(sums), self._ptr(sumsqs))
        return sums, sumsqs

    def segment_fold(self, x, offsets):
        """The fold of every tensor's cells."""
        return self._segment_sums(x, offsets, False)[0]

    def segment_fold_sumsq(self, x, offsets):
        """(fold, sumsq) of every tensor's cells, from one read of x."""
        return self._segment_sums(x, offsets, True)

    def clip_coef(self, sumsqs, max_norm, eps):
        work = np.empty(sumsqs.size + (sumsqs.size + CHUNK - 1) // CHUNK, np.float32)
        out = np.empty(2, np.float32)
        self._lib.mj_clip_coef(self._ptr(sumsqs), sumsqs.size, max_norm, eps, self._ptr(work),
                               self._ptr(out))
        return out[0], out[1]


def _coef(grad_scale) -> np.float32:
    return np.float32(1.0 if grad_scale is None else grad_scale)


def _twin_table(tw, cut) -> np.ndarray:
    """Each tensor's twin address: tw is uint16 pieces, or one flat uint16 array cut at cut."""
    if isinstance(tw, Pieces):
        return tw.addresses
    return address(tw) + 2 * cut[:-1]


def _chunk_starts(offsets) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64, the index of each tensor's first chunk plus the total)."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    starts = np.zeros(offsets.size, np.int64)
    np.cumsum((np.diff(offsets) + CHUNK - 1) // CHUNK, out=starts[1:])
    return offsets, starts


def load(mode: str, backend: str = "cpu-cffi") -> CffiOptim:
    return CffiOptim(mode)
