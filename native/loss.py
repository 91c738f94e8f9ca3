"""numba CPU kernel for cross-entropy over class indices (contracts/loss.md).

Parallel over rows (prange); a row is one serial pass per step of the contract:

1. mx = max_j z_j (32 lane maxima, exact in any order);
2. e_j = expf(z_j - mx), computed chunk by chunk into a 1024-slot buffer (or the
   gradient row, which keeps e_j for the backward) with a branch-free loop, then
   folded with the 32-lane loop of the fold tree; S = pairwise over the chunk
   partials (native/fold.py's `_pairwise`), L = logf(S);
3. with smoothing, A = fold_j(L - (z_j - mx)), the differences recomputed;
4. with the gradient, grad_j = (e_j / S - q_j) * g in place.

The max, the folds and the gradient hold their 32 lanes in two explicit vectors
(native/simd.py), and expf runs on native/vexp.py's 16-lane vectors (binary64 lanes, the
table read by permutes on AVX-512), so they are packed on every target.

expf/logf are native/crmath.py's `exp_elem`/`log_elem` (binary64 with a rounding
test). A row with an undecided value gets status 1 and the caller redoes it
exactly; its outputs are then unspecified.

Caching: these kernels inline native/crmath.py's element functions and
native/vexp.py's, native/fold.py's and native/simd.py's helpers, and numba's cache=True checks
only this file, so after editing those clear the numba cache (the __pycache__
*.nbi/*.nbc files); a fresh checkout builds clean.

Reproducibility: each row is computed by one thread and no float reduction
crosses rows, so the thread count never reaches the bits; every reduction inside
a row is the fold tree, whose shape depends on V alone.

>>> import numpy as np
>>> z = np.float32([[0.0, 0.0]])
>>> rows, status = np.empty(1, np.float32), np.empty(1, np.int32)
>>> k = load("identical")
>>> k.cross_entropy_into(z, np.int64([0]), -100, np.float32(1), np.float32(0), np.float32(1),
...                      False, np.float32(1), False, np.zeros((1, 1), np.float32), rows, status)
0
>>> rows.tolist(), status.tolist()   # ln 2
([0.6931471824645996], [0])
"""
from __future__ import annotations

import numba
import numpy as np
from numba import boolean, float32, int32, int64, njit, prange, types

from .base import NumbaBase
from .attention import _exp_any
from .crmath import _log_elem
from .fold import NEG_ZERO, _butterfly, _chunk_fold, _pairwise
from .simd import WIDTH, vadd, vall, vbutterfly, vdiv, vload, vmax, vmul, vsplat, vstore, vsub
from .vexp import vexp_any
from ..oracles.fold import CHUNK, LANES

ZERO = np.float32(0.0)
TASK_ELEMENTS = 32768  # a parallel task takes whole rows, about this many elements (at least one row)
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1

_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
Z2 = types.Array(float32, 2, "C", readonly=True)
T1 = types.Array(int64, 1, "C", readonly=True)
F32_1D = float32[::1]


@njit(inline="always", error_model="numpy")
def _row_max(z, r, acc):
    """max_j z[r, j] through 32 lane maxima (exact; lane j sees j, j + 32, ... in order)."""
    v = z.shape[1]
    row = z[r]
    full = v - v % LANES
    lo = vsplat(row[0])
    hi = lo
    for b in range(0, full, LANES):
        lo = vmax(vload(row, b), lo)
        hi = vmax(vload(row, b + WIDTH), hi)
    vstore(acc, 0, lo)
    vstore(acc, WIDTH, hi)
    for k in range(full, v):
        x = row[k]
        acc[0] = x if x > acc[0] else acc[0]
    mx = acc[0]
    for j in range(1, LANES):
        mx = acc[j] if acc[j] > mx else mx
    return mx


@njit(int64(Z2, int64, int64, int64, float32, F32_1D, int64), inline="always", **_STRICT)
def _exp_chunk(z, r, base, m, mx, dst, doff):
    """dst[doff + k] = expf(z[r, base + k] - mx) for k < m; nonzero when one was undecided.

    Sixteen lanes at a time on native/vexp.py's vector expf, then the last m % 16 one by one
    on its scalar twin, native/attention.py's exp_any (value and decided flag alike: d <=
    EXP_TINY, -inf included, gives +0 decided). The logits are finite (the API refuses
    others), so no d is NaN.
    """
    zr = z[r]
    vm = vsplat(mx)
    bad = 0
    full = m - m % WIDTH
    for k in range(0, full, WIDTH):
        e, ok = vexp_any(vsub(vload(zr, base + k), vm))
        vstore(dst, doff + k, e)
        bad += not vall(ok)
    for k in range(full, m):
        e, ok = _exp_any(z[r, base + k] - mx)
        dst[doff + k] = e
        bad += not ok
    return bad


