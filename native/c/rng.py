"""Philox4x32-10 blocks, uniform and normal draws and dropout through the C kernels in rng.c.

The second spelling of contracts/rng.md: the Philox constants are written in the
C source from the published algorithm (not copied from native/rng.py), so a
drift in either spelling shows as a mismatch with the oracle.

Normal draws call crmath.c's logf, sinpif and cospif element functions (one
compilation unit), with the tables of `mj_crmath_tab` filled by
`native/c/crmath.py`'s `CffiCrmath`.

Reproducibility: built with -ffp-contract=off -fno-fast-math; OpenMP over whole
Philox blocks, each value a function of its stream position alone, so the thread
count cannot reach the bits.

>>> import numpy as np
>>> out = np.empty(3, np.float32)
>>> load("identical").uniform_into(0, 0, 0, 0, np.float32(0), np.float32(1), out), out.tolist()
(0, [0.3990464210510254, 0.8805201649665833, 0.7357127666473389])
>>> load("identical").normal_into(0, 0, 0, 0, np.float32(0), np.float32(1), out), out.tolist()
(0, [0.9911374449729919, -0.9246627688407898, -0.6176090836524963])
"""
from __future__ import annotations

import numpy as np

from .crmath import CffiCrmath
from .base import CffiBase


class CffiRng(CffiBase):
    """Philox blocks, uniform and normal draws and dropout in C (the interface of native/rng.py's NumbaRng)."""

    takes_pieces = False

    def __init__(self, mode: str):
        super().__init__(mode)
        self._crmath = CffiCrmath(mode)  # the same compiled module; it owns the crmath tables
        if self._crmath._ffi is not self._ffi:
            raise RuntimeError("cpu-cffi: the rng and crmath kernels came from two C modules")

    def philox_into(self, counters, key0, key1, out) -> None:
        """out[i] = Philox4x32-10(counters[i], (key0, key1)); counters and out (n, 4) uint32."""
        ffi = self._ffi
        self._lib.mj_philox_blocks(ffi.from_buffer("uint32_t[]", counters), counters.shape[0],
                                   int(key0), int(key1), ffi.from_buffer("uint32_t[]", out))

    def uniform_into(self, key0, key1, stream, offset, low, high, out) -> int:
        """out[i] = the uniform at position offset + i of `stream` (float32 low, high); returns 0."""
        self._lib.mj_uniform(int(key0), int(key1), int(stream), int(offset), float(np.float32(low)),
                             float(np.float32(high)), self._ptr(out), out.size)
        return 0

    def dropout_into(self, x, key0, key1, stream, offset, p, scale, y) -> int:
        """y[i] = x[i] * scale where position offset + i is kept, else x[i] * 0.0; returns 0."""
        self._lib.mj_dropout(self._ptr(x), int(key0), int(key1), int(stream), int(offset),
                             float(np.float32(p)), float(np.float32(scale)), self._ptr(y), y.size)
        return 0

    def normal_into(self, key0, key1, stream, offset, mean, std, out) -> int:
        """out[i] = the normal value at position offset + i of `stream` (float32 mean, std);
        returns the number of slots left UNDECIDED (the caller gives them the oracle's value)."""
        return int(self._lib.mj_normal(int(key0), int(key1), int(stream), int(offset),
                                       float(np.float32(mean)), float(np.float32(std)),
                                       self._ptr(out), out.size, self._crmath._tab))


def load(mode: str, backend: str = "cpu-cffi") -> CffiRng:
    return CffiRng(mode)
