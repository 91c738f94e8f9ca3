"""The step suite's cases and how one runs: registries, steps, the optimizer and scaler a
case builds, injected overflows, and the outputs a card records (contracts/step.md;
the suite module is contracts/step.py).

Reproducibility: every input is drawn from the case id (casegen.draw), every step goes
through the public API, so a case's outputs are the backend's bits and nothing else.

>>> c = case("sgd-groups")
>>> c.id, len(c.steps) >= 2
('sgd-groups', True)
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

import mojolike

from .casegen import draw

# registries: tensor shapes in registry order. Small: under the simulator every norm and
# checksum pass costs about 0.2 s plus 0.1 s per tensor, a step's pass a few ms
FOUR = ((33,), (5, 3), (64,), (7,))
MIXED = ((200,), (31,), (4, 4), (3,))
THREE = ((33,), (5, 3), (7,))
PAIR = ((17,), (40,))
WIDE = ((1025,), (6,))  # a tensor over two fold chunks

HUGE = 3.0e38  # a parameter that one SGD step with lr 1 pushes to inf


@dataclass(frozen=True)
class Step:
    """One call of the step. gate: None (not passed), or (form, value) with form one of
    bool, numpy-bool, 0-d, 1-element; inject: (tensor, flat index, what) written into this
    step's gradients after the scaler scaled them ("inf", "nan", "overflow": two cells of
    2.5e38 whose sum overflows, or "huge": one cell of 1e30, whose square overflows even
    unscaled)."""

    frozen: tuple = ()
    max_norm: float | None = None
    grad_scale: float | None = None
    clip: str | None = None
    gate: tuple | None = None
    edit: tuple = ()  # (group, option, value) written into param_groups before the step
    inject: tuple = ()
    unscale: bool = False  # the scaler's unscale_ (in place) before its step


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # SGD, Adam or AdamW
    options: tuple  # sorted (name, value) pairs for the constructor
    groups: tuple | None  # per group: (tensor indices, sorted option pairs); None: a plain list
    shapes: tuple
    steps: tuple
    scaler: tuple | None = None  # GradScaler options (sorted pairs); None: no scaler
    big: tuple = ()  # (tensor, flat index, param value, first gradient value)
    params: tuple = field(default=(), compare=False)
    grads: tuple = field(default=(), compare=False)


def _o(**kw) -> tuple:
    return tuple(sorted(kw.items()))


def _steps(n: int, **kw) -> tuple:
    return tuple(Step(**kw) for _ in range(n))


def _with(steps: tuple, at: dict) -> tuple:
    return tuple(replace(s, **at[i]) if i in at else s for i, s in enumerate(steps))


COSINE = ("cosine", 3e-3, 2, 6, 3e-4)  # WarmupCosineLR(peak, warmup, total, min)
LINEAR = ("linear", 1e-2, 1, 5, 1e-3)  # WarmupLinearLR(...)


def _definitions() -> list[Case]:
    clip, fold = {"max_norm": 1.0}, {"max_norm": 0.25, "clip": "fold"}
    return [
        # groups
        Case("sgd-groups", "SGD", _o(lr=0.05), (
            ((0, 1), _o(momentum=0.9, weight_decay=0.01)),
            ((2,), _o(lr=0.1, momentum=0.5, dampening=0.25)),
            ((3,), _o(momentum=0.9, nesterov=True, maximize=True))),
            FOUR, _with(_steps(5), {2: {"edit": ((0, "lr", 0.02), (1, "momentum", 0.8))}})),
        Case("adam-groups-clip", "Adam", _o(lr=1e-2), (
            ((0, 1), _o(weight_decay=0.0)),
            ((2,), _o(lr=3e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, lr_schedule=COSINE)),
            ((3,), _o(maximize=True, betas=(0.5, 0.9)))),
            FOUR, _with(_steps(5), {0: clip, 2: {"edit": ((0, "eps", 1e-4),)}, 4: clip})),
        Case("adamw-groups-fold", "AdamW", _o(lr=1e-2), (
            ((0,), _o(weight_decay=0.0)),
            ((1, 2, 3), _o(weight_decay=0.1, lr_schedule=LINEAR))),
            MIXED, _steps(3, max_norm=0.5, grad_scale=2.0**-7, clip="fold")),
        # frozen parameters
        Case("adamw-frozen-clip", "AdamW", _o(lr=1e-2, weight_decay=0.1), None, FOUR,
             _with(_steps(5), {0: {"frozen": (0, 3), **clip}, 1: {"frozen": (0, 3)},
                               2: {"frozen": (2, 3), **clip}, 3: {"frozen": (3,)},
                               4: {"frozen": (2,), **clip}})),
        Case("sgd-frozen", "SGD", _o(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), None,
             MIXED, _with(_steps(5), {0: {"frozen": (1,)}, 1: {"frozen": (1,)},
                                      3: {"frozen": (2, 3)}})),
        Case("adam-frozen-groups-fold", "Adam", _o(lr=3e-3), (
            ((0, 1), _o(weight_decay=0.05)),
            ((2,), _o(weight_decay=0.0, betas=(0.8, 0.99)))),
            PAIR + ((9,),), _with(_steps(4), {1: {"frozen": (0,), **fold}, 2: {"frozen": (0, 2)},
                                              3: {"frozen": (1,), **fold}})),
        # grad_scale alone
        Case("sgd-grad-scale", "SGD", _o(lr=0.05), (
            ((0, 1), _o(momentum=0.9, weight_decay=0.05)),
            ((2, 3), _o(weight_decay=0.02, maximize=True))),
            FOUR, _steps(4, grad_scale=1 / 3)),
        Case("adam-grad-scale", "Adam", _o(lr=1e-2, weight_decay=0.1), None, PAIR,
             _with(_steps(4, grad_scale=2.0**-7), {1: {"grad_scale": 1 / 3}, 3: {"grad_scale": 1 / 3}})),
        Case("adamw-grad-scale-maximize", "AdamW", _o(lr=1e-2, weight_decay=0.1, maximize=True), None,
             PAIR, _steps(3, grad_scale=0.1)),
        # the folded clip
        Case("adam-fold", "Adam", _o(lr=1e-2, weight_decay=0.01), None, WIDE,
             _steps(2, max_norm=0.5, clip="fold")),
        Case("sgd-fold-third", "SGD", _o(lr=0.1, momentum=0.9), None, PAIR,
             _steps(3, max_norm=1.0, grad_scale=1 / 3, clip="fold")),
        # the gate
        Case("sgd-gates-inf", "SGD", _o(lr=1.0, momentum=0.5), None, PAIR, (
            Step(), Step(gate=("bool", False)), Step(gate=("1-element", 1)), Step(gate=("0-d", False)),
            Step(gate=("numpy-bool", True)), Step(gate=("1-element", 0.0)), Step(gate=("bool", True))),
            big=((0, 3, HUGE, -HUGE),)),
        Case("adam-gates-clip", "Adam", _o(lr=1e-2), None, FOUR, (
            Step(max_norm=1.0), Step(max_norm=1.0, gate=("0-d", 0)), Step(gate=("1-element", True)),
            Step(max_norm=1.0, gate=("numpy-bool", False)),
            Step(max_norm=1.0, clip="fold", gate=("bool", True)))),
        # dynamic loss scaling
        Case("sgd-scaler", "SGD", _o(lr=0.01, momentum=0.9), None, PAIR,
             _with(_steps(8), {1: {"inject": ((0, 7, "inf"),)}, 4: {"inject": ((1, 0, "overflow"),)},
                               7: {"inject": ((1, 3, "nan"),)}}),
             scaler=_o(init_scale=2.0**10, growth_interval=2)),
        Case("adam-scaler-unscale", "Adam", _o(lr=1e-2, weight_decay=0.01), None, PAIR,
             _with(_steps(5, unscale=True, max_norm=1.0, clip="inplace"), {2: {"inject": ((1, 9, "inf"),)}}),
             scaler=_o(init_scale=2.0**8, growth_interval=2)),
        Case("adamw-scaler-loop", "AdamW", _o(lr=1e-2), (
            ((0,), _o(weight_decay=0.0)),
            ((1, 2), _o(weight_decay=0.1, lr_schedule=COSINE))),
            THREE, _with(_steps(12, max_norm=1.0, clip="fold"),
                         {1: {"frozen": (1,)}, 2: {"inject": ((2, 5, "inf"),)},
                          5: {"frozen": (1,)}, 6: {"inject": ((0, 1, "huge"),)},
                          10: {"inject": ((2, 0, "nan"),)}}),
             scaler=_o(init_scale=2.0**16, growth_interval=3)),
    ]


# clause (d): the step after which each case is saved and resumed
RESUMES = {"sgd-groups": 4, "adam-groups-clip": 3, "adamw-frozen-clip": 2, "sgd-frozen": 1,
           "sgd-scaler": 3, "adamw-scaler-loop": 9}


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    out = []
    for c in _definitions():
        params = [_draw(f"step/{c.id}/p{j}", s) for j, s in enumerate(c.shapes)]
        grads = [[_draw(f"step/{c.id}/g{t}/{j}", s) for j, s in enumerate(c.shapes)]
                 for t in range(len(c.steps))]
        for j, i, p, g in c.big:
            params[j].reshape(-1)[i] = np.float32(p)
            grads[0][j].reshape(-1)[i] = np.float32(g)
        out.append(replace(c, params=tuple(params), grads=tuple(tuple(g) for g in grads)))
    return tuple(out)


def _draw(key: str, shape) -> np.ndarray:
    return draw("normal", key, int(np.prod(shape))).reshape(shape)


def case(cid: str) -> Case:
    return next(c for c in cases() if c.id == cid)


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in arrays])


# -- building the optimizer and running a case ---------------------------------------------------
def _schedule(spec, backend: str):
    kind, peak, warmup, total, low = spec
    cls = mojolike.WarmupCosineLR if kind == "cosine" else mojolike.WarmupLinearLR
    return cls(peak, warmup_steps=warmup, total_steps=total, min_lr=low, backend=backend)


def _options(pairs: tuple, backend: str) -> dict:
    return {k: (_schedule(v, backend) if k == "lr_schedule" else v) for k, v in pairs}


def make(c: Case, params: list, backend: str):
    """The case's optimizer over `params` (the plain list, or its groups)."""
    arg = params if c.groups is None else [
        {"params": [params[j] for j in idx], **_options(opts, backend)} for idx, opts in c.groups]
    return getattr(mojolike, c.kind)(arg, **_options(c.options, backend), backend=backend)


