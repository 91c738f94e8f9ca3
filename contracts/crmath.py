"""The crmath suite: expf/logf/sinpif/cospif cases, the thread clause and the negative controls (contracts/crmath.md).

>>> [c.id for c in cases()][:2]
['specials', 'edges']
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..native import crmath as fast
from ..ops.crmath import finish
from ..oracles import crmath as spec
from .casegen import SplitMix64
from .harness import with_1_and_2_threads

NAME = "crmath"
FAMILY = "crmath"
PROFILE = "mojolike.identical.crmath.fp32.v1"
FUNCTIONS = ("expf", "logf", "sinpif", "cospif")
THREAD_N = 1 << 22

SPECIALS = (0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x40000000, 0x7F800000, 0xFF800000,
            0x7FC00000, 0x7F800001, 0xFFC01234, 0x7FFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF,
            0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F000000, 0x41200000, 0xC1200000, 0x33800000,
            0xB3800000, 0x33000000, 0xB3000000, 0x42B17217, 0x42B17218, 0xC2CFF1B4, 0xC2CFF1B5)
# e^x overflows past 0x42B17217, is the least subnormal at 0xC2CFF1B4 and +0 after it,
# turns subnormal near 0xC2AEAC50; ln x is smallest next to 1; 0x3FB504F3 is the sqrt 2 cut
EDGE_CENTERS = (0x42B17217, 0xC2CFF1B4, 0xC2AEAC50, 0x3F800000, 0x3FB504F3, 0x3F3504F3,
                0x3C317218, 0xBC317218, 0x00000008, 0x7F7FFFF8)
# Every input the binary64 fast path leaves undecided, found by scanning all 2^32 patterns
# (benchmarks/crmath_exhaustive.py reports them), so the exact fallback runs on every backend.
# expf (8; its rounded guess is right for all of them):
HARD_EXP = (
    0x377EFF81, 0x39C6BE5B, 0x4001B249, 0x40315B33, 0xB3000000, 0xBAE0E25C, 0xBBF0EDF1,
    0xC16912CD,
)
# logf (46; the guess is wrong for 0x3C413D3A, 0x41178FEB, 0x4C5D65A5, 0x65D890D3, 0x6F31A8EC):
HARD_LOG = (
    0x064CB44B, 0x07C060FA, 0x0DC8BBA4, 0x0F61FF63, 0x111C87F8, 0x145CB6D4, 0x14907055,
    0x16C5EE7A, 0x18B06F2A, 0x1A8446CB, 0x1B81AB52, 0x1F116AB8, 0x22925AD4, 0x2423C085,
    0x28E3FA26, 0x29E6126B, 0x29FD22F8, 0x2C4C24B7, 0x2E492984, 0x3418949B, 0x38DCBE38,
    0x39C31348, 0x39C7B1F9, 0x3BF86EF0, 0x3C413D3A, 0x41178FEB, 0x464D5B2B, 0x4665A9A6,
    0x4C5D65A5, 0x4D604EBE, 0x4E85F412, 0x54AF989D, 0x5D800341, 0x5EE8984E, 0x5F64C24A,
    0x62B467BA, 0x64E27FA3, 0x65D890D3, 0x66A8C860, 0x66ABBD63, 0x6914CB96, 0x6D1F23EB,
    0x6F31A8EC, 0x7405DEE8, 0x79E7EC37, 0x7D98B8F4,
)
# sinpif (16; the guess is right for all of them):
HARD_SINPI = (
    0x34E54DB5, 0x361652F2, 0x385A58FC, 0x386ACAF6, 0x3CEEB990, 0x3D80C8A4, 0x3DFD7F58,
    0x3F605015, 0xB4E54DB5, 0xB61652F2, 0xB85A58FC, 0xB86ACAF6, 0xBCEEB990, 0xBD80C8A4,
    0xBDFD7F58, 0xBF605015,
)
# cospif (14; the guess is right for all of them):
HARD_COSPI = (
    0x390D23E4, 0x398721A7, 0x3B25BCA6, 0x3EC0A02A, 0x3EDFCDD7, 0x3EF11467, 0x3F1FAFEB,
    0xB90D23E4, 0xB98721A7, 0xBB25BCA6, 0xBEC0A02A, 0xBEDFCDD7, 0xBEF11467, 0xBF1FAFEB,
)
HARD = HARD_EXP + HARD_LOG + HARD_SINPI + HARD_COSPI
# sin(pi x), cos(pi x): multiples of 1/2 are exact (zeros signed as C23 says) and multiples
# of 1/4 the largest reductions; next to them the values are smallest or the reduction
# changes quadrant; from 2^22 up every input is a multiple of 1/2, from 2^23 an integer,
# from 2^24 an even integer
PI_CENTERS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 0.25, 0.75, 1.25, 1.75, 10.5, 99.0,
              1000.5, 2.0 ** 20 + 0.5, 2.0 ** 21 + 0.25, 2.0 ** 22 - 0.25, 2.0 ** 22 + 0.5,
              2.0 ** 23 - 0.5, 2.0 ** 23 + 1.0, 2.0 ** 24 - 1.0, 2.0 ** 24, 2.0 ** 24 + 2.0)


@dataclass(frozen=True)
class Case:
    id: str
    x: np.ndarray


def _f32(patterns) -> np.ndarray:
    return np.array([u & 0xFFFFFFFF for u in patterns], np.uint32).view(np.float32)


def _uniform(key: str, n: int, lo: float, hi: float) -> np.ndarray:
    u = np.array(SplitMix64(key).take(n), np.uint64) >> np.uint64(11)  # 53 random bits
    return (lo + (hi - lo) * (u.astype(np.float64) * 2.0 ** -53)).astype(np.float32)


def _finite_positive(key: str, n: int) -> list[int]:
    r = SplitMix64(key)
    return [1 + r.below(0x7F7FFFFF) for _ in range(n)]


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    edges = [c + d for c in EDGE_CENTERS for d in range(-4, 5)]
    near_one = [0x3F800000 + d for d in range(-300, 301, 3)]
    tiny = [s | (e << 23) | m for s in (0, 1 << 31) for e in range(90, 127, 3)
            for m in (0, 0x2AAAAA, 0x7FFFFF)]
    quarters = [_bits32(s * j / 4) for s in (1, -1) for j in range(0, 41)]
    near_pi = [c + d for s in (1, -1) for c in (_bits32(s * v) for v in PI_CENTERS)
               for d in range(-3, 4)]
    pi_tiny = [s | (e << 23) | m for s in (0, 1 << 31) for e in range(0, 127, 6)
               for m in (0, 1, 0x2AAAAA, 0x7FFFFF)]
    r = SplitMix64("crmath/pi-large")
    pi_large = [s | (e << 23) | r.below(1 << 23) for s in (0, 1 << 31) for e in range(148, 153)
                for _ in range(24)]  # |x| in [2^21, 2^26)
    out = [
        Case("specials", _f32(SPECIALS)),
        Case("edges", _f32(edges)),
        Case("bits-n1024", _f32(SplitMix64("crmath/bits").take(1024))),
        Case("exp-range-n1024", _uniform("crmath/exp-range", 1024, -104.0, 89.0)),
        Case("exp-small", _f32(tiny)),
        Case("log-binades-n1024", _f32(_finite_positive("crmath/log-binades", 1024))),
        Case("log-near-one", _f32(near_one)),
        Case("pi-quarters", _f32(quarters)),
        Case("pi-near-half-integers", _f32(near_pi)),
        Case("pi-tiny", _f32(pi_tiny)),
        Case("pi-large", _f32(pi_large)),
        Case("pi-range-n1024", _uniform("crmath/pi-range", 1024, -4.0, 4.0)),
    ]
    if HARD:
        out.append(Case("undecided", _f32(HARD)))
    return tuple(out)


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    res = []
    for name in FUNCTIONS:
        out = np.empty_like(case.x)
        finish(name, case.x, out, getattr(k, f"{name}_into")(case.x, out))
        res.append((name, out))
    return res


# clause (a): the only inputs a kernel may leave to the host, per function
KNOWN_UNDECIDED = {"expf": frozenset(HARD_EXP), "logf": frozenset(HARD_LOG),
                   "sinpif": frozenset(HARD_SINPI), "cospif": frozenset(HARD_COSPI)}


def known_fallback(r) -> bool:
    """Clause (a): a value finished on the host (a `fallbacks.Fallback`) is allowed only when its
    input is one of its function's HARD inputs."""
    return r.family == "crmath" and r.at in KNOWN_UNDECIDED.get(r.kind, ())


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_threads(k)}


