"""GPT-2 inference over a weights dict: the training forward without a tape, a KV-cache decoder
and seeded sampling whose log-probs are the training forward's bits.

The model is GPT-2 (issue 22's: Hugging Face GPT-2 names, Conv1D (in, out) layout, the head
tied to the token embedding). `full_logits` is its forward for (B, T) tokens with the
training forward's public ops in its order. `decode_step` feeds new tokens through the same
ops: the row-wise ones (embedding, layer_norm, the Conv1D products, the bias and residual
adds, gelu, the tied head) run over every prompt's new rows at once; attention runs as one
call whose batch entries are the prompts, each with its own keys and values from the cache
and the boolean mask "position j <= t" of its own rows (each (b, h) is computed alone, and
a masked position is -0.0 in every fold, which trailing positions leave unchanged:
contracts/transformer.md clauses 11, 16, 17). A row thus has the bits of the causal call
over its own sequence. `generate` decodes prompts of different lengths together.

Sampling (temperature > 0): z = logits / binary32(temperature) (one division per logit);
with `top_k` the k largest z are kept (ties at the k-th value keep the lower ids, so exactly
k) and the others set to -inf; p = `mojolike.softmax(z)` over the whole row (a -inf entry
gets exactly +0, contracts/transformer.md clause 2); u = the uniform of
`mojolike.Generator(seed)` at stream = the prompt's stream (its index unless `streams=`
says otherwise) and offset = the new token's position in its sequence; c = the running sum
of p in id order, one float32 addition per id, in sequence (numpy's cumsum is a sequential
accumulate); the token is the first id with c > u * c[-1] (one float32 product), or, when
rounding leaves none, the first id with c = c[-1]. Temperature 0 is greedy: the argmax of
the logits, ties to the lowest id (top_k changes nothing there). The log-prob reported is
the untempered model's: -cross_entropy(logits row, token, reduction='none').

Reproducibility: the logits of a position depend only on the tokens of its own sequence up
to it, with the same bits as `full_logits` and the tape's forward, on every backend and
thread count: every op but attention is row-wise, and a causal attention row t equals the
non-causal call with query t over keys 0..t (clauses 16-17). The sampled token depends only
on those logits and (seed, stream, position), so a prompt's tokens and log-probs are the same
alone or in any batch, on every backend.

>>> import numpy as np
>>> cfg = {"vocab_size": 5, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 4}
>>> w = {n: np.full(s, 0.25, np.float32) for n, s in parameter_shapes(cfg).items()}
>>> tokens, logprobs = generate(w, cfg, [[1, 2], [3]], 2, temperature=0, backend="oracle")
>>> tokens, logprobs      # equal logits: greedy takes id 0, log-prob -ln 5 rounded once
([[1, 2, 0, 0], [3, 0, 0]], [[-1.6094379425048828, -1.6094379425048828], [-1.6094379425048828, -1.6094379425048828]])
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..ops.attention import scaled_dot_product_attention
from ..ops.layers import embedding, linear
from ..ops.loss import cross_entropy
from ..ops.mixed import cast
from ..ops.rng import TWO64, Generator
from ..ops.transformer import array, gelu, layer_norm, matmul, softmax
from . import gpt  # the model's one list of its parameters, and its eager gelu

_F32 = np.float32
_NEG_INF = np.float32(-np.inf)
HEAD = "lm_head.weight"  # the tied head's weight read apart from wte (GPT._decoder_weights)


# -- the configuration and the weights ----------------------------------------------------------
@dataclass(frozen=True)
class Dims:
    """The configuration the decoder reads (GPT-2's names; block_size is HF's n_positions)."""

    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    layer_norm_epsilon: float = 1e-5
    bias: bool = True

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


def dims_of(config, entry: str = "mojolike.generate") -> Dims:
    """The checked `Dims` of a config: a mapping or an object with GPT-2's attribute names."""
    if isinstance(config, Dims):
        return config
    if isinstance(config, Mapping):
        get = config.get
    else:
        def get(name, default=None):
            return getattr(config, name, default)
    got = {}
    for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
        v = get(name)
        if v is None and name == "block_size":
            v = get("n_positions")
        if v is None:
            refuse(entry, f"config.{name}", "is missing; the config needs vocab_size, block_size "
                                            "(or n_positions), n_layer, n_head and n_embd")
        got[name] = checks.integer(entry, f"config.{name}", v, low=1)
    if got["n_embd"] % got["n_head"]:
        refuse(entry, "config.n_head", f"is {got['n_head']}, which does not divide n_embd = "
                                       f"{got['n_embd']}")
    eps = get("layer_norm_epsilon", 1e-5)
    got["layer_norm_epsilon"] = checks.real32(entry, "config.layer_norm_epsilon",
                                              1e-5 if eps is None else eps, low=0.0)
    bias = get("bias", True)
    got["bias"] = checks.switch(entry, "config.bias", True if bias is None else bias)
    return Dims(**got)


