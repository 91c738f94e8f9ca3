"""A simulated thread block that sleeps until its threads need it, for the simulator worker.

numba's CUDA simulator runs a Python thread per CUDA thread. Its block manager learns
that the threads of a block have reached a barrier, or finished, by polling them in a
loop, and that loop holds the interpreter lock the threads need to get there: most of a
simulated kernel's time went to it. `install()` puts in its place a manager with the
same semantics (every thread of the block started at once; released from a barrier when
every living thread has reached it; on an exception the other threads aborted and the
first exception raised) that waits on a condition the threads signal, and keys shared
arrays by the caller's frame rather than by formatting the whole stack. The kernels and
the simulator's per-thread execution are untouched: the same source runs in the same
threads, only the waiting changes, so it cannot change a bit of any result. Its threads
run with numpy's float errors ignored: an overflow to inf is an IEEE result of the
simulator prims (prims.py), not a warning to format.

`install()` is called by the simulator worker (`simworker.main`) and nowhere else; where
numba's simulator is not the one this was written against (its classes lack the
attributes used here) it installs nothing and the stock manager runs.
"""
from __future__ import annotations

import sys
import threading

import numpy as np


class _Meeting:
    """What the threads of one block tell their manager, under one condition."""

    def __init__(self, alive: int):
        self.cond = threading.Condition()
        self.alive, self.blocked, self.failed = alive, 0, None

    def ready(self) -> bool:
        """Whether the manager has something to do: release a barrier, end, or abort."""
        return self.failed is not None or self.alive == 0 or self.blocked == self.alive

    def arrive(self) -> None:
        with self.cond:
            self.blocked += 1
            if self.ready():  # only the last thread to arrive wakes the manager
                self.cond.notify()

    def leave(self, thread) -> None:
        with self.cond:
            self.alive -= 1
            if thread.exception is not None and self.failed is None:
                self.failed = thread
            if self.ready():
                self.cond.notify()


def _block(kernel):
    class Thread(kernel.BlockThread):
        def __init__(self, f, manager, block_idx, thread_idx, debug, meeting: _Meeting):
            super().__init__(f, manager, block_idx, thread_idx, debug)
            self._meeting = meeting

        def run(self):
            try:
                with np.errstate(all="ignore"):
                    super().run()  # keeps an exception in self.exception, as the stock thread does
            finally:
                self._meeting.leave(self)

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            self.syncthreads_blocked = True
            self._meeting.arrive()
            self.syncthreads_event.wait()
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    class Block(kernel.BlockManager):
        def run(self, grid_point, *args):
            def target():
                self._f(*args)

            points = list(np.ndindex(*self._block_dim))
            meeting = _Meeting(len(points))
            threads = [Thread(target, self, grid_point, p, self._debug, meeting) for p in points]
            for t in threads:
                t.start()
            while True:
                with meeting.cond:
                    meeting.cond.wait_for(meeting.ready)
                    failed, done = meeting.failed, meeting.alive == 0
                    # every living thread is at the barrier: release each of them once
                    release = [] if failed or done else [t for t in threads if t.syncthreads_blocked]
                    if release:
                        meeting.blocked = 0
                if failed is not None:
                    for t in threads:
                        t.abort = True
                        t.syncthreads_blocked = False
                        t.syncthreads_event.set()
                    raise failed.exception[0].with_traceback(failed.exception[1])
                if done:
                    return
                for t in release:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()

    return Block


def _shared(kernelapi):
    class Shared(kernelapi.FakeCUDAShared):
        def array(self, shape, dtype, alignment=None):
            # the stock method keys an allocation by its caller's (file, line), found by
            # formatting the whole stack; the caller's frame has the same two values
            if shape == 0 or alignment is not None:
                return super().array(shape, dtype, alignment)
            caller = sys._getframe(1)
            key = (caller.f_code.co_filename, caller.f_lineno)
            res = self._allocations.get(key)
            if res is None:
                if isinstance(dtype, kernelapi.types.Type):
                    dtype = kernelapi.numpy_support.as_dtype(dtype)
                res = self._allocations.setdefault(key, np.empty(shape, dtype))
            return res

    return Shared


def install() -> bool:
    """Use the waiting block manager and the frame-keyed shared arrays in this simulator
    process; True if they were installed."""
    from numba.cuda.simulator import kernel, kernelapi
    if not all(callable(getattr(getattr(mod, cls, None), m, None))
               for mod, cls, methods in ((kernel, "BlockThread", ("syncthreads", "run")),
                                         (kernel, "BlockManager", ("run",)),
                                         (kernelapi, "FakeCUDAShared", ("array",)))
               for m in methods):
        return False
    kernel.BlockManager = _block(kernel)
    kernelapi.FakeCUDAShared = _shared(kernelapi)
    return True
