"""The mixed suite's refusals (contracts/mixed.md, the refusal clauses): the casts' arguments,
linear and matmul on mixed or float64 operands, entry points without a low-precision form, and
twins whose master is not float32, is frozen by a name that is not the model's, or shares
memory with what a step reads.

>>> rows, buffers = table("oracle")
>>> rows[0][0], len(rows) >= 35
('x', True)
"""
from __future__ import annotations

import numpy as np

from ..core.checks import cast_types
from ..ops import fold as fold_op
from ..ops import layers, loss, transformer
from ..ops import mixed as api
from ..optim.optimizers import SGD
from ..training.master_weights import with_master_weights
from ..training.models import TinyLM
from ..training.tape import Tape

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
    rows, buffers = _twin_rows(backend)
    return table + rows, [x, h, both, frozen, xb, hw, x64] + buffers


def _twin_rows(backend: str):
    """The twins' refusals (clause 20's twin rows) and the buffers they read. The optimizer
    and the tape values are made here, so that what their constructors write is done before
    the clause takes its copy of the buffers."""
    on = {"backend": backend}
    w = np.float32([0.5, 1.5, 2.5, 3.5])
    p = [w.copy(), np.arange(8, dtype=np.float32)]
    tw = [np.zeros(4, np.float16), np.zeros(8, BF16)]
    opt = SGD(p, lr=0.5, twins=tw, **on)
    tw[1].view(np.float32)[...] = np.float32(0.5)  # a gradient of 4 cells in twin 1's bytes
    tape = Tape(**on)
    low = tape.cast(tape.const(w), "bfloat16")
    master = tape.param(w.copy())
    model = TinyLM(d_model=4, d_hidden=4)
    own = w.copy()
    rows = [
        # a master that is not float32: the optimizer refuses it, the tape refuses its twin
        ("params", lambda: SGD(w.astype(np.float16), lr=0.5, twins=[np.zeros(4, BF16)], **on)),
        ("twin", lambda: tape.cast(low, "float32", twin=np.zeros(4, BF16))),
        ("twin", lambda: tape.cast(master, "bfloat16", twin=np.zeros(4, np.float16))),
        # a twin that is not a low-precision buffer of its own
        ("twins", lambda: SGD(w.copy(), lr=0.5, twins=[np.zeros(4, np.float32)], **on)),
        ("twins", lambda: SGD(own, lr=0.5, twins=[own.view(np.float16)[:4]], **on)),
        ("grads[0] and twins[1]", lambda: opt.step([tw[1].view(np.float32), np.ones(8, np.float32)])),
        # frozen parameters get no twin: `frozen` must name the model's parameters
        ("frozen", lambda: with_master_weights(model, "bfloat16", frozen="norm1.weight")),
        ("frozen", lambda: with_master_weights(model, "float16", frozen=["norm9.weight"])),
        ("dtype", lambda: with_master_weights(model, "float32")),
    ]
    return rows, [w, own, *p, *tw, low.data, master.data,
                  *(a for _, a in model.named_parameters())]
