"""The layers against torch 2.13.0 (CPU) autograd: F.linear, F.embedding, F.rms_norm, torch.relu,
and the chunked head against F.cross_entropy(F.linear(h, w)), on cpu-numba.

The bits differ by design wherever a sum is involved: torch's GEMM blocks K by the
shape and fuses multiply-adds, and sums norms and gradients in its own order; ours
folds the rounded products on the one tree (contracts/layers.md). Both are then
within the classic bound of the exact sum, gamma_d * sum |terms| with d the longest
chain of roundings a term goes through: ours at most 1 + 32 + 5 + log2(chunks)
(product, lane, butterfly, pairwise tree), torch's at most 1 + n over n terms (one
serial FMA chain at worst). So each contraction is compared within (d_ours + d_torch)
* 2^-24 * sum |terms|, cell by cell: a rounding order cannot exceed it, and a wrong
formula (a transposed operand, a missing bias, a padding row that gets a gradient,
D - 1 for D) moves a cell by a sizeable part of sum |terms|, far beyond it. Where no
arithmetic happens (embedding's copy, relu) torch must agree bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_bits, available

import mojolike

pytestmark = pytest.mark.skipif(not available("cpu-numba"), reason="cpu-numba cannot run here")
ON = dict(backend="cpu-numba")
U = 2.0 ** -24  # float32's unit roundoff


def ours_depth(n: int) -> int:
    """The longest rounding chain of a fold of n rounded products."""
    return 1 + 32 + 5 + math.ceil(math.log2(max(1, -(-n // 1024))))


def sum_bound(abs_terms_sum, n: int):
    """|ours - torch| for two sums of n terms whose absolute values sum to abs_terms_sum."""
    return (ours_depth(n) + 1 + n) * U * abs_terms_sum


def assert_within(got, want, bound, what: str) -> None:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got64.shape == want64.shape, f"{what}: shape {got64.shape} vs torch's {want64.shape}"
    gap = np.abs(got64 - want64)
    excess = gap - np.broadcast_to(bound, gap.shape)
    worst = np.unravel_index(int(np.argmax(excess)), gap.shape) if gap.ndim else ()
    assert excess[worst] <= 0, (f"{what}: at {worst} ours {got64[worst]!r}, torch {want64[worst]!r}, "
                                f"gap {gap[worst]:.3g} > bound {np.broadcast_to(bound, gap.shape)[worst]:.3g}")


def normal(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def leaf(a):
    return torch.from_numpy(a.copy()).requires_grad_()


LINEAR_SHAPES = [((5, 300), 7), ((3, 2500), 4), ((2, 3, 33), 6), ((64, 1025), 9)]  # (x shape, N)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("x_shape,n", LINEAR_SHAPES)
def test_linear_and_its_backward_match_torch_autograd_within_the_sum_bound(x_shape, n, with_bias):
    kk = x_shape[-1]
    x, w, b = normal(x_shape, 1), normal((n, kk), 2), normal(n, 3)
    dy = normal(x_shape[:-1] + (n,), 4)
    tx, tw, tb = leaf(x), leaf(w), leaf(b)
    y_t = F.linear(tx, tw, tb if with_bias else None)
    y_t.backward(torch.from_numpy(dy))

    y = mojolike.linear(x, w, b if with_bias else None, **ON)
    ax, aw, ady = np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)), np.abs(dy.astype(np.float64))
    # the bias adds one rounding to a value of about |y|
    y_bound = sum_bound(ax @ aw.T, kk) + (2 * U * (np.abs(y) + np.abs(b)) if with_bias else 0.0)
    assert_within(y, y_t.detach().numpy(), y_bound, "linear forward")

    dx, dw, db = mojolike.linear_backward(dy, x, w, bias=with_bias, **ON)
    rows = dy.reshape(-1, n).shape[0]
    ady2, ax2 = ady.reshape(rows, n), ax.reshape(rows, kk)
    assert_within(dx, tx.grad.numpy(), sum_bound(ady @ aw, n), "linear dx")
    assert_within(dw, tw.grad.numpy(), sum_bound(ady2.T @ ax2, rows), "linear dweight")
    if with_bias:
        assert_within(db, tb.grad.numpy(), sum_bound(ady2.sum(axis=0), rows), "linear dbias")
    else:
        assert db is None


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_forward_is_torch_bit_for_bit_and_its_backward_within_the_sum_bound(padding_idx):
    v, d = 11, 40
    w = normal((v, d), 5)
    w[0, :3] = [-0.0, np.inf, np.nan]  # a copy keeps signed zeros and non-finite values
    ids = np.random.default_rng(6).integers(0, v - 3, (7, 9))  # rows v-3.. are never used
    ids[0, :4] = [2, 2, v - 1 if padding_idx == -1 else 2, 0]  # repeats, and the padding row
    dy = normal(ids.shape + (d,), 7)
    tw = leaf(w)
    y_t = F.embedding(torch.from_numpy(ids), tw, padding_idx=padding_idx)
    y_t.backward(torch.from_numpy(dy))

    assert_same_bits(mojolike.embedding(ids, w, padding_idx=padding_idx, **ON), y_t.detach().numpy(),
                     "embedding forward")
    got = mojolike.embedding_backward(dy, ids, v, padding_idx=padding_idx, **ON)
    counts = np.bincount(ids.reshape(-1), minlength=v)
    abs_sums = np.zeros((v, d))
    np.add.at(abs_sums, ids.reshape(-1), np.abs(dy.reshape(-1, d).astype(np.float64)))
    assert_within(got, tw.grad.numpy(), sum_bound(abs_sums, int(counts.max())), "embedding backward")
    silent = counts == 0  # rows no position uses, and the padding row: +0.0 in both
    if padding_idx is not None:
        silent[padding_idx] = True
    assert_same_bits(got[silent], tw.grad.numpy()[silent], "embedding backward's untouched rows")
    assert_same_bits(got[silent], np.zeros_like(got[silent]), "embedding backward's untouched rows")


RMS_CASES = [  # (rows, D, eps, scale): torch's default eps, and an eps that matters against x^2
    (6, 300, None, 1.0), (4, 1025, None, 3.0), (5, 96, 1e-2, 0.05)]


@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("rows,d,eps,scale", RMS_CASES)
def test_rms_norm_and_its_backward_match_torch_autograd_within_the_sum_bound(rows, d, eps, scale,
                                                                            with_weight):
    x, w, dy = normal((rows, d), 8, scale), normal(d, 9) + np.float32(1.0), normal((rows, d), 10)
    tx, tw = leaf(x), leaf(w)
    y_t = F.rms_norm(tx, (d,), tw if with_weight else None, eps)
    y_t.backward(torch.from_numpy(dy))

    y = mojolike.rms_norm(x, w if with_weight else None, eps, **ON)
    # r = 1/sqrt(mean(x^2) + eps): the mean of squares carries the sum bound (relative: its terms
    # are positive), r half of it; divide, add, sqrt, divide (torch: its own rsqrt, a few ulp)
    # and the products with x and w a few roundings more.
    rel = (ours_depth(d) + 1 + d) * U / 2 + 12 * U
    assert_within(y, y_t.detach().numpy(), rel * np.abs(y_t.detach().numpy()), "rms_norm forward")

    dx, dw = mojolike.rms_norm_backward(dy, x, w if with_weight else None, eps, **ON)
    x64 = x.astype(np.float64)
    e = np.finfo(np.float32).eps if eps is None else eps
    r = 1.0 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + e)
    h = x64 * r
    g = dy.astype(np.float64) * (w if with_weight else 1.0)
    # dx = r * (g - h * c), c = fold(g * h) / D: the fold's bound, and r's and h's relative
    # error, on the scale r * (|g| + |h| * mean|g h|) of the terms that cancel
    scale_dx = r * (np.abs(g) + np.abs(h) * np.abs(g * h).mean(axis=1, keepdims=True))
    assert_within(dx, tx.grad.numpy(), (ours_depth(d) + 1 + d + 24) * U * scale_dx, "rms_norm dx")
    if with_weight:
        dw_bound = (ours_depth(rows) + 1 + rows) * U * np.abs(dy * h).sum(axis=0) \
            + rel * np.abs(dy * h).sum(axis=0)
        assert_within(dw, tw.grad.numpy(), dw_bound, "rms_norm dweight")
    else:
        assert dw is None


def test_relu_is_torch_relu_bit_for_bit_signed_zeros_and_nan_included():
    x = normal(1000, 11)
    x[:6] = [-0.0, 0.0, np.nan, -np.inf, np.inf, -1e-45]
    assert_same_bits(mojolike.relu(x, **ON), torch.relu(torch.from_numpy(x)).numpy(), "relu")


HEAD_CASES = [  # (reduction, ignore_index, label_smoothing, chunk_size)
    ("mean", -100, 0.0, 1024), ("mean", 3, 0.1, 2048), ("sum", -100, 0.1, 1024),
    ("none", 3, 0.0, 4096), ("none", -100, 0.2, 1024)]


@pytest.mark.parametrize("reduction,ignore_index,smoothing,chunk", HEAD_CASES)
def test_the_chunked_head_matches_torch_cross_entropy_of_linear_with_its_gradients(
        reduction, ignore_index, smoothing, chunk):
    rows, width, vocab = 40, 48, 2500
    h, w = normal((rows, width), 12), normal((vocab, width), 13, 0.5)
    t = np.random.default_rng(14).integers(0, vocab, rows)
    t[1], t[rows // 2] = ignore_index, 3  # an ignored row, and class 3 (ignored when ignore_index=3)
    th, tw = leaf(h), leaf(w)
    z_t = F.linear(th, tw)
    z_t.retain_grad()
    loss_t = F.cross_entropy(z_t, torch.from_numpy(t), ignore_index=ignore_index,
                             label_smoothing=smoothing, reduction=reduction)
    kw = dict(ignore_index=ignore_index, label_smoothing=smoothing, reduction=reduction,
              chunk_size=chunk, **ON)

    # a logit is within sum_bound of torch's; a row loss moves by at most twice the largest
    # logit gap (its softmax weights sum to 1, plus the target's), plus cross_entropy's own
    # difference from torch (its exp, log and smoothing scalars: 1e-5 relative, 1e-6 absolute,
    # as tests/test_loss_torch.py states)
    ah, aw = np.abs(h.astype(np.float64)), np.abs(w.astype(np.float64))
    z_gap = sum_bound(ah @ aw.T, width).max(axis=1)
    kept = t != ignore_index
    if reduction == "none":
        got = mojolike.chunked_lm_head_loss(h, w, t, **kw)
        want = loss_t.detach().numpy()
        assert_within(got, want, np.where(kept, 2 * z_gap + 1e-5 * np.abs(want) + 1e-6, 0.0),
                      "head loss rows")
        return
    got, dh, dw = mojolike.chunked_lm_head_loss(h, w, t, return_grad=True, **kw)
    loss_t.backward()
    want = float(loss_t.detach())
    per_row = np.where(kept, 2 * z_gap + 1e-6, 0.0).sum() / (kept.sum() if reduction == "mean" else 1)
    assert_within(got, want, per_row + 1e-5 * abs(want), "head loss")
    # the logits' gradient dz = scale * (softmax - smoothed target): softmax moves by at most
    # 2 * z_gap relative, cross_entropy's own gap is 1e-5 relative + 1e-6 scaled; then each
    # gradient contracts dz with the other operand, adding the sum bound
    dz = z_t.grad.numpy().astype(np.float64)
    p = torch.softmax(z_t.detach().double(), dim=1).numpy()
    scale = 1.0 / kept.sum() if reduction == "mean" else 1.0
    dz_gap = np.where(kept[:, None], scale * (3 * p * z_gap[:, None] + 1e-6) + 1e-5 * np.abs(dz), 0.0)
    assert_within(dh, th.grad.numpy(), dz_gap @ aw + sum_bound(np.abs(dz) @ aw, vocab), "head d_hidden")
    assert_within(dw, tw.grad.numpy(), dz_gap.T @ ah + sum_bound(np.abs(dz).T @ ah, rows),
                  "head d_weight")
