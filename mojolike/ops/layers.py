"""Layers with torch's names and layouts: linear, embedding, RMSNorm, relu and their backward rules.

The arithmetic is `mojolike.oracles.layers` (contracts/layers.md): every
contraction is a `fold` on the library's one tree, so `linear(x, w)[i, j]` is bit
for bit `mojolike.dot(x[i], w[j])` and a row's result never depends on which other
rows share the call (batch invariance). The backward contractions fold over the
contracted index in ascending order; they run on the same GEMM with transposed
operands (a transpose is an exact copy).

>>> import numpy as np, mojolike
>>> x = np.float32([[1, 2], [3, 4]]); w = np.float32([[0.5, 0.25]])
>>> mojolike.linear(x, w, np.float32([1]), backend="oracle").tolist()
[[2.0], [3.5]]
>>> mojolike.linear(x[1:], w, np.float32([1]), backend="oracle").tolist()    # the same row, alone
[[3.5]]
"""
from __future__ import annotations

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point
from ..core.refusals import refuse
from . import mixed

FAMILY = "layers"
EPS_DEFAULT = float(np.finfo(np.float32).eps)  # torch's F.rms_norm: eps=None means this
_NONE = np.zeros(1, np.float32)  # the placeholder a kernel gets for a missing bias or weight


def _matrix(entry: str, name: str, obj, *, ndim: int | None = None, min_ndim: int = 1
            ) -> np.ndarray:
    """A float32 buffer with its shape (C order, no copy); `ndim` exact or at least `min_ndim`."""
    flat = checks.as_f32(entry, name, obj)
    shape = checks.shape_of(obj)
    if (ndim is not None and len(shape) != ndim) or len(shape) < min_ndim:
        want = f"{ndim}-D" if ndim is not None else f"at least {min_ndim}-D"
        refuse(entry, name, f"has shape {shape}; {entry} needs a {want} array")
    return flat.reshape(shape)


def _rows(a: np.ndarray) -> np.ndarray:
    """(..., K) as (rows, K)."""
    return a.reshape(-1, a.shape[-1])


def _kernels(entry: str, backend, numeric_mode):
    return registry.kernels(entry, FAMILY, backend, numeric_mode)


_TILE = 128  # a 128 x 128 float32 tile (64 KiB) read and written while it is in cache


