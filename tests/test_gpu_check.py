"""benchmarks/gpu_check.sh, the one prepared run on the GPU machine, checked here without one:
it parses, lays the package out as pyproject's package-dir mapping does when pip cannot
install it, picks the kernel tests' cases by backend, and drives every suite of mojolike's list
through a stand-in python3 that records what it was asked to run."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def helper():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_rehearsal_script_parses_as_bash():
    r = subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_rehearsal.sh")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_tree_imports_every_package_of_pyproject_from_this_checkout(tmp_path):
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert helper().tree(tmp_path / "tree") == packages
    code = ("import importlib, sys; from pathlib import Path\n"
            f"mods = [importlib.import_module(p) for p in {packages!r}]\n"
            "print(mods[0].__file__); print(Path(mods[0].cards.DIR))\n")
    # -P: the checkout's own mojolike/ (no oracles/ inside) must not be what imports
    r = subprocess.run([sys.executable, "-P", "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path / "tree")))
    assert r.returncode == 0, r.stderr
    first, cards = r.stdout.split()
    assert first == str(tmp_path / "tree" / "mojolike" / "__init__.py")
    assert cards == str(ROOT / "cards")


def test_the_kernel_cases_are_chosen_by_a_whole_backend_name():
    collected = "\n".join([
        "tests/test_schedule_kernels.py::test_steps[linear-w0-cuda]",
        "tests/test_schedule_kernels.py::test_steps[linear-w0-cuda-sim]",
        "tests/test_layers_kernels.py::test_gemm[cuda-3]",
        "tests/test_layers_kernels.py::test_gemm[cuda-sim-0]",
        "tests/test_optim_kernels.py::test_cuda_sim_grad_scale",
        "tests/test_optim_kernels.py::test_sgd[plain-cpu-numba]",
        "3 tests collected in 0.1s"])
    select = helper().select
    assert select("cuda", collected) == ["tests/test_schedule_kernels.py::test_steps[linear-w0-cuda]",
                                         "tests/test_layers_kernels.py::test_gemm[cuda-3]"]
    assert select("cuda-sim", collected) == [
        "tests/test_schedule_kernels.py::test_steps[linear-w0-cuda-sim]",
        "tests/test_layers_kernels.py::test_gemm[cuda-sim-0]"]


STAND_IN = """#!/usr/bin/env bash
# python3 for gpu_check.sh: records each call; pip fails (as with an old setuptools), the
# heavy commands succeed at once, everything else is the real interpreter
echo "$*" >> {calls}
case "$1 $2" in
    "-m pip") exit 1 ;;
    "-m mojolike"|"-m numba") exit 0 ;;
    "-m pytest") case "$*" in *--collect-only*)
        echo "tests/test_schedule_kernels.py::test_steps[linear-w0-cuda]"
        echo "tests/test_schedule_kernels.py::test_steps[linear-w0-cuda-sim]" ;; esac; exit 0 ;;
    "benchmarks/fold.py "*) exit 0 ;;
esac
exec {python} "$@"
"""


def test_the_script_certifies_every_suite_on_cuda_and_reports_with_pip_unusable(tmp_path):
    from mojolike.contracts import SUITES
    # bash reads a script as it runs: a syntax error in a branch not taken here shows only with -n
    parsed = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    calls = tmp_path / "calls"
    python = tmp_path / "python3"
    python.write_text(STAND_IN.format(calls=calls, python=sys.executable))
    python.chmod(0o755)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "PYTHONPATH")}
    env.update(OUT=str(out), MOJOLIKE_GPU_PYTHON=str(python), MOJOLIKE_GPU_JOBS="2",
               MOJOLIKE_GPU_BACKEND="cuda")
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    recorded = calls.read_text().splitlines()
    certified = sorted(c.split("--suite ")[1].split()[0] for c in recorded if " certify " in c)
    assert certified == sorted(SUITES)
    assert all("--backend cuda " in c for c in recorded if " certify " in c)
    assert any(c.startswith("-m pytest") and c.endswith("test_steps[linear-w0-cuda]") for c in recorded)
    summary = (out / "summary.txt").read_text()
    assert "install: the tree on PYTHONPATH" in summary and "install: exit 1" in summary
    for suite in SUITES:  # the stand-in wrote no card: each suite says so
        assert f"{suite}: exit 0, " in summary and f"{suite}: exit 0, " in r.stdout
    assert "no meta written" in summary
    assert r.returncode == 0, r.stdout[-3000:]
    assert len([p for p in out.rglob("*") if p.is_file()]) <= 8


def test_the_script_writes_its_summary_when_no_python_runs(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), MOJOLIKE_GPU_PYTHON=str(tmp_path / "no-python3"))
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    summary = (out / "summary.txt").read_text()
    assert "install: none" in summary and "certify: not run" in summary
    assert sorted(p.name for p in out.iterdir()) == ["bench_fold.txt", "log.txt", "summary.txt"]


def test_only_a_green_cuda_run_with_the_whole_device_record_is_marked_to_commit(tmp_path):
    import json

    from mojolike.cards import reference_path

    from mojolike.core import cardformat
    # three suites in the three roles of the rule (green, no runtime recorded, failed), not the
    # list of families: tests/test_families.py accepts this subset here and nowhere else
    md5 = {s: cardformat.read(reference_path(s)).md5 for s in ("fold", "optim", "loss")}
    device = {"device": "NVIDIA H200", "compute_capability": "9.0", "driver": "13.0",
              "runtime": "13.0"}
    metas = {"fold": {"ok": True, "card_md5": md5["fold"], "cuda": device},
             "optim": {"ok": True, "card_md5": md5["optim"], "cuda": dict(device, runtime=None)},
             "loss": {"ok": False, "card_md5": md5["loss"], "cuda": device}}
    (tmp_path / "cards" / "cuda").mkdir(parents=True)
    for suite, m in metas.items():
        m.update(backend="cuda", clauses={"a": {"status": "pass"}})
        (tmp_path / "cards" / "cuda" / f"{suite}.meta.json").write_text(json.dumps(m))
    status = tmp_path / "status"
    status.write_text("fold 0 1.0\noptim 0 1.0\nloss 1 1.0\n")
    lines = helper().cards("cuda", tmp_path / "cards", status, tmp_path / "to-commit")
    assert sorted(p.name for p in (tmp_path / "to-commit").iterdir()) == ["fold.cuda.meta.json"]
    said = {ln.split(":")[0]: ln for ln in lines}
    assert "; to commit: fold.cuda.meta.json: NVIDIA H200" in said["fold"]
    assert "not to commit" in said["optim"] and "runtime" in said["optim"]
    assert "to commit" not in said["loss"] and "ok False" in said["loss"]
    assert said["rng"] == "rng: exit none (did not finish), - s, no meta written"
