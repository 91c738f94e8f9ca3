"""The four cpu-numba GELU kernels (forward and backward, erf and tanh) on WIDTH lanes at once.

One element at a time, erf's series loop (a division per term, a trip count that depends
on the input) costs tens of times torch's GELU. These kernels run on native/verf_tanh.py's
vector tanhf and erff, whose lanes equal erf_tanh.py's element functions bit for bit and
decided flag for flag. The GELU formulas are erf_tanh.py's binary32 steps on `Vec`
lanes; a lane whose inner function is undecided gets UNDECIDED (0x7FA00DAD) and is
counted, a NaN result gets the canonical 0x7FC00000, both by a scalar pass over the lanes
concerned. The last n % WIDTH
elements of a block run erf_tanh.py's scalar slots. erf_tanh.py's scalar kernels stay as
the twins the tests and benchmarks/vgelu_exhaustive.py compare these with.

erf's series (from 1/2 up) costs a division per term for 13 to 60 terms, the rest a few
dozen operations. The erf kernels first try native/verf_lanes.py's polynomial on every
lane, then native/verf_table.py's on the lanes it leaves, each with a budget wide enough
that it decides no input the scalar would leave undecided, so every lane they decide is
the scalar's (`verf_try`). The GELU formula follows in the same pass. The few lanes left
for the series (about one in 2^19) would run its loop for all sixteen lanes of a vector,
so their positions are noted (compress_store) and, after the block, they are gathered
WIDTH at a time, run on full vectors and their slots written again (`verf_block` is the
same path for erff alone, the one benchmarks/vgelu_exhaustive.py walks).

Caching: these kernels inline native/verf_tanh.py's, native/erf_tanh.py's,
native/verf_table.py's, native/crmath.py's, native/vexp.py's, native/simd.py's and
native/simd64.py's functions, and numba's cache=True checks only this file: after
editing those, clear the numba cache (__pycache__/*.nbi, *.nbc).

Reproducibility: elementwise, lanes independent; a lane's operations are the scalar's,
so block size, thread count and target cannot reach the bits (every decided value is the
correctly rounded one, erf_tanh.py's exhaustive walk).

>>> import numpy as np
>>> x = np.float32([0.5, -0.0, 3.0, np.nan] * 5)
>>> out = np.empty_like(x)
>>> gelu_into(x, False, out), out[:4].tolist(), hex(out.view(np.uint32)[3])
(0, [0.3457312285900116, -0.0, 2.995950222015381, nan], '0x7fc00000')
"""
from __future__ import annotations

import numpy as np
from numba import int64, njit, prange

from ..core.fallbacks import Undecided
from .erf_tanh import (ALPHA, BETA, BETA_ERF, BLOCK, DEFAULT_NAN, ERF_POLY_ERR, HALF32, IN, KAPPA,
                       MINUS_HALF32, ONE32, OUT, OUT_BITS, THREE32, UNDECIDED, ZERO32,
                       gelu_erf_grad_slot, gelu_erf_slot, gelu_tanh_grad_slot, gelu_tanh_slot)
from .simd import (WIDTH, vadd, vall, vand, vload, vmul, vne, vnot, vor, vselect, vsplat, vstore,
                   vsub)
from .simd64 import compress_store, dselect, mask_bits, vany, viota
from .verf_lanes import ERF_TRY_ERR, verf_lanes
from .verf_table import TABLE_ERR, verf_table_into
from .verf_tanh import QUARTER, verf_any, verf_finish, verf_parts, verf_poly, vround_test, vtanh_any
from .vexp import vexp_any

_jit = njit(inline="always", error_model="numpy")
_STRICT = {"cache": True, "error_model": "numpy"}


@_jit
def verf_paths(ain, sg, inside, series):
    """erf_elem's (r, decided) on the lanes inside, but the series lanes try native/verf_table.py
    first (it decides no lane the series leaves undecided): the polynomial below 1/2 where some
    lane needs it, the table's pieces above."""
    y = ain
    if vany(vand(inside, vnot(series))):
        y = verf_poly(ain)
    y = verf_table_into(ain, y, series)
    err = dselect(series, vsplat(TABLE_ERR), vsplat(ERF_POLY_ERR))
    return vround_test(y, vmul(y, err), sg)


