"""The parameter registry: caller tensors in one order, with offsets, as the kernels take them.

Tensor order is param_id and the clip's summation order. One flat array, or
tensors laid end to end in one buffer (views of one allocation, in order), are
borrowed as one flat array. Any other list is borrowed as `Pieces` (the separate
arrays with their offsets) on backends whose kernels take a table of arrays
(`takes_pieces`: cpu-numba, cpu-cffi): kernels write the caller's memory
directly either way. Only on the others (cuda, the oracle) is such a list
packed: a flat copy is gathered before each step and scattered back after it
(`packed_` says so).

>>> import numpy as np
>>> arena = np.zeros(10, np.float32)
>>> Registry("demo", [arena[:4], arena[4:].reshape(2, 3)]).packed
False
>>> Registry("demo", [np.zeros(4, np.float32), np.zeros(6, np.float32)]).packed
True
>>> reg = Registry("demo", [np.zeros(4, np.float32), np.zeros(6, np.float32)], pieces=True)
>>> reg.packed, type(reg.tensors).__name__, reg.tensors.offsets.tolist()
(False, 'Pieces', [0, 4, 10])
"""
from __future__ import annotations

import weakref

import numpy as np

from ..core.checks import as_f32, disjoint, disjoint_arrays, disjoint_spans, shape_of
from ..core.pieces import Pieces, address, addresses_of
from ..core.pieces import table as address_table
from ..core.refusals import refuse

_F32 = np.dtype(np.float32)


def _is_sparse(obj) -> bool:
    return hasattr(obj, "nnz") or bool(getattr(obj, "is_sparse", False))


def as_list(entry: str, name: str, obj, *, none: bool = False) -> tuple[list, bool]:
    """(items, was_a_list): one buffer or a list/tuple of buffers (with `none`, also None items);
    refuses dicts and sparse tensors."""
    if isinstance(obj, (list, tuple)):
        if not obj:
            refuse(entry, name, "is an empty list; at least one tensor is needed")
        if any(isinstance(o, dict) for o in obj):
            refuse(entry, name, "holds dicts; parameter groups are a list of dicts and nothing else, "
                                "here a list of float32 arrays is expected")
        items, listed = list(obj), True
    else:
        items, listed = [obj], False
    if none and all(o is None for o in items):
        refuse(entry, name, "has no tensor (all None); at least one must have a gradient")
    for i, o in enumerate(items):
        if _is_sparse(o):
            refuse(entry, f"{name}[{i}]", "is sparse; sparse tensors are not covered, pass a dense "
                                          "float32 array")
    return items, listed


def end_to_end(views: list[np.ndarray]) -> np.ndarray | None:
    """A flat view spanning `views` when they lie end to end in one allocation, else None."""
    root = views[0]
    while isinstance(root.base, np.ndarray):
        root = root.base
    start = views[0].__array_interface__["data"][0]
    addr = start
    for v in views:
        if v.__array_interface__["data"][0] != addr:
            return None
        base = v
        while isinstance(base.base, np.ndarray):
            base = base.base
        if base is not root:
            return None
        addr += v.nbytes
    if not root.flags.c_contiguous or not root.flags.writeable:
        return None
    root_start = root.__array_interface__["data"][0]
    total = (addr - start) // 4
    return np.ndarray((total,), np.float32, buffer=root, offset=start - root_start)


class _Seen:
    """What `Registry._known` needs of gradients that passed every check: weak references to
    the arrays (None for a frozen slot), those that own their memory (their indices, their
    addresses), the operand's recipe (a flat view: its root, (root address, offset), size; or
    the pieces' address table) and which tensors are present."""

    def __init__(self, refs, frozen, owners, flat, table, present):
        self.refs, self.frozen, self.owners = refs, frozen, owners
        self.flat, self.table, self.present = flat, table, present

    @staticmethod
    def of(items, listed: bool, frozen: bool, operand, present):
        if not listed or any(g is not None and type(g) is not np.ndarray for g in items):
            return None
        flat = table = None
        if isinstance(operand, np.ndarray):
            root = operand
            while isinstance(root.base, np.ndarray):
                root = root.base
            flat = (weakref.ref(root), (address(root), address(operand) - address(root)),
                    operand.size)
        elif isinstance(operand, Pieces):
            table = operand.addresses
        mine = [i for i, g in enumerate(items) if g is not None and g.base is None]
        owners = (mine, addresses_of([items[i] for i in mine]))
        return _Seen([None if g is None else weakref.ref(g) for g in items], frozen, owners, flat,
                     table, tuple(present))


class Vouched:
    """Gradients whose checks the caller made itself (float32, C-contiguous, each of its
    parameter's shape, in host memory, read and not written by the step): each one's data
    address (None: frozen, no gradient) and the objects that own that memory, held for the
    step. mojolike.torch.optim reads these fields off the tensors, which costs less than a
    numpy view of each one every step; the registry takes them on backends whose kernels take
    an address table (`Registry.takes_vouched`) and checks that they share no byte with each
    other or with the parameters."""

    def __init__(self, holders: list, addresses: list):
        self.holders, self.addresses = holders, addresses
        self.present = [a is not None for a in addresses]


