"""Files the library writes and reads back: whole-or-absent writes, and .npz archives read
without pickle, with memory bounded by the file's own size.

A file is read in three steps, so that a damaged or hostile file is refused by name instead
of raising whatever numpy or zipfile happen to raise: the archive's layout (`archive_index`:
the central directory against every local header; no duplicate names, no compressed
members, no member overlapping another, no claimed size past the file), then each .npy
header against its member's size (`npy_header`), and only then a member's data, read once
with its CRC checked (`npy_data`). Optimizer state files (`mojolike.optim.state`),
checkpoints (`mojolike.training.checkpoint`) and cards (`mojolike.core.cardformat`) use it.

>>> import os, tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> p = npz_path("demo", os.path.join(d, "x"))
>>> write_npz("demo", p, {"w": np.float32([1.5, 2.0])}, p, prefix=".demo-")
>>> with open(p, "rb") as f:
...     index = archive_index(f, os.path.getsize(p))
...     h = npy_header(f, index["w"])
...     npy_data(f, index["w"], h).tolist()
[1.5, 2.0]
"""
from __future__ import annotations

import io
import math
import os
import secrets
import struct
import tokenize
import zipfile
import zlib
from typing import NamedTuple

import numpy as np

from .refusals import refuse


def npz_path(entry: str, path) -> str:
    """`path` as a str ending in .npz (added when missing); anything else is refused as option `path`."""
    if not isinstance(path, (str, os.PathLike)):
        refuse(entry, "path", f"must be a str or os.PathLike, not {type(path).__name__}", value=path)
    p = os.fspath(path)
    if not isinstance(p, str) or not p or "\0" in p:
        refuse(entry, "path", "must be a non-empty text path without NUL characters", value=path)
    return p if p.endswith(".npz") else p + ".npz"


def existing_path(entry: str, path) -> str:
    """The file to read: `path` as given when it names a file (a checkpoint renamed or kept
    without the suffix is read as it is), else with .npz added, the name the writer chose."""
    p = npz_path(entry, path)
    given = os.fspath(path)
    return given if given != p and os.path.isfile(given) else p


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

