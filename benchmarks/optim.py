"""Optimizer steps and the clip on 2**24 float32: mojolike vs torch and a memory-traffic floor.

    python benchmarks/optim.py [--n 16777216] [--tensors 200] [--repeat 10]

Registries: one 2**24-element tensor, and 200 tensors of the same total (views
of one arena, so mojolike borrows them; the packed case, separate arrays, is
timed too). Each row is the best of `repeat` warm steps; ratios are against
torch 2.13 `Adam(fused=True)` / `foreach=True` in the same run and against a
trivial numba kernel with the step's memory traffic (the practical floor).
numeric_mode="identical" also reads the gradients once more to refuse inf/NaN
before writing (its floor includes that read); "deterministic" rows skip the check.
The packed rows also gather and scatter the parameters and gather the gradients,
which their floor does not include.
"""
from __future__ import annotations

import argparse
import tracemalloc

import numba
import numpy as np
import torch
from numba import njit, prange

import mojolike
from mojolike.contracts.casegen import bulk_normal
from timing import best_of


@njit(parallel=True, cache=True)
def floor_adam(p, g, m, v):  # reads p, g, m, v; writes p, m, v: Adam's traffic
    for i in prange(p.size):
        gi = g[i]
        m[i] = m[i] + gi
        v[i] = v[i] + gi
        p[i] = p[i] - gi


@njit(parallel=True, cache=True)
def floor_sgd(p, g, b):  # reads p, g, b; writes p, b: SGD-momentum's traffic
    for i in prange(p.size):
        b[i] = b[i] + g[i]
        p[i] = p[i] - b[i]


@njit(parallel=True, cache=True)
def floor_check(g, out):  # reads g once: the identical mode's pre-write finiteness check
    for c in prange(out.size):
        ok = 1
        for k in range(c * 4096, min(c * 4096 + 4096, g.size)):
            ok &= g[k] - g[k] == 0
        out[c] = ok


# reassociation lets the floor's sum vectorize: it is a bandwidth yardstick, not a result
@njit(parallel=True, cache=True, fastmath={"reassoc"})
def floor_clip(g, out):  # reads g twice (norm pass, scale pass), writes g once
    for c in prange(out.size):
        s = np.float32(0)
        for k in range(c * 4096, min(c * 4096 + 4096, g.size)):
            s += g[k] * g[k]
        out[c] = s
    for i in prange(g.size):
        g[i] = g[i] * np.float32(0.5)


def registry(n: int, tensors: int, layout: str):
    arena = bulk_normal(n, "bench/optim/p")
    if tensors == 1:
        return arena, arena
    edges = np.linspace(0, n, tensors + 1).astype(np.int64)
    views = [arena[a:b] for a, b in zip(edges[:-1], edges[1:])]
    return (views if layout == "arena" else [v.copy() for v in views]), arena


def grads_like(params, n):
    g = bulk_normal(n, "bench/optim/g") * np.float32(1e-3)
    if isinstance(params, np.ndarray):
        return g
    edges = np.cumsum([0] + [p.size for p in params])
    return [g[a:b] for a, b in zip(edges[:-1], edges[1:])]


def peak_alloc(fn) -> int:
    fn()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2**24)
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--backends", default="cpu-numba,cpu-cffi")
    args = ap.parse_args()
    n, rep = args.n, args.repeat
    print(f"n={n} float32, best of {rep} warm steps; numba {numba.__version__} threads="
          f"{numba.get_num_threads()}, torch {torch.__version__} threads={torch.get_num_threads()}")

    rows = []

    def row(label, seconds, ref=None, floor=None):
        rows.append((label, seconds, ref, floor))

    for tensors, layout in ((1, "arena"), (args.tensors, "arena"), (args.tensors, "packed")):
        where = f"{tensors} tensor{'s' if tensors > 1 else ''}" + (f" {layout}" if tensors > 1 else "")
        params, _ = registry(n, tensors, layout)
        grads = grads_like(params, n)
        tp = [torch.from_numpy(np.array(p, copy=True)) for p in (params if tensors > 1 else [params])]
        for p, g in zip(tp, grads if tensors > 1 else [grads]):
            p.grad = torch.from_numpy(np.array(g, copy=True))
        t_fused = best_of(torch.optim.Adam(tp, lr=1e-3, fused=True).step, rep)
        t_foreach = best_of(torch.optim.Adam(tp, lr=1e-3, foreach=True).step, rep)
        t_sgd_t = best_of(torch.optim.SGD(tp, lr=1e-3, momentum=0.9, foreach=True).step, rep)
        t_clip_t = best_of(lambda: torch.nn.utils.clip_grad_norm_(tp, 1.0, foreach=True), rep)
        flat_p, flat_g = np.zeros(n, np.float32), bulk_normal(n, "bench/optim/g")
        m, v, b = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
        f_adam = best_of(lambda: floor_adam(flat_p, flat_g, m, v), rep)
        f_sgd = best_of(lambda: floor_sgd(flat_p, flat_g, b), rep)
        work = np.empty((n + 4095) // 4096, np.float32)
        f_clip = best_of(lambda: floor_clip(flat_g, work), rep)
        f_check = best_of(lambda: floor_check(flat_g, work), rep)
        row(f"[{where}] torch Adam fused", t_fused)
        row(f"[{where}] torch Adam foreach", t_foreach)
        row(f"[{where}] torch SGD momentum foreach", t_sgd_t)
        row(f"[{where}] torch clip_grad_norm_ foreach", t_clip_t)
        row(f"[{where}] floor: Adam traffic (28 B/elem)", f_adam)
        row(f"[{where}] floor: check + Adam traffic (32 B/elem)", f_adam + f_check)
        for backend in args.backends.split(","):
            for mode in ("identical", "deterministic"):
                kw = dict(backend=backend, numeric_mode=mode)
                tag = f"[{where}] mojolike {backend} {mode}"
                chk = f_check if mode == "identical" else 0.0  # the floor moves the same bytes
                adam = mojolike.Adam(params, lr=1e-3, **kw)
                row(f"{tag} Adam", best_of(lambda: adam.step(grads), rep), ("fused", t_fused),
                    f_adam + chk)
                adamw = mojolike.AdamW(params, lr=1e-3, **kw)
                row(f"{tag} AdamW", best_of(lambda: adamw.step(grads), rep), ("fused", t_fused),
                    f_adam + chk)
                sgd = mojolike.SGD(params, lr=1e-3, momentum=0.9, **kw)
                row(f"{tag} SGD momentum", best_of(lambda: sgd.step(grads), rep), ("foreach", t_sgd_t),
                    f_sgd + chk)
                if mode == "identical":
                    # coef < 1 on these gradients, so every step scales in place
                    row(f"{tag} clip_grad_norm_",
                        best_of(lambda: mojolike.clip_grad_norm_(grads, 1.0, **kw), rep),
                        ("clip", t_clip_t), f_clip)
                    peak = peak_alloc(lambda: adam.step(grads))
                    print(f"{tag}: peak Python-visible allocation in a warm Adam step {peak} bytes "
                          f"({peak / (4 * n):.4%} of the registry)")

    width = max(len(r[0]) for r in rows)
    for label, t, ref, floor in rows:
        extra = ""
        if ref is not None:
            extra += f"  {t / ref[1]:5.2f}x torch {ref[0]}"
        if floor is not None:
            extra += f"  {t / floor:5.2f}x floor"
        print(f"{label:{width}s} {t * 1e3:9.2f} ms{extra}")


if __name__ == "__main__":
    main()
