"""Row-wise weighted sums of the fused attention kernels (native/attention.py's forward o_i and
native/attention_backward.py's dQ_i) with their fold lanes held in registers.

A row's fold over keys j of w_j * t_j[x] (t: the transposed tiles, 16 keys along a row) keeps
32 lanes, lane j mod 32, closed by the butterfly at each 1024-key chunk. Tile g holds lanes
0-15 (g mod 32 = 0) or 16-31, so for one coordinate x the whole chunk's state is two vectors:
`row_sums` walks the coordinates four at a time and, for each, the chunk's tiles in ascending
j, keeping those eight vectors in registers instead of loading and storing the 32 x width lane
array at every tile. The terms and their order in each lane are the contract's (clause 13's
o_i[d], clause 15's dQ_i[e]); only the loop nest differs.

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

from llvmlite import ir
from numba import njit
from numba.core.extending import intrinsic

from .fold import NEG_ZERO
from .simd import vadd, vbutterfly, vload, vmul, vsplat
from .simd import vec as _vec

_jit = njit(inline="always", error_model="numpy")
TILE = 16
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
def _term(acc, w, t, at, f, whole):
    """acc + w * t[at..] (the product masked by f unless the tile is whole)."""
    p = vmul(w, vload(t, at))
    return vadd(acc, p) if whole else vadd(acc, vkeep(f, p))


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

