"""The GPT-2 architecture on the tape: `GPT`, with Hugging Face GPT-2's parameter names and layouts.

One body (`_trunk`) computes the logits, run either on a `mojolike.Tape` (training:
`forward`) or on the public functions directly (`logits`, `token_losses`: no tape,
no graph kept), so both give the same bits. Weights are read and written in
Hugging Face's safetensors layout by `mojolike.training.gpt_io`.

Reproducibility: every op is a certified function (embedding, layer_norm, matmul,
split and head moves, scaled_dot_product_attention, gelu, linear, cross_entropy) or
one IEEE addition per element, in a fixed order, so the loss, the gradients and
the logits are the oracle's bits on every backend and thread count. Every op but
attention works row by row and causal attention's row i depends on keys 0..i only
(contracts/transformer.md clause 17), so position t's logits depend on tokens 0..t
of its own sequence alone: the same whatever other sequences share the batch.

>>> import numpy as np
>>> model = GPT(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, backend="oracle")
>>> tokens = np.array([[1, 2, 3, 4]])
>>> model.logits(tokens).shape
(1, 4, 16)
>>> bool((model.logits(tokens[:, :2]) == model.logits(tokens)[:, :2]).all())  # prefix invariance
True
"""
from __future__ import annotations

import weakref
from fractions import Fraction

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point
from ..core.refusals import Refusal, refuse
from ..ops.attention import scaled_dot_product_attention
from ..ops.layers import embedding, linear
from ..ops.loss import cross_entropy
from ..ops.mixed import cast
from ..ops.rng import Generator
from ..ops.transformer import gelu, layer_norm, matmul
from ..oracles import f32
from ..oracles.scalars import round_sqrt_fraction
from . import gpt_io
from .master_weights import MasterWeighted
from .models import IGNORE_INDEX, _indices
from .tape import Tape, Value
from .tape_base import binary

# GPT-2's initializer std 0.02, the float32 nearest 1/50
INIT_STD = f32.round_fraction(Fraction(1, 50))
_BLOCK = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")


def residual_std(n_layer: int) -> float:
    """0.02 / sqrt(2 n_layer), GPT-2's std of the residual projections, as the float32 nearest
    its exact value: sqrt(1 / (5000 n_layer)), rounded once."""
    return round_sqrt_fraction(Fraction(1, 5000 * n_layer))


def parameter_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """{name: shape} of a checked config's parameters, in the model's parameter order."""
    v, c, bs = config["vocab_size"], config["n_embd"], config["block_size"]
    shapes = {"ln_1.weight": (c,), "ln_1.bias": (c,), "attn.c_attn.weight": (c, 3 * c),
              "attn.c_attn.bias": (3 * c,), "attn.c_proj.weight": (c, c), "attn.c_proj.bias": (c,),
              "ln_2.weight": (c,), "ln_2.bias": (c,), "mlp.c_fc.weight": (c, 4 * c),
              "mlp.c_fc.bias": (4 * c,), "mlp.c_proj.weight": (4 * c, c), "mlp.c_proj.bias": (c,)}
    out = {"transformer.wte.weight": (v, c), "transformer.wpe.weight": (bs, c)}
    for layer in range(config["n_layer"]):
        for n in _BLOCK:
            if config["bias"] or not n.endswith(".bias"):
                out[f"transformer.h.{layer}.{n}"] = shapes[n]
    out["transformer.ln_f.weight"] = (c,)
    if config["bias"]:
        out["transformer.ln_f.bias"] = (c,)
    return out


