"""Timing and memory helpers shared by the benchmark scripts (run them from the repository root)."""
from __future__ import annotations

import time
import tracemalloc

import mojolike


def best_of(fn, repeat: int) -> float:
    """The best wall time of `repeat` calls of fn, after one warm call (compile, build, first touch)."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def peak_alloc(fn) -> int:
    """The peak traced bytes (tracemalloc) of one call of fn, after a warm one (compiled code,
    caches and first touches are not counted)."""
    fn()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def backend_names(arg: str | None) -> list[str]:
    """The --backends list, else every available backend but the oracle and the simulator."""
    if arg:
        return arg.split(",")
    return [b.name for b in mojolike.backends() if b.available and b.name not in ("oracle", "cuda-sim")]
