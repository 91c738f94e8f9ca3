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

import itertools
import math

import numpy as np

from . import checks, registry
from ._optim_grads import CLIP_EPS, accumulate_grads, check_tokens
from ._optim_state import check_state_dict
from ._params import Registry, as_list, part
from .oracles import optim as spec
from .oracles.fold import split_is_exact
from .refusals import Refusal, refuse

_TORCH_OFF = {"amsgrad": "AMSGrad is not part of contracts/optim.md",
              "foreach": "mojolike runs one certified algorithm (contracts/optim.md); drop the option",
              "fused": "mojolike runs one certified algorithm (contracts/optim.md); drop the option",
              "capturable": "mojolike runs one certified algorithm (contracts/optim.md); drop the option",
              "differentiable": "there is no autograd in mojolike; drop the option"}
_COMMON = ("lr_schedule", "accumulation_steps", "numeric_mode", "backend")
_STEP_HINTS = {"closure": "is torch's way to re-evaluate the loss inside step; mojolike takes the "
                          "gradients as an argument: compute the loss and gradients first, then call "
                          "step(grads)"}


def _refuse_torch_options(entry: str, given: dict) -> dict:
    """Refuse torch options this library does not honor, unless they are None or False."""
    rest = {}
    for name, value in given.items():
        if name not in _TORCH_OFF:
            rest[name] = value
        elif value is not None and checks.switch(entry, name, value):
            refuse(entry, name, f"is not covered: {_TORCH_OFF[name]}", value=value)
    return rest


