"""The training run: every backend gives the oracle's records, a step is TinyLM's forward and
backward, aligned microbatches equal one batch, a checkpoint resumes bit for bit on any backend,
the gate and the scaler skip what they should, refusals name the option, and `mojolike train`
prints one digest that compare and a resumed run agree with.

The configurations are small (a few steps of 8 to 2048 tokens); the `train` suite itself runs
in tests/test_cards.py against the reference card.
"""
from __future__ import annotations

import json
import re
import zipfile

import numpy as np
import pytest
from conftest import CPU_BACKENDS
from mojolike.contracts import train as suite

import mojolike
from mojolike import Refusal, Tape, cli
from mojolike.core import cardformat
from mojolike.training import trainer as train_mod
from mojolike.training.checkpoint import read as read_checkpoint
from mojolike.training.checkpoint import write as write_checkpoint
from mojolike.training.trainer import TrainConfig, Trainer

SMALL = dict(steps=4, d_model=8, d_hidden=16, vocab=32, batch_size=2, seq_len=8, microbatches=2,
             warmup_steps=1, growth_interval=2, overflow_steps=(3,))


def small(**kw) -> TrainConfig:
    return TrainConfig(**{**SMALL, **kw})


def outputs(cfg: TrainConfig, backend: str) -> list[tuple[str, bytes]]:
    t = Trainer(cfg, backend=backend)
    t.run()
    return [(name, a.tobytes()) for name, a in t.outputs()]


def differing(a, b) -> list[str]:
    assert [n for n, _ in a] == [n for n, _ in b]
    return [n for (n, x), (_, y) in zip(a, b) if x != y]


# -- the run ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def oracle_run():
    t = Trainer(small(), backend="oracle")
    t.run()
    return t


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_every_record_and_final_value_is_the_oracles_on_the_cpu_backends(oracle_run, backend):
    t = Trainer(small(), backend=backend)
    t.run()
    assert t.card() == oracle_run.card()
    assert not differing([(n, a.tobytes()) for n, a in t.outputs()],
                         [(n, a.tobytes()) for n, a in oracle_run.outputs()])


def test_the_injected_overflow_is_skipped_and_backs_off_and_the_scale_grows_every_two_steps(
        oracle_run):
    r = oracle_run.records
    assert [x.skipped for x in r] == [False, False, True, False]
    assert [x.scale for x in r] == [65536.0, 131072.0, 65536.0, 65536.0]
    assert np.isnan(r[2].norm) and np.isnan(r[2].lr) and not np.isnan(r[3].norm)
    assert oracle_run.optimizer.t == 3 and oracle_run.step == 4
    # the schedule counts applied steps: step 4 takes the rate of the optimizer's step 3
    assert r[3].lr == oracle_run.schedule.lr_at(3)
    assert all(0.0 < x.loss < 6.0 for x in r)


def test_a_closed_gate_leaves_the_step_unapplied_without_backing_off():
    t = Trainer(small(outlier_window=2, skip_lossz=-10.0, overflow_steps=()), backend="cpu-cffi")
    r = t.run()
    # window 2: the z-score is NaN for steps 1-2 (filling), then finite and above -10
    assert [x.gated for x in r] == [False, False, True, True]
    assert [x.skipped for x in r] == [False] * 4 and t.optimizer.t == 2
    # a gated step is no overflow: the scaler counts it and grows (growth_interval 2)
    assert [x.scale for x in r] == [65536.0, 131072.0, 131072.0, 262144.0]


@pytest.mark.parametrize("row", [0, 1])
def test_a_microbatch_is_tinylms_forward_and_backward_with_the_embedding_taken_once(row):
    t = Trainer(small(), backend="cpu-numba")
    c = t.config
    tok, tgt = t.stream.windows(0, c.batch_size, c.seq_len)
    tok, tgt = tok[row:row + 1] % c.vocab, tgt[row:row + 1] % c.vocab  # microbatch `row`
    n, stream = c.tokens_per_step, t.generator.next_stream()
    loss, grads, dx = t._microbatch(tok, tgt, row, stream, n, 65536.0)
    d_embed = mojolike.embedding_backward(dx, tok.reshape(-1), c.vocab, backend="cpu-numba")
    tape = Tape(backend="cpu-numba")
    want_loss = t.model.forward(tape, tok, tgt, t.generator, dropout_stream=stream,
                                row_offset=row, num_items=n)
    want = dict(zip(t.model.NAMES, tape.backward(want_loss, seed=65536.0)))
    assert np.float32(loss).tobytes() == np.float32(want_loss.item()).tobytes()
    got = dict(zip(train_mod.ON_TAPE, grads), **{"embed.weight": d_embed})
    for name in t.model.NAMES:
        assert got[name].tobytes() == want[name].tobytes(), name


