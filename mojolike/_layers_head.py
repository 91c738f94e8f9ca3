"""The chunked LM head: cross-entropy of linear(hidden, weight) without the (rows, vocab) logits.

Bit for bit the unfused composition `cross_entropy(linear(h, w), t, ...,
return_grad=True)` followed by `linear_backward` (contracts/layers.md), for every
vocabulary chunk size that is a multiple of 1024. The vocabulary is walked chunk
by chunk three times, each time recomputing the chunk's logits with the same GEMM
(so with the same bits): (1) every row's max and target logit; (2) the sum S of
expf(z - max); (3) with label smoothing the sum of L - d, and with the gradient
dlogits = (e/S - q) g for the chunk, which feeds d_hidden and the chunk's rows of
d_weight at once. The sums over the vocabulary are the fold's: a chunk brings the
fold's own 1024-element chunk partials, and the pairwise tree over all of them is
carried online by `_PairwiseCounter` (a binary counter: O(log chunks) partials).
Elementwise steps are numpy float32 operations (one IEEE rounding each, the same
on every machine); expf and logf are the correctly rounded functions of the
chosen backend; the GEMMs are the layers kernels.

Memory: at most three rows x chunk buffers (the chunk's logits, its exponentials
turned in place into the gradient, the gradient transposed for d_weight), the
counter's partials of d_hidden (rows x width floats per level, at most
log2(vocab / 1024) + 1 levels) and the outputs; never rows x vocab.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import checks
from ._crmath import expf, logf
from ._fold import fold
from ._layers import _NONE, _kernels, _matrix, _t
from ._loss import check_options, check_targets
from .oracles import f32
from .oracles import loss as loss_spec
from .oracles.fold import CHUNK
from .refusals import refuse

ENTRY = "mojolike.chunked_lm_head_loss"
_OPTIONS = ("hidden", "weight", "targets", "ignore_index", "reduction", "num_items",
            "return_grad", "label_smoothing", "chunk_size", "backend", "numeric_mode")


class _PairwiseCounter:
    """`pairwise` over a stream of partials (arrays, added elementwise) with O(log n) of them
    held: equal-size complete subtrees merge as they arrive (left + right), and `finish`
    adds what is left from the right, which is the pairwise tree's odd-carry shape.

    >>> c = _PairwiseCounter()
    >>> for p in np.float32([[1e8], [1], [-1e8], [1], [1]]): c.push(p)
    >>> c.finish()          # ((1e8 + 1) + (-1e8 + 1)) + 1, as pairwise gives
    array([1.], dtype=float32)
    """

    def __init__(self):
        self._stack: list[tuple[int, np.ndarray]] = []

    def push(self, partial: np.ndarray) -> None:
        size, value = 1, partial.copy()
        while self._stack and self._stack[-1][0] == size:
            _, left = self._stack.pop()
            np.add(left, value, out=value)
            size *= 2
        self._stack.append((size, value))

    def finish(self) -> np.ndarray:
        _, acc = self._stack[-1]
        for _, left in reversed(self._stack[:-1]):
            acc = np.add(left, acc)
        return acc


def chunked_lm_head_loss(hidden, weight, targets, ignore_index=-100, reduction="mean",
                         num_items=None, return_grad=False, label_smoothing=0.0, chunk_size=4096,
                         *, backend=None, numeric_mode=None, **unknown):
    """cross_entropy(linear(hidden, weight), targets, ...) without the (rows, vocab) logits.

    `hidden` (rows, width), `weight` (vocab, width), `targets` (rows,) class indices;
    `ignore_index`, `reduction`, `num_items`, `label_smoothing`, `return_grad` as in
    `mojolike.cross_entropy`; `chunk_size` a multiple of 1024 (the vocabulary is walked
    in chunks of that many rows of `weight`). Returns the loss (a float, or (rows,)
    float32 for reduction='none'), or (loss, d_hidden, d_weight) with `return_grad`.

    Reproducibility: bit for bit `cross_entropy(linear(hidden, weight), ...)` and
    `linear_backward` of its gradient, for every chunk size, on every backend; a row's
    loss (reduction='none') and its d_hidden depend on that row alone.

    >>> import numpy as np, mojolike
    >>> h = np.float32([[1, 0], [0, 1]]); w = np.float32([[1, 0], [0, 1], [1, 1]])
    >>> loss = mojolike.chunked_lm_head_loss(h, w, [0, 2], chunk_size=1024, backend="oracle")
    >>> loss == mojolike.cross_entropy(mojolike.linear(h, w, backend="oracle"), [0, 2], backend="oracle")
    True
    """
    e = ENTRY
    ls = check_options(unknown, ignore_index, reduction, label_smoothing, num_items, return_grad,
                       entry=e, options=_OPTIONS)
    size = checks.integer(e, "chunk_size", chunk_size, low=CHUNK, what="a positive multiple of 1024")
    if size % CHUNK:
        refuse(e, "chunk_size", "must be a multiple of 1024, so that its sums are whole chunks of "
                                "the fold", value=chunk_size)
    h = _matrix(e, "hidden", hidden, ndim=2)
    w = _matrix(e, "weight", weight, ndim=2)
    rows, width = h.shape
    vocab = w.shape[0]
    if w.shape[1] != width:
        refuse(e, "weight", f"has width {w.shape[1]} but hidden has width {width}")
    t = check_targets(targets, rows, vocab, int(ignore_index), entry=e, rows_of="hidden")
    k = _kernels(e, backend, numeric_mode)
    on = dict(backend=k.backend, numeric_mode=k.numeric_mode)
    kept = t != ignore_index
    count = int(num_items) if num_items is not None else int(np.count_nonzero(kept))
    s = loss_spec.host_scalars(ls, vocab, reduction, count)
    chunks = [(c0, min(c0 + size, vocab)) for c0 in range(0, vocab, size)]

    def logits(c0: int, c1: int) -> np.ndarray:
        z = np.empty((rows, c1 - c0), np.float32)
        k.gemm_nt(h, w[c0:c1], _NONE, False, z)
        return z

    # pass 1: the row max and the target's logit; non-finite logits are refused here, before any
    # output exists (cross_entropy refuses them too)
    mx = np.full(rows, -np.inf, np.float32)
    zt = np.zeros(rows, np.float32)
    for c0, c1 in chunks:
        z = logits(c0, c1)
        if not (np.isfinite(z.min()) and np.isfinite(z.max())):
            i, j = (int(v) for v in np.argwhere(~np.isfinite(z))[0])
            refuse(e, "hidden", f"and weight give a non-finite logit ({z[i, j]} at row {i}, class "
                                f"{c0 + j}); inf and NaN logits are not covered")
        np.maximum(mx, z.max(axis=1), out=mx)
        inside = kept & (t >= c0) & (t < c1)
        zt[inside] = z[inside, t[inside] - c0]

    def shifted(c0: int, c1: int) -> np.ndarray:
        z = logits(c0, c1)
        with np.errstate(over="ignore"):
            return np.subtract(z, mx[:, None], out=z)  # d = z - max, one rounding

    # pass 2: S = fold_j expf(d_j) per row, chunk partials pushed through the pairwise counter
    sums = _PairwiseCounter()
    for c0, c1 in chunks:
        ex = expf(shifted(c0, c1), **on)
        _push_row_chunks(k, ex, sums)
        del ex
    big_s = sums.finish()
    big_l = logf(big_s, **on)
    with np.errstate(over="ignore", invalid="ignore"):
        nll = np.subtract(big_l, np.subtract(zt, mx))  # L - d_t, d_t = z_t - max
    want_grad = checks.switch(e, "return_grad", return_grad)
    # pass 3: the smoothing sum fold_j (L - d_j), and the gradient with its contractions
    smooth = _PairwiseCounter() if s.smoothing else None
    dh_parts = _PairwiseCounter() if want_grad else None
    dw = np.empty((vocab, width), np.float32) if want_grad else None
    if smooth is not None or want_grad:
        ht = _t(h) if want_grad else None
        for c0, c1 in chunks:
            d = shifted(c0, c1)
            ex = expf(d, **on) if want_grad else None
            if smooth is not None:
                with np.errstate(over="ignore", invalid="ignore"):
                    np.subtract(big_l[:, None], d, out=d)  # L - d_j, in place: d is done
                _push_row_chunks(k, d, smooth)
            del d
            if want_grad:
                dz = _gradient(ex, big_s, t, kept, c0, c1, s)  # in place of ex
                parts = np.empty(((c1 - c0 + CHUNK - 1) // CHUNK, rows, width), np.float32)
                k.gemm_nt_chunks(dz, _t(w[c0:c1]), parts)  # d_hidden's fold over the vocabulary
                for p in parts:
                    dh_parts.push(p)
                dzt = _t(dz)
                del dz, ex
                k.gemm_nt(dzt, ht, _NONE, False, dw[c0:c1])  # complete over the rows
                del dzt
    if smooth is not None:
        a = smooth.finish()
        loss_rows = np.add(np.multiply(np.float32(s.c1), nll), np.multiply(np.float32(s.c2), a))
    else:
        loss_rows = nll
    loss_rows = np.where(kept, loss_rows, np.float32(0.0)).astype(np.float32)
    if reduction == "none":
        return loss_rows
    total = float(fold(loss_rows, **on))
    if reduction == "mean":
        total = f32.div(total, f32.round_fraction(Fraction(count)))
    if not want_grad:
        return total
    return total, dh_parts.finish(), dw


def _push_row_chunks(k, a: np.ndarray, counter: _PairwiseCounter) -> None:
    """Push the fold's 1024-element chunk partials of every row of a, chunk after chunk."""
    parts = np.empty((a.shape[0], (a.shape[1] + CHUNK - 1) // CHUNK), np.float32)
    k.row_chunk_folds(a, parts)
    for j in range(parts.shape[1]):
        counter.push(np.ascontiguousarray(parts[:, j]))


def _gradient(ex, big_s, t, kept, c0: int, c1: int, s) -> np.ndarray:
    """dlogits of the chunk, in place of ex: (e / S - q) * g, q = c2 but qt at the target;
    ignored rows +0.0. Each step one rounding, as contracts/loss.md clause 5."""
    inside = np.flatnonzero(kept & (t >= c0) & (t < c1))
    cols = t[inside] - c0
    with np.errstate(invalid="ignore"):
        np.divide(ex, big_s[:, None], out=ex)  # p = e / S
        p_t = ex[inside, cols]
        np.subtract(ex, np.float32(s.c2), out=ex)
        ex[inside, cols] = np.subtract(p_t, np.float32(s.qt))
        np.multiply(ex, np.float32(s.g), out=ex)
    ex[~kept] = np.float32(0.0)
    return ex
