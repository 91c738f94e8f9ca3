"""The mixed suite's refusals (contracts/mixed.md, the refusal clauses): the casts' arguments,
linear and matmul on mixed or float64 operands, and entry points without a low-precision form.

>>> rows, buffers = table("oracle")
>>> rows[0][0], len(rows) >= 26
('x', True)
"""
from __future__ import annotations

import numpy as np

from ..core.checks import cast_types
from ..ops import fold as fold_op
from ..ops import layers, loss, transformer
from ..ops import mixed as api
from ..optim.optimizers import SGD

BF16 = cast_types().get("bfloat16")


def table(backend: str):
    """[(expected option, act)] and the caller buffers the acts read (clause f)."""
    x = np.float32([1.0, 2.0, 3.0, 4.0])
    h = x.astype(np.float16)
    frozen = np.empty(4, np.float16)
    frozen.setflags(write=False)
    both = np.zeros(4, np.float32)

    def cast(*args, **kw):
        return lambda: api.cast(*args, backend=backend, **kw)

    table = [
        ("x", cast(x.astype(np.float64), "float16")),
        ("x", cast(x.astype(np.int32), "float16")),
        ("x", cast(np.float32([]), "bfloat16")),
        ("x", cast(np.arange(8, dtype=np.float32)[::2], "bfloat16")),
        ("dtype", cast(x, "float64")),
        ("dtype", cast(x, np.int8)),
        ("dtype", cast(x, "float32")),
        ("dtype", cast(h, BF16)),
        ("out", cast(x, "float16", out=np.empty(4, BF16))),
        ("out", cast(x, "float16", out=np.empty(3, np.float16))),
        ("out", cast(x, "float16", out=frozen)),
        ("x and out", cast(both, "bfloat16", out=both.view(BF16)[:4])),
        ("rounding", cast(x, "float16", rounding="stochastic")),
    ]
    xb, hw, x64 = x.reshape(2, 2).astype(BF16), h.reshape(2, 2), x.reshape(2, 2).astype(np.float64)
    on = {"backend": backend}
    table += [
        ("x", lambda: layers.linear(xb, x.reshape(2, 2), **on)),
        ("bias", lambda: layers.linear(xb, xb, h[:2], **on)),
        ("b", lambda: transformer.matmul(xb, hw, **on)),
        ("a", lambda: transformer.matmul(hw, x.reshape(2, 2), **on)),
        ("weight", lambda: layers.linear(x.reshape(2, 2), hw, **on)),
        # float64 is not converted, alone or beside a low type
        ("x", lambda: layers.linear(x64, x64, **on)),
        ("a", lambda: transformer.matmul(x64, x64, **on)),
        ("weight", lambda: layers.linear(x64, xb, **on)),
        # entry points without a low-precision form
        ("x", lambda: transformer.softmax(xb, **on)),
        ("logits", lambda: loss.cross_entropy(hw, np.int64([0, 1]), **on)),
        ("x", lambda: layers.rms_norm(xb, **on)),
        ("x", lambda: fold_op.fold(h, **on)),
        ("params", lambda: SGD(h.copy(), lr=0.5, **on)),
    ]
    return table, [x, h, both, frozen, xb, hw, x64]
