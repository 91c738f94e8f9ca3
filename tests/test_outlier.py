"""OutlierDetector is llm.c's detector: NaN while the window fills, then the z-score of the new
value against the window that holds it, with running sums updated by += and -=."""
from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mojolike
from mojolike import Refusal


class Reference:
    """llm.c's update_detector written out again: a deque for the window, the same running sums."""

    def __init__(self, window):
        self.window, self.values, self.s, self.s2 = window, deque(), 0.0, 0.0

    def update(self, x):
        if len(self.values) < self.window:
            self.values.append(x)
            self.s += x
            self.s2 += x * x
            return math.nan
        old = self.values.popleft()
        self.s -= old
        self.s2 -= old * old
        self.values.append(x)
        self.s += x
        self.s2 += x * x
        mean = self.s / self.window
        var = self.s2 / self.window - mean * mean
        sd = math.sqrt(var) if var >= 0 else math.nan
        return 0.0 if sd == 0.0 else (x - mean) / sd


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=50, deadline=None)
@given(window=st.integers(1, 20), values=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=80))
def test_z_scores_equal_the_reference_transcription(window, values):
    d, r = mojolike.OutlierDetector(window), Reference(window)
    for v in values:
        assert same(d.update(v), r.update(v))


def test_the_z_score_matches_the_window_statistics_within_rounding():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(500) * 3 + 10
    d = mojolike.OutlierDetector(128)
    for i, x in enumerate(xs):
        z = d.update(float(x))
        if i < 128:  # llm.c: the first window-many values fill it
            assert math.isnan(z)
            continue
        w = xs[i - 127:i + 1]
        exact = (x - w.mean()) / w.std()
        assert abs(z - exact) <= 1e-9 * max(1.0, abs(exact))  # running sums vs a fresh two-pass


def test_a_window_without_spread_gives_zero():
    d = mojolike.OutlierDetector(3)
    assert [d.update(2.5) for _ in range(5)][3:] == [0.0, 0.0]


def test_a_restored_detector_continues_with_the_same_z_scores():
    xs = np.random.default_rng(1).standard_normal(300).tolist()
    a = mojolike.OutlierDetector(50)
    for x in xs[:120]:
        a.update(x)
    b = mojolike.OutlierDetector(7)
    b.load_state_dict(a.state_dict())
    assert [a.update(x) for x in xs[120:]] == [b.update(x) for x in xs[120:]]


@pytest.mark.parametrize("call,option", [
    (lambda: mojolike.OutlierDetector(0), "window"),
    (lambda: mojolike.OutlierDetector(2.5), "window"),
    (lambda: mojolike.OutlierDetector(4).update("1.0"), "value"),
    (lambda: mojolike.OutlierDetector(4).update(True), "value"),
    (lambda: mojolike.OutlierDetector(4).load_state_dict({"window": 4}), "state"),
    (lambda: mojolike.OutlierDetector(4, decay=0.9), "decay"),
])
def test_bad_input_is_refused_by_option(call, option):
    with pytest.raises(Refusal) as e:
        call()
    assert e.value.option == option
