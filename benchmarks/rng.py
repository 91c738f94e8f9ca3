"""uniform and normal float32 and dropout over 2**24 elements: mojolike backends vs numpy and torch, in one run.

    python benchmarks/rng.py [--n 16777216] [--repeat 10] [--backends cpu-numba,cpu-cffi]

uniform: `Generator.uniform(n)` against
`numpy.random.Generator(numpy.random.Philox()).random(n, dtype=np.float32)` (the
ratio's base; target: cpu-numba <= 1.0x) and `torch.rand(n)`. normal:
`Generator.normal(n)` against
`numpy.random.Generator(numpy.random.Philox()).standard_normal(n, dtype=np.float32)`
(the base; numpy's ziggurat) and `torch.randn(n)`. dropout: forward
with p = 0.1 against `torch.nn.functional.dropout(x, 0.1)` (the base). Best of
`repeat`; every call allocates its output, as the public API does. Not a test:
timings depend on the machine (and on other load); ratios within one run are what
the closing notes quote.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from timing import backend_names, best_of

import mojolike


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2**24)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--backends", default=None,
                   help="comma-separated; default: every available backend except oracle and cuda-sim")
    args = p.parse_args()
    names = backend_names(args.backends)
    n, r = args.n, args.repeat

    print(f"n={n} float32, best of {r}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    print(f"numpy {np.__version__}")
    rows = []
    npg = np.random.Generator(np.random.Philox(0))
    t_np = best_of(lambda: npg.random(n, dtype=np.float32), r)
    rows.append(("uniform", "numpy Generator(Philox()).random(float32)", t_np))
    torch = None
    try:
        import torch
        rows.append(("uniform", f"torch {torch.__version__} rand ({torch.get_num_threads()} threads)",
                     best_of(lambda: torch.rand(n), r)))
    except ImportError:
        print("torch not installed: no torch rows")
    for b in names:
        g = mojolike.Generator(0, backend=b)
        k = mojolike.core.registry.kernels("benchmark", "rng", b)
        threads = k.get_num_threads() if hasattr(k, "get_num_threads") else "-"
        rows.append(("uniform", f"mojolike {b} ({threads} threads)", best_of(lambda: g.uniform(n), r)))

    t_np_normal = best_of(lambda: npg.standard_normal(n, dtype=np.float32), r)
    rows.append(("normal", "numpy Generator(Philox()).standard_normal(float32)", t_np_normal))
    if torch is not None:
        rows.append(("normal", "torch randn", best_of(lambda: torch.randn(n), r)))
    for b in names:
        g = mojolike.Generator(0, backend=b)
        rows.append(("normal", f"mojolike {b} normal", best_of(lambda: g.normal(n), r)))

    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    t_drop = None
    if torch is not None:
        tx = torch.from_numpy(x)
        t_drop = best_of(lambda: torch.nn.functional.dropout(tx, 0.1), r)
        rows.append(("dropout", "torch F.dropout(x, 0.1)", t_drop))
    for b in names:
        g = mojolike.Generator(0, backend=b)
        rows.append(("dropout", f"mojolike {b} dropout(x, 0.1)", best_of(lambda: g.dropout(x, 0.1), r)))

    base = {"uniform": (t_np, "numpy"), "normal": (t_np_normal, "numpy"), "dropout": (t_drop, "torch")}
    width = max(len(row[1]) for row in rows)
    for op, name, t in rows:
        ref, label = base[op]
        ratio = f"{t / ref:6.2f}x {label}" if ref else ""
        print(f"{op:8s} {name:{width}s} {t * 1e3:9.3f} ms  {ratio}")
    if "cuda" in names:
        print("cuda rows include the device-to-host copy of the output (and dropout's input copy)")


if __name__ == "__main__":
    main()
