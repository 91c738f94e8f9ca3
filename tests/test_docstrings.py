"""Every runnable example in a docstring runs and prints what it says (every module of the
package, found by walking it, so a new module is covered without editing this file)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

# the simulator worker's module runs in its own process (NUMBA_ENABLE_CUDASIM=1)
SKIP = {"mojolike.native.cuda.simworker", "mojolike.__main__"}


def _modules() -> list[str]:
    # every package is walked through its own __path__: the layers are installed from their
    # own folders (package-dir), so one walk of mojolike's folder would miss them
    found, todo = set(), ["mojolike", "mojolike.oracles", "mojolike.native", "mojolike.contracts",
                          "mojolike.cards"]
    while todo:
        pkg = todo.pop()
        found.add(pkg)
        for m in pkgutil.iter_modules(importlib.import_module(pkg).__path__, pkg + "."):
            (todo.append if m.ispkg else found.add)(m.name)
    return sorted(found - SKIP)


MODULES = _modules()


def test_the_walk_finds_every_layer():
    for name in ("mojolike.oracles.f32", "mojolike.native.fold", "mojolike.native.c.fold",
                 "mojolike.native.cuda.fold", "mojolike.contracts.fold", "mojolike.ops.fold"):
        assert name in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