def make_scaler(c: Case, backend: str):
    return mojolike.GradScaler(**dict(c.scaler), backend=backend)


def gate_value(gate: tuple):
    form, v = gate
    if form == "bool":
        return bool(v)
    if form == "numpy-bool":
        return np.bool_(v)
    if form == "0-d":
        return np.array(v)
    return np.array([v], np.float32 if isinstance(v, float) else np.int64)


def step_kwargs(st: Step) -> dict:
    kw = {}
    if st.grad_scale is not None:
        kw["grad_scale"] = st.grad_scale
    if st.clip is not None:
        kw["clip"] = st.clip
    if st.gate is not None:
        kw["update_gate"] = gate_value(st.gate)
    return kw


_INJECT = {"inf": np.float32(np.inf), "nan": np.float32(np.nan), "overflow": np.float32(2.5e38),
           "huge": np.float32(1e30)}


def _inject(grads: list, st: Step) -> None:
    for j, i, what in st.inject:
        cells = grads[j].reshape(-1)
        cells[i] = _INJECT[what]
        if what == "overflow":  # two finite cells whose sum is beyond binary32
            cells[i + 1] = _INJECT[what]


@dataclass
class Run:
    """What a case's run leaves: the optimizer, the scaler, the per-step records, and the
    states saved at the case's resume point (clause (d))."""

    opt: object
    scaler: object
    params: list
    norms: list = field(default_factory=list)
    scales: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    checksums: list = field(default_factory=list)
    last_grads: list | None = None
    grads_touched: int = 0  # steps whose grad_scale / folded clip changed a gradient buffer
    saved: tuple | None = None  # (step, parameters, optimizer state, scaler state)


