"""mojolike: float32 training numerics with the same bits on every backend.

Every public function takes `backend=` and `numeric_mode=`; see
`mojolike.backends()` for what can run here. Importing compiles nothing:
kernels compile on first use and are cached on disk.

>>> import numpy as np, mojolike
>>> mojolike.fold(np.float32([0.5, 0.25]), backend="oracle")
np.float32(0.75)
"""
from . import math, random
from ._fold import dot, fold, sumsq
from ._layers import (embedding, embedding_backward, linear, linear_backward, mlp_inference_sessions,
                      relu, rms_norm, rms_norm_backward)
from ._layers_head import chunked_lm_head_loss
from ._loss import cross_entropy
from ._optim import SGD, Adam, AdamW
from ._outlier import OutlierDetector
from ._optim_grads import accumulate_grads, accumulation_is_aligned, clip_grad_norm_, get_total_norm
from ._optim_state import load_state, save_state
from ._rng import Generator
from ._scaler import GradScaler, grad_checksum
from ._schedule import ConstantLR, WarmupCosineLR, WarmupLinearLR
from ._tape import Tape
from .registry import backend_used, backends, numeric_mode_used
from .refusals import BackendUnavailable, Refusal

__version__ = "0.1.0"

__all__ = [
    "SGD", "Adam", "AdamW", "BackendUnavailable", "ConstantLR", "Generator", "GradScaler", "OutlierDetector",
    "Refusal",
    "WarmupCosineLR", "WarmupLinearLR", "accumulate_grads", "accumulation_is_aligned",
    "backend_used", "backends", "chunked_lm_head_loss", "clip_grad_norm_", "get_total_norm", "cross_entropy", "dot", "embedding",
    "embedding_backward", "fold", "grad_checksum", "linear", "linear_backward", "load_state", "math",
    "mlp_inference_sessions", "numeric_mode_used", "random", "relu", "rms_norm",
    "rms_norm_backward", "save_state", "sumsq", "Tape",
]
