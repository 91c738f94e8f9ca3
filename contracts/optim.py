"""The optim suite: optimizer trajectories, invariance, resume, negative controls, refusals
(contracts/optim.md).

Each case runs one optimizer configuration for 3-8 steps on a small registry of
tensors through the public API and records the final parameters, the optimizer
state and, with the clip on, the per-step total norms.

>>> len(cases()) > 20
True
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

import mojolike

from ..core import registry
from ..oracles import optim as spec
from .casegen import bulk_normal, draw
from .harness import built_refusal_clause, compare_with_oracle, with_1_and_2_threads

NAME = "optim"
FAMILY = "optim"
PROFILE = "mojolike.identical.optim.fp32.v1"

# registries: tensor shapes in param_id order
EDGES = ((1023,), (1,), (1025,))
SQUARE = ((32, 32), (2048,))
TINY = ((5,), (3, 1))
SMALL = ((31,), (1024,))
# 200 tensors: for 64 values or fewer the fold tree gives the same sum in reversed
# order (lane j and lane 31-j mirror each other), so the clip-order control needs more
MANY = tuple((1 + (j * 7) % 5,) for j in range(200))


@dataclass(frozen=True)
class Config:
    kind: str  # SGD, Adam or AdamW
    options: tuple  # sorted (name, value) pairs for the constructor
    max_norm: float | None
    shapes: tuple
    steps: int
    grad_family: str = "normal"

    def make(self, params, backend: str):
        return getattr(mojolike, self.kind)(params, **dict(self.options), backend=backend)


def _c(kind, shapes, steps, max_norm=None, family="normal", **options):
    return Config(kind, tuple(sorted(options.items())), max_norm, shapes, steps, family)


CONFIGS = {
    "sgd-plain": _c("SGD", EDGES, 3, lr=0.1),
    "sgd-momentum": _c("SGD", EDGES, 5, lr=0.05, momentum=0.9),
    "sgd-dampening": _c("SGD", SQUARE, 4, lr=0.05, momentum=0.9, dampening=0.5),
    "sgd-nesterov": _c("SGD", EDGES, 5, lr=0.01, momentum=0.9, nesterov=True),
    "sgd-decay-maximize": _c("SGD", TINY, 6, lr=0.1, momentum=0.5, weight_decay=0.01, maximize=True),
    "sgd-momentum-clip": _c("SGD", EDGES, 4, 1.0, lr=0.05, momentum=0.9),
    "sgd-subnormal": _c("SGD", SMALL, 3, None, "subnormal", lr=0.5, momentum=0.9),
    "sgd-many-clip": _c("SGD", MANY, 3, 0.5, "unit", lr=0.1, momentum=0.9),
    "adam-default": _c("Adam", EDGES, 5),
    "adam-clip": _c("Adam", EDGES, 5, 1.0, lr=1e-2),
    "adam-decay": _c("Adam", SQUARE, 4, lr=1e-2, weight_decay=0.1),
    "adam-decay-clip": _c("Adam", TINY, 8, 0.5, lr=1e-2, weight_decay=0.01),
    "adam-betas-eps": _c("Adam", SMALL, 6, lr=3e-3, betas=(0.8, 0.95), eps=1e-6),
    "adam-maximize": _c("Adam", TINY, 3, lr=1e-3, maximize=True),
    "adam-subnormal": _c("Adam", SMALL, 4, None, "subnormal", lr=1e-3),
    "adam-wide-clip": _c("Adam", SMALL, 3, 1e-3, "wide", lr=1e-3),
    "adamw-default": _c("AdamW", EDGES, 5),
    "adamw-decay-clip": _c("AdamW", SQUARE, 4, 2.0, lr=1e-2, weight_decay=0.1),
    "adamw-long": _c("AdamW", TINY, 8, None, lr=1e-1, betas=(0.5, 0.9)),
    "adamw-maximize-clip": _c("AdamW", SMALL, 3, 1.0, lr=1e-3, maximize=True),
    "adamw-many-clip": _c("AdamW", MANY, 4, 1.0, "unit", lr=1e-2),
}


@dataclass(frozen=True)
class Case:
    id: str
    config: Config
    params: tuple  # initial parameters, one array per tensor
    grads: tuple  # per step, one array per tensor


def _draw_shaped(family: str, key: str, shape) -> np.ndarray:
    return draw(family, key, int(np.prod(shape))).reshape(shape)


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    out = []
    for cid, cfg in CONFIGS.items():
        params = tuple(_draw_shaped("normal", f"optim/{cid}/p{j}", s) for j, s in enumerate(cfg.shapes))
        grads = tuple(tuple(_draw_shaped(cfg.grad_family, f"optim/{cid}/g{t}/{j}", s)
                            for j, s in enumerate(cfg.shapes)) for t in range(cfg.steps))
        out.append(Case(cid, cfg, params, grads))
    return tuple(out)


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in arrays])


def trajectory(cfg: Config, params0, grads, backend: str, *, layout: str = "list",
               resume_at: int | None = None, drop_flags: bool = False) -> list[tuple[str, np.ndarray]]:
    """Run `cfg` and return its outputs. layout: "list" (separate arrays: updated where they
    lie on backends whose kernels take pieces, else packed) or "arena" (views of one buffer). resume_at: state_dict after that many steps, saved to
    .npz, loaded into a fresh optimizer that finishes the run."""
    if layout == "arena":
        arena = _flat(params0)
        offs = np.cumsum([0] + [p.size for p in params0])
        params = [arena[a:b].reshape(p.shape) for a, b, p in zip(offs[:-1], offs[1:], params0)]
    else:
        params = [p.copy() for p in params0]
    opt = cfg.make(params, backend)
    norms, last_grads = [], None
    for t, g in enumerate(grads):
        if resume_at is not None and t == resume_at:
            opt = _resumed(cfg, opt, params, backend, drop_flags)
        last_grads = [x.copy() for x in g]
        total = opt.step(last_grads, max_norm=cfg.max_norm)
        norms.append(np.nan if total is None else total)
    out = [("params", _flat(params))]
    for name, arrays in sorted(opt.state_dict().items()):
        if isinstance(arrays, list) and arrays and isinstance(arrays[0], np.ndarray):
            out.append((name, _flat(arrays)))
    if cfg.max_norm is not None:
        out.append(("total_norms", np.float32(norms)))
        out.append(("clipped_grads", _flat(last_grads)))
    return out


def _resumed(cfg: Config, opt, params, backend: str, drop_flags: bool):
    state = opt.state_dict()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "state.npz")
        mojolike.save_state(path, state)
        state = mojolike.load_state(path)
    if drop_flags:  # the negative control of clause (d)
        state["momentum_buffer_initialized"] = [False] * len(state["momentum_buffer_initialized"])
    fresh = cfg.make(params, backend)
    fresh.load_state_dict(state)
    return fresh


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    cfg = case.config
    if isinstance(k, _Control):
        cfg = k.transform(cfg)
        with k.patched():
            return trajectory(cfg, case.params, case.grads, "oracle")
    return trajectory(cfg, case.params, case.grads, k.backend)


def _same(a: list, b: list) -> bool:
    """Two output lists with the same names and bits (all NaNs one class)."""
    return [n for n, _ in a] == [n for n, _ in b] and not compare_with_oracle(dict(a), dict(b))[1]


# -- clause (c): invariance ---------------------------------------------------------------------
def clause_invariance(k) -> tuple[str, str]:
    notes, ok = [], True
    for cid in ("adam-clip", "sgd-momentum", "adamw-decay-clip"):
        case = next(c for c in cases() if c.id == cid)
        a = trajectory(case.config, case.params, case.grads, k.backend, layout="list")
        b = trajectory(case.config, case.params, case.grads, k.backend, layout="arena")
        ok &= _same(a, b)
        how = "pieces" if k.takes_pieces else "packed"
        notes.append(f"{cid}: separate arrays ({how}) {'==' if _same(a, b) else '!='} arena views")
    if not hasattr(k, "set_num_threads"):
        notes.append(f"{k.backend} has no host thread count")
        return ("pass" if ok else "fail"), "; ".join(notes)
    cfg = _c("Adam", (((1 << 18) + 3,), (1 << 18,), (4097,)), 3, 1.0, lr=1e-2, weight_decay=0.1)
    params = [bulk_normal(s[0], f"optim/threads/p{j}") for j, s in enumerate(cfg.shapes)]
    grads = [[bulk_normal(s[0], f"optim/threads/g{t}/{j}") for j, s in enumerate(cfg.shapes)]
             for t in range(cfg.steps)]
    seen, why = with_1_and_2_threads(k, lambda: trajectory(cfg, params, grads, k.backend))
    if seen is None:
        return "fail", why
    ok &= _same(*seen)
    notes.append(f"Adam+clip on {sum(s[0] for s in cfg.shapes)} elements, 3 steps: 1 thread "
                 f"{'==' if _same(*seen) else '!='} 2 threads")
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (d): resume -------------------------------------------------------------------------
def clause_resume(k) -> tuple[str, str]:
    notes, ok = [], True
    for cid, at in (("sgd-momentum", 2), ("adam-decay-clip", 3), ("adamw-default", 1)):
        case = next(c for c in cases() if c.id == cid)
        full = trajectory(case.config, case.params, case.grads, k.backend)
        resumed = trajectory(case.config, case.params, case.grads, k.backend, resume_at=at)
        ok &= _same(full, resumed)
        notes.append(f"{cid} resumed after step {at}: {'same bits' if _same(full, resumed) else 'DIFFERS'}")
    case = next(c for c in cases() if c.id == "sgd-momentum")
    dropped = trajectory(case.config, case.params, case.grads, k.backend, resume_at=2, drop_flags=True)
    caught = not _same(trajectory(case.config, case.params, case.grads, k.backend), dropped)
    ok &= caught
    notes.append("control: dropping SGD's momentum_buffer_initialized flags "
                 + ("changes the result" if caught else "was NOT detected"))
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (f): refusals -----------------------------------------------------------------------
def _refusal_table(backend: str):
    p = lambda: [np.ones(4, np.float32), np.ones((2, 3), np.float32)]  # noqa: E731
    g = lambda: [np.full(4, 0.5, np.float32), np.full((2, 3), 0.25, np.float32)]  # noqa: E731

    def step_with(grads, **kw):
        params = p()
        opt = mojolike.Adam(params, backend=backend, **kw)
        return params, grads, lambda: opt.step(grads)

    def aliased():  # a gradient that is the parameter shifted by one element
        arena = np.ones(9, np.float32)
        params = [arena[:8]]
        opt = mojolike.SGD(params, lr=0.1, backend=backend)
        return [arena], [], lambda: opt.step([arena[1:]])

    def resized():
        params = [np.ones(4, np.float32)]
        opt = mojolike.SGD(params, lr=0.1, backend=backend)
        params[0].resize(8, refcheck=False)
        return params, [np.ones(8, np.float32)], lambda: opt.step([np.ones(4, np.float32)])

    def ctor(kind, params=None, **kw):
        params = p() if params is None else params
        return params, [], lambda: getattr(mojolike, kind)(params, backend=backend, **kw)

    readonly = np.ones(4, np.float32)
    readonly.flags.writeable = False
    nan_grads = g()
    nan_grads[1][0, 1] = np.nan
    return [
        ("amsgrad", lambda: ctor("Adam", amsgrad=True)),
        ("foreach", lambda: ctor("AdamW", foreach=True)),
        ("fused", lambda: ctor("Adam", fused=True)),
        ("capturable", lambda: ctor("Adam", capturable=True)),
        ("differentiable", lambda: ctor("SGD", differentiable=True)),
        ("params", lambda: ctor("SGD", params=[{"params": p()[0]}, np.ones(3, np.float32)])),
        ("param_groups[0].amsgrad", lambda: ctor("Adam", params=[{"params": p(), "amsgrad": True}])),
        ("params[0]", lambda: ctor("SGD", params=[np.ones(3, np.float16)])),
        ("params", lambda: ctor("Adam", params=np.ones(3))),  # float64
        ("params[0]", lambda: ctor("SGD", params=[readonly])),
        ("params[0]", lambda: ctor("SGD", params=[np.ones(8, np.float32)[::2]])),  # strided
        ("params[0]", lambda: ctor("Adam", params=[np.ones(0, np.float32)])),  # empty
        ("nesterov", lambda: ctor("SGD", nesterov=True)),
        ("nesterov", lambda: ctor("SGD", nesterov=True, momentum=0.9, dampening=0.1)),
        ("betas[0]", lambda: ctor("Adam", betas=(1.0, 0.999))),
        ("betas[1]", lambda: ctor("AdamW", betas=(0.9, -0.1))),
        ("betas[1]", lambda: ctor("AdamW", betas=(0.9, 1 - 2**-25))),  # 1.0 in float32
        ("lr", lambda: ctor("SGD", lr=1e300)),  # infinite in float32
        ("lr", lambda: ctor("Adam", lr="0.1")),
        ("maximize", lambda: ctor("SGD", maximize="False")),
        ("lr, betas and weight_decay", lambda: ctor("Adam", lr=3e38, betas=(0.5, 0.9))),
        ("lr", lambda: ctor("SGD", lr=-0.1)),
        ("lr", lambda: ctor("Adam", lr=float("nan"))),
        ("eps", lambda: ctor("Adam", eps=float("inf"))),
        ("weight_decay", lambda: ctor("AdamW", weight_decay=-0.01)),
        ("accumulation_steps", lambda: ctor("Adam", accumulation_steps=3)),
        ("lr_decay", lambda: ctor("SGD", lr_decay=0.1)),
        ("grads", lambda: step_with(nan_grads)),  # inf or NaN
        ("grads", lambda: step_with(g()[:1])),
        ("grads[1]", lambda: step_with([np.ones(4, np.float32), np.ones(6, np.float32)])),
        ("params[0]", resized),
        ("grads[0] and params[0]", aliased),
        ("norm_type", lambda: (g(), [], lambda: mojolike.clip_grad_norm_(g(), 1.0, norm_type=1.0))),
        ("error_if_nonfinite", lambda: (g(), [], lambda: mojolike.clip_grad_norm_(
            g(), 1.0, error_if_nonfinite=False))),
    ]


def clause_refusals(k) -> tuple[str, str]:
    return built_refusal_clause(_refusal_table(k.backend))


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "d": clause_resume(k), "f": clause_refusals(k)}


# -- clause (e): negative controls --------------------------------------------------------------
class _Control:
    """A deliberately wrong run of the suite (on the oracle); its card must differ."""

    backend = "oracle"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, transform=lambda cfg: cfg, patched=contextlib.nullcontext):
        self.name, self.describe, self.transform, self.patched = name, describe, transform, patched


def _swap_betas(cfg: Config) -> Config:
    if cfg.kind == "SGD":
        return cfg
    opts = dict(cfg.options)
    b1, b2 = opts.get("betas", (0.9, 0.999))
    return replace(cfg, options=tuple(sorted(dict(opts, betas=(b2, b1)).items())))


def _coupled_as_decoupled(cfg: Config) -> Config:
    return replace(cfg, kind="AdamW") if cfg.kind == "Adam" and dict(cfg.options).get("weight_decay") \
        else cfg


@contextlib.contextmanager
def _float_pow_bias_corrections():
    """Bias corrections the naive way: float32 pow, then float32 ops (two roundings and more)."""
    scalars = spec.scalars
    saved = scalars.div_one_minus_pow, scalars.sqrt_one_minus_pow
    one = np.float32(1.0)

    def div_one_minus_pow(a, b, t, **_):
        return float(np.float32(a) / (one - np.float32(b) ** np.float32(t)))

    def sqrt_one_minus_pow(b, t, **_):
        return float(np.sqrt(one - np.float32(b) ** np.float32(t)))

    scalars.div_one_minus_pow, scalars.sqrt_one_minus_pow = div_one_minus_pow, sqrt_one_minus_pow
    try:
        yield
    finally:
        scalars.div_one_minus_pow, scalars.sqrt_one_minus_pow = saved


class _ReversedClip:
    """The oracle kernels, but the clip folds the per-tensor norms in reverse order."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def clip_coef(self, sumsqs, max_norm, eps):
        return self._inner.clip_coef(np.ascontiguousarray(sumsqs[::-1]), max_norm, eps)


@contextlib.contextmanager
def _reversed_clip():
    inner = registry.kernels("optim negative control", FAMILY, "oracle", "identical")
    with registry.override(FAMILY, "oracle", "identical", _ReversedClip(inner)):
        yield


def negative_controls() -> list[_Control]:
    return [
        _Control("betas-swapped", "beta1 and beta2 exchanged", transform=_swap_betas),
        _Control("coupled-as-decoupled", "Adam's weight decay applied as AdamW's",
                 transform=_coupled_as_decoupled),
        _Control("float-pow", "bias corrections from float32 pow", patched=_float_pow_bias_corrections),
        _Control("clip-reversed", "the clip sums the tensors in reverse order", patched=_reversed_clip),
    ]
