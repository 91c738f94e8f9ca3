"""The fold family's kernel interface: the canonical tree's sum, sum of squares and dot.

Reproducibility: every method returns the bits `mojolike.oracles.fold` defines, on
every backend and thread count (in numeric_mode="identical").

>>> sorted(m for m in FoldKernels.__dict__ if not m.startswith("_"))
['dot', 'fold', 'sumsq']
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from . import Array, KernelSet


class FoldKernels(KernelSet, Protocol):
    """fold, sumsq and dot of flat float32 buffers; nothing is written."""

    def fold(self, x: Array) -> np.float32:
        """The sum of x's elements by the canonical tree (32 lanes, 1024-element chunks,
        -0.0 lane start, butterfly, pairwise chunk tree); x is flat float32."""

    def sumsq(self, x: Array) -> np.float32:
        """The fold of the rounded squares x[i] * x[i] (no fused multiply-add)."""

    def dot(self, a: Array, b: Array) -> np.float32:
        """The fold of the rounded products a[i] * b[i]; a and b have one size."""