def _t(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a.T as a C-contiguous copy (exact), into `out` (any C-contiguous buffer of a.size
    floats) when given. Copied tile by tile: numpy's strided copy of a whole transpose
    misses the cache on every write and runs 2-3x slower on large matrices."""
    m, n = a.shape
    t = np.empty((n, m), a.dtype) if out is None else out.reshape(n, m)
    if m * n < _TILE * _TILE:
        t[...] = a.T
        return t
    for i in range(0, m, _TILE):
        for j in range(0, n, _TILE):
            t[j:j + _TILE, i:i + _TILE] = a[i:i + _TILE, j:j + _TILE].T
    return t


# -- linear -------------------------------------------------------------------------------------
@entry_point("mojolike.linear")
def linear(x, weight, bias=None, *, backend=None, numeric_mode=None, entry,
           **unknown) -> np.ndarray:
    """y = x weight^T + bias, torch's F.linear: x (..., K), weight (N, K), bias (N,) or None.

    Every cell y[..., i, j] is fold over k of the rounded x[i, k] * weight[j, k] (the
    library's one tree, `mojolike.dot`), plus bias[j] with one more rounding. Inputs
    follow IEEE 754 (inf and NaN propagate); a new (..., N) float32 array is returned.

    Reproducibility: the oracle's bits on every backend and thread count
    (numeric_mode="identical"); a row's result is the same whatever other rows share
    the call (batch invariance, contracts/layers.md), unlike torch's and numpy's
    matmul, which block K by the batch shape.

    Low precision (contracts/mixed.md): x, weight and bias all bfloat16 or all float16
    give the float32 result of this op on the exactly widened inputs, bit for bit
    (widened into a float32 scratch, then on cpu-numba a fused multiply-add kernel where
    every product is exact, else the float32 kernel); mixed operand types are refused by
    name.

    >>> import numpy as np, mojolike
    >>> mojolike.linear(np.float32([[1e8, 1, -1e8]]), np.float32([[1, 1, 1]]), backend="oracle")
    array([[1.]], dtype=float32)
    """
    e = entry
    # bfloat16 / float16 operands (all one type): widened exactly, then the float32 op below
    operands = (("x", x), ("weight", weight), ("bias", bias))
    low = mixed.low_type(operands)
    x, weight, bias = mixed.widened(e, operands, backend, numeric_mode)
    a = _matrix(e, "x", x)
    w = _matrix(e, "weight", weight, ndim=2)
    if a.shape[-1] != w.shape[1]:
        refuse(e, "weight", f"has K={w.shape[1]} columns but x has K={a.shape[-1]} (x is {a.shape}, "
                            f"weight is {w.shape}); linear needs x (..., K) and weight (N, K)")
    b = None
    if bias is not None:
        b = _matrix(e, "bias", bias, ndim=1)
        if b.shape[0] != w.shape[0]:
            refuse(e, "bias", f"has {b.shape[0]} elements but weight has N={w.shape[0]} rows")
    k = _kernels(e, backend, numeric_mode)
    out = checks.empty(e, "x", a.shape[:-1] + (w.shape[0],))
    gemm = mixed.gemm_nt(e, low, k, backend, numeric_mode)  # low types: the FMA kernel if exact
    gemm(_rows(a), w, _NONE if b is None else b, b is not None, _rows(out))
    return out


@entry_point("mojolike.linear_backward")
def linear_backward(dy, x, weight, bias=True, *, backend=None, numeric_mode=None, entry, **unknown):
    """(dx, dweight, dbias) of y = linear(x, weight, bias) for the upstream gradient dy.

    dx[i, k] folds dy[i, n] * weight[n, k] over n ascending; dweight[n, k] folds
    dy[m, n] * x[m, k] over the rows m (all leading dimensions, in C order);
    dbias[n] folds dy[m, n] over m, or is None with bias=False.

    Reproducibility: as `linear`; dx of a row depends on that row alone.

    >>> import numpy as np, mojolike
    >>> dx, dw, db = mojolike.linear_backward(np.float32([[1, 2]]), np.float32([[3, 4, 5]]),
    ...                                       np.ones((2, 3), np.float32), backend="oracle")
    >>> dx.tolist(), dw.tolist(), db.tolist()
    ([[3.0, 3.0, 3.0]], [[3.0, 4.0, 5.0], [6.0, 8.0, 10.0]], [1.0, 2.0])
    """
    e = entry
    g = _matrix(e, "dy", dy)
    a = _matrix(e, "x", x)
    w = _matrix(e, "weight", weight, ndim=2)
    want_bias = checks.switch(e, "bias", bias)
    n, kk = w.shape
    if a.shape[-1] != kk:
        refuse(e, "x", f"has K={a.shape[-1]} but weight has K={kk} columns")
    if g.shape != a.shape[:-1] + (n,):
        refuse(e, "dy", f"has shape {g.shape} but linear(x, weight) has shape {a.shape[:-1] + (n,)}")
    k = _kernels(e, backend, numeric_mode)
    g2 = _rows(g)
    dx = checks.empty(e, "x", a.shape)
    dw = checks.empty(e, "weight", w.shape)
    _dx_product(k, g2, w, _rows(dx), dw)
    _dw_product(k, g2, _rows(a), dw)
    return dx, dw, _dbias(k, g2, want_bias)


def _dx_product(k, g2: np.ndarray, w: np.ndarray, dx2: np.ndarray, scratch: np.ndarray) -> None:
    """dx2 = g2 @ w: cpu-numba's gemm_nn reads weight as stored; elsewhere weight's transpose
    waits in `scratch` (dweight's own buffer, written after this) until dx2 is written: no
    parameter-sized temporary."""
    nn = getattr(k, "gemm_nn", None)
    if nn is None or not nn(g2, w, dx2):
        k.gemm_nt(g2, _t(w, out=scratch), _NONE, False, dx2)


def _dw_product(k, g2: np.ndarray, a2: np.ndarray, dw: np.ndarray) -> None:
    """dw = g2^T @ a2: cpu-numba's gemm_tn reads dy as stored (no transposed copy), else
    gemm_nn on dy's transpose, else gemm_nt on both transposes."""
    tn = getattr(k, "gemm_tn", None)
    if tn is None or not tn(g2, a2, dw):
        gt = _t(g2)
        nn = getattr(k, "gemm_nn", None)
        if nn is None or not nn(gt, a2, dw):
            k.gemm_nt(gt, _t(a2), _NONE, False, dw)


def _dbias(k, g2: np.ndarray, want: bool):
    if not want:
        return None
    db = np.empty(g2.shape[1], np.float32)
    k.col_fold(g2, g2, False, db)
    return db


def linear_backward_low(entry: str, dy: np.ndarray, x: np.ndarray, weight: np.ndarray,
                        bias: bool, backend=None, numeric_mode=None):
    """linear_backward's (dx, dweight, dbias) for a float32 dy and an x and weight of one low
    type (bfloat16 / float16) that the tape kept: the float32 op on them widened exactly, bit
    for bit (contracts/mixed.md clause 30). The tape's arrays, so no argument check: cpu-numba
    widens each inside the GEMM's packing where its tiles run (`gemm_low`), so neither has a
    float32 copy; elsewhere that operand is widened first and the float32 products run."""
    k = _kernels(entry, backend, numeric_mode)
    kind = checks.cast_type_of(x)
    low = getattr(k, "gemm_low", None)
    g2 = _rows(np.ascontiguousarray(dy, dtype=np.float32))
    dx = np.empty(x.shape, np.float32)
    dw = np.empty(weight.shape, np.float32)
    if low is None or not low("nn", g2, weight, kind, _rows(dx)):
        _dx_product(k, g2, mixed.cast(weight, "float32", backend=backend,
                                      numeric_mode=numeric_mode), _rows(dx), dw)
    if low is None or not low("tn", g2, _rows(x), kind, dw):
        _dw_product(k, g2, _rows(mixed.cast(x, "float32", backend=backend,
                                            numeric_mode=numeric_mode)), dw)
    return dx, dw, _dbias(k, g2, bias)


# -- embedding ----------------------------------------------------------------------------------
def _ids(entry: str, ids, num: int) -> np.ndarray:
    try:
        t = np.asarray(ids)
    except (TypeError, ValueError, OverflowError) as err:
        refuse(entry, "ids", f"are not an array of integer indices ({err})")
    if t.dtype.kind not in "iu" or t.size == 0:
        refuse(entry, "ids", f"must be a non-empty array of integer indices, got dtype {t.dtype.name} "
                             f"and shape {t.shape}")
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= num:
        i = int(np.flatnonzero((t.reshape(-1) < 0) | (t.reshape(-1) >= num))[0])
        refuse(entry, f"ids[{i}]", f"is {int(t.reshape(-1)[i])}, outside [0, {num}) (flat index {i}); "
                                   f"nothing was written")
    return t.astype(np.int64, copy=False)


def _padding(entry: str, padding_idx, num: int) -> int | None:
    if padding_idx is None:
        return None
    p = checks.integer(entry, "padding_idx", padding_idx, low=-num, high=num - 1)
    return p + num if p < 0 else p  # torch: a negative index counts from the end


@entry_point("mojolike.embedding", torch=("max_norm", "norm_type", "scale_grad_by_freq", "sparse"))
def embedding(ids, weight, padding_idx=None, *, backend=None, numeric_mode=None, entry, **unknown):
    """weight[ids], torch's F.embedding(input, weight): ids any integer shape, weight (V, D);
    returns (*ids.shape, D). The rows are copied exactly; `padding_idx` only changes the
    backward (its row gets no gradient), as in torch. torch's max_norm, scale_grad_by_freq and
    sparse are refused unless given as their defaults.

    Low precision (contracts/mixed.md): a bfloat16 or float16 weight gives its rows widened
    exactly to float32, the float32 op on the widened table; only the rows taken are
    widened.

    Reproducibility: a copy: the same bits everywhere.

    >>> import numpy as np, mojolike
    >>> mojolike.embedding(np.int64([2, 0]), np.float32([[1, 1], [2, 2], [3, 3]])).tolist()
    [[3.0, 3.0], [1.0, 1.0]]
    """
    e = entry
    low = mixed.low_type((("weight", weight),))
    if low is not None:  # the rows taken from the low-precision table, then widened exactly
        table, _ = checks.as_cast_buffer(e, "weight", weight)
        shape = checks.shape_of(weight)
        if len(shape) != 2:
            refuse(e, "weight", f"has shape {shape}; {e} needs a 2-D array")
        t = _ids(e, ids, shape[0])
        _padding(e, padding_idx, shape[0])
        rows = np.ascontiguousarray(table.reshape(shape)[t])
        return mixed.widened(e, (("weight", rows),), backend, numeric_mode)[0]
    w = _matrix(e, "weight", weight, ndim=2)
    t = _ids(e, ids, w.shape[0])
    _padding(e, padding_idx, w.shape[0])
    registry.check_fp_state(e, registry.resolve(e, backend, numeric_mode)[1])
    return w[t]


@entry_point("mojolike.embedding_backward")
def embedding_backward(dy, ids, num_embeddings, padding_idx=None, *, backend=None,
                       numeric_mode=None, entry, **unknown) -> np.ndarray:
    """dweight (V, D) of embedding(ids, weight): row v folds dy[t, :] over the positions t with
    ids[t] == v, in ascending t (C order of ids); rows never used and `padding_idx` are +0.0.

    Reproducibility: each row's sum is the fold over its positions in ascending order, one
    thread per row, never a scatter-add in thread order.

    >>> import numpy as np, mojolike
    >>> mojolike.embedding_backward(np.float32([[1, 2], [3, 4], [5, 6]]), np.int64([1, 0, 1]), 3,
    ...                             backend="oracle").tolist()
    [[3.0, 4.0], [6.0, 8.0], [0.0, 0.0]]
    """
    e = entry
    num = checks.integer(e, "num_embeddings", num_embeddings, low=1)
    t = _ids(e, ids, num).reshape(-1)
    g = _matrix(e, "dy", dy)
    if g.shape[:-1] != np.shape(ids) or g.ndim < 2:
        refuse(e, "dy", f"has shape {g.shape} but the embedding of ids {np.shape(ids)} has shape "
                        f"{np.shape(ids) + (g.shape[-1],)}")
    pad = _padding(e, padding_idx, num)
    k = _kernels(e, backend, numeric_mode)
    out = checks.zeros(e, "num_embeddings", (num, g.shape[-1]))
    order = np.argsort(t, kind="stable").astype(np.int64)  # positions of one id stay ascending
    if pad is not None:
        order = order[t[order] != pad]  # the padding row gets no gradient
    if order.size:
        rows, starts = np.unique(t[order], return_index=True)
        bounds = np.append(starts, order.size).astype(np.int64)
        k.segment_fold(_rows(g), order, bounds, rows.astype(np.int64), out)
    return out


# -- RMSNorm ------------------------------------------------------------------------------------
def _eps(entry: str, eps) -> float:
    return checks.real32(entry, "eps", EPS_DEFAULT if eps is None else eps, low=0.0)


def _weight(entry: str, weight, d: int) -> np.ndarray | None:
    if weight is None:
        return None
    if isinstance(weight, (tuple, list)) and all(checks.is_int(v) for v in weight):
        refuse(entry, "weight", f"is {tuple(weight)}, a shape: mojolike.rms_norm(x, weight, eps) "
                                f"normalizes the last dimension; pass normalized_shape= by keyword")
    w = _matrix(entry, "weight", weight, ndim=1)
    if w.shape[0] != d:
        refuse(entry, "weight", f"has {w.shape[0]} elements but x's last dimension is {d}")
    return w


def _normalized_shape(entry: str, normalized_shape, d: int) -> None:
    if normalized_shape is None:
        return
    shape = (normalized_shape,) if checks.is_int(normalized_shape) else normalized_shape
    if not isinstance(shape, (tuple, list)) or tuple(int(s) for s in shape) != (d,):
        refuse(entry, "normalized_shape", f"must be ({d},), the last dimension of x: only the last "
                                          f"dimension is normalized", value=normalized_shape)


@entry_point("mojolike.rms_norm")
def rms_norm(x, weight=None, eps=None, *, normalized_shape=None, backend=None, numeric_mode=None,
             entry, **unknown) -> np.ndarray:
    """torch's F.rms_norm over the last dimension: y = x * r * weight, r = 1/sqrt(mean(x^2) + eps).

    Per row of D values, each step one rounding (contracts/layers.md): ms = fold(x*x) / D,
    r = 1 / sqrt(ms + eps), y = (x * r) * weight (x * r without weight). `eps` None is
    torch's default, float32's machine epsilon; `normalized_shape` (torch's second
    argument, by keyword here) may only name the last dimension.

    Reproducibility: the oracle's bits on every backend; a row depends on itself alone.

    >>> import numpy as np, mojolike
    >>> mojolike.rms_norm(np.float32([[3, 4]]), eps=1.0, backend="oracle").tolist()
    [[0.8164966106414795, 1.0886621475219727]]
    """
    e = entry
    a = _matrix(e, "x", x)
    d = a.shape[-1]
    _normalized_shape(e, normalized_shape, d)
    w = _weight(e, weight, d)
    ep = _eps(e, eps)
    k = _kernels(e, backend, numeric_mode)
    out = checks.empty(e, "x", a.shape)
    k.rms_norm(_rows(a), _NONE if w is None else w, w is not None, np.float32(ep), _rows(out))
    return out


@entry_point("mojolike.rms_norm_backward")
def rms_norm_backward(dy, x, weight=None, eps=None, *, backend=None, numeric_mode=None, entry,
                      **unknown):
    """(dx, dweight) of rms_norm(x, weight, eps) for the upstream gradient dy (dweight None
    without a weight). With g = dy * weight and h = x * r, per row: c = fold(g * h) / D,
    dx = r * (g - h * c); dweight folds dy * h over the rows.

    >>> import numpy as np, mojolike
    >>> dx, dw = mojolike.rms_norm_backward(np.float32([[1, 0]]), np.float32([[3, 4]]),
    ...                                     np.float32([1, 1]), eps=0.0, backend="oracle")
    >>> dx.tolist(), dw.tolist()
    ([[0.18101933598518372, -0.13576450943946838]], [0.8485281467437744, 0.0])
    """
    e = entry
    g = _matrix(e, "dy", dy)
    a = _matrix(e, "x", x)
    if g.shape != a.shape:
        refuse(e, "dy", f"has shape {g.shape} but x has shape {a.shape}")
    d = a.shape[-1]
    w = _weight(e, weight, d)
    ep = _eps(e, eps)
    k = _kernels(e, backend, numeric_mode)
    dx = checks.empty(e, "x", a.shape)
    h = checks.empty(e, "x", _rows(a).shape) if w is not None else _NONE
    k.rms_norm_backward(_rows(g), _rows(a), _NONE if w is None else w, w is not None,
                        np.float32(ep), _rows(dx), h)
    dw = None
    if w is not None:
        dw = np.empty(d, np.float32)
        k.col_fold(_rows(g), h, True, dw)
    return dx, dw


# -- relu and the MLP ---------------------------------------------------------------------------
@entry_point("mojolike.relu")
def relu(x, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """torch's relu: x where x >= 0 (-0.0 stays -0.0) or NaN, else +0.0; a new array.

    >>> import numpy as np, mojolike
    >>> mojolike.relu(np.float32([-1, -0.0, 2]), backend="oracle").tolist()
    [0.0, -0.0, 2.0]
    """
    e = entry
    a = _matrix(e, "x", x)
    k = _kernels(e, backend, numeric_mode)
    out = np.empty(a.shape, np.float32)
    k.relu(a, out)
    return out


@entry_point("mojolike.mlp_inference_sessions")
def mlp_inference_sessions(sessions, weight1, bias1, weight2, bias2, *, backend=None,
                           numeric_mode=None, entry, **unknown) -> np.ndarray:
    """relu(x weight1^T + bias1) weight2^T + bias2 for each (rows_i, width) session, the outputs
    concatenated in order; empty sessions (0 rows) are allowed and add no row.

    Reproducibility: each output row depends on its own input row alone, so a session
    gives the same bits alone, in any company and in any order (batch invariance).

    >>> import numpy as np, mojolike
    >>> w1, b1 = np.float32([[1, -1]]), np.float32([0]); w2, b2 = np.float32([[2]]), np.float32([1])
    >>> mojolike.mlp_inference_sessions([np.float32([[3, 1]]), np.zeros((0, 2), np.float32),
    ...                                  np.float32([[1, 3]])], w1, b1, w2, b2, backend="oracle").tolist()
    [[5.0], [1.0]]
    """
    e = entry
    if not isinstance(sessions, (list, tuple)):
        refuse(e, "sessions", f"must be a list of (rows, width) float32 arrays, not "
                              f"{type(sessions).__name__}")
    w1 = _matrix(e, "weight1", weight1, ndim=2)
    w2 = _matrix(e, "weight2", weight2, ndim=2)
    b1 = _matrix(e, "bias1", bias1, ndim=1)
    b2 = _matrix(e, "bias2", bias2, ndim=1)
    hidden, width = w1.shape
    if b1.shape[0] != hidden:
        refuse(e, "bias1", f"has {b1.shape[0]} elements but weight1 has {hidden} rows")
    if w2.shape[1] != hidden:
        refuse(e, "weight2", f"has {w2.shape[1]} columns but weight1 has {hidden} rows")
    if b2.shape[0] != w2.shape[0]:
        refuse(e, "bias2", f"has {b2.shape[0]} elements but weight2 has {w2.shape[0]} rows")
    parts = []
    for i, s in enumerate(sessions):
        if isinstance(s, np.ndarray) and s.ndim == 2 and s.shape[0] == 0:  # an empty session
            if s.dtype != np.float32 or s.shape[1] != width:
                refuse(e, f"sessions[{i}]", f"is an empty session of dtype {s.dtype.name} and width "
                                            f"{s.shape[1]}; an empty session is float32 (0, {width})")
            continue
        a = _matrix(e, f"sessions[{i}]", s, ndim=2)
        if a.shape[1] != width:
            refuse(e, f"sessions[{i}]", f"has width {a.shape[1]} but weight1 takes {width}")
        parts.append(a)
    k = _kernels(e, backend, numeric_mode)
    if not parts:
        return np.zeros((0, w2.shape[0]), np.float32)
    x = np.concatenate(parts) if len(parts) > 1 else parts[0]
    h = np.empty((x.shape[0], hidden), np.float32)
    k.gemm_nt(x, w1, b1, True, h)
    k.relu(h, h)
    out = np.empty((x.shape[0], w2.shape[0]), np.float32)
    k.gemm_nt(h, w2, b2, True, out)
    return out
