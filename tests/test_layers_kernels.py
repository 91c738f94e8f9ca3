"""The layers kernels (cpu-numba, cpu-cffi, cuda-sim, cuda) give the oracle's bits for every
method of the family's interface (contracts/layers.md), at the lane and chunk edges.

cuda-sim (a Python thread per CUDA thread) gets the small cases only.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_bits, available, backend_case_params
from mojolike.oracles import f32

from mojolike.core import registry

BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(not available(b), reason=f"{b} is not available"))
            for b in ("cpu-numba", "cpu-cffi", "cuda-sim", "cuda")]
EPS = f32.round_float(float(np.finfo(np.float32).eps))
PLACEHOLDER = np.zeros(1, np.float32)

# (M, N, K): lane and chunk edges of K, odd tile edges of M and N
GEMM_SMALL = [(1, 1, 1), (2, 3, 31), (3, 2, 33), (1, 2, 1024), (2, 1, 1025)]
GEMM_BIG = [(5, 3, 1023), (7, 3, 3000), (4, 4, 2048), (65, 67, 100), (3, 3, 768), (2, 2, 4097)]
ROWS_SMALL = [(1, 1), (3, 17), (33, 5), (2, 40)]
ROWS_BIG = [(1025, 5), (2049, 33), (40, 16), (5, 3000)]


def k_of(backend):
    return registry.kernels("tests", "layers", backend, "identical")


def oracle():
    return registry.kernels("tests", "layers", "oracle", "identical")


def data(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("backend,case", backend_case_params(BACKENDS, GEMM_SMALL, GEMM_BIG))
def test_gemm_nt_with_and_without_bias_equals_the_oracle(backend, case):
    m, n, kk = case
    a, b, bias = data((m, kk), 1), data((n, kk), 2), data(n, 3)
    for has_bias in (False, True):
        got, want = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        k_of(backend).gemm_nt(a, b, bias if has_bias else PLACEHOLDER, has_bias, got)
        oracle().gemm_nt(a, b, bias if has_bias else PLACEHOLDER, has_bias, want)
        assert_same_bits(got, want, f"{backend} gemm_nt {case} bias={has_bias}")


@pytest.mark.parametrize("backend,case", backend_case_params(BACKENDS, GEMM_SMALL[:3], GEMM_BIG[:3]))
def test_gemm_nt_chunk_partials_equal_the_oracle(backend, case):
    m, n, kk = case
    a, b = data((m, kk), 4), data((n, kk), 5)
    nchunks = (kk + 1023) // 1024
    got, want = np.empty((nchunks, m, n), np.float32), np.empty((nchunks, m, n), np.float32)
    k_of(backend).gemm_nt_chunks(a, b, got)
    oracle().gemm_nt_chunks(a, b, want)
    assert_same_bits(got, want, f"{backend} gemm_nt_chunks {case}")


@pytest.mark.parametrize("backend,case", backend_case_params(BACKENDS, ROWS_SMALL, ROWS_BIG))
def test_row_chunk_folds_and_column_folds_equal_the_oracle(backend, case):
    m, n = case
    a, b = data((m, n), 6), data((m, n), 7)
    nchunks = (n + 1023) // 1024
    got, want = np.empty((m, nchunks), np.float32), np.empty((m, nchunks), np.float32)
    k_of(backend).row_chunk_folds(a, got)
    oracle().row_chunk_folds(a, want)
    assert_same_bits(got, want, f"{backend} row_chunk_folds {case}")
    for products in (False, True):
        got, want = np.empty(n, np.float32), np.empty(n, np.float32)
        k_of(backend).col_fold(a, b, products, got)
        oracle().col_fold(a, b, products, want)
        assert_same_bits(got, want, f"{backend} col_fold {case} products={products}")


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] in ("cpu-numba", "cpu-cffi")])
def test_column_folds_across_column_blocks_of_a_tall_matrix_equal_the_oracle(backend):
    # 1100 rows (a chunk and a short one) by 1040 columns: two column blocks of the CPU
    # kernel, the second partial; the oracle folds the columns around the blocks' edges
    m, n = 1100, 1040
    a, b = data((m, n), 16), data((m, n), 17)
    cols = np.r_[0:3, 1015:1033, 1037:1040]
    for products in (False, True):
        got, want = np.empty(n, np.float32), np.empty(cols.size, np.float32)
        k_of(backend).col_fold(a, b, products, got)
        oracle().col_fold(np.ascontiguousarray(a[:, cols]), np.ascontiguousarray(b[:, cols]),
                          products, want)
        assert_same_bits(got[cols], want, f"{backend} col_fold {m}x{n} products={products}")


@pytest.mark.parametrize("backend,case", backend_case_params(BACKENDS, [(9, 3, 4), (40, 17, 5)],
                                                             [(2100, 33, 3), (300, 16, 50)]))
def test_segment_fold_equals_the_oracle_and_leaves_other_rows(backend, case):
    t, d, v = case
    dy = data((t, d), 8)
    ids = np.random.default_rng(9).integers(0, v, t)
    order = np.argsort(ids, kind="stable").astype(np.int64)
    rows, starts = np.unique(ids[order], return_index=True)
    bounds = np.append(starts, t).astype(np.int64)
    got = np.full((v + 1, d), 7.0, np.float32)  # row v is never a segment: it must stay 7.0
    want = got.copy()
    k_of(backend).segment_fold(dy, order, bounds, rows.astype(np.int64), got)
    oracle().segment_fold(dy, order, bounds, rows.astype(np.int64), want)
    assert_same_bits(got, want, f"{backend} segment_fold {case}")
    assert (got[v] == 7.0).all()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] in ("cpu-numba", "cpu-cffi")])
def test_segments_of_1_to_40_positions_keep_signed_zeros_and_nan_as_the_oracle(backend):
    """Segments of up to 32 positions leave most lanes at -0.0; what the butterfly makes of them
    must be the full fold's bits, signed zeros and NaN included."""
    counts = np.arange(1, 41)
    ids = np.repeat(np.arange(counts.size), counts)
    special = np.float32([-0.0, 0.0, np.nan, np.inf, -np.inf, 1e-45, -3e38])
    dy = data((ids.size, 19), 10, scale=1e3)
    pick = np.random.default_rng(11).integers(0, special.size + 4, dy.shape)
    dy = np.where(pick < special.size, special[np.minimum(pick, special.size - 1)], dy).astype(np.float32)
    dy[ids == 3] = -0.0  # a segment of -0.0 only
    order = np.arange(ids.size, dtype=np.int64)
    bounds = np.append(np.cumsum(np.append(0, counts))[:-1], ids.size).astype(np.int64)
    rows = np.arange(counts.size, dtype=np.int64)
    got = np.zeros((counts.size, 19), np.float32)
    want = got.copy()
    k_of(backend).segment_fold(dy, order, bounds, rows, got)
    oracle().segment_fold(dy, order, bounds, rows, want)
    assert_same_bits(got, want, f"{backend} segments of 1..40 positions")
    assert np.signbit(got[3]).all()


