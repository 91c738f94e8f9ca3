"""The transformer kernels of the oracle: `mojolike.oracles.transformer` and
`mojolike.oracles.attention` on numpy buffers.

The attention mask arrives as the kernels take it (a flat buffer and element
strides); the adapter expands it to the (B, H, L, S) nested list the oracle reads,
and derives dropout's keep mask from the Philox key and stream as
`oracles.attention.dropout_keep` does. The oracle never leaves a value undecided, so
every status stays 0.

Reproducibility: pure Python on exact binary32 operations; the definition the other
backends match.

>>> import numpy as np
>>> y, st = np.empty((1, 2), np.float32), np.zeros(1, np.int32)
>>> load("identical").softmax_rows(np.float32([[0.0, 0.0]]), False, y, st), y.tolist()
(0, [[0.5, 0.5]])
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ...core import registry
from .. import attention as att
from .. import codec
from .. import transformer as spec
from ..transformer import row_max


def _rows(a: np.ndarray) -> list[list[float]]:
    return [codec.decode(r) for r in a.reshape(a.shape[0], -1)]


def _heads(a: np.ndarray):
    """(B, H, N, W) as nested lists [b][h][n][w]."""
    nb, nh, n, w = a.shape
    flat = codec.decode(a.reshape(-1))
    return [[[flat[((b * nh + h) * n + i) * w:((b * nh + h) * n + i + 1) * w] for i in range(n)]
             for h in range(nh)] for b in range(nb)]


def _store_heads(out: np.ndarray, nested) -> None:
    codec.store(out, [v for hb in nested for hh in hb for row in hh for v in row])


class OracleTransformer:
    """The oracle as the transformer family's kernels (pure Python, exact)."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: ClassVar[dict] = {}
    takes_pieces = False

    def softmax_rows(self, x, log, y, status):
        f = spec.log_softmax_rows if log else spec.softmax_rows
        codec.store(y, [v for row in f(_rows(x)) for v in row])
        status[...] = 0
        return 0

    def softmax_backward_rows(self, dy, y, log, dx, status):
        f = spec.log_softmax_backward_rows if log else spec.softmax_backward_rows
        codec.store(dx, [v for row in f(_rows(dy), _rows(y)) for v in row])
        status[...] = 0
        return 0

    def layer_norm_rows(self, x, w, has_w, b, has_b, eps, y):
        out = spec.layer_norm_rows(_rows(x), codec.decode(w) if has_w else None,
                                   codec.decode(b) if has_b else None, codec.decode_scalar(eps))
        codec.store(y, [v for row in out for v in row])

    def layer_norm_backward_rows(self, dy, x, w, has_w, eps, dx, h):
        ep = codec.decode_scalar(eps)
        xs = _rows(x)
        dx_, _, _ = spec.layer_norm_backward_rows(_rows(dy), xs, codec.decode(w) if has_w else None,
                                                  None, ep)
        codec.store(dx, [v for row in dx_ for v in row])
        hs = []
        for r in xs:
            _, c, rstd = spec.layer_norm_stats(r, ep)
            hs.extend(spec.f32.mul(cj, rstd) for cj in c)
        codec.store(h, hs)

    def _setup(self, q, k, mask_bool, mask_add, mask_kind, mask_strides, scale, p, k0, k1, stream):
        nb, nh, nl, _ = q.shape
        shape = (nb, nh, nl, k.shape[2])
        kind = int(mask_kind)
        values = codec.decode(mask_add.reshape(-1)) if kind == 2 else mask_bool.reshape(-1).tolist()
        mask = att.mask_from_strides(values, kind, mask_strides, shape)
        keep, p_scale = att.keep_of_key(k0, k1, stream, codec.decode_scalar(p), shape)
        return codec.decode_scalar(scale), mask, shape, keep, p_scale

    def attention_forward(self, q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                          scale, p, keep_scale, k0, k1, stream, block_k, o, stats, status):
        sc, mask, shape, keep, p_scale = self._setup(q, k, mask_bool, mask_add, mask_kind,
                                                     mask_strides, scale, p, k0, k1, stream)
        qs, ks, vs = _heads(q), _heads(k), _heads(v)
        outs, st = [], []
        for b in range(shape[0]):
            ob = []
            for h in range(shape[1]):
                kp = None if keep is None else keep[b][h]
                oh, _ = att.head_forward(qs[b][h], ks[b][h], vs[b][h], sc, mask, shape, bool(causal),
                                         kp, p_scale, b, h)
                ob.append(oh)
                for s_row in att.head_scores(qs[b][h], ks[b][h], sc, mask, shape, bool(causal), b, h):
                    ex = att.row_exps(s_row)
                    if ex is None:
                        st.extend((-math.inf, 0.0))
                    else:
                        st.extend((row_max([s for s in s_row if s is not None]), ex[1]))
            outs.append(ob)
        _store_heads(o, outs)
        codec.store(stats, st)
        status[...] = 0
        return 0

    def attention_backward(self, do, q, k, v, o, stats, mask_bool, mask_add, mask_kind,
                           mask_strides, causal, scale, p, keep_scale, k0, k1, stream, block_q,
                           block_k, dq, dk, dv, status):
        sc, mask, shape, keep, p_scale = self._setup(q, k, mask_bool, mask_add, mask_kind,
                                                     mask_strides, scale, p, k0, k1, stream)
        gs, qs, ks, vs = _heads(do), _heads(q), _heads(k), _heads(v)
        grads = [[att.head_backward(gs[b][h], qs[b][h], ks[b][h], vs[b][h], sc, mask, shape,
                                    bool(causal), None if keep is None else keep[b][h], p_scale,
                                    b, h)
                  for h in range(shape[1])] for b in range(shape[0])]
        for n, out in enumerate((dq, dk, dv)):
            _store_heads(out, [[t[n] for t in hb] for hb in grads])
        status[...] = 0
        return 0


def load(mode: str, backend: str = "oracle") -> OracleTransformer:
    return OracleTransformer()
