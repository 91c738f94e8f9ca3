"""The rng family's kernel interface: Philox4x32-10 blocks, uniform and normal draws, dropout.

A draw is addressed by (key0, key1, stream, offset): position offset + i of the stream
is element i, so a draw split in pieces equals the whole.

Reproducibility: every value is the oracle's (`mojolike.oracles.rng`); normal slots a
kernel leaves UNDECIDED get the oracle's value from the API.

>>> from mojolike.core.interfaces import writes
>>> writes("rng")["dropout_into"]
(7,)
"""
from __future__ import annotations

from typing import Protocol

from . import Array, KernelSet, Written


class RngKernels(KernelSet, Protocol):
    """Counter-based draws into caller-provided buffers; 64-bit words as Python ints."""

    def philox_into(self, counters: Array, key0: int, key1: int, out: Written) -> None:
        """out[i] = Philox4x32-10(counters[i], (key0, key1)); counters and out (n, 4) uint32."""

    def uniform_into(self, key0: int, key1: int, stream: int, offset: int, low, high,
                     out: Written) -> int:
        """out[i] = the uniform value in [low, high) at position offset + i of `stream` (float32
        low, high; out flat float32); returns 0 (no value is ever undecided)."""

    def dropout_into(self, x: Array, key0: int, key1: int, stream: int, offset: int, p, scale,
                     y: Written) -> int:
        """y[i] = x[i] * scale where position offset + i is kept (with probability 1 - p), else
        x[i] * 0.0; returns 0."""

    def normal_into(self, key0: int, key1: int, stream: int, offset: int, mean, std,
                    out: Written) -> int:
        """out[i] = the normal value (float32 mean, std) at position offset + i of `stream`;
        returns the number of slots left UNDECIDED (the API gives them the oracle's value)."""
