"""Semantics against torch 2.13.0 (CPU): 50-step SGD/Adam/AdamW trajectories and clip_grad_norm_.

The bits differ by design: torch computes host scalars (lr/(1-b1^t), sqrt(1-b2^t),
1-dampening) in binary64 and rounds them at use, spells Adam's first moment as a
lerp, lets its vectorized CPU kernels fuse multiply-adds, and sums norms in its own
order. Each of those moves one step's update by a few ulp of the update; over 50
steps of these contractive updates the parameters stay within a few ulp of the
largest parameter magnitude (measured: at most 1 ulp). The tolerance below, 16 ulp
of the largest |p|, leaves room for that and would still catch a wrong formula
(a swapped beta, a missing bias correction or decay moves p by far more).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mojolike
from mojolike.contracts.casegen import bulk_normal

STEPS = 50
CONFIGS = [
    ("SGD", dict(lr=0.01)),
    ("SGD", dict(lr=0.01, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.01, momentum=0.9, dampening=0.1, weight_decay=0.01, maximize=True)),
    ("Adam", dict(lr=1e-3)),
    ("Adam", dict(lr=1e-2, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-3)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99), eps=1e-6, maximize=True)),
]


def _trajectory_gap(kind, kw, max_norm, backend) -> tuple[float, float]:
    p0 = [bulk_normal(3000, "torch/p0"), bulk_normal(517, "torch/p1").reshape(11, 47)]
    ours = [p.copy() for p in p0]
    theirs = [torch.from_numpy(p.copy()) for p in p0]
    opt = getattr(mojolike, kind)(ours, backend=backend, **kw)
    topt = getattr(torch.optim, kind)(theirs, foreach=False, **kw)
    gap, norm_gap = 0.0, 0.0
    for t in range(STEPS):
        g = [(bulk_normal(p.size, f"torch/g{t}/{j}") * np.float32(0.1)).reshape(p.shape)
             for j, p in enumerate(p0)]
        for x, gi in zip(theirs, g):
            x.grad = torch.from_numpy(gi.copy())
        ours_total = opt.step([gi.copy() for gi in g], max_norm=max_norm)
        if max_norm is not None:
            torch_total = float(torch.nn.utils.clip_grad_norm_(theirs, max_norm))
            norm_gap = max(norm_gap, abs(ours_total - torch_total) / torch_total)
        topt.step()
        top = max(float(np.abs(x.numpy()).max()) for x in theirs)
        ulp = float(np.spacing(np.float32(top)))
        gap = max(gap, max(float(np.abs(o - x.numpy()).max()) for o, x in zip(ours, theirs)) / ulp)
    return gap, norm_gap


@pytest.mark.parametrize("max_norm", [None, 1.0], ids=["no-clip", "clip"])
@pytest.mark.parametrize("kind,kw", CONFIGS, ids=lambda v: v if isinstance(v, str) else "")
def test_trajectories_stay_within_16_ulp_of_torch_over_50_steps(kind, kw, max_norm):
    gap, norm_gap = _trajectory_gap(kind, kw, max_norm, "cpu-numba")
    assert gap <= 16, f"{kind} {kw}: {gap} ulp of the largest parameter apart after {STEPS} steps"
    # torch's norms sum in another order: relative gap of a few float32 roundings
    assert norm_gap <= 1e-5, f"{kind} {kw}: clip total norms differ by {norm_gap:.2e} relative"


def test_clip_grad_norm_agrees_with_torch_and_scales_alike():
    gs = [bulk_normal(5000, "torch/clip/0"), bulk_normal(77, "torch/clip/1")]
    tg = [torch.from_numpy(g.copy()) for g in gs]
    for t in tg:
        t.grad = t.clone()
    ours = mojolike.clip_grad_norm_(gs, 3.0)
    theirs = float(torch.nn.utils.clip_grad_norm_(tg, 3.0))
    assert ours == pytest.approx(theirs, rel=1e-5)
    for g, t in zip(gs, tg):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-5, atol=0)