def run(c: Case, backend: str, *, control: str | None = None) -> Run:
    """Run case `c` on `backend` from its first step; control: a negative control's
    deliberately wrong step (clause (e))."""
    params = [p.copy() for p in c.params]
    r = Run(make(c, params, backend), make_scaler(c, backend) if c.scaler else None, params)
    return _finish(c, r, 0, backend, control)


def _finish(c: Case, r: Run, start: int, backend: str, control=None) -> Run:
    for t in range(start, len(c.steps)):
        st = c.steps[t]
        if t == RESUMES.get(c.id) and start == 0:
            r.saved = (t, [p.copy() for p in r.params], r.opt.state_dict(),
                       r.scaler and dict(r.scaler.state_dict()))
        for k, key, value in st.edit:
            r.opt.param_groups[k][key] = value
        grads = [None if j in st.frozen else g.copy() for j, g in enumerate(c.grads[t])]
        if control == "frozen-as-zero":
            grads = [np.zeros(p.shape, np.float32) if g is None else g for g, p in zip(grads, r.params)]
        if r.scaler is not None:
            _scaler_step(r, st, grads, backend, control)
        else:
            _plain_step(c, r, st, grads, control)
        r.last_grads = grads
    return r


def resumed(c: Case, full: Run, backend: str, *, reset_tracker: bool = False) -> Run:
    """The run continued from the states `full` saved at its resume point: the optimizer's
    through save_state / load_state, both loaded into a fresh optimizer and scaler over copies
    of the parameters. reset_tracker: the scaler's growth tracker set to 0 (clause (d)'s
    control). The records before the resume point are the uninterrupted run's."""
    k, params, state, scaler_state = full.saved
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "state.npz")
        mojolike.save_state(path, state)
        state = mojolike.load_state(path)
    params = [p.copy() for p in params]
    r = Run(make(c, params, backend), None, params, *(list(x[:k]) for x in (
        full.norms, full.scales, full.skipped, full.checksums)))
    r.opt.load_state_dict(state)
    if scaler_state is not None:
        r.scaler = make_scaler(c, backend)
        r.scaler.load_state_dict({**scaler_state, **({"_growth_tracker": 0} if reset_tracker else {})})
    return _finish(c, r, k, backend)


