"""The mixed family's kernel interface: casts between float32 and bfloat16 / float16.

Low-precision buffers travel as their uint16 bit patterns (a bfloat16 or float16
array viewed as numpy.uint16), so no kernel needs to know ml_dtypes; float32 buffers
are float32. Every method writes `out` and nothing else.

Reproducibility: each output slot is a function of its input slot's bits alone
(oracles/mixed.py), so no thread count or launch geometry reaches it.

>>> from mojolike.core.interfaces import writes
>>> writes("mixed")["to_bf16"]
(1,)
"""
from __future__ import annotations

from typing import Protocol

from . import Array, KernelSet, Written


class MixedKernels(KernelSet, Protocol):
    """x -> out, flat, one size, not overlapping; narrowing outputs are uint16 patterns."""

    def to_bf16(self, x: Array, out: Written) -> None:
        """out (uint16) = the bfloat16 patterns of float32 x: round to nearest even, subnormals
        kept, overflow to +-inf, every NaN to 0x7FC0."""

    def to_f16(self, x: Array, out: Written) -> None:
        """out (uint16) = the float16 patterns of float32 x: round to nearest even, subnormals
        kept, overflow to +-inf, every NaN to 0x7E00."""

    def from_bf16(self, h: Array, out: Written) -> None:
        """out (float32) = the bfloat16 patterns h (uint16) widened exactly."""

    def from_f16(self, h: Array, out: Written) -> None:
        """out (float32) = the float16 patterns h (uint16) widened exactly (a NaN keeps its sign
        and payload)."""
