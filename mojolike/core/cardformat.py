"""Card format: the text that certifies a suite, byte-identical on every backend.

    # mojolike card profile=<profile>
    <case-id>/<output> n=<cells> md5=<md5 of the output's little-endian bytes>
    ...
    # records=<count>
    # md5=<md5 of every byte above this line>

The last line makes a card check itself: the card's identity (`card_md5`, what
certify and the README print) is that md5, the md5 of the body above it. Every
reader goes through `parse`, which refuses a damaged, truncated or garbled card
naming the file and the line. Every NaN is hashed as 0x7fc00000 (payloads differ
between vendors). Nothing about the machine goes in a card; that is the
`.meta.json` beside it.

>>> import numpy as np
>>> record("normal-n1", "fold", np.float32([1.0]))
'normal-n1/fold n=1 md5=429d81ed2795e3c586906c6c335aa136'
>>> text = render("demo.v1", [record("c", "o", np.float32([1.0]))])
>>> print(text, end="")
# mojolike card profile=demo.v1
c/o n=1 md5=429d81ed2795e3c586906c6c335aa136
# records=1
# md5=e04414ba7915cb0ba748fcbd455dc396
>>> parse(text, "demo.card").md5 == card_md5(text)
True
>>> parse(text.replace("n=1", "n=2"), "demo.card")
Traceback (most recent call last):
...
mojolike.core.cardformat.CardError: demo.card, line 4: the trailer md5 ... does not match ...
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import create_temp

CANONICAL_NAN = np.uint32(0x7FC00000)

HEADER = re.compile(r"# mojolike card profile=(\S+)")
RECORD = re.compile(r"(\S+)/(\S+) n=(0|[1-9][0-9]*) md5=([0-9a-f]{32})")
COUNT = re.compile(r"# records=(0|[1-9][0-9]*)")
TRAILER = re.compile(r"# md5=([0-9a-f]{32})")


class CardError(ValueError):
    """A card file that is not a valid card; the message names the file and the line.

    Not a `mojolike.Refusal`: a refusal is the library declining a caller's request
    that the contract does not cover (an entry point and an option). This is a
    verification failure: the file that should prove a result is damaged, truncated
    or forged, and the tools that read cards (certify, compare) report it as such.
    """

    def __init__(self, source: str, line: int, reason: str):
        self.source, self.line, self.reason = source, line, reason
        super().__init__(f"{source}, line {line}: {reason}")


@dataclass(frozen=True)
class Card:
    """A parsed, verified card: `records` maps `<case>/<output>` to (cells, md5)."""

    source: str
    profile: str
    records: dict[str, tuple[int, str]]
    md5: str  # the trailer's value: the md5 of every byte above the trailer
    text: str


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
    body = "".join([f"# mojolike card profile={profile}\n"] + [r + "\n" for r in records]
                   + [f"# records={len(records)}\n"])
    return body + f"# md5={md5_text(body)}\n"


def md5_text(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def parse(text: str, source: str = "<card>") -> Card:
    """The card in `text`, verified line by line; `CardError` naming `source` and the line
    for anything that is not exactly a card (the format above, trailer included)."""
    if not text:
        raise CardError(source, 1, "the file is empty; a card starts with '# mojolike card profile=...'")
    lines = text.split("\n")
    ends_with_newline = lines[-1] == ""
    if ends_with_newline:
        lines.pop()
    head = HEADER.fullmatch(lines[0])
    if not head:
        raise CardError(source, 1, f"expected '# mojolike card profile=<profile>', got {lines[0][:80]!r}")
    records: dict[str, tuple[int, str]] = {}
    i = 1
    while i < len(lines) and not lines[i].startswith("#"):
        m = RECORD.fullmatch(lines[i])
        if not m:
            raise CardError(source, i + 1, "expected a record '<case>/<output> n=<cells> md5=<32 "
                                           f"lowercase hex>', got {lines[i][:80]!r}")
        key = f"{m[1]}/{m[2]}"
        if key in records:
            raise CardError(source, i + 1, f"duplicate record {key!r}")
        records[key] = (int(m[3]), m[4])
        i += 1
    count = COUNT.fullmatch(lines[i]) if i < len(lines) else None
    if not count:
        got = repr(lines[i][:80]) if i < len(lines) else "the end of the file"
        raise CardError(source, i + 1, f"expected '# records=<count>', got {got}")
    if int(count[1]) != len(records):
        raise CardError(source, i + 1, f"says records={count[1]} but the card has {len(records)}")
    i += 1
    trailer = TRAILER.fullmatch(lines[i]) if i < len(lines) else None
    if not trailer:
        got = repr(lines[i][:80]) if i < len(lines) else "the end of the file"
        raise CardError(source, i + 1, f"expected the trailer '# md5=<md5 of the lines above>', got {got}")
    body = "".join(ln + "\n" for ln in lines[:i])
    if md5_text(body) != trailer[1]:
        raise CardError(source, i + 1, f"the trailer md5 {trailer[1]} does not match the md5 of the "
                                       f"lines above it ({md5_text(body)}); the card was altered")
    if i + 1 < len(lines):
        raise CardError(source, i + 2, f"text after the trailer: {lines[i + 1][:80]!r}")
    if not ends_with_newline:
        raise CardError(source, i + 1, "the trailer does not end with a newline")
    return Card(source, head[1], records, trailer[1], text)


def read(path: Path) -> Card:
    """Parse the card file at `path` (ASCII text); `CardError` naming the file otherwise."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise CardError(str(path), line, f"byte 0x{data[e.start]:02x} is not ASCII text") from None
    return parse(text, str(path))


def card_md5(text: str) -> str:
    """A card's identity: its trailer's md5 (verified), the md5 of the body above it."""
    return parse(text).md5


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename over `path`; the file
    gets the permissions the umask gives a new file (not a temporary file's 0o600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(str(path.parent), f".{path.name}.", ".tmp")
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
