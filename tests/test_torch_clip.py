"""mojolike.torch.nn.utils.clip_grad_norm_: torch's signature on the two-level fold norm."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mojolike
from mojolike.core.refusals import Refusal
from mojolike.torch.nn.utils import clip_grad_norm_

SHAPES = [(40, 30), (77,), (5, 5, 5)]


def params(seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g) * scale
    return ps


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba", "cpu-cffi"])
def test_the_clip_gives_mojolikes_clip_bits_and_returns_a_float32_tensor(backend):
    ps = params()
    arrays = [p.grad.numpy().copy() for p in ps]
    total = clip_grad_norm_(ps, 1.0, backend=backend)
    want = mojolike.clip_grad_norm_(arrays, 1.0, backend=backend)
    assert isinstance(total, torch.Tensor) and total.dtype == torch.float32 and total.dim() == 0
    assert total.item() == want
    for p, a in zip(ps, arrays):
        assert np.array_equal(p.grad.numpy().view(np.uint32), a.view(np.uint32))


def test_the_clip_agrees_with_torchs_within_rounding():
    ps, qs = params(), params()
    ours = clip_grad_norm_(ps, 0.5)
    theirs = torch.nn.utils.clip_grad_norm_(qs, 0.5)
    # torch sums the squares in another order (vectorized partial sums), so its norm differs
    # by a few ulps of binary32; 1e-6 relative allows ~8 ulps
    assert math.isclose(ours.item(), theirs.item(), rel_tol=1e-6)
    for p, q in zip(ps, qs):
        assert torch.allclose(p.grad, q.grad, rtol=1e-6, atol=0)


def test_a_small_norm_leaves_the_gradients_unchanged_and_frozen_ones_are_left_out():
    ps = params(scale=1e-3)
    ps[1].grad = None
    before = [None if p.grad is None else p.grad.clone() for p in ps]
    total = clip_grad_norm_(ps, 10.0)
    assert total.item() == mojolike.get_total_norm([ps[0].grad.numpy(), ps[2].grad.numpy()])
    assert all(b is None or torch.equal(p.grad, b) for p, b in zip(ps, before))
    assert clip_grad_norm_([torch.nn.Parameter(torch.zeros(2))], 1.0).item() == 0.0


def test_a_non_finite_norm_scales_as_torch_does_or_is_refused_with_error_if_nonfinite():
    ps, qs = params(), params()
    for x in (ps, qs):
        x[0].grad[3, 4] = math.inf
    strict = params()
    strict[0].grad[3, 4] = math.inf
    kept = [p.grad.clone() for p in strict]
    with pytest.raises(Refusal, match="non-finite"):
        clip_grad_norm_(strict, 1.0, error_if_nonfinite=True)
    assert all(torch.equal(p.grad, k) for p, k in zip(strict, kept))  # inf == inf
    ours, theirs = clip_grad_norm_(ps, 1.0), torch.nn.utils.clip_grad_norm_(qs, 1.0)
    assert math.isinf(ours.item()) and math.isinf(theirs.item())
    for p, q in zip(ps, qs):
        assert torch.equal(p.grad.isnan(), q.grad.isnan())
        assert torch.equal(torch.nan_to_num(p.grad), torch.nan_to_num(q.grad))


@pytest.mark.parametrize("norm_type", [1.0, math.inf, 3, "fro"])
def test_other_norm_types_and_foreach_are_refused_by_name(norm_type):
    with pytest.raises(Refusal, match="norm_type"):
        clip_grad_norm_(params(), 1.0, norm_type=norm_type)
    with pytest.raises(Refusal, match="foreach"):
        clip_grad_norm_(params(), 1.0, foreach=True)


def test_float64_gradients_are_refused_by_name():
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    p.grad = torch.ones(3, dtype=torch.float64)
    with pytest.raises(Refusal, match="float64"):
        clip_grad_norm_([p], 1.0)
