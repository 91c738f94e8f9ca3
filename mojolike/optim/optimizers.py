"""SGD, Adam and AdamW with torch's names and defaults, over float32 buffers updated in place.

The arithmetic is `mojolike.oracles.optim` (contracts/optim.md); every backend
gives its bits. Gradients are an argument: there is no autograd. Every
hyperparameter is checked at construction (a binary32 value in range, the host
scalars it implies finite), and a step checks everything (gradients, overlap,
the scheduled rate and its host scalars, finiteness) before it writes anything:
a refused step leaves every buffer and attribute as it was.

>>> import numpy as np, mojolike
>>> w = np.ones(4, np.float32)
>>> opt = mojolike.Adam(w, lr=0.1, backend="oracle")
>>> opt.step(np.float32([1, -1, 0.5, 0]), max_norm=1.0)
1.5
>>> w, opt.t
(array([0.9, 1.1, 0.9, 1. ], dtype=float32), 1)
"""
from __future__ import annotations

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..oracles import optim as spec
from .base import (
    TORCH_OPTIONS,
    _f32or_bool,
    _given,
    _Optimizer,
    _option,
    _part,
    _read,
    _scalars_finite,
)

__all__ = ["SGD", "Adam", "AdamW"]


class SGD(_Optimizer):
    """Stochastic gradient descent with torch.optim.SGD's options and defaults.

    Update (contracts/optim.md): g = -g if maximize; g = g + wd*p; with momentum
    b = g on the first step, then b = b*mu + (1-dampening)*g; g = g + mu*b
    (nesterov) or g = b; p = p - lr*g. Each operation is one float32 rounding.
    `params` may be torch's list of dicts (param groups, contracts/step.md), each
    group setting any of lr, momentum, dampening, weight_decay, nesterov, maximize
    and lr_schedule.

    Reproducibility: the same bits on every backend and thread count
    (numeric_mode="identical"); host scalars are the float32 nearest their
    exact values (1 - dampening).

    >>> import numpy as np, mojolike
    >>> w = np.float32([1.0, 2.0])
    >>> opt = mojolike.SGD(w, lr=0.5, momentum=0.9, backend="oracle")
    >>> opt.step(np.float32([1.0, 1.0])); opt.step(np.float32([1.0, 1.0])); w
    array([-0.45,  0.55], dtype=float32)
    """

    _ENTRY = "mojolike.SGD"
    _GROUP_OPTIONS = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize",
                      "lr_schedule")

    @entry_point(torch=TORCH_OPTIONS)
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 *, maximize=False, lr_schedule=None, accumulation_steps=1, numeric_mode=None,
                 backend=None, twins=None, **unknown):
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
                    "lr_schedule": lr_schedule}
        super().__init__(params, defaults, accumulation_steps=accumulation_steps,
                         numeric_mode=numeric_mode, backend=backend, twins=twins)
        self._buf = None  # the momentum buffers, made when a group first has momentum
        if any(g["momentum"] != 0.0 for g in self.param_groups):
            self._buf = self._k.new_state(self._reg.n)
        self._placeholder = self._k.new_state(1)  # the kernels' b without momentum: never touched
        self._initialized = [False] * len(self._reg.sizes)

    momentum = _option("momentum")
    dampening = _option("dampening")
    weight_decay = _option("weight_decay")
    nesterov = _option("nesterov")
    maximize = _option("maximize")

    def _check_options(self, group: dict, name) -> dict:
        e = self._ENTRY
        # stored as given, like torch; the kernels take their binary32 values
        h = {"momentum": _given(group["momentum"], checks.real32(e, name("momentum"),
                                                                 group["momentum"], low=0.0)),
             "dampening": _given(group["dampening"], checks.real32(e, name("dampening"),
                                                                   group["dampening"])),
             "weight_decay": _given(group["weight_decay"], checks.real32(
                 e, name("weight_decay"), group["weight_decay"], low=0.0)),
             "nesterov": checks.switch(e, name("nesterov"), group["nesterov"]),
             "maximize": checks.switch(e, name("maximize"), group["maximize"])}
        if h["nesterov"] and (h["momentum"] <= 0.0 or h["dampening"] != 0.0):
            refuse(e, name("nesterov"), "needs momentum > 0 and dampening = 0 (as in torch)",
                   value=True)
        return h

    def _scalars(self, h: dict, lr: float, t: int, name=str):
        s = spec.SGDHyper.of(lr, h["momentum"], h["dampening"], h["weight_decay"], h["nesterov"],
                             h["maximize"]).scalars()
        _scalars_finite(self._ENTRY, name("dampening"), s)
        return s

    def _state_key(self, i: int):
        return self._initialized[i]

    def _update(self, p, g, run, s, read, write_back) -> None:
        k, i, j = run
        off = self._reg.offsets
        lo, hi = int(off[i]), int(off[j])
        if s.use_momentum and self._buf is None:  # a group's momentum was switched on
            self._buf = self._k.new_state(self._reg.n)
        buf = self._buf[lo:hi] if s.use_momentum else self._placeholder
        args = (s.lr, s.momentum, s.one_minus_dampening, s.weight_decay, s.use_momentum,
                s.use_decay, s.nesterov, s.maximize)
        if self._twins is None:
            self._k.sgd(_part(p, off, i, j), _part(g, off, i, j), buf,
                        np.bool_(not self._initialized[i]), *map(_f32or_bool, args),
                        **_read(read, write_back))
            return
        self._k.sgd_twins(_part(p, off, i, j), _part(g, off, i, j), buf, *self._twins.args(i, j),
                          np.bool_(not self._initialized[i]), *map(_f32or_bool, args),
                          **_read(read, write_back))
        self._twins.written(i, j)

    def _stepped(self, work) -> None:
        for (k, i, j), _, s in work:
            if s.use_momentum:
                self._initialized[i:j] = [True] * (j - i)

    def _state_arrays(self) -> dict:
        return {} if self._buf is None else {"momentum_buffer": self._buf}

    def _state_flags(self) -> dict:
        return {"momentum_buffer_initialized": list(self._initialized)}

    def _set_flags(self, flags: dict) -> None:
        self._initialized = list(flags["momentum_buffer_initialized"])


