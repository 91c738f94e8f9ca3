"""The correctly rounded expf/logf: the oracle, the fast path's error budget, the public API."""
from __future__ import annotations

import math
import types
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mojolike.math as mm
from mojolike import Refusal
from mojolike._crmath import UNDECIDED, finish
from mojolike.native import crmath as fast
from mojolike.oracles import crmath as spec
from mojolike.oracles.f32 import bits_to_f32, f32_to_bits, round_fraction

from conftest import CPU_BACKENDS, available

SPECIAL_EXP = {  # input pattern -> expf pattern
    0x00000000: 0x3F800000, 0x80000000: 0x3F800000,  # e^+-0 = 1
    0x3F800000: 0x402DF854,  # e
    0x7F800000: 0x7F800000, 0xFF800000: 0x00000000,
    0x7F800001: 0x7FC00001, 0xFFC01234: 0xFFC01234,  # NaNs quieted, payload and sign kept
    0x42B17217: 0x7F7FFF84, 0x42B17218: 0x7F800000,  # the last finite result, then overflow
    0xC2CFF1B4: 0x00000001, 0xC2CFF1B5: 0x00000000,  # the least subnormal, then +0
    0x00000001: 0x3F800000, 0xB3000000: 0x3F800000,  # e^tiny rounds to 1 (either side)
}
SPECIAL_LOG = {
    0x00000000: 0xFF800000, 0x80000000: 0xFF800000, 0x3F800000: 0x00000000,
    0x7F800000: 0x7F800000, 0xFF800000: 0x7FC00000, 0xBF800000: 0x7FC00000,
    0x7F800001: 0x7FC00001, 0x00000001: 0xC2CE8ED0, 0x7F7FFFFF: 0x42B17218,
    0x40000000: 0x3F317218,  # ln 2
}


def test_the_oracle_gives_the_c99_special_values():
    for u, want in SPECIAL_EXP.items():
        assert spec.expf_bits(u) == want, hex(u)
    for u, want in SPECIAL_LOG.items():
        assert spec.logf_bits(u) == want, hex(u)


def test_the_oracle_rounds_the_exact_value_found_by_an_independent_enclosure():
    # ln x by bisection on the oracle's own e^y interval would be circular; instead use
    # math.exp/log in binary64 where their few-ulp error cannot cross a binary32 midpoint
    rng = np.random.default_rng(7)
    checked = 0
    for u in rng.integers(0, 2**32, 4000).tolist():
        x = bits_to_f32(u)
        if not math.isfinite(x):
            continue
        for fn, ref in ((spec.expf, math.exp), (spec.logf, math.log)):
            if ref is math.log and x <= 0 or ref is math.exp and not -103 < x < 88:
                continue
            z = ref(x)
            lo, hi = z * (1 - 2**-48), z * (1 + 2**-48)
            if round_fraction(Fraction(lo)) == round_fraction(Fraction(hi)):
                assert fn(x) == round_fraction(Fraction(z)), (fn.__name__, hex(u))
                checked += 1
    assert checked > 3000


def test_the_oracle_enclosures_are_narrow_and_contain_the_binary64_value():
    for x in (1.0, -87.5, 88.5, 1e-30, -1e-5):
        lo, hi = spec.exp_interval(x, 120)
        assert lo <= hi and (hi - lo) / lo < Fraction(1, 2**100)
        assert abs(float(lo) - math.exp(x)) <= 4 * math.ulp(math.exp(x))
    for x in (2.0, 1e-40, 3e38, 0.999999, 1.0000001):
        lo, hi = spec.log_interval(x, 120)
        assert lo <= hi and abs(hi - lo) < Fraction(1, 2**100)
        assert abs(float(lo) - math.log(x)) <= 4 * math.ulp(math.log(x))


def _unrounded(fn):
    """The kernel's element function returning its binary64 y (no rounding test)."""
    env = dict(fn.__globals__, narrow=float, ERR=0.0)
    return types.FunctionType(fn.__code__, env, fn.__name__)


BUDGET = Fraction(1, 2**51)  # contracts/crmath.md clause 4: the computed y, before the test's own roundings


def _exp_inputs():
    rng = np.random.default_rng(11)
    xs = rng.uniform(-103.9, 88.7, 3000).astype(np.float32).tolist()
    xs += rng.uniform(-0.02, 0.02, 500).astype(np.float32).tolist()
    ln2_64 = math.log(2) / 64  # reduction boundaries: |r| is largest there
    for k in range(-4800, 4100, 97):
        base = np.float32((k + 0.5) * 2 * ln2_64)
        xs += [float(np.nextafter(base, np.float32(-200))), float(base),
               float(np.nextafter(base, np.float32(200)))]
    return [x for x in xs if -104 < x < 89]


