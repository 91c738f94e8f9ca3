"""The step suite: parameter groups, frozen parameters, grad_scale, the folded clip, the
update gate and dynamic loss scaling (contracts/step.md).

Each case runs one optimizer (and, for the scaler cases, one GradScaler) for 2-12 steps
through the public API and records the final parameters, the optimizer state, the
per-tensor step counts and, where they apply, the norms, the gradients after the last
step, the scales, the skipped steps and the checksums.

>>> len(cases()) > 10, all(sum(int(np.prod(s)) for s in c.shapes) <= 1100 for c in cases())
(True, True)
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import mojolike

from .harness import built_refusal_clause, compare_with_oracle
from .step_run import (RESUMES, Case, Run, _flat, _inject, _keep, _runs, cached_run, case, cases,
                       make, outputs_of, resumed, run, trajectory)

NAME = "step"
FAMILY = "optim"
PROFILE = "mojolike.identical.step.fp32.v1"

def outputs(k, c: Case) -> list[tuple[str, np.ndarray]]:
    if isinstance(k, _Control):
        return outputs_of(c, run(c, "oracle", control=k.name))
    return trajectory(c, k.backend)


def _same(a: list, b: list) -> bool:
    """Two output lists with the same names and bits (all NaNs one class)."""
    return [n for n, _ in a] == [n for n, _ in b] and not compare_with_oracle(dict(a), dict(b))[1]


# -- clause (c): invariance ---------------------------------------------------------------------
def _fold_vs_inplace(c: Case, backend: str, s: float | None) -> bool:
    """The case run as given (clip="fold") against its gradients multiplied by s first (in
    numpy: one rounding each, exact for a power of two) and clipped in place."""
    pre = replace(c, id=f"{c.id}/in-place",
                  steps=tuple(replace(st, clip="inplace", grad_scale=None) for st in c.steps),
                  grads=c.grads if s is None else tuple(tuple(g * np.float32(s) for g in step)
                                                        for step in c.grads))
    return _same(_keep(trajectory(c, backend)), _keep(outputs_of(pre, run(pre, backend))))


def _gate_checks(backend: str) -> tuple[bool, str]:
    """Gates of every form against no gate (True) and against the state before (False)."""
    c = case("sgd-grad-scale")
    same = True
    for value in (True, np.bool_(True), np.array(True), np.array([1], np.int64), np.array([1.0])):
        gated, plain = [p.copy() for p in c.params], [p.copy() for p in c.params]
        a, b = make(c, gated, backend), make(c, plain, backend)
        for grads in c.grads[:2]:
            a.step([g.copy() for g in grads], update_gate=value)
            b.step([g.copy() for g in grads])
        same &= _same([("p", _flat(gated)), *_state_arrays(a)], [("p", _flat(plain)), *_state_arrays(b)])
    held = True
    for value in (False, np.bool_(False), np.array(0), np.array([0.0], np.float32), np.array([False])):
        params = [p.copy() for p in c.params]
        opt = make(c, params, backend)
        opt.step([g.copy() for g in c.grads[0]])
        before = [("p", _flat(params)), *_state_arrays(opt)], opt.t, opt.total_norm_
        for grads in (c.grads[1], _poisoned(c.grads[1])):
            g = [x.copy() for x in grads]
            for kw in ({"max_norm": 1.0}, {"max_norm": 1.0, "clip": "fold", "grad_scale": 0.5}, {}):
                held &= opt.step(g, update_gate=value, **kw) is None
                held &= [x.tobytes() for x in g] == [x.tobytes() for x in grads]
        held &= _same(before[0], [("p", _flat(params)), *_state_arrays(opt)]) and \
            (opt.t, opt.total_norm_) == before[1:]
    forms = "numpy bools, a 0-d and 1-element arrays"
    return same and held, (f"True as bool and {forms} " + ("equals no gate" if same else "DIFFERS from no gate")
                           + f"; False as bool and {forms} " + (
                               "leaves parameters, state, t and gradients (finite, inf and NaN) "
                               "bit-identical" if held else "CHANGED something"))


def _poisoned(grads) -> list:
    out = [g.copy() for g in grads]
    out[0].reshape(-1)[0], out[-1].reshape(-1)[-1] = np.inf, np.nan
    return out


def _state_arrays(opt) -> list:
    return [(n, _flat(v)) for n, v in sorted(opt.state_dict().items())
            if isinstance(v, list) and v and isinstance(v[0], np.ndarray)]


def _groups_as_plain(backend: str) -> bool:
    """One group per tensor with the constructor's options equals the plain list."""
    c = case("sgd-frozen")
    split = replace(c, id=f"{c.id}/split", groups=tuple(((j,), ()) for j in range(len(c.shapes))))
    return _same(trajectory(c, backend), outputs_of(split, run(split, backend)))


