"""What SGD, Adam and AdamW share: construction from params or groups, the step (gate,
grad_scale, clip, frozen parameters, runs handed to the kernels), state and residency.

Every hyperparameter is checked at construction and again at each step (param_groups
is writable), every host scalar checked finite, and the gradients checked, before
anything is written: a refused step leaves every buffer and attribute as it was.

Reproducibility: the per-element arithmetic is the kernels' (contracts/optim.md); how
the tensors are cut into runs never reaches the bits (the step kernels are elementwise).

>>> import numpy as np
>>> _gate("demo", np.array([1.0], np.float32)), _gate("demo", False)
(True, False)
"""
from __future__ import annotations

import math

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point
from ..core.pieces import part
from ..core.refusals import Refusal, refuse
from ..oracles import f32
from ..oracles.fold import split_is_exact
from . import groups as groups_
from .grads import CLIP_EPS, accumulate_grads, check_tokens
from .params import Registry, as_list
from .state import check_state_dict
from .twins import Twins

# the torch options the constructors refuse unless given as None or False (core.entry.TORCH)
TORCH_OPTIONS = ("amsgrad", "foreach", "fused", "capturable", "differentiable")


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


def _option(name: str) -> property:
    """An option as an attribute: the only group's in the plain form (opt.lr = x takes effect at
    the next step, checked then), the defaults' when the optimizer was given groups."""
    def where(self) -> dict:
        return self.defaults if self._listed_groups else self.param_groups[0]

    return property(lambda self: where(self)[name],
                    lambda self, value: where(self).__setitem__(name, value))


