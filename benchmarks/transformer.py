"""The transformer ops against torch (CPU, same run, same threads): attention, rows, matmul.

    python benchmarks/transformer.py [--backend cpu-numba] [--repeat 7] [--only ...]

Every mojolike figure is the public function (what a user calls: checks, allocation,
the kernels), against torch's forward + backward on the same data:
- attention forward + backward, causal, (4, 8, 1024, 64) and (1, 12, 2048, 64):
  `mojolike.scaled_dot_product_attention(..., return_saved=True)` + `_backward(...,
  saved=)` (the backward reuses the forward's statistics, as torch's autograd does) against
  F.scaled_dot_product_attention(is_causal=True).backward() (target <= 3x); the line after
  gives the backward that runs the forward again (no `saved`);
- softmax and layer_norm forward + backward on (8192, 768), layer_norm with weight and
  bias (dweight and dbias included on both sides) (target <= 1.5x);
- gelu forward + backward on (8192, 768), approximate="none" (erf) and "tanh":
  `mojolike.gelu` + `mojolike.gelu_backward` against F.gelu(x, approximate=...)
  .backward() (target <= 1.5x);
- matmul (48, 1024, 64) @ (48, 64, 1024), forward only (target <= 2.5x).
Then torch's run-to-run and batch-size variation beside ours: the bits of sequence 0's
attention output alone and inside batches of 2, 3 and 4, and of two identical calls.
Medians of `repeat` rounds after a warm call, ours and torch's run in turn each round
(timing.medians_in_turn), with glibc told to keep freed memory for both sides
(timing.keep_freed_memory); quote ratios from one run, with the CPU model
and load average it prints. Not a test.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np
import torch
import torch.nn.functional as F
from timing import keep_freed_memory, medians_in_turn

import mojolike


def cpu_model() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = "AVX-512" if " avx512f" in line else "AVX2" if " avx2" in line else "no AVX2"
                    return f"{name}, {flags}"
    except OSError:
        pass
    return platform.processor()


def _data(shape, key):
    return (np.random.default_rng(key).standard_normal(shape) * 0.5).astype(np.float32)


def attention_case(backend, shape, repeat):
    q, k, v, do = (_data(shape, i) for i in range(4))
    on = {"backend": backend}

    def ours():
        _, saved = mojolike.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                         return_saved=True, **on)
        mojolike.scaled_dot_product_attention_backward(do, q, k, v, is_causal=True, saved=saved,
                                                       **on)

    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    tdo = torch.from_numpy(do)

    def theirs():
        for t in (tq, tk, tv):
            t.grad = None
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(tdo)

    def ours_again():
        mojolike.scaled_dot_product_attention(q, k, v, is_causal=True, **on)
        mojolike.scaled_dot_product_attention_backward(do, q, k, v, is_causal=True, **on)

    ours_t, theirs_t, again = medians_in_turn({"ours": ours, "theirs": theirs, "again": ours_again},
                                              repeat).values()
    return ours_t, theirs_t, (f"  without saved (the backward runs the forward again): "
                              f"{again * 1e3:.1f} ms, ratio {again / theirs_t:.2f}")


def rows_case(backend, rows, repeat, which):
    x, dy = _data(rows, 10), _data(rows, 11)
    n = rows[1]
    w, b = _data(n, 12), _data(n, 13)
    on = {"backend": backend}

    def ours():
        if which == "softmax":
            y = mojolike.softmax(x, **on)
            mojolike.softmax_backward(dy, y, **on)
        else:
            mojolike.layer_norm(x, (n,), w, b, **on)
            mojolike.layer_norm_backward(dy, x, (n,), w, b, **on)

    tx = torch.from_numpy(x).requires_grad_()
    tw, tb = torch.from_numpy(w).requires_grad_(), torch.from_numpy(b).requires_grad_()
    tdy = torch.from_numpy(dy)

    def theirs():
        for t in (tx, tw, tb):
            t.grad = None
        if which == "softmax":
            F.softmax(tx, dim=-1).backward(tdy)
        else:
            F.layer_norm(tx, (n,), tw, tb, 1e-5).backward(tdy)

    return tuple(medians_in_turn({"ours": ours, "theirs": theirs}, repeat).values())


def gelu_case(backend, rows, repeat, approximate):
    x, dy = _data(rows, 14), _data(rows, 15)
    on = {"backend": backend}

    def ours():
        mojolike.gelu(x, approximate, **on)
        mojolike.gelu_backward(dy, x, approximate, **on)

    tx, tdy = torch.from_numpy(x).requires_grad_(), torch.from_numpy(dy)

    def theirs():
        tx.grad = None
        F.gelu(tx, approximate=approximate).backward(tdy)

    return tuple(medians_in_turn({"ours": ours, "theirs": theirs}, repeat).values())


def matmul_case(backend, repeat):
    a, b = _data((48, 1024, 64), 20), _data((48, 64, 1024), 21)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    return tuple(medians_in_turn({"ours": lambda: mojolike.matmul(a, b, backend=backend),
                                  "theirs": lambda: torch.matmul(ta, tb)}, repeat).values())


def variation(backend) -> None:
    q, k, v = (_data((4, 8, 256, 64), 30 + i) for i in range(3))
    tq, tk, tv = (torch.from_numpy(t) for t in (q, k, v))
    runs = {"torch F.scaled_dot_product_attention":
            lambda n: F.scaled_dot_product_attention(tq[:n], tk[:n], tv[:n], is_causal=True).numpy(),
            f"mojolike {backend}":
            lambda n: mojolike.scaled_dot_product_attention(q[:n].copy(), k[:n].copy(), v[:n].copy(),
                                                            is_causal=True, backend=backend)}
    print("-- variation: the bits of sequence 0's causal attention output (8, 256, 64) alone and "
          "inside batches of 2, 3, 4; and two identical calls of batch 4")
    for what, fn in runs.items():
        alone = fn(1)[0].tobytes()
        differ = [n for n in (2, 3, 4) if fn(n)[0].tobytes() != alone]
        again = fn(4).tobytes() == fn(4).tobytes()
        print(f"   {what:38s} batch sizes that change sequence 0: "
              f"{', '.join(map(str, differ)) or 'none'}; run to run: "
              f"{'the same bits' if again else 'DIFFERENT bits'}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cpu-numba")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--only", default="softmax,layer_norm,gelu,gelu-tanh,attention,attention-long,matmul,"
                                         "variation")
    args = p.parse_args()
    import numba
    print(keep_freed_memory())
    print(f"cpu: {cpu_model()} ({os.cpu_count()} cpus); numba threads {numba.get_num_threads()}, "
          f"torch threads {torch.get_num_threads()}, torch {torch.__version__}; backend "
          f"{args.backend}; load average {os.getloadavg()[0]:.2f}")
    cases = {
        "softmax": ("softmax fwd+bwd (8192, 768)", 1.5,
                    lambda: rows_case(args.backend, (8192, 768), args.repeat, "softmax")),
        "layer_norm": ("layer_norm fwd+bwd (8192, 768)", 1.5,
                       lambda: rows_case(args.backend, (8192, 768), args.repeat, "layer_norm")),
        "gelu": ("gelu (erf) fwd+bwd (8192, 768)", 1.5,
                 lambda: gelu_case(args.backend, (8192, 768), args.repeat, "none")),
        "gelu-tanh": ("gelu (tanh) fwd+bwd (8192, 768)", 1.5,
                      lambda: gelu_case(args.backend, (8192, 768), args.repeat, "tanh")),
        "attention": ("attention fwd+bwd causal (4, 8, 1024, 64)", 3.0,
                      lambda: attention_case(args.backend, (4, 8, 1024, 64), args.repeat)),
        "attention-long": ("attention fwd+bwd causal (1, 12, 2048, 64)", 3.0,
                           lambda: attention_case(args.backend, (1, 12, 2048, 64), args.repeat)),
        "matmul": ("matmul (48, 1024, 64) @ (48, 64, 1024)", 2.5,
                   lambda: matmul_case(args.backend, args.repeat)),
    }
    for name in args.only.split(","):
        if name == "variation":
            variation(args.backend)
            continue
        what, target, run = cases[name]
        ours, theirs, *more = run()
        print(f"{what}: mojolike {ours * 1e3:.1f} ms, torch {theirs * 1e3:.1f} ms, ratio "
              f"{ours / theirs:.2f} (target <= {target}; load average {os.getloadavg()[0]:.2f})",
              *more, sep="\n", flush=True)


if __name__ == "__main__":
    main()
