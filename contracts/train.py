"""The train suite: a certified training run of the reference model, resumed, split and threaded,
the tape's fan-in order, a tiny GPT's run and generation (contracts/train_gpt.py), negative
controls and refusals (contracts/train.md).

Case `tiny` is `TINY` trained for 12 steps (an overflow injected at step 5, the
gate closing at step 7): every step's records, then the final parameters and
states. Case `fanin` is one forward and backward on the tape where values have
three consumers (the reference model's values have at most two, and two
contributions give the same bits in either order, IEEE addition commuting).
Cases `gpt` and `generate` (profile v2) are contracts/train_gpt.py's; the v1
cases' records keep their bits.

>>> [c.id for c in cases()], TINY.steps, TINY.overflow_steps, TINY.tokens_per_step
(['tiny', 'fanin', 'gpt', 'generate'], 12, (5,), 8)
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

import mojolike
from mojolike.training import trainer as train_mod

from ..core import cardformat
from ..training import data
from ..training import tape as _tape
from ..training.checkpoint import write as write_checkpoint
from ..training.models import TinyLM
from ..training.trainer import TrainConfig, Trainer
from . import train_gpt
from .harness import refusal_clause
from .layers import known_fallback  # noqa: F401  (clause (a): the head's expf/logf)
from .train_runs import on_1_and_2_threads, split_against_batch

NAME = "train"
FAMILY = "layers"  # the thread count lives with every family's kernels of a backend
PROFILE = "mojolike.identical.train.fp32.v2"

# 8 tokens per step in two microbatches of 4 rows: the simulator runs a block of Python
# threads per row, about 2 s per step here; the oracle about 0.2 s
TINY = TrainConfig(steps=12, d_model=8, d_hidden=16, vocab=32, dropout=0.1, batch_size=2,
                   seq_len=4, microbatches=2, lr=1e-2, min_lr=1e-3, warmup_steps=3,
                   growth_interval=3, outlier_window=4, skip_lossz=1.5, overflow_steps=(5,))
RESUME_AT = 6
# aligned microbatches hold whole 1024-token subtrees of the fold: 2 x 1024 rows at least
ALIGNED_SMALL = {"steps": 1, "d_model": 2, "d_hidden": 2, "vocab": 8, "batch_size": 2,
                 "seq_len": 1024, "warmup_steps": 1}
ALIGNED = {"steps": 2, "d_model": 64, "vocab": 256, "batch_size": 16, "seq_len": 128,
           "warmup_steps": 1}


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # "run", "fanin", "gpt" or "generate"


def cases() -> tuple[Case, ...]:
    return (Case("tiny", "run"), Case("fanin", "fanin"), Case("gpt", "gpt"),
            Case("generate", "generate"))


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    """The case's outputs on k's backend (a control runs the oracle, patched as it says)."""
    if isinstance(k, _Control):
        with k.patched():
            return _case(case, "oracle", keep=False)
    return _case(case, k.backend, keep=True)


_kept: dict[str, tuple[str, bytes]] = {}  # backend -> (the tiny run's card, its step-6 checkpoint)


def _case(case: Case, backend: str, keep: bool) -> list[tuple[str, np.ndarray]]:
    if case.kind == "fanin":
        return fanin(backend)
    if case.kind == "gpt":
        return train_gpt.gpt_run(backend, keep)
    if case.kind == "generate":
        return train_gpt.generate_case(backend)
    t = Trainer(TINY, backend=backend)
    t.run(until=RESUME_AT)
    with tempfile.TemporaryDirectory() as d, open(t.save(os.path.join(d, "ckpt.npz")), "rb") as f:
        saved = f.read()
    t.run()
    if keep:
        _kept[backend] = (t.card(), saved)
    return t.outputs()


def fanin(backend: str) -> list[tuple[str, np.ndarray]]:
    """TinyLM's block with two more terms in the residual, h * y and h + y * y, over 32 tokens:
    h (the normalized input) is read by fc1, a mul and an add, y (the MLP's output) by two
    muls, once as both arguments, so each gradient is three contributions added newest
    first."""
    model = TinyLM(d_model=8, d_hidden=16, vocab=32, seed=5, backend=backend)
    tok, tgt = data.batch(3, batch_size=1, seq_len=32)
    tape = mojolike.Tape(backend=backend)
    emb, n1, w1, b1, w2, b2, n2, head = (tape.param(p.copy()) for p in model.parameters())
    x = tape.embedding(tok.reshape(-1) % 32, emb)
    h = tape.rms_norm(x, n1)
    y = tape.linear(tape.relu(tape.linear(h, w1, b1)), w2, b2)
    r = tape.add(tape.add(x, tape.mul(h, y)), tape.add(h, tape.mul(y, y)))
    loss = tape.chunked_lm_head_loss(tape.rms_norm(r, n2), head, tgt.reshape(-1) % 32,
                                     chunk_size=1024)
    grads = tape.backward(loss, seed=256.0)
    return [("loss", np.float32([loss.item()]))] + [
        (f"grad.{name}", g.reshape(-1)) for name, g in zip(TinyLM.NAMES, grads)]


# -- clause (c): resume in a fresh process, aligned microbatches, threads ------------------------
def _resume(backend: str) -> tuple[bool, str]:
    """The step-6 checkpoint finished by `mojolike train --resume` in a new process."""
    if backend not in _kept:  # the harness ran the cases first; compute them when it did not
        _case(cases()[0], backend, keep=True)
    card, saved = _kept[backend]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.npz")
        with open(path, "wb") as f:
            f.write(saved)
        cmd = [sys.executable, "-m", "mojolike", "train", "--resume", path, "--backend", backend,
               "--out", d]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            return False, (f"the resumed run in a new process failed ({done.returncode}): "
                           f"{done.stderr.strip()[-300:]}")
        got = cardformat.read(os.path.join(d, "train.card")).text
    diff = cardformat.first_difference(card, got)
    return diff is None, (f"resumed from the step-{RESUME_AT} checkpoint in a new process "
                          f"(mojolike train --resume): "
                          + ("the same card as the uninterrupted run" if diff is None
                             else f"DIFFERS: {diff}"))


def _aligned(backend: str) -> tuple[bool, str]:
    """Two aligned microbatches give every record and final value of one batch."""
    if backend == "cuda-sim":
        return True, ("aligned microbatches: not run on the simulator (it runs a block of Python "
                      "threads per row, and an aligned split needs 2 x 1024 rows: minutes per "
                      "call); its kernels equal the oracle's by clause (a), on the oracle the "
                      "split equals the batch")
    cfg = ALIGNED_SMALL if backend == "oracle" else ALIGNED
    same, differ = split_against_batch(backend, cfg)
    what = (f"{cfg['steps']} step(s) of {cfg['batch_size'] * cfg['seq_len']} tokens, d_model "
            f"{cfg['d_model']}, vocab {cfg['vocab']}")
    return same, (f"two aligned microbatches of 1024 tokens ({what}): "
                  + ("every record and final value equals one batch's" if same else
                     f"DIFFER from one batch at {differ[:4]}"))


def _threads(k) -> tuple[bool, str]:
    if not hasattr(k, "set_num_threads"):
        return True, f"{k.backend} has no host thread count"
    same, why = on_1_and_2_threads(k, ALIGNED)
    if same is None:
        return False, why
    return same, (f"{ALIGNED['steps']} steps of {ALIGNED['batch_size'] * ALIGNED['seq_len']} "
                  f"tokens, d_model {ALIGNED['d_model']}: 1 and 2 threads "
                  + ("give the same records and final values" if same else "DIFFER"))


def clause_invariance(k) -> tuple[str, str]:
    results = [_resume(k.backend), _aligned(k.backend), _threads(k),
               train_gpt.gpt_resume(k.backend), train_gpt.gpt_aligned(k.backend),
               train_gpt.gpt_threads(k)]
    return ("pass" if all(ok for ok, _ in results) else "fail"), "; ".join(n for _, n in results)


# -- clause (f): refusals -------------------------------------------------------------------------
def _refusal_table(backend: str, folder: str):
    t = Trainer(TrainConfig(steps=2, d_model=4, vocab=16, batch_size=1, seq_len=4,
                            microbatches=1), backend=backend)
    done = Trainer(t.config, backend=backend)
    done.run()
    t.run(until=1)
    good = t.save(os.path.join(folder, "good.npz"))
    state = os.path.join(folder, "optimizer.npz")
    mojolike.save_state(state, t.optimizer.state_dict())
    other = os.path.join(folder, "other-text.npz")
    meta = {"format": train_mod.FORMAT, "config": t.config.to_dict(), "text_md5": "0" * 32}
    write_checkpoint("suite", other, meta, {"records": np.zeros((0, 6), np.float32)})
    cut = os.path.join(folder, "cut.npz")
    with open(good, "rb") as f, open(cut, "wb") as g:
        g.write(f.read()[:-100])
    load = lambda p, **kw: lambda: Trainer.load(p, backend=backend, **kw)
    cfg = lambda **kw: lambda: TrainConfig(**kw)
    table = [
        ("microbatches", cfg(batch_size=6, microbatches=4)),
        ("vocab", cfg(vocab=257)),
        ("overflow_steps", cfg(steps=4, overflow_steps=(5,))),
        ("overflow_steps", cfg(steps=4, overflow_steps=(3, 2))),
        ("warmup_steps", cfg(steps=4, warmup_steps=5)),
        ("min_lr", cfg(lr=1e-3, min_lr=1e-2)),
        ("chunk_size", cfg(chunk_size=1000)),
        ("betas[1]", cfg(betas=(0.9, 1.0))),
        ("dropout", cfg(dropout=1.0)),
        ("tokens_per_step", cfg(tokens_per_step=8)),
        ("config", lambda: Trainer({"steps": 2}, backend=backend)),
        ("seq_len", lambda: Trainer(TrainConfig(seq_len=200000), backend=backend)),
        ("until", lambda: t.run(until=0)),
        ("until", lambda: t.run(until=3)),
        ("path", load(state)),
        ("path", load(cut)),
        ("path", load(os.path.join(folder, "missing.npz"))),
        ("text_md5", load(other)),
        ("shuffle", load(good, shuffle=True)),
        ("backend", lambda: Trainer(t.config, backend="tpu")),
        ("steps", done.train_step),
    ]
    return table, t


def clause_refusals(k) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as d:
        table, t = _refusal_table(k.backend, d)
        before = _files(d)
        status, detail = refusal_clause(table, t.model.parameters())
        after = _files(d)
    if status == "pass" and (t.step != 1 or after != before):
        return "fail", (f"{detail}; but a refused call moved the run to step {t.step}" if t.step != 1
                        else f"{detail}; but a refused call changed the files in the folder")
    return status, detail + "; the run and the checkpoint files left as they were"


def _files(folder: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "f": clause_refusals(k),
            "g": train_gpt.clause_generate(k.backend)}


# -- clause (e): negative controls ----------------------------------------------------------------
class _Control:
    """A deliberately wrong training run (on the oracle); its card must differ."""

    backend = "oracle"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, patches):
        self.name, self.describe, self._patches = name, describe, patches

    @contextlib.contextmanager
    def patched(self):
        with contextlib.ExitStack() as stack:
            for patch in self._patches:
                if isinstance(patch, train_gpt.KernelOverride):
                    stack.enter_context(patch.applied())
                    continue
                owner, attr, value = patch
                saved = getattr(owner, attr)
                setattr(owner, attr, value)
                stack.callback(setattr, owner, attr, saved)
            yield


_CONTRIBUTE = _tape.Tape._contribute


def _contribute_all(self, slots, v, g, owned):
    if isinstance(g, dict):  # a part of a split (the GPT's q, k, v): the tape's own joining
        return _CONTRIBUTE(self, slots, v, g, owned)
    slots.setdefault(v._index, []).append(g)


def _oldest_first(self, slots, v):
    """The contributions added oldest consumer first: ((c1 + c2) + c3) instead of (c3 + c2) + c1."""
    parts = slots.pop(v._index, None)
    if parts is None:
        return None
    if isinstance(parts[0], dict):  # a split's joined parts, as the tape keeps them
        return parts
    acc = parts[-1].copy()
    for g in reversed(parts[:-1]):
        np.add(acc, g, out=acc)
    return [acc, True]


class _ZeroSkipScaler(mojolike.GradScaler):
    """A skipped step taken anyway with every gradient times 0 (the non-finite cells as 0): the
    moments decay, the step counts advance and weight decay applies."""

    def step(self, optimizer, grads, max_norm=None, **kw):
        out = super().step(optimizer, grads, max_norm, **kw)
        if self._states[id(optimizer)]["found_inf"]:
            optimizer.step([np.zeros_like(g) for g in grads], max_norm, **kw)
        return out


class _DecayThenClipScaler(mojolike.GradScaler):
    """Weight decay added to the gradients before the clip: the decaying group's gradients read
    as (g + wd*p) and scaled by the clip coefficient, the optimizer's own decay off."""

    def step(self, optimizer, grads, max_norm=None, **kw):
        group = optimizer.param_groups[0]
        saved = group["weight_decay"]
        wd, scale = np.float32(saved), np.float32(self.get_scale())
        decayed = [g + (wd * p) * scale for g, p in zip(grads, group["params"])]
        group["weight_decay"] = 0.0
        try:
            return super().step(optimizer, decayed + list(grads[len(decayed):]), max_norm, **kw)
        finally:
            group["weight_decay"] = saved


def negative_controls() -> list[_Control]:
    return [
        _Control("fanin-oldest-first", "the tape adds a value's gradient contributions oldest "
                 "consumer first", [(_tape.Tape, "_contribute", _contribute_all),
                                    (_tape.Tape, "_gradient", _oldest_first)]),
        _Control("skip-as-zero", "the scaler's skip done by stepping with the gradients times 0",
                 [(train_mod, "GradScaler", _ZeroSkipScaler)]),
        _Control("clip-after-decay", "weight decay added to the gradients before the clip scales "
                 "them", [(train_mod, "GradScaler", _DecayThenClipScaler)]),
        _Control("dropout-by-microbatch", "dropout keyed by the position within the microbatch "
                 "(every microbatch from row 0; the GPT's too)",
                 [(train_mod, "microbatch_rows", lambda j, rows: 0)]),
        *train_gpt.controls(_Control),
    ]
