"""numba CPU kernels for the transformer family: softmax / log_softmax rows, layer_norm rows,
their backward, and (from native/attention.py) the fused attention forward and backward.

Row kernels are parallel over tasks of whole rows (prange); a row is computed by one
thread in the contract's order (contracts/transformer.md clauses 1-5):

- softmax: mx = max_j x_j (32 lane maxima, exact; a row holding NaN is NaN throughout),
  e_j = expf(x_j - mx) written into the output row and folded as it is written (rows of 32
  as two native/simd.py vectors, their expf native/vexp.py's, then the pairwise tree), then
  y_j = e_j / S in place, or
  log_softmax y_j = (x_j - mx) - logf(S) with the differences recomputed;
- layer_norm: mean = fold(x) / nD, c_j = x_j - mean kept in the output row and folded as
  c * c in the same pass, var = that fold / nD, rstd = 1 / sqrt(var + eps),
  y_j = (c_j * rstd) * w_j + b_j;
- the backward rows as clauses 3 and 5 (layer_norm's h = c * rstd is written out, since the
  API folds dy * h over the rows for dweight; h, g = dy * w and the folds of g and g * h are
  one pass).

A fold's lanes are two vectors over whole rows of 32; a short last row adds its terms to
their lanes one by one, so each lane sees its terms in ascending order, as the tree says.

The retargetable per-element source is native/attention.py's `exp_any` (expf of any
binary32 with its rounding test, on native/crmath.py's exp_elem) and the elements listed
there: plain scalar arguments, one IEEE operation per statement, so native/cuda can
compile the same code with native/retarget.py.

expf and logf are native/crmath.py's exp_elem / log_elem. A row where one of them is
undecided gets status 1 (its outputs are then unspecified) and the caller redoes it with
the oracle; the kernels return how many rows they marked.

Caching: these kernels inline native/crmath.py's, native/attention.py's, native/vexp.py's and
native/simd.py's functions, and numba's cache=True checks only this file: after editing those, clear the
numba cache (__pycache__/*.nbi, *.nbc).

Reproducibility: no float reduction crosses rows, and every reduction in a row is the fold
tree over the row's index, whose shape depends on its length alone, so neither the thread
count nor the task split reaches a bit; decided values are the oracle's
(mojolike.oracles.transformer, mojolike.oracles.attention).

>>> import numpy as np
>>> k = load("identical")
>>> y, status = np.empty((1, 4), np.float32), np.empty(1, np.int32)
>>> k.softmax_rows(np.zeros((1, 4), np.float32), False, y, status), y.tolist()
(0, [[0.25, 0.25, 0.25, 0.25]])
>>> k.layer_norm_rows(np.float32([[1, 3]]), np.zeros(1, np.float32), False,
...                   np.zeros(1, np.float32), False, 0.0, y[:, :2]), y[0, :2].tolist()
(None, [-1.0, 1.0])
"""
from __future__ import annotations

import numba
import numpy as np
from numba import boolean, float32, int32, int64, njit, prange, types, void

from ..oracles.fold import CHUNK, LANES
from . import attention, attention_backward
from .attention import _exp_any, exp_any, vdot  # noqa: F401  (exp_any: the retargetable source)
from .base import NumbaBase
from .crmath import _log_elem
from .fold import NEG_ZERO, _pairwise
from .simd import (WIDTH, vadd, vall, vand, vbutterfly, vdiv, vload, vmax, vmul, vne, vor,
                   vprefetch, vsplat, vstore, vsub)
from .simd64 import vany
from .threads import Twin, num_threads
from .vexp import vexp_any

_STRICT = {"cache": True, "error_model": "numpy"}  # fastmath off: no contraction, no reassociation
IN1 = types.Array(float32, 1, "C", readonly=True)
F1 = float32[::1]
S1 = int32[::1]
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
POS_INF = np.float32(np.inf)
TASK_ELEMENTS = 32768  # a parallel task takes whole rows, about this many elements


