"""Scaled-dot-product attention exactly, forward and backward: the unfused composition (contracts/transformer.md).

Layouts are torch's: query (B, H, L, E), key (B, H, S, E), value (B, H, S, Ev),
as nested lists of binary32 values. Each (b, h) is computed alone. Key j takes
part in query row i unless a boolean mask entry is False or the call is causal
and j > i (top-left aligned, torch's tril for L != S). A fold "over the taking
part" runs over every position of its index in ascending order with the others
holding -0.0 (the fold's identity: they change nothing), and is +0.0 when no
term takes part. Every step is one binary32 rounding, in this order (clauses 10-15):

    s_ij = scale * dot(q_i, k_j)              dot: fold over e ascending; then + m_ij
                                              for a float mask (one more rounding)
    mx_i = max of the taking-part s_ij (exact, NaN if one is NaN)
    e_ij = expf(s_ij - mx_i);  S_i = fold_j e_ij
    c_ij = dropout factor: binary32(1/(1-p)) if keep[b][h][i][j] else 0.0
    o_i[d] = fold_j((e_ij * c_ij) * v_j[d]) / S_i     (without dropout: e_ij * v_j[d])
    A row with no taking-part key, or whose mx_i is -inf, is empty: o_i = +0.0 (torch's
    math path gives zeros there) and it adds nothing to any gradient.

Backward, with do = grad_out and the forward's values recomputed:
    p_ij = e_ij / S_i;  D_i = dot(do_i, o_i)           (fold over d ascending)
    dV_j[d] = fold_i((p_ij * c_ij) * do_i[d])
    dP_ij = dot(do_i, v_j) * c_ij;  dS_ij = p_ij * (dP_ij - D_i)
    dQ_i[e] = scale * fold_j(dS_ij * k_j[e]);  dK_j[e] = scale * fold_i(dS_ij * q_i[e])

`scale` None is the binary32 nearest 1/sqrt(E) (an exact integer square root);
a given scale is rounded to binary32 once. torch's documented reference
multiplies q @ k^T by the scale after the product, as here; its C++ math path
multiplies q and k by sqrt(scale) first, and its fused kernels use their own
orders: the contract fixes the one above. The forward divides by S_i after the
weighted sum (torch normalizes first), so a fused kernel needs two passes over
the keys: the row max, then expf, S_i and the weighted sums together.

Dropout keep masks are inputs here; `dropout_keep` derives them from the
generator's Philox stream (contracts/rng.md clause 6) at the C-order position
((b H + h) L + i) S + j of the (B, H, L, S) probabilities.

Reproducibility: pure Python on `f32`, `fold`, `crmath` and `rng`.

>>> q = [[[[1.0, 0.0]]]]; k = [[[[1.0, 0.0], [0.0, 1.0]]]]; v = [[[[1.0], [3.0]]]]
>>> sdpa(q, k, v, scale=0.0)
[[[[2.0]]]]
>>> sdpa(q, k, v, is_causal=True)      # query 0 sees key 0 alone
[[[[1.0]]]]
>>> default_scale(4), default_scale(2) == 0.7071067690849304
(0.5, True)
"""
from __future__ import annotations

import math
from fractions import Fraction

from . import f32, rng
from .crmath import expf
from .fold import dot, fold
from .scalars import round_sqrt_fraction
from .transformer import at_batch, row_max, shape_of


def default_scale(e: int) -> float:
    """The binary32 nearest 1 / sqrt(E), decided exactly."""
    return round_sqrt_fraction(Fraction(1, int(e)))


def call_scale(scale: float | None, e: int) -> float:
    return default_scale(e) if scale is None else f32.round_float(float(scale))


def fold_present(terms) -> float:
    """fold over every position, None (not taking part) holding -0.0; +0.0 if all are None."""
    if all(t is None for t in terms):
        return 0.0
    return fold([-0.0 if t is None else t for t in terms])


