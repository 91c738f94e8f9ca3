"""The layers against torch in one run: linear forward and backward, the chunked LM head,
embedding backward, rms_norm, and how often torch's matmul breaks batch invariance.

    python benchmarks/layers.py [--quick] [--rounds 3] [--repeat 2] [--threads N]
                                [--backends cpu-numba,cpu-cffi] [--targets host,haswell] [--paths]

Every row is mojolike in identical mode or torch 2.13 CPU (FMA, its own blocking), at the
issue's sizes (--quick shrinks them for a smoke run). Each section times its rows in
turn, `rounds` rounds of `repeat` calls after a warm call, and keeps each row's best,
so a burst of load on a shared machine hits every row alike; the line "other processes
used x cores" says how shared the machine was. Ratios are to torch in the same run,
beside the issue's targets:

- linear forward, (M, N, K) = 1024^3, 2048^3, 4096 x 3072 x 768: cpu-numba <= 2.5x
  F.linear (GFLOP/s = 2MNK / time); --paths adds cpu-cffi's other instruction sets;
- linear_backward (dx, dweight, dbias) <= 3x torch's backward of F.linear;
- chunked_lm_head_loss (rows 4096, width 768, vocab 32768, chunk 4096) with gradients
  <= 1.0x our unfused cross_entropy(linear) + linear_backward and <= 3x torch's unfused
  F.linear + F.cross_entropy + backward; its peak memory beyond the outputs (tracemalloc);
- embedding_backward (N 16384, V 32768, D 512) <= 1.0x torch's F.embedding backward;
- rms_norm + rms_norm_backward (4096 x 4096, with weight) <= 1.5x torch's forward + backward;
- batch invariance: for how many batch sizes k `torch.mm(a[:k], b)` (and F.linear) differs
  in bits from rows :k of the full product, beside mojolike.linear measured the same way.

Not a test: quote ratios from one run, with the CPU line it prints.
"""
from __future__ import annotations

import argparse
import os
import sys
import tracemalloc

import numpy as np
from fold import OtherLoad, best_of_each, cpu_model, numba_target, run_targets

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 3072, 768)]
QUICK_SHAPES = [(256, 256, 256), (256, 256, 1100), (512, 384, 96)]


def report(title: str, times: dict, base: str, target: float | None, flop: float = 0.0,
           also: str | None = None) -> None:
    """One table: each row's time, GFLOP/s (with flop), ratio to `base` (and to `also`)."""
    print(f"-- {title}" + (f" (target <= {target:g}x {base})" if target else ""))
    width = max(len(name) for name in times)
    for name, tm in times.items():
        line = f"   {name:{width}s} {tm * 1e3:10.2f} ms"
        if flop:
            line += f" {flop / tm / 1e9:7.1f} GFLOP/s"
        line += f" {tm / times[base]:6.2f}x {base}"
        if also and also in times:
            line += f" {tm / times[also]:6.2f}x {also}"
        print(line, flush=True)


def data(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * scale)


def linear_rows(shapes, names, args, cffi):
    import torch
    import torch.nn.functional as F

    import mojolike
    paths = {}
    if args.paths and cffi is not None:  # the C tile's other instruction sets this CPU runs
        default = cffi.vector_path()
        for p in range(3):
            name = cffi.vector_path(p)
            if name != default and name not in paths.values():
                paths[p] = name
        cffi.vector_path(-2)
    for m, n, k in shapes:
        x, w, b, dy = data((m, k), 1), data((n, k), 2), data(n, 3), data((m, n), 4)
        tx, tw, tb = (torch.from_numpy(v.copy()).requires_grad_() for v in (x, w, b))
        ty = F.linear(tx, tw, tb)
        tdy = torch.from_numpy(dy)
        fwd = {"torch F.linear": lambda: F.linear(tx.detach(), tw.detach())}
        for name in names:
            fwd[name] = lambda name=name: mojolike.linear(x, w, backend=name)
        for p, label in paths.items():
            out = np.empty((m, n), np.float32)
            fwd[f"cpu-cffi {label.split(':')[0]}"] = lambda p=p, out=out: on_path(cffi, p, x, w, out)
        with OtherLoad() as other:
            tf = best_of_each(fwd, args.repeat, args.rounds)
        report(f"linear forward {m}x{n}x{k}; other processes used {other.cores:.2f} cores", tf,
               "torch F.linear", 2.5, 2.0 * m * n * k)
        bwd = {"torch backward of F.linear":
               lambda: torch.autograd.grad(ty, (tx, tw, tb), tdy, retain_graph=True)}
        for name in names:
            bwd[name] = lambda name=name: mojolike.linear_backward(dy, x, w, bias=True, backend=name)
        with OtherLoad() as other:
            tb_ = best_of_each(bwd, args.repeat, args.rounds)
        report(f"linear_backward {m}x{n}x{k} (dx, dweight, dbias); other processes used "
               f"{other.cores:.2f} cores", tb_, "torch backward of F.linear", 3.0, 4.0 * m * n * k)


