"""The layers and loss kernel sets' methods, written once for the C and CUDA backends.

native/c/layers.py and native/cuda/layers.py (and the two loss modules) take the same
arguments, read the same shapes and pass a placeholder for a missing bias or weight;
`LayersCalls` and `LossCalls` do that and document each method, then call the
backend's hook (`_gemm`, `_col_fold`, `_cross_entropy`, ...), which converts the
arguments for its kernels (cffi pointers, device arrays) and launches them. The
arithmetic stays in each backend's kernels: layers.c and loss.c are the independent
second spelling.

Reproducibility: these methods only read shapes and pick arguments; every bit comes
from the kernels, whose trees depend on the shapes alone.

>>> import numpy as np
>>> class Echo(LayersCalls):
...     def _gemm(self, a, b, m, n, k, bias, has_bias, chunks_out, out):
...         print(m, n, k, has_bias, chunks_out, bias is PLACEHOLDER)
>>> Echo().gemm_nt(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32), None, False, None)
2 4 3 False False True
>>> ignore_target(-100), ignore_target(2 ** 70)
(-100, -1)
"""
from __future__ import annotations

import numpy as np

PLACEHOLDER = np.zeros(1, np.float32)  # the bias / weight / h argument when there is none
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def ignore_target(ignore_index) -> int:
    """ignore_index as an int64 for the kernels: -1 when no int64 target can equal it
    (targets are validated to [0, V), so -1 ignores none)."""
    ignore = int(ignore_index)
    return ignore if INT64_MIN <= ignore <= INT64_MAX else -1


class LayersCalls:
    """The layers family's kernels (the interface of native/layers.py's NumbaLayers).

    All arrays are C-contiguous float32 (int64 for indices); 2-D arrays as (rows, cols).
    """

    def gemm_nt(self, a, b, bias, has_bias, out):
        """out[i, j] = fold_k a[i, k] * b[j, k] (+ bias[j]); a (M, K), b (N, K), out (M, N)."""
        m, k = a.shape
        self._gemm(a, b, m, b.shape[0], k, bias if has_bias else PLACEHOLDER, bool(has_bias),
                   False, out)

    def gemm_nt_chunks(self, a, b, out):
        """out (ceil(K/1024), M, N): the chunk partials of gemm_nt's cells (no pairwise tree)."""
        m, k = a.shape
        self._gemm(a, b, m, b.shape[0], k, PLACEHOLDER, False, True, out)

    def row_chunk_folds(self, a, out):
        """out (M, ceil(C/1024)): the fold's chunk partials of every row of a (M, C)."""
        m, c = a.shape
        self._row_chunk_folds(a, m, c, out)

    def col_fold(self, a, b, products, out):
        """out[n] = fold over rows m of a[m, n] (with `products`, of the rounded a[m, n] * b[m, n])."""
        m, ncols = a.shape
        self._col_fold(a, b, bool(products), m, ncols, out)

    def segment_fold(self, dy, order, starts, rows, out):
        """out[rows[s], :] = fold over q in [starts[s], starts[s+1]) of dy[order[q], :]; out is
        (V, D), its other rows untouched."""
        self._segment_fold(dy, dy.shape[1], order, starts, rows, out)

    def rms_norm(self, x, w, has_w, eps, y):
        """y = (x * r) * w per row (x * r without weight), r = 1 / sqrt(fold(x*x) / D + eps)."""
        m, d = x.shape
        self._rms_norm(x, m, d, w if has_w else PLACEHOLDER, bool(has_w), eps, y)

    def rms_norm_backward(self, dy, x, w, has_w, eps, dx, h):
        """dx; with a weight also h = x * r (for dweight = col_fold(dy, h))."""
        m, d = x.shape
        self._rms_norm_backward(dy, x, m, d, w if has_w else PLACEHOLDER, bool(has_w), eps, dx,
                                h if has_w else PLACEHOLDER)

    def relu(self, x, out):
        """out = +0.0 where x < 0, else x (-0.0 and NaN stay, as in torch)."""
        self._relu(x, out)


class LossCalls:
    """Cross-entropy over class indices (the interface of native/loss.py's NumbaLoss)."""

    def cross_entropy_into(self, logits, targets, ignore_index, c1, c2, qt, smoothing, g, want_grad,
                           grad, rows, status) -> int:
        """Per-row losses into rows (and the gradient into grad when want_grad).

        status[i] = 1 marks a row with an undecided expf/logf (its outputs are then
        unspecified); returns the number of such rows.
        """
        n, v = logits.shape
        return self._cross_entropy(logits, targets, n, v, ignore_target(ignore_index), c1, c2, qt,
                                   bool(smoothing), g, bool(want_grad), grad, rows, status)
