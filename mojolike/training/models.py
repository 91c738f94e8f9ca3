"""The reference language model: `TinyLM`, built on `mojolike.Tape`.

The data stream it trains on is `mojolike.data` (bytes of a text shipped in the
package, an excerpt of Python 3.11.7's pydoc_data.topics; vocabulary 256, fixed
windows by position).
"""
from __future__ import annotations

import weakref
from fractions import Fraction

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..ops.rng import Generator
from ..oracles.scalars import round_sqrt_fraction
from .master_weights import MasterWeighted
from .tape import Tape, Value

IGNORE_INDEX = -100  # torch's default, and the head's


@entry_point("mojolike.models.linear_bound")
def linear_bound(fan_in: int, **unknown) -> float:
    """torch's nn.Linear bound 1/sqrt(fan_in) (kaiming_uniform with a=sqrt(5) for the weight,
    the same bound for the bias), as the float32 nearest its exact value."""
    return round_sqrt_fraction(Fraction(1, fan_in))


class TinyLM(MasterWeighted):
    """A one-block byte-level language model: the reference model of the `train` suite.

        x = embedding(tokens, embed.weight)                  (N, D), N = batch * seq_len rows
        m = fc2(relu(fc1(rms_norm(x, norm1.weight, eps))))   Linear(D, H), ReLU, Linear(H, D)
        m = dropout(m, p)                                    training with p > 0 only
        loss = chunked_lm_head_loss(rms_norm(x + m, norm2.weight, eps), head.weight, targets)

    The head has its own weight (not tied to the embedding: torch's nn.Embedding
    draws N(0, 1) rows, far too large for logits, and a tied weight would need
    another initializer than torch's defaults). Parameters, in this order
    (`named_parameters()`), drawn from `Generator(seed)` on stream = their index
    with torch's default initializers, each bound or std the float32 nearest its
    exact value: `embed.weight` (V, D) normal(0, 1) (nn.Embedding); `norm1.weight`
    (D,) ones (nn.RMSNorm); `fc1.weight` (H, D) and `fc1.bias` (H,) uniform(-b, b),
    b = 1/sqrt(D) (nn.Linear: kaiming_uniform with a = sqrt(5) gives exactly that
    bound, and the bias uses it too); `fc2.weight` (D, H), `fc2.bias` (D,) with
    b = 1/sqrt(H); `norm2.weight` (D,) ones; `head.weight` (V, D) with b = 1/sqrt(D)
    (nn.Linear(D, V, bias=False)).

    Parameters: `d_model` D, `d_hidden` H (default 4 D), `vocab` V (256 for bytes),
    `dropout` p in [0, 1) after the MLP, `eps` RMSNorm's (None: torch's default,
    float32's machine epsilon), `chunk_size` the head's vocabulary chunk (a
    multiple of 1024; the bits do not depend on it), `seed` the initializer's,
    `backend` / `numeric_mode` for the initializer's draws.

    Reproducibility: the initial parameters depend on (seed, shapes) alone; the
    forward and backward are the tape's (contracts/train.md), so the loss and the
    gradients have the oracle's bits on every backend. Dropout keys element i of
    the (rows, D) MLP output by (generator seed, stream, row_offset * seq_len * D + i):
    a microbatch of rows [r, r + b) with row_offset=r and the whole batch's stream
    draws what the whole batch draws there.

    >>> import mojolike
    >>> from mojolike import data
    >>> model = TinyLM(d_model=8, d_hidden=16, dropout=0.1, seed=0)
    >>> tokens, targets = data.batch(0, batch_size=2, seq_len=8)
    >>> tape = mojolike.Tape()
    >>> loss = model.forward(tape, tokens, targets, mojolike.Generator(1))
    >>> grads = tape.backward(loss)
    >>> loss.item()                       # near ln 256 = 5.545 at initialization
    5.854485511779785
    >>> [g.shape for g in grads] == [p.shape for p in model.parameters()]
    True
    """

    _ENTRY = "mojolike.models.TinyLM"
    NAMES = ("embed.weight", "norm1.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
             "norm2.weight", "head.weight")

    @entry_point()
    def __init__(self, d_model=64, d_hidden=None, vocab=256, dropout=0.0, eps=None,
                 chunk_size=4096, seed=0, *, backend=None, numeric_mode=None, entry, **unknown):
        e = entry
        d = checks.integer(e, "d_model", d_model, low=1)
        h = 4 * d if d_hidden is None else checks.integer(e, "d_hidden", d_hidden, low=1)
        v = checks.integer(e, "vocab", vocab, low=1)
        self.dropout = checks.real32(e, "dropout", dropout, low=0.0, high=1.0, high_open=True,
                                     what="in [0, 1)")
        self.eps = None if eps is None else checks.real32(e, "eps", eps, low=0.0)
        self.chunk_size = checks.integer(e, "chunk_size", chunk_size, low=1024)
        if self.chunk_size % 1024:
            refuse(e, "chunk_size", "must be a multiple of 1024", value=chunk_size)
        self.d_model, self.d_hidden, self.vocab = d, h, v
        g = Generator(seed, backend=backend, numeric_mode=numeric_mode)
        self.seed = g.seed

        def uniform(i, shape, fan_in):
            b = linear_bound(fan_in)
            return g.uniform(shape, -b, b, stream=i)

        self._params = [
            g.normal((v, d), stream=0),
            np.ones(d, np.float32),
            uniform(2, (h, d), d), uniform(3, h, d),
            uniform(4, (d, h), h), uniform(5, d, h),
            np.ones(d, np.float32),
            uniform(7, (v, d), d),
        ]
        self._registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @property
    def config(self) -> dict:
        return {"d_model": self.d_model, "d_hidden": self.d_hidden, "vocab": self.vocab,
                "dropout": self.dropout, "eps": self.eps, "chunk_size": self.chunk_size,
                "seed": self.seed}

    @entry_point()
    def parameters(self, **unknown) -> list[np.ndarray]:
        """The parameter arrays in the fixed order of `NAMES` (the model's own: update in place)."""
        return list(self._params)

    @entry_point()
    def named_parameters(self, **unknown) -> list[tuple[str, np.ndarray]]:
        return list(zip(self.NAMES, self._params))

    @entry_point()
    def register(self, tape, *, entry, **unknown) -> tuple[Value, ...]:
        """The parameters as `tape.param`s, registered once per tape in `parameters()` order
        (again after a reset_to that dropped them). Call it before `tape.mark()` so a step's
        reset keeps them; `forward` calls it too."""
        e = entry
        if not isinstance(tape, Tape):
            refuse(e, "tape", f"must be a mojolike.Tape, not {type(tape).__name__}")
        handles = self._registered.get(tape)
        if handles is None or any(p._tape is not tape for p in handles):
            handles = tuple(tape.param(a) for a in self._params)
            self._registered[tape] = handles
        return handles

    @entry_point()
    def forward(self, tape, tokens, targets, generator_for_dropout=None, training=True, *,
                dropout_stream=None, row_offset=0, num_items=None, reduction="mean",
                entry, **unknown) -> Value:
        """The loss Value of (batch, seq_len) integer `tokens` against `targets` (same shape;
        IGNORE_INDEX rows are ignored). Dropout runs when `training` and p > 0, drawn from
        `generator_for_dropout` on `dropout_stream` (None: its next stream) at stream
        positions from row_offset * seq_len * d_model. `num_items` and `reduction` ('mean',
        'sum') go to the head. Everything is checked before the tape is touched."""
        e = entry
        if not isinstance(tape, Tape):
            refuse(e, "tape", f"must be a mojolike.Tape, not {type(tape).__name__}")
        tok = _indices(e, "tokens", tokens, self.vocab)
        tgt = _indices(e, "targets", targets, self.vocab, ignore=IGNORE_INDEX)
        if tgt.shape != tok.shape:
            refuse(e, "targets", f"have shape {tgt.shape} but tokens have shape {tok.shape}")
        drop = checks.switch(e, "training", training) and self.dropout > 0.0
        if drop and not isinstance(generator_for_dropout, Generator):
            refuse(e, "generator_for_dropout", f"must be a mojolike.Generator when training with "
                                               f"dropout={self.dropout}, not "
                                               f"{type(generator_for_dropout).__name__}")
        offset = checks.integer(e, "row_offset", row_offset, low=0) * tok.shape[1] * self.d_model
        if drop:
            if dropout_stream is not None:
                checks.integer(e, "dropout_stream", dropout_stream, low=0, high=2**64 - 1)
            if offset + tok.size * self.d_model > 2**64:
                refuse(e, "row_offset", "puts the dropout past stream position 2^64", value=row_offset)
        if reduction not in ("mean", "sum"):
            refuse(e, "reduction", "must be 'mean' or 'sum'", value=reduction)
        if num_items is not None:
            checks.integer(e, "num_items", num_items, low=1)
            if reduction != "mean":
                refuse(e, "num_items", "is the divisor of reduction='mean'", value=num_items)
        handles = self.register(tape)
        # embed, norm1, fc1 (w, b), fc2 (w, b), norm2, head: the contractions read w.low, the
        # embedding w.stored, the other ops w.wide (all the parameter itself without master
        # weights); with them relu reads fc1's result rounded, and fc2 reads relu's as it is
        w = self._weights(tape, handles)
        x = tape.embedding(tok.reshape(-1), w.stored(0))
        h = tape.linear(w.act(tape.rms_norm(x, w.wide(1), self.eps)), w.low(2), w.low(3))
        h = tape.relu(w.act(h))
        m = tape.linear(w.act(h), w.low(4), w.low(5))
        if drop:
            m = tape.dropout(m, generator_for_dropout, self.dropout, offset=offset,
                             stream=dropout_stream)
        z = tape.rms_norm(tape.add(x, m), w.wide(6), self.eps)
        return tape.chunked_lm_head_loss(z, w.wide(7), tgt.reshape(-1), reduction=reduction,
                                         num_items=num_items, chunk_size=self.chunk_size)


def _indices(e: str, name: str, a, vocab: int, ignore: int | None = None) -> np.ndarray:
    """A (batch, seq_len) integer array with values in [0, vocab) (or `ignore`)."""
    try:
        t = np.asarray(a) if isinstance(a, (np.ndarray, list, tuple)) else None
    except (TypeError, ValueError, OverflowError):  # ragged lists, huge ints
        t = None
    if t is None or t.dtype.kind not in "iu" or t.ndim != 2 or t.size == 0:
        got = f"dtype {t.dtype.name}, shape {t.shape}" if t is not None else f"a {type(a).__name__}"
        refuse(e, name, f"must be a non-empty (batch, seq_len) integer array, got {got}")
    bad = (t < 0) | (t >= vocab)
    if ignore is not None:
        bad &= t != ignore
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        refuse(e, f"{name}[{i}]", f"is {int(t.reshape(-1)[i])}, outside [0, {vocab})"
                                  f"{'' if ignore is None else f' and not {ignore}'}")
    return t.astype(np.int64, copy=False)
