"""numba CPU kernels of the SGD and Adam/AdamW steps that also write cast twins.

native/optim.py's step sources (`sgd_task`, `adam_task`: the same element functions,
vector and scalar, and the same split into tasks and runs) retargeted with their twin
hooks bound, and one more operand: each tensor's twin, a uint16 array of bit patterns at
an address of the table TW, and its kind (0 none, 1 bfloat16, 2 float16). Right after a
vector or element of new master values is stored, their patterns are read back and
rounded to the twin's type by native/mixed.py's `bf16_elem` / `f16_elem` (mojolike.cast's
rounding, integer arithmetic only), so the twin is written in the same pass as the
parameter. A tensor of kind 0 is never touched. native/optim.py loads this module on the
first step with twins; its steps without twins bind the hooks to no-ops.

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
from numba import boolean, float32, njit, prange, types, uint16, void
from numba.core.extending import intrinsic

from ..core.pieces import Pieces, address, table
from . import optim
from .fold import I64, at
from .mixed import bf16_elem, f16_elem, wide
from .optim import _INLINE, _STRICT, TASK
from .retarget import retarget
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


def _twin_kind(kinds, t):
    return kinds[t]


def _twin_views(P, TW, t, size):
    """Tensor t's twin (uint16 patterns) and its master's float32 patterns, read back after
    the master's store."""
    return numba.carray(_u16_pointer(TW[t]), size), at(P[t], size).view(np.uint32)


def _twin_store(tw, pb, lo, hi, kind):
    """tw[k] = the kind's pattern of the master pattern pb[k], for k in [lo, hi)."""
    if kind == 1:
        for k in range(lo, hi):
            tw[k] = uint16(_bf16(wide(pb[k])))
    elif kind == 2:
        for k in range(lo, hi):
            tw[k] = uint16(_f16(wide(pb[k])))


# native/optim.py's step sources with the twin hooks bound to the twins' store
_TWINS = dict(twin_kind=njit(**_INLINE)(_twin_kind), twin_views=njit(**_INLINE)(_twin_views),
              twin_store=njit(**_INLINE)(_twin_store))
_sgd_task = retarget(optim.sgd_task, njit(**_INLINE), **_TWINS)
_adam_task = retarget(optim.adam_task, njit(**_INLINE), **_TWINS)


@njit(void(I64, I64, I64, I64, I64, I64, boolean, float32, float32, float32, float32, boolean,
           boolean, boolean, boolean, float32, boolean), parallel=True, **_STRICT)
def _sgd_tw(P, G, B, TW, kinds, offsets, first, lr, momentum, one_minus_damp, wd, use_momentum,
            use_decay, nesterov, maximize, coef, write_back):
    n = offsets[offsets.size - 1]
    for task in prange((n + TASK - 1) // TASK):
        _sgd_task(P, G, B, TW, kinds, offsets, task * TASK, min(task * TASK + TASK, n), first,
                  lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize,
                  coef, write_back)


@njit(void(I64, I64, I64, I64, I64, I64, I64, float32, float32, float32, float32, float32, float32,
           float32, float32, float32, boolean, boolean, boolean, float32, boolean), parallel=True,
      **_STRICT)
def _adam_tw(P, G, M, V, TW, kinds, offsets, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2,
             step_size, sqrt_bc2, param_decay, coupled, decoupled, maximize, coef, write_back):
    n = offsets[offsets.size - 1]
    for task in prange((n + TASK - 1) // TASK):
        _adam_task(P, G, M, V, TW, kinds, offsets, task * TASK, min(task * TASK + TASK, n),
                   beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                   param_decay, coupled, decoupled, maximize, coef, write_back)


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
