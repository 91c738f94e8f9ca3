"""The train suite's GPT part (profile v2): a tiny GPT trained by `Trainer`, resumed in a fresh
process, split and threaded, its generation's parity and batch invariance, and the negative
controls that must change the card (contracts/train.md clauses 26-33).

Case `gpt` is `GPT_RUN` trained for 3 steps in two microbatches of one row (an overflow
injected at step 2): every step's records, then the final parameters and states. Case
`generate` decodes three prompts of different lengths together with `GPT_GEN`'s KV cache,
sampled (temperature 1, top-k 8): the tokens, the log-probs, and the negated per-token
losses of the training forward (`GPT.token_losses`) at every generated position.

>>> GPT_RUN.model, GPT_RUN.steps, GPT_RUN.tokens_per_step, [len(p) for p in PROMPTS]
('gpt', 3, 16, [5, 1, 3])
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile

import numpy as np

from ..core import cardformat, registry
from ..training import generate as generate_mod
from ..training import train_models
from ..training.gpt import GPT
from ..training.trainer import TrainConfig, Trainer
from .train_runs import on_1_and_2_threads, split_against_batch
from .transformer import _CompletionOrderDq

# 16 tokens per step in two microbatches of one 8-token row, n_embd 8: about 7 s per step on
# the simulator (a 2-core machine at load 8), 0.5 s on the oracle
GPT_RUN = TrainConfig(model="gpt", steps=3, n_layer=1, n_head=2, n_embd=8, block_size=8,
                      batch_size=2, vocab=32, microbatches=2, dropout=0.1, lr=1e-2, min_lr=1e-3,
                      warmup_steps=1, growth_interval=2, overflow_steps=(2,))
GPT_RESUME_AT = 2
# aligned: two microbatches of 1024 tokens (128 rows of 8), dropout on; the oracle's is smaller
GPT_ALIGNED = {"model": "gpt", "steps": 2, "n_layer": 1, "n_head": 2, "n_embd": 8,
               "block_size": 8, "batch_size": 256, "vocab": 32, "dropout": 0.1,
               "warmup_steps": 1}
GPT_ALIGNED_SMALL = {**GPT_ALIGNED, "steps": 1, "n_head": 1, "n_embd": 2, "vocab": 8}
# n_embd 16 and 8 new tokens: with n_embd 8 (std-0.02 weights) the residual's rounding hides
# the decoder control's one-ulp changes of the attention output from every log-prob
GPT_GEN = {"vocab_size": 32, "block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16,
           "seed": 3}
PROMPTS = ([1, 2, 3, 4, 5], [6], [7, 8, 9])
GEN = {"max_new_tokens": 8, "temperature": 1.0, "top_k": 8, "seed": 5}

_kept: dict[str, tuple[str, bytes]] = {}  # backend -> (the gpt run's card, its checkpoint)


def gpt_run(backend: str, keep: bool) -> list[tuple[str, np.ndarray]]:
    t = Trainer(GPT_RUN, backend=backend)
    t.run(until=GPT_RESUME_AT)
    with tempfile.TemporaryDirectory() as d, open(t.save(os.path.join(d, "ckpt.npz")), "rb") as f:
        saved = f.read()
    t.run()
    if keep:
        _kept[backend] = (t.card(), saved)
    return t.outputs()


def _generated(backend: str, prompts, streams=None):
    g = GPT(**GPT_GEN, backend=backend)
    return g, g.generate([list(p) for p in prompts], streams=streams, **GEN)


def generate_case(backend: str) -> list[tuple[str, np.ndarray]]:
    """Per prompt p: tokens (prompt and new, as float32 values), the new tokens' log-probs, and
    -token_losses of the whole generated sequence at those positions (the training forward)."""
    g, (tokens, logprobs) = _generated(backend, PROMPTS)
    out = []
    for p, (t, lp) in enumerate(zip(tokens, logprobs)):
        out += [(f"prompt-{p}/tokens", np.float32(t)), (f"prompt-{p}/logprobs", np.float32(lp)),
                (f"prompt-{p}/neg_token_losses", _neg_losses(g, t, len(PROMPTS[p])))]
    return out


def _neg_losses(g: GPT, t: list[int], n_prompt: int) -> np.ndarray:
    seq = np.asarray(t, np.int64)
    rows = g.token_losses(seq[None, :-1], seq[None, 1:])[0]
    return np.negative(rows[n_prompt - 1:])


# -- clause (c): resume, aligned microbatches, threads --------------------------------------------
def gpt_resume(backend: str) -> tuple[bool, str]:
    if backend not in _kept:
        gpt_run(backend, keep=True)
    card, saved = _kept[backend]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.npz")
        with open(path, "wb") as f:
            f.write(saved)
        cmd = [sys.executable, "-m", "mojolike", "train", "--resume", path, "--backend", backend,
               "--out", d]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            return False, (f"gpt: the resumed run in a new process failed ({done.returncode}): "
                           f"{done.stderr.strip()[-300:]}")
        got = cardformat.read(os.path.join(d, "train.card")).text
    diff = cardformat.first_difference(card, got)
    return diff is None, (f"gpt: resumed from the step-{GPT_RESUME_AT} checkpoint in a new "
                          f"process: " + ("the same card as the uninterrupted run" if diff is None
                                          else f"DIFFERS: {diff}"))


def gpt_aligned(backend: str) -> tuple[bool, str]:
    if backend == "cuda-sim":
        return True, ("gpt aligned microbatches: not run on the simulator (2 x 1024 rows); its "
                      "kernels equal the oracle's by clause (a), on the oracle the split equals "
                      "the batch")
    cfg = GPT_ALIGNED_SMALL if backend == "oracle" else GPT_ALIGNED
    same, differ = split_against_batch(backend, cfg)
    what = (f"{cfg['steps']} step(s) of {cfg['batch_size']} x {cfg['block_size']} tokens, n_embd "
            f"{cfg['n_embd']}, dropout {cfg['dropout']}")
    return same, (f"gpt: two aligned microbatches of 1024 tokens ({what}): "
                  + ("every record and final value equals one batch's" if same else
                     f"DIFFER at {differ[:4]}"))


def gpt_threads(k) -> tuple[bool, str]:
    if not hasattr(k, "set_num_threads"):
        return True, f"gpt: {k.backend} has no host thread count"
    same, why = on_1_and_2_threads(k, GPT_ALIGNED)
    if same is None:
        return False, why
    return same, ("gpt: the aligned run on 1 and 2 threads gives "
                  + ("the same records and final values" if same else "DIFFERENT values"))


# -- clause (g): generation -------------------------------------------------------------------------
def clause_generate(backend: str) -> tuple[str, str]:
    """Parity: every log-prob equals -token_losses bit for bit; batch invariance: each prompt
    decoded alone (its batch stream) gives its batch tokens and log-probs."""
    _, (tokens, logprobs) = _generated(backend, PROMPTS)
    g = GPT(**GPT_GEN, backend=backend)
    bad = []
    for p, (t, lp) in enumerate(zip(tokens, logprobs)):
        if np.float32(lp).tobytes() != _neg_losses(g, t, len(PROMPTS[p])).tobytes():
            bad.append(f"prompt {p}'s log-probs differ from -token_losses")
        _, (t1, lp1) = _generated(backend, [PROMPTS[p]], streams=[p])
        if t1[0] != t or np.float32(lp1[0]).tobytes() != np.float32(lp).tobytes():
            bad.append(f"prompt {p} decoded alone differs from its batch")
    n = sum(len(lp) for lp in logprobs)
    return ("fail", "; ".join(bad)) if bad else (
        "pass", (f"{len(PROMPTS)} prompts of {[len(p) for p in PROMPTS]} tokens, {n} sampled "
                f"tokens: every log-prob equals -token_losses of the training forward bit for "
                f"bit, and each prompt decoded alone gives its batch tokens and log-probs"))


# -- clause (e): negative controls ----------------------------------------------------------------
def _tie_embedding_first(head, head_parts, emb):
    """The tied wte's contributions added embedding first, then each microbatch's head part."""
    acc = emb.copy()
    for g in head_parts:
        np.add(acc, g, out=acc)
    return acc


def _sdpa_keys_rotated(query, key, value, attn_mask=None, *args, **kw):
    """The decoder's attention with the keys (and values, mask) rotated by one, key 0 last: the
    softmax's and the weighted sums' folds over the cache taken in another order (a reversal
    would not do: the fold's butterfly gives the reversed order the same bits)."""
    if kw.pop("is_causal", False):
        n, m = query.shape[-2], key.shape[-2]
        attn_mask = np.tril(np.ones((n, m), bool), m - n)
    rot = lambda a, axis: np.ascontiguousarray(np.roll(a, -1, axis=axis))
    mask = None if attn_mask is None else rot(np.asarray(attn_mask), -1)
    return _SDPA(query, rot(key, -2), rot(value, -2), mask, *args, **kw)


_SDPA = generate_mod.scaled_dot_product_attention


class KernelOverride:
    """A patch (for the train suite's `_Control`): the transformer family's oracle kernels."""

    def __init__(self, kernels):
        self.kernels = kernels

    @contextlib.contextmanager
    def applied(self):
        with registry.override("transformer", "oracle", "identical", self.kernels):
            yield


def controls(control_class) -> list:
    """The GPT's negative controls, as the suite's `_Control`s."""
    return [
        control_class("tied-embedding-first", "the tied wte's gradient as (d_embedding + d_head "
                      "of microbatch 0) + d_head of microbatch 1, not the summed head's plus the "
                      "embedding's", [(train_models, "tie", _tie_embedding_first)]),
        control_class("dq-completion-order", "attention's backward: dQ from per-key-block "
                      "partials added in reverse block order (the order a parallel run may "
                      "complete them in)", [KernelOverride(_CompletionOrderDq())]),
        control_class("decoder-keys-rotated", "the decoder's attention over the cache summed "
                      "with key 0 last", [(generate_mod, "scaled_dot_product_attention",
                                           _sdpa_keys_rotated)]),
    ]
