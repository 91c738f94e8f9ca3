"""Timing and memory helpers shared by the benchmark scripts (run them from the repository root)."""
from __future__ import annotations

import ctypes
import ctypes.util
import statistics
import time
import tracemalloc

import mojolike


def keep_freed_memory() -> str:
    """Tell glibc's malloc to keep what is freed (no trimming, no mmap for blocks below 1 GiB),
    for the whole process, so neither side of a comparison pays fresh pages on every call; a
    line saying what was done, for the script to print.

    Why: a call that allocates and frees tens of MB (outputs, gradients) gets fresh pages
    from the kernel on every call once glibc trims the heap top or maps the block, and which
    of them happens turns on a few bytes of other allocations. On a VM fresh pages are dear
    (a 25 MB softmax output: ~150 ms of page faults against a 6 ms kernel, Xeon model 167),
    so the same script measured softmax at 1.4x and at 55x torch from run to run."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(-1, ctypes.c_int(2**31 - 1)) == 1  # M_TRIM_THRESHOLD
        ok &= libc.mallopt(-3, ctypes.c_int(1 << 30)) == 1  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        ok = False
    return ("allocator: glibc keeps freed memory (M_TRIM_THRESHOLD 2^31-1, M_MMAP_THRESHOLD 1 GiB)"
            if ok else "allocator: as the process found it (mallopt not available)")


def best_of(fn, repeat: int) -> float:
    """The best wall time of `repeat` calls of fn, after one warm call (compile, build, first touch)."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def medians_in_turn(variants: dict, repeat: int, warm: int = 3) -> dict:
    """`warm` untimed rounds, then `repeat` timed ones, each round calling every variant once
    in turn; the median wall time of each. A burst of load from another process then falls
    on every variant alike, where separate best-of runs compare one side's quiet moment with
    the other's; the warm rounds let the heap settle to the pattern of the rounds (on a VM a
    fresh page costs more than many kernels: torch's softmax of (8192, 768) took 10 ms in
    its first rounds after ours, 5 ms once the heap held pages for both)."""
    for _ in range(warm):
        for fn in variants.values():
            fn()
    times = {name: [] for name in variants}
    for _ in range(repeat):
        for name, fn in variants.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) for name, v in times.items()}


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
