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

import numpy as np

from ..core.checks import as_f32, disjoint, shape_of
from ..core.pieces import Pieces, address
from ..core.refusals import refuse


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

    @property
    def n(self) -> int:
        return int(self.offsets[-1])

    def check_unchanged(self) -> None:
        """Refuse when a parameter was resized or reallocated under the registry (numpy arrays;
        other buffers cannot be resized while exported)."""
        for i, (item, layout) in enumerate(zip(self._items, self._layout)):
            if item is not None and (address(item), item.shape) != layout:
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

    def grads(self, grads, *, writable: bool, frozen: bool = False) -> tuple:
        """(gradients as the kernels take them, caller views to scatter back into when they
        were gathered, else None, which tensors have a gradient): a flat array, or pieces when
        the kernels take them.

        Count, shapes and order must match the parameters. With `frozen`, a None stands for a
        parameter without a gradient: its slot holds nothing the kernels may read (they are
        given only the runs of tensors that have one). Gathering reuses one buffer.
        """
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
        disjoint(self.entry, [(name(i), v) for i, v in enumerate(views) if v is not None]
                 + list(zip(self._names, self.views)))
        if all(present):
            flat = views[0] if len(views) == 1 else end_to_end(views)
            if flat is not None and (not writable or flat.flags.writeable):
                return flat, None, present
        if self._pieces:
            # a frozen slot points at its parameter, which no run of the step reads as a gradient
            return Pieces([v if v is not None else p for v, p in zip(views, self.views)],
                          self.offsets), None, present
        if self._grad_flat is None:
            self._grad_flat = np.empty(self.n, np.float32)
        self._copy(self._grad_flat, views, into_flat=True)
        return self._grad_flat, views, present

    def scatter_grads(self, views: list[np.ndarray] | None) -> None:
        if views is not None:
            self._copy(self._grad_flat, views, into_flat=False)

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Per-tensor views of a flat array, shaped like the parameters."""
        return [flat[lo:hi].reshape(s) for lo, hi, s in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]
