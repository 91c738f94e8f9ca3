"""cpu-numba's kernels run on the calling thread below native/threads.PARALLEL_MIN, and both
ways give the same bits; numba's thread pool starts passive (native/threads.py).

Each kernel the threshold dispatches runs at work sizes just below, at and above the
threshold three ways: as dispatched, forced onto its serial twin and forced onto numba's
pool (the threshold patched to infinity and to 0); the outputs' bytes must agree. The
serial twins of hot kernels are checked for packed loops on this host (tests/test_vectorized.py
checks the parallel kernels on every target).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from conftest import assert_same_bits
from mojolike.native import fold, layers, optim, threads
from test_vectorized import packed_in_loops

from mojolike.core import registry

MIN = threads.PARALLEL_MIN
WORKS = (MIN - 1, MIN, MIN + 1000)
F = np.float32


def kernels(family):
    return registry.kernels("tests", family, "cpu-numba", "identical")


def data(n, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


def cuts(n):
    """Three tensors of about n / 3 elements each (tensor and task boundaries fall apart)."""
    return np.int64([0, n // 3, n // 3 + n // 2, n])


# -- one function per kernel: run it on inputs of about `work` elements, return its outputs --
def run_fold(work):
    x, y = data(work, 1), data(work, 2)
    k = kernels("fold")
    return [np.float32([k.fold(x), k.dot(x, y), k.sumsq(x)])]


def run_segment_folds(work):
    x, k = data(work, 3), kernels("optim")
    sums, sumsqs = k.segment_fold_sumsq(x, cuts(work))
    return [k.segment_sumsq(x, cuts(work)), k.segment_fold(x, cuts(work)), sums, sumsqs]


def run_sgd(work):
    p, g, b = data(work, 4), data(work, 5), data(work, 6)
    kernels("optim").sgd(p, g, b, False, F(0.01), F(0.9), F(0.75), F(0.1), True, True, True, False,
                         grad_scale=F(0.5), write_back=True)
    return [p, g, b]


def run_adam(work):
    p, g, m, v = data(work, 7), data(work, 8), data(work, 9), np.abs(data(work, 10))
    scalars = [F(x) for x in (0.9, 0.999, 1e-8, 0.01, 0.1, 0.001, 3e-3, 0.7, 0.99)]
    kernels("optim").adam(p, g, m, v, *scalars, np.bool_(False), np.bool_(True), np.bool_(False),
                          grad_scale=F(0.25), write_back=True)
    return [p, g, m, v]


def run_scale_add_and_finiteness(work):
    k = kernels("optim")
    a, b, out = data(work, 11), data(work, 12), np.empty(work, np.float32)
    k.add(a, b, out)
    k.scale(a, F(0.3))
    finite = k.all_finite(b)
    b[work - 1] = np.inf
    return [out, a, np.bool_([finite, k.all_finite(b)])]


def run_gemm(work):
    k = kernels("layers")
    n, kk = 30, 33
    m = max(1, work * 32 // (n * kk))
    a, b, bias = data(m * kk, 13).reshape(m, kk), data(n * kk, 14).reshape(n, kk), data(n, 15)
    out = np.empty((m, n), np.float32)
    k.gemm_nt(a, b, bias, True, out)
    n2, k2 = 7, 2100  # three chunks of K: the chunk partials
    m2 = max(1, work * 32 // (n2 * k2))
    a2, b2 = data(m2 * k2, 16).reshape(m2, k2), data(n2 * k2, 17).reshape(n2, k2)
    chunks = np.empty((3, m2, n2), np.float32)
    k.gemm_nt_chunks(a2, b2, chunks)
    return [out, chunks]


def run_row_and_column_folds(work):
    k = kernels("layers")
    c = 1500
    m = max(1, work // c)
    a = data(m * c, 18).reshape(m, c)
    rows = np.empty((m, 2), np.float32)
    k.row_chunk_folds(a, rows)
    ncols = 40  # two vectors of columns and eight single ones
    mc = max(1, work // ncols)
    x, y = data(mc * ncols, 19).reshape(mc, ncols), data(mc * ncols, 20).reshape(mc, ncols)
    cols, prods = np.empty(ncols, np.float32), np.empty(ncols, np.float32)
    k.col_fold(x, x, False, cols)
    k.col_fold(x, y, True, prods)
    return [rows, cols, prods]


def run_segment_fold(work):
    width, vocab = 24, 50
    t = max(1, work // width)
    dy = data(t * width, 21).reshape(t, width)
    ids = np.random.default_rng(22).integers(0, vocab, t)
    order = np.argsort(ids, kind="stable").astype(np.int64)
    rows, starts = np.unique(ids[order], return_index=True)
    out = np.full((vocab + 1, width), 7.0, np.float32)
    kernels("layers").segment_fold(dy, order, np.append(starts, t).astype(np.int64),
                                   rows.astype(np.int64), out)
    return [out]


def run_rms_norm_and_relu(work):
    k = kernels("layers")
    d = 48
    m = max(1, work // d)
    x, w, dy = data(m * d, 23).reshape(m, d), data(d, 24), data(m * d, 25).reshape(m, d)
    y, dx, h = (np.empty((m, d), np.float32) for _ in range(3))
    k.rms_norm(x, w, True, F(1e-6), y)
    k.rms_norm_backward(dy, x, w, True, F(1e-6), dx, h)
    r = np.empty(work, np.float32)
    k.relu(data(work, 26), r)
    return [y, dx, h, r]


RUNS = {"fold, dot, sumsq": run_fold, "segment folds": run_segment_folds, "sgd": run_sgd,
        "adam": run_adam, "scale, add, all_finite": run_scale_add_and_finiteness,
        "gemm_nt, gemm_nt_chunks": run_gemm, "row and column folds": run_row_and_column_folds,
        "segment_fold": run_segment_fold, "rms_norm, relu": run_rms_norm_and_relu}


@pytest.mark.parametrize("work", WORKS)
@pytest.mark.parametrize("name", RUNS)
def test_serial_twins_and_the_parallel_kernels_give_the_same_bits_around_the_threshold(
        name, work, monkeypatch):
    dispatched = RUNS[name](work)
    monkeypatch.setattr(threads, "PARALLEL_MIN", sys.maxsize)
    serial = RUNS[name](work)
    monkeypatch.setattr(threads, "PARALLEL_MIN", 0)
    parallel = RUNS[name](work)
    for i, (d, s, p) in enumerate(zip(dispatched, serial, parallel)):
        assert_same_bits(s, p, f"{name} output {i} at work {work}: serial vs parallel")
        assert_same_bits(d, p, f"{name} output {i} at work {work}: dispatched vs parallel")


# a twin, a run that calls it once, work sizes that land just below and at the threshold
DISPATCH = {"fold": (fold.fold_partials, run_fold, MIN - 1, MIN),
            "sgd": (optim.sgd_kernel, run_sgd, MIN - 1, MIN),
            "rms_norm": (layers.rms_norm_kernel, run_rms_norm_and_relu, MIN - 48, MIN + 48)}


def spy(monkeypatch, twin):
    """Record which of twin's two kernels each call runs."""
    ran = []
    serial, parallel = twin.serial, twin.parallel

    def record(kind, fn):
        return lambda *args: (ran.append(kind), fn(*args))[1]
    monkeypatch.setattr(twin, "_serial", record("serial", serial))
    monkeypatch.setattr(twin, "parallel", record("parallel", parallel))
    return ran


