"""The backend registry lists every backend, loads lazily, and reports what ran."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import mojolike
from mojolike.core import registry


def test_backends_lists_every_backend_with_a_reason():
    infos = mojolike.backends()
    assert [b.name for b in infos] == ["oracle", "cpu-numba", "cpu-cffi", "cuda", "cuda-sim"]
    assert all(b.reason for b in infos)
    assert {b.name: b.available for b in infos}["oracle"]


def test_import_compiles_nothing_and_takes_under_a_second():
    # CPU time of the import itself: on a shared machine the wall clock also counts waiting
    code = ("import time, sys; t = time.process_time(); import mojolike; "
            "print(time.process_time() - t, 'numba' in sys.modules, 'cffi' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, numba_loaded, cffi_loaded = out.stdout.split()
    assert float(seconds) < 1.0
    assert numba_loaded == "False" and cffi_loaded == "False"


def test_backend_used_reads_the_label_back_from_the_kernels_that_ran():
    x = np.ones(5, np.float32)
    mojolike.fold(x, backend="cpu-cffi")
    assert (mojolike.backend_used(), mojolike.numeric_mode_used()) == ("cpu-cffi", "identical")
    mojolike.fold(x, backend="oracle")
    assert mojolike.backend_used() == "oracle"


def test_default_backend_is_cpu_numba_in_identical_mode(monkeypatch):
    monkeypatch.delenv("MOJOLIKE_BACKEND", raising=False)
    monkeypatch.delenv("MOJOLIKE_NUMERIC_MODE", raising=False)
    assert registry.resolve("t", None, None) == ("cpu-numba", "identical")


def test_cuda_sim_runs_in_a_worker_process_and_reports_its_own_label():
    x = np.arange(1, 2050, dtype=np.float32)
    got = mojolike.sumsq(x, backend="cuda-sim")
    assert mojolike.backend_used() == "cuda-sim"
    assert got == mojolike.sumsq(x, backend="oracle")
    k = registry.kernels("test", "fold", "cuda-sim", "identical")
    assert k.details["process"] == "worker" and k.details["device"] == "numba CUDA simulator"


def test_in_a_simulator_process_the_real_cuda_backend_is_refused():
    code = ("import mojolike; b = {i.name: i for i in mojolike.backends()}; "
            "print(b['cuda'].available, b['cuda'].reason)")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.startswith("False") and "simulator" in out.stdout


def test_a_warm_c_build_cache_loads_without_running_the_compiler(monkeypatch):
    from mojolike.native.c import build
    build.load("identical")  # warm the cache (builds only if it is cold)

    def no_compiler(*a, **k):
        raise AssertionError("the compiler ran although the cache was warm")

    monkeypatch.setattr(build, "_build", no_compiler)
    monkeypatch.setattr(build, "_openmp_works", no_compiler)
    module = build.load("identical")
    assert module.ffi.string(module.lib.mj_build_mode()) == b"identical"