def _given(value, checked: float):
    """A checked hyperparameter as the caller gave it (torch keeps the given value too); the
    host scalars round it to binary32 again, which gives `checked`."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else checked


def _scalars_finite(entry: str, what: str, s) -> None:
    """Refuse host scalars that overflow binary32 (e.g. lr / (1 - beta1) above 3.4e38)."""
    for name, v in vars(s).items():
        if isinstance(v, float) and not math.isfinite(v):
            refuse(entry, what, f"make the host scalar {name} = {v} in float32; the hyperparameters "
                                f"must keep every host scalar finite")


class _Optimizer:
    """What SGD, Adam and AdamW share: the registry, the clip, steps, state, residency."""

    _ENTRY = "mojolike.optimizer"
    _OPTIONS: tuple[str, ...] = ()

    def __init__(self, params, *, lr, lr_schedule=None, accumulation_steps=1, numeric_mode=None,
                 backend=None):
        e = self._ENTRY
        self.lr = _given(lr, checks.real32(e, "lr", lr, low=0.0))  # as given, like torch
        if lr_schedule is not None and not callable(getattr(lr_schedule, "lr_at", None)):
            refuse(e, "lr_schedule", "needs a one-based lr_at(t) method")
        self.lr_schedule = lr_schedule
        steps = checks.integer(e, "accumulation_steps", accumulation_steps, low=1)
        if steps & (steps - 1):
            refuse(e, "accumulation_steps", "must be a power of two >= 1", value=steps)
        self.accumulation_steps = steps
        self._scalars(self.lr, 1)  # every host scalar of the first step must be finite
        self._k = registry.kernels(e, "optim", backend, numeric_mode)
        self.backend, self.numeric_mode = self._k.backend, self._k.numeric_mode
        self._reg = Registry(e, params, pieces=getattr(self._k, "takes_pieces", False))
        self.t = 0
        self.total_norm_ = None
        self.clip_coef_ = None
        self.lr_ = None
        self.aligned_ = None
        self._device_params = None

    @property
    def packed_(self) -> bool:
        """True when each step copies the parameters into a flat buffer and back (separate
        arrays on a backend whose kernels take flat arrays only), False when the kernels
        update the caller's arrays where they lie."""
        return self._reg.packed

    # -- the step ----------------------------------------------------------------------------
    def step(self, grads, max_norm=None, **unknown):
        """One optimizer step with `grads` (matching the parameters in count, shape and order).

        With `max_norm`, the global-norm clip scales the caller's gradients in place
        first and the pre-clip total norm is returned; otherwise returns None.
        """
        e = self._ENTRY
        registry.check_fp_state(e, self.numeric_mode)
        checks.keywords(f"{e}.step", unknown, ("grads", "max_norm"), _STEP_HINTS)
        self._reg.check_unchanged()
        m = None if max_norm is None else checks.real32(e, "max_norm", max_norm, low=0.0)
        g, gathered = self._reg.grads(grads, writable=m is not None)
        t = self.t + 1
        lr = self.lr if self.lr_schedule is None else self._scheduled_lr(t)
        s = self._scalars(lr, t)
        total = coef = None
        if m is not None:
            total, coef = self._k.clip_coef(self._k.segment_sumsq(g, self._reg.offsets),
                                            np.float32(m), CLIP_EPS)
            # a finite sum of squares also proves every gradient finite: no separate check
            if not math.isfinite(float(total)):
                refuse(e, "grads", f"hold inf or NaN, or squares that overflow: the total norm is "
                                   f"{float(total)}; nothing was scaled or stepped")
        elif self.numeric_mode == registry.CONTRACT_MODE and not self._k.all_finite(g):
            refuse(e, "grads", "hold inf or NaN; in numeric_mode='identical' a non-finite gradient "
                               "is refused before anything is written")
        # nothing has been written up to here: every refusal above leaves buffers and attributes
        scaled = m is not None and coef != 1.0  # g * 1 is g: skip the scaling
        fused = scaled and getattr(self._k, "takes_pieces", False)
        if scaled and not fused:
            self._k.scale(g, coef)  # kernels of flat arrays only scale in a pass of their own
        p = self._params_for_kernel()
        self._update(p, g, s, coef if fused else None)  # fused: the step's pass scales g first
        if scaled:
            self._reg.scatter_grads(gathered)
        self._params_done()
        self.t = t
        self.lr_ = lr
        self.total_norm_ = None if total is None else float(total)
        self.clip_coef_ = None if coef is None else float(coef)
        return self.total_norm_

    def _scheduled_lr(self, t: int) -> float:
        return checks.real32(self._ENTRY, f"lr_schedule.lr_at({t})", self.lr_schedule.lr_at(t), low=0.0)

    def _params_for_kernel(self):
        if self._device_params is not None:
            return self._device_params
        self._reg.gather()
        return self._reg.tensors

    def _params_done(self) -> None:
        if self._device_params is None:
            self._reg.scatter()

    def step_accumulated(self, microbatch_grads, tokens, max_norm=None, **unknown):
        """Sum `accumulation_steps` microbatch gradients (accumulate_grads), then step."""
        e = self._ENTRY
        checks.keywords(f"{e}.step_accumulated", unknown, ("microbatch_grads", "tokens", "max_norm"),
                        _STEP_HINTS)
        if not isinstance(microbatch_grads, (list, tuple)) or \
                len(microbatch_grads) != self.accumulation_steps:
            count = len(microbatch_grads) if isinstance(microbatch_grads, (list, tuple)) else None
            refuse(e, "microbatch_grads", f"must be a list of accumulation_steps="
                                          f"{self.accumulation_steps} gradients, got "
                                          f"{count if count is not None else type(microbatch_grads).__name__}")
        aligned = split_is_exact(check_tokens(e, tokens, self.accumulation_steps))
        try:
            summed = accumulate_grads(microbatch_grads, tokens, backend=self.backend,
                                      numeric_mode=self.numeric_mode)
        except Refusal as r:  # a bad microbatch, refused under this entry point's name
            raise r.at(e) from None
        total = self.step(summed, max_norm=max_norm)
        self.aligned_ = aligned  # only once the step went through
        return total

    def zero_grad(self, grads, **unknown) -> None:
        """Write +0.0 into every gradient (every buffer is checked before the first is written)."""
        e = f"{self._ENTRY}.zero_grad"
        checks.keywords(e, unknown, ("grads",), {
            "set_to_none": "is torch's way to drop .grad tensors; mojolike's gradients are the "
                           "caller's arrays: zero them (this call) or let them go"})
        items, _ = as_list(e, "grads", grads)
        views = [checks.as_f32(e, f"grads[{i}]", g, writable=True) for i, g in enumerate(items)]
        for v in views:
            v[...] = np.float32(0.0)

    # -- residency (cuda) ---------------------------------------------------------------------
    def params_to_device(self) -> None:
        """Keep the parameters on the GPU between steps (cuda only) until params_to_host()."""
        if not getattr(self._k, "device_resident", False):
            refuse(self._ENTRY, "params_to_device", f"needs the cuda backend in this process; "
                                                    f"this optimizer runs on {self.backend}")
        if self._device_params is None:
            from numba import cuda
            self._reg.gather()
            self._device_params = cuda.to_device(self._reg.flat)

    def params_to_host(self) -> None:
        """Copy device-resident parameters back into the caller's arrays."""
        if self._device_params is not None:
            self._device_params.copy_to_host(self._reg.flat)
            self._reg.scatter()
            self._device_params = None

    # -- state --------------------------------------------------------------------------------
    def _host(self, a) -> np.ndarray:
        return a if isinstance(a, np.ndarray) else a.copy_to_host()

    def _state_arrays(self) -> dict:
        raise NotImplementedError

    def _state_flags(self) -> dict:
        return {}

    def state_dict(self) -> dict:
        """t, the per-tensor state (copies) and the optimizer's kind."""
        d = {"kind": type(self).__name__, "t": self.t}
        for name, flat in self._state_arrays().items():
            d[name] = [a.copy() for a in self._reg.split(self._host(flat))]
        d.update(self._state_flags())
        return d

    def load_state_dict(self, state, **unknown) -> None:
        """Check `state` whole (kind, t, every array's dtype, shape and values), then copy it in."""
        e = f"{self._ENTRY}.load_state_dict"
        checks.keywords(e, unknown, ("state",))
        arrays, flags = self._state_arrays(), self._state_flags()
        t, staged, staged_flags = check_state_dict(e, state, type(self).__name__, list(arrays),
                                                   list(flags), self._reg.shapes)
        for name, values in staged.items():
            self._set_state(name, values)
        self._set_flags(staged_flags)
        self.t = t

    def _set_flags(self, flags: dict) -> None:
        pass

    def _set_state(self, name: str, values: np.ndarray) -> None:
        current = self._state_arrays()[name]
        if isinstance(current, np.ndarray):
            current[...] = values
        else:
            current.copy_to_device(values)


