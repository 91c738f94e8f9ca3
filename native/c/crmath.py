"""Correctly rounded expf/logf/sinpif/cospif/tanhf/erff (and GELU) through the C kernels in crmath.c (the second spelling).

The element arithmetic is `native/crmath.py`'s exp_elem/log_elem/sinpi_elem/cospi_elem
written in C (and `native/erf_tanh.py`'s tanh/erf/GELU pieces), one
binary64 operation per statement in the same order, so the computed value, the
rounding test and therefore the UNDECIDED slots are the same as cpu-numba's. The
tables and constants are not copied into the C source: every call passes
`mj_crmath_tab`, filled here from the module globals of `native/crmath.py` (which
takes them from `oracles/crmath.kernel_tables()`).

Reproducibility: built with -ffp-contract=off -fno-fast-math and no libm;
elementwise, so the OpenMP thread count cannot reach the bits, and the undecided
count is an integer sum.

>>> import numpy as np
>>> out = np.empty(3, np.float32)
>>> k = load("identical")
>>> k.expf_into(np.float32([0.0, 1.0, -np.inf]), out), out.tolist()
(0, [1.0, 2.7182817459106445, 0.0])
>>> k.logf_into(np.float32([1.0, 2.0, 0.0]), out), out.tolist()
(0, [0.0, 0.6931471824645996, -inf])
>>> k.sinpif_into(np.float32([0.5, -1.0, 0.25]), out), out.tolist()
(0, [1.0, -0.0, 0.7071067690849304])
>>> k.cospif_into(np.float32([0.5, 1.0, 0.25]), out), out.tolist()
(0, [0.0, -1.0, 0.7071067690849304])
>>> k.tanhf_into(np.float32([0.5, -0.0, 10.0]), out), out.tolist()
(0, [0.46211716532707214, -0.0, 1.0])
"""
from __future__ import annotations

import numpy as np

from .. import crmath as cpu
from .. import erf_tanh as et
from .base import CffiBase

# mj_crmath_tab field -> the native/crmath.py global it is filled from
_FIELDS = {
    "inv_ln2_32": "INV_LN2_32", "ln2_32_hi": "LN2_32_HI", "ln2_32_lo": "LN2_32_LO",
    "ln2_hi": "LN2_HI", "ln2_lo": "LN2_LO", "shifter": "SHIFTER", "err": "ERR", "one": "ONE",
    "two_m23": "TWO_M23", "two_m24": "TWO_M24",
    "e2": "E2", "e3": "E3", "e4": "E4", "e5": "E5", "e6": "E6",
    "l2": "L2", "l3": "L3", "l4": "L4", "l5": "L5", "l6": "L6", "l7": "L7", "l8": "L8",
    **{f"s{k}": f"S{k}" for k in range(9)}, **{f"c{k}": f"C{k}" for k in range(1, 9)},
    "zero": "ZERO", "half": "HALF", "minus_one": "MINUS_ONE",
    "trig_big": "TRIG_BIG", "trig_inf": "TRIG_INF",
    "pow2_bias": "POW2_BIAS", "sqrt2_m24": "SQRT2_M24", "block": "BLOCK",
    "exp_huge": "EXP_HUGE", "exp_tiny": "EXP_TINY",
    "undecided": "UNDECIDED", "quiet_bit": "QUIET_BIT", "default_nan": "DEFAULT_NAN",
    "pos_inf_bits": "POS_INF_BITS", "neg_inf_bits": "NEG_INF_BITS",
}
_TABLES = {"exp2_32": "EXP2_32", "pow2": "POW2", "log_inv": "LOG_INV", "log_hi": "LOG_HI",
           "log_lo": "LOG_LO"}
