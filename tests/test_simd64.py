"""native/simd64.py's `vlookup32`: the entry of a 32-entry binary64 table, bit for bit, whichever
instructions the target gets (permutes with AVX-512, a gather or a load per lane without)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from mojolike.native import simd64, target
from mojolike.native.crmath import EXP2_32
from mojolike.native.simd import WIDTH, vbits, vgather, vload, vsplat, vsub, vwiden
from numba import njit
from vector_parts import store_parts

TWO52 = np.float64(2.0 ** 52)


@njit
def _lookup(table, idx, out, ref):
    """vlookup32 and table[j] (vgather) of the indices idx (small integers as float32)."""
    for i in range(0, idx.size, WIDTH):
        d = vsub(vwiden(vload(idx, i)), vsplat(-TWO52))  # 2^52 + j: its pattern is 2^52's + j
        k = vsub(vbits(d), vbits(vsplat(TWO52)))
        store_parts(simd64.vlookup32(table, k), out[0], out[1], out[2], i)
        store_parts(vgather(table, k), ref[0], ref[1], ref[2], i)


def lookups_equal_the_table() -> bool:
    """Every index in every lane, two tables (random 53-bit values; expf's 2^(j/32))."""
    rng = np.random.default_rng(32)
    idx = np.concatenate([np.arange(32), np.arange(32)[::-1], rng.integers(0, 32, 4096)])
    idx = np.float32(np.concatenate([np.roll(idx, s) for s in range(WIDTH)]))
    for table in (rng.uniform(0.5, 4.0, 32), EXP2_32):
        out, ref = np.empty((3, idx.size), np.float32), np.empty((3, idx.size), np.float32)
        _lookup(table, idx, out, ref)
        want = np.float32(table[idx.astype(np.int64)])
        if not (np.array_equal(out.view(np.uint32), ref.view(np.uint32)) and
                np.array_equal(out[0], want)):
            return False
    return True


def test_the_lookup_reads_the_table_entry_in_every_lane_on_this_host():
    assert lookups_equal_the_table()
    assert (simd64.vlookup32 is vgather) == (not target.has_zmm())


def test_a_target_without_avx512_gets_the_gather_and_the_same_entries():
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_simd64 as t; "
            "from mojolike.native import simd64, target; from mojolike.native.simd import vgather; "
            "print(json.dumps([target.has_zmm(), simd64.vlookup32 is vgather, "
            "t.lookups_equal_the_table()]))")
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="")
    got = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], env=env,
                         capture_output=True, text=True, check=True)
    assert json.loads(got.stdout.strip().splitlines()[-1]) == [False, True, True]
