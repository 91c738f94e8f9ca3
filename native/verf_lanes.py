"""erf on [0, ERF_ONE) from one polynomial per lane, for the vector GELU kernels: a first try
that runs one evaluation on every lane, where native/verf_tanh.py's path runs the series'
polynomial below 1/2 and native/verf_table.py's pieces above it, each on every lane that
some lane of the vector needs.

Lane a lies on interval k = round(min(4a, 15)) (ties to even): [k/4 - 1/8, k/4 + 1/8], the
last one [3.625, ERF_ONE]. There erf(a) ~ a Q_k(t), t = a - k/4, Q_k the degree-7
polynomial interpolating erf(a)/a (2/sqrt(pi) at 0) at the interval's 8 Chebyshev
nodes, its monomial coefficients rounded to binary64 (`fit`, mpmath at 256 bits; TABLE
holds them, tests/test_verf_lanes.py checks them against `fit`). Q_k's coefficients are
picked per lane (`vlookup16`: two permutes on AVX-512, a gather elsewhere), so every lane
runs the same operations: 4a and k/4 exact, t exact but below about 2^-27 (where the
rounding of t moves Q by under 2^-56, erf(a)/a being flat there), Horner in binary64 with
one rounding per operation, then the product by a. Sampled against mpmath (`fit_error`),
the result is within about 2^-38.9 of erf relative.

The budget ERF_TRY_ERR = 3 x 2^-36 (about 2^-34.4) holds 16 times that error and twice the
widest budget of the path it tries ahead of (erf_tanh.erf_elem: 4u on the polynomial below
1/2, at most (8 + 3 x 60)u = 188u on the series, u = 2^-53): if the scalar leaves an input
undecided, a rounding boundary lies within 2 x 188u of erf, so inside this try's interval,
and the try leaves it undecided too. A lane this try decides is therefore one the scalar
decides, to the same correctly rounded value; the others (about one lane in 2^10: the
degree is the cheapest whose budget keeps that rare) take the scalar's path
(vgelu.verf_block). benchmarks/vgelu_exhaustive.py walks all 2^32 inputs through it.

Reproducibility: a lane's operations depend on its own value only; the table is data.

>>> import numpy as np
>>> from numba import njit
>>> from mojolike.native.simd import vload, vnarrow, vstore, vwiden
>>> @njit
... def erf16(x, out):
...     vstore(out, 0, vnarrow(verf_lanes(vwiden(vload(x, 0)))))
>>> x = np.float32([0.25, 1.0, 2.0, 3.9] * 4); out = np.empty(16, np.float32)
>>> erf16(x, out); out[:4].tolist()
[0.27632638812065125, 0.8427007794380188, 0.9953222870826721, 0.9999999403953552]
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .erf_tanh import ERF_ONE_D
from .simd import vadd, vbits, vmul, vsplat, vsub
from .simd64 import dge, dselect, vlookup16

DEGREE = 7
ERF_TRY_ERR = np.float64(3 * 2.0 ** -36)
LAST = np.float64(15.0)  # the last interval's k
FOUR = np.float64(4.0)
QUARTER = np.float64(0.25)
SHIFTER = np.float64(1.5 * 2.0 ** 52)  # s + SHIFTER rounds s to an integer, read from the bits
SHIFTER_BITS = np.int64(SHIFTER.view(np.int64))

# TABLE[k][n]: the coefficient of t^n on interval k, nearest binary64 (`fit`)
TABLE = (
    ("0x1.20dd750429b43p+0", "0x1.4e1f80a32fa8cp-37", "-0x1.812746cba3186p-2",
     "0x1.b7102d3fab25dp-24", "0x1.ce2bc21457df0p-4", "0x1.cd79ece0999f9p-15",
     "-0x1.c0b95e73a10ddp-6", "0x1.528c4651a2a59p-9"),
    ("0x1.1af54e232bd38p+0", "-0x1.73070406a86cfp-3", "-0x1.57664fccdd83dp-2",
     "0x1.acf0b9e91e708p-4", "0x1.6cb071b98fb09p-4", "-0x1.265bb2fba22ffp-5",
     "-0x1.2be50e4372a14p-6", "0x1.23019d4d53294p-7"),
    ("0x1.0a7ef5c18f845p+0", "-0x1.4c3884e5df4ddp-2", "-0x1.d6dd15b8d61d2p-3",
     "0x1.55cfc7d7c4d45p-3", "0x1.09167fe4e425ap-5", "-0x1.9a2e90ba6aeddp-5",
     "0x1.489b364720bebp-16", "0x1.5c8902cf8dc5bp-7"),
    ("0x1.e57b7477c5019p-1", "-0x1.a0cdd9ab34c5bp-2", "-0x1.9a7d8ec9ba1bep-4",
     "0x1.5acfc2b4831dap-3", "-0x1.977f68267dc08p-6", "-0x1.35dfd19936a13p-5",
     "0x1.dac62ec5e61abp-7", "0x1.4e0814064a844p-8"),
    ("0x1.af767a74136d4p-1", "-0x1.b5db0451273d2p-2", "0x1.9922717c06903p-7",
     "0x1.01cf23b9e2295p-3", "-0x1.d078295134560p-5", "-0x1.9924e150fc449p-7",
     "0x1.16b003cf97148p-6", "-0x1.f5b5f9d6d2009p-10"),
    ("0x1.7a0517ad56b6dp-1", "-0x1.9b12df9ca1325p-2", "0x1.5aa538e581cc4p-4",
     "0x1.0faa3be58567ep-4", "-0x1.db077ad655f73p-5", "0x1.1b4394c3df7a9p-7",
     "0x1.4b5e579d6e668p-7", "-0x1.52a83c4a3fa86p-8"),
    ("0x1.49c38e4b793e5p-1", "-0x1.667ed552b8eedp-2", "0x1.d4d971692c0c3p-4",
     "0x1.0946e15f75d19p-6", "-0x1.4bff70948b52dp-5", "0x1.184751587bf99p-6",
     "0x1.8d899164af4eep-10", "-0x1.0f280799e72dap-8"),
    ("0x1.20ac0448e1c2bp-1", "-0x1.2b07a60692fc9p-2", "0x1.d3549a91b3085p-4",
     "-0x1.c0361dbe48fb8p-7", "-0x1.424ae3d8e5bffp-6", "0x1.ec5e17d75e327p-7",
     "-0x1.c0ec5173ada03p-9", "-0x1.865709d1197ebp-10"),
    ("0x1.fd9ae14278286p-2", "-0x1.e8712759a875bp-3", "0x1.93ca3fdd24ed2p-4",
     "-0x1.9c899c1bf839cp-6", "-0x1.2fa134aba7df3p-8", "0x1.225bfcc932fbcp-7",
     "-0x1.1218e74dd51dep-8", "0x1.a47ba8a023558p-12"),
    ("0x1.c672068e64f1ap-2", "-0x1.8d734c1fee698p-3", "0x1.4408c71e7286ap-4",
     "-0x1.a1de1a32a5654p-6", "0x1.76101f03fb9f5p-9", "0x1.c69c734d302b3p-9",
     "-0x1.7329270ecadedp-9", "0x1.f4ef2895b5d91p-11"),
    ("0x1.996eed90a1c7cp-2", "-0x1.45c31f82016b0p-3", "0x1.f76000e003d71p-5",
     "-0x1.5bfa13d95abc8p-6", "0x1.4abc81929b0fdp-8", "0x1.c11f052551c12p-12",
     "-0x1.53e543abab7b9p-10", "0x1.80074f19465b0p-11"),
    ("0x1.74537fc604252p-2", "-0x1.0e5896d12ad1fp-3", "0x1.846d86a1c9b84p-5",
     "-0x1.0a0c0d49022d4p-6", "0x1.3555f90deb384p-8", "-0x1.767c8bf20f5fcp-11",
     "-0x1.6cee08fdda860p-12", "0x1.7a2f481cbab33p-12"),
    ("0x1.5553672d626b5p-2", "-0x1.c6e932c039901p-4", "0x1.2e2218e0dabfbp-5",
     "-0x1.8a39a4ee290b8p-7", "0x1.e001a6c8eb0c7p-9", "-0x1.ce5ad51386481p-11",
     "0x1.7c5d357c829aep-15", "0x1.e3432005b9d40p-14"),
    ("0x1.3b135862189bep-2", "-0x1.83bf9f6f556ddp-4", "0x1.dcc02f5636715p-6",
     "-0x1.23692b3868759p-7", "0x1.5b1a717c988a9p-9", "-0x1.789570b1c2403p-11",
     "0x1.23981eec4ac43p-13", "0x1.47ddca3a477ddp-17"),
    ("0x1.24923ae50c3c9p-2", "-0x1.4e5c5c0d427a4p-4", "0x1.7e09c39b6cef4p-6",
     "-0x1.b3d2b394cf340p-8", "0x1.ed030bb1a1053p-10", "-0x1.0d6bc9ccad357p-11",
     "0x1.0508ff7690692p-13", "-0x1.3b68501ce1c41p-16"),
    ("0x1.11110f080c534p-2", "-0x1.234526458515ap-4", "0x1.36ac7664dbb95p-6",
     "-0x1.4b3ef81a5d38cp-8", "0x1.605c80e829d55p-10", "-0x1.72bafc327ecdcp-12",
     "0x1.761f480d76639p-14", "-0x1.3d7157268310ap-16"),
)

_jit = njit(inline="always", error_model="numpy")
COEF = np.ascontiguousarray(np.array([[float.fromhex(v) for v in row] for row in TABLE]).T)  # [n][k]


@_jit
def verf_lanes(a):
    """The binary64 approximation a Q_k(a - k/4) of erf(a), lane by lane, for 0 <= a < ERF_ONE
    (other lanes get some finite value); one rounding per operation."""
    q = vmul(a, vsplat(FOUR))  # exact
    q = dselect(dge(q, vsplat(LAST)), vsplat(LAST), q)
    s = vadd(q, vsplat(SHIFTER))
    k = vsub(vbits(s), vsplat(SHIFTER_BITS))  # round(q): the patterns of s and SHIFTER differ by it
    t = vsub(a, vmul(vsub(s, vsplat(SHIFTER)), vsplat(QUARTER)))  # a - k/4
    p = vlookup16(COEF[DEGREE], k)
    for n in range(DEGREE - 1, -1, -1):
        p = vmul(p, t)
        p = vadd(p, vlookup16(COEF[n], k))
    return vmul(a, p)


def intervals() -> list[tuple[float, float]]:
    """[lo, hi] of each interval k, as verf_lanes picks them."""
    return [(max(0.0, (k - 0.5) / 4), float(ERF_ONE_D) if k == LAST else (k + 0.5) / 4)
            for k in range(int(LAST) + 1)]


def fit() -> tuple[tuple[str, ...], ...]:
    """TABLE from scratch: per interval, the Chebyshev interpolant of erf(a)/a in t = a - k/4,
    solved at 256 bits and rounded to binary64 (mpmath, imported here only)."""
    import mpmath

    def ratio(a):
        return 2 / mpmath.sqrt(mpmath.pi) if a == 0 else mpmath.erf(a) / a

    with mpmath.workprec(256):
        rows = []
        for k, (lo, hi) in enumerate(intervals()):
            mid, h, c = mpmath.mpf(lo + hi) / 2, mpmath.mpf(hi - lo) / 2, mpmath.mpf(k) / 4
            nodes = [mid + h * mpmath.cos(mpmath.pi * (j + mpmath.mpf(1) / 2) / (DEGREE + 1)) - c
                     for j in range(DEGREE + 1)]
            vander = mpmath.matrix([[t ** j for j in range(DEGREE + 1)] for t in nodes])
            coef = mpmath.lu_solve(vander, mpmath.matrix([ratio(c + t) for t in nodes]))
            rows.append(tuple(float(coef[j]).hex() for j in range(DEGREE + 1)))
        return tuple(rows)


def horner(a: float) -> float:
    """verf_lanes at a, operation for operation (Python floats are binary64, each operation
    rounded once)."""
    q = min(a * 4.0, float(LAST))
    k = round(q)  # ties to even, as the shifter's addition
    t = a - k / 4
    p = float(COEF[DEGREE][k])
    for n in range(DEGREE - 1, -1, -1):
        p = p * t
        p = p + float(COEF[n][k])
    return a * p


def fit_error(samples: int = 600) -> float:
    """The largest |horner(a) / erf(a) - 1| over `samples` binary32 points per interval, its
    ends included, and a few tiny ones (mpmath's erf at 128 bits)."""
    import mpmath

    worst = 0.0
    with mpmath.workprec(128):
        for lo, hi in intervals():
            pts = np.float32(np.linspace(max(lo, 2.0 ** -20), hi, samples))
            pts = pts[pts < np.float32(ERF_ONE_D)]
            if lo == 0:
                pts = np.concatenate([pts, np.float32([2.0 ** -126, 1e-30, 2.0 ** -40])])
            for a in pts.astype(np.float64):
                y = horner(float(a))
                worst = max(worst, float(abs(mpmath.mpf(y) / mpmath.erf(mpmath.mpf(a)) - 1)))
    return worst
