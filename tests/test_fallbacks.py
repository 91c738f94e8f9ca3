"""Values a kernel leaves to the host are counted, and clause (a) fails on any its contract
does not list: a kernel that decides nothing cannot certify on the oracle's answers."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import available
from mojolike.contracts import crmath, harness, loss, rng, schedule

import mojolike
import mojolike.math as mm
from mojolike.core import fallbacks, registry
from mojolike.ops.crmath import UNDECIDED

MODE = registry.CONTRACT_MODE


def _real(family: str):
    return registry.kernels("tests/test_fallbacks", family, "cpu-numba", MODE)


class _DecidesNothing:
    """The real cpu-numba crmath kernels, then every slot marked UNDECIDED: the host's oracle
    finishes all of them, so every cell still equals the oracle. No thread count, so clause
    (c) does not run 2^22 inputs through the oracle."""

    backend, numeric_mode, details = "cpu-numba", MODE, {}

    def __init__(self, real):
        self._real = real
        self.get_num_threads = real.get_num_threads  # for the meta; no set_num_threads

    def _into(self, name, x, out) -> int:
        getattr(self._real, f"{name}_into")(x, out)
        out.view(np.uint32)[:] = UNDECIDED
        return out.size

    def expf_into(self, x, out) -> int:
        return self._into("expf", x, out)

    def logf_into(self, x, out) -> int:
        return self._into("logf", x, out)

    def sinpif_into(self, x, out) -> int:
        return self._into("sinpif", x, out)

    def cospif_into(self, x, out) -> int:
        return self._into("cospif", x, out)


class _FlagsEveryRow:
    """The real cpu-numba loss kernel, then every row flagged for the host to redo."""

    backend, numeric_mode, details = "cpu-numba", MODE, {}

    def __init__(self, real):
        self._real = real
        self.get_num_threads = real.get_num_threads  # for the meta; no set_num_threads

    def cross_entropy_into(self, *args) -> int:
        self._real.cross_entropy_into(*args)
        status = args[11]
        status[:] = 1
        return status.size


def _run(suite, k=None):
    if k is None:
        return harness.run(suite, "cpu-numba")
    with registry.override(suite.FAMILY, "cpu-numba", MODE, k):
        return harness.run(suite, "cpu-numba")


@pytest.fixture(scope="module")
def crmath_run():
    return _run(crmath)


@pytest.fixture(scope="module")
def loss_run():
    return _run(loss)


# -- the harness ---------------------------------------------------------------------------------

def test_a_crmath_kernel_that_decides_nothing_fails_clause_a_naming_case_function_and_value():
    r = _run(crmath, _DecidesNothing(_real("crmath")))
    a = r.clauses["a"]
    assert a.status == "fail"
    assert "differ from the oracle" not in a.detail  # every cell is right: only the count tells
    assert "not on the contract's known list" in a.detail
    assert "specials: crmath expf(0x00000000) = 0x3F800000" in a.detail
    counts = r.details["host_fallbacks"]
    assert counts == {c.id: 4 * c.x.size for c in crmath.cases()}
    assert not r.ok


def test_a_loss_kernel_that_flags_every_row_fails_clause_a_naming_the_row():
    r = _run(loss, _FlagsEveryRow(_real("loss")))
    a = r.clauses["a"]
    assert a.status == "fail"
    assert "differ from the oracle" not in a.detail
    assert "basic-n8-v37: loss row 0 = 0x" in a.detail
    assert "finished no expf/logf value" in a.detail
    calls = {c.id: len(loss._calls(c)) for c in loss.cases()}
    rows = {c.id: calls[c.id] * c.logits.shape[0] for c in loss.cases()}
    assert r.details["host_fallbacks"] == rows


def _crmath_expected(case) -> int:
    """How many of the case's inputs the known lists hold, over the four functions."""
    xs = case.x.view(np.uint32).tolist()
    return sum(u in crmath.KNOWN_UNDECIDED[name] for name in crmath.FUNCTIONS for u in xs)


def test_the_real_crmath_kernels_leave_the_host_exactly_the_known_inputs(crmath_run):
    a = crmath_run.clauses["a"]
    assert a.status == "pass", a.detail
    counts = crmath_run.details["host_fallbacks"]
    assert counts == {c.id: _crmath_expected(c) for c in crmath.cases()}
    assert counts["undecided"] == len(crmath.HARD) == 84
    assert "87 values left to the host, all on the contract's known list" in a.detail


def _hard_rows(case) -> int:
    """Rows (not ignored) whose expf(d) or logf(S) input is on crmath's known lists, from the
    oracle's arithmetic alone."""
    ignore = case.options.get("ignore_index", -100)
    n = 0
    for z, t in zip(case.logits, case.targets.tolist()):
        if t == ignore:
            continue
        with np.errstate(over="ignore"):
            d = z - z.max()
        e = mm.expf(d, backend="oracle")
        s = np.float32(mojolike.fold(e, backend="oracle"))
        n += (any(u in crmath.KNOWN_UNDECIDED["expf"] for u in d.view(np.uint32).tolist())
              or int(s.view(np.uint32)) in crmath.KNOWN_UNDECIDED["logf"])
    return n


def test_the_real_loss_kernels_leave_the_host_only_rows_with_known_crmath_inputs(loss_run):
    a = loss_run.clauses["a"]
    assert a.status == "pass", a.detail
    counts = loss_run.details["host_fallbacks"]
    assert counts == {c.id: len(loss._calls(c)) * _hard_rows(c) for c in loss.cases()}
    assert counts["undecided-exp-n3-v12"] == 3 * 3  # three rows, three calls


