"""Every binary32 input of expf, logf, sinpif and cospif: cpu-numba against independent evaluations.

For each of the 2^32 bit patterns, the cpu-numba result (undecided slots finished
by the oracle, as `mojolike.math` does) is compared with
  1. the cpu-cffi kernel (the second spelling of the fast path), and
  2. a check through numpy's binary64 exp/log (libm-class accuracy, a different
     algorithm): its value z is rounded with the same kind of test, taking the
     binary64 error as at most 2^-50 |z| (a few ulps); where that test cannot
     decide, the check abstains. For sinpif/cospif, np.sin(np.pi * x) would be
     wrong for large x (pi x rounds, and a rounding of pi x is a large error in
     the angle), so x is reduced exactly first: |x| = n/2 + r in binary64 with
     n = rint(2|x|) and |r| <= 1/4 (exact for every binary32 x), then z is
     +-np.sin(np.pi * r) or +-np.cos(np.pi * r) as n mod 4 says, and the sign of x
     for sinpif. np.pi * r is within 2^-52 of pi r relatively, which moves
     sin(pi r) by at most that much relatively and cos(pi r) by less (|pi r| <= pi/4),
     so with libm's sin/cos z is within a few ulps of the value relative to it:
     the zeros of sin(pi x) and cos(pi x) all lie at r = 0, where r itself carries
     the smallness exactly. The check takes 2^-48 |z| there and abstains where the
     test cannot decide; at r = 0 (x a multiple of 1/2, every |x| >= 2^22) it gives
     the exact 0 or +-1 of the contract directly, signed zeros included.
Wherever cpu-numba disagrees with either, or the check abstains, the exact oracle
(`oracles/crmath.py`) decides, and a disagreement with the oracle is a mismatch.
NaN results are compared by pattern (the contract fixes their payloads).

Run: python benchmarks/crmath_exhaustive.py [--functions expf,logf,sinpif,cospif] [--blocks N]
(N blocks of 2^24 inputs from 0; the full run is 256 blocks; ~5 min a function on 2 cores).
The summary goes to stdout and, with --json PATH, to a file.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np
from mojolike.oracles import crmath as spec

from mojolike.core import registry
from mojolike.ops.crmath import UNDECIDED, finish

BLOCK = 1 << 24
SLACK = 2.0 ** -50
SLACK_PI = 2.0 ** -48
NUMPY_F64 = {"expf": np.exp, "logf": np.log}
ORACLE = {"expf": spec.expf_bits, "logf": spec.logf_bits, "sinpif": spec.sinpif_bits,
          "cospif": spec.cospif_bits}


def pi_check(name: str, x: np.ndarray):
    """(z, exact): the binary64 sin(pi x) or cos(pi x) after an exact reduction, and the
    mask of multiples of 1/2, where z is the contract's exact value (signed zeros kept)."""
    with np.errstate(all="ignore"):
        xd = x.astype(np.float64)
        a = np.abs(xd)
        n = np.rint(2.0 * a)  # exact: 2a is a binary64 value, rint an integer one
        r = a - 0.5 * n  # exact for binary32 x: |x| = n/2 + r, |r| <= 1/4
        q = np.fmod(n, 4.0)  # exact; NaN and inf give NaN, which the caller overrides
        s = np.sin(np.pi * r)
        c = np.cos(np.pi * r)
        if name == "sinpif":  # sin(pi (n/2 + r)) = s, c, -s, -c
            z = np.where(q == 0, s, np.where(q == 1, c, np.where(q == 2, -s, -c)))
            z = np.where(r == 0, np.where(q == 1, 1.0, np.where(q == 3, -1.0, 0.0)), z)
            z = np.where(np.signbit(xd), -z, z)  # odd: every zero takes the sign of x
        else:  # cos(pi (n/2 + r)) = c, -s, -c, s; never -0
            z = np.where(q == 0, c, np.where(q == 1, -s, np.where(q == 2, -c, s)))
            z = np.where(r == 0, np.where(q == 0, 1.0, np.where(q == 2, -1.0, 0.0)), z)
    return z, r == 0


def check_bits(name: str, x: np.ndarray):
    """(bits, decided): the binary64 check rounded to binary32 where it can decide."""
    exact = np.zeros(x.shape, bool)
    with np.errstate(all="ignore"):
        if name in ("sinpif", "cospif"):
            z, exact = pi_check(name, x)
            e = np.abs(z) * SLACK_PI
        else:
            z = NUMPY_F64[name](x.astype(np.float64))
            e = np.where(np.isinf(z), 0.0, np.abs(z) * SLACK)  # inf - inf would be NaN
        lo = (z - e).astype(np.float32)
        hi = (z + e).astype(np.float32)
    decided = (lo.view(np.uint32) == hi.view(np.uint32)) | exact
    bits = np.where(exact, z.astype(np.float32).view(np.uint32), lo.view(np.uint32))
    # the contract's NaN patterns: a NaN input is quieted, logf(x < 0) is the default NaN
    xb = x.view(np.uint32)
    nan_in = np.isnan(x)
    bits[nan_in] = xb[nan_in] | spec.QUIET_BIT
    if name == "logf":
        neg = ~nan_in & (xb >= 0x80000000) & ((xb & 0x7FFFFFFF) != 0)
        bits[neg] = spec.DEFAULT_NAN_BITS
        decided |= neg
    if name in ("sinpif", "cospif"):
        inf = np.isinf(x)
        bits[inf] = spec.DEFAULT_NAN_BITS
        decided |= inf
    decided |= nan_in
    return bits, decided


