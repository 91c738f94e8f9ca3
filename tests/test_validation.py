"""Every bad input is refused by name, before anything is written: one test per failure seen by
fuzzing the public entry points (partial writes, runaway inputs, other exceptions, nonsense
accepted)."""
from __future__ import annotations

import json
import os
import time
import zipfile
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mojolike.oracles.fold import split_is_exact, split_trees_equal

import mojolike
from mojolike import Refusal
from mojolike.training.trainer import TrainConfig


def refused(fn, option: str | None = None) -> Refusal:
    with pytest.raises(Refusal) as e:
        fn()
    if option is not None:
        assert e.value.option == option, str(e.value)
    return e.value


def params():
    return [np.linspace(-1, 1, 8, dtype=np.float32), np.ones((2, 3), np.float32)]


def grads():
    return [np.full(8, 0.5, np.float32), np.full((2, 3), 0.25, np.float32)]


def snapshot(opt, *arrays) -> tuple:
    state = opt.state_dict()
    flat = [(k, [a.tobytes() for a in v] if isinstance(v, list) and v and isinstance(v[0], np.ndarray)
             else v) for k, v in sorted(state.items())]
    return (opt.t, opt.lr_, opt.total_norm_, opt.clip_coef_, opt.aligned_, flat,
            [a.tobytes() for a in arrays])


# -- partial writes ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,kw,option", [
    ("Adam", dict(lr=1e300), "lr"),
    ("SGD", dict(lr=1e300), "lr"),
    ("Adam", dict(weight_decay=1e300), "weight_decay"),
    ("SGD", dict(momentum=0.5, dampening=1e300), "dampening"),
    ("Adam", dict(betas=(0.9, 1 - 2**-25)), "betas[1]"),
    ("AdamW", dict(lr=1e30, weight_decay=1e30), "lr, betas and weight_decay"),
    ("Adam", dict(lr=3e38, betas=(0.5, 0.999)), "lr, betas and weight_decay"),
])
def test_hyperparameters_that_break_the_host_scalars_are_refused_at_construction(kind, kw, option):
    p = params()
    before = [a.tobytes() for a in p]
    e = refused(lambda: getattr(mojolike, kind)(p, backend="cpu-numba", **kw), option)
    assert str(e).startswith(f"mojolike.{kind}: ")
    assert [a.tobytes() for a in p] == before


def test_a_scheduled_rate_that_breaks_the_host_scalars_is_refused_before_the_clip_writes():
    class Runaway:
        def lr_at(self, t):
            return 1e-3 if t == 1 else 3e38

    p, g = params(), grads()
    opt = mojolike.Adam(p, lr=1e-3, betas=(0.5, 0.999), lr_schedule=Runaway(), backend="cpu-numba")
    opt.step(g, max_norm=0.1)
    g = [x * 7 for x in grads()]
    before = snapshot(opt, *p, *g)
    refused(lambda: opt.step(g, max_norm=0.1), "lr, betas and weight_decay")
    assert snapshot(opt, *p, *g) == before and opt.t == 1


def test_t_advances_only_once_a_step_went_through():
    p = params()
    opt = mojolike.SGD(p, lr=0.1, backend="cpu-numba")
    bad = grads()
    bad[0][3] = np.inf
    refused(lambda: opt.step(bad), "grads")
    assert opt.t == 0 and opt.lr_ is None
    opt.step(grads())
    assert opt.t == 1


def test_a_refused_step_accumulated_leaves_every_attribute_as_it_was():
    p = params()
    opt = mojolike.AdamW(p, accumulation_steps=2, backend="cpu-numba")
    opt.step_accumulated([grads(), grads()], [2048, 2048])
    bad = grads()
    bad[1][0, 0] = np.nan
    before = snapshot(opt, *p)
    refused(lambda: opt.step_accumulated([grads(), bad], [1000, 3096], aligned=False), "grads")
    assert snapshot(opt, *p) == before and opt.aligned_ is True


# -- runaway inputs ------------------------------------------------------------------------------
def test_accumulation_is_aligned_decides_huge_counts_at_once():
    t = time.perf_counter()
    assert mojolike.accumulation_is_aligned([2**33, 2**33], 2)
    assert mojolike.accumulation_is_aligned([2**40] * 2, 2)
    assert not mojolike.accumulation_is_aligned([3 * 2**40, 2**40], 2)
    assert mojolike.accumulation_is_aligned([2**40] * 64, 64)
    assert time.perf_counter() - t < 1.0  # the tree-building definition takes minutes and GBs here


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([1, 2, 3, 32, 512, 1000, 1024, 2048, 3072, 4096, 8192]),
                          st.integers(1, 5000)), min_size=1, max_size=8))
