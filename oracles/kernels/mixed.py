"""The mixed kernels of the oracle: `mojolike.oracles.mixed`'s integer casts, slot by slot.

Reproducibility: the definition itself.

>>> import numpy as np
>>> out = np.empty(2, np.uint16)
>>> load("identical").to_bf16(np.float32([1.0, np.nan]), out); [hex(v) for v in out.tolist()]
['0x3f80', '0x7fc0']
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...core import registry
from .. import mixed as spec


class OracleMixed:
    """The oracle as a kernel set."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: ClassVar[dict] = {}
    takes_pieces = False

    def to_bf16(self, x, out) -> None:
        out[:] = [spec.to_bf16_bits(u) for u in x.view(np.uint32).tolist()]

    def to_f16(self, x, out) -> None:
        out[:] = [spec.to_f16_bits(u) for u in x.view(np.uint32).tolist()]

    def from_bf16(self, h, out) -> None:
        out.view(np.uint32)[:] = [spec.from_bf16_bits(v) for v in h.tolist()]

    def from_f16(self, h, out) -> None:
        out.view(np.uint32)[:] = [spec.from_f16_bits(v) for v in h.tolist()]


def load(mode: str, backend: str = "oracle") -> OracleMixed:
    return OracleMixed()
