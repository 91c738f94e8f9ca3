"""Identical mode refuses a process whose floating-point state is not round-to-nearest with
subnormals kept, on every backend and entry point; the oracle stays exact in any state.

The state is changed through a small C helper (tests/fpenv.py) that writes MXCSR/FPCR the
way a library built with -ffast-math does when it loads, and restored after each block.
"""
from __future__ import annotations

import fpenv
import numpy as np
import pytest
from conftest import available
from mojolike.oracles import codec, f32
from mojolike.oracles.kernels import fold as _fold
from mojolike.oracles.kernels import optim as _optim_oracle

import mojolike
from mojolike.core import fpstate

pytestmark = pytest.mark.skipif(not fpenv.supported(), reason="the fpenv helper needs x86-64 or aarch64")

BACKENDS = [b for b in ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim") if available(b)]
STATES = {"ftz": dict(ftz=True), "daz": dict(daz=True), "ftz+daz": dict(ftz=True, daz=True),
          "toward zero": dict(rounding="toward zero"), "downward": dict(rounding="downward"),
          "upward": dict(rounding="upward")}
TINY = np.full(3000, 1e-40, np.float32)  # subnormal: FTZ/DAZ change every sum of them
TINY_SUM_BITS = 0x2CC2B17  # fold(TINY): the oracle's bits


def _calls(backend: str):
    """(name, buffers that must not change, call) for each identical-mode entry point; objects
    are built before the state changes, so the refusal comes from the call itself."""
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    w = [np.ones(8, np.float32), np.ones(3, np.float32)]
    g = [np.full(8, 0.5, np.float32), np.full(3, 0.25, np.float32)]
    adam = mojolike.Adam(w, lr=0.1, backend=backend)
    sched = mojolike.WarmupCosineLR(1e-3, warmup_steps=2, total_steps=10, backend=backend)
    gen = mojolike.Generator(5, backend=backend)
    logits = np.float32([[0.5, 1.0, -1.0], [2.0, 0.0, 1.0]])
    return [
        ("fold", [x], lambda: mojolike.fold(x, backend=backend)),
        ("sumsq", [x], lambda: mojolike.sumsq(x, backend=backend)),
        ("dot", [x], lambda: mojolike.dot(x, x, backend=backend)),
        ("expf", [x], lambda: mojolike.math.expf(x, backend=backend)),
        ("cospif", [x], lambda: mojolike.math.cospif(x, backend=backend)),
        ("cross_entropy", [logits], lambda: mojolike.cross_entropy(logits, [1, 2], backend=backend)),
        ("Adam.step", w + g, lambda: adam.step(g, max_norm=1.0)),
        ("clip_grad_norm_", g, lambda: mojolike.clip_grad_norm_(g, 0.1, backend=backend)),
        ("accumulate_grads", g, lambda: mojolike.accumulate_grads([g, g], [1024, 1024],
                                                                  backend=backend)),
        ("WarmupCosineLR.lr_values", [], lambda: sched.lr_values(5)),
        ("Generator.normal", [], lambda: gen.normal(4)),
        ("SGD", w, lambda: mojolike.SGD(w, lr=0.1, backend=backend)),
    ], adam, gen


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_identical_mode_refuses_a_wrong_fp_state_by_name_on_every_entry_point(backend, state):
    calls, adam, gen = _calls(backend)
    before = [[b.tobytes() for b in bufs] for _, bufs, _ in calls]
    t0, counter = adam.t, gen.state_dict()
    failures = []
    with fpenv.changed(**STATES[state]):
        for name, _, call in calls:
            try:
                call()
                failures.append(f"{name}: not refused")
            except mojolike.Refusal as e:
                if e.option != fpstate.OPTION or "identical mode" not in str(e):
                    failures.append(f"{name}: refused for another reason: {e}")
    assert not failures, "\n".join(failures)
    assert [[b.tobytes() for b in bufs] for _, bufs, _ in calls] == before
    assert adam.t == t0 and gen.state_dict() == counter


def test_the_refusal_says_what_is_set_and_the_likely_cause():
    with fpenv.changed(ftz=True, daz=True):
        with pytest.raises(mojolike.Refusal) as e:
            mojolike.fold(TINY)
    msg = str(e.value)
    assert msg.startswith("mojolike.fold: floating-point state")
    assert "flush-to-zero (FTZ) is on" in msg and "denormals-are-zero (DAZ) is on" in msg
    assert "-ffast-math" in msg and "Nothing was computed" in msg


@pytest.mark.parametrize("state", STATES)
def test_the_register_and_the_arithmetic_probe_agree_on_every_state(state):
    with fpenv.changed(**STATES[state]):
        direct = fpstate.state()
        probe_says_wrong = fpstate._probe_deviation() != 0
        saved, fpstate._fpcsr = fpstate._fpcsr, None
        try:
            probed = fpstate.state()
        finally:
            fpstate._fpcsr = saved
    assert not direct.ok and probe_says_wrong and not probed.ok
    assert (probed.flush_to_zero, probed.rounding) == (direct.flush_to_zero, direct.rounding)
    assert fpstate.state().ok and fpstate.deviation() == 0 and fpstate._probe_deviation() == 0


def test_the_register_is_read_directly_where_the_extension_is_built():
    assert fpstate.mechanism().startswith(("MXCSR", "FPCR")), fpstate.mechanism()


def test_without_the_check_ftz_changes_the_bits_of_every_kernel():
    # what the check protects against: the deterministic mode carries no contract and does not
    # check, and the kernels then return other bits than the oracle's
    with fpenv.changed(ftz=True, daz=True):
        got = int(mojolike.fold(TINY, numeric_mode="deterministic").view(np.uint32))
    assert got != TINY_SUM_BITS


@pytest.mark.parametrize("state", STATES)
def test_the_oracle_stays_exact_in_any_fp_state(state):
    grads = np.full(5, 3e-39, np.float32)  # subnormal gradients and parameters
    params = np.full(5, 1e-39, np.float32)
    with fpenv.changed(**STATES[state]):
        total = int(_fold.OracleFold().fold(TINY).view(np.uint32))
        k = _optim_oracle.OracleOptim()
        p = params.copy()
        k.sgd(p, grads, np.zeros(1, np.float32), np.bool_(True), np.float32(0.5), np.float32(0),
              np.float32(1), np.float32(0), np.bool_(False), np.bool_(False), np.bool_(False),
              np.bool_(False))
    assert total == TINY_SUM_BITS
    want = f32.sub(f32.bits_to_f32(int(params.view(np.uint32)[0])),
                   f32.mul(0.5, f32.bits_to_f32(int(grads.view(np.uint32)[0]))))
    assert p.view(np.uint32).tolist() == [f32.f32_to_bits(want)] * 5


@pytest.mark.parametrize("state", STATES)
def test_the_oracle_codec_round_trips_every_kind_of_pattern_in_any_fp_state(state):
    u = np.uint32([0, 0x80000000, 1, 0x80000001, 0x7FFFFF, 0x807FFFFF, 0x800000, 0x3F800000,
                   0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x00400001, 0x81234567])
    with fpenv.changed(**STATES[state]):
        back = codec.encode(codec.decode(u.view(np.float32))).view(np.uint32)
        scalar_bits = [f32.f32_to_bits(f32.bits_to_f32(int(v))) for v in u]
    assert back.tolist() == u.tolist() and scalar_bits == u.tolist()
