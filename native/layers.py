"""numba CPU kernels for the layers family: the fold-tree GEMM, column folds, RMSNorm, relu.

`gemm_nt(a, b)` computes out[i, j] = fold over k of a[i, k] * b[j, k]: every cell
is `mojolike.dot(a[i], b[j])` on the library's one tree, so a row's result never
depends on the other rows of the call. The 32 lanes of a cell are 32 contiguous
products (lane l of chunk c holds k = 1024c + 32t + l), so a cell keeps its lanes
in two `simd.Vec` accumulators and a 2 x 2 tile of cells shares its loads; the
butterfly and the pairwise tree over chunks follow, per cell. Tiles are grouped
in 64 x 64 blocks (the operands of a block stay in L2), and threads take whole
blocks, so the thread count never reaches a cell's arithmetic.

`col_fold(a, b)` folds each column over the rows (lane = row mod 32 within a
chunk of 1024 rows), 16 columns per vector; `segment_fold` does the same over a
list of rows per segment (the embedding gradient). `rms_norm` and
`rms_norm_backward` are oracles/layers.py's rounding order, a row per task.

Reproducibility: identical mode gives the oracle's bits (contracts/layers.md);
no sum is split by thread.

>>> import numpy as np
>>> k = load("identical")
>>> out = np.empty((1, 2), np.float32)
>>> k.gemm_nt(np.float32([[1, 2]]), np.float32([[3, 4], [0.5, 0.25]]), np.float32([0.5, -1]), True, out)
>>> out.tolist()
[[11.5, 0.0]]
"""
from __future__ import annotations

import numba
import numpy as np
from numba import boolean, float32, int64, njit, prange, types, void

from .fold import NEG_ZERO, NumbaThreads
from .simd import vadd, vbutterfly, vload, vmul, vsplat, vstore

_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
IN1 = types.Array(float32, 1, "C", readonly=True)
IN2 = types.Array(float32, 2, "C", readonly=True)
I1 = types.Array(int64, 1, "C", readonly=True)
F1, F2 = float32[::1], float32[:, ::1]
BLOCK_ROWS = 64  # rows of a and of b per block: 2 x 64 x K floats stay in L2 for K up to ~2048
VEC = 16  # columns per vector in the column folds (simd.WIDTH)


@njit(float32(float32[::1], int64), inline="always", **_STRICT)
def _butterfly_at(s, o):
    off = 16
    while off >= 1:
        for j in range(off):
            s[o + j] = s[o + j] + s[o + j + off]
        off //= 2
    return s[o]


@njit(float32(float32[::1], int64, int64), inline="always", **_STRICT)
def _pairwise_at(p, o, k):
    """The pairwise tree over p[o : o + k] (overwrites it)."""
    while k > 1:
        h = k // 2
        for i in range(h):
            p[o + i] = p[o + 2 * i] + p[o + 2 * i + 1]
        if k % 2 == 1:
            p[o + h] = p[o + k - 1]
            k = h + 1
        else:
            k = h
    return p[o]


