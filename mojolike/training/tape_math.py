"""The tape's arithmetic: broadcasting add, sub, mul, div, neg, exp, log, tanh, and sum / mean over dims.

Operands broadcast by torch's rule (aligned from the right, each size equal or 1);
either may be a Python number, rounded to binary32 once (`checks.real32`) and a
constant. Every forward value is one IEEE operation per element or a correctly
rounded function (expf, logf, tanhf); every backward is one IEEE operation per
element in torch 2.13's formula order (derivatives.yaml), then, for an operand that
was broadcast, the fold over the broadcast dimensions (`mojolike.sum` over them, C
order ascending), reshaped to the operand's shape:

- add: dy to both. sub: dy to a, -dy to b.
- mul: dy * b to a, dy * a to b.
- div: dy / b to a; (-dy) * ((a / b) / b) to b (torch: -grad * ((self / other) / other)).
- neg: -dy. exp: dy * y. log: dy / x. tanh: dy * (1 - y * y) (torch's tanh_backward).
- sum over dims: dy at every reduced element. mean: dy / binary32(n), n the reduced count.

Reproducibility: the order of every operation is fixed by these formulas and the fold
tree alone, so values and gradients have the oracle's bits on every backend and
thread count.

>>> import numpy as np, mojolike
>>> tape = mojolike.Tape(backend="oracle")
>>> h = tape.param(np.float32([[1, 2], [3, 4]]))
>>> b = tape.param(np.float32([10, 20]))
>>> y = tape.mul(tape.add(h, b), 0.5)
>>> y.data.tolist()
[[5.5, 11.0], [6.5, 12.0]]
>>> dh, db = tape.backward(tape.sum(y))
>>> db.tolist()
[1.0, 1.0]
"""
from __future__ import annotations

import numbers
from fractions import Fraction

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..ops import transformer as tops
from ..ops.crmath import expf, logf, tanhf
from ..ops.fold import fold
from ..oracles import f32
from .tape_base import Value, as_entry, binary, unary

_ONE = np.float32(1.0)


def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_, np.ndarray))


