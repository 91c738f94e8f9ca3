"""GradScaler against torch.amp.GradScaler (scales and skipped steps, bit for bit), skipped steps
that write nothing, the folded unscale against unscale_ in place, resume from state_dict,
refusals by name, and grad_checksum against the oracle on every backend."""
from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import torch
from conftest import CPU_BACKENDS, assert_same_bits, available, bits
from mojolike.oracles import codec
from mojolike.oracles import fold as ofold

import mojolike
from mojolike.core import registry

BACKENDS = ("oracle",) + CPU_BACKENDS
SHAPES = [(7,), (3, 5), (4,)]  # the last parameter is frozen: its gradient is always None
STEPS = 300
# step -> what goes wrong: a non-finite cell, or a true gradient so large that scaling overflows.
# Neither the unscaled cells nor their norm overflow: there torch steps with inf gradients or a
# clip by 0 where mojolike skips (GradScaler's docstring; tested on their own below)
BAD = {5: "inf", 6: "nan", 8: "overflow", 9: "overflow", 40: "-inf", 41: "nan", 42: "inf",
       120: "overflow", 200: "nan", 201: "overflow", 290: "inf"}
CASES = {
    "interval10": dict(growth_interval=10),
    "interval50": dict(growth_interval=50),
    # the scale starts below 1 (inv_scale > 1: the checks run on an unscaled copy)
    "below_one": dict(init_scale=0.25, growth_interval=10),
    "odd_factors": dict(init_scale=1000.1, growth_factor=1.7, backoff_factor=0.3,
                        growth_interval=3),
    "capped_growth": dict(init_scale=3e38, growth_interval=1),
}


def true_grads(step: int) -> list[np.ndarray]:
    """The unscaled gradients of one step (a fixed stream, so both libraries see the same)."""
    rng = np.random.default_rng(step)
    out = [(rng.standard_normal(s) * 1e-2).astype(np.float32) for s in SHAPES[:2]]
    if BAD.get(step) == "overflow":  # overflows scaled by more than 3.4e20; its square does not
        out[1][1, 2] = np.float32(1e18)
    return out


def scaled_grads(step: int, scale: float) -> list:
    with np.errstate(over="ignore", invalid="ignore"):
        g = [x * np.float32(scale) for x in true_grads(step)]
    kind = BAD.get(step)
    if kind in ("inf", "-inf", "nan"):
        g[step % 2][step % 3] = np.float32(kind)
    return g + [None]


@functools.cache
def torch_run(case: str, clip: bool) -> tuple[list[int], list[bool], dict]:
    params = [torch.zeros(s, requires_grad=True) for s in SHAPES]
    opt = torch.optim.SGD(params, lr=0.01)
    scaler = torch.amp.GradScaler("cpu", **CASES[case])
    scales, skipped = [], []
    for step in range(STEPS):
        scaler.scale(torch.ones(()))  # torch makes its scale tensor here, lazily
        for p, g in zip(params, scaled_grads(step, scaler.get_scale())):
            p.grad = None if g is None else torch.from_numpy(g)
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params[:2], 1.0)
        scaler.step(opt)
        skipped.append(bool(sum(v.item() for v in scaler._found_inf_per_device(opt).values())))
        scaler.update()
        scales.append(int(bits(scaler.get_scale())[0]))
    return scales, skipped, scaler.state_dict()


def mojolike_run(case: str, clip: bool, backend: str) -> tuple[list[int], list[bool], dict]:
    params = [np.zeros(s, np.float32) for s in SHAPES]
    opt = mojolike.SGD(params, lr=0.01, backend=backend)
    scaler = mojolike.GradScaler(**CASES[case])
    scales, skipped = [], []
    for step in range(STEPS):
        t = opt.t
        scaler.step(opt, scaled_grads(step, scaler.get_scale()), max_norm=1.0 if clip else None)
        skipped.append(opt.t == t)
        scaler.update()
        scales.append(int(bits(scaler.get_scale())[0]))
    return scales, skipped, scaler.state_dict()