def _plain_step(c: Case, r: Run, st: Step, grads: list, control) -> None:
    before = [None if g is None else g.copy() for g in grads]
    if control == "scale-after-decay" and st.grad_scale is not None and st.max_norm is None:
        total = _scale_after_decay(c, r, st, grads)
    elif control == "gate-as-product" and st.gate is not None and not bool(np.all(gate_value(st.gate))):
        total = _gate_as_product(c, r, st, grads)
    else:
        total = r.opt.step(grads, st.max_norm, **step_kwargs(st))
    r.norms.append(np.nan if total is None else total)
    if st.grad_scale is not None or st.clip == "fold":
        r.grads_touched += any(b is not None and b.tobytes() != g.tobytes()
                               for b, g in zip(before, grads))


def _scaler_step(r: Run, st: Step, grads: list, backend: str, control) -> None:
    scale = np.float32(r.scaler.get_scale())
    scaled = [None if g is None else g * scale for g in grads]  # the backward of the scaled loss
    _inject(scaled, st)
    grads[:] = scaled
    r.checksums.append(mojolike.grad_checksum(scaled, backend=backend))
    t0 = r.opt.t
    kw = {} if st.clip is None else {"clip": st.clip}
    if st.unscale:
        r.scaler.unscale_(r.opt, scaled)
    if control == "checksum-over-clipped" and st.max_norm is not None and not st.unscale:
        total = _checksum_over_clipped(r, st, scaled)
    else:
        total = r.scaler.step(r.opt, scaled, st.max_norm, **kw)
    r.scaler.update()
    r.norms.append(np.nan if total is None else total)
    r.skipped.append(float(r.opt.t == t0))
    r.scales.append(r.scaler.get_scale())


def outputs_of(c: Case, r: Run) -> list[tuple[str, np.ndarray]]:
    out = [("params", _flat(r.params))]
    state = r.opt.state_dict()
    for name, value in sorted(state.items()):
        if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
            out.append((name, _flat(value)))
    out.append(("steps", np.float32([state["t"], *state["steps"]])))
    if any(s.max_norm is not None or s.grad_scale is not None for s in c.steps):
        out.append(("total_norms", np.float32(r.norms)))
        out.append(("grads_after", _flat([g for g in r.last_grads if g is not None])))
    if r.scaler is not None:
        out += [("scales", np.float32(r.scales)), ("skipped", np.float32(r.skipped)),
                ("checksums", np.float32(r.checksums))]
    return out


