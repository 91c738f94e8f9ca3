"""The public schedules: refusals, configs, lr_at / lr_values / bits_at, optimizers, torch."""
from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
from conftest import assert_same_bits, available
from mojolike.oracles import schedule as spec
from mojolike.oracles.f32 import f32_to_bits, round_float

import mojolike
from mojolike import ConstantLR, Refusal, WarmupCosineLR, WarmupLinearLR
from mojolike.ops.schedule import LRSchedule


def _kernel_backend(backend: str, module: str):
    missing = importlib.util.find_spec(module) is None
    return pytest.param(backend, marks=pytest.mark.skipif(
        missing or not available(backend),
        reason=f"{module} (the {backend} schedule kernels) is missing" if missing else
        f"backend {backend} cannot run here"))


BACKENDS = ["oracle", _kernel_backend("cpu-numba", "mojolike.native.schedule"),
            _kernel_backend("cpu-cffi", "mojolike.native.c.schedule")]
ORACLE = dict(backend="oracle")


def refused(fn, *words):
    with pytest.raises(Refusal) as e:
        fn()
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return e.value


# -- refusals (clause 4) ------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1e-3, -1, math.nan, math.inf, 1e39, 10**40, "0.1", True, None])
@pytest.mark.parametrize("name", ["peak_lr", "min_lr"])
def test_a_rate_that_is_negative_nan_infinite_or_overflows_binary32_is_refused_by_name(name, bad):
    kw = dict(peak_lr=1e-3, total_steps=10, **ORACLE)
    kw[name] = bad
    e = refused(lambda: WarmupCosineLR(**kw), "mojolike.WarmupCosineLR", name)
    assert e.option.startswith(name)


def test_a_rate_that_rounds_to_the_largest_binary32_value_is_accepted():
    assert ConstantLR(3.4028235e38, **ORACLE).peak_lr == 3.4028234663852886e38


@pytest.mark.parametrize("bad", [-1, 1.5, 2.0, True, "3", 2**40 + 1])
def test_warmup_steps_that_is_not_an_integer_from_0_to_2_to_the_40_is_refused_by_name(bad):
    refused(lambda: WarmupLinearLR(0.1, warmup_steps=bad, total_steps=2**40, **ORACLE),
            "mojolike.WarmupLinearLR", "warmup_steps")


@pytest.mark.parametrize("cls", [WarmupLinearLR, WarmupCosineLR])
def test_a_decay_without_total_steps_is_refused_by_name(cls):
    refused(lambda: cls(0.1, warmup_steps=5, **ORACLE), cls.__name__, "total_steps", "missing")


@pytest.mark.parametrize("W,T", [(0, 0), (5, 4), (0, -3), (0, 10.0), (0, 2**40 + 1), (0, True)])
@pytest.mark.parametrize("cls", [ConstantLR, WarmupLinearLR, WarmupCosineLR])
def test_total_steps_not_an_integer_at_least_max_1_warmup_is_refused_by_name(cls, W, T):
    refused(lambda: cls(0.1, warmup_steps=W, total_steps=T, **ORACLE), "total_steps")


@pytest.mark.parametrize("bad", [0, -1, 1.0, True, "3", np.float64(2.0), 2**40 + 1])
def test_a_step_that_is_not_an_integer_from_1_to_2_to_the_40_is_refused_by_name(bad):
    s = WarmupCosineLR(0.1, total_steps=10, **ORACLE)
    s.lr_at(1)  # a block is cached: refusals still come for steps the block does not hold
    refused(lambda: s.lr_at(bad), "mojolike.WarmupCosineLR.lr_at", "t=")
    refused(lambda: s.bits_at(bad), "t=")


@pytest.mark.parametrize("bad", [0, -5, 2.0, True, None, 2**40 + 1])
def test_a_count_that_is_not_an_integer_from_1_to_2_to_the_40_is_refused_by_name(bad):
    s = ConstantLR(0.1, **ORACLE)
    refused(lambda: s.lr_values(bad), "mojolike.ConstantLR.lr_values", "n=")


def test_an_unknown_keyword_is_refused_by_name():
    refused(lambda: WarmupCosineLR(0.1, total_steps=10, eta_min=0.0, **ORACLE), "eta_min")
    refused(lambda: ConstantLR(0.1, last_epoch=-1, **ORACLE), "last_epoch")


def test_an_unknown_backend_is_refused_by_name():
    refused(lambda: ConstantLR(0.1, backend="tpu"), "backend='tpu'")