@pytest.mark.parametrize("backend,case", backend_case_params(BACKENDS, [(1, 1), (3, 31), (2, 33)],
                                                             [(2, 1025), (5, 3000), (4, 64)]))
def test_rms_norm_forward_and_backward_equal_the_oracle(backend, case):
    m, d = case
    x, w, dy = data((m, d), 10), data(d, 11), data((m, d), 12)
    for has_w in (False, True):
        wt = w if has_w else PLACEHOLDER
        got, want = np.empty((m, d), np.float32), np.empty((m, d), np.float32)
        k_of(backend).rms_norm(x, wt, has_w, np.float32(EPS), got)
        oracle().rms_norm(x, wt, has_w, np.float32(EPS), want)
        assert_same_bits(got, want, f"{backend} rms_norm {case} weight={has_w}")
        dx, h = np.empty((m, d), np.float32), (np.empty((m, d), np.float32) if has_w else PLACEHOLDER)
        dx2, h2 = np.empty((m, d), np.float32), (np.empty((m, d), np.float32) if has_w else PLACEHOLDER)
        k_of(backend).rms_norm_backward(dy, x, wt, has_w, np.float32(EPS), dx, h)
        oracle().rms_norm_backward(dy, x, wt, has_w, np.float32(EPS), dx2, h2)
        assert_same_bits(dx, dx2, f"{backend} rms_norm_backward dx {case} weight={has_w}")
        if has_w:
            assert_same_bits(h, h2, f"{backend} rms_norm_backward h {case}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_relu_keeps_minus_zero_and_nan_as_torch_does(backend):
    x = np.float32([-0.0, 0.0, np.nan, -1.0, 2.0, -np.inf, np.inf, -1e-45])
    got, want = np.empty_like(x), np.empty_like(x)
    k_of(backend).relu(x, got)
    oracle().relu(x, want)
    assert_same_bits(got, want, f"{backend} relu")
    assert np.signbit(got[0]) and np.isnan(got[2]) and not np.signbit(got[7])


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] in ("cpu-numba", "cpu-cffi")])
def test_gemm_bits_do_not_depend_on_the_thread_count(backend):
    k = k_of(backend)
    if k.max_threads() < 2:
        pytest.skip("one thread only")
    a, b = data((130, 2500), 13), data((70, 2500), 14)
    seen = []
    before = k.get_num_threads()
    try:
        for t in (1, 2):
            k.set_num_threads(t)
            out = np.empty((130, 70), np.float32)
            k.gemm_nt(a, b, PLACEHOLDER, False, out)
            seen.append(out)
    finally:
        k.set_num_threads(before)
    assert_same_bits(seen[0], seen[1], f"{backend} gemm 1 vs 2 threads")


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] in ("cpu-numba", "cpu-cffi")])
def test_a_gemm_of_many_blocks_and_chunks_gives_every_cell_its_dot(backend):
    """Several blocks of rows of a and of b, three chunks of K with a short last step: each
    cell's chunk partials wait for the pairwise tree in their block's own place."""
    import mojolike
    a, b, bias = data((260, 2100), 15), data((140, 2100), 16), data(140, 17)
    out = np.empty((260, 140), np.float32)
    k_of(backend).gemm_nt(a, b, bias, True, out)
    want = np.float32([[np.float32(mojolike.dot(a[i], b[j], backend="cpu-numba")) + bias[j]
                        for j in range(140)] for i in range(260)])
    assert_same_bits(out, want, f"{backend} gemm 260 x 140 x 2100 against dot")