class _Optimizer:
    """What SGD, Adam and AdamW share: groups, the registry, the clip, steps, state, residency."""

    _ENTRY = "mojolike.optimizer"
    _GROUP_OPTIONS: tuple[str, ...] = ()  # what a param group may set, besides "params"

    def __init__(self, params, defaults: dict, *, accumulation_steps=1, numeric_mode=None,
                 backend=None, twins=None):
        e = self._ENTRY
        groups, self._listed_groups = groups_.build(e, params, defaults, self._GROUP_OPTIONS)
        # every group checked (and its first step's host scalars finite) before anything else
        checked = [self._check_group(k, g) for k, g in enumerate(groups)]
        for g, c in zip(groups, checked):
            g.update((key, c[key]) for key in self._GROUP_OPTIONS)
        self.defaults = dict(checked[0] if not self._listed_groups else self._check_group(
            None, {"params": [], **defaults}))
        steps = checks.integer(e, "accumulation_steps", accumulation_steps, low=1)
        if steps & (steps - 1):
            refuse(e, "accumulation_steps", "must be a power of two >= 1", value=steps)
        self.accumulation_steps = steps
        self._k = registry.kernels(e, "optim", backend, numeric_mode)
        self.backend, self.numeric_mode = self._k.backend, self._k.numeric_mode
        self._reg = Registry(e, groups_.flat_params(params, groups, self._listed_groups),
                             pieces=self._k.takes_pieces)
        self.param_groups = groups
        self._group_ids = [[id(p) for p in g["params"]] for g in groups]
        self._group_of = [k for k, g in enumerate(groups) for _ in g["params"]] \
            if self._listed_groups else [0] * len(self._reg.sizes)
        self._steps = [0] * len(self._reg.sizes)  # per tensor: the steps it has taken
        self.t = 0
        self.total_norm_ = None
        self.clip_coef_ = None
        self.lr_ = None
        self.aligned_ = None
        self._device_params = None
        self._twins = None if twins is None else Twins(e, twins, self._reg, self._k)
        if self._twins is not None and not self._twins.kinds.any():
            self._twins = None  # every entry None: nothing to keep
        self._refresh_twins()

    def _check_group(self, k, group: dict) -> dict:
        """Group k's options checked (k None: the defaults), as given, plus their first step's
        host scalars checked finite; refusals name the option ('lr', or 'param_groups[1].lr')."""
        name = groups_.option_name(k, self._listed_groups and k is not None)
        e = self._ENTRY
        h = {"lr": _given(group["lr"], checks.real32(e, name("lr"), group["lr"], low=0.0))}
        sched = group.get("lr_schedule")
        if sched is not None and not callable(getattr(sched, "lr_at", None)):
            refuse(e, name("lr_schedule"), "needs a one-based lr_at(t) method")
        h["lr_schedule"] = sched
        h.update(self._check_options(group, name))
        self._scalars(h, h["lr"], 1, name)  # every host scalar of a first step must be finite
        return h

    def _check_options(self, group: dict, name) -> dict:
        raise NotImplementedError

    lr = _option("lr")
    lr_schedule = _option("lr_schedule")

    @property
    def packed_(self) -> bool:
        """True when each step copies the parameters into a flat buffer and back (separate
        arrays on a backend whose kernels take flat arrays only), False when the kernels
        update the caller's arrays where they lie."""
        return self._reg.packed

    # -- the step ----------------------------------------------------------------------------
    @entry_point(torch=("closure",))
    def step(self, grads, max_norm=None, *, grad_scale=None, clip="inplace", update_gate=True,
             **unknown):
        """One optimizer step with `grads` (matching the parameters in count, shape and order;
        None for a parameter that takes no step: a frozen one).

        max_norm: the global-norm clip over the gradients present; returns the total norm
        (else None). clip="inplace" scales the caller's gradients first (torch's
        clip_grad_norm_ then step); clip="fold" leaves them as they are and folds the
        coefficient into the step's read of each gradient (llm.c's grad_scale).
        grad_scale: every gradient is read as g * grad_scale (one float32 multiply, before
        weight decay joins); the buffers are left unchanged. With max_norm it needs
        clip="fold", and the total norm is the raw gradients' norm times grad_scale.
        update_gate: False (a bool, or a 0-d / 1-element array holding 0 or False) skips
        the step: nothing is read or written and t does not advance.
        """
        return self._step(grads, max_norm, grad_scale, clip, update_gate)

    def _step(self, grads, max_norm=None, grad_scale=None, clip="inplace", update_gate=True,
              sumsqs=None):
        """The step; `sumsqs` (each present gradient's sum of squares, from a pass the caller
        made: mojolike.GradScaler) spares the norm pass and vouches that the gradients are finite.
        grads may be `params.Vouched` where the registry `takes_vouched` (mojolike.torch.optim)."""
        e = self._ENTRY
        registry.check_fp_state(e, self.numeric_mode)
        self._reg.check_unchanged()
        clip = checks.choice(e, "clip", clip, ("inplace", "fold"))
        m = None if max_norm is None else checks.real32(e, "max_norm", max_norm, low=0.0)
        # at most 1, so a gradient checked finite stays finite once scaled
        s = None if grad_scale is None else checks.real32(e, "grad_scale", grad_scale, low=0.0,
                                                          high=1.0, what="in [0, 1]")
        if s is not None and m is not None and clip == "inplace":
            refuse(e, "grad_scale", "with max_norm needs clip='fold': the in-place clip would "
                                    "scale gradients that grad_scale says are not yet scaled",
                   value=grad_scale)
        gate = _gate(e, update_gate)
        in_place = m is not None and clip == "inplace"
        g, gathered, present = self._reg.grads(grads, writable=in_place, frozen=True)
        if self._twins is not None:
            self._twins.check_apart(e, g, gathered, present, self._reg.split)
        hyper = self._groups_checked()
        if not gate:
            self._normalize_groups(hyper)
            return None
        t = self.t + 1
        keys = [(self._group_of[i], present[i], self._state_key(i)) for i in range(len(present))]
        work = []  # (run, host scalars): every scalar is checked before anything is written
        for k, i, j in groups_.runs(keys):
            h = hyper[k]
            lr = h["lr"] if h["lr_schedule"] is None else self._scheduled_lr(k, h, t)
            work.append(((k, i, j), lr, self._scalars(h, lr, self._steps[i] + 1,
                                                      groups_.option_name(k, self._listed_groups))))
        total = coef = None
        read = None if s is None else np.float32(s)
        if m is not None:
            total, coef = self._clip(g, present, m, s, sumsqs)
            if coef != 1.0:
                read = np.float32(coef) if s is None else np.float32(f32.mul(s, coef))
        elif sumsqs is None and self.numeric_mode == registry.CONTRACT_MODE and \
                not all(self._k.all_finite(x) for x in self._present_parts(g, present)):
            refuse(e, "grads", "hold inf or NaN; in numeric_mode='identical' a non-finite gradient "
                               "is refused before anything is written")
        # nothing has been written up to here: every refusal above leaves buffers and attributes
        write_back = in_place and read is not None
        p = self._params_for_kernel()
        for run, _, sc in work:
            self._update(p, g, run, sc, read, write_back)
        if write_back:
            self._reg.scatter_grads(gathered)
        self._params_done()
        for _, i, j in (w[0] for w in work):
            for x in range(i, j):
                self._steps[x] += 1
        self._stepped(work)
        self._normalize_groups(hyper)
        self.t = t
        self.lr_ = work[0][1] if work else None
        self.total_norm_ = None if total is None else float(total)
        self.clip_coef_ = None if coef is None else float(coef)
        return self.total_norm_

    def _present_parts(self, g, present):
        if all(present):  # every tensor: g itself (its address table made once)
            return [g]
        off = self._reg.offsets
        runs = groups_.present_runs(present)
        return [part(g, off, i, j) for i, j in runs]

    def _present_offsets(self, present):
        off = self._reg.offsets
        return [(i, j, off[i:j + 1] - off[i]) for i, j in groups_.present_runs(present)]

    def _clip(self, g, present, m: float, s, sumsqs):
        """(total norm, coefficient) over the gradients present, times s when given."""
        e = self._ENTRY
        if sumsqs is None:
            if all(present):
                sumsqs = self._k.segment_sumsq(g, self._reg.offsets)
            else:
                sumsqs = np.concatenate([np.asarray(self._k.segment_sumsq(part(g, self._reg.offsets,
                                                                              i, j), o))
                                         for i, j, o in self._present_offsets(present)])
        total, coef = self._k.clip_coef(sumsqs, np.float32(m), CLIP_EPS)
        if s is not None:  # the scaled gradients' norm, and the coefficient from it (the oracle's ops)
            total = f32.mul(float(total), s)
            coef = f32.div(f32.round_float(m), f32.add(total, float(CLIP_EPS)))
            coef = 1.0 if coef > 1.0 else coef
        # a finite sum of squares also proves every gradient finite: no separate check
        if not math.isfinite(float(total)):
            refuse(e, "grads", f"hold inf or NaN, or squares that overflow: the total norm is "
                               f"{float(total)}; nothing was scaled or stepped")
        return total, coef

    def _groups_checked(self) -> list[dict]:
        """Every group's options checked again (param_groups is writable between steps)."""
        out = []
        for k, g in enumerate(self.param_groups):
            ids = [id(p) for p in g.get("params", ())] if isinstance(g, dict) else None
            if k >= len(self._group_ids) or ids != self._group_ids[k] or \
                    len(self.param_groups) != len(self._group_ids):
                refuse(self._ENTRY, "param_groups", "changed which tensors it holds; a group's "
                                                    "options may change between steps, its params "
                                                    "may not: make a new optimizer")
            extra = sorted(str(key) for key in g if key != "params" and key not in
                           self._GROUP_OPTIONS)
            if extra:
                refuse(self._ENTRY, f"param_groups[{k}].{extra[0]}",
                       f"is not a group option; a group may set {', '.join(self._GROUP_OPTIONS)}")
            missing = [key for key in self._GROUP_OPTIONS if key not in g and key != "lr_schedule"]
            if missing:
                refuse(self._ENTRY, f"param_groups[{k}].{missing[0]}",
                       "is missing; a group's options may change between steps, not go away")
            out.append(self._check_group(k, g))
        return out

    def _normalize_groups(self, hyper: list[dict]) -> None:
        """Keep each group's options in the form the constructor stores (an edit between steps
        to numpy.float32(5e-4) becomes the Python float of that binary32 value, a list of betas
        a tuple), so state_dict stays plain data; called once the step can no longer be refused."""
        for g, h in zip(self.param_groups, hyper):
            g.update((key, h[key]) for key in self._GROUP_OPTIONS if key in g or h[key] is not None)

    def _state_key(self, i: int):
        return self._steps[i]

    def _stepped(self, work) -> None:
        pass

    def _scheduled_lr(self, k: int, h: dict, t: int) -> float:
        name = groups_.option_name(k, self._listed_groups)(f"lr_schedule.lr_at({t})")
        return checks.real32(self._ENTRY, name, h["lr_schedule"].lr_at(t), low=0.0)

    def _params_for_kernel(self):
        if self._device_params is not None:
            return self._device_params
        self._reg.gather()
        return self._reg.tensors

    def _params_done(self) -> None:
        if self._device_params is None:
            self._reg.scatter()

    @entry_point(torch=("closure",))
    def step_accumulated(self, microbatch_grads, tokens, max_norm=None, *, aligned=None,
                         **unknown):
        """Sum `accumulation_steps` microbatch gradients (accumulate_grads), then step.

        aligned: as accumulate_grads takes it (None: an unaligned split is refused in
        numeric_mode="identical"; False: accepted); `aligned_` then says whether it was.
        Its refusals name the optimizer (mojolike.SGD, ...), as the step's do.
        """
        e = self._ENTRY
        if not isinstance(microbatch_grads, (list, tuple)) or \
                len(microbatch_grads) != self.accumulation_steps:
            count = len(microbatch_grads) if isinstance(microbatch_grads, (list, tuple)) else None
            refuse(e, "microbatch_grads", f"must be a list of accumulation_steps="
                                          f"{self.accumulation_steps} gradients, got "
                                          f"{count if count is not None else type(microbatch_grads).__name__}")
        exact = split_is_exact(check_tokens(e, tokens, self.accumulation_steps))
        try:
            summed = accumulate_grads(microbatch_grads, tokens, aligned=aligned,
                                      backend=self.backend, numeric_mode=self.numeric_mode)
        except Refusal as r:  # a bad microbatch or split, refused under this entry point's name
            raise r.at(e) from None
        total = self.step(summed, max_norm=max_norm)
        self.aligned_ = exact  # only once the step went through
        return total

    @entry_point(torch=("set_to_none",))
    def zero_grad(self, grads, *, entry, **unknown) -> None:
        """Write +0.0 into every gradient (every buffer is checked before the first is written)."""
        e = entry
        items, _ = as_list(e, "grads", grads)
        views = [checks.as_f32(e, f"grads[{i}]", g, writable=True) for i, g in enumerate(items)]
        for v in views:
            v[...] = np.float32(0.0)

    # -- residency (cuda) ---------------------------------------------------------------------
    @entry_point()
    def params_to_device(self) -> None:
        """Keep the parameters on the GPU between steps (cuda only) until params_to_host()."""
        if not getattr(self._k, "device_resident", False):
            refuse(self._ENTRY, "params_to_device", f"needs the cuda backend in this process; "
                                                    f"this optimizer runs on {self.backend}")
        if self._device_params is None:
            from numba import cuda
            self._reg.gather()
            self._device_params = cuda.to_device(self._reg.flat)

    @entry_point()
    def params_to_host(self) -> None:
        """Copy device-resident parameters back into the caller's arrays."""
        if self._device_params is not None:
            self._device_params.copy_to_host(self._reg.flat)
            self._reg.scatter()
            self._device_params = None

    # -- cast twins (mojolike/optim/twins.py) --------------------------------------------------
    @entry_point()
    def refresh_twins(self) -> None:
        """Write every cast twin from its float32 master (mojolike.cast's rounding): after a
        change to the masters made outside the optimizer's steps. The constructor and
        load_state_dict do it too; steps keep the twins of the parameters they update.

        Reproducibility: each twin is mojolike.cast(master, its dtype) on this optimizer's
        backend and mode, the oracle's bits in numeric_mode="identical".

        >>> import numpy as np, mojolike
        >>> w, w16 = np.float32([1.0, 3.0]), np.zeros(2, np.float16)
        >>> opt = mojolike.SGD(w, lr=0.1, twins=[w16], backend="oracle")
        >>> w[...] = [65520.0, 2.0 ** -25]; opt.refresh_twins(); w16.tolist()
        [inf, 0.0]
        """
        self._refresh_twins()

    def _refresh_twins(self) -> None:
        if self._twins is None:
            return
        masters = self._reg.views if self._device_params is None else \
            [a.reshape(-1) for a in self._reg.split(self._device_params.copy_to_host())]
        self._twins.refresh(masters, self.backend, self.numeric_mode)

    # -- state --------------------------------------------------------------------------------
    def _host(self, a) -> np.ndarray:
        return a if isinstance(a, np.ndarray) else a.copy_to_host()

    def _state_arrays(self) -> dict:
        raise NotImplementedError

    def _state_flags(self) -> dict:
        return {}

    @entry_point()
    def state_dict(self) -> dict:
        """t, the per-tensor state (copies), each tensor's step count, the groups' options
        (without params and lr_schedule, as torch leaves schedulers out) and the kind."""
        d = {"kind": type(self).__name__, "t": self.t}
        for name, flat in self._state_arrays().items():
            d[name] = [a.copy() for a in self._reg.split(self._host(flat))]
        d.update(self._state_flags())
        d["steps"] = list(self._steps)
        d["param_groups"] = [{key: (list(v) if isinstance(v, tuple) else v)
                              for key, v in g.items() if key not in ("params", "lr_schedule")}
                             for g in self.param_groups]
        return d

    @entry_point()
    def load_state_dict(self, state, *, entry, **unknown) -> None:
        """Check `state` whole (kind, t, every array's dtype, shape and values), then copy it in."""
        e = entry
        arrays, flags = self._state_arrays(), self._state_flags()
        t, staged, staged_flags = check_state_dict(e, state, type(self).__name__, list(arrays),
                                                   list(flags), self._reg.shapes)
        saved = staged_flags.pop("param_groups", None)
        if saved is not None:
            if len(saved) != len(self.param_groups):
                refuse(e, "param_groups", f"has {len(saved)} group(s); this optimizer has "
                                          f"{len(self.param_groups)}")
            for k, (g, options) in enumerate(zip(self.param_groups, saved)):
                extra = sorted(set(options) - set(self._GROUP_OPTIONS))
                if extra:
                    refuse(e, f"param_groups[{k}].{extra[0]}", "is not a group option")
                self._check_group(k, {**g, **options})
        steps = staged_flags.pop("steps", [t] * len(self._steps))
        for name, values in staged.items():
            self._set_state(name, values)
        self._set_flags(staged_flags)
        if saved is not None:
            for g, options in zip(self.param_groups, saved):
                g.update({key: (tuple(v) if key == "betas" else v) for key, v in options.items()})
        self._steps = list(steps)
        self.t = t
        self._refresh_twins()  # twins are derived from the masters, never state

    def _set_flags(self, flags: dict) -> None:
        pass

    def _set_state(self, name: str, values: np.ndarray) -> None:
        current = self._state_arrays()[name]
        if isinstance(current, np.ndarray):
            current[...] = values
        else:
            current.copy_to_device(values)


