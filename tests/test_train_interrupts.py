"""Interrupts of a training run: a step either completed or left nothing advanced, wherever an
exception or a signal arrives; resuming (in the process, from a checkpoint, or `mojolike train
--resume` after SIGINT/SIGTERM) gives the uninterrupted digest.

Every interrupt is injected deterministically: a patched method raises (or sends this process a
signal) at a chosen point of a chosen step; the command's points come from its test hook
(`MOJOLIKE_TRAIN_TEST_INTERRUPT`), read in the subprocess.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from mojolike import Refusal
from mojolike.training.trainer import TrainConfig, Trainer

SMALL = dict(steps=5, d_model=8, d_hidden=16, vocab=32, batch_size=2, seq_len=8, microbatches=2,
             warmup_steps=1, growth_interval=2, overflow_steps=(4,), outlier_window=2,
             skip_lossz=100.0)
AT = 3  # the step interrupted


def small(**kw) -> TrainConfig:
    return TrainConfig(**{**SMALL, **kw})


def state(t: Trainer) -> list[tuple[str, bytes]]:
    """Every certified value and the step count, as bytes."""
    return [(n, a.tobytes()) for n, a in t.outputs()] + [("step", bytes([t.step]))]


@pytest.fixture(scope="module")
def whole():
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=AT - 1)
    before = state(t)
    t.run(until=AT)
    after = state(t)
    t.run()
    return {"before": before, "after": after, "digest": t.digest()}


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt, so that a failing test cannot stop the session."""


def raise_at(obj, name, when="before", after_calls=0):
    """Patch obj.name (on the instance) to raise Interrupt on its call number `after_calls`
    (counted from 0 in step AT), before or after running the real method."""
    real, calls = getattr(obj, name), {"n": 0}

    def patched(*a, **kw):
        calls["n"] += 1
        if calls["n"] - 1 == after_calls and when == "before":
            raise Interrupt
        out = real(*a, **kw)
        if calls["n"] - 1 == after_calls:
            raise Interrupt
        return out

    setattr(obj, name, patched)
    return lambda: delattr(obj, name) if name in vars(obj) else setattr(obj, name, real)


POINTS = {
    "first-backward": lambda t: raise_at(t._tape, "backward"),
    "second-backward": lambda t: raise_at(t._tape, "backward", after_calls=1),
    "after-backward": lambda t: raise_at(t._tape, "backward", when="after", after_calls=1),
    "outlier-update": lambda t: raise_at(t.outlier, "update", when="after"),
    "scaler-step": lambda t: raise_at(t.scaler, "step"),
    "optimizer-wrote": lambda t: raise_at(t.optimizer, "_step", when="after"),
    "after-scaler-step": lambda t: raise_at(t.scaler, "step", when="after"),
    "scaler-updated": lambda t: raise_at(t.scaler, "update", when="after"),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_an_exception_anywhere_in_a_step_leaves_nothing_advanced_and_run_continues_the_run(
        whole, point):
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=AT - 1)
    undo = POINTS[point](t)
    with pytest.raises(Interrupt):
        t.train_step()
    undo()
    assert state(t) == whole["before"]
    t.run()
    assert t.digest() == whole["digest"]


@pytest.mark.parametrize("point", ["second-backward", "optimizer-wrote", "scaler-updated"])
def test_a_step_interrupted_then_saved_and_loaded_finishes_with_the_uninterrupted_digest(
        whole, point, tmp_path):
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=AT - 1)
    undo = POINTS[point](t)
    with pytest.raises(Interrupt):
        t.train_step()
    undo()
    u = Trainer.load(t.save(tmp_path / "c.npz"), backend="oracle")
    assert u.step == AT - 1
    u.run()
    assert u.digest() == whole["digest"]


@pytest.fixture
def sigint_raises():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _step_with_sigint_in(t, owner, name: str) -> None:
    """t.train_step() with SIGINT sent to this process as owner.name is called; the
    KeyboardInterrupt it raises is expected."""
    real = getattr(owner, name)

    def sends(*a, **kw):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **kw)

    setattr(owner, name, sends)
    try:
        with pytest.raises(KeyboardInterrupt):
            t.train_step()
    finally:
        delattr(owner, name)