def dropout_keep(seed: int, stream: int, p: float, shape: tuple[int, int, int, int]):
    """keep[b][h][i][j]: position ((b H + h) L + i) S + j of stream `stream` kept (u >= p)."""
    p = f32.round_float(float(p))
    nb, nh, nl, ns = shape
    words = rng.words(rng.key_of(seed), stream, 0, nb * nh * nl * ns)
    it = iter(words)
    return [[[[rng.kept(next(it), p) for _ in range(ns)] for _ in range(nl)]
             for _ in range(nh)] for _ in range(nb)]


def mask_from_strides(values, kind: int, strides, shape: tuple[int, int, int, int]):
    """The (B, H, L, S) nested mask of the kernels' form: entry (b, h, i, j) is
    values[b*st0 + h*st1 + i*st2 + j*st3]; kind 1 a bool (nonzero takes part), kind 2 a
    float added to the score, kind 0 no mask (None)."""
    if kind == 0:
        return None
    nb, nh, nl, ns = shape
    st = [int(s) for s in strides]

    def at(b, h, i, j):
        v = values[b * st[0] + h * st[1] + i * st[2] + j * st[3]]
        return float(v) if kind == 2 else bool(v)
    return [[[[at(b, h, i, j) for j in range(ns)] for i in range(nl)] for h in range(nh)]
            for b in range(nb)]


def keep_of_key(k0: int, k1: int, stream: int, p: float, shape: tuple[int, int, int, int]):
    """(keep mask, binary32(1 / (1 - p))) for Philox key (k0, k1), or (None, None) at p = 0."""
    if p <= 0.0:
        return None, None
    return dropout_keep(int(k0) | (int(k1) << 32), int(stream), p, shape), rng.dropout_scale(p)


def _mask_at(mask, mshape, b, h, i, j):
    if mask is None:
        return None
    return at_batch(mask, mshape, (b, h, i, j))


def head_scores(q, k, scale, mask, mshape, causal, b, h):
    """s[i][j] (None where key j does not take part in row i) for one (b, h)."""
    out = []
    for i, qi in enumerate(q):
        row = []
        for j, kj in enumerate(k):
            m = _mask_at(mask, mshape, b, h, i, j)
            if (causal and j > i) or m is False:
                row.append(None)
                continue
            s = f32.mul(scale, dot(qi, kj))
            if m is not None and m is not True:
                s = f32.add(s, float(m))
            row.append(s)
        out.append(row)
    return out


def row_exps(s_row):
    """(e_row with None kept, S) of one score row, or None when the row is empty."""
    present = [s for s in s_row if s is not None]
    if not present:
        return None
    mx = row_max(present)
    if mx == -math.inf:
        return None
    e = [None if s is None else expf(f32.sub(s, mx)) for s in s_row]
    return e, fold_present(e)


def _factor(keep, p_scale, i, j):
    if keep is None:
        return None
    return p_scale if keep[i][j] else 0.0


def _times(x, c):
    return x if c is None else f32.mul(x, c)


def head_forward(q, k, v, scale, mask, mshape, causal, keep, p_scale, b, h):
    """(o, per-row (e, S) or None) for one (b, h)."""
    s = head_scores(q, k, scale, mask, mshape, causal, b, h)
    width = len(v[0])
    o, stats = [], []
    for i, s_row in enumerate(s):
        st = row_exps(s_row)
        stats.append(st)
        if st is None:
            o.append([0.0] * width)
            continue
        e, big_s = st
        w = [None if ej is None else _times(ej, _factor(keep, p_scale, i, j)) for j, ej in enumerate(e)]
        o.append([f32.div(fold_present([None if wj is None else f32.mul(wj, vj[d])
                                        for wj, vj in zip(w, v)]), big_s)
                  for d in range(width)])
    return o, stats


