"""numba CPU kernels for the fused scaled-dot-product attention, forward and backward
(contracts/transformer.md clauses 10-15), called by native/transformer.py.

Forward, parallel over tasks of (b, h, QUERY_BLOCK rows); each task transposes its head's
keys once (E x S, so that 16 keys' dot products are one vector per lane step) and then, per
query row, makes two passes over the key blocks of block_k keys:

1. the row max of the taking-part scores s_ij = scale * dot(q_i, k_j) (+ m_ij);
2. the scores again, e_ij = expf(s_ij - mx_i), and the fold state of S_i and of every
   o_i[d]: 32 lane accumulators indexed by j mod 32, closed at each 1024-key chunk by the
   butterfly into a chunk partial; the partials meet on the pairwise tree at the end.

Keys are visited in ascending order, the lane of key j is j mod 32 and its chunk j // 1024,
so block_k only shapes the loops and never reaches a bit; a position that does not take
part is skipped, which is the fold's -0.0 (it changes no lane). No (L, S) matrix is ever
held: a row's state is 32 x (Ev + 1) floats and one partial per chunk.

Backward, two passes from the forward's o and stats (mx_i, S_i): one parallel over
(b, h, key block) computes dK and dV, each key's folds over i carried in ascending i
(lane i mod 32, chunk i // 1024) across all query rows, 16 keys at a time; one parallel over
(b, h, query block) computes dQ, each row's fold over j carried across the key blocks.
Both recompute s, e, p = e / S_i, dP = dot(do_i, v_j) (* c_ij) and dS = p (dP - D_i),
D_i = dot(do_i, o_i), exactly as oracles/attention.py's head_backward. An output none of
whose terms takes part is +0.0 (times the scale for dK, dQ), as fold over no term is.

The retargetable per-element source (plain scalar arguments, one IEEE operation per
statement, primitives add/sub/mul/div by name): `takes_part`, `score_elem`, `kept_elem`,
`weight_elem`, `grad_elem`, with transformer.exp_any for expf; native/cuda can compile them
with native/retarget.py. The dot products and folds are native/fold.py's tree spelled with
native/simd.py vectors (SIMD across 16 keys for the scores, across coordinates for the
weighted sums).

An undecided expf marks its head in status (1; outputs then unspecified) and the host redoes
the head with the oracle; the kernels return the number of marked heads.

Reproducibility: parallel only over independent outputs (rows for o and dQ, keys for dK and
dV); every fold's order is the contract's, whatever the block sizes and thread count.

>>> import numpy as np
>>> q = np.float32([1, 0]).reshape(1, 1, 1, 2); k = np.float32([1, 0, 0, 1]).reshape(1, 1, 2, 2)
>>> v = np.float32([1, 3]).reshape(1, 1, 2, 1)
>>> o, stats, st = np.empty((1, 1, 1, 1), np.float32), np.empty((1, 1, 1, 2), np.float32), np.empty((1, 1), np.int32)
>>> forward(q, k, v, NO_MASK_BOOL, NO_MASK_ADD, 0, np.zeros(4, np.int64), False, 0.0, 0.0, 1.0,
...         0, 0, 0, 16, o, stats, st), o.ravel().tolist()
(0, [2.0])
"""
from __future__ import annotations

from operator import add, mul, sub
from operator import truediv as div

import numpy as np
from numba import boolean, float32, int32, int64, njit, prange, types, uint8, uint64

from . import rng
from .crmath import EXP_HUGE, EXP_TINY, _exp_elem
from .fold import NEG_ZERO
from .simd import vadd, vload, vmul, vsplat, vstore

