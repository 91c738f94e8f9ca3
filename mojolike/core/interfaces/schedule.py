"""The schedule family's kernel interface: learning-rate values of a run of steps.

Reproducibility: every decided value is the oracle's (`mojolike.oracles.schedule.value`);
the API gives UNDECIDED steps (0x7FA00DAD) the oracle's bits (`mojolike.ops.schedule.finish`).

>>> from mojolike.core.interfaces import writes
>>> writes("schedule")
{'schedule_into': (6,)}
"""
from __future__ import annotations

from typing import Protocol

from . import KernelSet, Written


class ScheduleKernels(KernelSet, Protocol):
    """The values of steps t0 .. t0 + out.size - 1 of one schedule."""

    def schedule_into(self, kind: int, peak, min_lr, warmup: int, total: int, t0: int,
                      out: Written) -> int:
        """Write the values into out (flat float32) and return the number left UNDECIDED. kind is
        CONSTANT, LINEAR or COSINE; peak and min_lr binary32 rates (>= 0, finite); warmup >= 0;
        total >= max(1, warmup) (unused by CONSTANT); t0 >= 1; all <= 2^40. The caller checks
        the arguments."""
