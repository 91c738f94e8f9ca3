"""Mixed precision against ml_dtypes and torch (CPU, same run, same threads): the casts, then linear.

    python benchmarks/mixed.py [--backend cpu-numba] [--repeat 5] [--n 16777216] [--size 2048]
    python benchmarks/mixed.py --fma [--fma-repeat 9] [--shapes 512x768x3072,2048x768x768]
    python benchmarks/mixed.py --memory [--backend cpu-numba]

- `mojolike.cast` float32 -> bfloat16 / float16 and back on n elements (the public function:
  checks, allocation, the kernel) against ml_dtypes' / numpy's `astype` and torch's `.to`
  (target: cast at least as fast as astype);
- bfloat16 and float16 `mojolike.linear` at size^3 beside the float32 `mojolike.linear`,
  torch's float32 F.linear and torch's bfloat16 / float16 F.linear (issue item 9's target:
  at most 1.1x torch's float32 F.linear). The low-precision linear widens into a float32
  scratch, then (cpu-numba, a target with FMA, every product exact) runs the fused
  multiply-add GEMM, else the float32 kernel;
- `--fma`: bfloat16 `mojolike.linear` (M x K) @ (K x N) weights, before (the operands widened
  with mojolike.cast, then the float32 linear: the route without the FMA kernel) and after
  (the bfloat16 linear: widening, the range check and the FMA kernel), beside mojolike's and
  torch's float32 F.linear, with 1 and 2 threads (numba's and torch's). The variants take
  turns in each round, so a burst of load falls on all of them; medians of the rounds.

- `--memory`: the traced memory (tracemalloc) of one TinyLM and one GPT forward + backward
  on the tape, float32 against bfloat16 and float16 master weights (`with_master_weights`),
  same model and batch: what the tape keeps once the forward has returned (the saved activations)
  and the peak of the step (target: the bfloat16 step's peak at most 0.6x the float32
  step's).

Casts: best-of-`repeat` times after a warm call; linear rows and `--fma`: medians of rounds
in which every variant runs once in turn (the linear rows: `--repeat` rounds, after 3
untimed ones). glibc keeps freed memory for both sides (timing.keep_freed_memory: on a VM,
fresh pages for the widened float32 scratches cost more than the GEMM); quote ratios from
one run, with the CPU model, thread counts and load average it prints (the machine may be
shared). Not a test.
"""
from __future__ import annotations

import argparse
import os
import tracemalloc

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F
from fold import cpu_model
from timing import best_of, keep_freed_memory, medians_in_turn, peak_alloc

import mojolike

BF16 = ml_dtypes.bfloat16
LOW_TYPES = (("bfloat16", BF16, torch.bfloat16), ("float16", np.float16, torch.float16))


def cast_rows(backend: str, n: int, repeat: int) -> list[tuple[str, float, float, str]]:
    x = (np.random.default_rng(0).standard_normal(n) * 100).astype(np.float32)
    tx = torch.from_numpy(x)
    rows = []
    for name, dtype, tdtype in LOW_TYPES:
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
    """The size^3 linear rows: medians of `repeat` rounds, every variant once in turn a round."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((size, size)).astype(np.float32)
    w = rng.standard_normal((size, size)).astype(np.float32)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    variants = {"torch float32": lambda: F.linear(tx, tw),
                "float32": lambda: mojolike.linear(x, w, backend=backend)}
    for name, dtype, tdtype in LOW_TYPES:
        xl, wl, txl, twl = x.astype(dtype), w.astype(dtype), tx.to(tdtype), tw.to(tdtype)
        variants[name] = lambda a=xl, b=wl: mojolike.linear(a, b, backend=backend)
        variants[f"torch {name}"] = lambda a=txl, b=twl: F.linear(a, b)
    with torch.no_grad():
        t = medians_in_turn(variants, repeat)
    torch32 = t["torch float32"]
    rows = [("linear float32", t["float32"], torch32, "")]
    for name, _, _ in LOW_TYPES:
        ours, tlow = t[name], t[f"torch {name}"]
        note = f"torch {name} F.linear {tlow * 1e3:.1f} ms ({ours / tlow:.2f}x)"
        rows.append((f"linear {name}", ours, torch32, note))
    return rows


def _fma_times(backend: str, m: int, k: int, n: int, repeat: int) -> tuple[dict, bool]:
    """Median times of one shape's four variants, and whether its products are exact."""
    from mojolike.native import mixed_gemm

    rng = np.random.default_rng(m * k + n)
    x = rng.standard_normal((m, k)).astype(np.float32).astype(BF16)
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32).astype(BF16)
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    tx, tw = torch.from_numpy(x32), torch.from_numpy(w32)
    exact = mixed_gemm.exact_products(x32.reshape(-1).view(np.uint32),
                                      w32.reshape(-1).view(np.uint32), 8)

    def widen_then_f32():
        return mojolike.linear(mojolike.cast(x, "float32", backend=backend),
                               mojolike.cast(w, "float32", backend=backend), backend=backend)

    with torch.no_grad():
        return medians_in_turn({"torch": lambda: F.linear(tx, tw),
                         "f32": lambda: mojolike.linear(x32, w32, backend=backend),
                         "before": widen_then_f32,
                         "after": lambda: mojolike.linear(x, w, backend=backend)}, repeat), exact


