"""The routed aten ops of `mojolike.torch.certified`: each a function (mode, args, kwargs) that
reads torch's aten arguments, calls mojolike's public entry point with the mode's backend and
numeric mode, and returns torch tensors shaped as aten's outputs.

A helper of `mojolike.torch.dispatch` (the table is `mojolike.torch.aten_table`). Inputs are
turned into float32 numpy views (a non-contiguous tensor is first copied by torch's `clone`,
an exact copy); outputs are the arrays mojolike returns, wrapped without a copy.

Reproducibility: each result is the bits of the mojolike entry point named in the table, so
the same on every backend and thread count; the few host steps written here (the bias add
of addmm, the gather and division of nll_loss, sqrt and 1/sqrt for rsqrt, the products of pow and
tanh_backward) are one IEEE binary32 operation per element, in the order written.

>>> import torch
>>> from mojolike.torch.aten_routes import as_np
>>> as_np(torch.ones(2, 2).t()).flags.c_contiguous
True
"""
from __future__ import annotations

import weakref

import numpy as np
import torch

from ..core.refusals import refuse
from ..ops.attention import (
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)
from ..ops.crmath import expf, tanhf
from ..ops.layers import embedding, embedding_backward, linear
from ..ops.transformer import (
    gelu,
    gelu_backward,
    layer_norm,
    layer_norm_backward,
    log_softmax,
    log_softmax_backward,
    matmul,
    mean,
    softmax,
    softmax_backward,
)
from ..ops.transformer import sum as fold_sum

ENTRY = "mojolike.torch.certified"
PASS = object()  # a route's answer for "run torch's own kernel" (an exact integer sum)
_ONE = np.float32(1.0)


def as_np(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor's values in C order (an exact torch copy when strided)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def as_t(a) -> torch.Tensor:
    """A tensor over a numpy result (no copy; a read-only or strided result is copied first)."""
    a = np.asarray(a)
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, order="C")
    return torch.from_numpy(a)


def _unit(name: str, what: str, value, default) -> None:
    if value != default:
        refuse(ENTRY, f"{name}({what}={value!r})", f"is not certified (only {what}={default!r} is)")


def _kw(m) -> dict:
    return {"backend": m.backend, "numeric_mode": m.numeric_mode}


# -- matmul ------------------------------------------------------------------------------------
def _nt(b: torch.Tensor) -> np.ndarray:
    """b (K, N) as the (N, K) rows gemm's second operand reads: b.t() in C order (no copy for
    nn.Linear's W.t(); torch's blocked transposing copy otherwise, exact)."""
    return as_np(b.t())


def mm(m, args, kwargs):
    # y = a @ b is mojolike.linear(a, b^T): the same fold as mojolike.matmul (clause 8 and
    # contracts/layers.md: over k ascending of the rounded products; tested equal on the
    # oracle), with the transposing copies done by torch rather than by numpy
    a, b = args[:2]
    return as_t(linear(as_np(a), _nt(b), **_kw(m)))


def bmm(m, args, kwargs):
    a, b = args[:2]
    return as_t(matmul(as_np(a), as_np(b), **_kw(m)))


def addmm(m, args, kwargs):
    bias, a, b = args[:3]
    _unit("aten.addmm", "beta", kwargs.get("beta", 1), 1)
    _unit("aten.addmm", "alpha", kwargs.get("alpha", 1), 1)
    if bias.ndim == 1 and bias.shape[0] == b.shape[1]:  # + bias[j], one rounding (linear's)
        return as_t(linear(as_np(a), _nt(b), as_np(bias), **_kw(m)))
    y = linear(as_np(a), _nt(b), **_kw(m))
    return as_t(np.add(y, as_np(bias), dtype=np.float32))  # one rounding per element


