"""CUDA kernels for the transformer family: softmax / log_softmax rows, layer_norm rows,
their backward, and the fused scaled-dot-product attention forward and backward.

Row kernels: a thread per row, doing the contract's steps (contracts/transformer.md
clauses 1-5) in order, every sum the fold tree in-thread: 32 lane accumulators in a local
array (lane k mod 32, reset per 1024-element chunk), the butterfly per chunk, the chunk
partials on the pairwise tree as a binary counter (native/cuda/layers.py's `_push` and
`_finish`, the level-by-level tree's additions in the same order).

Attention, a thread per output row or key, streaming over blocks of keys (or queries)
without an (L, S) matrix:

- forward, a thread per (b, h, i): pass 1 over the key blocks of block_k keys takes the
  row max of the taking-part scores s_ij = scale * dot(q_i, k_j) (+ m_ij); pass 2 takes
  the scores again, e_ij = expf(s_ij - mx_i) and the fold state of S_i and of every
  o_i[d] (32 lanes each, in a per-thread slice of a global work buffer); stats get
  (mx_i, S_i), or (-inf, +0.0) for an empty row, whose o is +0.0;
- backward: D_i = dot(do_i, o_i) a thread per row; then a thread per (b, h, j) folds
  dK_j and dV_j over i ascending across the query blocks of block_q rows, and a thread per
  (b, h, i) folds dQ_i over j across the key blocks, each recomputing s, e, p = e / S_i,
  dP = dot(do_i, v_j) (* c_ij) and dS = p (dP - D_i) as oracles/attention.py does.

The lane of term j is j mod 32 and its chunk j // 1024 whatever the block, so block sizes
shape the loops and never reach a bit; a position that does not take part is skipped,
which is the fold's -0.0; a fold with no taking-part term is +0.0 (before the scale).

expf and logf are native/crmath.py's exp_elem / log_elem bound for CUDA
(native/cuda/crmath.py); an undecided value sets status 1 for its row (softmax) or
head (attention: several threads may store the same 1, never an atomic add), and the
host counts the marks. Dropout's keep decision is native/rng.py's Philox bound for CUDA
(native/cuda/rng.py): position ((b H + h) L + i) S + j, word pos mod 4 of block pos div 4.

Reproducibility: every float operation is a `prims` call (libdevice `_rn` on a GPU, no
fma; tests/test_ptx_lint.py checks the PTX), every fold runs inside one thread in the
contract's index order, and kernels loop grid-stride, so neither launch geometry nor
block sizes reach the bits: decided values are mojolike.oracles.transformer's and
mojolike.oracles.attention's.

>>> sorted(KERNELS)[:3], len(KERNELS)
(['attention_d', 'attention_dkv', 'attention_dq'], 8)
"""
from __future__ import annotations

import numpy as np
from numba import boolean, cuda, float32, int32, int64, uint8, uint64, void

from ...oracles.fold import CHUNK, LANES
from ..crmath import EXP_HUGE, EXP_TINY
from .base import THREADS, CudaBase, device, grid
from .crmath import exp_elem, log_elem
from .fold import NEG_ZERO
from .layers import LANES_STACK, _finish, _lane_butterfly, _push
from .loss import f32_bits
from .prims import add, div, mul, sqrt, sub
from .rng import LOW2, MASK32, SH2, SH32, philox

ZERO = np.float32(0.0)
ONE = np.float32(1.0)
POS_INF = np.float32(np.inf)
NEG_INF = np.float32(-np.inf)
NAN = np.float32(np.nan)
TWO_M24 = np.float32(2.0 ** -24)
SH8 = np.uint64(8)
U64 = np.uint64
# Attention threads keep their fold state in a global work buffer, a slice per thread:
# at most this many threads per launch on a GPU, so the buffer stays within a few hundred MB.
SLOTS = 32 * 1024


# -- element functions ----------------------------------------------------------------------

