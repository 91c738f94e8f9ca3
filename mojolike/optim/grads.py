"""Gradient utilities of the optim family: the global-norm clip and microbatch accumulation.

The arithmetic is `mojolike.oracles.optim` (contracts/optim.md, clauses 6 and 7).

>>> import numpy as np, mojolike
>>> mojolike.accumulation_is_aligned([2048] * 4, 4), mojolike.accumulation_is_aligned([2**33] * 2, 2)
(True, True)
"""
from __future__ import annotations

import math

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point, torch_option
from ..core.refusals import refuse
from ..oracles import optim as spec
from ..oracles.fold import pairwise, split_is_exact
from .params import Registry, as_list

CLIP_EPS = np.float32(spec.CLIP_EPS)


@entry_point("mojolike.clip_grad_norm_")
def clip_grad_norm_(grads, max_norm, norm_type=2.0, error_if_nonfinite=True, foreach=None,
                    numeric_mode=None, backend=None, *, entry, **unknown) -> float:
    """Scale `grads` in place so their global 2-norm is at most `max_norm`; return the total norm.

    norm_j = sqrt(sumsq(g_j)) per tensor, total = sqrt(fold([norm_j*norm_j])),
    coef = min(max_norm / (total + 1e-6), 1), g = g*coef (torch's clip_grad_norm_).
    torch's `foreach` is accepted as None or False only; `error_if_nonfinite` must be
    True (a non-finite norm is always refused before any gradient is scaled).

    Reproducibility: every sum is the fold tree over tensors in list order; the
    same bits on every backend (numeric_mode="identical").

    >>> import numpy as np, mojolike
    >>> g = [np.float32([3.0]), np.float32([4.0])]
    >>> mojolike.clip_grad_norm_(g, 1.0, backend="oracle"), g[0]
    (5.0, array([0.5999999], dtype=float32))
    """
    e = entry
    if isinstance(norm_type, str) or checks.exact(e, "norm_type", norm_type) != 2:
        refuse(e, "norm_type", "is not covered; only the 2-norm (norm_type=2.0) is certified",
               value=norm_type)
    if not checks.switch(e, "error_if_nonfinite", error_if_nonfinite):
        refuse(e, "error_if_nonfinite", "is not covered: a non-finite total norm is always an error, "
               "raised before any gradient is scaled", value=False)
    torch_option(e, "foreach", foreach)
    m = checks.real32(e, "max_norm", max_norm, low=0.0)
    k = registry.kernels(e, "optim", backend, numeric_mode)
    # the gradients are the registry here: borrowed, or packed where the kernels take flat arrays only
    reg = Registry(e, grads, pieces=k.takes_pieces)
    reg.gather()
    total, coef = k.clip_coef(k.segment_sumsq(reg.tensors, reg.offsets), np.float32(m), CLIP_EPS)
    if not math.isfinite(float(total)):
        refuse(e, "grads", f"have a non-finite total norm ({float(total)}); nothing was scaled")
    if coef != 1.0:
        k.scale(reg.tensors, coef)
        reg.scatter()
    return float(total)


@entry_point("mojolike.get_total_norm")
def get_total_norm(grads, norm_type=2.0, error_if_nonfinite=False, foreach=None, *,
                   numeric_mode=None, backend=None, entry, **unknown) -> float:
    """The global 2-norm of `grads` (torch 2.6's torch.nn.utils.get_total_norm), nothing written.

    total = sqrt(fold([norm_j*norm_j])) with norm_j = sqrt(sumsq(g_j)): the clip's
    total norm, bit for bit (clip_grad_norm_ and step(max_norm=...) return it).
    A None entry (a frozen parameter's missing gradient) is left out, as torch's
    clip leaves out parameters without .grad. A non-finite total is returned, or
    refused with error_if_nonfinite=True.

    Reproducibility: the fold tree over tensors in list order; the same bits on
    every backend (numeric_mode="identical").

    >>> import numpy as np, mojolike
    >>> mojolike.get_total_norm([np.float32([3.0]), None, np.float32([4.0])], backend="oracle")
    5.0
    """
    e = entry
    if isinstance(norm_type, str) or checks.exact(e, "norm_type", norm_type) != 2:
        refuse(e, "norm_type", "is not covered; only the 2-norm (norm_type=2.0) is certified",
               value=norm_type)
    strict = checks.switch(e, "error_if_nonfinite", error_if_nonfinite)
    torch_option(e, "foreach", foreach)
    k = registry.kernels(e, "optim", backend, numeric_mode)
    items, listed = as_list(e, "grads", grads, none=True)
    present = [g for g in items if g is not None]
    reg = Registry(e, present if listed else present[0], pieces=k.takes_pieces)
    reg.gather()
    total, _ = k.clip_coef(k.segment_sumsq(reg.tensors, reg.offsets), np.float32(1.0), CLIP_EPS)
    if strict and not math.isfinite(float(total)):
        refuse(e, "grads", f"have a non-finite total norm ({float(total)})")
    return float(total)


class AccumulatedGrads(list):
    """accumulate_grads' result for a list of buffers when asked with aligned=False: the summed
    gradients, with `aligned` saying whether the split gives one batch's bits."""

    aligned: bool | None = None


class AccumulatedGrad(np.ndarray):
    """accumulate_grads' result for one buffer when asked with aligned=False: the summed
    gradient, with `aligned` as in AccumulatedGrads (views of it keep the label)."""

    aligned: bool | None = None

    def __array_finalize__(self, obj):
        self.aligned = getattr(obj, "aligned", None)


