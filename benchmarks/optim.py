"""Optimizer steps and the clip on 2**24 float32: mojolike vs torch and a memory-traffic floor.

    python benchmarks/optim.py [--n 16777216] [--tensors 200] [--repeat 5] [--rounds 3]
                               [--layouts one,arena,separate] [--targets host,haswell]

Registries: one 2**24-element tensor ("one"), and 200 tensors of the same total,
as views of one arena ("arena") or as separate arrays ("separate"); mojolike
updates both where they lie (no copies). Each row is the best of `rounds` rounds
of `repeat` warm steps, every row timed once per round; ratios are against torch
2.13 in the same run: `Adam(fused=True)` / `AdamW(fused=True)`, `SGD(foreach)`,
`clip_grad_norm_` (default and foreach) and `clip_grad_norm_` followed by the fused Adam step
(against mojolike's `step(grads, max_norm=...)`), and against trivial numba
kernels with the step's memory traffic (the floors). numeric_mode="identical"
reads the gradients once more than torch to refuse inf/NaN before writing (its
floor includes that read); with max_norm the norm pass proves them finite and the
clip's scaling is done inside the step's pass; "deterministic" rows skip the
check. `--targets` reruns everything per numba target, as in benchmarks/fold.py.
"""
from __future__ import annotations

import argparse
import os
import sys

import numba
import numpy as np
from fold import OtherLoad, best_of_each, cpu_model, numba_target, run_targets
from numba import njit, prange
from timing import peak_alloc


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
def floor_read(g, out):  # reads g once: the clip's norm pass
    for c in prange(out.size):
        s = np.float32(0)
        for k in range(c * 4096, min(c * 4096 + 4096, g.size)):
            s += g[k] * g[k]
        out[c] = s


@njit(parallel=True, cache=True)
def floor_scale(g):  # reads and writes g: the clip's scaling pass
    for i in prange(g.size):
        g[i] = g[i] * np.float32(0.5)


def registry(n: int, tensors: int, layout: str):
    arena = np.random.default_rng(1).standard_normal(n, np.float32)
    if layout == "one":
        return arena
    edges = np.linspace(0, n, tensors + 1).astype(np.int64)
    views = [arena[a:b] for a, b in zip(edges[:-1], edges[1:])]
    return views if layout == "arena" else [v.copy() for v in views]


def grads_like(params, n, layout: str):
    g = np.random.default_rng(2).standard_normal(n, np.float32) * np.float32(1e-3)
    if isinstance(params, np.ndarray):
        return g
    edges = np.cumsum([0] + [p.size for p in params])
    views = [g[a:b] for a, b in zip(edges[:-1], edges[1:])]
    return views if layout == "arena" else [v.copy() for v in views]