_STRICT = {"cache": True, "error_model": "numpy"}  # fastmath off: no contraction, no reassociation
_jit = njit(inline="always", error_model="numpy")
PRIMITIVES = ("add", "sub", "mul", "div")
IN1 = types.Array(float32, 1, "C", readonly=True)
MB = types.Array(uint8, 1, "C", readonly=True)
MS = types.Array(int64, 1, "C", readonly=True)
F1 = float32[::1]
S1 = int32[::1]
ZERO = np.float32(0.0)
POS_INF = np.float32(np.inf)
NEG_INF = np.float32(-np.inf)
TWO_M24 = np.float32(2.0 ** -24)
SH8 = np.uint64(8)
QUERY_BLOCK = 16  # rows per forward task (the backward's dQ pass takes block_q)
TILE = 16  # keys per vector: scores of 16 keys at once
NO_MASK_BOOL = np.zeros(1, np.uint8)
NO_MASK_ADD = np.zeros(1, np.float32)


# -- per-element source (retargetable) ---------------------------------------------------------

def takes_part(causal, kind, mbool, i, j):
    """Key j takes part in row i: not past the diagonal of a causal call, not a False mask entry."""
    if causal and j > i:
        return False
    return kind != 1 or mbool != 0


def score_elem(dot, scale, kind, madd):
    """s = scale * dot, then + m for an additive mask (one more rounding)."""
    s = mul(scale, dot)
    return add(s, madd) if kind == 2 else s


def kept_elem(w, p):
    """Dropout: the position is kept when its uniform u = (w >> 8) 2^-24 (exact) is >= p."""
    u = mul(np.float32(np.int32(w >> SH8)), TWO_M24)
    return u >= p


def weight_elem(e, kept, keep_scale, dropout):
    """w = e * c with c = keep_scale (kept) or 0.0; w = e without dropout."""
    c = keep_scale if kept else ZERO
    return mul(e, c) if dropout else e


def grad_elem(e, big_s, dp_dot, d_i, kept, keep_scale, dropout):
    """(p * c, dS): p = e / S, dP = dot(do_i, v_j) * c, dS = p * (dP - D) (clause 15)."""
    p = div(e, big_s)
    c = keep_scale if kept else ZERO
    pd = mul(p, c) if dropout else p
    dp = mul(dp_dot, c) if dropout else dp_dot
    t = sub(dp, d_i)
    return pd, mul(p, t)


def exp_any(d):
    """(e, decided): expf(d) for any binary32 d (NaN stays NaN, +inf from EXP_HUGE on, +0 at or
    below EXP_TINY), branch-free so that a loop of it vectorizes."""
    inside = (d > EXP_TINY) & (d < EXP_HUGE)
    w = d if inside else ZERO
    a, ok = _exp_elem(w)
    big = POS_INF if d >= EXP_HUGE else ZERO
    special = d if d != d else big  # noqa: PLR0124 (NaN test)
    return (a if inside else special), (ok | (not inside))


_takes_part, _score_elem, _kept_elem = _jit(takes_part), _jit(score_elem), _jit(kept_elem)
_weight_elem, _grad_elem, _exp_any = _jit(weight_elem), _jit(grad_elem), _jit(exp_any)


# -- folds --------------------------------------------------------------------------------------

@_jit
def _dots16(x, xo, n, t, ld, col, lanes, parts):
    """16 dot products at once: lane k of the result is fold_e x[xo + e] * t[e * ld + col + k]
    over e < n (t holds 16 columns of vectors transposed: keys along a row)."""
    nch = (n + 1023) // 1024
    for c in range(nch):
        base = c * 1024
        end = min(base + 1024, n)
        for lane in range(32):
            acc = vsplat(NEG_ZERO)
            for e in range(base + lane, end, 32):
                acc = vadd(acc, vmul(vsplat(x[xo + e]), vload(t, e * ld + col)))
            vstore(lanes, 16 * lane, acc)
        off = 16
        while off >= 1:
            for lane in range(off):
                vstore(lanes, 16 * lane, vadd(vload(lanes, 16 * lane), vload(lanes, 16 * (lane + off))))
            off //= 2
        vstore(parts, 16 * c, vload(lanes, 0))
    k = nch
    while k > 1:
        h = k // 2
        for i in range(h):
            vstore(parts, 16 * i, vadd(vload(parts, 32 * i), vload(parts, 32 * i + 16)))
        if k % 2 == 1:
            vstore(parts, 16 * h, vload(parts, 16 * (k - 1)))
            k = h + 1
        else:
            k = h
    return vload(parts, 0)