@device
def _exp_any(d):
    """(expf(d), decided) for any binary32 d: NaN stays NaN, +inf from EXP_HUGE up, +0 at or
    below EXP_TINY, else crmath's exp_elem and its rounding test."""
    if d != d:  # noqa: PLR0124 (NaN test)
        return d, True
    if d >= EXP_HUGE:
        return POS_INF, True
    if d <= EXP_TINY:
        return ZERO, True
    return exp_elem(d)


@device
def _log_any(s):
    """(logf(s), decided) for any binary32 s, special values as IEEE's log."""
    if s != s:  # noqa: PLR0124 (NaN test)
        return s, True
    if s == POS_INF:
        return POS_INF, True
    if s == ZERO:
        return NEG_INF, True
    if s < ZERO:
        return NAN, True
    return log_elem(f32_bits(s))


@device
def _dot(a, oa, b, ob, n, prod, lanes):
    """fold over k < n of a[oa + k] (prod: of the rounded a[oa + k] * b[ob + k]), in-thread;
    lanes holds 32 + STACK floats."""
    depth = 0
    for c in range((n + CHUNK - 1) // CHUNK):
        for lane in range(LANES):
            lanes[lane] = NEG_ZERO
        for k in range(c * CHUNK, min(c * CHUNK + CHUNK, n)):
            y = mul(a[oa + k], b[ob + k]) if prod else a[oa + k]
            lanes[k & 31] = add(lanes[k & 31], y)
        depth = _push(lanes, LANES, depth, c, _lane_butterfly(lanes))
    return _finish(lanes, LANES, depth)


@device
def _row_max(x, o, n):
    """max of x[o : o + n], exact; NaN when one of them is NaN."""
    mx = x[o]
    nan = False
    for k in range(n):
        v = x[o + k]
        if v != v:  # noqa: PLR0124 (NaN test)
            nan = True
        elif v > mx:
            mx = v
    return NAN if nan else mx


# -- row kernels ----------------------------------------------------------------------------

def softmax_kernel(x, m, n, log, y, status):
    """Row r of y = softmax (log: log_softmax) of row r of x (M, N, flat); status[r] = 1
    where an expf or logf is undecided."""
    lanes = cuda.local.array(LANES_STACK, float32)
    for r in range(cuda.grid(1), m, cuda.gridsize(1)):
        o = r * n
        mx = _row_max(x, o, n)
        bad = False
        for j in range(n):
            e, ok = _exp_any(sub(x[o + j], mx))
            y[o + j] = e
            bad = bad or not ok
        s = _dot(y, o, y, o, n, False, lanes)
        if log:
            lg, ok = _log_any(s)
            bad = bad or not ok
            for j in range(n):
                y[o + j] = sub(sub(x[o + j], mx), lg)
        else:
            for j in range(n):
                y[o + j] = div(y[o + j], s)
        status[r] = 1 if bad else 0


def softmax_backward_kernel(dy, y, m, n, log, dx, status):
    """softmax: dx_j = y_j * (dy_j - fold(dy * y)); log_softmax: dx_j = dy_j - expf(y_j) * fold(dy)."""
    lanes = cuda.local.array(LANES_STACK, float32)
    for r in range(cuda.grid(1), m, cuda.gridsize(1)):
        o = r * n
        bad = False
        if log:
            c = _dot(dy, o, dy, o, n, False, lanes)
            for j in range(n):
                e, ok = _exp_any(y[o + j])
                dx[o + j] = sub(dy[o + j], mul(e, c))
                bad = bad or not ok
        else:
            c = _dot(dy, o, y, o, n, True, lanes)
            for j in range(n):
                dx[o + j] = mul(y[o + j], sub(dy[o + j], c))
        status[r] = 1 if bad else 0


@device
def _ln_stats(x, o, n, nd, eps, c, lanes):
    """rstd of row x[o : o + n], with c[o + j] = x_j - mean written (clause 4's order)."""
    mean = div(_dot(x, o, x, o, n, False, lanes), nd)
    for j in range(n):
        c[o + j] = sub(x[o + j], mean)
    var = div(_dot(c, o, c, o, n, True, lanes), nd)
    return div(ONE, sqrt(add(var, eps)))


def layer_norm_kernel(x, m, n, nd, w, has_w, b, has_b, eps, y):
    """y_j = ((x_j - mean) * rstd) * w_j + b_j per row; nd is D as float32."""
    lanes = cuda.local.array(LANES_STACK, float32)
    for r in range(cuda.grid(1), m, cuda.gridsize(1)):
        o = r * n
        rstd = _ln_stats(x, o, n, nd, eps, y, lanes)
        for j in range(n):
            t = mul(y[o + j], rstd)
            if has_w:
                t = mul(t, w[j])
            if has_b:
                t = add(t, b[j])
            y[o + j] = t


def layer_norm_backward_kernel(dy, x, m, n, nd, w, has_w, eps, dx, h):
    """h = c * rstd; dx_j = rstd * ((g_j - a) - h_j * mm), g = dy * w (dy without weight),
    a = fold(g) / D, mm = fold(g * h) / D; dx holds g until the last step."""
    lanes = cuda.local.array(LANES_STACK, float32)
    for r in range(cuda.grid(1), m, cuda.gridsize(1)):
        o = r * n
        rstd = _ln_stats(x, o, n, nd, eps, h, lanes)
        for j in range(n):
            h[o + j] = mul(h[o + j], rstd)
            dx[o + j] = mul(dy[o + j], w[j]) if has_w else dy[o + j]
        a = div(_dot(dx, o, dx, o, n, False, lanes), nd)
        mm = div(_dot(dx, o, h, o, n, True, lanes), nd)
        for j in range(n):
            dx[o + j] = mul(rstd, sub(sub(dx[o + j], a), mul(h[o + j], mm)))


# -- attention pieces -----------------------------------------------------------------------

@device
def _score(q, qo, k, ko, ne, mbool, madd, kind, ms, causal, scale, b, h, i, j, lanes):
    """(takes part, s_ij): s = scale * dot(q_i, k_j), + m_ij for an additive mask."""
    if causal and j > i:
        return False, ZERO
    mi = b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]
    if kind == 1 and mbool[mi] == 0:
        return False, ZERO
    s = mul(scale, _dot(q, qo, k, ko, ne, True, lanes))
    if kind == 2:
        s = add(s, madd[mi])
    return True, s


