"""The layers family's column fold on the CPU: out[j] = fold over rows i of a[i, j] (or of the
rounded a[i, j] * b[i, j]), lane = i mod 32 within chunks of 1024 rows (native/layers.py's
`col_fold`).

A task takes one chunk of rows and a block of COL_BLOCK columns and reads its rows in order,
so memory streams: each row adds its 16-column vectors to its lane's accumulators (32 lanes of
the block: 32 KiB, in L1), then the butterfly closes the chunk into one partial per column.
After the tasks, the pairwise tree over the chunk partials, per column. Each lane's terms are
added in ascending row order and the butterfly and the tree are the fold's, so the split into
tasks never reaches a bit.

>>> import numpy as np
>>> out = np.empty(2, np.float32)
>>> a = np.float32([[1, 2], [3, 4], [5, 6]])
>>> col_fold(a.reshape(-1), a.reshape(-1), False, 3, 2, out), out.tolist()
(None, [9.0, 12.0])
"""
from __future__ import annotations

import numpy as np
from numba import boolean, float32, int64, njit, prange, types, void

from ..oracles.fold import CHUNK, LANES
from .fold import NEG_ZERO
from .simd import WIDTH, vadd, vload, vmul, vsplat, vstore

_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
IN1 = types.Array(float32, 1, "C", readonly=True)
F1 = float32[::1]
COL_BLOCK = 256  # columns per task: 32 lanes of them stay in L1


@njit(inline="always", error_model="numpy")
def _add_row(a, b, products, row, acc, la, nvec, width):
    """acc[la + x] += a[row + x] (or the rounded a * b) for x < width, vectors for x < nvec."""
    for x in range(0, nvec, WIDTH):
        v = vload(a, row + x)
        if products:
            v = vmul(v, vload(b, row + x))
        vstore(acc, la + x, vadd(vload(acc, la + x), v))
    for x in range(nvec, width):
        t = a[row + x] * b[row + x] if products else a[row + x]
        acc[la + x] = acc[la + x] + t


@njit(void(IN1, IN1, boolean, int64, int64, F1), parallel=True, **_STRICT)
def col_fold(a, b, products, m, ncols, out):
    nchunks = (m + CHUNK - 1) // CHUNK
    nblocks = (ncols + COL_BLOCK - 1) // COL_BLOCK
    parts = np.empty(nchunks * ncols, np.float32)  # parts[c * ncols + j]: chunk c's partial
    for task in prange(nchunks * nblocks):
        c = task // nblocks
        j0 = task % nblocks * COL_BLOCK
        width = min(j0 + COL_BLOCK, ncols) - j0
        nvec = width // WIDTH * WIDTH
        acc = np.empty(LANES * COL_BLOCK, np.float32)  # acc[lane * COL_BLOCK + j - j0]
        for x in range(LANES * COL_BLOCK):
            acc[x] = NEG_ZERO
        for i in range(c * CHUNK, min(c * CHUNK + CHUNK, m)):
            _add_row(a, b, products, i * ncols + j0, acc, (i % LANES) * COL_BLOCK, nvec, width)
        off = LANES // 2
        while off >= 1:  # the butterfly: lane l += lane l + off
            for lane in range(off):
                _add_row(acc, acc, False, (lane + off) * COL_BLOCK, acc, lane * COL_BLOCK, nvec,
                         width)
            off //= 2
        for x in range(width):
            parts[c * ncols + j0 + x] = acc[x]
    nvec = ncols // WIDTH * WIDTH
    k = nchunks
    while k > 1:  # the pairwise tree over chunk partials, level by level
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
