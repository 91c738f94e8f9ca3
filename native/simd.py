"""Explicit float32 vectors for numba kernels: speed that does not depend on the vectorizer.

LLVM's loop vectorizer decides per target whether a loop is worth vectorizing:
numba's fold-lane loops stayed scalar on the baseline x86-64 target and on CPUs
whose features it weighs differently, so the same kernel ran 6-8x slower on
some machines. Kernels here instead hold their lanes in `Vec` values, LLVM
`<16 x float>` vectors written by hand: every target lowers them to its widest
registers (four SSE xmm, two AVX ymm or one AVX-512 zmm per vector), so the
code is packed on every x86-64 and aarch64 CPU LLVM may pick.

Each operation is one IEEE operation per element, in the order written: `vadd`
and `vmul` are LLVM `fadd`/`fmul` without fast-math flags, so LLVM may neither
fuse them into an FMA nor reassociate; `vsqrt` is `llvm.sqrt` (correctly rounded
on every target), `vdiv` is `fdiv`. A lane of a vector is exactly the scalar
operation on that lane, so vector and scalar spellings give the same bits.

Loads and stores take a C-contiguous 1-D float32 array and the index of the
first element; they are unaligned and do not check bounds (the caller keeps
index + WIDTH <= size).

>>> import numpy as np
>>> from numba import njit
>>> @njit
... def twice_plus(a, out):
...     for i in range(0, a.size, WIDTH):
...         v = vload(a, i)
...         vstore(out, i, vadd(vmul(v, vsplat(np.float32(2.0))), v))
>>> a = np.arange(32, dtype=np.float32); out = np.empty_like(a)
>>> twice_plus(a, out); out[:4].tolist()
[0.0, 3.0, 6.0, 9.0]
"""
from __future__ import annotations

import operator

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic, models, overload, register_model

WIDTH = 16  # lanes per vector: one zmm on AVX-512, two ymm on AVX2, four xmm on SSE2 and NEON
_F32 = ir.FloatType()
_VEC = ir.VectorType(_F32, WIDTH)


class Vec(types.Type):
    """A vector of WIDTH float32 lanes, held in registers."""

    def __init__(self):
        super().__init__(name=f"Vec{WIDTH}f")


vec = Vec()


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VEC)


def _check_array(arr, what: str) -> None:
    if not (isinstance(arr, types.Array) and arr.dtype == types.float32 and arr.ndim == 1
            and arr.layout == "C"):
        raise TypeError(f"{what} takes a C-contiguous 1-D float32 array, not {arr}")


def _vec_ptr(context, builder, arrty, arr, idx):
    ary = context.make_array(arrty)(context, builder, arr)
    return builder.bitcast(builder.gep(ary.data, [idx]), _VEC.as_pointer())


@intrinsic
def vload(typingctx, arr, idx):
    """The WIDTH floats arr[idx : idx + WIDTH] (unaligned, unchecked)."""
    _check_array(arr, "vload")

    def codegen(context, builder, sig, args):
        return builder.load(_vec_ptr(context, builder, sig.args[0], args[0], args[1]), align=4)
    return vec(arr, idx), codegen


@intrinsic
def vstore(typingctx, arr, idx, v):
    """arr[idx : idx + WIDTH] = v (unaligned, unchecked)."""
    _check_array(arr, "vstore")
    if not isinstance(arr, types.Array) or arr.mutable is False:
        raise TypeError("vstore needs a writable array")

    def codegen(context, builder, sig, args):
        builder.store(args[2], _vec_ptr(context, builder, sig.args[0], args[0], args[1]), align=4)
        return context.get_dummy_value()
    return types.void(arr, idx, v), codegen


def _binary(name: str, op: str):
    def impl(typingctx, a, b):
        if a != vec or b != vec:
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1])
        return vec(a, b), codegen
    impl.__name__ = name
    impl.__doc__ = f"Lane by lane {op} (one IEEE rounding per lane; no fast-math flags)."
    return intrinsic(impl)


vadd = _binary("vadd", "fadd")
vsub = _binary("vsub", "fsub")
vmul = _binary("vmul", "fmul")
vdiv = _binary("vdiv", "fdiv")


@intrinsic
def vmax(typingctx, a, b):
    """Lane by lane `a if a > b else b` (a compare and a select: exact, no rounding)."""
    if a != vec or b != vec:
        return None

    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered(">", args[0], args[1]), args[0], args[1])
    return vec(a, b), codegen


@intrinsic
def vsqrt(typingctx, a):
    """Lane by lane correctly rounded square root (llvm.sqrt)."""
    if a != vec:
        return None

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]),
                                            "llvm.sqrt.v16f32")
        return builder.call(fn, [args[0]])
    return vec(a), codegen


@intrinsic
def vneg(typingctx, a):
    """Lane by lane negation (the sign bit flipped, as scalar -x)."""
    if a != vec:
        return None

    def codegen(context, builder, sig, args):
        return builder.fneg(args[0])
    return vec(a), codegen


@overload(operator.neg)
def _neg(a):
    """-v on a vector is vneg(v), so element sources that spell -x compile for vectors too."""
    if a == vec:
        return lambda a: vneg(a)
    return None


@intrinsic
def vsplat(typingctx, x):
    """A vector with every lane equal to the float32 x."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        v = ir.Constant(_VEC, ir.Undefined)
        for i in range(WIDTH):
            v = builder.insert_element(v, args[0], ir.Constant(ir.IntType(32), i))
        return v
    return vec(x), codegen


@intrinsic
def vlane(typingctx, v, i):
    """Lane i of v, as a float32."""
    if v != vec or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], builder.trunc(args[1], ir.IntType(32))
                                       if args[1].type.width > 32 else args[1])
    return types.float32(v, i), codegen


@intrinsic
def vbutterfly(typingctx, lo, hi):
    """The fold's butterfly of 32 lanes (lo = lanes 0-15, hi = lanes 16-31): a[j] = a[j] + a[j+off]
    for off = 16, 8, 4, 2, 1, returning lane 0, with exactly the scalar butterfly's additions
    (each level one fadd per lane; the upper lanes a shuffle brings down are the a[j+off])."""
    if lo != vec or hi != vec:
        return None

    def codegen(context, builder, sig, args):
        v = builder.fadd(args[0], args[1])  # off = 16
        undef = ir.Constant(_VEC, ir.Undefined)
        off = WIDTH // 2
        while off >= 1:
            mask = ir.Constant(ir.VectorType(ir.IntType(32), WIDTH),
                               [j + off if j + off < WIDTH else WIDTH for j in range(WIDTH)])
            v = builder.fadd(v, builder.shuffle_vector(v, undef, mask))
            off //= 2
        return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))
    return types.float32(lo, hi), codegen
