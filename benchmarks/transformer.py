"""The cpu-numba transformer kernels against torch (CPU, same run): attention and rows.

    python benchmarks/transformer.py [--shape 4,8,1024,64] [--rows 8192,768] [--repeat 3]

Rows: attention forward + backward, causal, (B, H, L, E) against torch's
F.scaled_dot_product_attention(is_causal=True) then .backward() (target <= 3x);
softmax and layer_norm forward + backward on (M, N) against torch's F.softmax /
F.layer_norm then .backward() (target <= 1.5x). The mojolike side calls the kernel set
(native/transformer.py) directly, outputs preallocated. Best-of-`repeat` times, after a
warm call; quote ratios from one run, with the CPU model it prints.
Not a test.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np
import torch
import torch.nn.functional as F
from mojolike.native import transformer
from mojolike.oracles import attention as spec
from timing import best_of


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def attention_case(k, shape, repeat):
    b, h, n, e = shape
    rng = np.random.default_rng(0)
    q, kk, v, do = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    o, stats = np.empty_like(q), np.empty((b, h, n, 2), np.float32)
    status = np.zeros((b, h), np.int32)
    dq, dk, dv = np.empty_like(q), np.empty_like(q), np.empty_like(q)
    none_b, none_a, strides = np.zeros(1, np.uint8), np.zeros(1, np.float32), np.zeros(4, np.int64)
    sc = np.float32(spec.default_scale(e))

    def ours():
        k.attention_forward(q, kk, v, none_b, none_a, 0, strides, True, sc, np.float32(0), np.float32(1),
                            0, 0, 0, 64, o, stats, status)
        k.attention_backward(do, q, kk, v, o, stats, none_b, none_a, 0, strides, True, sc,
                             np.float32(0), np.float32(1), 0, 0, 0, 64, 64, dq, dk, dv, status)

    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, kk, v))
    tdo = torch.from_numpy(do)

    def theirs():
        for t in (tq, tk, tv):
            t.grad = None
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(tdo)

    return best_of(ours, repeat), best_of(theirs, repeat)


def rows_case(k, rows, repeat, which):
    m, n = rows
    rng = np.random.default_rng(1)
    x, dy = (rng.standard_normal(rows).astype(np.float32) for _ in range(2))
    w, bias = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, dx, hh = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    status = np.zeros(m, np.int32)
    eps = np.float32(1e-5)

    def ours():
        if which == "softmax":
            k.softmax_rows(x, False, y, status)
            k.softmax_backward_rows(dy, y, False, dx, status)
        else:
            k.layer_norm_rows(x, w, True, bias, True, eps, y)
            k.layer_norm_backward_rows(dy, x, w, True, eps, dx, hh)

    tx = torch.from_numpy(x).requires_grad_()
    tw, tb = torch.from_numpy(w).requires_grad_(), torch.from_numpy(bias).requires_grad_()
    tdy = torch.from_numpy(dy)

    def theirs():
        for t in (tx, tw, tb):
            t.grad = None
        if which == "softmax":
            F.softmax(tx, dim=-1).backward(tdy)
        else:
            F.layer_norm(tx, (n,), tw, tb, 1e-5).backward(tdy)

    return best_of(ours, repeat), best_of(theirs, repeat)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="4,8,1024,64")
    p.add_argument("--rows", default="8192,768")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default="softmax,layer_norm,attention")
    args = p.parse_args()
    k = transformer.load("identical")
    print(f"cpu: {cpu_model()} ({os.cpu_count()} cpus); numba threads {k.get_num_threads()}, "
          f"torch threads {torch.get_num_threads()}, torch {torch.__version__}; "
          f"load average {os.getloadavg()[0]:.2f}")
    rows = tuple(int(v) for v in args.rows.split(","))
    shape = tuple(int(v) for v in args.shape.split(","))
    for name in args.only.split(","):
        if name == "attention":
            ours, theirs = attention_case(k, shape, args.repeat)
            what = f"attention fwd+bwd causal {shape}"
        else:
            ours, theirs = rows_case(k, rows, args.repeat, name)
            what = f"{name} fwd+bwd {rows}"
        print(f"{what}: cpu-numba {ours * 1e3:.1f} ms, torch {theirs * 1e3:.1f} ms, "
              f"ratio {ours / theirs:.2f} (load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