class Registry:
    """Caller parameters with offsets, as one flat array or as pieces; see the module docstring."""

    def __init__(self, entry: str, params, *, pieces: bool = False):
        """pieces: the kernels take `Pieces`, so separate arrays are never copied."""
        self.entry = entry
        self._pieces = pieces
        items, self.listed = as_list(entry, "params", params)
        name = (lambda i: f"params[{i}]") if self.listed else (lambda i: "params")
        self.views = [as_f32(entry, name(i), p, writable=True) for i, p in enumerate(items)]
        self._names = [name(i) for i in range(len(items))]
        disjoint(entry, list(zip(self._names, self.views)))
        self.shapes = [shape_of(p) for p in items]
        self.sizes = [v.size for v in self.views]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        # the caller's own objects, to notice a resize or reallocation under the registry
        self._items = [p if isinstance(p, np.ndarray) else None for p in items]
        self._layout = [(address(p), p.shape) if isinstance(p, np.ndarray) else None for p in items]
        borrowed = self.views[0] if len(self.views) == 1 else end_to_end(self.views)
        self.packed = borrowed is None and not pieces
        # flat: the parameters as one flat array (borrowed, or the packed copy), else None
        self.flat = np.empty(int(self.offsets[-1]), np.float32) if self.packed else borrowed
        # what the kernels update: the flat array, or the caller's arrays as pieces
        self.tensors = Pieces(self.views, self.offsets) if self.flat is None else self.flat
        self._grad_flat = None
        # a numpy view cannot move (resize refuses arrays that do not own their data): only
        # the arrays that own their memory need their address read at each step
        self._owners = [i for i, p in enumerate(items) if isinstance(p, np.ndarray) and
                        p.base is None]
        # what check_unchanged compares in one pass each (the loops above name the culprit)
        self._shapes_held = [None if p is None else p.shape for p in self._items]
        self._owner_items = [self._items[i] for i in self._owners]
        self._owner_addresses = tuple(self._layout[i][0] for i in self._owners)
        self._seen = None  # the last gradients that passed every check (see `_known`)
        self._vouched_seen = None  # the last vouched addresses, and their address table
        self._param_spans = None  # each parameter's (first byte, end byte), made once

    @property
    def n(self) -> int:
        return int(self.offsets[-1])

    def check_unchanged(self) -> None:
        """Refuse when a parameter was resized or reallocated under the registry (numpy arrays;
        other buffers cannot be resized while exported)."""
        if [None if p is None else p.shape for p in self._items] != self._shapes_held:
            for i, (item, layout) in enumerate(zip(self._items, self._layout)):
                if item is not None and item.shape != layout[1]:
                    self._moved(i)
        if addresses_of(self._owner_items) != self._owner_addresses:
            for i in self._owners:
                if address(self._items[i]) != self._layout[i][0]:
                    self._moved(i)

    def _moved(self, i: int) -> None:
        refuse(self.entry, f"params[{i}]", "was resized or reallocated after the optimizer "
                                           "registered it; make a new optimizer")

    def _copy(self, flat: np.ndarray, views: list, *, into_flat: bool) -> None:
        for v, lo, hi in zip(views, self.offsets[:-1], self.offsets[1:]):
            if v is None:  # a frozen parameter's slot: no gradient to copy
                continue
            if into_flat:
                flat[lo:hi] = v
            else:
                v[...] = flat[lo:hi]

    def gather(self) -> None:
        if self.packed:
            self._copy(self.flat, self.views, into_flat=True)

    def scatter(self) -> None:
        if self.packed:
            self._copy(self.flat, self.views, into_flat=False)

    @property
    def takes_vouched(self) -> bool:
        """Whether `grads` takes `Vouched` gradients (the kernels take pieces)."""
        return self._pieces

    def grads(self, grads, *, writable: bool, frozen: bool = False) -> tuple:
        """(gradients as the kernels take them, caller views to scatter back into when they
        were gathered, else None, which tensors have a gradient): a flat array, or pieces when
        the kernels take them.

        Count, shapes and order must match the parameters. With `frozen`, a None stands for a
        parameter without a gradient: its slot holds nothing the kernels may read (they are
        given only the runs of tensors that have one). Gathering reuses one buffer.
        `Vouched` gradients are taken as pieces where `takes_vouched`, read only.
        """
        if isinstance(grads, Vouched):
            return self._vouched(grads, writable)
        known = self._known(grads, writable, frozen)
        if known is not None:
            operand, views, present = known
        else:
            operand, views, present = self._check_grads(grads, writable, frozen)
        if operand is not None:
            return operand, None, present
        if self._grad_flat is None:
            self._grad_flat = np.empty(self.n, np.float32)
        self._copy(self._grad_flat, views, into_flat=True)
        return self._grad_flat, views, present

    def _vouched(self, v: Vouched, writable: bool) -> tuple:
        """Vouched gradients as pieces: the address table made (and the spans checked apart)
        only when the addresses differ from the last ones."""
        if writable or not self._pieces or len(v.addresses) != len(self.views):
            raise ValueError("Vouched gradients are read-only pieces, one per parameter, on a "
                             "backend that takes pieces (Registry.takes_vouched)")
        key = tuple(v.addresses)
        if self._vouched_seen is None or self._vouched_seen[0] != key:
            if self._param_spans is None:  # the parameters cannot move (check_unchanged)
                starts = address_table(self.tensors, self.offsets).tolist()
                self._param_spans = [(a, a + 4 * n) for a, n in zip(starts, self.sizes)]
            params = self._param_spans
            count = len(key)
            spans = [(0, 0) if a is None else (a, a + 4 * n) for a, n in zip(key, self.sizes)]
            disjoint_spans(self.entry, spans + params,
                           lambda i: f"grads[{i}]" if i < count else self._names[i - count])
            # a frozen slot points at its parameter, which no run of the step reads as a gradient
            grads = np.array([p[0] if a is None else a for a, p in zip(key, params)], np.int64)
            self._vouched_seen = (key, grads)
        return Pieces(v.holders, self.offsets, addresses=self._vouched_seen[1]), None, \
            list(v.present)

    def _known(self, grads, writable: bool, frozen: bool):
        """(operand, views, present) of the last gradients that passed `_check_grads`, when
        `grads` holds the same numpy arrays (held weakly: a step keeps no gradient alive),
        still at their addresses, float32, C-contiguous, of their shapes and writable where
        asked: each of those checks then holds as it did, so none is repeated and the kernels'
        address table is reused. Else None. A numpy view cannot move (resize refuses an array
        that does not own its memory), so only the arrays that own theirs have their address
        read again."""
        seen = self._seen
        if seen is None or not isinstance(grads, (list, tuple)) or len(grads) != len(seen.refs) \
                or frozen != seen.frozen:
            return None
        for o, ref, shape in zip(grads, seen.refs, self.shapes):
            if o is None:
                if ref is not None:
                    return None
            elif ref is None or ref() is not o or type(o) is not np.ndarray or \
                    o.shape != shape or o.dtype is not _F32 or not o.flags.c_contiguous or \
                    (writable and not o.flags.writeable):
                return None
        if seen.owners[0] and \
                addresses_of([grads[i] for i in seen.owners[0]]) != seen.owners[1]:
            return None
        # a 1-D array is its own flat view (a reshape a step per tensor costs more than the checks)
        views = [g if g is None or g.ndim == 1 else g.reshape(-1) for g in grads]
        if seen.flat is not None:  # end to end in one allocation, or one array
            root, start, total = seen.flat
            if len(views) == 1:
                operand = views[0]
            else:
                base = root()
                if base is None or address(base) != start[0]:
                    return None
                operand = np.ndarray((total,), np.float32, buffer=base, offset=start[1])
            if writable and not operand.flags.writeable:
                return None
        elif self._pieces:
            operand = Pieces([v if v is not None else p for v, p in zip(views, self.views)],
                             self.offsets, addresses=seen.table)
        else:
            operand = None
        return operand, views, list(seen.present)

    def _check_grads(self, grads, writable: bool, frozen: bool) -> tuple:
        """(operand, views, present): every check of the gradients, and the kernels' operand (a
        flat view, or pieces; None when they must be gathered into a flat copy)."""
        items, listed = as_list(self.entry, "grads", grads, none=frozen)
        if len(items) != len(self.views) or listed != self.listed:
            refuse(self.entry, "grads", f"has {len(items)} tensor(s) but the optimizer has "
                                        f"{len(self.views)} parameter(s); pass one gradient per "
                                        f"parameter, in the same order")
        name = (lambda i: f"grads[{i}]") if listed else (lambda i: "grads")
        present = [g is not None for g in items]
        views = [None if g is None else as_f32(self.entry, name(i), g, writable=writable)
                 for i, g in enumerate(items)]
        for i, (g, shape) in enumerate(zip(items, self.shapes)):
            if g is not None and shape_of(g) != shape:
                refuse(self.entry, name(i), f"has shape {shape_of(g)} but its parameter has "
                                            f"shape {shape}")
        given = [i for i, v in enumerate(views) if v is not None]
        k = len(given)
        disjoint_arrays(self.entry, [views[i] for i in given] + self.views,
                        lambda j: name(given[j]) if j < k else self._names[j - k])
        operand = None
        if all(present):
            flat = views[0] if len(views) == 1 else end_to_end(views)
            if flat is not None and (not writable or flat.flags.writeable):
                operand = flat
        if operand is None and self._pieces:
            # a frozen slot points at its parameter, which no run of the step reads as a gradient
            operand = Pieces([v if v is not None else p for v, p in zip(views, self.views)],
                             self.offsets)
        self._seen = _Seen.of(items, listed, frozen, operand, present)
        return operand, views, present

    def scatter_grads(self, views: list[np.ndarray] | None) -> None:
        if views is not None:
            self._copy(self._grad_flat, views, into_flat=False)

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Per-tensor views of a flat array, shaped like the parameters."""
        return [flat[lo:hi].reshape(s) for lo, hi, s in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]
