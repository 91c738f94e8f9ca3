"""Hostile files for the fuzz targets: zip archives laid out byte by byte.

`zip_bytes(records, central)` writes local records and a central directory whose
fields need not agree with each other (Python's zipfile only writes honest ones),
so a target can build what an attacker would: members whose data ranges overlap
(each holding every later member), duplicate names, sizes larger than the file,
compressed members, a central name that differs from its local header, a .npy
header that claims a huge shape. `members_of(path)` reads an honest file's
members, to mutate them. The promise checked on every such file: the loader
refuses it by name (or, for an honest file, loads it), and its peak memory stays
within a small multiple of the file's size.
"""
from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
import zlib

import numpy as np

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")


def members_of(path: str) -> list[tuple[str, bytes]]:
    """(name, stored bytes) of every member of an honest archive, in order."""
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def local_record(name: str, data: bytes, *, method: int = 0, claimed: int | None = None) -> bytes:
    """One local file header and its data (stored, or deflated with method 8)."""
    raw = name.encode()
    body = data if method == 0 else zlib.compress(data)[2:-4]
    size = len(body) if claimed is None else claimed
    return _LOCAL.pack(0x04034B50, 20, 0, method, 0, 0, zlib.crc32(data), size,
                       len(data) if claimed is None else claimed, len(raw), 0) + raw + body


def central_entry(name: str, offset: int, size: int, usize: int, crc: int, method: int = 0) -> bytes:
    raw = name.encode()
    return _CENTRAL.pack(0x02014B50, 20, 20, 0, method, 0, 0, crc, size, usize, len(raw), 0, 0, 0,
                         0, 0, offset) + raw


def zip_bytes(records: list[bytes], central: list[bytes]) -> bytes:
    """Local records laid end to end, then the central directory and its end record."""
    body = b"".join(records)
    cd = b"".join(central)
    return body + cd + _END.pack(0x06054B50, 0, 0, len(central), len(central), len(cd), len(body), 0)


def honest(members: list[tuple[str, bytes]], *, method: int = 0) -> bytes:
    """The members as an ordinary archive (what np.savez writes, method 0)."""
    records, central, at = [], [], 0
    for name, data in members:
        rec = local_record(name, data, method=method)
        size = len(rec) - _LOCAL.size - len(name.encode())
        central.append(central_entry(name, at, size, len(data), zlib.crc32(data), method))
        records.append(rec)
        at += len(rec)
    return zip_bytes(records, central)


def overlapping(names: list[str], payload: bytes) -> bytes:
    """One local header per name laid end to end, then `payload`; member i claims every byte
    from the end of its header to the end of the payload, so its data is every later member:
    the claimed sizes add up quadratically while the file stays linear (CRCs left 0, since a
    loader must refuse before reading any member)."""
    heads, size = [], len(payload)
    for name in reversed(names):
        raw = name.encode()
        h = _LOCAL.pack(0x04034B50, 20, 0, 0, 0, 0, 0, size, size, len(raw), 0) + raw
        heads.insert(0, (h, size))
        size += len(h)
    central, at = [], 0
    for name, (h, claimed) in zip(names, heads):
        central.append(central_entry(name, at, claimed, claimed, 0))
        at += len(h)
    return zip_bytes([h for h, _ in heads] + [payload], central)


def npy(shape, dtype="<f4", body: bytes | None = None) -> bytes:
    """A .npy member whose header says `shape` and `dtype`; `body` may disagree with it."""
    f = io.BytesIO()
    header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(f, header)
    return f.getvalue() + (b"" if body is None else body)


def peak_bytes(fn) -> tuple[object, int]:
    """(fn()'s result or the exception it raised, the peak bytes traced while it ran)."""
    tracemalloc.start()
    try:
        try:
            out = fn()
        except BaseException as e:  # the caller judges what was raised
            out = e
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


_BASES: dict[str, list[tuple[str, bytes]]] = {}


def base_members(kind: str, folder: str) -> list[tuple[str, bytes]]:
    """An honest file's members, made once per process: a save_state file ('state') or a tiny
    Trainer's checkpoint after one step ('checkpoint')."""
    if kind not in _BASES:
        import os

        import mojolike
        from mojolike.training.trainer import Trainer
        path = os.path.join(folder, f"base-{kind}.npz")
        if kind == "state":
            opt = mojolike.Adam([np.ones(3, np.float32), np.ones((2, 2), np.float32)],
                                backend="cpu-numba")
            opt.step([np.ones(3, np.float32), np.ones((2, 2), np.float32)])
            mojolike.save_state(path, opt.state_dict())
        else:
            t = Trainer(tiny_config(), backend="cpu-numba")
            t.run(1)
            t.save(path)
        _BASES[kind] = members_of(path)
    return _BASES[kind]


def tiny_config():
    """The checkpoint base's run: a model of a few hundred parameters, three steps."""
    from mojolike.training.trainer import TrainConfig
    return TrainConfig(steps=3, d_model=8, d_hidden=16, vocab=32, batch_size=2, seq_len=8,
                       microbatches=1)
