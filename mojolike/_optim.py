"""SGD, Adam and AdamW with torch's names and defaults, over float32 buffers updated in place.

The arithmetic is `mojolike.oracles.optim` (contracts/optim.md); every backend
gives its bits. Gradients are an argument: there is no autograd.

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

from . import registry
from ._params import Registry, as_list
from .buffers import as_f32
from .oracles import codec, f32
from .oracles import optim as spec
from .oracles.fold import pairwise, split_is_exact, sumsq
from .refusals import Refusal, refuse, refuse_unknown_keywords

CLIP_EPS = np.float32(spec.CLIP_EPS)
_TORCH_OFF = {"amsgrad": False, "foreach": None, "fused": None, "capturable": False,
              "differentiable": False}
_COMMON = ("lr_schedule", "accumulation_steps", "numeric_mode", "backend")


def _refuse_torch_options(entry: str, given: dict) -> dict:
    """Refuse torch options this library does not honor, unless they are passed switched off."""
    rest = {}
    for name, value in given.items():
        if name in _TORCH_OFF:
            if value not in (None, False):
                refuse(entry, f"{name}={value!r}", "is not covered: mojolike runs one certified "
                       "algorithm (contracts/optim.md); drop the option" if name != "amsgrad" else
                       "is not covered: AMSGrad is not part of contracts/optim.md")
        else:
            rest[name] = value
    return rest


def _finite_at_least(entry: str, name: str, value, low: float = 0.0) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        refuse(entry, name, f"must be a real number, got {value!r}")
    if not math.isfinite(v) or v < low:
        refuse(entry, f"{name}={value!r}", f"must be finite and >= {low}")
    return v


def _check_beta(entry: str, name: str, value) -> float:
    v = _finite_at_least(entry, name, value)
    if not v < 1.0:
        refuse(entry, f"{name}={value!r}", "must be in [0, 1)")
    return v


def _float(x) -> float:
    return float(np.float32(x))


class _Optimizer:
    """What SGD, Adam and AdamW share: the registry, the clip, steps, state, residency."""

    _ENTRY = "mojolike.optimizer"
    _OPTIONS: tuple[str, ...] = ()

    def __init__(self, params, *, lr, lr_schedule=None, accumulation_steps=1, numeric_mode=None,
                 backend=None):
        e = self._ENTRY
        self.lr = _finite_at_least(e, "lr", lr)
        if lr_schedule is not None and not callable(getattr(lr_schedule, "lr_at", None)):
            refuse(e, "lr_schedule", "needs a one-based lr_at(t) method")
        self.lr_schedule = lr_schedule
        steps = accumulation_steps
        if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1 \
                or steps & (steps - 1):
            refuse(e, f"accumulation_steps={steps!r}", "must be a power of two >= 1")
        self.accumulation_steps = int(steps)
        self._k = registry.kernels(e, "optim", backend, numeric_mode)
        self.backend, self.numeric_mode = self._k.backend, self._k.numeric_mode
        self._reg = Registry(e, params)
        self.t = 0
        self.total_norm_ = None
        self.clip_coef_ = None
        self.lr_ = None
        self.aligned_ = None
        self._device_params = None

    @property
    def packed_(self) -> bool:
        """True when the parameters were copied into a flat buffer, False when borrowed."""
        return self._reg.packed

    # -- the step ----------------------------------------------------------------------------
    def step(self, grads, max_norm=None):
        """One optimizer step with `grads` (matching the parameters in count, shape and order).

        With `max_norm`, the global-norm clip scales the caller's gradients in place
        first and the pre-clip total norm is returned; otherwise returns None.
        """
        e = self._ENTRY
        registry.check_fp_state(e, self.numeric_mode)
        self._reg.check_unchanged()
        g, gathered = self._reg.grads(grads, writable=max_norm is not None)
        total = coef = None
        if max_norm is not None:
            m = _finite_at_least(e, "max_norm", max_norm)
            total, coef = self._k.clip_coef(self._k.segment_sumsq(g, self._reg.offsets),
                                            np.float32(m), CLIP_EPS)
            # a finite sum of squares also proves every gradient finite: no separate check
            if not math.isfinite(float(total)):
                refuse(e, "grads", f"hold inf or NaN, or squares that overflow: the total norm is "
                                   f"{float(total)}; nothing was scaled or stepped")
        elif self.numeric_mode == registry.CONTRACT_MODE and not self._k.all_finite(g):
            refuse(e, "grads", "hold inf or NaN; in numeric_mode='identical' a non-finite gradient "
                               "is refused before anything is written")
        lr = self.lr if self.lr_schedule is None else self._scheduled_lr(self.t + 1)
        # nothing has been written up to here: every refusal above leaves the caller's buffers alone
        if max_norm is not None:
            if coef != 1.0:  # g * 1 is g: skip the pass
                self._k.scale(g, coef)
                self._reg.scatter_grads(gathered)
            self.total_norm_, self.clip_coef_ = float(total), float(coef)
        else:
            self.total_norm_ = self.clip_coef_ = None
        self.t += 1
        self.lr_ = _float(lr)
        p = self._params_for_kernel()
        self._update(p, g, self.t, lr)
        self._params_done()
        return None if total is None else float(total)

    def _scheduled_lr(self, t: int) -> float:
        return _finite_at_least(self._ENTRY, f"lr_schedule.lr_at({t})", self.lr_schedule.lr_at(t))

    def _params_for_kernel(self):
        if self._device_params is not None:
            return self._device_params
        self._reg.gather()
        return self._reg.flat

    def _params_done(self) -> None:
        if self._device_params is None:
            self._reg.scatter()

    def step_accumulated(self, microbatch_grads, tokens, max_norm=None):
        """Sum `accumulation_steps` microbatch gradients (accumulate_grads), then step."""
        if len(microbatch_grads) != self.accumulation_steps:
            refuse(self._ENTRY, "microbatch_grads", f"has {len(microbatch_grads)} entries but "
                   f"accumulation_steps={self.accumulation_steps}")
        summed = accumulate_grads(microbatch_grads, tokens, backend=self.backend,
                                  numeric_mode=self.numeric_mode)
        self.aligned_ = accumulation_is_aligned(tokens, self.accumulation_steps)
        return self.step(summed, max_norm=max_norm)

    def zero_grad(self, grads) -> None:
        """Write +0.0 into every gradient."""
        items, _ = as_list(self._ENTRY, "grads", grads)
        views = [as_f32(self._ENTRY, "grads", g, writable=True) for g in items]
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

    def state_dict(self) -> dict:
        """t, the per-tensor state (copies) and the optimizer's kind."""
        d = {"kind": type(self).__name__, "t": self.t}
        for name, flat in self._state_arrays().items():
            d[name] = [a.copy() for a in self._reg.split(self._host(flat))]
        return d

    def load_state_dict(self, state: dict) -> None:
        """Validate sizes and dtypes, then copy `state` into this optimizer."""
        e = f"{self._ENTRY}.load_state_dict"
        if state.get("kind") != type(self).__name__:
            refuse(e, "kind", f"is {state.get('kind')!r}; this is a {type(self).__name__}")
        t = state.get("t")
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t < 0:
            refuse(e, "t", f"must be an integer >= 0, got {t!r}")
        arrays = self._state_arrays()
        staged = {}
        for name in arrays:
            items = state.get(name)
            if not isinstance(items, (list, tuple)) or len(items) != len(self._reg.shapes):
                refuse(e, name, f"must be a list of {len(self._reg.shapes)} arrays")
            for i, (a, shape) in enumerate(zip(items, self._reg.shapes)):
                a = np.asarray(a)
                if a.dtype != np.float32 or a.shape != shape:
                    refuse(e, f"{name}[{i}]", f"has dtype {a.dtype} shape {a.shape}; expected float32 "
                                              f"{shape}")
            staged[name] = np.concatenate([np.asarray(a).reshape(-1) for a in items])
        self._load_extra(e, state)
        for name, flat in arrays.items():
            self._set_state(name, staged[name])
        self.t = int(t)

    def _load_extra(self, entry: str, state: dict) -> None:
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
        refuse_unknown_keywords(e, unknown, self._OPTIONS)
        self.momentum = _finite_at_least(e, "momentum", momentum)
        self.dampening = _finite_at_least(e, "dampening", dampening, low=-math.inf)
        self.weight_decay = _finite_at_least(e, "weight_decay", weight_decay)
        if nesterov and (self.momentum <= 0.0 or self.dampening != 0.0):
            refuse(e, "nesterov=True", "needs momentum > 0 and dampening = 0 (as in torch)")
        self.nesterov, self.maximize = bool(nesterov), bool(maximize)
        super().__init__(params, lr=lr, lr_schedule=lr_schedule, accumulation_steps=accumulation_steps,
                         numeric_mode=numeric_mode, backend=backend)
        self._buf = self._k.new_state(self._reg.n) if self.momentum != 0.0 else None
        self._placeholder = self._k.new_state(1)  # the kernels' b without momentum: never touched
        self._initialized = [False] * len(self._reg.sizes)

    def _update(self, p, g, t: int, lr: float) -> None:
        s = spec.SGDHyper.of(lr, self.momentum, self.dampening, self.weight_decay, self.nesterov,
                             self.maximize).scalars()
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
            self._k.sgd(p[lo:hi], g[lo:hi], buf, np.bool_(not initialized), *map(_f32or_bool, args))
            i = j
        if self._buf is not None:
            self._initialized = [True] * len(self._initialized)

    def _state_arrays(self) -> dict:
        return {} if self._buf is None else {"momentum_buffer": self._buf}

    def state_dict(self) -> dict:
        d = super().state_dict()
        d["momentum_buffer_initialized"] = list(self._initialized)
        return d

    def _load_extra(self, entry: str, state: dict) -> None:
        flags = state.get("momentum_buffer_initialized")
        if not isinstance(flags, (list, tuple)) or len(flags) != len(self._initialized):
            refuse(entry, "momentum_buffer_initialized", f"must be a list of {len(self._initialized)} "
                                                         f"booleans")
        self._initialized = [bool(f) for f in flags]


