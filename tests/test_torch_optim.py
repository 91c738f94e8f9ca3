"""mojolike.torch.optim: torch optimizers stepping on mojolike's kernels."""
from __future__ import annotations

import io
import math

import numba
import numpy as np
import pytest
import torch

import mojolike
import mojolike.torch.optim as mo
from mojolike.core.refusals import Refusal

BACKENDS = ("cpu-numba", "cpu-cffi")
SHAPES = [(7, 5), (13,), (3, 4, 2), (1,)]


def make_params(seed=0, shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]


def make_grads(params, step, frozen=()):
    g = torch.Generator().manual_seed(1000 + step)
    return [None if i in frozen else torch.randn(p.shape, generator=g)
            for i, p in enumerate(params)]


def bits(tensors):
    return [t.detach().numpy().view(np.uint32).copy() for t in tensors]


def assert_same_bits(a, b):
    for i, (x, y) in enumerate(zip(bits(a), bits(b))):
        assert np.array_equal(x, y), f"tensor {i} differs"


def run_torch_adapter(cls, kwargs, steps, backend, frozen=(), seed=0, groups=None):
    ps = make_params(seed)
    params = ps if groups is None else groups(ps)
    opt = cls(params, backend=backend, **kwargs)
    for t in range(steps):
        for p, g in zip(ps, make_grads(ps, t, frozen)):
            p.grad = g
        opt.step()
    return ps, opt


def run_mojolike(cls, kwargs, steps, backend, frozen=(), seed=0, groups=None):
    arrays = [p.detach().numpy().copy() for p in make_params(seed)]
    params = arrays if groups is None else groups(arrays)
    opt = cls(params, backend=backend, **kwargs)
    for t in range(steps):
        grads = [None if g is None else g.numpy() for g in
                 make_grads([torch.from_numpy(a) for a in arrays], t, frozen)]
        opt.step(grads)
    return [torch.from_numpy(a) for a in arrays], opt


