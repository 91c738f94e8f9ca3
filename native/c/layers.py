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

from ..calls import LayersCalls
from .base import CffiBase


class CffiLayers(LayersCalls, CffiBase):
    """The layers family's kernels in C (LayersCalls documents each method)."""

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

    def _gemm(self, a, b, m, n, k, bias, has_bias, chunks_out, out):
        self._check(self._lib.mj_gemm_nt(self._ptr(a), self._ptr(b), m, n, k, self._ptr(bias),
                                         has_bias, chunks_out, self._ptr(out)), "mj_gemm_nt")

    def _row_chunk_folds(self, a, m, c, out):
        self._lib.mj_row_chunk_folds(self._ptr(a), m, c, self._ptr(out))

    def _col_fold(self, a, b, products, m, ncols, out):
        self._check(self._lib.mj_col_fold(self._ptr(a), self._ptr(b) if products else self._ffi.NULL,
                                          m, ncols, self._ptr(out)), "mj_col_fold")

    def _segment_fold(self, dy, width, order, starts, rows, out):
        self._check(self._lib.mj_segment_fold(self._ptr(dy), width, self._i64(order),
                                              self._i64(starts), self._i64(rows), rows.size,
                                              self._ptr(out)), "mj_segment_fold")

    def _rms_norm(self, x, m, d, w, has_w, eps, y):
        self._check(self._lib.mj_rms_norm(self._ptr(x), m, d, self._ptr(w), has_w, float(eps),
                                          self._ptr(y)), "mj_rms_norm")

    def _rms_norm_backward(self, dy, x, m, d, w, has_w, eps, dx, h):
        self._check(self._lib.mj_rms_norm_backward(
            self._ptr(dy), self._ptr(x), m, d, self._ptr(w), has_w, float(eps), self._ptr(dx),
            self._ptr(h)), "mj_rms_norm_backward")

    def _relu(self, x, out):
        self._lib.mj_relu(self._ptr(x), x.size, self._ptr(out))


def load(mode: str, backend: str = "cpu-cffi") -> CffiLayers:
    return CffiLayers(mode)
