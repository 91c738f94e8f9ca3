"""The binary32 inputs the tanhf and erff kernels leave UNDECIDED, and which host fallbacks are allowed.

Found by benchmarks/erf_tanh_kernels_exhaustive.py: every one of the 2^32 input
patterns through cpu-numba's tanhf_into and erff_into (native/erf_tanh.py), each
decided value checked against a libm shortcut with a 2^-48 margin or, inside the
margin, against the exact oracle (0 errors). cpu-cffi and cuda run the same binary64
operation sequence, so they leave the same inputs undecided. tanh and erf are odd and
the kernels apply the sign exactly, so each list is symmetric.

`known_fallback(r)` accepts a `fallbacks.Fallback` the crmath finish paths report for
these functions: tanhf / erff at a listed input, and the GELU kinds whose inner
argument (computed as oracles/erf_tanh.py does) is a listed input: x * ALPHA for
gelu_erf and gelu_erf_grad, whose expf argument (x * x) * -0.5 may also be one of
contracts/crmath.py's HARD_EXP; tanh's inner BETA * (x + KAPPA * ((x * x) * x)) for
gelu_tanh and gelu_tanh_grad.

Reproducibility: data only; the lists change only with the kernels' arithmetic.

>>> from mojolike.core.fallbacks import Fallback
>>> known_fallback(Fallback("crmath", "tanhf", HARD_TANH[0], 0)), known_fallback(Fallback("crmath", "tanhf", 0, 0))
(True, False)
"""
from __future__ import annotations

from mojolike.oracles import erf_tanh as spec
from mojolike.oracles.f32 import bits_to_f32, f32_to_bits, mul

from .crmath import HARD_EXP

# tanhf: the full walk (all 2^32 inputs, 256 s on 2 shared cores): 4 undecided, 0 errors
# (16 close calls the oracle decided)
HARD_TANH = (0x3EEE0566, 0x40ACB4D0, 0xBEEE0566, 0xC0ACB4D0)
# erff: the full walk (all 2^32 inputs, 437 s): 16 undecided, 0 errors (226 close calls
# the oracle decided)
HARD_ERF = (
    0x3940EAD6, 0x39C0057D, 0x3F043A75, 0x3F44DDFD, 0x3FDE4AC1, 0x3FE46451, 0x40467275, 0x407AD445,
    0xB940EAD6, 0xB9C0057D, 0xBF043A75, 0xBF44DDFD, 0xBFDE4AC1, 0xBFE46451, 0xC0467275, 0xC07AD445,
)
_TANH, _ERF, _EXP = frozenset(HARD_TANH), frozenset(HARD_ERF), frozenset(HARD_EXP)


def _erf_arg(x: float) -> int:
    return f32_to_bits(mul(x, spec.ALPHA))


def _tanh_arg(x: float) -> int:
    return f32_to_bits(spec._tanh_inner(x, mul(x, x)))


def _exp_arg(x: float) -> int:
    return f32_to_bits(mul(mul(x, x), -0.5))


def known_fallback(r) -> bool:
    """True when `r` (a fallbacks record) is a host fallback these lists allow."""
    if r.family != "crmath":
        return False
    if r.kind == "tanhf":
        return r.at in _TANH
    if r.kind == "erff":
        return r.at in _ERF
    x = bits_to_f32(r.at)
    if r.kind == "gelu_erf":
        return _erf_arg(x) in _ERF
    if r.kind == "gelu_erf_grad":
        return _erf_arg(x) in _ERF or _exp_arg(x) in _EXP
    if r.kind in ("gelu_tanh", "gelu_tanh_grad"):
        return _tanh_arg(x) in _TANH
    return False
