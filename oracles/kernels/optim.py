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

from ...core import registry
from .. import codec, f32, fold
from .. import optim as spec


class OracleOptim:
    """The oracle as optimizer kernels: numpy buffers updated in place from exact per-element steps."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    takes_pieces = False

    @staticmethod
    def new_state(n: int):
        return np.zeros(n, np.float32)

    def sgd(self, p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay,
            nesterov, maximize, *, grad_scale=None, write_back=False):
        """One SGD pass reading each gradient as g * grad_scale (one rounding, first); with
        write_back the scaled gradient is stored into g, else g is left as it was."""
        h = codec.decode_scalar
        s = spec.SGDScalars(h(lr), h(momentum), h(one_minus_damp), h(wd), bool(use_momentum),
                            bool(use_decay), bool(nesterov), bool(maximize))
        gs = _scaled(g, grad_scale)
        bs = codec.decode(b) if use_momentum else [0.0] * p.size  # without momentum b is a placeholder
        out = [spec.sgd_elem(x, y, z, bool(first), s) for x, y, z in zip(codec.decode(p), gs, bs)]
        codec.store(p, [o[0] for o in out])
        if use_momentum:
            codec.store(b, [o[1] for o in out])
        if write_back:
            codec.store(g, gs)

    def adam(self, p, g, m, v, *scalars_and_flags, grad_scale=None, write_back=False):
        """One Adam pass reading each gradient as g * grad_scale (one rounding, first); with
        write_back the scaled gradient is stored into g, else g is left as it was."""
        a = scalars_and_flags
        s = spec.AdamScalars(*map(codec.decode_scalar, a[:9]), *map(bool, a[9:]))
        gs = _scaled(g, grad_scale)
        out = [spec.adam_elem(w, x, y, z, s) for w, x, y, z in zip(
            codec.decode(p), gs, codec.decode(m), codec.decode(v))]
        for i, arr in enumerate((p, m, v)):
            codec.store(arr, [o[i] for o in out])
        if write_back:
            codec.store(g, gs)

    def sgd_twins(self, p, g, b, tw, kinds, cut, first, lr, momentum, one_minus_damp, wd,
                  use_momentum, use_decay, nesterov, maximize, *, grad_scale=None,
                  write_back=False):
        """`sgd`, then each tensor's twin (tw: flat uint16, cut into tensors by cut) from the
        new p: kinds[t] 1 bfloat16, 2 float16, 0 no twin (its part of tw untouched).

        Reproducibility: the definition; tw[k] is `spec.twin_bits` of the new p[k].

        >>> import numpy as np
        >>> p, tw = np.float32([1.0, 2.0]), np.zeros(2, np.uint16)
        >>> OracleOptim().sgd_twins(p, np.float32([1.0, 1.0]), np.zeros(1, np.float32), tw,
        ...                         np.int64([1, 0]), np.int64([0, 1, 2]), True,
        ...                         *map(np.float32, (0.25, 0.0, 1.0, 0.0)), *[False] * 4)
        >>> p.tolist(), [hex(v) for v in tw.tolist()]
        ([0.75, 1.75], ['0x3f40', '0x0'])
        """
        self.sgd(p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay,
                 nesterov, maximize, grad_scale=grad_scale, write_back=write_back)
        _twins(p, tw, kinds, cut)

    def adam_twins(self, p, g, m, v, tw, kinds, cut, *scalars_and_flags, grad_scale=None,
                   write_back=False):
        """`adam`, then each tensor's twin from the new p, as in `sgd_twins`.

        Reproducibility: the definition, as `sgd_twins`.

        >>> import numpy as np
        >>> p, z, tw = np.float32([1.0]), np.zeros(1, np.float32), np.zeros(1, np.uint16)
        >>> s = [np.float32(x) for x in (0.9, 0.999, 1e-8, 0.0, 0.1, 0.001, 0.1, 1.0, 1.0)]
        >>> OracleOptim().adam_twins(p, np.float32([2.0]), z.copy(), z.copy(), tw,
        ...                          np.int64([2]), np.int64([0, 1]), *s, False, False, False)
        >>> p.tolist(), hex(tw[0])  # float16 0.68359375
        ([0.6837722659111023], '0x3978')
        """
        self.adam(p, g, m, v, *scalars_and_flags, grad_scale=grad_scale, write_back=write_back)
        _twins(p, tw, kinds, cut)

    def scale(self, g, coef):
        c = codec.decode_scalar(coef)
        codec.store(g, [f32.mul(x, c) for x in codec.decode(g)])

    def add(self, a, b, out):
        codec.store(out, [f32.add(x, y) for x, y in zip(codec.decode(a), codec.decode(b))])

    def all_finite(self, x) -> bool:
        return all(math.isfinite(v) for v in codec.decode(x))

    def segment_sumsq(self, x, offsets):
        return codec.encode([fold.sumsq(codec.decode(x[lo:hi]))
                             for lo, hi in zip(offsets[:-1], offsets[1:])])

    def segment_fold(self, x, offsets):
        """The fold of every tensor's cells; an empty tensor's is -0.0, the tree's padding."""
        return codec.encode([_or_identity(fold.fold, codec.decode(x[lo:hi]))
                             for lo, hi in zip(offsets[:-1], offsets[1:])])

    def segment_fold_sumsq(self, x, offsets):
        """(fold, sumsq) of every tensor's cells; an empty tensor's are -0.0."""
        cells = [codec.decode(x[lo:hi]) for lo, hi in zip(offsets[:-1], offsets[1:])]
        return (codec.encode([_or_identity(fold.fold, c) for c in cells]),
                codec.encode([_or_identity(fold.sumsq, c) for c in cells]))

    def clip_coef(self, sumsqs, max_norm, eps):
        total, coef = spec.clip_coef(codec.decode(sumsqs), codec.decode_scalar(max_norm))
        return codec.scalar(total), codec.scalar(coef)


def _scaled(g, grad_scale) -> list[float]:
    """The gradient as the kernels read it: g * grad_scale, one binary32 rounding (None: g)."""
    gs = codec.decode(g)
    if grad_scale is None:
        return gs
    c = codec.decode_scalar(grad_scale)
    return [f32.mul(x, c) for x in gs]


def _twins(p, tw, kinds, cut) -> None:
    """tw[k] = the twin pattern of p[k] for every element of a tensor whose kind is not 0."""
    for t, kind in enumerate(int(x) for x in kinds):
        if kind != spec.TWIN_NONE:
            lo, hi = int(cut[t]), int(cut[t + 1])
            tw[lo:hi] = [spec.twin_bits(x, kind) for x in codec.decode(p[lo:hi])]


def _or_identity(total, cells: list[float]) -> float:
    return total(cells) if cells else -0.0


def load(mode: str, backend: str = "oracle") -> OracleOptim:
    return OracleOptim()