def test_the_fast_alignment_predicate_equals_the_tree_definition(sizes):
    assert split_is_exact(sizes) == split_trees_equal(sizes), sizes


# -- overlap -------------------------------------------------------------------------------------
def test_gradients_that_alias_the_parameters_are_refused_naming_both():
    arena = np.ones(9, np.float32)
    opt = mojolike.SGD([arena[:8]], lr=0.1, backend="cpu-numba")
    before = arena.tobytes()
    refused(lambda: opt.step([arena[1:]]), "grads[0] and params[0]")
    assert arena.tobytes() == before


def test_one_buffer_passed_twice_is_refused():
    w = np.ones(4, np.float32)
    refused(lambda: mojolike.SGD([w, w], backend="cpu-numba"), "params[0] and params[1]")
    opt = mojolike.SGD([np.ones(4, np.float32), np.ones(4, np.float32)], backend="cpu-numba")
    g = np.ones(4, np.float32)
    refused(lambda: opt.step([g, g], max_norm=1.0), "grads[0] and grads[1]")
    refused(lambda: mojolike.clip_grad_norm_([g, g[1:]], 1.0, backend="cpu-numba"),
            "params[0] and params[1]")


# -- switches and numbers ------------------------------------------------------------------------
@pytest.mark.parametrize("call,option", [
    (lambda: mojolike.SGD(params(), maximize="False"), "maximize"),
    (lambda: mojolike.SGD(params(), momentum=0.9, nesterov="no"), "nesterov"),
    (lambda: mojolike.Adam(params(), maximize=1), "maximize"),
    (lambda: mojolike.Adam(params(), lr="0.1"), "lr"),
    (lambda: mojolike.SGD(params(), lr=b"1"), "lr"),
    (lambda: mojolike.SGD(params(), lr=10**400), "lr"),
    (lambda: mojolike.SGD(params(), lr=True), "lr"),
    (lambda: mojolike.SGD(params()).step(grads(), max_norm=b"1"), "max_norm"),
    (lambda: mojolike.cross_entropy(np.zeros((2, 3), np.float32), [0, 1], label_smoothing="0.1"),
     "label_smoothing"),
    (lambda: mojolike.cross_entropy(np.zeros((2, 3), np.float32), [0, 1], return_grad="yes"),
     "return_grad"),
    (lambda: mojolike.accumulation_is_aligned([1024, 1024], 1.5), "accumulation_steps"),
    (lambda: mojolike.accumulation_is_aligned([1024, True], 2), "tokens"),
    (lambda: mojolike.WarmupCosineLR("1e-3", 10, 100), "peak_lr"),
    (lambda: mojolike.Generator(0).uniform(3, low="0"), "low"),
    (lambda: mojolike.Generator(0).dropout(np.ones(3, np.float32), p="0.5"), "p"),
])
def test_strings_bytes_and_truthy_values_are_not_taken_as_numbers_or_switches(call, option):
    refused(call, option)


# -- schedules at negative steps -----------------------------------------------------------------
@pytest.mark.parametrize("t", [-4096, -4095, -2049, -1, 0])
def test_a_fresh_schedule_refuses_steps_below_one(t):
    s = mojolike.WarmupCosineLR(1e-3, 10, 100, backend="cpu-numba")
    refused(lambda: s.lr_at(t), "t")
    refused(lambda: s.bits_at(t), "t")
    assert s.lr_at(1) == s.lr_values(1)[0]