@_jit
def verf_try(w):
    """(r, ok, series) of erff(w) lane by lane, r and ok erf_any's wherever series is False: every
    lane tries native/verf_lanes.py's polynomial, the few it leaves take `verf_paths`; the
    series lanes those leave (series True, about one in 2^19) still need erf_any's series,
    which a vector with one such lane would run for all its lanes, so the callers gather
    them WIDTH at a time (`vgathered`)."""
    a, sg, inside, series = verf_parts(w)
    ain = dselect(inside, a, vsplat(QUARTER))
    y = verf_lanes(ain)  # one polynomial per lane (it decides no lane the scalar leaves)
    r, ok = vround_test(y, vmul(y, vsplat(ERF_TRY_ERR)), sg)
    again = vand(inside, vnot(ok))
    if vany(again):  # rare: the scalar's own path on this vector
        r2, ok2 = verf_paths(ain, sg, inside, series)
        r = vselect(again, r2, r)
        ok = vor(vand(again, ok2), vand(vnot(again), ok))
    if not vall(inside):  # some lane is +-0, NaN or at least ERF_ONE: its special value
        r, ok = verf_finish(w, a, sg, inside, r, ok)
    return r, ok, vand(series, vnot(ok))


@njit(**_STRICT)
def _compress(at, m, i, series):
    return m + compress_store(at, m, viota(i), series)


@_jit
def note_series(at, m, i, series):
    """Appends the positions i + lane of the series lanes to at[m:]; returns the new count.
    The compress runs out of line, only when some lane is on the series: it is microcoded
    on some CPUs (Zen 4)."""
    if vany(series):
        return _compress(at, m, i, series)
    return m


@_jit
def vgathered(src, at, g, m, lanes):
    """src at positions at[g : g + WIDTH] as a vector, the last group padded with its last lane."""
    for j in range(WIDTH):
        lanes[j] = src[at[min(g + j, m - 1)]]
    return vload(lanes, 0)


@_jit
def put_lane(v, decided, ob, i):
    """The pattern of slot i, which holds v: UNDECIDED where not decided, else the canonical NaN
    where v is NaN. Returns 1 for an undecided slot, else 0."""
    if not decided:
        ob[i] = UNDECIDED
        return 1
    if v != v:
        ob[i] = DEFAULT_NAN
    return 0


@_jit
def scatter_put(r, ok, out, ob, at, g, m, lanes):
    """vput's writes for the lanes gathered from at[g : g + WIDTH]; returns the undecided count."""
    vstore(lanes, 0, r)
    decided = mask_bits(ok)
    undecided = 0
    for j in range(min(WIDTH, m - g)):
        out[at[g + j]] = lanes[j]
        undecided += put_lane(lanes[j], (decided >> j) & 1, ob, at[g + j])
    return undecided


@_jit
def verf_block(x, lo, stop, t, t_ok, scale):
    """t[i - lo] = erff(x[i] scale) for lo <= i < stop (WIDTH divides stop - lo), t_ok[i - lo]
    1 where decided, else 0 (scale: ALPHA in the GELU kernels; 1 in
    benchmarks/vgelu_exhaustive.py, which walks every binary32 input through this): the
    kernels' path, `verf_try` on every vector and erf_any's series on the gathered lanes it
    leaves, with t and t_ok where the kernels go on to their GELU formulas."""
    one, zero = vsplat(ONE32), vsplat(ZERO32)
    at = np.empty(stop - lo + WIDTH, np.int64)
    lanes = np.empty(WIDTH, np.float32)
    m = 0
    for i in range(lo, stop, WIDTH):
        r, ok, series = verf_try(vmul(vload(x, i), vsplat(scale)))
        vstore(t, i - lo, r)
        vstore(t_ok, i - lo, vselect(ok, one, zero))
        m = note_series(at, m, i, series)
    for g in range(0, m, WIDTH):
        r, ok = verf_any(vmul(vgathered(x, at, g, m, lanes), vsplat(scale)))
        vstore(lanes, 0, r)
        decided = mask_bits(ok)
        for j in range(min(WIDTH, m - g)):
            t[at[g + j] - lo] = lanes[j]
            t_ok[at[g + j] - lo] = ONE32 if (decided >> j) & 1 else ZERO32


@_jit
def vgelu_erf(v, t):
    """gelu_erf_slot's value lane by lane, t = erff(v ALPHA)."""
    half_x = vmul(v, vsplat(HALF32))
    return vmul(half_x, vadd(vsplat(ONE32), t))