# a backend's uninterrupted runs, from the card's pass to its clauses (dropped after them)
_runs: dict[tuple[str, str], Run] = {}


def cached_run(c: Case, backend: str) -> Run:
    if (c.id, backend) not in _runs:
        _runs[(c.id, backend)] = run(c, backend)
    return _runs[(c.id, backend)]


def trajectory(c: Case, backend: str) -> list[tuple[str, np.ndarray]]:
    return outputs_of(c, cached_run(c, backend))


def _keep(outs: list, names=("params", "exp_avg", "exp_avg_sq", "momentum_buffer", "steps",
                             "total_norms")) -> list:
    return [(n, a) for n, a in outs if n in names]


# -- the negative controls' wrong steps (contracts/step.py runs them on the oracle) ----------
def _gate_as_product(c: Case, r: Run, st: Step, grads: list):
    """The gate as p = gate*p_new + (1-gate)*p_old with gate 0: the step computed on a copy of
    the optimizer, then blended into the parameters (0*inf is NaN)."""
    old = [p.copy() for p in r.params]
    new = [p.copy() for p in r.params]
    twin = make(c, new, "oracle")
    twin.load_state_dict(r.opt.state_dict())
    twin.step([None if g is None else g.copy() for g in grads], st.max_norm,
              **dict(step_kwargs(st), update_gate=True))
    zero, one = np.float32(0.0), np.float32(1.0)
    with np.errstate(invalid="ignore"):
        for p, n, o in zip(r.params, new, old):
            p[...] = zero * n + one * o


def _scale_after_decay(c: Case, r: Run, st: Step, grads: list):
    """Each gradient read as (g + wd*p)*s instead of g*s + wd*p (coupled decay: SGD, Adam):
    the gradients prepared so in float32, the groups' decay and maximize off for this step."""
    s = np.float32(st.grad_scale)
    group_of = [0] * len(grads) if c.groups is None else \
        [k for j in range(len(grads)) for k, (idx, _) in enumerate(c.groups) if j in idx]
    groups = r.opt.param_groups
    read = []
    for j, g in enumerate(grads):
        if g is None:
            read.append(None)
            continue
        h = groups[group_of[j]]
        x = -g if h["maximize"] else g
        if c.kind != "AdamW" and h["weight_decay"]:
            x = x + np.float32(h["weight_decay"]) * r.params[j]
        read.append(x * s)
    saved = [{key: v for key, v in h.items() if key != "params"} for h in groups]
    for h in groups:
        h["maximize"] = False
        if c.kind != "AdamW":
            h["weight_decay"] = 0.0
    kw = {key: v for key, v in step_kwargs(st).items() if key != "grad_scale"}
    try:
        return r.opt.step(read, st.max_norm, **kw)
    finally:
        for h, options in zip(groups, saved):
            h.update(options)


def _checksum_over_clipped(r: Run, st: Step, scaled: list):
    """The checksum taken over the clipped gradients g*(inv*coef) and the skip decided on it
    alone: where the raw norm is infinite the coefficient is 0, the clipped gradients are
    (signed) zeros, and the step goes through with them."""
    inv = np.float32(1.0 / np.float64(r.scaler.get_scale()))
    total = np.float32(mojolike.get_total_norm(scaled, backend="oracle")) * inv
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        coef = np.float32(st.max_norm) / (total + np.float32(1e-6))
        coef = np.float32(1.0) if coef > 1 else coef
        c = inv if coef == 1 else inv * coef
        clipped = [None if g is None else g * c for g in scaled]
    r.checksums[-1] = mojolike.grad_checksum(clipped, backend="oracle")
    if not np.isfinite(r.checksums[-1]) or np.isfinite(total):
        return r.scaler.step(r.opt, scaled, max_norm=st.max_norm)
    with np.errstate(invalid="ignore"):
        zeros = [None if g is None else g * np.float32(0.0) for g in scaled]
    return r.scaler.step(r.opt, zeros, max_norm=st.max_norm)