def test_two_aligned_microbatches_equal_one_batch_and_unaligned_ones_do_not():
    cfg = dict(steps=1, d_model=16, vocab=256, batch_size=16, seq_len=128, warmup_steps=1)
    assert not differing(outputs(TrainConfig(microbatches=2, **cfg), "cpu-cffi"),
                         outputs(TrainConfig(microbatches=1, **cfg), "cpu-cffi"))
    assert mojolike.accumulation_is_aligned([1024, 1024], 2)
    # 768 tokens per microbatch: the weight gradients' folds split inside a 1024 chunk
    cfg["seq_len"] = 96
    assert not mojolike.accumulation_is_aligned([768, 768], 2)
    bad = differing(outputs(TrainConfig(microbatches=2, **cfg), "cpu-cffi"),
                    outputs(TrainConfig(microbatches=1, **cfg), "cpu-cffi"))
    assert "final/fc1.weight" in bad and "final/head.weight" in bad


def test_dropout_is_keyed_by_the_position_in_the_step_not_in_the_microbatch(monkeypatch):
    base = outputs(small(overflow_steps=()), "cpu-cffi")
    monkeypatch.setattr(train_mod, "microbatch_rows", lambda j, rows: 0)
    assert "step-0001/loss" in differing(base, outputs(small(overflow_steps=()), "cpu-cffi"))


def test_vocab_below_256_folds_each_byte_to_byte_mod_vocab():
    t = Trainer(small(), backend="cpu-cffi")
    assert t.model.vocab == 32 and t.model.parameters()[0].shape == (32, 8)
    tok, _ = t.stream.windows(0, 1, 8)
    assert bytes(tok[0].astype("u1")) == b'The "ass' and (tok[0] % 32).tolist()[:3] == [20, 8, 5]


# -- checkpoints -----------------------------------------------------------------------------------
def test_a_run_resumed_from_a_checkpoint_on_another_backend_equals_the_uninterrupted_run(
        oracle_run, tmp_path):
    t = Trainer(small(), backend="cpu-numba")
    t.run(until=2)
    path = t.save(tmp_path / "ckpt")
    assert path.endswith("ckpt.npz")
    u = Trainer.load(path, backend="cpu-cffi")
    assert (u.step, u.optimizer.t, u.backend, len(u.records)) == (2, 2, "cpu-cffi", 2)
    assert [str(r) for r in u.records] == [str(r) for r in t.records]  # NaN z-scores as text
    u.run()
    assert u.card() == oracle_run.card()


def test_the_checkpoint_is_one_npz_of_float32_and_int64_arrays_and_json_without_pickle(tmp_path):
    t = Trainer(small(), backend="cpu-cffi")
    t.run(until=1)
    path = t.save(tmp_path / "c.npz")
    with zipfile.ZipFile(path) as z:
        names = sorted(n[:-4] for n in z.namelist())
    data = np.load(path, allow_pickle=False)  # numpy's own reader, pickle refused
    assert {data[n].dtype.kind for n in names} == {"f", "U"}
    assert {data[n].dtype for n in names if n != "meta"} == {np.dtype("<f4")}
    meta = json.loads(str(data["meta"]))
    assert meta["format"] == train_mod.FORMAT and meta["step"] == 1
    assert set(meta) == {"format", "config", "text_md5", "step", "lossz", "optimizer", "scaler",
                         "generator", "outlier", "schedule"}
    assert meta["generator"] == {"seed": 1, "counter": 1} and meta["schedule"]["t"] == 1
    assert {f"param.{n}" for n in t.model.NAMES} < set(names)
    assert data["records"].shape == (1, len(train_mod.RECORDS))


def _tampered(tmp_path, edit):
    t = Trainer(small(), backend="cpu-cffi")
    t.run(until=1)
    meta, arrays = read_checkpoint("test", t.save(tmp_path / "good.npz"))
    edit(meta, arrays)
    return write_checkpoint("test", tmp_path / "bad.npz", meta, arrays)