CASES = [
    (mo.AdamW, mojolike.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
    (mo.Adam, mojolike.Adam, {"lr": 1e-2, "weight_decay": 0.01, "betas": (0.8, 0.99)}),
    (mo.SGD, mojolike.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    (mo.SGD, mojolike.SGD, {"lr": 0.1, "momentum": 0.5, "dampening": 0.25, "maximize": True}),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_torch_optimizers_give_the_bits_of_mojolikes_optimizer_on_the_same_buffers(
        backend, case):
    ours, theirs, kwargs = CASES[case]
    a, _ = run_torch_adapter(ours, kwargs, 5, backend, frozen=(2,))
    b, _ = run_mojolike(theirs, kwargs, 5, backend, frozen=(2,))
    assert_same_bits(a, b)


def test_param_groups_give_the_bits_of_mojolikes_groups():
    def groups(ps):
        return [{"params": ps[:2], "lr": 0.05}, {"params": ps[2:], "weight_decay": 0.0}]
    a, opt = run_torch_adapter(mo.AdamW, {"lr": 1e-2}, 4, "cpu-numba", groups=groups)
    b, _ = run_mojolike(mojolike.AdamW, {"lr": 1e-2}, 4, "cpu-numba", groups=groups)
    assert_same_bits(a, b)
    assert [g["lr"] for g in opt.param_groups] == [0.05, 1e-2]


def test_the_optimizers_are_torch_optimizers_with_torchs_defaults():
    ps = make_params()
    for ours, theirs in ((mo.SGD, torch.optim.SGD), (mo.Adam, torch.optim.Adam),
                         (mo.AdamW, torch.optim.AdamW)):
        opt, ref = ours(ps), theirs(ps)
        assert isinstance(opt, torch.optim.Optimizer)
        assert opt.defaults == ref.defaults, ours.__name__


def test_the_parameters_are_updated_in_place_without_a_copy():
    ps = make_params()
    ptrs = [p.data_ptr() for p in ps]
    opt = mo.AdamW(ps, lr=0.1)
    before = [p.detach().clone() for p in ps]
    for p, g in zip(ps, make_grads(ps, 0)):
        p.grad = g
    opt.step()
    assert [p.data_ptr() for p in ps] == ptrs
    assert all(not torch.equal(p.detach(), b) for p, b in zip(ps, before))
    # the state tensors are views of the kernels' buffers: the next step moves them
    m = opt.state[ps[0]]["exp_avg"].clone()
    for p, g in zip(ps, make_grads(ps, 1)):
        p.grad = g
    opt.step()
    assert not torch.equal(opt.state[ps[0]]["exp_avg"], m)
    assert opt.state[ps[0]]["step"].item() == 2.0


def test_adamw_stays_within_rounding_of_torch_optim_adamw_over_50_steps():
    steps, lr = 50, 1e-2
    a, _ = run_torch_adapter(mo.AdamW, {"lr": lr, "weight_decay": 0.1}, steps, "cpu-numba")
    ps = make_params()
    ref = torch.optim.AdamW(ps, lr=lr, weight_decay=0.1, foreach=False)
    for t in range(steps):
        for p, g in zip(ps, make_grads(ps, t)):
            p.grad = g
        ref.step()
    worst = max((x.detach() - y.detach()).abs().max().item() for x, y in zip(a, ps))
    # torch computes its host scalars in binary64 and uses lerp/addcdiv, so its bits differ
    # by design (oracles/optim.py); each step differs by a few ulps of lr-sized updates,
    # and 50 steps of lr=1e-2 stay well within 1e-5 (measured here: 1.8e-7, 22 of 193
    # elements differ)
    assert worst < 1e-5, worst


def test_a_state_goes_through_torch_save_into_torch_adamw_and_back():
    a, opt = run_torch_adapter(mo.AdamW, {"lr": 1e-2}, 3, "cpu-numba", frozen=(1,))
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    saved = torch.load(buf)
    assert sorted(saved["state"]) == [0, 2, 3]  # the frozen parameter has no state
    assert sorted(saved["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert saved["state"][0]["step"].dtype == torch.float32
    # into torch's AdamW: it takes the state as its own
    copies = [torch.nn.Parameter(p.detach().clone()) for p in a]
    ref = torch.optim.AdamW(copies, lr=1e-2)
    ref.load_state_dict(saved)
    for k in (0, 2, 3):
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(ref.state[copies[k]][name], opt.state[a[k]][name])
    # and back from torch's AdamW into a new mojolike one: it continues with the same bits
    # as the optimizer that never stopped
    back = mo.AdamW(copies, lr=1e-2, backend="cpu-numba")
    back.load_state_dict(ref.state_dict())
    for t in (3, 4):
        for p, q, g in zip(a, copies, make_grads(a, t, frozen=(1,))):
            p.grad = g
            q.grad = None if g is None else g.clone()
        opt.step()
        back.step()
    assert_same_bits(a, copies)


def test_an_sgd_momentum_state_round_trips_through_torch_sgd():
    a, opt = run_torch_adapter(mo.SGD, {"lr": 0.1, "momentum": 0.9}, 2, "cpu-numba")
    sd = opt.state_dict()
    assert sorted(sd["state"][0]) == ["momentum_buffer"]
    copies = [torch.nn.Parameter(p.detach().clone()) for p in a]
    ref = torch.optim.SGD(copies, lr=0.1, momentum=0.9)
    ref.load_state_dict(sd)
    back = mo.SGD(copies, lr=0.1, momentum=0.9)
    back.load_state_dict(ref.state_dict())
    for p, q, g in zip(a, copies, make_grads(a, 2)):
        p.grad, q.grad = g, g.clone()
    opt.step()
    back.step()
    assert_same_bits(a, copies)


def test_a_state_of_the_wrong_shape_is_refused_before_anything_is_written():
    a, opt = run_torch_adapter(mo.AdamW, {"lr": 1e-2}, 2, "cpu-numba")
    sd = opt.state_dict()
    m = opt.state[a[0]]["exp_avg"].clone()
    bad = {"state": {**sd["state"], 0: {**sd["state"][0], "exp_avg": torch.zeros(3)}},
           "param_groups": sd["param_groups"]}
    with pytest.raises(Refusal, match=r"state\[0\]\.exp_avg"):
        opt.load_state_dict(bad)
    assert torch.equal(opt.state[a[0]]["exp_avg"], m)
    amsgrad = {"state": sd["state"], "param_groups": [{**sd["param_groups"][0], "amsgrad": True}]}
    with pytest.raises(Refusal, match="amsgrad"):
        opt.load_state_dict(amsgrad)


def lr_trace(scheduler_of, steps=6):
    ps = make_params()
    opt = mo.AdamW(ps, lr=0.1, backend="cpu-numba")
    sched = scheduler_of(opt)
    lrs = []
    for t in range(steps):
        for p, g in zip(ps, make_grads(ps, t)):
            p.grad = g
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return ps, lrs


@pytest.mark.parametrize("make", [
    lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
    lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5, eta_min=1e-3),
], ids=["StepLR", "CosineAnnealingLR"])
def test_torchs_lr_schedulers_drive_the_lr_as_mojolike_takes_it(make):
    a, lrs = lr_trace(make)
    assert len(set(lrs)) > 1  # the scheduler changed the lr
    arrays = [p.detach().numpy().copy() for p in make_params()]
    ref = mojolike.AdamW(arrays, lr=0.1, backend="cpu-numba")
    for t, lr in enumerate(lrs):
        ref.lr = lr  # a Python float, rounded to the nearest binary32 by the step
        ref.step([g.numpy() for g in make_grads(a, t)])
    assert_same_bits(a, [torch.from_numpy(x) for x in arrays])


def test_a_mojolike_schedule_drives_the_lr():
    sched = mojolike.WarmupCosineLR(0.1, warmup_steps=2, total_steps=6)
    ps = make_params()
    opt = mo.AdamW(ps, lr=0.1, lr_schedule=sched, backend="cpu-numba")
    arrays = [p.detach().numpy().copy() for p in ps]
    ref = mojolike.AdamW(arrays, lr=0.1, lr_schedule=sched, backend="cpu-numba")
    for t in range(4):
        grads = make_grads(ps, t)
        for p, g in zip(ps, grads):
            p.grad = g
        opt.step()
        ref.step([g.numpy() for g in grads])
    assert_same_bits(ps, [torch.from_numpy(x) for x in arrays])


def test_step_calls_the_closure_with_grad_enabled_and_returns_its_loss():
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = mo.SGD([w], lr=0.25)
    calls = []

    def closure():
        calls.append(torch.is_grad_enabled())
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with torch.no_grad():
        loss = opt.step(closure)
    assert calls == [True]
    assert loss.item() == 5.0
    assert w.detach().tolist() == [0.5, -1.0]  # w - 0.25 * 2w


@pytest.mark.parametrize("make", [lambda ps: mo.AdamW(ps, backend="cpu-numba"),
                                  lambda ps: torch.optim.AdamW(ps)], ids=["mojolike", "torch"])
def test_step_hooks_run_as_torchs_do_and_a_pre_hook_may_replace_the_arguments(make):
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)
    ps = make_params()
    opt = make(ps)
    calls = []

    def closure():
        calls.append("closure")
        for p, g in zip(ps, make_grads(ps, 0)):
            p.grad = g
        return 7.0

    def pre(o, args, kwargs):
        calls.append(("pre", o is opt, len(args), args[0] is opt))
        return (args[0], closure), kwargs  # the step then runs with a closure

    handles = [register_optimizer_step_pre_hook(lambda o, a, k: calls.append("global pre")),
               register_optimizer_step_post_hook(lambda o, a, k: calls.append("global post")),
               opt.register_step_pre_hook(pre),
               opt.register_step_post_hook(lambda o, a, k: calls.append(("post", len(a))))]
    try:
        loss = opt.step()
    finally:
        for h in handles:
            h.remove()
    assert loss == 7.0
    assert calls == ["global pre", ("pre", True, 1, True), "closure", ("post", 2),
                     "global post"]


def test_torchs_profiler_sees_the_step_under_torchs_label():
    ps = make_params()
    opt = mo.AdamW(ps, backend="cpu-numba")
    for p, g in zip(ps, make_grads(ps, 0)):
        p.grad = g
    with torch.profiler.profile() as prof:
        opt.step()
    assert "Optimizer.step#AdamW.step" in [e.name for e in prof.events()]


def test_zero_grad_sets_grads_to_none_or_to_zero():
    ps = make_params()
    opt = mo.Adam(ps)
    for p, g in zip(ps, make_grads(ps, 0)):
        p.grad = g
    opt.zero_grad(set_to_none=False)
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in ps)
    opt.zero_grad()
    assert all(p.grad is None for p in ps)
    opt.step()  # no gradient at all: nothing is stepped, as in torch
    assert opt.state_dict()["state"] == {}


def test_a_parameter_without_grad_is_frozen():
    ps = make_params()
    frozen_before = ps[1].detach().clone()
    opt = mo.AdamW(ps, lr=0.1)
    for t in range(3):
        for p, g in zip(ps, make_grads(ps, t, frozen=(1,) if t < 2 else ())):
            p.grad = g
        opt.step()
        if t < 2:
            assert torch.equal(ps[1].detach(), frozen_before)
            assert ps[1] not in opt.state
    # its first step is its step 1 (bias correction of t = 1), as in torch
    assert opt.state[ps[1]]["step"].item() == 1.0
    assert opt.state[ps[0]]["step"].item() == 3.0


def test_the_step_bumps_the_parameters_autograd_version():
    ps = make_params()
    opt = mo.SGD(ps, lr=0.1)
    versions = [p._version for p in ps]
    for p, g in zip(ps, make_grads(ps, 0, frozen=(0,))):
        p.grad = g
    opt.step()
    assert ps[0]._version == versions[0]
    assert all(p._version > v for p, v in zip(ps[1:], versions[1:]))


REFUSED_TENSORS = [
    (lambda: torch.zeros(3, dtype=torch.float64), "float64"),
    (lambda: torch.zeros(3, dtype=torch.float16), "float16"),
    (lambda: torch.zeros(3, dtype=torch.bfloat16), "bfloat16"),
    (lambda: torch.zeros(4, 3).t(), "not contiguous"),
    (lambda: torch.zeros(3, device="meta"), "only CPU tensors"),
]


@pytest.mark.parametrize("make,words", REFUSED_TENSORS,
                         ids=["float64", "float16", "bfloat16", "non-contiguous", "device"])
def test_parameters_outside_the_contract_are_refused_by_name(make, words):
    p = torch.nn.Parameter(make())
    with pytest.raises(Refusal, match=words) as r:
        mo.AdamW([torch.nn.Parameter(torch.zeros(2)), p])
    assert r.value.entry_point == "mojolike.torch.optim.AdamW"
    assert r.value.option == "params[1]"


def test_the_non_contiguous_refusal_advises_making_the_parameter_itself_contiguous():
    p = torch.nn.Parameter(torch.zeros(4, 3).t())
    with pytest.raises(Refusal, match=r"p\.data = p\.data\.contiguous\(\)"):
        mo.SGD([p])
    p.data = p.data.contiguous()  # the advice: torch holds the contiguous tensor
    mo.SGD([p])


@pytest.mark.parametrize("cls,option,value", [
    (mo.AdamW, "amsgrad", True), (mo.Adam, "amsgrad", True), (mo.AdamW, "foreach", True),
    (mo.AdamW, "fused", True), (mo.AdamW, "capturable", True), (mo.SGD, "fused", True),
    (mo.AdamW, "differentiable", True), (mo.SGD, "foreach", True),
])
def test_torch_switches_without_a_mojolike_form_are_refused_by_name(cls, option, value):
    with pytest.raises(Refusal, match=option) as r:
        cls(make_params(), **{option: value})
    assert r.value.option == option
    cls(make_params(), **{option: False})  # the value mojolike honours is taken


def test_a_tensor_lr_is_refused_by_name():
    with pytest.raises(Refusal, match="lr"):
        mo.AdamW(make_params(), lr=torch.tensor(0.01))


def test_a_rebound_parameter_is_refused_by_name_and_nothing_is_written():
    ps = make_params()
    opt = mo.AdamW(ps, lr=0.1)
    ps[2].data = torch.zeros_like(ps[2])
    before = [p.detach().clone() for p in ps]
    for p, g in zip(ps, make_grads(ps, 0)):
        p.grad = g
    with pytest.raises(Refusal, match=r"params\[2\] was rebound"):
        opt.step()
    assert all(torch.equal(p.detach(), b) for p, b in zip(ps, before))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("alias", ["a parameter", "another gradient"])
def test_a_gradient_sharing_memory_is_refused_by_name_and_nothing_is_written(backend, alias):
    ps = make_params()
    opt = mo.AdamW(ps, lr=0.1, backend=backend)
    for t in range(2):  # the second step: the first one's address table is known
        for p, g in zip(ps, make_grads(ps, t)):
            p.grad = g
        if t == 1:
            ps[3].grad = ps[1].detach()[:1] if alias == "a parameter" else ps[1].grad[:1]
        before = [p.detach().clone() for p in ps]
        if t == 0:
            opt.step()
            continue
        named = r"params\[1\]" if alias == "a parameter" else r"grads\[1\]"
        with pytest.raises(Refusal, match=named + r" and (params|grads)\[3\] share memory|"
                                          r"grads\[3\] and " + named + " share memory"):
            opt.step()
        assert all(torch.equal(p.detach(), b) for p, b in zip(ps, before))


def test_a_gradient_with_a_lazy_neg_bit_is_refused_not_read_unnegated():
    ps = make_params()
    opt = mo.AdamW(ps, lr=0.1, backend="cpu-numba")
    for p, g in zip(ps, make_grads(ps, 0)):
        p.grad = g
    ps[0].grad = torch.ones(ps[0].shape)._neg_view()  # memory holds +1, the value is -1
    before = [p.detach().clone() for p in ps]
    with pytest.raises(Refusal, match=r"params\[0\]\.grad has a lazy conj/neg bit"):
        opt.step()
    assert all(torch.equal(p.detach(), b) for p, b in zip(ps, before))


@pytest.mark.parametrize("backend, vouched", [("cpu-numba", True), ("cpu-cffi", True),
                                              ("oracle", False)])
def test_plain_gradients_are_read_without_a_numpy_view_where_the_kernels_take_pieces(
        backend, vouched, monkeypatch):
    from mojolike.torch import checks
    views = []
    real = checks.bound_grads
    monkeypatch.setattr(checks, "bound_grads", lambda *a: views.append(1) or real(*a))
    a, _ = run_torch_adapter(mo.AdamW, {"lr": 1e-2}, 3, backend, frozen=(2,))
    b, _ = run_mojolike(mojolike.AdamW, {"lr": 1e-2}, 3, backend, frozen=(2,))
    assert_same_bits(a, b)
    assert (not views) == vouched


def test_a_non_contiguous_gradient_and_add_param_group_are_refused_by_name():
    ps = make_params()
    opt = mo.AdamW(ps)
    with pytest.raises(Refusal, match="add_param_group"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
    for p, g in zip(ps, make_grads(ps, 0)):
        p.grad = g
    ps[0].grad = torch.zeros(5, 7).t()  # torch's grad_dtype check keeps other dtypes out
    with pytest.raises(Refusal, match=r"params\[0\]\.grad is not contiguous"):
        opt.step()


def test_a_non_finite_gradient_is_refused_before_anything_is_written():
    ps = make_params()
    opt = mo.AdamW(ps)
    before = [p.detach().clone() for p in ps]
    grads = make_grads(ps, 0)
    grads[3][0] = math.inf
    for p, g in zip(ps, grads):
        p.grad = g
    with pytest.raises(Refusal, match="inf or NaN") as r:
        opt.step()
    assert r.value.entry_point == "mojolike.torch.optim.AdamW"
    assert all(torch.equal(p.detach(), b) for p, b in zip(ps, before))


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here")
def test_one_and_two_numba_threads_give_the_same_bits():
    shapes = [(300, 200), (5000,), (64, 64)]
    before = numba.get_num_threads()
    out = []
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            ps = make_params(3, shapes)
            opt = mo.AdamW(ps, lr=1e-2, backend="cpu-numba")
            for t in range(3):
                for p, g in zip(ps, make_grads(ps, t)):
                    p.grad = g
                opt.step()
            out.append(ps)
    finally:
        numba.set_num_threads(before)
    assert_same_bits(*out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_identical_steps_inf_nan_check_finds_one_bad_cell_at_every_position(backend):
    # the check (the plain identical step's first pass) runs four vector accumulators, then
    # single vectors, then a scalar tail, per task and per tensor: a bad cell must be seen
    # wherever it lies (every offset mod 64, tails, the second tensor, a task boundary)
    from mojolike.core import registry
    from mojolike.core.pieces import Pieces
    k = registry.kernels("test", "optim", backend, None)
    sizes = [70000, 203]
    arrays = [np.ones(s, np.float32) for s in sizes]
    offsets = np.array([0, sizes[0], sum(sizes)], np.int64)
    x = Pieces(arrays, offsets)
    assert k.all_finite(x)
    extremes = np.float32([3.4028235e38, -3.4028235e38, 1e-45, -1e-45, -0.0])
    for t in (0, 1):  # finite extremes (x * 0 and x - x are zeros for them) are not flagged
        arrays[t][:5] = extremes
        arrays[t][-5:] = extremes
    assert k.all_finite(x)
    spots = [(0, i) for i in (*range(128), 16383, 16384, 16385, 69935, 69999)] + \
        [(1, i) for i in (0, 63, 64, 191, 192, 202)]
    for t, i in spots:
        for bad in (np.inf, -np.inf, np.nan):
            arrays[t][i] = bad
            assert not k.all_finite(x), (t, i, bad)
            arrays[t][i] = 1.0
    assert k.all_finite(x)


def test_a_python_float_lr_becomes_the_nearest_binary32_value():
    # 0.1 and the next binary64 value above it round to the same binary32: the same bits;
    # the binary32 value one ulp above gives other bits
    lr32 = float(np.float32(0.1))
    ulp_up = float(np.nextafter(np.float32(0.1), np.float32(1.0)))
    out = [run_torch_adapter(mo.AdamW, {"lr": lr}, 3, "cpu-numba")[0]
           for lr in (0.1, math.nextafter(0.1, 1.0), lr32, ulp_up)]
    assert_same_bits(out[0], out[1])
    assert_same_bits(out[0], out[2])
    assert any(not torch.equal(x, y) for x, y in zip(out[0], out[3]))


def test_adam_with_decoupled_weight_decay_is_adamw():
    kw = {"lr": 1e-2, "weight_decay": 0.1}
    a, opt = run_torch_adapter(mo.Adam, {**kw, "decoupled_weight_decay": True}, 3, "cpu-numba")
    b, _ = run_torch_adapter(mo.AdamW, kw, 3, "cpu-numba")
    assert_same_bits(a, b)
    assert opt.param_groups[0]["decoupled_weight_decay"] is True
    c, _ = run_torch_adapter(mo.Adam, kw, 3, "cpu-numba")
    assert any(not torch.equal(x, y) for x, y in zip(a, c))
