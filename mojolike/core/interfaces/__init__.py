"""Each op family's kernel interface, declared once: what the API and the contracts call.

`mojolike.core.interfaces.<family>` holds `<Family>Kernels`, a `typing.Protocol`
that every backend's kernel set of that family meets (the oracle adapters in
oracles/kernels/, native/, native/c/, native/cuda/ and the simulator's proxy).
Its methods carry the parameters as the implementations name them and mark each
argument the method writes (`out: Written`); `writes(family)` derives from them the
positions the simulator's proxy copies back across the process boundary.

The protocols live in mojolike.core because that is the one room every side of the
interface may import: the API (mojolike.ops, .optim), the oracle adapters and the
kernels (which import mojolike.core and mojolike.oracles, never the API), and the
simulator worker. They import numpy and typing only, so reading them compiles nothing.

Reproducibility: a declaration only; nothing here computes a value.

>>> writes("crmath")["expf_into"]
(1,)
"""
from __future__ import annotations

import functools
import importlib
import inspect
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

import numpy as np

from ..families import FAMILIES


@dataclass(frozen=True)
class Writes:
    """The mark of a written argument; with `when`, it is written only when that keyword is true."""

    when: str | None = None


# A buffer: a C-contiguous numpy array; where the kernel set says so, a device array
# (CUDA) or pieces (`takes_pieces`: native.pieces.Pieces).
Array = np.ndarray
Written = Annotated[Array, Writes()]


class KernelSet(Protocol):
    """What every kernel set carries: its labels, what it reports, and whether it takes pieces.

    `backend` and `numeric_mode` are the labels the registry checks against the request
    (a mismatch is refused, never relabelled); `details` goes into cards and run records
    (versions, the build command, the device); `takes_pieces` is True when the set's
    optimizer kernels write separate arrays in place through a `Pieces` table, False
    when they take flat arrays only.
    """

    backend: str
    numeric_mode: str
    details: dict
    takes_pieces: bool


def protocol(family: str) -> type:
    """The interface of `family`'s kernel sets: `<Family>Kernels` of interfaces.<family>."""
    if family not in FAMILIES:
        raise KeyError(f"{family!r} is not an op family; the families are {', '.join(FAMILIES)}")
    mod = importlib.import_module(f"{__name__}.{family}")
    return getattr(mod, f"{family.capitalize()}Kernels")


def methods(family: str) -> dict[str, inspect.Signature]:
    """Every method `family`'s interface declares, with its signature (self left out)."""
    proto = protocol(family)
    return {name: _signature(fn) for name, fn in vars(proto).items()
            if not name.startswith("_") and inspect.isfunction(fn)}


def _signature(fn) -> inspect.Signature:
    sig = inspect.signature(fn)
    return sig.replace(parameters=list(sig.parameters.values())[1:])


@functools.cache
def _marks(family: str) -> dict[str, list[tuple[int, Writes]]]:
    proto = protocol(family)
    out = {}
    for name in methods(family):
        fn = getattr(proto, name)
        hints = typing.get_type_hints(fn, include_extras=True)
        params = list(inspect.signature(fn).parameters)[1:]
        out[name] = [(i, m) for i, p in enumerate(params) for m in getattr(hints.get(p), "__metadata__", ())
                     if isinstance(m, Writes)]
    return out


def writes(family: str) -> dict[str, tuple[int, ...]]:
    """method -> the positions (self not counted) of the arguments it always writes; methods
    that write no argument are left out."""
    out = {}
    for name, marks in _marks(family).items():
        pos = tuple(i for i, m in marks if m.when is None)
        if pos:
            out[name] = pos
    return out


def written(family: str, method: str, kwargs: dict[str, Any]) -> tuple[int, ...]:
    """The positions `method` writes in a call with these keyword arguments: those it always
    writes, then those whose `Writes.when` keyword is true in the call."""
    marks = _marks(family).get(method, [])
    return (tuple(i for i, m in marks if m.when is None)
            + tuple(i for i, m in marks if m.when is not None and kwargs.get(m.when)))


def mismatches(family: str, k) -> list[str]:
    """How kernel set `k` departs from `family`'s interface (empty when it conforms).

    Every declared method exists with the declared parameter names, kinds and order. An
    implementation may gather a tail of the positional parameters into one `*args`
    (it passes them on to a compiled kernel unchanged); what follows must still match.
    """
    problems = [f"no attribute {a!r}" for a in KernelSet.__annotations__ if not hasattr(k, a)]
    for name, want in methods(family).items():
        fn = getattr(k, name, None)
        if not callable(fn):
            problems.append(f"no method {name}")
            continue
        got = [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]
        need = [(p.name, p.kind) for p in want.parameters.values()]
        if not _same(got, need):
            problems.append(f"{name}{inspect.signature(fn)} is not {name}{want}")
    return problems


def _same(got: list, need: list) -> bool:
    if got == need:
        return True
    star = next((i for i, (_, kind) in enumerate(got) if kind is inspect.Parameter.VAR_POSITIONAL),
                None)
    if star is None or got[:star] != need[:star]:
        return False
    positional = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
    rest = need[star:]
    while rest and rest[0][1] in positional:
        rest = rest[1:]
    if rest and rest[0][1] is inspect.Parameter.VAR_POSITIONAL:
        rest = rest[1:]
    return got[star + 1:] == rest
