"""TrainConfig(precision=...) and `mojolike train --precision`: a bf16 or fp16 run reads
twins of float32 master weights, has one digest on every backend and thread count, and a
resume rebuilds the twins from the checkpoint's masters."""
from __future__ import annotations

import re

import numba
import numpy as np
import pytest

import mojolike
from mojolike import cli
from mojolike.core.refusals import Refusal
from mojolike.train import TrainConfig, Trainer


def small(**kw) -> TrainConfig:
    return TrainConfig(**{"steps": 4, "d_model": 8, "batch_size": 4, "seq_len": 16,
                          "microbatches": 2, **kw})


def gpt_small(**kw) -> TrainConfig:
    return TrainConfig(**{"model": "gpt", "steps": 2, "n_layer": 1, "n_head": 2, "n_embd": 16,
                          "block_size": 8, "batch_size": 2, "microbatches": 2, **kw})


def _assert_twins_are_the_rounded_masters(model, precision: str) -> None:
    low = {"bf16": "bfloat16", "fp16": "float16"}[precision]
    assert model.precision == low
    for p, tw in zip(model.parameters(), model.twins()):
        assert tw.view(np.uint16).tolist() == mojolike.cast(p, low, backend="oracle").view(
            np.uint16).tolist()


# the oracle's run is the slow one: bf16 on it, fp16 on the kernel backends
BACKENDS_BY_PRECISION = [("bf16", ("oracle", "cpu-numba", "cpu-cffi")),
                         ("fp16", ("cpu-numba", "cpu-cffi"))]


def _runs(c: TrainConfig, backends) -> tuple[dict, Trainer]:
    """{backend: digest} of c's run on each backend, and the last backend's trainer."""
    digests = {}
    for backend in backends:
        t = Trainer(c, backend=backend)
        t.run()
        digests[backend] = t.digest()
    return digests, t


@pytest.mark.parametrize("precision, backends", BACKENDS_BY_PRECISION)
def test_a_low_precision_run_has_one_digest_on_every_cpu_backend_and_thread_count(precision,
                                                                                   backends):
    c = small(precision=precision)
    digests, _ = _runs(c, backends)
    numba.set_num_threads(1)
    try:
        t = Trainer(c, backend="cpu-numba")
        t.run()
        digests["cpu-numba 1 thread"] = t.digest()
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert len(set(digests.values())) == 1, digests
    fp32 = Trainer(small(), backend="cpu-numba")
    fp32.run()
    assert fp32.digest() not in digests.values()  # the twins are what the forward read


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_optimizer_keeps_every_twin_equal_to_its_rounded_master(precision):
    t = Trainer(small(precision=precision, steps=3), backend="cpu-cffi")
    t.run()
    assert len(t.model.twins()) == 8
    _assert_twins_are_the_rounded_masters(t.model, precision)


@pytest.mark.parametrize("model, until, resumed_on", [("tiny", 2, "cpu-cffi"),
                                                     ("gpt", 1, "cpu-numba")])
def test_a_resume_on_another_backend_rebuilds_the_twins_from_the_masters(tmp_path, model, until,
                                                                         resumed_on):
    c = (small if model == "tiny" else gpt_small)(precision="bf16")
    whole = Trainer(c, backend="cpu-cffi")
    whole.run()
    t = Trainer(c, backend="cpu-numba")
    t.run(until=until)
    path = t.save(str(tmp_path / "ck.npz"))
    r = Trainer.load(path, backend=resumed_on)
    assert [tw.view(np.uint16).tolist() for tw in r.model.twins()] == \
        [tw.view(np.uint16).tolist() for tw in t.model.twins()]
    r.run()
    assert r.digest() == whole.digest()


def test_the_precision_is_part_of_the_key_only_when_it_is_not_fp32():
    assert "precision" not in small().to_dict() and small().key() == small(precision="fp32").key()
    assert small(precision="bf16").to_dict()["precision"] == "bf16"
    assert TrainConfig.from_dict(small(precision="fp16").to_dict()) == small(precision="fp16")


@pytest.mark.parametrize("kw", [{"precision": "int8"}, {"precision": "bfloat16"},
                                {"model": "gpt", "precision": "float16"}])
def test_a_precision_outside_the_contract_is_refused_by_name(kw):
    with pytest.raises(Refusal) as info:
        TrainConfig(steps=2, **kw)
    assert info.value.option == "precision"


@pytest.mark.parametrize("precision, backends", BACKENDS_BY_PRECISION)
def test_a_low_precision_gpt_run_has_one_digest_on_every_cpu_backend(precision, backends):
    digests, t = _runs(gpt_small(precision=precision), backends)
    assert len(set(digests.values())) == 1, digests
    _assert_twins_are_the_rounded_masters(t.model, precision)
    fp32 = Trainer(gpt_small(), backend="cpu-numba")
    fp32.run()
    assert fp32.digest() not in digests.values()


def _digest(out: str) -> str:
    m = re.search(r"train digest ([0-9a-f]{32})", out)
    assert m, out
    return m[1]


def test_mojolike_train_precision_bf16_prints_one_digest_on_both_cpu_backends(tmp_path, capsys):
    args = ["train", "--steps", "2", "--precision", "bf16", "--batch-size", "4"]
    assert cli.main(args + ["--backend", "cpu-cffi", "--out", str(tmp_path / "a")]) == 0
    a = _digest(capsys.readouterr().out)
    assert cli.main(args + ["--backend", "cpu-numba", "--out", str(tmp_path / "b")]) == 0
    assert _digest(capsys.readouterr().out) == a
    assert cli.main(["train", "--steps", "2", "--batch-size", "4", "--backend", "cpu-cffi",
                     "--out", str(tmp_path / "c")]) == 0
    assert _digest(capsys.readouterr().out) != a
