"""Cross-entropy over class indices (torch's F.cross_entropy), the same bits on every backend.

The arithmetic is `mojolike.oracles.loss` (contracts/loss.md). Kernels compute
the row losses (and the gradient in place of the exponentials); a row whose
expf/logf the kernel could not decide is redone on the host by `finish_rows`;
the rows are then folded by the canonical tree on the same backend.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..core import checks, fallbacks, registry
from ..core.checks import as_f32, shape_of
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..oracles import f32
from ..oracles import loss as spec
from .crmath import expf, logf
from .fold import fold

_I64 = np.iinfo(np.int64)


def check_options(entry: str, ignore_index, reduction, label_smoothing, num_items, return_grad):
    """The options cross_entropy shares with the chunked LM head; returns label_smoothing's
    binary32 value."""
    checks.integer(entry, "ignore_index", ignore_index, low=int(_I64.min), high=int(_I64.max),
                   what="an int64 integer; torch's third positional argument is weight: pass "
                        "options by keyword")
    checks.choice(entry, "reduction", reduction, spec.REDUCTIONS)
    want_grad = checks.switch(entry, "return_grad", return_grad)
    if want_grad and reduction == "none":
        refuse(entry, "return_grad", "needs reduction 'mean' or 'sum': the gradient of "
                                     "reduction='none' needs a per-row upstream gradient, which is "
                                     "not covered", value=True)
    ls = checks.real32(entry, "label_smoothing", label_smoothing, low=0.0, high=1.0, high_open=True,
                       what="in [0, 1) (contracts/loss.md does not cover 1.0)")
    if num_items is not None:
        checks.integer(entry, "num_items", num_items, low=1, what="a positive integer, the mean's "
                                                                  "divisor")
        if reduction != "mean":
            refuse(entry, "num_items", f"is the divisor of reduction='mean'; with "
                                       f"reduction={reduction!r} it would be ignored, so drop it")
    return ls


def _logits(entry: str, logits) -> np.ndarray:
    flat = as_f32(entry, "logits", logits)  # dtype, byte order, empty, contiguity
    shape = shape_of(logits)
    if len(shape) != 2:
        refuse(entry, "logits", f"have shape {shape}; cross_entropy needs 2-D logits (N, V) "
                                f"(for one row, pass logits[None])")
    a = flat.reshape(shape)
    # min and max propagate NaN and show any inf without an (N, V) temporary (clause 6)
    if not (math.isfinite(a.min()) and math.isfinite(a.max())):
        i = next(i for i in range(shape[0]) if not np.isfinite(a[i]).all())
        j = int(np.flatnonzero(~np.isfinite(a[i]))[0])
        refuse(entry, "logits", f"hold a non-finite value ({a[i, j]} at row {i}, class {j}); inf "
                                f"and NaN logits are not covered")
    return a


def check_targets(entry: str, targets, n: int, v: int, ignore_index: int,
                  rows_of: str = "logits") -> np.ndarray:
    """(N,) int64 class indices, each a class in [0, v) or ignore_index."""
    if not isinstance(targets, (np.ndarray, list, tuple)):
        hint = " (for a torch tensor, pass tensor.numpy())" if hasattr(targets, "__dlpack__") else ""
        refuse(entry, "targets", f"must be a numpy integer array or a list of ints; got "
                                 f"{type(targets).__name__}{hint}")
    try:
        t = np.asarray(targets)
    except (TypeError, ValueError) as e:
        refuse(entry, "targets", f"are not a flat list of class indices ({e})")
    if t.ndim == 2 or t.dtype.kind in "fc":
        refuse(entry, "targets", f"(shape {t.shape}, dtype {t.dtype.name}) look like class "
                                 f"probabilities; probability targets are not covered: pass (N,) "
                                 f"integer class indices")
    if t.dtype.kind not in "iu":
        refuse(entry, "targets", f"have dtype {t.dtype.name}; pass integer class indices "
                                 f"(any numpy integer dtype or a list of ints)")
    if t.ndim != 1 or t.shape[0] != n:
        refuse(entry, "targets", f"have shape {t.shape} but {rows_of} have N={n} rows; pass one class "
                                 f"index per row")
    # a uint64 above int64's range would wrap in the cast (even onto ignore_index): out of range
    wide = (t > _I64.max) if t.dtype == np.uint64 else False
    t64 = np.ascontiguousarray(t, dtype=np.int64)
    bad = np.flatnonzero(wide | ((t64 != ignore_index) & ((t64 < 0) | (t64 >= v))))
    if bad.size:
        i = int(bad[0])
        refuse(entry, f"targets[{i}]", f"is {int(t[i])}, neither ignore_index={ignore_index} nor a "
                                       f"class in [0, {v}) (row {i})")
    return t64


@entry_point("mojolike.cross_entropy", torch=("weight", "size_average", "reduce"))
def cross_entropy(logits, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  num_items=None, return_grad=False, numeric_mode=None, backend=None, *, entry,
                  **unknown):
    """Cross-entropy of float32 logits (N, V) against class indices, as torch's F.cross_entropy.

    Per row: d = z - max(z), S = fold(expf(d)), L = logf(S), nll = L - d[t];
    with label smoothing eps, loss = (1-eps)*nll + (eps/V)*fold(L - d) (host
    scalars rounded once); rows whose target is `ignore_index` give +0.0.
    'sum' folds the N row losses, 'mean' divides that by the number of rows not
    ignored (or `num_items`, as in sum / num_items), 'none' returns them.

    Parameters: `logits` a C-contiguous float32 buffer of shape (N, V) (read,
    never written); `targets` N integers (numpy integer array or list of ints);
    `return_grad=True` ('mean'/'sum') also returns dlogits = (softmax - q) * g,
    q the smoothed one-hot target, g = 1 or 1/count; `backend`, `numeric_mode`
    as in `mojolike.backends`.

    Returns a float ('mean', 'sum'; the float32 value), an (N,) float32 array
    ('none'), or (loss, dlogits (N, V) float32) with `return_grad`.

    Reproducibility: in numeric_mode="identical" the loss and gradient have the
    oracle's bits on every backend and thread count; expf and logf are correctly
    rounded, every sum is the canonical fold, and host scalars are the float32
    nearest their exact values. Torch's values differ in the last bits (its own
    exp/log and summation order).

    >>> import numpy as np, mojolike
    >>> z = np.float32([[0, 0, 0, 0], [5, 1, 1, 1]])
    >>> loss, dz = cross_entropy(z, [2, -100], return_grad=True, backend="oracle")
    >>> loss, dz[0].tolist(), dz[1].tolist()    # ln 4, rounded once; the ignored row is 0
    (1.3862943649291992, [0.25, 0.25, -0.75, 0.25], [0.0, 0.0, 0.0, 0.0])
    >>> cross_entropy(z, [2, 0], reduction="none", backend="oracle")
    array([1.3862944 , 0.05349043], dtype=float32)
    """
    ls = check_options(entry, ignore_index, reduction, label_smoothing, num_items, return_grad)
    a = _logits(entry, logits)
    n, v = a.shape
    t = check_targets(entry, targets, n, v, int(ignore_index))
    # everything is validated: from here on nothing is refused except an unavailable backend
    k = registry.kernels(entry, "loss", backend, numeric_mode)
    count = int(num_items) if num_items is not None else int(np.count_nonzero(t != ignore_index))
    s = spec.host_scalars(ls, v, reduction, count)
    rows = np.empty(n, np.float32)
    status = np.zeros(n, np.int32)
    grad = np.empty((n, v), np.float32) if return_grad else np.zeros((1, 1), np.float32)
    args = (a, t, int(ignore_index), np.float32(s.c1), np.float32(s.c2), np.float32(s.qt),
            bool(s.smoothing), np.float32(s.g), bool(return_grad), grad, rows, status)
    flagged = k.cross_entropy_into(*args)
    redone = finish_rows(*args, backend=k.backend, numeric_mode=k.numeric_mode)
    if redone != flagged:
        raise RuntimeError(f"{entry}: the {k.backend} loss kernel reported {flagged} undecided rows "
                           f"but flagged {redone}")
    if reduction == "none":
        return rows
    total = float(fold(rows, backend=k.backend, numeric_mode=k.numeric_mode))
    if reduction == "mean":
        total = f32.div(total, f32.round_fraction(Fraction(count)))
    return (total, grad) if return_grad else total


def finish_rows(logits, targets, ignore_index, c1, c2, qt, smoothing, g, want_grad, grad, rows,
                status, *, backend, numeric_mode=registry.CONTRACT_MODE) -> int:
    """Redo on the host every row with a nonzero status (the kernel's arguments); returns how many.

    The arithmetic of contracts/loss.md with numpy float32 operations (one
    rounding each, no fused multiply-add) and the public expf, logf and fold of
    `backend`, which finish undecided values with the oracle; writes rows[i],
    grad row i (with `want_grad`) and status[i] = 0, and reports each row to
    `fallbacks` with the crmath values its recomputation finished.
    """
    c1, c2, qt, g = np.float32(c1), np.float32(c2), np.float32(qt), np.float32(g)
    on = dict(backend=backend, numeric_mode=numeric_mode)
    redo = np.flatnonzero(status)
    for i in redo.tolist():
        ti = int(targets[i])
        # the crmath values this row's recomputation finishes go into the row's own record
        with fallbacks.collect(hold=True) as finished:
            if ti == ignore_index:
                rows[i] = np.float32(0.0)
                if want_grad:
                    grad[i] = np.float32(0.0)
            else:
                with np.errstate(over="ignore", invalid="ignore"):  # z - mx may overflow to -inf
                    z = logits[i]
                    d = z - z.max()
                    e = expf(d, **on)
                    big_s = np.float32(fold(e, **on))
                    big_l = logf(np.float32([big_s]), **on)[0]
                    loss = big_l - d[ti]
                    if smoothing:
                        loss = c1 * loss + c2 * np.float32(fold(big_l - d, **on))
                    rows[i] = loss
                    if want_grad:
                        q = np.full(d.shape, c2, np.float32)
                        q[ti] = qt
                        grad[i] = (e / big_s - q) * g
        row_bits = rows[i:i + 1].view(np.uint32)[0]
        fallbacks.record("loss", "row", i, row_bits, finished=tuple(finished))
        status[i] = 0
    return redo.size