@device
def _factor(k0, k1, s0, s1, pos, p, keep_scale):
    """Dropout's c at stream position pos: keep_scale when its uniform u >= p, else 0.0."""
    blk = pos >> SH2
    w0, w1, w2, w3 = philox(blk & MASK32, blk >> SH32, s0, s1, k0, k1)
    r = pos & LOW2
    w = w0 if r == 0 else w1 if r == 1 else w2 if r == 2 else w3
    u = mul(np.float32(np.int32(w >> SH8)), TWO_M24)
    return keep_scale if u >= p else ZERO


@device
def _reset(st, ncoord, width):
    for x in range(ncoord):
        for lane in range(LANES):
            st[x * width + lane] = NEG_ZERO


@device
def _close(st, ncoord, width, depth, c):
    """Chunk c of every coordinate's fold: the butterfly, its partial onto the counter; the new depth."""
    out = depth
    for x in range(ncoord):
        sl = st[x * width:(x + 1) * width]
        out = _push(sl, LANES, depth, c, _lane_butterfly(sl))
    return out


@device
def _result(st, x, width, depth, any_term):
    """Coordinate x's fold over every closed chunk; +0.0 when no term took part."""
    if not any_term:
        return ZERO
    return _finish(st[x * width:(x + 1) * width], LANES, depth)


@device
def _grad_terms(e, big_s, dp_dot, d_i, c, dropout):
    """(p * c, dS): p = e / S, dP = dot(do_i, v_j) * c, dS = p * (dP - D_i) (clause 15)."""
    pr = div(e, big_s)
    pd = mul(pr, c) if dropout else pr
    dp = mul(dp_dot, c) if dropout else dp_dot
    return pd, mul(pr, sub(dp, d_i))


