"""numba CPU kernels of the SGD and Adam/AdamW steps that also write cast twins.

The steps of native/optim.py (the same element functions, vector and scalar, and the
same split into tasks and runs), with one more operand: each tensor's twin, a uint16
array of bit patterns at an address of the table TW, and its kind (0 none, 1 bfloat16,
2 float16). Right after a vector or element of new master values is stored, their
patterns are read back and rounded to the twin's type by native/mixed.py's
`bf16_elem` / `f16_elem` (mojolike.cast's rounding, integer arithmetic only), so the
twin is written in the same pass as the parameter. A tensor of kind 0 is never
touched. native/optim.py loads this module on the first step with twins; the steps
without twins keep their own kernels.

Reproducibility: elementwise; a twin element depends on its own master's bits alone,
so no thread count or run cut reaches them.

>>> import numpy as np
>>> from mojolike.core.pieces import Pieces
>>> p, g, tw = np.float32([1.0, 3.0]), np.float32([1.0, 1.0]), np.zeros(2, np.uint16)
>>> cut = np.int64([0, 1, 2])
>>> sgd_twins(p, g, np.zeros(1, np.float32), Pieces([tw[:1], tw[1:]], cut), np.int64([1, 2]),
...           cut, True, 0.5, 0.0, 1.0, 0.0, False, False, False, False, 1.0, False)
>>> p.tolist(), [hex(v) for v in tw.tolist()]
([0.5, 2.5], ['0x3f00', '0x4100'])
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import boolean, float32, njit, prange, types, uint16, uint32, void
from numba.core.extending import intrinsic

from ..core.pieces import Pieces, address, table
from .fold import I64, NEG_ZERO, at
from .mixed import bf16_elem, f16_elem, wide
from .optim import _INLINE, _STRICT, TASK, _adam_elem, _adam_vec, _run, _sgd_elem, _sgd_vec
from .simd import WIDTH, vload, vsplat, vstore
from .threads import Twin

_bf16 = njit(**_INLINE)(bf16_elem)
_f16 = njit(**_INLINE)(f16_elem)


@intrinsic
def _u16_pointer(typingctx, addr):
    """The integer addr as a uint16 pointer (LLVM inttoptr)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.PointerType(ir.IntType(16)))
    return types.CPointer(uint16)(addr), codegen


@intrinsic
def _u32_pointer(typingctx, addr):
    """The integer addr as a uint32 pointer: a float32 array's bit patterns."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.PointerType(ir.IntType(32)))
    return types.CPointer(uint32)(addr), codegen


@njit(**_INLINE)
def _store_twins(tw, pb, lo, hi, kind):
    """tw[k] = the kind's pattern of the master pattern pb[k], for k in [lo, hi)."""
    if kind == 1:
        for k in range(lo, hi):
            tw[k] = uint16(_bf16(wide(pb[k])))
    elif kind == 2:
        for k in range(lo, hi):
            tw[k] = uint16(_f16(wide(pb[k])))


@njit(void(I64, I64, I64, I64, I64, I64, boolean, float32, float32, float32, float32, boolean,
           boolean, boolean, boolean, float32, boolean), parallel=True, **_STRICT)