class Adam(_Optimizer):
    """Adam with torch.optim.Adam's options and defaults (coupled weight decay).

    Update (contracts/optim.md): m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*(g*g);
    p = p - (lr/(1-b1^t)) * (m / (sqrt(v)/sqrt(1-b2^t) + eps)); weight decay
    adds wd*p to g first. Each operation is one float32 rounding. t is each
    parameter's own step count (a frozen parameter's does not advance). `params`
    may be torch's list of dicts, each group setting any of lr, betas, eps,
    weight_decay, maximize and lr_schedule.

    Reproducibility: the same bits on every backend and thread count
    (numeric_mode="identical"); 1-b1, 1-b2, lr/(1-b1^t), sqrt(1-b2^t) are the
    float32 nearest their exact values, never float pow.

    >>> import numpy as np, mojolike
    >>> w = np.float32([1.0])
    >>> mojolike.Adam(w, lr=0.01, backend="oracle").step(np.float32([3.0])); w
    array([0.99], dtype=float32)
    """

    _ENTRY = "mojolike.Adam"
    _DECOUPLED = False
    _GROUP_OPTIONS = ("lr", "betas", "eps", "weight_decay", "maximize", "lr_schedule")

    @entry_point(torch=TORCH_OPTIONS)
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=None, *,
                 maximize=False, decoupled_weight_decay=None, lr_schedule=None, accumulation_steps=1,
                 numeric_mode=None, backend=None, twins=None, entry, **unknown):
        e = entry
        if decoupled_weight_decay is not None:  # torch's Adam(decoupled_weight_decay=True) is AdamW
            decoupled = checks.switch(e, "decoupled_weight_decay", decoupled_weight_decay)
            if self._DECOUPLED and not decoupled:
                refuse(e, "decoupled_weight_decay", "contradicts AdamW; use mojolike.Adam", value=False)
            self._DECOUPLED = decoupled
        if weight_decay is None:  # torch's defaults: Adam 0, AdamW 0.01
            weight_decay = 0.01 if type(self)._DECOUPLED else 0.0
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "maximize": maximize, "lr_schedule": lr_schedule}
        super().__init__(params, defaults, accumulation_steps=accumulation_steps,
                         numeric_mode=numeric_mode, backend=backend, twins=twins)
        self._m = self._k.new_state(self._reg.n)
        self._v = self._k.new_state(self._reg.n)

    betas = _option("betas")
    eps = _option("eps")
    weight_decay = _option("weight_decay")
    maximize = _option("maximize")

    def _check_options(self, group: dict, name) -> dict:
        e = self._ENTRY
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            refuse(e, name("betas"), "must be a pair (beta1, beta2)", value=betas)
        return {"betas": tuple(_given(b, checks.real32(e, f"{name('betas')}[{i}]", b, low=0.0,
                                                       high=1.0, high_open=True, what="in [0, 1)"))
                               for i, b in enumerate(betas)),
                "eps": _given(group["eps"], checks.real32(e, name("eps"), group["eps"], low=0.0)),
                "weight_decay": _given(group["weight_decay"], checks.real32(
                    e, name("weight_decay"), group["weight_decay"], low=0.0)),
                "maximize": checks.switch(e, name("maximize"), group["maximize"])}

    def _scalars(self, h: dict, lr: float, t: int, name=str):
        s = spec.AdamHyper.of(lr, h["betas"], h["eps"], h["weight_decay"], self._DECOUPLED,
                              h["maximize"]).scalars(t)
        _scalars_finite(self._ENTRY, name("lr, betas and weight_decay"), s)
        return s

    def _update(self, p, g, run, s, read, write_back) -> None:
        k, i, j = run
        off = self._reg.offsets
        lo, hi = int(off[i]), int(off[j])
        scalars = map(_f32or_bool, (
            s.beta1, s.beta2, s.eps, s.weight_decay, s.one_minus_beta1, s.one_minus_beta2,
            s.step_size, s.sqrt_bc2, s.param_decay, s.coupled, s.decoupled, s.maximize))
        if self._twins is None:
            self._k.adam(_part(p, off, i, j), _part(g, off, i, j), self._m[lo:hi], self._v[lo:hi],
                         *scalars, **_read(read, write_back))
            return
        self._k.adam_twins(_part(p, off, i, j), _part(g, off, i, j), self._m[lo:hi],
                           self._v[lo:hi], *self._twins.args(i, j), *scalars,
                           **_read(read, write_back))
        self._twins.written(i, j)

    def _state_arrays(self) -> dict:
        return {"exp_avg": self._m, "exp_avg_sq": self._v}


class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay p = p * (1 - lr*wd) before the moments
    (torch.optim.AdamW's defaults: weight_decay=0.01).

    Reproducibility: as Adam; 1 - lr*wd is the float32 nearest its exact value.

    >>> import numpy as np, mojolike
    >>> w = np.float32([1.0])
    >>> mojolike.AdamW(w, lr=0.5, weight_decay=0.5, backend="oracle").step(np.float32([0.0])); w
    array([0.75], dtype=float32)
    """

    _ENTRY = "mojolike.AdamW"
    _DECOUPLED = True
