"""One training checkpoint file: an .npz of float32 and int64 arrays plus one JSON text, no pickle.

`write(entry, path, meta, arrays)` stores `meta` (plain JSON values: the
configuration, step counts, the scaler's, generator's, outlier detector's and
schedule's states; binary64 values survive JSON exactly) as the member `meta` and
each array under its name, through a temporary file renamed over `path`, so the
file is whole or absent. `read(entry, path, expect=None)` checks the archive's
layout and every member's .npy header (as `mojolike.load_state` does), reads the
meta, lets `expect(meta)` say which arrays the meta implies, and only then reads
the arrays' data; anything that is not such a file is refused by the entry
point's name and option `path`, with memory bounded by the file's size.

>>> import os, tempfile, numpy as np
>>> p = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
>>> write("demo", p, {"step": 6}, {"w": np.float32([1.5])}) == p
True
>>> meta, arrays = read("demo", p, expect=lambda meta: {"w": (np.dtype("<f4"), (1,))})
>>> meta, arrays["w"].tolist()
({'step': 6}, [1.5])
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from ..core.files import (
    archive_index,
    existing_path,
    npy_data,
    npy_header,
    npz_path,
    write_npz,
)
from ..core.refusals import Refusal, refuse

_KINDS = (np.dtype("<f4"), np.dtype("<i8"))
_META_MAX = 256 * 2**20  # bytes of the meta member (UTF-32): 64 Mi characters


def write(entry: str, path, meta: dict, arrays: dict[str, np.ndarray]) -> str:
    """Write the checkpoint; returns the path written (`.npz` added when missing)."""
    p = npz_path(entry, path)
    members = {"meta": np.str_(json.dumps(meta, sort_keys=True))}
    for name, a in arrays.items():
        if name == "meta" or not isinstance(a, np.ndarray) or a.dtype not in _KINDS:
            raise TypeError(f"{entry}: checkpoint member {name!r} must be a float32 or int64 array")
        members[name] = np.ascontiguousarray(a)
    write_npz(entry, p, members, path, prefix=".mojolike-train-")
    return p


def read(entry: str, path, expect=None) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays) of a checkpoint `write` made; a refusal naming `path` otherwise.

    `expect(meta)`, when given, returns {name: (dtype, shape)}: exactly the arrays the meta
    implies. A missing or extra member is then refused as option `path`, and one whose header
    says another dtype or shape by its own name, before any array's data is read; `expect`
    may itself refuse the meta."""
    return _open(entry, path, expect, with_data=True)


def header_specs(entry: str, path) -> tuple[dict, dict[str, tuple[np.dtype, tuple[int, ...]]]]:
    """(meta, {name: (dtype, shape)}) of a checkpoint's arrays, from its layout and .npy
    headers alone (no array's data is read), in the form `read`'s `expect` returns; the same
    refusals as `read`."""
    return _open(entry, path, None, with_data=False)


def _open(entry: str, path, expect, *, with_data: bool):
    p = existing_path(entry, path)
    try:
        with open(p, "rb") as f:
            index = archive_index(f, os.fstat(f.fileno()).st_size)
            meta = _meta(f, index)
            heads = {name: npy_header(f, m) for name, m in index.items() if name != "meta"}
            if expect is None:
                for name, h in heads.items():
                    if h.dtype not in _KINDS:
                        raise ValueError(f"member {name!r} has dtype {h.dtype}")
            else:
                _check_expected(entry, heads, expect(meta))
            if not with_data:
                return meta, {name: (h.dtype, h.shape) for name, h in heads.items()}
            return meta, {name: npy_data(f, index[name], h) for name, h in heads.items()}
    except Refusal:
        raise
    except OSError as err:
        refuse(entry, "path", f"cannot be read ({err})", value=path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, KeyError, TypeError,
            OverflowError, MemoryError, NotImplementedError, RuntimeError) as err:
        refuse(entry, "path", f"is not a mojolike training checkpoint ({type(err).__name__}: "
                              f"{err})", value=path)


def _meta(f, index) -> dict:
    m = index.get("meta")
    if m is None:
        raise ValueError("has no 'meta' text")
    if m.size > _META_MAX:
        raise ValueError(f"has a 'meta' of {m.size} bytes; a checkpoint's meta is at most "
                         f"{_META_MAX}")
    h = npy_header(f, m)
    if h.shape != () or h.dtype.kind != "U":
        raise ValueError("has no 'meta' text")
    meta = json.loads(str(npy_data(f, m, h)[()]))
    if not isinstance(meta, dict):
        raise ValueError("has a 'meta' that is not a JSON object")
    return meta


def _check_expected(entry: str, heads, want: dict) -> None:
    """Refuse members that differ from `want`: a missing or extra name as option `path` (the
    file is not the meta's checkpoint), a dtype or shape by the member's own name."""
    missing = sorted(set(want) - set(heads))
    extra = sorted(set(heads) - set(want))
    if missing:
        raise ValueError(f"lacks member {missing[0]!r}, which its meta implies")
    if extra:
        raise ValueError(f"holds member {extra[0][:60]!r}, which its meta does not imply")
    for name, (dtype, shape) in want.items():
        h = heads[name]
        if h.dtype != np.dtype(dtype) or h.shape != tuple(shape):
            refuse(entry, name, f"must be a {np.dtype(dtype)} array of shape {tuple(shape)} (what "
                                f"the checkpoint's meta implies), not {h.dtype} of shape "
                                f"{h.shape}")