def _prepare(query, key, attn_mask, dropout_p, keep, scale):
    nb, nh, nl, ne = shape_of(query)
    if attn_mask is not None and not isinstance(attn_mask, list):
        raise ValueError("attn_mask must be a nested list broadcastable to (B, H, L, S)")
    mshape = shape_of(attn_mask) if attn_mask is not None else ()
    p = f32.round_float(float(dropout_p))
    if p > 0.0 and keep is None:
        raise ValueError("dropout_p > 0 needs keep[b][h][i][j] (dropout_keep)")
    p_scale = rng.dropout_scale(p) if p > 0.0 else None
    return call_scale(scale, ne), mshape, p_scale, (keep if p > 0.0 else None)


def sdpa(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
         scale: float | None = None, keep=None):
    """The attention output (B, H, L, Ev) of the unfused composition (module docstring)."""
    sc, mshape, p_scale, keep = _prepare(query, key, attn_mask, dropout_p, keep, scale)
    return [[head_forward(qh, kh, vh, sc, attn_mask, mshape, is_causal,
                          None if keep is None else keep[b][h], p_scale, b, h)[0]
             for h, (qh, kh, vh) in enumerate(zip(qb, kb, vb))]
            for b, (qb, kb, vb) in enumerate(zip(query, key, value))]


def head_backward(do, q, k, v, scale, mask, mshape, causal, keep, p_scale, b, h):
    """(dq, dk, dv) of one (b, h)."""
    o, stats = head_forward(q, k, v, scale, mask, mshape, causal, keep, p_scale, b, h)
    nl, ns = len(q), len(k)
    p = [[None] * ns for _ in range(nl)]
    pd = [[None] * ns for _ in range(nl)]
    ds = [[None] * ns for _ in range(nl)]
    for i, st in enumerate(stats):
        if st is None:
            continue
        e, big_s = st
        d_i = dot(do[i], o[i])
        for j, ej in enumerate(e):
            if ej is None:
                continue
            c = _factor(keep, p_scale, i, j)
            p[i][j] = f32.div(ej, big_s)
            pd[i][j] = _times(p[i][j], c)
            dp = _times(dot(do[i], v[j]), c)
            ds[i][j] = f32.mul(p[i][j], f32.sub(dp, d_i))
    ne, nev = len(q[0]), len(v[0])

    def col(m, j):
        return [m[i][j] for i in range(nl)]

    dq = [[f32.mul(scale, fold_present([None if t is None else f32.mul(t, k[j][x])
                                        for j, t in enumerate(ds[i])])) for x in range(ne)]
          for i in range(nl)]
    dk = [[f32.mul(scale, fold_present([None if t is None else f32.mul(t, q[i][x])
                                        for i, t in enumerate(col(ds, j))])) for x in range(ne)]
          for j in range(ns)]
    dv = [[fold_present([None if t is None else f32.mul(t, do[i][x])
                         for i, t in enumerate(col(pd, j))]) for x in range(nev)]
          for j in range(ns)]
    return dq, dk, dv


def sdpa_backward(grad_out, query, key, value, attn_mask=None, dropout_p: float = 0.0,
                  is_causal: bool = False, scale: float | None = None, keep=None):
    """(dq, dk, dv) of the unfused composition, each in its input's layout."""
    sc, mshape, p_scale, keep = _prepare(query, key, attn_mask, dropout_p, keep, scale)
    dq, dk, dv = [], [], []
    for b, (gb, qb, kb, vb) in enumerate(zip(grad_out, query, key, value)):
        heads = [head_backward(gh, qh, kh, vh, sc, attn_mask, mshape, is_causal,
                               None if keep is None else keep[b][h], p_scale, b, h)
                 for h, (gh, qh, kh, vh) in enumerate(zip(gb, qb, kb, vb))]
        dq.append([t[0] for t in heads])
        dk.append([t[1] for t in heads])
        dv.append([t[2] for t in heads])
    return dq, dk, dv