class SGD(_Optimizer):
    """Stochastic gradient descent with torch.optim.SGD's options and defaults.

    Update (contracts/optim.md): g = -g if maximize; g = g + wd*p; with momentum
    b = g on the first step, then b = b*mu + (1-dampening)*g; g = g + mu*b
    (nesterov) or g = b; p = p - lr*g. Each operation is one float32 rounding.

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
    _OPTIONS = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize") + _COMMON

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 *, maximize=False, lr_schedule=None, accumulation_steps=1, numeric_mode=None,
                 backend=None, **unknown):
        e = self._ENTRY
        unknown = _refuse_torch_options(e, unknown)
        checks.keywords(e, unknown, self._OPTIONS)
        # stored as given, like torch; the kernels take their binary32 values
        self.momentum = _given(momentum, checks.real32(e, "momentum", momentum, low=0.0))
        self.dampening = _given(dampening, checks.real32(e, "dampening", dampening))
        self.weight_decay = _given(weight_decay, checks.real32(e, "weight_decay", weight_decay,
                                                               low=0.0))
        self.nesterov = checks.switch(e, "nesterov", nesterov)
        self.maximize = checks.switch(e, "maximize", maximize)
        if self.nesterov and (self.momentum <= 0.0 or self.dampening != 0.0):
            refuse(e, "nesterov", "needs momentum > 0 and dampening = 0 (as in torch)", value=True)
        super().__init__(params, lr=lr, lr_schedule=lr_schedule, accumulation_steps=accumulation_steps,
                         numeric_mode=numeric_mode, backend=backend)
        self._buf = self._k.new_state(self._reg.n) if self.momentum != 0.0 else None
        self._placeholder = self._k.new_state(1)  # the kernels' b without momentum: never touched
        self._initialized = [False] * len(self._reg.sizes)

    def _scalars(self, lr: float, t: int):
        s = spec.SGDHyper.of(lr, self.momentum, self.dampening, self.weight_decay, self.nesterov,
                             self.maximize).scalars()
        _scalars_finite(self._ENTRY, "dampening", s)
        return s

    def _update(self, p, g, s, scale) -> None:
        b = self._buf
        args = (s.lr, s.momentum, s.one_minus_dampening, s.weight_decay, s.use_momentum, s.use_decay,
                s.nesterov, s.maximize)
        off = self._reg.offsets
        # tensors whose momentum buffer is (not yet) initialized run as one stretch each
        i = 0
        for initialized, run in itertools.groupby(self._initialized):
            j = i + len(list(run))
            lo, hi = int(off[i]), int(off[j])
            buf = self._placeholder if b is None else b[lo:hi]
            self._k.sgd(part(p, off, i, j), part(g, off, i, j), buf, np.bool_(not initialized),
                        *map(_f32or_bool, args), **_scaled(scale))
            i = j
        if self._buf is not None:
            self._initialized = [True] * len(self._initialized)

    def _state_arrays(self) -> dict:
        return {} if self._buf is None else {"momentum_buffer": self._buf}

    def _state_flags(self) -> dict:
        return {"momentum_buffer_initialized": list(self._initialized)}

    def _set_flags(self, flags: dict) -> None:
        self._initialized = list(flags["momentum_buffer_initialized"])


def _scaled(scale) -> dict:
    """The clip's coefficient for kernels that scale g within the step (takes_pieces)."""
    return {} if scale is None else {"grad_scale": np.float32(scale)}


