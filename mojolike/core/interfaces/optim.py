"""The optim family's kernel interface: SGD, Adam/AdamW, the clip, scaling and accumulation.

p, g and the state are flat float32 buffers; on a set with `takes_pieces` p and g may
also be `native.pieces.Pieces` (separate arrays updated where they are); on CUDA they may
be device arrays (`new_state` returns one). Scalars are binary32 (numpy.float32), flags
numpy.bool_.

Reproducibility: the per-element steps are `mojolike.oracles.optim`'s, in its order;
every sum is the fold tree, so no thread count or launch geometry reaches the bits.

>>> from mojolike.core.interfaces import written
>>> written("optim", "adam", {"write_back": True})
(0, 2, 3, 1)
"""
from __future__ import annotations

from typing import Annotated, Protocol

import numpy as np

from . import Array, KernelSet, Writes, Written

# the gradient: read as g * grad_scale, and stored back so only with write_back=True
Gradient = Annotated[Array, Writes(when="write_back")]


class OptimKernels(KernelSet, Protocol):
    """In-place optimizer steps and the reductions the clip and the loss scaler need."""

    def new_state(self, n: int) -> Array:
        """n float32 zeros where this set keeps optimizer state (host, or the device on CUDA)."""

    def sgd(self, p: Written, g: Gradient, b: Written, first, lr, momentum, one_minus_damp, wd,
            use_momentum, use_decay, nesterov, maximize, *, grad_scale=None, write_back=False) -> None:
        """One SGD pass over every element (torch's single-tensor order): p and the momentum
        buffer b updated in place (b is a one-element placeholder, never touched, without
        use_momentum; `first` starts b from the gradient). Each gradient is read as
        g * grad_scale (one rounding; None reads g); with write_back that value is stored
        into g, else g is left as it was."""

    def adam(self, p: Written, g: Gradient, m: Written, v: Written, *scalars_and_flags,
             grad_scale=None, write_back=False) -> None:
        """One Adam/AdamW pass: p, m, v updated in place. scalars_and_flags are the step's host
        scalars beta1, beta2, eps, weight_decay, one_minus_beta1, one_minus_beta2, step_size,
        sqrt_bc2, param_decay (binary32) and the flags coupled, decoupled, maximize, in that
        order (`mojolike.oracles.optim.AdamScalars`). The gradient is read and written back
        as in `sgd`."""

    def sgd_twins(self, p: Written, g: Gradient, b: Written, tw: Written, kinds: Array, cut: Array,
                  first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov,
                  maximize, *, grad_scale=None, write_back=False) -> None:
        """`sgd`, and in the same pass each element's cast twin: cut (int64) cuts p into
        tensors, and once element k of tensor t has its new p, tw[k] (uint16 bit patterns, flat,
        or pieces at cut where `takes_pieces`) gets it rounded to bfloat16 (kinds[t] = 1) or
        float16 (kinds[t] = 2), mojolike.cast's rounding; a tensor of kind 0 has no twin and
        its part of tw is not touched."""

    def adam_twins(self, p: Written, g: Gradient, m: Written, v: Written, tw: Written,
                   kinds: Array, cut: Array, *scalars_and_flags, grad_scale=None,
                   write_back=False) -> None:
        """`adam`, and in the same pass each element's cast twin, as in `sgd_twins`."""

    def scale(self, g: Written, coef) -> None:
        """g[i] = g[i] * coef in place (one rounding each): the clip's and the unscale's multiply."""

    def add(self, a: Array, b: Array, out: Written) -> None:
        """out[i] = a[i] + b[i] (gradient accumulation); out may be a or b."""

    def all_finite(self, x: Array) -> bool:
        """True when no element of x is NaN or infinite."""

    def segment_sumsq(self, x: Array, offsets: Array) -> np.ndarray:
        """The sumsq of every tensor's cells x[offsets[j]:offsets[j+1]] (float32, one per tensor)."""

    def segment_fold(self, x: Array, offsets: Array) -> np.ndarray:
        """The fold of every tensor's cells; an empty tensor's is -0.0, the tree's padding."""

    def segment_fold_sumsq(self, x: Array, offsets: Array) -> tuple[np.ndarray, np.ndarray]:
        """(fold, sumsq) of every tensor's cells, from one read of x."""

    def clip_coef(self, sumsqs: Array, max_norm, eps) -> tuple[np.float32, np.float32]:
        """(total, coef): total = sqrt(fold(sqrt(s_j)^2)) over the tensors' sumsqs s_j, and
        coef = min(max_norm / (total + eps), 1), each a binary32 rounding of the oracle's."""