def run(name: str, blocks: int) -> dict:
    numba_k = registry.kernels("crmath_exhaustive", "crmath", "cpu-numba")
    try:
        cffi_k = registry.kernels("crmath_exhaustive", "crmath", "cpu-cffi")
    except Exception as e:  # noqa: BLE001 - reported, and the run goes on with the check alone
        cffi_k = None
        print(f"cpu-cffi unavailable: {e}", file=sys.stderr)
    stats = dict(inputs=0, kernel_undecided=0, undecided_inputs=[], cffi_disagree=0,
                 check_abstained=0, check_disagree=0, oracle_calls=0, mismatches=0,
                 mismatch_inputs=[], seconds=0.0, numba_seconds=0.0, cffi_seconds=0.0)
    t0 = time.perf_counter()
    out, out2 = np.empty(BLOCK, np.float32), np.empty(BLOCK, np.float32)
    for b in range(blocks):
        u = np.arange(b * BLOCK, (b + 1) * BLOCK, dtype=np.uint64).astype(np.uint32)
        x = u.view(np.float32)
        t = time.perf_counter()
        n_und = getattr(numba_k, f"{name}_into")(x, out)
        stats["numba_seconds"] += time.perf_counter() - t
        ob = out.view(np.uint32)
        if n_und:
            stats["undecided_inputs"] += [f"0x{v:08x}" for v in u[ob == UNDECIDED].tolist()]
        finish(name, x, out, n_und)
        stats["kernel_undecided"] += n_und
        suspect = np.zeros(BLOCK, bool)
        if cffi_k is not None:
            t = time.perf_counter()
            n2 = getattr(cffi_k, f"{name}_into")(x, out2)
            stats["cffi_seconds"] += time.perf_counter() - t
            finish(name, x, out2, n2)
            d = out2.view(np.uint32) != ob
            stats["cffi_disagree"] += int(d.sum())
            suspect |= d
        cb, decided = check_bits(name, x)
        stats["check_abstained"] += int((~decided).sum())
        d = decided & (cb != ob)
        stats["check_disagree"] += int(d.sum())
        suspect |= d | ~decided
        for i in np.flatnonzero(suspect).tolist():
            stats["oracle_calls"] += 1
            if ORACLE[name](int(u[i])) != int(ob[i]):
                stats["mismatches"] += 1
                if len(stats["mismatch_inputs"]) < 20:
                    stats["mismatch_inputs"].append(f"0x{int(u[i]):08x}")
        stats["inputs"] += BLOCK
        if (b + 1) % 16 == 0:
            print(f"  {name}: {b + 1}/{blocks} blocks, {time.perf_counter() - t0:.0f} s, "
                  f"undecided {stats['kernel_undecided']}, mismatches {stats['mismatches']}",
                  file=sys.stderr, flush=True)
    stats["seconds"] = time.perf_counter() - t0
    for key in ("seconds", "numba_seconds", "cffi_seconds"):
        stats[key] = round(stats[key], 1)
    stats["cffi"] = cffi_k is not None
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--functions", default="expf,logf")
    ap.add_argument("--blocks", type=int, default=256, help="blocks of 2^24 inputs (256 = all)")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args(argv)
    k = registry.kernels("crmath_exhaustive", "crmath", "cpu-numba")
    summary = {"machine": platform.machine(), "platform": platform.platform(),
               "numba_threads": k.details.get("threads"), "numpy": np.__version__,
               "blocks": args.blocks, "results": {}}
    for name in args.functions.split(","):
        s = run(name, args.blocks)
        summary["results"][name] = s
        print(f"{name}: {s['inputs']} inputs, {s['mismatches']} mismatches; kernel undecided "
              f"{s['kernel_undecided']} (finished by the oracle), cffi disagreements "
              f"{s['cffi_disagree']}, check abstained {s['check_abstained']}, check "
              f"disagreements {s['check_disagree']}, oracle calls {s['oracle_calls']}; "
              f"{s['seconds']} s (numba {s['numba_seconds']} s, cffi {s['cffi_seconds']} s)",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0 if all(s["mismatches"] == 0 for s in summary["results"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
