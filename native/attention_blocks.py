"""Vector pieces of the fused attention kernels (native/attention.py, native/attention_backward.py)
with their fold lanes held in registers: the tiles' dot products and expf, and the row-wise
weighted sums (the forward's o_i, the backward's dQ_i).

A row's fold over keys j of w_j * t_j[x] (t: the transposed tiles, 16 keys along a row) keeps
32 lanes, lane j mod 32, closed by the butterfly at each 1024-key chunk. Tile g holds lanes
0-15 (g mod 32 = 0) or 16-31, so for one coordinate x the whole chunk's state is two vectors:
`row_sums` walks the coordinates four at a time and, for each, the chunk's tiles in ascending
j, keeping those eight vectors in registers instead of loading and storing the 32 x width lane
array at every tile. The terms and their order in each lane are the contract's (clause 13's
o_i[d], clause 15's dQ_i[e]); only the loop nest differs.

`dots32` makes the 16 dot products of a tile of keys with their 32 lanes in registers.
`row_sums2` makes two rows' folds over one t, loading each vector of t once for both (the
row kernels are bound by streaming t). `vexp_tile` is the tiles' expf (native/vexp.py).

A position that does not take part adds -0.0 to its lane (`vkeep` selects the product, never
the weight: -0.0 * v would be +-0 or NaN), so a tile with any such key is masked by its flags.

Reproducibility: the same additions in the same order as the scalar fold of contracts/fold.md,
whatever the coordinate grouping.

>>> import numpy as np
>>> w = np.ones(16, np.float32); t = np.arange(16, dtype=np.float32)
>>> parts = np.empty(1, np.float32)
>>> row_sums(w, w, np.ones(1, np.bool_), t, 0, 1, 16, 1, parts); parts.tolist()
[120.0]
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core.extending import intrinsic

from .fold import NEG_ZERO
from .simd import vadd, vall, vbutterfly, veq, vload, vmul, vor, vsplat
from .simd import vec as _vec
from .vexp import vexp_any

_jit = njit(inline="always", error_model="numpy")
TILE = 16
ZERO = np.float32(0.0)
_V = ir.VectorType(ir.FloatType(), TILE)


@intrinsic
def vkeep(typingctx, flags, a):
    """Lane by lane a where flags is nonzero, else -0.0 (a select: exact, the fold's identity)."""
    if flags != _vec or a != _vec:
        return None

    def codegen(context, builder, sig, args):
        on = builder.fcmp_unordered("!=", args[0], ir.Constant(_V, [0.0] * TILE))
        return builder.select(on, args[1], ir.Constant(_V, [-0.0] * TILE))
    return _vec(flags, a), codegen


@intrinsic
def vmax_nan(typingctx, m, s):
    """Lane by lane the running max of m and s, NaN once either is NaN (m stays NaN): the
    contract's exact max, whichever +-0 it keeps."""
    if m != _vec or s != _vec:
        return None

    def codegen(context, builder, sig, args):
        m_nan = builder.fcmp_unordered("uno", args[0], args[0])
        take = builder.and_(builder.fcmp_unordered("ugt", args[1], args[0]), builder.not_(m_nan))
        return builder.select(take, args[1], args[0])
    return _vec(m, s), codegen


@_jit
def _lanes8(x, xo, n, t, ld, col, l0):
    """Lanes l0 .. l0 + 7 of the fold over e < n (n a multiple of 32, at most 1024) of
    x[xo + e] * t[e * ld + col + k], 16 k at once: one loop over the rows of 32 whose body is
    the eight lanes' terms (no loop per lane)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = vsplat(NEG_ZERO)
    for r in range(l0, n, 32):
        a0 = vadd(a0, vmul(vsplat(x[xo + r]), vload(t, r * ld + col)))
        a1 = vadd(a1, vmul(vsplat(x[xo + r + 1]), vload(t, (r + 1) * ld + col)))
        a2 = vadd(a2, vmul(vsplat(x[xo + r + 2]), vload(t, (r + 2) * ld + col)))
        a3 = vadd(a3, vmul(vsplat(x[xo + r + 3]), vload(t, (r + 3) * ld + col)))
        a4 = vadd(a4, vmul(vsplat(x[xo + r + 4]), vload(t, (r + 4) * ld + col)))
        a5 = vadd(a5, vmul(vsplat(x[xo + r + 5]), vload(t, (r + 5) * ld + col)))
        a6 = vadd(a6, vmul(vsplat(x[xo + r + 6]), vload(t, (r + 6) * ld + col)))
        a7 = vadd(a7, vmul(vsplat(x[xo + r + 7]), vload(t, (r + 7) * ld + col)))
    return a0, a1, a2, a3, a4, a5, a6, a7


@_jit
def dots32(x, xo, n, t, ld, col):
    """native/attention.py's `tile_dots` for n a multiple of 32 up to 1024, in registers:
    lanes 0-7 and 16-23 make level 16's lanes 0-7, lanes 8-15 and 24-31 its lanes 8-15, then
    levels 8, 4, 2, 1 (each addition a[l] + a[l + off], operands in the tree's order)."""
    p0, p1, p2, p3, p4, p5, p6, p7 = _lanes8(x, xo, n, t, ld, col, 0)
    r0, r1, r2, r3, r4, r5, r6, r7 = _lanes8(x, xo, n, t, ld, col, 16)
    p0, p1, p2, p3 = vadd(p0, r0), vadd(p1, r1), vadd(p2, r2), vadd(p3, r3)
    p4, p5, p6, p7 = vadd(p4, r4), vadd(p5, r5), vadd(p6, r6), vadd(p7, r7)
    q0, q1, q2, q3, q4, q5, q6, q7 = _lanes8(x, xo, n, t, ld, col, 8)
    r0, r1, r2, r3, r4, r5, r6, r7 = _lanes8(x, xo, n, t, ld, col, 24)
    q0, q1, q2, q3 = vadd(q0, r0), vadd(q1, r1), vadd(q2, r2), vadd(q3, r3)
    q4, q5, q6, q7 = vadd(q4, r4), vadd(q5, r5), vadd(q6, r6), vadd(q7, r7)
    p0, p1, p2, p3 = vadd(p0, q0), vadd(p1, q1), vadd(p2, q2), vadd(p3, q3)  # level 8
    p4, p5, p6, p7 = vadd(p4, q4), vadd(p5, q5), vadd(p6, q6), vadd(p7, q7)
    p0, p1, p2, p3 = vadd(p0, p4), vadd(p1, p5), vadd(p2, p6), vadd(p3, p7)  # level 4
    p0, p1 = vadd(p0, p2), vadd(p1, p3)  # level 2
    return vadd(p0, p1)


@_jit
def vexp_tile(d, f):
    """(e, undecided): e = expf(d) lane by lane (native/vexp.py, exp_any's bits), and whether a
    lane whose flag in f is nonzero (takes part) left its value undecided."""
    e, ok = vexp_any(d)
    return e, not vall(vor(ok, veq(f, vsplat(ZERO))))


@_jit
def _mac(acc, w, tv, f, whole):
    """acc + w * tv (the product masked by f unless the tile is whole)."""
    p = vmul(w, tv)
    return vadd(acc, p) if whole else vadd(acc, vkeep(f, p))


@_jit
def _term(acc, w, t, at, f, whole):
    """acc + w * t[at..]: `_mac` on the loaded vector."""
    return _mac(acc, w, vload(t, at), f, whole)


@_jit
def _tile2(acc, t, at, w0, f0, wh0, w1, f1, wh1, g):
    """acc = (row 0 at coordinates x, x + 1; row 1 at the same) plus tile g's terms, the two
    vectors of t at `at` loaded once for both rows."""
    a0, a1, a2, a3 = acc
    t0, t1 = vload(t, at), vload(t, at + TILE)
    u, fu, whu = vload(w0, g), vload(f0, g), wh0[g // TILE]
    v, fv, whv = vload(w1, g), vload(f1, g), wh1[g // TILE]
    return (_mac(a0, u, t0, fu, whu), _mac(a1, u, t1, fu, whu), _mac(a2, v, t0, fv, whv),
            _mac(a3, v, t1, fv, whv))


@_jit
def _tile1(acc, t, at, w0, f0, wh0, w1, f1, wh1, g):
    """`_tile2` for one coordinate: acc = (row 0, row 1)."""
    a0, a2 = acc
    t0 = vload(t, at)
    return (_mac(a0, vload(w0, g), t0, vload(f0, g), wh0[g // TILE]),
            _mac(a2, vload(w1, g), t0, vload(f1, g), wh1[g // TILE]))


@_jit
def row_sums(w, f, whole, t, to, width, n, nch, parts):
    """parts[x * nch + c] = chunk c's partial of fold_j w[j] * t[to + j * width + x * 16 + ...]
    over the row's first n keys (later keys and chunks: -0.0), for x < width; f holds each key's
    flag (1.0 takes part), whole[g // 16] says every key of tile g does."""
    for c in range(nch):
        g0 = c * 1024
        g1 = min(g0 + 1024, n)
        x = 0
        while x + 4 <= width:
            a0 = a1 = a2 = a3 = vsplat(NEG_ZERO)
            b0 = b1 = b2 = b3 = vsplat(NEG_ZERO)
            for g in range(g0, g1, 2 * TILE):
                wv, fv, wh = vload(w, g), vload(f, g), whole[g // TILE]
                at = to + g * width + x * TILE
                a0 = _term(a0, wv, t, at, fv, wh)
                a1 = _term(a1, wv, t, at + TILE, fv, wh)
                a2 = _term(a2, wv, t, at + 2 * TILE, fv, wh)
                a3 = _term(a3, wv, t, at + 3 * TILE, fv, wh)
                h = g + TILE
                if h < g1:
                    wv, fv, wh = vload(w, h), vload(f, h), whole[h // TILE]
                    at = to + h * width + x * TILE
                    b0 = _term(b0, wv, t, at, fv, wh)
                    b1 = _term(b1, wv, t, at + TILE, fv, wh)
                    b2 = _term(b2, wv, t, at + 2 * TILE, fv, wh)
                    b3 = _term(b3, wv, t, at + 3 * TILE, fv, wh)
            parts[x * nch + c] = vbutterfly(a0, b0)
            parts[(x + 1) * nch + c] = vbutterfly(a1, b1)
            parts[(x + 2) * nch + c] = vbutterfly(a2, b2)
            parts[(x + 3) * nch + c] = vbutterfly(a3, b3)
            x += 4
        while x < width:
            a0 = b0 = vsplat(NEG_ZERO)
            for g in range(g0, g1, 2 * TILE):
                a0 = _term(a0, vload(w, g), t, to + g * width + x * TILE, vload(f, g),
                           whole[g // TILE])
                h = g + TILE
                if h < g1:
                    b0 = _term(b0, vload(w, h), t, to + h * width + x * TILE, vload(f, h),
                               whole[h // TILE])
            parts[x * nch + c] = vbutterfly(a0, b0)
            x += 1


@_jit
def row_sums2(w0, f0, wh0, w1, f1, wh1, t, to, width, n, nch, parts0, parts1):
    """`row_sums` of two rows over one t (each row's w, f, whole and parts), n the longer row's
    key count (the other's flags 0.0 past its own): each vector of t is loaded once for both
    rows, which halves the stream of t, the kernels' bound. Every lane's terms and order are
    the two `row_sums` calls'."""
    for c in range(nch):
        g0 = c * 1024
        g1 = min(g0 + 1024, n)
        x = 0
        while x + 2 <= width:
            z = vsplat(NEG_ZERO)
            a = (z, z, z, z)  # lanes 0-15 of row 0 at x, x + 1 and of row 1 at x, x + 1
            b = a  # their lanes 16-31
            for g in range(g0, g1, 2 * TILE):
                a = _tile2(a, t, to + g * width + x * TILE, w0, f0, wh0, w1, f1, wh1, g)
                h = g + TILE
                if h < g1:
                    b = _tile2(b, t, to + h * width + x * TILE, w0, f0, wh0, w1, f1, wh1, h)
            parts0[x * nch + c] = vbutterfly(a[0], b[0])
            parts0[(x + 1) * nch + c] = vbutterfly(a[1], b[1])
            parts1[x * nch + c] = vbutterfly(a[2], b[2])
            parts1[(x + 1) * nch + c] = vbutterfly(a[3], b[3])
            x += 2
        while x < width:
            z = vsplat(NEG_ZERO)
            a1, b1 = (z, z), (z, z)
            for g in range(g0, g1, 2 * TILE):
                a1 = _tile1(a1, t, to + g * width + x * TILE, w0, f0, wh0, w1, f1, wh1, g)
                h = g + TILE
                if h < g1:
                    b1 = _tile1(b1, t, to + h * width + x * TILE, w0, f0, wh0, w1, f1, wh1, h)
            parts0[x * nch + c] = vbutterfly(a1[0], b1[0])
            parts1[x * nch + c] = vbutterfly(a1[1], b1[1])
            x += 1


@_jit
def row_total(e, f, whole, n, nch, parts):
    """parts[c] = chunk c's partial of fold_j e[j] over the row's first n keys (the rest -0.0)."""
    for c in range(nch):
        g0 = c * 1024
        g1 = min(g0 + 1024, n)
        lo = hi = vsplat(NEG_ZERO)
        for g in range(g0, g1, 2 * TILE):
            ev = vload(e, g)
            lo = vadd(lo, ev) if whole[g // TILE] else vadd(lo, vkeep(vload(f, g), ev))
            h = g + TILE
            if h < g1:
                ev = vload(e, h)
                hi = vadd(hi, ev) if whole[h // TILE] else vadd(hi, vkeep(vload(f, h), ev))
        parts[c] = vbutterfly(lo, hi)