def _f32or_bool(x):
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
            if self._DECOUPLED and not decoupled_weight_decay:
                refuse(e, "decoupled_weight_decay=False", "contradicts AdamW; use mojolike.Adam")
            self._DECOUPLED = bool(decoupled_weight_decay)
        unknown = _refuse_torch_options(e, unknown)
        refuse_unknown_keywords(e, unknown, self._OPTIONS)
        if weight_decay is None:  # torch's defaults: Adam 0, AdamW 0.01
            weight_decay = 0.01 if type(self)._DECOUPLED else 0.0
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            refuse(e, f"betas={betas!r}", "must be a pair (beta1, beta2)")
        self.betas = (_check_beta(e, "betas[0]", betas[0]), _check_beta(e, "betas[1]", betas[1]))
        self.eps = _finite_at_least(e, "eps", eps)
        self.weight_decay = _finite_at_least(e, "weight_decay", weight_decay)
        self.maximize = bool(maximize)
        super().__init__(params, lr=lr, lr_schedule=lr_schedule, accumulation_steps=accumulation_steps,
                         numeric_mode=numeric_mode, backend=backend)
        self._m = self._k.new_state(self._reg.n)
        self._v = self._k.new_state(self._reg.n)

    def _update(self, p, g, t: int, lr: float) -> None:
        s = spec.AdamHyper.of(lr, self.betas, self.eps, self.weight_decay, self._DECOUPLED,
                              self.maximize).scalars(t)
        self._k.adam(p, g, self._m, self._v, *map(_f32or_bool, (
            s.beta1, s.beta2, s.eps, s.weight_decay, s.one_minus_beta1, s.one_minus_beta2,
            s.step_size, s.sqrt_bc2, s.param_decay, s.coupled, s.decoupled, s.maximize)))

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


