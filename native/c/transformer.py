"""softmax, layer_norm and fused attention through the C kernels in transformer.c (the second spelling).

The arithmetic is contracts/transformer.md's, written in C: every sum is fold.c's
tree, expf/logf are crmath.c's element functions with their rounding test (one
compilation unit), their tables in the `mj_crmath_tab` that `native/c/crmath.py`'s
`CffiCrmath` fills, and dropout's words are rng.c's Philox. The attention forward
streams over key blocks in two passes (the row max, then expf with S_i and the
weighted sums on the fold's lanes); the backward runs one pass over key blocks
(dK, dV) and one over query blocks (dQ). No (L, S) matrix is ever materialized.

Reproducibility: built with -ffp-contract=off -fno-fast-math and no libm; the lane
of a term is its index mod 32 and its chunk the index // 1024, so neither
block_q, block_k nor the OpenMP thread count (rows, (head, block) tasks, each
one thread's serial work) reaches a bit. A row or head whose expf/logf the
rounding test could not decide is marked in `status` for the host.

The C sources join the build once "transformer" is in mojolike.core.families.FAMILIES;
`load` refuses a module built without them.

>>> import numpy as np
>>> k = load("identical")
>>> y, status = np.empty((1, 2), np.float32), np.empty(1, np.int32)
>>> k.softmax_rows(np.float32([[0.0, 0.0]]), False, y, status), y.tolist()
(0, [[0.5, 0.5]])
"""
from __future__ import annotations

import numpy as np

from .base import CffiBase
from .crmath import CffiCrmath


def _f32(v) -> float:
    return float(np.float32(v))


class CffiTransformer(CffiBase):
    """The transformer family's kernels in C (core/interfaces/transformer.py documents each method)."""

    takes_pieces = False

    def __init__(self, mode: str):
        super().__init__(mode)
        if not hasattr(self._lib, "mj_attention_forward"):
            raise RuntimeError("cpu-cffi: the C module was built without transformer.c "
                               "(\"transformer\" is not in mojolike.core.families.FAMILIES)")
        self._crmath = CffiCrmath(mode)  # the same compiled module; it owns the expf/logf tables
        if self._crmath._ffi is not self._ffi:
            raise RuntimeError("cpu-cffi: the transformer and crmath kernels came from two C modules")

    def _i32(self, a):
        return self._ffi.from_buffer("int32_t[]", a)

    def _u8(self, a):
        return self._ffi.from_buffer("uint8_t[]", a)

    def softmax_rows(self, x, log, y, status) -> int:
        m, n = x.shape
        got = self._lib.mj_softmax_rows(self._ptr(x), m, n, int(bool(log)), self._ptr(y),
                                        self._i32(status), self._crmath._tab)
        self._check(got, "mj_softmax_rows")
        return int(got)

    def softmax_backward_rows(self, dy, y, log, dx, status) -> int:
        m, n = dy.shape
        got = self._lib.mj_softmax_backward_rows(self._ptr(dy), self._ptr(y), m, n, int(bool(log)),
                                                 self._ptr(dx), self._i32(status),
                                                 self._crmath._tab)
        self._check(got, "mj_softmax_backward_rows")
        return int(got)

    def layer_norm_rows(self, x, w, has_w, b, has_b, eps, y) -> None:
        m, d = x.shape
        self._check(self._lib.mj_layer_norm_rows(self._ptr(x), m, d, self._ptr(w), int(bool(has_w)),
                                                 self._ptr(b), int(bool(has_b)), _f32(eps),
                                                 self._ptr(y)), "mj_layer_norm_rows")

    def layer_norm_backward_rows(self, dy, x, w, has_w, eps, dx, h) -> None:
        m, d = x.shape
        self._check(self._lib.mj_layer_norm_backward_rows(
            self._ptr(dy), self._ptr(x), m, d, self._ptr(w), int(bool(has_w)), _f32(eps),
            self._ptr(dx), self._ptr(h)), "mj_layer_norm_backward_rows")

    def _shape(self, q, k, v):
        nb, nh, nl, ne = q.shape
        return nb, nh, nl, k.shape[2], ne, v.shape[3]

    def attention_forward(self, q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                          scale, p, keep_scale, k0, k1, stream, block_k, o, stats, status) -> int:
        got = self._lib.mj_attention_forward(
            self._ptr(q), self._ptr(k), self._ptr(v), *self._shape(q, k, v), self._u8(mask_bool),
            self._ptr(mask_add), int(mask_kind), self._i64(mask_strides), int(bool(causal)),
            _f32(scale), _f32(p), _f32(keep_scale), int(k0), int(k1), int(stream), int(block_k),
            self._ptr(o), self._ptr(stats), self._i32(status), self._crmath._tab)
        self._check(got, "mj_attention_forward")
        return int(got)

    def attention_backward(self, do, q, k, v, o, stats, mask_bool, mask_add, mask_kind,
                           mask_strides, causal, scale, p, keep_scale, k0, k1, stream, block_q,
                           block_k, dq, dk, dv, status) -> int:
        got = self._lib.mj_attention_backward(
            self._ptr(do), self._ptr(q), self._ptr(k), self._ptr(v), self._ptr(o),
            self._ptr(stats), *self._shape(q, k, v), self._u8(mask_bool), self._ptr(mask_add),
            int(mask_kind), self._i64(mask_strides), int(bool(causal)), _f32(scale), _f32(p),
            _f32(keep_scale), int(k0), int(k1), int(stream), int(block_q), int(block_k),
            self._ptr(dq), self._ptr(dk), self._ptr(dv), self._i32(status), self._crmath._tab)
        self._check(got, "mj_attention_backward")
        return int(got)


def load(mode: str, backend: str = "cpu-cffi") -> CffiTransformer:
    return CffiTransformer(mode)
