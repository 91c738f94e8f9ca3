"""The harness: every backend regenerates the committed card, wrong trees are caught, the CLI says so.

Every suite on every backend (`all_runs`) is the longest piece of the test run, and half of
it leaves a core idle (the simulator's worker waits on one process, the negative controls
run in one). So conftest starts it in a process of its own when collection selects this
module (`start_all_runs`), and moves this module's tests to the end of the session: the
other tests run beside it, and the fixture reads its pickled runs when they are done.
"""
from __future__ import annotations

import copy
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import available
from mojolike.cards import reference_path
from mojolike.contracts import SUITES, harness
from mojolike.contracts import fold as suite

from mojolike import cli
from mojolike.core import cardformat

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")


def every_run() -> dict:
    """{(suite, backend): SuiteRun} for every suite on every available backend of BACKENDS."""
    ready = [b for b in BACKENDS if available(b)]
    runs = harness.run_many([harness.suite_module(s) for s in SUITES], ready)
    return {(s, b): r for s, row in zip(SUITES, runs) for b, r in zip(ready, row)}


def start_all_runs() -> tuple[subprocess.Popen, Path]:
    """`every_run()` in a process of its own, pickled to the returned path when it is done."""
    path = Path(tempfile.mkdtemp(prefix="mojolike-all-runs-")) / "runs.pickle"
    proc = subprocess.Popen([sys.executable, __file__, str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parent,
                            env=dict(os.environ), start_new_session=True)
    return proc, path


def stop_all_runs(proc: subprocess.Popen) -> None:
    """Kill the background run and the simulator's worker it started (one process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


@pytest.fixture(scope="module")
def all_runs(request):
    started = getattr(request.config, "mojolike_all_runs", None)
    if started is None:  # conftest did not start it (this module collected another way)
        out = every_run()
    else:
        proc, path = started
        _, err = proc.communicate(timeout=3600)
        assert proc.returncode == 0, f"the background run of every suite failed:\n{err[-4000:]}"
        out = pickle.loads(path.read_bytes())
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
        assert set(clauses) == {"a", "b", "c", "d", "f"}
        assert "== arena views" in clauses["c"].detail and "control" in clauses["d"].detail
    assert "1 thread == 2 threads" in all_runs[("optim", "cpu-numba")].clauses["c"].detail


def test_cross_backend_clause_b_passes_when_all_cards_agree(runs):
    group = list(runs.values())
    harness.finish_cross_backend(group)
    assert all(r.clauses["b"].status == "pass" for r in group)
    assert len({r.card_md5 for r in group}) == 1


def test_every_negative_control_gives_a_different_card(runs):
    e = runs["oracle"].suite_clauses["e"]
    assert e.status == "pass", e.detail
    for name in ("serial", "16-lanes", "plus-zero-start", "contracted"):
        assert f"{name} (" in e.detail and "records differ" in e.detail


@pytest.mark.parametrize("name", SUITES)
def test_negative_controls_are_one_suite_result_never_a_backend_clause(all_runs, name):
    group = [all_runs[(name, b)] for b in BACKENDS]
    assert all("e" not in r.clauses for r in group)
    assert len({id(r.suite_clauses["e"]) for r in group}) == 1
    assert group[0].suite_clauses["e"].detail.startswith(
        "computed on: oracle variants; they do not depend on the backend")
    # the controls are oracle variants: none of them is a backend's kernels
    for ctl in harness.suite_module(name).negative_controls():
        assert ctl.backend in ("oracle", "negative-control"), ctl.name


def test_certify_exits_nonzero_when_a_negative_control_is_not_detected(tmp_path, monkeypatch, capsys):
    from mojolike.oracles.fold import fold_tree
    monkeypatch.setattr(harness, "_controls", {})
    monkeypatch.setattr(suite, "negative_controls",
                        lambda: [suite._Control("true-tree", "the contract's own tree", fold_tree)])
    assert cli.main(["certify", "--backend", "oracle", "--suite", "fold", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL fold (e, once per suite)" in out and "true-tree: NOT detected" in out
    m = json.loads((tmp_path / "oracle" / "fold.meta.json").read_text())
    assert "e" not in m["clauses"] and m["suite_clauses"]["e"]["status"] == "fail" and m["ok"] is False


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


def test_card_has_a_profile_header_one_record_per_output_a_count_and_an_md5_trailer(runs):
    card = runs["oracle"].card
    lines = card.splitlines()
    assert lines[0] == f"# mojolike card profile={suite.PROFILE}"
    assert lines[-2] == "# records=360"
    assert lines[-1] == f"# md5={cardformat.md5_text(card[:card.rindex('# md5=')])}" \
        == f"# md5={runs['oracle'].card_md5}"
    assert all(ln.split()[1] == "n=1" and ln.split()[2].startswith("md5=") for ln in lines[1:-2])
    assert "cpu" not in card and "oracle" not in card


def test_cards_are_written_atomically_with_meta_beside_them(runs, tmp_path):
    card, meta = harness.write(runs["cpu-numba"], tmp_path)
    assert card == tmp_path / "cpu-numba" / "fold.card" and card.read_text() == runs["cpu-numba"].card
    m = json.loads(meta.read_text())
    assert m["card_md5"] == cardformat.read(card).md5 and m["backend"] == "cpu-numba"
    assert m["gpu"]["real_gpu_run"] in (True, False) and m["gpu"]["why"]
    assert not [p for p in tmp_path.rglob("*.tmp")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_meta_records_versions_host_compiler_threads_and_mode(runs, backend, tmp_path):
    import numba
    _, meta = harness.write(runs[backend], tmp_path)
    m = json.loads(meta.read_text())
    assert set(m["versions"]) == {"python", "numpy", "numba", "llvmlite", "cffi", "numba-cuda"}
    assert m["versions"]["numpy"] == np.__version__ and m["versions"]["numba"] == numba.__version__
    assert m["host"]["os"] and m["host"]["cpu_model"] and m["host"]["isa_flags"]
    assert m["compiler"]["compiler"] and m["compiler"]["version"] and m["compiler"]["source"]
    assert m["numeric_mode"] == "identical"
    want_threads = {"cpu-numba": numba.get_num_threads()}.get(backend)
    if backend == "cpu-cffi":
        assert isinstance(m["threads"], int) and m["threads"] >= 1
        assert "flags" in m["compiler"] or "build_command" in m["compiler"]
    elif want_threads is not None:
        assert m["threads"] == want_threads
    else:
        assert m["threads"] == "n/a"
    assert "cuda" not in m  # device fields belong to the real cuda backend only
    assert "e" not in m["clauses"] and m["suite_clauses"]["e"]["status"] == "pass"


def _gpu_meta(md5: str, **cuda_fields) -> dict:
    fields = {"device": "NVIDIA H200", "compute_capability": "9.0", "driver": "12.8",
              "runtime": "12.8"} | cuda_fields
    return {"backend": "cuda", "card_md5": md5, "cuda": {k: v for k, v in fields.items() if v != "drop"}}


@pytest.mark.parametrize("meta,why", [
    (None, "no fold.cuda.meta.json"),
    ({"backend": "cuda-sim", "card_md5": "REF"}, "backend 'cuda-sim', not 'cuda'"),
    (_gpu_meta("REF", driver="drop"), "lacks cuda driver"),
    (_gpu_meta("REF", device="", runtime=None), "lacks cuda device, runtime"),
    (_gpu_meta("0" * 32), "certifies card md5 00000000000000000000000000000000, not the reference"),
    ("{not json", "not readable JSON"),
])
def test_a_cuda_meta_that_is_not_a_real_gpu_run_of_the_reference_says_why(tmp_path, meta, why):
    text = reference_path("fold").read_text()
    (tmp_path / "fold.card").write_text(text)
    ref_md5 = cardformat.read(tmp_path / "fold.card").md5
    if meta is not None:
        raw = meta if isinstance(meta, str) else json.dumps(meta).replace("REF", ref_md5)
        (tmp_path / "fold.cuda.meta.json").write_text(raw)
    status = harness.gpu_status("fold", tmp_path)
    assert status["real_gpu_run"] is False and why in status["why"], status


def test_a_meta_written_for_real_cuda_carries_the_device_fields_gpu_status_reads(runs, tmp_path, monkeypatch):
    import dataclasses

    from mojolike.contracts import provenance
    device = {"device": "NVIDIA H200", "compute_capability": "9.0", "driver": "13.0", "runtime": "13.0"}
    monkeypatch.setattr(provenance, "cuda_device", lambda: dict(device))
    as_cuda = dataclasses.replace(runs["cuda-sim"], backend="cuda")
    _, meta = harness.write(as_cuda, tmp_path / "out")
    assert json.loads(meta.read_text())["cuda"] == device
    (tmp_path / "fold.card").write_text(reference_path("fold").read_text())
    meta.rename(tmp_path / "fold.cuda.meta.json")
    assert harness.gpu_status("fold", tmp_path)["real_gpu_run"] is True
    # without a GPU the probe leaves the fields empty, and such a meta does not count
    monkeypatch.setattr(provenance, "cuda_device", lambda: dict.fromkeys(device))
    _, meta = harness.write(as_cuda, tmp_path / "out")
    meta.replace(tmp_path / "fold.cuda.meta.json")
    status = harness.gpu_status("fold", tmp_path)
    assert status["real_gpu_run"] is False and "lacks cuda device" in status["why"]


def test_a_cuda_meta_with_every_field_and_the_reference_md5_is_a_real_gpu_run(tmp_path):
    (tmp_path / "fold.card").write_text(reference_path("fold").read_text())
    ref_md5 = cardformat.read(tmp_path / "fold.card").md5
    (tmp_path / "fold.cuda.meta.json").write_text(json.dumps(_gpu_meta(ref_md5)))
    status = harness.gpu_status("fold", tmp_path)
    assert status["real_gpu_run"] is True and "NVIDIA H200" in status["why"]
    # the same meta beside a different (valid) reference card does not count
    lines = reference_path("fold").read_text().splitlines()
    (tmp_path / "fold.card").write_text(cardformat.render(suite.PROFILE, lines[2:-2]))
    assert harness.gpu_status("fold", tmp_path)["real_gpu_run"] is False


def test_certify_cli_writes_cards_and_a_table(tmp_path, capsys):
    # --suite fold: the optim suite's runs are covered by the fixtures above
    assert cli.main(["certify", "--backend", "cpu-cffi", "--suite", "fold", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cpu-cffi" in out and cardformat.read(reference_path("fold")).md5 in out
    assert (tmp_path / "cpu-cffi" / "fold.card").read_text() == reference_path("fold").read_text()


def test_certify_cli_exits_nonzero_when_a_clause_fails(tmp_path, monkeypatch, capsys):
    wrong = tmp_path / "ref" / "fold.card"
    wrong.parent.mkdir()
    wrong.write_text(reference_path("fold").read_text().replace("md5=", "md5=f", 1))
    monkeypatch.setattr(harness, "reference_path", lambda name: wrong)
    assert cli.main(["certify", "--backend", "cpu-numba", "--suite", "fold", "--out", str(tmp_path / "o"),
                     "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    b = report["runs"][0]["clauses"]["b"]
    assert report["ok"] is False and b["status"] == "fail" and "not a valid card" in b["detail"]
    assert f"{wrong}, line 2:" in b["detail"]


def test_certify_fails_clause_b_when_a_valid_reference_card_differs(runs, tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "reference_path", lambda name: tmp_path / f"{name}.card")
    clause = harness.reference_clause(suite, runs["oracle"].card)
    assert clause.status == "fail" and "no reference card" in clause.detail
    wrong = reference_path("fold").read_text().splitlines()[1:-2]
    wrong[0] = wrong[0][:-1] + ("0" if wrong[0][-1] != "0" else "1")
    (tmp_path / "fold.card").write_text(cardformat.render(suite.PROFILE, wrong))
    clause = harness.reference_clause(suite, runs["oracle"].card)
    assert clause.status == "fail" and "line 2" in clause.detail and wrong[0] in clause.detail


def _two_folders(tmp_path, a: str, b: str):
    for name, text in (("a", a), ("b", b)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "fold.card").write_text(text)
    return str(tmp_path / "a"), str(tmp_path / "b")


def test_compare_cli_names_the_first_differing_record(tmp_path, capsys):
    ref = reference_path("fold").read_text()
    assert cli.main(["compare", *_two_folders(tmp_path, ref, ref)]) == 0
    assert f"md5={cardformat.read(reference_path('fold')).md5}" in capsys.readouterr().out
    lines = ref.splitlines()[1:-2]
    lines[4] = lines[4][:-1] + ("0" if lines[4][-1] != "0" else "1")
    _two_folders(tmp_path, ref, cardformat.render(suite.PROFILE, lines))
    assert cli.main(["compare", str(tmp_path / "a" / "fold.card"), str(tmp_path / "b" / "fold.card")]) == 1
    assert lines[4].split()[0] in capsys.readouterr().out


@pytest.mark.parametrize("damage,line", [
    (lambda t: t.replace("md5=", "md5=0", 1), 2),               # a record edited
    (lambda t: t[:t.rindex("# md5=")], 363),                     # trailer cut off
    (lambda t: t.replace("n=1", "n=2", 1), 363),                 # trailer no longer matches
    (lambda t: "", 1),                                           # empty
    (lambda t: "not a card\n", 1),                              # garbage
])
def test_compare_cli_refuses_identical_broken_cards_naming_file_and_line(tmp_path, capsys, damage, line):
    bad = damage(reference_path("fold").read_text())
    a, b = _two_folders(tmp_path, bad, bad)
    for args in ([a, b], [a + "/fold.card", b + "/fold.card"]):
        assert cli.main(["compare", *args]) == 2
        err = capsys.readouterr().err
        assert "invalid card" in err and f"fold.card, line {line}:" in err and "same" not in err


def test_update_reference_refuses_a_single_backend_naming_what_is_missing(tmp_path, capsys):
    code = cli.main(["certify", "--backend", "cpu-numba", "--suite", "fold", "--update-reference",
                     "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "missing: oracle" in err and "cpu-cffi" in err
    assert ("cuda-sim" in err) == available("cuda-sim")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("drop", ["oracle", "cpu-numba", "cpu-cffi", "cuda-sim"])
def test_update_reference_writes_nothing_unless_every_required_backend_ran(runs, tmp_path, monkeypatch, drop):
    import mojolike.cards
    monkeypatch.setattr(mojolike.cards, "reference_path", lambda name: tmp_path / f"{name}.card")
    group = copy.deepcopy([r for b, r in runs.items() if b != drop])
    done, note = cli._update_reference(suite, group)
    assert not done and f"backends {drop} did not run" in note and not list(tmp_path.iterdir())


def test_update_reference_refuses_when_cards_differ(runs, tmp_path, monkeypatch):
    import mojolike.cards
    monkeypatch.setattr(mojolike.cards, "reference_path", lambda name: tmp_path / f"{name}.card")
    group = copy.deepcopy(list(runs.values()))
    group[1].card = group[1].card.replace("md5=", "md5=0", 1)
    done, note = cli._update_reference(suite, group)
    assert not done and "cards differ" in note and not list(tmp_path.iterdir())


def test_update_reference_writes_the_card_and_a_meta_with_provenance(runs, tmp_path, monkeypatch):
    import mojolike.cards
    monkeypatch.setattr(mojolike.cards, "reference_path", lambda name: tmp_path / f"{name}.card")
    (tmp_path / "fold.card").write_text("a damaged old card\n")
    group = copy.deepcopy(list(runs.values()))
    done, note = cli._update_reference(suite, group)
    assert done and "the old card was not valid" in note and "line 1" in note
    assert (tmp_path / "fold.card").read_text() == group[0].card
    m = json.loads((tmp_path / "fold.meta.json").read_text())
    assert m["card_md5"] == cardformat.read(tmp_path / "fold.card").md5
    assert set(m["backends"]) == set(BACKENDS) and m["suite_clauses"] == {"e": "pass"}
    assert all("e" not in b["clauses"] and b["numeric_mode"] == "identical" for b in m["backends"].values())
    assert m["backends"]["oracle"]["threads"] == "n/a" and isinstance(m["backends"]["cpu-cffi"]["threads"], int)
    assert m["versions"]["numba"] and m["host"]["isa_flags"] and m["compiler"]["version"]
    assert m["gpu"]["real_gpu_run"] is False and "no fold.cuda.meta.json" in m["gpu"]["why"]


def test_backends_cli_prints_every_backend(capsys):
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out
    for name in ("oracle", "cpu-numba", "cpu-cffi", "cuda", "cuda-sim"):
        assert name in out


if __name__ == "__main__":  # the background process conftest starts: every run, pickled
    os.nice(5)  # the session's own tests (timeouts among them) keep their core
    Path(sys.argv[1]).write_bytes(pickle.dumps(every_run()))