def clause_threads(k) -> tuple[str, str]:
    """Clause (c): the same bits with 1 and 2 threads on 2^22 inputs spread over every pattern."""
    if not hasattr(k, "set_num_threads"):
        return "n/a", f"{k.backend} has no host thread count; its kernels are elementwise"
    x = (np.arange(THREAD_N, dtype=np.uint64) * np.uint64(1021) % np.uint64(1 << 32)).astype(
        np.uint32).view(np.float32)

    def run():
        res = []
        for name in FUNCTIONS:
            out = np.empty_like(x)
            finish(name, x, out, getattr(k, f"{name}_into")(x, out))
            res.append(out.view(np.uint32).copy())
        return res

    seen, why = with_1_and_2_threads(k, run)
    if seen is None:
        return "fail", why
    same = all((a == b).all() for a, b in zip(*seen))
    detail = f"{', '.join(FUNCTIONS)} of {THREAD_N} patterns (every 1021st)"
    return ("pass", detail + ": same bits with 1 and 2 threads") if same else \
        ("fail", detail + ": 1 and 2 threads differ")


# -- clause (e): negative controls -----------------------------------------------------------

def _rebound(fn, **env):
    return types.FunctionType(fn.__code__, dict(fn.__globals__, **env), fn.__name__)


_EXACT = {"expf": spec.expf_bits, "logf": spec.logf_bits, "sinpif": spec.sinpif_bits,
          "cospif": spec.cospif_bits}