def _sgd_tw(P, G, B, TW, kinds, offsets, first, lr, momentum, one_minus_damp, wd, use_momentum,
            use_decay, nesterov, maximize, coef, write_back):
    # native/optim.py's _sgd, plus the twin after each vector or element of new p
    n = offsets[offsets.size - 1]
    for task in prange((n + TASK - 1) // TASK):
        lo, hi = task * TASK, min(task * TASK + TASK, n)
        vlr, vmom, vomd, vwd = vsplat(lr), vsplat(momentum), vsplat(one_minus_damp), vsplat(wd)
        vcoef, vnz = vsplat(coef), vsplat(NEG_ZERO)
        while lo < hi:
            t, i, stop, size = _run(offsets, lo, hi)
            lo += stop - i
            kind = kinds[t]
            p, g, b = at(P[t], size), at(G[t], size), at(B[t], size if use_momentum else 1)
            pb, tw = numba.carray(_u32_pointer(P[t]), size), numba.carray(_u16_pointer(TW[t]), size)
            while i + WIDTH <= stop:
                bi = vload(b, i) if use_momentum else vnz
                pi, bi, gi = _sgd_vec(vload(p, i), vload(g, i), bi, first, vlr, vmom, vomd, vwd,
                                      use_momentum, use_decay, nesterov, maximize, vcoef)
                vstore(p, i, pi)
                _store_twins(tw, pb, i, i + WIDTH, kind)
                if use_momentum:
                    vstore(b, i, bi)
                if write_back:
                    vstore(g, i, gi)
                i += WIDTH
            for k in range(i, stop):
                bk = b[k] if use_momentum else NEG_ZERO
                p[k], bk, gk = _sgd_elem(p[k], g[k], bk, first, lr, momentum, one_minus_damp, wd,
                                         use_momentum, use_decay, nesterov, maximize, coef)
                _store_twins(tw, pb, k, k + 1, kind)
                if use_momentum:
                    b[k] = bk
                if write_back:
                    g[k] = gk


@njit(void(I64, I64, I64, I64, I64, I64, I64, float32, float32, float32, float32, float32, float32,
           float32, float32, float32, boolean, boolean, boolean, float32, boolean), parallel=True,
      **_STRICT)
def _adam_tw(P, G, M, V, TW, kinds, offsets, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2,
             step_size, sqrt_bc2, param_decay, coupled, decoupled, maximize, coef, write_back):
    # native/optim.py's _adam, plus the twin after each vector or element of new p
    n = offsets[offsets.size - 1]
    for task in prange((n + TASK - 1) // TASK):
        lo, hi = task * TASK, min(task * TASK + TASK, n)
        vb1, vb2, veps, vwd = vsplat(beta1), vsplat(beta2), vsplat(eps), vsplat(wd)
        vomb1, vomb2, vstep, vbc2 = (vsplat(one_minus_b1), vsplat(one_minus_b2), vsplat(step_size),
                                     vsplat(sqrt_bc2))
        vdecay, vcoef = vsplat(param_decay), vsplat(coef)
        while lo < hi:
            t, i, stop, size = _run(offsets, lo, hi)
            lo += stop - i
            kind = kinds[t]
            p, g, m, v = at(P[t], size), at(G[t], size), at(M[t], size), at(V[t], size)
            pb, tw = numba.carray(_u32_pointer(P[t]), size), numba.carray(_u16_pointer(TW[t]), size)
            while i + WIDTH <= stop:
                pi, mi, vi, gi = _adam_vec(vload(p, i), vload(g, i), vload(m, i), vload(v, i), vb1,
                                           vb2, veps, vwd, vomb1, vomb2, vstep, vbc2, vdecay, coupled,
                                           decoupled, maximize, vcoef)
                vstore(p, i, pi)
                _store_twins(tw, pb, i, i + WIDTH, kind)
                vstore(m, i, mi)
                vstore(v, i, vi)
                if write_back:
                    vstore(g, i, gi)
                i += WIDTH
            for k in range(i, stop):
                p[k], m[k], v[k], gk = _adam_elem(p[k], g[k], m[k], v[k], beta1, beta2, eps, wd,
                                                  one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                                                  param_decay, coupled, decoupled, maximize, coef)
                _store_twins(tw, pb, k, k + 1, kind)
                if write_back:
                    g[k] = gk


# called with the number of elements first: below native/threads.PARALLEL_MIN they run on
# the calling thread
sgd_twins_kernel, adam_twins_kernel = Twin(_sgd_tw), Twin(_adam_tw)


def twin_table(tw, cut) -> np.ndarray:
    """The address of each tensor's first twin element: tw is uint16 pieces, or one flat
    uint16 array cut at `cut`."""
    if isinstance(tw, Pieces):
        return tw.addresses
    return address(tw) + 2 * np.asarray(cut[:-1], np.int64)


def sgd_twins(p, g, b, tw, kinds, cut, first, lr, momentum, one_minus_damp, wd, use_momentum,
              use_decay, nesterov, maximize, coef, write_back) -> None:
    """The SGD step with twins on operands cut at `cut` (flat arrays or pieces; tw uint16
    pieces or one flat uint16 array), coef the gradient's read scale (1: none).

    Reproducibility: p and b are native/optim.py's `sgd` bits; tw[k] is mojolike.cast of
    the new p[k] (kinds[t] 1 bfloat16, 2 float16, 0 untouched), on any thread count.

    >>> import numpy as np
    >>> p, tw = np.float32([1.0, 65520.0, 3.0]), np.full(3, 7, np.uint16)
    >>> sgd_twins(p, np.float32([1.0, 0.0, 1.0]), np.zeros(1, np.float32), tw,
    ...           np.int64([2, 0]), np.int64([0, 2, 3]), True, 0.5, 0.0, 1.0, 0.0, False,
    ...           False, False, False, 1.0, False)
    >>> p.tolist(), [hex(v) for v in tw.tolist()]  # 65520 is float16 infinity; tensor 1 kept
    ([0.5, 65520.0, 2.5], ['0x3800', '0x7c00', '0x7'])
    """
    cut = np.ascontiguousarray(cut, np.int64)
    # without momentum b is a placeholder: every entry points at it, none is touched
    tb = table(b, cut if use_momentum else np.zeros_like(cut))
    sgd_twins_kernel(cut[-1], table(p, cut), table(g, cut), tb, twin_table(tw, cut),
                     np.ascontiguousarray(kinds, np.int64), cut, first, lr, momentum,
                     one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize, coef,
                     bool(write_back))


def adam_twins(p, g, m, v, tw, kinds, cut, *scalars_and_flags) -> None:
    """The Adam step with twins: scalars_and_flags are native/optim.py's `adam` scalars and
    flags, then coef and write_back.

    Reproducibility: p, m and v are `adam`'s bits; tw as in `sgd_twins`.

    >>> import numpy as np
    >>> p, z, tw = np.float32([1.0]), np.zeros(1, np.float32), np.zeros(1, np.uint16)
    >>> s = [np.float32(x) for x in (0.9, 0.999, 1e-8, 0.0, 0.1, 0.001, 0.1, 1.0, 1.0)]
    >>> adam_twins(p, np.float32([2.0]), z.copy(), z.copy(), tw, np.int64([1]), np.int64([0, 1]),
    ...            *s, False, False, False, np.float32(1.0), False)
    >>> p.tolist(), hex(tw[0])  # 1 - 0.1 * 0.2 / (sqrt(0.004) + 1e-8); bfloat16 0.68359375
    ([0.6837722659111023], '0x3f2f')
    """
    cut = np.ascontiguousarray(cut, np.int64)
    adam_twins_kernel(cut[-1], table(p, cut), table(g, cut), table(m, cut), table(v, cut),
                      twin_table(tw, cut), np.ascontiguousarray(kinds, np.int64), cut,
                      *scalars_and_flags)
