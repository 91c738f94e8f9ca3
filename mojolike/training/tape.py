"""Define-by-run reverse mode over the certified ops: `Tape`.

Each op computes eagerly through the certified function on the tape's backend
and appends one node; `backward` walks the nodes once, newest first, and adds a
value's gradient contributions in that walk's order (contracts/train.md, "Tape").
Elementwise steps the layers do not provide (add, mul, relu's select, scaling by
an upstream gradient, the accumulation of contributions) are numpy float32
operations: one IEEE rounding each, the same bits on every machine.
"""
from __future__ import annotations

import inspect
import weakref

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..ops.head import chunked_lm_head_loss
from ..ops.layers import (
    embedding,
    embedding_backward,
    linear,
    linear_backward,
    linear_backward_low,
    relu,
    rms_norm,
    rms_norm_backward,
)
from ..ops.loss import cross_entropy
from ..ops.rng import TWO64, Generator
from .tape_base import BACKWARD, Handle, Value, _Node, as_entry, binary
from .tape_math import MathOps
from .tape_mixed import MixedOps, low_refusal
from .tape_shapes import ShapeOps
from .tape_transformer import TransformerOps

# options the tape sets itself, so a caller's value would be ignored or contradicted
_LOSS_OWN = {
    "return_grad": "is set by the tape (the gradient is computed in the forward and kept for "
                   "backward); leave it out",
    "backend": "is the tape's: pass backend= to Tape()",
    "numeric_mode": "is the tape's: pass numeric_mode= to Tape()",
}


def _loss_keywords(fn) -> tuple[str, ...]:
    """The options of the loss `fn` a tape's loss op passes on: its parameters with a default,
    but the tape's own (the tape's op refuses those with the reason)."""
    return tuple(n for n, p in inspect.signature(fn).parameters.items()
                 if p.default is not p.empty and n not in _LOSS_OWN)


# the ops whose nodes keep gradients computed in the forward (handed to the caller once freed)
_KEEPS_GRADIENTS = ("cross_entropy", "chunked_lm_head_loss")
# the ops whose backward may reuse the incoming gradient's buffer when the walk owns it (no
# other slot and nothing the graph keeps holds it): relu zeroes it in place, cast passes it on
_REUSES_DY = frozenset({"relu", "cast"})


