"""The import rule of ARCHITECTURE.md, checked on the source: every import statement of the
library (module level or inside a function) goes from a room to one the rule allows.

Rooms, bottom up: the oracles (the definitions), the core, the kernels (native/) and the
oracle kernel sets beside them, the op families' API (mojolike/ops), the optimizers,
training and distributed; then the package's top-level modules and the contracts. An
arrow may only point down; kernels never import the API; only the certify and compare
commands (mojolike/cli.py) reach the contracts and the cards.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"mojolike": "mojolike", "oracles": "mojolike.oracles", "native": "mojolike.native",
           "contracts": "mojolike.contracts", "cards": "mojolike.cards"}
ROOMS = ("mojolike.core", "mojolike.ops", "mojolike.optim", "mojolike.training",
         "mojolike.distributed")
ALLOWED = {
    "oracles": set(),
    "core": {"oracles"},
    "kernels": {"oracles", "core"},
    "oracle kernels": {"oracles", "core"},
    "ops": {"oracles", "core"},
    "optim": {"oracles", "core", "ops"},
    "training": {"oracles", "core", "ops", "optim"},
    "distributed": {"oracles", "core", "ops", "optim"},
    "package": {"oracles", "core", "ops", "optim", "training", "distributed", "package",
                "contracts", "cards"},
    "contracts": {"oracles", "core", "kernels", "oracle kernels", "ops", "optim", "training",
                  "distributed", "package", "cards"},
    "cards": set(),
}
# The registry is the one place the API side finds kernels; it imports them inside functions,
# by the family's convention, so that `import mojolike` compiles nothing.
EXCEPTIONS = {("mojolike.core.registry", "kernels"),
              # `mojolike train`'s metadata reads the package's __version__ when it is not installed
              ("mojolike.training.cli", "package")}
# Only the commands that certify and compare cards import the contracts from the package.
CONTRACT_USERS = {"mojolike.cli"}


def room(module: str) -> str:
    parts = module.split(".")
    if module.startswith("mojolike.oracles.kernels"):
        return "oracle kernels"
    if module.startswith("mojolike.oracles"):
        return "oracles"
    if module.startswith("mojolike.native"):
        return "kernels"
    if module.startswith("mojolike.contracts"):
        return "contracts"
    if module.startswith("mojolike.cards"):
        return "cards"
    if module in ("mojolike._fpcsr", "mojolike._buffers"):  # compiled helpers of the core
        return "core"
    for r in ROOMS:
        if module == r or module.startswith(r + "."):
            return r.split(".")[1]
    assert parts[0] == "mojolike", module
    return "package"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = FOLDERS[rel.parts[0]].split(".") + list(rel.parts[1:])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def library_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a mojolike module in `path`; `from a import
    b` yields a.b when a.b is a module, else a."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((node.lineno, sub if _is_module(sub) else target))
    return [(line, m) for line, m in found if m == "mojolike" or m.startswith("mojolike.")]


def _is_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != "mojolike" or len(parts) < 2:
        return False
    folder = {v: k for k, v in FOLDERS.items()}
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        if head in folder:
            base = ROOT / folder[head] / Path(*parts[n:])
            # a .c beside the modules is an extension module (mojolike._fpcsr, _buffers)
            return any(base.with_suffix(s).is_file() for s in (".py", ".c")) or \
                (base / "__init__.py").is_file()
    return False


def test_the_walk_sees_every_room_and_the_rule_names_each():
    rooms = {room(module_name(p)) for p in library_files()}
    assert rooms <= set(ALLOWED)
    assert {"oracles", "core", "kernels", "ops", "optim", "training", "distributed", "package",
            "contracts"} <= rooms


@pytest.mark.parametrize("path", library_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_points_down_the_rooms(path):
    here = module_name(path)
    bad = []
    for line, target in imports(path):
        a, b = room(here), room(target)
        if a == b or b in ALLOWED[a] or (here, b) in EXCEPTIONS:
            continue
        bad.append(f"{path.relative_to(ROOT)}:{line}: {here} ({a}) imports {target} ({b})")
    assert not bad, "\n".join(bad)


def test_only_the_certify_commands_import_the_contracts():
    users = {module_name(p) for p in library_files()
             if room(module_name(p)) != "contracts"
             and any(room(t) == "contracts" for _, t in imports(p))}
    assert users <= CONTRACT_USERS


def test_a_kernel_importing_the_api_is_found():
    # the negative control: the same walk on a kernel module that imports an optimizer
    fake = ROOT / "native" / "_architecture_probe.py"
    (line, target), = imports(fake, "from ..optim.params import Registry\n")
    assert (room(module_name(fake)), room(target)) == ("kernels", "optim")
    assert room(target) not in ALLOWED["kernels"]
