"""Every runnable example in a docstring runs and prints what it says."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "mojolike", "mojolike._fold", "mojolike._optim", "mojolike._params", "mojolike.registry",
    "mojolike.refusals", "mojolike.oracles.f32", "mojolike.oracles.fold", "mojolike.oracles.optim",
    "mojolike.oracles.scalars", "mojolike.native.fold", "mojolike.native.optim",
    "mojolike.native.c.fold", "mojolike.native.c.optim", "mojolike.native.c.crmath",
    "mojolike.native.cuda.crmath", "mojolike.contracts.casegen",
    "mojolike.contracts.cardformat", "mojolike.contracts.fold", "mojolike.contracts.optim",
    "mojolike.contracts.harness", "mojolike._crmath", "mojolike.math", "mojolike._loss",
    "mojolike.oracles.crmath", "mojolike.oracles.loss", "mojolike.native.crmath",
    "mojolike.contracts.crmath", "mojolike.contracts.loss", "mojolike.native.loss",
    "mojolike.native.c.loss", "mojolike.native.cuda.loss", "mojolike._schedule",
    "mojolike.oracles.schedule", "mojolike.native.schedule", "mojolike.native.c.schedule",
    "mojolike.native.cuda.schedule", "mojolike.contracts.schedule", "mojolike._rng",
    "mojolike.random", "mojolike.oracles.rng", "mojolike.native.rng", "mojolike.native.c.rng",
    "mojolike.native.cuda.rng", "mojolike.contracts.rng",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no runnable example"