def _f32or_bool(x):
    # host scalars are binary32 values, so the conversion is exact (FTZ is refused before a step)
    return np.bool_(x) if isinstance(x, bool) else np.float32(x)


class Adam(_Optimizer):
    """Adam with torch.optim.Adam's options and defaults (coupled weight decay).

    Update (contracts/optim.md): m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*(g*g);
    p = p - (lr/(1-b1^t)) * (m / (sqrt(v)/sqrt(1-b2^t) + eps)); weight decay
    adds wd*p to g first. Each operation is one float32 rounding.

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
    _OPTIONS = ("lr", "betas", "eps", "weight_decay", "maximize", "decoupled_weight_decay") + _COMMON

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=None, *,
                 maximize=False, decoupled_weight_decay=None, lr_schedule=None, accumulation_steps=1,
                 numeric_mode=None, backend=None, **unknown):
        e = self._ENTRY
        if decoupled_weight_decay is not None:  # torch's Adam(decoupled_weight_decay=True) is AdamW
            decoupled = checks.switch(e, "decoupled_weight_decay", decoupled_weight_decay)
            if self._DECOUPLED and not decoupled:
                refuse(e, "decoupled_weight_decay", "contradicts AdamW; use mojolike.Adam", value=False)
            self._DECOUPLED = decoupled
        unknown = _refuse_torch_options(e, unknown)
        checks.keywords(e, unknown, self._OPTIONS)
        if weight_decay is None:  # torch's defaults: Adam 0, AdamW 0.01
            weight_decay = 0.01 if type(self)._DECOUPLED else 0.0
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            refuse(e, "betas", "must be a pair (beta1, beta2)", value=betas)
        self.betas = tuple(_given(b, checks.real32(e, f"betas[{i}]", b, low=0.0, high=1.0,
                                                   high_open=True, what="in [0, 1)"))
                           for i, b in enumerate(betas))
        self.eps = _given(eps, checks.real32(e, "eps", eps, low=0.0))
        self.weight_decay = _given(weight_decay, checks.real32(e, "weight_decay", weight_decay,
                                                               low=0.0))
        self.maximize = checks.switch(e, "maximize", maximize)
        super().__init__(params, lr=lr, lr_schedule=lr_schedule, accumulation_steps=accumulation_steps,
                         numeric_mode=numeric_mode, backend=backend)
        self._m = self._k.new_state(self._reg.n)
        self._v = self._k.new_state(self._reg.n)

    def _scalars(self, lr: float, t: int):
        s = spec.AdamHyper.of(lr, self.betas, self.eps, self.weight_decay, self._DECOUPLED,
                              self.maximize).scalars(t)
        _scalars_finite(self._ENTRY, "lr, betas and weight_decay", s)
        return s

    def _update(self, p, g, s, scale) -> None:
        self._k.adam(p, g, self._m, self._v, *map(_f32or_bool, (
            s.beta1, s.beta2, s.eps, s.weight_decay, s.one_minus_beta1, s.one_minus_beta2,
            s.step_size, s.sqrt_bc2, s.param_decay, s.coupled, s.decoupled, s.maximize)),
            **_scaled(scale))

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