# every case on the oracle and cpu-cffi; cpu-numba (the same checksums, tested below) on two
PARITY = [(b, c) for c in CASES for b in ("oracle", "cpu-cffi")] + \
    [("cpu-numba", c) for c in ("interval10", "below_one")]


@pytest.mark.parametrize("clip", [False, True], ids=["plain", "clipped"])
@pytest.mark.parametrize("backend, case", PARITY)
def test_scales_and_skipped_steps_equal_torch_grad_scaler_over_300_steps(backend, case, clip):
    want_scales, want_skipped, want_state = torch_run(case, clip)
    # the run holds what the test is about: consecutive skips, a growth, a skip after growth
    assert any(a and b for a, b in itertools.pairwise(want_skipped))
    assert any(b > a for a, b in itertools.pairwise(want_scales))  # positive: bits order
    if case == "capped_growth":  # a step not skipped grows the scale, unless it would be inf
        assert any(not skip and a == b for a, b, skip in zip(want_scales, want_scales[1:],
                                                            want_skipped[1:]))
    scales, skipped, state = mojolike_run(case, clip, backend)
    assert skipped == want_skipped
    first = next((i for i, (a, b) in enumerate(zip(scales, want_scales)) if a != b), None)
    assert first is None, \
        f"step {first}: scale 0x{scales[first]:08x}, torch 0x{want_scales[first]:08x}"
    assert state == want_state


# -- what a step writes -------------------------------------------------------------------------
def adam_setup(backend: str, scale: float = 2.0**12, n: int = 3):
    rng = np.random.default_rng(7)
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    opt = mojolike.Adam(params, lr=1e-2, weight_decay=0.1, backend=backend)
    scaler = mojolike.GradScaler(init_scale=scale, growth_interval=1000)
    for step in range(n):
        scaler.step(opt, scaled_grads(step + 10, scaler.get_scale()), max_norm=0.05)
        scaler.update()
    return params, opt, scaler


def snapshot(params, opt, grads) -> list[np.ndarray]:
    state = opt.state_dict()
    arrays = params + state["exp_avg"] + state["exp_avg_sq"] + [g for g in grads if g is not None]
    return [a.copy() for a in arrays] + [np.float32(opt.t)]


def assert_unchanged(before, after, what: str) -> None:
    assert len(before) == len(after)
    for i, (a, b) in enumerate(zip(before, after)):
        assert_same_bits(b, a, f"{what} [{i}]")


