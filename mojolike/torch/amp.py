"""`GradScaler` with torch.amp.GradScaler's API, on mojolike's scaler (mojolike.GradScaler).

scale(loss) multiplies by the scale (one binary32 multiply, torch's own op on the loss
tensor); unscale_(optimizer) multiplies every .grad in place by inv_scale =
binary32(1 / binary64(scale)) on mojolike's kernels and takes the checksum (the fold of
every cell) that decides the step; step(optimizer) unscales first if unscale_ was not
called (as torch does, so .grad holds the unscaled gradients afterwards), then steps the
optimizer, or skips it, writing no parameter, when the checksum is non-finite;
update() backs the scale off after a skip, or grows it after growth_interval steps in a
row without one (the binary64 product rounded once to binary32, torch's CPU kernel).

The optimizer must be a mojolike.torch.optim optimizer (refused by name otherwise).
torch skips exactly when a cell is inf or NaN; the checksum is also non-finite when
every cell is finite and their sum overflows binary32, a false alarm that costs one
extra backoff. device is "cpu" (torch.amp.GradScaler's default "cuda" is refused by name
until the GPU path exists).

Reproducibility: the scales and skip decisions depend on the gradients' bits alone: the
same on every backend and thread count (numeric_mode="identical"); given torch's skip
decisions they are torch's scale sequence.

>>> import torch, mojolike.torch.optim as mo
>>> w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
>>> opt = mo.SGD([w], lr=0.5, backend="oracle")
>>> scaler = GradScaler(init_scale=4.0)
>>> w.grad = torch.tensor([4.0, float("inf")]); scaler.step(opt); scaler.update()
>>> scaler.get_scale(), w.detach()
(2.0, tensor([1., 2.]))
>>> w.grad = torch.tensor([2.0, -2.0]); scaler.step(opt); scaler.update()
>>> scaler.get_scale(), w.detach()
(2.0, tensor([0.5000, 2.5000]))
"""
from __future__ import annotations

import torch

from ..core.refusals import Refusal, refuse
from ..optim import scaler as _scaler
from .optim import _TorchOptimizer

__all__ = ["GradScaler"]

_ENTRY = "mojolike.torch.amp.GradScaler"


class GradScaler:
    """torch.amp.GradScaler's constructor, methods and state_dict, on mojolike's scaler.

    Reproducibility: see the module docstring.

    >>> GradScaler(init_scale=8.0).get_scale()
    8.0
    """

    def __init__(self, device="cpu", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True, *, backend=None, numeric_mode=None):
        if device != "cpu" and getattr(device, "type", None) != "cpu":
            refuse(_ENTRY, "device", "is not covered: mojolike's torch path runs on the CPU "
                                     "until its GPU path exists; pass device='cpu'",
                   value=device)
        try:
            self._inner = _scaler.GradScaler(init_scale, growth_factor, backoff_factor,
                                             growth_interval, enabled, backend=backend,
                                             numeric_mode=numeric_mode)
        except Refusal as r:
            raise r.at(_ENTRY) from None

    def _optimizer(self, e: str, optimizer) -> _TorchOptimizer:
        if not isinstance(optimizer, _TorchOptimizer):
            refuse(e, "optimizer", f"must be a mojolike.torch.optim optimizer (SGD, Adam, "
                                   f"AdamW), not {type(optimizer).__name__}: the skip and the "
                                   f"unscale run on its kernels")
        return optimizer

    def scale(self, outputs):
        """outputs * scale: a tensor (torch's float32 multiply), or a list/tuple of them."""
        if not self._inner.is_enabled():
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if not isinstance(outputs, torch.Tensor) or outputs.dtype != torch.float32 or \
                outputs.device.type != "cpu":
            refuse(f"{_ENTRY}.scale", "outputs", "must be CPU float32 tensors (or a list of "
                                                 "them)", value=outputs)
        return outputs * torch.tensor(self._inner.get_scale(), dtype=torch.float32)

    def unscale_(self, optimizer) -> None:
        """Multiply every .grad of optimizer's parameters in place by inv_scale and record
        whether they are finite; once per optimizer between update()s, before step."""
        e = f"{_ENTRY}.unscale_"
        opt = self._optimizer(e, optimizer)
        if not self._inner.is_enabled():
            return
        grads = opt._prepare(e)
        if grads is None:
            refuse(e, "optimizer", "has no parameter with a .grad: there is nothing to unscale "
                                   "or check (torch: 'No inf checks were recorded')")
        try:
            self._inner.unscale_(opt._inner, grads)
        except Refusal as r:
            raise r.at(e) from None

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step() unless the unscaled gradients hold inf or NaN (then nothing is
        written and None is returned); unscales first if unscale_ was not called."""
        e = f"{_ENTRY}.step"
        opt = self._optimizer(e, optimizer)
        if not self._inner.is_enabled():
            return opt.step(*args, **kwargs)
        if args or kwargs:
            refuse(e, "closure", "is not covered with the scaler enabled (as in torch): "
                                 "compute the loss and backward first")
        inner = self._inner
        if inner._stage(opt._inner) == _scaler._READY:
            self.unscale_(opt)
        grads = opt._prepare(e)
        try:
            inner.step(opt._inner, grads)
        except Refusal as r:
            raise r.at(e) from None
        if not inner._states[id(opt._inner)]["found_inf"]:
            opt._finish(grads)
        return None  # torch returns optimizer.step()'s value: None without a closure

    def update(self, new_scale=None) -> None:
        """Back off after a skip, grow after growth_interval clean steps, or set new_scale
        (a float or a 1-element float32 tensor)."""
        if isinstance(new_scale, torch.Tensor):
            if new_scale.numel() != 1 or new_scale.dtype != torch.float32:
                refuse(f"{_ENTRY}.update", "new_scale", "must be a float or a 1-element "
                                                        "float32 tensor")
            new_scale = new_scale.item()
        try:
            self._inner.update(new_scale)
        except Refusal as r:
            raise r.at(f"{_ENTRY}.update") from None

    def get_scale(self) -> float:
        return self._inner.get_scale()

    def get_growth_factor(self) -> float:
        return self._inner.get_growth_factor()

    def set_growth_factor(self, new_factor) -> None:
        self._inner.set_growth_factor(new_factor)

    def get_backoff_factor(self) -> float:
        return self._inner.get_backoff_factor()

    def set_backoff_factor(self, new_factor) -> None:
        self._inner.set_backoff_factor(new_factor)

    def get_growth_interval(self) -> int:
        return self._inner.get_growth_interval()

    def set_growth_interval(self, new_interval) -> None:
        self._inner.set_growth_interval(new_interval)

    def is_enabled(self) -> bool:
        return self._inner.is_enabled()

    def state_dict(self) -> dict:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval,
        _growth_tracker (empty when disabled); torch.amp.GradScaler loads it and back."""
        return self._inner.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        sd = {k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in state_dict.items()} \
            if isinstance(state_dict, dict) else state_dict
        try:
            self._inner.load_state_dict(sd)
        except Refusal as r:
            raise r.at(f"{_ENTRY}.load_state_dict") from None
