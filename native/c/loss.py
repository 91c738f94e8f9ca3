"""Cross-entropy over class indices through the C kernel in loss.c (the second spelling).

The arithmetic is contracts/loss.md's, written in C: the fold tree of fold.c, and
expf/logf as native/crmath.py's exp_elem/log_elem, one binary64 operation per
statement in the same order. The tables and constants are not copied into the C
source: every call passes `mj_loss_tab`, filled here from the module globals of
`native/crmath.py`.

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

import numpy as np

from .. import crmath as cpu
from ..loss import INT64_MAX, INT64_MIN
from .fold import CffiFold

# mj_loss_tab field -> the native/crmath.py global it is filled from
_FIELDS = {
    "inv_ln2_32": "INV_LN2_32", "ln2_32_hi": "LN2_32_HI", "ln2_32_lo": "LN2_32_LO",
    "ln2_hi": "LN2_HI", "ln2_lo": "LN2_LO", "shifter": "SHIFTER", "err": "ERR", "one": "ONE",
    "two_m23": "TWO_M23", "two_m24": "TWO_M24",
    "e2": "E2", "e3": "E3", "e4": "E4", "e5": "E5", "e6": "E6",
    "l2": "L2", "l3": "L3", "l4": "L4", "l5": "L5", "l6": "L6", "l7": "L7", "l8": "L8",
    "pow2_bias": "POW2_BIAS", "sqrt2_m24": "SQRT2_M24", "exp_tiny": "EXP_TINY",
}
_TABLES = {"exp2_32": "EXP2_32", "pow2": "POW2", "log_inv": "LOG_INV", "log_hi": "LOG_HI",
           "log_lo": "LOG_LO"}


class CffiLoss(CffiFold):
    """Cross-entropy in C, OpenMP over rows (the interface of native/loss.py's NumbaLoss)."""

    WRITES = {"cross_entropy_into": (9, 10, 11)}

    def __init__(self, mode: str):
        super().__init__(mode)
        ffi = self._ffi
        tab = ffi.new("mj_loss_tab *")
        for field, name in _FIELDS.items():
            v = getattr(cpu, name)
            setattr(tab, field, int(v) if isinstance(v, (int, np.integer)) else float(v))
        self._arrays = {}  # the tables, kept alive as long as the struct points into them
        for field, name in _TABLES.items():
            a = np.ascontiguousarray(getattr(cpu, name), np.float64)
            buf = ffi.from_buffer("double[]", a)
            self._arrays[field] = (a, buf)
            setattr(tab, field, buf)
        self._tab = tab

    def cross_entropy_into(self, logits, targets, ignore_index, c1, c2, qt, smoothing, g, want_grad,
                           grad, rows, status) -> int:
        """Per-row losses into rows (and the gradient into grad when want_grad).

        status[i] = 1 marks a row with an undecided expf/logf (its outputs are then
        unspecified); returns the number of such rows.
        """
        n, v = logits.shape
        ignore = int(ignore_index)
        if not INT64_MIN <= ignore <= INT64_MAX:
            ignore = -1  # no int64 target can equal it; targets are validated to [0, V)
        ffi = self._ffi
        got = self._lib.mj_cross_entropy(
            self._ptr(logits), ffi.from_buffer("int64_t[]", targets), n, v, ignore,
            float(c1), float(c2), float(qt), bool(smoothing), float(g), bool(want_grad),
            self._ptr(grad), self._ptr(rows), ffi.from_buffer("int32_t[]", status), self._tab)
        if got < 0:
            raise MemoryError("mj_cross_entropy: no memory for a row's work buffer")
        return int(got)


def load(mode: str, backend: str = "cpu-cffi") -> CffiLoss:
    return CffiLoss(mode)
