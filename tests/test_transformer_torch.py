"""The transformer ops against torch 2.13 (CPU, float32), forward and backward.

The contract fixes orders torch leaves open (its vectorized reductions, `x * (1/S)`,
its rearranged backward formulas), so results agree to float32 rounding, not bit for
bit: each comparison allows a relative error of a few units in 2^-24 times the number
of terms a value sums (the error of two different summation trees over n terms is at
most about n ulps of the sum of magnitudes), and says so where it is looser.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mojolike
from conftest import CPU_BACKENDS

torch.manual_seed(0)
BACKENDS = CPU_BACKENDS


def _rng(key: int) -> np.random.Generator:
    return np.random.default_rng(key)


def _close(got, want, terms: int, what: str, scale: float | None = None) -> None:
    """|got - want| <= 8 n 2^-24 (|want| + scale): n terms folded in two different trees."""
    want = np.asarray(want, np.float64)
    got = np.asarray(got, np.float64)
    mag = np.abs(want) + (np.abs(want).max() if scale is None else scale)
    bound = 8 * max(terms, 1) * 2.0**-24 * mag
    bad = ~(np.abs(got - want) <= bound)
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} outside the bound; worst " \
                          f"{np.max(np.abs(got - want) - bound):.3g}"


def _t(a, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, requires_grad=grad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_and_log_softmax_and_their_backward_agree_with_torch(backend, dim):
    r = _rng(1)
    x = (r.standard_normal((6, 40)) * 3).astype(np.float32)
    dy = r.standard_normal(x.shape).astype(np.float32)
    for ours, ours_bwd, theirs in ((mojolike.softmax, mojolike.softmax_backward, torch.softmax),
                                   (mojolike.log_softmax, mojolike.log_softmax_backward,
                                    torch.log_softmax)):
        tx = _t(x, True)
        ty = theirs(tx, dim)
        ty.backward(_t(dy))
        y = ours(x, dim, backend=backend)
        n = x.shape[dim]
        _close(y, ty.detach().numpy(), n, f"{theirs.__name__} forward")
        _close(ours_bwd(dy, y, dim, backend=backend), tx.grad.numpy(), n,
               f"{theirs.__name__} backward")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_and_its_backward_agree_with_torch(backend, affine):
    r = _rng(2)
    x = (r.standard_normal((5, 3, 64)) + 4).astype(np.float32)
    dy = r.standard_normal(x.shape).astype(np.float32)
    w = r.standard_normal(64).astype(np.float32) if affine else None
    b = r.standard_normal(64).astype(np.float32) if affine else None
    tx = _t(x, True)
    tw, tb = (_t(w, True), _t(b, True)) if affine else (None, None)
    ty = F.layer_norm(tx, (64,), tw, tb, 1e-5)
    ty.backward(_t(dy))
    y = mojolike.layer_norm(x, (64,), w, b, 1e-5, backend=backend)
    _close(y, ty.detach().numpy(), 64, "layer_norm forward")
    dx, dw, db = mojolike.layer_norm_backward(dy, x, (64,), w, b, 1e-5, backend=backend)
    _close(dx, tx.grad.numpy(), 64, "layer_norm dx")
    if affine:
        _close(dw, tw.grad.numpy(), 15, "layer_norm dweight", scale=float(np.abs(dy).max()) * 3)
        _close(db, tb.grad.numpy(), 15, "layer_norm dbias", scale=float(np.abs(dy).max()))
    else:
        assert dw is None and db is None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_its_backward_agree_with_torch(backend, approximate):
    r = _rng(3)
    x = (r.standard_normal(4000) * 4).astype(np.float32)
    dy = r.standard_normal(x.shape).astype(np.float32)
    tx = _t(x, True)
    ty = F.gelu(tx, approximate=approximate)
    ty.backward(_t(dy))
    # elementwise: torch's erf/tanh are within a few ulps of the exact value, ours is the exact
    # value rounded; the formula and its order are torch's, so a few ulps of the result remain
    _close(mojolike.gelu(x, approximate, backend=backend), ty.detach().numpy(), 2, "gelu")
    _close(mojolike.gelu_backward(dy, x, approximate, backend=backend), tx.grad.numpy(), 2,
           "gelu backward", scale=float(np.abs(dy).max()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shapes", [((7, 33), (33, 5)), ((2, 1, 4, 33), (3, 33, 6)),
                                    ((4, 9), (2, 3, 9, 2))], ids=str)
def test_matmul_with_broadcast_batches_and_its_backward_agree_with_torch(backend, shapes):
    r = _rng(4)
    a = r.standard_normal(shapes[0]).astype(np.float32)
    b = r.standard_normal(shapes[1]).astype(np.float32)
    ta, tb = _t(a, True), _t(b, True)
    ty = ta @ tb
    dy = r.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(_t(dy))
    y = mojolike.matmul(a, b, backend=backend)
    assert y.shape == tuple(ty.shape)
    k = a.shape[-1]
    _close(y, ty.detach().numpy(), k, "matmul", scale=float(np.sqrt(k)))
    da, db = mojolike.matmul_backward(dy, a, b, backend=backend)
    _close(da, ta.grad.numpy(), 40, "matmul da", scale=8.0)
    _close(db, tb.grad.numpy(), 40, "matmul db", scale=8.0)


def _attention_inputs(key: int, b=2, h=3, nl=17, ns=17, e=16, ev=8):
    r = _rng(key)
    return (r.standard_normal((b, h, nl, e)).astype(np.float32),
            r.standard_normal((b, h, ns, e)).astype(np.float32),
            r.standard_normal((b, h, ns, ev)).astype(np.float32),
            r.standard_normal((b, h, nl, ev)).astype(np.float32))


def _torch_sdpa(q, k, v, do, **kw):
    tq, tk, tv = _t(q, True), _t(k, True), _t(v, True)
    if isinstance(kw.get("attn_mask"), np.ndarray):
        kw["attn_mask"] = torch.tensor(kw["attn_mask"])
    to = F.scaled_dot_product_attention(tq, tk, tv, **kw)
    to.backward(_t(do))
    return to.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()


ATTENTION_CASES = {
    "plain": dict(),
    "causal": dict(is_causal=True),
    "causal-l-lt-s": dict(is_causal=True, shape=(9, 17)),
    "causal-l-gt-s": dict(is_causal=True, shape=(17, 9)),
    "bool-mask": dict(mask="bool"),
    "float-mask": dict(mask="float"),
    "scale": dict(scale=0.3),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ATTENTION_CASES))
def test_scaled_dot_product_attention_and_its_backward_agree_with_torch(backend, name):
    spec = dict(ATTENTION_CASES[name])
    nl, ns = spec.pop("shape", (17, 17))
    q, k, v, do = _attention_inputs(5, nl=nl, ns=ns)
    kw = {key: val for key, val in spec.items() if key != "mask"}
    if spec.get("mask") == "bool":
        m = _rng(6).standard_normal((nl, ns)) > -0.5
        m[:, 0] = True  # every row keeps a key: torch's fused CPU kernel gives NaN for empty rows
        kw["attn_mask"] = m
    elif spec.get("mask") == "float":
        kw["attn_mask"] = _rng(7).standard_normal((1, 3, nl, ns)).astype(np.float32)
    want = _torch_sdpa(q, k, v, do, **kw)
    o = mojolike.scaled_dot_product_attention(q, k, v, backend=backend, **kw)
    grads = mojolike.scaled_dot_product_attention_backward(do, q, k, v, backend=backend, **kw)
    # a score folds 16 products, a weighted sum 17 terms, a gradient about 17 x 16 more
    _close(o, want[0], 40, f"{name} output", scale=4.0)
    for got, w, what in zip(grads, want[1:], ("dq", "dk", "dv")):
        _close(got, w, 400, f"{name} {what}", scale=4.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fully_masked_row_is_zero_as_torch_s_math_path_gives(backend):
    q, k, v, do = _attention_inputs(8, b=1, h=1, nl=4, ns=5)
    m = np.ones((4, 5), bool)
    m[2] = False
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        want = _torch_sdpa(q, k, v, do, attn_mask=m)
    o = mojolike.scaled_dot_product_attention(q, k, v, attn_mask=m, backend=backend)
    assert (o[0, 0, 2] == 0).all() and not np.signbit(o[0, 0, 2]).any()
    np.testing.assert_array_equal(want[0][0, 0, 2], 0.0)
    dq = mojolike.scaled_dot_product_attention_backward(do, q, k, v, attn_mask=m,
                                                        backend=backend)[0]
    assert (dq[0, 0, 2] == 0).all()
    np.testing.assert_array_equal(want[1][0, 0, 2], 0.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_attention_equals_torch_s_formula_with_mojolike_s_keep_mask(backend):
    """torch's RNG is not ours; with the keep mask the contract derives (Philox position
    ((b H + h) L + i) S + j of the call's stream), torch's math formula gives our output."""
    from mojolike.oracles.attention import dropout_keep
    q, k, v, do = _attention_inputs(9, b=1, h=2, nl=6, ns=7, e=4, ev=3)
    p, seed, stream = 0.25, 11, 4
    gen = mojolike.Generator(seed, backend=backend)
    o = mojolike.scaled_dot_product_attention(q, k, v, dropout_p=p, generator=gen, stream=stream,
                                              backend=backend)
    keep = torch.tensor(dropout_keep(seed, stream, np.float32(p), (1, 2, 6, 7)))
    s = (torch.tensor(q, dtype=torch.float64) @ torch.tensor(k, dtype=torch.float64).mT) * 0.5
    w = torch.softmax(s, -1) * keep / (1 - p)
    want = (w @ torch.tensor(v, dtype=torch.float64)).numpy()
    _close(o, want, 20, "dropout output", scale=4.0)