@njit(inline="always", error_model="numpy")
def _max_start(x, o):
    lo = vsplat(x[o])
    return lo, lo, vne(lo, lo)


@njit(inline="always", error_model="numpy")
def _max_step(x, o, lo, hi, nan):
    """The 32 lane maxima (and NaN flags) after x[o : o + 32]."""
    a, c = vload(x, o), vload(x, o + WIDTH)
    # the NaN test in the same pass: a scalar scan cost a third of softmax
    return vmax(a, lo), vmax(c, hi), vor(nan, vor(vne(a, a), vne(c, c)))


@njit(inline="always", error_model="numpy")
def _max_end(x, o, n, lo, hi, nan, acc):
    """(the row's max, whether it holds NaN) from the lane maxima over its whole blocks of 32:
    the lanes in order, then the short block's values one by one."""
    vstore(acc, 0, lo)
    vstore(acc, WIDTH, hi)
    mx = acc[0]
    for j in range(1, LANES):
        mx = acc[j] if acc[j] > mx else mx  # noqa: FURB136 (exact, NaN apart)
    some = vany(nan)
    for k in range(n - n % LANES, n):
        v = x[o + k]
        mx = v if v > mx else mx  # noqa: FURB136
        some |= v != v
    return mx, some


@njit(inline="always", error_model="numpy")
def _row_max(x, o, n, acc):
    """(max of x[o : o + n] over its non-NaN values, whether one is NaN): 32 lane maxima, exact."""
    lo, hi, nan = _max_start(x, o)
    for b in range(0, n - n % LANES, LANES):
        lo, hi, nan = _max_step(x, o + b, lo, hi, nan)
    return _max_end(x, o, n, lo, hi, nan, acc)


@njit(inline="always", error_model="numpy")
def _finish(x, y, j, log, vm, vt):
    """Softmax's last step on the vector at j: y / S (vt = S), or log_softmax's (x - mx) - logf(S)
    (vt = logf(S))."""
    if log:
        vstore(y, j, vsub(vsub(vload(x, j), vm), vt))
    else:
        vstore(y, j, vdiv(vload(y, j), vt))


@njit(inline="always", error_model="numpy")
def _finish_then_max(x, o, n, log, mx, t, y, nx, acc):
    """The last step of the row at o (`_finish`; t is S or logf(S)) and, when nx, the max of the
    next row, in one loop: the divider and the next row's loads overlap. Each is the same
    operations as when done alone (the max's lanes and order are _row_max's)."""
    vm, vt = vsplat(mx), vsplat(t)
    full = n - n % LANES
    lo, hi, nan = _max_start(x, o + n) if nx else _max_start(x, o)
    for b in range(0, full, LANES):
        _finish(x, y, o + b, log, vm, vt)
        _finish(x, y, o + b + WIDTH, log, vm, vt)
        if nx:
            lo, hi, nan = _max_step(x, o + n + b, lo, hi, nan)
    for j in range(full, n - n % WIDTH, WIDTH):
        _finish(x, y, o + j, log, vm, vt)
    for j in range(n - n % WIDTH, n):
        if log:
            d = x[o + j] - mx
            y[o + j] = d - t
        else:
            y[o + j] = y[o + j] / t
    if nx:
        return _max_end(x, o + n, n, lo, hi, nan, acc)
    return mx, False


@njit(inline="always", error_model="numpy")
def _rows_of(c, n):
    """(start, end of whole rows of 32, end) of chunk c of a row of n."""
    base = c * CHUNK
    end = min(base + CHUNK, n)
    return base, base + (end - base) // LANES * LANES, end


