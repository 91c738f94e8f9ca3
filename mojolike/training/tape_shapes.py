"""The tape's shape ops: reshape/view, transpose/permute, slicing, cat/split, detach.

Every op moves values exactly (no arithmetic), and its backward is the inverse
movement: reshape's reshapes back, a permutation's applies the inverse permutation,
slicing's scatters the gradient into +0.0 zeros of the input's shape, cat's slices
the gradient into its inputs' parts, split's concatenates its parts' gradients
(+0.0 for a part the loss does not reach). Results are C-contiguous: a reshape
shares its input's buffer, the others are copies (torch's views; values on a tape
are never written in place, so a copy and a view read the same).

Indexing takes integers (negative ones from the end), slices with a positive step,
`...` and None, as torch's basic indexing; lists, arrays, booleans and Values
(advanced indexing) are refused by name. An op whose result would be empty is
refused: empty values are not covered.

Every op but cat and detach also moves a bfloat16 or float16 value, keeping its type
(contracts/mixed.md clause 30); none keeps its input's array for the backward, only its
shape.

Reproducibility: no op here rounds, so values and gradients are the oracle's bits
on every backend; the fan-in of a value read by several parts is contracts/train.md
clause 3.

>>> import numpy as np, mojolike
>>> tape = mojolike.Tape(backend="oracle")
>>> x = tape.param(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> a, b = x.split([1, 2], dim=1)
>>> b.T.data.tolist(), x[1, ::2].data.tolist()
([[1.0, 4.0], [2.0, 5.0]], [3.0, 5.0])
>>> tape.backward(b.sum())[0].tolist()
[[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse
from .tape_base import Value


def _int(v) -> bool:
    return checks.is_int(v)


class ShapeOps:
    """Exact data movement on the tape (a mixin of Tape)."""

    # -- reshape / view -----------------------------------------------------------------------
    @entry_point()
    def reshape(self, x, *shape, entry, **unknown) -> Value:
        """torch's reshape: `shape` as separate ints or one tuple; one -1 is inferred."""
        return self._reshape(entry, "reshape", x, shape)

    @entry_point()
    def view(self, x, *shape, entry, **unknown) -> Value:
        """torch's view: as `reshape` (a tape's values are C-contiguous, so every view exists)."""
        return self._reshape(entry, "view", x, shape)

    def _reshape(self, e: str, op: str, x, shape) -> Value:
        a = self._own(e, "x", x, low=True)
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        dims = [checks.integer(e, "shape", n, low=-1, what="a size >= 0, or -1 once")
                for n in shape]
        if dims.count(-1) > 1:
            refuse(e, "shape", "has -1 more than once; only one size can be inferred",
                   value=tuple(dims))
        known = math.prod(n for n in dims if n != -1)
        if -1 in dims and known and a.data.size % known == 0:
            dims[dims.index(-1)] = a.data.size // known
        if math.prod(dims) != a.data.size or -1 in dims:
            refuse(e, "shape", f"{tuple(shape)} is invalid for a value of {a.data.size} elements "
                               f"(shape {a.shape})")
        return self._push(op, a.data.reshape(tuple(dims)), [a], None, reads_inputs=False)

    def _back_reshape(self, node, dy):
        return [(dy.reshape(node.inputs[0].shape), False)]  # a view of dy: shared

    _back_view = _back_reshape

    # -- transpose / permute ------------------------------------------------------------------
    @entry_point()
    def transpose(self, x, dim0, dim1, *, entry, **unknown) -> Value:
        """torch's transpose: dimensions dim0 and dim1 swapped (an exact copy)."""
        a = self._own(entry, "x", x, low=True)
        d0, d1 = (self._axis(entry, n, d, a.data.ndim) for n, d in (("dim0", dim0), ("dim1", dim1)))
        perm = list(range(a.data.ndim))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return self._permuted(entry, "transpose", a, tuple(perm))

    @entry_point()
    def permute(self, x, *dims, entry, **unknown) -> Value:
        """torch's permute: output dimension i is input dimension dims[i] (an exact copy)."""
        a = self._own(entry, "x", x, low=True)
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        perm = tuple(self._axis(entry, "dims", d, a.data.ndim) for d in dims)
        if sorted(perm) != list(range(a.data.ndim)):
            refuse(entry, "dims", f"{tuple(dims)} is not a permutation of the {a.data.ndim} "
                                  f"dimensions of {a.shape}")
        return self._permuted(entry, "permute", a, perm)

    @entry_point()
    def T(self, x, *, entry, **unknown) -> Value:
        """x.T of a 2-D value; other ranks are refused (torch deprecates .T on them: use
        permute, or mT for the last two dimensions)."""
        a = self._own(entry, "x", x, low=True)
        if a.data.ndim != 2:
            refuse(entry, "x", f"has shape {a.shape}; .T is for 2-D values (torch deprecates it "
                               f"otherwise): use .mT or permute")
        return self._permuted(entry, "T", a, (1, 0))

    @entry_point()
    def mT(self, x, *, entry, **unknown) -> Value:
        """x.mT: the last two dimensions swapped (at least 2-D)."""
        a = self._own(entry, "x", x, low=True)
        n = a.data.ndim
        if n < 2:
            refuse(entry, "x", f"has shape {a.shape}; .mT needs at least 2 dimensions")
        return self._permuted(entry, "mT", a, tuple(range(n - 2)) + (n - 1, n - 2))

    def _axis(self, e: str, name: str, d, ndim: int) -> int:
        if ndim == 0:
            refuse(e, "x", "is 0-d: it has no dimension to move")
        return checks.integer(e, name, d, low=-ndim, high=ndim - 1,
                              what=f"a dimension in [{-ndim}, {ndim - 1}]") % ndim

    def _permuted(self, e: str, op: str, a: Value, perm: tuple[int, ...]) -> Value:
        y = np.ascontiguousarray(np.transpose(a.data, perm))
        return self._push(op, y, [a], perm, reads_inputs=False)

    def _back_permute(self, node, dy):
        inverse = tuple(np.argsort(node.saved).tolist())
        return [(np.ascontiguousarray(np.transpose(dy, inverse)), False)]

    _back_transpose = _back_T = _back_mT = _back_permute

    # -- slicing ------------------------------------------------------------------------------
    @entry_point()
    def getitem(self, x, key, *, entry, **unknown) -> Value:
        """x[key] with torch's basic indexing: integers, slices with a positive step, `...`,
        None (an exact copy); backward scatters into +0.0 zeros of x's shape."""
        a = self._own(entry, "x", x, low=True)
        items = key if isinstance(key, tuple) else (key,)
        norm = []
        for it in items:
            if it is None or it is Ellipsis:
                norm.append(it)
            elif isinstance(it, slice):
                parts = [s if s is None else self._index(entry, s) for s in
                         (it.start, it.stop, it.step)]
                if parts[2] is not None and parts[2] <= 0:
                    refuse(entry, "key", f"has a slice step of {parts[2]}; steps must be positive "
                                         f"(as torch requires)", value=key)
                norm.append(slice(*parts))
            else:
                norm.append(self._index(entry, it))
        if sum(it is Ellipsis for it in norm) > 1:
            refuse(entry, "key", "has more than one '...'", value=key)
        return self._slice(entry, "getitem", a, tuple(norm), key)

    @entry_point()
    def narrow(self, x, dim, start, length, *, entry, **unknown) -> Value:
        """torch.narrow: elements start .. start + length - 1 along dim (start may be negative,
        from the end)."""
        a = self._own(entry, "x", x, low=True)
        d = self._axis(entry, "dim", dim, a.data.ndim)
        n = a.shape[d]
        s = checks.integer(entry, "start", start, low=-n, high=n,
                           what=f"a position in [{-n}, {n}] of dimension {d}")
        if s < 0:
            s += n
        ln = checks.integer(entry, "length", length, low=1, high=n - s,
                            what=f"at least 1 and at most {n - s} (the rest of dimension {d})")
        key = (slice(None),) * d + (slice(s, s + ln),)
        return self._slice(entry, "narrow", a, key, (dim, start, length))

    def _index(self, e: str, v) -> int:
        """An integer of a key, else the refusal of advanced indexing."""
        if _int(v):
            return operator.index(v)
        if isinstance(v, Value):
            what = "a Value"
        elif isinstance(v, (bool, np.bool_)):
            what = "a bool"
        else:
            what = type(v).__name__
        refuse(e, "key", f"holds {what}: advanced indexing (lists, arrays, booleans, Values) is "
                         f"not covered; use integers, slices, '...' and None")

    def _slice(self, e: str, op: str, a: Value, key: tuple, shown) -> Value:
        try:
            y = a.data[key]
        except IndexError as err:
            refuse(e, "key", f"does not index a value of shape {a.shape}: {err}", value=shown)
        y = np.array(y, a.data.dtype, copy=True, order="C")
        if y.size == 0:
            refuse(e, "key", f"selects no element of the value of shape {a.shape}; empty values "
                             f"are not covered", value=shown)
        return self._push(op, y, [a], key, reads_inputs=False)

    def _back_getitem(self, node, dy):
        z = np.zeros(node.inputs[0].shape, np.float32)
        z[node.saved] = dy
        return [(z, True)]

    _back_narrow = _back_getitem

    # -- cat / split --------------------------------------------------------------------------
    @entry_point()
    def cat(self, tensors, dim=0, *, entry, **unknown) -> Value:
        """torch.cat: the values joined along dim (same shapes elsewhere); backward gives each
        its part of the gradient."""
        if isinstance(tensors, Value) or not isinstance(tensors, (list, tuple)) or not tensors:
            refuse(entry, "tensors", "must be a non-empty list or tuple of Values of this tape")
        ins = [self._own(entry, f"tensors[{i}]", t) for i, t in enumerate(tensors)]
        first = ins[0].shape
        d = self._axis(entry, "dim", dim, len(first))
        for i, v in enumerate(ins):
            if v.data.ndim != len(first) or v.shape[:d] + v.shape[d + 1:] != first[:d] + first[d + 1:]:
                refuse(entry, f"tensors[{i}]", f"has shape {v.shape} but tensors[0] has {first}; "
                                               f"they must match except along dim {d}")
        y = np.concatenate([v.data for v in ins], axis=d)
        return self._push("cat", y, ins, (d, np.cumsum([v.shape[d] for v in ins])[:-1].tolist()),
                          reads_inputs=False)

    def _back_cat(self, node, dy):
        d, cuts = node.saved
        return [(np.ascontiguousarray(p), False) for p in np.split(dy, cuts, axis=d)]

    @entry_point()
    def split(self, x, split_size_or_sections, dim=0, *, entry, **unknown) -> tuple[Value, ...]:
        """torch.split: parts of split_size_or_sections along dim (an int: that size, the last
        part smaller; a list: those sizes, summing to the dimension). One node: the backward
        concatenates the parts' gradients, +0.0 for a part the loss does not reach."""
        a = self._own(entry, "x", x, low=True)
        d = self._axis(entry, "dim", dim, a.data.ndim)
        n = a.shape[d]
        s = split_size_or_sections
        if isinstance(s, (list, tuple)):
            sizes = [checks.integer(entry, "split_size_or_sections", k, low=1) for k in s]
            if not sizes or sum(sizes) != n:
                refuse(entry, "split_size_or_sections", f"{list(s)} does not sum to {n}, the size "
                                                        f"of dimension {d}")
        else:
            k = checks.integer(entry, "split_size_or_sections", s, low=1,
                               what="a positive part size, or a list of sizes")
            sizes = [k] * (n // k) + ([n % k] if n % k else [])
        # the hub: one node whose gradient is the parts' gradients, joined once all are in
        hub = self._push("split", a.data, [a], (d, sizes), reads_inputs=False)
        parts, at = [], 0
        for i, m in enumerate(sizes):
            key = (slice(None),) * d + (slice(at, at + m),)
            at += m
            parts.append(self._push("split_part", np.array(a.data[key], a.data.dtype, copy=True,
                                                            order="C"), [hub], i,
                                    reads_inputs=False))
        return tuple(parts)

    def _back_split_part(self, node, dy):
        return [({node.saved: dy}, False)]  # a piece of the hub's gradient (Tape._contribute)

    def _back_split(self, node, pieces):
        d, sizes = node.saved
        shape = list(node.inputs[0].shape)
        parts = []
        for i, m in enumerate(sizes):
            shape[d] = m
            parts.append(pieces[i] if i in pieces else np.zeros(shape, np.float32))
        return [(np.concatenate(parts, axis=d), True)]

    # -- detach -------------------------------------------------------------------------------
    @entry_point()
    def detach(self, x, *, entry, **unknown) -> Value:
        """torch's detach: the same data (shared), no gradient flows through it."""
        a = self._own(entry, "x", x)
        return self._leaf(a.data, False, "detached")
