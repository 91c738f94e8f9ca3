"""The tape's values and nodes: `Value` with torch's operators and methods, each delegating to its tape.

A `Value` is what every `mojolike.Tape` op takes and returns. Its operators and
methods are spellings of the tape's ops, so that model code reads as torch code:
`a + b` is `tape.add(a, b)`, `2 * a` is `tape.mul(2, a)`, `a @ b` is
`tape.matmul(a, b)`, `-a` is `tape.neg(a)`, `a.T` / `a.mT` are transposes,
`a.view(2, -1)`, `a.transpose(1, 2)`, `a[0, 1:3]`, `a.split(4, dim=1)`,
`a.sum(dim=0)` and so on. A refusal names the tape's op (`mojolike.Tape.add`), as
the op itself would.

Reproducibility: a method computes nothing itself; the op it calls is a certified
function or one IEEE operation per element (contracts/transformer.md clause 24).

>>> import numpy as np, mojolike
>>> tape = mojolike.Tape(backend="oracle")
>>> w = tape.param(np.float32([[1, 2], [3, 4]]))
>>> y = (2 * w - 1).T @ w
>>> y.data.tolist()
[[16.0, 22.0], [24.0, 34.0]]
>>> tape.backward((-y).mean())[0].tolist()
[[-2.5, -2.5], [-6.5, -6.5]]
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import Refusal, refuse

BACKWARD = "mojolike.Tape.backward"  # the entry a backward rule's own calls run under


class _Node:
    __slots__ = ("inputs", "op", "saved", "spent")

    def __init__(self, op, inputs, saved):
        self.op, self.inputs, self.saved, self.spent = op, inputs, saved, False


class Handle:
    """What a node keeps of an input whose data its backward never reads: the input's place
    in the graph (index, node, requires_grad) and its shape, not its array, so the array is
    freed as soon as nothing else holds it (`a + b` keeps neither operand's data alive)."""

    __slots__ = ("_index", "_node", "requires_grad", "shape")

    def __init__(self, v: Value):
        self._index, self._node, self.requires_grad, self.shape = (
            v._index, v._node, v.requires_grad, v.shape)


class Value:
    """A value on a tape: `data` (a float32 array; a 0-d array for a scalar loss), `shape`,
    and `requires_grad` (a parameter, or computed from one). Made by `Tape.param`,
    `Tape.const` and the tape's ops; valid until `Tape.reset_to` drops it. The tape holds
    only its parameters: any other value lives while the caller or a node that reads it
    holds it.

    Operators (torch's): `+ - * /` with a Value or a Python number on either side
    (broadcasting), `@`, unary `-`; `.T` (2-D only), `.mT` (the last two dimensions).
    Methods: `reshape`, `view`, `transpose`, `permute`, `narrow`, `split`, indexing with
    integers and basic slices, `sum`, `mean`, `softmax`, `log_softmax`, `exp`, `log`,
    `tanh`, `detach`, `contiguous` (the value itself: a tape's values are always
    C-contiguous), `size`, `dim`, `item`."""

    __slots__ = ("__weakref__", "_index", "_kind", "_node", "_tape", "data", "requires_grad")
    _ENTRY = "mojolike.Tape.Value"
    __array_ufunc__ = None  # `array + value` calls Value.__radd__ (a refusal), not numpy's loop

    def __init__(self, data, requires_grad, tape, index, node, kind):
        self.data, self.requires_grad = data, requires_grad
        self._tape, self._index, self._node, self._kind = tape, index, node, kind

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @entry_point()
    def item(self, *, entry, **unknown) -> float:
        """The value of a one-element Value as a Python float (the float32 value, exactly)."""
        if self.data.size != 1:
            refuse(entry, "value", f"has shape {self.shape}; item() needs one element")
        return float(self.data.reshape(-1)[0])

    @entry_point()
    def size(self, dim=None, *, entry, **unknown):
        """torch's size(): the shape, or the size of dimension `dim`."""
        if dim is None:
            return self.shape
        n = self.data.ndim
        d = checks.integer(entry, "dim", dim, low=-n, high=n - 1,
                           what=f"a dimension of the {n}-D value")
        return self.shape[d]

    @entry_point()
    def dim(self, **unknown) -> int:
        """The number of dimensions (torch's dim())."""
        return self.data.ndim

    def __len__(self) -> int:
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d Value")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        what = self._kind if self._node is None else self._node.op
        return f"Value({what}, shape={self.shape}, requires_grad={self.requires_grad})"

    def _on(self, op: str, name: str = "x"):
        """The tape this value belongs to, else a refusal naming the tape's op and argument."""
        if self._tape is None:
            refuse(f"mojolike.Tape.{op}", name, "was dropped by reset_to; values made after a mark "
                                             "live until the tape is reset to it")
        return self._tape

    # -- operators: the tape's ops, torch's reading ---------------------------------------------
    def __add__(self, other):
        return self._on("add", "a").add(self, other)

    def __radd__(self, other):
        return self._on("add", "b").add(other, self)

    def __sub__(self, other):
        return self._on("sub", "a").sub(self, other)

    def __rsub__(self, other):
        return self._on("sub", "b").sub(other, self)

    def __mul__(self, other):
        return self._on("mul", "a").mul(self, other)

    def __rmul__(self, other):
        return self._on("mul", "b").mul(other, self)

    def __truediv__(self, other):
        return self._on("div", "a").div(self, other)

    def __rtruediv__(self, other):
        return self._on("div", "b").div(other, self)

    def __matmul__(self, other):
        return self._on("matmul", "a").matmul(self, other)

    def __rmatmul__(self, other):
        return self._on("matmul", "b").matmul(other, self)

    def __neg__(self):
        return self._on("neg").neg(self)

    def __getitem__(self, key):
        return self._on("getitem").getitem(self, key)

    @property
    def T(self) -> Value:
        """The transpose of a 2-D value; other ranks are refused (torch deprecates them)."""
        return self._on("T").T(self)

    @property
    def mT(self) -> Value:
        """The transpose of the last two dimensions."""
        return self._on("mT").mT(self)

    # -- methods: the tape's ops ----------------------------------------------------------------
    @entry_point()
    def reshape(self, *shape, **unknown) -> Value:
        """`tape.reshape(self, *shape)`."""
        return self._on("reshape").reshape(self, *shape)

    @entry_point()
    def view(self, *shape, **unknown) -> Value:
        """`tape.view(self, *shape)`."""
        return self._on("view").view(self, *shape)

    @entry_point()
    def transpose(self, dim0, dim1, **unknown) -> Value:
        """`tape.transpose(self, dim0, dim1)`."""
        return self._on("transpose").transpose(self, dim0, dim1)

    @entry_point()
    def permute(self, *dims, **unknown) -> Value:
        """`tape.permute(self, *dims)`."""
        return self._on("permute").permute(self, *dims)

    @entry_point()
    def narrow(self, dim, start, length, **unknown) -> Value:
        """`tape.narrow(self, dim, start, length)`."""
        return self._on("narrow").narrow(self, dim, start, length)

    @entry_point()
    def split(self, split_size_or_sections, dim=0, **unknown) -> tuple[Value, ...]:
        """`tape.split(self, split_size_or_sections, dim)`."""
        return self._on("split").split(self, split_size_or_sections, dim)

    @entry_point()
    def sum(self, dim=None, keepdim=False, **unknown) -> Value:
        """`tape.sum(self, dim, keepdim)`."""
        return self._on("sum").sum(self, dim, keepdim)

    @entry_point()
    def mean(self, dim=None, keepdim=False, **unknown) -> Value:
        """`tape.mean(self, dim, keepdim)`."""
        return self._on("mean").mean(self, dim, keepdim)

    @entry_point()
    def softmax(self, dim=-1, **unknown) -> Value:
        """`tape.softmax(self, dim)`."""
        return self._on("softmax").softmax(self, dim)

    @entry_point()
    def log_softmax(self, dim=-1, **unknown) -> Value:
        """`tape.log_softmax(self, dim)`."""
        return self._on("log_softmax").log_softmax(self, dim)

    @entry_point()
    def exp(self, **unknown) -> Value:
        """`tape.exp(self)`."""
        return self._on("exp").exp(self)

    @entry_point()
    def log(self, **unknown) -> Value:
        """`tape.log(self)`."""
        return self._on("log").log(self)

    @entry_point()
    def tanh(self, **unknown) -> Value:
        """`tape.tanh(self)`."""
        return self._on("tanh").tanh(self)

    @entry_point()
    def detach(self, **unknown) -> Value:
        """`tape.detach(self)`."""
        return self._on("detach").detach(self)

    @entry_point()
    def contiguous(self, **unknown) -> Value:
        """The value itself: a tape's values are C-contiguous (torch's contiguous())."""
        return self


# -- helpers the tape's modules share ------------------------------------------------------------
@contextlib.contextmanager
def as_entry(entry: str):
    """Re-raise a certified op's refusal as the tape op's, same option and reason."""
    try:
        yield
    except Refusal as r:
        raise r.at(entry) from None


def binary(fn, a, b) -> np.ndarray:
    """fn(a, b) into a new float32 array of the broadcast shape (0-d stays an array): one
    IEEE operation per element."""
    out = np.empty(np.broadcast_shapes(np.shape(a), np.shape(b)), np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        fn(a, b, out=out)
    return out


def unary(fn, a) -> np.ndarray:
    """fn(a) into a new float32 array (one IEEE operation per element)."""
    out = np.empty(np.shape(a), np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        fn(a, out=out)
    return out
