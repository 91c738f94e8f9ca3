"""Optimizer state: checking a state_dict, and .npz state files without pickle.

`save_state(path, state)` and `load_state(path)` add `.npz` to a path that does
not end with it, so the pair is symmetric. A file is read member by member: each
.npy header is checked against the bytes the archive actually holds before any
array is allocated, so a damaged or hostile file is refused by name instead of
raising whatever numpy or zipfile happen to raise.

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
import math
import os
import tempfile
import zipfile

import numpy as np

from . import checks
from .refusals import Refusal, refuse

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


def _path(entry: str, path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        refuse(entry, "path", f"must be a str or os.PathLike, not {type(path).__name__}", value=path)
    p = os.fspath(path)
    if not isinstance(p, str) or not p or "\0" in p:
        refuse(entry, "path", "must be a non-empty text path without NUL characters", value=path)
    return p if p.endswith(".npz") else p + ".npz"


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


def save_state(path, state, **unknown) -> None:
    """Write a state_dict to an .npz file (no pickle); `.npz` is added when the path lacks it.
    The file is written to a temporary name beside it and renamed, so it is whole or absent."""
    e = "mojolike.save_state"
    checks.keywords(e, unknown, ("path", "state"))
    p = _path(e, path)
    arrays = _check_saved(e, state)
    write_npz(e, p, arrays, path, prefix=".mojolike-state-")


def write_npz(entry: str, p: str, members: dict, path, *, prefix: str) -> None:
    """np.savez of `members` to the checked path p, through a temporary file beside it renamed
    over p, so the file is whole or absent; an OS error is refused as option `path`."""
    folder = os.path.dirname(os.path.abspath(p))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".npz")
    except OSError as err:
        refuse(entry, "path", f"cannot be written ({err})", value=path)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **members)
        os.replace(tmp, p)
    except OSError as err:
        os.unlink(tmp)
        refuse(entry, "path", f"cannot be written ({err})", value=path)
    except BaseException:
        os.unlink(tmp)
        raise


_ALLOWED = {np.dtype("<f4"), np.dtype("<i8"), np.dtype("|b1")}


def _member(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One .npy member, its header checked against its size before anything is allocated."""
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
        # stored members occupy their size on disk, so no header can claim more than the file
        raise ValueError(f"member {info.filename!r} is compressed; state files are stored as "
                         f"np.savez writes them")
    with z.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy version {version}")
        if dtype not in _ALLOWED and dtype.kind != "U":
            raise ValueError(f"has dtype {dtype}, which a state file never holds")
        need = math.prod(shape) * dtype.itemsize
        if need != info.file_size - f.tell():
            raise ValueError(f"header claims shape {shape} ({need} bytes) but the member holds "
                             f"{info.file_size - f.tell()} bytes")
        data = f.read(need)
    a = np.frombuffer(data, dtype=dtype)
    return a.reshape(shape, order="F" if fortran else "C").copy()


def read_members(z: zipfile.ZipFile) -> dict[str, np.ndarray]:
    """Every .npy member of an archive by name, each header checked before allocating."""
    members = {}
    for info in z.infolist():
        if not info.filename.endswith(".npy"):
            raise ValueError(f"holds {info.filename!r}, which is not a .npy member")
        members[info.filename[:-4]] = _member(z, info)
    return members


def _read(z: zipfile.ZipFile) -> dict:
    members = read_members(z)
    for key in ("kind", "t"):
        if key not in members or members[key].shape != ():
            raise ValueError(f"has no scalar {key!r}")
    state = {"kind": str(members.pop("kind")), "t": int(members.pop("t"))}
    if state["kind"] not in KINDS or state["t"] < 0:
        raise ValueError(f"holds kind {state['kind']!r} and t {state['t']}")
    for key in sorted(k for k in members if k.endswith(".count")):
        name, count = key[:-len(".count")], members.pop(key)
        if count.shape != () or count.dtype != np.int64 or not 0 <= int(count) <= len(members):
            raise ValueError(f"has a bad count for {name!r}")
        items = []
        for i in range(int(count)):
            a = members.pop(f"{name}.{i}", None)
            if a is None or a.dtype != np.float32:
                raise ValueError(f"lacks float32 array {name}.{i}")
            items.append(a)
        state[name] = items
    if "param_groups" in members:
        a = members.pop("param_groups")
        if a.shape != () or a.dtype.kind != "U":
            raise ValueError("has a bad 'param_groups'")
        state["param_groups"] = json.loads(str(a))
    if "steps" in members:
        a = members.pop("steps")
        if a.dtype != np.int64 or a.ndim != 1:
            raise ValueError("has a bad 'steps'")
        state["steps"] = [int(x) for x in a]
    for key in list(members):
        a = members.pop(key)
        if not key.endswith(_FLAG_SUFFIX) or a.dtype != np.bool_ or a.ndim != 1:
            raise ValueError(f"holds {key!r}, which is not part of a state")
        state[key] = [bool(b) for b in a]
    return state


def load_state(path, **unknown) -> dict:
    """Read a state_dict written by save_state (no pickle); `.npz` is added when the path lacks
    it. A file that is not such a state (damaged, truncated, another .npz, hostile headers) is
    refused by name."""
    e = "mojolike.load_state"
    checks.keywords(e, unknown, ("path",))
    p = _path(e, path)
    try:
        with zipfile.ZipFile(p) as z:
            return _read(z)
    except Refusal:
        raise
    except OSError as err:
        refuse(e, "path", f"cannot be read ({err})", value=path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, KeyError, TypeError,
            OverflowError, MemoryError, NotImplementedError, RuntimeError) as err:
        refuse(e, "path", f"is not a mojolike state file ({type(err).__name__}: {err})", value=path)
