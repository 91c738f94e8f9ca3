"""Argument checks that every entry point uses, so one bad input gets one refusal everywhere.

Switches, numbers, integers, float32 buffers, shapes and overlap (the keywords are
checked by each entry point's declaration, `mojolike.core.entry`). Each check
returns the accepted value in the form the contract uses (a number as the binary32
value nearest it, a buffer as a flat float32 view) or raises `Refusal` naming the
entry point, the option and the reason, before anything is written.

Numbers are Python or numpy reals: `bool`, strings, bytes and arrays are refused
rather than converted (`lr='0.1'` would otherwise work, and `maximize='False'`
would be true). Integers and fractions are rounded to binary32 once, exactly,
whatever their size; floats must be finite and keep the sign of a zero (torch
takes a Python -0.0 as -0.0).

>>> real32("mojolike.SGD", "lr", 0.1, low=0.0)
0.10000000149011612
>>> try:
...     switch("mojolike.SGD", "maximize", "False")
... except Refusal as e:
...     print(e.option, "|", e)
maximize | mojolike.SGD: maximize='False' must be True or False (a bool or numpy.bool_), not str.
"""
from __future__ import annotations

import math
import numbers
import os
from fractions import Fraction

import numpy as np

from ..oracles import f32
from .pieces import addresses_of
from .refusals import Refusal, refuse  # noqa: F401 (the examples catch Refusal)

F32 = np.dtype("<f4")
_NOT_NUMBERS = (bool, np.bool_, str, bytes, bytearray, memoryview)


# -- switches and numbers -----------------------------------------------------------------------
def switch(entry: str, name: str, v) -> bool:
    """A bool or numpy.bool_, as bool (no truthiness: 'no' and 0 are refused)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    refuse(entry, name, f"must be True or False (a bool or numpy.bool_), not {type(v).__name__}",
           value=v)


def is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def exact(entry: str, name: str, v) -> Fraction | float:
    """The exact value of a real number argument: a Fraction for integers and fractions, a
    finite float for floats; anything else is refused."""
    if isinstance(v, _NOT_NUMBERS) or not isinstance(v, (numbers.Real, np.integer, np.floating)):
        hint = " (for a torch tensor, pass float(tensor))" if hasattr(v, "__dlpack__") else ""
        refuse(entry, name, f"must be a real number (int or float), not {type(v).__name__}{hint}",
               value=v)
    if isinstance(v, (numbers.Integral, np.integer)):
        return Fraction(int(v))
    if isinstance(v, Fraction):
        return v
    d = float(v)  # numpy floats and other Reals: exact in binary64 (float128 is not covered)
    if not math.isfinite(d):
        refuse(entry, name, "must be finite (not NaN or infinite)", value=v)
    return d


def real32(entry: str, name: str, v, *, low: float | None = None, high: float | None = None,
           high_open: bool = False, what: str | None = None) -> float:
    """The binary32 value nearest the real `v`, as a Python float.

    A float's zero keeps its sign, and a negative float or fraction that rounds to
    zero gives -0.0, as an IEEE conversion does; an integer or a zero fraction gives
    +0.0. The range [low, high] (or [low, high) with `high_open`) applies to that
    binary32 value, which is what the kernels use: 1 - 2**-25 rounds to 1.0 and is
    refused where 1 is excluded, and -0.0 is in a range from 0.0 (it equals 0). A
    value that rounds to infinity is refused.
    """
    x = exact(entry, name, v)
    r = f32.round_fraction(x) if isinstance(x, Fraction) else f32.round_float(x)
    if math.isinf(r):
        refuse(entry, name, "overflows float32 (its nearest binary32 value is infinite)", value=v)
    for bad, bound in ((low is not None and r < low, f">= {low!r}"),
                       (high is not None and (r >= high if high_open else r > high),
                        f"< {high!r}" if high_open else f"<= {high!r}")):
        if bad:
            # say so when the value itself is in range and only its binary32 value is not
            inside = (low is None or x >= low) and (high is None or (x < high if high_open else x <= high))
            note = f" (it rounds to {r!r} in float32)" if inside else ""
            refuse(entry, name, f"must be {what or bound}{note}", value=v)
    return r


def integer(entry: str, name: str, v, *, low: int | None = None, high: int | None = None,
            what: str | None = None) -> int:
    """A Python or numpy integer (not bool) in [low, high], as int."""
    if not is_int(v):
        refuse(entry, name, f"must be an integer{f' ({what})' if what else ''}, not "
                            f"{type(v).__name__}", value=v)
    i = int(v)
    if (low is not None and i < low) or (high is not None and i > high):
        span = what or (f"in [{low}, {high}]" if low is not None and high is not None
                        else f">= {low}" if low is not None else f"<= {high}")
        refuse(entry, name, f"must be {span}", value=v)
    return i


def choice(entry: str, name: str, v, choices: tuple[str, ...]) -> str:
    if not isinstance(v, str) or v not in choices:
        refuse(entry, name, f"is not covered; choose one of {', '.join(map(repr, choices))}", value=v)
    return v


# -- buffers ------------------------------------------------------------------------------------
def _as_array(entry: str, name: str, obj) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    try:
        view = memoryview(obj)
    except TypeError:
        hint = " (for a torch tensor, pass tensor.numpy())" if hasattr(obj, "__dlpack__") else ""
        refuse(entry, name, f"must be a float32 buffer (numpy array, array.array('f'), "
                            f"memoryview); got {type(obj).__name__}{hint}")
    except ValueError as e:  # a released memoryview
        refuse(entry, name, f"cannot be read as a buffer ({e})")
    try:
        return np.asarray(view)
    except (TypeError, ValueError) as e:
        refuse(entry, name, f"has buffer format {view.format!r} that numpy cannot read ({e})")


def _flat(entry: str, name: str, a: np.ndarray, read_only) -> np.ndarray:
    """`a` as a 1-D view, refusing an empty or strided buffer and, when `read_only` is the
    refusal's wording (not False), a read-only one."""
    if a.size == 0:
        refuse(entry, name, "is empty; at least one element is needed")
    if not a.flags.c_contiguous:
        refuse(entry, name, f"is not C-contiguous (strides {a.strides}); pass a contiguous "
                            f"buffer, e.g. numpy.ascontiguousarray(...)")
    if read_only and not a.flags.writeable:
        refuse(entry, name, read_only)
    return a.reshape(-1)


