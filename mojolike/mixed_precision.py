"""Mixed precision with float32 master weights: `with_master_weights(model, dtype)` gives a
model's forward bfloat16 / float16 twins of its float32 parameters
(`mojolike.training.master_weights`); `mojolike.cast` converts buffers, `mojolike.GradScaler`
scales float16 losses.

>>> from mojolike.mixed_precision import with_master_weights
>>> with_master_weights.__module__
'mojolike.training.master_weights'
"""
from .training.master_weights import with_master_weights

__all__ = ["with_master_weights"]