class MathOps:
    """The tape's elementwise arithmetic and its reductions over dimensions (a mixin of Tape)."""

    # -- binary, broadcasting -------------------------------------------------------------------
    @entry_point()
    def add(self, a, b, *, entry, **unknown) -> Value:
        """a + b elementwise, broadcast (torch.add without alpha); a Python number is a constant."""
        u, v = self._operands(entry, a, b)
        return self._push("add", binary(np.add, u.data, v.data), [u, v], None, reads_inputs=False)

    @entry_point()
    def sub(self, a, b, *, entry, **unknown) -> Value:
        """a - b elementwise, broadcast; gradients dy and -dy."""
        u, v = self._operands(entry, a, b)
        return self._push("sub", binary(np.subtract, u.data, v.data), [u, v], None,
                          reads_inputs=False)

    @entry_point()
    def mul(self, a, b, *, entry, **unknown) -> Value:
        """a * b elementwise, broadcast; gradients dy * b and dy * a (one rounding each, then
        the fold over the dimensions the operand was broadcast along)."""
        u, v = self._operands(entry, a, b)
        return self._push("mul", binary(np.multiply, u.data, v.data), [u, v], None)

    @entry_point()
    def div(self, a, b, *, entry, **unknown) -> Value:
        """a / b elementwise, broadcast; gradients dy / b and (-dy) * ((a / b) / b), torch's
        formula, one rounding per operation in that order."""
        u, v = self._operands(entry, a, b)
        return self._push("div", binary(np.divide, u.data, v.data), [u, v], None)

    def _operands(self, e: str, a, b) -> tuple[Value, Value]:
        """Both operands as Values (a Python number as a constant), once they broadcast."""
        if _number(a) and _number(b):
            refuse(e, "a", "and b are both numbers; one of them must be a Value of this tape")
        u = None if _number(a) else self._own(e, "a", a)
        v = None if _number(b) else self._own(e, "b", b)
        sa, sb = (() if u is None else u.shape), (() if v is None else v.shape)
        try:
            np.broadcast_shapes(sa, sb)
        except ValueError:
            refuse(e, "b", f"has shape {sb}, which does not broadcast with a's {sa} (torch's "
                           f"rule: aligned from the right, each size equal or 1)")
        ca = None if u is not None else np.array(checks.real32(e, "a", a), np.float32)
        cb = None if v is not None else np.array(checks.real32(e, "b", b), np.float32)
        registry.check_fp_state(e, self.numeric_mode)
        return (u if u is not None else self._number(ca)), (v if v is not None else self._number(cb))

    def _number(self, c: np.ndarray) -> Value:
        """A 0-d constant no gradient reaches; outside the arena (only its node holds it)."""
        return Value(c, False, self, -1, None, "number")

    def _to_shape(self, g: np.ndarray, shape: tuple[int, ...], owned: bool):
        """(gradient, owned) of an operand of `shape` from g of the broadcast shape: the fold
        over the broadcast dimensions, C order ascending, reshaped to `shape`."""
        if g.shape == shape:
            return g, owned
        lead = g.ndim - len(shape)
        dims = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                          if n == 1 and g.shape[lead + i] != 1)
        if not dims:
            return g.reshape(shape), False
        return tops.sum(g, dim=dims, **self._on).reshape(shape), True

    def _back_add(self, node, dy):
        a, b = node.inputs
        return [self._to_shape(dy, a.shape, False) if a.requires_grad else None,
                self._to_shape(dy, b.shape, False) if b.requires_grad else None]

    def _back_sub(self, node, dy):
        a, b = node.inputs
        return [self._to_shape(dy, a.shape, False) if a.requires_grad else None,
                self._to_shape(unary(np.negative, dy), b.shape, True) if b.requires_grad else None]

    def _back_mul(self, node, dy):
        a, b = node.inputs
        return [self._to_shape(binary(np.multiply, dy, b.data), a.shape, True)
                if a.requires_grad else None,
                self._to_shape(binary(np.multiply, dy, a.data), b.shape, True)
                if b.requires_grad else None]

    def _back_div(self, node, dy):
        a, b = node.inputs
        da = db = None
        if a.requires_grad:
            da = self._to_shape(binary(np.divide, dy, b.data), a.shape, True)
        if b.requires_grad:
            q = binary(np.divide, binary(np.divide, a.data, b.data), b.data)
            db = self._to_shape(binary(np.multiply, unary(np.negative, dy), q), b.shape, True)
        return [da, db]

    # -- unary --------------------------------------------------------------------------------
    @entry_point()
    def neg(self, x, *, entry, **unknown) -> Value:
        """-x (exact); gradient -dy."""
        a = self._own(entry, "x", x)
        registry.check_fp_state(entry, self.numeric_mode)
        return self._push("neg", unary(np.negative, a.data), [a], None, reads_inputs=False)

    def _back_neg(self, node, dy):
        return [(unary(np.negative, dy), True)]

    @entry_point()
    def exp(self, x, *, entry, **unknown) -> Value:
        """`mojolike.math.expf(x)` (correctly rounded); gradient dy * y."""
        a = self._own(entry, "x", x)
        with as_entry(entry):
            y = expf(a.data, **self._on)
        return self._push("exp", y, [a], y, reads_inputs=False)

    def _back_exp(self, node, dy):
        return [(binary(np.multiply, dy, node.saved), True)]

    @entry_point()
    def log(self, x, *, entry, **unknown) -> Value:
        """`mojolike.math.logf(x)` (correctly rounded); gradient dy / x."""
        a = self._own(entry, "x", x)
        with as_entry(entry):
            y = logf(a.data, **self._on)
        return self._push("log", y, [a], None)

    def _back_log(self, node, dy):
        return [(binary(np.divide, dy, node.inputs[0].data), True)]

    @entry_point()
    def tanh(self, x, *, entry, **unknown) -> Value:
        """`mojolike.math.tanhf(x)` (correctly rounded); gradient dy * (1 - y * y), torch's
        tanh_backward order (product, subtraction, product)."""
        a = self._own(entry, "x", x)
        with as_entry(entry):
            y = tanhf(a.data, **self._on)
        return self._push("tanh", y, [a], y, reads_inputs=False)

    def _back_tanh(self, node, dy):
        y = node.saved
        return [(binary(np.multiply, dy, binary(np.subtract, _ONE, binary(np.multiply, y, y))),
                 True)]

    # -- reductions ---------------------------------------------------------------------------
    @entry_point()
    def sum(self, x, dim=None, keepdim=False, *, entry, **unknown) -> Value:
        """torch.sum: `mojolike.sum(x, dim, keepdim)` (dim None: the `fold` of every element, a
        scalar unless keepdim); backward puts the upstream gradient at every reduced element."""
        return self._reduce(entry, "sum", x, dim, keepdim)

    @entry_point()
    def mean(self, x, dim=None, keepdim=False, *, entry, **unknown) -> Value:
        """torch.mean: the sum divided by binary32(n), n the reduced count (one division);
        backward puts upstream / n (one rounding) at every reduced element."""
        return self._reduce(entry, "mean", x, dim, keepdim)

    def _reduce(self, e: str, op: str, x, dim, keepdim) -> Value:
        a = self._own(e, "x", x)
        with as_entry(e):
            dims = tops.reduced_dims(e, dim, a.data.ndim)
            keep = checks.switch(e, "keepdim", keepdim)
            count = 1
            for d in dims:
                count *= a.shape[d]
            n = np.float32(f32.round_fraction(Fraction(count)))
            if dim is None:  # every element: the one fold of the whole buffer
                s = np.array(fold(a.data, **self._on), np.float32)
                y = s if op == "sum" else binary(np.divide, s, n)
                if keep:
                    y = y.reshape((1,) * a.data.ndim)
            else:
                y = (tops.sum if op == "sum" else tops.mean)(a.data, dims, keep, **self._on)
        kept = tuple(1 if d in dims else a.shape[d] for d in range(a.data.ndim))
        return self._push(op, y, [a], (kept, n), reads_inputs=False)

    def _back_sum(self, node, dy):
        kept, _ = node.saved
        return [(_spread(dy, kept, node.inputs[0].shape), True)]

    def _back_mean(self, node, dy):
        kept, n = node.saved
        return [(_spread(binary(np.divide, dy, n), kept, node.inputs[0].shape), True)]


def _spread(g: np.ndarray, kept: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """g (the reduced shape, with or without keepdim) at every element it reduced: a copy."""
    return np.array(np.broadcast_to(g.reshape(kept), shape), np.float32, copy=True, order="C")