@njit(inline="always", error_model="numpy")
def _row_fold(x, o, n, acc, partials):
    """fold of x[o : o + n]: whole rows of 32 as two vectors, a short row's terms added to their
    lanes one by one (each lane's terms in ascending order, as the tree says)."""
    for c in range(partials.size):
        base, full, end = _rows_of(c, n)
        lo = vsplat(NEG_ZERO)
        hi = lo
        for r in range(base, full, LANES):
            lo = vadd(lo, vload(x, o + r))
            hi = vadd(hi, vload(x, o + r + WIDTH))
        vstore(acc, 0, lo)
        vstore(acc, WIDTH, hi)
        for k in range(full, end):
            acc[k - full] = acc[k - full] + x[o + k]
        partials[c] = vbutterfly(vload(acc, 0), vload(acc, WIDTH))
    return _pairwise(partials)


@njit(inline="always", error_model="numpy")
def _row_dot(a, b, o, n, acc, partials):
    return vdot(a, o, b, o, n, acc, partials)


@njit(int64(IN1, int64, int64, boolean, F1, S1, int64), parallel=True, **_STRICT)
def _softmax(x, m, n, log, y, status, per_task):
    nch = (n + CHUNK - 1) // CHUNK
    ntasks = (m + per_task - 1) // per_task
    for task in prange(ntasks):
        acc = np.empty(LANES, np.float32)
        partials = np.empty(nch, np.float32)
        sbits = np.empty(1, np.float32)
        r0, r1 = task * per_task, min(task * per_task + per_task, m)
        mx, nan = _row_max(x, r0 * n, n, acc)  # each later row's max comes with the row before
        for r in range(r0, r1):
            o = r * n
            status[r] = 0
            nx = r + 1 < r1
            if nan:
                for j in range(n):
                    y[o + j] = np.float32(np.nan)
                if nx:
                    mx, nan = _row_max(x, o + n, n, acc)
                continue
            bad = 0
            vm = vsplat(mx)
            # e_j = expf(x_j - mx) into y, folded as it is written
            for c in range(nch):
                base, full, end = _rows_of(c, n)
                lo = vsplat(NEG_ZERO)
                hi = lo
                for w in range(base, full, LANES):
                    vprefetch(x, o + n + w)  # the next row's max reads these lines
                    vprefetch(x, o + n + w + WIDTH)
                    e0, ok0 = vexp_any(vsub(vload(x, o + w), vm))
                    e1, ok1 = vexp_any(vsub(vload(x, o + w + WIDTH), vm))
                    vstore(y, o + w, e0)
                    vstore(y, o + w + WIDTH, e1)
                    lo = vadd(lo, e0)
                    hi = vadd(hi, e1)
                    bad += not vall(vand(ok0, ok1))
                vstore(acc, 0, lo)
                vstore(acc, WIDTH, hi)
                for k in range(full, end):
                    d = x[o + k] - mx
                    e, ok = _exp_any(d)
                    y[o + k] = e
                    bad += not ok
                    acc[k - full] = acc[k - full] + e
                partials[c] = vbutterfly(vload(acc, 0), vload(acc, WIDTH))
            s = _pairwise(partials)
            t = s
            if log:
                sbits[0] = s
                lg, ok = _log_elem(np.int64(sbits.view(np.uint32)[0]))
                if s != s:  # noqa: PLR0124 (NaN: logf(NaN) is NaN)
                    lg = s
                    ok = True
                bad += not ok
                t = lg
            if bad:
                status[r] = 1
            mx, nan = _finish_then_max(x, o, n, log, mx, t, y, nx, acc)
    return np.int64(status.sum())