@pytest.mark.parametrize("edit,option", [
    (lambda m, a: m.update(text_md5="0" * 32), "text_md5"),
    (lambda m, a: m.update(format="other"), "path"),
    (lambda m, a: m.update(step=3), "records"),
    (lambda m, a: m["config"].update(microbatches=3), "microbatches"),
    (lambda m, a: m["config"].update(lr=0.5), "schedule"),
    (lambda m, a: m["scaler"].update(scale=-1.0), "scale"),
    (lambda m, a: m["outlier"].update(count=99), "count"),
    (lambda m, a: a.update({"param.fc1.bias": np.zeros(3, np.float32)}), "param.fc1.bias"),
    (lambda m, a: a["optimizer.exp_avg_sq.0"].reshape(-1).__setitem__(0, -1.0), "exp_avg_sq[0]"),
    (lambda m, a: a.pop("param.head.weight"), "path"),
], ids=["text", "format", "step", "config", "schedule", "scaler", "outlier", "param-shape",
        "moment", "missing"])
def test_a_checkpoint_that_does_not_fit_is_refused_by_name(tmp_path, edit, option):
    path = _tampered(tmp_path, edit)
    with pytest.raises(Refusal) as e:
        Trainer.load(path, backend="cpu-cffi")
    assert e.value.entry_point == "mojolike.train.Trainer.load"
    if option in ("records", "param.fc1.bias") and e.value.option == "path":
        # the reader compares the members' headers with what the meta implies, naming the member
        assert f"'{option}'" in str(e.value) and "implies" in str(e.value)
    else:
        assert e.value.option == option


def test_a_damaged_or_foreign_file_is_refused_naming_the_path(tmp_path):
    t = Trainer(small(), backend="cpu-cffi")
    good = t.save(tmp_path / "good.npz")
    cut = tmp_path / "cut.npz"
    with open(good, "rb") as f:
        cut.write_bytes(f.read()[:-50])
    state = tmp_path / "state.npz"
    mojolike.save_state(state, t.optimizer.state_dict())
    for p in (cut, state, tmp_path / "missing.npz"):
        with pytest.raises(Refusal) as e:
            Trainer.load(p)
        assert e.value.option == "path", p


# -- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,option", [
    (dict(microbatches=3), "microbatches"), (dict(vocab=1), "vocab"), (dict(vocab=300), "vocab"),
    (dict(steps=0), "steps"), (dict(overflow_steps=(9,)), "overflow_steps"),
    (dict(overflow_steps=[2]), "overflow_steps"), (dict(warmup_steps=5), "warmup_steps"),
    (dict(min_lr=1.0), "min_lr"), (dict(betas=(0.9,)), "betas"), (dict(eps=-1.0), "eps"),
    (dict(init_scale=0.0), "init_scale"), (dict(max_norm=float("nan")), "max_norm"),
    (dict(skip_lossz="3"), "skip_lossz"), (dict(seed=-1), "seed"), (dict(chunk_size=2000), "chunk_size"),
    (dict(d_model=2.0), "d_model"), (dict(lr_schedule="cosine"), "lr_schedule"),
])
def test_bad_configurations_are_refused_by_the_options_name(kw, option):
    with pytest.raises(Refusal) as e:
        small(**kw)
    assert e.value.option == option and e.value.entry_point == "mojolike.train.TrainConfig"


def test_a_finished_run_refuses_more_steps_and_run_refuses_going_back():
    t = Trainer(small(steps=1, overflow_steps=()), backend="cpu-cffi")
    t.run()
    with pytest.raises(Refusal, match="the run is complete"):
        t.train_step()
    with pytest.raises(Refusal) as e:
        t.run(until=0)
    assert e.value.option == "until" and t.step == 1


def test_the_train_suite_has_its_cases_clauses_and_seven_controls():
    assert [c.id for c in suite.cases()] == ["tiny", "fanin", "gpt", "generate"]
    assert [c.name for c in suite.negative_controls()] == [
        "fanin-oldest-first", "skip-as-zero", "clip-after-decay", "dropout-by-microbatch",
        "tied-embedding-first", "dq-completion-order", "decoder-keys-rotated"]
    assert suite.PROFILE == "mojolike.identical.train.fp32.v2"
    assert suite.TINY.overflow_steps == (5,) and suite.RESUME_AT == 6 and suite.TINY.steps == 12


def test_adding_fan_in_contributions_oldest_first_changes_the_fanin_gradients():
    want = suite.fanin("oracle")
    with suite.negative_controls()[0].patched():
        got = suite.fanin("oracle")
    bad = [n for (n, a), (_, b) in zip(want, got) if a.tobytes() != b.tobytes()]
    assert "grad.embed.weight" in bad and "grad.fc1.weight" in bad and "loss" not in bad


# -- the command -----------------------------------------------------------------------------------
def _digest(out: str) -> str:
    m = re.fullmatch(r"train digest ([0-9a-f]{32}) \(step (\d+) of (\d+), loss [0-9.]+\)\n", out)
    assert m, out
    return m[1]


