"""Learning-rate schedule values through the C kernel in schedule.c (the second spelling).

The arithmetic is `native/schedule.py`'s pieces (warmup_ve, linear_ve, sin_ve,
cos_ve, decide) written in C, one binary64 operation per statement in the same
order, so the computed value, the rounding test and therefore the UNDECIDED steps
are the same as cpu-numba's. The polynomial coefficients and the constants are not
copied into the C source: every call passes `mj_sched_tab`, filled here from the
module globals of `native/schedule.py` (which takes the coefficients from
`oracles/schedule.kernel_coefficients()`).

Reproducibility: built with -ffp-contract=off -fno-fast-math and no libm; OpenMP
over blocks of steps, each step depending on its own t alone, so the thread count
cannot reach the bits; the undecided count is an integer sum.

>>> import numpy as np
>>> out = np.empty(6, np.float32)
>>> k = load("identical")
>>> k.schedule_into(cpu.LINEAR, np.float32(1.0), np.float32(0.0), 2, 6, 1, out), out.tolist()
(0, [0.5, 1.0, 0.75, 0.5, 0.25, 0.0])
>>> k.schedule_into(cpu.COSINE, np.float32(1.0), np.float32(0.0), 0, 4, 1, out), out.tolist()
(0, [0.8535534143447876, 0.5, 0.1464466154575348, 0.0, 0.0, 0.0])
"""
from __future__ import annotations

import numpy as np

from .. import schedule as cpu
from .base import CffiBase

# mj_sched_tab field -> the native/schedule.py global it is filled from
_FIELDS = {"err": "ERR", "zero": "ZERO", "block": "BLOCK", "constant": "CONSTANT",
           "linear": "LINEAR", "cosine": "COSINE", "undecided": "UNDECIDED"}
_COEFFS = {"sin_c": "SIN", "cos_c": "COS"}
UNDECIDED = cpu.UNDECIDED


class CffiSchedule(CffiBase):
    """Schedule values in C, OpenMP over blocks of steps; out written."""

    takes_pieces = False

    def __init__(self, mode: str):
        super().__init__(mode)
        tab = self._ffi.new("mj_sched_tab *")
        for field, name in _FIELDS.items():
            v = getattr(cpu, name)
            setattr(tab, field, int(v) if isinstance(v, (int, np.integer)) else float(v))
        for field, name in _COEFFS.items():
            coeffs = getattr(cpu, name)
            if len(getattr(tab, field)) != coeffs.size:  # the C Horner loops run over the field
                raise RuntimeError(f"mj_sched_tab.{field} holds {len(getattr(tab, field))} "
                                   f"coefficients, native/schedule.py has {coeffs.size}")
            setattr(tab, field, [float(c) for c in coeffs])
        self._tab = tab

    def schedule_into(self, kind, peak, min_lr, warmup, total, t0, out) -> int:
        """Write the values of steps t0 .. t0 + out.size - 1 into out (flat float32);
        returns the number of UNDECIDED steps (see native/schedule.py)."""
        p, m = float(cpu._rate(peak)), float(cpu._rate(min_lr))
        return int(self._lib.mj_schedule(int(kind), p, m, int(warmup), int(total), int(t0),
                                         self._ptr(out), out.size, self._tab))


def load(mode: str, backend: str = "cpu-cffi") -> CffiSchedule:
    return CffiSchedule(mode)
