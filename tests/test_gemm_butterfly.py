"""cpu-numba's GEMM, whose butterflies reduce several cells per vector addition, gives the
oracle's bits on every path of native/layers.py's `_gemm_block`: K at the lane and chunk
edges (one chunk, several chunks and their pairwise tree, a short last step), M and N off the
4 x 6 tile and past a block, with and without bias, and the chunk partials; entries include
-0.0, subnormals, infinities and NaN (all NaNs one class, contracts/fold.md clause 7).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import available
from gemm_entries import entries, patterns

from mojolike.core import registry

pytestmark = pytest.mark.skipif(not available("cpu-numba"), reason="cpu-numba is not available")

KS = [1, 31, 32, 33, 64, 1023, 1024, 1025, 2100]
MN = [(1, 1), (5, 7), (7, 13), (13, 5)]


def kernels(backend):
    return registry.kernels("tests", "layers", backend, "identical")


def gemm(backend, a, b, bias):
    out = np.empty((a.shape[0], b.shape[0]), np.float32)
    has_bias = bias is not None
    kernels(backend).gemm_nt(a, b, bias if has_bias else np.zeros(1, np.float32), has_bias, out)
    return out


def chunks(backend, a, b):
    out = np.empty(((a.shape[1] + 1023) // 1024, a.shape[0], b.shape[0]), np.float32)
    kernels(backend).gemm_nt_chunks(a, b, out)
    return out


@pytest.mark.parametrize("special", [False, True], ids=["normal", "special"])
@pytest.mark.parametrize("kk", KS)
def test_every_cell_has_the_oracles_bits_with_and_without_bias(kk, special):
    for m, n in MN:
        a, b = entries((m, kk), 10 + m, special), entries((n, kk), 20 + n, special)
        bias = entries(n, 30 + n, special)
        for with_bias in (None, bias):
            got, want = gemm("cpu-numba", a, b, with_bias), gemm("oracle", a, b, with_bias)
            assert np.array_equal(patterns(got), patterns(want)), \
                f"M={m} N={n} K={kk} bias={with_bias is not None}"


@pytest.mark.parametrize("kk", [1, 64, 1025, 2100])
def test_chunk_partials_have_the_oracles_bits(kk):
    for m, n in MN:
        a, b = entries((m, kk), 40 + m, True), entries((n, kk), 50 + n, True)
        assert np.array_equal(patterns(chunks("cpu-numba", a, b)), patterns(chunks("oracle", a, b))), \
            f"M={m} N={n} K={kk}"


@pytest.mark.parametrize("m,n,kk", [(9, 70, 1025), (133, 7, 1100), (260, 13, 40)])
def test_cells_past_the_first_block_have_the_oracles_bits(m, n, kk):
    # N past B_BLOCK_ROWS (66) and M past a block's rows of a (128 for K >= 1024, 256 below):
    # blocks that start inside the output, and the chunk partials kept per block
    a, b, bias = entries((m, kk), 60, True), entries((n, kk), 61, True), entries(n, 62, True)
    for with_bias in (None, bias):
        got, want = gemm("cpu-numba", a, b, with_bias), gemm("oracle", a, b, with_bias)
        assert np.array_equal(patterns(got), patterns(want)), f"M={m} N={n} K={kk}"
    assert np.array_equal(patterns(chunks("cpu-numba", a, b)), patterns(chunks("oracle", a, b)))


def test_a_row_of_negative_zero_products_stays_negative_zero():
    # every product -0.0: the lanes start at -0.0 and every level adds -0.0 + -0.0
    a = np.full((5, 33), -0.0, np.float32)
    b = np.ones((7, 33), np.float32)
    got = gemm("cpu-numba", a, b, None)
    assert np.array_equal(patterns(got), patterns(gemm("oracle", a, b, None)))
    assert (patterns(got) == np.uint32(0x80000000)).all()
