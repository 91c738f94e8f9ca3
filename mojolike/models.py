"""The reference models on the tape: `TinyLM` (`mojolike.training.models`) and `GPT`, GPT-2 with
Hugging Face's parameter names and safetensors weights (`mojolike.training.gpt`, `gpt_io`).

>>> from mojolike.models import GPT, TinyLM
>>> TinyLM.__module__, GPT.__module__
('mojolike.training.models', 'mojolike.training.gpt')
"""
from .training.gpt import GPT
from .training.models import IGNORE_INDEX, TinyLM, linear_bound

__all__ = ["GPT", "IGNORE_INDEX", "TinyLM", "linear_bound"]
