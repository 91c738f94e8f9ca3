"""The op families and where each backend's kernels of a family live.

Every family has one module per layer, named after it: the definition
`mojolike.oracles.<family>`, the kernel sets `<layer>.<family>` (each with
`load(mode, backend=...)`), the contract `contracts/<family>.md` and its suite, and
its reference card. This tuple is the only list of them: the registry, the C build,
the contract suites and the tests all read it.

Reproducibility: the order is part of the cffi build's cache key (native/c/build.py
concatenates the C sources in it), so a family joins at the end.

>>> loader("layers", "cpu-cffi")
'mojolike.native.c.layers:load'
"""
from __future__ import annotations

FAMILIES = ("fold", "optim", "crmath", "loss", "schedule", "rng", "layers", "transformer", "mixed")

# backend -> the package holding that backend's kernel modules, one per family
LAYERS = {
    "oracle": "mojolike.oracles.kernels",
    "cpu-numba": "mojolike.native",
    "cpu-cffi": "mojolike.native.c",
    "cuda": "mojolike.native.cuda",
    "cuda-sim": "mojolike.native.cuda",
}


def module(family: str, backend: str) -> str:
    """The module holding `family`'s kernels on `backend`: "<layer>.<family>"."""
    if family not in FAMILIES:
        raise KeyError(f"{family!r} is not an op family; the families are {', '.join(FAMILIES)}")
    return f"{LAYERS[backend]}.{family}"


def loader(family: str, backend: str) -> str:
    """"<layer>.<family>:load", the factory the registry calls with (mode, backend=backend)."""
    return f"{module(family, backend)}:load"
