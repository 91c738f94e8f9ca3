"""What every cpu-numba kernel set shares: the backend name and numba's thread count.

Each family's kernel set (native/fold.py's NumbaFold, native/crmath.py's NumbaCrmath,
...) derives from `NumbaBase`; the thread clauses of every contract set the count
through it and check that the bits do not move.

Reproducibility: no kernel's bits depend on the thread count (each contract's thread
clause varies it); it only decides how the blocks of work are shared out.

>>> k = NumbaBase("identical")
>>> k.backend, k.numeric_mode, k.get_num_threads() <= k.max_threads()
('cpu-numba', 'identical', True)
"""
from __future__ import annotations

import numba

from .threads import num_threads


class NumbaBase:
    """A family's kernel set on the CPU with numba: the mode it runs and its thread count
    (the thread clauses vary it; the bits must not)."""

    backend = "cpu-numba"

    def __init__(self, mode: str):
        self.numeric_mode = mode
        self.details = {"numba": numba.__version__, "threads": num_threads()}

    @staticmethod
    def set_num_threads(n: int) -> None:
        numba.set_num_threads(n)

    @staticmethod
    def get_num_threads() -> int:
        return num_threads()

    @staticmethod
    def max_threads() -> int:
        return numba.config.NUMBA_NUM_THREADS
