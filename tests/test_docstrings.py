"""Every runnable example in a docstring runs and prints what it says."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "mojolike", "mojolike._fold", "mojolike.registry", "mojolike.refusals",
    "mojolike.oracles.f32", "mojolike.oracles.fold",
    "mojolike.native.fold", "mojolike.native.c.fold",
    "mojolike.contracts.casegen", "mojolike.contracts.cardformat", "mojolike.contracts.fold",
    "mojolike.contracts.harness",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no runnable example"