def test_an_unknown_config_key_a_wrong_kind_or_a_missing_peak_is_refused_by_name():
    d = WarmupCosineLR(0.1, total_steps=10, **ORACLE).config()
    refused(lambda: LRSchedule.from_config({**d, "last_epoch": -1}, **ORACLE), "last_epoch is not a config key")
    refused(lambda: LRSchedule.from_config({**d, "kind": "step"}, **ORACLE), "kind='step'")
    refused(lambda: WarmupLinearLR.from_config(d, **ORACLE), "kind='cosine'", "WarmupCosineLR")
    refused(lambda: LRSchedule.from_config({"kind": "constant"}, **ORACLE), "peak_lr", "missing")
    refused(lambda: LRSchedule.from_config([("kind", "constant")], **ORACLE), "dict")


# -- configs ----------------------------------------------------------------------------------

SCHEDULES = [
    lambda b: ConstantLR(0.1, warmup_steps=7, backend=b),
    lambda b: ConstantLR(0.1, warmup_steps=7, total_steps=9, min_lr=0.3, backend=b),
    lambda b: WarmupLinearLR(3e-4, warmup_steps=0, total_steps=1, min_lr=1e-5, backend=b),
    lambda b: WarmupLinearLR(3e-4, warmup_steps=5, total_steps=123, backend=b),
    lambda b: WarmupCosineLR(6e-4, warmup_steps=100, total_steps=5000, min_lr=6e-5, backend=b),
    lambda b: WarmupCosineLR(1e-30, warmup_steps=1, total_steps=2, min_lr=2e-30, backend=b),
    lambda b: WarmupCosineLR(1e10, warmup_steps=0, total_steps=9000, backend=b),
]


@pytest.mark.parametrize("make", SCHEDULES)
def test_config_round_trips_through_json_and_from_config(make):
    s = make("oracle")
    d = s.config()
    assert set(d) == {"kind", "peak_lr", "warmup_steps", "total_steps", "min_lr"}
    assert d["peak_lr"] == round_float(d["peak_lr"]) and d["min_lr"] == round_float(d["min_lr"])
    back = json.loads(json.dumps(d))
    for rebuilt in (type(s).from_config(back, **ORACLE), LRSchedule.from_config(back, **ORACLE)):
        assert type(rebuilt) is type(s) and rebuilt.config() == d
        assert [rebuilt.bits_at(t) for t in (1, 2, 50)] == [s.bits_at(t) for t in (1, 2, 50)]


@pytest.mark.parametrize("make", SCHEDULES)
def test_repr_names_the_schedule_and_evaluates_to_the_same_config(make):
    s = make("oracle")
    names = {c.__name__: c for c in (ConstantLR, WarmupLinearLR, WarmupCosineLR)}
    assert repr(s).startswith(type(s).__name__ + "(")
    assert eval(repr(s), names).config() == s.config()


def test_rates_are_kept_as_their_binary32_values():
    s = WarmupCosineLR(0.1, total_steps=10, min_lr=1e-5, **ORACLE)
    assert s.peak_lr == float(np.float32(0.1)) and s.min_lr == float(np.float32(1e-5))
    assert ConstantLR(-0.0, **ORACLE).bits_at(1) == 0  # +0, not -0


# -- values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", SCHEDULES)
def test_lr_values_equals_lr_at_over_consecutive_and_scattered_steps(make, backend):
    s = make(backend)
    n = 9000  # more than two blocks of 4096
    values = s.lr_values(n)
    assert values.dtype == np.float32 and values.shape == (n,)
    assert_same_bits([s.lr_at(t) for t in range(1, n + 1)], values, "consecutive")
    steps = np.random.default_rng(3).permutation(np.arange(1, n + 1))[:500].tolist()
    fresh = make(backend)
    assert_same_bits([fresh.lr_at(t) for t in steps], values[np.array(steps) - 1], "scattered")


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_value_of_a_long_cosine_schedule_equals_the_oracle(backend):
    P, M, W, T = round_float(6e-4), round_float(6e-5), 37, 1500
    s = WarmupCosineLR(P, warmup_steps=W, total_steps=T, min_lr=M, backend=backend)
    want = np.float32([spec.value(spec.COSINE, P, M, W, T, t) for t in range(1, T + 11)])
    assert_same_bits(s.lr_values(T + 10), want, "cosine")


def test_lr_at_returns_python_floats_and_takes_numpy_integers():
    s = WarmupLinearLR(1.0, warmup_steps=4, total_steps=8, **ORACLE)
    assert type(s.lr_at(1)) is float and type(s.lr_at(np.int64(5000))) is float
    assert s.lr_at(np.int64(2)) == s.lr_at(2) == 0.5


