"""SGD, Adam and AdamW that are `torch.optim.Optimizer`s and step on mojolike's kernels.

They take what torch's take (`model.parameters()`, or param-group dicts), with torch's
constructor signatures and defaults; `step(closure=None)` reads each parameter's `.grad`
and updates the parameters where they lie: the kernels (mojolike.optim, one fused
identical-mode pass per run of tensors) write the tensors' own memory through zero-copy
numpy views and read each gradient where it lies (on cpu-numba and cpu-cffi through its data
pointer, its fields checked on the tensor; elsewhere through a numpy view), and the state
tensors (`exp_avg`, `exp_avg_sq`, `momentum_buffer`) are views of the kernels' state
buffers. A parameter whose `.grad` is None is frozen (no step, no
state), as in torch. `state_dict()` / `load_state_dict()` use torch's layout (a
per-parameter float32 `step` tensor, the moment tensors, `param_groups`), so `torch.save`
and `torch.load` work and a state moves into `torch.optim.AdamW` and back. torch's
`lr_scheduler` classes drive `param_groups[k]["lr"]`, and a mojolike schedule can be given
as `lr_schedule=` (its lr_at(t) wins over the group's lr).

How a Python float lr becomes the host scalar: the lr (and betas, eps, weight_decay,
momentum, dampening) are each rounded to the nearest binary32 value (ties to even,
`oracles.f32.round_float`), and the host scalars the kernels take (lr / (1 - beta1^t),
sqrt(1 - beta2^t), 1 - lr*wd, ...) are the binary32 values nearest their exact values in
those binary32 hyperparameters, as mojolike.Adam / AdamW / SGD compute them. torch
computes its host scalars in binary64, so torch's trajectory agrees with this one within
rounding, not bit for bit.

Covered: CPU, contiguous torch.float32 parameters and gradients. Refused by name: CUDA
tensors (until the GPU path exists), float64, float16/bfloat16, non-contiguous or sparse
tensors, a tensor lr, amsgrad=True, foreach/fused/capturable/differentiable=True, a
parameter rebound (`p.data = ...`) or resized after construction (make a new optimizer;
load_state_dict carries the state over), and add_param_group after construction.

Reproducibility: the same bits as mojolike.AdamW (etc.) stepping the same buffers with
the same gradients, on every backend and thread count (numeric_mode="identical"). torch's
own backward is not certified: its gradients may differ between thread counts, and then
so do the parameters (run the loop under mojolike.torch.certified for certified gradients).

>>> import torch, mojolike.torch.optim as mo
>>> w = torch.nn.Parameter(torch.ones(2))
>>> opt = mo.AdamW([w], lr=0.1, weight_decay=0.0, backend="oracle")
>>> w.grad = torch.tensor([1.0, -1.0])
>>> opt.step()
>>> w.detach()
tensor([0.9000, 1.1000])
>>> sorted(opt.state_dict()["state"][0])
['exp_avg', 'exp_avg_sq', 'step']
"""
from __future__ import annotations

import functools

import numpy as np
import torch
from torch.optim import optimizer as _torch_optimizer

from ..core.refusals import Refusal, refuse
from ..optim import optimizers as _mo
from ..optim.params import Vouched
from . import checks

__all__ = ["SGD", "Adam", "AdamW"]



def _torch_hooks(body):
    """body wrapped as torch.optim.Optimizer wraps a subclass's step: the global and then
    the optimizer's pre-hooks (a hook may return new (args, kwargs)), the step, the
    profiler's `_optimizer_step_code` entry, the optimizer's and then the global
    post-hooks; args hold the optimizer first, as torch passes them. Marked `hooked`, so
    torch's __init__ leaves it as it is. It enters torch's `Optimizer.step#<class>.step`
    record_function only while torch's profiler records: entering it unconditionally cost
    0.18-0.24 ms of a 200-tensor step, whose kernels have just pushed the dispatcher's state
    out of the caches (AMD Zen 4)."""
    @functools.wraps(body)
    def step(*args, **kwargs):
        self = args[0]
        if torch._C._autograd._profiler_enabled():
            with torch.autograd.profiler.record_function(
                    f"Optimizer.step#{type(self).__name__}.step"):
                return _run_hooked(self, body, args, kwargs)
        return _run_hooked(self, body, args, kwargs)

    step.hooked = True
    return step


