"""The casts float32 <-> bfloat16 / float16 through the C kernels in mixed.c (the second spelling).

mixed.c does each cast in integer arithmetic on the bit pattern, by cases on the
exponent, with an explicit round-half-to-even of the dropped bits: a spelling of its
own, compared with the oracle (oracles/mixed.py) bit for bit by the suite.

Reproducibility: built with -ffp-contract=off -fno-fast-math; no float operation at
all, elementwise, so the OpenMP thread count cannot reach the bits.

>>> import numpy as np
>>> out = np.empty(3, np.uint16)
>>> load("identical").to_bf16(np.float32([1.0, -np.inf, 3.0e38]), out); [hex(v) for v in out.tolist()]
['0x3f80', '0xff80', '0x7f62']
"""
from __future__ import annotations

import numpy as np

from .base import CffiBase


class CffiMixed(CffiBase):
    """The casts in C, OpenMP over the elements; out written, the input only read."""

    takes_pieces = False

    def _u32(self, a: np.ndarray):
        return self._ffi.from_buffer("uint32_t[]", a)

    def _u16(self, a: np.ndarray):
        return self._ffi.from_buffer("uint16_t[]", a)

    def to_bf16(self, x, out) -> None:
        """Write the bfloat16 patterns of x (flat float32) into out (flat uint16)."""
        self._lib.mj_to_bf16(self._u32(x), self._u16(out), out.size)

    def to_f16(self, x, out) -> None:
        """Write the float16 patterns of x into out (flat uint16)."""
        self._lib.mj_to_f16(self._u32(x), self._u16(out), out.size)

    def from_bf16(self, h, out) -> None:
        """Write the bfloat16 patterns h (flat uint16) widened into out (flat float32)."""
        self._lib.mj_from_bf16(self._u16(h), self._u32(out), out.size)

    def from_f16(self, h, out) -> None:
        """Write the float16 patterns h widened into out (flat float32)."""
        self._lib.mj_from_f16(self._u16(h), self._u32(out), out.size)


def load(mode: str, backend: str = "cpu-cffi") -> CffiMixed:
    return CffiMixed(mode)
