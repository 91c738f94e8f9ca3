"""The torch-argument checks of mojolike.torch's entry points, in one place.

Each check refuses by name (the entry point, the option, why, and what to do instead)
before anything is written, like mojolike.core.checks, and returns what the kernels take:
a parameter or gradient as a zero-copy numpy view of the tensor's own memory.

Covered: CPU, strided, contiguous torch.float32 tensors. Refused: CUDA (and every other
device) until the GPU path exists, float64, float16 and bfloat16 (until mixed precision
exists), sparse and non-contiguous tensors.

Reproducibility: nothing here computes; a view shares the tensor's memory, so what the
kernels write is what torch reads.

>>> import torch
>>> v = tensor_view("demo", "params[0]", torch.ones(2, 3))
>>> v.shape, v.dtype.name
((2, 3), 'float32')
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core.entry import torch_option
from ..core.refusals import refuse

_HALF = (torch.float16, torch.bfloat16)
_F32 = np.dtype(np.float32)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def tensor_view(entry: str, name: str, t, *, what: str = "parameter") -> np.ndarray:
    """The numpy view of a CPU contiguous float32 tensor (its own memory), or a refusal."""
    if type(t) in _PLAIN and t.dtype is torch.float32 and t.layout is torch.strided and \
            t.device.type == "cpu" and t.is_contiguous() and not t.is_neg():
        return t.detach().numpy()  # the common case, checked at once (each step, each tensor)
    if not isinstance(t, torch.Tensor):
        refuse(entry, name, f"is a {type(t).__name__}; a torch.Tensor {what} is expected")
    if t.device.type != "cpu":
        refuse(entry, name, f"is on {t.device}; only CPU tensors are covered until mojolike's "
                            f"GPU path for torch exists: keep the model on the CPU")
    if t.layout is not torch.strided:
        refuse(entry, name, f"has layout {t.layout}; only dense (strided) tensors are covered")
    if t.dtype in _HALF:
        refuse(entry, name, f"is {t.dtype}; float16 and bfloat16 are not covered until mixed "
                            f"precision exists: keep the {what}s in torch.float32")
    if t.dtype != torch.float32:
        refuse(entry, name, f"is {t.dtype}; only torch.float32 is covered (mojolike certifies "
                            f"binary32 arithmetic): use model.float()")
    if not t.is_contiguous():
        refuse(entry, name, "is not contiguous; the kernels write a tensor's own memory, so make "
                            "the tensor itself contiguous before building the optimizer "
                            "(p.data = p.data.contiguous(), which torch then holds), never a "
                            "copy torch does not see")
    if t.is_conj() or t.is_neg():
        refuse(entry, name, "has a lazy conj/neg bit; resolve it (t.resolve_neg()) first")
    return t.detach().numpy()


def grad_view(entry: str, name: str, g, p: torch.Tensor) -> np.ndarray:
    """The numpy view of parameter p's gradient (same checks, and p's shape)."""
    v = tensor_view(entry, name, g, what="gradient")
    if tuple(g.shape) != tuple(p.shape):
        refuse(entry, name, f"has shape {tuple(g.shape)} but its parameter has shape "
                            f"{tuple(p.shape)}")
    return v


def _rebound(entry: str, i: int) -> None:
    refuse(entry, f"params[{i}]", "was rebound or resized (p.data = ...) after the optimizer "
                                  "registered it, which would leave the kernels stepping the old "
                                  "memory; make a new optimizer (load_state_dict carries the "
                                  "state over)")


def bound_grads(entry: str, params: list, bound: list) -> list:
    """Each parameter's .grad as a view (None where it has none), after checking that each
    parameter still lies where it was registered (bound: (data_ptr, shape) per parameter):
    a parameter rebound (p.data = ...) or resized is refused, never stepped in its old
    memory. The common case (a plain CPU contiguous float32 gradient) is checked on the view
    numpy() makes; anything else goes through grad_view's checks and refusals."""
    out = []
    for i, (p, (ptr, shape)) in enumerate(zip(params, bound)):
        if p.data_ptr() != ptr or p.shape != shape:
            _rebound(entry, i)
        g = p.grad
        view = None
        if type(g) is torch.Tensor:
            try:  # numpy() itself refuses non-CPU, sparse, neg/conj bits and requires_grad
                view = g.numpy()
            except (RuntimeError, TypeError, ValueError):
                pass  # grad_view below refuses it by name, or takes it
            if view is not None and (view.dtype is not _F32 or view.shape != shape or
                                     not view.flags.c_contiguous):
                view = None
        if g is None:
            out.append(None)
        elif view is not None:
            out.append(view)
        else:
            out.append(grad_view(entry, f"params[{i}].grad", g, p))
    return out


def bound_grad_addresses(entry: str, params: list, bound: list) -> tuple | None:
    """(each parameter's .grad, each one's data address; None where it has none) after
    bound_grads' checks of the parameters, when every gradient is the plain case: a
    torch.Tensor on the CPU, strided, float32, contiguous, without a neg bit, of its
    parameter's shape. These fields are read off the tensor, which costs less than a numpy
    view of it each step (mojolike.optim.params.Vouched). None when some gradient is not
    the plain case: bound_grads then refuses it by name or takes it."""
    grads, addresses = [], []
    f32, strided = torch.float32, torch.strided
    for i, (p, (ptr, shape)) in enumerate(zip(params, bound)):
        if p.data_ptr() != ptr or p.shape != shape:
            _rebound(entry, i)
        g = p.grad
        if g is None:
            addresses.append(None)
        elif type(g) is torch.Tensor and g.dtype is f32 and g.is_cpu and g.layout is strided \
                and g.is_contiguous() and not g.is_neg() and g.shape == shape:
            addresses.append(g.data_ptr())
        else:
            return None
        grads.append(g)
    return grads, addresses


def host_float(entry: str, name: str, v) -> None:
    """Refuse a torch.Tensor where the kernels take a host scalar (torch allows a tensor lr)."""
    if isinstance(v, torch.Tensor):
        refuse(entry, name, "is a torch.Tensor; pass a Python float (it becomes the binary32 "
                            "value nearest it, a host scalar)")


def flags(entry: str, given: dict) -> None:
    """Refuse the torch switches mojolike has no form of, unless at a value it honours
    (amsgrad, foreach, fused, capturable, differentiable: False, or None where torch's
    default is None)."""
    for name, value in given.items():
        if value is not None:
            torch_option(entry, name, value)


def norm_type(entry: str, value) -> float:
    """The clip's norm type: 2 (the two-level fold norm) only."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != 2.0:
        refuse(entry, "norm_type", "is not covered: mojolike's clip is the two-level fold "
                                   "2-norm (contracts/optim.md); pass norm_type=2.0",
               value=value)
    return 2.0


def finite_positive(entry: str, name: str, value, *, low_open: bool = True) -> float:
    """A finite Python number > 0 (>= 0 without low_open)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or (value <= 0 if low_open else value < 0):
        refuse(entry, name, f"must be a finite number {'>' if low_open else '>='} 0",
               value=value)
    return float(value)