def test_bits_at_is_the_bit_pattern_of_lr_at():
    assert ConstantLR(0.1, **ORACLE).bits_at(1) == 0x3DCCCCCD
    s = WarmupCosineLR(1.0, warmup_steps=3, total_steps=9, **ORACLE)
    assert [s.bits_at(t) for t in range(1, 11)] == [f32_to_bits(s.lr_at(t)) for t in range(1, 11)]
    assert s.bits_at(3) == 0x3F800000 and s.bits_at(9) == 0


def test_with_warmup_equal_to_total_the_warmup_ends_at_the_peak_then_the_minimum_holds():
    for cls in (WarmupLinearLR, WarmupCosineLR):
        s = cls(1.0, warmup_steps=4, total_steps=4, min_lr=0.125, **ORACLE)
        assert s.lr_values(7).tolist() == [0.25, 0.5, 0.75, 1.0, 0.125, 0.125, 0.125]
        assert s.lr_at(2**40) == 0.125


def test_steps_far_beyond_total_keep_the_minimum_and_constant_keeps_the_peak():
    assert WarmupCosineLR(0.5, total_steps=10, min_lr=0.25, **ORACLE).lr_at(2**40) == 0.25
    assert ConstantLR(0.5, warmup_steps=10, **ORACLE).lr_at(2**40) == 0.5


# -- optimizers -----------------------------------------------------------------------------------

def test_sgd_with_a_cosine_schedule_steps_with_the_schedules_rate_at_each_step():
    rng = np.random.default_rng(5)
    s = WarmupCosineLR(0.1, warmup_steps=3, total_steps=12, min_lr=0.01, **ORACLE)
    w0 = rng.standard_normal(37).astype(np.float32)
    scheduled, fixed = w0.copy(), w0.copy()
    a = mojolike.SGD(scheduled, lr=1.0, momentum=0.9, lr_schedule=s, **ORACLE)
    b = mojolike.SGD(fixed, lr=s.lr_at(1), momentum=0.9, **ORACLE)
    for t in range(1, 15):
        g = rng.standard_normal(37).astype(np.float32)
        b.lr = s.lr_at(t)  # the fixed-rate optimizer, told each step's rate by hand
        a.step(g.copy())
        b.step(g.copy())
        assert a.lr_ == s.lr_at(t)
        assert_same_bits(scheduled, fixed, f"step {t}")
    assert not np.array_equal(scheduled, w0)


# -- torch -----------------------------------------------------------------------------------

def _torch_lambda(P, M, W, T):
    """The same closed form as torch users write it: a factor of base_lr, libm cos, binary64."""
    def factor(epoch):  # torch's epoch 0 is the first step: t = epoch + 1
        t = epoch + 1
        if W and t <= W:
            return t / W
        if t >= T:
            return M / P
        p = (t - W) / (T - W)
        return M / P + (1 - M / P) * 0.5 * (1.0 + math.cos(math.pi * p))
    return factor


@pytest.mark.parametrize("M", [0.0, 3e-5])
def test_torch_lambda_lr_with_the_same_closed_form_agrees_within_one_binary32_ulp(M):
    """Within 1 ulp of binary32 at every step, the same bits at almost every step.

    torch computes the factor in binary64 with libm cos and rounds P * factor only
    when the rate is used: its value is within a few binary64 ulps of the exact one
    (1 + cos cancels near the end, but T - W = 900 keeps that error near 2^-34
    relative), so rounding it to binary32 can land on the neighbour of the correctly
    rounded value only when the exact value lies that close to a midpoint.
    """
    torch = pytest.importorskip("torch")
    P, W, T = round_float(3e-4), 100, 1000
    M = round_float(M)
    s = WarmupCosineLR(P, warmup_steps=W, total_steps=T, min_lr=M, **ORACLE)
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=P)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _torch_lambda(P, M, W, T))
    theirs = []
    for _ in range(T + 10):
        theirs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    ours = s.lr_values(T + 10).view(np.int32).astype(np.int64)
    rounded = np.float32(theirs).view(np.int32).astype(np.int64)  # binary64 -> nearest binary32
    gap = np.abs(ours - rounded)
    assert gap.max() <= 1, int(gap.argmax()) + 1
    assert (gap == 0).mean() >= 0.99, f"{int((gap != 0).sum())} of {T + 10} steps differ by 1 ulp"
