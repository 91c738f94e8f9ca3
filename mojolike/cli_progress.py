"""What `mojolike certify` says while it runs: one line as each suite x backend starts and
one as it ends (its position `suite k/N`, the elapsed time, the clause results), written
whether or not stderr is a terminal; on a terminal only, a live case counter beneath them.

Two threads report at once (the simulator's outputs are computed in a worker thread while
this process runs the oracle and the CPU backends), so every write holds one lock and the
live counter is erased before a line is written: no two progress streams share a line.

Reproducibility: progress is only printed; nothing here reaches a card.

>>> import io
>>> out = io.StringIO()
>>> p = Progress(["fold"], stream=out, clock=iter([0.0, 0.0, 1.5]).__next__)
>>> p.cases("fold cpu-numba", 0, 120)
>>> p.cases("fold cpu-numba", 120, 120)
>>> print(out.getvalue().strip())
[0.0 s] suite 1/1 fold cpu-numba: started (120 cases)
[1.5 s] suite 1/1 fold cpu-numba: outputs computed in 1.5 s
"""
from __future__ import annotations

import sys
import threading
import time

# What the clause letters of a suite x backend row and of a suite's own line mean; a
# suite's contract (contracts/<suite>.md) says what its invariance clause covers.
LEGEND = {
    "a": "every output equals the oracle bit for bit",
    "b": "the card equals the committed reference card",
    "c": "invariance (threads, sizes, splits: the suite's contract says which)",
    "d": "the suite's own clause (resume or bandwidth: see its contract)",
    "e": "negative controls: every deliberate deviation changes the card (once per suite)",
    "f": "refusals: what the contract does not cover is refused by name",
    "g": "an equivalence the suite states (mixed: a low-precision op equals the float32 op on "
         "the widened inputs; train: generated log-probs equal the training forward's)",
    "k": "known answers published with the algorithm",
}


class Progress:
    """Progress lines for a certify run over `suites` (in order), written to `stream`."""

    def __init__(self, suites, stream=None, clock=time.perf_counter):
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.t0 = clock()
        self.position = {s: i for i, s in enumerate(suites, 1)}
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started: dict[str, float] = {}
        self.lock = threading.Lock()
        self.bar = ""  # the live counter to show beneath the lines ('' for none)
        self.shown = False  # whether a live counter is on the terminal's last line now

    def _where(self, suite: str) -> str:
        return f"suite {self.position.get(suite, '?')}/{len(self.position)} {suite}"

    def _line(self, now: float, text: str) -> None:
        """Write one whole line (the lock is held), the live counter erased first and redrawn."""
        if self.shown:
            self.stream.write("\r\x1b[K")
        self.stream.write(f"[{now - self.t0:.1f} s] {text}\n")
        if self.bar:
            self.stream.write(self.bar)
        self.shown = bool(self.bar)
        self.stream.flush()

    def cases(self, label: str, done: int, total: int) -> None:
        """The harness's callback: `done` of `total` cases of `label` ("<suite> <backend>" or
        "<suite> control <name>"); 0 when the label starts."""
        suite, _, rest = label.partition(" ")
        control = rest.startswith("control ")
        with self.lock:
            now = self.clock()
            if done == 0 and not control:
                self.started[label] = now
                self._line(now, f"{self._where(suite)} {rest}: started ({total} cases)")
            elif done == total and not control and label in self.started:
                self.bar = "" if self.bar.startswith(f"  {label}:") else self.bar
                self._line(now, f"{self._where(suite)} {rest}: outputs computed in "
                                f"{now - self.started.pop(label):.1f} s")
            elif self.live:
                self.bar = f"  {label}: {done}/{total} cases"
                self.stream.write("\r\x1b[K" + self.bar)
                self.shown = True
                self.stream.flush()

    def finished(self, run) -> None:
        """A suite x backend's clauses are known (a `harness.SuiteRun`)."""
        clauses = " ".join(f"{k}:{c.status}" for k, c in run.clauses.items() if k != "b")
        with self.lock:  # clause b compares backends' cards: it is settled once all have run
            self._line(self.clock(), f"{self._where(run.suite)} {run.backend}: done, "
                                     f"{run.records} records, md5 {run.card_md5}, {clauses}")

    def controls(self, suite: str, clauses: dict) -> None:
        """A suite's own clauses (the negative controls) are known."""
        text = " ".join(f"{k}:{c.status}" for k, c in clauses.items())
        with self.lock:
            self._line(self.clock(), f"{self._where(suite)}: negative controls {text}")

    def total(self, runs: int) -> None:
        with self.lock:
            self.bar = ""
            self._line(self.clock(), f"certify: {runs} runs of {len(self.position)} "
                                     f"suite{'s' if len(self.position) != 1 else ''} done")