@njit(int64(IN1, IN1, int64, int64, boolean, F1, S1, int64), parallel=True, **_STRICT)
def _softmax_backward(dy, y, m, n, log, dx, status, per_task):
    nch = (n + CHUNK - 1) // CHUNK
    ntasks = (m + per_task - 1) // per_task
    vfull = n - n % WIDTH
    for task in prange(ntasks):
        acc = np.empty(LANES, np.float32)
        partials = np.empty(nch, np.float32)
        for r in range(task * per_task, min(task * per_task + per_task, m)):
            o = r * n
            status[r] = 0
            if log:
                c = _row_fold(dy, o, n, acc, partials)
                bad = 0
                vc = vsplat(c)
                for j in range(0, vfull, WIDTH):
                    e, ok = vexp_any(vload(y, o + j))
                    vstore(dx, o + j, vsub(vload(dy, o + j), vmul(e, vc)))
                    bad += not vall(ok)
                for j in range(vfull, n):
                    e, ok = _exp_any(y[o + j])
                    t = e * c
                    dx[o + j] = dy[o + j] - t
                    bad += not ok
                if bad:
                    status[r] = 1
            else:
                c = _row_dot(dy, y, o, n, acc, partials)
                vc = vsplat(c)
                for j in range(0, vfull, WIDTH):
                    vstore(dx, o + j, vmul(vload(y, o + j), vsub(vload(dy, o + j), vc)))
                for j in range(vfull, n):
                    t = dy[o + j] - c
                    dx[o + j] = y[o + j] * t
    return np.int64(status.sum())


@njit(inline="always", error_model="numpy")
def _ln_stats(x, o, n, eps, c, co, acc, partials):
    """(mean, rstd) of row x[o : o + n], with c[co + j] = x_j - mean written and folded as
    c * c in the same pass: clause 4's order."""
    nd = np.float32(n)
    mean = _row_fold(x, o, n, acc, partials) / nd
    vm = vsplat(mean)
    for ch in range(partials.size):
        base, full, end = _rows_of(ch, n)
        lo = vsplat(NEG_ZERO)
        hi = lo
        for r in range(base, full, LANES):
            a = vsub(vload(x, o + r), vm)
            b = vsub(vload(x, o + r + WIDTH), vm)
            vstore(c, co + r, a)
            vstore(c, co + r + WIDTH, b)
            lo = vadd(lo, vmul(a, a))
            hi = vadd(hi, vmul(b, b))
        vstore(acc, 0, lo)
        vstore(acc, WIDTH, hi)
        for k in range(full, end):
            d = x[o + k] - mean
            c[co + k] = d
            t = d * d
            acc[k - full] = acc[k - full] + t
        partials[ch] = vbutterfly(vload(acc, 0), vload(acc, WIDTH))
    var = _pairwise(partials) / nd
    t = var + eps
    return mean, ONE / np.sqrt(t)


@njit(void(IN1, int64, int64, IN1, boolean, IN1, boolean, float32, F1, int64), parallel=True,
      **_STRICT)
def _layer_norm(x, m, n, w, has_w, b, has_b, eps, y, per_task):
    nch = (n + CHUNK - 1) // CHUNK
    ntasks = (m + per_task - 1) // per_task
    vfull = n - n % WIDTH
    for task in prange(ntasks):
        acc = np.empty(LANES, np.float32)
        partials = np.empty(nch, np.float32)
        for r in range(task * per_task, min(task * per_task + per_task, m)):
            o = r * n
            rstd = _ln_stats(x, o, n, eps, y, o, acc, partials)[1]
            vr = vsplat(rstd)
            for j in range(0, vfull, WIDTH):
                h = vmul(vload(y, o + j), vr)
                if has_w:
                    h = vmul(h, vload(w, j))
                if has_b:
                    h = vadd(h, vload(b, j))
                vstore(y, o + j, h)
            for j in range(vfull, n):
                h = y[o + j] * rstd
                if has_w:
                    h = h * w[j]
                if has_b:
                    h = h + b[j]
                y[o + j] = h


@njit(void(IN1, IN1, int64, int64, IN1, boolean, float32, F1, F1, boolean, F1, int64),
      parallel=True, **_STRICT)
