"""Where a suite's certify run spends its time on one backend: each case's outputs under
cProfile (seconds, then the functions with the most own time and the most calls), then each
of the suite's extra clauses timed alone.

    python benchmarks/profile_suite.py train --backend cuda [--top 25] [--no-clauses]

The first case pays the kernels' compilation (numba-cuda compiles a family's kernels when the
family is first loaded); its line says so. benchmarks/gpu_check.sh runs this beside the certify
phase when MOJOLIKE_GPU_PROFILE names suites.

Reproducibility: nothing here is carded; it times the same calls `mojolike certify` makes.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-clauses", action="store_true", help="time the cases' outputs only")
    args = ap.parse_args(argv)

    from mojolike.contracts import harness
    from mojolike.core import registry

    suite = harness.suite_module(args.suite)
    t0 = time.perf_counter()
    k = registry.kernels(harness.CERTIFY, suite.FAMILY, args.backend, registry.CONTRACT_MODE)
    print(f"{args.suite} on {args.backend}: the {suite.FAMILY} kernels loaded in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    prof = cProfile.Profile()
    for case in suite.cases():
        t0 = time.perf_counter()
        prof.enable()
        n = len(list(suite.outputs(k, case)))
        prof.disable()
        print(f"case {case.id}: {n} outputs in {time.perf_counter() - t0:.1f} s", flush=True)
    show(prof, (("tottime", "own time"), ("ncalls", "calls")), args.top)
    if args.no_clauses or not hasattr(suite, "extra_clauses"):
        return 0
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    clauses = suite.extra_clauses(k)
    prof.disable()
    print(f"\nextra clauses in {time.perf_counter() - t0:.1f} s:")
    for letter, (status, note) in clauses.items():
        print(f"  {letter}: {status}: {note[:400]}")
    show(prof, (("cumulative", "time inside"),), args.top)
    return 0


def show(prof: cProfile.Profile, orders, top: int) -> None:
    for key, title in orders:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats(key).print_stats(top)
        body = text.getvalue()
        print(f"\n--- the {top} functions with the most {title}\n"
              + body[body.find("   ncalls"):], flush=True)


if __name__ == "__main__":
    sys.exit(main())