def _norm_and_checksum(backend: str) -> tuple[bool, str]:
    """get_total_norm equals the in-place clip's returned norm and writes nothing; grad_checksum
    is the fold of the per-tensor folds; each scaler run skipped exactly the steps of clause 11."""
    c = case("adam-fold")
    grads = [g.copy() for g in c.grads[0]]
    norm = mojolike.get_total_norm(grads, backend=backend)
    untouched = [g.tobytes() for g in grads] == [g.tobytes() for g in c.grads[0]]
    clip_ok = untouched and norm == make(c, [p.copy() for p in c.params], backend).step(grads, 0.5)
    sums = np.float32([mojolike.fold(g.reshape(-1), backend=backend) for g in c.grads[0]])
    sum_ok = np.float32(mojolike.grad_checksum(list(c.grads[0]), backend=backend)).tobytes() == \
        np.float32(mojolike.fold(sums, backend=backend)).tobytes()
    rule = all([bool(x) for x in cached_run(sc, backend).skipped] == _alarms(sc, cached_run(sc, backend))
               for sc in cases() if sc.scaler)
    notes = [f"get_total_norm {'==' if clip_ok else '!='} the in-place clip's norm (buffers "
             + ("untouched)" if untouched else "CHANGED)"),
             f"grad_checksum {'==' if sum_ok else '!='} fold of the per-tensor folds",
             "each scaler run skipped " + ("exactly the steps of clause 11" if rule else
                                           "OTHER steps than clause 11 says")]
    return clip_ok and sum_ok and rule, "; ".join(notes)


def _alarms(c: Case, r: Run) -> list[bool]:
    """Clause 11's skips, computed on the oracle: the gradients as the scaler reads them (as
    given for a scale >= 1, else g*inv_scale; after unscale_, g*inv_scale) have a non-finite
    checksum or, with the clip folded in by the scaler, a non-finite total norm."""
    out = []
    for t, st in enumerate(c.steps):
        scale = np.float32(dict(c.scaler)["init_scale"] if t == 0 else r.scales[t - 1])
        grads = [None if j in st.frozen else g * scale for j, g in enumerate(c.grads[t])]
        _inject(grads, st)
        if scale < 1 or st.unscale:
            inv = np.float32(1.0 / np.float64(scale))
            grads = [None if g is None else g * inv for g in grads]
        bad = not np.isfinite(mojolike.grad_checksum(grads, backend="oracle"))
        if st.max_norm is not None and not st.unscale:
            bad |= not np.isfinite(mojolike.get_total_norm(grads, backend="oracle"))
        out.append(bad)
    return out


