"""numba CPU kernels for SGD, Adam/AdamW, the clip and gradient accumulation.

The per-element arithmetic (`sgd_elem`, `adam_elem`) is written once here, in
terms of the primitives add/sub/mul/div/sqrt. On the CPU those names are the
plain binary32 operators, and in the vector loops native/simd.py's lane-by-lane
vadd/vsub/vmul/vdiv/vsqrt (`vectorized`); `native/cuda/optim.py` compiles the
same source with libdevice `f*_rn` primitives (and the simulator's numpy ones),
so the order of operations cannot drift between them. The C kernels are the
independent second spelling, and the oracle (`oracles/optim.py`) the definition.

Step kernels take each operand as a table of addresses, one per tensor, and the
tensors' offsets (mojolike.core.pieces.table): a list of separate arrays is updated where it
lies, with no copy, and a flat array is the table of one tensor. The work is
split by element ranges (TASK elements per parallel task, across tensor
boundaries), so one big tensor spreads over every thread and 200 small ones
cost one launch; below native/threads.PARALLEL_MIN elements in all, a step runs on
the calling thread and costs none. Inside a task each tensor's run is 16-lane vectors, then
scalars for its last < 16 elements; a lane is the scalar operation, so where
the runs are cut never reaches the bits. Every step reads a gradient as
g * grad_scale (one binary32 multiply, first, in the element source; 1 when
there is no scale), so a clip or unscale costs no pass of its own; with
`write_back` the scaled value is also stored into the gradients, otherwise they
are only read.

`segment_fold` and `segment_fold_sumsq` are fold.py's per-tensor trees (the
tree restarts at each tensor); the second folds each chunk's values and their
rounded squares from one read.

Reproducibility: every float sum here is the fold tree (native/fold.py);
elementwise kernels are parallel over elements, so the thread count never
reaches the bits.

>>> import numpy as np
>>> p, g = np.float32([1.0]), np.float32([0.5])
>>> load("identical").sgd(p, g, np.zeros(1, np.float32), True, 0.1, 0.0, 1.0, 0.0, False, False, False, False)
>>> p
array([0.95], dtype=float32)
>>> [a.tolist() for a in load("identical").segment_fold_sumsq(np.float32([3, 4, -1]), [0, 2, 3])]
[[7.0, -1.0], [25.0, 1.0]]
"""
from __future__ import annotations

import math
from operator import add, mul, sub
from operator import truediv as div

import numpy as np
from numba import boolean, float32, njit, prange, types, void

from ..core.pieces import operands, table
from ..oracles.fold import CHUNK, LANES
from . import fold
from .base import NumbaBase
from .fold import I64, IN, NEG_ZERO, at
from .simd import WIDTH, vadd, vbutterfly, vdiv, vlane, vload, vmul, vsplat, vsqrt, vstore, vsub
from .retarget import retarget
from .threads import Twin

sqrt = math.sqrt  # numba lowers math.sqrt of a float32 to the IEEE sqrtss instruction
PRIMITIVES = ("add", "sub", "mul", "div", "sqrt")
_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
_INLINE = dict(inline="always", error_model="numpy")
F32 = float32[::1]
TASK = 1 << 14  # elements per parallel task (64 KiB of each operand)


def sgd_elem(p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov,
             maximize, coef):
    """One element of an SGD step (torch's single-tensor order) with the gradient read as
    g * coef (grad_scale; coef 1 reads g itself, x * 1 being x): returns (p, b, g * coef)."""
    g = mul(g, coef)
    scaled = g
    if maximize:
        g = -g
    if use_decay:
        g = add(g, mul(wd, p))
    if use_momentum:
        if first:
            b = g
        else:
            b = add(mul(b, momentum), mul(one_minus_damp, g))
        if nesterov:
            g = add(g, mul(momentum, b))
        else:
            g = b
    return sub(p, mul(lr, g)), b, scaled


