"""Cross-entropy over class indices, exactly: the definition (contracts/loss.md).

Per row i of binary32 logits z (V classes) with target t, every operation one
binary32 rounding, no fused multiply-add:

    mx = max_j z_j                      exact
    d_j = z_j - mx;  e_j = expf(d_j)    expf, logf correctly rounded (oracles/crmath)
    S = fold(e);  L = logf(S)           fold: the canonical tree (oracles/fold)
    nll = L - d_t
    loss = nll                          eps = 0
    loss = c1*nll + c2*fold(L - d_j)    eps > 0 (two products, then the sum)
    dlogits_j = (e_j / S - q_j) * g     q_t = qt, q_j = c2 elsewhere

A row whose target is `ignore_index` has loss +0.0 and gradient +0.0. Host
scalars are the binary32 nearest their exact rational values in eps =
binary32(label_smoothing): c1 = 1 - eps, c2 = eps/V, qt = 1 - eps + eps/V, and
g = 1 ('sum') or 1/count ('mean'). 'sum' is fold(loss_0..loss_N-1) over all rows
(ignored rows are +0.0); 'mean' divides it by binary32(count), count being
`num_items` or the number of rows not ignored, so a mean over no rows is NaN.

Reproducibility: pure Python on exact binary32 emulation (oracles/f32), exact
expf/logf and the fold tree; the same bits on every machine. Validation is the
public function's job (mojolike.cross_entropy); this module assumes valid input.

>>> loss, grad = cross_entropy([[0.0, 0.0, 0.0, 0.0]], [2], reduction="sum", return_grad=True)
>>> loss == logf(4.0), grad
(True, [[0.25, 0.25, -0.75, 0.25]])
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from . import f32
from .crmath import expf, logf
from .fold import fold

REDUCTIONS = ("mean", "sum", "none")


@dataclass(frozen=True)
class LossScalars:
    """The host scalars one call hands to every row (binary32 values as Python floats)."""

    c1: float
    c2: float
    qt: float
    g: float
    smoothing: bool  # eps > 0


def host_scalars(label_smoothing: float, num_classes: int, reduction: str = "mean",
                 count: int | None = None) -> LossScalars:
    """eps = binary32(label_smoothing); c1, c2, qt, g each the binary32 nearest its exact value.

    `count` is the mean's divisor ('mean' only). g is 1 for 'sum' and 'none'; for
    'mean' over no rows it is NaN, which never reaches an output: every row is
    then ignored and its gradient is +0.0.
    """
    eps = f32.round_float(float(label_smoothing))
    e, v = Fraction(eps), Fraction(int(num_classes))
    c1 = f32.round_fraction(1 - e)
    c2 = f32.round_fraction(e / v)
    qt = f32.round_fraction(1 - e + e / v)
    if reduction != "mean":
        g = 1.0
    elif count:
        g = f32.round_fraction(Fraction(1, int(count)))
    else:
        g = math.nan
    return LossScalars(c1, c2, qt, g, eps > 0.0)


def row(z: Sequence[float], t: int, s: LossScalars, want_grad: bool = False
        ) -> tuple[float, list[float] | None]:
    """(loss_i, gradient row or None) of one row that is not ignored; t in [0, len(z))."""
    mx = max(z)
    d = [f32.sub(x, mx) for x in z]
    e = [expf(x) for x in d]
    big_s = fold(e)
    big_l = logf(big_s)
    nll = f32.sub(big_l, d[t])
    if s.smoothing:
        a = fold([f32.sub(big_l, x) for x in d])
        loss = f32.add(f32.mul(s.c1, nll), f32.mul(s.c2, a))
    else:
        loss = nll
    grad = None
    if want_grad:
        grad = [f32.mul(f32.sub(f32.div(ej, big_s), s.qt if j == t else s.c2), s.g)
                for j, ej in enumerate(e)]
    return loss, grad


def rows(logits_rows: Sequence[Sequence[float]], targets: Sequence[int], ignore_index: int,
         s: LossScalars, want_grad: bool = False) -> tuple[list[float], list[list[float]] | None]:
    """loss_i for every row (+0.0 when ignored) and, with want_grad, every gradient row."""
    losses, grads = [], []
    for z, t in zip(logits_rows, targets):
        if t == ignore_index:
            loss, grad = 0.0, [0.0] * len(z)
        else:
            loss, grad = row(z, t, s, want_grad)
        losses.append(loss)
        grads.append(grad)
    return losses, (grads if want_grad else None)


def count_of(targets: Sequence[int], ignore_index: int, num_items: int | None) -> int:
    """The mean's divisor: num_items when given, else the rows not ignored (an integer)."""
    if num_items is not None:
        return int(num_items)
    return sum(1 for t in targets if t != ignore_index)


def reduce_losses(losses: Sequence[float], reduction: str, count: int) -> float | list[float]:
    """'none': the row losses; 'sum': their fold; 'mean': the fold / binary32(count)."""
    if reduction == "none":
        return list(losses)
    total = fold(losses)
    if reduction == "sum":
        return total
    return f32.div(total, f32.round_fraction(Fraction(int(count))))


def cross_entropy(logits_rows: Sequence[Sequence[float]], targets: Sequence[int],
                  ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                  num_items: int | None = None, return_grad: bool = False):
    """The values `mojolike.cross_entropy` returns, as Python floats and lists.

    'mean'/'sum' give a float, 'none' a list of N floats; with return_grad
    (not with 'none'), (loss, gradient rows as a list of lists).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if return_grad and reduction == "none":
        raise ValueError("return_grad needs reduction 'mean' or 'sum'")
    targets = [int(t) for t in targets]
    count = count_of(targets, ignore_index, num_items)
    s = host_scalars(label_smoothing, len(logits_rows[0]), reduction, count)
    losses, grads = rows(logits_rows, targets, ignore_index, s, return_grad)
    out = reduce_losses(losses, reduction, count)
    return (out, grads) if return_grad else out