def _layer_norm_backward(dy, x, m, n, w, has_w, eps, dx, hout, keep_h, stats, per_task):
    """dx; with keep_h also h (M, N) into hout, else each row's (mean, rstd) into stats[2r:2r+2]
    (h then lives in a row's scratch only: the column folds recompute it)."""
    nch = (n + CHUNK - 1) // CHUNK
    nd = np.float32(n)
    ntasks = (m + per_task - 1) // per_task
    vfull = n - n % WIDTH
    for task in prange(ntasks):
        acc = np.empty(LANES, np.float32)
        acc2 = np.empty(LANES, np.float32)
        partials = np.empty(nch, np.float32)
        partials2 = np.empty(nch, np.float32)
        hb = hout if keep_h else np.empty(n, np.float32)
        for r in range(task * per_task, min(task * per_task + per_task, m)):
            o = r * n
            ho = o if keep_h else 0  # h's row in hb
            mean, rstd = _ln_stats(x, o, n, eps, hb, ho, acc, partials)
            if not keep_h:
                stats[2 * r] = mean
                stats[2 * r + 1] = rstd
            vr = vsplat(rstd)
            # h = c * rstd into hb, g = dy * w into dx, and the folds of g and g * h, in one pass
            for ch in range(nch):
                base, full, end = _rows_of(ch, n)
                ga = vsplat(NEG_ZERO)
                gb = ga
                ma = ga
                mb = ga
                for j in range(base, full, LANES):
                    h0 = vmul(vload(hb, ho + j), vr)
                    h1 = vmul(vload(hb, ho + j + WIDTH), vr)
                    g0 = vload(dy, o + j)
                    g1 = vload(dy, o + j + WIDTH)
                    if has_w:
                        g0 = vmul(g0, vload(w, j))
                        g1 = vmul(g1, vload(w, j + WIDTH))
                    vstore(hb, ho + j, h0)
                    vstore(hb, ho + j + WIDTH, h1)
                    vstore(dx, o + j, g0)
                    vstore(dx, o + j + WIDTH, g1)
                    ga = vadd(ga, g0)
                    gb = vadd(gb, g1)
                    ma = vadd(ma, vmul(g0, h0))
                    mb = vadd(mb, vmul(g1, h1))
                vstore(acc, 0, ga)
                vstore(acc, WIDTH, gb)
                vstore(acc2, 0, ma)
                vstore(acc2, WIDTH, mb)
                for k in range(full, end):
                    h = hb[ho + k] * rstd
                    hb[ho + k] = h
                    g = dy[o + k] * w[k] if has_w else dy[o + k]
                    dx[o + k] = g
                    acc[k - full] = acc[k - full] + g
                    t = g * h
                    acc2[k - full] = acc2[k - full] + t
                partials[ch] = vbutterfly(vload(acc, 0), vload(acc, WIDTH))
                partials2[ch] = vbutterfly(vload(acc2, 0), vload(acc2, WIDTH))
            a = _pairwise(partials) / nd
            mm = _pairwise(partials2) / nd
            va, vmm = vsplat(a), vsplat(mm)
            for j in range(0, vfull, WIDTH):
                t = vsub(vsub(vload(dx, o + j), va), vmul(vload(hb, ho + j), vmm))
                vstore(dx, o + j, vmul(vr, t))
            for j in range(vfull, n):
                t = dx[o + j] - a
                u = hb[ho + j] * mm
                t = t - u
                dx[o + j] = rstd * t


_PLACEHOLDER = np.zeros(1, np.float32)  # the weight / bias argument when there is none

# called with their work (elements) first: below native/threads.PARALLEL_MIN on the calling thread
softmax_kernel, softmax_backward_kernel = Twin(_softmax), Twin(_softmax_backward)
layer_norm_kernel, layer_norm_backward_kernel = Twin(_layer_norm), Twin(_layer_norm_backward)


