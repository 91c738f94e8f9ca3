"""Correctly rounded expf/logf/sinpif/cospif through the C kernels in crmath.c (the second spelling).

The element arithmetic is `native/crmath.py`'s exp_elem/log_elem/sinpi_elem/cospi_elem
written in C, one
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
"""
from __future__ import annotations

import numpy as np

from .. import crmath as cpu
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


def load(mode: str, backend: str = "cpu-cffi") -> CffiCrmath:
    return CffiCrmath(mode)
