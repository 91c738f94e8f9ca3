"""`mojolike train --model gpt`: the GPT trained by the one Trainer, with the oracle's bits on both
CPU backends and 1 and 2 threads, a step equal to GPT.forward's tape, aligned microbatches
(dropout included) equal to one batch, resume equal to the uninterrupted run, weight decay on
the matrices only, and the options of the other model refused by name.

Small step counts and models (n_layer 1, n_embd 8 or 16, block 8).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import CPU_BACKENDS

import mojolike
from mojolike import Refusal, cli
from mojolike.training import train_models
from mojolike.training.trainer import TrainConfig, Trainer

SMALL = {"model": "gpt", "steps": 3, "n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8,
         "batch_size": 2, "vocab": 32, "microbatches": 2, "dropout": 0.1, "warmup_steps": 1,
         "overflow_steps": (2,)}


def small(**kw) -> TrainConfig:
    return TrainConfig(**{**SMALL, **kw})


def outputs(cfg: TrainConfig, backend: str) -> list[tuple[str, bytes]]:
    t = Trainer(cfg, backend=backend)
    t.run()
    return [(name, a.tobytes()) for name, a in t.outputs()]


def differing(a, b) -> list[str]:
    assert [n for n, _ in a] == [n for n, _ in b]
    return [n for (n, x), (_, y) in zip(a, b) if x != y]


@pytest.fixture(scope="module")
def oracle_run():
    t = Trainer(small(), backend="oracle")
    t.run()
    return t


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_gpt_run_has_the_oracles_records_and_final_state_on_the_cpu_backends(oracle_run,
                                                                                backend):
    t = Trainer(small(), backend=backend)
    records = t.run()
    assert t.digest() == oracle_run.digest()
    assert not differing([(n, a.tobytes()) for n, a in t.outputs()],
                         [(n, a.tobytes()) for n, a in oracle_run.outputs()])
    assert [r.skipped for r in records] == [False, True, False]  # the injected overflow


def test_a_gpt_run_gives_the_same_bits_on_1_and_2_numba_threads():
    import numba
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = outputs(small(), "cpu-numba")
        numba.set_num_threads(2)
        two = outputs(small(), "cpu-numba")
    finally:
        numba.set_num_threads(before)
    assert not differing(one, two)


def test_a_gpt_step_is_gpt_forward_on_a_tape_with_one_microbatch():
    cfg = small(steps=1, microbatches=1, dropout=0.0, max_norm=None, overflow_steps=())
    t = Trainer(cfg, backend="cpu-numba")
    tok, tgt = t.stream.windows(0, cfg.batch_size, cfg.seq_len)
    loss, named, _ = t._gradients(0)
    tape = mojolike.Tape(backend="cpu-numba")
    want = t.model.forward(tape, tok % 32, tgt % 32)
    grads = tape.backward(want, seed=t.scaler.get_scale())
    assert np.float32(loss).tobytes() == np.float32(want.item()).tobytes()
    for (name, _), g in zip(t.model.named_parameters(), grads):
        assert named[name].tobytes() == g.tobytes(), name


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_two_aligned_microbatches_give_one_batchs_gpt_run(dropout):
    # 2 x 1024 tokens: each microbatch a whole subtree of the batch's folds
    cfg = {"steps": 2, "n_embd": 8, "block_size": 8, "batch_size": 256, "dropout": dropout,
           "overflow_steps": ()}
    two = Trainer(small(microbatches=2, **cfg), backend="cpu-numba")
    assert two.microbatch_invariant
    two.run()
    one = Trainer(small(microbatches=1, **cfg), backend="cpu-numba")
    one.run()
    assert not differing([(n, a.tobytes()) for n, a in two.outputs()],
                         [(n, a.tobytes()) for n, a in one.outputs()])


def test_dropout_keyed_by_the_microbatch_slot_changes_the_aligned_split(monkeypatch):
    cfg = {"steps": 1, "n_embd": 8, "block_size": 8, "batch_size": 256, "dropout": 0.2,
           "overflow_steps": ()}
    one = Trainer(small(microbatches=1, **cfg), backend="cpu-numba")
    one.run()
    from mojolike.training import trainer as train_mod
    monkeypatch.setattr(train_mod, "microbatch_rows", lambda j, rows: 0)
    two = Trainer(small(microbatches=2, **cfg), backend="cpu-numba")
    two.run()
    assert two.digest() != one.digest()


def test_weight_decay_applies_to_every_gpt_parameter_of_two_or_more_dimensions():
    t = Trainer(small(steps=1, overflow_steps=()), backend="oracle")
    p = dict(t.model.named_parameters())
    decay, rest = t.optimizer.param_groups
    assert decay["weight_decay"] == t.config.weight_decay and rest["weight_decay"] == 0.0
    assert [id(a) for a in decay["params"]] == [id(p[n]) for n in p if p[n].ndim >= 2]
    assert [id(a) for a in rest["params"]] == [id(p[n]) for n in p if p[n].ndim < 2]
    assert "transformer.wte.weight" in t.train_model.decay
    assert "transformer.h.0.ln_1.weight" in t.train_model.no_decay


def test_the_tiny_models_configuration_has_no_gpt_keys():
    assert set(TrainConfig().to_dict()) & {"model", "n_layer", "n_head", "n_embd", "block_size"} \
        == set()
    assert TrainConfig.from_dict(small().to_dict()) == small()


@pytest.mark.parametrize("options, name", [
    ({"model": "gpt", "d_model": 8}, "d_model"),
    ({"model": "gpt", "chunk_size": 2048}, "chunk_size"),
    ({"n_layer": 2}, "n_layer"),
    ({"block_size": 16}, "block_size"),
    ({"model": "gpt", "n_embd": 10, "n_head": 4}, "n_head"),
    ({"model": "gpt", "block_size": 16, "seq_len": 8}, "seq_len"),
    ({"model": "bert"}, "model"),
    ({"model": "gpt", "n_layer": 0}, "n_layer"),
])
def test_options_that_do_not_apply_to_the_model_are_refused_by_name(options, name):
    with pytest.raises(Refusal) as r:
        TrainConfig(**options)
    assert r.value.option == name and r.value.entry_point == "mojolike.train.TrainConfig"


def _digest(capsys) -> str:
    out = capsys.readouterr().out
    return out.split("train digest ")[1].split()[0]


def test_the_cli_resumes_a_gpt_run_to_the_uninterrupted_digest_on_the_other_backend(tmp_path,
                                                                                   capsys):
    base = ["train", "--model", "gpt", "--n-layer", "1", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "2", "--steps", "4"]
    assert cli.main(base + ["--backend", "cpu-numba", "--out", str(tmp_path / "a")]) == 0
    whole = _digest(capsys)
    assert cli.main(base + ["--backend", "cpu-numba", "--out", str(tmp_path / "b"),
                            "--stop-at", "2"]) == 0
    assert _digest(capsys) != whole
    assert cli.main(["train", "--resume", str(tmp_path / "b" / "checkpoint.npz"), "--backend",
                     "cpu-cffi", "--out", str(tmp_path / "b")]) == 0
    assert _digest(capsys) == whole
    loaded = Trainer.load(tmp_path / "b" / "checkpoint.npz", backend="oracle")
    assert loaded.step == 4 and isinstance(loaded.train_model, train_models.GPTTrain)


@pytest.mark.parametrize("argv, flag", [
    (["--n-layer", "2"], "--n-layer"),
    (["--model", "gpt", "--n-head", "3"], "--n-head"),
    (["--model", "gpt", "--block-size", "0"], "--block-size"),
])
def test_the_cli_refuses_a_model_option_by_its_flag(argv, flag, tmp_path, capsys):
    assert cli.main(["train", "--steps", "1", "--out", str(tmp_path)] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mojolike train: {flag}")
    assert not (tmp_path / "checkpoint.npz").exists()


def test_the_cli_refuses_model_options_with_resume(tmp_path, capsys):
    assert cli.main(["train", "--model", "gpt", "--n-layer", "1", "--n-embd", "8", "--block-size",
                     "4", "--batch-size", "1", "--steps", "2", "--stop-at", "1", "--backend",
                     "cpu-numba", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(tmp_path / "checkpoint.npz"), "--n-layer", "2",
                     "--out", str(tmp_path)]) == 2
    assert "mojolike train: --n-layer does not apply with --resume" in capsys.readouterr().err


@pytest.mark.parametrize("name, case", [("tied-embedding-first", "gpt"),
                                        ("dq-completion-order", "gpt"),
                                        ("dropout-by-microbatch", "gpt"),
                                        ("decoder-keys-rotated", "generate")])
def test_each_gpt_negative_control_changes_its_case_on_the_oracle(name, case):
    from mojolike.contracts import train as suite
    (c,) = [c for c in suite.cases() if c.id == case]
    (ctl,) = [k for k in suite.negative_controls() if k.name == name]
    want = [(n, a.tobytes()) for n, a in suite._case(c, "oracle", keep=False)]
    with ctl.patched():
        got = [(n, a.tobytes()) for n, a in suite._case(c, "oracle", keep=False)]
    assert differing(want, got)
    again = [(n, a.tobytes()) for n, a in suite._case(c, "oracle", keep=False)]
    assert again == want  # the patch is undone


def test_the_suites_generate_case_has_parity_and_batch_invariance_on_the_cpu_backends():
    from mojolike.contracts import train_gpt
    for backend in CPU_BACKENDS:
        status, detail = train_gpt.clause_generate(backend)
        assert status == "pass", detail


# -- the command in fresh processes: thread counts from the environment, kills, signals ---------
GPT_ARGS = ["--model", "gpt", "--n-layer", "1", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "4", "--steps", "4"]


def _train(args, hook=None, **env_vars):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "MOJOLIKE_TRAIN_TEST_INTERRUPT"}
    env.update(env_vars)
    if hook:
        env["MOJOLIKE_TRAIN_TEST_INTERRUPT"] = hook
    return subprocess.run([sys.executable, "-m", "mojolike", "train", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _printed_digest(r) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout.split("train digest ")[1].split()[0]


@pytest.fixture(scope="module")
def gpt_command_digest(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    return _printed_digest(_train(GPT_ARGS + ["--backend", "cpu-numba", "--out", str(out)]))


# both variables, as `mojolike certify --threads` sets them: with OMP_NUM_THREADS=1 alone the
# cpu-cffi run's meta reported 2 threads (the same digest; the cause is not investigated here)
@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
def test_the_gpt_command_prints_one_digest_with_1_and_2_threads_from_the_environment(
        tmp_path, gpt_command_digest, backend):
    import json
    for n in ("1", "2"):
        out = tmp_path / n
        r = _train(GPT_ARGS + ["--backend", backend, "--out", str(out)], NUMBA_NUM_THREADS=n,
                   OMP_NUM_THREADS=n)
        assert _printed_digest(r) == gpt_command_digest
        assert json.loads((out / "train.meta.json").read_text())["threads"] == int(n)


def test_a_killed_gpt_run_resumes_from_its_checkpoint_every_to_the_digest(tmp_path,
                                                                          gpt_command_digest):
    import signal
    out = tmp_path / "run"
    r = _train(GPT_ARGS + ["--backend", "cpu-cffi", "--out", str(out), "--checkpoint-every", "2"],
               "3:backward:KILL")
    assert r.returncode == -signal.SIGKILL
    assert Trainer.load(out / "checkpoint.npz").step == 2
    r = _train(["--resume", str(out / "checkpoint.npz"), "--backend", "cpu-numba", "--out",
                str(out)])
    assert _printed_digest(r) == gpt_command_digest


def test_an_interrupted_gpt_step_is_rolled_back_and_the_run_resumes_to_the_digest(
        tmp_path, gpt_command_digest):
    out = tmp_path / "run"
    r = _train(GPT_ARGS + ["--backend", "cpu-numba", "--out", str(out)], "3:commit:TERM")
    assert r.returncode == 130, r.stderr
    assert (out / "train.partial.card").exists()
    r = _train(["--resume", str(out / "checkpoint.npz"), "--backend", "cpu-cffi", "--out",
                str(out)])
    assert _printed_digest(r) == gpt_command_digest


def test_a_gpt_run_above_the_memory_budget_is_refused_before_the_model_is_built(tmp_path):
    with pytest.raises(Refusal) as e:
        Trainer(small(), backend="cpu-numba", memory_budget=10_000)
    assert e.value.entry_point == "mojolike.train.Trainer" and "memory_budget=" in str(e.value)
    t = Trainer(small(steps=1, overflow_steps=()), backend="cpu-numba")
    t.run()
    path = t.save(tmp_path / "ckpt.npz")
    with pytest.raises(Refusal) as e:
        Trainer.load(path, memory_budget=10_000)
    assert e.value.entry_point == "mojolike.train.Trainer.load"
    assert Trainer.load(path).digest() == t.digest()


def test_a_gpt_checkpoint_with_a_wrong_member_shape_is_refused_by_the_members_name(tmp_path):
    from mojolike.training.checkpoint import read, write
    t = Trainer(small(steps=1, overflow_steps=()), backend="cpu-numba")
    t.run()
    meta, arrays = read("test", t.save(tmp_path / "ckpt.npz"))
    arrays["param.transformer.wpe.weight"] = np.zeros((9, 16), np.float32)
    write("test", tmp_path / "bad.npz", meta, arrays)
    with pytest.raises(Refusal) as e:
        Trainer.load(tmp_path / "bad.npz")
    assert e.value.option == "param.transformer.wpe.weight"
