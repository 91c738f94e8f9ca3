"""Step controls of the optimizers: parameter groups, frozen parameters, grad_scale, the folded
clip, the update gate, get_total_norm, and state that round-trips them (contracts/step.md)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import mojolike

from conftest import assert_same_bits

BACKENDS = ["oracle", "cpu-numba", "cpu-cffi"]
WITH_SIM = BACKENDS + ["cuda-sim"]  # small tensors: the simulator is slow
SHAPES = [(37,), (5, 7), (1,), (70,)]


def tensors(seed: int, scale: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in SHAPES]


def grads_at(step: int) -> list[np.ndarray]:
    return tensors(100 + step, 0.3)


def copies(xs):
    return [None if x is None else x.copy() for x in xs]


@pytest.mark.parametrize("backend", WITH_SIM)
@pytest.mark.parametrize("kind,options", [
    ("SGD", [{"lr": 0.1, "momentum": 0.9}, {"lr": 0.02, "weight_decay": 0.1, "nesterov": True,
                                             "momentum": 0.5}]),
    ("Adam", [{"weight_decay": 0.1}, {"lr": 3e-3, "betas": (0.8, 0.9), "eps": 1e-6}]),
    ("AdamW", [{"weight_decay": 0.0}, {"lr": 1e-2, "maximize": True}]),
])
def test_each_group_steps_as_an_optimizer_of_its_own_would(backend, kind, options):
    ps = tensors(1)
    cls = getattr(mojolike, kind)
    opt = cls([{"params": ps[:2], **options[0]}, {"params": ps[2:], **options[1]}], lr=1e-3,
              backend=backend)
    alone = [tensors(1)[:2], tensors(1)[2:]]
    refs = [cls(alone[0], **{"lr": 1e-3, **options[0]}, backend=backend),
            cls(alone[1], **{"lr": 1e-3, **options[1]}, backend=backend)]
    for t in range(3):
        g = grads_at(t)
        opt.step(copies(g))
        refs[0].step(copies(g[:2]))
        refs[1].step(copies(g[2:]))
    for got, want in zip(ps, alone[0] + alone[1]):
        assert_same_bits(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_group_lr_changed_between_steps_takes_effect_at_the_next_step(backend):
    ps = tensors(2)
    opt = mojolike.Adam([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.01}], backend=backend)
    opt.step(grads_at(0))
    state = opt.state_dict()
    twin_ps = [p.copy() for p in ps]
    twin = mojolike.Adam([{"params": twin_ps[:1]}, {"params": twin_ps[1:], "lr": 0.02}],
                         backend=backend)
    twin.load_state_dict({**state, "param_groups": twin.state_dict()["param_groups"]})
    opt.param_groups[1]["lr"] = 0.02
    opt.step(grads_at(1))
    twin.step(grads_at(1))
    for a, b in zip(ps, twin_ps):
        assert_same_bits(a, b)


@pytest.mark.parametrize("gate", [True, False], ids=["stepped", "gated"])
def test_group_edits_between_steps_are_stored_as_the_constructor_stores_them(gate, tmp_path):
    ps = tensors(2)
    opt = mojolike.Adam([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.01}], backend="oracle")
    fresh = mojolike.Adam([{"params": tensors(2)[:1]},
                           {"params": tensors(2)[1:], "lr": np.float32(5e-4),
                            "betas": [np.float32(0.8), 0.9], "maximize": np.bool_(True)}],
                          backend="oracle")
    opt.step(grads_at(0))
    opt.param_groups[1].update(lr=np.float32(5e-4), betas=[np.float32(0.8), 0.9],
                               maximize=np.bool_(True))
    opt.step(grads_at(1), update_gate=gate)
    options = lambda g: {k: v for k, v in g.items() if k != "params"}
    assert options(opt.param_groups[1]) == options(fresh.param_groups[1])
    for key in ("lr", "betas", "maximize"):
        assert type(opt.param_groups[1][key]) is type(fresh.param_groups[1][key]), key
    assert type(opt.param_groups[1]["betas"][0]) is float
    mojolike.save_state(tmp_path / "edited", opt.state_dict())  # plain data: it writes
    assert mojolike.load_state(tmp_path / "edited")["param_groups"] == \
        opt.state_dict()["param_groups"]


def test_a_refused_step_leaves_group_edits_as_the_caller_wrote_them():
    ps = tensors(2)
    opt = mojolike.Adam([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.01}], backend="oracle")
    edit = np.float32(5e-4)
    opt.param_groups[1]["lr"] = edit
    bad = grads_at(0)
    bad[0][0] = np.float32(np.nan)
    with pytest.raises(mojolike.Refusal) as info:
        opt.step(bad)
    assert info.value.option == "grads" and opt.param_groups[1]["lr"] is edit and opt.t == 0
    del opt.param_groups[1]["eps"]
    with pytest.raises(mojolike.Refusal) as info:
        opt.step(grads_at(0))
    assert info.value.option == "param_groups[1].eps" and "missing" in str(info.value)


class Halving:
    def lr_at(self, t):
        return 0.1 / 2 ** (t - 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_group_schedule_sets_that_group_lr_at_each_step(backend):
    ps, alone = tensors(3), tensors(3)
    opt = mojolike.SGD([{"params": ps[:2], "lr_schedule": Halving()}, {"params": ps[2:]}], lr=0.05,
                       momentum=0.9, backend=backend)
    refs = [mojolike.SGD(alone[:2], momentum=0.9, lr_schedule=Halving(), backend=backend),
            mojolike.SGD(alone[2:], lr=0.05, momentum=0.9, backend=backend)]
    for t in range(4):
        g = grads_at(t)
        opt.step(copies(g))
        refs[0].step(copies(g[:2]))
        refs[1].step(copies(g[2:]))
    assert opt.lr_ == float(np.float32(0.1 / 8))  # the first group's rate at step 4, in binary32
    for a, b in zip(ps, alone):
        assert_same_bits(a, b)


@pytest.mark.parametrize("backend", WITH_SIM)
@pytest.mark.parametrize("kind", ["Adam", "AdamW", "SGD"])
def test_a_frozen_parameter_takes_no_step_and_keeps_its_own_step_count(backend, kind):
    cls = getattr(mojolike, kind)
    kw = {"lr": 0.01, "weight_decay": 0.1} | ({"momentum": 0.9} if kind == "SGD" else {})
    ps = tensors(4)
    opt = cls(ps, backend=backend, **kw)
    alone = [[p] for p in tensors(4)]
    refs = [cls(a, backend=backend, **kw) for a in alone]
    plan = [[0, 1, 2, 3], [0, 2], [1, 2, 3], [3]]  # which tensors have a gradient at each step
    for t, present in enumerate(plan):
        g = grads_at(t)
        frozen_before = [p.copy() for i, p in enumerate(ps) if i not in present]
        opt.step([g[i] if i in present else None for i in range(len(ps))])
        assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in
                   zip([p for i, p in enumerate(ps) if i not in present], frozen_before))
        for i in present:
            refs[i].step([g[i].copy()])
    for p, a in zip(ps, alone):
        assert_same_bits(p, a[0])
    if kind != "SGD":
        assert opt.state_dict()["steps"] == [2, 2, 3, 3] and opt.t == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_clip_leaves_out_frozen_parameters(backend):
    ps = tensors(5)
    g = grads_at(0)
    want = mojolike.get_total_norm([g[0], g[2]], backend=backend)
    opt = mojolike.Adam(ps, backend=backend)
    assert opt.step([g[0], None, g[2], None], max_norm=0.1) == want


@pytest.mark.parametrize("backend", WITH_SIM)
@pytest.mark.parametrize("kind", ["Adam", "AdamW", "SGD"])
def test_grad_scale_reads_each_gradient_times_the_scale_and_leaves_the_buffers(backend, kind):
    cls = getattr(mojolike, kind)
    kw = {"lr": 0.01, "weight_decay": 0.1} | ({"momentum": 0.9} if kind == "SGD" else {})
    s = np.float32(0.37)
    ps, pre = tensors(6), tensors(6)
    opt, ref = cls(ps, backend=backend, **kw), cls(pre, backend=backend, **kw)
    for t in range(3):
        g = grads_at(t)
        before = copies(g)
        opt.step(g, grad_scale=s)
        for a, b in zip(g, before):
            assert_same_bits(a, b)
        ref.step([x * s for x in g])  # one float32 multiply each
    for a, b in zip(ps, pre):
        assert_same_bits(a, b)


@pytest.mark.parametrize("backend", WITH_SIM)
def test_the_folded_clip_equals_clipping_in_place_then_stepping(backend):
    ps, twin = tensors(7), tensors(7)
    a = mojolike.AdamW(ps, lr=0.01, backend=backend)
    b = mojolike.AdamW(twin, lr=0.01, backend=backend)
    for t in range(3):
        g = grads_at(t)
        kept = copies(g)
        ta = a.step(g, max_norm=0.5, clip="fold")
        for x, y in zip(g, kept):
            assert_same_bits(x, y)
        tb = b.step(copies(g), max_norm=0.5)
        assert ta == tb and a.clip_coef_ == b.clip_coef_ < 1.0
    for x, y in zip(ps, twin):
        assert_same_bits(x, y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_power_of_two_grad_scale_with_the_folded_clip_equals_unscaling_and_clipping_in_place(
        backend):
    ps, twin = tensors(8), tensors(8)
    a = mojolike.Adam(ps, lr=0.01, backend=backend)
    b = mojolike.Adam(twin, lr=0.01, backend=backend)
    inv = np.float32(2.0 ** -16)
    for t in range(3):
        g = [x * np.float32(2.0 ** 16) for x in grads_at(t)]
        ta = a.step(copies(g), max_norm=0.5, clip="fold", grad_scale=inv)
        unscaled = [x * inv for x in g]
        tb = b.step(unscaled, max_norm=0.5)
        assert ta == tb
    for x, y in zip(ps, twin):
        assert_same_bits(x, y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gate", [False, np.array(0), np.array([0.0], np.float32), np.bool_(False)])
def test_a_closed_gate_leaves_every_parameter_moment_and_step_count(backend, gate):
    ps = tensors(9)
    opt = mojolike.Adam(ps, lr=0.01, backend=backend)
    opt.step(grads_at(0))
    before, state = [p.copy() for p in ps], opt.state_dict()
    bad = grads_at(1)
    bad[0][0] = np.inf  # never read behind a closed gate
    assert opt.step(bad, max_norm=1.0, update_gate=gate) is None
    for a, b in zip(ps, before):
        assert_same_bits(a, b)
    after = opt.state_dict()
    assert after["t"] == state["t"] == 1 and after["steps"] == state["steps"]
    for x, y in zip(after["exp_avg_sq"], state["exp_avg_sq"]):
        assert_same_bits(x, y)


@pytest.mark.parametrize("gate", [True, np.array(1), np.array([True])])
def test_an_open_gate_is_the_ordinary_step(gate):
    ps, twin = tensors(10), tensors(10)
    mojolike.SGD(ps, lr=0.1, momentum=0.9).step(grads_at(0), update_gate=gate)
    mojolike.SGD(twin, lr=0.1, momentum=0.9).step(grads_at(0))
    for a, b in zip(ps, twin):
        assert_same_bits(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_groups_steps_and_moments_resume_bit_for_bit_through_a_state_file(backend, tmp_path):
    def make(ps):
        return mojolike.Adam([{"params": ps[:3], "weight_decay": 0.1}, {"params": ps[3:], "lr": 0.02}],
                             lr=0.01, backend=backend)
    ps = tensors(11)
    opt = make(ps)
    opt.step(grads_at(0))
    opt.step([grads_at(1)[0], None, grads_at(1)[2], None])
    opt.param_groups[0]["lr"] = 0.005
    path = os.path.join(tmp_path, "ckpt")
    mojolike.save_state(path, opt.state_dict())
    resumed_ps = [p.copy() for p in ps]
    resumed = make(resumed_ps)
    resumed.load_state_dict(mojolike.load_state(path))
    assert resumed.param_groups[0]["lr"] == 0.005 and resumed.state_dict()["steps"] == [2, 1, 2, 1]
    for t in (2, 3):
        opt.step(grads_at(t))
        resumed.step(grads_at(t))
    for a, b in zip(ps, resumed_ps):
        assert_same_bits(a, b)


@pytest.mark.parametrize("option,call", [
    ("grad_scale", lambda o, g: o.step(g, grad_scale=float("nan"))),
    ("grad_scale", lambda o, g: o.step(g, grad_scale=1e300)),
    ("grad_scale", lambda o, g: o.step(g, grad_scale=2.0)),  # above 1: could overflow a finite g
    ("grad_scale", lambda o, g: o.step(g, max_norm=1.0, grad_scale=0.5)),
    ("clip", lambda o, g: o.step(g, max_norm=1.0, clip="later")),
    ("update_gate", lambda o, g: o.step(g, update_gate=np.array([0.5]))),
    ("update_gate", lambda o, g: o.step(g, update_gate="yes")),
    ("grads", lambda o, g: o.step([None] * len(g))),
    ("param_groups[1].lr", lambda o, g: (o.param_groups[1].__setitem__("lr", -1.0), o.step(g))),
    ("param_groups[0].amsgrad", lambda o, g: (o.param_groups[0].__setitem__("amsgrad", True),
                                              o.step(g))),
    ("param_groups", lambda o, g: (o.param_groups[0]["params"].append(np.ones(2, np.float32)),
                                   o.step(g))),
])
def test_bad_step_controls_are_refused_by_name_before_anything_is_written(option, call):
    ps = tensors(12)
    opt = mojolike.Adam([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.1}], backend="cpu-numba")
    g = grads_at(0)
    before, grads_before = [p.copy() for p in ps], copies(g)
    with pytest.raises(mojolike.Refusal) as info:
        call(opt, g)
    assert info.value.option == option
    for a, b in zip(ps + g, before + grads_before):
        assert_same_bits(a, b)
    assert opt.t == 0


@pytest.mark.parametrize("option,groups", [
    ("param_groups[1].amsgrad", [{"params": [np.ones(2, np.float32)]},
                                 {"params": [np.ones(3, np.float32)], "amsgrad": False}]),
    ("param_groups[0]", [{"lr": 0.1}]),
    ("param_groups[0].params", [{"params": []}]),
    ("param_groups[1].betas", [{"params": [np.ones(2, np.float32)]},
                               {"params": [np.ones(3, np.float32)], "betas": 0.9}]),
])
def test_bad_groups_are_refused_by_name_at_construction(option, groups):
    with pytest.raises(mojolike.Refusal) as info:
        mojolike.Adam(groups)
    assert info.value.option == option


def test_a_tensor_in_two_groups_is_refused_as_overlapping():
    p = np.ones(4, np.float32)
    with pytest.raises(mojolike.Refusal) as info:
        mojolike.SGD([{"params": [p]}, {"params": [p], "lr": 0.1}])
    assert "params[0]" in info.value.option and "params[1]" in info.value.option


@pytest.mark.parametrize("backend", BACKENDS)
def test_get_total_norm_is_the_clips_total_and_writes_nothing(backend):
    g = grads_at(3)
    kept = copies(g)
    total = mojolike.get_total_norm(g, backend=backend)
    for a, b in zip(g, kept):
        assert_same_bits(a, b)
    assert total == mojolike.clip_grad_norm_(copies(g), 1e-3, backend=backend)
    bad = copies(g)
    bad[1][0, 0] = np.nan
    assert np.isnan(mojolike.get_total_norm(bad, backend=backend))
    with pytest.raises(mojolike.Refusal) as info:
        mojolike.get_total_norm(bad, error_if_nonfinite=True, backend=backend)
    assert info.value.option == "grads"
