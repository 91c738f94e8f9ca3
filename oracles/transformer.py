"""softmax, log_softmax, layer_norm and batched matmul exactly, with their backward (contracts/transformer.md).

Values are Python floats holding binary32 values; a row is a list of them and
the op works along it (the API moves `dim` last: every line along `dim`, in C
order of the other indices, is one row, its index ascending). Every operation
is one binary32 rounding in the order written, no fused multiply-add; every sum
is `fold` (oracles/fold.py) over the stated index in ascending order; `expf`
and `logf` are the correctly rounded functions of oracles/crmath.py.

softmax, a row x of n values (clauses 1-2):
    mx = max_j x_j (exact);  d_j = x_j - mx;  e_j = expf(d_j);  S = fold_j e_j
    softmax:      y_j = e_j / S
    log_softmax:  y_j = d_j - logf(S)
softmax backward (torch's formulas), rows dy and y (clause 3):
    softmax:      c = fold_j(dy_j * y_j);  dx_j = y_j * (dy_j - c)
    log_softmax:  c = fold_j dy_j;         dx_j = dy_j - expf(y_j) * c
layer_norm (torch's F.layer_norm), a row x of the D = prod(normalized_shape)
trailing values, nD = binary32(D) (clauses 4-5):
    mean = fold_j x_j / nD;  c_j = x_j - mean;  var = fold_j(c_j * c_j) / nD
    rstd = 1 / sqrt(var + eps)          (addition, square root, division)
    h_j = c_j * rstd;  y_j = h_j * w_j + b_j   (each step present only with w, b)
layer_norm backward, with g_j = dy_j * w_j (dy_j without weight):
    a = fold_j g_j / nD;  m = fold_j(g_j * h_j) / nD;  dx_j = rstd * ((g_j - a) - h_j * m)
    dweight_j = fold over rows of dy_j * h_j;  dbias_j = fold over rows of dy_j
matmul (..., M, K) @ (..., K, N), batch dims broadcast as torch does (clauses 8-9):
    y[..., m, n] = fold_k(a[..., m, k] * b[..., k, n])
    backward: per output batch entry dA = dY B^T, dB = A^T dY (folds over n and m);
    an operand's broadcast batch entries are then folded in ascending C order.

torch leaves its own orders unspecified (its vectorized reductions use other trees,
its CPU softmax multiplies by 1/S, its layer_norm backward rearranges dx as
a*dy*w + b*x + c); the contract fixes the orders above.

Reproducibility: pure Python on the exact operations of `f32`, `fold` and `crmath`.

>>> softmax_rows([[0.0, 0.0, 0.0, 0.0]])
[[0.25, 0.25, 0.25, 0.25]]
>>> log_softmax_rows([[1.0, 1.0]])[0][0] == -logf(2.0)
True
>>> layer_norm_rows([[1.0, 3.0]], eps=0.0)
[[-1.0, 1.0]]
>>> matmul([[1.0, 2.0]], [[3.0], [4.0]])
[[11.0]]
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from . import f32
from .crmath import expf, logf
from .fold import dot, fold

Matrix = list[list[float]]
LAYER_NORM_EPS = 1e-5  # torch's default; binary32(1e-5) is used


def row_max(x: Sequence[float]) -> float:
    """max_j x_j, exact; NaN when any x_j is NaN (torch's max propagates NaN)."""
    mx = x[0]
    for v in x:
        if v != v:
            return math.nan
        if v > mx:
            mx = v
    return mx


def _exps(x: Sequence[float]) -> tuple[list[float], list[float], float]:
    """(d, e, S): d_j = x_j - max, e_j = expf(d_j), S = fold(e)."""
    mx = row_max(x)
    d = [f32.sub(v, mx) for v in x]
    e = [expf(v) for v in d]
    return d, e, fold(e)


def softmax_row(x: Sequence[float]) -> list[float]:
    _, e, s = _exps(x)
    return [f32.div(v, s) for v in e]


def log_softmax_row(x: Sequence[float]) -> list[float]:
    d, _, s = _exps(x)
    big_l = logf(s)
    return [f32.sub(v, big_l) for v in d]


def softmax_rows(x: Sequence[Sequence[float]]) -> Matrix:
    """softmax of every row: y_j = expf(x_j - max) / fold(expf(x - max))."""
    return [softmax_row(r) for r in x]


def log_softmax_rows(x: Sequence[Sequence[float]]) -> Matrix:
    """log_softmax of every row: y_j = (x_j - max) - logf(fold(expf(x - max)))."""
    return [log_softmax_row(r) for r in x]


def softmax_backward_rows(dy: Sequence[Sequence[float]], y: Sequence[Sequence[float]]) -> Matrix:
    """dx_j = y_j * (dy_j - c), c = fold_j(dy_j * y_j): torch's softmax backward."""
    out = []
    for g, p in zip(dy, y):
        c = dot(g, p)
        out.append([f32.mul(pj, f32.sub(gj, c)) for gj, pj in zip(g, p)])
    return out


def log_softmax_backward_rows(dy: Sequence[Sequence[float]], y: Sequence[Sequence[float]]) -> Matrix:
    """dx_j = dy_j - expf(y_j) * fold(dy): torch's log_softmax backward."""
    out = []
    for g, ly in zip(dy, y):
        c = fold(g)
        out.append([f32.sub(gj, f32.mul(expf(lj), c)) for gj, lj in zip(g, ly)])
    return out


# -- layer_norm ---------------------------------------------------------------------------------

def layer_norm_stats(x: Sequence[float], eps: float, one_pass: bool = False
                     ) -> tuple[float, list[float], float]:
    """(mean, c, rstd) of one row: c_j = x_j - mean, rstd = 1 / sqrt(var + eps).

    var = fold(c * c) / nD, the two-pass variance of the contract. `one_pass=True` is
    the negative control, var = fold(x * x) / nD - mean * mean (E[x^2] - E[x]^2), never
    the definition. eps is a binary32 value.
    """
    n = f32.round_float(float(len(x)))
    mean = f32.div(fold(x), n)
    c = [f32.sub(v, mean) for v in x]
    if one_pass:
        var = f32.sub(f32.div(fold([f32.mul(v, v) for v in x]), n), f32.mul(mean, mean))
    else:
        var = f32.div(fold([f32.mul(v, v) for v in c]), n)
    rstd = f32.div(1.0, f32.sqrt(f32.add(var, eps)))
    return mean, c, rstd


def _affine(h: Sequence[float], w: Sequence[float] | None, b: Sequence[float] | None) -> list[float]:
    y = list(h) if w is None else [f32.mul(hj, wj) for hj, wj in zip(h, w)]
    return y if b is None else [f32.add(yj, bj) for yj, bj in zip(y, b)]


def layer_norm_rows(x: Sequence[Sequence[float]], weight: Sequence[float] | None = None,
                    bias: Sequence[float] | None = None, eps: float = LAYER_NORM_EPS,
                    one_pass: bool = False) -> Matrix:
    """layer_norm of every row (the D trailing values, flattened in C order).

    y_j = ((x_j - mean) * rstd) * w_j + b_j; eps is rounded to binary32 first.
    """
    e = f32.round_float(float(eps))
    out = []
    for r in x:
        _, c, rstd = layer_norm_stats(r, e, one_pass)
        out.append(_affine([f32.mul(cj, rstd) for cj in c], weight, bias))
    return out


def layer_norm_backward_rows(dy: Sequence[Sequence[float]], x: Sequence[Sequence[float]],
                             weight: Sequence[float] | None = None,
                             bias: Sequence[float] | None = None, eps: float = LAYER_NORM_EPS
                             ) -> tuple[Matrix, list[float] | None, list[float] | None]:
    """(dx, dweight, dbias); dweight is None without weight, dbias None without bias."""
    e = f32.round_float(float(eps))
    dx, hs = [], []
    for g0, r in zip(dy, x):
        n = f32.round_float(float(len(r)))
        _, c, rstd = layer_norm_stats(r, e)
        h = [f32.mul(cj, rstd) for cj in c]
        g = list(g0) if weight is None else [f32.mul(a, b) for a, b in zip(g0, weight)]
        a = f32.div(fold(g), n)
        m = f32.div(dot(g, h), n)
        dx.append([f32.mul(rstd, f32.sub(f32.sub(gj, a), f32.mul(hj, m))) for gj, hj in zip(g, h)])
        hs.append(h)
    width = len(x[0])
    dw = None if weight is None else [
        fold([f32.mul(g0[j], h[j]) for g0, h in zip(dy, hs)]) for j in range(width)]
    db = None if bias is None else [fold([g0[j] for g0 in dy]) for j in range(width)]
    return dx, dw, db


# -- batched matmul -----------------------------------------------------------------------------

def shape_of(t) -> tuple[int, ...]:
    """The shape of a nested list (every level taken from its first element)."""
    s = []
    while isinstance(t, (list, tuple)):
        s.append(len(t))
        t = t[0]
    return tuple(s)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """torch's broadcasting: aligned from the right, each size equal or 1."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def at_batch(t, own: Sequence[int], idx: Sequence[int]):
    """The entry of `t` (batch shape `own`) that the broadcast batch index `idx` reads."""
    for d, n in enumerate(own):
        t = t[0 if n == 1 else idx[len(idx) - len(own) + d]]
    return t


def own_index(own: Sequence[int], idx: Sequence[int]) -> tuple[int, ...]:
    """The operand's own batch index that the broadcast batch index `idx` reads."""
    return tuple(0 if n == 1 else idx[len(idx) - len(own) + d] for d, n in enumerate(own))


def nest(flat: Sequence, shape: Sequence[int]):
    """The nested list of the given leading shape from its entries in C order."""
    if not shape:
        return flat[0]
    step = len(flat) // shape[0]
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _mm(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> Matrix:
    cols = [list(c) for c in zip(*b)]
    return [[dot(r, c) for c in cols] for r in a]


def _transpose(a: Sequence[Sequence[float]]) -> Matrix:
    return [list(c) for c in zip(*a)]


def matmul(a, b):
    """a @ b for a (..., M, K), b (..., K, N): every cell a fold over ascending k.

    Batch dims broadcast as in torch; each output batch entry reads one entry of each
    operand and nothing else (batch entries never influence each other).
    """
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:
        raise ValueError(f"matmul needs (..., M, K) @ (..., K, N), got {sa} and {sb}")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    flat = [_mm(at_batch(a, sa[:-2], i), at_batch(b, sb[:-2], i))
            for i in itertools.product(*map(range, batch))]
    return nest(flat, batch)


def _reduce_broadcast(per_entry: list, batch: Sequence[int], own: Sequence[int]):
    """Fold the output batch entries that read one operand entry, in ascending C order."""
    groups: dict[tuple[int, ...], list] = {}
    for idx, m in zip(itertools.product(*map(range, batch)), per_entry):
        groups.setdefault(own_index(own, idx), []).append(m)
    flat = []
    for key in itertools.product(*map(range, own)):
        ms = groups[key]
        flat.append([[fold([m[r][c] for m in ms]) for c in range(len(ms[0][0]))]
                     for r in range(len(ms[0]))])
    return nest(flat, tuple(own))


def matmul_backward(dy, a, b):
    """(da, db) of y = a @ b: per output batch entry dA = dY B^T (fold over ascending n)
    and dB = A^T dY (fold over ascending m); then each operand's broadcast entries
    folded in ascending C order of the output batch index (a fold of one entry is it)."""
    sa, sb = shape_of(a), shape_of(b)
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    das, dbs = [], []
    for i in itertools.product(*map(range, batch)):
        g, ai, bi = at_batch(dy, batch, i), at_batch(a, sa[:-2], i), at_batch(b, sb[:-2], i)
        das.append(_mm(g, _transpose(bi)))
        dbs.append(_mm(_transpose(ai), g))
    return _reduce_broadcast(das, batch, sa[:-2]), _reduce_broadcast(dbs, batch, sb[:-2])
