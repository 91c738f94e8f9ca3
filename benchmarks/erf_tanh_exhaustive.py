"""Every binary32 input of tanhf and erff: a binary64 shortcut against the exact oracle.

For each input pattern u (all 2^32 of them, or a stride of them), a fast candidate
is formed in binary64: z = np.tanh(x) or math.erf(x) (libm-class accuracy; numpy
has no erf, so erf goes through math.erf one value at a time: the slow half of the
walk). Taking the binary64 error as at most SLACK |z| (2^-48: a few hundred
binary64 ulps, far beyond libm's), the candidate is decided where both
z - SLACK |z| and z + SLACK |z| round to the same binary32 value; there it is
correct whatever the libm error. Elsewhere (z within the margin of a rounding
boundary) the exact oracle (`oracles/erf_tanh.py`) decides, and the script counts
  needed_oracle  the inputs the shortcut could not decide,
  shortcut_wrong the inputs where rounding z to binary32 directly (what a plain
                 binary64 implementation would return) differs from the oracle,
  spot_mismatch  decided inputs that disagree with the oracle (every K-th decided
                 input is checked with --spot K; any mismatch means SLACK is wrong).
NaN inputs are not sent to binary64: the contract returns them quieted with their
payload, the oracle's special path. The hardest inputs seen (binary64 value nearest
a rounding boundary) are measured with the oracle's enclosure and listed: they are
the hard cases for the card.

Run: python benchmarks/erf_tanh_exhaustive.py [--functions tanhf,erff] [--start U]
     [--stride S] [--limit N] [--spot K] [--json PATH]
--limit N walks N inputs u = start, start + S, ... (a quick smoke: --limit 200000);
without it the walk covers every pattern from --start up (2^32 with the defaults:
tanh takes minutes, erf's math.erf loop about an hour on one core).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from fractions import Fraction

import numpy as np
from mojolike.oracles import erf_tanh as spec
from mojolike.oracles.f32 import bits_to_f32

CHUNK = 1 << 20
SLACK = 2.0 ** -48
KEEP = 6  # hardest inputs kept per function
ORACLE = {"tanhf": spec.tanhf_bits, "erff": spec.erff_bits}
INTERVAL = {"tanhf": spec.tanh_interval, "erff": spec.erf_interval}
_ERF = np.frompyfunc(math.erf, 1, 1)


def binary64(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "tanhf":
            return np.tanh(x)
        return _ERF(x).astype(np.float64)


def to_bits(z: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return z.astype(np.float32).view(np.uint32)  # round to nearest even


def boundary_distance(z: np.ndarray) -> np.ndarray:
    """|frac(|z| / ulp) - 1/2| for the binary32 ulp of |z| (nan where z is 0, inf or nan)."""
    with np.errstate(all="ignore"):
        a = np.abs(z)
        e = np.maximum(np.floor(np.log2(a)), -126.0)
        q = a / np.ldexp(1.0, (e - 23).astype(np.int64))
        return np.abs(q - np.floor(q) - 0.5)


def exact_distance(name: str, u: int) -> float:
    """log2 of the exact value's distance to the nearest midpoint, in ulps (oracle enclosure)."""
    lo, hi = INTERVAL[name](bits_to_f32(u), 320)
    v = abs(lo + hi) / 2
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    e = max(e, -126)  # subnormal results: the ulp is 2^-149
    q = v / Fraction(2) ** (e - 23)
    d = abs(q - q.numerator // q.denominator - Fraction(1, 2))
    return math.log2(d) if d else -math.inf


def walk(name: str, start: int, stride: int, limit: int, spot: int) -> dict:
    oracle = ORACLE[name]
    t0 = time.perf_counter()
    counts = {"inputs": 0, "nan": 0, "needed_oracle": 0, "shortcut_wrong": 0, "spot_checked": 0, "spot_mismatch": 0}
    wrong, mismatches, hardest = [], [], []
    done = 0
    while done < limit:
        n = min(CHUNK, limit - done)
        u = (start + stride * (done + np.arange(n, dtype=np.uint64))).astype(np.uint32)
        done += n
        nan = (u & 0x7F800000) == 0x7F800000
        nan &= (u & 0x007FFFFF) != 0
        for i in np.flatnonzero(nan):  # the special path: quieted, payload and sign kept
            counts["nan"] += 1
            if oracle(int(u[i])) != int(u[i]) | 0x00400000:
                counts["spot_mismatch"] += 1
                mismatches.append(hex(int(u[i])))
        u = u[~nan]
        counts["inputs"] += n
        x = u.view(np.float32).astype(np.float64)
        z = binary64(name, x)
        lo, hi = to_bits(z - np.abs(z) * SLACK), to_bits(z + np.abs(z) * SLACK)
        undecided = np.flatnonzero(lo != hi)
        direct = to_bits(z)
        for i in undecided:
            counts["needed_oracle"] += 1
            want = oracle(int(u[i]))
            if int(direct[i]) != want:
                counts["shortcut_wrong"] += 1
                wrong.append(hex(int(u[i])))
        if spot:
            for i in np.flatnonzero(lo == hi)[::spot]:
                counts["spot_checked"] += 1
                if oracle(int(u[i])) != int(lo[i]):
                    counts["spot_mismatch"] += 1
                    mismatches.append(hex(int(u[i])))
        d = boundary_distance(z)
        d[(x == 0) | ~np.isfinite(z) | (np.abs(z) == 1.0)] = np.inf
        for i in np.argsort(d)[:KEEP]:
            if np.isfinite(d[i]):
                hardest.append((float(d[i]), int(u[i])))
        hardest = sorted(set(hardest))[:KEEP]
    hard = [{"input": hex(uu), "result": hex(oracle(uu)),
             "log2_ulps_from_midpoint": round(exact_distance(name, uu), 2)} for _, uu in hardest]
    return {"function": name, "start": hex(start), "stride": stride, **counts,
            "shortcut_wrong_inputs": wrong[:20], "spot_mismatch_inputs": mismatches[:20],
            "hardest": hard, "seconds": round(time.perf_counter() - t0, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--functions", default="tanhf,erff")
    ap.add_argument("--start", type=lambda s: int(s, 0), default=0)
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--spot", type=int, default=0, help="check every K-th decided input with the oracle")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    limit = args.limit if args.limit is not None else ((1 << 32) - args.start + args.stride - 1) // args.stride
    results = []
    for name in args.functions.split(","):
        r = walk(name, args.start, args.stride, limit, args.spot)
        results.append(r)
        print(f"{name}: {r['inputs']} inputs from {r['start']} stride {r['stride']} ({r['nan']} NaN): "
              f"needed_oracle={r['needed_oracle']} shortcut_wrong={r['shortcut_wrong']} "
              f"spot_checked={r['spot_checked']} spot_mismatch={r['spot_mismatch']} ({r['seconds']} s)")
        for h in r["hardest"]:
            print(f"  hard: {h['input']} -> {h['result']}, 2^{h['log2_ulps_from_midpoint']} ulp from a midpoint")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if any(r["spot_mismatch"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
