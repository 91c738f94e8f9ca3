"""torch's scaled_dot_product_attention and its backward, fused, with the unfused composition's bits.

The arithmetic is contracts/transformer.md clauses 10-15, defined by
`mojolike.oracles.attention`: scores `scale * dot(q_i, k_j)` (then + a float mask),
the row max, expf, the fold S_i, the weighted sums folded over the keys and divided by
S_i after; the backward's dV, dP, dS, dQ, dK each a fold over a stated index in
ascending order. The kernels stream over key blocks (two passes: the max, then expf
with the folds) and never hold an (L, S) matrix per head; the backward runs one pass
over key blocks (dK, dV) and one over query blocks (dQ), so no gradient is accumulated
in completion order, and the block sizes never reach a bit.

A head whose expf the kernel could not decide (crmath's short list) is redone on the
host by the oracle; it is reported to `mojolike.core.fallbacks` with the crmath values
the backend's expf finished for it.

>>> import numpy as np, mojolike
>>> q = np.float32([[[[1, 0]]]]); k = np.float32([[[[1, 0], [0, 1]]]]); v = np.float32([[[[1], [3]]]])
>>> mojolike.scaled_dot_product_attention(q, k, v, scale=0.0, backend="oracle").tolist()
[[[[2.0]]]]
>>> mojolike.scaled_dot_product_attention(q, k, v, is_causal=True, backend="oracle").tolist()
[[[[1.0]]]]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import checks, fallbacks, registry
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..oracles import attention as spec
from ..oracles import codec
from ..oracles import rng as rng_spec
from ..oracles.transformer import row_max
from . import mixed
from .crmath import expf
from .rng import Generator
from .transformer import FAMILY, array

BLOCK_Q = 64  # query rows per task of the backward's dQ pass
BLOCK_K = 64  # keys per block of the forward and of the backward's dK/dV pass
_NO_MASK = (np.zeros(1, np.uint8), np.zeros(1, np.float32))
_TWO64 = 1 << 64


@dataclass(frozen=True)
class Call:
    """One attention call's checked arguments, in the form the kernels take them."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask_bool: np.ndarray
    mask_add: np.ndarray
    mask_kind: int
    mask_strides: np.ndarray
    causal: bool
    scale: np.float32
    p: np.float32
    keep_scale: np.float32
    k0: int
    k1: int
    stream: int

    def args(self) -> tuple:
        return (self.q, self.k, self.v, self.mask_bool, self.mask_add, self.mask_kind,
                self.mask_strides, self.causal, self.scale, self.p, self.keep_scale, self.k0,
                self.k1, self.stream)

    @property
    def mask_shape(self) -> tuple[int, int, int, int]:
        return self.q.shape[:3] + (self.k.shape[2],)


def _mask(entry: str, attn_mask, shape: tuple[int, int, int, int]):
    """(mask_bool, mask_add, kind, element strides) of a mask broadcast to (B, H, L, S)."""
    if attn_mask is None:
        return (*_NO_MASK, 0, np.zeros(4, np.int64))
    if isinstance(attn_mask, np.ndarray) and attn_mask.dtype == np.bool_:
        m = checks.as_bool(entry, "attn_mask", attn_mask).reshape(attn_mask.shape)
        kind = 1
    else:
        m = array(entry, "attn_mask", attn_mask)
        kind = 2
    if m.ndim > 4 or any(a not in (1, b) for a, b in zip(m.shape[::-1], shape[::-1])):
        refuse(entry, "attn_mask", f"has shape {m.shape}, which does not broadcast to (B, H, L, S) = "
                                   f"{shape} (torch's rule: aligned from the right, equal or 1)")
    full = (1,) * (4 - m.ndim) + m.shape
    elem = np.zeros(4, np.int64)
    step = 1
    for d in range(3, -1, -1):
        elem[d] = 0 if full[d] == 1 and shape[d] != 1 else step
        step *= full[d]
    if kind == 1:
        return m.reshape(-1).view(np.uint8), _NO_MASK[1], 1, elem
    return _NO_MASK[0], m.reshape(-1), 2, elem


