"""The shipped training text and its batches; defined in `mojolike.training.data`.

>>> import mojolike.data
>>> len(mojolike.data.shipped_text())
131072
"""
from .training.data import SHIPPED, VOCAB, TextStream, batch, default_stream, pydoc_text, shipped_text

__all__ = ["SHIPPED", "VOCAB", "TextStream", "batch", "default_stream", "pydoc_text",
           "shipped_text"]
