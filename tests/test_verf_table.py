"""The erf table of native/verf_table.py: its coefficients are the fit, its error is far inside its
budget, and the budget is wide enough that it decides no input erf's series leaves undecided.

The last property is what keeps the vector GELU kernels' decided flags the scalar's: a
lane the table decides must be one the series decides (the argument is in the module's
docstring; benchmarks/vgelu_exhaustive.py checks it on all 2^32 inputs and
tests/test_vgelu.py on the known undecided ones). mpmath is torch's dependency, so the test
environment has it.
"""
from __future__ import annotations

import numpy as np
import pytest
from mojolike.native import erf_tanh, verf_table
from mojolike.native.simd import WIDTH, vload, vsplat, vwiden
from mojolike.native.simd64 import dge, dselect
from numba import njit
from vector_parts import store_parts

mpmath = pytest.importorskip("mpmath")


@njit(error_model="numpy")
def _table(x, hi, mid, lo):
    """verf_table of x's lanes as three binary32 parts that sum to it exactly (each remainder
    is exact, and the last has at most 53 - 48 bits)."""
    for i in range(0, x.size, WIDTH):
        store_parts(verf_table.verf_table(vwiden(vload(x, i))), hi, mid, lo, i)


def _longest_series() -> int:
    """The most terms erf_tanh.erf_elem's series takes on [1/2, ERF_ONE) (its loop, in binary64),
    over a fine grid: the trip count grows with a."""
    most = 0
    for a in np.linspace(0.5, float(erf_tanh.ERF_ONE_D), 2001):
        z, t, s, k, n = 2 * a * a, 1.0, 1.0, 1.0, 0
        while True:
            k, t, n = k + 2.0, t * z / (k + 2.0), n + 1
            s += t
            if t * float(erf_tanh.ERF_STOP) <= s:
                break
        most = max(most, n)
    return most


def test_the_table_is_the_chebyshev_fit_recomputed_at_256_bits():
    assert verf_table.fit() == verf_table.TABLE


def test_the_table_is_within_a_sixteenth_of_its_budget_of_erf():
    assert verf_table.fit_error(300) <= verf_table.TABLE_ERR / 16


def test_the_budget_is_wider_than_twice_the_longest_series_budget_plus_the_table_error():
    n = _longest_series()
    assert 55 <= n <= 64, n
    series = float(erf_tanh.ERF_ERR0) + n * float(erf_tanh.ERF_ERR1)
    assert float(verf_table.TABLE_ERR) >= 2 * series + verf_table.TABLE_ERR / 16


def test_the_interval_edges_end_where_erff_is_one():
    assert verf_table.EDGES[0] == float(erf_tanh.ERF_POLY_END)
    assert verf_table.EDGES[-1] == float(erf_tanh.ERF_ONE_D)


def test_every_vector_lane_is_the_documented_horner_sequence():
    rng = np.random.default_rng(3)
    edges = np.float32(verf_table.EDGES)
    x = np.concatenate([edges[:-1], np.nextafter(edges[1:], np.float32(0)),
                        rng.uniform(0.5, float(edges[-1]), 4096 - 8).astype(np.float32)])
    hi, mid, lo = (np.empty(x.size, np.float32) for _ in range(3))
    _table(x, hi, mid, lo)
    for a, h, m, low in zip(x.astype(np.float64), hi, mid, lo):
        i = int(np.searchsorted(verf_table.EDGES, a, side="right")) - 1
        want = verf_table.horner(i, float(a))
        h32 = np.float32(want)
        m32 = np.float32(want - float(h32))
        assert (h, m, low) == (h32, m32, np.float32(want - float(h32) - float(m32))), a


@njit(error_model="numpy")
def _into(x, keep, out, ref):
    """verf_table_into on x's lanes (the series lanes: x >= EDGES[0]; the others keep `keep`),
    and verf_table where a lane is a series lane, for comparison, as exact binary32 parts."""
    for i in range(0, x.size, WIDTH):
        a = vwiden(vload(x, i))
        series = dge(a, vsplat(np.float64(verf_table.EDGES[0])))
        y = vwiden(vload(keep, i))
        store_parts(verf_table.verf_table_into(a, y, series), out[0], out[1], out[2], i)
        store_parts(dselect(series, verf_table.verf_table(a), y), ref[0], ref[1], ref[2], i)


@pytest.mark.parametrize("intervals", [(0,), (1,), (3,), (0, 1), (1, 2), (0, 2, 3), (0, 1, 2, 3)])
def test_running_each_present_interval_on_splat_coefficients_equals_the_per_lane_pick(intervals):
    rng = np.random.default_rng(len(intervals) * 10 + intervals[0])
    edges = verf_table.EDGES
    lanes = []
    for v in range(64):  # 64 vectors, each with lanes below 1/2 and in the chosen intervals
        for j in range(WIDTH):
            k = intervals[(v + j) % len(intervals)]
            lo, hi = edges[k], edges[k + 1]
            lanes.append(rng.uniform(0.0, 0.5) if j % 5 == 4 else rng.uniform(lo, hi))
    x = np.float32(lanes)
    x = np.minimum(x, np.nextafter(np.float32(edges[-1]), np.float32(0)))
    keep = np.float32(rng.uniform(0.0, 1.0, x.size))
    out, ref = np.empty((3, x.size), np.float32), np.empty((3, x.size), np.float32)
    _into(x, keep, out, ref)
    assert out.view(np.uint32).tolist() == ref.view(np.uint32).tolist()
    below = x < np.float32(edges[0])
    assert out[0, below].view(np.uint32).tolist() == keep[below].view(np.uint32).tolist()
    assert not out[1:, below].any()
