"""Every runnable example in a docstring runs and prints what it says (every module of the
package, found by walking it, so a new module is covered without editing this file)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest


# the simulator worker's module runs in its own process (NUMBA_ENABLE_CUDASIM=1)
SKIP = {"mojolike.native.cuda.simworker", "mojolike.__main__"}
# the layers are subpackages installed from their own folders (package-dir), so walk each
PACKAGES = ("mojolike", "mojolike.oracles", "mojolike.native", "mojolike.native.c",
            "mojolike.native.cuda", "mojolike.contracts", "mojolike.cards")


def _modules() -> list[str]:
    found = set(PACKAGES)
    for pkg in PACKAGES:
        path = importlib.import_module(pkg).__path__
        found |= {m.name for m in pkgutil.iter_modules(path, pkg + ".") if not m.ispkg}
    return sorted(found - SKIP)


MODULES = _modules()


def test_the_walk_finds_every_layer():
    for name in ("mojolike.oracles.f32", "mojolike.native.fold", "mojolike.native.c.fold",
                 "mojolike.native.cuda.fold", "mojolike.contracts.fold", "mojolike._fold"):
        assert name in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
