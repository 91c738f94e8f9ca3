"""The binary32 oracle core agrees with exact rational rounding and with the host's IEEE float32 unit."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mojolike.oracles import f32

f32s = st.floats(width=32, allow_subnormal=True, allow_nan=False, allow_infinity=False)
f64s = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True)


def np_bits(v) -> int:
    return int(np.float32(v).view(np.uint32))


@given(f64s)
def test_round_float_matches_exact_rational_rounding(d):
    assert f32.f32_to_bits(f32.round_float(d)) == f32.f32_to_bits(f32.round_fraction(Fraction(d))) \
        or (d == 0.0)


@given(f64s)
def test_round_float_matches_numpy_conversion(d):
    with np.errstate(over="ignore"):
        want = np_bits(np.float32(d))
    assert f32.f32_to_bits(f32.round_float(d)) == want, f"d={d.hex()}"


def test_rounding_ties_go_to_even():
    assert f32.round_float(1.0 + 2.0**-24) == 1.0
    assert f32.round_float(1.0 + 3 * 2.0**-24) == 1.0 + 2.0**-22
    assert f32.round_float(2.0**-150) == 0.0  # half the smallest subnormal: tie to even zero
    assert f32.round_float(3 * 2.0**-150) == 2.0**-148


def test_rounding_overflows_to_infinity_exactly_at_the_ieee_threshold():
    below = 2.0**128 - 2.0**103 - 2.0**75  # just under the midpoint between FLT_MAX and 2**128
    assert f32.round_float(below) == f32.FLT_MAX
    assert f32.round_float(f32.FLT_MAX + 2.0**103) == math.inf  # the tie rounds to even: overflow
    assert f32.round_float(-1e300) == -math.inf
    assert f32.round_fraction(Fraction(2) ** 128) == math.inf


def test_rounding_keeps_signed_zero_and_specials():
    assert math.copysign(1.0, f32.round_float(-0.0)) == -1.0
    assert math.copysign(1.0, f32.round_float(-1e-300)) == -1.0
    assert math.isnan(f32.round_float(math.nan))
    assert f32.round_float(-math.inf) == -math.inf


@settings(max_examples=300)
@given(f32s, f32s)
def test_add_sub_mul_div_match_numpy_float32(a, b):
    x, y = np.float32(a), np.float32(b)
    with np.errstate(all="ignore"):
        pairs = [(f32.add(a, b), x + y), (f32.sub(a, b), x - y), (f32.mul(a, b), x * y),
                 (f32.div(a, b), x / y)]
    for got, want in pairs:
        assert f32.same(got, float(want)), f"a={a.hex()} b={b.hex()} got={got!r} want={want!r}"


@given(f32s)
def test_sqrt_matches_numpy_float32(a):
    with np.errstate(invalid="ignore"):
        want = float(np.sqrt(np.float32(a)))
    assert f32.same(f32.sqrt(a), want)


def test_division_by_zero_follows_ieee():
    assert f32.div(1.0, 0.0) == math.inf
    assert f32.div(1.0, -0.0) == -math.inf
    assert f32.div(-1.0, 0.0) == -math.inf
    assert math.isnan(f32.div(0.0, 0.0))


def test_fma_rounds_once_where_mul_then_add_rounds_twice():
    a, b = 1.0 + 2.0**-23, 1.0 - 2.0**-23  # a*b = 1 - 2**-46
    assert f32.add(f32.mul(a, b), -1.0) == 0.0
    assert f32.fma(a, b, -1.0) == -(2.0**-46)


def test_fma_gives_minus_zero_only_when_both_addends_are_minus_zero():
    assert math.copysign(1.0, f32.fma(-0.0, 1.0, -0.0)) == -1.0
    assert math.copysign(1.0, f32.fma(0.0, 1.0, -0.0)) == 1.0
    assert math.copysign(1.0, f32.fma(1.0, 1.0, -1.0)) == 1.0


@given(st.integers(0, 2**32 - 1))
def test_bit_helpers_round_trip_every_non_nan_pattern(u):
    v = f32.bits_to_f32(u)
    if v == v:
        assert f32.f32_to_bits(v) == u
        assert f32.is_f32(v)
