"""Optimizer state: checking a state_dict, and .npz state files without pickle.

`save_state(path, state)` and `load_state(path)` add `.npz` to a path that does
not end with it, so the pair is symmetric. A file is read in three steps, so
that a damaged or hostile file is refused by name, with memory bounded by the
file's own size, instead of raising whatever numpy or zipfile happen to raise:
the archive's layout (the central directory against every local header: no
duplicate names, no compressed members, no member overlapping another), then
every .npy header against its member's size and against what the format holds,
and only then each member's data, read once into its own array.

>>> import os, tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> save_state(os.path.join(d, "ckpt"), {"kind": "Adam", "t": 3, "exp_avg": [np.zeros(2, np.float32)],
...                                     "exp_avg_sq": [np.ones(2, np.float32)]})
>>> s = load_state(os.path.join(d, "ckpt"))
>>> s["kind"], s["t"], s["exp_avg_sq"][0].tolist()
('Adam', 3, [1.0, 1.0])
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.files import (
    archive_index,
    existing_path,
    npy_data,
    npy_header,
    npz_path,
    write_npz,
)
from ..core.refusals import Refusal, refuse

KINDS = ("SGD", "Adam", "AdamW")
_FLAG_SUFFIX = "_initialized"
_NONNEGATIVE = ("exp_avg_sq",)  # second moments: a negative or NaN one would poison sqrt(v)


def check_state_dict(entry: str, state, kind: str, array_names: list[str], flag_names: list[str],
                     shapes: list[tuple]) -> tuple[int, dict, dict]:
    """(t, {name: flat float32 array}, {flag name: list of bool}) from a state_dict, every part
    checked (keys, kind, t, dtypes, shapes, finite values, second moments >= 0)."""
    if not isinstance(state, dict):
        refuse(entry, "state", f"must be a dict as state_dict() returns, not {type(state).__name__}")
    want = {"kind", "t", *array_names, *flag_names}
    extra, missing = sorted(map(str, set(state) - want - set(OPTIONAL))), sorted(want - set(state))
    if extra:
        refuse(entry, extra[0], f"is not part of a {kind} state; the keys are "
                                              f"{', '.join(sorted(want))}")
    if missing:
        refuse(entry, missing[0], "is missing")
    if state["kind"] != kind:
        refuse(entry, "kind", f"is {state['kind']!r}; this is a {kind}")
    t = checks.integer(entry, "t", state["t"], low=0)
    staged = {}
    for name in array_names:
        items = state[name]
        if not isinstance(items, (list, tuple)) or len(items) != len(shapes):
            refuse(entry, name, f"must be a list of {len(shapes)} arrays")
        for i, (a, shape) in enumerate(zip(items, shapes)):
            where = f"{name}[{i}]"
            if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != shape:
                got = f"dtype {a.dtype} shape {a.shape}" if isinstance(a, np.ndarray) \
                    else type(a).__name__
                refuse(entry, where, f"is {got}; expected a float32 array of shape {shape}")
            if not np.isfinite(a).all():
                refuse(entry, where, "holds inf or NaN; optimizer state must be finite")
            if name in _NONNEGATIVE and (a < 0).any():
                refuse(entry, where, "holds a negative second moment")
        staged[name] = np.concatenate([a.reshape(-1) for a in items]) if items else \
            np.zeros(0, np.float32)
    flags = {}
    for name in flag_names:
        items = state[name]
        if not isinstance(items, (list, tuple)) or len(items) != len(shapes):
            refuse(entry, name, f"must be a list of {len(shapes)} booleans")
        flags[name] = [checks.switch(entry, f"{name}[{i}]", f) for i, f in enumerate(items)]
    if "steps" in state:  # per tensor (Adam's bias correction); absent: every tensor took t
        steps = state["steps"]
        if not isinstance(steps, (list, tuple)) or len(steps) != len(shapes):
            refuse(entry, "steps", f"must be a list of {len(shapes)} step counts")
        flags["steps"] = [checks.integer(entry, f"steps[{i}]", x, low=0, high=t)
                          for i, x in enumerate(steps)]
    if "param_groups" in state:
        flags["param_groups"] = check_groups(entry, state["param_groups"])
    return t, staged, flags


OPTIONAL = ("steps", "param_groups")


def check_groups(entry: str, groups) -> list[dict]:
    """Saved group options: a list of dicts of JSON values (lr_schedule and params are not saved)."""
    if not isinstance(groups, (list, tuple)) or not all(isinstance(g, dict) for g in groups):
        refuse(entry, "param_groups", "must be a list of dicts as state_dict() returns")
    try:
        return json.loads(json.dumps(list(groups), allow_nan=False))
    except (TypeError, ValueError) as err:
        refuse(entry, "param_groups", f"holds a value that is not plain data ({err})")


def _check_saved(entry: str, state) -> dict:
    """The arrays to write: the state's structure checked (its values are load_state_dict's)."""
    if not isinstance(state, dict):
        refuse(entry, "state", f"must be a dict as state_dict() returns, not {type(state).__name__}")
    for key in ("kind", "t"):
        if key not in state:
            refuse(entry, key, "is missing")
    if state["kind"] not in KINDS:
        refuse(entry, "kind", f"must be one of {', '.join(KINDS)}", value=state["kind"])
    arrays = {"kind": np.str_(state["kind"]),
              "t": np.int64(checks.integer(entry, "t", state["t"], low=0, high=2**63 - 1))}
    for name, value in state.items():
        if name in ("kind", "t"):
            continue
        if name == "param_groups":
            arrays[name] = np.str_(json.dumps(check_groups(entry, value)))
            continue
        if name == "steps":
            if not isinstance(value, (list, tuple)):
                refuse(entry, name, f"must be a list, not {type(value).__name__}")
            arrays[name] = np.asarray([checks.integer(entry, f"steps[{i}]", x, low=0,
                                                      high=2**63 - 1)
                                       for i, x in enumerate(value)], dtype=np.int64)
            continue
        if not isinstance(name, str) or not name.isidentifier():
            refuse(entry, name, "is not a state name (letters, digits, underscores)")
        if not isinstance(value, (list, tuple)):
            refuse(entry, name, f"must be a list, not {type(value).__name__}")
        if name.endswith(_FLAG_SUFFIX):
            arrays[name] = np.asarray([checks.switch(entry, f"{name}[{i}]", f)
                                       for i, f in enumerate(value)], dtype=np.bool_)
            continue
        arrays[f"{name}.count"] = np.int64(len(value))
        for i, a in enumerate(value):
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                refuse(entry, f"{name}[{i}]", "must be a float32 numpy array")
            arrays[f"{name}.{i}"] = a
    return arrays


@entry_point("mojolike.save_state")
def save_state(path, state, *, entry, **unknown) -> None:
    """Write a state_dict to an .npz file (no pickle); `.npz` is added when the path lacks it.
    The file is written to a temporary name beside it and renamed, so it is whole or absent."""
    e = entry
    p = npz_path(e, path)
    arrays = _check_saved(e, state)
    write_npz(e, p, arrays, path, prefix=".mojolike-state-")


def _read(f, file_size: int) -> dict:
    """The state in an open state file: every member's name, dtype and shape checked against
    what a state holds (the scalars kind, t and the list counts read first, a few bytes
    each) before any array's data is read."""
    index = archive_index(f, file_size)
    heads = {name: npy_header(f, m) for name, m in index.items()}

    def scalar(name: str, fits) -> np.ndarray:
        h = heads.get(name)
        if h is None or h.shape != () or not fits(h.dtype):
            raise ValueError(f"has no scalar {name!r}")
        return npy_data(f, index[name], h)[()]

    state = {"kind": str(scalar("kind", lambda d: d.kind == "U")),
             "t": int(scalar("t", lambda d: d == np.int64))}
    if state["kind"] not in KINDS or state["t"] < 0:
        raise ValueError(f"holds kind {state['kind']!r} and t {state['t']}")
    lists, known = {}, {"kind", "t"}
    for key in sorted(k for k in heads if k.endswith(".count")):
        name = key[:-len(".count")]
        count = int(scalar(key, lambda d: d == np.int64))
        if not 0 <= count <= len(heads):
            raise ValueError(f"has a bad count for {name!r}")
        items = [f"{name}.{i}" for i in range(count)]
        for item in items:
            if item not in heads or heads[item].dtype != np.float32:
                raise ValueError(f"lacks float32 array {item}")
        lists[name] = items
        known.update(items, [key])
    for key, h in heads.items():
        if key == "param_groups" and not (h.shape == () and h.dtype.kind == "U") \
                or key == "steps" and not (h.dtype == np.int64 and len(h.shape) == 1):
            raise ValueError(f"has a bad {key!r}")
        if key not in known | {"param_groups", "steps"} and not (
                key.endswith(_FLAG_SUFFIX) and h.dtype == np.bool_ and len(h.shape) == 1):
            raise ValueError(f"holds {key!r}, which is not part of a state")
    for name, items in lists.items():
        state[name] = [npy_data(f, index[i], heads[i]) for i in items]
    if "param_groups" in heads:
        state["param_groups"] = json.loads(str(npy_data(f, index["param_groups"],
                                                        heads["param_groups"])[()]))
    if "steps" in heads:
        state["steps"] = [int(x) for x in npy_data(f, index["steps"], heads["steps"])]
    for key in heads:
        if key.endswith(_FLAG_SUFFIX) and key not in known:
            state[key] = [bool(b) for b in npy_data(f, index[key], heads[key])]
    return state


@entry_point("mojolike.load_state")
def load_state(path, *, entry, **unknown) -> dict:
    """Read a state_dict written by save_state (no pickle) from `path` as given when it names a
    file, else from `path` with `.npz` added (the name save_state writes). A file that is not such a state (damaged, truncated, another .npz, hostile headers) is
    refused by name."""
    e = entry
    p = existing_path(e, path)
    try:
        with open(p, "rb") as f:
            return _read(f, os.fstat(f.fileno()).st_size)
    except Refusal:
        raise
    except OSError as err:
        refuse(e, "path", f"cannot be read ({err})", value=path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, KeyError, TypeError,
            OverflowError, MemoryError, NotImplementedError, RuntimeError) as err:
        refuse(e, "path", f"is not a mojolike state file ({type(err).__name__}: {err})", value=path)
