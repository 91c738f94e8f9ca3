"""numba CPU kernels for the fused scaled-dot-product attention forward (contracts/transformer.md
clauses 10-13), the per-element source the backends share, and the vector pieces the backward
(native/attention_backward.py) uses; native/transformer.py calls both.

The host transposes each head's keys and values once (E x S and Ev x S, keys along a row), so
that 16 keys' dot products are one vector per coordinate. Forward, parallel over tasks of
(b, h, QUERY_BLOCK rows), per query row and tile of 16 keys:

1. the scores s_ij = scale * dot(q_i, k_j) (+ m_ij) as one vector, kept for the row (S floats),
   and the row max over the taking part (exact, first of equals kept; NaN if one score is NaN);
2. per tile, d = s - mx_i, e = expf(d) for the 16 keys (native/vexp.py's 16-lane expf, the
   scalar exp_any's bits), and the fold state of S_i and of every o_i[d]: 32 lane accumulators
   indexed by j mod 32 (a tile is one half of them), closed at each 1024-key chunk by the
   butterfly into a chunk partial; the partials meet on the pairwise tree at the end. The o
   folds of two rows are made together (attention_blocks.row_sums2), so that each vector of
   the transposed values is loaded once for both: streaming those is the forward's bound.

Dot products over E keep their 32 lanes in registers (attention_blocks.dots32: eight lanes per
loop over the rows of 32, then the butterfly on registers; native/fold.py's tree, operands in
its order). A
position that does not take part adds nothing (a select gives the lane -0.0, the fold's
identity), so the lane of key j stays j mod 32 and its chunk j // 1024, whatever block_k (keys
are visited in ascending tiles of 16; block_k never reaches a bit). No (L, S) matrix is held:
a task's state is its S scores, two rows' e_ij, flags and (with dropout) w_ij, and one partial
per chunk of each fold.

The retargetable per-element source (plain scalar arguments, one IEEE operation per
statement, primitives add/sub/mul/div by name): `takes_part`, `score_elem`, `kept_elem`,
`weight_elem`, `grad_elem`, `exp_any`; native/cuda compiles them with native/retarget.py. The
vector spellings here make the same operations lane by lane, in the same order.

An undecided expf marks its head in status (1; outputs then unspecified) and the host redoes
the head with the oracle; the kernels return the number of marked heads.

Reproducibility: parallel only over independent outputs (rows for o); every fold's order is the
contract's, whatever the block sizes and thread count.

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
from .attention_blocks import (  # noqa: F401 (vkeep: the backward)
    dots32,
    row_sums,
    row_sums2,
    row_total,
    vexp_tile,
    vkeep,
    vmax_nan,
)
from .crmath import EXP_HUGE, EXP_TINY, _exp_elem
from .fold import NEG_ZERO
from .simd import vadd, vbutterfly, vec, vload, vmul, vsplat, vstore, vsub

_STRICT = {"cache": True, "error_model": "numpy"}  # fastmath off: no contraction, no reassociation
_jit = njit(inline="always", error_model="numpy")
PRIMITIVES = ("add", "sub", "mul", "div")
IN1 = types.Array(float32, 1, "C", readonly=True)
MB = types.Array(uint8, 1, "C", readonly=True)
MS = types.Array(int64, 1, "C", readonly=True)
F1 = float32[::1]
S1 = int32[::1]
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
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

@njit(vec(IN1, int64, int64, IN1, int64, int64, F1, F1), **_STRICT)
def _dots16(x, xo, n, t, ld, col, lanes, parts):
    """16 dot products at once: lane k of the result is fold_e x[xo + e] * t[e * ld + col + k]
    over e < n (t holds 16 columns of vectors transposed: keys along a row). Called, not
    inlined: the kernels' rare path (head sizes not a multiple of 32), compiled once."""
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




# -- vector pieces ------------------------------------------------------------------------------

@_jit
def tile_dots(x, xo, n, t, ld, col, lanes, parts):
    """The 16 dot products of `_dots16`; in registers (attention_blocks.dots32) when n is a
    multiple of 32 up to 1024, the usual head sizes."""
    if n % 32 == 0 and n <= 1024:
        return dots32(x, xo, n, t, ld, col)
    return _dots16(x, xo, n, t, ld, col, lanes, parts)


@_jit
def tile_flags(mb, madd, kind, ms, causal, b, h, i, g, jstart, jend, flags, madds):
    """flags[k] = 1.0 where key g + k (in [jstart, jend)) takes part in row i, else 0.0;
    madds[k] its additive mask entry; returns how many take part."""
    n = 0
    for k in range(TILE):
        j = g + k
        part = False
        m2 = ZERO
        if jstart <= j < jend:
            m1, m2 = _mask_at(mb, madd, kind, ms, b, h, i, j)
            part = _takes_part(causal, kind, m1, i, j)
        flags[k] = ONE if part else ZERO
        madds[k] = m2
        n += part
    return n