@pytest.mark.parametrize("max_norm", [None, 0.05])
@pytest.mark.parametrize("bad", ["inf", "-inf", "nan", "sum_overflows", "squares_overflow"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_skipped_step_writes_no_parameter_moment_step_count_or_gradient(backend, bad, max_norm):
    # at scale 1 the unscaled cells are the cells: an overflowing sum or square is not the scale's
    params, opt, scaler = adam_setup(backend, 1.0 if "overflow" in bad else 2.0**12)
    grads = scaled_grads(50, scaler.get_scale())
    if bad == "sum_overflows":  # finite cells whose fold overflows: a false alarm by design
        grads[0][:4] = np.float32(3e38)
    elif bad == "squares_overflow":  # finite sum, but the clip's sum of squares overflows
        grads[0][0] = np.float32(1e20)
    else:
        grads[1][2, 3] = np.float32(bad)
    before = snapshot(params, opt, grads)
    scale = scaler.get_scale()
    got = scaler.step(opt, grads, max_norm=max_norm)
    scaler.update()
    if bad == "squares_overflow" and max_norm is None:  # no clip: the step is taken
        assert opt.t == 4 and scaler.get_scale() == scale
    else:
        assert_unchanged(before, snapshot(params, opt, grads), f"{backend} {bad}")
        assert got is None and scaler.get_scale() == scale / 2


def test_a_closed_update_gate_writes_nothing_and_is_not_a_skip():
    params, opt, scaler = adam_setup("cpu-cffi")
    grads = scaled_grads(80, scaler.get_scale())
    before = snapshot(params, opt, grads)
    assert scaler.step(opt, grads, max_norm=0.05, update_gate=False) is None
    assert_unchanged(before, snapshot(params, opt, grads), "gated")
    scaler.update()
    assert scaler.state_dict()["_growth_tracker"] == 4 and scaler.get_scale() == 2.0**12


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_folded_step_leaves_the_gradients_as_they_were(backend):
    _params, opt, scaler = adam_setup(backend)
    grads = scaled_grads(60, scaler.get_scale())
    kept = [g.copy() for g in grads[:2]]
    t = opt.t
    scaler.step(opt, grads, max_norm=0.05)
    assert opt.t == t + 1
    for g, k in zip(grads, kept):
        assert_same_bits(g, k, backend)


@pytest.mark.parametrize("max_norm", [None, 0.05, 1e6])
@pytest.mark.parametrize("backend", BACKENDS)
def test_unscale_in_place_then_step_equals_the_folded_step_bit_for_bit(backend, max_norm):
    # power-of-two scales: g * inv_scale is exact, so the norms and reads agree bit for bit
    a_params, a_opt, a_scaler = adam_setup(backend, n=0)
    b_params, b_opt, b_scaler = adam_setup(backend, n=0)
    for step in range(12):
        scale = a_scaler.get_scale()
        assert scale == b_scaler.get_scale() and scale == 2.0 ** round(np.log2(scale))
        a_grads = scaled_grads(step + 100, scale)
        b_grads = [None if g is None else g.copy() for g in a_grads]
        if step == 4:
            a_grads[0][1] = b_grads[0][1] = np.float32("nan")
        a_scaler.unscale_(a_opt, a_grads)
        want = [None if g is None else g * np.float32(1 / scale) for g in b_grads]
        for got, w in zip(a_grads[:2], want[:2]):  # unscale_ multiplied in place, exactly
            assert_same_bits(got, w, f"unscaled step {step}")
        a_total = a_scaler.step(a_opt, a_grads, max_norm=max_norm)
        b_total = b_scaler.step(b_opt, b_grads, max_norm=max_norm)
        assert (a_total is None) == (b_total is None) and (a_total is None or a_total == b_total)
        a_scaler.update()
        b_scaler.update()
        assert_unchanged(snapshot(a_params, a_opt, []), snapshot(b_params, b_opt, []),
                         f"{backend} step {step}")
    assert a_opt.t == 11


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_scaled_clipped_step_reads_the_gradients_twice(backend):
    """One pass takes the checksum and the squares, the optimizer's pass reads g * inv_scale."""
    k = registry.kernels("test", "optim", backend, "identical")
    calls = []

    class Counting:
        def __getattr__(self, name):
            attr = getattr(k, name)
            if name in ("segment_fold", "segment_fold_sumsq", "segment_sumsq", "all_finite",
                        "scale", "adam", "sgd"):
                def counted(*args, **kwargs):
                    calls.append(name)
                    return attr(*args, **kwargs)
                return counted
            return attr

    with registry.override("optim", backend, "identical", Counting()):
        params = [np.ones(s, np.float32) for s in SHAPES]
        opt = mojolike.Adam(params, lr=1e-3, backend=backend)
        scaler = mojolike.GradScaler()
        scaler.step(opt, scaled_grads(1, scaler.get_scale()), max_norm=1.0)
        assert calls == ["segment_fold_sumsq", "adam"] and opt.t == 1
        scaler.update()
        calls.clear()
        scaler.step(opt, scaled_grads(1, scaler.get_scale()))
        assert calls == ["segment_fold_sumsq", "adam"] and opt.t == 2
        scaler.update()
        calls.clear()
        scaler.step(opt, scaled_grads(5, scaler.get_scale()), max_norm=1.0)  # inf: skipped
        # the checksum pass decides; the optimizer reads nothing
        assert calls == ["segment_fold_sumsq"] and opt.t == 2


# -- resume ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_state_dict_round_trip_resumes_identically_across_a_skip_and_a_growth(backend):
    params = [np.zeros(s, np.float32) for s in SHAPES]
    opt = mojolike.Adam(params, lr=1e-2, backend=backend)
    scaler = mojolike.GradScaler(init_scale=2.0**10, growth_interval=5)
    bad = {12: "nan"}

    def grads_at(step, s):
        g = scaled_grads(step + 1000, s)
        if step in bad:
            g[0][0] = np.float32(bad[step])
        return g

    def run(opt, scaler, steps):
        out = []
        for step in steps:
            scaler.step(opt, grads_at(step, scaler.get_scale()), max_norm=0.5)
            scaler.update()
            out.append((scaler.get_scale(), scaler.state_dict()["_growth_tracker"], opt.t))
        return out

    run(opt, scaler, range(8))  # stop between growths: the tracker is mid-count
    saved = scaler.state_dict()
    assert saved["_growth_tracker"] == 3
    opt_saved, params_saved = opt.state_dict(), [p.copy() for p in params]
    tail = run(opt, scaler, range(8, 24))
    scales = [s for s, _, _ in tail]
    changes = list(itertools.pairwise(scales))
    assert any(b > a for a, b in changes) and any(b < a for a, b in changes)

    params2 = [p.copy() for p in params_saved]
    opt2 = mojolike.Adam(params2, lr=1e-2, backend=backend)
    opt2.load_state_dict(opt_saved)
    scaler2 = mojolike.GradScaler(init_scale=3.0, growth_factor=4.0, growth_interval=99)
    scaler2.load_state_dict(saved)
    assert scaler2.state_dict() == saved
    assert run(opt2, scaler2, range(8, 24)) == tail
    assert_unchanged(snapshot(params, opt, []), snapshot(params2, opt2, []), backend)


def _updates(scaler, opt, finite: list[bool]) -> None:
    """One step and update per entry: finite gradients, or an inf cell (a skip)."""
    for ok in finite:
        scaler.step(opt, np.float32([1.0, 2.0 if ok else np.inf]))
        scaler.update()


def _backed_off_to_zero(scaler, opt):
    scaler.load_state_dict(dict(scaler.state_dict(), scale=2.0**-149))
    _updates(scaler, opt, [False])  # 2**-150 rounds to 0 (ties to even), as torch's does


def _grown_at_the_top(scaler, opt):
    scaler.load_state_dict(dict(scaler.state_dict(), scale=2.0**127, growth_interval=1))
    _updates(scaler, opt, [True])  # 2**128 is inf: the scale stays, the tracker restarts


def _tracker_past_the_interval(scaler, opt):
    _updates(scaler, opt, [True] * 5)
    scaler.set_growth_interval(2)  # the tracker (5) never equals 2 again, as in torch


def _tracker_at_the_int32_top(scaler, opt):
    scaler.load_state_dict(dict(scaler.state_dict(), _growth_tracker=2**31 - 1))
    _updates(scaler, opt, [True])


REACHED = {"scale_zero": _backed_off_to_zero, "growth_at_the_top": _grown_at_the_top,
           "tracker_past_interval": _tracker_past_the_interval,
           "tracker_at_int32_top": _tracker_at_the_int32_top}


def test_every_state_update_reaches_loads_back_and_then_behaves_the_same():
    after = [True, False, True, True, False, True]
    for name, reach in REACHED.items():
        runs = []
        for reload in (False, True):
            w = np.float32([1.0, -1.0])
            opt = mojolike.SGD(w, lr=0.5, backend="oracle")
            scaler = mojolike.GradScaler(init_scale=2.0**10, growth_interval=10)
            reach(scaler, opt)
            if reload:
                saved = scaler.state_dict()
                scaler = mojolike.GradScaler()
                scaler.load_state_dict(saved)
                assert scaler.state_dict() == saved, name
            trail = []
            for ok in after:
                _updates(scaler, opt, [ok])
                trail.append((bits(scaler.get_scale()).tolist(), scaler.state_dict(), opt.t))
            runs.append((trail, bits(w).tolist()))
        assert runs[0] == runs[1], name


def test_a_scaler_backed_off_to_zero_skips_every_step_before_and_after_a_reload():
    w = np.float32([1.0, -1.0])
    opt = mojolike.SGD(w, lr=0.5, backend="oracle")
    scaler = mojolike.GradScaler()
    skips = 0
    while scaler.get_scale() > 0.0:
        _updates(scaler, opt, [False])
        skips += 1
    assert skips == 166 and scaler.state_dict()["scale"] == 0.0  # 2**-150 rounds to 0
    ours, theirs = mojolike.GradScaler(), torch.amp.GradScaler("cpu")
    theirs.scale(torch.ones(()))
    theirs.load_state_dict(scaler.state_dict())
    ours.load_state_dict(scaler.state_dict())
    _updates(ours, opt, [True, True])  # inv_scale is inf: every gradient reads as inf or NaN
    assert opt.t == 0 and bits(w).tolist() == bits(np.float32([1.0, -1.0])).tolist()
    assert ours.get_scale() == theirs.get_scale() == 0.0


# -- refusals -------------------------------------------------------------------------------------
def _stepped(scaler, opt, grads):
    scaler.step(opt, grads)


def _unscaled(scaler, opt, grads):
    scaler.unscale_(opt, grads)


REFUSALS = [
    # (setup, call, entry point, option, words of the reason)
    (_unscaled, lambda s, o, g: s.unscale_(o, g), "mojolike.GradScaler.unscale_", "optimizer",
     "already been unscaled"),
    (_stepped, lambda s, o, g: s.unscale_(o, g), "mojolike.GradScaler.unscale_", "optimizer",
     "already stepped"),
    (_stepped, lambda s, o, g: s.step(o, g), "mojolike.GradScaler.step", "optimizer",
     "already stepped"),
    (None, lambda s, o, g: s.update(), "mojolike.GradScaler.update", "step", "no inf check"),
    (None, lambda s, o, g: s.step(o, g, closure=lambda: 0.0), "mojolike.GradScaler.step",
     "closure", "compute the loss and gradients first"),
    (None, lambda s, o, g: s.step(o, g, grad_scale=0.5), "mojolike.GradScaler.step", "grad_scale",
     "scaler's to set"),
    (None, lambda s, o, g: s.step(o, g, max_norm=1.0, clip="inplace"), "mojolike.GradScaler.step",
     "clip", "unscale_"),
    (None, lambda s, o, g: s.step(o, g, max_norm=-1.0), "mojolike.SGD", "max_norm", ">="),
    (None, lambda s, o, g: s.step(o, g[:2]), "mojolike.SGD", "grads", "tensor(s)"),
    (None, lambda s, o, g: s.step(torch.optim.SGD([torch.zeros(1)]), g), "mojolike.GradScaler.step",
     "optimizer", "mojolike optimizer"),
    (None, lambda s, o, g: s.step(o, [g[0].astype(np.float64), g[1], None]),
     "mojolike.GradScaler.step", "grads[0]", "float64"),
    (None, lambda s, o, g: s.step(o, [None, None, None]), "mojolike.GradScaler.step", "grads",
     "all None"),
    (None, lambda s, o, g: s.unscale_(o, [g[0], g[0], None]), "mojolike.GradScaler.unscale_",
     "grads[0] and grads[1]", "share memory"),
    (None, lambda s, o, g: s.unscale_(o, [g[0], _read_only(g[1]), None]),
     "mojolike.GradScaler.unscale_", "grads[1]", "read-only"),
    (None, lambda s, o, g: mojolike.GradScaler(backend="cpu-cffi").step(o, g),
     "mojolike.GradScaler.step", "backend", "optimizer's"),
    (None, lambda s, o, g: s.update(new_scale=0.0), "mojolike.GradScaler.update", "new_scale",
     "> 0"),
    (None, lambda s, o, g: s.load_state_dict({}), "mojolike.GradScaler.load_state_dict",
     "state_dict", "disabled"),
    (None, lambda s, o, g: s.load_state_dict(dict(s.state_dict(), _growth_tracker=-1)),
     "mojolike.GradScaler.load_state_dict", "_growth_tracker", "[0, "),
    (None, lambda s, o, g: s.load_state_dict(dict(s.state_dict(), scale=-2.0**-149)),
     "mojolike.GradScaler.load_state_dict", "scale", ">= 0"),
    (None, lambda s, o, g: s.load_state_dict(dict(s.state_dict(), extra=1)),
     "mojolike.GradScaler.load_state_dict", "extra", "not part"),
    (None, lambda s, o, g: s.set_growth_factor(1.0), "mojolike.GradScaler.set_growth_factor",
     "new_factor", "> 1.0"),
]


def _read_only(a):
    b = a.copy()
    b.flags.writeable = False
    return b


@pytest.mark.parametrize("setup, call, entry, option, words", REFUSALS,
                         ids=[f"{r[2].split('.')[-1]}-{r[3]}-{i}" for i, r in enumerate(REFUSALS)])
def test_refusals_name_the_entry_and_option_and_leave_every_buffer_untouched(setup, call, entry,
                                                                              option, words):
    params = [np.ones(s, np.float32) for s in SHAPES]
    opt = mojolike.SGD(params, lr=0.1, momentum=0.9, backend="cpu-numba")
    scaler = mojolike.GradScaler(init_scale=2.0**8, growth_interval=3)
    if setup is not None:
        setup(scaler, opt, scaled_grads(1, scaler.get_scale()))
    grads = scaled_grads(2, scaler.get_scale())
    before = snapshot_sgd(params, opt, grads) + [np.float32(scaler.get_scale())]
    state = scaler.state_dict()
    with pytest.raises(mojolike.Refusal) as err:
        call(scaler, opt, grads)
    assert err.value.entry_point == entry and err.value.option == option
    assert words in str(err.value) and str(err.value).startswith(entry)
    assert_unchanged(before, snapshot_sgd(params, opt, grads) + [np.float32(scaler.get_scale())],
                     entry)
    assert scaler.state_dict() == state


def snapshot_sgd(params, opt, grads):
    return [a.copy() for a in params + [g for g in grads if g is not None]] + [np.float32(opt.t)]


@pytest.mark.parametrize("kwargs, option, words", [
    (dict(growth_factor=1.0), "growth_factor", "> 1.0"),
    (dict(backoff_factor=1.0), "backoff_factor", "(0, 1)"),
    (dict(backoff_factor=0.0), "backoff_factor", "(0, 1)"),
    (dict(growth_interval=0), "growth_interval", "[1, "),
    (dict(growth_interval=2.0), "growth_interval", "integer"),
    (dict(init_scale=-1.0), "init_scale", "> 0"),
    (dict(init_scale=float("inf")), "init_scale", "finite"),
    (dict(init_scale=1e39), "init_scale", "overflows"),
    (dict(enabled="yes"), "enabled", "True or False"),
    (dict(device="cuda"), "device", "backend="),
    (dict(backend="tpu"), "backend", "not a backend"),
])
def test_the_constructor_refuses_arguments_torch_or_the_contract_rule_out(kwargs, option, words):
    with pytest.raises(mojolike.Refusal) as err:
        mojolike.GradScaler(**kwargs)
    assert err.value.entry_point == "mojolike.GradScaler" and err.value.option == option
    assert words in str(err.value)


# -- torch's other behaviour ----------------------------------------------------------------------
def test_defaults_getters_and_state_dict_match_torch():
    ours, theirs = mojolike.GradScaler(), torch.amp.GradScaler("cpu")
    assert ours.state_dict() == theirs.state_dict()
    for name in ("get_scale", "get_growth_factor", "get_backoff_factor", "get_growth_interval",
                 "is_enabled"):
        assert getattr(ours, name)() == getattr(theirs, name)()
    ours.set_growth_factor(3.0)
    ours.set_backoff_factor(0.25)
    ours.set_growth_interval(7)
    assert (ours.get_growth_factor(), ours.get_backoff_factor(), ours.get_growth_interval()) == \
        (3.0, 0.25, 7)


@pytest.mark.parametrize("new_scale", [3.3, 1e-3, np.array(5.5, np.float32), 7])
def test_update_with_new_scale_sets_the_float32_value_as_torch_does(new_scale):
    ours, theirs = mojolike.GradScaler(), torch.amp.GradScaler("cpu")
    theirs.scale(torch.ones(()))  # torch creates its scale tensor lazily
    ours.update(new_scale)
    theirs.update(torch.from_numpy(new_scale) if isinstance(new_scale, np.ndarray)
                  else float(new_scale))
    assert bits(ours.get_scale()) == bits(theirs.get_scale())


def test_scale_multiplies_numbers_arrays_and_lists_in_float32():
    scaler = mojolike.GradScaler(init_scale=3.0)
    x = np.float32([0.1, -2.5, np.inf])
    got = scaler.scale(x)
    assert_same_bits(got, x * np.float32(3.0), "array")
    assert got is not x and x[0] == np.float32(0.1)
    assert bits(scaler.scale(0.1)) == bits(np.float32(0.1) * np.float32(3.0))
    assert np.isnan(scaler.scale(float("nan")))  # a diverged loss is scaled, not refused
    pair = scaler.scale((np.float32(2.0), [x.reshape(3, 1)]))
    assert isinstance(pair, tuple) and pair[0] == 6.0 and pair[1][0].shape == (3, 1)


def test_a_disabled_scaler_passes_everything_through_as_torch_does():
    params = [np.ones(s, np.float32) for s in SHAPES]
    opt = mojolike.SGD(params, lr=0.5, backend="oracle")
    scaler = mojolike.GradScaler(enabled=False)
    loss = np.float32([2.0])
    assert scaler.scale(loss) is loss
    grads = scaled_grads(3, 1.0)
    kept = [g.copy() for g in grads[:2]]
    scaler.unscale_(opt, grads)
    for g, k in zip(grads, kept):
        assert_same_bits(g, k, "unscale_ is a no-op")
    scaler.step(opt, grads)
    scaler.step(opt, grads)  # no stage tracking when disabled
    scaler.update()
    assert opt.t == 2 and scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    scaler.load_state_dict({})  # a no-op, as in torch
    assert not scaler.is_enabled()


def test_below_scale_one_a_cell_that_overflows_unscaled_is_skipped_where_torch_steps_with_inf():
    params = [np.zeros(4, np.float32)]
    opt = mojolike.SGD(params, lr=1.0, backend="oracle")
    scaler = mojolike.GradScaler(init_scale=0.25)
    grads = [np.float32([3e38, 1.0, 0.0, -1.0])]  # finite, but 3e38 * 4 is inf
    assert scaler.step(opt, grads) is None and opt.t == 0
    scaler.update()
    assert scaler.get_scale() == 0.125 and grads[0][0] == np.float32(3e38)
    # torch tests the cells as given, finds none non-finite and steps with an inf gradient
    p = torch.zeros(4, requires_grad=True)
    t_opt = torch.optim.SGD([p], lr=1.0)
    t_scaler = torch.amp.GradScaler("cpu", init_scale=0.25)
    t_scaler.scale(torch.ones(()))
    p.grad = torch.from_numpy(grads[0].copy())
    t_scaler.step(t_opt)
    t_scaler.update()
    assert t_scaler.get_scale() == 0.25 and torch.isinf(p.detach()).any()
    # a step below scale 1 reads an unscaled copy: the caller's gradients stay as they were
    grads = [np.float32([0.25, 1.0, 0.0, -1.0])]
    scaler.step(opt, grads)
    assert opt.t == 1 and params[0].tolist() == [-2.0, -8.0, 0.0, 8.0]
    assert grads[0].tolist() == [0.25, 1.0, 0.0, -1.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scaled_sum_that_overflows_while_every_cell_is_finite_is_a_false_alarm_costing_one_backoff(
        backend):
    _params, opt, scaler = adam_setup(backend, 2.0**100)
    t = opt.t
    before = [p.copy() for p in _params]
    grads = scaled_grads(70, scaler.get_scale())
    grads[0][:4] = np.float32(3e38)  # finite cells whose fold overflows
    kept = [g.copy() for g in grads[:2]]
    assert not np.isfinite(mojolike.grad_checksum(grads, backend=backend))
    assert scaler.step(opt, grads, max_norm=0.05) is None and opt.t == t
    scaler.update()
    assert scaler.get_scale() == 2.0**99
    for g, k in zip(grads, kept):
        assert_same_bits(g, k, backend)
    for p, b in zip(_params, before):
        assert_same_bits(p, b, backend)


def test_a_clip_norm_that_overflows_unscaled_is_skipped_where_torch_clips_by_zero():
    params = [np.zeros(2, np.float32)]
    opt = mojolike.SGD(params, lr=1.0, backend="oracle")
    scaler = mojolike.GradScaler(init_scale=2.0)
    grads = [np.float32([4e19, 1.0])]  # unscaled 2e19: finite, its square is not
    assert scaler.step(opt, grads, max_norm=1.0) is None and opt.t == 0
    scaler.update()
    assert scaler.get_scale() == 1.0
    scaler.step(opt, [np.float32([4e19, 1.0])])  # without a clip the step is taken
    assert opt.t == 1


# -- grad_checksum --------------------------------------------------------------------------------
def oracle_checksum(grads) -> float:
    return ofold.fold([ofold.fold(codec.decode(g)) for g in grads if g is not None])


def checksum_cases(big: bool) -> list[list]:
    rng = np.random.default_rng(3)
    sizes = [1, 7, 33, 200] + ([1023, 1025, 3000] if big else [])
    cases = []
    for kind in ("normal", "subnormal", "huge", "inf", "nan", "cancel"):
        g = [(rng.standard_normal(n) * {"subnormal": 1e-42, "huge": 1e37}.get(kind, 1.0))
             .astype(np.float32) for n in sizes]
        if kind in ("inf", "nan"):
            g[-1][-1] = np.float32(kind)
        if kind == "cancel":  # 1e8 and -1e8 cancel in one lane before the small cells join
            g[0][0], g[1][0] = np.float32(1e8), np.float32(-1e8)
        cases.append(g[:2] + [None] + g[2:])
    arena = rng.standard_normal(sum(sizes)).astype(np.float32)  # cells laid end to end
    cuts = np.cumsum([0] + sizes)
    cases.append([arena[a:b] for a, b in itertools.pairwise(cuts)])
    cases.append([_read_only(cases[0][0]), cases[0][1].reshape(7, 1)])
    cases.append(cases[0][3])  # one buffer, not a list
    return cases


@pytest.mark.parametrize("backend", BACKENDS + ("cuda-sim",))
def test_grad_checksum_equals_the_oracle(backend):
    if backend == "cuda-sim" and not available("cuda-sim"):
        pytest.skip("numba-cuda is not installed")
    for i, grads in enumerate(checksum_cases(big=backend != "cuda-sim")):
        listed = grads if isinstance(grads, list) else [grads]
        want = oracle_checksum(listed)
        got = mojolike.grad_checksum(grads, backend=backend)
        assert isinstance(got, float)
        assert_same_bits(np.float32(got), np.float32(want), f"{backend} case {i}")


def test_grad_checksum_is_non_finite_exactly_when_a_cell_is_or_the_sum_overflows():
    ok = [np.float32([3e38, 1.0, -3e38])]  # lanes 0 and 2 cancel before lane 1 joins
    assert mojolike.grad_checksum(ok, backend="oracle") == 1.0
    for bad in ([np.float32([3e38]), np.float32([3e38])], [np.float32([1.0, np.nan])],
                [np.float32([np.inf, -np.inf])]):
        assert not np.isfinite(mojolike.grad_checksum(bad, backend="oracle"))


def test_grad_checksum_refuses_by_name():
    for grads, option in (([None], "grads"), ([np.zeros(2)], "grads[0]"), ([], "grads")):
        with pytest.raises(mojolike.Refusal) as err:
            mojolike.grad_checksum(grads, backend="oracle")
        assert err.value.entry_point == "mojolike.grad_checksum" and err.value.option == option
    with pytest.raises(mojolike.Refusal, match="max_norm"):
        mojolike.grad_checksum([np.ones(2, np.float32)], max_norm=1.0)