@njit(void(IN1, IN1, int64, int64, int64, IN1, boolean, boolean, F1), parallel=True, **_STRICT)
def _gemm_nt(a, b, m, n, kk, bias, has_bias, chunk_partials, out):
    """out (M, N) = the cells; with `chunk_partials`, out (nchunks, M, N) = each cell's chunk
    partials before the pairwise tree (for sums that continue over several calls)."""
    nchunks = (kk + 1023) // 1024
    nbi = (m + BLOCK_ROWS - 1) // BLOCK_ROWS
    nbj = (n + BLOCK_ROWS - 1) // BLOCK_ROWS
    for blk in prange(nbi * nbj):
        bi = blk // nbj
        bj = blk % nbj
        part = np.empty(4 * nchunks, np.float32)
        s = np.empty(128, np.float32)
        for i0 in range(bi * BLOCK_ROWS, min(bi * BLOCK_ROWS + BLOCK_ROWS, m), 2):
            ra0 = i0 * kk
            ra1 = min(i0 + 1, m - 1) * kk  # an odd last row is computed twice and stored once
            for j0 in range(bj * BLOCK_ROWS, min(bj * BLOCK_ROWS + BLOCK_ROWS, n), 2):
                rb0 = j0 * kk
                rb1 = min(j0 + 1, n - 1) * kk
                for c in range(nchunks):
                    base = c * 1024
                    end = min(base + 1024, kk)
                    steps = (end - base) // 32
                    z = vsplat(NEG_ZERO)
                    c00l = z
                    c00h = z
                    c01l = z
                    c01h = z
                    c10l = z
                    c10h = z
                    c11l = z
                    c11h = z
                    for t in range(steps):
                        o = base + 32 * t
                        x0l = vload(a, ra0 + o)
                        x0h = vload(a, ra0 + o + 16)
                        x1l = vload(a, ra1 + o)
                        x1h = vload(a, ra1 + o + 16)
                        y0l = vload(b, rb0 + o)
                        y0h = vload(b, rb0 + o + 16)
                        y1l = vload(b, rb1 + o)
                        y1h = vload(b, rb1 + o + 16)
                        c00l = vadd(c00l, vmul(x0l, y0l))
                        c00h = vadd(c00h, vmul(x0h, y0h))
                        c01l = vadd(c01l, vmul(x0l, y1l))
                        c01h = vadd(c01h, vmul(x0h, y1h))
                        c10l = vadd(c10l, vmul(x1l, y0l))
                        c10h = vadd(c10h, vmul(x1h, y0h))
                        c11l = vadd(c11l, vmul(x1l, y1l))
                        c11h = vadd(c11h, vmul(x1h, y1h))
                    r0 = base + 32 * steps
                    if r0 == end:  # whole steps only: the butterfly runs in registers
                        part[c] = vbutterfly(c00l, c00h)
                        part[nchunks + c] = vbutterfly(c01l, c01h)
                        part[2 * nchunks + c] = vbutterfly(c10l, c10h)
                        part[3 * nchunks + c] = vbutterfly(c11l, c11h)
                        continue
                    vstore(s, 0, c00l)
                    vstore(s, 16, c00h)
                    vstore(s, 32, c01l)
                    vstore(s, 48, c01h)
                    vstore(s, 64, c10l)
                    vstore(s, 80, c10h)
                    vstore(s, 96, c11l)
                    vstore(s, 112, c11h)
                    for k in range(r0, end):  # the short last step: padded lanes add -0.0, skipped
                        lane = k - r0
                        p00 = a[ra0 + k] * b[rb0 + k]
                        p01 = a[ra0 + k] * b[rb1 + k]
                        p10 = a[ra1 + k] * b[rb0 + k]
                        p11 = a[ra1 + k] * b[rb1 + k]
                        s[lane] = s[lane] + p00
                        s[32 + lane] = s[32 + lane] + p01
                        s[64 + lane] = s[64 + lane] + p10
                        s[96 + lane] = s[96 + lane] + p11
                    for cell in range(4):
                        part[cell * nchunks + c] = _butterfly_at(s, 32 * cell)
                for cell in range(4):
                    i = i0 + cell // 2
                    j = j0 + cell % 2
                    if i >= m or j >= n:
                        continue
                    if chunk_partials:
                        for c in range(nchunks):
                            out[(c * m + i) * n + j] = part[cell * nchunks + c]
                    else:
                        v = _pairwise_at(part, cell * nchunks, nchunks)
                        if has_bias:
                            v = v + bias[j]
                        out[i * n + j] = v


@njit(void(IN1, IN1, boolean, I1, int64, int64, int64, F1, float32[::1], F1), inline="always",
      **_STRICT)
