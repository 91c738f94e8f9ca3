"""The loss suite: cross-entropy cases, invariance, refusals and negative controls (contracts/loss.md).

>>> [c.id for c in cases()][:2]
['basic-n8-v37', 'ignore-n8-v50']
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..ops.loss import cross_entropy
from ..oracles import f32
from ..oracles import loss as spec
from .casegen import SplitMix64
from .crmath import HARD_EXP
from .crmath import known_fallback as _crmath_known
from .harness import refusal_clause, with_1_and_2_threads

NAME = "loss"
FAMILY = "loss"
PROFILE = "mojolike.identical.loss.fp32.v1"
BIG_COUNT = (1 << 24) + 3  # a num_items whose float32 is not the integer: 16777220


@dataclass(frozen=True)
class Case:
    id: str
    logits: np.ndarray
    targets: np.ndarray
    options: dict = field(default_factory=dict)  # ignore_index, label_smoothing, num_items


def _normal(key: str, n: int, v: int, scale: float = 3.0) -> np.ndarray:
    """Logits from integer arithmetic alone (a sum of uniforms, roughly normal)."""
    r = SplitMix64(key)
    u = np.array(r.take(4 * n * v), np.uint64).reshape(4, n * v) >> np.uint64(40)
    x = (u.astype(np.float64) * 2.0 ** -24).sum(axis=0) - 2.0
    return (x * scale).astype(np.float32).reshape(n, v)


def _targets(key: str, n: int, v: int, ignore: tuple[int, ...] = (), ignore_index: int = -100):
    r = SplitMix64(key)
    t = np.array([r.below(v) for _ in range(n)], np.int64)
    t[list(ignore)] = ignore_index
    return t


def _extreme() -> np.ndarray:
    z = _normal("loss/extreme", 4, 40)
    z[0, :20] = -1e30  # d <= -104: e = +0
    z[0, 20] = 5.0
    z[1, :] = 7.0  # every logit the maximum
    z[2, ::2] = 0.0
    z[2, 1::2] = -0.0  # maxima of both signs
    z[3, 5] = 3e38  # d = z - 3e38: huge negative differences
    return z


def _hard() -> np.ndarray:
    """Rows whose d_j are inputs the expf fast path cannot decide (mx = 0): the exact fallback."""
    hard = np.array([u for u in HARD_EXP if u >> 31], np.uint32).view(np.float32)
    z = _normal("loss/hard", 3, 12, 1.0) - np.float32(10.0)
    z[:, 0] = 0.0
    z[:, 1:1 + hard.size] = hard
    return z


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    return (
        Case("basic-n8-v37", _normal("loss/basic", 8, 37), _targets("loss/basic/t", 8, 37)),
        Case("ignore-n8-v50", _normal("loss/ignore", 8, 50), _targets("loss/ignore/t", 8, 50, (1, 4, 5))),
        Case("ignore-class-n6-v20", _normal("loss/ignore3", 6, 20),
             np.array([3, 0, 3, 19, 7, 3], np.int64), {"ignore_index": 3}),
        Case("smooth-n8-v64", _normal("loss/smooth", 8, 64), _targets("loss/smooth/t", 8, 64),
             {"label_smoothing": 0.1}),
        Case("smooth-ignore-n6-v33", _normal("loss/smooth-ignore", 6, 33, 8.0),
             _targets("loss/smooth-ignore/t", 6, 33, (2,)), {"label_smoothing": 0.25}),
        Case("v1-n5", _normal("loss/v1", 5, 1), np.zeros(5, np.int64)),
        Case("wide-n2-v1500", _normal("loss/wide", 2, 1500), _targets("loss/wide/t", 2, 1500),
             {"label_smoothing": 0.05}),
        Case("extreme-n4-v40", _extreme(), np.array([3, 39, 1, 5], np.int64)),
        Case("all-ignored-n3-v10", _normal("loss/allign", 3, 10), np.full(3, -100, np.int64)),
        Case("num-items-n6-v30", _normal("loss/items", 6, 30), _targets("loss/items/t", 6, 30, (0,)),
             {"num_items": 50}),
        Case("num-items-huge-n4-v16", _normal("loss/huge", 4, 16), _targets("loss/huge/t", 4, 16),
             {"num_items": BIG_COUNT}),
        Case("undecided-exp-n3-v12", _hard(), np.array([0, 1, 11], np.int64),
             {"label_smoothing": 0.1}),
    )


def _calls(case: Case):
    """(output name, keyword arguments) of every output of a case, in card order."""
    opts = dict(case.options)
    out = []
    if "num_items" not in opts:
        out += [("none", dict(opts, reduction="none")), ("sum", dict(opts, reduction="sum"))]
    out.append(("mean", dict(opts, reduction="mean")))
    return out


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    ce = k.cross_entropy if isinstance(k, _Control) else \
        (lambda z, t, **kw: cross_entropy(z, t, backend=k.backend, **kw))
    res = []
    for name, kw in _calls(case):
        if name == "none":
            res.append(("none", np.asarray(ce(case.logits, case.targets, **kw), np.float32)))
            continue
        loss, grad = ce(case.logits, case.targets, return_grad=True, **kw)
        res.append((name, np.float32([loss])))
        res.append((f"grad-{name}", np.asarray(grad, np.float32)))
    return res


def known_fallback(r) -> bool:
    """Clause (a): a row redone on the host (a `fallbacks.Fallback`) is allowed only when its
    recomputation finished at least one expf/logf value, each on crmath's known list (the
    kernel flags a row exactly when one of its expf(d) or logf(S) is undecided)."""
    return (r.family == "loss" and bool(r.finished)
            and all(_crmath_known(f) for f in r.finished))


# -- clause (c): invariance ---------------------------------------------------------------------

def _bits(a) -> list[int]:
    return np.asarray(a, np.float32).view(np.uint32).ravel().tolist()


def clause_invariance(k) -> tuple[str, str]:
    notes, ok = [], True
    for case in cases():
        opts = dict(case.options, reduction="none")
        opts.pop("num_items", None)
        whole = cross_entropy(case.logits, case.targets, backend=k.backend, **opts)
        n = case.logits.shape[0]
        cut = (n + 1) // 2
        parts = [cross_entropy(case.logits[a:b], case.targets[a:b], backend=k.backend, **opts)
                 for a, b in ((0, cut), (cut, n)) if b > a]
        same = _bits(whole) == _bits(np.concatenate(parts))
        ok &= same
        if not same:
            notes.append(f"{case.id}: rows split at {cut} differ from the unsplit rows")
    notes.insert(0, f"{len(cases())} cases: reduction='none' over two row chunks "
                    f"{'equals' if ok else 'differs from'} the unsplit rows")
    if hasattr(k, "set_num_threads"):
        z = _normal("loss/threads", 64, 3000)
        t = _targets("loss/threads/t", 64, 3000, (7,))

        def run():
            loss, grad = cross_entropy(z, t, label_smoothing=0.1, return_grad=True, backend=k.backend)
            return _bits([loss]) + _bits(grad)

        seen, why = with_1_and_2_threads(k, run)
        if seen is None:
            return "fail", why
        same = seen[0] == seen[1]
        ok &= same
        notes.append(f"64x3000 with smoothing, loss and gradient: 1 and 2 threads "
                     f"{'give the same bits' if same else 'differ'}")
    else:
        notes.append(f"{k.backend} has no host thread count")
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (f): refusals -----------------------------------------------------------------------

def _refusal_table():
    z = _normal("loss/refuse", 3, 5)
    t = np.array([0, 1, 2], np.int64)
    bad = z.copy()
    bad[1, 2] = np.inf
    return [
        ("weight", lambda: cross_entropy(z, t, weight=np.ones(5, np.float32))),
        ("size_average", lambda: cross_entropy(z, t, size_average=True)),
        ("reduce", lambda: cross_entropy(z, t, reduce=False)),
        ("targets", lambda: cross_entropy(z, np.zeros((3, 5), np.float32))),
        ("targets", lambda: cross_entropy(z, np.float32([0, 1, 2]))),
        ("return_grad", lambda: cross_entropy(z, t, reduction="none", return_grad=True)),
        ("reduction", lambda: cross_entropy(z, t, reduction="batchmean")),
        ("label_smoothing", lambda: cross_entropy(z, t, label_smoothing=1.0)),
        ("label_smoothing", lambda: cross_entropy(z, t, label_smoothing=-0.1)),
        ("label_smoothing", lambda: cross_entropy(z, t, label_smoothing=float("nan"))),
        ("num_items", lambda: cross_entropy(z, t, num_items=0)),
        ("num_items", lambda: cross_entropy(z, t, reduction="sum", num_items=4)),
        ("logits", lambda: cross_entropy(bad, t)),
        ("targets[2]", lambda: cross_entropy(z, np.array([0, 1, 5], np.int64))),
        ("logits", lambda: cross_entropy(z.astype(np.float16), t)),
        ("logits", lambda: cross_entropy(z.astype(np.float64), t)),
        ("logits", lambda: cross_entropy(z[0], t[:1])),
        ("logits", lambda: cross_entropy(np.zeros((0, 5), np.float32), t[:0])),
        ("targets", lambda: cross_entropy(z, t[:2])),
        ("reductoin", lambda: cross_entropy(z, t, reductoin="sum")),
    ], [z, bad, t]


def clause_refusals(k) -> tuple[str, str]:
    return refusal_clause(*_refusal_table())


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "f": clause_refusals(k)}


# -- clause (e): negative controls --------------------------------------------------------------

def _rebound(fn, **env):
    return types.FunctionType(fn.__code__, dict(fn.__globals__, **env), fn.__name__, fn.__defaults__)


def _serial(values):
    acc = -0.0
    for v in values:
        acc = f32.add(acc, v)
    return acc


def _libm_expf(x: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.exp(np.float32(x)))


class _Control:
    """The oracle with one deliberate change; its card must differ from the true one."""

    backend = "oracle"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, ce):
        self.name, self.describe, self._ce = name, describe, ce

    def cross_entropy(self, z, t, *, reduction="mean", return_grad=False, **opts):
        out = self._ce(z.tolist(), t.tolist(), reduction=reduction, return_grad=return_grad, **opts)
        if return_grad:
            return out[0], np.array(out[1], np.float32).reshape(z.shape)
        return out


def _patched_rows(**row_env):
    row = _rebound(spec.row, **row_env)
    rows = _rebound(spec.rows, row=row)
    return _rebound(spec.cross_entropy, rows=rows)


def _smoothing_after_mean(logits_rows, targets, ignore_index=-100, reduction="mean",
                          label_smoothing=0.0, num_items=None, return_grad=False):
    """'mean' as c1 * mean(nll) + c2 * mean(A): the smoothing combined after the reduction."""
    out = spec.cross_entropy(logits_rows, targets, ignore_index, reduction, label_smoothing,
                             num_items, return_grad)
    if reduction != "mean" or label_smoothing == 0.0:
        return out
    targets = [int(t) for t in targets]
    count = spec.count_of(targets, ignore_index, num_items)
    s = spec.host_scalars(label_smoothing, len(logits_rows[0]), reduction, count)
    nll, _ = spec.rows(logits_rows, targets, ignore_index, spec.LossScalars(1.0, 0.0, 1.0, s.g, False))
    # c1 = 0, c2 = 1 turn each row's loss into A_i exactly (0*nll + 1*A)
    a_rows, _ = spec.rows(logits_rows, targets, ignore_index, spec.LossScalars(0.0, 1.0, 1.0, s.g, True))
    cnt = f32.round_fraction(Fraction(count))
    mean = f32.add(f32.mul(s.c1, f32.div(spec.fold(nll), cnt)),
                   f32.mul(s.c2, f32.div(spec.fold(a_rows), cnt)))
    return (mean, out[1]) if return_grad else mean


def _float_count(logits_rows, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                 num_items=None, return_grad=False):
    """The mean's divisor counted by adding 1.0 in float32, which stops at 2^24."""
    count_of = spec.count_of

    def float_count(ts, ii, ni):
        return min(count_of(ts, ii, ni), 1 << 24)
    ce = _rebound(spec.cross_entropy, count_of=float_count)
    return ce(logits_rows, targets, ignore_index, reduction, label_smoothing, num_items, return_grad)


def negative_controls() -> list[_Control]:
    return [
        _Control("libm-exp", "numpy's float32 exp instead of the correctly rounded expf",
                 _patched_rows(expf=_libm_expf)),
        _Control("serial-denominator", "S and A summed left to right instead of by fold",
                 _patched_rows(fold=_serial)),
        _Control("smoothing-after-mean", "(1-eps) mean(nll) + (eps/V) mean(A) for 'mean'",
                 _smoothing_after_mean),
        _Control("float-count", "the mean's count accumulated in float32 (stops at 2^24)",
                 _float_count),
    ]
