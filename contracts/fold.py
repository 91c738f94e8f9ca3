"""The fold suite: cases, outputs, the thread clause and the negative controls (contracts/fold.md).

>>> len(cases()) == len(SIZES) * len(VALUE_FAMILIES)
True
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..oracles import f32
from ..oracles.fold import fold_tree
from .casegen import bulk_normal, draw
from .harness import with_1_and_2_threads

NAME = "fold"
FAMILY = "fold"  # the kernel family the suite exercises
PROFILE = "mojolike.identical.fold.fp32.v1"
SIZES = (1, 2, 31, 32, 33, 1023, 1024, 1025, 2049, 3001, 4097, 4999)
VALUE_FAMILIES = ("normal", "bits", "subnormal", "zeros", "negzero", "huge-tiny",
                  "inf", "inf-mixed", "nan", "cancel")
OUTPUTS = ("fold", "sumsq", "dot")
THREAD_N = 2**24 + 3


@dataclass(frozen=True)
class Case:
    id: str
    x: np.ndarray
    b: np.ndarray  # the second operand of dot


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    out = []
    for family in VALUE_FAMILIES:
        for n in SIZES:
            cid = f"{family}-n{n}"
            out.append(Case(cid, draw(family, f"fold/{cid}/x", n), draw(family, f"fold/{cid}/b", n)))
    return tuple(out)


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    """The suite's outputs of one case on kernels `k`, in card order."""
    return [("fold", np.float32([k.fold(case.x)])),
            ("sumsq", np.float32([k.sumsq(case.x)])),
            ("dot", np.float32([k.dot(case.x, case.b)]))]


def _bits(values) -> list[int]:
    return [int(v) for v in np.float32(values).view(np.uint32)]


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_threads(k)}


def clause_threads(k) -> tuple[str, str]:
    """Clause (c): the same bits with 1 and with 2 threads on n = 2**24 + 3."""
    if not hasattr(k, "set_num_threads"):
        return "n/a", f"{k.backend} has no host thread count; its tree never sees launch geometry"
    x, b = bulk_normal(THREAD_N, "fold/threads/x"), bulk_normal(THREAD_N, "fold/threads/b")
    seen, why = with_1_and_2_threads(k, lambda: _bits([k.fold(x), k.sumsq(x), k.dot(x, b)]))
    if seen is None:
        return "fail", why
    seen = dict(zip((1, 2), seen))
    hexes = " ".join(f"{u:08x}" for u in seen[1])
    if seen[1] == seen[2]:
        return "pass", f"n={THREAD_N}: fold/sumsq/dot = {hexes} with 1 and 2 threads"
    return "fail", f"n={THREAD_N}: 1 thread gives {hexes}, 2 threads give " + \
        " ".join(f"{u:08x}" for u in seen[2])


class _Control:
    """A deliberately wrong tree with the kernels' interface; the harness must reject its card."""

    backend = "negative-control"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, tree):
        self.name, self.describe, self._tree = name, describe, tree

    def fold(self, x):
        return np.float32(self._tree(x.tolist()))

    def sumsq(self, x):
        return self.dot(x, x)

    def dot(self, a, b):
        return np.float32(self._tree([f32.mul(u, v) for u, v in zip(a.tolist(), b.tolist())]))


class _Contracted(_Control):
    """The canonical tree, but each lane step is fma(a, b, acc): `acc + a*b` contracted."""

    def __init__(self):
        super().__init__("contracted", "lane step acc + x*x fused into one rounding", fold_tree)

    def dot(self, a, b):
        pairs = list(zip(a.tolist(), b.tolist()))
        return np.float32(fold_tree(pairs, accumulate=lambda acc, p: f32.fma(p[0], p[1], acc)))


def _serial(ys):
    acc = -0.0
    for y in ys:
        acc = f32.add(acc, y)
    return acc


def negative_controls() -> list[_Control]:
    return [
        _Control("serial", "one left-to-right sum from -0.0", _serial),
        _Control("16-lanes", "16 lanes per chunk instead of 32", lambda ys: fold_tree(ys, lanes=16)),
        _Control("plus-zero-start", "lanes start from +0.0 instead of -0.0",
                 lambda ys: fold_tree(ys, start=0.0)),
        _Contracted(),
    ]