class Tape(ShapeOps, MathOps, TransformerOps, MixedOps):
    """Define-by-run reverse mode: eager certified ops, one node each, one backward walk.

    `param(array)` registers a parameter (borrowed, never copied: an optimizer
    updating that array is seen by the next forward), `const(array)` a constant.
    The ops take and return `Value`s: `linear`, `embedding`, `rms_norm`, `relu`,
    `dropout`, `cross_entropy`, `chunked_lm_head_loss` (here); broadcasting `add`,
    `sub`, `mul`, `div` (a Python number on either side), `neg`, `exp`, `log`,
    `tanh`, `sum` and `mean` over dims (`mojolike.training.tape_math`); `reshape`,
    `view`, `transpose`, `permute`, `T`, `mT`, `getitem`, `narrow`, `cat`, `split`,
    `detach` (`mojolike.training.tape_shapes`); `softmax`, `log_softmax`,
    `layer_norm`, `gelu`, `matmul`, `scaled_dot_product_attention`
    (`mojolike.training.tape_transformer`). A Value's operators and methods spell
    them as torch does (`a + 1`, `x @ w`, `x.view(B, T, C)`, `x.mT`).
    `backward(loss, seed=1.0)` walks the nodes once, newest first, and returns the
    gradients of the parameters in registration order: None for a parameter the
    loss does not reach (torch leaves its `.grad` None; an optimizer skips it).
    Unless `retain_graph=True` it frees the graph it walked, as torch does: those
    nodes drop what they kept and their inputs, so a tape used for many backward
    passes holds no more than one pass's graph, and a later backward through a
    freed node is refused. `mark()` / `reset_to(mark)` drop every value and node
    made after the mark (the arena of one step; parameters registered before the
    mark stay).

    Fan-in: a value read by several ops gets its contributions added as the walk
    reaches them, newest consumer first and, within one op, in argument order,
    each addition one float32 rounding: for consumers n1 < n2 < n3 its gradient is
    (c3 + c2) + c1 (contracts/train.md, clause 3).

    Parameters: `backend`, `numeric_mode` as in `mojolike.backends`, resolved once
    when the tape is made; every op runs there, dropout included (whatever backend
    its generator was made for).

    Reproducibility: every op is a certified function or one IEEE operation per
    element, and the order of every addition is fixed by the program alone, so a
    tape's values and gradients have the oracle's bits on every backend and
    thread count (numeric_mode="identical").

    A shape or dtype mistake raises `mojolike.Refusal` naming the op
    ("mojolike.Tape.linear") and the argument, and appends nothing.

    >>> import numpy as np, mojolike
    >>> tape = mojolike.Tape(backend="oracle")
    >>> w = tape.param(np.float32([[1, -2], [3, 4]]))
    >>> x = tape.const(np.float32([[1, 2]]))
    >>> loss = tape.sum(tape.relu(tape.linear(x, w)))     # relu([-3, 11]): row 0 gets no gradient
    >>> loss.item(), tape.backward(loss)[0].tolist()
    (11.0, [[0.0, 0.0], [1.0, 2.0]])
    >>> m = tape.mark()
    >>> y = tape.mul(w, w)
    >>> tape.backward(tape.mean(y))[0].tolist()          # w/4 + w/4: w read twice by mul
    [[0.5, -1.0], [1.5, 2.0]]
    >>> tape.reset_to(m); len(tape.params)
    1
    """

    @entry_point()
    def __init__(self, backend=None, numeric_mode=None, *, entry, **unknown):
        self.backend, self.numeric_mode = registry.resolve(entry, backend, numeric_mode)
        self._on = {"backend": self.backend, "numeric_mode": self.numeric_mode}
        # position -> weak reference: the tape finds its values (reset_to) without keeping them
        self._values: dict[int, weakref.ref] = {}
        self._next = 0  # the position of the next value (mark())
        self._sweep_at = 64  # drop dead references when this many are held
        self._params: list[Value] = []

    def __repr__(self) -> str:
        return (f"Tape(backend={self.backend!r}, values={len(self._live())}, "
                f"params={len(self._params)})")

    @property
    def params(self) -> tuple[Value, ...]:
        """The parameters in registration order (the order of `backward`'s gradients)."""
        return tuple(self._params)

    # -- leaves -------------------------------------------------------------------------------
    @entry_point()
    def param(self, array, *, entry, **unknown) -> Value:
        """Register a float32 array as a parameter (borrowed: the Value's data is the array)."""
        e = entry
        a = _borrow(e, array)
        for i, p in enumerate(self._params):
            if np.may_share_memory(p.data, a):
                refuse(e, "array", f"shares memory with parameter {i}; register each parameter "
                                   f"once (its gradient would be applied twice)")
        v = self._leaf(a, True, "param")
        self._params.append(v)
        return v

    @entry_point()
    def const(self, array, *, entry, **unknown) -> Value:
        """A float32 array no gradient flows to (borrowed: keep it unchanged until backward)."""
        return self._leaf(_borrow(entry, array), False, "const")

    def _leaf(self, a, requires_grad, kind) -> Value:
        return self._register(Value(a, requires_grad, self, self._next, None, kind))

    def _register(self, v: Value) -> Value:
        self._values[v._index] = weakref.ref(v)
        self._next += 1
        if len(self._values) >= self._sweep_at:  # amortized: the table stays within 2x the live
            for i in [i for i, r in self._values.items() if r() is None]:
                del self._values[i]
            self._sweep_at = 2 * len(self._values) + 64
        return v

    def _live(self) -> list[Value]:
        """The values still alive, oldest first."""
        return [v for v in (r() for r in self._values.values()) if v is not None]

    # -- the arena ----------------------------------------------------------------------------
    @entry_point()
    def mark(self, **unknown) -> int:
        """The current position: `reset_to` it to drop everything made after this call."""
        return self._next

    @entry_point()
    def reset_to(self, mark, *, entry, **unknown) -> None:
        """Drop every value, node and parameter made after `mark`; their handles become
        unusable (refused by name), and their buffers are released."""
        e = entry
        m = checks.integer(e, "mark", mark, low=0, high=self._next,
                           what=f"a position from mark(), at most {self._next} here")
        for i in [i for i in self._values if i >= m]:
            v = self._values.pop(i)()
            if v is not None:  # a handle the caller still holds: refused from now on
                v._tape, v._node = None, None
        self._next = m
        self._params = [p for p in self._params if p._index < m]

    # -- ops ----------------------------------------------------------------------------------
    @entry_point()
    def linear(self, x, weight, bias=None, *, entry, **unknown) -> Value:
        """`mojolike.linear(x, weight, bias)`; backward by `mojolike.linear_backward`."""
        e = entry
        ins = [self._own(e, "x", x, low=True), self._own(e, "weight", weight, low=True)]
        if bias is not None:
            ins.append(self._own(e, "bias", bias, low=True))
        with as_entry(e):
            y = linear(*(v.data for v in ins), **self._on)
        return self._push("linear", y, ins, None)

    @entry_point()
    def embedding(self, ids, weight, padding_idx=None, *, entry, **unknown) -> Value:
        """`mojolike.embedding(ids, weight, padding_idx)`, ids a plain integer array (at least
        1-D, copied); backward by `mojolike.embedding_backward`."""
        e = entry
        if isinstance(ids, Value):
            refuse(e, "ids", "must be a plain integer array, not a Value: no gradient flows to ids")
        w = self._own(e, "weight", weight, low=True)  # a low-precision table: rows widened
        with as_entry(e):
            y = embedding(ids, w.data, padding_idx, **self._on)
        if np.ndim(ids) < 1:
            refuse(e, "ids", "must have at least one dimension (the gradient has rows)", value=ids)
        return self._push("embedding", y, [w], (np.array(ids, copy=True), padding_idx),
                          reads_inputs=False)

    @entry_point()
    def rms_norm(self, x, weight=None, eps=None, *, entry, **unknown) -> Value:
        """`mojolike.rms_norm(x, weight, eps)`; backward by `mojolike.rms_norm_backward`."""
        e = entry
        ins = [self._own(e, "x", x)]
        if weight is not None:
            ins.append(self._own(e, "weight", weight))
        with as_entry(e):
            y = rms_norm(ins[0].data, None if weight is None else ins[1].data, eps, **self._on)
        return self._push("rms_norm", y, ins, eps)

    @entry_point()
    def relu(self, x, *, entry, **unknown) -> Value:
        """`mojolike.relu(x)`; backward: +0.0 where relu(x) <= 0, else the upstream gradient
        (torch's threshold_backward: a select, so a NaN input passes its gradient). A
        bfloat16 / float16 x gives a result of its type (relu of a value is that value or
        a zero: exact in any type). The node keeps the result, not x: relu(x) <= 0 exactly
        where x <= 0 (NaN neither)."""
        e = entry
        a = self._own(e, "x", x, low=True)
        with as_entry(e):
            y = self._rounded_op(lambda part: relu(part, **self._on), a)
        return self._push("relu", y, [a], y, reads_inputs=False)

    @entry_point()
    def dropout(self, x, generator, p, *, offset=0, stream=None, entry, **unknown) -> Value:
        """`generator.dropout(x, p, offset, stream)` computed on the tape's backend and mode:
        element i keyed by (seed, stream, offset + i), the stream taken from the generator
        as its own dropout takes it; backward replays the key there."""
        e = entry
        a = self._own(e, "x", x)
        if not isinstance(generator, Generator):
            refuse(e, "generator", f"must be a mojolike.Generator, not {type(generator).__name__}")
        with as_entry(e):
            runner, y, key = self._dropout_draw(e, generator, a.data, p, offset, stream)
        return self._push("dropout", y, [a], (runner, key), reads_inputs=False)

    def _dropout_draw(self, e: str, generator: Generator, x, p, offset, stream):
        """(the generator that ran, y, key): the generator's own draw when it runs on the tape's
        backend and mode, else the same seed's draw there, taking the generator's stream."""
        if registry.resolve(e, generator._backend, generator._mode) == (self.backend,
                                                                        self.numeric_mode):
            return (generator, *generator.dropout(x, p, offset=offset, stream=stream))
        here = Generator(generator.seed, **self._on)
        if stream is not None:
            return (here, *here.dropout(x, p, offset=offset, stream=stream))
        s = generator.state_dict()["counter"]
        if s >= TWO64:
            generator.next_stream()  # its refusal: every stream of the seed is used
        y, key = here.dropout(x, p, offset=offset, stream=s)  # every argument checked here
        taken = generator.next_stream()  # the counter moves once the draw is accepted
        if taken != s:  # another thread took s meanwhile
            y, key = here.dropout(x, p, offset=offset, stream=taken)
        return here, y, key

    @entry_point(also=_loss_keywords(cross_entropy), refuses=_LOSS_OWN)
    def cross_entropy(self, logits, targets, *, entry, **options) -> Value:
        """`mojolike.cross_entropy(logits, targets, **options)` with reduction 'mean' (default)
        or 'sum': a scalar; its gradient is computed here and kept for backward."""
        e = entry
        _reduction(e, options)
        z = self._own(e, "logits", logits)
        with as_entry(e):
            loss, dz = cross_entropy(z.data, targets, return_grad=True, **options, **self._on)
        return self._push("cross_entropy", np.array(loss, np.float32), [z], (dz,))

    @entry_point(also=_loss_keywords(chunked_lm_head_loss), refuses=_LOSS_OWN)
    def chunked_lm_head_loss(self, hidden, weight, targets, *, entry, **options) -> Value:
        """`mojolike.chunked_lm_head_loss(hidden, weight, targets, **options)`, reduction 'mean'
        or 'sum': a scalar; d_hidden and d_weight are computed here and kept for backward."""
        e = entry
        _reduction(e, options)
        h, w = self._own(e, "hidden", hidden), self._own(e, "weight", weight)
        with as_entry(e):
            loss, dh, dw = chunked_lm_head_loss(h.data, w.data, targets, return_grad=True,
                                                **options, **self._on)
        return self._push("chunked_lm_head_loss", np.array(loss, np.float32), [h, w], (dh, dw))

    # -- backward -----------------------------------------------------------------------------
    @entry_point()
    def backward(self, loss, seed=1.0, retain_graph=False, *, entry,
                 **unknown) -> list[np.ndarray | None]:
        """The gradients of `seed * loss` with respect to the parameters, in registration order
        (None where the loss does not reach a parameter). `loss` a scalar Value of this tape,
        `seed` a finite real rounded to float32 (a -0.0 stays -0.0). Every gradient is a new
        array the caller owns (an optimizer may scale it in place).

        `retain_graph` (torch's name and default): False frees the graph this backward
        walked once it has returned its gradients (its nodes drop their kept buffers and
        their inputs; a later backward through them is refused); True keeps it for
        another backward. A backward that raises (a refusal, an interrupt) frees nothing
        and changes nothing the graph kept."""
        e = entry
        top = self._own(e, "loss", loss)
        if top.shape != ():
            refuse(e, "loss", f"has shape {top.shape}; backward starts from a scalar (reduce it "
                              f"with sum or mean)")
        s = checks.real32(e, "seed", seed)
        retain = checks.switch(e, "retain_graph", retain_graph)
        walk = self._reached(e, top)
        registry.check_fp_state(e, self.numeric_mode)
        slots: dict[int, list] = {}
        if top.requires_grad:
            self._contribute(slots, top, np.array(s, np.float32), True)
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            for node_value in walk:  # newest first
                slot = self._gradient(slots, node_value)
                if slot is None:
                    continue
                dy, owned = slot
                node = node_value._node
                back = getattr(self, "_back_" + node.op)
                parts = back(node, dy, owned) if node.op in _REUSES_DY else back(node, dy)
                for v, part in zip(node.inputs, parts):
                    if part is not None and v.requires_grad:
                        self._contribute(slots, v, *part)
        # a kept buffer is read-only during the walk; once the graph is freed, one parameter
        # may take it without a copy
        freed = set() if retain else {id(a) for v in walk if v._node.op in _KEEPS_GRADIENTS
                                      for a in v._node.saved}
        out = []
        for p in self._params:
            slot = self._gradient(slots, p)
            if slot is None or slot[1]:
                out.append(None if slot is None else slot[0])
            elif id(slot[0]) in freed:
                freed.discard(id(slot[0]))
                out.append(slot[0])
            else:
                out.append(slot[0].copy())
        if not retain:
            for v in walk:
                v._node.saved, v._node.inputs, v._node.spent = None, (), True
        return out

    def _reached(self, e: str, top: Value) -> list[Value]:
        """The op values the walk from `top` applies, newest first; refuses freed nodes."""
        if not top.requires_grad:
            return []
        seen, todo, walk = {top._index}, [top], []
        while todo:
            v = todo.pop()
            if v._node is None:
                continue  # a parameter
            walk.append(v)
            for u in v._node.inputs:
                if u.requires_grad and u._index not in seen:
                    seen.add(u._index)
                    todo.append(u)
        walk.sort(key=lambda v: v._index, reverse=True)
        spent = next((v for v in walk if v._node.spent), None)
        if spent is not None:
            refuse(e, "loss", f"reaches a {spent._node.op} node that an earlier backward freed (it "
                              f"ran without retain_graph, as torch's default); pass "
                              f"retain_graph=True to the backward that should keep the graph, "
                              f"or reset_to a mark and run the forward again")
        return walk

    # The order of contributions is contracts/train.md clause 3: `_contribute` is called in the
    # walk's order and adds each contribution to the running gradient; `_gradient` takes the
    # whole gradient when the walk reaches the value's own node (or at the end, for a parameter).
    def _contribute(self, slots: dict, v: Value, g: np.ndarray, owned: bool) -> None:
        slot = slots.get(v._index)
        if isinstance(g, dict):  # a part of a split: the hub joins its parts' gradients
            if slot is None:
                slots[v._index] = [dict(g), True]
            else:
                slot[0].update(g)
        elif slot is None:
            slots[v._index] = [g, owned]
        elif slot[1]:
            np.add(slot[0], g, out=slot[0])  # this value's own buffer
        else:
            slots[v._index] = [binary(np.add, slot[0], g), True]  # a shared buffer: copy first

    def _gradient(self, slots: dict, v: Value):
        """[gradient, owned] of `v`, removed from `slots`; None when nothing reached it."""
        return slots.pop(v._index, None)

    def _back_linear(self, node, dy):
        x, w = node.inputs[0].data, node.inputs[1].data  # kept as they came
        bias = len(node.inputs) == 3
        if x.dtype == np.float32:
            dx, dw, db = linear_backward(dy, x, w, bias=bias, **self._on)
        else:  # one low type: widened inside the products, no float32 copy of x or w
            dx, dw, db = linear_backward_low(BACKWARD, dy, x, w, bias, **self._on)
        return [(dx, True), (dw, True), (db, True)]

    def _back_embedding(self, node, dy):
        ids, padding_idx = node.saved
        rows = node.inputs[0].shape[0]
        return [(embedding_backward(dy, ids, rows, padding_idx, **self._on), True)]

    def _back_rms_norm(self, node, dy):
        w = node.inputs[1].data if len(node.inputs) == 2 else None
        dx, dw = rms_norm_backward(dy, node.inputs[0].data, w, node.saved, **self._on)
        return [(dx, True), (dw, True)]

    def _back_relu(self, node, dy, owned):
        off = node.saved <= 0
        if owned and dy.flags.writeable:  # the walk's own buffer: no second activation-sized one
            np.copyto(dy, np.float32(0.0), where=off)
            return [(dy, True)]
        return [(np.where(off, np.float32(0.0), dy).astype(np.float32, copy=False), True)]

    def _back_dropout(self, node, dy):
        generator, key = node.saved
        return [(generator.dropout_backward(dy, key), True)]

    def _back_cross_entropy(self, node, dy):
        return [_scaled(node.saved[0], dy)]

    def _back_chunked_lm_head_loss(self, node, dy):
        dh, dw = node.saved
        return [_scaled(dh, dy), _scaled(dw, dy)]

    # -- helpers ------------------------------------------------------------------------------
    def _own(self, e: str, name: str, v, *, low: bool = False) -> Value:
        """`v` as a live Value of this tape, else a refusal naming the argument; a bfloat16 /
        float16 value only where the op takes one (`low`)."""
        if not isinstance(v, Value):
            hint = " (register arrays with tape.param or tape.const)" if isinstance(v, np.ndarray) else ""
            refuse(e, name, f"must be a Value of this tape, not {type(v).__name__}{hint}")
        if v._tape is None:
            refuse(e, name, "was dropped by reset_to; values made after a mark live until the "
                            "tape is reset to it")
        if v._tape is not self:
            refuse(e, name, "belongs to another tape")
        if not low:
            low_refusal(e, name, v)
        return v

    def _push(self, op: str, data: np.ndarray, inputs: list[Value], saved, *,
              reads_inputs: bool = True) -> Value:
        """The op's value; its node keeps `inputs`, or only their Handles when the backward
        reads none of their data (`reads_inputs=False`)."""
        grad = any(v.requires_grad for v in inputs)
        kept = tuple(inputs) if reads_inputs else tuple(Handle(v) for v in inputs)
        return self._register(Value(data, grad, self, self._next, _Node(op, kept, saved), "op"))


# -- module helpers ---------------------------------------------------------------------------
def _borrow(e: str, array) -> np.ndarray:
    """A float32 C-contiguous array sharing the caller's memory (refused otherwise)."""
    flat = checks.as_f32(e, "array", array)
    return array if isinstance(array, np.ndarray) else flat.reshape(checks.shape_of(array))


def _reduction(e: str, options: dict) -> None:
    if options.get("reduction", "mean") not in ("mean", "sum"):
        refuse(e, "reduction", "must be 'mean' or 'sum': the tape's losses are scalars",
               value=options["reduction"])


def _scaled(kept: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, bool]:
    """A loss's kept gradient times the upstream scalar (x * 1 is x: skipped when it is 1; the
    kept buffer is then shared, so a later contribution copies it instead of adding in place)."""
    return (kept, False) if float(dy) == 1.0 else (binary(np.multiply, kept, dy), True)
