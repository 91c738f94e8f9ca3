"""What the step controls cost (issue 12, item 8), in one run, against the plain step and torch.

    python benchmarks/step_controls.py [--n 16777216] [--tensors 200] [--rounds 3] [--repeat 3]
                                       [--backends cpu-numba,cpu-cffi]

Over `tensors` separate float32 arrays of `n` elements in all, numeric_mode="identical":

- Adam step(grads, grad_scale=s) against the plain step(grads): the scale is folded into
  the step's read of each gradient, so the target is <= 1.05x;
- grad_checksum(grads) against mojolike.fold of the same cells as one flat array: <= 1.0x;
- GradScaler.step(opt, grads, max_norm=1) (the checksum and the norm in one pass, the
  unscale and the clip folded into the update's read: two reads of the gradients) against
  opt.step(grads, max_norm=1, clip="fold") (the norm pass and the update: two reads), and
  torch's GradScaler.unscale_ + clip_grad_norm_ + Adam(fused=True).step for scale.

Each row keeps its best over `rounds` rounds of `repeat` calls, every row timed once per
round. Not a test: quote ratios from one run, with the CPU line it prints.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from fold import OtherLoad, best_of_each, cpu_model

import mojolike


def arrays(n: int, tensors: int, seed: int, scale: float) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = np.full(tensors, n // tensors)
    sizes[: n % tensors] += 1
    return [(rng.standard_normal(int(s)) * scale).astype(np.float32) for s in sizes]


def rows_for(backend: str, n: int, tensors: int) -> dict:
    ps = arrays(n, tensors, 1, 1.0)
    gs = arrays(n, tensors, 2, 1e-3)
    flat = np.concatenate(gs)
    plain = mojolike.Adam(ps, lr=1e-6, backend=backend)
    scaled = mojolike.Adam(arrays(n, tensors, 1, 1.0), lr=1e-6, backend=backend)
    folded = mojolike.Adam(arrays(n, tensors, 1, 1.0), lr=1e-6, backend=backend)
    scaler_opt = mojolike.Adam(arrays(n, tensors, 1, 1.0), lr=1e-6, backend=backend)
    # growth_interval beyond the run: the scale stays 1, so every step is taken
    scaler = mojolike.GradScaler(init_scale=1.0, growth_interval=10**9, backend=backend)

    def scaler_step():
        scaler.step(scaler_opt, gs, max_norm=1.0)
        scaler.update()

    return {
        f"{backend} step": lambda: plain.step(gs),
        f"{backend} step grad_scale": lambda: scaled.step(gs, grad_scale=0.5),
        f"{backend} fold (flat)": lambda: mojolike.fold(flat, backend=backend),
        f"{backend} grad_checksum": lambda: mojolike.grad_checksum(gs, backend=backend),
        f"{backend} step max_norm clip=fold": lambda: folded.step(gs, max_norm=1.0, clip="fold"),
        f"{backend} GradScaler.step max_norm": scaler_step,
    }


def torch_row(n: int, tensors: int):
    import torch
    ps = [torch.nn.Parameter(torch.from_numpy(a)) for a in arrays(n, tensors, 1, 1.0)]
    for p, g in zip(ps, arrays(n, tensors, 2, 1e-3)):
        p.grad = torch.from_numpy(g)
    opt = torch.optim.Adam(ps, lr=1e-6, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=10**9)

    def step():
        scaler.scale(torch.ones(()))  # torch makes its scale tensor here, lazily
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(ps, 1.0)
        scaler.step(opt)
        scaler.update()
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2**24)
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="cpu-numba,cpu-cffi")
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}; python {sys.version.split()[0]}; n={args.n} in {args.tensors} "
          f"separate tensors")
    rows = {}
    for b in args.backends.split(","):
        rows.update(rows_for(b, args.n, args.tensors))
    rows["torch unscale_ + clip_grad_norm_ + Adam(fused) step"] = torch_row(args.n, args.tensors)
    with OtherLoad() as load:
        best = best_of_each(rows, args.repeat, args.rounds)
    print(f"other processes used {load.cores:.2f} cores")
    for name, t in best.items():
        print(f"   {name:55s} {t * 1e3:9.2f} ms")
    for b in args.backends.split(","):
        print(f"-- {b}")
        print(f"   grad_scale / plain step                     {best[f'{b} step grad_scale'] / best[f'{b} step']:.3f}x (target <= 1.05)")
        print(f"   grad_checksum / fold of the same cells      {best[f'{b} grad_checksum'] / best[f'{b} fold (flat)']:.3f}x (target <= 1.0)")
        print(f"   scaler + clip step / folded clip step       {best[f'{b} GradScaler.step max_norm'] / best[f'{b} step max_norm clip=fold']:.3f}x (two reads each)")
        print(f"   scaler + clip step / torch's                {best[f'{b} GradScaler.step max_norm'] / best['torch unscale_ + clip_grad_norm_ + Adam(fused) step']:.3f}x")


if __name__ == "__main__":
    main()