# -- other exceptions turned into refusals -------------------------------------------------------
def test_unknown_keywords_are_refused_on_every_method():
    opt = mojolike.Adam(params(), backend="cpu-numba")
    s = mojolike.ConstantLR(0.1)
    g = mojolike.Generator(0)
    calls = [
        (lambda: opt.step(grads(), foo=1), "foo"),
        (lambda: opt.step_accumulated([grads()], [1], foo=1), "foo"),
        (lambda: opt.zero_grad(grads(), set_to_none=True), "set_to_none"),
        (lambda: opt.load_state_dict(opt.state_dict(), strict=True), "strict"),
        (lambda: mojolike.accumulate_grads([grads()], [1], dim=0), "dim"),
        (lambda: mojolike.accumulation_is_aligned([1], 1, strict=True), "strict"),
        (lambda: mojolike.save_state("x", opt.state_dict(), mode="w"), "mode"),
        (lambda: mojolike.load_state("x", mmap_mode="r"), "mmap_mode"),
        (lambda: s.lr_at(1, epoch=2), "epoch"),
        (lambda: s.lr_values(3, start=1), "start"),
        (lambda: mojolike.ConstantLR.from_config(s.config(), device="cpu"), "device"),
        (lambda: g.next_stream(n=2), "n"),
        (lambda: g.state_dict(copy=True), "copy"),
        (lambda: g.load_state_dict(g.state_dict(), strict=True), "strict"),
    ]
    for call, option in calls:
        refused(call, option)


def test_torchs_closure_is_refused_with_what_to_do_instead():
    opt = mojolike.SGD(params(), backend="cpu-numba")
    e = refused(lambda: opt.step(grads(), closure=lambda: 0.0), "closure")
    assert "compute the loss and gradients first" in str(e)


def test_save_state_and_load_state_are_symmetric_without_the_suffix(tmp_path):
    opt = mojolike.Adam(params(), backend="cpu-numba")
    opt.step(grads())
    mojolike.save_state(tmp_path / "ckpt", opt.state_dict())
    assert (tmp_path / "ckpt.npz").exists()
    fresh = mojolike.Adam(params(), backend="cpu-numba")
    fresh.load_state_dict(mojolike.load_state(tmp_path / "ckpt"))
    assert fresh.t == 1


def _saved(tmp_path) -> bytes:
    opt = mojolike.SGD(params(), momentum=0.9, backend="cpu-numba")
    opt.step(grads())
    mojolike.save_state(tmp_path / "good.npz", opt.state_dict())
    return (tmp_path / "good.npz").read_bytes()


def _hostile_header(tmp_path) -> bytes:
    """An archive whose member claims 2^40 float32 elements but holds 16 bytes."""
    path = tmp_path / "hostile.npz"
    header = {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}
    with zipfile.ZipFile(path, "w") as z:
        with z.open("momentum_buffer.0.npy", "w") as f:
            np.lib.format.write_array_header_1_0(f, header)
            f.write(bytes(16))
        for name, value in (("kind", np.str_("SGD")), ("t", np.int64(1)),
                            ("momentum_buffer.count", np.int64(1))):
            with z.open(name + ".npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(value))
    return path.read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "other npz", "hostile header",
                                    "pickled object", "missing"])
