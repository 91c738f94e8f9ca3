"""A byte-level token stream over English text that ships with the package, cut into fixed windows.

The text is `mojolike/text/topics.txt`: the first 131072 bytes of CPython
3.11.7's `pydoc_data.topics` (the reference manual's topics that `help()` shows:
the topics in sorted key order, concatenated, encoded as UTF-8), after one header
line naming that source and its license (PSF). It ships with the package because
every Python version ships other topics, and a run's bits must not depend on the
Python that runs it. Tokens are its bytes (vocabulary 256). Window w of length T
is tokens [w T, w T + T) with targets [w T + 1, w T + T + 1): consecutive windows
tile the text, and the W = (len - 1) div T windows are taken in order, wrapping
around (window index mod W). Row r of the run is window r mod W; step s with
batch size B holds rows s B .. s B + B - 1.

Reproducibility: a batch is a function of (step, row, seq_len) and the text
alone: a resumed run, a microbatch (`windows(first_row, rows, seq_len)`) and a
second process see the same windows, on every Python version. `TextStream.md5`
(the md5 of the token bytes) identifies the text.

>>> from mojolike import data
>>> tokens, targets = data.batch(0, batch_size=2, seq_len=8)
>>> bytes(tokens[0].astype("u1")), bytes(targets[0].astype("u1"))
(b'The "ass', b'he "asse')
>>> (tokens[1, 0], targets[0, -1])      # window 1 starts where window 0's targets end
(np.int64(101), np.int64(101))
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse

VOCAB = 256  # byte-level
SHIPPED = Path(__file__).resolve().parents[1] / "text" / "topics.txt"


@entry_point("mojolike.data.shipped_text")
def shipped_text(**unknown) -> bytes:
    """The shipped text's bytes: `mojolike/text/topics.txt` after its header line."""
    raw = SHIPPED.read_bytes()
    return raw[raw.index(b"\n") + 1:]


@entry_point("mojolike.data.pydoc_text")
def pydoc_text(**unknown) -> bytes:
    """The topics of the running Python's `pydoc_data.topics`, in sorted key order, concatenated,
    as UTF-8 bytes (the source of the shipped text; it differs between Python versions)."""
    from pydoc_data.topics import topics
    return "".join(topics[k] for k in sorted(topics)).encode("utf-8")


class TextStream:
    """Tokens (the bytes of a text, vocabulary 256) cut into fixed windows by position.

    Parameters: `text` bytes, or None for `shipped_text()`.

    Reproducibility: `windows` and `batch` depend on their arguments and the text
    alone (see the module docstring); `md5` identifies the text.

    >>> s = TextStream(b"abcdefghij")
    >>> s.num_windows(3), s.windows(2, 2, 3)[0].tolist()      # window 3 wraps to window 0
    (3, [[103, 104, 105], [97, 98, 99]])
    """

    _ENTRY = "mojolike.data.TextStream"

    @entry_point()
    def __init__(self, text=None, *, entry, **unknown):
        raw = shipped_text() if text is None else text
        if not isinstance(raw, (bytes, bytearray)) or len(raw) < 2:
            refuse(entry, "text", "must be bytes with at least 2 bytes (one token and its target)")
        self.tokens = np.frombuffer(bytes(raw), np.uint8)  # read-only: shared by every batch
        self.md5 = hashlib.md5(self.tokens.tobytes()).hexdigest()

    def __len__(self) -> int:
        return self.tokens.size

    @entry_point()
    def num_windows(self, seq_len, *, entry, **unknown) -> int:
        """W = (len - 1) div seq_len: the windows whose targets lie inside the text."""
        return (self.tokens.size - 1) // self._seq_len(entry, seq_len)

    @entry_point()
    def windows(self, first_row, rows, seq_len, *, entry,
                **unknown) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, targets), each (rows, seq_len) int64: rows first_row .. first_row + rows - 1
        of the run, row r being window r mod W."""
        e = entry
        return self._windows(e, checks.integer(e, "first_row", first_row, low=0),
                             checks.integer(e, "rows", rows, low=1), seq_len)

    @entry_point("mojolike.data.batch")
    def batch(self, step, batch_size, seq_len, *, entry,
              **unknown) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, targets) of step `step` (counted from 0: the steps taken before it), each
        (batch_size, seq_len) int64: rows step * batch_size .. + batch_size - 1."""
        e = entry
        s = checks.integer(e, "step", step, low=0)
        b = checks.integer(e, "batch_size", batch_size, low=1)
        return self._windows(e, s * b, b, seq_len)

    def _seq_len(self, e: str, seq_len) -> int:
        return checks.integer(e, "seq_len", seq_len, low=1, high=self.tokens.size - 1,
                              what=f"in [1, {self.tokens.size - 1}] (one window fits the text)")

    def _windows(self, e: str, first: int, rows: int, seq_len) -> tuple[np.ndarray, np.ndarray]:
        t = self._seq_len(e, seq_len)
        w = (np.arange(first, first + rows, dtype=object) % ((self.tokens.size - 1) // t))
        starts = w.astype(np.int64)[:, None] * t + np.arange(t + 1, dtype=np.int64)
        span = self.tokens[starts].astype(np.int64)  # (rows, t + 1): a window and its last target
        return np.ascontiguousarray(span[:, :-1]), np.ascontiguousarray(span[:, 1:])


@entry_point("mojolike.data.default_stream")
def default_stream(**unknown) -> TextStream:
    """The `shipped_text()` stream, read once per process."""
    return _default_stream()


@functools.lru_cache(maxsize=1)
def _default_stream() -> TextStream:
    return TextStream()


# one entry point with the stream's batch, which it forwards to
@entry_point(TextStream.batch.__entry__.name)
def batch(step, batch_size, seq_len, **unknown) -> tuple[np.ndarray, np.ndarray]:
    """`default_stream().batch(step, batch_size, seq_len)`: the shipped text's windows."""
    return default_stream().batch(step, batch_size, seq_len)