def torch_rows(params, grads, max_norm: float) -> dict:
    import torch
    tp = [torch.from_numpy(np.array(p, copy=True)) for p in (params if isinstance(params, list)
                                                            else [params])]
    for p, g in zip(tp, grads if isinstance(grads, list) else [grads]):
        p.grad = torch.from_numpy(np.array(g, copy=True))
    adam_clip = torch.optim.Adam(tp, lr=1e-3, fused=True)

    def clip_then_adam():
        torch.nn.utils.clip_grad_norm_(tp, max_norm)
        adam_clip.step()
    return {"torch Adam fused": torch.optim.Adam(tp, lr=1e-3, fused=True).step,
            "torch AdamW fused": torch.optim.AdamW(tp, lr=1e-3, fused=True).step,
            "torch Adam foreach": torch.optim.Adam(tp, lr=1e-3, foreach=True).step,
            "torch SGD momentum foreach": torch.optim.SGD(tp, lr=1e-3, momentum=0.9,
                                                          foreach=True).step,
            "torch clip_grad_norm_": lambda: torch.nn.utils.clip_grad_norm_(tp, max_norm),
            "torch clip_grad_norm_ foreach": lambda: torch.nn.utils.clip_grad_norm_(
                tp, max_norm, foreach=True),
            "torch clip_grad_norm_ + Adam fused": clip_then_adam}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2**24)
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="cpu-numba,cpu-cffi")
    ap.add_argument("--layouts", default="one,arena,separate")
    ap.add_argument("--targets", default="host",
                    help="comma-separated numba targets: host, haswell, znver3, generic, ...")
    args = ap.parse_args()
    if not os.environ.get("NUMBA_CPU_NAME") and not run_targets(args.targets, __file__, sys.argv[1:]):
        return
    import torch

    import mojolike
    n, rep, max_norm = args.n, args.repeat, 1.0
    print(f"n={n} float32, best of {args.rounds} rounds x {rep} warm steps; {cpu_model()}; numba "
          f"{numba.__version__} target {numba_target()} threads={numba.get_num_threads()}, torch "
          f"{torch.__version__} threads={torch.get_num_threads()}")

    flat_p, flat_g = np.zeros(n, np.float32), np.ones(n, np.float32)
    m, v, b = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    work = np.empty((n + 4095) // 4096, np.float32)
    floors = {"floor: Adam traffic (28 B/elem)": lambda: floor_adam(flat_p, flat_g, m, v),
              "floor: SGD traffic (20 B/elem)": lambda: floor_sgd(flat_p, flat_g, b),
              "floor: one read of g (4 B/elem)": lambda: floor_check(flat_g, work),
              "floor: read g, fold (4 B/elem)": lambda: floor_read(flat_g, work),
              "floor: scale g (8 B/elem)": lambda: floor_scale(flat_g)}
    ft = best_of_each(floors, rep, args.rounds)
    f_adam, f_check = ft["floor: Adam traffic (28 B/elem)"], ft["floor: one read of g (4 B/elem)"]
    f_sgd = ft["floor: SGD traffic (20 B/elem)"]
    f_clip = ft["floor: read g, fold (4 B/elem)"] + ft["floor: scale g (8 B/elem)"]
    rows = [(name, t, [], None) for name, t in ft.items()]

    for layout in args.layouts.split(","):
        tensors = 1 if layout == "one" else args.tensors
        where = "1 tensor" if layout == "one" else f"{tensors} tensors {layout}"
        params = registry(n, tensors, layout)
        grads = grads_like(params, n, layout)
        fns = {f"[{where}] {k}": f for k, f in torch_rows(params, grads, max_norm).items()}
        spec = {}  # label -> (torch row it is compared with, floor seconds)
        for backend in args.backends.split(","):
            for mode in ("identical", "deterministic"):
                kw = dict(backend=backend, numeric_mode=mode)
                tag = f"[{where}] mojolike {backend} {mode}"
                chk = f_check if mode == "identical" else 0.0  # the floor moves the same bytes
                adam = mojolike.Adam(params, lr=1e-3, **kw)
                adamw = mojolike.AdamW(params, lr=1e-3, **kw)
                sgd = mojolike.SGD(params, lr=1e-3, momentum=0.9, **kw)
                fns[f"{tag} Adam"] = lambda o=adam: o.step(grads)
                spec[f"{tag} Adam"] = (("torch Adam fused",), f_adam + chk)
                fns[f"{tag} AdamW"] = lambda o=adamw: o.step(grads)
                spec[f"{tag} AdamW"] = (("torch AdamW fused", "torch Adam fused"), f_adam + chk)
                fns[f"{tag} SGD momentum"] = lambda o=sgd: o.step(grads)
                spec[f"{tag} SGD momentum"] = (("torch SGD momentum foreach",), f_sgd + chk)
                if mode == "identical":
                    clipped = mojolike.Adam(params, lr=1e-3, **kw)
                    # coef < 1 on these gradients, so every step scales them in place
                    fns[f"{tag} Adam max_norm"] = lambda o=clipped: o.step(grads, max_norm=max_norm)
                    # floor: the norm pass reads g, the step moves Adam's 28 B and writes g
                    spec[f"{tag} Adam max_norm"] = (("torch clip_grad_norm_ + Adam fused",),
                                                    ft["floor: read g, fold (4 B/elem)"]
                                                    + f_adam * 32 / 28)
                    fns[f"{tag} clip_grad_norm_"] = lambda b=backend: mojolike.clip_grad_norm_(
                        grads, max_norm, backend=b)
                    spec[f"{tag} clip_grad_norm_"] = (("torch clip_grad_norm_",
                                                       "torch clip_grad_norm_ foreach"), f_clip)
                    peak = peak_alloc(lambda o=adam: o.step(grads))
                    print(f"{tag}: peak Python-visible allocation in a warm Adam step {peak} bytes "
                          f"({peak / (4 * n):.4%} of the registry)", flush=True)
        with OtherLoad() as other:
            t = best_of_each(fns, rep, args.rounds)
        print(f"[{where}] other processes used {other.cores:.2f} cores during the timings", flush=True)
        for label, s in t.items():
            refs, floor = spec.get(label, ((), None))
            rows.append((label, s, [(r, t[f"[{where}] {r}"]) for r in refs], floor))
        del fns, params, grads

    width = max(len(r[0]) for r in rows)
    for label, t, refs, floor in rows:
        extra = "".join(f"  {t / s:5.2f}x {r}" for r, s in refs)
        if floor is not None:
            extra += f"  {t / floor:5.2f}x floor"
        print(f"{label:{width}s} {t * 1e3:9.2f} ms{extra}")


if __name__ == "__main__":
    main()
