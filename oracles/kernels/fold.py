"""The fold kernels of the oracle: `mojolike.oracles.fold` on numpy buffers.

Reproducibility: pure Python on exact binary32 operations; the definition the other
backends match, the same bits on every machine.

>>> import numpy as np
>>> load("identical").fold(np.float32([1e8, 1.0, -1e8]))
np.float32(1.0)
"""
from __future__ import annotations

from ...core import registry
from .. import codec
from .. import fold as spec


class OracleFold:
    """The oracle as a kernel set: numpy buffers in, numpy.float32 out."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    takes_pieces = False

    def fold(self, x):
        return codec.scalar(spec.fold(codec.decode(x)))

    def sumsq(self, x):
        return codec.scalar(spec.sumsq(codec.decode(x)))

    def dot(self, a, b):
        return codec.scalar(spec.dot(codec.decode(a), codec.decode(b)))


def load(mode: str, backend: str = "oracle") -> OracleFold:
    return OracleFold()
