"""mojolike: float32 training numerics with the same bits on every backend.

Every public function takes `backend=` and `numeric_mode=`; see
`mojolike.backends()` for what can run here. Importing compiles nothing:
kernels compile on first use and are cached on disk.

>>> import numpy as np, mojolike
>>> mojolike.fold(np.float32([0.5, 0.25]), backend="oracle")
np.float32(0.75)
"""
from ._fold import dot, fold, sumsq
from .registry import backend_used, backends, numeric_mode_used
from .refusals import BackendUnavailable, Refusal

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable", "Refusal", "backend_used", "backends", "dot", "fold",
    "numeric_mode_used", "sumsq",
]
