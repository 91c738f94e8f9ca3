"""The chunked LM head: cross-entropy of linear(hidden, weight) without the (rows, vocab) logits.

Bit for bit the unfused composition `cross_entropy(linear(h, w), t, ...,
return_grad=True)` followed by `linear_backward` (contracts/layers.md), for every
vocabulary chunk size that is a multiple of 1024. Every output cell is its own fold,
so the order in which cells are computed does not matter, only that each cell's
fold is whole; a recomputed logit is the same GEMM cell, so the same bits. Two ways
through the vocabulary, chosen by the memory budget of rows x chunk floats:

- row blocks (when a block of at least MIN_BLOCK_ROWS rows can hold all its logits):
  per block, the logits, the max, S = fold expf(z - max), the smoothing sum, the
  loss and d_hidden (one GEMM over the whole vocabulary, against the weight's
  transpose kept in d_weight's buffer until d_weight is written); then one walk
  over vocabulary chunks recomputes the logits for d_weight, whose fold runs over
  all rows. Two logits GEMMs.
- vocabulary chunks (small batches): three walks, recomputing each chunk's logits:
  (1) the row max and target logit; (2) S; (3) the smoothing sum and the gradient.
  A chunk brings the fold's own 1024-element chunk partials, and the pairwise tree
  over them is carried online by `_PairwiseCounter` (a binary counter: O(log
  chunks) partials). Three logits GEMMs.

Elementwise steps are numpy float32 operations (one IEEE rounding each, the same on
every machine); expf and logf are the correctly rounded functions of the chosen
backend; the GEMMs are the layers kernels.

Memory: at most three rows x chunk buffers (logits, exponentials turned in place into
the gradient, the gradient transposed for d_weight), the hidden rows transposed, the
counter's partials of d_hidden in the vocabulary-chunk way (rows x width floats per
level, at most log2(vocab / 1024) + 1 levels) and the outputs; never rows x vocab.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import Refusal, refuse
from ..oracles import f32
from ..oracles import loss as loss_spec
from ..oracles.fold import CHUNK
from .crmath import expf, logf
from .fold import fold
from .layers import _NONE, _kernels, _matrix, _t
from .loss import check_options, check_targets

MIN_BLOCK_ROWS = 32  # fewer rows per block would stream the weight too often for its GEMM
_BUFFERS = 3  # rows x chunk buffers held at once (contracts/layers.md clause 10)


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


@entry_point("mojolike.chunked_lm_head_loss", torch=("size_average", "reduce"))
def chunked_lm_head_loss(hidden, weight, targets, ignore_index=-100, reduction="mean",
                         num_items=None, return_grad=False, label_smoothing=0.0, chunk_size=4096,
                         *, backend=None, numeric_mode=None, entry, **unknown):
    """cross_entropy(linear(hidden, weight), targets, ...) without the (rows, vocab) logits.

    `hidden` (rows, width), `weight` (vocab, width), `targets` (rows,) class indices;
    `ignore_index`, `reduction`, `num_items`, `label_smoothing`, `return_grad` as in
    `mojolike.cross_entropy`; `chunk_size` a multiple of 1024 (the vocabulary is walked
    in chunks of that many rows of `weight`; a chunk larger than the vocabulary is the
    whole vocabulary). Returns the loss (a float, or (rows,) float32 for
    reduction='none'), or (loss, d_hidden, d_weight) with `return_grad`. A call whose
    rows x chunk buffers could not fit in this machine's memory is refused by name
    (`chunk_size`) before anything is computed.

    Reproducibility: bit for bit `cross_entropy(linear(hidden, weight), ...)` and
    `linear_backward` of its gradient, for every chunk size, on every backend; a row's
    loss (reduction='none') and its d_hidden depend on that row alone.

    >>> import numpy as np, mojolike
    >>> h = np.float32([[1, 0], [0, 1]]); w = np.float32([[1, 0], [0, 1], [1, 1]])
    >>> loss = mojolike.chunked_lm_head_loss(h, w, [0, 2], chunk_size=1024, backend="oracle")
    >>> loss == mojolike.cross_entropy(mojolike.linear(h, w, backend="oracle"), [0, 2], backend="oracle")
    True
    """
    e = entry
    ls = check_options(e, ignore_index, reduction, label_smoothing, num_items, return_grad)
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
    t = check_targets(e, targets, rows, vocab, int(ignore_index), rows_of="hidden")
    k = _kernels(e, backend, numeric_mode)
    on = dict(backend=k.backend, numeric_mode=k.numeric_mode)
    kept = t != ignore_index
    count = int(num_items) if num_items is not None else int(np.count_nonzero(kept))
    s = loss_spec.host_scalars(ls, vocab, reduction, count)

    want_grad = checks.switch(e, "return_grad", return_grad)
    # a chunk past the vocabulary is the whole vocabulary: the same chunks, the same way
    size = min(size, -(-vocab // CHUNK) * CHUNK)
    _check_memory(e, rows, min(size, vocab), chunk_size)
    run = _Run(e, k, h, w, t, kept, s, want_grad, size)
    block = rows * size // vocab  # rows whose logits fit the rows x chunk budget
    if block >= min(MIN_BLOCK_ROWS, rows):  # a block this small, or all rows in one block
        nll, smooth_sum, dh, dw = run.by_row_blocks(min(block, rows))
    else:
        nll, smooth_sum, dh, dw = run.by_vocab_chunks()
    if smooth_sum is not None:
        loss_rows = np.add(np.multiply(np.float32(s.c1), nll),
                           np.multiply(np.float32(s.c2), smooth_sum))
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
    return total, dh, dw


def _check_memory(e: str, rows: int, width: int, chunk_size) -> None:
    """Refuse, before anything is computed, a call whose rows x chunk buffers could not fit
    in this machine's memory (an allocation would otherwise fail halfway, as MemoryError)."""
    try:
        checks.shape(e, "chunk_size", (_BUFFERS, rows, width))
    except Refusal as r:
        refuse(e, "chunk_size", f"needs {_BUFFERS} buffers of {rows} x {width} float32 logits "
                                f"({_BUFFERS * rows * width * 4} bytes), more than this machine's "
                                f"memory; pass a smaller chunk_size (the bits do not depend on "
                                f"it) or fewer rows per call ({r.reason})", value=chunk_size)


