"""erf on [1/2, ERF_ONE) from four polynomials, for the vector GELU kernels: a first try that
decides most lanes without erf_tanh.erf_elem's series (a division per term, 13 to 60 terms).

On each interval [lo, hi) of EDGES, erf(a) ~ P(t), t = a - c, c the interval's midpoint:
the degree-14 polynomial interpolating erf at the 15 Chebyshev nodes of the interval,
its monomial coefficients in t rounded to binary64 (`fit`, mpmath at 256 bits; TABLE
holds them in hex and tests/test_verf_table.py checks them against `fit`). t is exact (a
is a binary32 value at least 1/2, c has few bits), Horner runs in binary64 with one
rounding per operation, coefficients picked per lane by three compares
(`verf_table`), or each interval's polynomial run on splat coefficients where some lane
lies in it (`verf_table_into`): the same operations and constants for every lane. The interpolant
is within 2^-49.4 of erf relative, the rounded coefficients and Horner's 28 roundings add
a few u (u = 2^-53): sampled against mpmath, at most about 2^-51 (`fit_error`).

The budget TABLE_ERR = 512u is much wider than that error on purpose: the series'
budget is at most ERF_ERR0 + 60 ERF_ERR1 = 188u (its longest loop, near ERF_ONE). If
the series leaves an input undecided, a rounding boundary lies within 2 x 188u of erf
there, so the table, whose interval y +- 512u holds erf and is more than 376u wide on
each side of it, cannot decide that input either. So a lane the table decides is one the
series decides, to the same correctly rounded value, and a lane the table leaves
undecided goes to the series: decided flags and bits stay the scalar's, lane for lane
(benchmarks/vgelu_exhaustive.py walks all 2^32 inputs). The wide budget costs about one
lane in 2^19 a second try on the series.

Reproducibility: a lane's operations depend on its own value only; the table is data.

>>> import numpy as np
>>> from numba import njit
>>> from mojolike.native.simd import vload, vnarrow, vstore, vwiden
>>> @njit
... def erf16(x, out):
...     vstore(out, 0, vnarrow(verf_table(vwiden(vload(x, 0)))))
>>> x = np.float32([0.5, 1.0, 2.0, 3.5] * 4); out = np.empty(16, np.float32)
>>> erf16(x, out); out[:4].tolist()
[0.5204998850822449, 0.8427007794380188, 0.9953222870826721, 0.9999992847442627]
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .erf_tanh import ERF_ONE_D, ERF_POLY_END, U
from .simd import vadd, vand, vmul, vnot, vsplat, vsub
from .simd64 import dge, dselect, vany

DEGREE = 14
EDGES = (float(ERF_POLY_END), 1.25, 2.0, 3.0, float(ERF_ONE_D))
TABLE_ERR = np.float64(512 * U)

# TABLE[i][n]: the coefficient of t^n on interval i, nearest binary64 (`fit`)
TABLE = (
    (
        "0x1.91724951b8fc6p-1", "0x1.0cab61f084b96p-1", "-0x1.d62beb64e847cp-2",
        "0x1.7c9d756a0fa9bp-4", "0x1.cc60567d87dd6p-4", "-0x1.1350f4b1a1766p-4",
        "-0x1.53bb4a7f3d401p-7", "0x1.30ac215010771p-6", "-0x1.e3f4ab0627b52p-10",
        "-0x1.aae20a513dc8dp-9", "0x1.d6df11cc20f1cp-11", "0x1.98f6132730f30p-12",
        "-0x1.93ea562fd12acp-13", "-0x1.e464c34c4f10ep-16", "0x1.ca7c07e544f10p-16",
    ),
    (
        "0x1.f4f693b67bd77p-1", "0x1.499d478bca7f0p-4", "-0x1.0bcfca21947c3p-3",
        "0x1.d6631e1a1ccd7p-4", "-0x1.974c03686d5eap-5", "-0x1.17d43048e7196p-9",
        "0x1.d857f2cc2f005p-7", "-0x1.954ab8ae2b92ep-8", "-0x1.2e43feb4887f5p-11",
        "0x1.71cf939eecbd3p-10", "-0x1.75434e7205f36p-12", "-0x1.082750eb8dffbp-13",
        "0x1.70a99dd5f3f01p-14", "-0x1.7eaf3cabe0d82p-19", "-0x1.583264e333aa5p-17",
    ),
    (
        "0x1.ffcaa8f4c9beap-1", "0x1.1d83170fabdd7p-9", "-0x1.64e3dcd3acd13p-8",
        "0x1.119da0c747a0bp-7", "-0x1.1a89b97da4031p-7", "0x1.90e8118d2e2b4p-8",
        "-0x1.6ecdbeea74fe7p-9", "0x1.1c619ed98bfaep-11", "0x1.1154d308febc5p-12",
        "-0x1.067cb9746d206p-12", "0x1.4a8fcf49dbfabp-14", "0x1.6783801fa8777p-18",
        "-0x1.da5b65bc5137ep-17", "0x1.1329cd34ff320p-18", "0x1.6a007e8cf4d8dp-22",
    ),
    (
        "0x1.ffffdf6467535p-1", "0x1.d52f65861da8dp-18", "-0x1.962f28443a9bep-16",
        "0x1.c14ecabe2c1f8p-15", "-0x1.632092e89c759p-14", "0x1.a882b3a5ce226p-14",
        "-0x1.8b4f84548b41ep-14", "0x1.220b964ef1550p-14", "-0x1.4cc7462b57d88p-15",
        "0x1.1e9425f275b57p-16", "-0x1.40a73c25b9ff4p-18", "0x1.c7c97b69c06e9p-23",
        "0x1.443611d0a3dffp-21", "-0x1.763eb96228b86p-22", "0x1.6d0e52fc08667p-24",
    ),
)

_jit = njit(inline="always", error_model="numpy")
_COEF = tuple(tuple(np.float64(float.fromhex(v)) for v in row) for row in TABLE)
C0, C1, C2, C3 = _COEF  # numba freezes global tuples into the kernel as constants
E1, E2, E3 = (np.float64(e) for e in EDGES[1:4])
MIDS = tuple(np.float64((lo + hi) / 2) for lo, hi in zip(EDGES, EDGES[1:]))
M0, M1, M2, M3 = MIDS


@_jit
def _pick(m1, m2, m3, v0, v1, v2, v3):
    """Lane by lane: v3 from E3 up, else v2 from E2, v1 from E1, else v0."""
    return dselect(m3, vsplat(v3), dselect(m2, vsplat(v2), dselect(m1, vsplat(v1), vsplat(v0))))


@_jit
def verf_table(a):
    """The table's binary64 approximation of erf(a), lane by lane, for EDGES[0] <= a < EDGES[4]
    (other lanes get some finite value); as `horner`, one rounding per operation."""
    m1, m2, m3 = dge(a, vsplat(E1)), dge(a, vsplat(E2)), dge(a, vsplat(E3))
    t = vsub(a, _pick(m1, m2, m3, M0, M1, M2, M3))  # exact
    p = _pick(m1, m2, m3, C0[DEGREE], C1[DEGREE], C2[DEGREE], C3[DEGREE])
    for n in range(DEGREE - 1, -1, -1):
        p = vmul(p, t)
        p = vadd(p, _pick(m1, m2, m3, C0[n], C1[n], C2[n], C3[n]))
    return p


@_jit
def _horner_on(a, mid, coef):
    """One interval's polynomial on every lane (its coefficients splat), as `horner`."""
    t = vsub(a, vsplat(mid))  # exact on the interval's lanes
    p = vsplat(coef[DEGREE])
    for n in range(DEGREE - 1, -1, -1):
        p = vmul(p, t)
        p = vadd(p, vsplat(coef[n]))
    return p


