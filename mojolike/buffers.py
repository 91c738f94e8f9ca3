"""Taking caller buffers: float32, C-contiguous, native byte order, non-empty.

Anything with the buffer protocol is accepted (numpy arrays, `array.array('f')`,
memoryview) and read in C order without a copy. Other dtypes are refused by name
rather than converted: a silent float64->float32 cast would certify bits of an
input the caller never had.
"""
from __future__ import annotations

import numpy as np

from .refusals import refuse

F32 = np.dtype("<f4")


def _as_array(entry: str, name: str, obj) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    try:
        view = memoryview(obj)
    except TypeError:
        hint = " (for a torch tensor, pass tensor.numpy())" if hasattr(obj, "__dlpack__") else ""
        refuse(entry, name, f"must be a float32 buffer (numpy array, array.array('f'), "
                            f"memoryview); got {type(obj).__name__}{hint}")
    try:
        return np.asarray(view)
    except (TypeError, ValueError) as e:
        refuse(entry, name, f"has buffer format {view.format!r} that numpy cannot read ({e})")


def as_f32(entry: str, name: str, obj, *, writable: bool = False) -> np.ndarray:
    """A 1-D float32 view of `obj` in C order; refuses anything else by name.

    With `writable=True` the buffer must also accept writes (it will be updated in place).
    """
    a = _as_array(entry, name, obj)
    if a.dtype.kind == "f" and a.dtype.itemsize == 4 and not a.dtype.isnative:
        refuse(entry, name, "is float32 in non-native byte order; pass a native-order copy")
    if a.dtype != np.float32:
        refuse(entry, name, f"has dtype {a.dtype.name}; only float32 buffers are covered "
                            f"(float16, bfloat16 and float64 are not converted)")
    if a.size == 0:
        refuse(entry, name, "is empty; at least one element is needed")
    if not a.flags.c_contiguous:
        refuse(entry, name, f"is not C-contiguous (strides {a.strides}); pass a contiguous "
                            f"buffer, e.g. numpy.ascontiguousarray(...)")
    if writable and not a.flags.writeable:
        refuse(entry, name, "is read-only but is updated in place")
    return a.reshape(-1)