def _run_hooked(self, body, args: tuple, kwargs: dict):
    for hook in (*_torch_optimizer._global_optimizer_pre_hooks.values(),
                 *self._optimizer_step_pre_hooks.values()):
        result = hook(self, args, kwargs)
        if result is not None:
            if not (isinstance(result, tuple) and len(result) == 2):
                raise RuntimeError(f"an optimizer step pre-hook returned {result!r}; it must "
                                   f"return None or a tuple (new_args, new_kwargs)")
            args, kwargs = result
    out = body(*args, **kwargs)
    self._optimizer_step_code()
    for hook in (*self._optimizer_step_post_hooks.values(),
                 *_torch_optimizer._global_optimizer_post_hooks.values()):
        hook(self, args, kwargs)
    return out


class _TorchOptimizer(torch.optim.Optimizer):
    """What the three share: the inner mojolike optimizer over views of the tensors, the
    step (closure, gradients, group options), the state tensors and their loading."""

    _ENTRY = "mojolike.torch.optim"
    _INNER: type = None
    _OPTIONS: tuple[str, ...] = ()  # the group options the inner optimizer takes
    _FLAGS: tuple[str, ...] = ()  # the torch switches checked at their honoured values
    _STATE: tuple[str, ...] = ()  # the state tensors of one stepped parameter

    def __init__(self, params, defaults: dict, *, lr_schedule=None, backend=None,
                 numeric_mode=None):
        e = self._ENTRY
        self._inner = None
        checks.flags(e, {k: defaults[k] for k in self._FLAGS})
        if isinstance(params, torch.Tensor):
            refuse(e, "params", "is one tensor; pass an iterable of tensors "
                                "(model.parameters()) or param-group dicts, as torch does")
        super().__init__(params, defaults)
        self._params = [p for g in self.param_groups for p in g["params"]]
        views = []
        for i, p in enumerate(self._params):
            views.append(checks.tensor_view(e, f"params[{i}]", p))
        self._bound = [(p.data_ptr(), p.shape) for p in self._params]
        groups, k0 = [], 0
        for k, g in enumerate(self.param_groups):
            n = len(g["params"])
            options = self._options(k, g)
            groups.append({"params": views[k0:k0 + n], **options, "lr_schedule": lr_schedule})
            k0 += n
        try:
            self._inner = self._INNER(groups, backend=backend, numeric_mode=numeric_mode)
        except Refusal as r:
            raise r.at(e) from None
        self.backend, self.numeric_mode = self._inner.backend, self._inner.numeric_mode
        self._views = {}  # parameter index -> its state tensors (views of the inner buffers)
        # every parameter's step count as float32, and 0-d tensor views of its elements
        self._step_array = np.zeros(len(self._params), np.float32)
        whole = torch.from_numpy(self._step_array)
        self._step_tensors = [whole[i] for i in range(len(self._params))]

    # -- groups -----------------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_inner", None) is not None:
            refuse(self._ENTRY, "add_param_group", "after construction is not covered: the "
                                                   "kernels' state buffers are laid out once; "
                                                   "make a new optimizer with every group")
        super().add_param_group(param_group)

    def _options(self, k: int, g: dict) -> dict:
        """Group k's options as the inner optimizer takes them; torch's switches checked."""
        e = self._ENTRY
        name = f"param_groups[{k}]" if len(self.param_groups) > 1 else None
        label = (lambda key: f"{name}.{key}") if name else (lambda key: key)
        checks.flags(e, {key: g.get(key) for key in self._FLAGS})
        checks.host_float(e, label("lr"), g["lr"])
        for key in self._OPTIONS:
            checks.host_float(e, label(key), g[key])
        return {key: g[key] for key in self._OPTIONS}

    # -- the step ---------------------------------------------------------------------------
    @_torch_hooks
    def step(self, closure=None):
        """One step with each parameter's .grad (None: frozen); returns closure's loss.

        closure, as in torch: called under torch.enable_grad() before the step reads the
        gradients; its return value is returned. The step hooks registered with torch
        (`register_step_pre_hook`, `register_optimizer_step_pre_hook`, ...) run around it.
        """
        e = self._ENTRY
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = self._prepare(e, read_only=True)
        if grads is None:
            return loss  # torch steps nothing when no parameter has a gradient
        try:
            self._inner._step(grads)
        except Refusal as r:
            raise r.at(e) from None
        self._finish(grads)
        return loss

    def _prepare(self, e: str, *, read_only: bool = False):
        """Each parameter's gradient as a view (None: frozen), every parameter checked still
        bound to the memory registered, and the groups' options handed to the inner
        optimizer; None when no parameter has a gradient. read_only (a step that only reads
        the gradients, on a backend whose kernels take pieces): the gradients as
        `params.Vouched`, their fields read off the tensors without a view of each."""
        params = [p for g in self.param_groups for p in g["params"]]
        if len(params) != len(self._params) or any(a is not b for a, b in zip(params,
                                                                               self._params)):
            refuse(e, "param_groups", "changed which tensors it holds; a group's options may "
                                      "change between steps, its params may not")
        vouched = None
        if read_only and self._inner._reg.takes_vouched:
            vouched = checks.bound_grad_addresses(e, params, self._bound)
        if vouched is not None:
            grads = Vouched(*vouched)
            if not any(grads.present):
                return None
        else:
            grads = checks.bound_grads(e, params, self._bound)
            if all(g is None for g in grads):
                return None
        for k, (g, ig) in enumerate(zip(self.param_groups, self._inner.param_groups)):
            ig.update(self._options(k, g))
            ig["lr"] = g["lr"]
        return grads

    def _finish(self, grads) -> None:
        """After a step with grads (as _prepare gave them): the state tensors of the
        parameters stepped, and their autograd version counters bumped (torch's in-place
        updates bump them too)."""
        present = grads.present if isinstance(grads, Vouched) else [g is not None for g in grads]
        if "step" in self._STATE:  # one numpy write for every parameter's step tensor
            self._step_array[:] = self._inner._steps
        every = all(present)
        indices = range(len(present)) if every else [i for i, x in enumerate(present) if x]
        if len(self._views) < len(self._params):  # some parameter has no state tensors yet
            self._expose(i for i in indices if i not in self._views)
        stepped = self._params if every else [self._params[i] for i in indices]
        torch.autograd.graph.increment_version(stepped)

    # -- state ------------------------------------------------------------------------------
    def _buffers(self) -> dict:
        """The inner optimizer's flat state buffers, by torch's state names."""
        raise NotImplementedError

    def _has_state(self, i: int) -> bool:
        return self._inner._steps[i] > 0

    def _expose(self, indices) -> None:
        """self.state[p] for the parameters given that have state: views of the inner
        buffers, and `step`, a float32 0-d view of one array that each step rewrites whole
        (torch keeps `step` as a float32 0-d tensor); made once per parameter."""
        off = self._inner._reg.offsets
        for i in indices:
            if not self._has_state(i):
                continue
            p = self._params[i]
            lo, hi = int(off[i]), int(off[i + 1])
            st = {name: torch.from_numpy(buf[lo:hi]).view(p.shape)
                  for name, buf in self._buffers().items()}
            if "step" in self._STATE:
                st = {"step": self._step_tensors[i], **st}
            self._views[i] = st
            self.state[p] = st

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's load (its checks, the groups' options) after checking every state tensor's
        names, shape and dtype and every group's options; the values are then copied into the
        kernels' buffers (nothing is written when a check refuses)."""
        e = f"{self._ENTRY}.load_state_dict"
        if not isinstance(state_dict, dict) or "state" not in state_dict or \
                "param_groups" not in state_dict:
            refuse(e, "state_dict", "must be a dict with 'state' and 'param_groups' (torch's "
                                    "layout)")
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups) or any(
                len(s["params"]) != len(g["params"]) for s, g in zip(saved_groups,
                                                                      self.param_groups)):
            refuse(e, "param_groups", "has a different number of groups or of parameters per "
                                      "group than this optimizer")
        index = {pid: i for i, pid in enumerate(x for s in saved_groups for x in s["params"])}
        for k, s in enumerate(saved_groups):
            merged = {**self.param_groups[k], **{key: v for key, v in s.items() if key != "params"}}
            try:
                self._options(k, {**self.defaults, **merged})
                self._inner._check_group(k, {**merged, "lr_schedule": None})
            except Refusal as r:
                raise r.at(e) from None
        staged = {}
        for pid, st in state_dict["state"].items():
            if pid not in index:
                refuse(e, f"state[{pid!r}]", "names no parameter of param_groups")
            i = index[pid]
            p = self._params[i]
            missing = [n for n in self._STATE if n not in st]
            extra = sorted(str(n) for n in st if n not in self._STATE)
            if missing or extra:
                refuse(e, f"state[{pid!r}]", f"has keys {sorted(map(str, st))}; "
                                             f"{type(self).__name__} keeps {list(self._STATE)} "
                                             f"(amsgrad's max_exp_avg_sq is not covered)")
            vals = {}
            for n in self._STATE:
                v = st[n]
                if n == "step":
                    v = float(v.item() if isinstance(v, torch.Tensor) else v)
                    if not v.is_integer() or v < 1:
                        refuse(e, f"state[{pid!r}].step", "must be a whole number >= 1",
                               value=v)
                    vals[n] = int(v)
                    continue
                if not isinstance(v, torch.Tensor) or tuple(v.shape) != tuple(p.shape):
                    refuse(e, f"state[{pid!r}].{n}", f"must be a tensor of shape "
                                                     f"{tuple(p.shape)}")
                if v.dtype != torch.float32 or v.device.type != "cpu":
                    refuse(e, f"state[{pid!r}].{n}", f"is {v.dtype} on {v.device}; float32 on "
                                                     f"the CPU is covered")
                vals[n] = v.detach().reshape(-1).numpy()
            staged[i] = vals
        super().load_state_dict(state_dict)  # torch's groups (and its own state, replaced below)
        self._load(staged)
        self.state.clear()
        self._views.clear()
        self._step_array[:] = getattr(self._inner, "_steps", 0)
        self._expose(range(len(self._params)))

    def _load(self, staged: dict) -> None:
        inner, off = self._inner, self._inner._reg.offsets
        bufs = self._buffers()
        for i in range(len(self._params)):
            lo, hi = int(off[i]), int(off[i + 1])
            vals = staged.get(i)
            for name, buf in bufs.items():
                buf[lo:hi] = 0.0 if vals is None else vals[name]
            inner._steps[i] = 0 if vals is None else vals.get("step", 1)
        inner.t = max(inner._steps)

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{super().__repr__()}"


