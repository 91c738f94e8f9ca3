"""The correctly rounded expf/logf/sinpif/cospif: the oracle, the fast path's error budget, the public API."""
from __future__ import annotations

import math
import types
from fractions import Fraction

import numpy as np
import pytest
from conftest import CPU_BACKENDS, available
from hypothesis import given, settings
from hypothesis import strategies as st
from mojolike.native import crmath as fast
from mojolike.oracles import crmath as spec
from mojolike.oracles.f32 import bits_to_f32, f32_to_bits, round_fraction

import mojolike.math as mm
from mojolike import Refusal
from mojolike.ops.crmath import UNDECIDED, finish

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

SPECIAL_SINPI = {
    0x00000000: 0x00000000, 0x80000000: 0x80000000,  # +-0 keep their sign
    0x7F800000: 0x7FC00000, 0xFF800000: 0x7FC00000,  # sin(pi inf): the default NaN
    0x7F800001: 0x7FC00001, 0xFFC01234: 0xFFC01234,  # NaNs quieted, payload and sign kept
    0x3F800000: 0x00000000, 0xBF800000: 0x80000000,  # sinpi(n) = +0 for n > 0, -0 for n < 0
    0x40000000: 0x00000000, 0xC0000000: 0x80000000, 0x40400000: 0x00000000, 0xC0400000: 0x80000000,
    0x4B000001: 0x00000000, 0xCB000001: 0x80000000,  # 2^23 + 1, odd
    0x4B800000: 0x00000000, 0xCB800000: 0x80000000, 0x7F7FFFFF: 0x00000000, 0xFF7FFFFF: 0x80000000,
    0x3F000000: 0x3F800000, 0xBF000000: 0xBF800000,  # sinpi(+-1/2) = +-1
    0x3FC00000: 0xBF800000, 0xBFC00000: 0x3F800000, 0x40200000: 0x3F800000,  # 3/2, -3/2, 5/2
    0x4A800001: 0x3F800000,  # 2^22 + 1/2: 2x = 2^23 + 1 = 1 mod 4, so sin = +1
    0x3E800000: 0x3F3504F3, 0xBE800000: 0xBF3504F3,  # sin(pi/4) = sqrt(2)/2
    0x00000001: 0x00000003, 0x80000001: 0x80000003,  # pi 2^-149 rounds to 3 2^-149
}
SPECIAL_COSPI = {
    0x00000000: 0x3F800000, 0x80000000: 0x3F800000,  # cospi(+-0) = 1
    0x7F800000: 0x7FC00000, 0xFF800000: 0x7FC00000,
    0x7F800001: 0x7FC00001, 0xFFC01234: 0xFFC01234,
    0x3F000000: 0x00000000, 0xBF000000: 0x00000000,  # cospi(n + 1/2) = +0 always
    0x3FC00000: 0x00000000, 0xBFC00000: 0x00000000, 0x4A800001: 0x00000000,
    0x3F800000: 0xBF800000, 0xBF800000: 0xBF800000, 0x40000000: 0x3F800000,  # -1, -1, 1
    0x4B000001: 0xBF800000, 0xCB000001: 0xBF800000, 0x4B000002: 0x3F800000,  # odd, odd, even
    0x4B800000: 0x3F800000, 0x7F7FFFFF: 0x3F800000, 0xFF7FFFFF: 0x3F800000,  # >= 2^24: even
    0x3E800000: 0x3F3504F3, 0x3F400000: 0xBF3504F3,  # cos(pi/4), cos(3 pi/4)
    0x00000001: 0x3F800000,
}


def test_the_oracle_gives_the_c99_special_values():
    for u, want in SPECIAL_EXP.items():
        assert spec.expf_bits(u) == want, hex(u)
    for u, want in SPECIAL_LOG.items():
        assert spec.logf_bits(u) == want, hex(u)


def test_the_oracle_gives_the_c23_sinpi_and_cospi_special_values():
    for u, want in SPECIAL_SINPI.items():
        assert spec.sinpif_bits(u) == want, hex(u)
    for u, want in SPECIAL_COSPI.items():
        assert spec.cospif_bits(u) == want, hex(u)