def adam_elem(p, g, m, v, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
              param_decay, coupled, decoupled, maximize, coef):
    """One element of an Adam/AdamW step with the gradient read as g * coef: returns
    (p, m, v, g * coef)."""
    g = mul(g, coef)
    scaled = g
    if maximize:
        g = -g
    if decoupled:
        p = mul(p, param_decay)
    if coupled:
        g = add(g, mul(wd, p))
    m = add(mul(beta1, m), mul(one_minus_b1, g))
    v = add(mul(beta2, v), mul(one_minus_b2, mul(g, g)))
    d = add(div(sqrt(v), sqrt_bc2), eps)
    return sub(p, mul(step_size, div(m, d))), m, v, scaled


def vectorized(fn):
    """`fn` with the primitives bound to native/simd.py's vector operations: its float
    arguments are then vectors (scalars splat), and each lane is fn on that lane."""
    return retarget(fn, njit(**_INLINE), add=vadd, sub=vsub, mul=vmul, div=vdiv, sqrt=vsqrt)


_sgd_elem = njit(**_INLINE)(sgd_elem)
_adam_elem = njit(**_INLINE)(adam_elem)
_sgd_vec = vectorized(sgd_elem)
_adam_vec = vectorized(adam_elem)


@njit(**_INLINE)
def _run(offsets, lo, hi):
    """(tensor, start, stop, size): the run of the task range [lo, hi) that begins at element
    lo, as local indices [start, stop) into the tensor holding lo, and that tensor's size."""
    t = np.searchsorted(offsets, lo, side="right") - 1
    base = offsets[t]
    return t, lo - base, min(hi, offsets[t + 1]) - base, offsets[t + 1] - base


def _no_twin_kind(kinds, t):
    return 0


def _no_twin_views(P, TW, t, size):
    return 0, 0


def _no_twin_store(tw, pb, lo, hi, kind):
    return None


def sgd_task(P, G, B, TW, kinds, offsets, lo, hi, first, lr, momentum, one_minus_damp, wd,
             use_momentum, use_decay, nesterov, maximize, coef, write_back):
    """Elements [lo, hi) of an SGD step: each tensor's run as vectors, then scalars. After
    each vector or element of new p comes `twin_store` of the run's `twin_views`: no-ops in
    `_sgd` (they compile to nothing), the cast twins' store in native/optim_twins.py, which
    retargets this source, so the step itself is written once."""
    # without momentum B holds placeholders: never read, never written
    vlr, vmom, vomd, vwd = vsplat(lr), vsplat(momentum), vsplat(one_minus_damp), vsplat(wd)
    vcoef, vnz = vsplat(coef), vsplat(NEG_ZERO)
    while lo < hi:
        t, i, stop, size = _run(offsets, lo, hi)
        lo += stop - i
        kind = twin_kind(kinds, t)
        p, g, b = at(P[t], size), at(G[t], size), at(B[t], size if use_momentum else 1)
        tw, pb = twin_views(P, TW, t, size)
        while i + WIDTH <= stop:
            bi = vload(b, i) if use_momentum else vnz
            pi, bi, gi = _sgd_vec(vload(p, i), vload(g, i), bi, first, vlr, vmom, vomd, vwd,
                                  use_momentum, use_decay, nesterov, maximize, vcoef)
            vstore(p, i, pi)
            twin_store(tw, pb, i, i + WIDTH, kind)
            if use_momentum:
                vstore(b, i, bi)
            if write_back:
                vstore(g, i, gi)
            i += WIDTH
        for k in range(i, stop):
            bk = b[k] if use_momentum else NEG_ZERO
            p[k], bk, gk = _sgd_elem(p[k], g[k], bk, first, lr, momentum, one_minus_damp, wd,
                                     use_momentum, use_decay, nesterov, maximize, coef)
            twin_store(tw, pb, k, k + 1, kind)
            if use_momentum:
                b[k] = bk
            if write_back:
                g[k] = gk