def clause_invariance(k) -> tuple[str, str]:
    b = k.backend
    plain = _fold_vs_inplace(case("adam-fold"), b, None)
    pow2 = _fold_vs_inplace(case("adamw-groups-fold"), b, 2.0**-7)
    third = _fold_vs_inplace(case("sgd-fold-third"), b, 1 / 3)
    gates_ok, gate_notes = _gate_checks(b)
    touched = sum(cached_run(c, b).grads_touched for c in cases() if c.scaler is None)
    groups = _groups_as_plain(b)
    sums_ok, sums_notes = _norm_and_checksum(b)
    notes = [(f"clip='fold' {'==' if plain else '!='} in place without grad_scale, "
              f"{'==' if pow2 else '!='} in place with grad_scale 2^-7, "
              f"{'!=' if not third else '== (NOT the expected double rounding)'} in place with 1/3"),
             gate_notes,
             "grad_scale and clip='fold' left every gradient buffer unchanged" if not touched
             else f"grad_scale or clip='fold' CHANGED gradient buffers in {touched} steps",
             f"one group per tensor {'==' if groups else '!='} the plain list", sums_notes]
    ok = plain and pow2 and not third and gates_ok and not touched and groups and sums_ok
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (d): resume -------------------------------------------------------------------------
def clause_resume(k) -> tuple[str, str]:
    notes, ok = [], True
    for cid, at in RESUMES.items():
        c = case(cid)
        full = cached_run(c, k.backend)
        same = _same(outputs_of(c, full), outputs_of(c, resumed(c, full, k.backend)))
        ok &= same
        notes.append(f"{cid} resumed after step {at}: {'same bits' if same else 'DIFFERS'}")
    c = case("adamw-scaler-loop")
    full = cached_run(c, k.backend)
    caught = not _same(outputs_of(c, full), outputs_of(c, resumed(c, full, k.backend, reset_tracker=True)))
    ok &= caught
    notes.append("control: the scaler resumed with its growth tracker reset to 0 "
                 + ("changes the result" if caught else "was NOT detected"))
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (f): refusals -----------------------------------------------------------------------
def _refusal_table(backend: str):
    on = {"backend": backend}
    p = lambda: [np.ones(4, np.float32), np.ones((2, 3), np.float32)]
    g = lambda: [np.full(4, 0.5, np.float32), np.full((2, 3), 0.25, np.float32)]

    def step_with(kind="Adam", grads=None, groups=None, edit=None, **kw):
        params = p()
        opt = getattr(mojolike, kind)(params if groups is None else groups(params), **on)
        if edit is not None:
            edit(opt)
        grads = g() if grads is None else grads
        return params, grads, lambda: opt.step(grads, **kw)

    def ctor(kind, groups):
        params = p()
        return params, [], lambda: getattr(mojolike, kind)(groups(params), **on)

    def scaler_call(act, **options):
        params, grads = p(), g()
        opt = mojolike.SGD(params, lr=0.1, **on)
        scaler = mojolike.GradScaler(**options, **on) if act is not None else None
        return params, grads, (lambda: act(scaler, opt, grads)) if act is not None else \
            (lambda: mojolike.GradScaler(**options, **on))

    def unscaled_twice():
        params, grads = p(), g()
        opt, scaler = mojolike.SGD(params, lr=0.1, **on), mojolike.GradScaler(**on)
        scaler.unscale_(opt, grads)  # the first call writes; the second must not
        return params, grads, lambda: scaler.unscale_(opt, grads)

    def resized_group(opt):
        opt.param_groups[0]["params"] = opt.param_groups[0]["params"][:1]

    def load_other_groups():
        params = p()
        one = mojolike.Adam([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.1}], **on)
        two = mojolike.Adam(params, **on)
        state = two.state_dict()
        return params, [], lambda: one.load_state_dict(state)

    return [
        ("grad_scale", lambda: step_with(grad_scale=float("inf"))),
        ("grad_scale", lambda: step_with(grad_scale=float("nan"))),
        ("grad_scale", lambda: step_with(grad_scale="0.5")),
        ("grad_scale", lambda: step_with(grad_scale=2.0)),  # could overflow a finite gradient
        ("grad_scale", lambda: step_with(grad_scale=-0.5)),
        ("clip", lambda: step_with(max_norm=1.0, clip="global")),
        ("grad_scale", lambda: step_with(max_norm=1.0, grad_scale=0.5, clip="inplace")),
        ("update_gate", lambda: step_with(update_gate="yes")),
        ("update_gate", lambda: step_with(update_gate=np.array([True, False]))),
        ("update_gate", lambda: step_with(update_gate=np.array(0.5))),
        ("grads", lambda: step_with(grads=[None, None])),
        ("param_groups[1].momentum_decay",
         lambda: ctor("SGD", lambda ps: [{"params": [ps[0]]}, {"params": [ps[1]], "momentum_decay": 0.1}])),
        ("param_groups[0]", lambda: ctor("Adam", lambda ps: [{"lr": 0.1}, {"params": ps}])),
        ("param_groups[1].params", lambda: ctor("Adam", lambda ps: [{"params": ps}, {"params": []}])),
        ("param_groups[1].lr", lambda: ctor("AdamW", lambda ps: [{"params": [ps[0]]},
                                                                 {"params": [ps[1]], "lr": -1.0}])),
        ("param_groups[0].betas[1]", lambda: ctor("Adam", lambda ps: [{"params": ps, "betas": (0.9, 1.0)}])),
        ("params[0] and params[1]",  # one tensor in two groups
         lambda: ctor("SGD", lambda ps: [{"params": [ps[0]]}, {"params": [ps[0]]}])),
        ("lr", lambda: step_with(edit=lambda o: o.param_groups[0].__setitem__("lr", -0.1))),
        ("param_groups[1].weight_decay", lambda: step_with(
            groups=lambda ps: [{"params": [ps[0]]}, {"params": [ps[1]]}],
            edit=lambda o: o.param_groups[1].__setitem__("weight_decay", float("nan")))),
        ("param_groups", lambda: step_with(edit=resized_group)),
        ("param_groups", load_other_groups),
        ("norm_type", lambda: (g(), [], lambda: mojolike.get_total_norm(g(), norm_type=1.0, **on))),
        ("foreach", lambda: (g(), [], lambda: mojolike.get_total_norm(g(), foreach=True, **on))),
        ("init_scale", lambda: scaler_call(None, init_scale=float("inf"))),
        ("init_scale", lambda: scaler_call(None, init_scale=0.0)),
        ("growth_factor", lambda: scaler_call(None, growth_factor=1.0)),
        ("backoff_factor", lambda: scaler_call(None, backoff_factor=1.0)),
        ("growth_interval", lambda: scaler_call(None, growth_interval=0)),
        ("clip", lambda: scaler_call(lambda s, o, gr: s.step(o, gr, 1.0, clip="inplace"))),
        ("grad_scale", lambda: scaler_call(lambda s, o, gr: s.step(o, gr, grad_scale=0.5))),
        ("_growth_tracker", lambda: scaler_call(lambda s, o, gr: s.load_state_dict(
            {**s.state_dict(), "_growth_tracker": -1}))),
        ("optimizer", unscaled_twice),
        ("step", lambda: scaler_call(lambda s, o, gr: s.update())),
    ]


def clause_refusals(k) -> tuple[str, str]:
    return built_refusal_clause(_refusal_table(k.backend))


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    try:
        return {"c": clause_invariance(k), "d": clause_resume(k), "f": clause_refusals(k)}
    finally:
        for key in [key for key in _runs if key[1] == k.backend]:
            del _runs[key]


# -- clause (e): negative controls --------------------------------------------------------------
class _Control:
    """A deliberately wrong step, run on the oracle through the public API; its card must
    differ from the oracle's."""

    backend = "oracle"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str):
        self.name, self.describe = name, describe


def negative_controls() -> list[_Control]:
    return [
        _Control("gate-as-product", "the gate as p = gate*p_new + (1-gate)*p_old: NaN where p is inf"),
        _Control("scale-after-decay", "grad_scale applied after weight decay: (g + wd*p)*s"),
        _Control("frozen-as-zero", "a frozen parameter stepped with a zero gradient (still decayed)"),
        _Control("checksum-over-clipped", "the scaler's checksum over the clipped gradients"),
    ]
