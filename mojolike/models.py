"""The reference models on the tape (`TinyLM`); defined in `mojolike.training.models`.

>>> from mojolike.models import TinyLM
>>> TinyLM.__module__
'mojolike.training.models'
"""
from .training.models import TinyLM, linear_bound

__all__ = ["TinyLM", "linear_bound"]
