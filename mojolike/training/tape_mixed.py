"""The tape's casts: `Tape.cast` between float32 and bfloat16 / float16, and the rule for
low-precision values on the tape.

`tape.cast(x, dtype)` forwards `mojolike.cast(x.data, dtype)` (round to nearest even when
narrowing, exact when widening) and passes the gradient reaching it to `x` unchanged: the
gradients of a low-precision value are float32, as the gradient of the float32 source
(torch's backward of `.to(dtype)`, kept in float32). `twin=` gives the rounded value
already computed: the low-precision copy of a float32 master weight, kept equal to
`cast(master, dtype)` by whatever updates the master, which the forward then reads
without a pass over the master.

Low-precision values are taken by the tape's contractions, `linear`, `matmul` and
`scaled_dot_product_attention` (all operands one low type; the result is float32, the
float32 op on the widened operands, contracts/mixed.md clauses 9 and 29), by `embedding`
(a low-precision table), `layer_norm` (a float32 result) and `gelu` and `relu` (a result
of the input's type: the float32 op rounded once), all of which keep them in their own
precision for the backward and widen them there, exactly (clause 30); every other op
refuses them by name, and `tape.cast(v, "float32")` widens one. relu and gelu on a
low-precision value widen it a block at a time (`_rounded_op`), and the backward of linear
takes the kept input and weight as they are (their products widen them while packing,
ops.layers.linear_backward_low): no step holds a float32 copy of a whole low-precision
activation.

Reproducibility: a cast rounds each element on its own (clause 8) and the contractions
give the float32 op's bits on every backend, so a low-precision tape's values and
gradients are the oracle's bits on every backend and thread count.

>>> import numpy as np, mojolike
>>> tape = mojolike.Tape(backend="oracle")
>>> w = tape.param(np.float32([[1.00390625, 2.0]]))      # 1 + 2^-8: a bfloat16 tie
>>> x = tape.const(np.float32([[3.0, 1.0]]))
>>> y = tape.linear(tape.cast(x, "bfloat16"), tape.cast(w, "bfloat16"))
>>> y.data.tolist(), tape.backward(tape.sum(y))[0].tolist()  # 3 * 1.0 + 1 * 2: the tie to even
([[5.0]], [[3.0, 1.0]])
"""
from __future__ import annotations

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..ops.mixed import cast
from .tape_base import Value, as_entry

WIDE_ELEMENTS = 1 << 18  # an elementwise op on a low-precision value widens this many at a time


class MixedOps:
    """`Tape.cast` and the widening of low-precision inputs (a mixin of Tape)."""

    @entry_point()
    def cast(self, x, dtype, twin=None, *, entry, **unknown) -> Value:
        """`mojolike.cast(x, dtype)` as a Value: float32 to "bfloat16" / "float16", or either
        of them to "float32"; the gradient reaching the result reaches `x` unchanged.

        `twin`: optional, only when narrowing a float32 value: a C-contiguous array of
        `dtype` and x's shape that holds `cast(x, dtype)` already (a master weight's twin);
        the result's data is that array itself, borrowed as `param` borrows (keep it
        unchanged until backward)."""
        e = entry
        v = self._own(e, "x", x, low=True)
        target = checks.cast_dtype(e, "dtype", dtype)
        source = checks.cast_type_of(v.data)
        if target == source:
            refuse(e, "dtype", "is x's own type; there is nothing to cast", value=target)
        if twin is None:
            with as_entry(e):
                data = cast(v.data, target, **self._on)
        else:
            if source != "float32":
                refuse(e, "twin", "is a rounded copy of a float32 value; x is " + source)
            t, kind = checks.as_cast_buffer(e, "twin", twin)
            if kind != target or np.shape(twin) != v.shape:
                refuse(e, "twin", f"must be a {target} array of x's shape {v.shape}, not "
                                  f"{kind} {np.shape(twin)}")
            if np.may_share_memory(t, v.data):
                refuse(e, "twin", "shares memory with x")
            data = twin
        return self._push("cast", data, [v], None, reads_inputs=False)

    def _back_cast(self, node, dy, owned):
        return [(dy, owned)]  # passed on as it is, owned by the walk only if it was

    def _wide(self, v: Value) -> np.ndarray:
        """A value's data as float32: itself, or its low-precision data widened exactly."""
        if v.data.dtype == np.float32:
            return v.data
        return cast(v.data, "float32", **self._on)

    def _rounded_op(self, op, like: Value) -> np.ndarray:
        """The elementwise float32 op on x = like.data, a result of x's type: op(x) itself
        for a float32 x; for a low-precision x, op(x widened) rounded once, run WIDE_ELEMENTS
        elements at a time and rounded into the result's slots, so no float32 copy of a
        whole activation is made (each element's operations, so its bits, are the whole
        call's)."""
        if like.data.dtype == np.float32:
            return op(like.data)
        x = np.ascontiguousarray(like.data).reshape(-1)
        y = np.empty(like.shape, like.data.dtype)
        flat, kind = y.reshape(-1), checks.cast_type_of(like.data)
        for lo in range(0, x.size, WIDE_ELEMENTS):
            hi = min(lo + WIDE_ELEMENTS, x.size)
            part = op(cast(x[lo:hi], "float32", **self._on))
            cast(part, kind, out=flat[lo:hi], **self._on)
        return y


def low_refusal(e: str, name: str, v: Value) -> None:
    """Refuse a low-precision value where an op takes float32 only."""
    if v.data.dtype != np.float32:
        refuse(e, name, f"is a {checks.cast_type_of(v.data)} value; this op takes float32 values "
                        f"(widen it with tape.cast(x, 'float32'); linear, matmul, attention, "
                        f"embedding, layer_norm, gelu and relu take low-precision values as "
                        f"they are)")
