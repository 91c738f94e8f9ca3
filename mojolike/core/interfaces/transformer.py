"""The transformer family's kernel interface: softmax and log_softmax rows, layer_norm rows,
and the fused scaled-dot-product attention forward and backward.

Arrays are C-contiguous float32 unless said otherwise. Row kernels see (M, N) matrices
whose rows are contracts/transformer.md's rows (the API moves `dim` last and flattens the
rest). Attention sees query (B, H, L, E), key (B, H, S, E), value (B, H, S, Ev) and an
optional mask given by element strides: mask entry (b, h, i, j) is
`mask[b*ms[0] + h*ms[1] + i*ms[2] + j*ms[3]]` (ms: int64 (4,), 0 along a broadcast
dimension), in `mask_bool` (uint8, nonzero takes part) when mask_kind is 1, in
`mask_add` (float32, added to the score) when it is 2; kind 0 has no mask and both are
one-element placeholders. Dropout (p > 0) keeps position ((b H + h) L + i) S + j of
Philox stream `stream` under key (k0, k1) when its uniform u >= p, scaled by keep_scale.

The batched matmul has no kernel of its own: it is the layers family's `gemm_nt` per
batch entry (on cpu-numba its `gemm_nn`, the same cells with b as stored) and its
`segment_fold` over broadcast entries (contracts/transformer.md clauses 8, 9). GELU, tanhf and erff are elementwise correctly rounded functions and
live with expf in the crmath family.

Reproducibility: every sum is the fold tree of `mojolike.oracles.fold` in the index
order the contract states, and the block sizes (`block_q`, `block_k`) never reach a bit,
so a decided result is `mojolike.oracles.transformer` / `mojolike.oracles.attention`'s.
A row (softmax) or head (attention) whose expf the kernel could not decide is marked in
`status` and redone on the host by the API with the oracle.

>>> from mojolike.core.interfaces import writes
>>> writes("transformer")["softmax_rows"]
(2, 3)
"""
from __future__ import annotations

from typing import Protocol

from . import Array, KernelSet, Written


class TransformerKernels(KernelSet, Protocol):
    """The kernels behind softmax, log_softmax, layer_norm and attention, and their backward."""

    def softmax_rows(self, x: Array, log: bool, y: Written, status: Written) -> int:
        """y (M, N) = softmax (log: log_softmax) of every row of x (M, N), clause 1.
        status (M,) int32: 1 marks a row with an undecided expf or logf (its y is then
        unspecified), else 0; returns the number of marked rows."""

    def softmax_backward_rows(self, dy: Array, y: Array, log: bool, dx: Written,
                              status: Written) -> int:
        """dx (M, N), the gradient of softmax (log: log_softmax) for dy given its output y,
        clause 3; status and the return as softmax_rows (only log's expf can be undecided)."""

    def layer_norm_rows(self, x: Array, w: Array, has_w: bool, b: Array, has_b: bool, eps,
                        y: Written) -> None:
        """y (M, D) = layer_norm of every row of x (M, D), clause 4; w and b (D,) or
        placeholders when their has_ flag is False; eps binary32."""

    def layer_norm_backward_rows(self, dy: Array, x: Array, w: Array, has_w: bool, eps,
                                 dx: Written, h: Written) -> None:
        """dx (M, D), clause 5, and h (M, D) = c * rstd of the forward (dweight is the
        column fold of dy * h and dbias of dy, which the API takes from the layers family)."""

    def attention_forward(self, q: Array, k: Array, v: Array, mask_bool: Array, mask_add: Array,
                          mask_kind: int, mask_strides: Array, causal: bool, scale, p,
                          keep_scale, k0: int, k1: int, stream: int, block_k: int,
                          o: Written, stats: Written, status: Written) -> int:
        """o (B, H, L, Ev), clauses 11-14, streaming over key blocks of block_k keys in two
        passes; stats (B, H, L, 2) = (mx_i, S_i) of every row (-inf, +0.0 for an empty row),
        which the backward takes. status (B, H) int32: 1 marks a head with an undecided
        expf (its o and stats are then unspecified); returns the number of marked heads."""

    def attention_backward(self, do: Array, q: Array, k: Array, v: Array, o: Array,
                           stats: Array, mask_bool: Array, mask_add: Array, mask_kind: int,
                           mask_strides: Array, causal: bool, scale, p, keep_scale, k0: int,
                           k1: int, stream: int, block_q: int, block_k: int, dq: Written,
                           dk: Written, dv: Written, status: Written) -> int:
        """dq (B, H, L, E), dk (B, H, S, E), dv (B, H, S, Ev), clause 15, from the forward's
        o and stats: one pass over key blocks (dk, dv: folds over i ascending across query
        blocks) and one over query blocks (dq: folds over j across key blocks). status and
        the return as attention_forward."""
