"""The loss family's kernel interface: per-row cross-entropy and its gradient.

Reproducibility: a row the kernel decides has the oracle's bits
(`mojolike.oracles.loss.rows`); a row it marks in `status` is redone by the API
(`mojolike.ops.loss.finish_rows`), so the result is the oracle's on every backend.

>>> from mojolike.core.interfaces import writes
>>> writes("loss")
{'cross_entropy_into': (9, 10, 11)}
"""
from __future__ import annotations

from typing import Protocol

from . import Array, KernelSet, Written


class LossKernels(KernelSet, Protocol):
    """Cross-entropy over the rows of a (N, V) float32 logits matrix."""

    def cross_entropy_into(self, logits: Array, targets: Array, ignore_index: int, c1, c2, qt,
                           smoothing: bool, g, want_grad: bool, grad: Written, rows: Written,
                           status: Written) -> int:
        """Per-row losses into rows (N,), and with want_grad the gradient into grad (N, V);
        targets (N,) int64, a row whose target is ignore_index counts zero; c1, c2, qt are the
        binary32 1 - eps, eps / V and 1 - eps + eps / V of label smoothing eps (used when
        smoothing), g the reduction's gradient factor (1 / count for 'mean'). status[i] = 1
        marks a row with an undecided expf/logf (its outputs are then unspecified), else 0;
        returns the number of marked rows."""