class SGD(_TorchOptimizer):
    """torch.optim.SGD's signature and defaults, stepping on mojolike.SGD's kernels.

    State: `momentum_buffer` (a view of the kernels' buffer) once a parameter has taken a
    step with momentum != 0, as in torch. See the module docstring for what is covered and
    how the hyperparameters become binary32 host scalars.

    Reproducibility: the bits of mojolike.SGD on the same buffers, on every backend and
    thread count.

    >>> import torch, mojolike.torch.optim as mo
    >>> w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    >>> opt = mo.SGD([w], lr=0.5, momentum=0.9, backend="oracle")
    >>> for _ in range(2):
    ...     w.grad = torch.ones(2); opt.step()
    >>> w.detach()
    tensor([-0.4500,  0.5500])
    """

    _ENTRY = "mojolike.torch.optim.SGD"
    _INNER = _mo.SGD
    _OPTIONS = ("momentum", "dampening", "weight_decay", "nesterov", "maximize")
    _FLAGS = ("foreach", "differentiable", "fused")
    _STATE = ("momentum_buffer",)

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None, lr_schedule=None, backend=None, numeric_mode=None):
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                        "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
                        "foreach": foreach, "differentiable": differentiable, "fused": fused}
        super().__init__(params, defaults, lr_schedule=lr_schedule, backend=backend,
                         numeric_mode=numeric_mode)

    def _buffers(self) -> dict:
        if self._inner._buf is None:
            self._inner._buf = self._inner._k.new_state(self._inner._reg.n)
        return {"momentum_buffer": self._inner._buf}

    def _has_state(self, i: int) -> bool:
        return self._inner._initialized[i]

    def _load(self, staged: dict) -> None:
        inner, off = self._inner, self._inner._reg.offsets
        buf = self._buffers()["momentum_buffer"]
        for i in range(len(self._params)):
            lo, hi = int(off[i]), int(off[i + 1])
            vals = staged.get(i)
            buf[lo:hi] = 0.0 if vals is None else vals["momentum_buffer"]
            inner._initialized[i] = vals is not None


