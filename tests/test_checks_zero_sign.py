"""checks.real32 keeps the sign of zero: a -0.0 the caller passes reaches the arithmetic as -0.0
(torch takes a Python -0.0 as -0.0), and ranges that start at 0 accept it (-0.0 equals 0)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from mojolike import Refusal
from mojolike.core import checks

E = "mojolike.test"


def sign_bit(x: float) -> bool:
    return math.copysign(1.0, x) < 0


@pytest.mark.parametrize("v", [-0.0, np.float32(-0.0), np.float64(-0.0), -1e-46,
                               np.float64(-1e-50), Fraction(-1, 10**60)], ids=repr)
def test_real32_keeps_a_negative_zero_and_a_negative_value_that_rounds_to_zero(v):
    r = checks.real32(E, "x", v)
    assert r == 0.0 and sign_bit(r), repr(r)
    assert type(r) is float


@pytest.mark.parametrize("v", [0.0, np.float32(0.0), 0, np.int64(0), Fraction(0), 1e-46],
                         ids=repr)
def test_real32_gives_plus_zero_for_positive_zeros_and_for_integer_and_fraction_zeros(v):
    r = checks.real32(E, "x", v)  # an integer or a fraction has no signed zero
    assert r == 0.0 and not sign_bit(r), repr(r)


def test_a_range_from_zero_accepts_minus_zero_and_keeps_its_sign():
    r = checks.real32(E, "lr", -0.0, low=0.0)
    assert sign_bit(r)
    r = checks.real32(E, "p", np.float32(-0.0), low=0.0, high=1.0, high_open=True)
    assert sign_bit(r)
    with pytest.raises(Refusal) as e:
        checks.real32(E, "lr", -1e-30, low=0.0)
    assert e.value.option == "lr" and ">= 0.0" in str(e.value)


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba", "cpu-cffi"])
def test_a_schedule_with_a_negative_zero_rate_gives_the_oracles_plus_zero_on_every_backend(backend):
    import mojolike
    s = mojolike.WarmupCosineLR(1.0, warmup_steps=2, total_steps=8, min_lr=-0.0, backend=backend)
    want = mojolike.WarmupCosineLR(1.0, warmup_steps=2, total_steps=8, min_lr=0.0,
                                   backend="oracle").lr_values(11)
    assert s.lr_values(11).view(np.uint32).tolist() == want.view(np.uint32).tolist()


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba", "cpu-cffi"])
def test_normal_takes_a_negative_zero_mean_as_plus_zero_as_the_rng_contract_says(backend):
    import mojolike
    got = mojolike.Generator(3, backend=backend).normal(8, -0.0, 0.0)
    assert not np.signbit(got).any(), got.view(np.uint32)