def _part(x, offsets, i: int, j: int):
    """Tensors i .. j - 1 of x (core.pieces.part), or x itself when that is every tensor: the
    registry's pieces then keep their address table from step to step."""
    return x if i == 0 and j == len(offsets) - 1 else part(x, offsets, i, j)


def _read(read, write_back) -> dict:
    """The kernels' read scale (clip coefficient and/or grad_scale) and whether it is stored."""
    return {} if read is None else {"grad_scale": np.float32(read), "write_back": write_back}


def _gate(entry: str, gate) -> bool:
    """update_gate as a bool: a bool, or a 0-d / 1-element array of bool, integer or float
    holding 0/1 (False/True); a device array is read back (one element)."""
    if isinstance(gate, (bool, np.bool_)):
        return bool(gate)
    if hasattr(gate, "copy_to_host") and not isinstance(gate, np.ndarray):
        gate = gate.copy_to_host()
    if isinstance(gate, np.ndarray) and gate.size == 1 and gate.dtype.kind in "biuf":
        v = gate.reshape(-1)[0]
        if v == 0 or v == 1:
            return bool(v)
    refuse(entry, "update_gate", "must be True or False, or a 0-d or 1-element array holding "
                                 "0 or 1", value=gate)


def _f32or_bool(x):
    # host scalars are binary32 values, so the conversion is exact (FTZ is refused before a step)
    return np.bool_(x) if isinstance(x, bool) else np.float32(x)
