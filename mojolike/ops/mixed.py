"""Public casts between float32 and the storage types bfloat16 and float16, any backend.

bfloat16 buffers are numpy arrays of `ml_dtypes.bfloat16`, float16 buffers numpy
float16 (contracts/mixed.md). The kernels see the 16-bit buffers as their uint16
bit patterns.

>>> import numpy as np, ml_dtypes
>>> cast(np.float32([1.0, 1.00390625]), ml_dtypes.bfloat16, backend="oracle").tolist()  # a tie: to even
[1.0, 1.0]
"""
from __future__ import annotations

import numpy as np

from ..core.checks import (
    as_cast_buffer,
    cast_dtype,
    cast_type_of,
    cast_types,
    disjoint,
    empty,
    shape_of,
)
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..core.registry import kernels

# (source type, target type) -> the kernel method
_METHODS = {("float32", "bfloat16"): "to_bf16", ("float32", "float16"): "to_f16",
            ("bfloat16", "float32"): "from_bf16", ("float16", "float32"): "from_f16"}


def _bits(a: np.ndarray) -> np.ndarray:
    """The kernels' view of a buffer: float32 as is, a 16-bit type as its uint16 patterns."""
    return a if a.dtype == np.float32 else a.view(np.uint16)


@entry_point("mojolike.cast")
def cast(x, dtype, out=None, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """x converted to `dtype`: float32 to bfloat16 or float16, or either of them to float32.

    Narrowing rounds to nearest, ties to even, keeps subnormals of the target, sends
    every value beyond its largest finite value by half an ulp or more to +-inf, and
    every NaN (any sign, any payload) to the target's canonical quiet NaN with the sign
    clear: bfloat16 0x7FC0, float16 0x7E00. Widening is exact; a NaN keeps its sign and
    payload (shifted into the top of the float32 significand), as numpy's astype does.
    A cast between bfloat16 and float16 is not covered (widen first: both steps
    together round once).

    `x`: a float32, bfloat16 (ml_dtypes.bfloat16) or float16 buffer, C-contiguous.
    `dtype`: "float32", "bfloat16" or "float16", or the numpy dtype / scalar type.
    `out`: optional C-contiguous writable buffer of `dtype` with x's element count, not
    sharing memory with x; it is written and returned (else a new array of x's shape).

    Reproducibility: numeric_mode="identical" gives the oracle's bits
    (oracles/mixed.py, integer arithmetic on the patterns) on every backend; each slot
    depends on its own input's bits alone.

    >>> import numpy as np, mojolike
    >>> x = np.float32([1.0, 65520.0, np.nan, 2.0 ** -25 * 3])
    >>> mojolike.cast(x, np.float16, backend="oracle").view(np.uint16).tolist()  # 1, inf, NaN, subnormal 2
    [15360, 31744, 32256, 2]
    >>> mojolike.cast(mojolike.cast(x, "bfloat16"), "float32").tolist()[:2]
    [1.0, 65536.0]
    """
    target = cast_dtype(entry, "dtype", dtype)
    a, source = as_cast_buffer(entry, "x", x)
    method = _METHODS.get((source, target))
    if method is None:
        why = ("is x's own type; there is nothing to cast" if source == target else
               f"is not covered from {source}: a cast between bfloat16 and float16 goes through "
               f"float32 (cast to float32 first; the two steps together round once)")
        refuse(entry, "dtype", why, value=target)
    if out is None:
        result = empty(entry, "out", shape_of(x), cast_types()[target])
        dst = result.reshape(-1)
    else:
        dst, got = as_cast_buffer(entry, "out", out, writable=True)
        if got != target:
            refuse(entry, "out", f"has dtype {got}, not the cast's target {target}")
        if dst.size != a.size:
            refuse(entry, "out", f"has {dst.size} elements; x has {a.size}")
        disjoint(entry, [("x", a), ("out", dst)])
        result = out
    k = kernels(entry, "mixed", backend, numeric_mode)
    getattr(k, method)(_bits(a), _bits(dst))
    return result


# -- low-precision operands of the contractions (linear, matmul) ----------------------------------
SIGNIFICAND = {"bfloat16": 8, "float16": 11}  # significant bits of each low type's values


def _low_type(obj) -> str | None:
    """"bfloat16" / "float16" for an array of that type, else None (float32 included)."""
    t = cast_type_of(obj) if isinstance(obj, np.ndarray) else None
    return None if t == "float32" else t


def low_type(operands) -> str | None:
    """The first bfloat16 / float16 type among the operands [(name, buffer or None)], else None
    (`widened` refuses a call that mixes types)."""
    return next((t for _, obj in operands if (t := _low_type(obj)) is not None), None)


def gemm_nt(entry: str, low: str | None, layers_kernels, backend=None, numeric_mode=None):
    """The gemm_nt(a, b, bias, has_bias, out) a contraction runs on operands widened from
    `low` (None: float32 operands, the layers kernel set's own gemm_nt).

    For a low type on a backend whose mixed kernel set has `gemm_nt_exact` (cpu-numba), a
    call first tries that fused multiply-add kernel, which runs only where the target has
    FMA and every product of the call is exact in float32 (contracts/mixed.md clause 10),
    and otherwise leaves out untouched; the layers kernel set's gemm_nt then runs.
    Either way the bits are the float32 op's on the widened operands (clause 9).
    """
    plain = layers_kernels.gemm_nt
    if low is None:
        return plain
    fused = getattr(kernels(entry, "mixed", backend, numeric_mode), "gemm_nt_exact", None)
    if fused is None:
        return plain
    significand = SIGNIFICAND[low]

    def gemm(a, b, bias, has_bias, out):
        if not fused(a, b, bias, has_bias, out, significand):
            plain(a, b, bias, has_bias, out)
    return gemm


def widened(entry: str, operands, backend=None, numeric_mode=None) -> list:
    """The operands [(name, buffer or None)] of a contraction, as the float32 op takes them.

    When no operand is bfloat16 or float16 they come back as given (the float32 path and its
    refusals are untouched). Otherwise every operand given must have one low-precision type:
    beside an operand of another type (float32) the first low-precision operand is refused
    by name, as the float32 op refuses it; beside the other low type, the first operand of
    that type is. Each then comes back widened
    exactly to a new float32 array of its shape (a float32 scratch: the float32 kernel then
    runs on it, so the result is the float32 op's on the widened inputs, by construction).
    """
    low = low_type(operands)
    if low is None:
        return [obj for _, obj in operands]
    first = next(name for name, obj in operands if _low_type(obj) == low)
    given = [(name, obj) for name, obj in operands if obj is not None]
    other = next(((name, obj) for name, obj in given if _low_type(obj) is None), None)
    if other is not None:  # float32 (or another type) beside a low-precision operand
        got = getattr(getattr(other[1], "dtype", None), "name", type(other[1]).__name__)
        refuse(entry, first, f"has dtype {low} but {other[0]} has dtype {got}; a low-precision "
                             f"{entry} needs every operand of one type, bfloat16 or float16 "
                             f"(cast the others with mojolike.cast)")
    second = next(((name, _low_type(obj)) for name, obj in given if _low_type(obj) != low), None)
    if second is not None:  # bfloat16 beside float16
        refuse(entry, second[0], f"has dtype {second[1]} but {first} is {low}; a low-precision "
                                 f"{entry} needs every operand of one type (cast the others with "
                                 f"mojolike.cast)")
    out = [obj for _, obj in operands]
    k = kernels(entry, "mixed", backend, numeric_mode)
    method = "from_bf16" if low == "bfloat16" else "from_f16"
    result = []
    for (name, _), obj in zip(operands, out):
        if obj is None:
            result.append(None)
            continue
        a, _ = as_cast_buffer(entry, name, obj)
        wide = empty(entry, name, shape_of(obj))
        getattr(k, method)(_bits(a), wide.reshape(-1))
        result.append(wide)
    return result
