"""Shared helpers: bitwise comparison with paste-able hex failures, and the backends under test."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

import mojolike

# No per-example deadline: a first example that waits on an import or a JIT compile, or on
# a core another process holds, says nothing about the property under test. Timings belong
# in benchmarks/, not in tests.
settings.register_profile("mojolike", deadline=None)
settings.load_profile("mojolike")

CPU_BACKENDS = ("cpu-numba", "cpu-cffi")


def bits(v) -> np.ndarray:
    return np.atleast_1d(np.asarray(v, dtype=np.float32)).view(np.uint32)


def same_bits(got, want) -> bool:
    """Bitwise equality, all NaNs one class."""
    g, w = np.atleast_1d(np.float32(got)), np.atleast_1d(np.float32(want))
    return g.shape == w.shape and bool(((bits(g) == bits(w)) | (np.isnan(g) & np.isnan(w))).all())


def assert_same_bits(got, want, what: str = "") -> None:
    if not same_bits(got, want):
        hx = lambda v: " ".join(f"0x{u:08x}" for u in bits(v)[:8])
        pytest.fail(f"FAIL {what} got={hx(got)} ({np.float32(got)!r}) oracle={hx(want)} ({np.float32(want)!r})")


def available(name: str) -> bool:
    return {b.name: b.available for b in mojolike.backends()}[name]


def backend_case_params(backends, small, big):
    """pytest params (backend, case) for every backend; cuda-sim (a Python thread per CUDA
    thread) gets the `small` cases only, the others `small + big`."""
    out = []
    for b in backends:
        name, marks = (b.values[0], b.marks) if hasattr(b, "values") else (b, ())
        for i, case in enumerate(small + ([] if name == "cuda-sim" else big)):
            out.append(pytest.param(name, case, marks=marks, id=f"{name}-{i}"))
    return out


def pytest_collection_modifyitems(session, config, items):
    """tests/test_cards.py's tests run last: by then the background run of every suite that
    pytest_collection_finish starts (test_cards.start_all_runs) has had the session to finish."""
    items.sort(key=lambda item: item.path.name == "test_cards.py")  # stable: the rest keep order


def pytest_collection_finish(session):
    """Start tests/test_vectorized.py's per-target compilations as soon as collection selects
    them: they run at low priority beside the tests before that module (tests in one
    process leave one of two cores mostly idle) instead of after them."""
    wanted = [item.callspec.params["target"] for item in session.items
              if item.path.name == "test_vectorized.py" and hasattr(item, "callspec")
              and "target" in item.callspec.params]
    if wanted:
        import test_vectorized
        session.config.mojolike_targets = test_vectorized.start_targets(session.config, wanted)
    if any(item.path.name == "test_cards.py" and "all_runs" in item.fixturenames
           for item in session.items):
        import test_cards
        session.config.mojolike_all_runs = test_cards.start_all_runs()


def pytest_sessionfinish(session):
    procs = getattr(session.config, "mojolike_targets", None)
    if procs:  # the module's fixture stops them too; this covers a session that never got there
        import test_vectorized
        test_vectorized.stop_targets(procs)
    started = getattr(session.config, "mojolike_all_runs", None)
    if started is not None and started[0].poll() is None:  # a session stopped before test_cards
        import test_cards
        test_cards.stop_all_runs(started[0])
