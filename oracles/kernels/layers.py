"""The layers kernels of the oracle: `mojolike.oracles.layers` on numpy buffers.

Reproducibility: pure Python on exact binary32 operations; the definition the other
backends match.

>>> import numpy as np
>>> out = np.empty((1, 1), np.float32)
>>> load("identical").gemm_nt(np.float32([[1, 2]]), np.float32([[3, 4]]), np.zeros(1, np.float32),
...                           False, out); out
array([[11.]], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ...core import registry
from .. import codec, f32
from .. import layers as spec
from ..fold import CHUNK, chunk_partial, fold


def _decoded(a: np.ndarray) -> list[list[float]]:
    return [codec.decode(r) for r in a.reshape(a.shape[0], -1)]


def _chunk(ys) -> float:
    return chunk_partial(ys, f32.add, 32, -0.0, f32.add)


class OracleLayers:
    """The oracle as the layers family's kernels (pure Python, exact)."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    takes_pieces = False

    def gemm_nt(self, a, b, bias, has_bias, out):
        y = spec.linear(_decoded(a), _decoded(b), codec.decode(bias) if has_bias else None)
        codec.store(out, [v for row in y for v in row])

    def gemm_nt_chunks(self, a, b, out):
        rows_a, rows_b = _decoded(a), _decoded(b)
        vals = []
        for c in range(out.shape[0]):
            for ra in rows_a:
                for rb in rows_b:
                    ys = [f32.mul(p, q) for p, q in zip(ra[c * CHUNK:(c + 1) * CHUNK],
                                                        rb[c * CHUNK:(c + 1) * CHUNK])]
                    vals.append(_chunk(ys))
        codec.store(out, vals)

    def row_chunk_folds(self, a, out):
        vals = [_chunk(r[c * CHUNK:(c + 1) * CHUNK]) for r in _decoded(a) for c in range(out.shape[1])]
        codec.store(out, vals)

    def col_fold(self, a, b, products, out):
        ra, rb = _decoded(a), _decoded(b)
        cols = [[f32.mul(x, y) if products else x for x, y in zip(pa, pb)] for pa, pb in zip(ra, rb)]
        codec.store(out, [fold(list(c)) for c in zip(*cols)])

    def segment_fold(self, dy, order, starts, rows, out):
        g = _decoded(dy)
        for s, v in enumerate(rows.tolist()):
            used = [g[t] for t in order[starts[s]:starts[s + 1]].tolist()]
            codec.store(out[v], [fold(list(c)) for c in zip(*used)])

    def rms_norm(self, x, w, has_w, eps, y):
        y_ = spec.rms_norm(_decoded(x), codec.decode(w) if has_w else None, codec.decode_scalar(eps))
        codec.store(y, [v for row in y_ for v in row])

    def rms_norm_backward(self, dy, x, w, has_w, eps, dx, h):
        ep = codec.decode_scalar(eps)
        xs = _decoded(x)
        dx_, _ = spec.rms_norm_backward(_decoded(dy), xs, codec.decode(w) if has_w else None, ep)
        codec.store(dx, [v for row in dx_ for v in row])
        if has_w:
            hs = []
            for row in xs:
                r = spec.rms_scale(row, ep)
                hs += [f32.mul(v, r) for v in row]
            codec.store(h, hs)

    def relu(self, x, out):
        codec.store(out, [spec.relu(v) for v in codec.decode(x)])


def load(mode: str, backend: str = "oracle") -> OracleLayers:
    return OracleLayers()
