"""The schedule oracle: the formulas, an independent check, the fast route's error budget."""
from __future__ import annotations

import importlib.util
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mojolike
from mojolike.oracles import schedule as spec
from mojolike.oracles.f32 import f32_to_bits, round_float, round_fraction

from conftest import available

CONSTANT, LINEAR, COSINE = spec.CONSTANT, spec.LINEAR, spec.COSINE
P01 = round_float(0.1)


def _kernel_backend(backend: str, module: str):
    missing = importlib.util.find_spec(module) is None
    return pytest.param(backend, marks=pytest.mark.skipif(
        missing or not available(backend),
        reason=f"{module} (the {backend} schedule kernels) is missing" if missing else
        f"backend {backend} cannot run here"))


BACKENDS = ["oracle", _kernel_backend("cpu-numba", "mojolike.native.schedule"),
            _kernel_backend("cpu-cffi", "mojolike.native.c.schedule")]


def test_warmup_steps_rise_linearly_to_the_peak():
    assert [spec.value(LINEAR, 1.0, 0.0, 4, 10, t) for t in range(1, 5)] == [0.25, 0.5, 0.75, 1.0]
    assert [spec.value(COSINE, 1.0, 0.5, 3, 10, t) for t in range(1, 4)] == [
        round_fraction(Fraction(1, 3)), round_fraction(Fraction(2, 3)), 1.0]
    assert spec.value(CONSTANT, P01, 0.0, 7, 0, 3) == round_fraction(Fraction(P01) * 3 / 7)


def test_the_constant_schedule_is_the_peak_after_warmup_whatever_total_and_min():
    for t in (1, 2, 10**6, 2**40):
        assert spec.value(CONSTANT, P01, 0.5, 0, 0, t) == P01
    assert spec.value(CONSTANT, P01, 0.5, 2, 3, 100) == P01


def test_linear_decay_passes_through_the_exact_midpoint():
    assert [spec.value(LINEAR, 1.0, 0.0, 0, 4, t) for t in range(1, 6)] == [0.75, 0.5, 0.25, 0.0, 0.0]
    # W = 2, T = 6: step 4 is halfway between P and M
    assert spec.value(LINEAR, P01, 0.25, 2, 6, 4) == round_fraction((Fraction(P01) + Fraction(0.25)) / 2)


def test_cosine_at_one_third_one_half_and_two_thirds_is_rational_and_rounded_once():
    # W = 0, T = 6: steps 2, 3, 4 are p = 1/3, 1/2, 2/3, cos = 1/2, 0, -1/2
    P, M = P01, round_float(0.01)
    want = [Fraction(M) + (Fraction(P) - Fraction(M)) * f
            for f in (Fraction(3, 4), Fraction(1, 2), Fraction(1, 4))]
    assert [spec.value(COSINE, P, M, 0, 6, t) for t in (2, 3, 4)] == [round_fraction(w) for w in want]
    assert [spec.interval(COSINE, P, M, 0, 6, t)[0] for t in (2, 3, 4)] == want
    assert spec.value(COSINE, 1.0, 0.25, 10, 16, 13) == 0.625  # p = 1/2 after a warmup


def test_from_total_steps_on_every_decay_is_the_minimum():
    for kind in (LINEAR, COSINE):
        for t in (10, 11, 20, 2**40):
            assert spec.value(kind, P01, 0.125, 3, 10, t) == 0.125
    assert spec.value(COSINE, P01, 0.0, 0, 10, 10) == 0.0


def test_with_warmup_equal_to_total_the_last_warmup_step_is_the_peak_then_the_minimum():
    for kind in (LINEAR, COSINE):
        assert [spec.value(kind, 1.0, 0.125, 4, 4, t) for t in range(1, 7)] == [
            0.25, 0.5, 0.75, 1.0, 0.125, 0.125]


def test_min_above_peak_makes_the_rate_rise():
    vals = [spec.value(COSINE, 0.5, 1.0, 0, 20, t) for t in range(1, 21)]
    assert vals == sorted(vals) and vals[-1] == 1.0 and vals[0] > 0.5


def test_cos_pi_enclosure_contains_math_cos_and_is_narrow():
    for a, b in ((1, 4), (1, 7), (5, 7), (3, 1000), (999, 1000), (1, 2**40), (2**40 - 1, 2**40)):
        lo, hi = spec.cos_pi_scaled(a, b, 120)
        assert hi - lo < 2**8
        c = math.cos(math.pi * a / b)
        assert Fraction(lo, 2**120) - Fraction(2**-50) <= Fraction(c) <= Fraction(hi, 2**120) + Fraction(2**-50)


def _independent(kind, P, M, W, T, t):
    """(z, err): the exact value within err, in binary64 with libm sin (sin^2 avoids 1 + cos cancelling)."""
    D = P - M  # both binary32: exact in binary64 unless the exponents are far apart (tracked in err)
    u = (T - t) / (T - W)
    f = math.sin(math.pi * u / 2) ** 2 if kind == COSINE else u
    z = M + D * f
    return z, 2.0**-45 * (abs(M) + abs(D * f))  # libm sin within 1 ulp: 2^-45 is 256 units of 2^-53


