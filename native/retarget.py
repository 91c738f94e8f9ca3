"""One helper that compiles an element function's source for another target.

The element functions (native/crmath.py's exp_elem, native/optim.py's adam_elem,
native/rng.py's philox, native/schedule.py's pieces, ...) are written once against
primitive names (add, mul, dadd, narrow, ...) and the names of the pieces they call.
`retarget` gives the same code object a new set of globals, so those names mean one
target's versions: the CPU's vector operations (native/simd.py), libdevice `_rn`
calls on a GPU, numpy scalars under the CUDA simulator (native/cuda/base.py's
`device`). Nothing else about the function changes.

Reproducibility: the same code, hence the same operations in the same order; only
what each primitive name rounds with changes, and every target's primitives round
to nearest.

>>> from operator import add, mul
>>> def twice(x):
...     return add(x, x)
>>> retarget(twice, add=mul)(3), twice(3)
(9, 6)
"""
from __future__ import annotations

import types


def retarget(fn, jit=None, **names):
    """`fn` (a plain function or a numba dispatcher, whose `py_func` is taken) with the
    global `names` resolved to the given objects, compiled by `jit` (None: left plain
    Python, as the CUDA simulator calls it).

    The new globals are a copy of fn's module globals taken now, so a function that
    calls names defined later in its module is retargeted after them. Without `names`
    fn keeps its module's globals (as a decorator, where the module is still loading)."""
    fn = getattr(fn, "py_func", fn)
    bound = fn
    if names:
        env = dict(fn.__globals__, **names)
        bound = types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
    return bound if jit is None else jit(bound)


def renamed(fn, name: str):
    """`fn` (a retargeted plain function) under its own name: numba's disk cache tells
    functions apart by module, qualified name and source line, which a retargeted function
    shares with its original, so without a name of its own either could be loaded for the
    other."""
    fn.__qualname__ = fn.__name__ = name
    return fn
