"""Compares, selects and mask reads on native/simd.py's binary64 vectors, for element functions
whose lanes take different branches (native/vgelu.py's tanhf and erff).

simd.py compares and selects float32 `Vec` values only. A binary64 element function that
branches on its binary64 argument (a < 1/4, a >= TANH_ONE) or runs a loop until a binary64
test holds needs the same on `VecD`: `dlt`, `dle`, `dge` are LLVM's ordered `fcmp` (as the
scalar `<`, `<=`, `>=`, false on NaN), `dselect` picks lanes of two `VecD`, `vany` says
whether a `Mask` has a True lane (a loop over lanes still going) and `mask_bits` gives the
mask as an integer, bit j for lane j (a scalar loop over the few lanes that need one).
`viota` and `compress_store` gather the indices of the lanes a mask selects (vpcompressq
on AVX-512, a store per lane elsewhere), so that a costly branch runs on full vectors.
`vlookup32` looks lanes up in a 32-entry binary64 table (`vlookup16` in a 16-entry one): four
(two) in-register permutes on AVX-512 targets (a 16-lane gather is slow on some of them, AMD's Zen 4), simd.py's
`vgather` elsewhere; both read the same entry. None of them rounds: a compare, a select
and a lookup move bits.

Reproducibility: no arithmetic, so nothing here can change a bit.

>>> import numpy as np
>>> from numba import njit
>>> from mojolike.native.simd import vload, vsplat, vwiden
>>> @njit
... def below_one(x):
...     d = vwiden(vload(x, 0))
...     return mask_bits(dlt(d, vsplat(np.float64(1.0)))), vany(dge(d, vsplat(np.float64(9.0))))
>>> below_one(np.float32([0, 2, np.nan, -1] + [5] * 12))
(9, False)
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from .simd import _MASK, _VECI, WIDTH, mask, vecd, veci
from .simd import vgather as _vgather
from .target import has_zmm


def _compare(name: str, op: str):
    def impl(typingctx, a, b):
        if a != vecd or b != vecd:
            return None

        def codegen(context, builder, sig, args):
            return builder.fcmp_ordered(op, args[0], args[1])
        return mask(a, b), codegen
    impl.__name__ = name
    impl.__doc__ = f"Lane by lane float64 `a {op} b` (ordered: False where a lane is NaN)."
    return intrinsic(impl)


dlt = _compare("dlt", "<")
dle = _compare("dle", "<=")
dge = _compare("dge", ">=")


@intrinsic
def dselect(typingctx, m, a, b):
    """Lane by lane `a if m else b` of float64 or int64 vectors."""
    if m != mask or a != b or a not in (vecd, veci):
        return None

    def codegen(context, builder, sig, args):
        return builder.select(args[0], args[1], args[2])
    return a(m, a, b), codegen


def _as_int(builder, m):
    return builder.bitcast(m, ir.IntType(WIDTH))


@intrinsic
def vany(typingctx, m):
    """Whether some lane of the mask is True."""
    if m != mask:
        return None

    def codegen(context, builder, sig, args):
        none = ir.Constant(ir.IntType(WIDTH), 0)
        return builder.icmp_unsigned("!=", _as_int(builder, args[0]), none)
    return types.boolean(m), codegen


@intrinsic
def mask_bits(typingctx, m):
    """The mask as an int64: bit j set where lane j is True."""
    if m != mask:
        return None

    def codegen(context, builder, sig, args):
        return builder.zext(_as_int(builder, args[0]), ir.IntType(64))
    return types.int64(m), codegen


@intrinsic
def viota(typingctx, start):
    """The int64 vector start, start + 1, ..., start + WIDTH - 1."""
    if not isinstance(start, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        base = builder.sext(args[0], ir.IntType(64)) if args[0].type.width < 64 else args[0]
        v = ir.Constant(_VECI, ir.Undefined)
        for i in range(WIDTH):
            v = builder.insert_element(v, base, ir.Constant(ir.IntType(32), i))
        return builder.add(v, ir.Constant(_VECI, list(range(WIDTH))))
    return veci(start), codegen


@intrinsic
def compress_store(typingctx, arr, pos, v, m):
    """Writes the lanes of the int64 vector v where m is True, in lane order, to arr[pos:]
    (unchecked: the caller leaves WIDTH free slots) and returns how many it wrote. One
    vpcompressq on AVX-512; a store per lane elsewhere."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1
            and arr.layout == "C" and arr.mutable) or v != veci or m != mask:
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_VECI, ptr.type, _MASK]),
            f"llvm.masked.compressstore.v{WIDTH}i64")
        builder.call(fn, [args[2], ptr, args[3]])
        pop = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(WIDTH), [ir.IntType(WIDTH)]),
            f"llvm.ctpop.i{WIDTH}")
        return builder.zext(builder.call(pop, [_as_int(builder, args[3])]), ir.IntType(64))
    return types.int64(arr, pos, v, m), codegen


