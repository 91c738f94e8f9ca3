"""RunRecorder: run cards of torch and numpy loops that `mojolike compare` reads."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import mojolike
import mojolike.torch
import mojolike.torch.optim
from mojolike import cli
from mojolike.core import cardformat
from mojolike.core.refusals import Refusal
from mojolike.training.recorder import RunRecorder


def numpy_loop(steps=5, nudge_at=None, name="run"):
    w = np.linspace(-1, 1, 12, dtype=np.float32)
    opt = mojolike.AdamW(w, lr=0.05, backend="cpu-numba")
    rec = RunRecorder(name)
    for t in range(1, steps + 1):
        g = np.float32(2.0) * w
        if t == nudge_at:
            g[3] += np.float32(1e-3)
        loss = float(np.sum(w * w, dtype=np.float64))
        norm = opt.step(g, max_norm=1.0)
        rec.record(loss, grad_norm=norm, params=[w])
    return rec


def torch_loop(steps=4, certified=None):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = mojolike.torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    rec = RunRecorder("torch", certified=certified)
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        rec.record(loss, params=model)
    return rec


def test_compare_names_the_first_differing_step_of_two_numpy_loops(tmp_path, capsys):
    a = numpy_loop().write(tmp_path / "a")
    b = numpy_loop(nudge_at=3).write(tmp_path / "b")
    assert cli.main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    # the gradient changed at step 3: its norm differs first (the params after it, then)
    assert "step-0003/norm" in out, out
    assert "step-0001" not in out and "step-0002" not in out


def test_the_same_loop_gives_the_same_card_and_compare_says_same(tmp_path, capsys):
    a = numpy_loop().write(tmp_path / "a")
    b = numpy_loop().write(tmp_path / "b")
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert a.read_text() == b.read_text()
    card = cardformat.read(a)
    assert card.profile == "mojolike.recorded-run.fp32.v1:run"
    assert len(card.records) == 5 * 5 + 1


def test_the_card_holds_loss_norm_scale_skipped_and_the_parameter_digest():
    w = np.float32([1.0, 2.0, 3.0])
    rec = RunRecorder("demo")
    rec.record(np.float32(0.75), grad_norm=None, scale=1024.0, skipped=True, params=[w])
    lines = cardformat.records_of(rec.card())
    want = [cardformat.record("step-0001", "loss", np.float32([0.75])),
            cardformat.record("step-0001", "norm", np.float32([np.nan])),
            cardformat.record("step-0001", "scale", np.float32([1024.0])),
            cardformat.record("step-0001", "skipped", np.float32([1.0])),
            cardformat.record("step-0001", "params", w),
            cardformat.record("run", "certified", np.float32([0.0]))]
    assert lines == want


def test_a_torch_loop_says_in_the_meta_whether_it_ran_under_certified(tmp_path):
    plain = torch_loop()
    meta = plain.meta()
    assert meta["loop"] == "torch" and meta["certified"] is False
    assert meta["card_md5"] == plain.digest()
    given = torch_loop(certified=True).meta()
    assert given["certified"] is True and given["certified_how"] == "given"
    path = plain.write(tmp_path)
    written = json.loads((tmp_path / "torch.meta.json").read_text())
    assert written["card_md5"] == cardformat.read(path).md5


def test_the_certified_mode_is_read_from_torchs_dispatch_mode_stack():
    rec = RunRecorder("m")
    w = torch.zeros(2)
    with mojolike.torch.certified(backend="cpu-numba"):
        rec.record(torch.tensor(1.0), params=[w])
    rec.record(torch.tensor(1.0), params=[w])
    assert rec.meta()["certified_steps"] == 1
    assert cardformat.records_of(rec.card())[-1] == cardformat.record(
        "run", "certified", np.float32([1.0, 0.0]))


def test_a_certified_and_an_uncertified_run_still_compare_step_by_step(tmp_path, capsys):
    a = torch_loop(certified=True).write(tmp_path / "a")
    b = torch_loop(certified=False).write(tmp_path / "b")
    assert cli.main(["compare", str(a), str(b)]) == 1
    assert "run/certified" in capsys.readouterr().out  # the same bits; only the flag differs


def test_bad_values_and_an_empty_recorder_are_refused_by_name(tmp_path):
    rec = RunRecorder()
    with pytest.raises(Refusal, match="loss"):
        rec.record("high", params=[np.zeros(1, np.float32)])
    with pytest.raises(Refusal, match=r"params\[0\]"):
        rec.record(1.0, params=[np.zeros(1, np.float64)])
    with pytest.raises(Refusal, match="write"):
        rec.write(tmp_path)
    with pytest.raises(Refusal, match="name"):
        RunRecorder("a b")
