"""Every loaded kernel set conforms to its family's interface (mojolike/core/interfaces/).

Over (family x backend): every method the protocol declares exists with the same
parameter names, kinds and order (a tail gathered into one *args allowed); the labels
are the ones asked for; the simulator's proxy copies back the arguments the protocol
marks as written. oracle, cpu-numba and cpu-cffi load in this process; the CUDA classes
load in one subprocess under numba's simulator (NUMBA_ENABLE_CUDASIM=1 must be set
before numba is imported).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import available
from mojolike.core import families, interfaces, registry
from mojolike.core.families import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
IN_PROCESS = ("oracle", "cpu-numba", "cpu-cffi")
# the sets whose optimizer kernels write separate arrays through a Pieces table
TAKE_PIECES = {("optim", "cpu-numba"), ("optim", "cpu-cffi")}


@pytest.mark.parametrize("backend", IN_PROCESS)
@pytest.mark.parametrize("family", FAMILIES)
def test_each_kernel_set_has_every_method_of_its_protocol_with_its_parameters(family, backend):
    k = registry.kernels("test", family, backend, "identical")
    assert interfaces.mismatches(family, k) == []
    assert (k.backend, k.numeric_mode) == (backend, "identical")
    assert isinstance(k.details, dict)
    assert k.takes_pieces is ((family, backend) in TAKE_PIECES)


_CUDA_SCRIPT = """
import json
from mojolike.core import families, interfaces, registry
out = {}
for f in families.FAMILIES:
    k = registry.kernels("test", f, "cuda-sim", "identical")
    out[f] = {"mismatches": interfaces.mismatches(f, k), "labels": [k.backend, k.numeric_mode],
              "module": type(k).__module__, "takes_pieces": k.takes_pieces}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cuda_sets() -> dict:
    if not available("cuda-sim"):
        pytest.skip("numba-cuda is not installed")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", _CUDA_SCRIPT], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("family", FAMILIES)
def test_each_cuda_kernel_set_conforms_to_its_protocol_under_the_simulator(family, cuda_sets):
    got = cuda_sets[family]
    assert got["mismatches"] == []
    assert got["labels"] == ["cuda-sim", "identical"]
    assert got["module"] == families.module(family, "cuda-sim")
    assert got["takes_pieces"] is False


@pytest.mark.parametrize("family", FAMILIES)
def test_the_simulator_proxy_copies_back_what_the_protocol_marks_written(family):
    if not available("cuda-sim"):
        pytest.skip("numba-cuda is not installed")
    if not registry.runs_in_worker("cuda-sim"):
        pytest.skip("this process runs the simulator itself: no proxy")
    k = registry.kernels("test", family, "cuda-sim", "identical")
    assert k.writes == interfaces.writes(family)
    assert set(interfaces.methods(family)) <= k._methods
    assert (k.backend, k.numeric_mode, k.takes_pieces) == ("cuda-sim", "identical", False)


def test_a_call_through_the_proxy_writes_the_callers_array():
    if not available("cuda-sim") or not registry.runs_in_worker("cuda-sim"):
        pytest.skip("needs the simulator in a worker process")
    k = registry.kernels("test", "crmath", "cuda-sim", "identical")
    out = np.full(2, np.nan, np.float32)
    assert k.expf_into(np.float32([0.0, 1.0]), out) == 0
    assert out.tolist() == [1.0, np.float32(np.e).item()]


def test_written_adds_the_gradient_only_when_write_back_is_asked_for():
    assert interfaces.written("optim", "sgd", {}) == (0, 2)
    assert interfaces.written("optim", "sgd", {"write_back": True}) == (0, 2, 1)
    assert interfaces.written("optim", "adam", {"write_back": False}) == (0, 2, 3)
    assert interfaces.written("fold", "fold", {}) == ()


def test_every_family_protocol_is_named_after_it_and_declares_the_base_labels():
    for family in FAMILIES:
        proto = interfaces.protocol(family)
        assert proto.__name__ == f"{family.capitalize()}Kernels"
        assert interfaces.KernelSet in proto.__mro__ and interfaces.methods(family)
        assert all(fn.__doc__ for name, fn in vars(proto).items() if name in interfaces.methods(family))


class _Renamed:
    backend, numeric_mode, details, takes_pieces = "oracle", "identical", {}, False

    def fold(self, x):
        return x

    def sumsq(self, y):  # the protocol names it x
        return y


class _Gathered:
    backend, numeric_mode, details, takes_pieces = "oracle", "identical", {}, False

    def new_state(self, n): ...
    def sgd(self, p, g, b, *rest, grad_scale=None, write_back=False): ...
    def adam(self, p, g, m, v, *scalars_and_flags, grad_scale=None, write_back=False): ...
    def sgd_twins(self, p, g, b, tw, kinds, cut, *rest, grad_scale=None, write_back=False): ...
    def adam_twins(self, p, g, m, v, tw, kinds, cut, *rest, grad_scale=None, write_back=False): ...
    def scale(self, g, coef): ...
    def add(self, a, b, out): ...
    def all_finite(self, x): ...
    def segment_sumsq(self, x, offsets): ...
    def segment_fold(self, x, offsets): ...
    def segment_fold_sumsq(self, x, offsets): ...
    def clip_coef(self, sumsqs, max_norm, eps): ...


def test_a_renamed_parameter_and_a_missing_method_are_reported():
    problems = interfaces.mismatches("fold", _Renamed())
    assert len(problems) == 2
    assert problems[0].startswith("sumsq(y)") and problems[1] == "no method dot"


def test_a_tail_of_positional_parameters_may_be_gathered_into_args_but_not_the_keywords():
    assert interfaces.mismatches("optim", _Gathered()) == []

    class Loose(_Gathered):
        def sgd(self, p, g, b, *rest, **kw): ...
    assert [p.split("(")[0] for p in interfaces.mismatches("optim", Loose())] == ["sgd"]
