"""Parameter groups: torch's list-of-dicts form, and the runs a step hands to the kernels.

`build(entry, params, defaults)` accepts what torch's optimizers accept: one
buffer or a list of buffers (one group with the defaults), or a list of dicts,
each with "params" and any of the optimizer's group options, the rest taken
from the defaults. The groups keep the caller's objects, so `param_groups` can
be read and edited between steps as in torch; a step checks every group again.

`runs(keys)` cuts the tensors, in registry order, into maximal stretches that
one kernel call can take: the same group, a gradient present, and the same
per-tensor state (Adam's step count, SGD's momentum-initialized flag).

Reproducibility: grouping changes which host scalars a tensor's elements see,
never the per-element arithmetic; a run boundary is invisible to the bits
(the step kernels are elementwise).

>>> import numpy as np
>>> a, b = np.zeros(2, np.float32), np.zeros(3, np.float32)
>>> groups, listed = build("demo", [{"params": [a]}, {"params": b, "lr": 0.5}], {"lr": 0.1}, ("lr",))
>>> [g["lr"] for g in groups], [len(g["params"]) for g in groups], listed
([0.1, 0.5], [1, 1], True)
>>> runs([(0, True, 1), (0, True, 1), (1, True, 1), (1, False, 1)])
[(0, 0, 2), (1, 2, 3)]
"""
from __future__ import annotations

from ..core.refusals import refuse


def _is_groups(params) -> bool:
    return isinstance(params, (list, tuple)) and bool(params) and \
        all(isinstance(g, dict) for g in params)


def build(entry: str, params, defaults: dict, options: tuple) -> tuple[list[dict], bool]:
    """(groups, given as groups): each group a dict with "params" (a list of the caller's
    buffers) and every option in `options`, from the group or else the defaults."""
    if not _is_groups(params):
        items = list(params) if isinstance(params, (list, tuple)) else [params]
        return [{"params": items, **defaults}], False
    groups = []
    for k, given in enumerate(params):
        if "params" not in given:
            refuse(entry, f"param_groups[{k}]", "has no 'params' key")
        extra = sorted(str(key) for key in given if key != "params" and key not in options)
        if extra:
            refuse(entry, f"param_groups[{k}].{extra[0]}",
                   f"is not a group option; a group may set {', '.join(options)}")
        items = given["params"]
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        if not items:
            refuse(entry, f"param_groups[{k}].params", "is empty; a group needs a tensor")
        groups.append({"params": items, **defaults,
                       **{key: v for key, v in given.items() if key != "params"}})
    return groups, True


def flat_params(params, groups: list[dict], listed: bool):
    """The registry's parameters: the plain form as given, or every group's in order."""
    return [p for g in groups for p in g["params"]] if listed else params


def option_name(k: int, listed: bool):
    """How refusals name group k's option: 'lr' for the plain form, 'param_groups[1].lr'."""
    return (lambda name: f"param_groups[{k}].{name}") if listed else (lambda name: name)


def runs(keys: list[tuple]) -> list[tuple[int, int, int]]:
    """(group, first tensor, end) for each maximal stretch of tensors with equal keys whose
    gradient is present; keys[i] = (group, present, state key)."""
    out = []
    i = 0
    while i < len(keys):
        j = i + 1
        while j < len(keys) and keys[j] == keys[i]:
            j += 1
        if keys[i][1]:
            out.append((keys[i][0], i, j))
        i = j
    return out


def present_runs(present: list[bool]) -> list[tuple[int, int]]:
    """(first, end) of each maximal stretch of tensors that have a gradient."""
    return [(i, j) for _, i, j in runs([(0, p, 0) for p in present])]