def _fold_rows_16(a, b, products, rows, count, ncols, j0, acc, parts, out):
    """out[j0:j0+16] = fold over the `count` rows rows[0..count) of a[row, j0:j0+16] (or the
    rounded a*b): lane = position mod 32 within chunks of 1024 positions, 16 columns a vector."""
    nchunks = (count + 1023) // 1024
    for c in range(nchunks):
        for lane in range(32):
            vstore(acc, 16 * lane, vsplat(NEG_ZERO))
        for q in range(c * 1024, min(c * 1024 + 1024, count)):
            o = rows[q] * ncols + j0
            y = vload(a, o)
            if products:
                y = vmul(y, vload(b, o))
            lane = 16 * (q & 31)
            vstore(acc, lane, vadd(vload(acc, lane), y))
        off = 16
        while off >= 1:
            for lane in range(off):
                vstore(acc, 16 * lane, vadd(vload(acc, 16 * lane), vload(acc, 16 * (lane + off))))
            off //= 2
        vstore(parts, 16 * c, vload(acc, 0))
    k = nchunks
    while k > 1:  # the pairwise tree over chunk partials, 16 columns at a time
        h = k // 2
        for i in range(h):
            vstore(parts, 16 * i, vadd(vload(parts, 32 * i), vload(parts, 32 * i + 16)))
        if k % 2 == 1:
            vstore(parts, 16 * h, vload(parts, 16 * (k - 1)))
            k = h + 1
        else:
            k = h
    vstore(out, j0, vload(parts, 0))


@njit(void(IN1, IN1, boolean, I1, int64, int64, int64, float32[::1], float32[::1], F1), inline="always",
      **_STRICT)
def _fold_rows_1(a, b, products, rows, count, ncols, j, lanes, parts, out):
    """The same fold for one column j (the columns past the last whole vector)."""
    nchunks = (count + 1023) // 1024
    for c in range(nchunks):
        lanes[:] = NEG_ZERO
        for q in range(c * 1024, min(c * 1024 + 1024, count)):
            y = a[rows[q] * ncols + j]
            if products:
                y = y * b[rows[q] * ncols + j]
            lanes[q & 31] = lanes[q & 31] + y
        parts[c] = _butterfly_at(lanes, 0)
    out[j] = _pairwise_at(parts, 0, nchunks)


@njit(void(IN1, IN1, boolean, int64, int64, F1), parallel=True, **_STRICT)
def _col_fold(a, b, products, m, ncols, out):
    rows = np.arange(m)
    nvec = ncols // VEC
    nchunks = (m + 1023) // 1024
    for g in prange(nvec + (ncols - nvec * VEC)):
        acc = np.empty(32 * VEC, np.float32)
        parts = np.empty(VEC * nchunks, np.float32)
        if g < nvec:
            _fold_rows_16(a, b, products, rows, m, ncols, g * VEC, acc, parts, out)
        else:
            _fold_rows_1(a, b, products, rows, m, ncols, nvec * VEC + g - nvec, acc, parts, out)


