"""The models `mojolike.train.Trainer` trains, behind one interface: `for_config(config)`.

A `TrainModel` is built from a `TrainConfig` and gives the trainer everything that
depends on the model, so that the trainer's step (microbatches, accumulation, the
scaler, the gate, the records, checkpoints) is one code path for every model:

- `model`: the model object (`parameters()`, `named_parameters()` in its order);
- `decay`, `no_decay`: the two AdamW groups' parameter names, in the optimizer's order;
- `on_tape`: the names registered on the step's tape (their gradients come from the
  tape's backward, summed over microbatches by `accumulate_grads`);
- `rows(tok)`: the model's input rows (the embedding lookups), which the trainer puts
  on the tape as a leaf; `loss(tape, handles, rows, tgt, count, drop)` the microbatch's
  loss Value ('mean' over the step's `count` tokens; `drop` = (generator, stream,
  first row of the microbatch in the step) or None);
- `embedding_grads(named, d_rows, tok)`: the embeddings' gradients from the whole
  step's input-row gradients (one embedding_backward over every position of the step,
  so its per-token folds do not depend on the split), combined with the tape's;
- `member_shapes(step)`, `check_memory(budget)`: a checkpoint's arrays and the memory
  bound, from the configuration alone (before anything is allocated).

TinyLM ("tiny"): the one-block reference model, its groups and order as before the
GPT (`DECAY`, `NO_DECAY`). GPT ("gpt"): `mojolike.models.GPT` with the configuration's
n_layer, n_head, n_embd, block_size (= seq_len), vocab_size = vocab, dropout and
seed, bias True; every parameter of dimension >= 2 decays (nanoGPT's rule).

Reproducibility: the GPT's tied wte gets d_head + d_embedding, one float32 addition
per element, d_head the microbatches' head gradients summed by `accumulate_grads`
and d_embedding the whole step's embedding_backward (`tie`); with one microbatch the
same bits as `GPT.forward` on a tape (d_head + d_embedding, the tape's fan-in order).
Dropout in a GPT step is keyed by the position in the step (`GPTKeys`), so an aligned
split of the batch draws what the whole batch draws. contracts/train.md.

>>> from mojolike.train import TrainConfig
>>> m = for_config(TrainConfig(model="gpt", n_layer=1, n_embd=8, n_head=2, block_size=4))
>>> m.decay[:3], m.no_decay[:2]
(('transformer.wte.weight', 'transformer.wpe.weight', 'transformer.h.0.attn.c_attn.weight'), \
('transformer.h.0.ln_1.weight', 'transformer.h.0.ln_1.bias'))
"""
from __future__ import annotations

import math

import numpy as np

from ..core.refusals import refuse
from ..ops.layers import embedding, embedding_backward
from . import invariants
from .config import PRECISIONS
from .gpt import GPT, _Eager, _trunk, input_rows, parameter_shapes
from .master_weights import with_master_weights
from .models import TinyLM
from .tape_base import binary