def _per_task(m: int, n: int) -> int:
    """Whole rows per task, enough tasks to share among the threads: no bit depends on it."""
    return max(1, min(-(-m // (4 * numba.get_num_threads())), TASK_ELEMENTS // max(n, 1)))


def _flat(a):
    return a.reshape(-1)


class NumbaTransformer(NumbaBase):
    """The transformer family's kernels on the CPU with numba (mojolike.core.interfaces.transformer)."""

    backend = "cpu-numba"
    takes_pieces = False

    def __init__(self, mode: str):
        self.numeric_mode = mode  # every mode runs the identical kernels: they keep the stronger promise
        self.details = {"numba": numba.__version__, "threads": num_threads()}

    def softmax_rows(self, x, log, y, status) -> int:
        m, n = x.shape
        return int(softmax_kernel(m * n, _flat(x), m, n, bool(log), _flat(y), status,
                                  _per_task(m, n)))

    def softmax_backward_rows(self, dy, y, log, dx, status) -> int:
        m, n = y.shape
        return int(softmax_backward_kernel(m * n, _flat(dy), _flat(y), m, n, bool(log), _flat(dx),
                                           status, _per_task(m, n)))

    def layer_norm_rows(self, x, w, has_w, b, has_b, eps, y) -> None:
        m, n = x.shape
        layer_norm_kernel(m * n, _flat(x), m, n, w if has_w else _PLACEHOLDER, bool(has_w),
                          b if has_b else _PLACEHOLDER, bool(has_b), np.float32(eps), _flat(y),
                          _per_task(m, n))

    def layer_norm_backward_rows(self, dy, x, w, has_w, eps, dx, h) -> None:
        m, n = x.shape
        layer_norm_backward_kernel(m * n, _flat(dy), _flat(x), m, n, w if has_w else _PLACEHOLDER,
                                   bool(has_w), np.float32(eps), _flat(dx), _flat(h), True,
                                   _PLACEHOLDER.copy(), _per_task(m, n))

    def layer_norm_backward_rows_stats(self, dy, x, w, has_w, eps, dx, stats) -> None:
        """layer_norm_backward_rows without h: stats (M, 2) gets each row's (mean, rstd), from
        which h = (x - mean) * rstd is the same two roundings (the layers family's
        col_fold_normalized folds dweight from them). Only cpu-numba has this method."""
        m, n = x.shape
        layer_norm_backward_kernel(m * n, _flat(dy), _flat(x), m, n, w if has_w else _PLACEHOLDER,
                                   bool(has_w), np.float32(eps), _flat(dx), _PLACEHOLDER.copy(),
                                   False, _flat(stats), _per_task(m, n))

    def attention_forward(self, q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                          scale, p, keep_scale, k0, k1, stream, block_k, o, stats, status) -> int:
        return attention.forward(q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                                 scale, p, keep_scale, k0, k1, stream, block_k, o, stats, status)

    def attention_backward(self, do, q, k, v, o, stats, mask_bool, mask_add, mask_kind,
                           mask_strides, causal, scale, p, keep_scale, k0, k1, stream, block_q,
                           block_k, dq, dk, dv, status) -> int:
        return attention_backward.backward(do, q, k, v, o, stats, mask_bool, mask_add, mask_kind,
                                  mask_strides, causal, scale, p, keep_scale, k0, k1, stream,
                                  block_q, block_k, dq, dk, dv, status)


def load(mode: str, backend: str = "cpu-numba") -> NumbaTransformer:
    return NumbaTransformer(mode)


# the row kernels tests/test_vectorized.py compiles for every target and checks packed in loops
# (the attention kernels' cold compile takes minutes per target; their speed is benchmarked)
# (the expf of softmax and of log_softmax's backward is native/vexp.py's, packed binary64)
HOT_KERNELS = {"transformer._layer_norm": (_layer_norm, ("addps", "subps", "mulps")),
               "transformer._softmax": (_softmax, ("mulpd", "addpd", "divps")),
               "transformer._softmax_backward": (_softmax_backward, ("mulps", "subps", "mulpd"))}
