"""Cross-entropy forward + backward, N=4096 x V=32768 float32: mojolike vs torch, in one run.

    python benchmarks/loss.py [--n 4096] [--v 32768] [--repeat 3] [--backends cpu-numba,cpu-cffi]

torch row: F.cross_entropy(z, t) then .backward() (torch 2.13 CPU, its default
threads). mojolike rows: cross_entropy(z, t, return_grad=True), which returns the
loss and dlogits (one (N, V) allocation, the gradient). Forward-only rows too.
Prints best-of-`repeat` times and ratios to torch (target fwd+bwd <= 1.5x).
Not a test: quote ratios from one run.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np

import mojolike
from timing import backend_names, best_of


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--v", type=int, default=32768)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--backends", default=None,
                   help="comma-separated; default: every available backend except oracle and cuda-sim")
    args = p.parse_args()
    names = backend_names(args.backends)
    rng = np.random.default_rng(0)
    z = (rng.standard_normal((args.n, args.v), dtype=np.float32) * 2).astype(np.float32)
    t = rng.integers(0, args.v, args.n)
    t[::17] = -100
    print(f"N={args.n} V={args.v} float32, best of {args.repeat}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus")
    import torch
    import torch.nn.functional as F
    tz, tt = torch.from_numpy(z), torch.from_numpy(t)

    def torch_fb():
        x = tz.detach().requires_grad_()
        F.cross_entropy(x, tt).backward()
        return x.grad

    def torch_f():
        with torch.no_grad():
            return F.cross_entropy(tz, tt)

    rows = [("fwd+bwd", f"torch {torch.__version__} ({torch.get_num_threads()} threads)",
             best_of(torch_fb, args.repeat)),
            ("fwd", "torch", best_of(torch_f, args.repeat))]
    for b in names:
        rows.append(("fwd+bwd", f"mojolike {b}",
                     best_of(lambda: mojolike.cross_entropy(z, t, return_grad=True, backend=b),
                             args.repeat)))
        rows.append(("fwd", f"mojolike {b}",
                     best_of(lambda: mojolike.cross_entropy(z, t, backend=b), args.repeat)))
    base = {op: tm for op, name, tm in rows if name.startswith("torch")}
    width = max(len(r[1]) for r in rows)
    for op, name, tm in rows:
        print(f"{op:8s} {name:{width}s} {tm * 1e3:9.1f} ms  {tm / base[op]:5.2f}x torch")


if __name__ == "__main__":
    main()
