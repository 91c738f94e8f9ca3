"""Mixed precision against ml_dtypes and torch (CPU, same run, same threads): the casts, then linear.

    python benchmarks/mixed.py [--backend cpu-numba] [--repeat 5] [--n 16777216] [--size 2048]

- `mojolike.cast` float32 -> bfloat16 / float16 and back on n elements (the public function:
  checks, allocation, the kernel) against ml_dtypes' / numpy's `astype` and torch's `.to`
  (target: cast at least as fast as astype);
- bfloat16 and float16 `mojolike.linear` at size^3 beside the float32 `mojolike.linear`,
  torch's float32 F.linear and torch's bfloat16 / float16 F.linear (issue item 9's target:
  at most 1.1x torch's float32 F.linear). The low-precision linear of this version widens
  into a float32 scratch and then runs the float32 kernel: expect the float32 time plus the
  widening, not the FMA rate.

Best-of-`repeat` times after a warm call; quote ratios from one run, with the CPU model,
thread counts and load average it prints (the machine may be shared). Not a test.
"""
from __future__ import annotations

import argparse
import os

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F
from timing import best_of
from transformer import cpu_model

import mojolike

BF16 = ml_dtypes.bfloat16


def cast_rows(backend: str, n: int, repeat: int) -> list[tuple[str, float, float, str]]:
    x = (np.random.default_rng(0).standard_normal(n) * 100).astype(np.float32)
    tx = torch.from_numpy(x)
    rows = []
    for name, dtype, tdtype in (("bfloat16", BF16, torch.bfloat16), ("float16", np.float16, torch.float16)):
        out = np.empty(n, dtype)
        low = x.astype(dtype)
        tlow = tx.to(tdtype)
        wide = np.empty(n, np.float32)
        ours = best_of(lambda n=name, o=out: mojolike.cast(x, n, out=o, backend=backend), repeat)
        lib = best_of(lambda d=dtype: x.astype(d), repeat)
        tor = best_of(lambda d=tdtype: tx.to(d), repeat)
        rows.append((f"cast float32 -> {name}", ours, lib, f"torch .to {tor * 1e3:.2f} ms"))
        ours = best_of(lambda a=low, o=wide: mojolike.cast(a, "float32", out=o, backend=backend), repeat)
        lib = best_of(lambda a=low: a.astype(np.float32), repeat)
        tor = best_of(lambda a=tlow: a.float(), repeat)
        rows.append((f"cast {name} -> float32", ours, lib, f"torch .float {tor * 1e3:.2f} ms"))
    return rows


def linear_rows(backend: str, size: int, repeat: int) -> list[tuple[str, float, float, str]]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((size, size)).astype(np.float32)
    w = rng.standard_normal((size, size)).astype(np.float32)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    with torch.no_grad():
        torch32 = best_of(lambda: F.linear(tx, tw), repeat)
    ours32 = best_of(lambda: mojolike.linear(x, w, backend=backend), repeat)
    rows = [("linear float32", ours32, torch32, "")]
    for name, dtype, tdtype in (("bfloat16", BF16, torch.bfloat16), ("float16", np.float16, torch.float16)):
        xl, wl = x.astype(dtype), w.astype(dtype)
        txl, twl = tx.to(tdtype), tw.to(tdtype)
        with torch.no_grad():
            tlow = best_of(lambda a=txl, b=twl: F.linear(a, b), repeat)
        ours = best_of(lambda a=xl, b=wl: mojolike.linear(a, b, backend=backend), repeat)
        note = f"torch {name} F.linear {tlow * 1e3:.1f} ms ({ours / tlow:.2f}x)"
        rows.append((f"linear {name}", ours, torch32, note))
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="cpu-numba")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--n", type=int, default=1 << 24)
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--skip-linear", action="store_true")
    args = p.parse_args()
    print(f"CPU: {cpu_model()}; torch threads {torch.get_num_threads()}, "
          f"NUMBA_NUM_THREADS {os.environ.get('NUMBA_NUM_THREADS', 'default')}, "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"mojolike {mojolike.__version__} backend {args.backend}; ml_dtypes {ml_dtypes.__version__}, "
          f"numpy {np.__version__}, torch {torch.__version__}")
    rows = cast_rows(args.backend, args.n, args.repeat)
    head = f"n = {args.n}: mojolike vs astype"
    if not args.skip_linear:
        rows += linear_rows(args.backend, args.size, args.repeat)
        head += f"; {args.size}^3 linear: mojolike vs torch float32 F.linear"
    print(head)
    print(f"{'op':28s} {'mojolike ms':>12s} {'reference ms':>13s} {'ratio':>7s}  beside")
    for name, ours, ref, note in rows:
        print(f"{name:28s} {ours * 1e3:12.2f} {ref * 1e3:13.2f} {ours / ref:7.2f}x  {note}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
