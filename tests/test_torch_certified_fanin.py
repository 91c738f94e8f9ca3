"""Three gradient contributions to one tensor under certified(): torch's engine adds them in
the order the producing backward nodes run (the later-created first, mojolike.torch.dispatch's
docstring), so the gradient is the same bits on 1 and 2 threads (torch.set_num_threads and
NUMBA_NUM_THREADS, each in a fresh process) and equals ((g3 + g2) + g1) in binary32."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = r"""
import sys, numpy as np, torch
torch.set_num_threads(int(sys.argv[1]))
import mojolike.torch
from tests.test_torch_certified_fanin import contributions
w = torch.zeros(4099, requires_grad=True)
g1, g2, g3 = (torch.from_numpy(g) for g in contributions())
with mojolike.torch.certified(backend=sys.argv[2]) as mode:
    loss = (w * g1).sum() + (w * g2).sum() + (w * g3).sum()   # d loss / dw = g1 + g2 + g3
    loss.backward()
assert mode.calls.get("aten.add.Tensor", 0) >= 2, mode.calls   # the engine's accumulations
print(torch.get_num_threads(), w.grad.numpy().tobytes().hex())
"""


def contributions():
    """Three float32 vectors whose three sums in different orders differ in many places."""
    r = np.random.default_rng(11)
    big = r.standard_normal(4099).astype(np.float32)
    small = (r.standard_normal((2, 4099)) * np.float32(1e-7)).astype(np.float32)
    return big, small[0], small[1] + np.float32(3e-8) * big


def run(threads: int, backend: str) -> tuple[str, str]:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(threads), backend], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    n, hexed = out.stdout.split()
    return n, hexed


def test_the_orders_differ_so_the_test_can_tell_them_apart():
    g1, g2, g3 = contributions()
    assert ((g3 + g2) + g1).tobytes() != ((g1 + g2) + g3).tobytes()
    assert ((g3 + g2) + g1).tobytes() != ((g3 + g1) + g2).tobytes()


@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
def test_a_three_way_fan_in_has_the_same_bits_on_one_and_two_threads_in_reverse_creation_order(
        backend):
    (n1, one), (n2, two) = run(1, backend), run(2, backend)
    assert (n1, n2) == ("1", "2")
    assert one == two
    g1, g2, g3 = contributions()
    assert bytes.fromhex(one) == ((g3 + g2) + g1).tobytes()
