"""`clip_grad_norm_` with torch.nn.utils.clip_grad_norm_'s signature, on mojolike's clip.

total = sqrt(fold([norm_j * norm_j])) with norm_j = sqrt(sumsq(g_j)) over the parameters
that have a .grad (the two-level fold norm, contracts/optim.md), coef = min(max_norm /
(total + 1e-6), 1) in binary32, and every gradient multiplied in place by coef (one
binary32 multiply per element) unless coef is 1. Only norm_type=2 is covered (other norms
are refused by name); foreach is accepted as None or False.

A non-finite total norm: with error_if_nonfinite=True it is refused before any gradient
is written; with False (torch's default) the gradients are multiplied by the coefficient
torch would use (0 for an infinite norm, NaN for a NaN one), as torch does, and the
norm is returned, so a GradScaler step that follows skips.

Reproducibility: the fold tree over the tensors in the order given; the same bits on every
backend and thread count (numeric_mode="identical"). torch's own clip sums in another
order, so its norm agrees within rounding.

>>> import torch
>>> ps = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
>>> ps[0].grad, ps[1].grad = torch.tensor([3.0]), torch.tensor([4.0])
>>> clip_grad_norm_(ps, 1.0, backend="oracle"), ps[0].grad
(tensor(5.), tensor([0.6000]))
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ...core import checks as core_checks
from ...core import registry
from ...core.refusals import refuse
from ...optim.grads import CLIP_EPS
from ...optim.params import Registry
from ...oracles import f32
from .. import checks

__all__ = ["clip_grad_norm_"]

_ENTRY = "mojolike.torch.nn.utils.clip_grad_norm_"


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None, *, backend=None, numeric_mode=None) -> torch.Tensor:
    """Scale the .grad of `parameters` in place so their global 2-norm is at most max_norm;
    return the total norm (before clipping) as a float32 0-d tensor, as torch does."""
    e = _ENTRY
    checks.norm_type(e, norm_type)
    checks.flags(e, {"foreach": foreach})
    strict = core_checks.switch(e, "error_if_nonfinite", error_if_nonfinite)
    if isinstance(max_norm, torch.Tensor):
        max_norm = max_norm.item() if max_norm.numel() == 1 else max_norm
    m = core_checks.real32(e, "max_norm", max_norm, low=0.0)
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    views = [checks.grad_view(e, f"grads[{i}]", g, g) for i, g in enumerate(grads)]
    k = registry.kernels(e, "optim", backend, numeric_mode)
    reg = Registry(e, views, pieces=k.takes_pieces)
    reg.gather()
    total, coef = k.clip_coef(k.segment_sumsq(reg.tensors, reg.offsets), np.float32(m),
                              CLIP_EPS)
    total = float(total)
    if not math.isfinite(total):
        if strict:
            refuse(e, "parameters", f"have a non-finite total gradient norm ({total}); nothing "
                                    f"was scaled (error_if_nonfinite=True)")
        # torch's coefficient: max_norm / (inf + eps) = 0, or NaN; clamped at 1
        coef = f32.div(m, f32.add(total, float(CLIP_EPS)))
        c = np.float32(coef)
        with np.errstate(invalid="ignore"):  # inf * 0 is NaN, as in torch
            for v in views:
                np.multiply(v, c, out=v)  # one binary32 multiply per element
        return torch.tensor(total, dtype=torch.float32)
    if float(coef) != 1.0:
        k.scale(reg.tensors, coef)
        reg.scatter()
    return torch.tensor(total, dtype=torch.float32)