_HALF = WIDTH // 2
_D8, _I8 = ir.VectorType(ir.DoubleType(), _HALF), ir.VectorType(ir.IntType(64), _HALF)
_PERMUTE = "llvm.x86.avx512.vpermi2var.pd.512"


def _half(builder, v, upper: bool):
    lanes = [i + (_HALF if upper else 0) for i in range(_HALF)]
    return builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), _HALF), lanes))


def _permute_lookup(builder, table_ptr, idx, entries=32):
    """table[idx] lane by lane for idx in [0, entries), entries 16 or 32: per 8 lanes,
    vpermi2pd picks from entries 0-15 (and from 16-31) by the index's low four bits, and
    bit 4 chooses between the two."""
    rows = builder.bitcast(table_ptr, _D8.as_pointer())
    t = [builder.load(builder.gep(rows, [ir.Constant(ir.IntType(64), r)]), align=8)
         for r in range(entries // _HALF)]
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_D8, [_D8, _I8, _D8]),
                                        _PERMUTE)
    halves = []
    for upper in (False, True):
        i = _half(builder, idx, upper)
        low = builder.call(fn, [t[0], i, t[1]])
        if entries == 2 * _HALF:
            halves.append(low)
            continue
        high = builder.call(fn, [t[2], i, t[3]])
        bit4 = builder.and_(i, ir.Constant(_I8, [16] * _HALF))
        halves.append(builder.select(builder.icmp_unsigned("!=", bit4, ir.Constant(_I8, [0] * _HALF)),
                                     high, low))
    return builder.shuffle_vector(halves[0], halves[1],
                                  ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), list(range(WIDTH))))


def _permute_lookup_intrinsic(entries: int, doc: str):
    """An intrinsic table[idx] over `entries` (16 or 32) binary64 entries, by permutes."""
    def typer(typingctx, table, idx):
        if not (isinstance(table, types.Array) and table.dtype == types.float64
                and table.ndim == 1 and table.layout == "C") or idx != veci:
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            return _permute_lookup(builder, ary.data, args[1], entries)
        return vecd(table, idx), codegen
    typer.__name__ = f"vlookup{entries}"
    typer.__doc__ = doc
    return intrinsic(typer)


if has_zmm():
    vlookup32 = _permute_lookup_intrinsic(32, """Lane by lane table[idx] of a C-contiguous 1-D
        float64 array of at least 32 entries, idx in [0, 32) (unchecked): four permutes, the
        table read as four vectors.""")
    vlookup16 = _permute_lookup_intrinsic(16, """Lane by lane table[idx] of a C-contiguous 1-D
        float64 array of at least 16 entries, idx in [0, 16) (unchecked): two permutes, the
        table read as two vectors.""")
else:
    vlookup32 = vlookup16 = _vgather  # a gather where the target has one, else a load per lane