def check_config(e: str, vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias,
                 layer_norm_epsilon, seed, name=lambda n: n) -> dict:
    """The checked config (Python ints, bool, float32 values as floats); `name(argument)` is
    how a refusal names an argument (gpt_io names config.json's keys)."""
    cfg = {"vocab_size": checks.integer(e, name("vocab_size"), vocab_size, low=1),
           "block_size": checks.integer(e, name("block_size"), block_size, low=1),
           "n_layer": checks.integer(e, name("n_layer"), n_layer, low=1),
           "n_head": checks.integer(e, name("n_head"), n_head, low=1),
           "n_embd": checks.integer(e, name("n_embd"), n_embd, low=1)}
    if cfg["n_embd"] % cfg["n_head"]:
        refuse(e, name("n_head"), f"does not divide n_embd={cfg['n_embd']} (each head has "
                                  f"n_embd // n_head features)", value=n_head)
    cfg["dropout"] = checks.real32(e, name("dropout"), dropout, low=0.0, high=1.0,
                                   high_open=True, what="in [0, 1)")
    cfg["bias"] = checks.switch(e, name("bias"), bias)
    cfg["layer_norm_epsilon"] = checks.real32(e, name("layer_norm_epsilon"), layer_norm_epsilon,
                                              low=0.0)
    cfg["seed"] = checks.integer(e, name("seed"), seed, low=0, high=2**64 - 1)
    return cfg