@_jit
def _dot(a, ao, b, bo, n, acc, parts):
    """fold of a[ao + e] * b[bo + e] over e < n (scalar lanes)."""
    nch = (n + 1023) // 1024
    for c in range(nch):
        for lane in range(32):
            acc[lane] = NEG_ZERO
        for e in range(c * 1024, min(c * 1024 + 1024, n)):
            t = a[ao + e] * b[bo + e]
            acc[e & 31] = acc[e & 31] + t
        parts[c] = _butterfly(acc, 0, 1)
    return _pairwise(parts, 0, nch, 1)


@_jit
def _butterfly(a, o, stride):
    """The fold's butterfly over the 32 lanes a[o + l * stride]; returns lane 0 (overwrites)."""
    off = 16
    while off >= 1:
        for j in range(off):
            a[o + j * stride] = a[o + j * stride] + a[o + (j + off) * stride]
        off //= 2
    return a[o]


@_jit
def _pairwise(p, o, k, stride):
    """The pairwise tree over p[o + c * stride], c < k (overwrites)."""
    while k > 1:
        h = k // 2
        for i in range(h):
            p[o + i * stride] = p[o + 2 * i * stride] + p[o + (2 * i + 1) * stride]
        if k % 2 == 1:
            p[o + h * stride] = p[o + (k - 1) * stride]
            k = h + 1
        else:
            k = h
    return p[o]


@_jit
def _close(lanes, width, parts, c, nch):
    """Chunk c's partials of `width` folds whose 32 lanes are lanes[l * width + x]: the
    butterfly for each x into parts[x * nch + c], then the lanes reset to -0.0."""
    off = 16
    while off >= 1:
        for j in range(off):
            for x in range(width):
                lanes[j * width + x] = lanes[j * width + x] + lanes[(j + off) * width + x]
        off //= 2
    for x in range(width):
        parts[x * nch + c] = lanes[x]
    lanes[:32 * width] = NEG_ZERO


@_jit
def _axpy_lane(lanes, lo, w, y, yo, n):
    """lanes[lo + x] += w * y[yo + x] for x < n (one product, one addition per coordinate)."""
    full = n - n % 16
    vw = vsplat(w)
    for x in range(0, full, 16):
        vstore(lanes, lo + x, vadd(vload(lanes, lo + x), vmul(vw, vload(y, yo + x))))
    for x in range(full, n):
        t = w * y[yo + x]
        lanes[lo + x] = lanes[lo + x] + t


@_jit
def _transpose(src, so, rows, width, dst, ld, col):
    """dst[x * ld + col + r] = src[so + r * width + x]: `rows` vectors of `width` as columns."""
    for r in range(rows):
        for x in range(width):
            dst[x * ld + col + r] = src[so + r * width + x]


@_jit
def _mask_at(mb, madd, kind, ms, b, h, i, j):
    """(bool entry, additive entry) of the mask at (b, h, i, j) by its element strides."""
    if kind == 0:
        return np.uint8(1), ZERO
    at = b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]
    if kind == 1:
        return mb[at], ZERO
    return np.uint8(1), madd[at]


@_jit
def _word(k0, k1, stream, pos):
    return rng._word_at(k0, k1, stream & rng.MASK32, stream >> np.uint64(32), np.uint64(pos))


@njit(inline="always", error_model="numpy")
def _mark(counts, nheads, per_head, status):
    """status[bh] = 1 where a task of head bh left a value undecided; the number of such heads."""
    marked = 0
    for bh in range(nheads):
        c = 0
        for t in range(bh * per_head, bh * per_head + per_head):
            c += counts[t]
        status[bh] = 1 if c else 0
        marked += 1 if c else 0
    return np.int64(marked)


# -- forward ------------------------------------------------------------------------------------

