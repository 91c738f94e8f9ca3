"""erf from one polynomial per lane (native/verf_lanes.py): its coefficients are the fit, its
error is far inside its budget, the budget is wide enough that it decides no input the
scalar path leaves undecided, and every vector lane is the documented binary64 sequence.

The third property keeps the vector GELU kernels' decided flags the scalar's (the argument
is in the module's docstring; benchmarks/vgelu_exhaustive.py checks it on all 2^32 inputs).
mpmath is torch's dependency, so the test environment has it.
"""
from __future__ import annotations

import numpy as np
import pytest
from mojolike.contracts.erf_tanh_hard import HARD_ERF
from mojolike.native import erf_tanh, verf_lanes
from mojolike.native.simd import WIDTH, vload, vwiden
from numba import njit
from test_verf_table import _longest_series
from vector_parts import store_parts

mpmath = pytest.importorskip("mpmath")


@njit(error_model="numpy")
def _lanes(x, hi, mid, lo):
    """verf_lanes of x's lanes as three binary32 parts that sum to it exactly."""
    for i in range(0, x.size, WIDTH):
        store_parts(verf_lanes.verf_lanes(vwiden(vload(x, i))), hi, mid, lo, i)


def _parts(v: float) -> tuple:
    h = np.float32(v)
    m = np.float32(v - float(h))
    return h, m, np.float32(v - float(h) - float(m))


def test_the_table_is_the_chebyshev_fit_recomputed_at_256_bits():
    assert verf_lanes.fit() == verf_lanes.TABLE


def test_the_polynomials_are_within_a_sixteenth_of_the_budget_of_erf():
    assert verf_lanes.fit_error(300) <= verf_lanes.ERF_TRY_ERR / 16


def test_the_budget_is_wider_than_twice_the_scalar_budgets_plus_the_error():
    series = float(erf_tanh.ERF_ERR0) + _longest_series() * float(erf_tanh.ERF_ERR1)
    widest = max(series, float(erf_tanh.ERF_POLY_ERR))
    assert float(verf_lanes.ERF_TRY_ERR) >= 2 * widest + verf_lanes.ERF_TRY_ERR / 16


def test_the_intervals_cover_zero_to_where_erff_is_one_edge_to_edge():
    spans = verf_lanes.intervals()
    assert spans[0][0] == 0.0 and spans[-1][1] == float(erf_tanh.ERF_ONE_D)
    assert all(hi == lo for (_, hi), (lo, _) in zip(spans, spans[1:]))


def test_the_try_leaves_every_known_undecided_erff_input_undecided():
    for u in HARD_ERF:
        x = float(np.uint32(u).view(np.float32))
        a = abs(x)
        y = verf_lanes.horner(a)
        eb = y * float(verf_lanes.ERF_TRY_ERR)
        assert np.float32(y - eb) != np.float32(y + eb), hex(u)


def test_every_vector_lane_is_the_documented_horner_sequence():
    rng = np.random.default_rng(5)
    ties = np.float32((np.arange(16) + 0.5) / 4)  # 4a halfway between two k: ties to even
    ends = np.float32([0.0, 2.0 ** -149, 1e-30, 2.0 ** -27, 3.875, 3.625])
    top = np.nextafter(np.float32(erf_tanh.ERF_ONE_D), np.float32(0))
    x = np.concatenate([ties, np.nextafter(ties, np.float32(0)), ends, [top],
                        rng.uniform(0.0, float(top), 4096).astype(np.float32)])
    x = x[: x.size - x.size % WIDTH]
    hi, mid, lo = (np.empty(x.size, np.float32) for _ in range(3))
    _lanes(x, hi, mid, lo)
    for a, h, m, low in zip(x.astype(np.float64), hi, mid, lo):
        assert (h, m, low) == _parts(verf_lanes.horner(float(a))), a
