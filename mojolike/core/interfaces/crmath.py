"""The crmath family's kernel interface: correctly rounded expf, logf, sinpif, cospif, tanhf, erff, and GELU.

Each method writes its function of x into out and returns how many slots it left
UNDECIDED (the pattern 0x7FA00DAD); the API gives those the oracle's exact bits
(`mojolike.ops.crmath.finish`, `finish_gelu`, `finish_gelu_backward`).

Reproducibility: every decided slot holds the correctly rounded value, so after the
finish every backend gives the oracle's bits.

>>> from mojolike.core.interfaces import writes
>>> writes("crmath")["logf_into"]
(1,)
"""
from __future__ import annotations

from typing import Protocol

from . import Array, KernelSet, Written


class CrmathKernels(KernelSet, Protocol):
    """x -> out for the four functions; x and out are flat float32 of one size, not overlapping."""

    def expf_into(self, x: Array, out: Written) -> int:
        """out = expf(x) (e^x, correctly rounded); returns the number of UNDECIDED slots."""

    def logf_into(self, x: Array, out: Written) -> int:
        """out = logf(x) (natural log, correctly rounded); returns the number of UNDECIDED slots."""

    def sinpif_into(self, x: Array, out: Written) -> int:
        """out = sinpif(x) (sin(pi x), correctly rounded); returns the number of UNDECIDED slots."""

    def cospif_into(self, x: Array, out: Written) -> int:
        """out = cospif(x) (cos(pi x), correctly rounded); returns the number of UNDECIDED slots."""

    def tanhf_into(self, x: Array, out: Written) -> int:
        """out = tanhf(x) (tanh, correctly rounded); returns the number of UNDECIDED slots."""

    def erff_into(self, x: Array, out: Written) -> int:
        """out = erff(x) (erf, correctly rounded); returns the number of UNDECIDED slots."""

    def gelu_into(self, x: Array, tanh: bool, out: Written) -> int:
        """out = gelu_tanh(x) if tanh else gelu_erf(x) (oracles/erf_tanh.py, elementwise); a slot
        whose inner tanhf/erff is undecided is UNDECIDED; returns their number."""

    def gelu_backward_into(self, dy: Array, x: Array, tanh: bool, dx: Written) -> int:
        """dx = gelu_tanh_grad(dy, x) if tanh else gelu_erf_grad(dy, x); returns the number of
        UNDECIDED slots (an inner tanhf, erff or expf undecided)."""
