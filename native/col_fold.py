"""The layers family's column fold on the CPU: out[j] = fold over rows i of a[i, j] (or of the
rounded a[i, j] * b[i, j]), lane = i mod 32 within chunks of 1024 rows (native/layers.py's
`col_fold`).

A task takes one chunk of rows and a block of COL_BLOCK columns (SHORT_BLOCK when the rows are
fewer than a chunk) and reads its rows in order, so memory streams: each row adds its 16-column
vectors to its lane's accumulators (32 lanes of the block: 128 KiB, in L2), then the butterfly
closes the chunk into one partial per column.
After the tasks, the pairwise tree over the chunk partials, per column. Each lane's terms are
added in ascending row order and the butterfly and the tree are the fold's, so the split into
tasks never reaches a bit. With `both`, one pass folds the products and a itself into two
outputs (layer_norm's dweight and dbias read dy once), each fold's operations unchanged;
with `normalized`, the products' second factor is layer_norm's h = (x - mean) * rstd,
recomputed from x and each row's (mean, rstd) with the row kernel's two roundings, so h is
never stored.

>>> import numpy as np
>>> out, out2 = np.empty(2, np.float32), np.empty(2, np.float32)
>>> a = np.float32([[1, 2], [3, 4], [5, 6]])
>>> col_fold(a.reshape(-1), a.reshape(-1), True, True, False, out, 3, 2, out, out2)
>>> out.tolist(), out2.tolist()
([35.0, 56.0], [9.0, 12.0])
"""
from __future__ import annotations

import numpy as np
from numba import boolean, float32, int64, njit, prange, types, void

from ..oracles.fold import CHUNK, LANES
from .fold import NEG_ZERO
from .simd import WIDTH, vadd, vload, vmul, vsplat, vstore, vsub

_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
IN1 = types.Array(float32, 1, "C", readonly=True)
F1 = float32[::1]
# columns per task: a row's 4 KiB piece streams; pieces of 1 KiB 3 KiB apart (256 columns of
# layer_norm's 768) ran at a third of the rate (AMD EPYC Zen 4: dweight and dbias of (8192, 768)
# 2.6-3.1 ms against 1.3-1.4)
COL_BLOCK = 1024
SHORT_BLOCK = 256  # below a chunk of rows, where more tasks and smaller accumulators measured faster
ONE = np.float32(1.0)


@njit(inline="always", error_model="numpy")
def _add_row(a, b, products, both, normalized, mean, rstd, row, acc, acc2, la, nvec, width):
    """acc[la + x] += a[row + x] (or the rounded a * b; with `normalized`, a * h for
    h = (b - mean) * rstd, each operation rounded) for x < width, vectors for x < nvec; with
    `both`, also acc2[la + x] += a[row + x]."""
    vm, vr = vsplat(mean), vsplat(rstd)
    for x in range(0, nvec, WIDTH):
        v = vload(a, row + x)
        if both:
            vstore(acc2, la + x, vadd(vload(acc2, la + x), v))
        if normalized:
            v = vmul(v, vmul(vsub(vload(b, row + x), vm), vr))
        elif products:
            v = vmul(v, vload(b, row + x))
        vstore(acc, la + x, vadd(vload(acc, la + x), v))
    for x in range(nvec, width):
        if both:
            acc2[la + x] = acc2[la + x] + a[row + x]
        if normalized:
            c = b[row + x] - mean
            h = c * rstd
            t = a[row + x] * h
        else:
            t = a[row + x] * b[row + x] if products else a[row + x]
        acc[la + x] = acc[la + x] + t


@njit(inline="always", error_model="numpy")
def _butterfly(acc, cb, c, ncols, j0, nvec, width, parts):
    """The chunk's butterfly over acc's 32 lanes (lane l += lane l + off), lane 0 into
    parts[c * ncols + j0 : ...]."""
    off = LANES // 2
    while off >= 1:
        for lane in range(off):
            _add_row(acc, acc, False, False, False, ONE, ONE, (lane + off) * cb, acc, acc,
                     lane * cb, nvec, width)
        off //= 2
    for x in range(width):
        parts[c * ncols + j0 + x] = acc[x]


@njit(inline="always", error_model="numpy")
def _pairwise(parts, nchunks, ncols, out):
    """The pairwise tree over the chunk partials parts[c * ncols + j], level by level."""
    nvec = ncols // WIDTH * WIDTH
    k = nchunks
    while k > 1:
        h = k // 2
        for i in range(h):
            lo, hi = 2 * i * ncols, (2 * i + 1) * ncols
            for x in range(0, nvec, WIDTH):
                vstore(parts, i * ncols + x, vadd(vload(parts, lo + x), vload(parts, hi + x)))
            for x in range(nvec, ncols):
                parts[i * ncols + x] = parts[lo + x] + parts[hi + x]
        if k % 2 == 1:
            for x in range(ncols):
                parts[h * ncols + x] = parts[(k - 1) * ncols + x]
            k = h + 1
        else:
            k = h
    for x in range(ncols):
        out[x] = parts[x]


@njit(void(IN1, IN1, boolean, boolean, boolean, IN1, int64, int64, F1, F1), parallel=True,
      **_STRICT)
def col_fold(a, b, products, both, normalized, stats, m, ncols, out, out2):
    """out[j] = the fold over rows of a[i, j] (products: of a[i, j] * b[i, j]; normalized: of
    a[i, j] * ((b[i, j] - stats[2i]) * stats[2i + 1])); with `both` (and products or
    normalized) also out2[j] = the fold of a[i, j], from the same pass over a."""
    nchunks = (m + CHUNK - 1) // CHUNK
    cb = COL_BLOCK if m >= CHUNK else SHORT_BLOCK
    nblocks = (ncols + cb - 1) // cb
    parts = np.empty(nchunks * ncols, np.float32)  # parts[c * ncols + j]: chunk c's partial
    parts2 = np.empty(nchunks * ncols if both else 1, np.float32)
    for task in prange(nchunks * nblocks):
        c = task // nblocks
        j0 = task % nblocks * cb
        width = min(j0 + cb, ncols) - j0
        nvec = width // WIDTH * WIDTH
        acc = np.empty(LANES * cb, np.float32)  # acc[lane * cb + j - j0]
        acc2 = np.empty(LANES * cb if both else WIDTH, np.float32)
        for x in range(LANES * cb):
            acc[x] = NEG_ZERO
        for x in range(acc2.size):
            acc2[x] = NEG_ZERO
        for i in range(c * CHUNK, min(c * CHUNK + CHUNK, m)):
            mean, rstd = (stats[2 * i], stats[2 * i + 1]) if normalized else (ONE, ONE)
            _add_row(a, b, products, both, normalized, mean, rstd, i * ncols + j0, acc, acc2,
                     (i % LANES) * cb, nvec, width)
        _butterfly(acc, cb, c, ncols, j0, nvec, width, parts)
        if both:
            _butterfly(acc2, cb, c, ncols, j0, nvec, width, parts2)
    _pairwise(parts, nchunks, ncols, out)
    if both:
        _pairwise(parts2, nchunks, ncols, out2)
