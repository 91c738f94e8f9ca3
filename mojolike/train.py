"""The reference training run (`Trainer`, `TrainConfig`); defined in `mojolike.training.trainer`.

>>> from mojolike.train import TrainConfig, Trainer
>>> TrainConfig().steps
200
"""
from .training.trainer import FORMAT, StepRecord, TrainConfig, Trainer

__all__ = ["FORMAT", "StepRecord", "TrainConfig", "Trainer"]
