"""Refusals: what the contract does not cover is refused by name, before anything is written.

Every message starts with the entry point, then names the option (with the value
given, where there is one), the reason and, where there is one, what to do
instead. All refusals raise `Refusal` (a ValueError), so one except clause catches
them; `BackendUnavailable` is the refusal of a backend that exists but cannot run
here. `Refusal.option` is the option's name alone, for programs (and the suites'
refusal clauses) to compare. The argument checks that raise them live in
`mojolike.core.checks`.

>>> try:
...     refuse("mojolike.SGD", "lr", "must be >= 0.0", value=-0.1)
... except Refusal as e:
...     print(e.option, "|", e)
lr | mojolike.SGD: lr=-0.1 must be >= 0.0.
"""
from __future__ import annotations

_UNSET = object()
_SHOWN = 80  # characters of a value's repr in a message


def show(value) -> str:
    """A value's repr, cut short: a refused argument may be a huge array or string."""
    try:
        text = repr(value)
    except Exception as e:  # a hostile __repr__ must not hide the refusal
        text = f"<{type(value).__name__} whose repr fails: {type(e).__name__}>"
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


class Refusal(ValueError):
    """A request outside the contract. `entry_point` and `option` name what was refused,
    `value` is the refused value when the message shows one (else None)."""

    def __init__(self, entry_point: str, option: str, reason: str, *, value=_UNSET):
        self.entry_point = entry_point
        self.option = option
        self.reason = reason
        self.value = None if value is _UNSET else value
        self._value = value
        shown = option if value is _UNSET else f"{option}={show(value)}"
        text = f"{entry_point}: {shown} {reason}"
        super().__init__(text if text.endswith(".") else text + ".")


    def at(self, entry_point: str) -> "Refusal":
        """The same refusal raised by another entry point (one that delegates the check)."""
        return type(self)(entry_point, self.option, self.reason, value=self._value)


class BackendUnavailable(Refusal):
    """A known backend that cannot run in this process; the message says why."""


def refuse(entry_point: str, option: str, reason: str, *, value=_UNSET) -> None:
    raise Refusal(entry_point, option, reason, value=value)

