"""The outer-product GEMM (native/gemm_outer.py) gives every cell the fold's bits.

Small shapes are compared with the oracle's linear; shapes with several chunks, short last
steps, several row blocks and an overlapped last strip with layers' `_gemm_nt` (the tile
kernel the oracle checks in tests/test_layers_kernels.py), bit for bit, on the calling
thread and on the pool. The fused variant is checked where every product is exact, and
shown to differ where bfloat16 products underflow (the reason its caller checks ranges).
"""
from __future__ import annotations

import numpy as np
import pytest

import mojolike
from mojolike.native import gemm_outer, layers, mixed_gemm

pytestmark = pytest.mark.skipif(not gemm_outer.FAST,
                                reason="the outer-product GEMM runs on AVX-512 targets only")

ON_POOL, ON_CALLER = 10**9, 0  # the work argument: above or below the parallel threshold
NO_BIAS = np.zeros(16, np.float32)


def _data(shape, seed, bf16=False):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if bf16:  # values of 8 significant bits: every product exact
        x = (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return x


def _outer(kernel, a, b, bias=None, work=ON_POOL, chunk_partials=False):
    m, k = a.shape
    n = b.shape[0]
    size = ((k + 1023) // 1024 if chunk_partials else 1) * m * n
    out = np.full(size, np.nan, np.float32)
    kernel(work, a.reshape(-1), b.reshape(-1), m, n, k, NO_BIAS if bias is None else bias,
           bias is not None, chunk_partials, out)
    return out


def _tiles(a, b, bias=None, chunk_partials=False):
    m, k = a.shape
    n = b.shape[0]
    size = ((k + 1023) // 1024 if chunk_partials else 1) * m * n
    out = np.empty(size, np.float32)
    layers.gemm_nt_kernel(1, a.reshape(-1), b.reshape(-1), m, n, k,
                          NO_BIAS if bias is None else bias, bias is not None, chunk_partials, out)
    return out


def _same(x, y):
    return np.array_equal(np.asarray(x).reshape(-1).view(np.uint32),
                          np.asarray(y).reshape(-1).view(np.uint32))


@pytest.mark.parametrize("m, n, k", [(4, 96, 1), (5, 97, 33), (4, 100, 40)])
def test_small_products_equal_the_oracles_linear_bit_for_bit(m, n, k):
    a, b, bias = _data((m, k), 1), _data((n, k), 2), _data(n, 3)
    want = mojolike.linear(a, b, bias, backend="oracle")
    assert _same(_outer(gemm_outer.gemm_outer, a, b, bias), want)
    assert _same(_outer(gemm_outer.gemm_outer, a, b, bias, work=ON_CALLER), want)


@pytest.mark.parametrize("m, n, k", [(7, 130, 1025), (13, 96, 2049), (1031, 200, 64),
                                     (9, 193, 3000)])
def test_chunks_short_steps_row_blocks_and_the_last_strip_equal_the_tile_kernel(m, n, k):
    a, b, bias = _data((m, k), 4), _data((n, k), 5), _data(n, 6)
    for with_bias in (None, bias):
        want = _tiles(a, b, with_bias)
        assert _same(_outer(gemm_outer.gemm_outer, a, b, with_bias), want)
        assert _same(_outer(gemm_outer.gemm_outer, a, b, with_bias, work=ON_CALLER), want)
    assert _same(_outer(gemm_outer.gemm_outer, a, b, chunk_partials=True),
                 _tiles(a, b, chunk_partials=True))


@pytest.mark.parametrize("kernel", ["_gemm_outer", "_gemm_outer_fma"])
def test_the_cells_do_not_depend_on_how_many_row_blocks_the_rows_are_cut_into(kernel):
    if kernel == "_gemm_outer_fma" and not mixed_gemm.HAS_FMA:
        pytest.skip("this CPU has no FMA")
    m, n, k = 37, 150, 1100
    a, b = _data((m, k), 18, bf16=True), _data((n, k), 19, bf16=True)
    want = _tiles(a, b)
    for nblocks in (1, 2, 3, 9):
        out = np.full(m * n, np.nan, np.float32)
        getattr(gemm_outer, kernel)(a.reshape(-1), b.reshape(-1), m, n, k, NO_BIAS, False, False,
                                    out, nblocks)
        assert _same(out, want), nblocks


def test_row_blocks_give_each_thread_a_few_units_within_the_block_bounds():
    assert gemm_outer.row_blocks(2048, 2048, 2) == 1  # 22 strips: 11 units a thread
    assert gemm_outer.row_blocks(2048, 768, 16) == 8  # 8 strips: 64 units, blocks of 256 rows
    assert gemm_outer.row_blocks(8192, 96, 1) == 4  # at most ROW_BLOCK rows a block
    assert gemm_outer.row_blocks(300, 96, 64) == 2  # at least MIN_BLOCK rows (or m) a block
    assert gemm_outer.row_blocks(4, 96, 64) == 1


def test_signed_zeros_infinities_and_nans_take_the_fold_s_bits():
    a, b = _data((6, 70), 7), _data((101, 70), 8)
    a[0, :] = -0.0
    b[3, :] = 0.0  # row 0 x column 3: only -0.0 * 0.0 products, a -0.0 sum
    a[1, 5], b[7, 9] = np.inf, np.nan
    a[2, 33] = -np.inf
    b[10, 33] = 0.0
    assert _same(_outer(gemm_outer.gemm_outer, a, b), _tiles(a, b))


@pytest.mark.skipif(not mixed_gemm.HAS_FMA, reason="this CPU has no FMA")
@pytest.mark.parametrize("m, n, k", [(4, 96, 31), (11, 150, 2100)])
def test_the_fused_variant_equals_the_float32_kernel_where_products_are_exact(m, n, k):
    a, b, bias = _data((m, k), 9, bf16=True), _data((n, k), 10, bf16=True), _data(n, 11)
    assert mixed_gemm.exact_products(a.reshape(-1).view(np.uint32), b.reshape(-1).view(np.uint32), 8)
    assert _same(_outer(gemm_outer.gemm_outer_fma, a, b, bias), _tiles(a, b, bias))
    assert _same(_outer(gemm_outer.gemm_outer_fma, a, b, work=ON_CALLER), _tiles(a, b))


@pytest.mark.skipif(not mixed_gemm.HAS_FMA, reason="this CPU has no FMA")
def test_the_fused_variant_differs_where_bfloat16_products_underflow():
    a = _data((4, 64), 12, bf16=True) * np.float32(2.0 ** -66)
    b = _data((96, 64), 13, bf16=True) * np.float32(2.0 ** -66)  # products near 2^-132: rounded
    assert not mixed_gemm.exact_products(a.reshape(-1).view(np.uint32),
                                         b.reshape(-1).view(np.uint32), 8)
    fused = _outer(gemm_outer.gemm_outer_fma, a, b)
    assert (fused.view(np.uint32) != _tiles(a, b).view(np.uint32)).sum() >= 10


def test_layers_gemm_nt_takes_the_outer_products_where_they_run(monkeypatch):
    calls = []
    kernel = gemm_outer.gemm_outer
    monkeypatch.setattr(gemm_outer, "gemm_outer", lambda *args: calls.append(args[3:6]) or kernel(*args))
    k = layers.load("identical")
    for m, n in ((4, 96), (3, 96), (4, 95)):
        k.gemm_nt(_data((m, 8), 14), _data((n, 8), 15), NO_BIAS, False, np.empty((m, n), np.float32))
    assert calls == [(4, 96, 8)]


@pytest.mark.parametrize("m, n, k", [(4, 96, 5), (7, 130, 1025), (9, 193, 2100), (37, 96, 70)])
def test_a_and_b_stored_k_by_m_and_k_by_n_give_the_cells_of_gemm_nn_on_a_transposed(m, n, k):
    from mojolike.native import gemm_nn

    at, b = _data((k, m), 20), _data((k, n), 21)
    want = np.empty(m * n, np.float32)
    gemm_nn.gemm_nn(1, at.T.copy().reshape(-1), b.reshape(-1), m, n, k, want)
    for work in (ON_POOL, ON_CALLER):
        out = np.full(m * n, np.nan, np.float32)
        gemm_outer.gemm_outer_tn(work, at.reshape(-1), b.reshape(-1), m, n, k, NO_BIAS, False,
                                 False, out)
        assert _same(out, want)
    assert _same(want, _tiles(at.T.copy(), b.T.copy()))  # and gemm_nt's on both transposes


@pytest.fixture
def tn_calls(monkeypatch):
    """The (m, n, k) of every gemm_outer_tn call the test makes."""
    calls = []
    kernel = gemm_outer.gemm_outer_tn
    monkeypatch.setattr(gemm_outer, "gemm_outer_tn",
                        lambda *args: calls.append(args[3:6]) or kernel(*args))
    return calls


def test_linear_backward_reads_dy_as_stored_for_the_weight_gradient_where_the_tiles_run(tn_calls):
    calls = tn_calls
    for width, seed, tiles in ((130, 22, [(100, 130, 50)]), (40, 25, [])):  # 40 < 96 columns
        dy, x = _data((50, 100), seed), _data((50, width), seed + 1)
        w = _data((100, width), seed + 2)
        calls.clear()
        got = mojolike.linear_backward(dy, x, w, backend="cpu-numba")
        want = mojolike.linear_backward(dy, x, w, backend="oracle")
        assert calls == tiles
        assert all(_same(g, h) for g, h in zip(got, want))


def test_matmul_backward_reads_a_and_dy_as_stored_for_b_s_gradient_where_the_tiles_run(tn_calls):
    a, b = _data((2, 1, 5, 4), 28), _data((3, 4, 96), 29)  # batch dimensions broadcast
    dy = _data((2, 3, 5, 96), 30)
    got = mojolike.matmul_backward(dy, a, b, backend="cpu-numba")
    want = mojolike.matmul_backward(dy, a, b, backend="oracle")
    assert tn_calls == [(4, 96, 5)] * 6  # A^T dY per output entry: (K, N) over the M rows
    assert all(_same(g, h) for g, h in zip(got, want))


@pytest.mark.parametrize("m, n, k", [(4, 96, 5), (7, 130, 1025), (9, 193, 2100)])
def test_b_stored_k_by_n_gives_the_cells_of_gemm_nn(m, n, k):
    from mojolike.native import gemm_nn

    a, b = _data((m, k), 16), _data((k, n), 17)
    want = np.empty(m * n, np.float32)
    gemm_nn.gemm_nn(1, a.reshape(-1), b.reshape(-1), m, n, k, want)
    for work in (ON_POOL, ON_CALLER):
        out = np.full(m * n, np.nan, np.float32)
        gemm_outer.gemm_outer_nn(work, a.reshape(-1), b.reshape(-1), m, n, k, NO_BIAS, False, False, out)
        assert _same(out, want)
    assert _same(want, _tiles(a, b.T.copy()))  # and gemm_nt's on b's transpose
