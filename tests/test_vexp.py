"""native/vexp.py's vector expf gives the scalar exp_any's bits and decided flags, lane by lane.

The scalar (native/attention.py's exp_any on native/crmath.py's exp_elem) is checked against
the oracle elsewhere; here every lane of the vector spelling must equal it: special values,
the known undecided inputs, the ends of the range and a sample of all bit patterns.
"""
from __future__ import annotations

import numpy as np
from mojolike.contracts.crmath import HARD_EXP
from mojolike.native.attention import _exp_any
from mojolike.native.crmath import EXP_HUGE, EXP_TINY
from mojolike.native.simd import WIDTH, vload, vselect, vsplat, vstore
from mojolike.native.vexp import vexp_any
from numba import njit


@njit(error_model="numpy")
def _both(x, vec, vec_ok, sca, sca_ok):
    for i in range(0, x.size, WIDTH):
        e, ok = vexp_any(vload(x, i))
        vstore(vec, i, e)
        vstore(vec_ok, i, vselect(ok, vsplat(np.float32(1.0)), vsplat(np.float32(0.0))))
    for i in range(x.size):
        sca[i], sca_ok[i] = _exp_any(x[i])


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(21)
    edges = [EXP_TINY, EXP_HUGE, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.0, -1.0]
    edges = np.float32(edges)
    near = np.concatenate([np.float32(e).view(np.uint32) + np.arange(-40, 41, dtype=np.int64)
                           for e in (EXP_TINY, EXP_HUGE)]).astype(np.uint32).view(np.float32)
    hard = np.uint32(HARD_EXP).view(np.float32)
    # inputs whose first try (vexp.ERR_SHORT) lies within 2^-40 of a rounding boundary: with
    # that budget instead of 2^-38, benchmarks/vexp_exhaustive.py finds them mismatched first
    near_budget = np.uint32([0x3D05240F, 0x3E6902D5, 0x3F2EBF09, 0x3F344BD7, 0x41EF913C]).view(
        np.float32)
    patterns = rng.integers(0, 2 ** 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    softmax_like = -np.abs(rng.standard_normal(1 << 18) * 20).astype(np.float32)
    x = np.concatenate([edges, near, hard, near_budget, patterns, softmax_like])
    return np.concatenate([x, np.zeros(-x.size % WIDTH, np.float32)])


def test_vexp_any_equals_the_scalar_lane_by_lane():
    x = _inputs()
    vec, sca = np.empty_like(x), np.empty_like(x)
    vec_ok, sca_ok = np.empty_like(x), np.empty(x.size, np.bool_)
    _both(x, vec, vec_ok, sca, sca_ok)
    assert ((vec_ok == 1.0) == sca_ok).all()
    assert not sca_ok[np.isin(x.view(np.uint32), np.uint32(HARD_EXP))].any()
    decided = sca_ok
    assert (vec.view(np.uint32)[decided] == sca.view(np.uint32)[decided]).all()
