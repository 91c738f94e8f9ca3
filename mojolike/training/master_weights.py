"""Master weights: a model keeps its float32 parameters, which the optimizer steps, and
its forward reads bfloat16 / float16 twins of them (OCANNL's `Mixed_prec`
`with_master_weights`; torch's autocast casts the weights at every call instead).

`with_master_weights(model, dtype, frozen=())` gives every parameter of `model` not
named in `frozen` a twin, `cast(master, dtype)`, and switches the model's forward to
it, in place (torch's `Module.to` also changes the module and returns it):

* the contractions (TinyLM's linears; the GPT's Conv1D matmuls and tied head) take the
  twins as they are and their activations cast to `dtype` (`tape.cast`), and give
  float32 results (contracts/mixed.md clause 9);
* the embeddings take the twins as they are (the rows taken are widened); every other
  weight (norms, biases, TinyLM's head) is read widened exactly, so the whole forward
  reads the rounded weights;
* as torch's autocast does, the activation that the MLP's nonlinearity reads is rounded
  to `dtype` first (TinyLM's relu, the GPT's gelu: each gives a result of `dtype`, read
  by the next contraction as it is), and so are the GPT's query, key and value (its
  attention takes them in `dtype`); the tape keeps these in `dtype` for the backward, so
  a step keeps less activation memory (contracts/mixed.md clause 30);
* a frozen parameter keeps its own float32 storage and has no twin: the other ops
  read it as it is, and a contraction rounds it at each forward (`tape.cast`).

`model.twins()` lists the twins in `parameters()` order (None for a frozen one): give
it to the optimizer (`AdamW(model.parameters(), twins=model.twins())`), whose step
writes each twin in the pass that updates its master. The gradients reach the float32
masters (the tape's cast passes them on unchanged), so the tape's `backward` returns
float32 gradients for `parameters()` as before.

A GPT with master weights trains (`forward` on the tape, `mojolike train --model gpt
--precision`) and gives `logits`, `token_losses` and `generate` with the same casts
(the KV-cache decoder reads the twins, and its cache holds keys and values of `dtype`:
each log-prob is still `-token_losses` at its position, contracts/mixed.md clause 31).

Reproducibility: a twin is `mojolike.cast(master, dtype)`, the contractions give the
float32 op's bits on the widened operands, so a step's loss, gradients and masters are
the oracle's bits on every backend and thread count (contracts/mixed.md).

>>> import mojolike
>>> from mojolike import data
>>> from mojolike.mixed_precision import with_master_weights
>>> from mojolike.models import TinyLM
>>> model = with_master_weights(TinyLM(d_model=8, d_hidden=16), "bfloat16")
>>> [str(t.dtype) for t in model.twins()][:2], model.precision
(['bfloat16', 'bfloat16'], 'bfloat16')
>>> tokens, targets = data.batch(0, batch_size=2, seq_len=8)
>>> tape = mojolike.Tape()
>>> loss = model.forward(tape, tokens, targets)
>>> grads = tape.backward(loss)
>>> [g.dtype.name for g in grads][:2], round(loss.item(), 2)
(['float32', 'float32'], 5.86)
"""
from __future__ import annotations

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..ops.mixed import cast


class Precision:
    """A model's low-precision type and twins (None for a parameter without one)."""

    def __init__(self, dtype: str, twins: list):
        self.dtype, self.twins = dtype, twins

    def weights(self, tape, handles) -> Weights:
        return Weights(tape, handles, self)


