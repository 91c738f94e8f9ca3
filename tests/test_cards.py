"""The harness: every backend regenerates the committed card, wrong trees are caught, the CLI says so."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import available

from mojolike import cli
from mojolike.cards import reference_path
from mojolike.contracts import SUITES, cardformat, harness
from mojolike.contracts import fold as suite

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")


@pytest.fixture(scope="module")
def all_runs():
    out = {(s, b): harness.run(harness.suite_module(s), b) for s in SUITES for b in BACKENDS
           if available(b)}
    assert len(out) == len(SUITES) * len(BACKENDS), "every CI backend must run here"
    return out


@pytest.fixture(scope="module")
def runs(all_runs):
    return {b: r for (s, b), r in all_runs.items() if s == "fold"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", SUITES)
def test_each_backend_regenerates_the_committed_reference_card(all_runs, name, backend):
    r = all_runs[(name, backend)]
    assert cardformat.first_difference(reference_path(name).read_text(), r.card) is None
    assert r.clauses["b"].status == "pass", r.clauses["b"].detail


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", SUITES)
def test_every_clause_holds_on_every_backend(all_runs, name, backend):
    failing = {k: c.detail for k, c in all_runs[(name, backend)].clauses.items() if c.status == "fail"}
    assert not failing


@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi", "cuda-sim"])
def test_each_backend_equals_the_oracle_on_every_cell(runs, backend):
    a = runs[backend].clauses["a"]
    assert a.status == "pass", a.detail
    assert runs[backend].cells_compared == 3 * len(suite.cases()) == 360


def test_the_optim_suite_reports_invariance_resume_and_refusal_clauses(all_runs):
    for backend in BACKENDS:
        clauses = all_runs[("optim", backend)].clauses
        assert set(clauses) == {"a", "b", "c", "d", "e", "f"}
        assert "arena (borrowed)" in clauses["c"].detail and "control" in clauses["d"].detail
    assert "1 thread == 2 threads" in all_runs[("optim", "cpu-numba")].clauses["c"].detail


def test_cross_backend_clause_b_passes_when_all_cards_agree(runs):
    group = list(runs.values())
    harness.finish_cross_backend(group)
    assert all(r.clauses["b"].status == "pass" for r in group)
    assert len({r.card_md5 for r in group}) == 1


def test_every_negative_control_gives_a_different_card(runs):
    e = runs["oracle"].clauses["e"]
    assert e.status == "pass", e.detail
    for name in ("serial", "16-lanes", "plus-zero-start", "contracted"):
        assert f"{name} (" in e.detail and "records differ" in e.detail


@pytest.mark.parametrize("control", suite.negative_controls(), ids=lambda c: c.name)
def test_clause_a_reports_cells_where_a_wrong_tree_differs_from_the_oracle(control):
    wrong = harness._outputs(suite, control)
    _, bad = harness.compare_with_oracle(wrong, harness.oracle_outputs(suite))
    assert bad, f"{control.name} matched the oracle everywhere"
    assert "got 0x" in bad[0] and "oracle 0x" in bad[0]


def test_clause_b_fails_and_names_the_record_when_cards_differ(runs):
    a, b = harness.run(suite, "oracle"), harness.run(suite, "cpu-numba")
    b.card = b.card.replace("md5=", "md5=0", 1)
    harness.finish_cross_backend([a, b])
    assert a.clauses["b"].status == "fail" and "normal-n1/fold" in a.clauses["b"].detail


def test_card_hashes_every_nan_as_one_pattern():
    quiet, payload = np.uint32([0x7FC00000]).view(np.float32), np.uint32([0xFFC01234]).view(np.float32)
    assert cardformat.record("c", "o", quiet) == cardformat.record("c", "o", payload)
    assert cardformat.record("c", "o", np.float32([0.0])) != cardformat.record("c", "o", np.float32([-0.0]))


def test_card_has_a_profile_header_one_record_per_output_and_a_count(runs):
    lines = runs["oracle"].card.splitlines()
    assert lines[0] == f"# mojolike card profile={suite.PROFILE}"
    assert lines[-1] == "# records=360"
    assert all(ln.split()[1] == "n=1" and ln.split()[2].startswith("md5=") for ln in lines[1:-1])
    assert "cpu" not in runs["oracle"].card and "oracle" not in runs["oracle"].card


def test_cards_are_written_atomically_with_meta_beside_them(runs, tmp_path):
    card, meta = harness.write(runs["cpu-numba"], tmp_path)
    assert card == tmp_path / "cpu-numba" / "fold.card" and card.read_text() == runs["cpu-numba"].card
    m = json.loads(meta.read_text())
    assert m["card_md5"] == cardformat.md5_text(card.read_text()) and m["backend"] == "cpu-numba"
    assert m["gpu"]["real_gpu_run"] in (True, False) and "versions" in m
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_certify_cli_writes_cards_and_a_table(tmp_path, capsys):
    # --suite fold: the optim suite's runs are covered by the fixtures above
    assert cli.main(["certify", "--backend", "cpu-cffi", "--suite", "fold", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cpu-cffi" in out and cardformat.md5_text(reference_path("fold").read_text()) in out
    assert (tmp_path / "cpu-cffi" / "fold.card").read_text() == reference_path("fold").read_text()


def test_certify_cli_exits_nonzero_when_a_clause_fails(tmp_path, monkeypatch, capsys):
    wrong = tmp_path / "ref" / "fold.card"
    wrong.parent.mkdir()
    wrong.write_text(reference_path("fold").read_text().replace("md5=", "md5=f", 1))
    monkeypatch.setattr(harness, "reference_path", lambda name: wrong)
    assert cli.main(["certify", "--backend", "cpu-numba", "--out", str(tmp_path / "o"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["runs"][0]["clauses"]["b"]["status"] == "fail"


def test_compare_cli_names_the_first_differing_record(tmp_path, capsys):
    ref = reference_path("fold").read_text()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "fold.card").write_text(ref)
    (tmp_path / "b" / "fold.card").write_text(ref)
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    lines = ref.splitlines()
    lines[5] = lines[5][:-1] + ("0" if lines[5][-1] != "0" else "1")
    (tmp_path / "b" / "fold.card").write_text("\n".join(lines) + "\n")
    assert cli.main(["compare", str(tmp_path / "a" / "fold.card"), str(tmp_path / "b" / "fold.card")]) == 1
    assert lines[5].split()[0] in capsys.readouterr().out


def test_backends_cli_prints_every_backend(capsys):
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out
    for name in ("oracle", "cpu-numba", "cpu-cffi", "cuda", "cuda-sim"):
        assert name in out
