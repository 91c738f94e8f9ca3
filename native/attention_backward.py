"""numba CPU kernels for the fused attention backward (contracts/transformer.md clauses 14-15),
from the forward's o and stats (mx_i, S_i); called by native/transformer.py.

Three passes over the head, on the transposed keys and values the forward uses
(native/attention.py, E x S and Ev x S):

- D_i = dot(do_i, o_i) over Ev, once per row (parallel over rows);
- dK and dV, parallel over (b, h, key block of block_k keys): per tile of 16 keys, the 16 keys
  as one vector, each key's folds over i carry their 32 lanes (lane i mod 32, chunk i // 1024)
  as lanes[(lane * E + e) * 16 + key]; per chunk the rows are visited lane by lane, each
  lane's rows in ascending i (the order its fold adds them; lanes are independent), so the
  lane being filled stays in L1;
- dQ, parallel over (b, h, query block of block_q rows): per row, its fold over j carried
  across the tiles of 16 keys in ascending j, a tile being one half of the 32 lanes.

Both recompute s, e = expf(s - mx_i), p = e / S_i, dP = dot(do_i, v_j) (* c_ij) and
dS = p (dP - D_i) exactly as oracles/attention.py's head_backward and native/attention.py's
`grad_elem`, lane by lane; a position that does not take part adds -0.0 (a select), which
changes no lane. An output none of whose terms takes part is +0.0 (times the scale for dK,
dQ), as fold over no term is.

The dQ pass meets every (i, j) pair the dK/dV pass does, with the same expf: its marks name
the heads of both; the kernels return the number of marked heads.

Caching: these kernels inline native/attention.py's pieces, and numba's cache=True checks only
this file: after editing that one, clear the numba cache (__pycache__/*.nbi, *.nbc).

Reproducibility: parallel only over independent outputs (keys for dK and dV, rows for dQ);
every fold's order is the contract's, whatever block_q, block_k and the thread count.

>>> import numpy as np
>>> from mojolike.native.attention import NO_MASK_ADD, NO_MASK_BOOL, forward
>>> q = np.float32([1, 0]).reshape(1, 1, 1, 2); k = np.float32([1, 0, 0, 1]).reshape(1, 1, 2, 2)
>>> v = np.float32([1, 3]).reshape(1, 1, 2, 1)
>>> o, stats, st = np.empty((1, 1, 1, 1), np.float32), np.empty((1, 1, 1, 2), np.float32), np.empty((1, 1), np.int32)
>>> args = (NO_MASK_BOOL, NO_MASK_ADD, 0, np.zeros(4, np.int64), False, 0.0, 0.0, 1.0, 0, 0, 0)
>>> forward(q, k, v, *args, 16, o, stats, st)
0
>>> dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
>>> backward(np.ones_like(o), q, k, v, o, stats, *args, 16, 16, dq, dk, dv, st), dv.ravel().tolist()
(0, [0.5, 0.5])
"""
from __future__ import annotations

import numpy as np
from numba import boolean, float32, int64, njit, prange, uint64, void

from .attention import (
    _STRICT,
    F1,
    IN1,
    MB,
    MS,
    NEG_INF,
    NEG_ZERO,
    ONE,
    S1,
    TILE,
    ZERO,
    _pairwise,
    close_lanes,
    flat_args,
    padded,
    tile_dots,
    tile_flags,
    tile_keep,
    transposed,
    vdot,
    vkeep,
)
from .attention_blocks import row_sums, vexp_tile
from .simd import vadd, vdiv, vload, vmul, vsplat, vstore, vsub