def check_call(entry: str, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
           generator, stream, *, backward: bool) -> tuple[Call, Generator | None, int | None]:
    q = array(entry, "query", query, ndim=4)
    k = array(entry, "key", key, ndim=4)
    v = array(entry, "value", value, ndim=4)
    if checks.switch(entry, "enable_gqa", enable_gqa):
        refuse(entry, "enable_gqa", "(grouped-query attention) is not covered by "
                                    "contracts/transformer.md; repeat key and value per head",
               value=True)
    for name, t in (("key", k), ("value", v)):
        if t.shape[:2] != q.shape[:2]:
            refuse(entry, name, f"has (B, H) = {t.shape[:2]} but query has {q.shape[:2]}; "
                                f"broadcasting and grouped heads are not covered")
    if k.shape[3] != q.shape[3]:
        refuse(entry, "key", f"has E = {k.shape[3]} but query has E = {q.shape[3]}")
    if v.shape[2] != k.shape[2]:
        refuse(entry, "value", f"has S = {v.shape[2]} positions but key has S = {k.shape[2]}")
    causal = checks.switch(entry, "is_causal", is_causal)
    if causal and attn_mask is not None:
        refuse(entry, "is_causal", "together with an attn_mask is not covered (torch refuses it "
                                   "too); fold the causal mask into attn_mask", value=True)
    shape = q.shape[:3] + (k.shape[2],)
    mb, ma, kind, ms = _mask(entry, attn_mask, shape)
    sc = (np.float32(spec.default_scale(q.shape[3])) if scale is None
          else np.float32(checks.real32(entry, "scale", scale)))
    p = np.float32(checks.real32(entry, "dropout_p", dropout_p, low=0.0, high=1.0, high_open=True,
                                 what="in [0, 1)"))
    k0 = k1 = s = 0
    keep_scale = np.float32(1.0)
    if p > 0:
        if not isinstance(generator, Generator):
            refuse(entry, "generator", "must be a mojolike.Generator when dropout_p > 0 (the "
                                       "dropped positions are keyed by its seed and a stream)",
                   value=generator)
        if stream is not None:
            s = checks.integer(entry, "stream", stream, low=0, high=_TWO64 - 1)
        elif backward:
            refuse(entry, "stream", "is needed with dropout_p > 0: pass the forward's stream "
                                    "(the backward replays its dropout mask)")
        k0, k1 = rng_spec.key_of(generator.seed)
        keep_scale = np.float32(rng_spec.dropout_scale(float(p)))
    elif generator is not None and not isinstance(generator, Generator):
        refuse(entry, "generator", "must be a mojolike.Generator or None", value=generator)
    call = Call(q, k, v, mb, ma, kind, ms, causal, sc, p, keep_scale, k0, k1, s)
    return call, (generator if p > 0 else None), (stream if p > 0 else None)


def take_stream(call: Call, generator, stream) -> Call:
    """The call with its dropout stream: the one given, else the generator's next."""
    if generator is None or stream is not None:
        return call
    s = generator.next_stream()
    return Call(*call.args()[:-1], s)


