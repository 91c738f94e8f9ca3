"""The reference training run (`Trainer`, `TrainConfig`); defined in `mojolike.training.trainer`.

>>> from mojolike.train import TrainConfig, Trainer
>>> TrainConfig().steps
200
"""
from .training.trainer import *  # noqa: F403  (the public names, as the module's __all__ lists them)
from .training.trainer import __all__  # noqa: F401