def test_load_state_refuses_damaged_and_hostile_files_by_name(tmp_path, damage):
    good = _saved(tmp_path)
    path = tmp_path / "bad.npz"
    if damage == "truncated":
        path.write_bytes(good[:len(good) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(300))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "other npz":
        np.savez(path, weights=np.ones(3))
    elif damage == "hostile header":
        path.write_bytes(_hostile_header(tmp_path))
    elif damage == "pickled object":
        np.savez(path, kind=np.array([{"a": 1}], dtype=object), t=np.int64(1))
    e = refused(lambda: mojolike.load_state(path), "path")
    assert str(e).startswith("mojolike.load_state: path=")


@pytest.mark.parametrize("state,option", [
    (None, "state"),
    ({"kind": "Adam"}, "t"),
    ({"kind": "Lion", "t": 1}, "kind"),
    ({"kind": "Adam", "t": -1}, "t"),
    ({"kind": "Adam", "t": 1, "exp_avg": "not a list"}, "exp_avg"),
    ({"kind": "Adam", "t": 1, "exp_avg": [np.ones(2)]}, "exp_avg[0]"),
    ({"kind": "Adam", "t": 1, "bad name!": []}, "bad name!"),
])
def test_save_state_refuses_a_malformed_state_and_writes_no_file(tmp_path, state, option):
    refused(lambda: mojolike.save_state(tmp_path / "s", state), option)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("mutate,option", [
    (lambda s: None, "state"),
    (lambda s: dict(s, exp_avg=None), "exp_avg"),
    (lambda s: dict(s, exp_avg=[np.ones(3, np.float32), s["exp_avg"][1]]), "exp_avg[0]"),
    (lambda s: dict(s, exp_avg=[[0.0] * 8, s["exp_avg"][1]]), "exp_avg[0]"),
    (lambda s: dict(s, exp_avg_sq=[np.full(8, np.nan, np.float32), s["exp_avg_sq"][1]]),
     "exp_avg_sq[0]"),
    (lambda s: dict(s, exp_avg_sq=[s["exp_avg_sq"][0], -np.ones((2, 3), np.float32)]),
     "exp_avg_sq[1]"),
    (lambda s: dict(s, exp_avg=[s["exp_avg"][0], np.full((2, 3), np.inf, np.float32)]),
     "exp_avg[1]"),
    (lambda s: dict(s, t=True), "t"),
    (lambda s: dict(s, param_groups=[]), "param_groups"),
])
def test_load_state_dict_refuses_malformed_states_and_bad_moments(mutate, option):
    p = params()
    opt = mojolike.Adam(p, backend="cpu-numba")
    opt.step(grads())
    state = opt.state_dict()
    before = snapshot(opt, *p)
    refused(lambda: opt.load_state_dict(mutate(state)), option)
    assert snapshot(opt, *p) == before


def test_a_released_memoryview_is_refused_by_name():
    m = memoryview(np.ones(4, np.float32))
    m.release()
    refused(lambda: mojolike.fold(m), "x")


@pytest.mark.parametrize("norm_type", [None, "fro", 1.0, float("inf"), "2"])
def test_clip_refuses_every_norm_but_two_by_name(norm_type):
    g = grads()
    refused(lambda: mojolike.clip_grad_norm_(g, 1.0, norm_type=norm_type), "norm_type")


def test_ragged_philox_inputs_are_refused():
    refused(lambda: mojolike.random.philox4x32_10([[0, 0, 0, 0], [0, 0]], [0, 0]), "counter")
    refused(lambda: mojolike.random.philox4x32_10([0, 0, 0, 0], [0, 2**70]), "key")


@pytest.mark.parametrize("shape", [(2**40,), (2**31, 2**31), (2**62, 4)])
def test_impossible_shapes_are_refused_before_allocating(shape):
    g = mojolike.Generator(0)
    refused(lambda: g.uniform(shape), "shape")
    refused(lambda: g.normal(shape), "shape")
    assert g.state_dict()["counter"] == 0


# -- a training run's configuration --------------------------------------------------------------
def test_train_config_keeps_numpy_and_fraction_reals_as_plain_floats_it_can_write():
    c = TrainConfig(steps=3, lr=np.float32(3e-3), min_lr=Fraction(3, 10**4),
                    betas=(np.float32(0.9), Fraction(19, 20)), max_norm=np.float32(1.0),
                    eps=np.float64(1e-8), dropout=Fraction(1, 10), skip_lossz=np.float32(1.5))
    d = c.to_dict()
    reals = [d[k] for k in ("lr", "min_lr", "max_norm", "eps", "dropout", "skip_lossz")]
    assert all(type(x) is float for x in reals + d["betas"]), d
    assert json.loads(json.dumps(d)) == d and TrainConfig.from_dict(d) == c
    assert c == TrainConfig(steps=3, max_norm=1, dropout=0.1, skip_lossz=1.5)


def test_train_config_keys_one_text_per_binary32_value_the_run_uses():
    keys = {TrainConfig(lr=lr, steps=3).key() for lr in (1, 1.0, 1.00000001, np.float32(1))}
    assert len(keys) == 1 and '"lr":1.0' in keys.pop()
    assert TrainConfig(lr=0.1, steps=3).key() == TrainConfig(lr=0.1000000001, steps=3).key()
    assert TrainConfig(lr=0.1, steps=3).key() != TrainConfig(lr=np.nextafter(
        np.float32(0.1), np.float32(1)), steps=3).key()
    # the default configuration's text is the one its run card's profile has always hashed
    assert '"lr":0.003' in TrainConfig().key() and '"eps":1e-08' in TrainConfig().key()


def test_train_config_reals_read_back_to_the_binary32_value_they_were_given():
    rng = np.random.default_rng(19)
    u = rng.integers(1, 0x3F800000, 2000, dtype=np.uint32)  # (0, 1): every binade, subnormals
    for b in u.view(np.float32):
        c = TrainConfig(steps=3, betas=(b, 0.5), weight_decay=b)
        assert type(c.betas[0]) is float
        assert np.float32(c.betas[0]).view(np.uint32) == b.view(np.uint32)
        assert np.float32(c.weight_decay).view(np.uint32) == b.view(np.uint32)
        assert len(repr(c.betas[0])) <= len(repr(float(b)))