class _Control:
    """Deliberately wrong expf/logf/sinpif/cospif with the kernels' interface; its card must differ."""

    backend = "negative-control"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, exp_one, log_one, sin_one, cos_one):
        self.name, self.describe = name, describe
        self._one = {"expf": exp_one, "logf": log_one, "sinpif": sin_one, "cospif": cos_one}

    def _into(self, name, x, out) -> int:
        exact = _EXACT[name]
        ob = out.view(np.uint32)
        with np.errstate(all="ignore"):  # overflow to inf is a result here
            for i, u in enumerate(x.view(np.uint32).tolist()):
                v = self._one[name](u)
                ob[i] = exact(u) if v is None else v  # None: the control keeps the contract here
        return 0

    def expf_into(self, x, out) -> int:
        return self._into("expf", x, out)

    def logf_into(self, x, out) -> int:
        return self._into("logf", x, out)

    def sinpif_into(self, x, out) -> int:
        return self._into("sinpif", x, out)

    def cospif_into(self, x, out) -> int:
        return self._into("cospif", x, out)


def _bits32(v) -> int:
    return int(np.float32(v).view(np.uint32))


def _finite_exp(u: int) -> bool:
    x = float(np.uint32(u).view(np.float32))
    return fast.EXP_TINY < x < fast.EXP_HUGE


def _finite_log(u: int) -> bool:
    return 0 < u < 0x7F800000


def _pi_arg(u: int):
    """The input as the kernels' element functions take it (clamped to +-2^24), None for NaN, inf."""
    if (u & 0x7F800000) == 0x7F800000:
        return None
    return np.clip(np.uint32(u).view(np.float32), -fast.TRIG_BIG, fast.TRIG_BIG)


def _pi_one(elem):
    """u -> the pattern elem(x)[0] gives (None for NaN and inf: the control keeps the contract)."""
    def one(u):
        w = _pi_arg(u)
        return None if w is None else _bits32(elem(w)[0])
    return one


def _no_test():
    """The fast path's binary64 value rounded once, without the rounding test."""
    exp_y = _rebound(fast.exp_elem, ERR=0.0)
    log_y = _rebound(fast.log_elem, ERR=0.0)
    return _Control(
        "no-rounding-test", "binary64 value rounded without the test (undecided slots guessed)",
        lambda u: _bits32(exp_y(np.uint32(u).view(np.float32))[0]) if _finite_exp(u) else None,
        lambda u: _bits32(log_y(u)[0]) if _finite_log(u) else None,
        _pi_one(_rebound(fast.sinpi_elem, ERR=0.0)), _pi_one(_rebound(fast.cospi_elem, ERR=0.0)))


def _libm():
    def exp(u):
        with np.errstate(all="ignore"):
            return _bits32(np.exp(np.uint32(u).view(np.float32))) if _finite_exp(u) else None

    def log(u):
        return _bits32(np.log(np.uint32(u).view(np.float32))) if _finite_log(u) else None

    def pi_times(u):  # pi x in binary32, the way a float32 program writes sin(pi x)
        x = _pi_arg(u)
        return None if x is None else np.float32(np.pi) * x

    def sin(u):
        t = pi_times(u)
        return None if t is None else _bits32(np.sin(t))

    def cos(u):
        t = pi_times(u)
        return None if t is None else _bits32(np.cos(t))
    return _Control("libm-float32", "numpy's float32 exp/log and sin(pi x)/cos(pi x) (a vendor function)",
                    exp, log, sin, cos)


def _float32_tables():
    """The fast path with its tables rounded to binary32: a precision bug the test cannot see."""
    t32 = fast.EXP2_32.astype(np.float32).astype(np.float64)
    h32 = (fast.LOG_HI + fast.LOG_LO).astype(np.float32).astype(np.float64)
    exp_e = _rebound(fast.exp_elem, EXP2_32=t32)
    log_e = _rebound(fast.log_elem, LOG_HI=h32, LOG_LO=np.zeros_like(h32))
    names = [f"S{k}" for k in range(9)] + [f"C{k}" for k in range(1, 9)]
    c32 = {n: np.float64(np.float32(getattr(fast, n))) for n in names}
    return _Control(
        "float32-tables", "2^(j/32), the log table and the sin/cos coefficients rounded to binary32",
        lambda u: _bits32(exp_e(np.uint32(u).view(np.float32))[0]) if _finite_exp(u) else None,
        lambda u: _bits32(log_e(u)[0]) if _finite_log(u) else None,
        _pi_one(_rebound(fast.sinpi_elem, **c32)), _pi_one(_rebound(fast.cospi_elem, **c32)))


def negative_controls() -> list[_Control]:
    return [_no_test(), _libm(), _float32_tables()]
