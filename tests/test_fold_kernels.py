"""Every CPU backend gives the oracle's bits for fold, sumsq and dot, at any thread count."""
from __future__ import annotations

import array

import numpy as np
import pytest
import torch
from conftest import CPU_BACKENDS, assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from mojolike.contracts.casegen import bulk_normal
from mojolike.oracles import fold as spec

import mojolike
from mojolike.core import registry

EDGE_SIZES = (1, 2, 3, 31, 32, 33, 63, 1023, 1024, 1025, 2047, 2048, 2049, 3071, 4097)
f32_any = st.floats(width=32, allow_subnormal=True, allow_nan=True, allow_infinity=True)
f32_pairs = st.sampled_from(EDGE_SIZES).flatmap(
    lambda n: st.tuples(arrays(np.float32, n, elements=f32_any), arrays(np.float32, n, elements=f32_any)))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@settings(max_examples=40, deadline=None)
@given(pair=f32_pairs)
def test_cpu_backends_equal_the_oracle_on_arbitrary_float32_including_subnormals_and_inf(backend, pair):
    x, b = pair
    xs, bs = x.tolist(), b.tolist()
    assert_same_bits(mojolike.fold(x, backend=backend), spec.fold(xs), f"{backend} fold n={x.size}")
    assert_same_bits(mojolike.sumsq(x, backend=backend), spec.sumsq(xs), f"{backend} sumsq n={x.size}")
    assert_same_bits(mojolike.dot(x, b, backend=backend), spec.dot(xs, bs), f"{backend} dot n={x.size}")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_thread_count_never_reaches_the_bits(backend):
    k = registry.kernels("test", "fold", backend, "identical")
    x, b = bulk_normal(300_000 + 7, "test/threads/x"), bulk_normal(300_000 + 7, "test/threads/b")
    before = k.get_num_threads()
    try:
        seen = []
        for t in (1, 2):
            k.set_num_threads(t)
            seen.append([k.fold(x), k.sumsq(x), k.dot(x, b)])
    finally:
        k.set_num_threads(before)
    for one, two in zip(*seen):
        assert_same_bits(two, one, f"{backend} 2 threads vs 1")


def test_the_2_24_plus_3_thread_clause_passes_on_cpu_numba():
    from mojolike.contracts import fold as suite
    status, detail = suite.clause_threads(registry.kernels("test", "fold", "cpu-numba", "identical"))
    assert status == "pass", detail


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_any_shape_is_read_in_c_order_and_any_buffer_is_accepted(backend):
    m = np.arange(6000, dtype=np.float32).reshape(60, 100) / np.float32(7)
    want = spec.fold(m.reshape(-1).tolist())
    assert_same_bits(mojolike.fold(m, backend=backend), want)
    assert_same_bits(mojolike.fold(array.array("f", m.reshape(-1).tolist()), backend=backend), want)
    assert_same_bits(mojolike.fold(memoryview(m), backend=backend), want)
    ro = m.copy()
    ro.flags.writeable = False  # fold only reads, so a read-only buffer is fine
    assert_same_bits(mojolike.fold(ro, backend=backend), want)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_sumsq_is_close_to_torch_vector_norm_squared(backend):
    # torch sums in another order (and may use FMA), so only closeness can hold:
    # both are within n * 2**-24 relative of the exact sum of squares of positive terms.
    x = bulk_normal(100_003, "test/torch/x")
    ours = float(mojolike.sumsq(x, backend=backend))
    theirs = float(torch.linalg.vector_norm(torch.from_numpy(x)) ** 2)
    assert ours == pytest.approx(theirs, rel=2 * 100_003 * 2.0**-24)


@pytest.mark.parametrize("mode", ("deterministic", "fast"))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_modes_without_contract_run_and_report_their_label(backend, mode):
    x = bulk_normal(5000, "test/modes")
    r = mojolike.sumsq(x, backend=backend, numeric_mode=mode)
    assert np.isfinite(r) and r > 0
    assert (mojolike.backend_used(), mojolike.numeric_mode_used()) == (backend, mode)
    assert registry.mode_label(mode).endswith("(no contract)")


def test_deterministic_mode_repeats_its_bits_run_to_run():
    x = bulk_normal(50_000, "test/repeat")
    for backend in CPU_BACKENDS:
        first = mojolike.dot(x, x[::-1].copy(), backend=backend, numeric_mode="deterministic")
        for _ in range(3):
            assert_same_bits(mojolike.dot(x, x[::-1].copy(), backend=backend,
                                          numeric_mode="deterministic"), first)
