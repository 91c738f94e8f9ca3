"""Which steps of the schedule suite's cases the fast route leaves to the host, on each backend.

contracts/schedule.md clause 6: a kernel decides a step when binary32(v - E) ==
binary32(v + E) and otherwise marks it UNDECIDED for the oracle. v and E are a
fixed binary64 computation, so the undecided steps are a property of the cases,
the same on every backend. This script runs every case of `contracts/schedule.py`
through each backend's `schedule_into`, collects the steps it marks, and checks
that every backend gives the same set as `oracles/schedule.fast_value` (the same
route in Python binary64). It prints the set in the form of the suite's
`UNDECIDED_STEPS` (certify's clause (a) accepts a host-finished step only there)
and exits 1 when the backends disagree with each other or with the committed list.

Run: python benchmarks/schedule_undecided.py [--backends cpu-numba,cpu-cffi,cuda-sim]
(cpu backends: seconds; cuda-sim: a few minutes, every step in the simulator).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mojolike.contracts import schedule as suite
from mojolike.oracles import schedule as spec
from mojolike.oracles.f32 import round_float

from mojolike.core import registry
from mojolike.ops.schedule import UNDECIDED


def kernel_steps(backend: str) -> dict[str, tuple[int, ...]]:
    """case id -> the steps `backend`'s kernel marks UNDECIDED over the case's runs."""
    k = registry.kernels("benchmarks/schedule_undecided", "schedule", backend,
                         registry.CONTRACT_MODE)
    found = {}
    for c in suite.cases():
        steps = []
        for t0, n in c.runs:
            out = np.empty(n, np.float32)
            count = k.schedule_into(c.kind, np.float32(c.peak), np.float32(c.min_lr), c.warmup,
                                    c.total, t0, out)
            idx = np.flatnonzero(out.view(np.uint32) == UNDECIDED)
            if idx.size != count:
                sys.exit(f"{backend} {c.id}: reported {count} undecided steps, marked {idx.size}")
            steps += (t0 + idx).tolist()
        if steps:
            found[c.id] = tuple(steps)
    return found


def route_steps() -> dict[str, tuple[int, ...]]:
    """The same, from `oracles/schedule.fast_value` and the rounding test in Python."""
    found = {}
    for c in suite.cases():
        steps = []
        for t0, n in c.runs:
            for t in range(t0, t0 + n):
                v, e = spec.fast_value(c.kind, c.peak, c.min_lr, c.warmup, c.total, t)
                if round_float(v - e) != round_float(v + e):
                    steps.append(t)
        if steps:
            found[c.id] = tuple(steps)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="cpu-numba,cpu-cffi")
    args = ap.parse_args()
    t = time.perf_counter()
    want = route_steps()
    print(f"# fast_value in Python: {sum(map(len, want.values()))} undecided steps in "
          f"{len(want)} cases ({time.perf_counter() - t:.1f} s)")
    ok = True
    for b in args.backends.split(","):
        t = time.perf_counter()
        got = kernel_steps(b)
        same = got == want
        ok &= same
        print(f"# {b}: {sum(map(len, got.values()))} undecided steps, "
              f"{'the same set' if same else 'a DIFFERENT set'} ({time.perf_counter() - t:.1f} s)")
    committed = dict(suite.UNDECIDED_STEPS)
    print(f"# the suite's UNDECIDED_STEPS: {'the same set' if committed == want else 'DIFFERENT'}")
    ok &= committed == want
    print("UNDECIDED_STEPS = (")
    for cid, steps in want.items():
        print(f"    ({cid!r}, {steps!r}),")
    print(")")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