@njit(void(IN1, IN1, int64, int64, F1), parallel=True, **_STRICT)
def _row_dots(do, o, rows, nev, d):
    """d[r] = dot(do_r, o_r) over Ev: D_i of every row of every head."""
    for t in prange((rows + 63) // 64):
        acc = np.empty(32, np.float32)
        parts = np.empty((nev + 1023) // 1024, np.float32)
        for r in range(t * 64, min(t * 64 + 64, rows)):
            d[r] = vdot(do, r * nev, o, r * nev, nev, acc, parts)


@njit(int64(IN1, IN1, IN1, IN1, IN1, IN1, MB, IN1, int64, MS, boolean, float32, float32,
            float32, uint64, uint64, uint64, int64, int64, int64, int64, int64, int64, int64,
            F1, F1), parallel=True, **_STRICT)
def _backward_kv(do, q, kt, vt, stats, dd, mb, madd, kind, ms, causal, scale, p, keep_scale, k0,
                 k1, stream, nb, nh, nl, ns, ne, nev, block_k, dk, dv):
    """dK, dV: tasks of (b, h, key block), 16 keys at a time, every query row in ascending order."""
    nkb = (ns + block_k - 1) // block_k
    ntasks = nb * nh * nkb
    nch = (nl + 1023) // 1024
    sp = (ns + TILE - 1) // TILE * TILE
    wk, wv = ne * TILE, nev * TILE
    dropout = p > ZERO
    counts = np.zeros(ntasks, np.int64)
    for task in prange(ntasks):
        bh = task // nkb
        b, h = bh // nh, bh % nh
        kto, vto = bh * ne * sp, bh * nev * sp
        lanes = np.empty(32 * 16, np.float32)
        vparts = np.empty(16 * ((max(ne, nev) + 1023) // 1024), np.float32)
        flags = np.empty(TILE, np.float32)
        madds = np.empty(TILE, np.float32)
        cs = np.ones(TILE, np.float32)
        anyk = np.empty(TILE, np.float32)
        lk = np.empty(32 * wk, np.float32)  # lk[(lane * E + e) * 16 + key]
        lv = np.empty(32 * wv, np.float32)
        pk = np.empty(nch * wk, np.float32)
        pv = np.empty(nch * wv, np.float32)
        bad = 0
        jb = task % nkb * block_k
        j1 = min(jb + block_k, ns)
        for g in range(jb - jb % TILE, j1, TILE):  # whole tiles: keys outside the block take no part
            lk[:] = NEG_ZERO
            lv[:] = NEG_ZERO
            anyk[:] = ZERO
            i_first = max(g, jb) if causal else 0  # causal rows before see none of it
            for c in range(nch):
                # lane by lane (each lane's rows ascending, as its fold says): the lane's
                # 32 x (E + Ev) accumulators stay in L1 while its rows are added
                lo, hi = max(c * 1024, i_first), min(c * 1024 + 1024, nl)
                for lane in range(32):
                    for i in range(lo + (lane - lo) % 32, hi, 32):
                        so = (bh * nl + i) * 2
                        mx = stats[so]
                        if mx == NEG_INF:  # an empty row adds nothing
                            continue
                        big_s = stats[so + 1]
                        qo = (bh * nl + i) * ne
                        oo = (bh * nl + i) * nev
                        sv = vmul(vsplat(scale), tile_dots(q, qo, ne, kt, TILE, kto + g * ne,
                                                           lanes, vparts))
                        whole = (kind == 0 and g >= jb and g + TILE <= j1
                                 and not (causal and g + TILE - 1 > i))
                        if whole:
                            flags[:] = ONE
                        else:
                            if tile_flags(mb, madd, kind, ms, causal, b, h, i, g, jb, j1, flags,
                                          madds) == 0:
                                continue
                            if kind == 2:
                                sv = vadd(sv, vload(madds, 0))
                        ev, undecided = vexp_tile(vsub(sv, vsplat(mx)), vload(flags, 0))
                        bad += undecided
                        pdot = tile_dots(do, oo, nev, vt, TILE, vto + g * nev, lanes, vparts)
                        pv_ = vdiv(ev, vsplat(big_s))  # grad_elem, lane by lane
                        if dropout:
                            tile_keep(k0, k1, stream, p, keep_scale, (bh * nl + i) * ns, g, j1, cs)
                            cv = vload(cs, 0)
                            pd = vmul(pv_, cv)
                            dp = vmul(pdot, cv)
                        else:
                            pd = pv_
                            dp = pdot
                        ds = vmul(pv_, vsub(dp, vsplat(dd[bh * nl + i])))
                        if whole:
                            for x in range(ne):
                                at = lane * wk + x * TILE
                                vstore(lk, at, vadd(vload(lk, at), vmul(ds, vsplat(q[qo + x]))))
                            for x in range(nev):
                                at = lane * wv + x * TILE
                                vstore(lv, at, vadd(vload(lv, at), vmul(pd, vsplat(do[oo + x]))))
                            anyk[:] = ONE
                        else:
                            fv = vload(flags, 0)
                            for x in range(ne):
                                at = lane * wk + x * TILE
                                t = vkeep(fv, vmul(ds, vsplat(q[qo + x])))
                                vstore(lk, at, vadd(vload(lk, at), t))
                            for x in range(nev):
                                at = lane * wv + x * TILE
                                t = vkeep(fv, vmul(pd, vsplat(do[oo + x])))
                                vstore(lv, at, vadd(vload(lv, at), t))
                            for k in range(TILE):
                                anyk[k] = ONE if flags[k] != ZERO else anyk[k]
                close_lanes(lk, wk, pk, c, nch)
                close_lanes(lv, wv, pv, c, nch)
            for jj in range(max(jb - g, 0), min(TILE, j1 - g)):
                ko = (bh * ns + g + jj) * ne
                vo = (bh * ns + g + jj) * nev
                for x in range(ne):
                    f = _pairwise(pk, x * TILE + jj, nch, wk) if anyk[jj] != ZERO else ZERO
                    dk[ko + x] = scale * f
                for x in range(nev):
                    f = _pairwise(pv, x * TILE + jj, nch, wv) if anyk[jj] != ZERO else ZERO
                    dv[vo + x] = f
        counts[task] = bad
    return counts.sum()  # integers: the order cannot matter


@njit(int64(IN1, IN1, IN1, IN1, IN1, IN1, MB, IN1, int64, MS, boolean, float32, float32,
            float32, uint64, uint64, uint64, int64, int64, int64, int64, int64, int64, int64,
            F1, S1), parallel=True, **_STRICT)
def _backward_q(do, q, kt, vt, stats, dd, mb, madd, kind, ms, causal, scale, p, keep_scale, k0,
                k1, stream, nb, nh, nl, ns, ne, nev, block_q, dq, heads):
    """dQ: tasks of (b, h, query block); each row's fold over j carried across the key tiles."""
    nqb = (nl + block_q - 1) // block_q
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
        vparts = np.empty(16 * ((max(ne, nev) + 1023) // 1024), np.float32)
        madds = np.empty(TILE, np.float32)
        cs = np.ones(TILE, np.float32)
        dsrow = np.empty(sp, np.float32)  # dS_ij of the row
        frow = np.empty(sp, np.float32)  # which keys take part (1.0)
        whole = np.empty(sp // TILE, np.bool_)  # tiles whose every key takes part
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
            vd = vsplat(dd[bh * nl + i])
            anyq = False
            nsi = min(ns, i + 1) if causal else ns
            for g in range(0, nsi, TILE):  # dS of the row, tile by tile
                sv = vmul(vsplat(scale), tile_dots(q, qo, ne, kt, TILE, kto + g * ne, lanes, vparts))
                full = kind == 0 and g + TILE <= nsi
                whole[g // TILE] = full
                if full:
                    vstore(frow, g, vsplat(ONE))
                else:
                    if tile_flags(mb, madd, kind, ms, causal, b, h, i, g, 0, nsi, frow[g:g + TILE],
                                  madds) == 0:
                        vstore(dsrow, g, vsplat(ZERO))
                        continue
                    if kind == 2:
                        sv = vadd(sv, vload(madds, 0))
                anyq = True
                ev, undecided = vexp_tile(vsub(sv, vsplat(mx)), vload(frow, g))
                bad += undecided
                pdot = tile_dots(do, oo, nev, vt, TILE, vto + g * nev, lanes, vparts)
                pv_ = vdiv(ev, vsplat(big_s))
                if dropout:
                    tile_keep(k0, k1, stream, p, keep_scale, (bh * nl + i) * ns, g, nsi, cs)
                    dp = vmul(pdot, vload(cs, 0))
                else:
                    dp = pdot
                vstore(dsrow, g, vmul(pv_, vsub(dp, vd)))
            row_sums(dsrow, frow, whole, kt, kto, ne, nsi, nch, pq)
            for x in range(ne):
                f = _pairwise(pq, x * nch, nch, 1) if anyq else ZERO
                dq[qo + x] = scale * f
        counts[task] = bad
    for bh in range(nb * nh):
        for t in range(bh * nqb, bh * nqb + nqb):
            if counts[t]:
                heads[bh] = 1
    return counts.sum()


def backward(do, q, k, v, o, stats, mask_bool, mask_add, mask_kind, mask_strides, causal, scale,
             p, keep_scale, k0, k1, stream, block_q, block_k, dq, dk, dv, status) -> int:
    """The interface's attention_backward: D, the dK/dV pass, then the dQ pass."""
    nb, nh, nl, ne = q.shape
    ns, nev = v.shape[2], v.shape[3]
    sp = padded(ns)
    extra = flat_args(mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p, keep_scale,
                      k0, k1, stream)
    dd = np.empty(nb * nh * nl, np.float32)
    _row_dots(do.reshape(-1), o.reshape(-1), nb * nh * nl, nev, dd)
    flat = (do.reshape(-1), q.reshape(-1), transposed(k, sp), transposed(v, sp),
            stats.reshape(-1), dd)
    heads = np.zeros(nb * nh, np.int32)
    _backward_kv(*flat, *extra, nb, nh, nl, ns, ne, nev, max(1, int(block_k)), dk.reshape(-1),
                 dv.reshape(-1))
    _backward_q(*flat, *extra, nb, nh, nl, ns, ne, nev, max(1, int(block_q)), dq.reshape(-1),
                heads)
    st = status.reshape(-1)
    st[:] = heads
    return int(heads.sum())