def test_the_oracle_sinpi_is_odd_and_cospi_even_bit_for_bit():
    rng = np.random.default_rng(8)
    for u in rng.integers(0, 2**31, 500).tolist() + [0x3F000000 + d for d in range(-50, 50)]:
        if (u & 0x7F800000) == 0x7F800000:
            continue
        assert spec.sinpif_bits(u | 0x80000000) == spec.sinpif_bits(u) ^ 0x80000000, hex(u)
        assert spec.cospif_bits(u | 0x80000000) == spec.cospif_bits(u), hex(u)


def _reduced_sin_cos(x: float, cos: bool) -> float:
    """sin(pi x) or cos(pi x) in binary64 with x = n/2 + r reduced exactly (for the independent check)."""
    n = math.floor(2 * x + 0.5)  # exact for binary32 x
    r = x - n / 2  # exact, |r| <= 1/4
    q = (n + 1) % 4 if cos else n % 4
    s, c = math.sin(math.pi * r), math.cos(math.pi * r)
    return (s, c, -s, -c)[q]


def test_the_oracle_sinpi_and_cospi_round_an_independent_binary64_value():
    # math.sin/cos of pi r after an exact reduction: a few ulps of error relative to the value
    # (r != 0), too little to cross a binary32 midpoint except near one, where the check abstains
    rng = np.random.default_rng(9)
    xs = rng.uniform(-4, 4, 1500).astype(np.float32).tolist()
    xs += [bits_to_f32(u) for u in rng.integers(0, 2**32, 1500).tolist()]
    checked = 0
    for x in xs:
        if not math.isfinite(x):
            continue
        for fn, cos in ((spec.sinpif, False), (spec.cospif, True)):
            z = _reduced_sin_cos(x, cos)
            if 2 * x == math.floor(2 * x):
                continue  # exact points: the special-value test
            lo, hi = z - abs(z) * 2**-48, z + abs(z) * 2**-48
            if round_fraction(Fraction(lo)) == round_fraction(Fraction(hi)):
                assert fn(x) == round_fraction(Fraction(z)), (fn.__name__, x)
                checked += 1
    assert checked > 2500


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
    for x in np.float32([0.1, -0.3, 1e-30, 2.0**-149, 3.75, 1000.2, 2.0**21 + 0.25]).tolist():
        for iv, cos in ((spec.sinpi_interval, False), (spec.cospi_interval, True)):
            lo, hi = iv(x, 120)
            assert 0 < (hi - lo) / abs(lo) < Fraction(1, 2**100), (x, cos)
            z = _reduced_sin_cos(x, cos)
            assert abs(float(lo) - z) <= 4 * math.ulp(z)
    assert spec.sinpi_interval(2.5) == (1, 1) and spec.cospi_interval(-3.0) == (-1, -1)


def _unrounded(fn):
    """The kernel's element function returning its binary64 y (no rounding test)."""
    env = dict(fn.__globals__, narrow=float, ERR=0.0)
    # the pieces sinpi and cospi call are dispatchers in the module: run their Python sources
    # in the same unrounded globals instead
    for name, piece in getattr(fast, "PI_PY", {}).items():
        env[name] = types.FunctionType(piece.__code__, env, name)
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


def _pi_inputs() -> list[float]:
    rng = np.random.default_rng(13)
    xs = rng.uniform(-4, 4, 2500).astype(np.float32).tolist()
    # next to the multiples of 1/4: the reduction switches quadrant (r = +-1/4) or the value is
    # smallest (r near 0, where sin(pi r) needs its relative accuracy)
    for j in range(-16, 17):
        u = f32_to_bits(j / 4)
        for d in list(range(1, 20)) + [100, 1000, 30000]:
            for v in (u + d, u - d):
                if 0 <= v < 2**32 and (v ^ u) >> 31 == 0 and v != 0x80000000:
                    xs.append(bits_to_f32(v))
    xs += [s * 2.0 ** -e for s in (1, -1) for e in range(2, 150, 3)]  # tiny: sin(pi x) ~ pi x
    xs += (rng.integers(1, 2**23, 300) * 0.25 + 2.0**21).tolist()  # large: multiples of 1/4 ...
    xs += (rng.uniform(2.0**10, 2.0**21, 300)).tolist()  # ... and below
    xs = np.float32(xs).tolist()
    return [x for x in xs if 2 * x != math.floor(2 * x)]  # the exact points are not measured


