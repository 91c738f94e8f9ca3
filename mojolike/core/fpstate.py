"""The process's floating-point state: identical mode needs round-to-nearest and subnormals kept.

A library linked with -ffast-math (gcc's crtfastmath) switches on flush-to-zero
(FTZ) and denormals-are-zero (DAZ) for the whole process when it is loaded, and
`fesetround` changes the rounding mode; after either, numba, C and numpy's
float32 units return other bits. Every identical-mode entry point calls `check`,
which reads the calling thread's control register (MXCSR on x86-64, FPCR on
aarch64) through the small extension `mojolike._fpcsr` and refuses by name when
a watched bit is set. Where that extension is missing (no C compiler at install,
another architecture), two binary64 products whose results FTZ, DAZ and every
directed rounding mode change give the same verdict, more slowly.
`python benchmarks/fpstate.py` measures the cost.

Worker threads copy the state of the thread that starts them; the cpu-cffi
self-test runs on every OpenMP thread when its module loads.

>>> state().ok
True
>>> check("mojolike.fold")   # raises mojolike.Refusal when the state is wrong
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .refusals import Refusal

try:
    from .. import _fpcsr
except ImportError:  # built at install when a compiler is there (pyproject ext-modules)
    _fpcsr = None

OPTION = "floating-point state"


def _f64(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]  # exact in any FP state


# The arithmetic probe. Module globals (never literals), so no constant folding removes an
# operation. 1027 * 2^-1076 is a subnormal 256.75 ulps: nearest gives 257 ulps, FTZ 0,
# toward zero and downward 256. 5 * 2^-1074 (subnormal) times (1 + 2^-52) * 2^1000 is a
# normal number 1.25 ulps above 5 * 2^-74: nearest gives +1 ulp, upward +2, DAZ 0.
_A, _B, _AB = 1027.0 * 2.0 ** -600, 2.0 ** -476, _f64(257)
_S, _C, _SC = _f64(5), (1.0 + 2.0 ** -52) * 2.0 ** 1000, 5.0 * 2.0 ** -74 + 2.0 ** -124
_ONE, _MINUS_ONE, _E = 1.0, -1.0, 3.0 * 2.0 ** -54  # 0.75 ulp of 1.0


def _probe_deviation() -> int:
    return 0 if (_A * _B == _AB and _S * _C == _SC) else 1


deviation = _fpcsr.deviation if _fpcsr is not None else _probe_deviation
"""0 when the calling thread rounds to nearest and keeps subnormals, else nonzero (cheap)."""


def mechanism() -> str:
    """How `check` reads the state (recorded in certify's meta)."""
    if _fpcsr is not None:
        return f"{_fpcsr.REGISTER} read by mojolike._fpcsr"
    return "arithmetic probe (mojolike._fpcsr is not built)"


@dataclass(frozen=True)
class FPState:
    """The calling thread's floating-point state, as far as identical mode cares."""

    flush_to_zero: bool
    denormals_are_zero: bool
    rounding: str  # "nearest", "toward zero", "downward" or "upward"
    register: str | None = None  # "MXCSR" or "FPCR" when read directly
    raw: int | None = None
    other: tuple[str, ...] = ()  # other watched bits that are set

    @property
    def ok(self) -> bool:
        return not (self.flush_to_zero or self.denormals_are_zero or self.other) \
            and self.rounding == "nearest"

    def describe(self) -> str:
        parts = []
        if self.flush_to_zero:
            parts.append("flush-to-zero (FTZ) is on")
        if self.denormals_are_zero:
            parts.append("denormals-are-zero (DAZ) is on")
        if self.rounding != "nearest":
            parts.append(f"the rounding mode is {self.rounding}")
        parts += [f"{o} is on" for o in self.other]
        text = " and ".join(parts) or "round-to-nearest with subnormals kept"
        if self.register is not None:
            text += f" ({self.register}=0x{self.raw:08x})"
        return text


def _from_register(name: str, v: int) -> FPState:
    if name == "MXCSR":
        rounding = ("nearest", "downward", "upward", "toward zero")[(v >> 13) & 3]
        return FPState(bool(v & 0x8000), bool(v & 0x40), rounding, name, v)
    rounding = ("nearest", "upward", "downward", "toward zero")[(v >> 22) & 3]
    other = tuple(n for bit, n in ((0, "FIZ (flush inputs to zero)"), (1, "AH (alternate handling)"))
                  if v >> bit & 1)
    fz = bool(v >> 24 & 1)  # FPCR.FZ flushes subnormal inputs and results alike
    return FPState(fz, fz, rounding, name, v, other)


def state() -> FPState:
    """The calling thread's state, read from the register or, without it, probed."""
    if _fpcsr is not None:
        return _from_register(_fpcsr.REGISTER, _fpcsr.raw())
    product = struct.pack("<d", _A * _B)  # the bits: comparing a subnormal under DAZ says 0
    up = _ONE + _E == 1.0 + 2.0 ** -52
    down = _MINUS_ONE - _E == -(1.0 + 2.0 ** -52)
    rounding = {(True, True): "nearest", (False, False): "toward zero",
                (False, True): "downward", (True, False): "upward"}[(up, down)]
    return FPState(product == bytes(8), _S * _C == 0.0, rounding)


def refuse(entry: str) -> None:
    """Raise the refusal that names the calling thread's wrong state."""
    raise Refusal(entry, OPTION,
                  f"is not the one identical mode needs: {state().describe()} in this thread. A "
                  f"library built with -ffast-math sets FTZ/DAZ for the whole process when it is "
                  f"loaded (gcc's crtfastmath), and fesetround or another numerics library can "
                  f"change the rounding mode; restore round-to-nearest with subnormals kept, or "
                  f"pass numeric_mode='deterministic' or 'fast', which carry no contract. Nothing "
                  f"was computed")


def check(entry: str) -> None:
    """Refuse by name, before anything is computed, unless the calling thread rounds to
    nearest and keeps subnormals."""
    if deviation():
        refuse(entry)