# mj_erf_tanh_tab field -> the native/erf_tanh.py global it is filled from
_ET_FIELDS = {
    "tanh_poly_err": "TANH_POLY_ERR", "tanh_err": "TANH_ERR", "erf_poly_err": "ERF_POLY_ERR",
    "erf_err0": "ERF_ERR0", "erf_err1": "ERF_ERR1", "erf_stop": "ERF_STOP",
    "tanh_poly_end": "TANH_POLY_END", "erf_poly_end": "ERF_POLY_END", "tanh_one": "TANH_ONE_D",
    "erf_one": "ERF_ONE_D", "two": "TWO", "two_over_sqrt_pi": "TWO_OVER_SQRT_PI",
    "zero32": "ZERO32", "one32": "ONE32", "half32": "HALF32", "minus_half32": "MINUS_HALF32",
    "three32": "THREE32", "alpha": "ALPHA", "beta": "BETA", "kappa": "KAPPA", "beta_erf": "BETA_ERF",
    "pos_inf32": "POS_INF32",
}
_ET_TABLES = {"tanh_c": [f"T{k}" for k in range(3, 24, 2)], "erf_c": [f"R{k}" for k in range(14)]}
UNDECIDED = cpu.UNDECIDED


class CffiCrmath(CffiBase):
    """expf/logf/sinpif/cospif in C, OpenMP over blocks of elements; out written, x only read."""

    takes_pieces = False

    def __init__(self, mode: str):
        super().__init__(mode)
        ffi = self._ffi
        tab = ffi.new("mj_crmath_tab *")
        for field, name in _FIELDS.items():
            v = getattr(cpu, name)
            setattr(tab, field, int(v) if isinstance(v, (int, np.integer)) else float(v))
        tab.one_bits = cpu.oracle.ONE_BITS
        self._arrays = {}  # the tables, kept alive as long as the struct points into them
        for field, name in _TABLES.items():
            a = np.ascontiguousarray(getattr(cpu, name), np.float64)
            buf = ffi.from_buffer("double[]", a)
            self._arrays[field] = (a, buf)
            setattr(tab, field, buf)
        self._tab = tab
        etab = ffi.new("mj_erf_tanh_tab *")
        for field, name in _ET_FIELDS.items():
            setattr(etab, field, float(getattr(et, name)))
        for field, names in _ET_TABLES.items():
            a = np.array([getattr(et, name) for name in names], np.float64)
            buf = ffi.from_buffer("double[]", a)
            self._arrays[field] = (a, buf)
            setattr(etab, field, buf)
        self._etab = etab

    def expf_into(self, x, out) -> int:
        """Write expf(x) into out (flat float32); returns the number of UNDECIDED slots."""
        return int(self._lib.mj_expf(self._ptr(x), self._ptr(out), out.size, self._tab))

    def logf_into(self, x, out) -> int:
        """Write logf(x) into out; returns the number of UNDECIDED slots."""
        return int(self._lib.mj_logf(self._ptr(x), self._ptr(out), out.size, self._tab))

    def sinpif_into(self, x, out) -> int:
        """Write sinpif(x) into out; returns the number of UNDECIDED slots."""
        return int(self._lib.mj_sinpif(self._ptr(x), self._ptr(out), out.size, self._tab))

    def cospif_into(self, x, out) -> int:
        """Write cospif(x) into out; returns the number of UNDECIDED slots."""
        return int(self._lib.mj_cospif(self._ptr(x), self._ptr(out), out.size, self._tab))

    def tanhf_into(self, x, out) -> int:
        """Write tanhf(x) into out; returns the number of UNDECIDED slots."""
        return int(self._lib.mj_odd(self._ptr(x), self._ptr(out), out.size, 0, self._tab, self._etab))

    def erff_into(self, x, out) -> int:
        """Write erff(x) into out; returns the number of UNDECIDED slots."""
        return int(self._lib.mj_odd(self._ptr(x), self._ptr(out), out.size, 1, self._tab, self._etab))

    def gelu_into(self, x, tanh: bool, out) -> int:
        """Write gelu_tanh(x) if tanh else gelu_erf(x) into out; returns the UNDECIDED count."""
        return int(self._lib.mj_gelu(self._ptr(x), self._ptr(out), out.size, int(bool(tanh)), self._tab,
                                     self._etab))

    def gelu_backward_into(self, dy, x, tanh: bool, dx) -> int:
        """Write gelu_tanh_grad(dy, x) if tanh else gelu_erf_grad(dy, x) into dx; returns the UNDECIDED count."""
        return int(self._lib.mj_gelu_backward(self._ptr(dy), self._ptr(x), self._ptr(dx), dx.size,
                                              int(bool(tanh)), self._tab, self._etab))


def load(mode: str, backend: str = "cpu-cffi") -> CffiCrmath:
    return CffiCrmath(mode)
