"""Fuzz every public entry point for many cases (the CI test runs a bounded budget of the same).

    python benchmarks/fuzz.py [--cases 250000] [--seed 0] [--only NAME,...]

Splits the cases over the targets of tests/fuzzing.py by their weights (the ones
that start processes or train take fewer), runs each under hypothesis (no
database, so every run starts fresh) and prints, per target, the cases run and
the first broken promise found (shrunk by hypothesis where the target allows),
then the totals. Exits 1 when any target broke a promise.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from fuzzing import TARGETS, Broken  # noqa: E402


def run_target(target, cases: int, rng_seed: int) -> tuple[int, str | None]:
    count = [0]

    phases = [p for p in Phase if target.shrink or p not in (Phase.shrink, Phase.explain)]

    @seed(rng_seed)
    @settings(max_examples=cases, deadline=None, database=None, derandomize=False, phases=phases,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data):
        count[0] += 1
        target.run(data.draw)

    try:
        fuzz()
    except Broken as e:
        return count[0], str(e)
    return count[0], None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=250_000)
    p.add_argument("--only", default=None, help="comma-separated target names (default: all)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    per = args.cases / sum(t.weight for t in TARGETS)  # cases of a target of weight 1
    total, broken, t0 = 0, 0, time.time()
    chosen = [t for t in TARGETS if args.only is None or t.name in args.only.split(",")]
    for target in chosen:
        t = time.time()
        n, failure = run_target(target, max(1, round(per * target.weight)), args.seed)
        total += n
        broken += failure is not None
        print(f"{target.name:20s} {n:7d} cases {time.time() - t:7.1f} s  "
              f"{'BROKEN: ' + failure if failure else 'every call returned or refused by name'}",
              flush=True)
    print(f"total: {total} cases in {time.time() - t0:.0f} s; "
          f"{broken} of {len(chosen)} targets broke a promise")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
