"""Refusals: what the contract does not cover is refused by name, before anything is written.

Every message names the entry point, the option and the reason, and where there
is one, what to do instead. All refusals raise `Refusal` (a ValueError), so one
except clause catches them; `BackendUnavailable` is the refusal of a backend that
exists but cannot run here.

>>> try:
...     refuse("mojolike.fold", "x", "is empty; fold needs at least one value")
... except Refusal as e:
...     print(e)
mojolike.fold: x is empty; fold needs at least one value.
"""
from __future__ import annotations


class Refusal(ValueError):
    """A request outside the contract. `entry_point` and `option` name what was refused."""

    def __init__(self, entry_point: str, option: str, reason: str):
        self.entry_point = entry_point
        self.option = option
        self.reason = reason
        text = f"{entry_point}: {option} {reason}"
        super().__init__(text if text.endswith(".") else text + ".")


class BackendUnavailable(Refusal):
    """A known backend that cannot run in this process; the message says why."""


def refuse(entry_point: str, option: str, reason: str) -> None:
    raise Refusal(entry_point, option, reason)


def refuse_unknown_keywords(entry_point: str, unknown: dict, known: tuple[str, ...]) -> None:
    """Refuse keywords the entry point does not take (instead of ignoring them)."""
    if unknown:
        names = ", ".join(sorted(unknown))
        raise Refusal(entry_point, f"keyword {names}",
                      f"is not an option of {entry_point}; it takes {', '.join(known)}")