def test_the_oracle_agrees_with_an_independent_binary64_evaluation_wherever_that_is_decided():
    rng = np.random.default_rng(11)
    decided = 0
    for _ in range(400):
        P = round_float(10.0 ** rng.uniform(-30, 10))
        M = round_float(P * rng.choice([0.0, rng.uniform(0, 2), 10.0 ** rng.uniform(-8, 0)]))
        W = int(rng.choice([0, 1, rng.integers(2, 1000)]))
        T = W + int(rng.choice([rng.integers(1, 50), rng.integers(50, 10**6), rng.integers(1, 2**39)]))
        t = int(rng.integers(W + 1, T)) if T > W + 1 else W + 1
        for kind in (LINEAR, COSINE):
            z, err = _independent(kind, P, M, W, T, t)
            lo, hi = round_fraction(Fraction(z - err)), round_fraction(Fraction(z + err))
            if lo == hi:
                decided += 1
                assert spec.value(kind, P, M, W, T, t) == lo, (kind, P, M, W, T, t)
    assert decided > 700


def test_a_value_still_undecided_at_the_last_precision_raises_instead_of_guessing(monkeypatch):
    # M = 0 and the last step before T = 2^40: 1 + cos(pi p) cancels about 80 bits
    args = (COSINE, 1.0, 0.0, 0, 2**40, 2**40 - 1)
    assert spec.value(*args) > 0.0
    monkeypatch.setattr(spec, "MAX_BITS", 64)
    with pytest.raises(spec.Undecided, match="undecided"):
        spec.value(*args)


def _random_case(rng):
    """A configuration and a step, weighted towards the fast route's hard corners."""
    P = round_float(10.0 ** rng.uniform(-30, 10))
    r = rng.integers(5)
    M = round_float(P * [0.0, rng.uniform(0, 1), rng.uniform(1, 2), 10.0 ** rng.uniform(-12, -4),
                         10.0 ** rng.uniform(4, 12)][r])
    W = int(rng.choice([0, 1, rng.integers(2, 100), rng.integers(1, 2**39)]))
    T = W + int(rng.choice([1, 2, 3, rng.integers(4, 1000), rng.integers(1000, 2**39)]))
    n = T - W
    t = int(rng.choice([W + 1, T - 1, W + max(1, n // 2), W + max(1, n // 2 + 1), W + max(1, n // 2 - 1),
                        rng.integers(W + 1, T) if n > 1 else W + 1, rng.integers(1, W + 1) if W else 1]))
    return P, M, W, T, max(1, min(t, T + 1))


def test_the_fast_route_is_within_a_sixteenth_of_its_error_bound():
    """|v - exact| <= E / 16 = 2^-48 (|M| + |D f|): the contract's 20x margin holds."""
    rng = np.random.default_rng(2024)
    worst = (-1.0, ())
    for _ in range(4000):
        P, M, W, T, t = _random_case(rng)
        for kind in (CONSTANT, LINEAR, COSINE):
            v, E = spec.fast_value(kind, P, M, W, T, t)
            lo, hi = spec.interval(kind, P, M, W, T, t, bits=200)
            err = max(abs(Fraction(v) - lo), abs(Fraction(v) - hi))
            if E == 0.0:
                assert lo == hi == Fraction(v), (kind, P, M, W, T, t)
                continue
            assert err <= Fraction(E) / 16, (kind, P, M, W, T, t, v, E)
            ratio = float(err / (Fraction(E) * 2**44) * 2**53)  # in units of 2^-53 of |M| + |D f|
            worst = max(worst, (ratio, (kind, P, M, W, T, t)))
    print(f"\nfast route: largest |v - exact| = {worst[0]:.2f} units of 2^-53 of (|M| + |D f|), "
          f"at {worst[1]}")
    assert worst[0] < 24  # the contract's stated analysis


def test_the_fast_route_decides_almost_every_step_of_a_typical_schedule():
    P, M = round_float(3e-4), round_float(3e-5)
    undecided = 0
    for t in range(1, 2001):
        v, E = spec.fast_value(COSINE, P, M, 100, 2000, t)
        undecided += round_float(v - E) != round_float(v + E)
    assert undecided <= 2


@st.composite
def configurations(draw):
    P = round_float(draw(st.floats(1e-30, 1e10)))
    M = round_float(draw(st.floats(0.0, 2 * P)))
    W = draw(st.integers(0, 50))
    T = draw(st.integers(max(1, W), W + 200))
    t = draw(st.integers(1, T + 10))
    kind = draw(st.sampled_from(["constant", "linear", "cosine"]))
    return kind, P, M, W, T, t


_CLASSES = {"constant": mojolike.ConstantLR, "linear": mojolike.WarmupLinearLR,
            "cosine": mojolike.WarmupCosineLR}


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(case=configurations())
def test_lr_at_equals_the_oracle_on_random_configurations(backend, case):
    kind, P, M, W, T, t = case
    s = _CLASSES[kind](P, warmup_steps=W, total_steps=T, min_lr=M, backend=backend)
    want = spec.value(spec.KINDS.index(kind), P, M, W, T if kind != "constant" else 0, t)
    assert f32_to_bits(s.lr_at(t)) == f32_to_bits(want), (case, s.lr_at(t), want)
    assert s.bits_at(t) == f32_to_bits(want)