def adam_task(P, G, M, V, TW, kinds, offsets, lo, hi, beta1, beta2, eps, wd, one_minus_b1,
              one_minus_b2, step_size, sqrt_bc2, param_decay, coupled, decoupled, maximize, coef,
              write_back):
    """Elements [lo, hi) of an Adam/AdamW step, with the twin hooks of `sgd_task`."""
    vb1, vb2, veps, vwd = vsplat(beta1), vsplat(beta2), vsplat(eps), vsplat(wd)
    vomb1, vomb2, vstep, vbc2 = (vsplat(one_minus_b1), vsplat(one_minus_b2), vsplat(step_size),
                                 vsplat(sqrt_bc2))
    vdecay, vcoef = vsplat(param_decay), vsplat(coef)
    while lo < hi:
        t, i, stop, size = _run(offsets, lo, hi)
        lo += stop - i
        kind = twin_kind(kinds, t)
        p, g, m, v = at(P[t], size), at(G[t], size), at(M[t], size), at(V[t], size)
        tw, pb = twin_views(P, TW, t, size)
        while i + WIDTH <= stop:
            pi, mi, vi, gi = _adam_vec(vload(p, i), vload(g, i), vload(m, i), vload(v, i), vb1,
                                       vb2, veps, vwd, vomb1, vomb2, vstep, vbc2, vdecay, coupled,
                                       decoupled, maximize, vcoef)
            vstore(p, i, pi)
            twin_store(tw, pb, i, i + WIDTH, kind)
            vstore(m, i, mi)
            vstore(v, i, vi)
            if write_back:
                vstore(g, i, gi)
            i += WIDTH
        for k in range(i, stop):
            p[k], m[k], v[k], gk = _adam_elem(p[k], g[k], m[k], v[k], beta1, beta2, eps, wd,
                                              one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                                              param_decay, coupled, decoupled, maximize, coef)
            twin_store(tw, pb, k, k + 1, kind)
            if write_back:
                g[k] = gk


# the steps without twins: the hooks bound to no-ops
_NO_TWINS = dict(twin_kind=njit(**_INLINE)(_no_twin_kind),
                 twin_views=njit(**_INLINE)(_no_twin_views),
                 twin_store=njit(**_INLINE)(_no_twin_store))
_sgd_task = retarget(sgd_task, njit(**_INLINE), **_NO_TWINS)
_adam_task = retarget(adam_task, njit(**_INLINE), **_NO_TWINS)


@njit(void(I64, I64, I64, I64, boolean, float32, float32, float32, float32, boolean, boolean,
           boolean, boolean, float32, boolean), parallel=True, **_STRICT)