def on_path(cffi, path: int, x, w, out):
    before = cffi.vector_path()
    cffi.vector_path(path)
    try:
        cffi.gemm_nt(x, w, x[0], False, out)
    finally:
        cffi.vector_path(-2)
        assert cffi.vector_path() == before


def peak_bytes(fn) -> int:
    """The peak of Python-visible allocations (numpy's are traced) during fn, beyond the start."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def head_rows(rows, width, vocab, chunk, names, args):
    import torch
    import torch.nn.functional as F

    import mojolike
    h, w = data((rows, width), 5), data((vocab, width), 6, 0.05)
    t = np.random.default_rng(7).integers(0, vocab, rows)
    t[::17] = -100
    th, tw, tt = torch.from_numpy(h), torch.from_numpy(w), torch.from_numpy(t)

    def torch_unfused():
        hh, ww = th.detach().requires_grad_(), tw.detach().requires_grad_()
        F.cross_entropy(F.linear(hh, ww), tt).backward()
        return hh.grad, ww.grad

    def unfused(name):
        z = mojolike.linear(h, w, backend=name)
        loss, dz = mojolike.cross_entropy(z, t, return_grad=True, backend=name)
        del z
        dh, dw, _ = mojolike.linear_backward(dz, h, w, bias=False, backend=name)
        return loss, dh, dw

    def chunked(name):
        return mojolike.chunked_lm_head_loss(h, w, t, return_grad=True, chunk_size=chunk, backend=name)

    fns = {"torch unfused linear + cross_entropy + backward": torch_unfused}
    for name in names:
        fns[f"{name} unfused"] = lambda name=name: unfused(name)
        fns[f"{name} chunked"] = lambda name=name: chunked(name)
    with OtherLoad() as other:
        tm = best_of_each(fns, 1, args.head_rounds)
    report(f"chunked head rows {rows} width {width} vocab {vocab} chunk {chunk}, fwd+bwd; other "
           f"processes used {other.cores:.2f} cores (targets: chunked <= 1.0x ours unfused, <= 3x "
           f"torch)", tm, "torch unfused linear + cross_entropy + backward", None,
           also=f"{names[0]} unfused")
    outputs = 4 * (rows * width + vocab * width)
    unit = 4 * rows * chunk
    for name in names:
        for kind, fn in (("chunked", lambda: chunked(name)), ("unfused", lambda: unfused(name))):
            extra = peak_bytes(fn) - outputs
            print(f"   {name} {kind}: peak {extra / 2**20:8.1f} MiB beyond the outputs = "
                  f"{extra / unit:5.2f} x rows x chunk floats (tracemalloc)", flush=True)


def embedding_rows(n, v, d, names, args):
    import torch
    import torch.nn.functional as F

    import mojolike
    ids = np.random.default_rng(8).integers(0, v, n)
    dy = data((n, d), 9)
    tw = torch.from_numpy(data((v, d), 10)).requires_grad_()
    ty = F.embedding(torch.from_numpy(ids), tw)
    tdy = torch.from_numpy(dy)
    fns = {"torch F.embedding backward": lambda: torch.autograd.grad(ty, tw, tdy, retain_graph=True)}
    for name in names:
        fns[name] = lambda name=name: mojolike.embedding_backward(dy, ids, v, backend=name)
    with OtherLoad() as other:
        tm = best_of_each(fns, args.repeat, args.rounds)
    report(f"embedding_backward N {n} V {v} D {d}; other processes used {other.cores:.2f} cores", tm,
           "torch F.embedding backward", 1.0)


def rms_rows(m, d, names, args):
    import torch
    import torch.nn.functional as F

    import mojolike
    x, w, dy = data((m, d), 11), data(d, 12) + np.float32(1), data((m, d), 13)
    tx, tw, tdy = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)

    def torch_fb():
        xx, ww = tx.detach().requires_grad_(), tw.detach().requires_grad_()
        y = F.rms_norm(xx, (d,), ww)
        return y, torch.autograd.grad(y, (xx, ww), tdy)

    def ours(name):
        return mojolike.rms_norm(x, w, backend=name), mojolike.rms_norm_backward(dy, x, w, backend=name)

    fns = {"torch F.rms_norm forward + backward": torch_fb}
    for name in names:
        fns[name] = lambda name=name: ours(name)
    with OtherLoad() as other:
        tm = best_of_each(fns, args.repeat, args.rounds)
    report(f"rms_norm + rms_norm_backward {m}x{d} with weight; other processes used {other.cores:.2f} "
           f"cores", tm, "torch F.rms_norm forward + backward", 1.5)


def invariance_rows(shapes, names) -> None:
    """For each batch size k = 1..M: does the product of rows :k equal rows :k of the full one?"""
    import torch
    import torch.nn.functional as F

    import mojolike
    print("-- batch invariance: batch sizes k = 1..M whose rows :k differ in bits from rows :k of "
          "the full product")
    for m, n, k in shapes:
        a, w = data((m, k), 14), data((n, k), 15)
        ta, tw = torch.from_numpy(a), torch.from_numpy(w)
        tb = tw.t().contiguous()  # b (K, N)
        fulls = {"torch.mm(a, b)": torch.mm(ta, tb).numpy(), "F.linear(a, w)": F.linear(ta, tw).numpy()}
        parts = {"torch.mm(a, b)": lambda kk: torch.mm(ta[:kk], tb).numpy(),
                 "F.linear(a, w)": lambda kk: F.linear(ta[:kk], tw).numpy()}
        for name in names:
            fulls[f"mojolike.linear {name}"] = mojolike.linear(a, w, backend=name)
            parts[f"mojolike.linear {name}"] = lambda kk, name=name: mojolike.linear(a[:kk], w,
                                                                                      backend=name)
        for what, full in fulls.items():
            bad = [kk for kk in range(1, m + 1) if parts[what](kk).tobytes() != full[:kk].tobytes()]
            first = f", first at k={bad[0]}" if bad else ""
            print(f"   {m}x{n}x{k} {what:26s} differs for {len(bad):3d} of {m} batch sizes{first}",
                  flush=True)


def set_threads(n: int | None, cffi) -> str:
    import numba
    import torch
    if n:
        torch.set_num_threads(n)
        numba.set_num_threads(n)
        if cffi is not None:
            cffi.set_num_threads(n)
    return f"threads: torch {torch.get_num_threads()}, numba {numba.get_num_threads()}" + (
        f", cpu-cffi {cffi.get_num_threads()}" if cffi is not None else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--head-rounds", type=int, default=2, help="rounds of the (slow) head section")
    p.add_argument("--threads", type=int, default=None, help="for torch, numba and cpu-cffi alike")
    p.add_argument("--backends", default=None,
                   help="comma-separated; default: every available CPU backend (cpu-numba, cpu-cffi)")
    p.add_argument("--targets", default="host",
                   help="comma-separated numba targets: host, haswell, generic, ...")
    p.add_argument("--paths", action="store_true", help="also time cpu-cffi's other GEMM paths")
    args = p.parse_args()
    if not os.environ.get("NUMBA_CPU_NAME") and not run_targets(args.targets, __file__, sys.argv[1:]):
        return

    import torch
    from timing import backend_names

    import mojolike
    from mojolike.core import registry
    names = [b for b in backend_names(args.backends) if b.startswith("cpu-")]
    cffi = registry.kernels("benchmark", "layers", "cpu-cffi", "identical") if "cpu-cffi" in names \
        else None
    from mojolike.native import layers as numba_layers
    print(f"{cpu_model()}; torch {torch.__version__}; numba target {numba_target()}, GEMM tile "
          f"{numba_layers.TILE_ROWS}x{numba_layers.TILE_COLS}; "
          f"cpu-cffi {cffi.vector_path() if cffi is not None else '-'}; {set_threads(args.threads, cffi)}")
    print(f"mojolike {mojolike.__version__}, numeric_mode identical; best of {args.rounds} rounds x "
          f"{args.repeat} calls (head: {args.head_rounds} rounds x 1)", flush=True)
    q = args.quick
    linear_rows(QUICK_SHAPES if q else SHAPES, names, args, cffi)
    head_rows(*((512, 96, 4096, 1024) if q else (4096, 768, 32768, 4096)), names, args)
    embedding_rows(*((2048, 4096, 64) if q else (16384, 32768, 512)), names, args)
    rms_rows(*((512, 512) if q else (4096, 4096)), names, args)
    invariance_rows([(16, 256, 256), (16, 300, 1100)] if q else
                    [(64, 1024, 1024), (64, 3072, 768), (32, 2048, 2048)], names)


if __name__ == "__main__":
    main()
