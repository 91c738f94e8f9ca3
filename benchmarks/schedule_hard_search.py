"""Search for schedule steps where the fast route's binary64 value, rounded without the test, is wrong.

contracts/schedule.md clause 6 computes each step's value v in binary64 with an
error bound E and keeps binary32(v) only when binary32(v - E) == binary32(v + E).
This script runs the kernels' own pieces (`native/schedule.py`: linear_ve, sin_ve,
cos_ve, decide) over the decay steps W < t < T of many random configurations,
collects every step the test leaves undecided, and for each compares binary32(v)
(the route without the test) with the exact value (`oracles/schedule.value`).
A step where they differ is "hard": it shows that the test is needed, and it goes
in the suite's cases (contracts/schedule.md clause 8) and the kernel tests.

Warmup steps are not searched: for W < 2^27, P t is exact and the quotient
(P t) / W correctly rounded, and the exact P t / W lies at least ulp/(2W) from
every binary32 midpoint unless it is one, where the binary64 quotient is exact; so
the rounded binary64 warmup value is never wrong.

Configurations (numpy's generator, seeded): kind cosine (2/3) or linear (1/3), or
one kind (--kinds); P log-uniform in [1e-6, 1] as binary32; M = 0, or uniform in
[0, P), or P c 2^-k with c uniform in [0.5, 1) and k uniform in [1, 40] (a third
each, rounded to binary32); W uniform in [0, 1000]; T = W + uniform in [2, 10^5].
A linear value that is not a tie lies at least min(ulp(P), ulp(M)) / (T - W) from
every binary32 midpoint, so only M far below P can make a linear step hard (and
with M = P 2^-k exactly, an earlier version of this sampling, none was found in
10^10 linear steps).

At most CAP undecided steps of one configuration are examined (a configuration
with many exact midpoints, e.g. M = 0 and T - W with many factors 2, has more);
the summary counts the rest as not kept.

Run: python benchmarks/schedule_hard_search.py [--steps 1e10] [--seed 0]
[--kinds cosine,linear] [--json PATH] (about 10^10 steps a minute per core, plus
about 70 us of oracle per undecided step). Prints one line per hard step: kind, P
and M as binary32 bit patterns, W, T, t, binary32(v) (wrong) and the exact value's
bits.
Ties (a rational exact value halfway between two binary32 values, e.g. 3P/4 at
p = 1/3) are counted apart and kept in the JSON only: they are frequent and
trivially hard (a binary64 value rounds a midpoint the oracle's way only by luck).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from fractions import Fraction

import numba
import numpy as np
from numba import float32, float64, int64, njit, prange

from mojolike.native.schedule import COSINE, LINEAR, cos_ve, decide, linear_ve, sin_ve
from mojolike.oracles import schedule as oracle
from mojolike.oracles.f32 import f32_to_bits, round_fraction

CHUNK = 4096  # steps per first pass (a loop without branches); a chunk with a hit is redone
CAP = 64  # hits kept per configuration


@njit(int64(int64[::1], float32[::1], float32[::1], int64[::1], int64[::1], int64[:, ::1],
            float64[:, ::1], int64[::1]), parallel=True, cache=True, error_model="numpy")
def search(kind, P, M, W, T, hit_t, hit_v, nhits):
    """Undecided decay steps of each configuration: hit_t[i, :nhits[i]], their v in hit_v."""
    total = 0
    for i in prange(kind.size):
        k, p, m, w, tt = kind[i], P[i], M[i], W[i], T[i]
        h = (tt + w + 1) // 2 if k == COSINE else w + 1  # cosine: C(w) before h, S(u) from h
        found = 0
        for lo in range(w + 1, tt, CHUNK):
            hi = min(lo + CHUNK, tt)
            mid = min(hi, max(lo, h))
            unsure = 0
            for t in range(lo, mid):
                v, e = cos_ve(p, m, w, tt, t)
                a, ok = decide(v, e)
                unsure += not ok
            if k == LINEAR:
                for t in range(mid, hi):
                    v, e = linear_ve(p, m, w, tt, t)
                    a, ok = decide(v, e)
                    unsure += not ok
            else:
                for t in range(mid, hi):
                    v, e = sin_ve(p, m, w, tt, t)
                    a, ok = decide(v, e)
                    unsure += not ok
            if unsure:
                for t in range(lo, hi):
                    if t < mid:
                        v, e = cos_ve(p, m, w, tt, t)
                    elif k == LINEAR:
                        v, e = linear_ve(p, m, w, tt, t)
                    else:
                        v, e = sin_ve(p, m, w, tt, t)
                    a, ok = decide(v, e)
                    if not ok:
                        if found < CAP:
                            hit_t[i, found] = t
                            hit_v[i, found] = v
                        found += 1
        nhits[i] = found
        total += tt - w - 1
    return total


def is_tie(cfg, t: int) -> bool:
    """True when the exact value is a rational halfway between two binary32 values."""
    lo, hi = oracle.interval(*cfg, t)
    if lo != hi:
        return False  # irrational: never a tie
    nudge = abs(lo) / 2**80 + Fraction(1, 2**300)
    return round_fraction(lo - nudge) != round_fraction(lo + nudge)


def configurations(rng, n: int, kinds: tuple[int, ...]):
    if kinds == (COSINE, LINEAR):
        kind = np.where(rng.random(n) < 2 / 3, COSINE, LINEAR).astype(np.int64)
    else:
        kind = np.full(n, kinds[0], np.int64)
    P = np.exp(rng.uniform(np.log(1e-6), 0.0, n)).astype(np.float32)
    which = rng.integers(0, 3, n)
    small = P * rng.uniform(0.5, 1.0, n) * 2.0 ** -rng.integers(1, 41, n)
    M = np.where(which == 0, 0.0, np.where(which == 1, rng.random(n) * P, small))
    M = np.minimum(M.astype(np.float32), P)
    M = np.where(M == P, np.float32(0), M).astype(np.float32)
    W = rng.integers(0, 1001, n).astype(np.int64)
    T = W + rng.integers(2, 100_001, n).astype(np.int64)
    return kind, P, M, W, T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=float, default=1e10, help="decay steps to search (about)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=20_000, help="configurations per kernel call")
    ap.add_argument("--kinds", default="cosine,linear", choices=("cosine,linear", "cosine", "linear"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    kinds = tuple(oracle.KINDS.index(k) for k in args.kinds.split(","))
    steps = undecided = overflow = 0
    hard, seconds = [], 0.0
    while steps < args.steps:
        kind, P, M, W, T = configurations(rng, args.batch, kinds)
        hit_t = np.zeros((args.batch, CAP), np.int64)
        hit_v = np.zeros((args.batch, CAP), np.float64)
        nhits = np.zeros(args.batch, np.int64)
        t0 = time.perf_counter()
        steps += int(search(kind, P, M, W, T, hit_t, hit_v, nhits))
        seconds += time.perf_counter() - t0
        undecided += int(nhits.sum())
        overflow += int(np.maximum(nhits - CAP, 0).sum())
        for i in np.nonzero(nhits)[0]:
            cfg = (int(kind[i]), float(P[i]), float(M[i]), int(W[i]), int(T[i]))
            if nhits[i] > CAP:
                print(f"# {int(nhits[i])} undecided steps in {cfg}, {CAP} kept", file=sys.stderr)
            for j in range(min(int(nhits[i]), CAP)):
                t, v = int(hit_t[i, j]), float(hit_v[i, j])
                fv, fe = oracle.fast_value(*cfg, t)
                if fv != v:
                    sys.exit(f"kernel v {v!r} differs from oracle.fast_value {fv!r} at {cfg} t={t}")
                wrong = f32_to_bits(float(np.float32(v)))
                right = f32_to_bits(oracle.value(*cfg, t))
                if wrong != right:
                    rec = {"tie": is_tie(cfg, t),
                           "kind": oracle.KINDS[cfg[0]], "P": f"0x{f32_to_bits(cfg[1]):08X}",
                           "M": f"0x{f32_to_bits(cfg[2]):08X}", "W": cfg[3], "T": cfg[4], "t": t,
                           "wrong": f"0x{wrong:08X}", "right": f"0x{right:08X}",
                           "v": v.hex(), "E": fe.hex()}
                    hard.append(rec)
                    if not rec["tie"]:
                        print(" ".join(f"{k}={rec[k]}" for k in
                                       ("kind", "P", "M", "W", "T", "t", "wrong", "right")),
                              flush=True)
        ties = sum(r["tie"] for r in hard)
        print(f"# {steps:.3e} steps, {undecided} undecided, {len(hard) - ties} hard, {ties} ties, "
              f"{seconds / max(steps, 1) * 1e9 * numba.get_num_threads():.2f} ns/step/thread",
              file=sys.stderr, flush=True)
    summary = {"seed": args.seed, "kinds": args.kinds, "steps": steps, "undecided": undecided,
               "undecided_not_kept": overflow, "hard": hard, "kernel_seconds": seconds,
               "threads": numba.get_num_threads(), "machine": platform.machine(),
               "numba": numba.__version__}
    ties = sum(r["tie"] for r in hard)
    print(f"{steps} steps, {undecided} undecided ({overflow} not kept), {len(hard) - ties} hard "
          f"(exact value not a midpoint), {ties} ties (an exact midpoint that binary32(v) rounds "
          f"the wrong way), {seconds:.1f} s in the kernel")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
