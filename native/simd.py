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
index + WIDTH <= size). `vprefetch` only hints that an element's line will be read
soon (it may point past the end: a prefetch never faults, and moves no value).
`vload_head`/`vstore_head` move only the first `count` lanes (count <= WIDTH/2, a masked
load or store), for rows shorter than a vector.

`vbutterfly` reduces one fold's 32 lanes; `vpairsum` makes one butterfly level for the
lanes of several cells packed in two vectors, so each addition serves several cells
(native/layers.py's GEMM), and `vswap_halves` brings a vector's upper half down.

Element functions computed in binary64 (native/vexp.py's expf) use WIDTH-lane
`VecD` (<16 x double>), `VecI` (<16 x i64>) and `Mask` (<16 x i1>) values:
`vwiden`/`vnarrow` (fpext, exact / fptrunc, round to nearest even), the same
`vadd`/`vsub`/`vmul` on binary64 lanes, integer `vadd`/`vsub`/`vand`/`vshl` on bit
patterns (`vbits`/`vfrombits`), a table lookup `vgather`, compares (ordered,
as scalar `<`, `>`, `>=`, `==`; `vne` unordered, as scalar `!=`) and `vselect`.

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
_VECD = ir.VectorType(ir.DoubleType(), WIDTH)
_VECI = ir.VectorType(ir.IntType(64), WIDTH)
_MASK = ir.VectorType(ir.IntType(1), WIDTH)


class Vec(types.Type):
    """A vector of WIDTH float32 lanes, held in registers."""

    def __init__(self):
        super().__init__(name=f"Vec{WIDTH}f")


class VecD(types.Type):
    """A vector of WIDTH float64 lanes."""

    def __init__(self):
        super().__init__(name=f"VecD{WIDTH}")


class VecI(types.Type):
    """A vector of WIDTH int64 lanes (binary64 bit patterns, table indices)."""

    def __init__(self):
        super().__init__(name=f"VecI{WIDTH}")


class Mask(types.Type):
    """A vector of WIDTH booleans (compare results)."""

    def __init__(self):
        super().__init__(name=f"Mask{WIDTH}")


vec, vecd, veci, mask = Vec(), VecD(), VecI(), Mask()


def _model(typ, llvm_type):
    class _Model(models.PrimitiveModel):
        def __init__(self, dmm, fe_type):
            super().__init__(dmm, fe_type, llvm_type)
    register_model(typ)(_Model)


for _typ, _ll in ((Vec, _VEC), (VecD, _VECD), (VecI, _VECI), (Mask, _MASK)):
    _model(_typ, _ll)


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
def vprefetch(typingctx, arr, idx):
    """A hint that arr[idx] will be read soon (llvm.prefetch: a prefetch instruction where
    the target has one, nothing elsewhere). It moves no value, so no bit depends on it; the
    address may lie past the array's end (a prefetch never faults)."""
    _check_array(arr, "vprefetch")

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ptr.type] + [ir.IntType(32)] * 3),
            "llvm.prefetch.p0")
        i32 = ir.IntType(32)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(arr, idx), codegen


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


def _binary(name: str, op: str, int_op: str | None = None):
    def impl(typingctx, a, b):
        if a != b or a not in (vec, vecd, veci) or (a == veci and int_op is None):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, int_op if sig.args[0] == veci else op)(args[0], args[1])
        return a(a, b), codegen
    impl.__name__ = name
    impl.__doc__ = (f"Lane by lane {op} of float32 or float64 vectors (one IEEE rounding per "
                    f"lane; no fast-math flags)" + (f", {int_op} of int64 vectors." if int_op else "."))
    return intrinsic(impl)


vadd = _binary("vadd", "fadd", "add")
vsub = _binary("vsub", "fsub", "sub")
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


_SPLAT = {types.float32: (vec, _VEC), types.float64: (vecd, _VECD), types.int64: (veci, _VECI)}


