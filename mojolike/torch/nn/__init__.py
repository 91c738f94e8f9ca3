"""torch.nn's counterparts in mojolike: `utils.clip_grad_norm_` (the two-level fold norm).

Reproducibility: see mojolike.torch.nn.utils.

>>> import mojolike.torch.nn
>>> mojolike.torch.nn.utils.clip_grad_norm_.__name__
'clip_grad_norm_'
"""
from __future__ import annotations

from . import utils

__all__ = ["utils"]
