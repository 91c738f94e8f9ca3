"""cpu-numba's GEMM with b stored (K, N) (native/gemm_nn.py, matmul's forward and A^T dY)
gives gemm_nt's cells on b's transpose, so the oracle's bits: K at the lane and chunk edges
(lanes with no product, several chunks and their pairwise tree), M off the 4-row tile and
below it, N off the 16-column strip and past a block, N a multiple of 1024 (b's rows on a
few cache sets), -0.0, subnormals, infinities and NaN (all NaNs one class,
contracts/fold.md clause 7), and every thread count; matmul and linear_backward, which call
it, keep the oracle's bits. The kernel
runs on any x86-64 target; layers' `gemm_nn` calls it on AVX-512 ones (gemm_nn.FAST) for
N >= 16 and declines the rest, writing nothing.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import available
from gemm_entries import entries, patterns

from mojolike.core import registry

pytestmark = pytest.mark.skipif(not available("cpu-numba"), reason="cpu-numba is not available")

KS = [1, 2, 31, 33, 64, 1024, 1025, 2100]
MN = [(1, 16), (3, 17), (4, 16), (5, 33)]
NONE = np.zeros(1, np.float32)


def kernels(backend):
    return registry.kernels("tests", "layers", backend, "identical")


def nn(a, b):
    """The kernel itself (on any target, FAST or not; N >= 16)."""
    from mojolike.native import gemm_nn
    (m, kk), n = a.shape, b.shape[1]
    out = np.full((m, n), np.float32(7.0))
    gemm_nn.gemm_nn(m * n * kk // 32, a.reshape(-1), b.reshape(-1), m, n, kk, out.reshape(-1))
    return out


def nt(backend, a, b):
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    kernels(backend).gemm_nt(a, np.ascontiguousarray(b.T), NONE, False, out)
    return out


@pytest.mark.parametrize("special", [False, True], ids=["normal", "special"])
@pytest.mark.parametrize("kk", KS)
def test_every_cell_has_the_oracles_bits(kk, special):
    for m, n in MN:
        a, b = entries((m, kk), kk, special), entries((kk, n), kk + 1, special)
        got, want = nn(a, b), nt("oracle", a, b)
        assert np.array_equal(patterns(got), patterns(want)), (m, n, kk, special)


@pytest.mark.parametrize("m,n,kk", [(70, 300, 100), (130, 1024, 64), (67, 257, 2100),
                                    (200, 48, 1025), (9, 2048, 33)])
def test_cells_past_the_first_block_and_strip_equal_gemm_nt(m, n, kk):
    """Several blocks of rows and columns, short last tiles and strips that overlap the one
    before; gemm_nt is the oracle's bits (tests/test_gemm_butterfly.py)."""
    for special in (True, False):
        a, b = entries((m, kk), m, special), entries((kk, n), n, special)
        got, want = nn(a, b), nt("cpu-numba", a, b)
        assert np.array_equal(patterns(got), patterns(want)), (m, n, kk, special)
    # the data separates trees: numpy's own order misses these bits somewhere
    assert not np.array_equal(want, a @ b)


def test_the_method_declines_what_the_kernel_does_not_take_and_writes_nothing():
    from mojolike.native import gemm_nn
    k = kernels("cpu-numba")
    for m, kk, n in [(4, 8, 15), (3, 0, 20), (0, 5, 32)]:
        out = np.full((m, n), np.float32(7.0))
        assert k.gemm_nn(entries((m, kk), 1, False), entries((kk, n), 2, False), out) is False
        assert np.all(out == 7.0)
    out = np.full((2, 16), np.float32(7.0))
    a, b = entries((2, 3), 3, False), entries((3, 16), 4, False)
    assert k.gemm_nn(a, b, out) is gemm_nn.FAST
    if gemm_nn.FAST:
        assert np.array_equal(patterns(out), patterns(nt("oracle", a, b)))


def test_the_bits_do_not_depend_on_the_thread_count():
    k = kernels("cpu-numba")
    if k.max_threads() < 2:
        pytest.skip("one thread only")
    a, b = entries((260, 1500), 1, False), entries((1500, 600), 2, False)
    seen = []
    before = k.get_num_threads()
    try:
        for t in (1, 2):
            k.set_num_threads(t)
            seen.append(nn(a, b))
    finally:
        k.set_num_threads(before)
    assert np.array_equal(patterns(seen[0]), patterns(seen[1]))
    assert np.array_equal(patterns(seen[0]), patterns(nt("cpu-numba", a, b)))


def test_a_column_of_negative_zero_products_stays_negative_zero():
    a = np.float32([[-0.0, 1.0], [2.0, -3.0], [0.0, 0.0], [1.0, 1.0], [5.0, 0.5]])
    b = np.zeros((2, 16), np.float32)
    b[0, 3], b[1, 3], b[0, 5] = 1.0, -0.0, -0.0
    got, want = nn(a, b), nt("oracle", a, b)
    assert np.array_equal(patterns(got), patterns(want))
    # -0.0 * 1 and 1 * -0.0 leave every lane -0.0; 0 * 1 + 0 * -0.0 is +0.0
    assert np.signbit(got[0, 3]) and not np.signbit(got[2, 3]) and got[1, 3] == 2.0


def test_matmul_runs_it_and_keeps_the_oracles_bits_forward_and_backward():
    import mojolike
    a, b = entries((2, 3, 37, 40), 5, True), entries((3, 40, 20), 6, True)
    dy = entries((2, 3, 37, 20), 7, False)
    got, want = (mojolike.matmul(a, b, backend=bk) for bk in ("cpu-numba", "oracle"))
    assert np.array_equal(patterns(got), patterns(want))
    for g, w in zip(mojolike.matmul_backward(dy, a, b, backend="cpu-numba"),
                    mojolike.matmul_backward(dy, a, b, backend="oracle")):
        assert np.array_equal(patterns(g), patterns(w))


def test_linear_backward_runs_it_and_keeps_the_oracles_bits():
    import mojolike
    x, w, dy = entries((2, 19, 40), 8, True), entries((24, 40), 9, True), entries((2, 19, 24), 10, False)
    for g, o in zip(mojolike.linear_backward(dy, x, w, backend="cpu-numba"),
                    mojolike.linear_backward(dy, x, w, backend="oracle")):
        assert np.array_equal(patterns(g), patterns(o))


@pytest.mark.parametrize("min_rows", [1, 1 << 60], ids=["row blocks", "vocabulary chunks"])
def test_the_chunked_head_runs_it_and_keeps_the_oracles_bits(min_rows, monkeypatch):
    import mojolike
    from mojolike.ops import head
    monkeypatch.setattr(head, "MIN_BLOCK_ROWS", min_rows)
    h, w = entries((5, 24), 11, False), entries((1500, 24), 12, False)
    t = np.random.default_rng(13).integers(0, 1500, 5)
    got, want = (mojolike.chunked_lm_head_loss(h, w, t, label_smoothing=0.1, return_grad=True,
                                               chunk_size=1024, backend=bk)
                 for bk in ("cpu-numba", "oracle"))
    for g, o in zip(got, want):
        assert np.array_equal(patterns(g), patterns(o))
