"""The optimizer kernels of the oracle: numpy buffers updated in place from the exact
per-element steps of `mojolike.oracles.optim` (the definition the other backends match).

Reproducibility: pure Python on exact binary32 operations; the same bits on every machine.

>>> import numpy as np
>>> g = np.float32([1.0, -2.0])
>>> OracleOptim().scale(g, np.float32(0.5)); g
array([ 0.5, -1. ], dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from . import registry
from .oracles import codec, f32
from .oracles import optim as spec


class OracleOptim:
    """The oracle as optimizer kernels: numpy buffers updated in place from exact per-element steps."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    WRITES = {"sgd": (0, 2), "adam": (0, 2, 3), "scale": (0,), "add": (2,)}

    @staticmethod
    def new_state(n: int):
        return np.zeros(n, np.float32)

    def sgd(self, p, g, b, first, lr, momentum, omd, wd, use_m, use_d, nesterov, maximize):
        h = codec.decode_scalar
        s = spec.SGDScalars(h(lr), h(momentum), h(omd), h(wd), bool(use_m), bool(use_d),
                            bool(nesterov), bool(maximize))
        bs = codec.decode(b) if use_m else [0.0] * p.size  # without momentum b is a placeholder
        out = [spec.sgd_elem(x, y, z, bool(first), s)
               for x, y, z in zip(codec.decode(p), codec.decode(g), bs)]
        codec.store(p, [o[0] for o in out])
        if use_m:
            codec.store(b, [o[1] for o in out])

    def adam(self, p, g, m, v, *a):
        s = spec.AdamScalars(*map(codec.decode_scalar, a[:9]), *map(bool, a[9:]))
        out = [spec.adam_elem(w, x, y, z, s) for w, x, y, z in zip(
            codec.decode(p), codec.decode(g), codec.decode(m), codec.decode(v))]
        for i, arr in enumerate((p, m, v)):
            codec.store(arr, [o[i] for o in out])

    def scale(self, g, coef):
        c = codec.decode_scalar(coef)
        codec.store(g, [f32.mul(x, c) for x in codec.decode(g)])

    def add(self, a, b, out):
        codec.store(out, [f32.add(x, y) for x, y in zip(codec.decode(a), codec.decode(b))])

    def all_finite(self, x) -> bool:
        return all(math.isfinite(v) for v in codec.decode(x))

    def segment_sumsq(self, x, offsets):
        from .oracles.fold import sumsq
        return codec.encode([sumsq(codec.decode(x[lo:hi])) for lo, hi in zip(offsets[:-1], offsets[1:])])

    def clip_coef(self, sumsqs, max_norm, eps):
        total, coef = spec.clip_coef(codec.decode(sumsqs), codec.decode_scalar(max_norm))
        return codec.scalar(total), codec.scalar(coef)


def oracle_kernels(mode: str, backend: str = "oracle") -> OracleOptim:
    return OracleOptim()