@njit(inline="always", error_model="numpy")
def _smoothing_partial(zr, base, v, mx, lg, acc):
    """The fold tree's partial of the chunk at base of y_j = L - (z_j - mx)."""
    if base + CHUNK <= v:
        vmx, vlg = vsplat(mx), vsplat(lg)
        lo = vsplat(NEG_ZERO)
        hi = lo
        for i in range(LANES):
            row = base + i * LANES
            lo = vadd(lo, vsub(vlg, vsub(vload(zr, row), vmx)))
            hi = vadd(hi, vsub(vlg, vsub(vload(zr, row + WIDTH), vmx)))
        return vbutterfly(lo, hi)
    acc[:] = NEG_ZERO  # the short last chunk: padded slots add -0.0, so skip them
    for k in range(base, v):
        d = zr[k] - mx
        y = lg - d
        acc[k - base & (LANES - 1)] = acc[k - base & (LANES - 1)] + y
    _butterfly(acc)
    return acc[0]


@njit(int64(Z2, T1, int64, float32, float32, float32, boolean, float32, boolean,
            float32[:, ::1], F32_1D, int32[::1], int64), parallel=True, **_STRICT)
def _cross_entropy(z, t, ignore_index, c1, c2, qt, smoothing, g, want_grad, grad, rows, status,
                   per_task):
    n, v = z.shape
    nchunks = (v + CHUNK - 1) // CHUNK
    ntasks = (n + per_task - 1) // per_task
    counts = np.zeros(ntasks, np.int64)
    for task in prange(ntasks):
        acc = np.empty(LANES, np.float32)
        partials = np.empty(nchunks, np.float32)
        ebuf = np.empty(CHUNK, np.float32)
        sbits = np.empty(1, np.float32)
        undecided = 0
        for r in range(task * per_task, min(task * per_task + per_task, n)):
            ti = t[r]
            status[r] = 0
            if ti == ignore_index:
                rows[r] = ZERO
                if want_grad:
                    grad[r, :] = ZERO
                continue
            mx = _row_max(z, r, acc)
            # S = fold_j expf(z_j - mx); e_j kept in the gradient row when it is wanted
            dst = grad[r] if want_grad else ebuf
            bad = 0
            for c in range(nchunks):
                base = c * CHUNK
                m = min(CHUNK, v - base)
                doff = base if want_grad else 0
                bad += _exp_chunk(z, r, base, m, mx, dst, doff)
                partials[c] = _chunk_fold(dst, doff, doff + m, acc)
            s = _pairwise(partials)
            sbits[0] = s
            lg, ok = _log_elem(np.int64(sbits.view(np.uint32)[0]))
            if bad or not ok:
                status[r] = 1
                undecided += 1
                continue
            dt = z[r, ti] - mx
            nll = lg - dt
            if smoothing:
                # A = fold_j (L - d_j), d_j recomputed
                for c in range(nchunks):
                    partials[c] = _smoothing_partial(z[r], c * CHUNK, v, mx, lg, acc)
                a = _pairwise(partials)
                u = c1 * nll
                w = c2 * a
                rows[r] = u + w
            else:
                rows[r] = nll
            if want_grad:
                et = dst[ti]
                vs, vc2, vg = vsplat(s), vsplat(c2), vsplat(g)
                vfull = v - v % WIDTH
                for k in range(0, vfull, WIDTH):
                    vstore(dst, k, vmul(vsub(vdiv(vload(dst, k), vs), vc2), vg))
                for k in range(vfull, v):
                    p = dst[k] / s
                    q = p - c2
                    dst[k] = q * g
                p = et / s
                q = p - qt
                dst[ti] = q * g
        counts[task] = undecided
    return counts.sum()  # integers: the order cannot matter


# the kernels tests/test_vectorized.py compiles for every target, and the packed
# operations their loops must hold (the row max, the folds, the gradient)
# (the expf's binary64 lanes, mulpd and addpd, are native/vexp.py's explicit vectors)
HOT_KERNELS = {"loss._cross_entropy": (_cross_entropy, ("maxps", "addps", "subps", "divps", "mulps",
                                                        "mulpd", "addpd"))}


class NumbaLoss(NumbaBase):
    """Cross-entropy on the CPU with numba, parallel over rows (see `cross_entropy_into`)."""

    backend = "cpu-numba"
    takes_pieces = False

    def __init__(self, mode: str):
        self.numeric_mode = mode  # every mode runs the identical kernel: it keeps the stronger promise
        self.details = {"numba": numba.__version__, "threads": numba.get_num_threads()}

    def cross_entropy_into(self, logits, targets, ignore_index, c1, c2, qt, smoothing, g, want_grad,
                           grad, rows, status) -> int:
        """Per-row losses into rows (and the gradient into grad when want_grad).

        status[i] = 1 marks a row with an undecided expf/logf (its outputs are then
        unspecified); returns the number of such rows.
        """
        ignore = int(ignore_index)
        if not INT64_MIN <= ignore <= INT64_MAX:
            ignore = -1  # no int64 target can equal it; targets are validated to [0, V)
        n, v = logits.shape
        # whole rows per task, enough tasks to balance the threads: no bit depends on it
        per_task = max(1, min(-(-n // (4 * numba.get_num_threads())), TASK_ELEMENTS // v))
        return int(_cross_entropy(logits, targets, ignore, np.float32(c1), np.float32(c2),
                                  np.float32(qt), bool(smoothing), np.float32(g), bool(want_grad),
                                  grad, rows, status, per_task))


def load(mode: str, backend: str = "cpu-numba") -> NumbaLoss:
    return NumbaLoss(mode)
