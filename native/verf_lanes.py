"""erf on [0, ERF_ONE) from one polynomial per lane, for the vector GELU kernels: a first try
that runs one evaluation on every lane, where native/verf_tanh.py's path runs the series'
polynomial below 1/2 and native/verf_table.py's pieces above it, each on every lane that
some lane of the vector needs.

Lane a lies on interval k = round(min(4a, 15)) (ties to even): [k/4 - 1/8, k/4 + 1/8], the
last one [3.625, ERF_ONE]. There erf(a) ~ a Q_k(t), t = a - k/4, Q_k the degree-9
polynomial interpolating erf(a)/a (2/sqrt(pi) at 0) at the interval's 10 Chebyshev
nodes, its monomial coefficients rounded to binary64 (`fit`, mpmath at 256 bits; TABLE
holds them, tests/test_verf_lanes.py checks them against `fit`). Q_k's coefficients are
picked per lane (`vlookup16`: two permutes on AVX-512, a gather elsewhere), so every lane
runs the same operations: 4a and k/4 exact, t exact but below about 2^-27 (where the
rounding of t moves Q by under 2^-56, erf(a)/a being flat there), Horner in binary64 with
one rounding per operation, then the product by a. Sampled against mpmath (`fit_error`),
the result is within about 2^-49.3 of erf relative.

The budget ERF_TRY_ERR = 1024u (u = 2^-53) holds that error and twice the widest budget of
the path it tries ahead of (erf_tanh.erf_elem: 4u on the polynomial below 1/2, at most
(8 + 3 x 60)u = 188u on the series): if the scalar leaves an input undecided, a rounding
boundary lies within 2 x 188u of erf, so inside this try's interval, and the try leaves it
undecided too. A lane this try decides is therefore one the scalar decides, to the same
correctly rounded value; the others (about one lane in 2^18) take the scalar's path
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

from .erf_tanh import ERF_ONE_D, U
from .simd import vadd, vbits, vmul, vsplat, vsub
from .simd64 import dge, dselect, vlookup16

DEGREE = 9
ERF_TRY_ERR = np.float64(1024 * U)
LAST = np.float64(15.0)  # the last interval's k
FOUR = np.float64(4.0)
QUARTER = np.float64(0.25)
SHIFTER = np.float64(1.5 * 2.0 ** 52)  # s + SHIFTER rounds s to an integer, read from the bits
SHIFTER_BITS = np.int64(SHIFTER.view(np.int64))

# TABLE[k][n]: the coefficient of t^n on interval k, nearest binary64 (`fit`)
TABLE = (
    ("0x1.20dd750429b6dp+0", "-0x1.53270ccbe2373p-49", "-0x1.812746b034e2cp-2",
     "-0x1.180780baadbd1p-34", "0x1.ce2f2283f91e6p-4", "-0x1.a994560f85ad5p-24",
     "-0x1.b8255137715f1p-6", "-0x1.559b98a7487e7p-16", "0x1.5f781d59e6af0p-8", "-0x1.1446a4ad33651p-11"),
    ("0x1.1af54e232d605p+0", "-0x1.73070406af8e5p-3", "-0x1.57664ffe75ebdp-2",
     "0x1.acf0ba5b2c3f5p-4", "0x1.6cb169aac29f6p-4", "-0x1.265cd01208e10p-5",
     "-0x1.2d71b9f644f7ep-6", "0x1.24c9b4388ad8ap-7", "0x1.8ca4f88f47fbap-9", "-0x1.c80db08483797p-10"),
    ("0x1.0a7ef5c18edd5p+0", "-0x1.4c3884e5e2e44p-2", "-0x1.d6dd158f1bce8p-3",
     "0x1.55cfc81129042p-3", "0x1.0915af519adf4p-5", "-0x1.9a2fafa564700p-5",
     "0x1.f1f4bcae950fcp-15", "0x1.5e5409bfa1c51p-7", "-0x1.4d9ac1dcf1078p-10", "-0x1.caff5a12b946ep-10"),
    ("0x1.e57b7477c1335p-1", "-0x1.a0cdd9ab35665p-2", "-0x1.9a7d8dd639f08p-4",
     "0x1.5acfc2be8d60ep-3", "-0x1.9784296f5cb16p-6", "-0x1.35e003ce40b55p-5",
     "0x1.de93e4d2a5703p-7", "0x1.4ea8c16e496cep-8", "-0x1.e6d05deba07dap-9", "-0x1.41601158bd43ap-12"),
    ("0x1.af767a741088fp-1", "-0x1.b5db0451254f6p-2", "0x1.992277444e3a6p-7",
     "0x1.01cf239b09338p-3", "-0x1.d079f7dbaa5f1p-5", "-0x1.9922787ea9fabp-7",
     "0x1.182205d0b14e7p-6", "-0x1.fd6b87ef1ba6ep-10", "-0x1.71fd7555d152fp-9", "0x1.ed5700737cc02p-11"),
    ("0x1.7a0517ad564cap-1", "-0x1.9b12df9c9f1d2p-2", "0x1.5aa53900125f3p-4",
     "0x1.0faa3ba2e1238p-4", "-0x1.db07bd4781fe7p-5", "0x1.1b462f1b0dcfdp-7",
     "0x1.4bc8ae8a0a226p-7", "-0x1.54bd4471140a3p-8", "-0x1.a973423c1570ep-12", "0x1.0a805d3dcdaf8p-10"),
    ("0x1.49c38e4b7a73bp-1", "-0x1.667ed552b838dp-2", "0x1.d4d9711bdc24cp-4",
     "0x1.0946e1047325dp-6", "-0x1.4bfeaf594f5dbp-5", "0x1.1847c31dfa7e1p-6",
     "0x1.83e09fa9291a6p-10", "-0x1.0fde12b07532fp-8", "0x1.3514ad20c5952p-10", "0x1.6c1974dfcd522p-12"),
    ("0x1.20ac0448e30cfp-1", "-0x1.2b07a606936a1p-2", "0x1.d3549a3f296a2p-4",
     "-0x1.c0361d50cbdcdp-7", "-0x1.424947342ec9fp-6", "0x1.ec5d8f075b30bp-7",
     "-0x1.c614aeac302f4p-9", "-0x1.84a15766a3b03p-10", "0x1.4a12f8cb26feep-10", "-0x1.b59f8bb970ebcp-13"),
    ("0x1.fd9ae142795e4p-2", "-0x1.e8712759a9c3fp-3", "0x1.93ca3fb6687d6p-4",
     "-0x1.9c899bc86d87ep-6", "-0x1.2f9e2de94fe40p-8", "0x1.225b2bf4ec8f3p-7",
     "-0x1.134ed1337abe8p-8", "0x1.aeec7500f3d63p-12", "0x1.35ebb9629d9fbp-11", "-0x1.4e149fb13e13cp-12"),
    ("0x1.c672068e64fbfp-2", "-0x1.8d734c1fef1dcp-3", "0x1.4408c71d26434p-4",
     "-0x1.a1de1a059516cp-6", "0x1.7610531f45806p-9", "0x1.c69ab0a859092p-9",
     "-0x1.733e0bc68242bp-9", "0x1.f7c0323753404p-11", "0x1.4ee00ee29c198p-16", "-0x1.68857d0f04360p-13"),
    ("0x1.996eed90a1656p-2", "-0x1.45c31f8201853p-3", "0x1.f76000f8979a9p-5",
     "-0x1.5bfa13d2cacbbp-6", "0x1.4abb8bdb303d6p-8", "0x1.c11cf7dad47e2p-12",
     "-0x1.525c2d5ec1991p-10", "0x1.8070688f30e6fp-11", "-0x1.890b77797ed4ap-13", "-0x1.a484047988902p-16"),
    ("0x1.74537fc603cfbp-2", "-0x1.0e5896d12aaf3p-3", "0x1.846d86b7220a1p-5",
     "-0x1.0a0c0d51aff57p-6", "0x1.3555239d76eaap-8", "-0x1.767b30e27ec65p-11",
     "-0x1.679811c88bcedp-12", "0x1.7919aeb4ee178p-12", "-0x1.557bb64b923d1p-13", "0x1.15905f4f263edp-15"),
    ("0x1.5553672d623fbp-2", "-0x1.c6e932c0394c7p-4", "0x1.2e2218ebc2758p-5",
     "-0x1.8a39a4ff0fb63p-7", "0x1.e000ccaaef3e8p-9", "-0x1.ce5983130c9b5p-11",
     "0x1.922d4253989f1p-15", "0x1.df098f460230dp-14", "-0x1.5d03ade31408cp-14", "0x1.0e6255a21fdcfp-15"),
    ("0x1.3b135862188d2p-2", "-0x1.83bf9f6f554b0p-4", "0x1.dcc02f5d99cd9p-6",
     "-0x1.23692b411e2d2p-7", "0x1.5b1a2796ffa37p-9", "-0x1.7894c27cf2defp-11",
     "0x1.25712095eca78p-13", "0x1.3671f1c33f4c1p-17", "-0x1.d90dd557aee63p-16", "0x1.16bf68bb990bfp-16"),
    ("0x1.24923ae50c3a4p-2", "-0x1.4e5c5c0d426e6p-4", "0x1.7e09c39c993c6p-6",
     "-0x1.b3d2b39abf729p-8", "0x1.ed02f4378e496p-10", "-0x1.0d6b8e67949ffp-11",
     "0x1.05542854cfb75p-13", "-0x1.3e60a7f7f016cp-16", "-0x1.2cbc247b85720p-18", "0x1.7c34022107646p-18"),
    ("0x1.11110f080c546p-2", "-0x1.23452645809aep-4", "0x1.36ac76646ec65p-6",
     "-0x1.4b3ef89e6e186p-8", "0x1.605c898b25ddfp-10", "-0x1.72b727db59723p-12",
     "0x1.75dfd9cc8cfd3p-14", "-0x1.45d8e4cdb17acp-16", "0x1.2564255fc3df8p-19", "0x1.bea9bbc93b3c7p-21"),
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