class AttentionSaved:
    """What `scaled_dot_product_attention(..., return_saved=True)` keeps for its backward:
    private copies of the call's inputs (query, key, value, mask and options as the kernels
    took them), its output and its row statistics (max and sum of each row's exps).

    `scaled_dot_product_attention_backward(..., saved=s)` runs only the backward's passes
    from them instead of running the forward again. Reproducibility: the statistics are the
    forward's bits on every backend (clause 14), so the gradients are the same bits either
    way; the backward compares its arguments with the copies bit for bit and refuses
    `saved` by name when any differs. Holding one costs the inputs' and the output's memory
    again (copies, so that changes to the caller's arrays cannot reach it).

    >>> import numpy as np, mojolike
    >>> q = np.float32([[[[1, 0], [0, 1]]]]); g = np.float32([[[[1, 0], [0, 1]]]])
    >>> o, saved = mojolike.scaled_dot_product_attention(q, q, q, is_causal=True, return_saved=True)
    >>> dq, dk, dv = mojolike.scaled_dot_product_attention_backward(g, q, q, q, is_causal=True, saved=saved)
    >>> dv.tolist() == mojolike.scaled_dot_product_attention_backward(g, q, q, q, is_causal=True)[2].tolist()
    True
    """

    __slots__ = ("_call", "_o", "_stats")

    @entry_point()
    def __init__(self, call: Call, o: np.ndarray, stats: np.ndarray):
        self._call = Call(*(a.copy() if isinstance(a, np.ndarray) else a for a in call.args()))
        self._o, self._stats = o.copy(), stats

    def __repr__(self) -> str:
        c = self._call
        return (f"AttentionSaved(query {c.q.shape}, key {c.k.shape}, value {c.v.shape}, "
                f"causal={c.causal}, dropout_p={float(c.p)})")


_CALL_FIELDS = ("query", "key", "value", "attn_mask", "attn_mask", "attn_mask", "attn_mask",
                "is_causal", "scale", "dropout_p", "dropout_p", "generator", "generator", "stream")


