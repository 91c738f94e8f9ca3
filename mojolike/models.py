"""The reference models on the tape (`TinyLM`); defined in `mojolike.training.models`.

>>> from mojolike.models import TinyLM
>>> TinyLM.__module__
'mojolike.training.models'
"""
from .training.models import IGNORE_INDEX, TinyLM, linear_bound

__all__ = ["IGNORE_INDEX", "TinyLM", "linear_bound"]
