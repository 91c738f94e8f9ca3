"""examples/torch_gpt.py, run small: a plain-torch nanoGPT trained under certified() with
mojolike.torch.optim.AdamW prints the same digest on cpu-numba and cpu-cffi, 1 and 2 threads,
and (the tiny config) on the oracle."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "torch_gpt.py"


def run(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(EXAMPLE), *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    line = out.stdout.strip().splitlines()[-1]
    return dict(re.findall(r"(\w+)=(\S+)", line))


def test_the_tiny_model_has_the_oracles_digest_on_cpu_numba_and_its_steps_change_it():
    oracle = run("--backend", "oracle", "--tiny", "--steps", "2")
    numba = run("--backend", "cpu-numba", "--tiny", "--steps", "2")
    assert re.fullmatch(r"[0-9a-f]{32}", oracle["digest"])
    assert oracle["digest"] == numba["digest"] and oracle["loss"] == numba["loss"]
    assert run("--backend", "cpu-numba", "--tiny", "--steps", "1")["digest"] != numba["digest"]


def test_the_small_model_has_one_digest_on_both_cpu_backends_and_thread_counts():
    runs = [run("--backend", b, "--threads", t, "--steps", "3")
            for b, t in (("cpu-numba", "1"), ("cpu-cffi", "2"), ("cpu-numba", "2"))]
    assert len({r["digest"] for r in runs}) == 1, runs
    assert {r["threads"] for r in runs} == {"1", "2"}


def _example():
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import torch_gpt
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    return torch_gpt


def test_the_logits_are_mojolike_gpts_bits_on_the_same_weights():
    ex = _example()
    assert ex.compare_logits(ex.CONFIGS["tiny"], "oracle") == "same bits"
    assert ex.compare_logits(ex.CONFIGS["small"], "cpu-numba") == "same bits"


def test_the_certified_loss_is_torch_eagers_up_to_rounding():
    import torch
    ex = _example()
    cfg = ex.CONFIGS["small"]
    torch.manual_seed(0)
    model = ex.GPT(**cfg)
    x, y = next(ex.batches(cfg, 1))
    with torch.no_grad():
        _, eager = model(x, y)
        with mojolike_torch().certified(backend="cpu-numba"):
            _, cert = model(x, y)
    # torch's kernels sum in other orders (and its sqrt is not correctly rounded here), so
    # only closeness is expected from torch: a few ulps of the loss
    assert abs(cert.item() - eager.item()) <= 1e-5 * abs(eager.item())


def mojolike_torch():
    import mojolike.torch
    return mojolike.torch
