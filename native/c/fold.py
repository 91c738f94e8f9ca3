"""fold, sumsq and dot through the C kernels in fold.c (the independent second spelling).

>>> import numpy as np
>>> load("identical").sumsq(np.float32([3, 4]))
np.float32(25.0)
"""
from __future__ import annotations

import numpy as np

from ...oracles.fold import CHUNK
from .base import CffiBase


class CffiFold(CffiBase):
    """fold/sumsq/dot in C, OpenMP over chunks; bits independent of the thread count."""

    takes_pieces = False

    def _finish(self, partials: np.ndarray) -> np.float32:
        return np.float32(self._lib.mj_pairwise(self._ptr(partials), partials.size))

    def fold(self, x):
        p = np.empty((x.size + CHUNK - 1) // CHUNK, np.float32)
        self._lib.mj_fold_partials(self._ptr(x), x.size, self._ptr(p))
        return self._finish(p)

    def dot(self, a, b):
        p = np.empty((a.size + CHUNK - 1) // CHUNK, np.float32)
        self._lib.mj_dot_partials(self._ptr(a), self._ptr(b), a.size, self._ptr(p))
        return self._finish(p)

    def sumsq(self, x):
        return self.dot(x, x)


def load(mode: str, backend: str = "cpu-cffi") -> CffiFold:
    return CffiFold(mode)