@pytest.mark.parametrize("name", DISPATCH)
def test_work_below_the_threshold_runs_on_the_calling_thread_and_from_it_on_the_pool(name,
                                                                                    monkeypatch):
    twin, run, below, at = DISPATCH[name]
    ran = spy(monkeypatch, twin)
    run(below)
    run(at)
    assert ran == ["serial", "parallel"]


def test_gemm_work_is_multiply_adds_over_32_as_the_c_kernels_count_it(monkeypatch):
    ran = spy(monkeypatch, layers.gemm_nt_kernel)
    k = kernels("layers")
    for m in (1023, 1024):  # m * 32 * 32 multiply-adds: 32 * PARALLEL_MIN from m = 1024
        k.gemm_nt(data(m * 32, 1).reshape(m, 32), data(32 * 32, 2).reshape(32, 32),
                  np.zeros(1, np.float32), False, np.empty((m, 32), np.float32))
    assert ran == ["serial", "parallel"]


LAUNCH = """
import os, sys
import numba.np.ufunc.parallel as p
seen, launch = [], p._launch_threads
def recording():
    seen.append(os.environ.get("OMP_WAIT_POLICY"))
    launch()
p._launch_threads = recording
from mojolike.native import fold, layers, optim
import numpy as np
fold.load("identical").fold(np.ones(5, np.float32))
print(seen[0], os.environ.get("OMP_WAIT_POLICY"), fold.fold_partials._serial is not None,
      layers.gemm_nt_kernel._serial is None)
"""


def launched(**env):
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", LAUNCH], env={**base, **env}, check=True,
                         capture_output=True, text=True)
    return out.stdout.split()


def test_numbas_pool_starts_passive_before_any_kernel_loads_and_the_environment_is_restored():
    first, after, used_twin, unused_twin_uncompiled = launched()
    assert (first, after) == ("PASSIVE", "None")
    assert used_twin == "True" and unused_twin_uncompiled == "True"  # twins compile on first use


def test_a_wait_policy_the_user_set_is_left_as_it_is():
    first, after, *_ = launched(OMP_WAIT_POLICY="ACTIVE")
    assert (first, after) == ("ACTIVE", "ACTIVE")


def twinned_hot_kernels():
    """(label, twin, wanted packed operations) of every hot kernel (HOT_KERNELS, read by
    tests/test_vectorized.py) that a Twin dispatches."""
    out = []
    for mod in (fold, optim, layers):
        twins = {id(t.parallel): t for t in vars(mod).values() if isinstance(t, threads.Twin)}
        for label, entry in mod.HOT_KERNELS.items():
            kernel, wanted = entry if isinstance(entry, tuple) else (entry, None)
            if id(kernel) in twins:
                out.append(pytest.param(twins[id(kernel)], wanted, id=label))
    return out


@pytest.mark.parametrize("twin,wanted", twinned_hot_kernels())
def test_the_serial_twins_of_hot_kernels_are_packed_in_their_loops_on_this_host(twin, wanted):
    """The twin's loops are the parallel kernel's (the same body, the same inline vector
    functions); this checks that compiling it without parallel=True keeps them packed."""
    sigs = [c.signature for c in twin.serial.overloads.values()]
    options = {k: v for k, v in twin.parallel.targetoptions.items()
               if k not in ("parallel", "nopython")}
    fresh = numba.njit(sigs, **options)(twin.serial.py_func)  # uncached: inspect_asm needs it
    found = packed_in_loops(fresh.inspect_asm(fresh.signatures[0]))
    ops = {k.split(":")[0].lstrip("v") for k in found}
    assert found and (wanted is None or set(wanted) <= ops), found
