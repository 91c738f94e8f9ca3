"""Cost of the floating-point state check that every identical-mode call pays.

Prints ns per call of `fpstate.check` (the register read, and the arithmetic probe
used where mojolike._fpcsr is not built), of an empty Python call for scale, and of
a 1-element `mojolike.fold` with and without the check, all in one run.

    python benchmarks/fpstate.py
"""
from __future__ import annotations

import platform
import timeit

import numpy as np

import mojolike
from mojolike.core import fpstate, registry


def ns(stmt: str, env: dict, number: int = 1_000_000) -> float:
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=7)) / number * 1e9


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    x = np.ones(1, np.float32)
    mojolike.fold(x)  # compile and load first
    env = {"check": fpstate.check, "probe": fpstate._probe_deviation, "nothing": lambda e: None,
           "fold": mojolike.fold, "x": x}
    print(f"CPU: {cpu_model()}; mechanism: {fpstate.mechanism()}")
    rows = [("fpstate.check (register)", "check('mojolike.fold')"),
            ("arithmetic probe (fallback)", "probe()"),
            ("an empty Python call, for scale", "nothing('mojolike.fold')")]
    for label, stmt in rows:
        print(f"  {label:34s} {ns(stmt, env):7.1f} ns")
    with_check = ns("fold(x)", env, 200_000)
    saved = registry.check_fp_state
    registry.check_fp_state = lambda entry, mode: None
    try:
        without = ns("fold(x)", env, 200_000)
    finally:
        registry.check_fp_state = saved
    print(f"  mojolike.fold of 1 element: {with_check:.0f} ns with the check, {without:.0f} ns without")


if __name__ == "__main__":
    main()
