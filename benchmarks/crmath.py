"""Throughput of the correctly rounded expf/logf/sinpif/cospif vs numpy's float32 functions, in one run.

    python benchmarks/crmath.py [--n 16777216] [--repeat 10] [--backends cpu-numba,cpu-cffi]

Inputs: normal(0, 8) float32 for exp (|x| for log), numpy's generator seeded 0. Prints best-of-`repeat`
times and the throughput ratio to np.exp / np.log / np.sin(pi*x) / np.cos(pi*x)
(target >= 1.0x for expf).
The mojolike rows are the public API: allocation of the result and the exact
fallback for undecided slots included. Not a test: quote ratios from one run.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np

import mojolike.math as mm
from timing import backend_names, best_of


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2**24)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--backends", default=None,
                   help="comma-separated; default: every available backend except oracle and cuda-sim")
    args = p.parse_args()
    names = backend_names(args.backends)
    x = (np.random.default_rng(0).standard_normal(args.n) * 8).astype(np.float32)
    ax = np.abs(x)
    print(f"n={args.n} float32, best of {args.repeat}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus; numpy {np.__version__}")
    pi = np.float32(np.pi)
    for op, xs, ref, name, fn in (
            ("expf", x, np.exp, "np.exp(x)", mm.expf), ("logf", ax, np.log, "np.log(x)", mm.logf),
            ("sinpif", x, lambda v: np.sin(pi * v), "np.sin(pi*x)", mm.sinpif),
            ("cospif", x, lambda v: np.cos(pi * v), "np.cos(pi*x)", mm.cospif)):
        t_ref = best_of(lambda: ref(xs), args.repeat)
        print(f"{op:6s} {name} (float32)   {t_ref * 1e3:8.2f} ms")
        for b in names:
            t = best_of(lambda: fn(xs, backend=b), args.repeat)
            print(f"{op:6s} mojolike {b:12s} {t * 1e3:8.2f} ms  throughput {t_ref / t:5.2f}x numpy")


if __name__ == "__main__":
    main()
