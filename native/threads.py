"""Where the numba kernels run: on the calling thread below a work threshold, else on numba's pool.

A kernel compiled with parallel=True opens a parallel region on every call: numba's
workers wake, and the caller waits at the region's end for the last of them. On a
machine whose cores are shared, a worker that has lost its core holds the caller
until it is scheduled again, so a step made of many small regions pays that wait
many times. The C kernels run their loops on the calling thread below
MJ_PARALLEL_MIN elements (native/c/fold.c); `Twin` gives the numba kernels the
same rule, with the same threshold and the same measure of work per kernel.

numba cannot run a parallel kernel serially for one call, so a `Twin` compiles the
kernel's Python function a second time without parallel=True (prange is then
range): the same statements, each task's in the same order and the tasks one after
another. The prange in these kernels splits only independent tasks (each writes
its own outputs, and what they share is combined after the loop in a fixed
order), so both give the same bits (tests/test_native_threads.py checks each
kernel on both sides of the threshold). The twin is compiled on its first call,
under its own name so that numba's cache keeps both.

`launch` starts numba's thread pool with OMP_WAIT_POLICY=PASSIVE in the
environment unless the user set that variable, as native/c/build.py does while
the C module loads. The GNU OpenMP runtime of numba's 'omp' layer reads it once,
when it starts, and its idle workers then sleep at once instead of spinning for
a while; a runtime already running (say one the C module started, passive too)
keeps its policy, and the tbb and workqueue layers ignore it. Spinning workers
on a shared machine take turns with other processes' threads, and a region then
waits a whole time slice for one of them: an empty region measured 12-20 ms with
the default policy and 17-19 us passive on this project's 2-core machine beside
other processes (benchmarks/load.py times a training run). Loading a parallel
kernel from numba's cache starts the pool, so `launch` runs when this module is
imported, and every numba kernel module imports it before defining a kernel.

Reproducibility: where a kernel runs never reaches its bits.

>>> import numpy as np
>>> from numba import float32, njit, prange, void
>>> @njit(void(float32[::1]), parallel=True)
... def twice(x):
...     for i in prange(x.size):
...         x[i] = x[i] + x[i]
>>> x = np.ones(3, np.float32)
>>> Twin(twice)(x.size, x); x.tolist()
[2.0, 2.0, 2.0]
"""
from __future__ import annotations

import threading
import types as pytypes

import numba
from numba.core.caching import NullCache

from .c.build import passive_wait  # the C module's runtime starts the same way

PARALLEL_MIN = 32768  # elements (native/c/fold.c's MJ_PARALLEL_MIN, measured for numba too)

_started = threading.Lock()
_launched = False


def launch() -> None:
    """Start numba's threading layer once, its OpenMP runtime (if it starts now) passive."""
    global _launched
    if _launched:
        return
    with _started:
        if not _launched:
            with passive_wait():
                numba.get_num_threads()  # numba loads its threading layer on first use
            _launched = True


def num_threads() -> int:
    """numba's thread count, after `launch`."""
    launch()
    return numba.get_num_threads()


def serial_twin(kernel):
    """The parallel numba `kernel`'s function compiled without parallel=True, for the same
    signatures, under the name `<name>_serial` (its own entry in numba's cache)."""
    fn = kernel.py_func
    twin = pytypes.FunctionType(fn.__code__, fn.__globals__, f"{fn.__name__}_serial",
                                fn.__defaults__, fn.__closure__)
    twin.__qualname__ = f"{fn.__qualname__}_serial"
    twin.__module__, twin.__doc__ = fn.__module__, fn.__doc__
    options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
    options["cache"] = not isinstance(kernel._cache, NullCache)  # numba keeps cache=True there
    sigs = [cres.signature for cres in kernel.overloads.values()]
    return numba.njit(sigs, **options)(twin)


class Twin:
    """A parallel numba kernel and its serial twin: `twin(work, *args)` runs the kernel on
    the calling thread when `work` (the kernel's measure of its size, in elements) is below
    PARALLEL_MIN, else on numba's pool (started by `launch`)."""

    def __init__(self, kernel):
        self.parallel = kernel
        self._serial = None

    @property
    def serial(self):
        if self._serial is None:  # compiled on first use: importing a module compiles nothing more
            self._serial = serial_twin(self.parallel)
        return self._serial

    def __call__(self, work, *args):
        if work < PARALLEL_MIN:
            return self.serial(*args)
        if not _launched:
            launch()
        return self.parallel(*args)


launch()  # before any kernel module loads a parallel kernel (see above)
