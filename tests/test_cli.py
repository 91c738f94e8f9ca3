"""The `mojolike` command follows command-line conventions: usage errors exit 2, --version
and --json where a script reads the answer, --help lists the suites, backends and exit codes,
and certify's progress is one whole line per event on any stream."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import mojolike
from mojolike import cli
from mojolike.cards import reference_path
from mojolike.cli_progress import LEGEND, Progress
from mojolike.core import cardformat


@pytest.mark.parametrize("argv,said", [
    (["certify", "--backend", "gpu"], "--backend 'gpu' is not a backend"),
    (["certify", "--suite", "foo"], "--suite 'foo' is not a suite"),
    (["certify", "--numeric-mode", "fast"], "the contracts define the identical mode only"),
    (["certify", "--threads", "0"], "--threads 0 is not a thread count"),
])
def test_a_certify_usage_error_exits_2_and_says_what_is_wrong(argv, said, capsys, tmp_path):
    assert cli.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mojolike certify: ") and said in err
    assert not list(tmp_path.iterdir())


def test_version_prints_the_package_version():
    out = subprocess.run([sys.executable, "-m", "mojolike", "--version"], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == f"mojolike {mojolike.__version__}"


def test_help_lists_the_suites_the_backends_and_the_exit_codes():
    from mojolike.contracts import SUITES
    out = subprocess.run([sys.executable, "-m", "mojolike", "certify", "--help"], capture_output=True,
                         text=True, check=False).stdout
    assert "suites: " + ", ".join(SUITES) in out
    assert "backends: oracle, cpu-numba, cpu-cffi, cuda, cuda-sim" in out
    assert "Exit codes:" in out and "--numeric-mode" in out and "--threads" in out


def test_backends_json_lists_every_backend_with_whether_it_runs(capsys):
    assert cli.main(["backends", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [b["name"] for b in got["backends"]] == ["oracle", "cpu-numba", "cpu-cffi", "cuda", "cuda-sim"]
    assert got["certified_numeric_mode"] == "identical"
    assert all(isinstance(b["available"], bool) and b["why"] for b in got["backends"])


def _folders(tmp_path, a: str, b: str):
    for name, text in (("a", a), ("b", b)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "fold.card").write_text(text)
    return str(tmp_path / "a" / "fold.card"), str(tmp_path / "b" / "fold.card")


def test_compare_json_gives_the_verdict_and_the_md5(tmp_path, capsys):
    ref = reference_path("fold").read_text()
    assert cli.main(["compare", *_folders(tmp_path, ref, ref), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["result"] == "same" and got["md5"] == {"fold.card": cardformat.read(reference_path("fold")).md5}


def test_compare_says_in_plain_words_that_cards_of_two_profiles_are_not_compared(tmp_path, capsys):
    ref = reference_path("fold").read_text()
    records = ref.splitlines()[1:-2]
    other = cardformat.render("mojolike.identical.fold.fp32.v0", records)
    assert cli.main(["compare", *_folders(tmp_path, ref, other)]) == 1
    out = capsys.readouterr().out
    assert "come from different contracts" in out and "mojolike.identical.fold.fp32.v0" in out
    assert "line 1" not in out


def test_certify_prints_a_line_as_each_suite_and_backend_starts_and_ends_when_stderr_is_not_a_terminal(
        tmp_path, capsys):
    # cpu-numba: its outputs are computed in every run (the oracle's are cached per process)
    assert cli.main(["certify", "--backend", "cpu-numba", "--suite", "fold", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert any("suite 1/1 fold cpu-numba: started (120 cases)" in x for x in lines)
    assert any("suite 1/1 fold cpu-numba: outputs computed in" in x for x in lines)
    assert any("suite 1/1 fold cpu-numba: done, 360 records" in x and "a:pass" in x for x in lines)
    assert any("suite 1/1 fold: negative controls e:pass" in x for x in lines)
    assert "\r" not in captured.err and "\x1b" not in captured.err  # no live bar off a terminal
    assert "s in all" in captured.out
    assert f"e {LEGEND['e']}" in captured.out and f"a {LEGEND['a']}" in captured.out



def test_every_clause_letter_a_contract_names_has_a_legend_entry():
    import re
    root = Path(cli.__file__).resolve().parents[1] / "contracts"
    letters = set()
    for md in root.glob("*.md"):
        letters |= set(re.findall(r"^\d+\. \(([a-z])\)", md.read_text(), re.M))
    assert {"a", "b", "g"} <= letters  # the scan reads the contracts' clause lines
    assert letters <= set(LEGEND), sorted(letters - set(LEGEND))

class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_two_threads_reporting_at_once_never_share_a_line_on_a_terminal():
    out = _Terminal()
    p = Progress(["fold", "optim"], stream=out)

    def report(label):
        p.cases(label, 0, 200)
        for i in range(1, 201):
            p.cases(label, i, 200)

    threads = [threading.Thread(target=report, args=(f"{s} cpu-numba",)) for s in ("fold", "optim")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.total(2)
    # every event line is whole: after erasing the live counter, a line holds one event
    for line in out.getvalue().replace("\r\x1b[K", "\n").splitlines():
        assert line.count("cpu-numba") <= 1 and line.count("[") <= 1, line
    events = [x for x in out.getvalue().replace("\r\x1b[K", "\n").splitlines() if x.startswith("[")]
    assert sum("started" in x for x in events) == 2 and sum("outputs computed" in x for x in events) == 2
    assert events[-1].endswith("certify: 2 runs of 2 suites done")


def test_a_checkpoint_or_state_kept_without_the_suffix_is_read_from_the_path_as_given(tmp_path):
    import shutil

    from mojolike.training.trainer import TrainConfig, Trainer
    t = Trainer(TrainConfig(steps=2), backend="cpu-numba")
    t.run(1)
    written = t.save(tmp_path / "ckpt")  # the writer adds .npz
    assert written.endswith("ckpt.npz")
    shutil.move(written, tmp_path / "ckpt-renamed")
    assert Trainer.load(tmp_path / "ckpt-renamed").step == 1
    opt = mojolike.AdamW([np.zeros(3, np.float32)])
    mojolike.save_state(tmp_path / "opt", opt.state_dict())
    shutil.move(tmp_path / "opt.npz", tmp_path / "opt.state")
    assert mojolike.load_state(tmp_path / "opt.state")["param_groups"][0]["lr"] == opt.param_groups[0]["lr"]
    # and the name without the suffix still finds the file the writer named
    shutil.move(tmp_path / "opt.state", tmp_path / "opt.npz")
    assert mojolike.load_state(tmp_path / "opt")["param_groups"]


def test_train_json_gives_the_digest_and_the_files_and_threads_and_mode_flags_are_taken(tmp_path, capsys,
                                                                                          monkeypatch):
    import numba
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):  # restored after the test
        monkeypatch.setenv(var, os.environ.get(var, str(numba.config.NUMBA_NUM_THREADS)))
    before = numba.get_num_threads()
    try:
        _train_json(tmp_path, capsys)
    finally:
        numba.set_num_threads(before)


def _train_json(tmp_path, capsys):
    argv = ["train", "--steps", "2", "--backend", "cpu-numba", "--out", str(tmp_path / "a"), "--json",
            "--threads", "1", "--numeric-mode", "identical"]
    assert cli.main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["step"] == 2 and got["numeric_mode"] == "identical" and got["backend"] == "cpu-numba"
    assert got["digest"] == cardformat.read(tmp_path / "a" / "train.card").md5
    assert json.loads((tmp_path / "a" / "train.meta.json").read_text())["threads"] == 1
    assert cli.main(["train", "--steps", "2", "--out", str(tmp_path / "b"), "--threads", "0"]) == 2
    assert "--threads 0 is not a thread count" in capsys.readouterr().err
    assert cli.main(["train", "--steps", "2", "--out", str(tmp_path / "c"), "--numeric-mode", "exact"]) == 2
    assert "numeric_mode" in capsys.readouterr().err


def test_without_ml_dtypes_the_mixed_suite_is_left_out_by_name_and_bfloat16_is_refused(tmp_path, capsys,
                                                                                       monkeypatch):
    import importlib.util

    from mojolike.core import checks
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "ml_dtypes" else real(n, *a))
    assert cli.main(["certify", "--backend", "oracle", "--suite", "mixed", "--out", str(tmp_path)]) == 2
    assert "ml_dtypes is not installed: pip install ml-dtypes" in capsys.readouterr().err
    monkeypatch.setattr(checks, "_cast_types", {k: v for k, v in checks.cast_types().items() if k != "bfloat16"})
    with pytest.raises(mojolike.Refusal) as e:
        checks.cast_dtype("mojolike.cast", "dtype", "bfloat16")
    assert e.value.option == "dtype" and "pip install ml-dtypes" in e.value.reason
