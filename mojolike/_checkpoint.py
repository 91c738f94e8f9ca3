"""One training checkpoint file: an .npz of float32 and int64 arrays plus one JSON text, no pickle.

`write(entry, path, meta, arrays)` stores `meta` (plain JSON values: the
configuration, step counts, the scaler's, generator's, outlier detector's and
schedule's states; binary64 values survive JSON exactly) as the member `meta` and
each array under its name, through a temporary file renamed over `path`, so the
file is whole or absent. `read(entry, path)` checks every member's .npy header
against the bytes it holds before allocating anything (as `mojolike.load_state`
does) and refuses, by the entry point's name and option `path`, anything that is
not such a file.

>>> import os, tempfile, numpy as np
>>> p = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
>>> write("demo", p, {"step": 6}, {"w": np.float32([1.5])}) == p
True
>>> meta, arrays = read("demo", p)
>>> meta, arrays["w"].tolist()
({'step': 6}, [1.5])
"""
from __future__ import annotations

import json
import zipfile

import numpy as np

from ._optim_state import _path, read_members, write_npz
from .refusals import Refusal, refuse

_KINDS = (np.dtype("<f4"), np.dtype("<i8"))


def write(entry: str, path, meta: dict, arrays: dict[str, np.ndarray]) -> str:
    """Write the checkpoint; returns the path written (`.npz` added when missing)."""
    p = _path(entry, path)
    members = {"meta": np.str_(json.dumps(meta, sort_keys=True))}
    for name, a in arrays.items():
        if name == "meta" or not isinstance(a, np.ndarray) or a.dtype not in _KINDS:
            raise TypeError(f"{entry}: checkpoint member {name!r} must be a float32 or int64 array")
        members[name] = np.ascontiguousarray(a)
    write_npz(entry, p, members, path, prefix=".mojolike-train-")
    return p


def read(entry: str, path) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays) of a checkpoint `write` made; a refusal naming `path` otherwise."""
    p = _path(entry, path)
    try:
        with zipfile.ZipFile(p) as z:
            members = read_members(z)
        text = members.pop("meta", None)
        if text is None or text.shape != () or text.dtype.kind != "U":
            raise ValueError("has no 'meta' text")
        meta = json.loads(str(text))
        if not isinstance(meta, dict):
            raise ValueError("has a 'meta' that is not a JSON object")
        for name, a in members.items():
            if a.dtype not in _KINDS:
                raise ValueError(f"member {name!r} has dtype {a.dtype}")
        return meta, members
    except Refusal:
        raise
    except OSError as err:
        refuse(entry, "path", f"cannot be read ({err})", value=path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, KeyError, TypeError,
            OverflowError, MemoryError, NotImplementedError, RuntimeError) as err:
        refuse(entry, "path", f"is not a mojolike training checkpoint ({type(err).__name__}: "
                              f"{err})", value=path)
