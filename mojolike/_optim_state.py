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

import io
import json
import math
import os
import secrets
import struct
import tokenize
import zipfile
import zlib
from typing import NamedTuple

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


def create_temp(folder: str, prefix: str, suffix: str) -> tuple[int, str]:
    """(fd, path) of a new file in `folder` opened for writing, created with mode 0o666 less
    the umask as open(2) applies it (tempfile.mkstemp's files are 0o600 whatever the umask,
    so a saved file would not get the permissions its folder's users expect)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(folder, f"{prefix}{secrets.token_hex(8)}{suffix}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def write_npz(entry: str, p: str, members: dict, path, *, prefix: str) -> None:
    """np.savez of `members` to the checked path p, through a temporary file beside it renamed
    over p, so the file is whole or absent; an OS error is refused as option `path`."""
    folder = os.path.dirname(os.path.abspath(p))
    try:
        fd, tmp = create_temp(folder, prefix, ".npz")
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


# -- reading: the archive's layout first, then the .npy headers, then the data ------------------
_ALLOWED = {np.dtype("<f4"), np.dtype("<i8"), np.dtype("|b1")}
_LOCAL = struct.Struct("<IHHHHHIIIHH")  # a zip local file header, 30 bytes
_HEADER_MAX = 4096  # bytes of a member read for its .npy header; np.savez writes < 256


class Stored(NamedTuple):
    """A stored (uncompressed) member: its data is size bytes of the file from start."""
    name: str
    start: int
    size: int
    crc: int


class Header(NamedTuple):
    """A member's .npy header: the array it claims, and where its data begins in the file."""
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    data: int


def archive_index(f, file_size: int) -> dict[str, Stored]:
    """Every .npy member of the zip open as f (by name, without '.npy'), from the central
    directory and the local headers alone: nothing of any member's data is read.

    Refused (ValueError) first: duplicate names, compressed or encrypted members, claimed
    sizes adding up to more than the file, a local header that disagrees with the central
    directory, members whose bytes overlap each other or the central directory. A zip
    reader does not check these, so an archive of overlapping members (each member's data
    holding every later member) would otherwise make a small file read as a huge one."""
    z = zipfile.ZipFile(f)  # parses the central directory only (its size is within the file)
    infos = z.infolist()
    seen = set()
    for i in infos:
        if i.filename in seen:
            raise ValueError(f"holds member {i.filename!r} twice")
        seen.add(i.filename)
        if not i.filename.endswith(".npy"):
            raise ValueError(f"holds {i.filename!r}, which is not a .npy member")
        if i.compress_type != zipfile.ZIP_STORED or i.file_size != i.compress_size \
                or i.flag_bits & 0x9:
            raise ValueError(f"member {i.filename!r} is compressed, encrypted or streamed; "
                             f"these files are stored as np.savez writes them")
    claimed = sum(i.file_size for i in infos)
    if claimed > file_size:
        raise ValueError(f"has members claiming {claimed} bytes in a file of {file_size}")
    members, spans = {}, []
    for i in infos:
        start = _local_data_start(f, i)
        spans.append((i.header_offset, start + i.file_size, i.filename))
        members[i.filename[:-4]] = Stored(i.filename[:-4], start, i.file_size, i.CRC)
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise ValueError(f"has members {a!r} and {b!r} whose bytes overlap")
    if spans and spans[-1][1] > z.start_dir:
        raise ValueError(f"has member {spans[-1][2]!r} overlapping the central directory")
    return members


def _local_data_start(f, info: zipfile.ZipInfo) -> int:
    """Where a member's data starts, its local header checked against the central directory."""
    if info.header_offset < 0:
        raise ValueError(f"member {info.filename!r} starts before the file")
    f.seek(info.header_offset)
    head = f.read(_LOCAL.size)
    if len(head) != _LOCAL.size:
        raise ValueError(f"member {info.filename!r} starts past the end of the file")
    sig, _, flags, method, _, _, crc, csize, usize, n, m = _LOCAL.unpack(head)
    rest = f.read(n + m)
    name, extra = rest[:n], rest[n:]
    if sig != 0x04034B50 or len(rest) != n + m or method != zipfile.ZIP_STORED or flags & 0x9 \
            or name != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437") \
            or crc != info.CRC:
        raise ValueError(f"member {info.filename!r} has a local header that disagrees with "
                         f"the central directory")
    if 0xFFFFFFFF in (csize, usize):  # zip64: the sizes are in the extra field (np.savez)
        csize = usize = _zip64_size(extra, info.filename)
    if csize != info.compress_size or usize != info.file_size:
        raise ValueError(f"member {info.filename!r} has a local size that disagrees with the "
                         f"central directory")
    return info.header_offset + _LOCAL.size + n + m


def _zip64_size(extra: bytes, name: str) -> int:
    at = 0
    while at + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, at)
        if tag == 1 and size >= 16 and at + 20 <= len(extra):
            usize, csize = struct.unpack_from("<QQ", extra, at + 4)
            if usize == csize:
                return usize
            break
        at += 4 + size
    raise ValueError(f"member {name!r} has a damaged zip64 size")


def npy_header(f, m: Stored) -> Header:
    """The .npy header of member m, read from its first bytes (at most _HEADER_MAX), checked
    against the member's size: the array it claims must fill the member exactly."""
    f.seek(m.start)
    b = io.BytesIO(f.read(min(m.size, _HEADER_MAX)))
    version = np.lib.format.read_magic(b)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"member {m.name!r} has unsupported .npy version {version}")
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
        np.lib.format.read_array_header_2_0
    try:
        shape, fortran, dtype = read(b)
    except (SyntaxError, tokenize.TokenError) as err:  # numpy parses the header as a literal
        raise ValueError(f"member {m.name!r} has an .npy header that is not a Python literal "
                         f"({type(err).__name__})") from None
    if dtype not in _ALLOWED and not (dtype.kind == "U" and dtype.byteorder in "<=|"):
        raise ValueError(f"member {m.name!r} has dtype {dtype}, which these files never hold")
    if any(d < 0 for d in shape):
        raise ValueError(f"member {m.name!r} claims shape {shape}")
    need, held = math.prod(shape) * dtype.itemsize, m.size - b.tell()
    if need != held:
        raise ValueError(f"member {m.name!r} claims shape {shape} ({need} bytes) but holds "
                         f"{held} bytes")
    return Header(dtype, tuple(shape), fortran, m.start + b.tell())


def npy_data(f, m: Stored, h: Header) -> np.ndarray:
    """The member's array, read straight into its own buffer and checked against its CRC."""
    out = np.empty(h.shape, h.dtype, order="F" if h.fortran else "C")
    raw = out.reshape(-1, order="A").view(np.uint8) if out.size else np.zeros(0, np.uint8)
    f.seek(h.data)
    if f.readinto(memoryview(raw)) != raw.size:
        raise ValueError(f"member {m.name!r} ends past the end of the file")
    f.seek(m.start)
    crc = zlib.crc32(f.read(h.data - m.start))
    if zlib.crc32(raw, crc) != m.crc:
        raise ValueError(f"member {m.name!r} fails its CRC check; the file is damaged")
    return out


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


def load_state(path, **unknown) -> dict:
    """Read a state_dict written by save_state (no pickle); `.npz` is added when the path lacks
    it. A file that is not such a state (damaged, truncated, another .npz, hostile headers) is
    refused by name."""
    e = "mojolike.load_state"
    checks.keywords(e, unknown, ("path",))
    p = _path(e, path)
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