def _sgd(P, G, B, offsets, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov,
         maximize, coef, write_back):
    # P and offsets stand in for the twins' table and kinds: the no-op hooks never read them
    n = offsets[offsets.size - 1]
    for task in prange((n + TASK - 1) // TASK):
        _sgd_task(P, G, B, P, offsets, offsets, task * TASK, min(task * TASK + TASK, n), first,
                  lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize,
                  coef, write_back)


@njit(void(I64, I64, I64, I64, I64, float32, float32, float32, float32, float32, float32, float32,
           float32, float32, boolean, boolean, boolean, float32, boolean), parallel=True, **_STRICT)
def _adam(P, G, M, V, offsets, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
          param_decay, coupled, decoupled, maximize, coef, write_back):
    n = offsets[offsets.size - 1]
    for task in prange((n + TASK - 1) // TASK):
        _adam_task(P, G, M, V, P, offsets, offsets, task * TASK, min(task * TASK + TASK, n),
                   beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                   param_decay, coupled, decoupled, maximize, coef, write_back)


@njit(void(I64, I64, float32), parallel=True, **_STRICT)
def _scale(G, offsets, coef):
    n = offsets[offsets.size - 1]
    for task in prange((n + TASK - 1) // TASK):
        lo, hi = task * TASK, min(task * TASK + TASK, n)
        vcoef = vsplat(coef)
        while lo < hi:
            t, i, stop, size = _run(offsets, lo, hi)
            lo += stop - i
            g = at(G[t], size)
            while i + WIDTH <= stop:
                vstore(g, i, vmul(vload(g, i), vcoef))
                i += WIDTH
            for k in range(i, stop):
                g[k] = g[k] * coef


@njit(void(IN, IN, F32), parallel=True, **_STRICT)
def _add(a, b, out):
    for i in prange(out.size):
        out[i] = a[i] + b[i]


@njit(**_INLINE)
def _chunk_nonfinite(x, base, n, acc):
    """(acc + the chunk's x * 0, in vectors; the scalar sum of x * 0 over a short last chunk):
    x * 0 is a signed zero for finite x and NaN for inf and NaN, and a NaN stays NaN through
    every add. A whole chunk is read as fold.py's _chunk_dot reads it (two vectors per row,
    the rows a fixed count), which keeps this pass as fast as the clip's sum of squares
    (x * 0 measured 6% faster than x - x here, in medians of 40 passes over 64 MiB)."""
    if base + CHUNK <= n:
        zero = vsplat(np.float32(0.0))
        lo, hi = zero, zero
        for i in range(LANES):
            row = base + i * LANES
            lo = vadd(lo, vmul(vload(x, row), zero))
            hi = vadd(hi, vmul(vload(x, row + WIDTH), zero))
        return vadd(acc, vadd(lo, hi)), np.float32(0.0)
    tail = np.float32(0.0)
    for k in range(base, n):
        tail = tail + x[k] * np.float32(0.0)
    return acc, tail


@njit(boolean(I64, I64), parallel=True, **_STRICT)
def _all_finite(G, offsets):
    """Whether every element is finite, over each tensor's 1024-element chunks in groups of
    fold.GROUP (as _segment_sums walks them: a chunk starts on a tensor's own boundary, so
    its vectors are as aligned as the tensor). Each group leaves one float32, NaN when it
    saw a non-finite value, and the flag is an OR of NaN tests: no order can change it.

    A float32 per group, as the fold's partials: with a byte per group this pass measured
    8 ms a step slower than the clip's sum of squares beside a CPU-bound process (on par
    on an idle machine)."""
    nseg = G.size
    starts = fold.chunk_starts(offsets)
    nchunks = starts[nseg]
    ngroups = (nchunks + fold.GROUP - 1) // fold.GROUP
    partials = np.empty(ngroups, np.float32)
    for grp in prange(ngroups):
        c0 = grp * fold.GROUP
        s = np.searchsorted(starts, c0, side="right") - 1
        acc = vsplat(np.float32(0.0))
        tail = np.float32(0.0)
        for c in range(c0, min(c0 + fold.GROUP, nchunks)):
            while starts[s + 1] <= c:
                s += 1
            n = offsets[s + 1] - offsets[s]
            acc, t = _chunk_nonfinite(at(G[s], n), (c - starts[s]) * CHUNK, n, acc)
            tail = tail + t
        for j in range(WIDTH):
            tail = tail + vlane(acc, j)
        partials[grp] = tail
    bad = False
    for i in range(ngroups):
        bad |= partials[i] != partials[i]
    return not bad


@njit(void(IN, F32), **_STRICT)
def _norm_squares(sumsqs, out):
    for j in range(sumsqs.size):
        n = sqrt(sumsqs[j])
        out[j] = n * n


@njit(types.UniTuple(float32, 2)(float32, float32, float32), **_STRICT)
def _clip_finish(total_sq, max_norm, eps):
    total = sqrt(total_sq)
    den = total + eps
    coef = max_norm / den
    if coef > np.float32(1.0):
        coef = np.float32(1.0)
    return total, coef


@njit(**_INLINE)
def _chunk_fold_sumsq(x, base, n, acc, acc2):
    """The fold tree's partials of one chunk's values and of their rounded squares, from one
    read of the chunk: each equal to fold.py's _chunk_fold and _chunk_dot(x, x)."""
    if base + CHUNK <= n:
        lo, hi = vsplat(NEG_ZERO), vsplat(NEG_ZERO)
        lo2, hi2 = vsplat(NEG_ZERO), vsplat(NEG_ZERO)
        for i in range(LANES):
            row = base + i * LANES
            a = vload(x, row)
            b = vload(x, row + WIDTH)
            lo = vadd(lo, a)
            hi = vadd(hi, b)
            lo2 = vadd(lo2, vmul(a, a))
            hi2 = vadd(hi2, vmul(b, b))
        return vbutterfly(lo, hi), vbutterfly(lo2, hi2)
    acc[:] = NEG_ZERO  # the last, short chunk: padded slots add -0.0, so skip them
    acc2[:] = NEG_ZERO
    for k in range(base, n):
        j = k - base & (LANES - 1)
        y = x[k]
        acc[j] = acc[j] + y
        sq = y * y
        acc2[j] = acc2[j] + sq
    fold._butterfly(acc)
    fold._butterfly(acc2)
    return acc[0], acc2[0]


@njit(void(I64, I64, boolean, F32, F32), parallel=True, **_STRICT)
def _segment_sums(addrs, offsets, squares, sums, sumsqs):
    """sums[s] = fold of segment s (offsets[s+1] - offsets[s] floats at addrs[s]); with
    `squares` also sumsqs[s] = its sumsq, from the same read (without, sumsqs is untouched).

    As fold._segment_sumsq: one parallel pass over the chunks of all segments, then each
    segment's pairwise tree over its own partials. An empty segment's sums are -0.0, the
    identity the tree pads with.
    """
    nseg = addrs.size
    starts = fold.chunk_starts(offsets)
    nchunks = starts[nseg]
    partials = np.empty(nchunks, np.float32)
    partials2 = np.empty(nchunks if squares else 0, np.float32)
    for grp in prange((nchunks + fold.GROUP - 1) // fold.GROUP):
        acc = np.empty(LANES, np.float32)
        acc2 = np.empty(LANES, np.float32)
        c0 = grp * fold.GROUP
        s = np.searchsorted(starts, c0, side="right") - 1
        for c in range(c0, min(c0 + fold.GROUP, nchunks)):
            while starts[s + 1] <= c:
                s += 1
            n = offsets[s + 1] - offsets[s]
            x = at(addrs[s], n)
            if squares:
                partials[c], partials2[c] = _chunk_fold_sumsq(x, (c - starts[s]) * CHUNK, n, acc,
                                                              acc2)
            else:
                partials[c] = fold._chunk_fold(x, (c - starts[s]) * CHUNK, n, acc)
    for s in range(nseg):
        a, b = starts[s], starts[s + 1]
        sums[s] = fold._pairwise(partials[a:b]) if b > a else NEG_ZERO
        if squares:
            sumsqs[s] = fold._pairwise(partials2[a:b]) if b > a else NEG_ZERO


def segment_sums(x, offsets, squares: bool) -> tuple[np.ndarray, np.ndarray]:
    """(fold of every segment, and with `squares` sumsq of every segment, else an empty array):
    x is one flat array cut at `offsets`, or pieces, or a list of 1-D float32 arrays."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    sums = np.empty(offsets.size - 1, np.float32)
    sumsqs = np.empty(sums.size if squares else 0, np.float32)
    segment_sums_kernel(offsets[-1], table(x, offsets), offsets, squares, sums, sumsqs)
    return sums, sumsqs


# the kernels tests/test_vectorized.py compiles for every target, and the packed
# operations their loops must hold
HOT_KERNELS = {"optim._sgd": (_sgd, ("mulps", "addps", "subps")),
               "optim._adam": (_adam, ("mulps", "addps", "subps", "divps", "sqrtps")),
               "optim._scale": (_scale, ("mulps",)), "optim._add": (_add, ("addps",)),
               "optim._all_finite": (_all_finite, ("mulps", "addps")),
               "optim._segment_sums": (_segment_sums, ("mulps", "addps"))}

# called with the number of elements first: below native/threads.PARALLEL_MIN they run on
# the calling thread
sgd_kernel, adam_kernel, scale_kernel, add_kernel = Twin(_sgd), Twin(_adam), Twin(_scale), Twin(_add)
all_finite_kernel, segment_sums_kernel = Twin(_all_finite), Twin(_segment_sums)


class NumbaOptim(NumbaBase):
    """Optimizer kernels on the CPU with numba, updated in place. The parameters and
    gradients may be flat float32 arrays or pieces (`takes_pieces`, mojolike.optim.params.Pieces); the state is flat."""

    takes_pieces = True

    def new_state(self, n: int):
        return np.zeros(n, np.float32)

    def sgd(self, p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay,
            nesterov, maximize, *, grad_scale=None, write_back=False):
        """One SGD pass reading each gradient as g * grad_scale (None: 1); with write_back the
        scaled gradient is stored into g, else g is left as it was."""
        (tp, tg), cut = operands(p, g)
        # without momentum b is a placeholder: every entry points at it, none is touched
        tb = table(b, cut if use_momentum else np.zeros_like(cut))
        sgd_kernel(cut[-1], tp, tg, tb, cut, first, lr, momentum, one_minus_damp, wd, use_momentum,
                   use_decay, nesterov, maximize, _coef(grad_scale), bool(write_back))

    def adam(self, p, g, m, v, *scalars_and_flags, grad_scale=None, write_back=False):
        """One Adam pass reading each gradient as g * grad_scale (None: 1); with write_back the
        scaled gradient is stored into g, else g is left as it was."""
        (tp, tg, tm, tv), cut = operands(p, g, m, v)
        adam_kernel(cut[-1], tp, tg, tm, tv, cut, *scalars_and_flags, _coef(grad_scale),
                    bool(write_back))

    def sgd_twins(self, p, g, b, tw, kinds, cut, first, lr, momentum, one_minus_damp, wd,
                  use_momentum, use_decay, nesterov, maximize, *, grad_scale=None,
                  write_back=False):
        """`sgd`, writing each element's cast twin in the same pass (native/optim_twins.py)."""
        from . import optim_twins  # loaded by the first step with twins
        optim_twins.sgd_twins(p, g, b, tw, kinds, cut, first, lr, momentum, one_minus_damp, wd,
                              use_momentum, use_decay, nesterov, maximize, _coef(grad_scale),
                              write_back)

    def adam_twins(self, p, g, m, v, tw, kinds, cut, *scalars_and_flags, grad_scale=None,
                   write_back=False):
        """`adam`, writing each element's cast twin in the same pass (native/optim_twins.py)."""
        from . import optim_twins
        optim_twins.adam_twins(p, g, m, v, tw, kinds, cut, *scalars_and_flags, _coef(grad_scale),
                               bool(write_back))

    def scale(self, g, coef):
        (tg,), cut = operands(g)
        scale_kernel(cut[-1], tg, cut, coef)

    def add(self, a, b, out):
        add_kernel(out.size, a, b, out)

    def all_finite(self, x) -> bool:
        (tx,), cut = operands(x)
        return bool(all_finite_kernel(cut[-1], tx, cut))

    def segment_sumsq(self, x, offsets):
        return fold.segment_sumsq(x, offsets)

    def segment_fold(self, x, offsets):
        """The fold of every tensor's cells."""
        return segment_sums(x, offsets, False)[0]

    def segment_fold_sumsq(self, x, offsets):
        """(fold, sumsq) of every tensor's cells, from one read of x."""
        return segment_sums(x, offsets, True)

    def clip_coef(self, sumsqs, max_norm, eps):
        """(total, coef): total = sqrt(fold(sqrt(s_j)^2)), coef = min(max_norm / (total + eps), 1)."""
        sq = np.empty(sumsqs.size, np.float32)
        _norm_squares(sumsqs, sq)
        p = fold._workspace(sq.size)
        fold.fold_partials(sq.size, sq, p)
        total, coef = _clip_finish(fold._pairwise(p), max_norm, eps)
        return np.float32(total), np.float32(coef)


def _coef(grad_scale) -> np.float32:
    return np.float32(1.0 if grad_scale is None else grad_scale)


def load(mode: str, backend: str = "cpu-numba") -> NumbaOptim:
    return NumbaOptim(mode)
