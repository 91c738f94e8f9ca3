"""The rng kernels of the oracle: `mojolike.oracles.rng`'s Philox words and draws.

Reproducibility: pure Python on exact binary32 operations; it never leaves a normal
slot undecided. `rounds` other than 10 is for negative controls only.

>>> import numpy as np
>>> out = np.empty(2, np.float32)
>>> load("identical").uniform_into(0, 0, 0, 0, np.float32(0), np.float32(1), out)
0
>>> bool(((0 <= out) & (out < 1)).all())
True
"""
from __future__ import annotations

from ...core import registry
from .. import codec, f32
from .. import rng as spec


class OracleRng:
    """The oracle as a kernel set (pure Python). `rounds` other than 10 is for negative controls."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    takes_pieces = False

    def __init__(self, rounds: int = spec.ROUNDS):
        self.rounds = rounds

    def philox_into(self, counters, key0, key1, out) -> None:
        for i, c in enumerate(counters.tolist()):
            out[i] = spec.philox4x32_10(c, (int(key0), int(key1)), self.rounds)

    def uniform_into(self, key0, key1, stream, offset, low, high, out) -> int:
        ws = spec.words((int(key0), int(key1)), int(stream), int(offset), out.size, self.rounds)
        lo, hi = codec.decode_scalar(low), codec.decode_scalar(high)
        codec.store(out, [spec.uniform_value(w, lo, hi) for w in ws])
        return 0

    def normal_into(self, key0, key1, stream, offset, mean, std, out) -> int:
        codec.store(out, spec.normal_values((int(key0), int(key1)), int(stream), int(offset),
                                            out.size, codec.decode_scalar(mean),
                                            codec.decode_scalar(std), self.rounds))
        return 0

    def dropout_into(self, x, key0, key1, stream, offset, p, scale, y) -> int:
        ws = spec.words((int(key0), int(key1)), int(stream), int(offset), y.size, self.rounds)
        p, scale = codec.decode_scalar(p), codec.decode_scalar(scale)
        codec.store(y, [f32.mul(xi, scale if spec.kept(w, p) else 0.0)
                        for xi, w in zip(codec.decode(x), ws)])
        return 0


def load(mode: str, backend: str = "oracle") -> OracleRng:
    return OracleRng()