def fma_rows(backend: str, shapes: list[tuple[int, int, int]], repeat: int) -> None:
    """The --fma table: bfloat16 linear before / after the FMA kernel against torch float32."""
    import numba
    from mojolike.native import mixed_gemm
    print(f"FMA kernel: HAS_FMA={mixed_gemm.HAS_FMA}; median of {repeat} rounds")
    print(f"{'threads':>7s} {'M x K @ K x N':>18s} {'torch f32':>10s} {'ours f32':>9s} "
          f"{'bf16 before':>12s} {'bf16 after':>11s} {'before/torch':>13s} {'after/torch':>12s} "
          f"{'exact':>6s} {'load':>5s}")
    before = numba.get_num_threads(), torch.get_num_threads()
    for threads in (1, 2):
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        torch.set_num_threads(threads)
        for m, k, n in shapes:
            t, exact = _fma_times(backend, m, k, n, repeat)
            print(f"{threads:7d} {f'{m}x{k} @ {k}x{n}':>18s} {t['torch'] * 1e3:8.1f}ms "
                  f"{t['f32'] * 1e3:7.1f}ms {t['before'] * 1e3:10.1f}ms {t['after'] * 1e3:9.1f}ms "
                  f"{t['before'] / t['torch']:12.2f}x {t['after'] / t['torch']:11.2f}x "
                  f"{exact!s:>6s} {os.getloadavg()[0]:5.2f}")
    numba.set_num_threads(before[0])
    torch.set_num_threads(before[1])


def step_memory(backend: str, low: str | None, model_name: str) -> tuple[int, int]:
    """(kept, peak): the traced bytes the tape holds once the forward has returned (the
    activations kept for the backward, the weights' casts) and the peak over the forward
    and backward, of one step after a warm one (compiled code and caches are not counted)."""
    from mojolike import data
    from mojolike.mixed_precision import with_master_weights
    from mojolike.models import GPT, TinyLM

    if model_name == "tiny":
        model = TinyLM(d_model=256, dropout=0.0, seed=0, chunk_size=1024)
        tokens, targets = data.batch(0, batch_size=16, seq_len=128)
    else:
        model = GPT(vocab_size=256, block_size=128, n_layer=2, n_head=4, n_embd=128, seed=0)
        tokens, targets = data.batch(0, batch_size=8, seq_len=128)
    if low:
        with_master_weights(model, low)
    kept = []

    def step():
        tape = mojolike.Tape(backend=backend)
        loss = model.forward(tape, tokens, targets)
        if tracemalloc.is_tracing():
            kept.append(tracemalloc.get_traced_memory()[0])
        tape.backward(loss)

    peak = peak_alloc(step)
    return kept[-1], peak


MEMORY_MODELS = {"tiny": "TinyLM d_model 256, batch 16 x 128",
                 "gpt": "GPT n_layer 2, n_head 4, n_embd 128, vocab 256, batch 8 x 128"}


def memory_rows(backend: str) -> None:
    for name, what in MEMORY_MODELS.items():
        kept32, peak32 = step_memory(backend, None, name)
        print(f"{what}, one forward + backward on the tape ({backend}):")
        print(f"  {'':24} {'kept after forward':>18}   {'peak':>9}")
        print(f"  {'float32':24} {kept32 / 2**20:12.1f} MiB      {peak32 / 2**20:9.1f} MiB")
        for low in ("bfloat16", "float16"):
            kept, peak = step_memory(backend, low, name)
            print(f"  {low + ' master weights':24} {kept / 2**20:12.1f} MiB {kept / kept32:.2f}x"
                  f"{peak / 2**20:9.1f} MiB {peak / peak32:.2f}x (target <= 0.6x)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="cpu-numba")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--n", type=int, default=1 << 24)
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--skip-linear", action="store_true")
    p.add_argument("--fma", action="store_true", help="only the bfloat16 FMA table")
    p.add_argument("--fma-repeat", type=int, default=9)
    p.add_argument("--shapes", default="512x768x3072,2048x768x768", help="M x K x N, comma-separated")
    p.add_argument("--memory", action="store_true", help="only the training step's peak memory")
    args = p.parse_args()
    if not args.memory:  # the memory rows measure allocations: glibc as users have it
        print(keep_freed_memory())
    if args.memory:
        print(f"CPU: {cpu_model()}; mojolike {mojolike.__version__}")
        memory_rows(args.backend)
        return
    if args.fma:
        print(f"CPU: {cpu_model()}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        print(f"mojolike {mojolike.__version__} backend {args.backend}; numpy {np.__version__}, "
              f"torch {torch.__version__}")
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
        fma_rows(args.backend, shapes, args.fma_repeat)
        print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        return
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
