"""One list of op families (mojolike/core/families.py), and every layer found by its convention.

Every family has its module in every layer, each kernel module has `load`, the registry
serves each (family, backend) from "<layer>.<family>:load", and no other source file
spells a list of families by hand: a tuple, list or set literal, or a dict's keys,
holding three or more family names is a failure anywhere but families.py.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mojolike.core import families, registry
from mojolike.core.families import FAMILIES
from mojolike.native.c import build

from mojolike.contracts import SUITES, harness

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("mojolike", "oracles", "native", "contracts", "tests", "benchmarks")
# The one deliberate subset outside families.py: three suites in three roles of the GPU
# check's commit rule (tests/test_gpu_check.py says so where it names them).
SUBSETS = {("tests/test_gpu_check.py", frozenset("fold optim loss".split()))}
# backend -> the folder of its kernel modules (cuda-sim runs the cuda modules)
FOLDERS = {"oracle": "oracles/kernels", "cpu-numba": "native", "cpu-cffi": "native/c",
           "cuda": "native/cuda", "cuda-sim": "native/cuda"}
IN_PROCESS = ("oracle", "cpu-numba", "cpu-cffi")


def test_the_layer_map_covers_every_backend_and_the_c_build_and_suites_read_the_one_list():
    assert tuple(families.LAYERS) == registry.BACKENDS
    assert build.FAMILIES is FAMILIES
    assert SUITES[:len(FAMILIES)] == FAMILIES and SUITES[len(FAMILIES):] == ("step", "train",
                                                                            "distributed")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_its_module_in_every_layer(family):
    paths = [f"oracles/{family}.py", f"oracles/kernels/{family}.py", f"native/{family}.py",
             f"native/c/{family}.py", f"native/c/{family}.c", f"native/c/{family}.h",
             f"native/cuda/{family}.py", f"mojolike/core/interfaces/{family}.py",
             f"contracts/{family}.py", f"contracts/{family}.md", f"cards/{family}.card"]
    assert [p for p in paths if not (ROOT / p).is_file()] == []
    # the family's API: a module of mojolike/ops/, or a room of its own (the optimizers)
    assert (ROOT / f"mojolike/ops/{family}.py").is_file() or \
        (ROOT / f"mojolike/{family}/__init__.py").is_file(), family


def test_every_suite_has_its_contract_and_card_and_certifies_a_family():
    for suite in SUITES:
        for path in (f"contracts/{suite}.py", f"contracts/{suite}.md", f"cards/{suite}.card"):
            assert (ROOT / path).is_file(), path
    # a suite may certify another family's entry points (step: the optimizers, FAMILY optim)
    assert {harness.suite_module(s).FAMILY for s in SUITES} <= set(FAMILIES)


def _load_params(path: Path) -> list[str] | None:
    """The parameter names of the module's top-level `load`, read from its source (no import)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == "load":
            return [a.arg for a in node.args.args]
    return None


@pytest.mark.parametrize("backend", sorted(set(FOLDERS) - {"cuda-sim"}))
@pytest.mark.parametrize("family", FAMILIES)
def test_every_kernel_module_has_load_of_mode_and_backend(family, backend):
    module = families.module(family, backend)
    path = ROOT / FOLDERS[backend] / f"{family}.py"
    assert module.endswith(f".{family}") and families.loader(family, backend) == f"{module}:load"
    assert _load_params(path) == ["mode", "backend"], path


@pytest.mark.parametrize("backend", IN_PROCESS)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_registry_serves_each_family_from_the_module_the_convention_names(family, backend):
    k = registry.kernels("test", family, backend, "identical")
    assert type(k).__module__ == families.module(family, backend)
    assert (k.backend, k.numeric_mode) == (backend, "identical")


def test_a_name_that_is_not_a_family_has_no_loader():
    with pytest.raises(KeyError, match="not an op family"):
        families.loader("folds", "oracle")


def hand_lists(source: str) -> list[tuple[int, frozenset[str]]]:
    """(line, names) of every tuple/list/set literal or dict whose keys hold >= 3 family names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        names = frozenset(e.value for e in items
                          if isinstance(e, ast.Constant) and e.value in FAMILIES)
        if len(names) >= 3:
            found.append((node.lineno, names))
    return found


def test_the_scan_finds_a_tuple_a_set_and_dict_keys_of_family_names():
    source = ('a = ("fold", "loss", "rng")\nb = {"optim", "crmath", "layers", "x"}\n'
              'c = {"fold": 1, "loss": 2, "schedule": 3}\nd = ("fold", "loss")\n')
    assert [line for line, _ in hand_lists(source)] == [1, 2, 3]


def test_nothing_but_families_py_lists_the_families_by_hand():
    offenders, subsets = [], set()
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "mojolike/core/families.py" or "/." in rel:
                continue
            for line, names in hand_lists(path.read_text()):
                if (rel, names) in SUBSETS:
                    subsets.add((rel, names))
                else:
                    offenders.append(f"{rel}:{line}: {sorted(names)}")
    assert offenders == []
    assert subsets == SUBSETS  # an allowance nothing uses any more goes too