def test_the_exp_fast_path_stays_within_its_error_budget():
    y_of = _unrounded(fast.exp_elem)
    worst = Fraction(0)
    for x in _exp_inputs():
        y, _ = y_of(np.float32(x))
        lo, hi = spec.exp_interval(x, 120)
        worst = max(worst, max(abs(Fraction(float(y)) - lo), abs(hi - Fraction(float(y)))) / lo)
    assert worst <= BUDGET, float(worst) * 2**53
    assert worst > Fraction(1, 2**56)  # the measurement sees rounding at all


def test_the_log_fast_path_stays_within_its_error_budget():
    y_of = _unrounded(fast.log_elem)
    rng = np.random.default_rng(12)
    us = rng.integers(1, 0x7F800000, 3000).tolist()
    one = 0x3F800000
    us += list(range(one - 3000, one)) + list(range(one + 1, one + 3000))  # next to 1: cancellation
    us += [(j << 16) + d for j in range(0x3F00, 0x3FFF, 3) for d in (0, 1, 0xFFFF)]  # cell edges
    worst = Fraction(0)
    for u in us:
        if u == one:
            continue
        y, _ = y_of(u)
        lo, hi = spec.log_interval(bits_to_f32(u), 120)
        mag = min(abs(lo), abs(hi))
        worst = max(worst, max(abs(Fraction(float(y)) - lo), abs(hi - Fraction(float(y)))) / mag)
    assert worst <= BUDGET, float(worst) * 2**53
    assert worst > Fraction(1, 2**56)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_special_values_give_the_contract_patterns_on_every_cpu_backend(backend):
    available(backend)
    xs = np.array(list(SPECIAL_EXP), np.uint32).view(np.float32)
    assert mm.expf(xs, backend=backend).view(np.uint32).tolist() == list(SPECIAL_EXP.values())
    xs = np.array(list(SPECIAL_LOG), np.uint32).view(np.float32)
    assert mm.logf(xs, backend=backend).view(np.uint32).tolist() == list(SPECIAL_LOG.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True), min_size=1, max_size=20))
def test_cpu_numba_expf_and_logf_equal_the_oracle_on_arbitrary_float32(values):
    x = np.array(values, np.float32)
    for fn, exact in ((mm.expf, spec.expf_bits), (mm.logf, spec.logf_bits)):
        got = fn(x, backend="cpu-numba").view(np.uint32).tolist()
        assert got == [exact(u) for u in x.view(np.uint32).tolist()]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_cpu_numba_equals_the_oracle_on_arbitrary_bit_patterns(u):
    x = np.array([u], np.uint32).view(np.float32)
    assert mm.expf(x).view(np.uint32)[0] == spec.expf_bits(u)
    assert mm.logf(x).view(np.uint32)[0] == spec.logf_bits(u)


def test_finish_gives_undecided_slots_the_oracle_value_and_leaves_the_rest():
    x = np.float32([0.5, 1.5, -3.0])
    out = mm.expf(x)
    before = out.copy()
    out.view(np.uint32)[1] = UNDECIDED
    assert finish("expf", x, out, 1) == 1
    assert out.view(np.uint32).tolist() == before.view(np.uint32).tolist()
    assert out.view(np.uint32)[1] == spec.expf_bits(f32_to_bits(1.5))


def test_the_result_keeps_the_input_shape_and_the_input_is_untouched():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    keep = x.copy()
    assert mm.logf(x).shape == (3, 4)
    assert (x == keep).all()


@pytest.mark.parametrize("bad,option", [
    (np.zeros(3, np.float64), "x"), (np.zeros(0, np.float32), "x"), ([1.0, 2.0], "x"),
])
def test_other_buffers_are_refused_by_name(bad, option):
    with pytest.raises(Refusal) as e:
        mm.expf(bad)
    assert e.value.entry_point == "mojolike.math.expf" and e.value.option == option


def test_unknown_keywords_are_refused_by_name():
    with pytest.raises(Refusal) as e:
        mm.logf(np.float32([1.0]), out=None)
    assert "out" in e.value.option


def test_the_kernel_leaves_exactly_the_known_hard_inputs_undecided_and_the_api_finishes_them():
    from mojolike.contracts.crmath import HARD_EXP, HARD_LOG
    k = fast.load("identical")
    for name, hard, exact in (("expf", HARD_EXP, spec.expf_bits), ("logf", HARD_LOG, spec.logf_bits)):
        x = np.array(hard, np.uint32).view(np.float32)
        out = np.empty_like(x)
        assert getattr(k, f"{name}_into")(x, out) == len(hard)
        assert (out.view(np.uint32) == UNDECIDED).all()
        got = getattr(mm, name)(x).view(np.uint32).tolist()
        assert got == [exact(u) for u in hard]
