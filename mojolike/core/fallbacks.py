"""A ledger of the values the host finished because a kernel left them undecided.

Four paths finish on the host, with the oracle, what a kernel could not decide:
`_crmath.finish` (expf/logf/sinpif/cospif slots marked UNDECIDED),
`_loss.finish_rows` (rows a loss kernel flagged), `_schedule.finish` (schedule
steps) and `_rng._finish_normal` (normal draws). Each reports here every value it
finishes, and `collect()` gathers the reports its own thread makes during a
block. `mojolike certify` counts them per case and fails clause (a) when a kernel
leaves the host a value its contract does not list, so a kernel that decides
nothing cannot certify by leaning on the oracle.

Watching costs nothing when nothing falls back: the finish functions report only
when they finish something (rare), and `record` returns at once when no block is
open on the calling thread. Blocks nest; a record reaches every open block of its
thread, up to and including the innermost one opened with `hold=True` (a loss row
holds the crmath values its recomputation finished, and reports them inside its
own record). Each thread has its own blocks, so concurrent callers never see each
other's records.

Reproducibility: recording reads results, it never changes one.

>>> import numpy as np, mojolike.math
>>> x = np.uint32([0x377EFF81, 0x3F800000]).view(np.float32)   # a hard input, then 1.0
>>> with collect() as got:
...     y = mojolike.math.expf(x, backend="cpu-numba")
>>> [str(r) for r in got]
['expf(0x377EFF81) = 0x3F800080']
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

_local = threading.local()


class Undecided(int):
    """A kernel's count of UNDECIDED slots that carries their flat positions too (`at`, an
    ascending int64 array), so the finish reads those slots instead of searching the whole
    output for the pattern (1-2 ms per 2^22 slots whenever one value was left undecided).
    Everywhere else it is the count.

    >>> import numpy as np
    >>> n = Undecided(np.array([3, 9]))
    >>> n == 2, n.at.tolist()
    (True, [3, 9])
    """

    at: object

    def __new__(cls, at):
        self = super().__new__(cls, len(at))
        self.at = at
        return self


@dataclass(frozen=True)
class Fallback:
    """One value the host finished.

    family: "crmath", "loss", "schedule" or "rng"; kind: the function ("expf"...),
    "row", the schedule kind ("linear"...) or "normal"; at: the input bit pattern
    (crmath), the row (loss), the step (schedule) or the stream position (rng);
    bits: the finished value's bit pattern; config: what else fixes the value
    (schedule: P and M as bit patterns, W, T; rng: seed, stream, mean and std as
    bit patterns); finished: for a loss row, the crmath values its host
    recomputation finished.
    """

    family: str
    kind: str
    at: int
    bits: int
    config: tuple = ()
    finished: tuple = ()

    def __str__(self) -> str:
        value = f"0x{self.bits:08X}"
        if self.family == "crmath":
            return f"{self.kind}(0x{self.at:08X}) = {value}"
        if self.family == "loss":
            inner = ", ".join(str(f) for f in self.finished) or "no expf/logf value"
            return f"row {self.at} = {value} (its host recomputation finished {inner})"
        if self.family == "schedule":
            p, m, w, t = self.config
            return f"{self.kind} step {self.at} (P=0x{p:08X}, M=0x{m:08X}, W={w}, T={t}) = {value}"
        if self.family == "rng":
            seed, stream, mean, std = self.config
            return (f"{self.kind} at position {self.at} (seed {seed}, stream {stream}, "
                    f"mean 0x{mean:08X}, std 0x{std:08X}) = {value}")
        return f"{self.family} {self.kind} {self.at} = {value}"


class Collected(list):
    """The records of one `collect()` block, in the order they were made."""

    def __init__(self, hold: bool):
        super().__init__()
        self.hold = hold


def watching() -> bool:
    """Whether a `collect()` block is open on the calling thread."""
    return bool(getattr(_local, "blocks", None))


def record(family: str, kind: str, at: int, bits: int, config: tuple = (),
           finished: tuple = ()) -> None:
    """Report one finished value to the calling thread's open blocks (nothing when none is open)."""
    blocks = getattr(_local, "blocks", None)
    if not blocks:
        return
    fb = Fallback(family, kind, int(at), int(bits), tuple(config), tuple(finished))
    for block in reversed(blocks):
        block.append(fb)
        if block.hold:
            break


@contextlib.contextmanager
def collect(*, hold: bool = False):
    """Collect every value the calling thread's finish functions report inside the block.

    With `hold=True` the records stay in this block and do not reach the blocks
    around it.

    >>> with collect() as outer:
    ...     with collect(hold=True) as inner:
    ...         record("crmath", "logf", 0x3C413D3A, 0xC0AD3A56)
    ...     record("loss", "row", 0, 0x40000000, finished=tuple(inner))
    >>> [r.kind for r in outer], len(inner)
    (['row'], 1)
    """
    blocks = getattr(_local, "blocks", None)
    if blocks is None:
        blocks = _local.blocks = []
    got = Collected(hold)
    blocks.append(got)
    try:
        yield got
    finally:
        # by identity: two blocks with equal records compare equal as lists
        del blocks[next(i for i in range(len(blocks) - 1, -1, -1) if blocks[i] is got)]