def test_sigint_during_the_commit_lets_the_step_finish_then_raises(whole, sigint_raises):
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=AT - 1)
    _step_with_sigint_in(t, t.scaler, "step")  # held until the step's commit is done
    assert state(t) == whole["after"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    t.run()
    assert t.digest() == whole["digest"]


def test_sigint_during_the_backward_rolls_the_step_back(whole, sigint_raises):
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=AT - 1)
    _step_with_sigint_in(t, t._tape, "backward")
    assert state(t) == whole["before"]
    t.run()
    assert t.digest() == whole["digest"]


# -- the command ------------------------------------------------------------------------------------
def _train(args, env_hook=None, cwd=None):
    env = dict(os.environ)
    env.pop("MOJOLIKE_TRAIN_TEST_INTERRUPT", None)
    if env_hook:
        env["MOJOLIKE_TRAIN_TEST_INTERRUPT"] = env_hook
    return subprocess.run([sys.executable, "-m", "mojolike", "train", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _digest(out: str) -> str:
    m = re.search(r"train digest ([0-9a-f]{32})", out)
    assert m, out
    return m[1]


@pytest.fixture(scope="module")
def command_digest():
    t = Trainer(TrainConfig(steps=4), backend="cpu-cffi")
    t.run()
    return t.digest()


@pytest.mark.parametrize("hook,done", [("3:backward:INT", 2), ("3:commit:TERM", 3),
                                       ("2:after:INT", 2)])
def test_mojolike_train_on_a_signal_writes_a_checkpoint_and_a_partial_card_and_resumes_to_the_digest(
        tmp_path, command_digest, hook, done):
    out = tmp_path / "run"
    r = _train(["--steps", "4", "--backend", "cpu-cffi", "--out", str(out)], hook)
    assert r.returncode == 130, r.stderr
    assert "Traceback" not in r.stderr
    assert f"--resume {out / 'checkpoint.npz'}" in r.stderr
    meta = json.loads((out / "train.partial.meta.json").read_text())
    assert meta["partial"] is True and meta["steps_done"] == done
    assert meta["interrupted_by"] == ("SIGTERM" if "TERM" in hook else "SIGINT")
    assert (out / "train.partial.card").exists() and not (out / "train.card").exists()
    assert Trainer.load(out / "checkpoint.npz").step == done
    r = _train(["--resume", str(out / "checkpoint.npz"), "--backend", "cpu-cffi", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    assert _digest(r.stdout) == command_digest


def test_checkpoint_every_keeps_progress_through_a_kill_and_the_resumed_run_has_the_digest(
        tmp_path, command_digest):
    out = tmp_path / "run"
    r = _train(["--steps", "4", "--backend", "cpu-cffi", "--out", str(out),
                "--checkpoint-every", "2"], "3:backward:KILL")
    assert r.returncode == -signal.SIGKILL
    assert Trainer.load(out / "checkpoint.npz").step == 2
    assert not any(p.name.startswith(".mojolike-train-") for p in out.iterdir())
    r = _train(["--resume", str(out / "checkpoint.npz"), "--out", str(out)])
    assert r.returncode == 0, r.stderr
    assert _digest(r.stdout) == command_digest


def test_checkpoint_every_is_refused_below_one(tmp_path):
    from mojolike import cli
    assert cli.main(["train", "--steps", "2", "--out", str(tmp_path), "--checkpoint-every",
                     "0"]) == 2
    assert not any(tmp_path.iterdir())


# -- the invariants a checkpoint keeps --------------------------------------------------------------
def test_save_refuses_a_trainer_whose_generator_moved_without_a_step(tmp_path):
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=2)
    t.generator.next_stream()
    with pytest.raises(Refusal) as e:
        t.save(tmp_path / "c.npz")
    assert e.value.option == "generator" and "counter" in str(e.value)
    assert not any(tmp_path.iterdir())


def test_the_pieces_of_state_after_an_interrupted_step_agree_with_each_other(whole):
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=AT - 1)
    undo = POINTS["second-backward"](t)
    with pytest.raises(Interrupt):
        t.train_step()
    undo()
    assert t.generator.state_dict()["counter"] == t.step == len(t.records) == AT - 1
    assert np.isfinite([r.lr for r in t.records]).sum() == t.optimizer.t
