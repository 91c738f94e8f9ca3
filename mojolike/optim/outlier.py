"""An outlier detector for training signals (the loss, the gradient norm): llm.c's, in binary64.

`OutlierDetector(window=128)` keeps the last `window` values, a running sum and a
running sum of squares updated by += and -= (llm.c's `llmc/outlier_detector.h`,
operation for operation: Python floats are IEEE binary64 and Python never fuses a
multiply and an add). While the window fills, `update` returns NaN; after that the
new value replaces the oldest and its z-score is taken against the window that now
holds it; a window without spread gives 0.0.

Reproducibility: plain binary64 arithmetic in a fixed order, no library call but
the correctly rounded square root, so the same z-scores on every machine; a
detector restored from `state_dict` continues exactly.

>>> d = OutlierDetector(window=4)
>>> [d.update(v) for v in (1.0, 2.0, 3.0, 4.0)]
[nan, nan, nan, nan]
>>> round(d.update(10.0), 6)    # the window is now 2, 3, 4, 10
1.686761
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse


class OutlierDetector:
    """llm.c's outlier detector (see the module docstring); `update(x)` returns the z-score."""

    @entry_point()
    def __init__(self, window=128, *, entry, **unknown):
        self.window = checks.integer(entry, "window", window, low=1, high=2**31 - 1)
        self._buffer = [0.0] * self.window
        self._count = 0
        self._index = 0
        self._sum = 0.0
        self._sum_sq = 0.0

    @entry_point()
    def update(self, value, *, entry, **unknown) -> float:
        """Take one value (a finite or non-finite real); the z-score of it, NaN while filling."""
        x = _real(entry, "value", value)
        n = self.window
        if self._count < n:  # still building up the window
            self._buffer[self._count] = x
            self._sum += x
            self._sum_sq += x * x
            self._count += 1
            return math.nan
        old = self._buffer[self._index]  # pop the oldest value
        self._sum -= old
        self._sum_sq -= old * old
        self._buffer[self._index] = x  # push the new one
        self._sum += x
        self._sum_sq += x * x
        self._index = (self._index + 1) % n
        mean = self._sum / n
        variance = self._sum_sq / n - mean * mean
        std = _c_sqrt(variance)
        if std == 0.0:
            return 0.0
        return (x - mean) / std

    @entry_point()
    def state_dict(self, **unknown) -> dict:
        """Everything the detector holds (copies)."""
        return {"window": self.window, "buffer": list(self._buffer), "count": self._count,
                "index": self._index, "sum": self._sum, "sum_sq": self._sum_sq}

    @entry_point()
    def load_state_dict(self, state, *, entry, **unknown) -> None:
        """Restore a `state_dict()`; every field is checked before any is written."""
        e = entry
        keys = {"window", "buffer", "count", "index", "sum", "sum_sq"}
        if not isinstance(state, dict) or set(state) != keys:
            refuse(e, "state", f"must be a dict with the keys {', '.join(sorted(keys))}")
        window = checks.integer(e, "window", state["window"], low=1, high=2**31 - 1)
        buf = state["buffer"]
        if not isinstance(buf, (list, tuple)) or len(buf) != window:
            refuse(e, "buffer", f"must be a list of window={window} floats")
        buffer = [_real(e, f"buffer[{i}]", v) for i, v in enumerate(buf)]
        count = checks.integer(e, "count", state["count"], low=0, high=window)
        index = checks.integer(e, "index", state["index"], low=0, high=window - 1)
        total, total_sq = _real(e, "sum", state["sum"]), _real(e, "sum_sq", state["sum_sq"])
        self.window, self._buffer, self._count, self._index = window, buffer, count, index
        self._sum, self._sum_sq = total, total_sq


def _real(entry: str, name: str, v) -> float:
    """A real number as a binary64 float (inf and NaN kept: a diverged loss is a value too)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating, np.integer)):
        refuse(entry, name, f"must be a real number (int or float), not {type(v).__name__}", value=v)
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError) as err:
        refuse(entry, name, f"is not a binary64 value ({err})", value=v)


def _c_sqrt(v: float) -> float:
    """C's sqrt: NaN for a negative argument (rounding can make the variance slightly negative)."""
    return math.sqrt(v) if v >= 0.0 else math.nan
