"""mojolike for PyTorch programs: optimizers that are `torch.optim.Optimizer`s, a clip and a
grad scaler with torch's API, and `certified()`, a dispatch mode that runs a program's
float32 CPU aten ops on mojolike's kernels and refuses every other op by name.

The submodules load on first use, so `import mojolike` never imports torch.

Reproducibility: everything here computes through mojolike's kernels and their contracts;
what torch computes outside them (an op `certified()` does not route) is refused, never
silently left as torch's.

>>> import mojolike.torch
>>> sorted(mojolike.torch.__all__)
['amp', 'certified', 'nn', 'optim']
"""
from __future__ import annotations

from importlib import import_module

__all__ = ["amp", "certified", "nn", "optim"]

_SUBMODULES = {"optim", "nn", "amp"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return import_module(f"{__name__}.{name}")
    if name == "certified":
        return import_module(f"{__name__}.dispatch").certified
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
