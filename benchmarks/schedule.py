"""Learning-rate schedules: mojolike lr_at / lr_values vs torch's LambdaLR and CosineAnnealingLR.

    cd benchmarks && python schedule.py [--steps 100000] [--n 1000000] [--repeat 5] [--backends ...]

Rows: `lr_at` per step, amortized over `steps` consecutive steps of a fresh
schedule (construction and every 4096-step block computation included);
`lr_values(n)` per value; torch's `LambdaLR` with the same warmup + cosine closed
form (math.cos) and `CosineAnnealingLR`, each stepped `steps` times on a dummy SGD
optimizer over one parameter, timing only `scheduler.step()` + `get_last_lr()`.
Every row is the best of `repeat`. The oracle backend, where it stands in for
missing kernels, runs a smaller count (said in its row). Not a test: timings depend
on the machine; ratios in one run on one machine are what the closing notes quote.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import warnings

import mojolike
from timing import best_of

P, M, W = 6e-4, 6e-5, 2000  # a typical LLM schedule: peak, minimum, warmup
ORACLE_STEPS = 4096  # the oracle is pure Python (about 30 us a cosine value)
KERNELS = {"cpu-numba": "mojolike.native.schedule", "cpu-cffi": "mojolike.native.c.schedule"}


def _have_kernels(backend: str) -> bool:
    try:
        return importlib.util.find_spec(KERNELS[backend]) is not None
    except (ImportError, ValueError):
        return False


def mojolike_rows(backend: str, steps: int, n: int, total: int, repeat: int) -> list:
    def consecutive():
        s = mojolike.WarmupCosineLR(P, warmup_steps=W, total_steps=total, min_lr=M, backend=backend)
        lr_at = s.lr_at
        for t in range(1, steps + 1):
            lr_at(t)

    s = mojolike.WarmupCosineLR(P, warmup_steps=W, total_steps=total, min_lr=M, backend=backend)
    return [(f"mojolike {backend} lr_at, {steps} steps", best_of(consecutive, repeat) / steps),
            (f"mojolike {backend} lr_values({n})", best_of(lambda: s.lr_values(n), repeat) / n)]


def torch_rows(steps: int, total: int, repeat: int) -> list:
    import torch

    def lam(epoch):  # epoch 0 is the first step
        t = epoch + 1
        if t <= W:
            return t / W
        if t >= total:
            return M / P
        return M / P + (1 - M / P) * 0.5 * (1.0 + math.cos(math.pi * (t - W) / (total - W)))

    def timed(make_scheduler) -> float:
        # fresh optimizer and scheduler per repeat, built outside the timed loop
        pending = []
        for _ in range(repeat + 1):
            opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=P)
            opt.step()  # no gradient: a no-op that keeps torch's step-order warning quiet
            pending.append(make_scheduler(opt))

        def loop():
            sched = pending.pop()
            for _ in range(steps):
                sched.step()
                sched.get_last_lr()
        return best_of(loop, repeat) / steps

    sched = torch.optim.lr_scheduler
    return [(f"torch {torch.__version__} LambdaLR (warmup + math.cos)",
             timed(lambda opt: sched.LambdaLR(opt, lam))),
            (f"torch {torch.__version__} CosineAnnealingLR (recursive)",
             timed(lambda opt: sched.CosineAnnealingLR(opt, T_max=total, eta_min=M)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10**5)
    p.add_argument("--n", type=int, default=10**6)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--backends", default=None, help="comma-separated; default: cpu-numba and cpu-cffi "
                   "where their schedule kernels exist, else the oracle")
    args = p.parse_args()
    total = max(args.steps, args.n)  # the decay spans every benchmarked step
    available = {b.name: b.available for b in mojolike.backends()}
    names = args.backends.split(",") if args.backends else [
        b for b in KERNELS if available[b] and _have_kernels(b)] or ["oracle"]
    print(f"WarmupCosineLR(peak_lr={P}, warmup_steps={W}, total_steps={total}, min_lr={M}); "
          f"best of {args.repeat}; {platform.processor() or platform.machine()}, {os.cpu_count()} cpus")

    rows = []
    for b in names:
        if b == "oracle":
            print(f"oracle: {ORACLE_STEPS} steps and values instead of {args.steps} / {args.n} "
                  "(no kernels here)")
            rows += mojolike_rows(b, ORACLE_STEPS, ORACLE_STEPS, total, 1)
        else:
            rows += mojolike_rows(b, args.steps, args.n, total, args.repeat)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch_rows_ = torch_rows(args.steps, total, args.repeat)
    except ImportError:
        torch_rows_ = []
        print("torch not installed: no torch rows")
    rows += torch_rows_

    base = torch_rows_[0][1] if torch_rows_ else None
    width = max(len(r[0]) for r in rows)
    for name, sec in rows:
        ratio = f"  {sec / base:8.4f}x LambdaLR step" if base else ""
        print(f"{name:{width}s} {sec * 1e6:10.4f} us per {'value' if 'values' in name else 'step'}"
              f"{ratio}")


if __name__ == "__main__":
    main()
