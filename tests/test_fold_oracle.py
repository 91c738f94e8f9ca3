"""The fold oracle is the tree DESIGN.md describes: checked by hand and against a second spelling."""
from __future__ import annotations

import math

import numpy as np
from conftest import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mojolike.oracles import f32
from mojolike.oracles import fold as spec

EDGE_SIZES = (1, 2, 31, 32, 33, 1023, 1024, 1025, 2047, 2048, 2049, 3073)


def tree_by_numpy(x: np.ndarray) -> np.float32:
    """An independent spelling: pad with -0.0 explicitly, then whole-array float32 steps."""
    n = x.size
    padded = np.full(-(-n // 1024) * 1024, -0.0, np.float32)
    padded[:n] = x
    rows = padded.reshape(-1, 32, 32)  # chunk, step i, lane j
    with np.errstate(all="ignore"):
        acc = np.full((rows.shape[0], 32), -0.0, np.float32)
        for i in range(32):
            acc = acc + rows[:, i, :]
        for off in (16, 8, 4, 2, 1):
            acc = acc[:, :off] + acc[:, off:2 * off]
        level = acc[:, 0]
        while level.size > 1:
            paired = level[0:level.size - 1:2] + level[1::2]
            level = np.concatenate([paired, level[-1:]]) if level.size % 2 else paired
    return level[0]


finite_or_inf = st.floats(width=32, allow_subnormal=True, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.sampled_from(EDGE_SIZES), elements=finite_or_inf))
def test_oracle_fold_equals_an_independent_numpy_spelling_of_the_tree(x):
    assert_same_bits(spec.fold(x.tolist()), tree_by_numpy(x), f"n={x.size}")


def test_a_single_minus_zero_folds_to_minus_zero_because_lanes_start_at_minus_zero():
    assert math.copysign(1.0, spec.fold([-0.0])) == -1.0
    assert math.copysign(1.0, spec.fold([-0.0] * 3000)) == -1.0
    assert math.copysign(1.0, spec.fold([0.0, -0.0])) == 1.0


def test_lanes_take_every_32nd_element_so_the_order_differs_from_a_serial_sum():
    # lane 0 holds 2**24 and lane 1 holds the ones; serially each 1 would be lost to rounding
    x = [2.0**24] + [1.0] * 31 + [0.0] + [1.0] * 31
    assert spec.fold(x) == 2.0**24 + 62
    serial = -0.0
    for v in x:
        serial = f32.add(serial, v)
    assert serial == 2.0**24


def test_chunk_partials_pair_level_by_level_with_the_odd_one_carried_up():
    # three chunks: ((p0 + p1) + p2), not (p0 + (p1 + p2))
    x = [0.0] * 3072
    x[0], x[1024], x[2048] = 1.0, 2.0**24, -(2.0**24)
    assert spec.fold(x) == f32.add(f32.add(1.0, 2.0**24), -(2.0**24)) == 0.0
    assert spec.pairwise([1.0, 2.0, 3.0, 4.0, 5.0]) == ((1.0 + 2.0) + (3.0 + 4.0)) + 5.0


def test_sumsq_folds_rounded_squares_and_dot_folds_rounded_products():
    a = [1.0 + 2.0**-12, 3.0]
    assert spec.sumsq(a) == f32.add(f32.mul(a[0], a[0]), 9.0)
    assert spec.dot(a, [2.0, -1.0]) == f32.add(f32.mul(a[0], 2.0), -3.0)


def test_infinities_and_nans_follow_ieee():
    assert spec.fold([math.inf, 1.0]) == math.inf
    assert math.isnan(spec.fold([math.inf, -math.inf]))
    assert math.isnan(spec.fold([1.0, math.nan]))
    assert spec.sumsq([3e38, 3e38]) == math.inf
