"""Card format: the text that certifies a suite, byte-identical on every backend.

    # mojolike card profile=<profile>
    <case-id>/<output> n=<cells> md5=<md5 of the output's little-endian bytes>
    ...
    # records=<count>

Every NaN is hashed as 0x7fc00000 (payloads differ between vendors). Nothing
about the machine goes in a card; that is the `.meta.json` beside it.

>>> import numpy as np
>>> record("normal-n1", "fold", np.float32([1.0]))
'normal-n1/fold n=1 md5=429d81ed2795e3c586906c6c335aa136'
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

CANONICAL_NAN = np.uint32(0x7FC00000)


def canonical_bytes(a) -> bytes:
    """Little-endian bytes of a float32 array with every NaN as one pattern."""
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32).reshape(-1))
    bits = a.view(np.uint32).copy()
    bits[np.isnan(a)] = CANONICAL_NAN
    return bits.astype("<u4").tobytes()


def record(case_id: str, output: str, a) -> str:
    data = canonical_bytes(a)
    return f"{case_id}/{output} n={len(data) // 4} md5={hashlib.md5(data).hexdigest()}"


def render(profile: str, records: list[str]) -> str:
    return "".join([f"# mojolike card profile={profile}\n"] + [r + "\n" for r in records]
                   + [f"# records={len(records)}\n"])


def md5_text(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def records_of(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def first_difference(a: str, b: str) -> str | None:
    """None when two card texts are equal, else a sentence naming the first differing record."""
    if a == b:
        return None
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb), 1):
        if x != y:
            return f"line {i}: {x!r} != {y!r}"
    longer, which = (la, "first") if len(la) > len(lb) else (lb, "second")
    return f"line {min(len(la), len(lb)) + 1}: only the {which} card has {longer[min(len(la), len(lb))]!r}"


def count_differing_records(a: str, b: str) -> int:
    ra, rb = records_of(a), records_of(b)
    return sum(x != y for x, y in zip(ra, rb)) + abs(len(ra) - len(rb))
