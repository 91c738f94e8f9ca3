"""What every cpu-cffi kernel set shares: the compiled module, pointers, the thread count.

All families live in one C module (native/c/build.py builds it from the .c files, one
compilation unit); each family's kernel set derives from `CffiBase`, which loads that
module for the numeric mode, reads back how it was built, and passes numpy buffers
to C as pointers.

Reproducibility: OpenMP's thread count is the only setting here, and the kernels'
bits never depend on it (the thread clauses of every contract vary it).

>>> import numpy as np
>>> k = CffiBase("identical")
>>> k.backend, k.numeric_mode, k.get_num_threads() >= 1
('cpu-cffi', 'identical', True)
"""
from __future__ import annotations

import os

import numpy as np

from . import build


def os_cpu_threads() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class CffiBase:
    """A family's kernel set in C: the module built for `mode`, and OpenMP's thread count."""

    backend = "cpu-cffi"

    def __init__(self, mode: str):
        module = build.load(mode)
        self._ffi, self._lib = module.ffi, module.lib
        self.numeric_mode = self._ffi.string(self._lib.mj_build_mode()).decode()
        # read back from the module: the commands that built it, the compiler, the self-test
        self.details = build.describe(module)

    def _ptr(self, a: np.ndarray):
        return self._ffi.from_buffer("float[]", a)

    def _i64(self, a: np.ndarray):
        return self._ffi.from_buffer("int64_t[]", a)

    @staticmethod
    def _check(got: int, name: str) -> None:
        """A negative return is a kernel that could not allocate its work buffer."""
        if got < 0:
            raise MemoryError(f"{name}: no memory for a work buffer")

    def set_num_threads(self, n: int) -> None:
        self._lib.mj_set_num_threads(n)

    def get_num_threads(self) -> int:
        return self._lib.mj_get_max_threads()

    def max_threads(self) -> int:
        return os_cpu_threads()