@njit(int64(IN1, IN1, IN1, MB, IN1, int64, MS, boolean, float32, float32, float32, uint64,
            uint64, uint64, int64, int64, int64, int64, int64, int64, int64, F1, F1, S1),
      parallel=True, **_STRICT)
def _forward(q, k, v, mb, madd, kind, ms, causal, scale, p, keep_scale, k0, k1, stream,
             nb, nh, nl, ns, ne, nev, block_k, o, stats, status):
    nqb = (nl + QUERY_BLOCK - 1) // QUERY_BLOCK
    ntasks = nb * nh * nqb
    nch = (ns + 1023) // 1024
    sp = (ns + TILE - 1) // TILE * TILE
    dropout = p > ZERO
    counts = np.zeros(ntasks, np.int64)
    for task in prange(ntasks):
        bh = task // nqb
        b, h = bh // nh, bh % nh
        kt = np.zeros(ne * sp, np.float32)
        _transpose(k, bh * ns * ne, ns, ne, kt, sp, 0)
        lanes = np.empty(32 * 16, np.float32)
        vparts = np.empty(16 * ((ne + 1023) // 1024), np.float32)
        sbuf = np.empty(TILE, np.float32)
        ls = np.empty(32, np.float32)
        lo_ = np.empty(32 * nev, np.float32)
        ps = np.empty(nch, np.float32)
        po = np.empty(nev * nch, np.float32)
        bad = 0
        i0 = task % nqb * QUERY_BLOCK
        for i in range(i0, min(i0 + QUERY_BLOCK, nl)):
            qo = (bh * nl + i) * ne
            # pass 1: the row max over the taking part (exact; NaN if one score is NaN)
            mx = NEG_INF
            nan = False
            anyp = False
            nsi = min(ns, i + 1) if causal else ns  # causal keys past i take no part
            for jb in range(0, nsi, block_k):
                j1 = min(jb + block_k, ns)
                for g in range(jb - jb % TILE, j1, TILE):
                    vstore(sbuf, 0, _dots16(q, qo, ne, kt, sp, g, lanes, vparts))
                    for jj in range(TILE):
                        j = g + jj
                        if j < jb or j >= j1:
                            continue
                        m1, m2 = _mask_at(mb, madd, kind, ms, b, h, i, j)
                        if not _takes_part(causal, kind, m1, i, j):
                            continue
                        s = _score_elem(sbuf[jj], scale, kind, m2)
                        anyp = True
                        nan |= s != s  # noqa: PLR0124 (NaN test)
                        mx = s if s > mx else mx  # noqa: FURB136 (exact, NaN apart)
            so = (bh * nl + i) * 2
            oo = (bh * nl + i) * nev
            if nan:
                mx = np.float32(np.nan)
            if not anyp or mx == NEG_INF:  # an empty row
                stats[so] = NEG_INF
                stats[so + 1] = ZERO
                o[oo:oo + nev] = ZERO
                continue
            # pass 2: e_ij, and the fold states of S_i and o_i[d]
            ls[:] = NEG_ZERO
            lo_[:] = NEG_ZERO
            cur = 0
            for jb in range(0, nsi, block_k):
                j1 = min(jb + block_k, ns)
                for g in range(jb - jb % TILE, j1, TILE):
                    vstore(sbuf, 0, _dots16(q, qo, ne, kt, sp, g, lanes, vparts))
                    for jj in range(TILE):
                        j = g + jj
                        if j < jb or j >= j1:
                            continue
                        m1, m2 = _mask_at(mb, madd, kind, ms, b, h, i, j)
                        if not _takes_part(causal, kind, m1, i, j):
                            continue
                        while cur < j // 1024:
                            _close(ls, 1, ps, cur, nch)
                            _close(lo_, nev, po, cur, nch)
                            cur += 1
                        s = _score_elem(sbuf[jj], scale, kind, m2)
                        d = s - mx
                        e, ok = _exp_any(d)
                        bad += not ok
                        lane = j & 31
                        ls[lane] = ls[lane] + e
                        kept = False
                        if dropout:
                            kept = _kept_elem(_word(k0, k1, stream, (bh * nl + i) * ns + j), p)
                        w = _weight_elem(e, kept, keep_scale, dropout)
                        _axpy_lane(lo_, lane * nev, w, v, (bh * ns + j) * nev, nev)
            while cur < nch:
                _close(ls, 1, ps, cur, nch)
                _close(lo_, nev, po, cur, nch)
                cur += 1
            big_s = _pairwise(ps, 0, nch, 1)
            stats[so] = mx
            stats[so + 1] = big_s
            for x in range(nev):
                o[oo + x] = _pairwise(po, x * nch, nch, 1) / big_s
        counts[task] = bad
    return _mark(counts, nb * nh, nqb, status)


# -- backward -----------------------------------------------------------------------------------

@njit(int64(IN1, IN1, IN1, IN1, IN1, IN1, MB, IN1, int64, MS, boolean, float32, float32, float32,
            uint64, uint64, uint64, int64, int64, int64, int64, int64, int64, int64, F1, F1),
      parallel=True, **_STRICT)
def _backward_kv(do, q, k, v, o, stats, mb, madd, kind, ms, causal, scale, p, keep_scale, k0, k1,
                 stream, nb, nh, nl, ns, ne, nev, block_k, dk, dv):
    """dK, dV: tasks of (b, h, key block), 16 keys at a time, every query row in ascending order."""
    nkb = (ns + block_k - 1) // block_k
    ntasks = nb * nh * nkb
    nch = (nl + 1023) // 1024
    dropout = p > ZERO
    counts = np.zeros(ntasks, np.int64)
    for task in prange(ntasks):
        bh = task // nkb
        b, h = bh // nh, bh % nh
        kt = np.zeros(ne * TILE, np.float32)
        vt = np.zeros(nev * TILE, np.float32)
        lanes = np.empty(32 * 16, np.float32)
        vparts = np.empty(16 * ((max(ne, nev) + 1023) // 1024), np.float32)
        sbuf = np.empty(TILE, np.float32)
        pbuf = np.empty(TILE, np.float32)
        acc = np.empty(32, np.float32)
        dparts = np.empty((nev + 1023) // 1024, np.float32)
        lk = np.empty(32 * TILE * ne, np.float32)
        lv = np.empty(32 * TILE * nev, np.float32)
        pk = np.empty(TILE * ne * nch, np.float32)
        pv = np.empty(TILE * nev * nch, np.float32)
        anyk = np.zeros(TILE, np.bool_)
        bad = 0
        jb = task % nkb * block_k
        j1 = min(jb + block_k, ns)
        for g in range(jb, j1, TILE):
            nk = min(TILE, j1 - g)
            _transpose(k, (bh * ns + g) * ne, nk, ne, kt, TILE, 0)
            _transpose(v, (bh * ns + g) * nev, nk, nev, vt, TILE, 0)
            lk[:] = NEG_ZERO
            lv[:] = NEG_ZERO
            anyk[:] = False
            cur = 0
            for i in range(g if causal else 0, nl):  # causal rows before the tile see none of it
                so = (bh * nl + i) * 2
                mx = stats[so]
                if mx == NEG_INF:  # an empty row adds nothing
                    continue
                big_s = stats[so + 1]
                qo = (bh * nl + i) * ne
                oo = (bh * nl + i) * nev
                vstore(sbuf, 0, _dots16(q, qo, ne, kt, TILE, 0, lanes, vparts))
                vstore(pbuf, 0, _dots16(do, oo, nev, vt, TILE, 0, lanes, vparts))
                d_i = _dot(do, oo, o, oo, nev, acc, dparts)
                while cur < i // 1024:
                    _close(lk, TILE * ne, pk, cur, nch)
                    _close(lv, TILE * nev, pv, cur, nch)
                    cur += 1
                lane = i & 31
                for jj in range(nk):
                    j = g + jj
                    m1, m2 = _mask_at(mb, madd, kind, ms, b, h, i, j)
                    if not _takes_part(causal, kind, m1, i, j):
                        continue
                    s = _score_elem(sbuf[jj], scale, kind, m2)
                    dd = s - mx
                    e, ok = _exp_any(dd)
                    bad += not ok
                    kept = False
                    if dropout:
                        kept = _kept_elem(_word(k0, k1, stream, (bh * nl + i) * ns + j), p)
                    pd, ds = _grad_elem(e, big_s, pbuf[jj], d_i, kept, keep_scale, dropout)
                    anyk[jj] = True
                    _axpy_lane(lk, (lane * TILE + jj) * ne, ds, q, qo, ne)
                    _axpy_lane(lv, (lane * TILE + jj) * nev, pd, do, oo, nev)
            while cur < nch:
                _close(lk, TILE * ne, pk, cur, nch)
                _close(lv, TILE * nev, pv, cur, nch)
                cur += 1
            for jj in range(nk):
                ko = (bh * ns + g + jj) * ne
                vo = (bh * ns + g + jj) * nev
                for x in range(ne):
                    f = _pairwise(pk, (jj * ne + x) * nch, nch, 1) if anyk[jj] else ZERO
                    dk[ko + x] = scale * f
                for x in range(nev):
                    dv[vo + x] = _pairwise(pv, (jj * nev + x) * nch, nch, 1) if anyk[jj] else ZERO
        counts[task] = bad
    return counts.sum()  # integers: the order cannot matter


@njit(int64(IN1, IN1, IN1, IN1, IN1, IN1, MB, IN1, int64, MS, boolean, float32, float32, float32,
            uint64, uint64, uint64, int64, int64, int64, int64, int64, int64, int64, int64, F1, S1),
      parallel=True, **_STRICT)
def _backward_q(do, q, k, v, o, stats, mb, madd, kind, ms, causal, scale, p, keep_scale, k0, k1,
                stream, nb, nh, nl, ns, ne, nev, block_q, block_k, dq, heads):
    """dQ: tasks of (b, h, query block); each row's fold over j carried across the key blocks."""
    nqb = (nl + block_q - 1) // block_q
    ntasks = nb * nh * nqb
    nch = (ns + 1023) // 1024
    sp = (ns + TILE - 1) // TILE * TILE
    dropout = p > ZERO
    counts = np.zeros(ntasks, np.int64)
    for task in prange(ntasks):
        bh = task // nqb
        b, h = bh // nh, bh % nh
        kt = np.zeros(ne * sp, np.float32)
        vt = np.zeros(nev * sp, np.float32)
        _transpose(k, bh * ns * ne, ns, ne, kt, sp, 0)
        _transpose(v, bh * ns * nev, ns, nev, vt, sp, 0)
        lanes = np.empty(32 * 16, np.float32)
        vparts = np.empty(16 * ((max(ne, nev) + 1023) // 1024), np.float32)
        sbuf = np.empty(TILE, np.float32)
        pbuf = np.empty(TILE, np.float32)
        acc = np.empty(32, np.float32)
        dparts = np.empty((nev + 1023) // 1024, np.float32)
        lq = np.empty(32 * ne, np.float32)
        pq = np.empty(ne * nch, np.float32)
        bad = 0
        i0 = task % nqb * block_q
        for i in range(i0, min(i0 + block_q, nl)):
            so = (bh * nl + i) * 2
            qo = (bh * nl + i) * ne
            oo = (bh * nl + i) * nev
            mx = stats[so]
            if mx == NEG_INF:
                for x in range(ne):
                    dq[qo + x] = scale * ZERO
                continue
            big_s = stats[so + 1]
            d_i = _dot(do, oo, o, oo, nev, acc, dparts)
            lq[:] = NEG_ZERO
            anyq = False
            cur = 0
            nsi = min(ns, i + 1) if causal else ns
            for jb in range(0, nsi, block_k):
                j1 = min(jb + block_k, ns)
                for g in range(jb - jb % TILE, j1, TILE):
                    vstore(sbuf, 0, _dots16(q, qo, ne, kt, sp, g, lanes, vparts))
                    vstore(pbuf, 0, _dots16(do, oo, nev, vt, sp, g, lanes, vparts))
                    for jj in range(TILE):
                        j = g + jj
                        if j < jb or j >= j1:
                            continue
                        m1, m2 = _mask_at(mb, madd, kind, ms, b, h, i, j)
                        if not _takes_part(causal, kind, m1, i, j):
                            continue
                        while cur < j // 1024:
                            _close(lq, ne, pq, cur, nch)
                            cur += 1
                        s = _score_elem(sbuf[jj], scale, kind, m2)
                        dd = s - mx
                        e, ok = _exp_any(dd)
                        bad += not ok
                        kept = False
                        if dropout:
                            kept = _kept_elem(_word(k0, k1, stream, (bh * nl + i) * ns + j), p)
                        _, ds = _grad_elem(e, big_s, pbuf[jj], d_i, kept, keep_scale, dropout)
                        anyq = True
                        _axpy_lane(lq, (j & 31) * ne, ds, k, (bh * ns + j) * ne, ne)
            while cur < nch:
                _close(lq, ne, pq, cur, nch)
                cur += 1
            for x in range(ne):
                f = _pairwise(pq, x * nch, nch, 1) if anyq else ZERO
                dq[qo + x] = scale * f
        counts[task] = bad
    for bh in range(nb * nh):
        for t in range(bh * nqb, bh * nqb + nqb):
            if counts[t]:
                heads[bh] = 1
    return counts.sum()


# -- host side ----------------------------------------------------------------------------------

def _args(mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p, keep_scale, k0, k1,
          stream):
    return (np.ascontiguousarray(mask_bool, np.uint8).reshape(-1),
            np.ascontiguousarray(mask_add, np.float32).reshape(-1), int(mask_kind),
            np.ascontiguousarray(mask_strides, np.int64).reshape(-1), bool(causal),
            np.float32(scale), np.float32(p), np.float32(keep_scale), np.uint64(k0),
            np.uint64(k1), np.uint64(stream))


def forward(q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p, keep_scale,
            k0, k1, stream, block_k, o, stats, status) -> int:
    """The interface's attention_forward (mojolike.core.interfaces.transformer)."""
    nb, nh, nl, ne = q.shape
    ns, nev = v.shape[2], v.shape[3]
    return int(_forward(q.reshape(-1), k.reshape(-1), v.reshape(-1),
                        *_args(mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p,
                               keep_scale, k0, k1, stream),
                        nb, nh, nl, ns, ne, nev, max(1, int(block_k)), o.reshape(-1),
                        stats.reshape(-1), status.reshape(-1)))


def backward(do, q, k, v, o, stats, mask_bool, mask_add, mask_kind, mask_strides, causal, scale,
             p, keep_scale, k0, k1, stream, block_q, block_k, dq, dk, dv, status) -> int:
    """The interface's attention_backward: the dK/dV pass, then the dQ pass."""
    nb, nh, nl, ne = q.shape
    ns, nev = v.shape[2], v.shape[3]
    extra = _args(mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p, keep_scale, k0,
                  k1, stream)
    flat = (do.reshape(-1), q.reshape(-1), k.reshape(-1), v.reshape(-1), o.reshape(-1),
            stats.reshape(-1))
    heads = np.zeros(nb * nh, np.int32)
    # the dQ pass meets every (i, j) pair the dK/dV pass does, with the same expf: its marks
    # name the heads of both
    _backward_kv(*flat, *extra, nb, nh, nl, ns, ne, nev, max(1, int(block_k)), dk.reshape(-1),
                 dv.reshape(-1))
    _backward_q(*flat, *extra, nb, nh, nl, ns, ne, nev, max(1, int(block_q)), max(1, int(block_k)),
                dq.reshape(-1), heads)
    st = status.reshape(-1)
    st[:] = heads
    return int(heads.sum())
