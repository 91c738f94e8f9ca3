"""softmax, log_softmax, layer_norm, GELU and batched matmul with torch's names, and their backward.

The arithmetic is contracts/transformer.md (clauses 1-9), defined by
`mojolike.oracles.transformer` and `mojolike.oracles.erf_tanh`: every sum is a
`fold` on the library's one tree, exp and log are the correctly rounded expf and
logf, GELU's erf and tanh the correctly rounded erff and tanhf. A row's result never
depends on the other rows of the call (batch invariance). The attention ops are in
`mojolike.ops.attention`.

Row ops work on every line along `dim` (moved last by an exact copy when it is not
already last). A row the kernel marks undecided (one of its expf/logf values is on
crmath's short list of inputs the binary64 test cannot decide) is redone on the host
by `finish_rows` with the backend's public expf/logf, which finish those values with
the oracle, so the result is the oracle's everywhere.

>>> import numpy as np, mojolike
>>> mojolike.softmax(np.float32([[0, 0], [1, 1]]), backend="oracle").tolist()
[[0.5, 0.5], [0.5, 0.5]]
>>> mojolike.matmul(np.float32([[1, 2]]), np.float32([[3], [4]]), backend="oracle").tolist()
[[11.0]]
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..core import checks, fallbacks, registry
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..oracles import f32
from ..oracles import transformer as spec
from . import crmath, mixed
from .crmath import expf, logf
from .fold import fold

FAMILY = "transformer"
EPS_DEFAULT = spec.LAYER_NORM_EPS  # torch's F.layer_norm default, rounded to binary32 once
APPROXIMATIONS = ("none", "tanh")  # torch's F.gelu approximate=
_NONE = np.zeros(1, np.float32)  # the placeholder a kernel gets for a missing weight or bias


def _kernels(entry: str, family: str, backend, numeric_mode):
    return registry.kernels(entry, family, backend, numeric_mode)


def array(entry: str, name: str, obj, *, ndim: int | None = None, min_ndim: int = 1
          ) -> np.ndarray:
    """A float32 buffer with its shape (C order, no copy); `ndim` exact or at least `min_ndim`."""
    flat = checks.as_f32(entry, name, obj)
    shape = checks.shape_of(obj)
    if (ndim is not None and len(shape) != ndim) or len(shape) < min_ndim:
        want = f"{ndim}-D" if ndim is not None else f"at least {min_ndim}-D"
        refuse(entry, name, f"has shape {shape}; {entry} needs a {want} array")
    return flat.reshape(shape)


def _same_shape(entry: str, name: str, a: np.ndarray, other: str, b: np.ndarray) -> None:
    if a.shape != b.shape:
        refuse(entry, name, f"has shape {a.shape} but {other} has {b.shape}; they must match")


def _dim(entry: str, dim, ndim: int) -> int:
    d = checks.integer(entry, "dim", dim, low=-ndim, high=ndim - 1,
                       what=f"a dimension in [{-ndim}, {ndim - 1}] of the {ndim}-D input")
    return d % ndim


def _last(a: np.ndarray, d: int) -> np.ndarray:
    """a with dimension d moved last, C-contiguous (an exact copy unless d is already last)."""
    return a if d == a.ndim - 1 else np.ascontiguousarray(np.moveaxis(a, d, -1))


def _back(y: np.ndarray, d: int) -> np.ndarray:
    return y if d == y.ndim - 1 else np.ascontiguousarray(np.moveaxis(y, -1, d))


# -- softmax ------------------------------------------------------------------------------------
def finish_rows(kind: str, x: np.ndarray, y: np.ndarray, status: np.ndarray, *, dy=None,
                backend, numeric_mode) -> int:
    """Redo on the host every row with a nonzero status; returns how many.

    kind "softmax"/"log_softmax" (x the input rows) or "softmax_backward"/
    "log_softmax_backward" (x the forward's output rows, dy the gradient rows): the
    arithmetic of clauses 1 and 3 with numpy float32 operations (one rounding each) and
    the backend's public expf, logf and fold, which finish undecided values with the
    oracle. Each row is reported to `fallbacks` with the crmath values it finished.
    """
    on = dict(backend=backend, numeric_mode=numeric_mode)
    redo = np.flatnonzero(status)
    for i in redo.tolist():
        with fallbacks.collect(hold=True) as finished, np.errstate(all="ignore"):
            r = x[i]
            if kind in ("softmax", "log_softmax"):
                d = r - spec_max(r)
                if kind == "softmax":
                    e = expf(d, **on)
                    y[i] = e / np.float32(fold(e, **on))
                else:
                    big_s = np.float32(fold(expf(d, **on), **on))
                    y[i] = d - logf(np.float32([big_s]), **on)[0]
            elif kind == "log_softmax_backward":
                c = np.float32(fold(dy[i], **on))
                y[i] = dy[i] - expf(r, **on) * c
            else:
                raise AssertionError(f"{kind} rows have no undecided value to redo")
        fallbacks.record(FAMILY, kind + "_row", i, int(y[i].view(np.uint32)[0]),
                         finished=tuple(finished))
        status[i] = 0
    return redo.size


def spec_max(r: np.ndarray) -> np.float32:
    """The row max of clause 1: exact, NaN when the row holds one."""
    return np.float32(np.max(r))


def _softmax(entry, x, dim, log, backend, numeric_mode):
    a = array(entry, "x", x)
    d = _dim(entry, dim, a.ndim)
    k = _kernels(entry, FAMILY, backend, numeric_mode)
    rows = _last(a, d)
    rows = rows.reshape(-1, rows.shape[-1])
    y = checks.empty(entry, "x", rows.shape)
    status = np.zeros(rows.shape[0], np.int32)
    flagged = k.softmax_rows(rows, log, y, status)
    redone = finish_rows("log_softmax" if log else "softmax", rows, y, status,
                         backend=k.backend, numeric_mode=k.numeric_mode)
    _agree(entry, k, flagged, redone)
    return _back(y.reshape(_moved_shape(a.shape, d)), d)


def _moved_shape(shape: tuple[int, ...], d: int) -> tuple[int, ...]:
    return shape[:d] + shape[d + 1:] + (shape[d],)


def _agree(entry: str, k, flagged: int, redone: int) -> None:
    if redone != flagged:
        raise RuntimeError(f"{entry}: the {k.backend} kernel reported {flagged} undecided rows "
                           f"but flagged {redone}")


@entry_point("mojolike.softmax")
def softmax(x, dim=-1, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """torch's softmax along `dim`: y_j = e_j / S, e_j = expf(x_j - max x), S = fold_j e_j.

    Reproducibility: the oracle's bits on every backend and thread count
    (contracts/transformer.md clauses 1-2); a row depends on itself only.

    >>> import numpy as np, mojolike
    >>> mojolike.softmax(np.float32([0, 0, 0, 0]), backend="oracle").tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    return _softmax(entry, x, dim, False, backend, numeric_mode)


@entry_point("mojolike.log_softmax")
def log_softmax(x, dim=-1, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """torch's log_softmax along `dim`: y_j = (x_j - max x) - logf(S).

    Reproducibility: as `softmax` (clause 1).

    >>> import numpy as np, mojolike
    >>> mojolike.log_softmax(np.float32([1, 1]), backend="oracle").tolist()
    [-0.6931471824645996, -0.6931471824645996]
    """
    return _softmax(entry, x, dim, True, backend, numeric_mode)


def _softmax_backward(entry, dy, y, dim, log, backend, numeric_mode):
    g = array(entry, "dy", dy)
    out = array(entry, "y", y)
    _same_shape(entry, "dy", g, "y", out)
    d = _dim(entry, dim, g.ndim)
    k = _kernels(entry, FAMILY, backend, numeric_mode)
    gr, yr = _last(g, d), _last(out, d)
    gr, yr = gr.reshape(-1, gr.shape[-1]), yr.reshape(-1, yr.shape[-1])
    dx = checks.empty(entry, "dy", gr.shape)
    status = np.zeros(gr.shape[0], np.int32)
    flagged = k.softmax_backward_rows(gr, yr, log, dx, status)
    redone = finish_rows("log_softmax_backward" if log else "softmax_backward", yr, dx, status,
                         dy=gr, backend=k.backend, numeric_mode=k.numeric_mode)
    _agree(entry, k, flagged, redone)
    return _back(dx.reshape(_moved_shape(g.shape, d)), d)


@entry_point("mojolike.softmax_backward")
def softmax_backward(dy, y, dim=-1, *, backend=None, numeric_mode=None, entry,
                     **unknown) -> np.ndarray:
    """dx of y = softmax(x, dim) for the gradient dy: dx_j = y_j * (dy_j - fold_j(dy_j * y_j)).

    Reproducibility: as `softmax` (clause 3).

    >>> import numpy as np, mojolike
    >>> mojolike.softmax_backward(np.float32([1, 0]), np.float32([0.5, 0.5]), backend="oracle").tolist()
    [0.25, -0.25]
    """
    return _softmax_backward(entry, dy, y, dim, False, backend, numeric_mode)


@entry_point("mojolike.log_softmax_backward")
def log_softmax_backward(dy, y, dim=-1, *, backend=None, numeric_mode=None, entry,
                         **unknown) -> np.ndarray:
    """dx of y = log_softmax(x, dim): dx_j = dy_j - expf(y_j) * fold_j dy_j.

    Reproducibility: as `softmax` (clause 3).

    >>> import numpy as np, mojolike
    >>> y = mojolike.log_softmax(np.float32([1, 1]), backend="oracle")
    >>> mojolike.log_softmax_backward(np.float32([1, 0]), y, backend="oracle").tolist()
    [0.5, -0.5]
    """
    return _softmax_backward(entry, dy, y, dim, True, backend, numeric_mode)


# -- layer_norm ---------------------------------------------------------------------------------
def _normalized(entry: str, normalized_shape, x: np.ndarray) -> tuple[int, ...]:
    dims, _ = checks.shape(entry, "normalized_shape", normalized_shape)
    if len(dims) > x.ndim or x.shape[x.ndim - len(dims):] != dims:
        refuse(entry, "normalized_shape", f"{dims} is not the trailing dimensions of x {x.shape}; "
                                          f"layer_norm normalizes over x's last dimensions")
    return dims


def _affine_arg(entry: str, name: str, v, dims: tuple[int, ...]):
    if v is None:
        return None
    a = array(entry, name, v)
    if a.shape != dims:
        refuse(entry, name, f"has shape {a.shape}; layer_norm needs normalized_shape {dims}")
    return a.reshape(-1)


def _eps(entry: str, eps) -> np.float32:
    return np.float32(checks.real32(entry, "eps", eps, low=0.0))


@entry_point("mojolike.layer_norm")
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=EPS_DEFAULT, *, backend=None,
               numeric_mode=None, entry, **unknown) -> np.ndarray:
    """torch's F.layer_norm: each row of the prod(normalized_shape) trailing values is
    (x - mean) * rstd (* weight + bias), mean and the biased variance as two folds.

    rstd = 1 / sqrt(var + eps) with three roundings (no rsqrt); eps is binary32(eps).

    Reproducibility: the oracle's bits on every backend and thread count
    (contracts/transformer.md clause 4); a row depends on itself, weight and bias only.

    >>> import numpy as np, mojolike
    >>> mojolike.layer_norm(np.float32([[1, 3]]), (2,), eps=0.0, backend="oracle").tolist()
    [[-1.0, 1.0]]
    """
    a = array(entry, "x", x)
    dims = _normalized(entry, normalized_shape, a)
    w = _affine_arg(entry, "weight", weight, dims)
    b = _affine_arg(entry, "bias", bias, dims)
    ep = _eps(entry, eps)
    k = _kernels(entry, FAMILY, backend, numeric_mode)
    width = math.prod(dims)
    y = checks.empty(entry, "x", a.shape)
    k.layer_norm_rows(a.reshape(-1, width), _NONE if w is None else w, w is not None,
                      _NONE if b is None else b, b is not None, ep, y.reshape(-1, width))
    return y


@entry_point("mojolike.layer_norm_backward")
def layer_norm_backward(dy, x, normalized_shape, weight=None, bias=None, eps=EPS_DEFAULT, *,
                        backend=None, numeric_mode=None, entry, **unknown):
    """(dx, dweight, dbias) of y = layer_norm(x, normalized_shape, weight, bias, eps) for dy.

    dx = rstd * ((g - fold(g)/D) - h * fold(g h)/D) with g = dy * weight; dweight folds
    dy * h over the rows (C order), dbias folds dy; each None when its argument is.

    Reproducibility: as `layer_norm` (clause 5); dx of a row depends on that row only.

    >>> import numpy as np, mojolike
    >>> dx, dw, db = mojolike.layer_norm_backward(np.float32([[1, 0]]), np.float32([[1, 3]]), (2,),
    ...                                           np.ones(2, np.float32), np.zeros(2, np.float32),
    ...                                           eps=0.0, backend="oracle")
    >>> dx.tolist(), dw.tolist(), db.tolist()
    ([[0.0, 0.0]], [-1.0, 0.0], [1.0, 0.0])
    """
    g = array(entry, "dy", dy)
    a = array(entry, "x", x)
    _same_shape(entry, "dy", g, "x", a)
    dims = _normalized(entry, normalized_shape, a)
    w = _affine_arg(entry, "weight", weight, dims)
    b = _affine_arg(entry, "bias", bias, dims)
    ep = _eps(entry, eps)
    k = _kernels(entry, FAMILY, backend, numeric_mode)
    width = math.prod(dims)
    g2, a2 = g.reshape(-1, width), a.reshape(-1, width)
    dx = checks.empty(entry, "dy", a.shape)
    lk = None
    if w is not None or b is not None:
        lk = _kernels(entry, "layers", k.backend, k.numeric_mode)
    dw = None if w is None else checks.empty(entry, "weight", (width,))
    db = None if b is None else checks.empty(entry, "bias", (width,))
    rows_stats = getattr(k, "layer_norm_backward_rows_stats", None)
    cols = getattr(lk, "col_fold_normalized", None)
    if dw is not None and db is not None and rows_stats is not None and cols is not None:
        # cpu-numba: each row's (mean, rstd) rather than h; the column pass recomputes h
        stats = checks.empty(entry, "x", (a2.shape[0], 2))
        rows_stats(g2, a2, w, True, ep, dx.reshape(-1, width), stats)
        cols(g2, a2, stats, dw, db)
    else:
        h = checks.empty(entry, "x", a2.shape)
        k.layer_norm_backward_rows(g2, a2, _NONE if w is None else w, w is not None, ep,
                                   dx.reshape(-1, width), h)
        if dw is not None:
            lk.col_fold(g2, h, True, dw)
        if db is not None:
            lk.col_fold(g2, g2, False, db)
    return dx, None if dw is None else dw.reshape(dims), None if db is None else db.reshape(dims)


# -- GELU ---------------------------------------------------------------------------------------
def _approximate(entry: str, approximate) -> bool:
    return checks.choice(entry, "approximate", approximate, APPROXIMATIONS) == "tanh"


@entry_point("mojolike.gelu")
def gelu(x, approximate="none", *, backend=None, numeric_mode=None, entry, **unknown
         ) -> np.ndarray:
    """torch's F.gelu: 'none' is x/2 (1 + erf(x/sqrt 2)), 'tanh' torch's tanh formula, on
    the correctly rounded erff and tanhf (contracts/transformer.md clauses 6-7).

    Reproducibility: elementwise; the oracle's bits on every backend and thread count.

    >>> import numpy as np, mojolike
    >>> mojolike.gelu(np.float32([0, 1]), backend="oracle").tolist()
    [0.0, 0.8413447141647339]
    """
    a = array(entry, "x", x)
    tanh = _approximate(entry, approximate)
    k = _kernels(entry, "crmath", backend, numeric_mode)
    out = checks.empty(entry, "x", a.shape)
    n = k.gelu_into(a.reshape(-1), tanh, out.reshape(-1))
    crmath.finish_gelu(a.reshape(-1), tanh, out.reshape(-1), n)
    return out


@entry_point("mojolike.gelu_backward")
def gelu_backward(dy, x, approximate="none", *, backend=None, numeric_mode=None, entry,
                  **unknown) -> np.ndarray:
    """dx of y = gelu(x, approximate) for dy, torch 2.13's CPU formula order (clause 7).

    Reproducibility: elementwise; the oracle's bits on every backend and thread count.

    >>> import numpy as np, mojolike
    >>> mojolike.gelu_backward(np.float32([1]), np.float32([0]), backend="oracle").tolist()
    [0.5]
    """
    g = array(entry, "dy", dy)
    a = array(entry, "x", x)
    _same_shape(entry, "dy", g, "x", a)
    tanh = _approximate(entry, approximate)
    k = _kernels(entry, "crmath", backend, numeric_mode)
    dx = checks.empty(entry, "dy", a.shape)
    n = k.gelu_backward_into(g.reshape(-1), a.reshape(-1), tanh, dx.reshape(-1))
    crmath.finish_gelu_backward(g.reshape(-1), a.reshape(-1), tanh, dx.reshape(-1), n)
    return dx


# -- sums over dimensions -----------------------------------------------------------------------
def reduced_dims(entry: str, dim, ndim: int) -> tuple[int, ...]:
    """dim (None: every dimension; an int; a tuple of distinct ints) as sorted non-negative ints."""
    if dim is None:
        return tuple(range(ndim))
    items = dim if isinstance(dim, (tuple, list)) else (dim,)
    if not items:
        refuse(entry, "dim", "is empty (torch reads an empty dim as every dimension in some "
                             "versions and as none in others); pass None for every dimension",
               value=dim)
    out = sorted(_dim(entry, d, ndim) for d in items)
    if len(set(out)) != len(out):
        refuse(entry, "dim", "names a dimension twice", value=dim)
    return tuple(out)


def fold_dims(entry: str, a: np.ndarray, dims: tuple[int, ...], k) -> np.ndarray:
    """The fold over `dims` of a (their multi-index in C order, ascending) for each index of the
    other dimensions, shaped as those dimensions (the layers family's column fold)."""
    keep = tuple(d for d in range(a.ndim) if d not in dims)
    rows = math.prod(a.shape[d] for d in dims)
    cols = math.prod(a.shape[d] for d in keep)
    moved = np.ascontiguousarray(np.transpose(a, dims + keep)).reshape(rows, cols)
    out = checks.empty(entry, "x", (cols,))
    k.col_fold(moved, moved, False, out)
    return out.reshape(tuple(a.shape[d] for d in keep))


def _sum(entry, x, dim, keepdim, backend, numeric_mode, mean: bool):
    a = array(entry, "x", x)
    dims = reduced_dims(entry, dim, a.ndim)
    keepdim = checks.switch(entry, "keepdim", keepdim)
    k = _kernels(entry, "layers", backend, numeric_mode)
    y = fold_dims(entry, a, dims, k)
    if mean:
        n = np.float32(f32.round_fraction(Fraction(math.prod(a.shape[d] for d in dims))))
        with np.errstate(all="ignore"):
            y = np.divide(y, n, dtype=np.float32)
    if keepdim:
        y = y.reshape(tuple(1 if d in dims else a.shape[d] for d in range(a.ndim)))
    return np.asarray(y, np.float32)


@entry_point("mojolike.sum")
def sum(x, dim=None, keepdim=False, *, backend=None, numeric_mode=None, entry, **unknown
        ) -> np.ndarray:
    """torch.sum over `dim` (None: all; an int or a tuple), each output the `fold` over the
    reduced dimensions' multi-index in C order, ascending; keepdim keeps them as size 1.

    Reproducibility: the oracle's bits on every backend and thread count; an output depends
    on the elements it reduces only (the sum over broadcast dimensions in the tape's backward).

    >>> import numpy as np, mojolike
    >>> mojolike.sum(np.float32([[1, 2], [3, 4]]), dim=0, backend="oracle").tolist()
    [4.0, 6.0]
    """
    return _sum(entry, x, dim, keepdim, backend, numeric_mode, mean=False)


@entry_point("mojolike.mean")
def mean(x, dim=None, keepdim=False, *, backend=None, numeric_mode=None, entry, **unknown
         ) -> np.ndarray:
    """torch.mean over `dim`: `sum` divided by binary32(n), n the reduced count (one division).

    Reproducibility: as `sum`.

    >>> import numpy as np, mojolike
    >>> mojolike.mean(np.float32([[1, 2], [3, 4]]), dim=1, keepdim=True, backend="oracle").tolist()
    [[1.5], [3.5]]
    """
    return _sum(entry, x, dim, keepdim, backend, numeric_mode, mean=True)


# -- batched matmul -----------------------------------------------------------------------------
def _batch(entry: str, a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    try:
        return spec.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        refuse(entry, "b", f"has batch dimensions {b.shape[:-2]} that do not broadcast with a's "
                           f"{a.shape[:-2]} (torch's rule: aligned from the right, equal or 1)")


def _entries(own: tuple[int, ...], batch: tuple[int, ...]) -> np.ndarray:
    """For each output batch entry (C order), the index of the operand entry it reads."""
    if not batch:
        return np.zeros(1, np.int64)
    own = (1,) * (len(batch) - len(own)) + own
    idx = np.arange(math.prod(own), dtype=np.int64).reshape(own)
    return np.ascontiguousarray(np.broadcast_to(idx, batch)).reshape(-1)


def _operands(entry: str, a, b, names=("a", "b")):
    x = array(entry, names[0], a, min_ndim=2)
    y = array(entry, names[1], b, min_ndim=2)
    if x.shape[-1] != y.shape[-2]:
        refuse(entry, names[1], f"has K={y.shape[-2]} rows but {names[0]} has K={x.shape[-1]} "
                                f"columns ({names[0]} is {x.shape}, {names[1]} is {y.shape}); "
                                f"matmul needs (..., M, K) @ (..., K, N)")
    return x, y


def _transposed(t: np.ndarray) -> np.ndarray:
    """(..., R, C) -> (P, C, R) C-contiguous (an exact copy), P the product of the batch."""
    r, c = t.shape[-2:]
    return np.ascontiguousarray(np.swapaxes(t.reshape(-1, r, c), 1, 2))


@entry_point("mojolike.matmul")
def matmul(a, b, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """torch's matmul for a (..., M, K) and b (..., K, N), batch dimensions broadcast:
    y[..., m, n] = fold over k ascending of the rounded a[..., m, k] * b[..., k, n].

    Both operands are at least 2-D (a 1-D operand is refused: reshape it). Each batch
    entry reads only its own operand entries (contracts/transformer.md clause 8).

    Reproducibility: the oracle's bits on every backend and thread count; a batch entry
    and a row never depend on the others (the layers family's gemm per entry).

    Low precision (contracts/mixed.md): a and b both bfloat16 or both float16 give the
    float32 result of this op on the exactly widened inputs, bit for bit (widened into a
    float32 scratch, then on cpu-numba a fused multiply-add kernel where every product is
    exact, else the float32 kernel); mixed operand types are refused.

    >>> import numpy as np, mojolike
    >>> a = np.float32([[[1, 2]], [[3, 4]]]); b = np.float32([[1], [1]])
    >>> mojolike.matmul(a, b, backend="oracle").tolist()
    [[[3.0]], [[7.0]]]
    """
    # bfloat16 / float16 operands (both one type): widened exactly, then the float32 op below
    low = mixed.low_type((("a", a), ("b", b)))
    a, b = mixed.widened(entry, (("a", a), ("b", b)), backend, numeric_mode)
    x, y = _operands(entry, a, b)
    batch = _batch(entry, x, y)
    k = _kernels(entry, "layers", backend, numeric_mode)
    m, kk, n = x.shape[-2], x.shape[-1], y.shape[-1]
    ia, ib = _entries(x.shape[:-2], batch), _entries(y.shape[:-2], batch)
    xa = x.reshape(-1, m, kk)
    out = checks.empty(entry, "a", batch + (m, n))
    o3 = out.reshape(-1, m, n)
    pairs = list(enumerate(zip(ia.tolist(), ib.tolist())))
    if low is None and _each_gemm(k, "gemm_nn", xa, y.reshape(-1, kk, n), o3, pairs):
        return out  # b as stored (cpu-numba): the same cells, no copy
    yt = _transposed(y)  # (Pb, N, K): gemm_nt's b
    gemm = mixed.gemm_nt(entry, low, k, backend, numeric_mode)  # low types: FMA if exact
    for p, (i, j) in pairs:
        gemm(xa[i], yt[j], _NONE, False, o3[p])
    return out


def _each_gemm(k, name: str, a3, b3, o3, pairs) -> bool:
    """o3[p] = the kernel set's `name` (gemm_nn: a3[i] @ b3[j], b as stored; gemm_tn:
    a3[i]^T @ b3[j], both as stored) for each (p, (i, j)), where the set has that method and
    it runs for these shapes (else nothing is written: False)."""
    gemm = getattr(k, name, None)
    if gemm is None or not pairs:
        return False
    p0, (i0, j0) = pairs[0]
    if not gemm(a3[i0], b3[j0], o3[p0]):
        return False
    for p, (i, j) in pairs[1:]:
        gemm(a3[i], b3[j], o3[p])
    return True


def _reduce(k, entry: str, name: str, per_entry: np.ndarray, idx: np.ndarray, own_shape,
            shape) -> np.ndarray:
    """Each operand entry's gradient: the fold of the G of every output entry that read it,
    ascending (the layers family's segment fold); an entry read once is its G."""
    count = math.prod(own_shape) if own_shape else 1
    if idx.size == count:  # every operand entry read exactly once, in order
        return per_entry.reshape(shape)
    width = per_entry[0].size
    order = np.argsort(idx, kind="stable").astype(np.int64)
    starts = np.searchsorted(idx[order], np.arange(count + 1)).astype(np.int64)
    out = checks.empty(entry, name, (count, width))
    k.segment_fold(per_entry.reshape(idx.size, width), order, starts,
                   np.arange(count, dtype=np.int64), out)
    return out.reshape(shape)


@entry_point("mojolike.matmul_backward")
def matmul_backward(dy, a, b, *, backend=None, numeric_mode=None, entry, **unknown):
    """(da, db) of y = matmul(a, b) for dy: per output entry dY B^T (fold over n) and
    A^T dY (fold over m), then each operand entry's G folded over the output entries
    that read it, ascending (contracts/transformer.md clause 9).

    Reproducibility: as `matmul`.

    >>> import numpy as np, mojolike
    >>> da, db = mojolike.matmul_backward(np.float32([[1]]), np.float32([[1, 2]]),
    ...                                   np.float32([[3], [4]]), backend="oracle")
    >>> da.tolist(), db.tolist()
    ([[3.0, 4.0]], [[1.0], [2.0]])
    """
    x, y = _operands(entry, a, b)
    batch = _batch(entry, x, y)
    m, kk, n = x.shape[-2], x.shape[-1], y.shape[-1]
    g = array(entry, "dy", dy)
    if g.shape != batch + (m, n):
        refuse(entry, "dy", f"has shape {g.shape}; matmul(a, b) has shape {batch + (m, n)}")
    k = _kernels(entry, "layers", backend, numeric_mode)
    ia, ib = _entries(x.shape[:-2], batch), _entries(y.shape[:-2], batch)
    g3 = g.reshape(-1, m, n)
    yb = y.reshape(-1, kk, n)  # (Pb, K, N): dY B^T = gemm_nt(dY, B)
    ga = checks.empty(entry, "a", (ia.size, m, kk))
    gb = checks.empty(entry, "b", (ib.size, kk, n))
    pairs = list(enumerate(zip(ia.tolist(), ib.tolist())))
    for p, (i, j) in pairs:
        k.gemm_nt(g3[p], yb[j], _NONE, False, ga[p])
    # A^T dY with A and dY as stored (cpu-numba's gemm_tn, where its tiles run), else with dY
    # as stored (gemm_nn), else gemm_nt(A^T, dY^T)
    per_a = [(p, (i, p)) for p, (i, _) in pairs]
    if not _each_gemm(k, "gemm_tn", x.reshape(-1, m, kk), g3, gb, per_a):
        xt = _transposed(x)  # (Pa, K, M)
        if not _each_gemm(k, "gemm_nn", xt, g3, gb, per_a):
            gt = _transposed(g)  # (P, N, M)
            for p, (i, _) in pairs:
                k.gemm_nt(xt[i], gt[p], _NONE, False, gb[p])
    da = _reduce(k, entry, "a", ga, ia, x.shape[:-2], x.shape)
    db = _reduce(k, entry, "b", gb, ib, y.shape[:-2], y.shape)
    return da, db


__all__ = ["gelu", "gelu_backward", "layer_norm", "layer_norm_backward", "log_softmax",
           "log_softmax_backward", "matmul", "matmul_backward", "mean", "softmax",
           "softmax_backward", "sum"]
