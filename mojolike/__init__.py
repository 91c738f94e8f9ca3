"""mojolike: float32 training numerics with the same bits on every backend.

Every public function takes `backend=` and `numeric_mode=`; see
`mojolike.backends()` for what can run here. Importing compiles nothing:
kernels compile on first use and are cached on disk.

>>> import numpy as np, mojolike
>>> mojolike.fold(np.float32([0.5, 0.25]), backend="oracle")
np.float32(0.75)
"""
from . import math, random
from .core.refusals import BackendUnavailable, Refusal
from .core.registry import backend_used, backends, numeric_mode_used
from .ops.attention import (
    AttentionSaved,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)
from .ops.fold import dot, fold, sumsq
from .ops.head import chunked_lm_head_loss
from .ops.layers import (
    embedding,
    embedding_backward,
    linear,
    linear_backward,
    mlp_inference_sessions,
    relu,
    rms_norm,
    rms_norm_backward,
)
from .ops.loss import cross_entropy
from .ops.mixed import cast
from .ops.rng import Generator
from .ops.schedule import ConstantLR, WarmupCosineLR, WarmupLinearLR
from .ops.transformer import (
    gelu,
    gelu_backward,
    layer_norm,
    layer_norm_backward,
    log_softmax,
    log_softmax_backward,
    matmul,
    matmul_backward,
    mean,
    softmax,
    softmax_backward,
    sum,
)
from .optim.grads import accumulate_grads, accumulation_is_aligned, clip_grad_norm_, get_total_norm
from .optim.optimizers import SGD, Adam, AdamW
from .optim.outlier import OutlierDetector
from .optim.scaler import GradScaler, grad_checksum
from .optim.state import load_state, save_state
from .training.recorder import RunRecorder
from .training.tape import Tape

__version__ = "0.1.0"

__all__ = [
    "RunRecorder",
    "SGD", "Adam", "AdamW", "BackendUnavailable", "ConstantLR", "Generator", "GradScaler", "OutlierDetector",
    "Refusal",
    "WarmupCosineLR", "WarmupLinearLR", "accumulate_grads", "accumulation_is_aligned",
    "backend_used", "backends", "cast", "chunked_lm_head_loss", "clip_grad_norm_", "get_total_norm", "cross_entropy", "dot", "embedding",
    "embedding_backward", "fold", "grad_checksum", "linear", "linear_backward", "load_state", "math",
    "mlp_inference_sessions", "numeric_mode_used", "random", "relu", "rms_norm",
    "rms_norm_backward", "save_state", "sumsq", "Tape",
    "gelu", "gelu_backward", "layer_norm", "layer_norm_backward", "log_softmax",
    "log_softmax_backward", "matmul", "matmul_backward", "mean",
    "AttentionSaved", "scaled_dot_product_attention", "scaled_dot_product_attention_backward",
    "softmax",
    "softmax_backward", "sum",
]
