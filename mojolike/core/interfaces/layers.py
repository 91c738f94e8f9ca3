"""The layers family's kernel interface: gemm with the fold tree, folds by row, column and
segment, RMSNorm and ReLU.

Arrays are C-contiguous float32 (int64 for indices), 2-D ones (rows, cols); a missing
bias or weight is a placeholder with its has_ flag False.

Reproducibility: every sum is the fold tree of `mojolike.oracles.fold` over the
rounded products, so every backend gives `mojolike.oracles.layers`' bits.

>>> from mojolike.core.interfaces import writes
>>> writes("layers")["rms_norm_backward"]
(5, 6)
"""
from __future__ import annotations

from typing import Protocol

from . import Array, KernelSet, Written


class LayersKernels(KernelSet, Protocol):
    """The kernels behind linear, embedding, rms_norm, relu and their backward passes."""

    def gemm_nt(self, a: Array, b: Array, bias: Array, has_bias: bool, out: Written) -> None:
        """out[i, j] = fold_k a[i, k] * b[j, k] (+ bias[j] when has_bias); a (M, K), b (N, K),
        out (M, N)."""

    def gemm_nt_chunks(self, a: Array, b: Array, out: Written) -> None:
        """out (ceil(K/1024), M, N): the chunk partials of gemm_nt's cells (no pairwise tree)."""

    def row_chunk_folds(self, a: Array, out: Written) -> None:
        """out (M, ceil(C/1024)): the fold's chunk partials of every row of a (M, C)."""

    def col_fold(self, a: Array, b: Array, products: bool, out: Written) -> None:
        """out[n] = the fold over rows m of a[m, n] (with `products`, of the rounded
        a[m, n] * b[m, n])."""

    def segment_fold(self, dy: Array, order: Array, starts: Array, rows: Array,
                     out: Written) -> None:
        """out[rows[s], :] = the fold over q in [starts[s], starts[s+1]) of dy[order[q], :];
        out is (V, D) and its other rows are left untouched (the embedding's backward)."""

    def rms_norm(self, x: Array, w: Array, has_w: bool, eps, y: Written) -> None:
        """y = x * r (then * w when has_w) for each row of x (M, D), r = 1 / sqrt(fold(x*x) / D
        + eps) with binary32 eps."""

    def rms_norm_backward(self, dy: Array, x: Array, w: Array, has_w: bool, eps, dx: Written,
                          h: Written) -> None:
        """dx, the gradient of rms_norm at x for dy; with a weight also h = x * r (for
        dweight = col_fold(dy, h)); without one h is a placeholder."""

    def relu(self, x: Array, out: Written) -> None:
        """out[i] = torch's relu of x[i]: x[i] when x[i] >= 0 (-0.0 stays -0.0) or NaN, else
        +0.0; out may be x."""
