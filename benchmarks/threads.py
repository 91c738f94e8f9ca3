"""Small optimizer steps in a process that has used both cpu-numba and cpu-cffi.

    python benchmarks/threads.py [--n 1000] [--repeat 500] [--only cpu-numba|cpu-cffi]

Both CPU backends run OpenMP-style thread pools (numba's 'omp' threading layer and
the C module's OpenMP). A parallel region wakes the pool's workers; under libgomp's
default policy idle workers spin for a while before they sleep, so on a machine with
few cores a small step could wait for a worker that another pool's spinning thread,
or another process, kept off a core. Both backends now open no parallel region below
32768 elements of work (MJ_PARALLEL_MIN in native/c/fold.c, native/threads.py's
PARALLEL_MIN), and both pools start with a passive wait policy (native/c/build.py,
native/threads.py); this script shows what a small Adam
step costs on each backend in a mixed process, alternating between the two, and
torch's fused Adam on the same size for scale. `--only` times one backend in a
process that never loads the other. Best and median of `repeat` warm steps (the
median shows the waits); the load average is printed because the machine may be
shared.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def stats(fn, repeat: int) -> tuple[float, float]:
    """(best, median) wall time of `repeat` calls of fn after one warm call, in ms."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[0] * 1e3, times[len(times) // 2] * 1e3


def runtimes() -> list[str]:
    """The OpenMP runtimes mapped into this process."""
    try:
        maps = open("/proc/self/maps").read().splitlines()
    except OSError:
        return ["(no /proc/self/maps)"]
    names = {ln.split()[-1] for ln in maps if "/" in ln}
    return sorted(p for p in names if p.rsplit("/", 1)[-1].startswith(("libgomp", "libomp", "libiomp")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=500)
    ap.add_argument("--only", choices=("cpu-numba", "cpu-cffi"))
    args = ap.parse_args()
    import torch  # first, as in a training script: torch maps its own libgomp

    import mojolike

    n, rep = args.n, args.repeat
    backends = [args.only] if args.only else ["cpu-numba", "cpu-cffi"]
    rng = np.random.default_rng(0)
    steps = {}
    for backend in backends:
        p = rng.standard_normal(n).astype(np.float32)
        g = rng.standard_normal(n).astype(np.float32) * np.float32(1e-3)
        opt = mojolike.Adam(p, lr=1e-3, backend=backend)
        opt.step(g)
        steps[backend] = (lambda o=opt, g=g: o.step(g))

    tp = torch.zeros(n)
    tp.grad = torch.full((n,), 1e-3)
    fused = torch.optim.Adam([tp], lr=1e-3, fused=True)

    import numba
    print(f"CPU: {cpu_model()}, {len(os.sched_getaffinity(0))} cores available; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"numba {numba.__version__} threads={numba.get_num_threads()} layer="
          f"{numba.threading_layer() if 'cpu-numba' in steps else '(unused)'}; torch "
          f"{torch.__version__} threads={torch.get_num_threads()}; OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    print(f"OpenMP runtimes mapped: {', '.join(runtimes())}")
    used = " and ".join(backends)
    rows = [(f"torch Adam(fused=True), n={n}", stats(fused.step, rep))]
    for backend, step in steps.items():
        rows.append((f"mojolike Adam {backend}, n={n} (process used {used})", stats(step, rep)))
    if len(steps) == 2:
        both = list(steps.values())
        rows.append((f"mojolike Adam cpu-numba then cpu-cffi, n={n}, per step",
                     tuple(t / 2 for t in stats(lambda: (both[0](), both[1]()), rep))))
    width = max(len(r[0]) for r in rows)
    for label, (best, median) in rows:
        print(f"{label:{width}s}  best {best:8.4f} ms  median {median:8.4f} ms")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