class GPT(MasterWeighted):
    """GPT-2 (Radford et al. 2019; Hugging Face's GPT2LMHeadModel) on `mojolike.Tape`.

        x = embedding(tokens, wte) + embedding(0..T-1, wpe)             (B, T, C)
        per layer: x = x + attn(layer_norm(x, ln_1)); x = x + mlp(layer_norm(x, ln_2))
            attn: qkv = h @ c_attn.weight + c_attn.bias, split in q, k, v of n_head heads,
                  scaled_dot_product_attention(is_causal=True), heads merged,
                  @ c_proj.weight + c_proj.bias
            mlp:  gelu(h @ c_fc.weight + c_fc.bias, approximate='tanh') @ c_proj.weight
                  + c_proj.bias
        logits = linear(layer_norm(x, ln_f).reshape(B T, C), wte)          (B T, V), tied head
        loss = cross_entropy(logits, targets.reshape(-1))                 ignore_index -100

    Parameters (`named_parameters()`, this order): transformer.wte.weight (V, C),
    transformer.wpe.weight (block_size, C); per layer l transformer.h.{l}.ln_1.weight,
    .ln_1.bias, .attn.c_attn.weight (C, 3C), .attn.c_attn.bias, .attn.c_proj.weight (C, C),
    .attn.c_proj.bias, .ln_2.weight, .ln_2.bias, .mlp.c_fc.weight (C, 4C), .mlp.c_fc.bias,
    .mlp.c_proj.weight (4C, C), .mlp.c_proj.bias; transformer.ln_f.weight, .ln_f.bias.
    Weights are in Conv1D's (in, out) layout (x @ W). lm_head.weight is wte itself. With
    bias=False the biases are absent (layer norms have a weight only).

    Initialization (GPT-2's `_init_weights`), from `Generator(seed)` on stream = the
    parameter's position in that order: embeddings and Conv1D weights normal(0, 0.02),
    the residual projections attn.c_proj.weight and mlp.c_proj.weight normal(0,
    0.02 / sqrt(2 n_layer)), each std the float32 nearest its exact value (`INIT_STD`,
    `residual_std`); biases +0.0, layer-norm weights 1.0.

    Config: vocab_size V, block_size (Hugging Face's n_positions) the longest sequence,
    n_layer, n_head (dividing n_embd), n_embd C, dropout p in [0, 1) (attention
    probabilities and the two residual branches of every layer, when training; there is
    no embedding dropout), bias, layer_norm_epsilon, seed; `backend` / `numeric_mode`
    for the initializer's draws and the default of `logits` and `token_losses`.

    Reproducibility: see the module docstring; the initial parameters depend on (seed,
    config) alone, never on the backend.

    >>> import mojolike, numpy as np
    >>> model = GPT(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=8)
    >>> tape = mojolike.Tape()
    >>> tokens = np.arange(8).reshape(1, 8) % 32
    >>> loss = model.forward(tape, tokens, (tokens + 1) % 32)
    >>> grads = tape.backward(loss)
    >>> round(loss.item(), 2)                   # near ln 32 = 3.466 at initialization
    3.46
    >>> [g.shape for g in grads] == [p.shape for p in model.parameters()]
    True
    """

    _ENTRY = "mojolike.models.GPT"

    @entry_point()
    def __init__(self, vocab_size=256, block_size=256, n_layer=4, n_head=4, n_embd=128,
                 dropout=0.0, bias=True, layer_norm_epsilon=1e-5, seed=0, *, backend=None,
                 numeric_mode=None, entry, **unknown):
        cfg = check_config(entry, vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias,
                           layer_norm_epsilon, seed)
        g = Generator(cfg["seed"], backend=backend, numeric_mode=numeric_mode)
        self._setup(cfg, backend, numeric_mode)
        std, res = INIT_STD, residual_std(cfg["n_layer"])
        params = []
        for i, (n, shape) in enumerate(parameter_shapes(cfg).items()):
            if n.endswith(".bias"):
                params.append(np.zeros(shape, np.float32))
            elif ".ln_" in n:
                params.append(np.ones(shape, np.float32))
            else:
                s = res if n.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")) else std
                params.append(g.normal(shape, 0.0, s, stream=i))
        self._params = params

    def _setup(self, cfg: dict, backend, numeric_mode) -> None:
        """Everything but the parameter arrays (`gpt_io` sets those from a file)."""
        self._config = dict(cfg)
        self.vocab_size, self.block_size = cfg["vocab_size"], cfg["block_size"]
        self.n_layer, self.n_head, self.n_embd = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
        self.dropout, self.bias = cfg["dropout"], cfg["bias"]
        self.layer_norm_epsilon, self.seed = cfg["layer_norm_epsilon"], cfg["seed"]
        self.backend, self.numeric_mode = backend, numeric_mode
        self.NAMES = tuple(parameter_shapes(cfg))
        self._registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @property
    def config(self) -> dict:
        return dict(self._config)

    @classmethod
    @entry_point()
    def from_safetensors(cls, path, config=None, *, backend=None, numeric_mode=None, entry,
                         **unknown) -> GPT:
        """A model with the weights of a Hugging Face-layout GPT-2 safetensors file (see
        `mojolike.training.gpt_io.load`: names, shapes and dtypes checked from the header
        before any tensor is read; the config from `config` or the config.json beside it)."""
        return gpt_io.load(entry, cls, path, config, backend, numeric_mode)

    @entry_point()
    def save_safetensors(self, path, *, entry, **unknown) -> None:
        """Write the parameters to `path` (safetensors, Hugging Face GPT-2 names, float32) and
        config.json beside it (`mojolike.training.gpt_io.save`)."""
        gpt_io.save(entry, self, path)

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
        if not isinstance(tape, Tape):
            refuse(entry, "tape", f"must be a mojolike.Tape, not {type(tape).__name__}")
        handles = self._registered.get(tape)
        if handles is None or any(p._tape is not tape for p in handles):
            handles = tuple(tape.param(a) for a in self._params)
            self._registered[tape] = handles
        return handles

    @entry_point()
    def forward(self, tape, tokens, targets, generator_for_dropout=None, training=True, *,
                reduction="mean", num_items=None, entry, **unknown) -> Value:
        """The loss Value of (B, T) integer `tokens` (T <= block_size) against `targets` (same
        shape; IGNORE_INDEX positions are ignored), reduction 'mean' or 'sum' (`num_items`
        the divisor of 'mean', as in cross_entropy). Everything is checked before the tape
        is touched.

        Dropout (training and p > 0) draws from `generator_for_dropout`: per layer, in this
        order, the attention probabilities (the generator's next stream, keyed as
        scaled_dot_product_attention keys it), the attention branch's output and the MLP
        branch's output (each the next stream, element i of the (B, T, C) value at stream
        position i): keyed by (seed, stream, position), whichever microbatch runs it.

        The head is cross_entropy on linear(x, wte)'s whole logits, not the chunked head:
        generation needs the logits whole, and with the same logits and loss the trainer's
        per-token losses and the sampler's log-probs are one computation (the chunked head
        gives the same bits for any chunk, contracts/layers.md, and may replace it where
        the (B T, V) logits do not fit). The tied wte gets two gradient contributions,
        added in the tape's fan-in order: the backward walk reaches the head's linear
        (the newer node) first, then the token embedding, so d wte = d_head + d_embedding,
        one float32 rounding per element."""
        e = entry
        if not isinstance(tape, Tape):
            refuse(e, "tape", f"must be a mojolike.Tape, not {type(tape).__name__}")
        tok = self._tokens(e, tokens)
        tgt = _indices(e, "targets", targets, self.vocab_size, ignore=IGNORE_INDEX)
        if tgt.shape != tok.shape:
            refuse(e, "targets", f"have shape {tgt.shape} but tokens have shape {tok.shape}")
        drop = checks.switch(e, "training", training) and self.dropout > 0.0
        if drop and not isinstance(generator_for_dropout, Generator):
            refuse(e, "generator_for_dropout", f"must be a mojolike.Generator when training with "
                                               f"dropout={self.dropout}, not "
                                               f"{type(generator_for_dropout).__name__}")
        if reduction not in ("mean", "sum"):
            refuse(e, "reduction", "must be 'mean' or 'sum' (the tape's losses are scalars; "
                                   "token_losses gives 'none')", value=reduction)
        options = {"reduction": reduction}
        if num_items is not None:
            options["num_items"] = checks.integer(e, "num_items", num_items, low=1)
            if reduction != "mean":
                refuse(e, "num_items", "is the divisor of reduction='mean'", value=num_items)
        params = self.register(tape)
        z = _trunk(tape, self, params, tok, generator_for_dropout if drop else None)
        return tape.cross_entropy(z, tgt.reshape(-1), **options)

    @entry_point()
    def logits(self, tokens, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
        """The (B, T, V) float32 logits of (B, T) integer `tokens` without a tape (no dropout,
        no graph): the public functions in `forward`'s order, so the same bits as the tape's
        logits. `backend` / `numeric_mode` default to the model's."""
        tok = self._tokens(entry, tokens)
        z = _trunk(self._eager(entry, backend, numeric_mode), self, self._params, tok, None)
        return z.reshape(tok.shape + (self.vocab_size,))

    @entry_point()
    def token_losses(self, tokens, targets, *, backend=None, numeric_mode=None, entry,
                     **unknown) -> np.ndarray:
        """The (B, T) per-token cross-entropy losses (reduction 'none'; +0.0 where the target is
        IGNORE_INDEX) of `logits(tokens)` against `targets`: the log-prob of target t at a
        position is the negation of its loss, the same bits as the trainer's per-row loss."""
        e = entry
        tok = self._tokens(e, tokens)
        tgt = _indices(e, "targets", targets, self.vocab_size, ignore=IGNORE_INDEX)
        if tgt.shape != tok.shape:
            refuse(e, "targets", f"have shape {tgt.shape} but tokens have shape {tok.shape}")
        o = self._eager(e, backend, numeric_mode)
        z = _trunk(o, self, self._params, tok, None)
        rows = cross_entropy(z, tgt.reshape(-1), reduction="none", **o.on)
        return rows.reshape(tok.shape)

    @entry_point()
    def generate(self, prompts, max_new_tokens, temperature=1.0, top_k=None, seed=0,
                 streams=None, *, backend=None, numeric_mode=None, entry, **unknown):
        """(tokens, logprobs) of `mojolike.training.generate.generate` on this model's weights:
        prompts (a list of token sequences of any lengths) decoded together with a KV cache;
        `streams` (default: each prompt's index) keys each prompt's sampling, so a prompt
        decoded alone with its batch index as its stream draws what it drew in the batch.
        With master weights the decoder reads the twins with the forward's casts, its KV
        cache of the low type (contracts/mixed.md clause 31).

        Reproducibility: each generated token's log-prob equals, bit for bit, the negation of
        `token_losses` of the whole generated sequence at its position (the training
        forward's log-softmax); a prompt's tokens and log-probs do not depend on the other
        prompts; sampling is keyed by (seed, prompt index, position), so every backend and
        thread count generates the same tokens.

        >>> g = GPT(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8, backend="oracle")
        >>> tokens, logprobs = g.generate([[1, 2], [3]], 2, temperature=0)
        >>> [len(t) for t in tokens], [len(lp) for lp in logprobs]
        ([4, 3], [2, 2])
        """
        from . import generate as g
        on = {"backend": self.backend if backend is None else backend,
              "numeric_mode": self.numeric_mode if numeric_mode is None else numeric_mode}
        try:
            if self._precision is None:
                return g.generate(dict(self.named_parameters()), self.config, prompts,
                                  max_new_tokens, temperature=temperature, top_k=top_k,
                                  seed=seed, streams=streams, **on)
            on = g._on(entry, on["backend"], on["numeric_mode"])
            return g.decode(entry, self._decoder_weights(on), g.dims_of(self.config, entry),
                            prompts, max_new_tokens, temperature, top_k, seed, streams, on,
                            self.precision)
        except Refusal as r:
            raise r.at(entry) from None

    def _decoder_weights(self, on: dict) -> dict:
        """The weights as `_trunk` reads them with master weights, by name: the Conv1D weights
        and the tied head (`generate.HEAD`) of the low type (the twin, or a frozen master
        rounded), the embeddings the twins as they are (a frozen one its master), the other
        parameters the twins widened (a frozen one its master)."""
        from .generate import HEAD, conv1d_weight
        low = self.precision
        out = {}
        for (name, p), t in zip(self.named_parameters(), self._precision.twins):
            if conv1d_weight(name, p):
                out[name] = cast(p, low, **on) if t is None else t
            elif name in ("transformer.wte.weight", "transformer.wpe.weight"):
                out[name] = p if t is None else t
            else:
                out[name] = p if t is None else cast(t, "float32", **on)
        wte, twin = self.parameters()[0], self._precision.twins[0]  # _trunk's first: wte
        out[HEAD] = cast(wte, low, **on) if twin is None else twin
        return out

    def _tokens(self, e: str, tokens) -> np.ndarray:
        tok = _indices(e, "tokens", tokens, self.vocab_size)
        if tok.shape[1] > self.block_size:
            refuse(e, "tokens", f"have {tok.shape[1]} positions but block_size is "
                                f"{self.block_size} (the position embedding's rows)")
        return tok

    def _eager(self, e: str, backend, numeric_mode) -> _Eager:
        b = self.backend if backend is None else backend
        m = self.numeric_mode if numeric_mode is None else numeric_mode
        b, m = registry.resolve(e, b, m)
        return _Eager(e, b, m)


class _Eager:
    """The tape's op names on plain arrays, each a public function (or one numpy IEEE
    operation per element, as the tape's own add): what `_trunk` runs without a tape."""

    def __init__(self, e: str, backend: str, numeric_mode: str):
        self.on = {"backend": backend, "numeric_mode": numeric_mode}
        registry.check_fp_state(e, numeric_mode)  # the adds are numpy's

    def embedding(self, ids, weight):
        return embedding(ids, weight, **self.on)

    def cast(self, x, dtype, twin=None):
        return cast(x, dtype, **self.on) if twin is None else twin

    def add(self, a, b):
        return binary(np.add, a, b)

    def layer_norm(self, x, shape, weight, bias, eps):
        return layer_norm(x, shape, weight, bias, eps, **self.on)

    def matmul(self, a, b):
        return matmul(a, b, **self.on)

    def gelu(self, x, approximate):
        return low_gelu(x, approximate, self.on)

    def linear(self, x, weight):
        return linear(x, weight, **self.on)

    def scaled_dot_product_attention(self, q, k, v, is_causal):
        return scaled_dot_product_attention(q, k, v, is_causal=is_causal, **self.on)

    def split(self, x, size, dim):
        return tuple(np.ascontiguousarray(p) for p in np.split(x, x.shape[dim] // size, axis=dim))

    def reshape(self, x, *shape):
        return np.ascontiguousarray(x).reshape(shape)

    def transpose(self, x, d0, d1):
        return np.ascontiguousarray(np.swapaxes(x, d0, d1))


def low_gelu(x: np.ndarray, approximate: str, on: dict) -> np.ndarray:
    """gelu of an array; of a bfloat16 / float16 one the float32 gelu of it widened, rounded
    once to its type (the tape's gelu on such a value): the eager forward's and the decoder's."""
    low = checks.cast_type_of(x)
    if low == "float32":
        return gelu(x, approximate, **on)
    return cast(gelu(cast(x, "float32", **on), approximate, **on), low, **on)


def input_rows(o, tok: np.ndarray, wte, wpe):
    """The (B, T, C) input of the blocks: embedding(tok, wte) + embedding(0..T-1, wpe)."""
    return o.add(o.embedding(tok, wte), o.embedding(np.arange(tok.shape[1], dtype=np.int64), wpe))


def _trunk(o, model: GPT, params, tok: np.ndarray, gen: Generator | None, x=None, keys=None):
    """The (B T, V) logits on `o` (a Tape, or _Eager); dropout where `gen` is given.

    `x`: the blocks' input already computed (`input_rows`; the trainer passes it as a leaf
    so that the embeddings' gradients are taken once over a whole step). `keys`: dropout
    keyed explicitly (the trainer's `train_models.GPTKeys`: `residual(site)` gives the
    (offset, stream) of residual site 2 layer + branch, `attention(layer, row)` the stream
    of one batch row's attention probabilities, each row then its own attention call); None:
    each dropout takes the generator's next stream."""
    B, T = tok.shape
    C, nh, eps = model.n_embd, model.n_head, model.layer_norm_epsilon
    hs = C // nh
    # parameter i as the contractions read it (w.low) and as the other ops do (w.wide): the
    # parameter itself, or with master weights its twin and the twin widened
    w = model._weights(o, params)
    it = iter(range(len(params)))
    sites = iter(range(2 * model.n_layer))

    def take(present=True):
        return next(it) if present else None

    def wide(i):
        return None if i is None else w.wide(i)

    def dropout(x):
        if gen is None:
            return x
        if keys is None:
            return o.dropout(x, gen, model.dropout)
        offset, stream = keys.residual(next(sites))
        return o.dropout(x, gen, model.dropout, offset=offset, stream=stream)

    def attention(q, k, v, layer):
        if gen is None:
            return o.scaled_dot_product_attention(q, k, v, is_causal=True)
        if keys is None:
            return o.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                  dropout_p=model.dropout, generator=gen)
        rows = zip(o.split(q, 1, 0), o.split(k, 1, 0), o.split(v, 1, 0))
        return o.cat([o.scaled_dot_product_attention(qb, kb, vb, is_causal=True,
                                                     dropout_p=model.dropout, generator=gen,
                                                     stream=keys.attention(layer, b))
                      for b, (qb, kb, vb) in enumerate(rows)], 0)

    def proj(x, i, b):
        # on the (B T, in) rows: the weight's gradient is one fold over every token (as the
        # tied head's), so microbatches of aligned token counts sum to the batch's bits
        shape = params[i].shape
        y = o.matmul(w.act(o.reshape(x, B * T, shape[0])), w.low(i))
        y = y if b is None else o.add(y, w.wide(b))
        return o.reshape(y, B, T, shape[1])

    def heads(t):
        return o.transpose(o.reshape(t, B, T, nh, hs), 1, 2)

    wte, wpe = take(), take()
    x = input_rows(o, tok, w.stored(wte), w.stored(wpe)) if x is None else x
    for layer in range(model.n_layer):
        ln1w, ln1b = take(), take(model.bias)
        attn_w, attn_b = take(), take(model.bias)
        aproj_w, aproj_b = take(), take(model.bias)
        ln2w, ln2b = take(), take(model.bias)
        fc_w, fc_b = take(), take(model.bias)
        mproj_w, mproj_b = take(), take(model.bias)
        h = o.layer_norm(x, (C,), wide(ln1w), wide(ln1b), eps)
        # with master weights query, key and value are rounded (attention reads them so)
        q, k, v = o.split(w.act(proj(h, attn_w, attn_b)), C, 2)
        y = attention(heads(q), heads(k), heads(v), layer)
        y = o.reshape(o.transpose(y, 1, 2), B, T, C)
        x = o.add(x, dropout(proj(y, aproj_w, aproj_b)))
        h = o.layer_norm(x, (C,), wide(ln2w), wide(ln2b), eps)
        h = o.gelu(w.act(proj(h, fc_w, fc_b)), "tanh")  # rounded with master weights
        x = o.add(x, dropout(proj(h, mproj_w, mproj_b)))
    lnfw, lnfb = take(), take(model.bias)
    x = o.layer_norm(x, (C,), wide(lnfw), wide(lnfb), eps)
    return o.linear(w.act(o.reshape(x, B * T, C)), w.low(wte))