def test_the_real_schedule_kernels_leave_the_host_exactly_the_listed_steps():
    r = _run(schedule)
    assert r.clauses["a"].status == "pass", r.clauses["a"].detail
    listed = dict(schedule.UNDECIDED_STEPS)
    steps = {c.id: len(listed.get(c.id, ())) for c in schedule.cases()}
    assert r.details["host_fallbacks"] == steps


def test_the_real_rng_kernels_leave_the_host_nothing():
    r = _run(rng)
    assert r.clauses["a"].status == "pass", r.clauses["a"].detail
    assert set(r.details["host_fallbacks"].values()) == {0}


def test_the_oracle_reports_no_fallback_count(crmath_run):
    r = harness.run(crmath, "oracle")  # its outputs and controls are cached by crmath_run
    assert r.details["host_fallbacks"].startswith("n/a")


def test_a_step_or_draw_off_the_known_lists_fails_clause_a():
    pass_a = harness.Clause("pass", "cells equal")
    case = next(c for c in schedule.cases() if c.id == "linear-w0")
    cfg = (0x3A83126F, 0, 0, 300)  # binary32(1e-3), M = 0, W = 0, T = 300
    listed = fallbacks.Fallback("schedule", "linear", 15, 0, cfg)
    unlisted = fallbacks.Fallback("schedule", "linear", 16, 0, cfg)
    assert schedule.known_fallback(listed) and not schedule.known_fallback(unlisted)
    a = harness.fallback_clause(schedule, pass_a, {case.id: [listed, unlisted]})
    assert a.status == "fail" and "linear-w0: schedule linear step 16 (P=0x3A83126F" in a.detail
    draw = fallbacks.Fallback("rng", "normal", 7, 0x3F800000, (1, 0, 0, 0x3F800000))
    a = harness.fallback_clause(rng, pass_a, {"normal-n1000": [draw]})
    assert a.status == "fail" and "normal-n1000: rng normal at position 7" in a.detail


# -- the ledger ----------------------------------------------------------------------------------

def test_the_ledger_records_nothing_for_calls_with_no_undecided_value():
    x = np.float32([0.5, 1.0, -3.25, 10.0])
    with fallbacks.collect() as got:
        for f in (mm.expf, mm.logf, mm.sinpif, mm.cospif):
            f(x, backend="cpu-numba")
        mojolike.cross_entropy(np.float32([[1, 2, 3], [0, 0, 1]]), [0, 2], backend="cpu-numba")
        # the suite's case cosine-w13-min, which has no undecided step (a tie would have one)
        mojolike.WarmupCosineLR(6e-4, 13, 613, 6e-5, backend="cpu-numba").lr_values(623)
        mojolike.Generator(5, backend="cpu-numba").normal(1000)
    assert got == []


def test_the_ledger_records_each_hard_input_with_its_function_and_result():
    x = np.uint32([0x3F800000, *crmath.HARD_LOG[:3]]).view(np.float32)
    with fallbacks.collect() as got:
        y = mm.logf(x, backend="cpu-numba")
    ybits = y.view(np.uint32).tolist()
    assert [(r.family, r.kind, r.at, r.bits) for r in got] == \
        [("crmath", "logf", u, b) for u, b in zip(crmath.HARD_LOG[:3], ybits[1:])]


def test_a_loss_row_holds_the_crmath_values_its_recomputation_finished():
    case = next(c for c in loss.cases() if c.id == "undecided-exp-n3-v12")
    with fallbacks.collect() as got:
        mojolike.cross_entropy(case.logits, case.targets, reduction="none", backend="cpu-numba")
    assert [(r.family, r.at) for r in got] == [("loss", 0), ("loss", 1), ("loss", 2)]
    for r in got:
        assert r.finished and all(f.kind == "expf" and f.at in crmath.HARD_EXP for f in r.finished)
        assert loss.known_fallback(r)
    assert not loss.known_fallback(fallbacks.Fallback("loss", "row", 0, 0))


def test_blocks_nest_and_each_thread_sees_only_its_own_records():
    hard = np.uint32(crmath.HARD_EXP[:2]).view(np.float32)
    seen = {}

    def other():
        with fallbacks.collect() as theirs:
            mm.expf(hard[1:], backend="cpu-numba")
        seen["other"] = theirs

    with fallbacks.collect() as outer:
        with fallbacks.collect() as inner:
            mm.expf(hard[:1], backend="cpu-numba")
            t = threading.Thread(target=other)
            t.start()
            t.join()
    assert [r.at for r in inner] == [r.at for r in outer] == [crmath.HARD_EXP[0]]
    assert [r.at for r in seen["other"]] == [crmath.HARD_EXP[1]]
    assert not fallbacks.watching()


@pytest.mark.skipif(not available("cuda-sim"), reason="numba-cuda is not installed")
def test_cuda_sim_reports_the_hard_inputs_too():
    x = np.uint32([0x3F800000, *crmath.HARD_SINPI[:2]]).view(np.float32)
    with fallbacks.collect() as got:
        mm.sinpif(x, backend="cuda-sim")
    assert [(r.kind, r.at) for r in got] == [("sinpif", u) for u in crmath.HARD_SINPI[:2]]
