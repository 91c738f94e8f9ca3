"""sumsq (and fold, dot) over 2**24 float32: mojolike backends vs numpy and torch, in one run.

    python benchmarks/fold.py [--n 16777216] [--repeat 10] [--rounds 3]
                              [--backends cpu-numba,cpu-cffi] [--targets host,haswell]

Prints the best time of each (`rounds` rounds over all rows, `repeat` calls per
row in a round) and the ratio to numpy: np.dot(x, x) for sumsq, np.sum(x) for
fold, np.dot(x, y) for dot (target: cpu-numba and cpu-cffi <= 1.2x).
`--targets` reruns the whole benchmark in a fresh process per numba target:
`host` is the machine's own CPU, any other name (e.g. haswell) compiles numba's
kernels for that CPU with its own features only (NUMBA_CPU_NAME, an empty
NUMBA_CPU_FEATURES and a numba cache of its own), when this host can run its code.
cpu-cffi is built by the C compiler for baseline x86-64 either way. Not a test:
timings depend on the machine; ratios in one run on one machine are what the
closing notes quote.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from timing import best_of

# the features each target's code needs from the host, as /proc/cpuinfo names them
TARGET_FLAGS = {"generic": set(), "x86-64": set(),
                "haswell": {"avx", "avx2", "fma", "bmi1", "bmi2", "movbe", "f16c"},
                "znver3": {"avx", "avx2", "fma", "bmi1", "bmi2", "movbe", "f16c", "vaes", "sha_ni"},
                "skylake-avx512": {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                   "avx512dq", "avx512cd"}}


def cpu_model() -> str:
    """The CPU's model name, family/model numbers and widest vector extension (from /proc/cpuinfo)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        import platform
        return platform.processor() or platform.machine()
    flags = set(info.get("flags", "").split())
    widest = next((w for w in ("avx512f", "avx2", "avx", "sse2") if w in flags), "?")
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model "
            f"{info.get('model', '?')}, {widest}, {'fma' if 'fma' in flags else 'no fma'}), "
            f"{os.cpu_count()} cpus")