def as_f32(entry: str, name: str, obj, *, writable: bool = False) -> np.ndarray:
    """A 1-D float32 view of `obj` (anything with the buffer protocol) in C order, without a
    copy; refuses other dtypes (a silent cast would certify bits the caller never had),
    empty, strided and, with `writable`, read-only buffers."""
    a = _as_array(entry, name, obj)
    if a.dtype.kind == "f" and a.dtype.itemsize == 4 and not a.dtype.isnative:
        refuse(entry, name, "is float32 in non-native byte order; pass a native-order copy")
    if a.dtype != np.float32:
        refuse(entry, name, f"has dtype {a.dtype.name}; only float32 buffers are covered "
                            f"(float16, bfloat16 and float64 are not converted)")
    return _flat(entry, name, a, writable and "is read-only but is updated in place")


def as_bool(entry: str, name: str, obj) -> np.ndarray:
    """A 1-D bool view of a numpy bool array in C order, without a copy (a boolean mask);
    refuses other dtypes, empty and strided arrays."""
    a = _as_array(entry, name, obj)
    if a.dtype != np.bool_:
        refuse(entry, name, f"has dtype {a.dtype.name}; a boolean mask must be numpy bool")
    if a.size == 0:
        refuse(entry, name, "is empty; at least one element is needed")
    if not a.flags.c_contiguous:
        refuse(entry, name, f"is not C-contiguous (strides {a.strides}); pass a contiguous "
                            f"buffer, e.g. numpy.ascontiguousarray(...)")
    return a.reshape(-1)


def shape_of(obj) -> tuple[int, ...]:
    """The shape of a buffer already accepted by `as_f32` (a flat memoryview keeps its own)."""
    return obj.shape if isinstance(obj, np.ndarray) else np.asarray(memoryview(obj)).shape