def test_mojolike_train_stops_resumes_on_another_backend_and_prints_the_same_digest(
        tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli.main(["train", "--steps", "3", "--backend", "cpu-cffi", "--out", str(a)]) == 0
    whole = _digest(capsys.readouterr().out)
    assert cli.main(["train", "--steps", "3", "--backend", "cpu-numba", "--out", str(b),
                     "--stop-at", "1"]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(b / "checkpoint.npz"), "--backend", "cpu-numba",
                     "--out", str(b)]) == 0
    captured = capsys.readouterr()
    assert _digest(captured.out) == whole == cardformat.read(a / "train.card").md5
    assert "loss" in captured.err and "tok/s" in captured.err and "3/3" in captured.err
    meta = json.loads((b / "train.meta.json").read_text())
    assert meta["backend"] == "cpu-numba" and meta["steps_this_run"] == 2 and meta["card_md5"] == whole
    assert cli.main(["compare", str(a / "train.card"), str(b / "train.card")]) == 0
    # a resume with another horizon is refused, naming --steps
    assert cli.main(["train", "--resume", str(b / "checkpoint.npz"), "--steps", "5"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_compare_names_the_first_step_where_two_run_cards_differ(tmp_path, monkeypatch, capsys):
    t = Trainer(small(), backend="cpu-cffi")
    t.run()
    (tmp_path / "a.card").write_text(t.card())
    monkeypatch.setattr(train_mod, "GradScaler", suite._ZeroSkipScaler)  # steps on overflow
    u = Trainer(small(), backend="cpu-cffi")
    u.run()
    (tmp_path / "b.card").write_text(u.card())
    assert cli.main(["compare", str(tmp_path / "a.card"), str(tmp_path / "b.card")]) == 1
    assert "step-0003/lr" in capsys.readouterr().out  # the overflow step: it moved the schedule


def test_the_card_does_not_name_the_backend_and_its_profile_names_the_configuration():
    t = Trainer(small(steps=1, overflow_steps=()), backend="cpu-cffi")
    t.run()
    card = t.card()
    assert "cpu" not in card and card.startswith("# mojolike card profile=mojolike.identical."
                                                 "train-run.fp32.v1:config-")
    other = Trainer(small(steps=1, overflow_steps=(), seed=1), backend="cpu-cffi").profile()
    assert other != t.profile()
    assert len(cardformat.records_of(card)) == 6 + 8 + 6


# -- hostile checkpoints and the memory budget -----------------------------------------------------
def _peak_bytes(fn) -> int:
    import tracemalloc
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("d_model,d_hidden", [(2048, 65536), (4096, 2**20)])
def test_load_refuses_a_config_edited_to_a_huge_model_before_building_it(tmp_path, d_model,
                                                                          d_hidden):
    path = _tampered(tmp_path, lambda m, a: m["config"].update(d_model=d_model, d_hidden=d_hidden))
    box = {}

    def load():
        with pytest.raises(Refusal) as box["e"]:
            Trainer.load(path, backend="cpu-numba")

    assert _peak_bytes(load) < 2**22
    e = box["e"].value
    # the file's arrays contradict the configuration (named by the member, or by the reader under
    # `path`), or (on a smaller machine, or for the larger model) it is above the memory budget
    assert (e.option.startswith("param.") and "shape" in str(e)) or \
        (e.option == "path" and "'param." in str(e) and "implies" in str(e)) or \
        (e.option == "d_model, d_hidden" and "memory budget" in str(e))


def test_load_refuses_a_member_no_checkpoint_holds(tmp_path):
    path = _tampered(tmp_path, lambda m, a: a.update(extra=np.zeros(4, np.float32)))
    with pytest.raises(Refusal) as e:
        Trainer.load(path)
    assert e.value.option == "path" and "'extra'" in str(e.value)


def test_a_run_above_the_memory_budget_is_refused_naming_the_budget_and_how_to_raise_it():
    with pytest.raises(Refusal) as e:
        Trainer(small(), backend="cpu-numba", memory_budget=10_000)
    assert e.value.option == "d_model, d_hidden" and e.value.entry_point == "mojolike.train.Trainer"
    assert "memory_budget=" in str(e.value) and "MOJOLIKE_TRAIN_MEMORY" in str(e.value)
    with pytest.raises(Refusal) as e:
        Trainer(small(), memory_budget=0)
    assert e.value.option == "memory_budget"


def test_a_huge_batch_size_is_refused_when_the_trainer_is_made_not_at_its_first_step():
    box = {}

    def make():
        with pytest.raises(Refusal) as box["e"]:
            Trainer(small(batch_size=2**40, microbatches=1), backend="cpu-numba")

    assert _peak_bytes(make) < 2**22
    assert box["e"].value.option == "batch_size" and "bytes" in str(box["e"].value)


def test_load_takes_its_budget_from_the_keyword_or_the_environment(tmp_path, monkeypatch):
    t = Trainer(small(), backend="cpu-numba")
    path = t.save(tmp_path / "c.npz")
    monkeypatch.setenv("MOJOLIKE_TRAIN_MEMORY", "10000")
    with pytest.raises(Refusal) as e:
        Trainer.load(path)
    assert e.value.entry_point == "mojolike.train.Trainer.load" and "10,000" in str(e.value)
    assert Trainer.load(path, memory_budget=2**30).step == 0
    monkeypatch.setenv("MOJOLIKE_TRAIN_MEMORY", "lots")
    with pytest.raises(Refusal) as e:
        Trainer.load(path)
    assert e.value.option == "MOJOLIKE_TRAIN_MEMORY"


# -- the invariants between the pieces of a checkpoint ---------------------------------------------
def _set_t(m, t):
    m["optimizer"].update(t=t, steps=[t] * 8)
    m["schedule"]["t"] = t


@pytest.mark.parametrize("edit,option", [
    (lambda m, a: m["generator"].update(counter=2), "generator"),
    (lambda m, a: m["generator"].update(seed=7), "generator"),
    (lambda m, a: _set_t(m, 0), "optimizer"),
    (lambda m, a: m["scaler"].update(_growth_tracker=0), "scaler"),
    (lambda m, a: m["scaler"].update(scale=131072.0), "scaler"),
    (lambda m, a: a["records"].__setitem__((0, 4), 0.5), "records"),
    (lambda m, a: a["records"].__setitem__((0, 2), np.nan), "records"),
    (lambda m, a: m.update(lossz=[1.0]), "lossz"),
    (lambda m, a: m["outlier"].update(sum=m["outlier"]["sum"] + 1.0), "outlier"),
    (lambda m, a: a["records"].__setitem__((0, 0), a["records"][0, 0] + 1), "outlier"),
], ids=["counter", "seed", "optimizer-t", "tracker", "scale", "flag", "lr", "lossz", "outlier",
        "loss"])
def test_load_refuses_a_checkpoint_whose_pieces_disagree(tmp_path, edit, option):
    with pytest.raises(Refusal) as e:
        Trainer.load(_tampered(tmp_path, edit), backend="cpu-numba")
    assert e.value.option == option and e.value.entry_point == "mojolike.train.Trainer.load"


# -- skips, microbatches and the command's meta ----------------------------------------------------
def test_every_step_at_scale_zero_is_recorded_as_skipped():
    # 2^-149 backs off to 0 at the first skip (its inverse overflows, so that step skips too)
    t = Trainer(small(init_scale=2.0**-149, overflow_steps=()), backend="cpu-numba")
    r = t.run()
    assert [x.scale for x in r] == [0.0] * 4
    assert [x.skipped for x in r] == [True] * 4 and t.optimizer.t == 0


def test_an_unaligned_split_is_asked_for_by_name_and_changes_no_bit(monkeypatch):
    calls = []
    real = train_mod.accumulate_grads

    def accumulate(grads, tokens, *, aligned=None, **kw):
        calls.append(aligned)
        return real(grads, tokens, aligned=aligned, **kw)

    base = Trainer(small(), backend="cpu-numba")
    base.run()
    monkeypatch.setattr(train_mod, "accumulate_grads", accumulate)
    t = Trainer(small(), backend="cpu-numba")
    t.run()
    assert not t.microbatch_invariant and calls == [False] * 4 and t.digest() == base.digest()
    calls.clear()
    aligned = Trainer(TrainConfig(steps=1, d_model=2, vocab=8, batch_size=16, seq_len=128,
                                  warmup_steps=1), backend="cpu-numba")
    aligned.run()
    assert aligned.microbatch_invariant and calls == [None]


def test_mojolike_train_meta_names_the_thread_count_and_the_version(tmp_path, capsys):
    import numba
    assert cli.main(["train", "--steps", "1", "--backend", "cpu-numba", "--out", str(tmp_path)]) == 0
    meta = json.loads((tmp_path / "train.meta.json").read_text())
    assert meta["threads"] == numba.get_num_threads() and meta["mojolike_version"] == \
        mojolike.__version__
    assert meta["microbatch_invariant"] is True