class Weights:
    """What one forward on `tape` reads for each parameter: `wide(i)` for the ops that take
    float32, `low(i)` for the contractions, `stored(i)` for the embeddings; `act(v)` casts
    an activation for them. Each value is made on its first use (a parameter no op reads
    costs nothing)."""

    def __init__(self, tape, handles, precision: Precision | None):
        self._tape, self._handles, self._p = tape, handles, precision
        self._wide: dict[int, object] = {}
        self._low: dict[int, object] = {}

    def low(self, i: int):
        if self._p is None:
            return self._handles[i]
        if i not in self._low:
            t = self._p.twins[i]
            self._low[i] = self._tape.cast(self._handles[i], self._p.dtype, twin=t)
        return self._low[i]

    def wide(self, i: int):
        if self._p is None or self._p.twins[i] is None:
            return self._handles[i]  # float32 as it is: its own storage
        if i not in self._wide:
            self._wide[i] = self._tape.cast(self.low(i), "float32")
        return self._wide[i]

    def stored(self, i: int):
        """What an embedding reads: the twin as it is, or the parameter without one."""
        if self._p is None or self._p.twins[i] is None:
            return self._handles[i]
        return self.low(i)

    def act(self, v):
        """A float32 activation cast to the low type; one already of it as it is."""
        data = v if isinstance(v, np.ndarray) else v.data  # an eager array, or a Value
        if self._p is None or checks.cast_type_of(data) != "float32":
            return v
        return self._tape.cast(v, self._p.dtype)


def plain(tape, handles) -> Weights:
    """The float32 forward's weights: every parameter as it is, activations unchanged."""
    return Weights(tape, handles, None)


class MasterWeighted:
    """What a model needs to take master weights (a base of TinyLM and GPT)."""

    _precision: Precision | None = None  # with_master_weights sets it

    @property
    def precision(self) -> str:
        """The type the forward reads the parameters in: "float32", or the twins' type."""
        return "float32" if self._precision is None else self._precision.dtype

    @entry_point()
    def twins(self, **unknown) -> list:
        """The low-precision twins in `parameters()` order (None: no twin), for the
        optimizer's `twins=`; empty without master weights (`with_master_weights`)."""
        return [] if self._precision is None else list(self._precision.twins)

    def _weights(self, o, handles) -> Weights:
        """What a forward on `o` (a Tape, or an eager stand-in with a `cast`) reads for each
        of `handles` (the parameters in `parameters()` order)."""
        return plain(o, handles) if self._precision is None else self._precision.weights(o, handles)


@entry_point("mojolike.mixed_precision.with_master_weights")
def with_master_weights(model, dtype, frozen=(), *, entry, **unknown):
    """Give `model` (a `mojolike.models.TinyLM` or `GPT`) a `dtype` twin ("bfloat16" or
    "float16") of every parameter not named in `frozen` (names from `named_parameters()`),
    read by its forward from now on; the float32 parameters stay the masters. Returns `model`.

    Refused by name: another model type, a model that already has master weights, float32
    or any other dtype, an unknown name in `frozen`.

    Reproducibility: see the module docstring; the optimizer's `refresh_twins()` rewrites
    every twin from its master after a change made outside its steps.

    >>> from mojolike.mixed_precision import with_master_weights
    >>> from mojolike.models import TinyLM
    >>> m = with_master_weights(TinyLM(d_model=4), "float16", frozen=["norm1.weight"])
    >>> [t is None for t in m.twins()]
    [False, True, False, False, False, False, False, False]
    """
    e = entry
    if not isinstance(model, MasterWeighted):
        refuse(e, "model", f"must be a mojolike.models.TinyLM or GPT, not {type(model).__name__}")
    if model.precision != "float32":
        refuse(e, "model", f"has master weights already ({model.precision} twins)")
    target = checks.cast_dtype(e, "dtype", dtype)
    if target == "float32":
        refuse(e, "dtype", "is the masters' own type; choose 'bfloat16' or 'float16'", value=dtype)
    names = [n for n, _ in model.named_parameters()]
    if isinstance(frozen, str) or not isinstance(frozen, (list, tuple, set, frozenset)):
        refuse(e, "frozen", f"must be a list of parameter names, not {type(frozen).__name__}")
    for name in frozen:
        if name not in names:
            refuse(e, "frozen", f"names {name!r}, which is not one of the model's parameters "
                                f"({', '.join(names)})")
    twins = [None if n in frozen else cast(p, target) for n, p in model.named_parameters()]
    model._precision = Precision(target, twins)
    return model