@entry_point("mojolike.parameter_shapes")
def parameter_shapes(config, *, entry, **unknown) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape in the model's parameter order (biases only with
    config.bias; lm_head.weight is tied to transformer.wte.weight, not a parameter).

    >>> list(parameter_shapes({"vocab_size": 5, "block_size": 8, "n_layer": 1, "n_head": 2,
    ...                        "n_embd": 4, "bias": False}).items())[:3]
    [('transformer.wte.weight', (5, 4)), ('transformer.wpe.weight', (8, 4)), ('transformer.h.0.ln_1.weight', (4,))]
    """
    d = dims_of(config, entry)
    return gpt.parameter_shapes({"vocab_size": d.vocab_size, "block_size": d.block_size, "n_layer": d.n_layer,
                   "n_embd": d.n_embd, "bias": d.bias})


def check_weights(entry: str, weights, d: Dims) -> dict[str, np.ndarray | None]:
    """The weights as read-only float32 arrays by name (a missing bias is None), each checked."""
    if not isinstance(weights, Mapping):
        refuse(entry, "weights", f"must be a mapping from parameter names to float32 arrays, not "
                                 f"{type(weights).__name__}")
    want = parameter_shapes(d)
    biases = set() if d.bias else set(parameter_shapes(replace(d, bias=True))) - set(want)
    extra = sorted(n for n in map(str, weights) if n not in want and not
                   (n in biases and weights[n] is None))
    if extra:
        refuse(entry, f"weights[{extra[0]!r}]", "is not a parameter of this GPT-2 configuration"
                                                + (" (config.bias is False)" if extra[0] in biases
                                                   else ""))
    out: dict[str, np.ndarray | None] = {n: None for n in biases}
    for name, shape in want.items():
        if name not in weights or weights[name] is None:
            refuse(entry, f"weights[{name!r}]", f"is missing; it is a {shape} float32 array")
        v = weights[name]
        v = v if isinstance(v, np.ndarray) else getattr(v, "data", v)  # a tape Value's array
        a = array(entry, f"weights[{name!r}]", v)
        if a.shape != shape:
            refuse(entry, f"weights[{name!r}]", f"has shape {a.shape}; this configuration needs "
                                                f"{shape}")
        out[name] = a
    return out


def _token_ids(entry: str, name: str, v, d: Dims, ndim: int) -> np.ndarray:
    if isinstance(v, (str, bytes)):
        refuse(entry, name, "is text; pass integer token ids")
    try:
        t = np.asarray(v)
    except (TypeError, ValueError) as err:
        refuse(entry, name, f"is not an array of integer token ids ({err})")
    if t.dtype.kind not in "iu" or t.ndim != ndim or t.size == 0:
        refuse(entry, name, f"must be a non-empty {ndim}-D array of integer token ids, got dtype "
                            f"{t.dtype.name} and shape {t.shape}")
    bad = np.flatnonzero((t.reshape(-1) < 0) | (t.reshape(-1) >= d.vocab_size))
    if bad.size:
        i = int(bad[0])
        refuse(entry, name, f"holds {int(t.reshape(-1)[i])} at flat index {i}, outside the "
                            f"vocabulary [0, {d.vocab_size})")
    if t.shape[-1] > d.block_size:
        refuse(entry, name, f"has {t.shape[-1]} positions; block_size is {d.block_size}")
    return t.astype(np.int64)


# -- the ops of the forward ---------------------------------------------------------------------
def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b broadcast, one float32 addition per element (the tape's add)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), _F32)
    with np.errstate(all="ignore"):
        np.add(a, b, out=out)
    return out


def _conv1d(x, w, b, on) -> np.ndarray:
    """Conv1D: matmul(x, w), then the bias add."""
    y = matmul(x, w, **on)
    return y if b is None else _add(y, b)


def _ln(x, w: dict, name: str, d: Dims, on) -> np.ndarray:
    return layer_norm(x, (d.n_embd,), w[name + ".weight"], w[name + ".bias"],
                      d.layer_norm_epsilon, **on)


def _acts(low: str | None, on):
    """What the contractions read of an activation: itself, or with master weights (`low`,
    GPT._trunk's casts) a float32 one rounded to `low` (one of that type as it is)."""
    if low is None:
        return lambda a: a
    return lambda a: cast(a, low, **on) if a.dtype == _F32 else a


def _mlp(x, w: dict, p: str, d: Dims, on) -> np.ndarray:
    """x + mlp(ln_2(x)): the block's second half (rows of any leading shape)."""
    h = _ln(x, w, p + "ln_2", d, on)
    h = gelu(_conv1d(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"], on), approximate="tanh",
             **on)
    return _add(x, _conv1d(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"], on))


def _heads(a: np.ndarray, nh: int, hs: int) -> np.ndarray:
    """(..., T, C) -> (..., nh, T, hs), C-contiguous (an exact copy)."""
    t = a.shape[-2]
    return np.ascontiguousarray(np.swapaxes(a.reshape(a.shape[:-1] + (nh, hs)), -3, -2)
                                .reshape(a.shape[:-2] + (nh, t, hs)))


def _merge(y: np.ndarray) -> np.ndarray:
    """(..., nh, T, hs) -> (..., T, nh * hs), an exact copy."""
    t = np.swapaxes(y, -3, -2)
    return np.ascontiguousarray(t).reshape(t.shape[:-2] + (t.shape[-2] * t.shape[-1],))


def _on(entry: str, backend, numeric_mode) -> dict:
    b, m = registry.resolve(entry, backend, numeric_mode)
    return {"backend": b, "numeric_mode": m}


@entry_point("mojolike.full_logits")
def full_logits(weights, config, tokens, *, backend=None, numeric_mode=None, entry,
                **unknown) -> np.ndarray:
    """The GPT-2 forward without a tape: (B, T) token ids -> (B, T, V) float32 logits.

    The training forward's public ops in its order: embedding(tokens, wte) +
    embedding(positions, wpe); per layer ln_1, c_attn (matmul then the bias add), heads,
    causal scaled_dot_product_attention, c_proj and the residual add, ln_2, c_fc, gelu
    (tanh), mlp.c_proj and the residual add; ln_f; the tied head linear(x, wte).

    Reproducibility: the tape's forward bits on every backend and thread count; row t of a
    sequence depends only on its tokens 0..t.
    """
    d = dims_of(config, entry)
    w = check_weights(entry, weights, d)
    t = _token_ids(entry, "tokens", tokens, d, 2)
    on = _on(entry, backend, numeric_mode)
    nb, nt = t.shape
    c, nh, hs = d.n_embd, d.n_head, d.head_size
    x = _add(embedding(t, w["transformer.wte.weight"], **on),
             embedding(np.arange(nt, dtype=np.int64), w["transformer.wpe.weight"], **on))
    for layer in range(d.n_layer):
        p = f"transformer.h.{layer}."
        h = _ln(x, w, p + "ln_1", d, on)
        qkv = _conv1d(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"], on)
        q, k, v = (_heads(qkv[..., i * c:(i + 1) * c], nh, hs) for i in range(3))
        y = _merge(scaled_dot_product_attention(q, k, v, is_causal=True, **on))
        x = _add(x, _conv1d(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"], on))
        x = _mlp(x, w, p, d, on)
    x = _ln(x, w, "transformer.ln_f", d, on)
    return linear(x.reshape(nb * nt, c), w["transformer.wte.weight"], **on).reshape(nb, nt, -1)


# -- the KV cache -------------------------------------------------------------------------------
class KVCache:
    """Per prompt and layer, the keys and values (n_head, capacity, head_size) of the positions
    fed so far; `lengths[p]` positions of prompt p are filled. `decode_step` fills it."""

    @entry_point()
    def __init__(self, config, capacities, *, entry, **unknown):
        d = dims_of(config, entry)
        if not isinstance(capacities, (list, tuple)) or not capacities:
            refuse(entry, "capacities", "must be a non-empty list of position counts, one per "
                                        "prompt", value=capacities)
        caps = [checks.integer(entry, f"capacities[{i}]", c, low=1, high=d.block_size)
                for i, c in enumerate(capacities)]
        self.dims = d
        shape = (d.n_head, 0, d.head_size)
        self._k = [[np.zeros(shape[:1] + (c,) + shape[2:], _F32) for _ in range(d.n_layer)]
                   for c in caps]
        self._v = [[np.zeros(shape[:1] + (c,) + shape[2:], _F32) for _ in range(d.n_layer)]
                   for c in caps]
        self.capacities = tuple(caps)
        self.lengths = [0] * len(caps)

    def __len__(self) -> int:
        return len(self.capacities)

    def retype(self, dtype) -> None:
        """Empty keys and values of `dtype` (a master-weight decoder's: generate.decode)."""
        self._k = [[np.zeros(a.shape, dtype) for a in layers] for layers in self._k]
        self._v = [[np.zeros(a.shape, dtype) for a in layers] for layers in self._v]

def _segments(entry: str, cache: KVCache, tokens, d: Dims) -> list[np.ndarray]:
    if not isinstance(tokens, (list, tuple)) or len(tokens) != len(cache):
        refuse(entry, "tokens", f"must be a list with one token sequence per cache prompt "
                                f"({len(cache)}); an empty sequence skips its prompt")
    out = []
    for i, seg in enumerate(tokens):
        if isinstance(seg, (list, tuple, np.ndarray)) and len(seg) == 0:
            out.append(np.zeros(0, np.int64))
            continue
        s = _token_ids(entry, f"tokens[{i}]", seg, d, 1)
        if cache.lengths[i] + s.size > cache.capacities[i]:
            refuse(entry, f"tokens[{i}]", f"has {s.size} tokens but prompt {i}'s cache holds "
                                          f"{cache.lengths[i]} of {cache.capacities[i]} positions")
        out.append(s)
    if not any(s.size for s in out):
        refuse(entry, "tokens", "are all empty; nothing to decode")
    return out


def _attend(cache: KVCache, layer: int, spans, qkv: np.ndarray, d: Dims, on) -> np.ndarray:
    """The attention output (rows, C) of every stepping prompt's new rows, after writing their
    keys and values to the cache.

    One call for all prompts: batch entry b is prompt p's new queries (L = the most new rows)
    over its positions (S = the longest), with the boolean mask j <= start + i of that
    prompt (its causal rows over its own cache). Each (b, h) is computed alone (clause 16),
    a position that does not take part holds -0.0 in every fold over j, and trailing -0.0
    terms leave a fold unchanged (clause 17): each row has the bits of the causal prefill
    call and of the one-query non-causal call over positions 0..t. Padded query rows take
    no key and give +0.0 (clause 13); they are dropped.
    """
    c, nh, hs = d.n_embd, d.n_head, d.head_size
    nl = max(r1 - r0 for _, r0, r1, _ in spans)
    ns = max(st + r1 - r0 for _, r0, r1, st in spans)
    q = np.zeros((len(spans), nh, nl, hs), qkv.dtype)  # with master weights the low type
    k = np.zeros((len(spans), nh, ns, hs), qkv.dtype)
    v = np.zeros((len(spans), nh, ns, hs), qkv.dtype)
    mask = np.zeros((len(spans), 1, nl, ns), np.bool_)
    for b, (p, r0, r1, st) in enumerate(spans):
        m, stop = r1 - r0, st + r1 - r0
        q[b, :, :m] = _heads(qkv[r0:r1, :c], nh, hs)
        kc, vc = cache._k[p][layer], cache._v[p][layer]
        kc[:, st:stop] = _heads(qkv[r0:r1, c:2 * c], nh, hs)
        vc[:, st:stop] = _heads(qkv[r0:r1, 2 * c:], nh, hs)
        k[b, :, :stop] = kc[:, :stop]
        v[b, :, :stop] = vc[:, :stop]
        mask[b, 0, :m] = np.arange(ns)[None, :] <= np.arange(st, stop)[:, None]
    o = scaled_dot_product_attention(q, k, v, attn_mask=mask, **on)
    y = np.empty((qkv.shape[0], c), _F32)
    for b, (_, r0, r1, _) in enumerate(spans):
        y[r0:r1] = _merge(o[b, :, :r1 - r0])
    return y


def transposed(w: dict) -> dict:
    """The weights with each Conv1D weight (in, out) replaced by its transpose (out, in), an
    exact copy: linear(x, w.T) cell n is fold over k of x[k] * w[k, n], matmul(x, w)'s cell
    bit for bit, without matmul's transposing the weight on every call."""
    return {n: (np.ascontiguousarray(a.T) if a is not None and conv1d_weight(n, a) else a)
            for n, a in w.items()}


def conv1d_weight(name: str, a: np.ndarray) -> bool:
    """Whether parameter `name` is a block's Conv1D weight (in, out): 2-D, inside a block."""
    return a.ndim == 2 and ".h." in name


def _conv1d_t(x, wt, b, on) -> np.ndarray:
    y = linear(x, wt, **on)
    return y if b is None else _add(y, b)


def _step(w: dict, d: Dims, cache: KVCache, segs: list[np.ndarray], all_logits: bool, on,
          low: str | None = None) -> np.ndarray:
    """Feed the segments (w from `transposed`); returns the logits rows, advances the cache.
    `low`: master weights' type (w from GPT._decoder_weights, the cache of that type): the
    activations are cast where GPT._trunk casts them."""
    act = _acts(low, on)
    spans, r = [], 0
    for p, s in enumerate(segs):
        if s.size:
            spans.append((p, r, r + s.size, cache.lengths[p]))
            r += s.size
    ids = np.concatenate([s for s in segs if s.size])
    pos = np.concatenate([np.arange(st, st + r1 - r0, dtype=np.int64)
                          for _, r0, r1, st in spans])
    x = _add(embedding(ids, w["transformer.wte.weight"], **on),
             embedding(pos, w["transformer.wpe.weight"], **on))
    for layer in range(d.n_layer):
        pre = f"transformer.h.{layer}."
        h = _ln(x, w, pre + "ln_1", d, on)
        qkv = act(_conv1d_t(act(h), w[pre + "attn.c_attn.weight"], w[pre + "attn.c_attn.bias"],
                            on))
        y = _attend(cache, layer, spans, qkv, d, on)
        x = _add(x, _conv1d_t(act(y), w[pre + "attn.c_proj.weight"], w[pre + "attn.c_proj.bias"],
                              on))
        h = _ln(x, w, pre + "ln_2", d, on)
        h = _conv1d_t(act(h), w[pre + "mlp.c_fc.weight"], w[pre + "mlp.c_fc.bias"], on)
        h = gpt.low_gelu(act(h), "tanh", on)
        x = _add(x, _conv1d_t(act(h), w[pre + "mlp.c_proj.weight"], w[pre + "mlp.c_proj.bias"],
                              on))
    if not all_logits:
        x = x[[r1 - 1 for _, _, r1, _ in spans]]
    x = _ln(x, w, "transformer.ln_f", d, on)
    logits = linear(act(x), w.get(HEAD, w["transformer.wte.weight"]), **on)
    for p, r0, r1, _ in spans:
        cache.lengths[p] += r1 - r0
    return logits


@entry_point("mojolike.decode_step")
def decode_step(weights, config, cache, tokens, all_logits=False, *, backend=None,
                numeric_mode=None, entry, **unknown) -> np.ndarray:
    """Feed `tokens[p]` (new token ids, possibly empty) of every prompt p of `cache` through the
    model, filling the cache; returns float32 logits: the last new row of each stepping prompt
    (n, V) in prompt order, or with `all_logits` every new row, prompts in order.

    A prompt whose cache is empty attends causally over its new tokens; otherwise each new
    token attends, non-causal, with its one query over the prompt's positions 0..t.

    Reproducibility: every returned row equals `full_logits` of that prompt's sequence at that
    position bit for bit, whatever the other prompts and on every backend.
    """
    if not isinstance(cache, KVCache):
        refuse(entry, "cache", f"must be a KVCache, not {type(cache).__name__}")
    d = dims_of(config, entry)
    if d != cache.dims:
        refuse(entry, "config", f"is {d}, but the cache was made for {cache.dims}")
    w = check_weights(entry, weights, d)
    segs = _segments(entry, cache, tokens, d)
    return _step(transposed(w), d, cache, segs, checks.switch(entry, "all_logits", all_logits),
                 _on(entry, backend, numeric_mode))


# -- sampling and generation --------------------------------------------------------------------
def _prompts(entry: str, prompts, d: Dims) -> list[np.ndarray]:
    if isinstance(prompts, np.ndarray) and prompts.ndim == 2:
        prompts = list(prompts)
    if not isinstance(prompts, (list, tuple)) or not prompts:
        refuse(entry, "prompts", "must be a non-empty list of token sequences (lengths may "
                                 "differ)", value=prompts)
    return [_token_ids(entry, f"prompts[{i}]", p, d, 1) for i, p in enumerate(prompts)]


def choose(logits: np.ndarray, temperature: np.float32, top_k: int | None, gen: Generator,
           streams: list[int], positions: list[int], on, entry: str = "mojolike.generate"
           ) -> list[int]:
    """The next token of each row of logits (n, V), by the module docstring's rule."""
    if temperature == 0:
        return np.argmax(logits, axis=1).tolist()  # the first maximum: ties to the lowest id
    with np.errstate(all="ignore"):
        z = np.divide(logits, temperature, dtype=_F32)
    if not np.isfinite(z).all():
        refuse(entry, "temperature", f"is {float(temperature)!r}: logits / temperature overflows "
                                     f"float32; use a larger one, or 0 for greedy")
    v = z.shape[1]
    if top_k is not None and top_k < v:
        order = np.argsort(-z, axis=1, kind="stable")[:, top_k:]  # equal values: lower ids first
        np.put_along_axis(z, order, _NEG_INF, axis=1)
    p = softmax(z, dim=-1, **on)
    out = []
    for i in range(p.shape[0]):
        u = gen.uniform(1, stream=streams[i], offset=positions[i])[0]
        run = np.cumsum(p[i], dtype=_F32)  # sequential float32 additions in id order
        hit = np.flatnonzero(run > _F32(u) * run[-1])
        out.append(int(hit[0]) if hit.size else int(np.flatnonzero(run >= run[-1])[0]))
    return out


@entry_point("mojolike.generate")
def generate(weights, config, prompts, max_new_tokens, temperature=1.0, top_k=None, seed=0,
             streams=None, *, backend=None, numeric_mode=None, entry, **unknown):
    """Decode `max_new_tokens` tokens after each prompt with a KV cache; returns (tokens, logprobs):
    per prompt its tokens followed by the new ones, and the log-prob of each new token under
    the untempered model, -cross_entropy(logits row, token, reduction='none').

    temperature 0 is greedy (ties to the lowest id), else sampling as the module docstring
    states, keyed by (seed, stream, position): stream p for prompt p, or `streams[p]`
    (so a prompt decoded alone with its batch stream gives its batch tokens); top_k None or
    in [1, V]. Refused by name: empty or non-integer prompts, ids outside [0, V), a prompt
    plus max_new_tokens above block_size, temperature < 0 or non-finite, top_k outside
    [1, V], unknown keywords.

    Reproducibility: each log-prob equals the training forward's -token loss at that position
    bit for bit; a prompt's tokens and log-probs do not depend on the other prompts, the
    backend or the thread count.
    """
    d = dims_of(config, entry)
    return decode(entry, check_weights(entry, weights, d), d, prompts, max_new_tokens,
                  temperature, top_k, seed, streams, _on(entry, backend, numeric_mode))


def decode(entry: str, w: dict, d: Dims, prompts, max_new_tokens, temperature, top_k, seed,
           streams, on, low: str | None = None):
    """`generate` on checked weights `w` (with `low`: GPT._decoder_weights, read as
    GPT._trunk reads master weights; the KV cache then holds keys and values of `low`)."""
    ps = _prompts(entry, prompts, d)
    n_new = checks.integer(entry, "max_new_tokens", max_new_tokens, low=0)
    for i, pr in enumerate(ps):
        if pr.size + n_new > d.block_size:
            refuse(entry, "max_new_tokens", f"is {n_new}: prompt {i} has {pr.size} tokens and "
                                            f"block_size is {d.block_size}", value=max_new_tokens)
    temp = _F32(checks.real32(entry, "temperature", temperature, low=0.0))
    k = None if top_k is None else checks.integer(entry, "top_k", top_k, low=1, high=d.vocab_size)
    sd = checks.integer(entry, "seed", seed, low=0, high=TWO64 - 1)
    if streams is None:
        st = list(range(len(ps)))
    else:
        if not isinstance(streams, (list, tuple)) or len(streams) != len(ps):
            refuse(entry, "streams", f"must be a list of {len(ps)} stream ids, one per prompt",
                   value=streams)
        st = [checks.integer(entry, f"streams[{i}]", s, low=0, high=TWO64 - 1)
              for i, s in enumerate(streams)]
    tokens = [pr.tolist() for pr in ps]
    logprobs: list[list[float]] = [[] for _ in ps]
    if n_new == 0:
        return tokens, logprobs
    gen = Generator(sd, **on)
    cache = KVCache(d, [pr.size + n_new - 1 for pr in ps])  # the last new token is never fed
    if low is not None:
        cache.retype(checks.cast_types()[low])
    w = transposed(w)
    logits = _step(w, d, cache, ps, False, on, low)
    for step in range(n_new):
        new = choose(logits, temp, k, gen, st, [len(t) for t in tokens], on, entry)
        lp = cross_entropy(logits, np.int64(new), reduction="none", **on)
        for i, tok in enumerate(new):
            tokens[i].append(tok)
            logprobs[i].append(float(-lp[i]))
        if step + 1 < n_new:
            logits = _step(w, d, cache, [np.int64([t]) for t in new], False, on, low)
    return tokens, logprobs


__all__ = ["KVCache", "decode_step", "full_logits", "generate", "parameter_shapes"]