def host_runs(target: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        return False
    return TARGET_FLAGS.get(target, {"?"}) <= flags


def numba_target() -> str:
    name = os.environ.get("NUMBA_CPU_NAME")
    return "host" if not name else f"{name} (NUMBA_CPU_NAME={name}, NUMBA_CPU_FEATURES=" \
                                   f"{os.environ.get('NUMBA_CPU_FEATURES')!r})"


def run_targets(targets: str, script: str, argv: list[str]) -> bool:
    """Rerun `script` once per target other than host (in a subprocess with that target's
    numba settings); returns whether the host target should run in this process."""
    names = targets.split(",")
    flag = ("--target", "--targets")  # argparse takes the prefix too
    rest = [a for i, a in enumerate(argv) if a not in flag and (i == 0 or argv[i - 1] not in flag)
            and not a.startswith(("--target=", "--targets="))]
    for name in names:
        if name == "host":
            continue
        if not host_runs(name):
            print(f"== numba target {name}: this host cannot run its code; skipped", flush=True)
            continue
        print(f"== numba target {name}", flush=True)
        cache = os.path.join(tempfile.gettempdir(), f"mojolike-numba-{name}-{os.getuid()}")
        env = dict(os.environ, NUMBA_CPU_NAME=name, NUMBA_CPU_FEATURES="", NUMBA_CACHE_DIR=cache)
        subprocess.run([sys.executable, script, *rest], env=env, check=True)
    if "host" in names:
        print("== numba target host", flush=True)
    return "host" in names


class OtherLoad:
    """The CPU time other processes used while this one ran (Linux /proc), in cores: on a shared
    machine a two-thread kernel waits for a core whenever another process holds one, so a
    figure is worth quoting only from a run in which this stayed near 0."""

    def __enter__(self):
        self._start = self._sample()
        return self

    def __exit__(self, *exc):
        (busy0, mine0, t0), (busy1, mine1, t1) = self._start, self._sample()
        hz = os.sysconf("SC_CLK_TCK")
        self.cores = max(0.0, ((busy1 - busy0) - (mine1 - mine0)) / hz / max(t1 - t0, 1e-9))

    @staticmethod
    def _sample():
        import time
        try:
            with open("/proc/stat") as f:
                v = [int(w) for w in f.readline().split()[1:8]]
            with open("/proc/self/stat") as f:
                mine = sum(int(w) for w in f.read().rsplit(")", 1)[1].split()[11:13])
        except OSError:
            return 0, 0, time.monotonic()
        return sum(v) - v[3] - v[4], mine, time.monotonic()  # busy = all but idle and iowait


def best_of_each(fns: dict, repeat: int, rounds: int = 3) -> dict:
    """{name: best wall time}: `rounds` rounds, each timing every fn in turn (best_of: a warm
    call, then `repeat` calls). Spreading each fn's calls over the run lets a burst of load on
    a shared machine hit every row; consecutive calls of one fn keep another thread runtime's
    idle workers (numba's, OpenMP's, OpenBLAS's) out of its timings."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], best_of(fn, repeat))
    return best


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
        return "; ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
                         f"threads={i.get('num_threads')}" for i in threadpool_info())
    except ImportError:
        return "threadpoolctl not installed"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2**24)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default=None,
                   help="comma-separated; default: every available backend except oracle and cuda-sim")
    p.add_argument("--targets", default="host",
                   help="comma-separated numba targets: host, haswell, znver3, generic, ...")
    args = p.parse_args()
    if not os.environ.get("NUMBA_CPU_NAME") and not run_targets(args.targets, __file__, sys.argv[1:]):
        return

    import mojolike
    from mojolike.contracts.casegen import bulk_normal
    from timing import backend_names
    names = backend_names(args.backends)

    x = bulk_normal(args.n, "bench/x")
    y = bulk_normal(args.n, "bench/y")
    print(f"n={args.n} float32, best of {args.rounds} rounds x {args.repeat}; {cpu_model()}; numba target "
          f"{numba_target()}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    print(f"numpy {np.__version__}: {blas_info()}")

    fns = {("sumsq", "np.dot(x, x)"): lambda: np.dot(x, x)}
    try:
        import torch
        tx = torch.from_numpy(x)
        fns[("sumsq", f"torch {torch.__version__} vector_norm(x)**2 ({torch.get_num_threads()} "
                      f"threads)")] = lambda: torch.linalg.vector_norm(tx) ** 2
    except ImportError:
        print("torch not installed: no torch row")
    for b in names:
        fns[("sumsq", f"mojolike {b}")] = lambda b=b: mojolike.sumsq(x, backend=b)
    fns[("fold", "np.sum(x)")] = lambda: np.sum(x)
    for b in names:
        fns[("fold", f"mojolike {b}")] = lambda b=b: mojolike.fold(x, backend=b)
    fns[("dot", "np.dot(x, y)")] = lambda: np.dot(x, y)
    for b in names:
        fns[("dot", f"mojolike {b}")] = lambda b=b: mojolike.dot(x, y, backend=b)
    with OtherLoad() as other:
        t = best_of_each(fns, args.repeat, args.rounds)
    print(f"other processes used {other.cores:.2f} cores during the timings")

    base = {"sumsq": t[("sumsq", "np.dot(x, x)")], "fold": t[("fold", "np.sum(x)")],
            "dot": t[("dot", "np.dot(x, y)")]}
    width = max(len(name) for _, name in t)
    for (op, name), s in t.items():
        print(f"{op:6s} {name:{width}s} {s * 1e3:9.3f} ms  {s / base[op]:6.2f}x numpy")
    if "cuda" in names:
        print("cuda rows include the host-to-device copy of the inputs on every call")


if __name__ == "__main__":
    main()