@njit(void(IN1, int64, I1, I1, I1, F1), parallel=True, **_STRICT)
def _segment_fold(dy, width, order, starts, rows_out, out):
    nvec = width // VEC
    for s in prange(rows_out.size):
        count = starts[s + 1] - starts[s]
        rows = order[starts[s]:starts[s + 1]]
        acc = np.empty(32 * VEC, np.float32)
        parts = np.empty(VEC * ((count + 1023) // 1024), np.float32)
        dst = out[rows_out[s] * width:(rows_out[s] + 1) * width]
        for g in range(nvec):
            _fold_rows_16(dy, dy, False, rows, count, width, g * VEC, acc, parts, dst)
        for j in range(nvec * VEC, width):
            _fold_rows_1(dy, dy, False, rows, count, width, j, acc, parts, dst)


@njit(float32(IN1, int64, int64, float32[::1]), inline="always", **_STRICT)
def _row_sumsq(x, o, d, part):
    """fold of the rounded squares of x[o : o + d] (lanes as vectors for whole steps)."""
    nchunks = (d + 1023) // 1024
    for c in range(nchunks):
        base = o + c * 1024
        end = o + min(c * 1024 + 1024, d)
        steps = (end - base) // 32
        lo = vsplat(NEG_ZERO)
        hi = lo
        for t in range(steps):
            xl = vload(x, base + 32 * t)
            xh = vload(x, base + 32 * t + 16)
            lo = vadd(lo, vmul(xl, xl))
            hi = vadd(hi, vmul(xh, xh))
        r0 = base + 32 * steps
        if r0 == end:
            part[c] = vbutterfly(lo, hi)
        else:
            vstore(part, nchunks, lo)
            vstore(part, nchunks + 16, hi)
            for k in range(r0, end):
                sq = x[k] * x[k]
                part[nchunks + k - r0] = part[nchunks + k - r0] + sq
            part[c] = _butterfly_at(part, nchunks)
    return _pairwise_at(part, 0, nchunks)


@njit(float32(IN1, int64, int64, float32, float32[::1]), inline="always", **_STRICT)
def _rms_scale(x, o, d, eps, part):
    """r = 1 / sqrt(fold(x*x) / D + eps), four roundings in that order."""
    ms = _row_sumsq(x, o, d, part) / np.float32(d)
    return np.float32(1.0) / np.sqrt(ms + eps)


@njit(void(IN1, int64, int64, IN1, boolean, float32, F1), parallel=True, **_STRICT)
def _rms_norm(x, m, d, w, has_w, eps, y):
    for i in prange(m):
        part = np.empty((d + 1023) // 1024 + 32, np.float32)
        o = i * d
        r = _rms_scale(x, o, d, eps, part)
        for j in range(d):
            h = x[o + j] * r
            y[o + j] = h * w[j] if has_w else h


@njit(float32(F1, int64, int64, float32[::1]), inline="always", **_STRICT)
def _fold_slice(y, o, d, part):
    """fold of y[o : o + d]."""
    nchunks = (d + 1023) // 1024
    for c in range(nchunks):
        base = o + c * 1024
        end = o + min(c * 1024 + 1024, d)
        for j in range(32):
            part[nchunks + j] = NEG_ZERO
        for k in range(base, end):
            part[nchunks + ((k - base) & 31)] = part[nchunks + ((k - base) & 31)] + y[k]
        part[c] = _butterfly_at(part, nchunks)
    return _pairwise_at(part, 0, nchunks)


@njit(void(IN1, IN1, int64, int64, IN1, boolean, float32, F1, F1), parallel=True, **_STRICT)
def _rms_norm_backward(dy, x, m, d, w, has_w, eps, dx, hbuf):
    for i in prange(m):
        part = np.empty((d + 1023) // 1024 + 32, np.float32)
        o = i * d
        r = _rms_scale(x, o, d, eps, part)
        # c = fold_j(g_j * h_j) / D with g = dy * w (dy without weight), h = x * r; dx holds g*h first
        for j in range(d):
            h = x[o + j] * r
            g = dy[o + j] * w[j] if has_w else dy[o + j]
            dx[o + j] = g * h
            if has_w:
                hbuf[o + j] = h
        c = _fold_slice(dx, o, d, part) / np.float32(d)
        for j in range(d):
            h = x[o + j] * r
            g = dy[o + j] * w[j] if has_w else dy[o + j]
            dx[o + j] = r * (g - h * c)


@njit(void(IN1, int64, int64, F1), parallel=True, **_STRICT)
def _row_chunk_folds(a, m, c, out):
    nchunks = (c + 1023) // 1024
    for i in prange(m):
        lanes = np.empty(32, np.float32)
        for q in range(nchunks):
            base = i * c + q * 1024
            end = i * c + min(q * 1024 + 1024, c)
            steps = (end - base) // 32
            lo = vsplat(NEG_ZERO)
            hi = lo
            for t in range(steps):
                lo = vadd(lo, vload(a, base + 32 * t))
                hi = vadd(hi, vload(a, base + 32 * t + 16))
            vstore(lanes, 0, lo)
            vstore(lanes, 16, hi)
            r0 = base + 32 * steps
            for k in range(r0, end):
                lanes[k - r0] = lanes[k - r0] + a[k]
            out[i * nchunks + q] = _butterfly_at(lanes, 0)


@njit(void(IN1, F1), parallel=True, **_STRICT)
def _relu(x, out):
    for i in prange(x.size):
        v = x[i]
        out[i] = np.float32(0.0) if v < np.float32(0.0) else v  # -0.0 and NaN stay, as in torch


_PLACEHOLDER = np.zeros(16, np.float32)  # the bias / weight argument when there is none


class NumbaLayers(NumbaThreads):
    """The layers family's kernels on the CPU with numba (the interface of contracts/layers.md).

    All arrays are C-contiguous float32 (int64 for indices); 2-D arrays as (rows, cols).
    """

    backend = "cpu-numba"
    WRITES = {"gemm_nt": (4,), "gemm_nt_chunks": (2,), "row_chunk_folds": (1,), "col_fold": (3,),
              "segment_fold": (4,), "rms_norm": (4,), "rms_norm_backward": (5, 6), "relu": (1,)}

    def __init__(self, mode: str):
        self.numeric_mode = mode
        self.details = {"numba": numba.__version__, "threads": numba.get_num_threads()}

    def gemm_nt(self, a, b, bias, has_bias, out):
        """out[i, j] = fold_k a[i, k] * b[j, k] (+ bias[j]); a (M, K), b (N, K), out (M, N)."""
        m, k = a.shape
        _gemm_nt(a.reshape(-1), b.reshape(-1), m, b.shape[0], k,
                 bias if has_bias else _PLACEHOLDER, bool(has_bias), False, out.reshape(-1))

    def gemm_nt_chunks(self, a, b, out):
        """out (ceil(K/1024), M, N): the chunk partials of gemm_nt's cells (no pairwise tree)."""
        m, k = a.shape
        _gemm_nt(a.reshape(-1), b.reshape(-1), m, b.shape[0], k, _PLACEHOLDER, False, True,
                 out.reshape(-1))

    def row_chunk_folds(self, a, out):
        """out (M, ceil(C/1024)): the fold's chunk partials of every row of a (M, C)."""
        m, c = a.shape
        _row_chunk_folds(a.reshape(-1), m, c, out.reshape(-1))

    def col_fold(self, a, b, products, out):
        """out[n] = fold over rows m of a[m, n] (with `products`, of the rounded a[m, n] * b[m, n])."""
        m, ncols = a.shape
        _col_fold(a.reshape(-1), (b if products else a).reshape(-1), bool(products), m, ncols, out)

    def segment_fold(self, dy, order, starts, rows, out):
        """out[rows[s], :] = fold over q in [starts[s], starts[s+1]) of dy[order[q], :]; out is
        (V, D), its other rows untouched."""
        _segment_fold(dy.reshape(-1), dy.shape[1], order, starts, rows, out.reshape(-1))

    def rms_norm(self, x, w, has_w, eps, y):
        m, d = x.shape
        _rms_norm(x.reshape(-1), m, d, w if has_w else _PLACEHOLDER, bool(has_w), np.float32(eps),
                  y.reshape(-1))

    def rms_norm_backward(self, dy, x, w, has_w, eps, dx, h):
        """dx; with a weight also h = x * r (for dweight = col_fold(dy, h))."""
        m, d = x.shape
        _rms_norm_backward(dy.reshape(-1), x.reshape(-1), m, d, w if has_w else _PLACEHOLDER,
                           bool(has_w), np.float32(eps), dx.reshape(-1),
                           h.reshape(-1) if has_w else _PLACEHOLDER.copy())

    def relu(self, x, out):
        _relu(x.reshape(-1), out.reshape(-1))


def load(mode: str, backend: str = "cpu-numba") -> NumbaLayers:
    return NumbaLayers(mode)


HOT_KERNELS = {"layers._gemm_nt": _gemm_nt, "layers._col_fold": _col_fold,
               "layers._segment_fold": _segment_fold}
