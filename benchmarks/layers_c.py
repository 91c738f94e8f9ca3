"""linear forward (the fold-tree GEMM): cpu-cffi and cpu-numba against torch, in one run.

    python benchmarks/layers_c.py [--shapes 1024x1024x1024,2048x2048x2048,4096x3072x768]
                                  [--threads 1,2] [--repeat 5] [--paths]

For each (M, N, K) and thread count: `torch.nn.functional.linear(x, w)` (torch 2.13 CPU,
FMA, K blocked freely) and `mojolike.linear(x, w, backend=b)` in identical mode. The
contenders take turns, `repeat` rounds, and each keeps its best time, so a busy machine
slows them alike; GFLOP/s is 2MNK / time, the ratios are to torch and to cpu-numba (the
issue's targets: cpu-numba at most 2.5x torch; cpu-cffi at least as fast as cpu-numba).
With --paths, also the C kernels' other instruction-set paths this CPU runs (their bits are
checked equal to the default path's). Not a test: quote ratios from one run, with the CPU.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

import mojolike
from mojolike import registry

SHAPES = "1024x1024x1024,2048x2048x2048,4096x3072x768"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def set_threads(n: int) -> None:
    import numba
    import torch
    torch.set_num_threads(n)
    numba.set_num_threads(n)
    registry.kernels("benchmark", "layers", "cpu-cffi", "identical").set_num_threads(n)


def turns(contenders: dict, repeat: int) -> dict[str, float]:
    """The best wall time of each contender over `repeat` rounds in turn, after a warm call."""
    best = {}
    for fn in contenders.values():
        fn()
    for _ in range(repeat):
        for name, fn in contenders.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t)
    return best


def on_path(cffi, path: int, x, w, out):
    def run():
        before = cffi.vector_path()
        cffi.vector_path(path)
        try:
            cffi.gemm_nt(x, w, x[0], False, out)
        finally:
            cffi.vector_path(-2)
            assert cffi.vector_path() == before
    return run


def gemm(shapes: list[tuple[int, int, int]], threads: list[int], repeat: int, paths: bool) -> None:
    import torch
    import torch.nn.functional as F
    cffi = registry.kernels("benchmark", "layers", "cpu-cffi", "identical")
    default = cffi.vector_path()
    others = {}  # path number -> short name, for the paths this CPU runs besides the default
    for p in range(3):
        name = cffi.vector_path(p)
        if name != default and name not in others.values():
            others[p] = name.split(":")[0]
    cffi.vector_path(-2)
    print(f"linear forward, float32, best of {repeat} rounds in turn; {cpu_name()}, "
          f"{os.cpu_count()} cpus; torch {torch.__version__}; cpu-cffi path {default}")
    print(f"{'M x N x K':>16} {'thr':>3} {'':<22} {'ms':>9} {'GFLOP/s':>8} {'/torch':>7} {'/numba':>7}")
    for m, n, k in shapes:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        flop = 2.0 * m * n * k
        outs = {p: np.empty((m, n), np.float32) for p in others} if paths else {}
        for t in threads:
            set_threads(t)
            contenders = {"torch F.linear": lambda: F.linear(tx, tw),
                          "cpu-numba": lambda: mojolike.linear(x, w, backend="cpu-numba"),
                          "cpu-cffi": lambda: mojolike.linear(x, w, backend="cpu-cffi")}
            for p, out in outs.items():
                contenders[f"cpu-cffi {others[p]}"] = on_path(cffi, p, x, w, out)
            best = turns(contenders, repeat)
            want = mojolike.linear(x, w, backend="cpu-cffi").tobytes()
            for p, out in outs.items():
                assert out.tobytes() == want, f"the {others[p]} path changed the bits"
            for what, tm in best.items():
                print(f"{m:>5}x{n:>5}x{k:>4} {t:>3} {what:<22} {tm * 1e3:9.1f} {flop / tm / 1e9:8.1f} "
                      f"{tm / best['torch F.linear']:7.2f} {tm / best['cpu-numba']:7.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--paths", action="store_true", help="also time the C kernels' other paths")
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    gemm(shapes, [int(t) for t in args.threads.split(",")], args.repeat, args.paths)


if __name__ == "__main__":
    main()