class Adam(_TorchOptimizer):
    """torch.optim.Adam's signature and defaults, stepping on mojolike.Adam's kernels
    (decoupled_weight_decay=True: mojolike.AdamW's).

    State: `step` (a float32 0-d tensor, as torch keeps it), `exp_avg`, `exp_avg_sq` (views
    of the kernels' buffers) once a parameter has taken a step. See the module docstring.

    Reproducibility: the bits of mojolike.Adam on the same buffers, on every backend and
    thread count.

    >>> import torch, mojolike.torch.optim as mo
    >>> w = torch.nn.Parameter(torch.tensor([1.0]))
    >>> opt = mo.Adam([w], lr=0.01, backend="oracle")
    >>> w.grad = torch.tensor([3.0]); opt.step(); w.detach()
    tensor([0.9900])
    """

    _ENTRY = "mojolike.torch.optim.Adam"
    _INNER = _mo.Adam
    _OPTIONS = ("betas", "eps", "weight_decay", "maximize")
    _FLAGS = ("amsgrad", "foreach", "capturable", "differentiable", "fused")
    _STATE = ("step", "exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False,
                 lr_schedule=None, backend=None, numeric_mode=None):
        if decoupled_weight_decay is not False and type(self) is Adam:
            if not isinstance(decoupled_weight_decay, bool):
                refuse(self._ENTRY, "decoupled_weight_decay", "must be True or False",
                       value=decoupled_weight_decay)
            self._INNER = _mo.AdamW
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad,
                        "foreach": foreach, "maximize": maximize, "capturable": capturable,
                        "differentiable": differentiable, "fused": fused,
                        "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults, lr_schedule=lr_schedule, backend=backend,
                         numeric_mode=numeric_mode)

    def _options(self, k: int, g: dict) -> dict:
        options = super()._options(k, g)
        dwd = g.get("decoupled_weight_decay", self._INNER is _mo.AdamW)
        if bool(dwd) != (self._INNER is _mo.AdamW):
            refuse(self._ENTRY, "decoupled_weight_decay", "cannot change after construction "
                                                          "(Adam and AdamW are different "
                                                          "kernels' modes); make a new "
                                                          "optimizer", value=dwd)
        return options

    def _buffers(self) -> dict:
        return {"exp_avg": self._inner._m, "exp_avg_sq": self._inner._v}


class AdamW(Adam):
    """torch.optim.AdamW's signature and defaults (weight_decay=0.01), stepping on
    mojolike.AdamW's kernels (decoupled weight decay p = p * (1 - lr*wd)).

    Reproducibility: the bits of mojolike.AdamW on the same buffers, on every backend and
    thread count.

    >>> import torch, mojolike.torch.optim as mo
    >>> w = torch.nn.Parameter(torch.tensor([1.0]))
    >>> opt = mo.AdamW([w], lr=0.5, weight_decay=0.5, backend="oracle")
    >>> w.grad = torch.tensor([0.0]); opt.step(); w.detach()
    tensor([0.7500])
    """

    _ENTRY = "mojolike.torch.optim.AdamW"
    _INNER = _mo.AdamW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None, lr_schedule=None, backend=None,
                 numeric_mode=None):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad,
                        "foreach": foreach, "maximize": maximize, "capturable": capturable,
                        "differentiable": differentiable, "fused": fused, "decoupled_weight_decay": True}
        _TorchOptimizer.__init__(self, params, defaults, lr_schedule=lr_schedule,
                                 backend=backend, numeric_mode=numeric_mode)