# -- attention kernels ----------------------------------------------------------------------

def attention_forward_kernel(q, k, v, mbool, madd, kind, ms, causal, scale, p, keep_scale, k0, k1,
                             stream, nh, nl, ns, ne, nev, block_k, o, stats, status, work, width):
    """o, stats of every row u = (b H + h) L + i, a thread each; work: a slice of
    (nev + 1) x width floats per thread (o's coordinates, then S)."""
    lanes = cuda.local.array(LANES_STACK, float32)
    t = cuda.grid(1)
    st = work[t * (nev + 1) * width:(t + 1) * (nev + 1) * width]
    dropout = p > ZERO
    s0, s1 = stream & MASK32, stream >> SH32
    nrows = o.size // nev
    for u in range(t, nrows, cuda.gridsize(1)):
        i = u % nl
        bh = u // nl
        h = bh % nh
        b = bh // nh
        qo = u * ne
        mx = NEG_INF
        nan = False
        present = False
        for j0 in range(0, ns, block_k):  # pass 1: the row max
            for j in range(j0, min(j0 + block_k, ns)):
                part, s = _score(q, qo, k, (bh * ns + j) * ne, ne, mbool, madd, kind, ms, causal,
                                 scale, b, h, i, j, lanes)
                if part:
                    present = True
                    if s != s:  # noqa: PLR0124 (NaN test)
                        nan = True
                    elif s > mx:
                        mx = s
        if nan:
            mx = NAN
        if not present or mx == NEG_INF:  # an empty row
            for d in range(nev):
                o[u * nev + d] = ZERO
            stats[2 * u] = NEG_INF
            stats[2 * u + 1] = ZERO
            continue
        depth = 0
        bad = False
        for j0 in range(0, ns, block_k):  # pass 2: e, S and the weighted sums
            for j in range(j0, min(j0 + block_k, ns)):
                if j % CHUNK == 0:
                    if j > 0:
                        depth = _close(st, nev + 1, width, depth, j // CHUNK - 1)
                    _reset(st, nev + 1, width)
                part, s = _score(q, qo, k, (bh * ns + j) * ne, ne, mbool, madd, kind, ms, causal,
                                 scale, b, h, i, j, lanes)
                if not part:
                    continue
                e, ok = _exp_any(sub(s, mx))
                bad = bad or not ok
                lane = j & 31
                st[nev * width + lane] = add(st[nev * width + lane], e)
                wt = e
                if dropout:
                    wt = mul(e, _factor(k0, k1, s0, s1, U64(u * ns + j), p, keep_scale))
                vo = (bh * ns + j) * nev
                for d in range(nev):
                    st[d * width + lane] = add(st[d * width + lane], mul(wt, v[vo + d]))
        depth = _close(st, nev + 1, width, depth, (ns - 1) // CHUNK)
        big_s = _result(st, nev, width, depth, True)
        for d in range(nev):
            o[u * nev + d] = div(_result(st, d, width, depth, True), big_s)
        stats[2 * u] = mx
        stats[2 * u + 1] = big_s
        if bad:
            status[bh] = 1  # every writer stores the same value


def attention_d_kernel(do, o, nev, dbuf):
    """dbuf[u] = D_u = dot(do_u, o_u) over the Ev coordinates, a thread per row."""
    lanes = cuda.local.array(LANES_STACK, float32)
    for u in range(cuda.grid(1), dbuf.size, cuda.gridsize(1)):
        dbuf[u] = _dot(do, u * nev, o, u * nev, nev, True, lanes)


def attention_dkv_kernel(do, q, k, v, stats, dbuf, mbool, madd, kind, ms, causal, scale, p,
                         keep_scale, k0, k1, stream, nh, nl, ns, ne, nev, block_q, dk, dv, status,
                         work, width):
    """dk, dv of every key u = (b H + h) S + j, a thread each, folding over i ascending across
    the query blocks; work: (ne + nev) x width floats per thread."""
    lanes = cuda.local.array(LANES_STACK, float32)
    t = cuda.grid(1)
    ncoord = ne + nev
    st = work[t * ncoord * width:(t + 1) * ncoord * width]
    dropout = p > ZERO
    s0, s1 = stream & MASK32, stream >> SH32
    c = ONE
    nkeys = dk.size // ne
    for u in range(t, nkeys, cuda.gridsize(1)):
        j = u % ns
        bh = u // ns
        h = bh % nh
        b = bh // nh
        ko = u * ne
        depth = 0
        bad = False
        present = False
        for i0 in range(0, nl, block_q):
            for i in range(i0, min(i0 + block_q, nl)):
                if i % CHUNK == 0:
                    if i > 0:
                        depth = _close(st, ncoord, width, depth, i // CHUNK - 1)
                    _reset(st, ncoord, width)
                r = bh * nl + i
                mx = stats[2 * r]
                if mx == NEG_INF:  # an empty row adds nothing
                    continue
                part, s = _score(q, r * ne, k, ko, ne, mbool, madd, kind, ms, causal, scale, b, h,
                                 i, j, lanes)
                if not part:
                    continue
                present = True
                e, ok = _exp_any(sub(s, mx))
                bad = bad or not ok
                if dropout:
                    c = _factor(k0, k1, s0, s1, U64(r * ns + j), p, keep_scale)
                dp_dot = _dot(do, r * nev, v, u * nev, nev, True, lanes)
                pd, ds = _grad_terms(e, stats[2 * r + 1], dp_dot, dbuf[r], c, dropout)
                lane = i & 31
                for x in range(ne):
                    st[x * width + lane] = add(st[x * width + lane], mul(ds, q[r * ne + x]))
                for d in range(nev):
                    at = (ne + d) * width + lane
                    st[at] = add(st[at], mul(pd, do[r * nev + d]))
        depth = _close(st, ncoord, width, depth, (nl - 1) // CHUNK)
        for x in range(ne):
            dk[u * ne + x] = mul(scale, _result(st, x, width, depth, present))
        for d in range(nev):
            dv[u * nev + d] = _result(st, ne + d, width, depth, present)
        if bad:
            status[bh] = 1


def attention_dq_kernel(do, q, k, v, stats, dbuf, mbool, madd, kind, ms, causal, scale, p,
                        keep_scale, k0, k1, stream, nh, nl, ns, ne, nev, block_k, dq, status,
                        work, width):
    """dq of every row u = (b H + h) L + i, a thread each, folding over j across the key
    blocks; work: ne x width floats per thread."""
    lanes = cuda.local.array(LANES_STACK, float32)
    t = cuda.grid(1)
    st = work[t * ne * width:(t + 1) * ne * width]
    dropout = p > ZERO
    s0, s1 = stream & MASK32, stream >> SH32
    c = ONE
    nrows = dq.size // ne
    for u in range(t, nrows, cuda.gridsize(1)):
        i = u % nl
        bh = u // nl
        h = bh % nh
        b = bh // nh
        mx = stats[2 * u]
        depth = 0
        bad = False
        present = False
        if mx != NEG_INF:  # an empty row's dq is scale * +0.0
            for j0 in range(0, ns, block_k):
                for j in range(j0, min(j0 + block_k, ns)):
                    if j % CHUNK == 0:
                        if j > 0:
                            depth = _close(st, ne, width, depth, j // CHUNK - 1)
                        _reset(st, ne, width)
                    ko = (bh * ns + j) * ne
                    part, s = _score(q, u * ne, k, ko, ne, mbool, madd, kind, ms, causal, scale,
                                     b, h, i, j, lanes)
                    if not part:
                        continue
                    present = True
                    e, ok = _exp_any(sub(s, mx))
                    bad = bad or not ok
                    if dropout:
                        c = _factor(k0, k1, s0, s1, U64(u * ns + j), p, keep_scale)
                    dp_dot = _dot(do, u * nev, v, (bh * ns + j) * nev, nev, True, lanes)
                    _, ds = _grad_terms(e, stats[2 * u + 1], dp_dot, dbuf[u], c, dropout)
                    lane = j & 31
                    for x in range(ne):
                        st[x * width + lane] = add(st[x * width + lane], mul(ds, k[ko + x]))
            depth = _close(st, ne, width, depth, (ns - 1) // CHUNK)
        for x in range(ne):
            dq[u * ne + x] = mul(scale, _result(st, x, width, depth, present))
        if bad:
            status[bh] = 1


F1 = float32[::1]
I1 = int64[::1]
S1 = int32[::1]
U8 = uint8[::1]
_B = boolean
_I = int64
_F = float32
_U = uint64
_ATT = (U8, F1, _I, I1, _B, _F, _F, _F, _U, _U, _U, _I, _I, _I, _I, _I, _I)  # mask .. block
# (python function, signature) for every kernel: the loader jits these, the PTX lint compiles them.
KERNELS = {
    "softmax": (softmax_kernel, void(F1, _I, _I, _B, F1, S1)),
    "softmax_backward": (softmax_backward_kernel, void(F1, F1, _I, _I, _B, F1, S1)),
    "layer_norm": (layer_norm_kernel, void(F1, _I, _I, _F, F1, _B, F1, _B, _F, F1)),
    "layer_norm_backward": (layer_norm_backward_kernel, void(F1, F1, _I, _I, _F, F1, _B, _F, F1, F1)),
    "attention_forward": (attention_forward_kernel,
                          void(F1, F1, F1, *_ATT, F1, F1, S1, F1, _I)),
    "attention_d": (attention_d_kernel, void(F1, F1, _I, F1)),
    "attention_dkv": (attention_dkv_kernel,
                      void(F1, F1, F1, F1, F1, F1, *_ATT, F1, F1, S1, F1, _I)),
    "attention_dq": (attention_dq_kernel, void(F1, F1, F1, F1, F1, F1, *_ATT, F1, S1, F1, _I)),
}

_PLACEHOLDER = np.zeros(1, np.float32)  # the weight / bias argument when there is none


def _dev(a, dtype=np.float32):
    return cuda.to_device(np.ascontiguousarray(a, dtype).reshape(-1))


def _slots(units: int) -> tuple[int, int]:
    """(blocks, threads in all) for a launch of a thread per unit, at most SLOTS threads on a GPU."""
    blocks = grid(min(units, SLOTS), THREADS)
    return blocks, blocks * THREADS


def _width(n: int) -> int:
    """Floats per fold state over n terms: 32 lanes and the counter's pending partials."""
    return LANES + max(1, ((n + CHUNK - 1) // CHUNK).bit_length())


class CudaTransformer(CudaBase):
    """The transformer family's kernels on an NVIDIA GPU (or the simulator;
    mojolike.core.interfaces.transformer documents each method). numpy arguments travel to
    the device per call, and the written ones come back."""

    takes_pieces = False
    KERNELS = KERNELS

    def _rows(self, name, m, args, writes):
        if m:
            self._launch(name, grid(m, THREADS), args, writes=writes)

    def softmax_rows(self, x, log, y, status) -> int:
        m, n = x.shape
        self._rows("softmax", m, (x, m, n, bool(log), y, status), (4, 5))
        return int(np.count_nonzero(status))

    def softmax_backward_rows(self, dy, y, log, dx, status) -> int:
        m, n = y.shape
        self._rows("softmax_backward", m, (dy, y, m, n, bool(log), dx, status), (5, 6))
        return int(np.count_nonzero(status))

    def layer_norm_rows(self, x, w, has_w, b, has_b, eps, y) -> None:
        m, n = x.shape
        self._rows("layer_norm", m, (x, m, n, np.float32(n), w if has_w else _PLACEHOLDER,
                                     bool(has_w), b if has_b else _PLACEHOLDER, bool(has_b),
                                     np.float32(eps), y), (9,))

    def layer_norm_backward_rows(self, dy, x, w, has_w, eps, dx, h) -> None:
        m, n = x.shape
        self._rows("layer_norm_backward", m, (dy, x, m, n, np.float32(n),
                                              w if has_w else _PLACEHOLDER, bool(has_w),
                                              np.float32(eps), dx, h), (8, 9))

    @staticmethod
    def _common(q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p,
                keep_scale, k0, k1, stream, block):
        _, nh, nl, ne = q.shape
        ns, nev = k.shape[2], v.shape[3]
        return (_dev(mask_bool, np.uint8), _dev(mask_add), np.int64(mask_kind),
                _dev(mask_strides, np.int64), bool(causal), np.float32(scale), np.float32(p),
                np.float32(keep_scale), U64(k0), U64(k1), U64(stream), np.int64(nh),
                np.int64(nl), np.int64(ns), np.int64(ne), np.int64(nev), np.int64(max(1, block)))

    def attention_forward(self, q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                          scale, p, keep_scale, k0, k1, stream, block_k, o, stats, status) -> int:
        nb, nh, nl, _ = q.shape
        ns, nev = k.shape[2], v.shape[3]
        common = self._common(q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                              scale, p, keep_scale, k0, k1, stream, block_k)
        blocks, threads = _slots(nb * nh * nl)
        width = _width(ns)
        do_, dstats = cuda.device_array(o.size, np.float32), cuda.device_array(stats.size, np.float32)
        dstatus = cuda.to_device(np.zeros(nb * nh, np.int32))
        work = cuda.device_array(threads * (nev + 1) * width, np.float32)
        self._k["attention_forward"][blocks, THREADS](_dev(q), _dev(k), _dev(v), *common, do_,
                                                      dstats, dstatus, work, np.int64(width))
        do_.copy_to_host(o.reshape(-1))
        dstats.copy_to_host(stats.reshape(-1))
        dstatus.copy_to_host(status.reshape(-1))
        return int(np.count_nonzero(status))

    def attention_backward(self, do, q, k, v, o, stats, mask_bool, mask_add, mask_kind,
                           mask_strides, causal, scale, p, keep_scale, k0, k1, stream, block_q,
                           block_k, dq, dk, dv, status) -> int:
        nb, nh, nl, ne = q.shape
        ns, nev = k.shape[2], v.shape[3]
        args = (q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal, scale, p,
                keep_scale, k0, k1, stream)
        d_do, d_q, d_k, d_v, d_stats = _dev(do), _dev(q), _dev(k), _dev(v), _dev(stats)
        dstatus = cuda.to_device(np.zeros(nb * nh, np.int32))
        dbuf = cuda.device_array(nb * nh * nl, np.float32)
        blocks, _ = _slots(nb * nh * nl)
        self._k["attention_d"][blocks, THREADS](d_do, _dev(o), np.int64(nev), dbuf)
        ins = (d_do, d_q, d_k, d_v, d_stats, dbuf)
        # dK, dV: a thread per key, folding over the query blocks
        blocks, threads = _slots(nb * nh * ns)
        width = _width(nl)
        ddk, ddv = cuda.device_array(dk.size, np.float32), cuda.device_array(dv.size, np.float32)
        work = cuda.device_array(threads * (ne + nev) * width, np.float32)
        self._k["attention_dkv"][blocks, THREADS](*ins, *self._common(*args, block_q), ddk, ddv,
                                                  dstatus, work, np.int64(width))
        # dQ: a thread per row, folding over the key blocks
        blocks, threads = _slots(nb * nh * nl)
        width = _width(ns)
        ddq = cuda.device_array(dq.size, np.float32)
        work = cuda.device_array(threads * ne * width, np.float32)
        self._k["attention_dq"][blocks, THREADS](*ins, *self._common(*args, block_k), ddq, dstatus,
                                                 work, np.int64(width))
        ddq.copy_to_host(dq.reshape(-1))
        ddk.copy_to_host(dk.reshape(-1))
        ddv.copy_to_host(dv.reshape(-1))
        dstatus.copy_to_host(status.reshape(-1))
        return int(np.count_nonzero(status))


def load(mode: str, backend: str = "cuda") -> CudaTransformer:
    return CudaTransformer(mode)
