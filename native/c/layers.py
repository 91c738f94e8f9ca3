"""The layers family through the C kernels in layers.c (the independent second spelling).

`gemm_nt(a, b)` computes out[i, j] = fold over k of a[i, k] * b[j, k]: every cell is
`mojolike.dot(a[i], b[j])` on the library's one tree, whatever the other rows of the
call. The 32 lanes of a cell are 32 contiguous products, kept in vector registers, and
a tile of cells shares its loads; the tile is compiled for AVX-512, AVX2 and the
baseline, and the widest this CPU runs is used (`details["vector_path"]`). The column,
segment and row folds, RMSNorm and relu are contracts/layers.md's order of roundings.

Reproducibility: built with -ffp-contract=off -fno-fast-math and no libm; every path
of the GEMM does the same IEEE operations lane by lane, so it gives the same bits;
OpenMP splits work by whole cells, rows, segments or (chunk, columns) partials, so
the thread count never reaches the bits.

>>> import numpy as np
>>> k = load("identical")
>>> out = np.empty((1, 2), np.float32)
>>> k.gemm_nt(np.float32([[1, 2]]), np.float32([[3, 4], [0.5, 0.25]]), np.float32([0.5, -1]), True, out)
>>> out.tolist()
[[11.5, 0.0]]
"""
from __future__ import annotations

import numpy as np

from .fold import CffiFold

_PLACEHOLDER = np.zeros(1, np.float32)  # the bias / weight / h argument when there is none


class CffiLayers(CffiFold):
    """The layers family's kernels in C (the interface of native/layers.py's NumbaLayers).

    All arrays are C-contiguous float32 (int64 for indices); 2-D arrays as (rows, cols).
    """

    takes_pieces = False

    def __init__(self, mode: str):
        super().__init__(mode)
        self.details = {**self.details, "vector_path": self.vector_path()}

    def vector_path(self, request: int | None = None) -> str:
        """The instruction set of the GEMM tile and the row folds; `request` picks 0 (the
        baseline), 1 (AVX2) or 2 (AVX-512) when this CPU runs it (else the path stays), -2
        the widest it runs. Every path gives the same bits; it is a process-wide setting."""
        path = self._lib.mj_layers_path(-1 if request is None else int(request))
        return self._ffi.string(self._lib.mj_layers_path_name(path)).decode()

    def _i64(self, a: np.ndarray):
        return self._ffi.from_buffer("int64_t[]", a)

    @staticmethod
    def _check(got: int, name: str) -> None:
        if got < 0:
            raise MemoryError(f"{name}: no memory for a work buffer")

    def _gemm(self, a, b, bias, has_bias, chunks_out, out):
        m, k = a.shape
        self._check(self._lib.mj_gemm_nt(self._ptr(a), self._ptr(b), m, b.shape[0], k,
                                         self._ptr(bias if has_bias else _PLACEHOLDER),
                                         bool(has_bias), chunks_out, self._ptr(out)), "mj_gemm_nt")

    def gemm_nt(self, a, b, bias, has_bias, out):
        """out[i, j] = fold_k a[i, k] * b[j, k] (+ bias[j]); a (M, K), b (N, K), out (M, N)."""
        self._gemm(a, b, bias, has_bias, False, out)

    def gemm_nt_chunks(self, a, b, out):
        """out (ceil(K/1024), M, N): the chunk partials of gemm_nt's cells (no pairwise tree)."""
        self._gemm(a, b, _PLACEHOLDER, False, True, out)

    def row_chunk_folds(self, a, out):
        """out (M, ceil(C/1024)): the fold's chunk partials of every row of a (M, C)."""
        m, c = a.shape
        self._lib.mj_row_chunk_folds(self._ptr(a), m, c, self._ptr(out))

    def col_fold(self, a, b, products, out):
        """out[n] = fold over rows m of a[m, n] (with `products`, of the rounded a[m, n] * b[m, n])."""
        m, ncols = a.shape
        self._check(self._lib.mj_col_fold(self._ptr(a), self._ptr(b) if products else self._ffi.NULL,
                                          m, ncols, self._ptr(out)), "mj_col_fold")

    def segment_fold(self, dy, order, starts, rows, out):
        """out[rows[s], :] = fold over q in [starts[s], starts[s+1]) of dy[order[q], :]; out is
        (V, D), its other rows untouched."""
        self._check(self._lib.mj_segment_fold(self._ptr(dy), dy.shape[1], self._i64(order),
                                              self._i64(starts), self._i64(rows), rows.size,
                                              self._ptr(out)), "mj_segment_fold")

    def rms_norm(self, x, w, has_w, eps, y):
        m, d = x.shape
        self._check(self._lib.mj_rms_norm(self._ptr(x), m, d, self._ptr(w if has_w else _PLACEHOLDER),
                                          bool(has_w), float(eps), self._ptr(y)), "mj_rms_norm")

    def rms_norm_backward(self, dy, x, w, has_w, eps, dx, h):
        """dx; with a weight also h = x * r (for dweight = col_fold(dy, h))."""
        m, d = x.shape
        self._check(self._lib.mj_rms_norm_backward(
            self._ptr(dy), self._ptr(x), m, d, self._ptr(w if has_w else _PLACEHOLDER), bool(has_w),
            float(eps), self._ptr(dx), self._ptr(h if has_w else _PLACEHOLDER)),
            "mj_rms_norm_backward")

    def relu(self, x, out):
        self._lib.mj_relu(self._ptr(x), x.size, self._ptr(out))


def load(mode: str, backend: str = "cpu-cffi") -> CffiLayers:
    return CffiLayers(mode)