def clip_grad_norm_(grads, max_norm, norm_type=2.0, error_if_nonfinite=True, numeric_mode=None,
                    backend=None, **unknown) -> float:
    """Scale `grads` in place so their global 2-norm is at most `max_norm`; return the total norm.

    norm_j = sqrt(sumsq(g_j)) per tensor, total = sqrt(fold([norm_j*norm_j])),
    coef = min(max_norm / (total + 1e-6), 1), g = g*coef (torch's clip_grad_norm_).

    Reproducibility: every sum is the fold tree over tensors in list order; the
    same bits on every backend (numeric_mode="identical").

    >>> import numpy as np, mojolike
    >>> g = [np.float32([3.0]), np.float32([4.0])]
    >>> mojolike.clip_grad_norm_(g, 1.0, backend="oracle"), g[0]
    (5.0, array([0.5999999], dtype=float32))
    """
    e = "mojolike.clip_grad_norm_"
    refuse_unknown_keywords(e, unknown, ("grads", "max_norm", "norm_type", "error_if_nonfinite",
                                         "numeric_mode", "backend"))
    if float(norm_type) != 2.0:
        refuse(e, f"norm_type={norm_type!r}", "is not covered; only the 2-norm is certified")
    if error_if_nonfinite is not True:
        refuse(e, f"error_if_nonfinite={error_if_nonfinite!r}", "is not covered: a non-finite total "
               "norm is always an error, raised before any gradient is scaled")
    m = _finite_at_least(e, "max_norm", max_norm)
    k = registry.kernels(e, "optim", backend, numeric_mode)
    reg = Registry(e, grads)  # the gradients are the registry here: borrowed or packed
    reg.gather()
    total, coef = k.clip_coef(k.segment_sumsq(reg.flat, reg.offsets), np.float32(m), CLIP_EPS)
    if not math.isfinite(float(total)):
        refuse(e, "grads", f"have a non-finite total norm ({float(total)}); nothing was scaled")
    if coef != 1.0:
        k.scale(reg.flat, coef)
        reg.scatter()
    return float(total)


