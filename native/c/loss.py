"""Cross-entropy over class indices through the C kernel in loss.c (the second spelling).

The arithmetic is contracts/loss.md's, written in C: the fold tree of fold.c, and
expf/logf are crmath.c's element functions (one compilation unit), with the
tables of `mj_crmath_tab` that `native/c/crmath.py`'s `CffiCrmath` fills from the
module globals of `native/crmath.py`.

Reproducibility: built with -ffp-contract=off -fno-fast-math and no libm; OpenMP
over rows, each row one thread's serial work, so the thread count cannot reach
the bits.

>>> import numpy as np
>>> rows, status = np.empty(1, np.float32), np.empty(1, np.int32)
>>> load("identical").cross_entropy_into(
...     np.float32([[0.0, 0.0]]), np.int64([0]), -100, np.float32(1), np.float32(0), np.float32(1),
...     False, np.float32(1), False, np.zeros((1, 1), np.float32), rows, status)
0
>>> rows.tolist(), status.tolist()   # ln 2
([0.6931471824645996], [0])
"""
from __future__ import annotations

from ..calls import LossCalls
from .base import CffiBase
from .crmath import CffiCrmath


class CffiLoss(LossCalls, CffiBase):
    """Cross-entropy in C, OpenMP over rows (LossCalls documents the method)."""

    takes_pieces = False

    def __init__(self, mode: str):
        super().__init__(mode)
        self._crmath = CffiCrmath(mode)  # the same compiled module; it owns the expf/logf tables
        if self._crmath._ffi is not self._ffi:
            raise RuntimeError("cpu-cffi: the loss and crmath kernels came from two C modules")

    def _cross_entropy(self, logits, targets, n, v, ignore, c1, c2, qt, smoothing, g, want_grad,
                       grad, rows, status) -> int:
        ffi = self._ffi
        got = self._lib.mj_cross_entropy(
            self._ptr(logits), self._i64(targets), n, v, ignore, float(c1), float(c2), float(qt),
            smoothing, float(g), want_grad, self._ptr(grad), self._ptr(rows),
            ffi.from_buffer("int32_t[]", status), self._crmath._tab)
        if got < 0:
            raise MemoryError("mj_cross_entropy: no memory for a row's work buffer")
        return int(got)


def load(mode: str, backend: str = "cpu-cffi") -> CffiLoss:
    return CffiLoss(mode)