@_jit
def verf_table_into(a, y, series):
    """y with verf_table(a) on the lanes in `series` (EDGES[0] <= a < EDGES[4]), lane for lane
    the same operations and constants. A vector's lanes mostly lie in one or two intervals
    (GELU's inputs cluster near 0): each interval some lane lies in runs its own polynomial
    on splat coefficients, cheaper than picking every coefficient per lane; from three
    intervals up, verf_table's per-lane pick is the cheaper."""
    m1, m2, m3 = dge(a, vsplat(E1)), dge(a, vsplat(E2)), dge(a, vsplat(E3))
    in0, in1, in2 = vand(series, vnot(m1)), vand(m1, vnot(m2)), vand(m2, vnot(m3))
    in3 = vand(series, m3)
    h0, h1, h2, h3 = vany(in0), vany(in1), vany(in2), vany(in3)
    if h0 + h1 + h2 + h3 >= 3:
        return dselect(series, verf_table(a), y)
    if h0:
        y = dselect(in0, _horner_on(a, M0, C0), y)
    if h1:
        y = dselect(in1, _horner_on(a, M1, C1), y)
    if h2:
        y = dselect(in2, _horner_on(a, M2, C2), y)
    if h3:
        y = dselect(in3, _horner_on(a, M3, C3), y)
    return y


def fit() -> tuple[tuple[str, ...], ...]:
    """TABLE from scratch: per interval, the Chebyshev interpolant of erf in t = a - c,
    solved at 256 bits and rounded to binary64 (mpmath, imported here only)."""
    import mpmath

    with mpmath.workprec(256):
        rows = []
        for lo, hi in zip(EDGES, EDGES[1:]):
            c, h = mpmath.mpf(lo + hi) / 2, mpmath.mpf(hi - lo) / 2
            nodes = [h * mpmath.cos(mpmath.pi * (k + mpmath.mpf(1) / 2) / (DEGREE + 1))
                     for k in range(DEGREE + 1)]
            vander = mpmath.matrix([[t ** j for j in range(DEGREE + 1)] for t in nodes])
            coef = mpmath.lu_solve(vander, mpmath.matrix([mpmath.erf(c + t) for t in nodes]))
            rows.append(tuple(float(coef[j]).hex() for j in range(DEGREE + 1)))
        return tuple(rows)


def horner(i: int, a: float) -> float:
    """The table's binary64 value at a on interval i, operation for operation as
    `verf_table` (Python floats are binary64, each operation rounded once)."""
    t = a - float(MIDS[i])
    coef = [float(v) for v in _COEF[i]]
    p = coef[DEGREE]
    for n in range(DEGREE - 1, -1, -1):
        p = p * t
        p = p + coef[n]
    return p


def fit_error(samples: int = 2000) -> float:
    """The largest |horner(a) / erf(a) - 1| over `samples` binary32 points per interval,
    ends included (mpmath's erf at 256 bits)."""
    import mpmath

    worst = 0.0
    with mpmath.workprec(256):
        for i, (lo, hi) in enumerate(zip(EDGES, EDGES[1:])):
            pts = np.float32(np.linspace(lo, hi, samples))
            pts = np.concatenate([pts[pts < np.float32(hi)], [np.nextafter(np.float32(hi), np.float32(0))]])
            for a in pts.astype(np.float64):
                y = horner(i, float(a))
                worst = max(worst, float(abs(mpmath.mpf(y) / mpmath.erf(mpmath.mpf(a)) - 1)))
    return worst
