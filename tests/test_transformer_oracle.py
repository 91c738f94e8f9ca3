"""The transformer definitions (oracles/transformer.py, oracles/attention.py) against torch 2.13 (CPU,
float32) and the invariances of contracts/transformer.md on the definitions themselves.

The bits differ from torch by design wherever a sum is involved: torch's reductions and GEMMs
use their own trees and fused multiply-adds; ours fold on the one tree. Both are within the
classic bound of the exact result, gamma_d * sum |terms|, d the longest chain of roundings a
term goes through: ours at most 1 + 32 + 5 + log2(chunks) (product, lane, butterfly, pairwise),
torch's at most 1 + n over n terms. So a sum is compared within (d_ours + d_torch) * 2^-24 *
sum |terms|, and an elementwise step adds a few 2^-24 relative; softmax's exponent carries the
error of its argument (|d| * 2^-24 relative for d = x - max) and attention's probabilities carry
the scores' error. A wrong formula (a missing scale, the wrong D, a sum over the wrong index, an
off-by-one mask) moves a cell by a sizeable part of its sum of |terms|, far beyond these bounds.
The invariances are checked bit for bit.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from mojolike.oracles import attention as at
from mojolike.oracles import f32, rng
from mojolike.oracles.fold import fold
from mojolike.oracles import transformer as tr
from mojolike.oracles.layers import linear, linear_backward

U = 2.0 ** -24


def depth(n: int) -> int:
    """The longest rounding chain of our fold of n terms."""
    return 1 + 32 + 5 + math.ceil(math.log2(max(1, -(-n // 1024))))


def sum_gap(n: int) -> float:
    """(d_ours + d_torch) * 2^-24 for two sums of n terms."""
    return (depth(n) + 1 + n) * U


def normal(shape, seed, scale=1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def lists(a: np.ndarray):
    return np.asarray(a, np.float32).astype(np.float64).tolist()


def bits_equal(a, b) -> bool:
    fa, fb = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return fa.shape == fb.shape and all(f32.same(x, y) for x, y in zip(fa, fb))


def assert_within(got, want, bound, what: str) -> None:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert g.shape == w.shape, f"{what}: shape {g.shape} vs torch's {w.shape}"
    same = (g == w) | (np.isnan(g) & np.isnan(w))  # infinities and NaNs must agree exactly
    with np.errstate(invalid="ignore"):
        gap = np.where(same, 0.0, np.abs(g - w))
    gap = np.where(np.isnan(gap), np.inf, gap)
    excess = gap - np.broadcast_to(bound, gap.shape)
    worst = np.unravel_index(int(np.argmax(excess)), gap.shape)
    assert excess[worst] <= 0, (f"{what}: at {worst} ours {g[worst]!r}, torch {w[worst]!r}, gap "
                                f"{gap[worst]:.3g} > bound {np.broadcast_to(bound, gap.shape)[worst]:.3g}")


def t32(a):
    return torch.from_numpy(np.array(a, np.float32))


# -- softmax and log_softmax ----------------------------------------------------------------------

ROWS = [normal((3, 1), 1), normal((3, 31), 2, 4.0), normal((2, 32), 3), normal((2, 33), 4, 30.0),
        np.array([[-0.0, 0.0, -0.0], [1e30, -1e30, 1e30], [3e38, 3e38, -3e38]], np.float32)]


def softmax_bound(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = np.abs(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    n = x.shape[1]
    return (2 * sum_gap(n) + 8 * U + 4 * U * np.minimum(d, 200.0)) * np.abs(y) + 1e-44


@pytest.mark.parametrize("x", ROWS, ids=lambda x: f"{x.shape}")
def test_softmax_is_torchs_within_its_rounding(x):
    y = tr.softmax_rows(lists(x))
    want = torch.softmax(t32(x), dim=-1).numpy()
    assert_within(y, want, softmax_bound(x, want), "softmax")


@pytest.mark.parametrize("x", ROWS, ids=lambda x: f"{x.shape}")
def test_log_softmax_is_torchs_within_its_rounding(x):
    y = tr.log_softmax_rows(lists(x))
    want = torch.log_softmax(t32(x), dim=-1).numpy().astype(np.float64)
    d = np.abs(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    bound = 4 * U * (d + np.abs(want)) + 2 * sum_gap(x.shape[1]) + 4 * U
    assert_within(y, want, bound, "log_softmax")


def test_softmax_of_signed_zeros_and_huge_logits_is_exact_where_torch_is():
    assert tr.softmax_rows([[-0.0, 0.0]]) == [[0.5, 0.5]]
    assert tr.softmax_rows([[3e38, -3e38]]) == [[1.0, 0.0]]       # d = -inf: e = +0
    assert tr.log_softmax_rows([[5.0]]) == [[0.0]]
    assert math.isnan(tr.softmax_rows([[1.0, math.nan]])[0][0])  # NaN propagates, whatever its place


@pytest.mark.parametrize("n", [1, 31, 32, 33])
def test_softmax_backward_is_torchs_formula(n):
    x, dy = normal((3, n), 10 + n, 3.0), normal((3, n), 20 + n)
    y = np.array(tr.softmax_rows(lists(x)), np.float32)
    got = tr.softmax_backward_rows(lists(dy), lists(y))
    want = torch.ops.aten._softmax_backward_data(t32(dy), t32(y), -1, torch.float32).numpy()
    c_abs = np.sum(np.abs(dy.astype(np.float64) * y), axis=1, keepdims=True)
    c = np.sum(dy.astype(np.float64) * y, axis=1, keepdims=True)
    bound = np.abs(y) * (sum_gap(n) * c_abs + 6 * U * (np.abs(dy) + np.abs(c)))
    assert_within(got, want, bound, "softmax_backward")


@pytest.mark.parametrize("n", [1, 31, 32, 33])
def test_log_softmax_backward_is_torchs_formula(n):
    x, dy = normal((3, n), 30 + n, 3.0), normal((3, n), 40 + n)
    y = np.array(tr.log_softmax_rows(lists(x)), np.float32)
    got = tr.log_softmax_backward_rows(lists(dy), lists(y))
    want = torch.ops.aten._log_softmax_backward_data(t32(dy), t32(y), -1, torch.float32).numpy()
    p = np.exp(y.astype(np.float64))
    s_abs = np.sum(np.abs(dy.astype(np.float64)), axis=1, keepdims=True)
    bound = 6 * U * (np.abs(dy) + p * s_abs) + p * sum_gap(n) * s_abs
    assert_within(got, want, bound, "log_softmax_backward")


# -- layer_norm -----------------------------------------------------------------------------------

@pytest.mark.parametrize("d,affine", [(1, True), (31, True), (32, False), (33, True), (6, True)])
def test_layer_norm_and_its_backward_are_torchs(d, affine):
    x, dy = normal((4, d), 50 + d, 2.0) + np.float32(3.0), normal((4, d), 60 + d)
    w = normal((d,), 70 + d) if affine else None
    b = normal((d,), 80 + d) if affine else None
    shape = (2, 3) if d == 6 else (d,)  # normalized_shape over two trailing dims, flattened
    xt = torch.from_numpy(x.reshape(4, *shape)).requires_grad_()
    wt = torch.from_numpy(w.reshape(shape)).requires_grad_() if affine else None
    bt = torch.from_numpy(b.reshape(shape)).requires_grad_() if affine else None
    yt = F.layer_norm(xt, shape, wt, bt, eps=1e-5)
    yt.backward(torch.from_numpy(dy.reshape(yt.shape)))
    y = tr.layer_norm_rows(lists(x), None if w is None else w.tolist(), None if b is None else b.tolist())
    dx, dw, db = tr.layer_norm_backward_rows(lists(dy), lists(x), None if w is None else w.tolist(),
                                             None if b is None else b.tolist())
    x64 = x.astype(np.float64)
    c = x64 - x64.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5)
    h = c * rstd
    k = 4 * (depth(d) + d + 8) * U  # both sides' sums, and the few elementwise roundings
    scale_y = (np.abs(h) + 1) * (1 if w is None else np.abs(w)) + (0 if b is None else np.abs(b))
    assert_within(y, yt.detach().numpy().reshape(4, d), k * scale_y, "layer_norm")
    g = np.abs(dy.astype(np.float64) * (1 if w is None else w))
    mag = rstd * (g + g.mean(axis=1, keepdims=True) * (1 + np.abs(h)) + np.abs(h) * (g * (np.abs(h) + 1)).mean(axis=1, keepdims=True))
    assert_within(dx, xt.grad.numpy().reshape(4, d), k * mag, "layer_norm dx")
    if affine:
        rows_k = 4 * (depth(4) + 4 + 8) * U + k
        assert_within(dw, wt.grad.numpy().ravel(), rows_k * np.sum(np.abs(dy * (np.abs(h) + 1)), axis=0), "dweight")
        assert_within(db, bt.grad.numpy().ravel(), sum_gap(4) * np.sum(np.abs(dy), axis=0), "dbias")
    else:
        assert dw is None and db is None


def test_two_pass_variance_is_accurate_where_one_pass_is_not():
    """The negative control's premise: a large mean over a small spread."""
    x = [f32.round_float(4096.0 + 0.25 * k) for k in range(8)]
    exact = Fraction(sum(Fraction(v) for v in x)) / 8
    var_exact = sum((Fraction(v) - exact) ** 2 for v in x) / 8
    _, c, rstd2 = tr.layer_norm_stats(x, 0.0)
    _, _, rstd1 = tr.layer_norm_stats(x, 0.0, one_pass=True)
    want = 1 / math.sqrt(var_exact)
    assert abs(rstd2 - want) <= 4 * U * want
    assert abs(rstd1 - want) > 0.1 * want or math.isinf(rstd1) or math.isnan(rstd1)
    assert tr.layer_norm_rows([x], eps=0.0) != tr.layer_norm_rows([x], eps=0.0, one_pass=True)