@_jit
def vtanh_inner(v, x_sq):
    """erf_tanh.tanh_inner lane by lane."""
    x_cube = vmul(x_sq, v)
    return vmul(vsplat(BETA), vadd(v, vmul(vsplat(KAPPA), x_cube)))


@_jit
def vgelu_tanh(v):
    """gelu_tanh_slot's (value, decided) lane by lane."""
    t, ok = vtanh_any(vtanh_inner(v, vmul(v, v)))
    return vmul(vmul(vsplat(HALF32), v), vadd(vsplat(ONE32), t)), ok


@_jit
def vgelu_erf_grad(d, v, t, ok):
    """gelu_erf_grad_slot's (value, decided) lane by lane, t = erff(v ALPHA) decided where ok."""
    e, ok2 = vexp_any(vmul(vmul(v, v), vsplat(MINUS_HALF32)))
    cdf = vmul(vsplat(HALF32), vadd(vsplat(ONE32), t))
    pdf = vmul(vsplat(BETA_ERF), e)
    return vmul(d, vadd(cdf, vmul(v, pdf))), vand(ok, ok2)


@_jit
def vgelu_tanh_grad(d, v):
    """gelu_tanh_grad_slot's (value, decided) lane by lane, Activation.cpp's steps."""
    x_sq = vmul(v, v)
    t, ok = vtanh_any(vtanh_inner(v, x_sq))
    half, one = vsplat(HALF32), vsplat(ONE32)
    left = vmul(half, v)
    right = vadd(one, t)
    left_derivative = vmul(half, right)
    tanh_derivative = vsub(one, vmul(t, t))
    three_kappa = vmul(vsplat(THREE32), vsplat(KAPPA))
    inner_derivative = vmul(vsplat(BETA), vadd(one, vmul(three_kappa, x_sq)))
    right_derivative = vmul(vmul(left, tanh_derivative), inner_derivative)
    return vmul(d, vadd(left_derivative, right_derivative)), ok


@_jit
def vbad(r, ok):
    """The lanes `put_lanes` must write again: undecided, or a NaN result (bits)."""
    return mask_bits(vor(vnot(ok), vne(r, r)))


@njit(**_STRICT)
def put_lanes(out, ob, i, bad, decided):
    """UNDECIDED in the slots of the undecided lanes among `bad`, the canonical NaN where a
    lane's result is NaN (as erf_tanh.put). Returns the number of undecided lanes."""
    undecided = 0
    for j in range(WIDTH):
        if (bad >> j) & 1:
            undecided += put_lane(out[i + j], (decided >> j) & 1, ob, i + j)
    return undecided


@_jit
def vput(r, ok, out, ob, i):
    """out[i : i + WIDTH] = r, then `put_lanes` (out of line: the common vector needs none)
    where a lane is undecided or NaN. Returns the number of undecided lanes."""
    vstore(out, i, r)
    bad = vbad(r, ok)
    if bad != 0:
        return put_lanes(out, ob, i, bad, mask_bits(ok))
    return 0



