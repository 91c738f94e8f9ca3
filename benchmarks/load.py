"""The same small training on cpu-numba and cpu-cffi, quiet and beside busy processes.

    python benchmarks/load.py [--steps 50] [--reps 3] [--busy 2] [--backends cpu-numba,cpu-cffi]
                              [--env NAME=VALUE ...]

Each run is a fresh process (as `mojolike train` is) that builds the default
`mojolike.train.Trainer` (TrainConfig: TinyLM d_model 32, vocab 256, 2048 tokens per
step in 2 microbatches), takes one warm step (numba's cache, the C module, the thread
pools) and times `--steps` - 1 more. A loaded run starts `--busy` processes that spin
in `while True: pass` (this script starts them and kills them by their pid after the
run). Rounds alternate quiet and loaded runs of every backend, so a burst of someone
else's load hits every row.

Prints, per backend, each condition's times, median and best: a step after the
warm one (ms) and the whole run (s, the process from its start, as a user of
`mojolike train` waits for it: imports and numba's cache are in it); for each, the
slowdown (loaded median / quiet median) and the ratio of cpu-numba's slowdown to
cpu-cffi's (target: at most 1.5); then the CPU model, the load average before and
after, and the cores other processes used during the quiet runs (from /proc, as
benchmarks/fold.py's OtherLoad measures it): with 2 cores, a quiet figure is worth
quoting only when that stayed near 0. `--env` sets a variable in the runs only
(e.g. `--env NUMBA_THREADING_LAYER=workqueue` to compare thread layers).

Not a test: a shared machine's figures move from run to run; quote them with the
lines it prints.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from fold import OtherLoad, cpu_model


def child(backend: str, steps: int) -> None:
    """One run: print {"ms": per-step milliseconds, "other": other processes' cores} as JSON."""
    from mojolike.training.trainer import TrainConfig, Trainer
    t = Trainer(TrainConfig(steps=steps), backend=backend)
    t.train_step()  # the warm step: caches, the C module, the thread pools
    with OtherLoad() as other:
        start = time.perf_counter()
        t.run()
        seconds = time.perf_counter() - start
    print(json.dumps({"ms": seconds * 1e3 / (steps - 1), "other": other.cores,
                      "digest": t.digest()}))


def run_once(backend: str, steps: int, busy: int, env: dict) -> dict:
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        if spinners:
            time.sleep(0.2)  # let them take their cores
        start = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--child", backend, "--steps", str(steps)],
                             env=env, check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - start
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    return dict(json.loads(out.strip().splitlines()[-1]), wall=wall)


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--busy", type=int, default=2, help="competing busy processes when loaded")
    ap.add_argument("--backends", default="cpu-numba,cpu-cffi")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.steps)
    env = dict(os.environ)
    env.update(kv.split("=", 1) for kv in a.env)
    backends = a.backends.split(",")
    conditions = {"quiet": 0, f"{a.busy} busy": a.busy}
    ms = {(b, c): [] for b in backends for c in conditions}
    wall = {(b, c): [] for b in backends for c in conditions}
    other_quiet, digests = [], set()
    before = loadavg()
    for rep in range(a.reps):
        for cond, busy in conditions.items():
            for b in backends:
                r = run_once(b, a.steps, busy, env)
                ms[b, cond].append(r["ms"])
                wall[b, cond].append(r["wall"])
                digests.add(r["digest"])
                if not busy:
                    other_quiet.append(r["other"])
                print(f"  round {rep + 1}: {b:9s} {cond:7s} {r['ms']:7.1f} ms/step, the run "
                      f"{r['wall']:5.1f} s (other processes {r['other']:.2f} cores)", flush=True)
    same = "same digest in every run" if len(digests) == 1 else "DIGESTS DIFFER"
    print(f"\nTrainer(TrainConfig(steps={a.steps})), median (best) of {a.reps}; {same}")
    for what, table, unit in (("a step after the warm one", ms, "ms"),
                              ("the whole run (process start, imports, caches, warm step, "
                               "steps)", wall, "s")):
        print(f" {what}, {unit}:")
        slow = {}
        for b in backends:
            med = {c: statistics.median(table[b, c]) for c in conditions}
            cells = "  ".join(f"{c} {med[c]:7.1f} ({min(table[b, c]):6.1f})" for c in conditions)
            slow[b] = med[f"{a.busy} busy"] / med["quiet"]
            print(f"  {b:9s} {cells}  slowdown {slow[b]:.2f}x")
        if {"cpu-numba", "cpu-cffi"} <= slow.keys():
            print(f"  cpu-numba's slowdown / cpu-cffi's: "
                  f"{slow['cpu-numba'] / slow['cpu-cffi']:.2f} (target <= 1.5)")
    print(f"CPU: {cpu_model()}")
    print(f"load average before {before}, after {loadavg()}; other processes during the quiet "
          f"runs: {statistics.median(other_quiet):.2f} cores median, {max(other_quiet):.2f} max")
    if a.env:
        print(f"runs' environment: {' '.join(a.env)}")


if __name__ == "__main__":
    main()