@_jit
def tile_keep(k0, k1, stream, p, keep_scale, base, g, jend, cs):
    """cs[k] = c of key g + k at dropout position base + g + k: keep_scale if kept, else 0.0."""
    for k in range(TILE):
        j = g + k
        kept = False
        if j < jend:
            kept = _kept_elem(_word(k0, k1, stream, base + j), p)
        cs[k] = keep_scale if kept else ZERO


@_jit
def vdot(a, ao, b, bo, n, acc, parts):
    """fold of a[ao + e] * b[bo + e] over e < n: rows of 32 as two vectors, a short row's terms
    added to their lanes one by one (each lane's terms in ascending order, as the tree says)."""
    nch = (n + 1023) // 1024
    for c in range(nch):
        base = c * 1024
        end = min(base + 1024, n)
        full = base + (end - base) // 32 * 32
        lo = vsplat(NEG_ZERO)
        hi = vsplat(NEG_ZERO)
        for r in range(base, full, 32):
            lo = vadd(lo, vmul(vload(a, ao + r), vload(b, bo + r)))
            hi = vadd(hi, vmul(vload(a, ao + r + 16), vload(b, bo + r + 16)))
        vstore(acc, 0, lo)
        vstore(acc, 16, hi)
        for e in range(full, end):
            t = a[ao + e] * b[bo + e]
            acc[e - full] = acc[e - full] + t
        parts[c] = vbutterfly(vload(acc, 0), vload(acc, 16))
    return _pairwise(parts, 0, nch, 1)


@_jit
def close_lanes(lanes, width, parts, c, nch):
    """Chunk c's partials of `width` (a multiple of 16) folds whose 32 lanes are
    lanes[l * width + x]: the butterfly for each x into parts[c * width + x], lanes reset."""
    off = 16
    while off >= 1:
        for j in range(off):
            for x in range(0, width, TILE):
                vstore(lanes, j * width + x, vadd(vload(lanes, j * width + x),
                                                  vload(lanes, (j + off) * width + x)))
        off //= 2
    for x in range(0, width, TILE):
        vstore(parts, c * width + x, vload(lanes, x))
    lanes[:32 * width] = NEG_ZERO


