"""The loss kernels of the oracle: `mojolike.oracles.loss.rows` on numpy buffers.

Reproducibility: pure Python on exact binary32 operations; it never leaves a row
undecided (status all 0, returns 0).

>>> import numpy as np
>>> rows, status, grad = np.empty(1, np.float32), np.ones(1, np.int32), np.zeros((1, 1), np.float32)
>>> load("identical").cross_entropy_into(np.zeros((1, 2), np.float32), np.array([0]), -100,
...     np.float32(1), np.float32(0), np.float32(1), False, np.float32(1), False, grad, rows, status)
0
>>> rows, status
(array([0.6931472], dtype=float32), array([0], dtype=int32))
"""
from __future__ import annotations

from ...core import registry
from .. import codec
from .. import loss as spec


class OracleLoss:
    """The oracle as a kernel set (pure Python; it never leaves a row undecided)."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    takes_pieces = False

    def cross_entropy_into(self, logits, targets, ignore_index, c1, c2, qt, smoothing, g, want_grad,
                           grad, rows, status) -> int:
        h = codec.decode_scalar
        s = spec.LossScalars(h(c1), h(c2), h(qt), h(g), bool(smoothing))
        losses, grads = spec.rows([codec.decode(r) for r in logits], targets.tolist(),
                                  int(ignore_index), s, bool(want_grad))
        codec.store(rows, losses)
        if want_grad:
            codec.store(grad, [v for row in grads for v in row])
        status[:] = 0
        return 0


def load(mode: str, backend: str = "oracle") -> OracleLoss:
    return OracleLoss()