@pytest.mark.parametrize("name", ["sinpi", "cospi"])
def test_the_sinpi_and_cospi_fast_paths_stay_within_their_error_budget(name):
    y_of = _unrounded(getattr(fast, f"{name}_elem"))
    interval = getattr(spec, f"{name}_interval")
    worst = Fraction(0)
    for x in _pi_inputs():
        y, _ = y_of(np.float32(x))
        lo, hi = interval(x, 120)
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
    xs = np.array(list(SPECIAL_SINPI), np.uint32).view(np.float32)
    assert mm.sinpif(xs, backend=backend).view(np.uint32).tolist() == list(SPECIAL_SINPI.values())
    xs = np.array(list(SPECIAL_COSPI), np.uint32).view(np.float32)
    assert mm.cospif(xs, backend=backend).view(np.uint32).tolist() == list(SPECIAL_COSPI.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True), min_size=1, max_size=20))
def test_cpu_numba_expf_and_logf_equal_the_oracle_on_arbitrary_float32(values):
    x = np.array(values, np.float32)
    for fn, exact in ((mm.expf, spec.expf_bits), (mm.logf, spec.logf_bits)):
        got = fn(x, backend="cpu-numba").view(np.uint32).tolist()
        assert got == [exact(u) for u in x.view(np.uint32).tolist()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True), min_size=1, max_size=20))
def test_cpu_numba_sinpif_and_cospif_equal_the_oracle_on_arbitrary_float32(values):
    x = np.array(values, np.float32)
    for fn, exact in ((mm.sinpif, spec.sinpif_bits), (mm.cospif, spec.cospif_bits)):
        got = fn(x, backend="cpu-numba").view(np.uint32).tolist()
        assert got == [exact(u) for u in x.view(np.uint32).tolist()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-4.0, 4.0, width=32), min_size=1, max_size=20))
def test_cpu_numba_sinpif_and_cospif_equal_the_oracle_between_minus_4_and_4(values):
    x = np.array(values, np.float32)
    for fn, exact in ((mm.sinpif, spec.sinpif_bits), (mm.cospif, spec.cospif_bits)):
        got = fn(x, backend="cpu-numba").view(np.uint32).tolist()
        assert got == [exact(u) for u in x.view(np.uint32).tolist()]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_cpu_numba_equals_the_oracle_on_arbitrary_bit_patterns(u):
    x = np.array([u], np.uint32).view(np.float32)
    assert mm.expf(x).view(np.uint32)[0] == spec.expf_bits(u)
    assert mm.logf(x).view(np.uint32)[0] == spec.logf_bits(u)
    assert mm.sinpif(x).view(np.uint32)[0] == spec.sinpif_bits(u)
    assert mm.cospif(x).view(np.uint32)[0] == spec.cospif_bits(u)


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
    from mojolike.contracts.crmath import HARD_COSPI, HARD_EXP, HARD_LOG, HARD_SINPI
    k = fast.load("identical")
    for name, hard, exact in (("expf", HARD_EXP, spec.expf_bits), ("logf", HARD_LOG, spec.logf_bits),
                              ("sinpif", HARD_SINPI, spec.sinpif_bits),
                              ("cospif", HARD_COSPI, spec.cospif_bits)):
        x = np.array(hard, np.uint32).view(np.float32)
        out = np.empty_like(x)
        assert getattr(k, f"{name}_into")(x, out) == len(hard)
        assert (out.view(np.uint32) == UNDECIDED).all()
        got = getattr(mm, name)(x).view(np.uint32).tolist()
        assert got == [exact(u) for u in hard]