def accumulate_grads(microbatch_grads, tokens, *, numeric_mode=None, backend=None):
    """The elementwise sum of microbatch gradients by the pairwise tree, in ascending order.

    Each entry is one buffer or a list of buffers (all with one structure); the
    result has that structure, in new float32 arrays. `tokens` (one positive count
    per microbatch) is validated; see `accumulation_is_aligned` for when the split
    gives the unsplit gradient's bits.

    Reproducibility: level by level, (g0+g1), (g2+g3), ...; an odd last entry is
    carried up; every backend gives the same bits.

    >>> import numpy as np, mojolike
    >>> mojolike.accumulate_grads([np.float32([1]), np.float32([2]), np.float32([4])], [8, 8, 8],
    ...                           backend="oracle")
    array([7.], dtype=float32)
    """
    e = "mojolike.accumulate_grads"
    if not isinstance(microbatch_grads, (list, tuple)) or not microbatch_grads:
        refuse(e, "microbatch_grads", "must be a non-empty list of gradients, one per microbatch")
    _check_tokens(e, tokens, len(microbatch_grads))
    k = registry.kernels(e, "optim", backend, numeric_mode)
    regs = []
    for i, entry in enumerate(microbatch_grads):
        items, listed = as_list(e, "microbatch_grads", entry)
        views = [as_f32(e, f"microbatch_grads[{i}]", g) for g in items]
        shapes = [np.asarray(g).shape for g in items]
        if regs and (shapes, listed) != regs[0][1:]:
            refuse(e, f"microbatch_grads[{i}]", "does not have the structure of microbatch_grads[0] "
                                                "(count and shapes)")
        regs.append((views, shapes, listed))
    def add(a, b):
        out = np.empty_like(a)
        k.add(a, b, out)
        return out

    flat = pairwise([np.concatenate(v) if len(v) > 1 else v[0] for v, _, _ in regs], add)
    if len(regs) == 1:
        flat = flat.copy()  # the result is new memory, never the caller's buffer
    _, shapes, listed = regs[0]
    sizes = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    parts = [flat[a:b].reshape(s) for a, b, s in zip(sizes[:-1], sizes[1:], shapes)]
    return parts if listed else parts[0]


def _check_tokens(entry: str, tokens, count: int) -> list[int]:
    if not isinstance(tokens, (list, tuple)) or len(tokens) != count or any(
            not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t < 1 for t in tokens):
        refuse(entry, "tokens", f"must be {count} positive integers, one per microbatch; got {tokens!r}")
    return [int(t) for t in tokens]