def _same_bits(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return (a.shape == b.shape and a.dtype == b.dtype
                and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


def from_saved(entry: str, saved, call: Call) -> AttentionSaved:
    """`saved` when it was made by the forward of this very call (every argument the same
    bits), else a refusal naming the first argument that differs."""
    if not isinstance(saved, AttentionSaved):
        refuse(entry, "saved", "must be the AttentionSaved that scaled_dot_product_attention("
                               "..., return_saved=True) returned", value=saved)
    for name, mine, theirs in zip(_CALL_FIELDS, call.args(), saved._call.args()):
        if not _same_bits(mine, theirs):
            refuse(entry, "saved", f"was made by a forward with a different {name}; the saved "
                                   f"statistics belong to that call (pass that call's {name}, or "
                                   f"leave saved out and the backward runs the forward again)")
    return saved


def _oracle_inputs(call: Call):
    """The oracle's view of a call's mask and dropout: nested lists and the keep scale."""
    kind = call.mask_kind
    values = codec.decode(call.mask_add) if kind == 2 else call.mask_bool.tolist()
    mask = spec.mask_from_strides(values, kind, call.mask_strides, call.mask_shape)
    keep, p_scale = spec.keep_of_key(call.k0, call.k1, call.stream, float(call.p), call.mask_shape)
    return mask, keep, p_scale


def _lists(a: np.ndarray) -> list[list[float]]:
    """A (rows, cols) float32 matrix as nested Python floats."""
    flat = codec.decode(a.reshape(-1))
    w = a.shape[-1]
    return [flat[r * w:(r + 1) * w] for r in range(a.shape[0])]


def _redo_heads(kind: str, call: Call, status: np.ndarray, outs, do=None, *, backend,
                numeric_mode) -> int:
    """Give every head with a nonzero status the oracle's results (forward: o and stats;
    backward: dq, dk, dv); returns how many."""
    redo = np.argwhere(status)
    if not redo.size:
        return 0
    mask, keep, p_scale = _oracle_inputs(call)
    sc = float(call.scale)
    for b, h in redo.tolist():
        qh = _lists(call.q[b, h])
        kh = _lists(call.k[b, h])
        vh = _lists(call.v[b, h])
        kp = None if keep is None else keep[b][h]
        scores = spec.head_scores(qh, kh, sc, mask, call.mask_shape, call.causal, b, h)
        # the backend's expf over this head's arguments finishes (and reports) the undecided ones
        with fallbacks.collect(hold=True) as finished:
            for row in scores:
                present = [s for s in row if s is not None]
                if present:
                    mx = np.float32(row_max(present))
                    with np.errstate(all="ignore"):
                        expf(np.float32(present) - mx, backend=backend, numeric_mode=numeric_mode)
        if kind == "forward":
            o, stats = outs
            oh, _ = spec.head_forward(qh, kh, vh, sc, mask, call.mask_shape, call.causal, kp,
                                      p_scale, b, h)
            codec.store(o[b, h], [x for r in oh for x in r])
            st = []
            for row in scores:
                ex = spec.row_exps(row)
                st.extend((-np.inf, 0.0) if ex is None else
                          (row_max([s for s in row if s is not None]), ex[1]))
            codec.store(stats[b, h], st)
        else:
            gh = _lists(do[b, h])
            grads = spec.head_backward(gh, qh, kh, vh, sc, mask, call.mask_shape, call.causal, kp,
                                       p_scale, b, h)
            for out, g in zip(outs, grads):
                codec.store(out[b, h], [x for r in g for x in r])
        fallbacks.record(FAMILY, f"attention_{kind}_head", b * call.q.shape[1] + h, 0,
                         finished=tuple(finished))
        status[b, h] = 0
    return len(redo)


def forward(entry: str, call: Call, backend, numeric_mode, block_k: int = BLOCK_K):
    """(o, stats, kernel set) of a checked call: the tape keeps stats for the backward."""
    k = registry.kernels(entry, FAMILY, backend, numeric_mode)
    nb, nh, nl, _ = call.q.shape
    o = checks.empty(entry, "query", (nb, nh, nl, call.v.shape[3]))
    stats = checks.empty(entry, "query", (nb, nh, nl, 2))
    status = np.zeros((nb, nh), np.int32)
    flagged = k.attention_forward(*call.args(), int(block_k), o, stats, status)
    redone = _redo_heads("forward", call, status, (o, stats), backend=k.backend,
                         numeric_mode=k.numeric_mode)
    _agree(entry, k, flagged, redone)
    return o, stats, k


def backward(entry: str, call: Call, do: np.ndarray, o: np.ndarray, stats: np.ndarray, k,
             block_q: int = BLOCK_Q, block_k: int = BLOCK_K):
    """(dq, dk, dv) of a checked call from the forward's o and stats on kernel set k."""
    dq = checks.empty(entry, "query", call.q.shape)
    dk = checks.empty(entry, "key", call.k.shape)
    dv = checks.empty(entry, "value", call.v.shape)
    status = np.zeros(call.q.shape[:2], np.int32)
    flagged = k.attention_backward(do, call.q, call.k, call.v, o, stats, *call.args()[3:],
                                   int(block_q), int(block_k), dq, dk, dv, status)
    redone = _redo_heads("backward", call, status, (dq, dk, dv), do, backend=k.backend,
                         numeric_mode=k.numeric_mode)
    _agree(entry, k, flagged, redone)
    return dq, dk, dv


def _agree(entry: str, k, flagged: int, redone: int) -> None:
    if redone != flagged:
        raise RuntimeError(f"{entry}: the {k.backend} kernel reported {flagged} undecided heads "
                           f"but flagged {redone}")


@entry_point("mojolike.scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, generator=None,
                                 stream=None, *, return_saved=False, backend=None,
                                 numeric_mode=None, entry, **unknown):
    """torch's F.scaled_dot_product_attention on query (B, H, L, E), key (B, H, S, E),
    value (B, H, S, Ev); returns (B, H, L, Ev).

    attn_mask: bool (True takes part) or float32 (added to the scores), broadcast to
    (B, H, L, S); is_causal: key j takes part in row i when j <= i (top-left, torch's
    tril); scale None is the binary32 nearest 1/sqrt(E). dropout_p > 0 needs a
    `mojolike.Generator`: the call uses its next stream (or `stream=`), and the
    probability (b, h, i, j) is kept when the uniform at stream position
    ((b H + h) L + i) S + j is >= p. A row with no taking-part key is +0.0.

    return_saved: True returns (output, saved), an `AttentionSaved` that
    `scaled_dot_product_attention_backward(..., saved=saved)` takes so as not to run the
    forward again (the call's stream is in it: pass the same stream to the backward).

    Reproducibility: the unfused composition's bits (contracts/transformer.md clauses
    10-14) on every backend, thread count and block size; a sequence's output never
    depends on the other sequences or heads (batch invariance), and a causal row i
    equals the call with query i alone over keys 0..i (prefix invariance).

    Low precision (contracts/mixed.md): query, key and value all bfloat16 or all float16
    give the float32 result of this op on the exactly widened inputs, bit for bit (widened
    into float32 scratch first); attn_mask stays bool or float32; mixed operand types are
    refused by name.

    >>> import numpy as np, mojolike
    >>> q = np.float32([[[[1, 0], [0, 1]]]])
    >>> mojolike.scaled_dot_product_attention(q, q, q, is_causal=True, backend="oracle")[0, 0, 0].tolist()
    [1.0, 0.0]
    """
    query, key, value = mixed.widened(entry, (("query", query), ("key", key), ("value", value)),
                                      backend, numeric_mode)
    call, gen, st = check_call(entry, query, key, value, attn_mask, dropout_p, is_causal, scale,
                           enable_gqa, generator, stream, backward=False)
    keep = checks.switch(entry, "return_saved", return_saved)
    k = registry.kernels(entry, FAMILY, backend, numeric_mode)
    call = take_stream(call, gen, st)
    o, stats, _ = forward(entry, call, k.backend, k.numeric_mode)
    return (o, AttentionSaved(call, o, stats)) if keep else o


@entry_point("mojolike.scaled_dot_product_attention_backward")
def scaled_dot_product_attention_backward(grad_out, query, key, value, attn_mask=None,
                                          dropout_p=0.0, is_causal=False, scale=None,
                                          enable_gqa=False, generator=None, stream=None, *,
                                          saved=None, backend=None, numeric_mode=None, entry,
                                          **unknown):
    """(dq, dk, dv) of `scaled_dot_product_attention` with the same arguments for grad_out
    (B, H, L, Ev); with dropout, the forward's generator and `stream=` (its stream).

    Reproducibility: as the forward (clause 15): dV, dP, dS, dQ and dK each a fold over a
    stated index in ascending order; no gradient flows to a float mask. With `saved` (the
    forward's `return_saved=True`) the forward is not run again and the gradients are the
    same bits; `saved` from a call with any other argument is refused by name.

    Low precision: query, key and value of one low type (grad_out float32, as a low-precision
    forward's gradients are) give the float32 op's gradients on the widened inputs.

    >>> import numpy as np, mojolike
    >>> q = np.float32([[[[1, 0]]]]); k = np.float32([[[[1, 0], [0, 1]]]]); v = np.float32([[[[1], [3]]]])
    >>> dq, dk, dv = mojolike.scaled_dot_product_attention_backward(
    ...     np.float32([[[[1]]]]), q, k, v, scale=0.0, backend="oracle")
    >>> dv.tolist(), dq.tolist()
    ([[[[0.5], [0.5]]]], [[[[-0.0, 0.0]]]])
    """
    query, key, value = mixed.widened(entry, (("query", query), ("key", key), ("value", value)),
                                      backend, numeric_mode)
    call, _, _ = check_call(entry, query, key, value, attn_mask, dropout_p, is_causal, scale,
                        enable_gqa, generator, stream, backward=True)
    g = array(entry, "grad_out", grad_out, ndim=4)
    want = call.q.shape[:3] + (call.v.shape[3],)
    if g.shape != want:
        refuse(entry, "grad_out", f"has shape {g.shape}; the attention output is {want}")
    if saved is None:
        o, stats, k = forward(entry, call, backend, numeric_mode)
        return backward(entry, call, g, o, stats, k)
    s = from_saved(entry, saved, call)
    k = registry.kernels(entry, FAMILY, backend, numeric_mode)
    return backward(entry, s._call, g, s._o, s._stats, k)


__all__ = ["AttentionSaved", "scaled_dot_product_attention", "scaled_dot_product_attention_backward"]