def disjoint(entry: str, named: list[tuple[str, np.ndarray]]) -> None:
    """Refuse when two of the (name, contiguous array) buffers share a byte, naming both: the
    contract defines no result for a parameter that is also a gradient, or for one buffer
    passed twice."""
    disjoint_arrays(entry, [a for _, a in named], lambda i: named[i][0])


def disjoint_arrays(entry: str, arrays: list[np.ndarray], name) -> None:
    """disjoint's check over contiguous arrays, name(i) naming arrays[i] (called only for a
    refusal: an optimizer step checks hundreds)."""
    starts = addresses_of(arrays)
    disjoint_spans(entry, [(lo, lo + a.nbytes) for lo, a in zip(starts, arrays)], name)


def disjoint_spans(entry: str, spans: list[tuple[int, int]], name) -> None:
    """disjoint's check and refusal over (first byte, end byte) spans, for a caller that knows
    its buffers' addresses without numpy views of them (the optimizer registry's vouched
    gradients, from mojolike.torch.optim); name(i) names span i, called only for a refusal."""
    ordered = sorted((lo, hi, i) for i, (lo, hi) in enumerate(spans) if hi > lo)
    for (_, hi1, i1), (lo2, _, i2) in zip(ordered, ordered[1:]):
        if lo2 < hi1:  # sorted by start: two spans that overlap leave an adjacent pair that does
            first, second = sorted((i1, i2))  # named in the caller's order
            refuse(entry, f"{name(first)} and {name(second)}",
                   "share memory; the contract covers only separate buffers (pass copies, or one "
                   "buffer once)")


# -- shapes and allocation ----------------------------------------------------------------------
def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def shape(entry: str, name: str, v, *, itemsize: int = 4) -> tuple[tuple[int, ...], int]:
    """(dims, element count) of a positive integer or a tuple/list of them; refused when the
    array could not fit in this machine's memory, before anything is allocated."""
    dims = (v,) if is_int(v) else v
    if not isinstance(dims, (tuple, list)) or not dims:
        refuse(entry, name, "must be a positive integer or a non-empty tuple of them", value=v)
    for d in dims:
        if not is_int(d) or int(d) < 1:
            refuse(entry, name, f"has dimension {d!r}; every dimension must be a positive integer",
                   value=v)
    dims = tuple(int(d) for d in dims)
    n = math.prod(dims)
    memory = _memory_bytes()
    if n * itemsize >= 2**62 or (memory is not None and n * itemsize > memory):
        refuse(entry, name, f"needs {n * itemsize} bytes, more than this machine's memory "
                            f"({memory} bytes)", value=v)
    return dims, n


def zeros(entry: str, name: str, dims, dtype=np.float32) -> np.ndarray:
    """np.zeros (+0.0; the system hands out zeroed pages as they are first touched), with an
    allocation failure refused by name."""
    return _allocate(np.zeros, entry, name, dims, dtype)


def empty(entry: str, name: str, dims, dtype=np.float32) -> np.ndarray:
    """np.empty, with an allocation failure refused by name (nothing was written yet)."""
    return _allocate(np.empty, entry, name, dims, dtype)


def _allocate(make, entry: str, name: str, dims, dtype) -> np.ndarray:
    try:
        return make(dims, dtype)
    except (MemoryError, ValueError) as e:
        refuse(entry, name, f"cannot be allocated ({type(e).__name__}: {e})", value=dims)


# -- the casts' buffers (mojolike.cast): float32 and the two 16-bit storage types --------------
# dtype name -> the numpy dtype; bfloat16 is ml_dtypes' (the numpy extension type JAX uses).
# ml_dtypes takes about a second to import, so it is loaded on the first cast-type question,
# never by `import mojolike`; an install without it (no deps) has no bfloat16 and refuses it.
_cast_types: dict | None = None


