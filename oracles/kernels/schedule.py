"""The schedule kernels of the oracle: `mojolike.oracles.schedule.value` step by step.

Reproducibility: the exact value of every step; it never leaves a step undecided.

>>> import numpy as np
>>> from mojolike.oracles.schedule import LINEAR
>>> out = np.empty(3, np.float32)
>>> load("identical").schedule_into(LINEAR, np.float32(1), np.float32(0), 2, 4, 1, out), out
(0, array([0.5, 1. , 0.5], dtype=float32))
"""
from __future__ import annotations

from ...core import registry
from .. import codec
from .. import schedule as spec


class OracleSchedule:
    """The oracle as a kernel set (it never leaves a step undecided)."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    takes_pieces = False

    def schedule_into(self, kind, peak, min_lr, warmup, total, t0, out) -> int:
        P, M, n = codec.decode_scalar(peak), codec.decode_scalar(min_lr), out.size
        # past the warmup the constant schedule is P and the decays are M from T on:
        # those steps need no oracle call
        tail = warmup + 1 if kind == spec.CONSTANT else max(warmup + 1, total)
        k = min(max(tail - t0, 0), n)
        codec.store(out[:k], [spec.value(kind, P, M, warmup, total, t) for t in range(t0, t0 + k)])
        codec.store(out[k:], [P if kind == spec.CONSTANT else M] * (n - k))
        return 0


def load(mode: str, backend: str = "oracle") -> OracleSchedule:
    return OracleSchedule()