def row_folds(m, a: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """mojolike.sum(a, dims, keepdim=True)'s bits, fast: the reduced dimensions moved last in
    their order (an exact copy; their multi-index stays in C order, ascending), then each
    row's fold as `mojolike.linear` with a weight of ones: the fold over k ascending of the
    products x * 1 (exact), the same tree as mojolike.sum's column fold
    (tests/test_torch_certified.py checks the two against the oracle)."""
    keep = tuple(d for d in range(a.ndim) if d not in dims)
    width = int(np.prod([a.shape[d] for d in dims], dtype=np.int64))
    rows = np.ascontiguousarray(np.transpose(a, keep + dims)).reshape(-1, width)
    s = linear(rows, np.ones((1, width), np.float32), **_kw(m))
    return s.reshape(tuple(1 if d in dims else a.shape[d] for d in range(a.ndim)))


# -- embedding ---------------------------------------------------------------------------------
def embedding_fwd(m, args, kwargs):
    weight, ids = args[:2]
    return as_t(embedding(as_np(ids), as_np(weight), **_kw(m)))


def embedding_bwd(m, args, kwargs):
    grad, ids, num, padding_idx = args[:4]
    by_freq = args[4] if len(args) > 4 else kwargs.get("scale_grad_by_freq", False)
    _unit("aten.embedding_dense_backward", "scale_grad_by_freq", bool(by_freq), False)
    pad = None if padding_idx < 0 else padding_idx  # aten: -1 is "no padding row"
    d = grad.shape[-1]
    g = as_np(grad).reshape(-1, d)
    return as_t(embedding_backward(g, as_np(ids).reshape(-1), num, pad, **_kw(m)))


# -- layer norm --------------------------------------------------------------------------------
def native_layer_norm(m, args, kwargs):
    x, shape, weight, bias, eps = args[:5]
    a = as_np(x)
    shape = tuple(shape)
    w = None if weight is None else as_np(weight)
    b = None if bias is None else as_np(bias)
    y = layer_norm(a, shape, w, b, eps, **_kw(m))
    # aten's saved statistics, with mojolike's arithmetic: the mean (a fold over the row and
    # one division by binary32(D)) and rstd = 1 / sqrt(var + eps), var the mean of the rounded
    # squares of x - mean (each step one rounding)
    dims = tuple(range(a.ndim - len(shape), a.ndim))
    n = np.float32(int(np.prod(shape, dtype=np.int64)))
    mu = np.divide(row_folds(m, a, dims), n, dtype=np.float32)
    dev = np.subtract(a, mu, dtype=np.float32)
    var = np.divide(row_folds(m, np.multiply(dev, dev, dtype=np.float32), dims), n,
                    dtype=np.float32)
    rstd = np.divide(_ONE, np.sqrt(np.add(var, np.float32(eps), dtype=np.float32)),
                     dtype=np.float32)
    rs = as_t(rstd)
    m.remember_eps(rs, float(eps))
    return as_t(y), as_t(mu), rs


def native_layer_norm_bwd(m, args, kwargs):
    dy, x, shape, _mean, rstd, weight, bias, mask = args[:8]
    eps = m.recall_eps(rstd)
    w = None if weight is None else as_np(weight)
    b = None if bias is None else as_np(bias)
    dx, dw, db = layer_norm_backward(as_np(dy), as_np(x), tuple(shape), w, b, eps, **_kw(m))
    return (as_t(dx) if mask[0] else None, as_t(dw) if mask[1] and dw is not None else None,
            as_t(db) if mask[2] and db is not None else None)


# -- softmax -----------------------------------------------------------------------------------
def _half(name, args):
    _unit(name, "half_to_float", bool(args[2]) if len(args) > 2 else False, False)


def softmax_fwd(m, args, kwargs):
    _half("aten._softmax", args)
    return as_t(softmax(as_np(args[0]), args[1], **_kw(m)))


def log_softmax_fwd(m, args, kwargs):
    _half("aten._log_softmax", args)
    return as_t(log_softmax(as_np(args[0]), args[1], **_kw(m)))


def softmax_bwd(m, args, kwargs):
    dy, y, dim = args[:3]
    return as_t(softmax_backward(as_np(dy), as_np(y), dim, **_kw(m)))


def log_softmax_bwd(m, args, kwargs):
    dy, y, dim = args[:3]
    return as_t(log_softmax_backward(as_np(dy), as_np(y), dim, **_kw(m)))


# -- GELU --------------------------------------------------------------------------------------
def gelu_fwd(m, args, kwargs):
    approx = args[1] if len(args) > 1 else kwargs.get("approximate", "none")
    return as_t(gelu(as_np(args[0]), approx, **_kw(m)))


def gelu_bwd(m, args, kwargs):
    approx = args[2] if len(args) > 2 else kwargs.get("approximate", "none")
    return as_t(gelu_backward(as_np(args[0]), as_np(args[1]), approx, **_kw(m)))


# -- nll_loss (cross_entropy = _log_softmax + nll_loss) ----------------------------------------
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll_args(name, logp, target, weight):
    if weight is not None:
        refuse(ENTRY, f"{name}(weight=...)", "is not certified (class weights are not covered; "
                                             "only weight=None is)")
    lp = as_np(logp)
    lp2 = lp.reshape(1, -1) if lp.ndim == 1 else lp
    if lp2.ndim != 2:
        refuse(ENTRY, f"{name}(input)", f"has shape {tuple(logp.shape)}; only (N, C) or (C,) "
                                        f"log-probabilities are certified")
    t = as_np(target).reshape(-1).astype(np.int64, copy=False)
    return lp2, t


def _kept(name, lp2, t, ignore_index):
    keep = t != ignore_index
    rows = np.flatnonzero(keep)
    bad = (t[rows] < 0) | (t[rows] >= lp2.shape[1])
    if bad.any():
        i = int(rows[np.flatnonzero(bad)[0]])
        refuse(ENTRY, f"{name}(target[{i}])", f"is {int(t[i])}, outside [0, {lp2.shape[1]})")
    return rows


def nll_loss_fwd(m, args, kwargs):
    name = "aten.nll_loss_forward"
    logp, target, weight, reduction, ignore_index = args[:5]
    lp2, t = _nll_args(name, logp, target, weight)
    rows = _kept(name, lp2, t, ignore_index)
    picked = np.negative(lp2[rows, t[rows]])  # -logp[i, t_i]: exact
    count = np.float32(rows.size)
    if _REDUCTIONS[reduction] == "none":
        out = np.zeros(t.shape, np.float32)
        out[rows] = picked
        out = out.reshape(tuple(target.shape))
    else:
        total = fold_sum(picked, **_kw(m)) if rows.size else np.float32(0.0)
        out = np.float32(total)
        if _REDUCTIONS[reduction] == "mean":
            with np.errstate(all="ignore"):
                out = np.divide(out, count, dtype=np.float32)
        out = np.asarray(out, np.float32).reshape(())
    return as_t(out), as_t(np.asarray(count, np.float32).reshape(()))


def nll_loss_bwd(m, args, kwargs):
    name = "aten.nll_loss_backward"
    g, logp, target, weight, reduction, ignore_index, total_weight = args[:7]
    lp2, t = _nll_args(name, logp, target, weight)
    rows = _kept(name, lp2, t, ignore_index)
    ga = as_np(g)
    out = np.zeros(lp2.shape, np.float32)
    with np.errstate(all="ignore"):
        if _REDUCTIONS[reduction] == "none":
            out[rows, t[rows]] = np.negative(ga.reshape(-1)[rows])
        elif _REDUCTIONS[reduction] == "mean":
            tw = as_np(total_weight).reshape(())
            out[rows, t[rows]] = np.negative(np.divide(ga.reshape(()), tw, dtype=np.float32))
        else:
            out[rows, t[rows]] = np.negative(ga.reshape(()))
    return as_t(out.reshape(tuple(logp.shape)))


# -- attention ---------------------------------------------------------------------------------
def _sdpa_opts(name, dropout_p, kwargs):
    _unit(name, "dropout_p", float(dropout_p), 0.0)
    mask = kwargs.get("attn_mask")
    return (None if mask is None else as_np(mask)), kwargs.get("scale")


def sdpa_fwd(m, args, kwargs):
    name = "aten._scaled_dot_product_flash_attention_for_cpu"
    q, k, v = args[:3]
    dropout_p = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
    causal = args[4] if len(args) > 4 else kwargs.get("is_causal", False)
    mask, scale = _sdpa_opts(name, dropout_p, kwargs)
    o, saved = scaled_dot_product_attention(as_np(q), as_np(k), as_np(v), mask, 0.0,
                                            bool(causal), scale, return_saved=True, **_kw(m))
    # aten's logsumexp is saved for aten's backward only, which is not run: NaN, so that a
    # program reading it cannot miss it. It is the key to this forward's AttentionSaved, which
    # lives while autograd keeps the tensor; the backward's own check of every argument
    # against the saved copies is what makes using it sound.
    lse = torch.full(tuple(q.shape[:3]), float("nan"), dtype=torch.float32)
    key = id(lse)
    _saved[key] = (weakref.ref(lse, lambda _: _saved.pop(key, None)), saved)
    return as_t(o), lse


_saved: dict[int, tuple] = {}  # id(lse tensor) -> (a weak reference to it, its AttentionSaved)


def _saved_for(lse):
    ref, saved = _saved.get(id(lse), (None, None))
    return saved if ref is not None and ref() is lse else None


def sdpa_bwd(m, args, kwargs):
    name = "aten._scaled_dot_product_flash_attention_for_cpu_backward"
    g, q, k, v, _out, lse, dropout_p, causal = args[:8]
    mask, scale = _sdpa_opts(name, dropout_p, kwargs)
    dq, dk, dv = scaled_dot_product_attention_backward(
        as_np(g), as_np(q), as_np(k), as_np(v), mask, 0.0, bool(causal), scale,
        saved=_saved_for(lse), **_kw(m))
    return as_t(dq), as_t(dk), as_t(dv)


# -- sum and mean (the fold) -------------------------------------------------------------------
def _reduce(m, args, kwargs, fn, name):
    x = args[0]
    if x.dtype in (torch.int64, torch.int32, torch.bool) and kwargs.get("dtype") in (
            None, torch.int64):
        return PASS  # an integer sum is exact in any order (no float32 involved)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = bool(args[2]) if len(args) > 2 else bool(kwargs.get("keepdim", False))
    dtype = kwargs.get("dtype")
    if dtype is not None and dtype != torch.float32:
        refuse(ENTRY, f"{name}(dtype={dtype})", "is not certified (only float32 sums are)")
    if dim is not None and len(dim) == 0:
        dim = None  # aten: an empty dim list reduces every dimension
    a = as_np(x)
    if a.ndim == 0:  # a 0-d tensor: its one element
        a1 = a.reshape(1)
        return as_t(np.asarray(fn(a1, None, False, **_kw(m)), np.float32).reshape(()))
    dims = tuple(range(a.ndim)) if dim is None else tuple(sorted({int(d) % a.ndim for d in dim}))
    if dim is not None and len(dims) != len(dim):
        return as_t(np.asarray(fn(a, tuple(dim), keepdim, **_kw(m)), np.float32))  # its refusal
    keep = tuple(d for d in range(a.ndim) if d not in dims)
    if keep + dims != tuple(range(a.ndim)):  # reduced dims moved last by torch's blocked copy
        moved = as_np(x.permute(keep + dims))
        shape = tuple(1 if d in dims else a.shape[d] for d in range(a.ndim))
        y = row_folds(m, moved, tuple(range(len(keep), a.ndim))).reshape(shape)
    else:
        y = row_folds(m, a, dims)
    if fn is mean:  # mojolike.mean: the sum divided by binary32(n), one rounding
        n = np.float32(int(np.prod([a.shape[d] for d in dims], dtype=np.int64)))
        with np.errstate(all="ignore"):
            y = np.divide(y, n, dtype=np.float32)
    if not keepdim:
        y = y.reshape(tuple(a.shape[d] for d in range(a.ndim) if d not in dims))
    return as_t(np.asarray(y, np.float32))


def sum_fwd(m, args, kwargs):
    return _reduce(m, args, kwargs, fold_sum, "aten.sum")


def mean_fwd(m, args, kwargs):
    return _reduce(m, args, kwargs, mean, "aten.mean")


# -- element functions that torch's CPU kernels approximate ------------------------------------
def exp_fwd(m, args, kwargs):
    a = as_np(args[0])
    return as_t(expf(a.reshape(-1), **_kw(m)).reshape(a.shape))


def tanh_fwd(m, args, kwargs):
    a = as_np(args[0])
    return as_t(tanhf(a.reshape(-1), **_kw(m)).reshape(a.shape))


def tanh_bwd(m, args, kwargs):
    g, y = as_np(args[0]), as_np(args[1])
    yy = np.multiply(y, y, dtype=np.float32)
    return as_t(np.multiply(g, np.subtract(_ONE, yy, dtype=np.float32), dtype=np.float32))


def sqrt_fwd(m, args, kwargs):
    # torch's CPU sqrt is not correctly rounded here (8 of 1027 values one ulp off on an Intel
    # Xeon, torch 2.13); numpy's float32 sqrt is the IEEE square root, correctly rounded
    with np.errstate(all="ignore"):
        return as_t(np.sqrt(as_np(args[0])))


def rsqrt_fwd(m, args, kwargs):
    a = as_np(args[0])
    with np.errstate(all="ignore"):
        return as_t(np.divide(_ONE, np.sqrt(a), dtype=np.float32))  # two roundings


def pow_scalar(m, args, kwargs):
    x, p = args[:2]
    if p not in (1, 2, 3):
        refuse(ENTRY, f"aten.pow.Tensor_Scalar(exponent={p!r})",
               "is not certified (torch's CPU pow is not correctly rounded; exponents 1, 2 "
               "and 3 are certified, as repeated products rounded in order)")
    a = as_np(x)
    y = np.array(a, np.float32)
    for _ in range(int(p) - 1):
        y = np.multiply(y, a, dtype=np.float32)
    return as_t(y)
