"""Every public entry point, fuzzed: it returns or refuses by name, and a refusal changes nothing.

A bounded budget for CI (tests/fuzzing.py has the targets); `python benchmarks/fuzz.py` runs
10^5 cases and more.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzzing import TARGETS



@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_every_entry_point_returns_or_refuses_by_name_and_changes_nothing(target):
    phases = [p for p in Phase if target.shrink or p not in (Phase.shrink, Phase.explain)]

    @settings(max_examples=target.ci, deadline=None, database=None, phases=phases,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data):
        target.run(data.draw)

    fuzz()