class _Run:
    """One call's two ways through the vocabulary; both give every cell's own fold, so the
    same bits (tests/test_layers.py runs both on the same inputs)."""

    def __init__(self, entry, k, h, w, t, kept, s, want_grad, size):
        self.e, self.k, self.h, self.w, self.t, self.kept, self.s = entry, k, h, w, t, kept, s
        self.want_grad, self.size = want_grad, size
        self.on = dict(backend=k.backend, numeric_mode=k.numeric_mode)
        self.rows, self.width = h.shape
        self.vocab = w.shape[0]
        self.chunks = [(c0, min(c0 + size, self.vocab)) for c0 in range(0, self.vocab, size)]

    def logits(self, h: np.ndarray, c0: int, c1: int) -> np.ndarray:
        z = checks.empty(self.e, "chunk_size", (h.shape[0], c1 - c0))
        self.k.gemm_nt(h, self.w[c0:c1], _NONE, False, z)
        return z

    def refuse_non_finite(self) -> None:
        """Name the first non-finite logit in chunk order, whichever way found one."""
        for c0, c1 in self.chunks:
            z = self.logits(self.h, c0, c1)
            if not (np.isfinite(z.min()) and np.isfinite(z.max())):
                i, j = (int(v) for v in np.argwhere(~np.isfinite(z))[0])
                refuse(self.e, "hidden", f"and weight give a non-finite logit ({z[i, j]} at row {i}, "
                                         f"class {c0 + j}); inf and NaN logits are not covered")

    def by_row_blocks(self, block: int):
        """Blocks of `block` rows with all their logits at once (block x vocab <= rows x chunk):
        the max, S, the smoothing sum, the loss and d_hidden (whose fold over the vocabulary
        is then one GEMM), then one walk over vocabulary chunks for d_weight, whose fold runs
        over all rows. Two logits GEMMs instead of three; where d_hidden's GEMM needs the
        weight's transpose (gemm_nt; cpu-numba's gemm_nn reads the weight as stored), it
        lives in d_weight's buffer until d_weight is written."""
        rows, vocab, t, kept, s = self.rows, self.vocab, self.t, self.kept, self.s
        mx, big_s, nll = (checks.empty(self.e, "hidden", rows) for _ in range(3))
        smooth_sum = checks.empty(self.e, "hidden", rows) if s.smoothing else None
        dh = dw = wt = None
        nn = getattr(self.k, "gemm_nn", None)  # cpu-numba: weight as stored, no transpose
        if self.want_grad:
            dh = checks.empty(self.e, "hidden", (rows, self.width))
            dw = checks.empty(self.e, "weight", (vocab, self.width))
        for i0 in range(0, rows, block):
            i1 = min(i0 + block, rows)
            z = self.logits(self.h[i0:i1], 0, vocab)
            if not (np.isfinite(z.min()) and np.isfinite(z.max())):
                self.refuse_non_finite()
            m = mx[i0:i1] = z.max(axis=1)
            kb, tb = kept[i0:i1], t[i0:i1]
            zt = checks.zeros(self.e, "hidden", i1 - i0)
            zt[kb] = z[kb, tb[kb]]
            with np.errstate(over="ignore"):
                d = np.subtract(z, m[:, None], out=z)  # d = z - max, one rounding
            ex = expf(d, **self.on)
            big_s[i0:i1] = _row_folds(self.e, self.k, ex)
            big_l = logf(big_s[i0:i1], **self.on)
            with np.errstate(over="ignore", invalid="ignore"):
                nll[i0:i1] = np.subtract(big_l, np.subtract(zt, m))  # L - d_t
                if smooth_sum is not None:
                    np.subtract(big_l[:, None], d, out=d)  # L - d_j, in place: d is done
            if smooth_sum is not None:
                smooth_sum[i0:i1] = _row_folds(self.e, self.k, d)
            del z, d
            if self.want_grad:
                dz = _gradient(ex, big_s[i0:i1], tb, kb, 0, vocab, s)  # in place of ex
                # complete over the vocabulary
                if wt is None and (nn is None or not nn(dz, self.w, dh[i0:i1])):
                    wt = _t(self.w, out=dw)
                if wt is not None:
                    self.k.gemm_nt(dz, wt, _NONE, False, dh[i0:i1])
            del ex
        if self.want_grad:
            del wt  # d_weight's buffer is overwritten from here on
            self.weight_gradient(mx, big_s, dw)
        return nll, smooth_sum, dh, dw

    def weight_gradient(self, mx, big_s, dw) -> None:
        """d_weight chunk by chunk of the vocabulary: each row of it folds over all rows. The
        chunk's logits come transposed, (chunk, rows), straight from the GEMM (cell (j, i) is
        the fold of weight[j, k] * hidden[i, k], the same products as hidden[i, k] * weight[j, k]
        in the same order: IEEE multiplication commutes), so the gradient is born in the
        layout d_weight's GEMM reads (gemm_nn reads hidden as stored; gemm_nt its transpose)."""
        nn = getattr(self.k, "gemm_nn", None)
        ht = None
        for c0, c1 in self.chunks:
            zt = checks.empty(self.e, "chunk_size", (c1 - c0, self.rows))
            self.k.gemm_nt(self.w[c0:c1], self.h, _NONE, False, zt)
            with np.errstate(over="ignore"):
                np.subtract(zt, mx[None, :], out=zt)  # d = z - max, one rounding
            ext = expf(zt, **self.on)
            del zt
            _gradient(ext.T, big_s, self.t, self.kept, c0, c1, self.s)  # in place, through a view
            if nn is None or not nn(ext, self.h, dw[c0:c1]):  # complete over the rows
                ht = _t(self.h) if ht is None else ht
                self.k.gemm_nt(ext, ht, _NONE, False, dw[c0:c1])
            del ext

    def by_vocab_chunks(self):
        """Three walks over vocabulary chunks, for batches too small for whole-vocabulary row
        blocks: (1) the max and target logits, (2) S, (3) the smoothing sum and the gradient,
        d_hidden's fold over the vocabulary carried by the pairwise counter."""
        k, h, t, kept, s, on = self.k, self.h, self.t, self.kept, self.s, self.on
        rows = self.rows
        # pass 1: non-finite logits are refused here, before any output exists
        mx = checks.empty(self.e, "hidden", rows)
        mx.fill(-np.inf)
        zt = checks.zeros(self.e, "hidden", rows)
        for c0, c1 in self.chunks:
            z = self.logits(h, c0, c1)
            if not (np.isfinite(z.min()) and np.isfinite(z.max())):
                self.refuse_non_finite()
            np.maximum(mx, z.max(axis=1), out=mx)
            inside = kept & (t >= c0) & (t < c1)
            zt[inside] = z[inside, t[inside] - c0]

        def shifted(c0: int, c1: int) -> np.ndarray:
            z = self.logits(h, c0, c1)
            with np.errstate(over="ignore"):
                return np.subtract(z, mx[:, None], out=z)  # d = z - max, one rounding

        # pass 2: S = fold_j expf(d_j) per row, chunk partials pushed through the pairwise counter
        sums = _PairwiseCounter()
        for c0, c1 in self.chunks:
            ex = expf(shifted(c0, c1), **on)
            _push_row_chunks(self.e, k, ex, sums)
            del ex
        big_s = sums.finish()
        big_l = logf(big_s, **on)
        with np.errstate(over="ignore", invalid="ignore"):
            nll = np.subtract(big_l, np.subtract(zt, mx))  # L - d_t, d_t = z_t - max
        # pass 3: the smoothing sum fold_j (L - d_j), and the gradient with its contractions
        smooth = _PairwiseCounter() if s.smoothing else None
        dh_parts = _PairwiseCounter() if self.want_grad else None
        dw = checks.empty(self.e, "weight", (self.vocab, self.width)) if self.want_grad else None
        if smooth is not None or self.want_grad:
            ht = _t(h) if self.want_grad else None
            for c0, c1 in self.chunks:
                d = shifted(c0, c1)
                ex = expf(d, **on) if self.want_grad else None
                if smooth is not None:
                    with np.errstate(over="ignore", invalid="ignore"):
                        np.subtract(big_l[:, None], d, out=d)  # L - d_j, in place: d is done
                    _push_row_chunks(self.e, k, d, smooth)
                del d
                if self.want_grad:
                    dz = _gradient(ex, big_s, t, kept, c0, c1, s)  # in place of ex
                    parts = checks.empty(self.e, "chunk_size",
                                         ((c1 - c0 + CHUNK - 1) // CHUNK, rows, self.width))
                    k.gemm_nt_chunks(dz, _t(self.w[c0:c1]), parts)  # d_hidden's vocabulary fold
                    for p in parts:
                        dh_parts.push(p)
                    dzt = _t(dz)
                    del dz, ex
                    k.gemm_nt(dzt, ht, _NONE, False, dw[c0:c1])  # complete over the rows
                    del dzt
        smooth_sum = smooth.finish() if smooth is not None else None
        dh = dh_parts.finish() if self.want_grad else None
        return nll, smooth_sum, dh, dw


def _row_folds(e: str, k, a: np.ndarray) -> np.ndarray:
    """fold of every row of a: the fold's chunk partials, then the pairwise tree over them."""
    counter = _PairwiseCounter()
    _push_row_chunks(e, k, a, counter)
    return counter.finish()


def _push_row_chunks(e: str, k, a: np.ndarray, counter: _PairwiseCounter) -> None:
    """Push the fold's 1024-element chunk partials of every row of a, chunk after chunk."""
    parts = checks.empty(e, "chunk_size", (a.shape[0], (a.shape[1] + CHUNK - 1) // CHUNK))
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