# -- matmul ---------------------------------------------------------------------------------------

MATMUL_SHAPES = [((3, 1), (1, 2)), ((2, 31), (31, 3)), ((2, 1, 3, 33), (4, 33, 2)),
                 ((1, 2, 32), (3, 32, 2)), ((3, 2, 4), (4, 5))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_and_its_backward_are_torchs_with_broadcast_batch_dims(sa, sb):
    a, b = normal(sa, 90 + len(sa)), normal(sb, 91 + sb[-1])
    at_, bt_ = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    yt = at_ @ bt_
    dy = normal(tuple(yt.shape), 92)
    yt.backward(torch.from_numpy(dy))
    y = tr.matmul(lists(a), lists(b))
    k = sa[-1]
    prod_abs = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert_within(y, yt.detach().numpy(), sum_gap(k) * prod_abs, "matmul")
    da, db = tr.matmul_backward(lists(dy), lists(a), lists(b))
    ga = np.abs(dy.astype(np.float64)) @ np.swapaxes(np.abs(b.astype(np.float64)), -1, -2)
    gb = np.swapaxes(np.abs(a.astype(np.float64)), -1, -2) @ np.abs(dy.astype(np.float64))
    entries = int(np.prod(yt.shape[:-2], dtype=np.int64))
    reduce_gap = sum_gap(sb[-1] * entries) + sum_gap(entries)
    assert_within(da, at_.grad.numpy(), reduce_gap * _reduce_to(ga, sa), "matmul da")
    reduce_gap = sum_gap(sa[-2] * entries) + sum_gap(entries)
    assert_within(db, bt_.grad.numpy(), reduce_gap * _reduce_to(gb, sb), "matmul db")


def _reduce_to(g: np.ndarray, shape) -> np.ndarray:
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for d, n in enumerate(shape):
        if n == 1 and g.shape[d] != 1:
            g = g.sum(axis=d, keepdims=True)
    return g


def test_matmul_is_linear_on_the_transposed_weight_bit_for_bit():
    a, b, dy = normal((5, 33), 100), normal((33, 4), 101), normal((5, 4), 102)
    w = lists(b.T)
    assert bits_equal(tr.matmul(lists(a), lists(b)), linear(lists(a), w))
    da, db = tr.matmul_backward(lists(dy), lists(a), lists(b))
    dx, dw, _ = linear_backward(lists(dy), lists(a), w, bias=False)
    assert bits_equal(da, dx) and bits_equal(db, np.array(dw).T)


def test_a_matmul_batch_entry_is_the_same_computed_alone():
    a, b = normal((3, 2, 4, 31), 110), normal((2, 31, 3), 111)
    y = tr.matmul(lists(a), lists(b))
    for i in range(3):
        for j in range(2):
            assert bits_equal(y[i][j], tr.matmul(lists(a[i, j]), lists(b[j])))


def test_a_broadcast_gradient_is_the_fold_of_the_entries_in_ascending_order():
    a, b, dy = normal((3, 2, 5), 120), normal((5, 2), 121), normal((3, 2, 2), 122)
    _, db = tr.matmul_backward(lists(dy), lists(a), lists(b))
    per = [tr.matmul_backward(lists(dy[i]), lists(a[i]), lists(b))[1] for i in range(3)]
    want = [[fold([p[r][c] for p in per]) for c in range(2)] for r in range(5)]
    assert bits_equal(db, want)


# -- scaled-dot-product attention -----------------------------------------------------------------

def torch_sdpa(q, k, v, do, mask=None, causal=False, scale=None, keep=None, p=0.0):
    """torch's math path (its documented composition); with `keep`, the dropout written out."""
    qt, kt, vt = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        if keep is None:
            mt = None if mask is None else torch.from_numpy(np.asarray(mask))
            o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mt, is_causal=causal, scale=scale)
        else:
            sc = at.call_scale(scale, q.shape[-1])
            attn = torch.softmax((qt @ kt.transpose(-2, -1)) * sc, dim=-1)
            o = (attn * torch.from_numpy(np.asarray(keep, np.float32)) / (1 - p)) @ vt
    o.backward(torch.from_numpy(do))
    return o.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def attention_bounds(q, k, v, do, mask, causal, scale, factor=None):
    """Per-cell bounds for o, dq, dk, dv (module docstring): the scores' error carried through
    the probabilities, plus both sides' sums over keys, queries and coordinates."""
    q, k, v, do = (a.astype(np.float64) for a in (q, k, v, do))
    nl, ns, ne, nev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    sc = at.call_scale(scale, ne)
    s = sc * (q @ np.swapaxes(k, -1, -2))
    take = np.ones(s.shape, bool)
    if causal:
        take &= np.tril(np.ones((nl, ns), bool))
    if mask is not None:
        m = np.asarray(mask)
        if m.dtype == bool:
            take &= m
        else:
            s = s + m
            take &= m != -np.inf
    ds_err = sum_gap(ne) * abs(sc) * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2)) + 4 * U * np.abs(s)
    s = np.where(take, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    e = np.where(take, np.exp(s - np.where(np.isfinite(mx), mx, 0)), 0.0)
    p = e / np.maximum(e.sum(axis=-1, keepdims=True), 1e-300)
    if factor is not None:
        p = p * factor
    delta = 4 * np.where(take, ds_err, 0).max(axis=-1, keepdims=True)
    k_u = (4 * (depth(max(ns, nl, nev, ne)) + ns + nl + ne + nev) + 32) * U
    rel = delta + k_u
    o_mag = p @ np.abs(v)
    m = p * (np.abs(do) @ np.swapaxes(np.abs(v), -1, -2) + np.sum(np.abs(do) * o_mag, axis=-1, keepdims=True))
    return (rel * o_mag + 1e-40, abs(sc) * ((m * (rel + k_u)) @ np.abs(k)) + 1e-40,
            abs(sc) * (np.swapaxes(m * (rel + k_u), -1, -2) @ np.abs(q)) + 1e-40,
            np.swapaxes(p * rel, -1, -2) @ np.abs(do) + 1e-40)


def _qkv(b, h, nl, ns, ne, nev, seed, qscale=1.0):
    return (normal((b, h, nl, ne), seed, qscale), normal((b, h, ns, ne), seed + 1),
            normal((b, h, ns, nev), seed + 2), normal((b, h, nl, nev), seed + 3))


def _bool_mask(shape, seed):
    m = np.random.default_rng(seed).random(shape) > 0.3
    m[..., 1, :] = False  # an empty row: torch's math path gives zeros, so does the contract
    return m


def _float_mask(shape, seed):
    m = normal(shape, seed)
    m[np.random.default_rng(seed).random(shape) < 0.25] = -np.inf
    return m


SDPA_CASES = [  # (B, H, L, S, E, Ev), mask kind, causal, scale, size of the queries
    ((1, 1, 5, 7, 1, 1), None, False, None, 1.0),
    ((2, 2, 6, 6, 31, 3), None, True, None, 1.0),
    ((1, 2, 9, 5, 32, 33), None, True, 0.3, 1.0),      # L > S: top-left aligned
    ((1, 1, 4, 9, 33, 2), "bool", False, None, 2.0),   # L < S, a fully masked row
    ((2, 1, 8, 40, 32, 4), "float", False, -0.5, 1.0),
    ((1, 1, 3, 4, 1, 2), None, False, 1.0, 1e19),      # scores near FLT_MAX: the max subtraction
]


@pytest.mark.parametrize("case", SDPA_CASES, ids=lambda c: f"{c[0]}-{c[1]}-causal{c[2]}")
def test_attention_and_its_backward_are_torchs_math_path(case):
    (nb, nh, nl, ns, ne, nev), kind, causal, scale, qs = case
    q, k, v, do = _qkv(nb, nh, nl, ns, ne, nev, 200 + ne, qs)
    if qs > 1.0:
        k = np.sign(k).astype(np.float32) * np.float32(1e19)
    mask = {None: None, "bool": lambda: _bool_mask((nl, ns), 7),
            "float": lambda: _float_mask((nb, 1, nl, ns), 8)}[kind]
    mask = mask() if callable(mask) else None
    mlist = None if mask is None else (mask.tolist() if mask.dtype == bool else lists(mask))
    o = at.sdpa(lists(q), lists(k), lists(v), mlist, is_causal=causal, scale=scale)
    dq, dk, dv = at.sdpa_backward(lists(do), lists(q), lists(k), lists(v), mlist, is_causal=causal,
                                  scale=scale)
    want = torch_sdpa(q, k, v, do, mask, causal, scale)
    bounds = attention_bounds(q, k, v, do, mask, causal, scale)
    if qs > 1.0:
        assert_within(o, want[0], bounds[0], "sdpa")   # gradients of 1e38 scores overflow on both sides
        return
    for got, w, bound, what in zip((o, dq, dk, dv), want, bounds, ("o", "dq", "dk", "dv")):
        assert_within(got, w, bound, what)


def test_an_empty_row_gives_positive_zeros_and_no_gradient():
    q, k, v, do = _qkv(1, 1, 3, 4, 2, 2, 300)
    mask = [[True] * 4, [True, False, True, False], [False] * 4]
    o = at.sdpa(lists(q), lists(k), lists(v), mask)
    assert all(f32.same(x, 0.0) for x in o[0][0][2])
    dq, dk, dv = at.sdpa_backward(lists(do), lists(q), lists(k), lists(v), mask)
    assert all(f32.same(x, 0.0) for x in dq[0][0][2])
    # the empty last row holds -0.0 in every fold over i: the keys' gradients are the two-row call's
    two = at.sdpa_backward(lists(do[:, :, :2]), lists(q[:, :, :2]), lists(k), lists(v), mask[:2])
    assert bits_equal(dk, two[1]) and bits_equal(dv, two[2])


@pytest.mark.parametrize("causal", [False, True])
def test_a_sequence_computed_alone_equals_it_inside_a_batch_bit_for_bit(causal):
    q, k, v, do = _qkv(3, 2, 5, 6, 33, 3, 400)
    mask = None if causal else _float_mask((3, 1, 5, 6), 9)
    mlist = None if mask is None else lists(mask)
    o = at.sdpa(lists(q), lists(k), lists(v), mlist, is_causal=causal)
    grads = at.sdpa_backward(lists(do), lists(q), lists(k), lists(v), mlist, is_causal=causal)
    for b in range(3):
        for h in range(2):
            one = lambda a: lists(a[b:b + 1, h:h + 1])  # noqa: E731
            mb = None if mask is None else lists(mask[b:b + 1])
            assert bits_equal(o[b][h], at.sdpa(one(q), one(k), one(v), mb, is_causal=causal))
            alone = at.sdpa_backward(one(do), one(q), one(k), one(v), mb, is_causal=causal)
            for g, a in zip(grads, alone):
                assert bits_equal(g[b][h], a)


@pytest.mark.parametrize("nl,ns", [(12, 12), (9, 5), (4, 9)])
def test_a_causal_row_equals_the_single_query_over_its_prefix_bit_for_bit(nl, ns):
    q, k, v, do = _qkv(1, 1, nl, ns, 33, 4, 500 + nl)
    o = at.sdpa(lists(q), lists(k), lists(v), is_causal=True)
    dq = at.sdpa_backward(lists(do), lists(q), lists(k), lists(v), is_causal=True)[0]
    for i in range(nl):
        n = min(i, ns - 1) + 1
        qi, ki, vi, doi = lists(q[:, :, i:i + 1]), lists(k[:, :, :n]), lists(v[:, :, :n]), lists(do[:, :, i:i + 1])
        assert bits_equal(o[0][0][i], at.sdpa(qi, ki, vi)[0][0][0])
        assert bits_equal(dq[0][0][i], at.sdpa_backward(doi, qi, ki, vi)[0][0][0][0])


def test_dropout_keeps_by_the_philox_position_of_each_probability():
    seed, stream, p, shape = 7, 3, 0.25, (2, 2, 3, 5)
    keep = at.dropout_keep(seed, stream, p, shape)
    pos = 0
    for b in range(2):
        for h in range(2):
            for i in range(3):
                for j in range(5):
                    assert keep[b][h][i][j] == rng.kept(rng.uniform_word(seed, stream, pos), 0.25)
                    pos += 1
    assert at.dropout_keep(seed, stream, p, (2, 2, 3, 5)) == keep
    with pytest.raises(ValueError, match="keep"):
        at.sdpa([[[[1.0]]]], [[[[1.0]]]], [[[[1.0]]]], dropout_p=0.5)


def test_attention_with_dropout_is_the_dropped_composition():
    (nb, nh, nl, ns, ne, nev), p = (1, 2, 4, 6, 31, 3), 0.25
    q, k, v, do = _qkv(nb, nh, nl, ns, ne, nev, 600)
    keep = at.dropout_keep(11, 0, p, (nb, nh, nl, ns))
    o = at.sdpa(lists(q), lists(k), lists(v), dropout_p=p, keep=keep)
    grads = at.sdpa_backward(lists(do), lists(q), lists(k), lists(v), dropout_p=p, keep=keep)
    want = torch_sdpa(q, k, v, do, keep=keep, p=p)
    factor = np.asarray(keep, np.float64) / (1 - p)
    bounds = attention_bounds(q, k, v, do, None, False, None, factor)
    for got, w, bound, what in zip((o, *grads), want, bounds, ("o", "dq", "dk", "dv")):
        assert_within(got, w, 2 * bound, what)
    assert not bits_equal(o, at.sdpa(lists(q), lists(k), lists(v)))


def test_the_scale_applied_to_q_first_changes_bits_the_negative_controls_premise():
    q, k, v, _ = _qkv(1, 1, 8, 8, 33, 2, 700)
    sc = at.default_scale(33)
    scaled_q = [[[[f32.mul(sc, x) for x in row] for row in head] for head in bh] for bh in lists(q)]
    assert not bits_equal(at.sdpa(lists(q), lists(k), lists(v)), at.sdpa(scaled_q, lists(k), lists(v), scale=1.0))


def test_the_default_scale_is_the_binary32_nearest_one_over_root_e():
    for e in (1, 2, 3, 31, 32, 33, 64, 96, 127, 4096, 12345):
        r = at.default_scale(e)
        up, down = f32.bits_to_f32(f32.f32_to_bits(r) + 1), f32.bits_to_f32(f32.f32_to_bits(r) - 1)
        lo, hi = (Fraction(down) + Fraction(r)) / 2, (Fraction(r) + Fraction(up)) / 2
        assert lo * lo <= Fraction(1, e) <= hi * hi, e


def test_the_gelu_definitions_the_contract_names_exist():
    erf_tanh = pytest.importorskip("mojolike.oracles.erf_tanh")
    for name in ("tanhf", "erff", "gelu_erf", "gelu_tanh", "gelu_erf_grad", "gelu_tanh_grad"):
        assert callable(getattr(erf_tanh, name)), name
