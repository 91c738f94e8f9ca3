"""Every binary32 input of the cpu-numba tanhf and erff kernels, against a reference decided exactly.

The kernel (native/erf_tanh.py) runs on chunks of input patterns u; a reference is
formed beside it in binary64 with libm's tanh and erf (numba's math.tanh, math.erf):
taking the libm error as at most SLACK |z| (2^-48, hundreds of binary64 ulps beyond
what libm promises), z is decided where z - SLACK |z| and z + SLACK |z| round to the
same binary32 value. Then, per input:
  undecided  the kernel wrote UNDECIDED: listed (they become contracts/erf_tanh_hard.py);
  checked    both decided: the kernel's bits must equal the reference's;
  oracle     the reference is undecided and the kernel decided: the exact oracle
             (oracles/erf_tanh.py) decides, and the kernel must equal it;
  NaN        the kernel must return the input quieted (payload and sign kept).
errors counts every disagreement (0 is the only passing value); the first ones are
listed. The kernel's decided values are thereby proved correct for every input walked.

Run: python benchmarks/erf_tanh_kernels_exhaustive.py [--functions tanhf,erff]
     [--start U] [--stop U] [--json PATH]
(the default walks all 2^32 patterns; --stop 0x01000000 is a smoke run).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np
from mojolike.native import erf_tanh as kern
from mojolike.oracles import erf_tanh as spec
from numba import njit, prange

CHUNK = 1 << 24
SLACK = 2.0 ** -48
ORACLE = {"tanhf": spec.tanhf_bits, "erff": spec.erff_bits}
KERNEL = {"tanhf": kern.tanhf_into, "erff": kern.erff_into}
UNDECIDED = kern.UNDECIDED


@njit(parallel=True, cache=True)
def _classify(u, ob, use_erf, status):
    """status[i]: 0 agrees, 1 kernel undecided, 2 needs the oracle, 3 mismatch."""
    for i in prange(u.size):
        b = ob[i]
        if b == UNDECIDED:
            status[i] = 1
            continue
        w = u[i]
        if (w & 0x7FFFFFFF) > 0x7F800000:
            status[i] = 0 if b == (w | 0x00400000) else 3
            continue
        x = np.float64(u[i:i + 1].view(np.float32)[0])
        z = math.erf(x) if use_erf else math.tanh(x)
        e = abs(z) * SLACK
        lo = np.float32(z - e)
        hi = np.float32(z + e)
        if lo != hi:
            status[i] = 2
            continue
        r = np.array([lo], np.float32).view(np.uint32)[0]
        status[i] = 0 if r == b else 3


def walk(name: str, start: int, stop: int) -> dict:
    oracle = ORACLE[name]
    t0 = time.perf_counter()
    counts = {"inputs": 0, "undecided": 0, "oracle_checked": 0, "errors": 0}
    undecided, errors = [], []
    for c0 in range(start, stop, CHUNK):
        u = np.arange(c0, min(c0 + CHUNK, stop), dtype=np.uint64).astype(np.uint32)
        out = np.empty(u.size, np.float32)
        n = KERNEL[name](u.view(np.float32), out)
        ob = out.view(np.uint32)
        status = np.empty(u.size, np.uint8)
        _classify(u, ob, name == "erff", status)
        counts["inputs"] += u.size
        und = np.flatnonzero(status == 1)
        assert und.size == n, (und.size, n)
        undecided += [int(v) for v in u[und]]
        for i in np.flatnonzero(status == 2):
            counts["oracle_checked"] += 1
            if oracle(int(u[i])) != int(ob[i]):
                errors.append(int(u[i]))
        errors += [int(v) for v in u[status == 3]]
    counts["undecided"] = len(undecided)
    counts["errors"] = len(errors)
    return {"function": name, "start": hex(start), "stop": hex(stop), **counts,
            "undecided_inputs": [f"0x{v:08X}" for v in undecided],
            "error_inputs": [f"0x{v:08X}" for v in errors[:50]],
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--functions", default="tanhf,erff")
    ap.add_argument("--start", type=lambda s: int(s, 0), default=0)
    ap.add_argument("--stop", type=lambda s: int(s, 0), default=1 << 32)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    results = []
    for name in args.functions.split(","):
        r = walk(name, args.start, args.stop)
        results.append(r)
        print(f"{name}: {r['inputs']} inputs [{r['start']}, {r['stop']}): undecided={r['undecided']} "
              f"oracle_checked={r['oracle_checked']} errors={r['errors']} ({r['seconds']} s)", flush=True)
        print(f"  undecided: {' '.join(r['undecided_inputs'])}")
        if r["errors"]:
            print(f"  errors: {' '.join(r['error_inputs'])}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
