"""The tape's transformer ops: softmax, log_softmax, layer_norm, gelu, matmul, scaled_dot_product_attention.

Each forward is the certified function on the tape's backend (contracts/transformer.md
clauses 1-15), and each backward is that family's backward function:
softmax_backward / log_softmax_backward from the forward's output,
layer_norm_backward (dx, dweight, dbias), gelu_backward(dy, x), matmul_backward
(broadcast batch entries folded as clause 9), and attention's backward from the
forward's output and row statistics (no forward recomputed). Attention's dropout
takes the generator's stream at the forward, as the public function does; the
backward replays that stream's mask.

Reproducibility: every value and gradient is a certified function's, so the tape
gives the oracle's bits on every backend and thread count.

>>> import numpy as np, mojolike
>>> tape = mojolike.Tape(backend="oracle")
>>> x = tape.param(np.float32([[0, 0], [1, 1]]))
>>> y = tape.softmax(x, dim=-1)
>>> y.data.tolist(), tape.backward(tape.sum(tape.mul(y, y)))[0].tolist()
([[0.5, 0.5], [0.5, 0.5]], [[0.0, 0.0], [0.0, 0.0]])
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core.entry import entry_point
from ..core.refusals import refuse
from ..ops import attention as attn
from ..ops import transformer as tops
from ..ops.mixed import widened
from .tape_base import BACKWARD, Value, as_entry


class TransformerOps:
    """The transformer family's ops on the tape (a mixin of Tape)."""

    @entry_point()
    def softmax(self, x, dim=-1, *, entry, **unknown) -> Value:
        """`mojolike.softmax(x, dim)`; backward `mojolike.softmax_backward(dy, y, dim)`."""
        return self._softmax(entry, "softmax", tops.softmax, x, dim)

    @entry_point()
    def log_softmax(self, x, dim=-1, *, entry, **unknown) -> Value:
        """`mojolike.log_softmax(x, dim)`; backward `mojolike.log_softmax_backward(dy, y, dim)`."""
        return self._softmax(entry, "log_softmax", tops.log_softmax, x, dim)

    def _softmax(self, e: str, op: str, fn, x, dim) -> Value:
        a = self._own(e, "x", x)
        with as_entry(e):
            y = fn(a.data, dim, **self._on)
        return self._push(op, y, [a], (dim, y), reads_inputs=False)

    def _back_softmax(self, node, dy):
        dim, y = node.saved
        return [(tops.softmax_backward(_c(dy), y, dim, **self._on), True)]

    def _back_log_softmax(self, node, dy):
        dim, y = node.saved
        return [(tops.log_softmax_backward(_c(dy), y, dim, **self._on), True)]

    @entry_point()
    def layer_norm(self, x, normalized_shape, weight=None, bias=None, eps=tops.EPS_DEFAULT, *,
                   entry, **unknown) -> Value:
        """`mojolike.layer_norm(x, normalized_shape, weight, bias, eps)`; backward
        `mojolike.layer_norm_backward` (dx, dweight, dbias, in argument order). A bfloat16 /
        float16 x is normalized widened (a float32 result, as torch's autocast gives) and
        kept as it is; weight and bias are float32."""
        e = entry
        ins = [self._own(e, "x", x, low=True)]  # kept in its own precision for the backward
        w = None if weight is None else self._own(e, "weight", weight)
        b = None if bias is None else self._own(e, "bias", bias)
        ins += [v for v in (w, b) if v is not None]
        with as_entry(e):
            y = tops.layer_norm(self._wide(ins[0]), normalized_shape, None if w is None else w.data,
                                None if b is None else b.data, eps, **self._on)
        return self._push("layer_norm", y, ins, (normalized_shape, w is not None,
                                                 b is not None, eps))

    def _back_layer_norm(self, node, dy):
        shape, has_w, has_b, eps = node.saved
        x = self._wide(node.inputs[0])
        w = node.inputs[1].data if has_w else None
        b = node.inputs[-1].data if has_b else None
        dx, dw, db = tops.layer_norm_backward(_c(dy), x, shape, w, b, eps, **self._on)
        return [(dx, True)] + [(g, True) for g in (dw, db) if g is not None]

    @entry_point()
    def gelu(self, x, approximate="none", *, entry, **unknown) -> Value:
        """`mojolike.gelu(x, approximate)`; backward `mojolike.gelu_backward(dy, x, approximate)`.
        A bfloat16 / float16 x gives the float32 gelu of x widened, rounded once to x's type
        (torch's autocast runs gelu in the input's type), and is kept as it is."""
        a = self._own(entry, "x", x, low=True)
        with as_entry(entry):
            y = self._rounded_op(lambda part: tops.gelu(part, approximate, **self._on), a)
        return self._push("gelu", y, [a], approximate)

    def _back_gelu(self, node, dy):
        x = self._wide(node.inputs[0])
        return [(tops.gelu_backward(_c(dy), x, node.saved, **self._on), True)]

    @entry_point()
    def matmul(self, a, b, *, entry, **unknown) -> Value:
        """`mojolike.matmul(a, b)` (batch dimensions broadcast); backward
        `mojolike.matmul_backward(dy, a, b)`."""
        u, v = self._own(entry, "a", a, low=True), self._own(entry, "b", b, low=True)
        with as_entry(entry):
            y = tops.matmul(u.data, v.data, **self._on)
        return self._push("matmul", y, [u, v], None)

    def _back_matmul(self, node, dy):
        a, b = (self._wide(v) for v in node.inputs)  # kept in their own precision until now
        da, db = tops.matmul_backward(_c(dy), a, b, **self._on)
        return [(da, True), (db, True)]

    @entry_point()
    def scaled_dot_product_attention(self, query, key, value, attn_mask=None, dropout_p=0.0,
                                     is_causal=False, scale=None, enable_gqa=False,
                                     generator=None, stream=None, *, entry, **unknown) -> Value:
        """`mojolike.scaled_dot_product_attention(...)` on query, key, value Values (B, H, L, E),
        (B, H, S, E), (B, H, S, Ev). attn_mask: a plain bool or float32 array, or a Value no
        gradient reaches (none flows to a mask). With dropout_p > 0 the generator's next
        stream (or `stream=`) is taken once every argument is accepted; the backward is
        `ops.attention.backward` from the forward's output and row statistics. Query, key
        and value of one low type (bfloat16 / float16) give the float32 op on them widened
        (a float32 result) and are kept as they are, widened again for the backward."""
        e = entry
        q, k, v = (self._own(e, n, t, low=True)
                   for n, t in (("query", query), ("key", key), ("value", value)))
        mask = attn_mask
        if isinstance(attn_mask, Value):
            m = self._own(e, "attn_mask", attn_mask)
            if m.requires_grad:
                refuse(e, "attn_mask", "requires a gradient, and none flows to a mask "
                                       "(contracts/transformer.md clause 15): detach it")
            mask = m.data
        with as_entry(e):
            wq, wk, wv = widened(e, (("query", q.data), ("key", k.data), ("value", v.data)),
                                 self.backend, self.numeric_mode)
            call, gen, st = attn.check_call(e, wq, wk, wv, mask, dropout_p,
                                            is_causal, scale, enable_gqa, generator, stream,
                                            backward=False)
            call = attn.take_stream(call, gen, st)
            o, stats, kset = attn.forward(e, call, self.backend, self.numeric_mode)
        if wq is not q.data:  # the widened scratch is not kept: the backward widens again
            call = dataclasses.replace(call, q=None, k=None, v=None)
        return self._push("scaled_dot_product_attention", o, [q, k, v], (call, o, stats, kset))

    def _back_scaled_dot_product_attention(self, node, dy):
        call, o, stats, kset = node.saved
        if call.q is None:
            q, k, v = (self._wide(t) for t in node.inputs)
            call = dataclasses.replace(call, q=q, k=k, v=v)
        dq, dk, dv = attn.backward(BACKWARD, call, _c(dy), o, stats, kset)
        return [(dq, True), (dk, True), (dv, True)]


def _c(g: np.ndarray) -> np.ndarray:
    """A gradient as the certified functions take it: C-contiguous float32."""
    return np.ascontiguousarray(g, dtype=np.float32)
