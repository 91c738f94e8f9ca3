"""Semantics against torch 2.13.0 (CPU) F.cross_entropy, and the oracle row against float64.

The bits differ by design: torch's log_softmax uses its own vectorized exp and log
(about 1 ulp, not correctly rounded), sums the exponentials in its own order, and
computes the smoothing scalars (1 - eps, eps / V) in binary64. Each of those moves
a row loss by a few ulp of the row's magnitudes and a gradient entry by a few ulp
of 1, so the loss is compared within relative 1e-5 (plus 1e-6 absolute for losses
near 0) and the gradient within 1e-6 absolute + 1e-5 relative; a wrong formula
(a missing smoothing term, the wrong divisor, an ignored row counted) moves them
by far more.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import available
from hypothesis import given, settings
from hypothesis import strategies as st
from mojolike.oracles import loss as spec

from mojolike.ops.loss import cross_entropy

NATIVE = importlib.util.find_spec("mojolike.native.loss") is not None
BACKENDS = [
    pytest.param("oracle", 6, 50, id="oracle-6x50"),
    pytest.param("cpu-numba", 6, 50, id="cpu-numba-6x50", marks=pytest.mark.skipif(
        not NATIVE, reason="mojolike.native.loss (the cpu-numba loss kernels) does not exist yet")),
    pytest.param("cpu-numba", 64, 3000, id="cpu-numba-64x3000", marks=pytest.mark.skipif(
        not NATIVE, reason="mojolike.native.loss (the cpu-numba loss kernels) does not exist yet")),
]
CONFIGS = [  # (reduction, ignore_index, num_items)
    ("mean", -100, None), ("sum", -100, None), ("none", -100, None),
    ("mean", 3, None), ("sum", 3, None), ("none", 3, None), ("mean", -100, 11),
]


def case(n, v, ignore_index, seed=0):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((n, v)) * 4).astype(np.float32)
    t = rng.integers(0, v, n)
    t[1] = ignore_index
    t[n // 2] = 3  # a real class, ignored when ignore_index=3
    return z, t


def torch_ce(z, t, ignore_index, reduction, eps, num_items):
    x = torch.from_numpy(z.copy()).requires_grad_()
    kw = dict(ignore_index=ignore_index, label_smoothing=eps)
    if num_items is not None:
        loss = F.cross_entropy(x, torch.from_numpy(t), reduction="sum", **kw) / num_items
    else:
        loss = F.cross_entropy(x, torch.from_numpy(t), reduction=reduction, **kw)
    if reduction == "none":
        return loss.detach().numpy(), None
    loss.backward()
    return float(loss.detach()), x.grad.numpy()


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("reduction,ignore_index,num_items", CONFIGS)
@pytest.mark.parametrize("backend,n,v", BACKENDS)
def test_loss_and_gradient_agree_with_torch(backend, n, v, reduction, ignore_index, num_items, eps):
    if not available(backend):
        pytest.skip(f"{backend} cannot run here")
    z, t = case(n, v, ignore_index)
    want, want_grad = torch_ce(z, t, ignore_index, reduction, eps, num_items)
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=eps,
              num_items=num_items, backend=backend)
    if reduction == "none":
        got = cross_entropy(z, t, **kw)
        assert got.dtype == np.float32 and got.shape == (n,)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        return
    got, grad = cross_entropy(z, t, return_grad=True, **kw)
    assert isinstance(got, float) and got == np.float32(got)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert grad.dtype == np.float32 and grad.shape == (n, v)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    assert cross_entropy(z, t, **kw) == got  # without return_grad: the same bits


# -- the oracle row against a straightforward float64 computation -------------------------------

logit = st.floats(-60, 60, width=32, allow_subnormal=True)


@st.composite
def rows(draw):
    v = draw(st.integers(1, 12))
    z = draw(st.lists(logit, min_size=v, max_size=v))
    t = draw(st.integers(0, v - 1))
    eps = draw(st.sampled_from([0.0, 0.1]) | st.floats(0, 0.875, width=32))
    return z, t, eps


@settings(max_examples=200, deadline=None)
@given(rows())
def test_the_oracle_row_is_within_rounding_of_float64(row):
    z, t, eps = row
    v = len(z)
    got, grad = spec.row(z, t, spec.host_scalars(eps, v, "sum"), want_grad=True)
    e = float(np.float32(eps))
    d = np.float64(z) - max(z)
    logp = d - np.log(np.exp(d).sum())
    want = (1 - e) * -logp[t] + e * -logp.mean()
    q = np.full(v, e / v)
    q[t] += 1 - e
    want_grad = np.exp(logp) - q
    # float32 rounds d (2^-24 |d|), the fold of V exponentials (about V * 2^-24 relative) and
    # each later step once: a few ulp of the magnitudes involved, 2^-20 leaves room
    scale = v + abs(want) + float(np.abs(d).max())
    assert abs(got - want) <= 2.0**-20 * scale, (got, want)
    assert np.abs(np.float64(grad) - want_grad).max() <= 2.0**-20 * (v + 1)
