"""mojolike.torch.certified(): dispatch overhead per op and the nanoGPT step against torch eager.

    python benchmarks/torch_certified.py [--backend cpu-numba] [--repeat 3] [--steps 3]

- dispatch overhead: the time per op of small-tensor ops (a pass-through add on 8 floats,
  a view, and a routed mm of (4, 4) @ (4, 4)) under certified() minus the same op in plain
  torch, best of `repeat` loops of 2000 calls (target <= 20 us per op);
- the nanoGPT training step of examples/torch_gpt.py at (n_layer 4, n_embd 256, block 256,
  batch 8; n_head 4, vocab 256): forward, backward and mojolike.torch.optim.AdamW's step
  under certified() against the same step in torch eager with torch.optim.AdamW (target
  <= 3x), best of `repeat` alternating rounds of `steps` steps after one warm step.
Prints the CPU model and the load average: the machine is shared, so the figures are
noisy; quote ratios from one run. Not a test.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch
from timing import best_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import torch_gpt

import mojolike.core.registry
import mojolike.torch
from mojolike.torch.optim import AdamW


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def per_op(fn, n: int, repeat: int, mode=None) -> float:
    def loop():
        if mode is None:
            for _ in range(n):
                fn()
        else:
            with mode:
                for _ in range(n):
                    fn()
    return best_of(loop, repeat) / n


def overhead(backend: str, repeat: int) -> None:
    x, a = torch.ones(8), torch.ones(4, 4)
    an = a.numpy()
    ops = {"add (pass-through)": (lambda: x + x, None),
           "view (pass-through)": (lambda: x.view(2, 4), None),
           "mm (routed, 4x4)": (lambda: a @ a,
                                lambda: mojolike.matmul(an, an, backend=backend))}
    print(f"dispatch overhead per op (small tensors, 2000 calls, best of {repeat}):")
    for name, (fn, direct) in ops.items():
        eager = per_op(fn, 2000, repeat)
        cert = per_op(fn, 2000, repeat, mojolike.torch.certified(backend=backend))
        line = (f"  {name:20s} eager {eager * 1e6:6.2f} us  certified {cert * 1e6:6.2f} us  "
                f"certified - eager {(cert - eager) * 1e6:6.2f} us")
        if direct is not None:
            own = per_op(direct, 2000, repeat)
            line += (f"; mojolike.matmul on numpy alone {own * 1e6:6.2f} us, so the dispatch "
                     f"{(cert - own) * 1e6:6.2f} us")
        print(line + " (target <= 20)")


def gpt_step(backend: str, repeat: int, steps: int) -> None:
    cfg = torch_gpt.CONFIGS["bench"]
    data = list(torch_gpt.batches(cfg, steps + 1))

    def setup(certified: bool):
        torch.manual_seed(0)
        model = torch_gpt.GPT(**cfg)
        if certified:
            opt = AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, backend=backend)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        return model, opt

    def one(model, opt, x, y):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # the two sides alternate, `repeat` rounds, so that a burst of load hits both alike
    sides = {c: (*setup(c), mojolike.torch.certified(backend=backend) if c else None)
             for c in (False, True)}
    times = {False: float("inf"), True: float("inf")}
    for _ in range(repeat):
        for certified, (model, opt, mode) in sides.items():
            if mode is not None:
                mode.__enter__()
            try:
                one(model, opt, *data[0])  # warm
                t0 = time.perf_counter()
                for x, y in data[1:]:
                    one(model, opt, x, y)
                times[certified] = min(times[certified], (time.perf_counter() - t0) / steps)
            finally:
                if mode is not None:
                    mode.__exit__(None, None, None)
    print(f"nanoGPT step {cfg} (forward + backward + AdamW step, best of {repeat} x {steps}):")
    print(f"  torch eager      {times[False] * 1e3:9.1f} ms")
    print(f"  certified()      {times[True] * 1e3:9.1f} ms  ({backend})")
    print(f"  ratio            {times[True] / times[False]:9.2f}x (target <= 3)")


def breakdown(backend: str) -> None:
    """One certified step's time per aten op (outermost calls), the largest first."""
    from mojolike.torch.dispatch import CertifiedMode

    spent: dict[str, float] = {}

    class Timed(CertifiedMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            t = time.perf_counter()
            try:
                return super().__torch_dispatch__(func, types, args, kwargs)
            finally:
                spent[str(func)] = spent.get(str(func), 0.0) + time.perf_counter() - t

    cfg = torch_gpt.CONFIGS["bench"]
    torch.manual_seed(0)
    model = torch_gpt.GPT(**cfg)
    opt = AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, backend=backend)
    data = list(torch_gpt.batches(cfg, 2))
    with Timed(*mojolike.core.registry.resolve("bench", backend, None)):
        for i, (x, y) in enumerate(data):
            if i == 1:
                spent.clear()
                t0 = time.perf_counter()
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    total = time.perf_counter() - t0
    print(f"one certified step {total * 1e3:.0f} ms; the ops' share (dispatch included):")
    for name, t in sorted(spent.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {name:62s} {t * 1e3:8.1f} ms")
    print(f"  {'(outside the ops: Python, autograd, the optimizer)':62s} "
          f"{(total - sum(spent.values())) * 1e3:8.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu-numba")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", choices=("overhead", "gpt", "breakdown"), default=None)
    a = ap.parse_args()
    print(f"CPU: {cpu_model()}; {os.cpu_count()} logical CPUs; torch threads "
          f"{torch.get_num_threads()}; load average {os.getloadavg()} "
          f"(a shared machine: the figures are noisy)")
    if a.only in (None, "overhead"):
        overhead(a.backend, a.repeat)
    if a.only in (None, "gpt"):
        gpt_step(a.backend, a.repeat, a.steps)
    if a.only in (None, "breakdown"):
        breakdown(a.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
