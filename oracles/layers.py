"""Layers exactly: linear, embedding, RMSNorm, relu and their backward rules, on the fold tree.

Every contraction is `fold` (oracles/fold.py) over rounded products, in
ascending order of the contracted index; every other operation is one binary32
rounding, in the order written. Values are Python floats holding binary32
values; matrices are lists of rows.

linear (torch's F.linear, y = x w^T + b), x (M, K), w (N, K), b (N,):
    y[i][j] = dot(x[i], w[j])            the rounded products folded on the one tree
    y[i][j] = y[i][j] + b[j]             with a bias: one more rounding
linear backward, dy (M, N):
    dx[i][k] = fold over n of dy[i][n] * w[n][k]
    dw[n][k] = fold over m of dy[m][n] * x[m][k]
    db[n]    = fold over m of dy[m][n]
embedding backward, dy (T, D), ids (T,): for every row v,
    dW[v][d] = fold over the positions t with ids[t] == v, ascending, of dy[t][d];
    a row no position uses, and padding_idx, is +0.0.
rms_norm (torch's F.rms_norm over the last dimension), a row x of D values:
    ms = fold(x*x) / D;  r = 1 / sqrt(ms + eps)      (division, addition, sqrt, division)
    y[j] = (x[j] * r) * w[j]                          (without weight: x[j] * r)
rms_norm backward, with g[j] = dy[j] * w[j] (dy[j] without weight) and h[j] = x[j] * r:
    c = fold(g*h) / D;  dx[j] = r * (g[j] - h[j] * c)
    dw[j] = fold over rows of dy[row][j] * h[row][j]
relu (torch's): x where x >= 0 or x is NaN (so -0.0 stays -0.0), else +0.0.

Reproducibility: pure Python on the exact binary32 operations of `f32` and the
tree of `fold`; the same bits on every machine.

>>> linear([[1.0, 2.0]], [[3.0, 4.0], [0.5, 0.25]], [0.5, -1.0])
[[11.5, 0.0]]
>>> rms_norm_row([3.0, 4.0], None, 1.0)    # ms = 12.5, r = 1/sqrt(13.5)
[0.8164966106414795, 1.0886621475219727]
"""
from __future__ import annotations

from collections.abc import Sequence

from . import f32
from .fold import dot, fold

Matrix = list[list[float]]


def _columns(a: Sequence[Sequence[float]]) -> Matrix:
    return [list(c) for c in zip(*a)]


def linear(x: Sequence[Sequence[float]], w: Sequence[Sequence[float]],
           b: Sequence[float] | None = None) -> Matrix:
    """y = x w^T (+ b): every cell the fold of its rounded products, the bias added after."""
    y = [[dot(xi, wj) for wj in w] for xi in x]
    if b is not None:
        y = [[f32.add(v, bj) for v, bj in zip(row, b)] for row in y]
    return y


def linear_backward(dy: Sequence[Sequence[float]], x: Sequence[Sequence[float]],
                    w: Sequence[Sequence[float]], bias: bool = True
                    ) -> tuple[Matrix, Matrix, list[float] | None]:
    """(dx, dw, db): each contraction folded over its index in ascending order."""
    wt, dyt, xt = _columns(w), _columns(dy), _columns(x)
    dx = [[dot(dyi, wk) for wk in wt] for dyi in dy]
    dw = [[dot(dyn, xk) for xk in xt] for dyn in dyt]
    db = [fold(dyn) for dyn in dyt] if bias else None
    return dx, dw, db


def embedding_backward(dy: Sequence[Sequence[float]], ids: Sequence[int], num_embeddings: int,
                       padding_idx: int | None = None) -> Matrix:
    """dW (V, D): row v folds, per column, the rows dy[t] with ids[t] == v in ascending t."""
    width = len(dy[0])
    rows: dict[int, list] = {}
    for t, v in enumerate(ids):
        rows.setdefault(int(v), []).append(dy[t])
    out = []
    for v in range(num_embeddings):
        used = rows.get(v)
        if used is None or v == padding_idx:
            out.append([0.0] * width)
        else:
            out.append([fold(col) for col in zip(*used)])
    return out


def rms_scale(x: Sequence[float], eps: float) -> float:
    """r = 1 / sqrt(fold(x*x) / D + eps): division, addition, square root, division."""
    ms = f32.div(fold([f32.mul(v, v) for v in x]), float(len(x)))
    return f32.div(1.0, f32.sqrt(f32.add(ms, eps)))


def rms_norm_row(x: Sequence[float], w: Sequence[float] | None, eps: float) -> list[float]:
    r = rms_scale(x, eps)
    h = [f32.mul(v, r) for v in x]
    return h if w is None else [f32.mul(hv, wv) for hv, wv in zip(h, w)]


def rms_norm(x: Sequence[Sequence[float]], w: Sequence[float] | None, eps: float) -> Matrix:
    return [rms_norm_row(row, w, eps) for row in x]


def rms_norm_backward(dy: Sequence[Sequence[float]], x: Sequence[Sequence[float]],
                      w: Sequence[float] | None, eps: float) -> tuple[Matrix, list[float] | None]:
    """(dx, dw): see the module docstring for the order of every rounding."""
    dx, hs = [], []
    for dyr, xr in zip(dy, x):
        r = rms_scale(xr, eps)
        h = [f32.mul(v, r) for v in xr]
        g = list(dyr) if w is None else [f32.mul(a, b) for a, b in zip(dyr, w)]
        c = f32.div(fold([f32.mul(a, b) for a, b in zip(g, h)]), float(len(xr)))
        dx.append([f32.mul(r, f32.sub(gj, f32.mul(hj, c))) for gj, hj in zip(g, h)])
        hs.append(h)
    if w is None:
        return dx, None
    dw = [fold([f32.mul(dyr[j], hr[j]) for dyr, hr in zip(dy, hs)]) for j in range(len(w))]
    return dx, dw


def relu(v: float) -> float:
    """torch's relu: x when x >= 0 (-0.0 stays -0.0) or NaN, else +0.0."""
    return 0.0 if v < 0.0 else v


def mlp(x: Sequence[Sequence[float]], w1, b1, w2, b2) -> Matrix:
    """relu(x w1^T + b1) w2^T + b2, row by row."""
    hidden = [[relu(v) for v in row] for row in linear(x, w1, b1)]
    return linear(hidden, w2, b2)