def _labelled(result, aligned: bool):
    if isinstance(result, list):
        out = AccumulatedGrads(result)
    else:
        out = result.view(AccumulatedGrad)
    out.aligned = aligned
    return out


def check_split(entry: str, tokens: list[int], aligned, numeric_mode: str) -> bool:
    """Whether the split is aligned (`accumulation_is_aligned`), refusing an unaligned one where
    the caller did not opt out: in numeric_mode='identical' unless aligned=False, and with
    aligned=True in any mode."""
    if aligned is not None and not isinstance(aligned, (bool, np.bool_)):
        refuse(entry, "aligned", "must be None (an unaligned split refused in identical mode), "
                                 "False (accepted, the result labelled) or True", value=aligned)
    want = None if aligned is None else bool(aligned)
    exact = split_is_exact(tokens)
    if not exact and (want or (want is None and numeric_mode == registry.CONTRACT_MODE)):
        refuse(entry, "tokens", "is a split that is not aligned, so the sum's bits differ from "
                                "one batch's gradient (microbatches of whole 1024-token subtrees "
                                "are aligned, see accumulation_is_aligned); pass aligned=False "
                                "to accept a result labelled as such", value=tokens)
    return exact


@entry_point("mojolike.accumulate_grads")
def accumulate_grads(microbatch_grads, tokens, *, aligned=None, numeric_mode=None, backend=None,
                     entry, **unknown):
    """The elementwise sum of microbatch gradients by the pairwise tree, in ascending order.

    Each entry is one buffer or a list of buffers (all with one structure); the
    result has that structure, in new float32 arrays. `tokens` holds one positive
    count per microbatch. aligned=None: in numeric_mode="identical" the split must
    be aligned (`accumulation_is_aligned`: the sum then has the unsplit gradient's
    bits), else it is refused by name; aligned=False accepts any split and labels
    the result (an AccumulatedGrads list or AccumulatedGrad array whose `aligned`
    says whether it is aligned); aligned=True refuses an unaligned split in any mode.

    Reproducibility: level by level, (g0+g1), (g2+g3), ...; an odd last entry is
    carried up; every backend gives the same bits.

    >>> import numpy as np, mojolike
    >>> mojolike.accumulate_grads([np.float32([1]), np.float32([2]), np.float32([4])],
    ...                           [1024, 1024, 1024], backend="oracle")
    array([7.], dtype=float32)
    >>> mojolike.accumulate_grads([np.float32([1]), np.float32([2])], [128, 128], aligned=False,
    ...                           backend="oracle").aligned
    False
    """
    e = entry
    if not isinstance(microbatch_grads, (list, tuple)) or not microbatch_grads:
        refuse(e, "microbatch_grads", "must be a non-empty list of gradients, one per microbatch")
    counts = check_tokens(e, tokens, len(microbatch_grads))
    k = registry.kernels(e, "optim", backend, numeric_mode)
    regs = []
    for i, entry in enumerate(microbatch_grads):
        items, listed = as_list(e, f"microbatch_grads[{i}]", entry)
        views = [checks.as_f32(e, f"microbatch_grads[{i}]", g) for g in items]
        shapes = [checks.shape_of(g) for g in items]
        if regs and (shapes, listed) != regs[0][1:]:
            refuse(e, f"microbatch_grads[{i}]", "does not have the structure of microbatch_grads[0] "
                                                "(count and shapes)")
        regs.append((views, shapes, listed))
    exact = check_split(e, counts, aligned, k.numeric_mode)

    def add(a, b):
        out = np.empty_like(a)
        k.add(a, b, out)
        return out

    flat = pairwise([np.concatenate(v) if len(v) > 1 else v[0] for v, _, _ in regs], add)
    if len(regs) == 1:
        flat = flat.copy()  # the result is new memory, never the caller's buffer
    _, shapes, listed = regs[0]
    sizes = np.cumsum([0] + [math.prod(s) for s in shapes])
    parts = [flat[a:b].reshape(s) for a, b, s in zip(sizes[:-1], sizes[1:], shapes)]
    result = parts if listed else parts[0]
    return _labelled(result, exact) if aligned is not None and not aligned else result


def check_tokens(entry: str, tokens, count: int) -> list[int]:
    if not isinstance(tokens, (list, tuple)) or len(tokens) != count or any(
            not checks.is_int(t) or t < 1 for t in tokens):
        refuse(entry, "tokens", f"must be {count} positive integers, one per microbatch",
               value=tokens)
    return [int(t) for t in tokens]


@entry_point("mojolike.accumulation_is_aligned")
def accumulation_is_aligned(tokens, accumulation_steps, *, entry, **unknown) -> bool:
    """True exactly when splitting a fold-sum over tokens into microbatches of these token
    counts, each folded on its own and summed by `accumulate_grads`, gives the unsplit
    sum's bits for every input.

    The two addition trees are compared up to operand order (contracts/optim.md): for
    example equal microbatches of m tokens are aligned when m/1024 is a power of two
    (each is a whole subtree of the unsplit chunk tree), and not when m is 3072 or 1000.
    The time is polynomial in the number of microbatches and the bits of the counts.

    >>> accumulation_is_aligned([2048] * 4, 4), accumulation_is_aligned([3072] * 2, 2)
    (True, False)
    """
    e = entry
    steps = checks.integer(e, "accumulation_steps", accumulation_steps, low=1)
    return split_is_exact(check_tokens(e, tokens, steps))