def accumulation_is_aligned(tokens, accumulation_steps) -> bool:
    """True exactly when splitting a fold-sum over tokens into microbatches of these token
    counts, each folded on its own and summed by `accumulate_grads`, gives the unsplit
    sum's bits for every input.

    The two addition trees are compared up to operand order (contracts/optim.md): for
    example equal microbatches of m tokens are aligned when m/1024 is a power of two
    (each is a whole subtree of the unsplit chunk tree), and not when m is 3072 or 1000.

    >>> accumulation_is_aligned([2048] * 4, 4), accumulation_is_aligned([3072] * 2, 2)
    (True, False)
    """
    steps = int(accumulation_steps)
    return split_is_exact(_check_tokens("mojolike.accumulation_is_aligned", tokens, steps))


def save_state(path, state: dict) -> None:
    """Write a state_dict to an .npz file (no pickle)."""
    arrays = {"kind": np.str_(state["kind"]), "t": np.int64(state["t"])}
    for name, value in state.items():
        if name in ("kind", "t"):
            continue
        if name.endswith("_initialized"):
            arrays[name] = np.asarray(value, dtype=np.bool_)
        else:
            arrays[f"{name}.count"] = np.int64(len(value))
            for i, a in enumerate(value):
                arrays[f"{name}.{i}"] = np.asarray(a, dtype=np.float32)
    np.savez(path, **arrays)


def load_state(path) -> dict:
    """Read a state_dict written by save_state (allow_pickle=False)."""
    with np.load(path, allow_pickle=False) as z:
        state = {"kind": str(z["kind"]), "t": int(z["t"])}
        for key in z.files:
            if key.endswith(".count"):
                name = key[:-len(".count")]
                state[name] = [z[f"{name}.{i}"] for i in range(int(z[key]))]
            elif key.endswith("_initialized"):
                state[key] = [bool(b) for b in z[key]]
    return state


class OracleOptim:
    """The oracle as optimizer kernels: numpy buffers updated in place from exact per-element steps."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    WRITES = {"sgd": (0, 2), "adam": (0, 2, 3), "scale": (0,), "add": (2,)}

    @staticmethod
    def new_state(n: int):
        return np.zeros(n, np.float32)

    def sgd(self, p, g, b, first, lr, momentum, omd, wd, use_m, use_d, nesterov, maximize):
        h = codec.decode_scalar
        s = spec.SGDScalars(h(lr), h(momentum), h(omd), h(wd), bool(use_m), bool(use_d),
                            bool(nesterov), bool(maximize))
        bs = codec.decode(b) if use_m else [0.0] * p.size  # without momentum b is a placeholder
        out = [spec.sgd_elem(x, y, z, bool(first), s)
               for x, y, z in zip(codec.decode(p), codec.decode(g), bs)]
        codec.store(p, [o[0] for o in out])
        if use_m:
            codec.store(b, [o[1] for o in out])

    def adam(self, p, g, m, v, *a):
        s = spec.AdamScalars(*map(codec.decode_scalar, a[:9]), *map(bool, a[9:]))
        out = [spec.adam_elem(w, x, y, z, s) for w, x, y, z in zip(
            codec.decode(p), codec.decode(g), codec.decode(m), codec.decode(v))]
        for i, arr in enumerate((p, m, v)):
            codec.store(arr, [o[i] for o in out])

    def scale(self, g, coef):
        c = codec.decode_scalar(coef)
        codec.store(g, [f32.mul(x, c) for x in codec.decode(g)])

    def add(self, a, b, out):
        codec.store(out, [f32.add(x, y) for x, y in zip(codec.decode(a), codec.decode(b))])

    def all_finite(self, x) -> bool:
        return all(math.isfinite(v) for v in codec.decode(x))

    def segment_sumsq(self, x, offsets):
        return codec.encode([sumsq(codec.decode(x[lo:hi])) for lo, hi in zip(offsets[:-1], offsets[1:])])

    def clip_coef(self, sumsqs, max_norm, eps):
        total, coef = spec.clip_coef(codec.decode(sumsqs), codec.decode_scalar(max_norm))
        return codec.scalar(total), codec.scalar(coef)


def oracle_kernels(mode: str, backend: str = "oracle") -> OracleOptim:
    return OracleOptim()


__all__ = ["SGD", "Adam", "AdamW", "clip_grad_norm_", "accumulate_grads", "accumulation_is_aligned",
           "save_state", "load_state", "Refusal"]