def transposed(x, sp):
    """(B, H, N, W) -> (B, H, sp / 16, W, 16): each tile of 16 keys (zero padded to sp) as W
    rows of 16, contiguous, so that a tile's loads stream (host side)."""
    nb, nh, n, w = x.shape
    t = np.zeros((nb, nh, sp, w), np.float32)
    t[:, :, :n] = x
    return np.ascontiguousarray(t.reshape(nb, nh, sp // TILE, TILE, w).swapaxes(3, 4)).reshape(-1)


# -- forward ------------------------------------------------------------------------------------

@njit(int64(IN1, IN1, IN1, MB, IN1, int64, MS, boolean, float32, float32, float32, uint64,
            uint64, uint64, int64, int64, int64, int64, int64, int64, F1, F1, S1),
      parallel=True, **_STRICT)
def _forward(q, kt, vt, mb, madd, kind, ms, causal, scale, p, keep_scale, k0, k1, stream,
             nb, nh, nl, ns, ne, nev, o, stats, status):
    nqb = (nl + QUERY_BLOCK - 1) // QUERY_BLOCK
    ntasks = nb * nh * nqb
    nch = (ns + 1023) // 1024
    sp = (ns + TILE - 1) // TILE * TILE
    dropout = p > ZERO
    counts = np.zeros(ntasks, np.int64)
    for task in prange(ntasks):
        bh = task // nqb
        b, h = bh // nh, bh % nh
        kto, vto = bh * ne * sp, bh * nev * sp
        lanes = np.empty(32 * 16, np.float32)
        vparts = np.empty(16 * ((ne + 1023) // 1024), np.float32)
        srow = np.empty(sp, np.float32)  # the row's scores
        # two rows at a time (their o folds share each load of vt): per row which keys take
        # part (1.0), the tiles whose every key does, e_ij, w_ij = e_ij c_ij, o's partials
        frows = np.empty((2, sp), np.float32)
        wholes = np.empty((2, sp // TILE), np.bool_)
        erows = np.empty((2, sp), np.float32)
        wrows = np.empty((2, sp if dropout else 0), np.float32)
        pos = np.empty((2, nev * nch), np.float32)
        live = np.zeros(2, np.bool_)
        nsr = np.zeros(2, np.int64)
        sums = np.empty(2, np.float32)
        madds = np.empty(TILE, np.float32)
        dbuf = np.empty(TILE, np.float32)
        cs = np.ones(TILE, np.float32)
        ps = np.empty(nch, np.float32)
        bad = 0
        i0 = task % nqb * QUERY_BLOCK
        i1 = min(i0 + QUERY_BLOCK, nl)
        for ia in range(i0, i1, 2):
            for r in range(2):
                i = ia + r
                live[r] = False
                nsr[r] = 0
                if i >= i1:
                    continue
                frow, whole, erow, wrow = frows[r], wholes[r], erows[r], wrows[r]
                qo = (bh * nl + i) * ne
                nsi = min(ns, i + 1) if causal else ns  # causal keys past i take no part
                # pass 1: the scores, and the row max over the taking part
                mx = NEG_INF
                nan = False
                anyp = False
                mv = vsplat(NEG_INF)
                for g in range(0, nsi, TILE):
                    sv = vmul(vsplat(scale), tile_dots(q, qo, ne, kt, TILE, kto + g * ne, lanes,
                                                       vparts))
                    full = kind == 0 and g + TILE <= nsi
                    whole[g // TILE] = full
                    if full:
                        vstore(frow, g, vsplat(ONE))
                    else:
                        tile_flags(mb, madd, kind, ms, causal, b, h, i, g, 0, nsi,
                                   frow[g:g + TILE], madds)
                        if kind == 2:
                            sv = vadd(sv, vload(madds, 0))
                    vstore(srow, g, sv)
                    if full:  # the max of a whole tile's lanes, reduced once per row
                        mv = vmax_nan(mv, sv)
                        anyp = True
                        continue
                    for j in range(g, g + TILE):
                        if frow[j] != ZERO:
                            s = srow[j]
                            anyp = True
                            nan |= s != s  # noqa: PLR0124 (NaN test)
                            mx = s if s > mx else mx  # noqa: FURB136 (exact, NaN apart)
                vstore(dbuf, 0, mv)
                for j in range(TILE):
                    s = dbuf[j]
                    nan |= s != s  # noqa: PLR0124 (NaN test)
                    mx = s if s > mx else mx  # noqa: FURB136 (exact, NaN apart)
                so = (bh * nl + i) * 2
                if nan:
                    mx = np.float32(np.nan)
                if not anyp or mx == NEG_INF:  # an empty row
                    stats[so] = NEG_INF
                    stats[so + 1] = ZERO
                    o[(bh * nl + i) * nev:(bh * nl + i + 1) * nev] = ZERO
                    continue
                # pass 2: e_ij (w_ij with dropout) for the row, and the fold of S_i
                vmx = vsplat(mx)
                for g in range(0, nsi, TILE):
                    ev, undecided = vexp_tile(vsub(vload(srow, g), vmx), vload(frow, g))
                    bad += undecided
                    vstore(erow, g, ev)
                    if dropout:
                        tile_keep(k0, k1, stream, p, keep_scale, (bh * nl + i) * ns, g, nsi, cs)
                        vstore(wrow, g, vmul(ev, vload(cs, 0)))
                row_total(erow, frow, whole, nsi, nch, ps)
                sums[r] = _pairwise(ps, 0, nch, 1)
                stats[so] = mx
                stats[so + 1] = sums[r]
                live[r] = True
                nsr[r] = nsi
            # the folds of o_i[d] over the rows' keys
            ws = wrows if dropout else erows
            if live[0] and live[1]:
                n = max(nsr[0], nsr[1])
                for r in range(2):  # the shorter row's keys up to n take no part
                    for g in range((nsr[r] + TILE - 1) // TILE * TILE, n, TILE):
                        vstore(frows[r], g, vsplat(ZERO))
                        vstore(ws[r], g, vsplat(ZERO))
                        wholes[r, g // TILE] = False
                row_sums2(ws[0], frows[0], wholes[0], ws[1], frows[1], wholes[1], vt, vto, nev,
                          n, nch, pos[0], pos[1])
            else:
                for r in range(2):
                    if live[r]:
                        row_sums(ws[r], frows[r], wholes[r], vt, vto, nev, nsr[r], nch, pos[r])
            for r in range(2):
                if live[r]:
                    oo = (bh * nl + ia + r) * nev
                    for x in range(nev):
                        o[oo + x] = _pairwise(pos[r], x * nch, nch, 1) / sums[r]
        counts[task] = bad
    return _mark(counts, nb * nh, nqb, status)


# -- host side ----------------------------------------------------------------------------------

def flat_args(mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p, keep_scale, k0, k1,
              stream):
    """The mask and dropout arguments as the kernels take them."""
    return (np.ascontiguousarray(mask_bool, np.uint8).reshape(-1),
            np.ascontiguousarray(mask_add, np.float32).reshape(-1), int(mask_kind),
            np.ascontiguousarray(mask_strides, np.int64).reshape(-1), bool(causal),
            np.float32(scale), np.float32(p), np.float32(keep_scale), np.uint64(k0),
            np.uint64(k1), np.uint64(stream))


def padded(ns: int) -> int:
    """The key count rounded up to whole tiles."""
    return (ns + TILE - 1) // TILE * TILE


def forward(q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p, keep_scale,
            k0, k1, stream, block_k, o, stats, status) -> int:
    """The interface's attention_forward (mojolike.core.interfaces.transformer); block_k is
    accepted and never reaches a bit (keys go in tiles of 16)."""
    nb, nh, nl, ne = q.shape
    ns, nev = v.shape[2], v.shape[3]
    sp = padded(ns)
    return int(_forward(q.reshape(-1), transposed(k, sp), transposed(v, sp),
                        *flat_args(mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p,
                                   keep_scale, k0, k1, stream),
                        nb, nh, nl, ns, ne, nev, o.reshape(-1), stats.reshape(-1),
                        status.reshape(-1)))