@njit(int64[:](IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_erf(x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, x.size)
        stop = hi - (hi - lo) % WIDTH
        at = np.empty(stop - lo + WIDTH, np.int64)
        lanes = np.empty(WIDTH, np.float32)
        m = 0
        undecided = 0
        for i in range(lo, stop, WIDTH):
            v = vload(x, i)
            t, ok, series = verf_try(vmul(v, vsplat(ALPHA)))
            r, ok = vgelu_erf(v, t), vor(ok, series)  # a series lane: written again below
            undecided += vput(r, ok, out, ob, i)
            m = note_series(at, m, i, series)
        for g in range(0, m, WIDTH):  # rare: erf_any's series on the gathered lanes
            v = vgathered(x, at, g, m, lanes)
            t, ok = verf_any(vmul(v, vsplat(ALPHA)))
            undecided += scatter_put(vgelu_erf(v, t), ok, out, ob, at, g, m, lanes)
        for i in range(stop, hi):  # the tail: the scalar slots
            undecided += gelu_erf_slot(x[i], out, ob, i)
        counts[c] = undecided
    return counts


@njit(int64[:](IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_tanh(x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, x.size)
        stop = hi - (hi - lo) % WIDTH
        undecided = 0
        for i in range(lo, stop, WIDTH):
            r, ok = vgelu_tanh(vload(x, i))
            undecided += vput(r, ok, out, ob, i)
        for i in range(stop, hi):  # the tail: the scalar slots
            undecided += gelu_tanh_slot(x[i], out, ob, i)
        counts[c] = undecided
    return counts


@njit(int64[:](IN, IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_erf_grad(dy, x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, x.size)
        stop = hi - (hi - lo) % WIDTH
        at = np.empty(stop - lo + WIDTH, np.int64)
        lanes, lanes_dy = np.empty(WIDTH, np.float32), np.empty(WIDTH, np.float32)
        m = 0
        undecided = 0
        for i in range(lo, stop, WIDTH):
            v = vload(x, i)
            t, ok, series = verf_try(vmul(v, vsplat(ALPHA)))
            r, ok = vgelu_erf_grad(vload(dy, i), v, t, vor(ok, series))
            ok = vor(ok, series)  # series slots: written again below
            undecided += vput(r, ok, out, ob, i)
            m = note_series(at, m, i, series)
        for g in range(0, m, WIDTH):  # rare: erf_any's series on the gathered lanes
            v = vgathered(x, at, g, m, lanes)
            t, ok = verf_any(vmul(v, vsplat(ALPHA)))
            r, ok = vgelu_erf_grad(vgathered(dy, at, g, m, lanes_dy), v, t, ok)
            undecided += scatter_put(r, ok, out, ob, at, g, m, lanes)
        for i in range(stop, hi):  # the tail: the scalar slots
            undecided += gelu_erf_grad_slot(dy[i], x[i], out, ob, i)
        counts[c] = undecided
    return counts


@njit(int64[:](IN, IN, OUT, OUT_BITS), parallel=True, **_STRICT)
def _gelu_tanh_grad(dy, x, out, ob):
    n = x.size
    nblocks = (n + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        lo, hi = c * BLOCK, min(c * BLOCK + BLOCK, x.size)
        stop = hi - (hi - lo) % WIDTH
        undecided = 0
        for i in range(lo, stop, WIDTH):
            r, ok = vgelu_tanh_grad(vload(dy, i), vload(x, i))
            undecided += vput(r, ok, out, ob, i)
        for i in range(stop, hi):  # the tail: the scalar slots
            undecided += gelu_tanh_grad_slot(dy[i], x[i], out, ob, i)
        counts[c] = undecided
    return counts


# the kernels tests/test_vectorized.py compiles for every target, and the packed operations
# their loops must hold (erf's series divides; tanh's exp64 formula divides once)
HOT_KERNELS = {"vgelu._gelu_erf": (_gelu_erf, ("mulpd", "addpd", "divpd")),
               "vgelu._gelu_tanh": (_gelu_tanh, ("mulpd", "addpd", "divpd", "mulps")),
               "vgelu._gelu_erf_grad": (_gelu_erf_grad, ("mulpd", "addpd", "divpd")),
               "vgelu._gelu_tanh_grad": (_gelu_tanh_grad, ("mulpd", "addpd", "divpd", "mulps"))}


@njit(int64[:](OUT_BITS, int64[:]), **_STRICT)
def _positions(ob, counts):
    """The flat positions of the UNDECIDED slots, read in the blocks whose count is not 0."""
    at = np.empty(counts.sum(), np.int64)
    m = 0
    for c in range(counts.size):
        if counts[c]:
            for i in range(c * BLOCK, min(c * BLOCK + BLOCK, ob.size)):
                if ob[i] == UNDECIDED and m < at.size:
                    at[m] = i
                    m += 1
    return at[:m]


def _undecided(counts, ob) -> int:
    """The kernel's per-block counts as the number of UNDECIDED slots, with their positions."""
    if not counts.any():
        return 0
    return Undecided(_positions(ob, counts))


def gelu_into(x, tanh: bool, out) -> int:
    """out = gelu_tanh(x) if tanh else gelu_erf(x); returns the number of UNDECIDED slots
    (fallbacks.Undecided, their positions with it)."""
    ob = out.view(np.uint32)
    return _undecided((_gelu_tanh if tanh else _gelu_erf)(x, out, ob), ob)


def gelu_backward_into(dy, x, tanh: bool, dx) -> int:
    """dx = gelu_tanh_grad(dy, x) if tanh else gelu_erf_grad(dy, x); returns the UNDECIDED count
    (fallbacks.Undecided, their positions with it)."""
    ob = dx.view(np.uint32)
    return _undecided((_gelu_tanh_grad if tanh else _gelu_erf_grad)(dy, x, dx, ob), ob)
