"""cpu-numba's layer_norm backward with weight and bias keeps no h: the row kernel gives each
row's (mean, rstd) and the column pass recomputes h = (x - mean) * rstd for dweight while it
folds dbias from the same reads of dy. Every output keeps the oracle's bits (rows past a
chunk of the column fold, rows longer than a chunk of the row fold, -0.0, zeros, inf, NaN),
and the stats give back the h the row kernel writes otherwise, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import available
from gemm_entries import entries, patterns

import mojolike
from mojolike.core import registry

pytestmark = pytest.mark.skipif(not available("cpu-numba"), reason="cpu-numba is not available")


def kernels(family):
    return registry.kernels("tests", family, "cpu-numba", "identical")


@pytest.mark.parametrize("shape,dims", [((3, 5), (5,)), ((2, 7, 40), (40,)), ((2, 3, 1030), (3, 1030)),
                                        ((1100, 33), (33,))])
def test_dx_dweight_and_dbias_have_the_oracles_bits(shape, dims):
    for special in (False, True):
        x = entries(shape, 1, special) * np.float32(3)
        dy = entries(shape, 2, special)
        w, b = entries(dims, 3, False), entries(dims, 4, False)
        got = mojolike.layer_norm_backward(dy, x, dims, w, b, backend="cpu-numba")
        want = mojolike.layer_norm_backward(dy, x, dims, w, b, backend="oracle")
        for name, g, o in zip(("dx", "dweight", "dbias"), got, want):
            assert np.array_equal(patterns(g), patterns(o)), (name, shape, special)


def test_the_stats_give_back_the_rows_h_and_the_column_pass_its_folds():
    m, n = 2100, 48  # three chunks of rows in the column fold
    x, dy, w = entries((m, n), 5, False), entries((m, n), 6, False), entries(n, 7, False)
    t, lay = kernels("transformer"), kernels("layers")
    eps = np.float32(1e-5)
    dx, h = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    t.layer_norm_backward_rows(dy, x, w, True, eps, dx, h)
    dx2, stats = np.empty((m, n), np.float32), np.empty((m, 2), np.float32)
    t.layer_norm_backward_rows_stats(dy, x, w, True, eps, dx2, stats)
    assert np.array_equal(patterns(dx), patterns(dx2))
    c = x - stats[:, :1]  # numpy's float32 subtract and multiply: one rounding each
    assert np.array_equal(patterns(c * stats[:, 1:]), patterns(h))
    dw, db, dw2, db2 = (np.empty(n, np.float32) for _ in range(4))
    lay.col_fold(dy, h, True, dw)
    lay.col_fold(dy, dy, False, db)
    lay.col_fold_normalized(dy, x, stats, dw2, db2)
    assert np.array_equal(patterns(dw), patterns(dw2)) and np.array_equal(patterns(db), patterns(db2))
    # a wrong statistic reaches dweight: the column pass does read it
    stats[7, 1] *= np.float32(2)
    lay.col_fold_normalized(dy, x, stats, dw2, db2)
    assert not np.array_equal(patterns(dw), patterns(dw2))
