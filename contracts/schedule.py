"""The schedule suite: learning-rate cases, invariance, refusals and negative controls (contracts/schedule.md).

>>> [c.id for c in cases()][:2]
['constant-w0', 'constant-w5']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..ops.schedule import ConstantLR, WarmupCosineLR, WarmupLinearLR, finish
from ..oracles import schedule as spec
from ..oracles.f32 import bits_to_f32, f32_to_bits, round_float, round_fraction
from .harness import refusal_clause, with_1_and_2_threads

NAME = "schedule"
FAMILY = "schedule"
PROFILE = "mojolike.identical.schedule.fp32.v1"
CONSTANT, LINEAR, COSINE = 0, 1, 2
WINDOW = 2  # steps either side of each hard step


@dataclass(frozen=True)
class Case:
    id: str
    kind: int
    peak: float  # binary32 values as Python floats
    min_lr: float
    warmup: int
    total: int  # 0 for constant
    runs: tuple[tuple[int, int], ...]  # (first step, count) of each run of consecutive steps


def _f(x) -> float:
    return round_float(float(x)) + 0.0


def _b(u: int) -> float:
    return bits_to_f32(u)


def _whole(kind, peak, min_lr, warmup, total, extra=10):
    return ((1, (total if kind else warmup + 20) + extra),)


def _around(steps) -> tuple[tuple[int, int], ...]:
    return tuple((max(1, t - WINDOW), 2 * WINDOW + 1) for t in steps)


# Steps where the binary64 value rounded without the test is wrong, found by
# benchmarks/schedule_hard_search.py (P and M as binary32 patterns):
HARD = (
    ("linear", 0x37B9CABD, 0x2B95C82E, 380, 24058, (10176,)),
    ("linear", 0x3835BF89, 0x2B3DE2C2, 652, 100212, (95673,)),
    ("linear", 0x3AB22E91, 0x2FB9B18D, 745, 51742, (35205,)),
    ("cosine", 0x3E37529A, 0x3DB920F2, 822, 45687, (24479,)),  # the S(u) branch
    ("cosine", 0x3BD2CAB2, 0x00000000, 64, 21156, (5001,)),  # the C(w) branch
    ("cosine", 0x36AF667F, 0x2DBF4103, 427, 81326, (80030,)),
    ("cosine", 0x3DDEDEEF, 0x3DCFCF6B, 430, 60604, (12452,)),
)


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    out = []

    def add(cid, kind, peak, min_lr, warmup, total, runs=None):
        p, m = _f(peak), _f(min_lr)
        out.append(Case(cid, kind, p, m, warmup, total,
                        runs or _whole(kind, p, m, warmup, total)))

    add("constant-w0", CONSTANT, 1e-3, 0.0, 0, 0)
    add("constant-w5", CONSTANT, 3e-4, 0.0, 5, 0)
    add("linear-w0", LINEAR, 1e-3, 0.0, 0, 300)
    add("linear-w1-min", LINEAR, 0.1, 1e-4, 1, 257)
    add("linear-w7-total8", LINEAR, 6e-4, 6e-5, 7, 8)
    add("linear-w=t", LINEAR, 2e-3, 1e-5, 40, 40)
    add("linear-min-above-peak", LINEAR, 1e-4, 5e-4, 3, 120)
    add("cosine-w0", COSINE, 1e-3, 0.0, 0, 600)
    add("cosine-w1", COSINE, 1.0, 0.0, 1, 7)  # p = 1/3, 1/2, 2/3: rational cosines
    add("cosine-w13-min", COSINE, 6e-4, 6e-5, 13, 613)
    add("cosine-large-warmup", COSINE, 5e-3, 1e-6, 2000, 2301)
    add("cosine-total-w1", COSINE, 3e-4, 0.0, 50, 51)
    add("cosine-min-above-peak", COSINE, 1e-5, 2e-5, 0, 90)
    add("cosine-tiny-peak", COSINE, 1e-30, 0.0, 10, 200)
    add("cosine-huge-peak", COSINE, 1e10, 1e3, 10, 200)
    add("cosine-subnormal-min", COSINE, 1e-38, 1e-44, 3, 60)
    add("cosine-run-1e5", COSINE, 6e-4, 6e-5, 2000, 100_000)
    add("linear-run-1e5", LINEAR, 1e-3, 0.0, 1000, 100_000)
    for i, (kind, p, m, w, t, steps) in enumerate(HARD):
        add(f"hard-{kind}-{i}", LINEAR if kind == "linear" else COSINE, _b(p), _b(m), w, t,
            _around(steps))
    return tuple(out)


def _values(k, case: Case, t0: int, n: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    undecided = k.schedule_into(case.kind, np.float32(case.peak), np.float32(case.min_lr),
                                case.warmup, case.total, t0, out)
    finish(case.kind, case.peak, case.min_lr, case.warmup, case.total, t0, out, undecided)
    return out


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    if isinstance(k, _Control):
        return [(f"steps-{t0}", np.float32([k.value(case, t) for t in range(t0, t0 + n)]))
                for t0, n in case.runs]
    return [(f"steps-{t0}", _values(k, case, t0, n)) for t0, n in case.runs]


# -- clause (a): the steps a kernel may leave to the host ----------------------------------------

# Every step of the cases above that the fast route leaves undecided (clause 6). v and E are
# one binary64 computation, so the set is a property of the cases: benchmarks/schedule_undecided.py
# finds it with oracles/schedule.fast_value and checks that cpu-numba, cpu-cffi and cuda-sim
# mark the same steps. Besides the HARD steps, every one is a tie (a warmup, linear or rational
# cosine value exactly halfway between two binary32 values).
UNDECIDED_STEPS = (
    ("linear-w0", (15, 45, 75, 105, 135)),
    ("linear-w=t", (11, 13, 15, 17, 19, 22, 26, 30, 34, 38)),
    ("cosine-w0", (200,)),
    ("cosine-large-warmup", (625, 1250)),
    ("cosine-min-above-peak", (60,)),
    ("cosine-huge-peak", (9,)),
    ("cosine-run-1e5", (625, 1250)),
    ("linear-run-1e5", (275, 325, 375, 425, 475, 550, 650, 750, 850, 950, 5950, 15850, 25750,
                        35650, 45550, 52975, 57925, 62875, 67825, 72775)),
    ("hard-linear-0", (10176,)),
    ("hard-linear-1", (95673,)),
    ("hard-linear-2", (35205,)),
    ("hard-cosine-3", (24479,)),
    ("hard-cosine-4", (5001,)),
    ("hard-cosine-5", (80030,)),
    ("hard-cosine-6", (12452,)),
)


@lru_cache(maxsize=1)
def _known_steps() -> frozenset:
    by_id = {c.id: c for c in cases()}
    return frozenset((spec.KINDS[c.kind], f32_to_bits(c.peak), f32_to_bits(c.min_lr), c.warmup,
                      c.total, t) for cid, steps in UNDECIDED_STEPS for c in (by_id[cid],)
                     for t in steps)


def known_fallback(r) -> bool:
    """Clause (a): a step finished on the host (a `fallbacks.Fallback`) is allowed only when
    UNDECIDED_STEPS lists it for its schedule."""
    return r.family == "schedule" and (r.kind, *r.config, r.at) in _known_steps()


# -- clause (c): invariance ---------------------------------------------------------------------

def _schedule(case: Case, backend: str):
    if case.kind == CONSTANT:
        return ConstantLR(case.peak, case.warmup, backend=backend)
    cls = WarmupLinearLR if case.kind == LINEAR else WarmupCosineLR
    return cls(case.peak, case.warmup, case.total, case.min_lr, backend=backend)


def clause_invariance(k) -> tuple[str, str]:
    notes, ok = [], True
    picked = [c for c in cases() if c.id in ("cosine-w13-min", "linear-w1-min", "constant-w5",
                                             "cosine-run-1e5")]
    for case in picked:
        s = _schedule(case, k.backend)
        n = min(case.runs[0][1], 9000)
        table = s.lr_values(n)
        steps = list(range(1, n + 1))
        scattered = steps[::-7] + steps[::3]
        same = all(np.float32(s.lr_at(t)) == table[t - 1] and s.bits_at(t) ==
                   int(table[t - 1:t].view(np.uint32)[0]) for t in scattered)
        ok &= same
        notes.append(f"{case.id}: lr_at/bits_at at {len(scattered)} scattered steps "
                     f"{'equal' if same else 'differ from'} lr_values({n})")
    if hasattr(k, "set_num_threads"):
        case = next(c for c in cases() if c.id == "cosine-run-1e5")
        seen, why = with_1_and_2_threads(
            k, lambda: _values(k, case, 1, 100_010).view(np.uint32).tolist())
        if seen is None:
            return "fail", why
        same = seen[0] == seen[1]
        ok &= same
        notes.append(f"cosine-run-1e5: 1 and 2 threads {'give the same bits' if same else 'differ'}")
    else:
        notes.append(f"{k.backend} has no host thread count")
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (f): refusals -----------------------------------------------------------------------

def _refusal_table():
    s = WarmupCosineLR(1e-3, 10, 100)
    return [
        ("peak_lr", lambda: WarmupCosineLR(-1e-3, 10, 100)),
        ("peak_lr", lambda: WarmupCosineLR(float("nan"), 10, 100)),
        ("peak_lr", lambda: ConstantLR(float("inf"))),
        ("peak_lr", lambda: ConstantLR(1e39)),  # rounds to inf in binary32
        ("min_lr", lambda: WarmupLinearLR(1e-3, 0, 10, -1e-5)),
        ("warmup_steps", lambda: WarmupLinearLR(1e-3, -1, 10)),
        ("warmup_steps", lambda: WarmupLinearLR(1e-3, 2.5, 10)),
        ("total_steps", lambda: WarmupCosineLR(1e-3, 10)),
        ("total_steps", lambda: WarmupCosineLR(1e-3, 10, 9)),
        ("total_steps", lambda: WarmupCosineLR(1e-3, 0, 0)),
        ("total_steps", lambda: WarmupCosineLR(1e-3, 0, 2**41)),
        ("t", lambda: s.lr_at(0)),
        ("t", lambda: s.lr_at(3.0)),
        ("t", lambda: s.bits_at(True)),
        ("n", lambda: s.lr_values(0)),
        ("eta_min", lambda: WarmupCosineLR(1e-3, 10, 100, eta_min=0.0)),
        ("kind", lambda: WarmupCosineLR.from_config(dict(s.config(), kind="linear"))),
        ("last_epoch", lambda: WarmupCosineLR.from_config(dict(s.config(), last_epoch=3))),
    ]


def clause_refusals(k) -> tuple[str, str]:
    return refusal_clause(_refusal_table())


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "f": clause_refusals(k)}


# -- clause (e): negative controls --------------------------------------------------------------

class _Control:
    """A deliberately wrong schedule; its card must differ from the true one."""

    backend = "oracle"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, value):
        self.name, self.describe, self.value = name, describe, value


def _math_cos(case: Case, t: int) -> float:
    """The formula in binary64 with math.cos, rounded once."""
    P, M, W, T = case.peak, case.min_lr, case.warmup, case.total
    if case.kind != COSINE or t <= W or t >= T:
        return spec.value(case.kind, P, M, W, T, t)
    return round_float(M + (P - M) * (1 + math.cos(math.pi * (t - W) / (T - W))) / 2)


def _no_test(case: Case, t: int) -> float:
    """The fast route's binary64 value rounded once, without the rounding test."""
    v, e = spec.fast_value(case.kind, case.peak, case.min_lr, case.warmup, case.total, t)
    return round_float(v) + 0.0


def _zero_based_warmup(case: Case, t: int) -> float:
    """Warmup P (t - 1) / W: the first step's rate is 0."""
    if t <= case.warmup:
        return round_fraction(Fraction(case.peak) * (t - 1) / case.warmup) + 0.0
    return spec.value(case.kind, case.peak, case.min_lr, case.warmup, case.total, t)


def negative_controls() -> list[_Control]:
    return [
        _Control("math-cos", "binary64 formula with math.cos, rounded once", _math_cos),
        _Control("no-rounding-test", "the fast route's binary64 value rounded without the test",
                 _no_test),
        _Control("zero-based-warmup", "warmup P (t - 1) / W", _zero_based_warmup),
    ]
