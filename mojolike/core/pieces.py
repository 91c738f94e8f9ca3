"""Pieces: separate float32 arrays read as one sequence, and the address tables kernels take.

The optimizer's registry (`mojolike.optim.params.Registry`) hands the kernels either one
flat array or `Pieces`; kernels that take pieces (`takes_pieces`) update the arrays where
they lie, through `table`'s addresses. It is in the core, below both the API and the kernels, so that
the kernels never import the API.

>>> import numpy as np
>>> p = Pieces([np.zeros(2, np.float32), np.zeros(3, np.float32)], np.array([0, 2, 5]))
>>> p.size, p.part(1, 2).offsets.tolist()
(5, [0, 3])
>>> x = np.zeros(5, np.float32)
>>> (table(x, [0, 2, 5]) - table(x, [0, 2, 5])[0]).tolist()
[0, 8]
"""
from __future__ import annotations

import numpy as np


try:
    from .._buffers import addresses as _addresses
except ImportError:  # built at install when a compiler is there (pyproject ext-modules)
    _addresses = None


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def addresses_of(arrays) -> tuple:
    """The data address of each array of a list or tuple (None stays None), in one call: an
    optimizer step reads hundreds to notice a buffer that moved under it."""
    if _addresses is not None:
        return _addresses(arrays)
    return tuple(None if a is None else address(a) for a in arrays)


class Pieces:
    """Separate 1-D float32 arrays read as one sequence: arrays[i] holds its elements
    offsets[i] .. offsets[i+1] - 1. Kernels that take pieces (`takes_pieces`) update them
    where they lie, through the table of their addresses."""

    def __init__(self, arrays: list[np.ndarray], offsets: np.ndarray, addresses=None):
        """addresses: the arrays' table when the caller knows it (it is read from them
        otherwise, on first use)."""
        self.arrays = arrays  # held, so the addresses stay valid
        self.offsets = offsets
        self.size = int(offsets[-1])
        self._addresses = addresses

    @property
    def addresses(self) -> np.ndarray:
        if self._addresses is None:
            self._addresses = np.array(addresses_of(self.arrays), np.int64)
        return self._addresses

    def part(self, i: int, j: int) -> "Pieces":
        """Tensors i .. j - 1, with offsets from 0."""
        table = None if self._addresses is None else self._addresses[i:j]
        return Pieces(self.arrays[i:j], self.offsets[i:j + 1] - self.offsets[i], table)


def table(x, offsets) -> np.ndarray:
    """The address of each tensor's first element, as int64 (what the kernels take): x is a flat
    float32 array cut at `offsets`, or pieces, or a list of 1-D float32 arrays."""
    if isinstance(x, Pieces):
        return x.addresses
    if isinstance(x, np.ndarray):
        return address(x) + 4 * np.asarray(offsets[:-1], np.int64)
    return np.fromiter((address(a) for a in x), np.int64, len(x))


def operands(*xs) -> tuple[list[np.ndarray], np.ndarray]:
    """(an address table per operand, the offsets they share) for kernel operands that are
    flat arrays or pieces of one registry; flat arrays alone are one tensor."""
    cut = next((x.offsets for x in xs if isinstance(x, Pieces)), None)
    if cut is None:
        cut = np.array([0, xs[0].size], np.int64)
    return [table(x, cut) for x in xs], cut


def part(x, offsets, i: int, j: int):
    """Tensors i .. j - 1 of a flat array cut at `offsets`, or of pieces."""
    if isinstance(x, Pieces):
        return x.part(i, j)
    return x[int(offsets[i]):int(offsets[j])]