# TinyLM: weight decay on the matrices; norms, biases and the embedding take none
TINY_DECAY = ("fc1.weight", "fc2.weight", "head.weight")
TINY_NO_DECAY = ("embed.weight", "norm1.weight", "fc1.bias", "fc2.bias", "norm2.weight")
TINY_ON_TAPE = ("norm1.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                "norm2.weight", "head.weight")
# attention dropout streams of a GPT step: above every step's own stream (< 2^63)
ATTENTION_STREAMS = 2**63
WTE, WPE = "transformer.wte.weight", "transformer.wpe.weight"


def tie(head: np.ndarray, head_parts: list, emb: np.ndarray) -> np.ndarray:
    """The tied wte's gradient: the head's (summed over the microbatches `head_parts`) plus the
    embedding's, one addition per element (the tape's order: the head's node is the newer)."""
    return binary(np.add, head, emb)


def named_twins(model) -> dict:
    """{parameter name: its low-precision twin or None}; empty without master weights."""
    return dict(zip(model.NAMES, model.twins()))


def for_config(c, on: dict | None = None, entry: str = ""):
    """The TrainModel of configuration `c` (its model built on `on`'s backend when given;
    `entry` names the caller in the eager ops' refusals)."""
    return (GPTTrain if c.model == "gpt" else TinyTrain)(c, on, entry)


class TinyTrain:
    """TinyLM behind the trainer's interface (see the module docstring)."""

    decay, no_decay, on_tape, overflow_cell = TINY_DECAY, TINY_NO_DECAY, TINY_ON_TAPE, "fc2.weight"

    def __init__(self, c, on, entry: str = ""):
        self.c, self.on = c, on
        if on is not None:
            self.model = TinyLM(c.d_model, c.d_hidden, c.vocab, c.dropout, None, c.chunk_size,
                                c.seed, **on)
            if c.precision != "fp32":
                with_master_weights(self.model, PRECISIONS[c.precision])

    def describe(self) -> str:
        return f"TinyLM d_model={self.c.d_model} vocab={self.c.vocab}"

    def member_shapes(self, step: int) -> dict:
        return invariants.member_shapes(self.c, step, self.decay + self.no_decay)

    def check_memory(self, e: str, budget) -> None:
        invariants.check_memory(e, self.c, budget)

    def twins(self) -> dict:
        return named_twins(self.model)

    def rows(self, tok: np.ndarray) -> np.ndarray:
        # with master weights, the twin's rows widened (embedding takes a low-precision table)
        twin = self.twins().get("embed.weight")
        table = self.model.parameters()[0] if twin is None else twin
        return embedding(tok.reshape(-1), table, **self.on)

    def loss(self, tape, handles, x, tgt, count, drop):
        c, m = self.c, self.model
        # TinyLM's forward after the embedding (TINY_ON_TAPE: model indices 1..7), reading the
        # twins as models.TinyLM.forward does when the run has master weights
        at = (None, *handles)
        w = m._weights(tape, at)
        h = w.act(tape.rms_norm(x, w.wide(1), m.eps))
        y = tape.linear(tape.relu(w.act(tape.linear(h, w.low(2), w.low(3)))), w.low(4), w.low(5))
        if drop is not None and m.dropout > 0.0:
            gen, stream, first_row = drop
            y = tape.dropout(y, gen, m.dropout, offset=first_row * c.seq_len * c.d_model,
                             stream=stream)
        z = tape.rms_norm(tape.add(x, y), w.wide(6), m.eps)
        return tape.chunked_lm_head_loss(z, w.wide(7), tgt.reshape(-1), num_items=count,
                                         chunk_size=c.chunk_size)

    def embedding_grads(self, named: dict, parts: list, d_rows: np.ndarray, tok) -> None:
        named["embed.weight"] = embedding_backward(d_rows, tok.reshape(-1), self.c.vocab,
                                                   **self.on)


class GPTKeys:
    """Dropout keys of one GPT microbatch, by position in the step: residual site k (2 layer +
    0 for the attention branch, 1 for the MLP branch) of element i of the microbatch's
    (b, T, C) value at stream position (k batch_size + first_row) T C + i on the step's
    stream; the attention probabilities of the step's row r in layer l on stream
    ATTENTION_STREAMS + (step_stream n_layer + l) batch_size + r, at (0, h, i, j)."""

    def __init__(self, c, stream: int, first_row: int):
        self.c, self.stream, self.first = c, stream, first_row

    def residual(self, site: int) -> tuple[int, int]:
        c = self.c
        return (site * c.batch_size + self.first) * c.seq_len * c.n_embd, self.stream

    def attention(self, layer: int, row: int) -> int:
        c = self.c
        return ATTENTION_STREAMS + (self.stream * c.n_layer + layer) * c.batch_size + \
            self.first + row


class GPTTrain:
    """mojolike.models.GPT behind the trainer's interface (see the module docstring)."""

    overflow_cell = "transformer.h.0.mlp.c_proj.weight"

    def twins(self) -> dict:
        return named_twins(self.model)

    def __init__(self, c, on, entry: str = ""):
        self.c, self.on = c, on
        self.config = {"vocab_size": c.vocab, "block_size": c.seq_len, "n_layer": c.n_layer,
                       "n_head": c.n_head, "n_embd": c.n_embd, "bias": True}
        self.shapes = parameter_shapes(self.config)
        self.decay = tuple(n for n, s in self.shapes.items() if len(s) >= 2)
        self.no_decay = tuple(n for n, s in self.shapes.items() if len(s) < 2)
        self.on_tape = tuple(n for n in self.shapes if n != WPE)
        if on is not None:
            self.model = GPT(c.vocab, c.seq_len, c.n_layer, c.n_head, c.n_embd, c.dropout,
                             True, seed=c.seed, **on)
            if c.precision != "fp32":
                with_master_weights(self.model, PRECISIONS[c.precision])
            self._eager = _Eager(entry, on["backend"], on["numeric_mode"])

    def describe(self) -> str:
        c = self.c
        return (f"GPT n_layer={c.n_layer} n_head={c.n_head} n_embd={c.n_embd} "
                f"block_size={c.seq_len} vocab={c.vocab}")

    def member_shapes(self, step: int) -> dict:
        f4 = np.dtype("<f4")
        out = {f"param.{k}": (f4, s) for k, s in self.shapes.items()}
        for name in ("exp_avg", "exp_avg_sq"):
            out.update({f"optimizer.{name}.{i}": (f4, self.shapes[k])
                        for i, k in enumerate(self.decay + self.no_decay)})
        out["records"] = (f4, (step, invariants.RECORD_VALUES))
        return out

    def memory_estimate(self) -> dict[str, int]:
        """Bytes at a step's peak: 'parameters' (parameters, moments, the rollback copy, each
        microbatch's gradients and their sum) and 'batch' (the step's tokens, input rows and
        their gradients, one microbatch's activations and gradients: about 40 C + 4 V + 2 n_head
        T floats per row per layer, a bound)."""
        c = self.c
        p = sum(math.prod(s) for s in self.shapes.values())
        n = c.batch_size * c.seq_len
        rows = n // c.microbatches
        per_row = c.n_layer * (40 * c.n_embd + 2 * c.n_head * c.seq_len) + 8 * c.vocab
        return {"parameters": 4 * p * (6 + c.microbatches + 1),
                "batch": 8 * 5 * n + 4 * 3 * n * c.n_embd + 4 * rows * per_row}

    def check_memory(self, e: str, budget) -> None:
        need = self.memory_estimate()
        limit = invariants.memory_budget(e, budget)
        total = sum(need.values())
        if total > limit:
            big = max(need, key=need.get)
            refuse(e, "n_layer, n_embd" if big == "parameters" else "batch_size",
                   f"ask for about {total:,} bytes, more than the memory budget of {limit:,} "
                   f"bytes; make the run smaller, or raise the budget with memory_budget= or "
                   f"the environment variable {invariants.MEMORY_ENV} (bytes)")

    def rows(self, tok: np.ndarray) -> np.ndarray:
        # with master weights the twins' rows, widened (as GPT.forward's embeddings read them)
        p, twins = dict(self.model.named_parameters()), self.twins()
        table = {k: p[k] if twins.get(k) is None else twins[k] for k in (WTE, WPE)}
        return input_rows(self._eager, tok, table[WTE], table[WPE])

    def loss(self, tape, handles, x, tgt, count, drop):
        params = [handles[0], None, *handles[1:]]
        gen, keys = (None, None) if drop is None or self.model.dropout == 0.0 else \
            (drop[0], GPTKeys(self.c, drop[1], drop[2]))
        z = _trunk(tape, self.model, params, np.empty(tgt.shape, np.int64), gen, x=x, keys=keys)
        return tape.cross_entropy(z, tgt.reshape(-1), num_items=count)

    def embedding_grads(self, named: dict, parts: list, d_rows: np.ndarray, tok) -> None:
        c = self.c
        d = d_rows.reshape(-1, c.n_embd)
        emb = embedding_backward(d, tok.reshape(-1), c.vocab, **self.on)
        positions = np.tile(np.arange(c.seq_len, dtype=np.int64), tok.shape[0])
        named[WPE] = embedding_backward(d, positions, c.seq_len, **self.on)
        named[WTE] = tie(named[WTE], [g[0] for g in parts], emb)
