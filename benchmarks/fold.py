"""sumsq (and fold, dot) over 2**24 float32: mojolike backends vs numpy and torch, in one run.

    python benchmarks/fold.py [--n 16777216] [--repeat 20] [--backends cpu-numba,cpu-cffi]

Prints the best-of-`repeat` time of each and the ratio to np.dot(x, x) (target:
cpu-numba <= 1.2x). Not a test: timings depend on the machine; ratios in one
run on one machine are what the closing notes quote.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np

import mojolike
from mojolike.contracts.casegen import bulk_normal
from timing import backend_names, best_of


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
        return "; ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
                         f"threads={i.get('num_threads')}" for i in threadpool_info())
    except ImportError:
        return "threadpoolctl not installed"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2**24)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--backends", default=None,
                   help="comma-separated; default: every available backend except oracle and cuda-sim")
    args = p.parse_args()
    names = backend_names(args.backends)

    x = bulk_normal(args.n, "bench/x")
    y = bulk_normal(args.n, "bench/y")
    print(f"n={args.n} float32, best of {args.repeat}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    print(f"numpy {np.__version__}: {blas_info()}")

    rows = []
    t_ref = best_of(lambda: np.dot(x, x), args.repeat)
    rows.append(("sumsq", "np.dot(x, x)", t_ref))
    try:
        import torch
        tx = torch.from_numpy(x)
        rows.append(("sumsq", f"torch {torch.__version__} vector_norm(x)**2 "
                              f"({torch.get_num_threads()} threads)",
                     best_of(lambda: torch.linalg.vector_norm(tx) ** 2, args.repeat)))
    except ImportError:
        print("torch not installed: no torch row")
    for b in names:
        rows.append(("sumsq", f"mojolike {b}", best_of(lambda: mojolike.sumsq(x, backend=b), args.repeat)))

    t_sum = best_of(lambda: np.sum(x), args.repeat)
    rows.append(("fold", "np.sum(x)", t_sum))
    for b in names:
        rows.append(("fold", f"mojolike {b}", best_of(lambda: mojolike.fold(x, backend=b), args.repeat)))
    t_dot = best_of(lambda: np.dot(x, y), args.repeat)
    rows.append(("dot", "np.dot(x, y)", t_dot))
    for b in names:
        rows.append(("dot", f"mojolike {b}", best_of(lambda: mojolike.dot(x, y, backend=b), args.repeat)))

    base = {"sumsq": t_ref, "fold": t_sum, "dot": t_dot}
    width = max(len(r[1]) for r in rows)
    for op, name, t in rows:
        print(f"{op:6s} {name:{width}s} {t * 1e3:9.3f} ms  {t / base[op]:6.2f}x numpy")
    if "cuda" in names:
        print("cuda rows include the host-to-device copy of the inputs on every call")


if __name__ == "__main__":
    main()