def cast_types() -> dict:
    """{type name: numpy dtype} of the cast's buffers: float32, float16 and, where ml_dtypes is
    installed, bfloat16."""
    global _cast_types
    if _cast_types is None:
        try:
            import ml_dtypes
        except ImportError:  # a dependency, absent only from an install without deps
            ml_dtypes = None
        _cast_types = {"float32": F32, **({"bfloat16": np.dtype(ml_dtypes.bfloat16)} if ml_dtypes else {}),
                       "float16": np.dtype("<f2")}
    return _cast_types


def cast_type_of(a) -> str | None:
    """The cast type name ("float32", "bfloat16", "float16") of an array's dtype, else None."""
    dtype = getattr(a, "dtype", None)
    if dtype == F32:
        return "float32"
    return None if dtype is None else next((k for k, t in cast_types().items() if dtype == t), None)


def cast_dtype(entry: str, name: str, v) -> str:
    """The name of a cast's target type ("float32", "bfloat16" or "float16") given as that
    name, a numpy dtype or a scalar type (numpy.float16, ml_dtypes.bfloat16); anything else,
    torch dtypes and float64 included, is refused."""
    types = cast_types()
    try:
        d = np.dtype(v) if not isinstance(v, str) or v in types else None
    except TypeError:
        d = None
    got = next((k for k, t in types.items() if d == t), None)
    if got is None and "bfloat16" not in types and (v == "bfloat16" or "bfloat16" in str(v)):
        refuse(entry, name, "needs the ml_dtypes package (bfloat16 buffers are its numpy type), "
                            "which is not installed: pip install ml-dtypes", value=v)
    if got is None:
        refuse(entry, name, "is not covered; choose one of 'float32', 'bfloat16' "
                            "(ml_dtypes.bfloat16) and 'float16' (numpy.float16)", value=v)
    return got


def as_cast_buffer(entry: str, name: str, obj, *, writable: bool = False) -> tuple[np.ndarray, str]:
    """(a 1-D view of `obj` in C order without a copy, its type name) for a float32,
    bfloat16 or float16 buffer; other dtypes (float64 among them), non-native byte order,
    empty, strided and, with `writable`, read-only buffers are refused."""
    a = _as_array(entry, name, obj)
    kind = cast_type_of(a)
    if kind is None:
        swapped = a.dtype.kind == "f" and not a.dtype.isnative
        refuse(entry, name, "is in non-native byte order; pass a native-order copy" if swapped else
               f"has dtype {a.dtype.name}; only float32, bfloat16 (ml_dtypes.bfloat16) and "
               f"float16 buffers are covered (float64 is not converted)")
    return _flat(entry, name, a, writable and "is read-only but is written"), kind


# -- an optimizer's cast twins: a bfloat16 or float16 copy of a float32 parameter ---------------
TWIN_KINDS = {"bfloat16": 1, "float16": 2}  # the kernels' kind flag; 0 is "no twin"


def as_twin(entry: str, name: str, index: int, obj, shape: tuple) -> tuple[np.ndarray, str]:
    """(a 1-D view of the twin `obj` without a copy, its type name "bfloat16" or "float16")
    for entry `index` of the list `name`, whose parameter has `shape`; refused by `name`
    (the reason says which entry): every dtype but those two (float32 and float64 too: a twin
    is a rounded copy), empty, strided and read-only buffers, and a shape other than the
    parameter's."""
    a = _as_array(entry, name, obj)
    low = [t for k, t in cast_types().items() if k in TWIN_KINDS]
    if a.dtype not in low and (a.dtype.isnative or a.dtype.kind != "f"):
        refuse(entry, name, f"[{index}] has dtype {a.dtype.name}; a twin is its float32 parameter "
                            f"rounded to bfloat16 (ml_dtypes.bfloat16) or float16")
    try:  # byte order, contiguity, emptiness, writability
        view, kind = as_cast_buffer(entry, name, obj, writable=True)
    except Refusal as r:  # the same reason, saying which entry
        refuse(entry, name, f"[{index}] {r.reason}")
    if shape_of(obj) != tuple(shape):
        refuse(entry, name, f"[{index}] has shape {shape_of(obj)} but its parameter has shape "
                            f"{tuple(shape)}")
    return view, kind