@intrinsic
def vsplat(typingctx, x):
    """A vector with every lane equal to x: float32 -> Vec, float64 -> VecD, int64 -> VecI."""
    if x not in _SPLAT:
        return None
    typ, ll = _SPLAT[x]

    def codegen(context, builder, sig, args):
        v = ir.Constant(ll, ir.Undefined)
        for i in range(WIDTH):
            v = builder.insert_element(v, args[0], ir.Constant(ir.IntType(32), i))
        return v
    return typ(x), codegen


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


def _lanes(n: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(ir.IntType(32), len(n)), list(n))


@intrinsic
def vpairsum(typingctx, a, b, off):
    """One butterfly level for several cells at once: x = a's lanes then b's (32 lanes) in
    groups of 2 * off lanes (a cell's lanes each); lane g * off + j of the result is
    x[2g * off + j] + x[2g * off + off + j], the level's a[j] + a[j + off] for group g.
    off (1, 2, 4, 8 or 16) must be a constant; one fadd per lane, the shuffles are exact."""
    if a != vec or b != vec or not isinstance(off, types.IntegerLiteral) \
            or off.literal_value not in (1, 2, 4, 8, 16):
        return None
    k = off.literal_value
    low = [2 * k * g + j for g in range(WIDTH // k) for j in range(k)]

    def codegen(context, builder, sig, args):
        lower = builder.shuffle_vector(args[0], args[1], _lanes(low))
        upper = builder.shuffle_vector(args[0], args[1], _lanes([i + k for i in low]))
        return builder.fadd(lower, upper)
    return vec(a, b, off), codegen


@intrinsic
def vswap_halves(typingctx, v):
    """v with its lanes WIDTH/2.. first, then lanes 0..WIDTH/2 (exact)."""
    if v != vec:
        return None
    half = WIDTH // 2

    def codegen(context, builder, sig, args):
        return builder.shuffle_vector(args[0], args[0],
                                      _lanes([(j + half) % WIDTH for j in range(WIDTH)]))
    return vec(v), codegen


_HALF = ir.VectorType(_F32, WIDTH // 2)


def _head_mask(builder, count):
    """<WIDTH/2 x i1>: lane j is j < count (0 <= count <= WIDTH/2)."""
    i32 = ir.IntType(32)
    lanes = ir.VectorType(i32, WIDTH // 2)
    n = builder.trunc(count, i32) if count.type.width > 32 else count
    splat = builder.insert_element(ir.Constant(lanes, ir.Undefined), n, ir.Constant(i32, 0))
    splat = builder.shuffle_vector(splat, ir.Constant(lanes, ir.Undefined), _lanes([0] * (WIDTH // 2)))
    return builder.icmp_signed("<", ir.Constant(lanes, list(range(WIDTH // 2))), splat)


def _head_ptr(context, builder, arrty, arr, idx):
    ary = context.make_array(arrty)(context, builder, arr)
    return builder.gep(ary.data, [idx])


@intrinsic
def vload_head(typingctx, arr, idx, count):
    """A vector whose lanes j < count (count <= WIDTH/2) are arr[idx + j], the others 0.0:
    a masked load, which reads no other element (unchecked)."""
    _check_array(arr, "vload_head")
    if not isinstance(count, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        ptr = _head_ptr(context, builder, sig.args[0], args[0], args[1])
        mask = _head_mask(builder, args[2])
        zero = ir.Constant(_HALF, [0.0] * (WIDTH // 2))
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_HALF, [ptr.type, ir.IntType(32), mask.type, _HALF]),
            f"llvm.masked.load.v{WIDTH // 2}f32.p0")
        got = builder.call(fn, [ptr, ir.Constant(ir.IntType(32), 4), mask, zero])
        return builder.shuffle_vector(got, zero, _lanes(range(WIDTH)))
    return vec(arr, idx, count), codegen


@intrinsic
def vstore_head(typingctx, arr, idx, v, count):
    """arr[idx + j] = lane j of v for j < count (count <= WIDTH/2): a masked store, which
    writes no other element (unchecked)."""
    _check_array(arr, "vstore_head")
    if arr.mutable is False or v != vec or not isinstance(count, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        ptr = _head_ptr(context, builder, sig.args[0], args[0], args[1])
        low = builder.shuffle_vector(args[2], args[2], _lanes(range(WIDTH // 2)))
        mask = _head_mask(builder, args[3])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_HALF, ptr.type, ir.IntType(32), mask.type]),
            f"llvm.masked.store.v{WIDTH // 2}f32.p0")
        builder.call(fn, [low, ptr, ir.Constant(ir.IntType(32), 4), mask])
        return context.get_dummy_value()
    return types.void(arr, idx, v, count), codegen


def _unary(name: str, src, dst, build, doc: str):
    def impl(typingctx, a):
        if a != src:
            return None

        def codegen(context, builder, sig, args):
            return build(builder, args[0])
        return dst(a), codegen
    impl.__name__ = name
    impl.__doc__ = doc
    return intrinsic(impl)


vwiden = _unary("vwiden", vec, vecd, lambda b, v: b.fpext(v, _VECD),
                "float32 lanes to float64 (exact).")
vnarrow = _unary("vnarrow", vecd, vec, lambda b, v: b.fptrunc(v, _VEC),
                 "float64 lanes to float32, each rounded to nearest even (as np.float32(x)).")
vbits = _unary("vbits", vecd, veci, lambda b, v: b.bitcast(v, _VECI),
               "The bit patterns of float64 lanes, as int64 lanes.")
vfrombits = _unary("vfrombits", veci, vecd, lambda b, v: b.bitcast(v, _VECD),
                   "The float64 lanes with the int64 lanes' bit patterns.")
vnot = _unary("vnot", mask, mask, lambda b, v: b.not_(v), "Lane by lane `not`.")
vall = _unary("vall", mask, types.boolean,
              lambda b, v: b.icmp_unsigned("==", b.bitcast(v, ir.IntType(WIDTH)),
                                           ir.Constant(ir.IntType(WIDTH), (1 << WIDTH) - 1)),
              "Whether every lane is True.")


def _logic(name: str, op: str):
    def impl(typingctx, a, b):
        if a != b or a not in (veci, mask):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1])
        return a(a, b), codegen
    impl.__name__ = name
    impl.__doc__ = f"Lane by lane integer {op} of int64 vectors or masks."
    return intrinsic(impl)


vand = _logic("vand", "and_")
vor = _logic("vor", "or_")
vshl = _logic("vshl", "shl")


def _compare(name: str, op: str, ordered: bool):
    def impl(typingctx, a, b):
        if a != vec or b != vec:
            return None

        def codegen(context, builder, sig, args):
            fcmp = builder.fcmp_ordered if ordered else builder.fcmp_unordered
            return fcmp(op, args[0], args[1])
        return mask(a, b), codegen
    impl.__name__ = name
    impl.__doc__ = f"Lane by lane float32 `a {op} b` ({'ordered' if ordered else 'unordered'})."
    return intrinsic(impl)


vgt = _compare("vgt", ">", True)
vlt = _compare("vlt", "<", True)
vge = _compare("vge", ">=", True)
veq = _compare("veq", "==", True)
vne = _compare("vne", "!=", False)


@intrinsic
def vselect(typingctx, m, a, b):
    """Lane by lane `a if m else b` (float32 vectors)."""
    if m != mask or a != vec or b != vec:
        return None

    def codegen(context, builder, sig, args):
        return builder.select(args[0], args[1], args[2])
    return vec(m, a, b), codegen


@intrinsic
def vgather(typingctx, table, idx):
    """Lane by lane table[idx] of a C-contiguous 1-D float64 array (unchecked): one gather
    instruction where the target has one, else a load per lane."""
    if not (isinstance(table, types.Array) and table.dtype == types.float64 and table.ndim == 1
            and table.layout == "C") or idx != veci:
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        base = builder.ptrtoint(ary.data, ir.IntType(64))
        base = builder.insert_element(ir.Constant(_VECI, ir.Undefined), base,
                                      ir.Constant(ir.IntType(32), 0))
        base = builder.shuffle_vector(base, ir.Constant(_VECI, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), [0] * WIDTH))
        offsets = builder.shl(args[1], ir.Constant(_VECI, [3] * WIDTH))  # 8 bytes an entry
        ptr_vec = ir.VectorType(ir.PointerType(), WIDTH)
        ptrs = builder.inttoptr(builder.add(base, offsets), ptr_vec)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_VECD, [ptr_vec, ir.IntType(32), _MASK, _VECD]),
            f"llvm.masked.gather.v{WIDTH}f64.v{WIDTH}p0")
        everywhere = ir.Constant(_MASK, [1] * WIDTH)
        return builder.call(fn, [ptrs, ir.Constant(ir.IntType(32), 8), everywhere,
                                 ir.Constant(_VECD, ir.Undefined)])
    return vecd(table, idx), codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """Lane by lane a * b + c rounded once (llvm.fma: IEEE fusedMultiplyAdd). Only kernels
    that have established that every product is exact may call it (tests/test_vectorized.py's
    FMA_ALLOWED): then it gives the bits of vadd(c, vmul(a, b))."""
    if a != vec or b != vec or c != vec:
        return None

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3),
                                            f"llvm.fma.v{WIDTH}f32")
        return builder.call(fn, list(args))
    return vec(a, b, c), codegen


_I32V = ir.VectorType(ir.IntType(32), WIDTH)
_I16V = ir.VectorType(ir.IntType(16), WIDTH)


def _i32s(value: int) -> ir.Constant:
    return ir.Constant(_I32V, [ir.Constant(ir.IntType(32), value)] * WIDTH)


def _widen_bf16(b, h):
    """bfloat16 patterns to float32: the pattern moved into the top half (exact)."""
    return b.bitcast(b.shl(b.zext(h, _I32V), _i32s(16)), _VEC)


def _widen_f16(b, h):
    """float16 patterns to float32 as native/mixed.py's `_from_f16`: the magnitude's bits
    moved up 13 places and that float32 times 2^112 (exact, subnormals included), then the
    exponent of an infinity or NaN and the sign set; integer operations and one multiply, no
    conversion instruction (none on some targets) and no library call."""
    u = b.zext(h, _I32V)
    t = b.bitcast(b.shl(b.and_(u, _i32s(0x7FFF)), _i32s(13)), _VEC)
    scale = ir.Constant(_VEC, [ir.Constant(_F32, 2.0 ** 112)] * WIDTH)
    t = b.bitcast(b.fmul(t, scale), _I32V)
    inf = b.icmp_unsigned("==", b.and_(u, _i32s(0x7C00)), _i32s(0x7C00))
    t = b.or_(t, b.select(inf, _i32s(0x7F800000), _i32s(0)))
    t = b.or_(t, b.shl(b.and_(u, _i32s(0x8000)), _i32s(16)))
    return b.bitcast(t, _VEC)


def _load_low(name: str, widen, doc: str):
    def impl(typingctx, arr, idx):
        if not (isinstance(arr, types.Array) and arr.dtype == types.uint16 and arr.ndim == 1
                and arr.layout == "C"):
            raise TypeError(f"{name} takes a C-contiguous 1-D uint16 array, not {arr}")

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), _I16V.as_pointer())
            return widen(builder, builder.load(ptr, align=2))
        return vec(arr, idx), codegen
    impl.__name__ = name
    impl.__doc__ = doc
    return intrinsic(impl)


vload_bf16 = _load_low("vload_bf16", _widen_bf16,
                       "The WIDTH bfloat16 patterns arr[idx : idx + WIDTH] (uint16) widened "
                       "exactly to float32 lanes (unaligned, unchecked).")
vload_f16 = _load_low("vload_f16", _widen_f16,
                      "The WIDTH float16 patterns arr[idx : idx + WIDTH] (uint16) widened "
                      "exactly to float32 lanes, NaN payloads kept as numpy's astype keeps "
                      "them (unaligned, unchecked).")
