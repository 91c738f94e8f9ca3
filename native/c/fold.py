"""fold, sumsq and dot through the C kernels in fold.c (the independent second spelling).

>>> import numpy as np
>>> load("identical").sumsq(np.float32([3, 4]))
np.float32(25.0)
"""
from __future__ import annotations

import os

import numpy as np

from ...oracles.fold import CHUNK
from . import build


class CffiFold:
    """fold/sumsq/dot in C, OpenMP over chunks; bits independent of the thread count."""

    takes_pieces = False

    backend = "cpu-cffi"

    def __init__(self, mode: str):
        module = build.load(mode)
        self._ffi, self._lib = module.ffi, module.lib
        self.numeric_mode = self._ffi.string(self._lib.mj_build_mode()).decode()
        # read back from the module: the commands that built it, the compiler, the self-test
        self.details = build.describe(module)

    def _ptr(self, a: np.ndarray):
        return self._ffi.from_buffer("float[]", a)

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

    def set_num_threads(self, n: int) -> None:
        self._lib.mj_set_num_threads(n)

    def get_num_threads(self) -> int:
        return self._lib.mj_get_max_threads()

    def max_threads(self) -> int:
        return os_cpu_threads()


def os_cpu_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load(mode: str, backend: str = "cpu-cffi") -> CffiFold:
    return CffiFold(mode)
