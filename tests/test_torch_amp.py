"""mojolike.torch.amp.GradScaler: torch's API, mojolike's checksum and gate."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mojolike.torch.optim as mo
from mojolike.core.refusals import Refusal
from mojolike.torch.amp import GradScaler

SHAPES = [(6, 4), (9,), (2, 3)]
BAD = {2: math.inf, 5: -math.inf, 6: math.nan, 7: math.inf}  # step -> the injected value


def params():
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]


def scaled_grads(step, scale):
    """The gradients a scaled loss's backward gives (the same for both scalers): random
    values times the scale, with an injected inf/NaN at the steps of BAD."""
    g = torch.Generator().manual_seed(100 + step)
    grads = [torch.randn(s, generator=g) * scale for s in SHAPES]
    if step in BAD:
        grads[step % len(SHAPES)].view(-1)[step] = BAD[step]
    return grads


def run(scaler, opt, ps, steps=12):
    scales, skipped, unscaled = [], [], []
    for t in range(steps):
        before = [p.detach().clone() for p in ps]
        scaler.scale(torch.tensor(1.0))  # as a loop scales its loss (torch's scaler needs it)
        for p, g in zip(ps, scaled_grads(t, scaler.get_scale())):
            p.grad = g
        scaler.step(opt)
        unscaled.append([p.grad.clone() for p in ps])
        skipped.append(all(torch.equal(p.detach(), b) for p, b in zip(ps, before)))
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, skipped, unscaled


@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
def test_the_scale_sequence_and_skipped_steps_equal_torchs_grad_scaler(backend):
    kw = {"init_scale": 2.0**10, "growth_factor": 2.0, "backoff_factor": 0.5,
          "growth_interval": 3}
    ps = params()
    ours = run(GradScaler(**kw, backend=backend),
               mo.SGD(ps, lr=0.1, backend=backend), ps)
    qs = params()
    theirs = run(torch.amp.GradScaler("cpu", **kw), torch.optim.SGD(qs, lr=0.1), qs)
    assert ours[0] == theirs[0]  # the scales after each update
    assert ours[1] == theirs[1] == [t in BAD for t in range(12)]  # the skipped steps
    assert any(b > a for a, b in zip(ours[0], ours[0][1:]))  # the scale grew somewhere
    # the unscaled gradients left in .grad: g * binary32(1 / scale), torch's bits
    for t, (a, b) in enumerate(zip(ours[2], theirs[2])):
        for x, y in zip(a, b):
            assert np.array_equal(x.numpy().view(np.uint32), y.numpy().view(np.uint32)) or \
                t in BAD, t


def test_unscale_then_clip_then_step_skips_an_inf_step():
    from mojolike.torch.nn.utils import clip_grad_norm_
    ps = params()
    opt = mo.AdamW(ps, lr=0.1)
    scaler = GradScaler(init_scale=8.0)
    for p, g in zip(ps, scaled_grads(2, 8.0)):
        p.grad = g
    before = [p.detach().clone() for p in ps]
    scaler.unscale_(opt)
    assert not math.isfinite(clip_grad_norm_(ps, 1.0).item())
    assert scaler.step(opt) is None
    scaler.update()
    assert all(torch.equal(p.detach(), b) for p, b in zip(ps, before))
    assert scaler.get_scale() == 4.0
    assert opt.state_dict()["state"] == {}


def test_scale_multiplies_the_loss_and_the_state_loads_into_torchs_scaler():
    scaler = GradScaler(init_scale=2.0**4, growth_interval=7)
    loss = torch.tensor(0.3)
    assert torch.equal(scaler.scale(loss), loss * 16.0)
    ref = torch.amp.GradScaler("cpu")
    ref.load_state_dict(scaler.state_dict())
    assert ref.get_scale() == 16.0 and ref.get_growth_interval() == 7
    back = GradScaler()
    back.load_state_dict(ref.state_dict())
    assert back.state_dict() == scaler.state_dict()


def test_a_torch_optimizer_cuda_and_a_closure_are_refused_by_name():
    ps = params()
    with pytest.raises(Refusal, match="mojolike.torch.optim optimizer"):
        GradScaler().step(torch.optim.SGD(ps, lr=0.1))
    with pytest.raises(Refusal, match="device"):
        GradScaler("cuda")
    with pytest.raises(Refusal, match="closure"):
        GradScaler().step(mo.SGD(ps), lambda: None)


def test_a_disabled_scaler_steps_as_the_optimizer_does():
    ps = params()
    opt = mo.SGD(ps, lr=0.5)
    scaler = GradScaler(enabled=False)
    for p, g in zip(ps, scaled_grads(0, 1.0)):
        p.grad = g
    want = [(p - 0.5 * p.grad).detach() for p in ps]
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1.0
    for p, w in zip(ps, want):
        assert torch.allclose(p.detach(), w)
