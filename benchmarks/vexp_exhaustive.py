"""Every binary32 input of the vector expf (native/vexp.py's vexp_any) against the scalar element
function it spells (native/attention.py's exp_any on native/crmath.py's exp_elem), bit for bit
and decided flag for flag.

The scalar is the one benchmarks/crmath_exhaustive.py proves correct on all 2^32 inputs. The
vector's first try takes r in one rounded step, stops the series two terms earlier and
decides with a wider budget (vexp.ERR_SHORT); a vector it leaves undecided somewhere runs the
scalar's two-step r and degree-6 steps.
Per input the lane must give the scalar's decided flag, and where decided its binary32
pattern (NaN lanes: the same pattern too). Inputs go WIDTH to a vector in pattern order, so
a vector's lanes are neighbours; tests/test_vexp.py mixes them.

Run: python benchmarks/vexp_exhaustive.py [--start U] [--stop U]
(the default walks all 2^32 patterns; --stop 0x01000000 is a smoke run). Exit status 1 on
any mismatch. Not a test.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mojolike.native.attention import _exp_any
from mojolike.native.simd import WIDTH, vload, vstore
from mojolike.native.simd64 import mask_bits
from mojolike.native.vexp import vexp_any
from numba import njit, prange

CHUNK = 1 << 24
BLOCK = 1 << 14  # inputs per parallel task


@njit(parallel=True, error_model="numpy")
def _walk(start, n, out):
    """out[t] = (mismatches, first mismatching pattern or -1, undecided lanes) of task t."""
    for t in prange(n // BLOCK):
        x = np.empty(BLOCK, np.uint32)
        e = np.empty(BLOCK, np.float32)
        bad, first, undecided = 0, -1, 0
        base = start + t * BLOCK
        for i in range(BLOCK):
            x[i] = np.uint32(base + i)
        xf = x.view(np.float32)
        for i in range(0, BLOCK, WIDTH):
            v, ok = vexp_any(vload(xf, i))
            vstore(e, i, v)
            bits = mask_bits(ok)
            for j in range(WIDTH):
                s, sok = _exp_any(xf[i + j])
                vok = (bits >> j) & 1 == 1
                undecided += not sok
                same = vok == sok
                if same and sok:
                    same = e.view(np.uint32)[i + j] == np.float32(s).view(np.uint32)
                if not same:
                    bad += 1
                    if first < 0:
                        first = base + i + j
        out[t, 0], out[t, 1], out[t, 2] = bad, first, undecided


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=lambda s: int(s, 0), default=0)
    ap.add_argument("--stop", type=lambda s: int(s, 0), default=1 << 32)
    a = ap.parse_args()
    t0 = time.time()
    bad = undecided = 0
    first = []
    for lo in range(a.start, a.stop, CHUNK):
        n = min(CHUNK, a.stop - lo)
        out = np.zeros((n // BLOCK, 3), np.int64)
        _walk(lo, n, out)
        bad += int(out[:, 0].sum())
        undecided += int(out[:, 2].sum())
        first += [int(f) for f in out[:, 1] if f >= 0][:3]
    walked = a.stop - a.start
    print(f"expf: {walked} inputs, {bad} mismatches, {undecided} undecided (as the scalar), "
          f"{time.time() - t0:.0f} s" + (f"; first: {[hex(f) for f in first[:5]]}" if first else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
