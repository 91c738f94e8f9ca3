"""The Python half of benchmarks/gpu_check.sh: standard library only, so it runs before mojolike
is importable.

    python3 benchmarks/gpu_check.py tree DIR           lay the package out under DIR (for PYTHONPATH)
    python3 benchmarks/gpu_check.py versions           the interpreter and the packages it found
    python3 benchmarks/gpu_check.py select BACKEND     collected test ids (stdin) that run on BACKEND
    python3 benchmarks/gpu_check.py cards BACKEND CARDS STATUS TO_COMMIT
                                                       one line per suite; the metas worth committing

`tree` follows pyproject.toml's package-dir mapping (mojolike/, with oracles/ as
mojolike.oracles, native/ as mojolike.native, ...) with symbolic links into this checkout, so
a machine whose setuptools cannot build the project still imports it from the tree, and every
path the package derives from its own files (the reference cards, tests/data) is this
checkout's.

Reproducibility: nothing here computes a result; it only arranges and reports.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what the GPU machine's python3 is expected to hold (cffi is not there: cpu-cffi is unavailable)
DISTS = ("numpy", "numba", "llvmlite", "numba-cuda", "cuda-bindings", "cuda-pathfinder",
         "nvidia-cuda-nvrtc", "nvidia-nvvm", "torch", "pytest", "hypothesis", "ml-dtypes",
         "safetensors", "tqdm", "cffi", "setuptools", "mojolike")
BACKENDS = re.compile(r"(?:^|-)(cpu-numba|cpu-cffi|cuda-sim|cuda|oracle)(?=-|$)")


def tree(dest: Path) -> list[str]:
    """Lay out every package of pyproject.toml under `dest` as setuptools' package-dir mapping
    installs it (links into this checkout); the packages laid out, in order."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages, mapping = tool["packages"], tool["package-dir"]

    def source(pkg: str) -> Path:
        # the longest mapped prefix decides, as in setuptools
        parts = pkg.split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            if head in mapping:
                return ROOT / mapping[head] / Path(*parts[i:])
        return ROOT / Path(*parts)

    for pkg in sorted(packages, key=lambda p: p.count(".")):
        here, src = dest / Path(*pkg.split(".")), source(pkg)
        if not (src / "__init__.py").is_file():
            raise SystemExit(f"gpu_check tree: package {pkg} has no {src}/__init__.py")
        if here.exists() or here.is_symlink():
            if here.resolve() != src.resolve():
                raise SystemExit(f"gpu_check tree: {here} would be {src} and {here.resolve()}")
            continue
        if pkg.count(".") == 0:  # a real folder, so mapped subpackages can sit inside it
            here.mkdir(parents=True)
            mapped = {p.split(".")[1] for p in packages if p.count(".") == 1}
            for entry in src.iterdir():
                if entry.name not in mapped:
                    (here / entry.name).symlink_to(entry)
        else:
            here.symlink_to(src, target_is_directory=True)
    return list(packages)


def versions() -> str:
    lines = [f"python {sys.version.split()[0]} at {sys.executable}"]
    for dist in DISTS:
        try:
            lines.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            lines.append(f"{dist} not installed")
    try:  # the PTX lint compiles through NVVM
        from numba.cuda.cudadrv import nvvm
        lines.append("nvvm {}.{}".format(*nvvm.NVVM().get_version()))
    except Exception as e:  # a report, not a check: say what failed
        lines.append(f"nvvm not usable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    try:
        import mojolike
        lines.append(f"mojolike imported from {Path(mojolike.__file__).parent}")
    except Exception as e:
        lines.append(f"mojolike does not import: {type(e).__name__}: {e}")
    return "\n".join(lines)


def select(backend: str, collected: str) -> list[str]:
    """The test ids among `collected` (pytest --collect-only -q) whose parameters name `backend`
    as a whole word: `cuda` selects [linear-w0-cuda], not [cuda-sim-0]."""
    out = []
    for line in collected.splitlines():
        m = re.fullmatch(r"(\S+::\S+?)\[(.*)\]", line.strip())
        if m and backend in BACKENDS.findall(m.group(2)):
            out.append(line.strip())
    return out


def cards(backend: str, cards_dir: Path, status: Path, to_commit: Path) -> list[str]:
    """One line per suite (exit code, seconds, card md5 against the reference's, clauses), and
    `to_commit/<suite>.cuda.meta.json` for each cuda run that provenance.real_gpu_run accepts."""
    done = {}
    if status.exists():
        for line in status.read_text().splitlines():
            suite, rc, seconds = line.split()
            done[suite] = (rc, seconds)
    try:
        from mojolike.cards import reference_path
        from mojolike.contracts import SUITES
        from mojolike.contracts.provenance import real_gpu_run

        from mojolike.core import cardformat
    except Exception as e:
        return [f"mojolike does not import ({type(e).__name__}: {e}): no suite checked"]
    chosen = os.environ.get("MOJOLIKE_GPU_SUITES", "").split() or SUITES
    lines = []
    for suite in SUITES:
        if suite not in chosen:
            lines.append(f"{suite}: not run (not in MOJOLIKE_GPU_SUITES)")
            continue
        rc, seconds = done.get(suite, ("none", "-"))
        head = f"{suite}: exit {rc if rc != 'none' else 'none (did not finish)'}, {seconds} s"
        path = cards_dir / backend / f"{suite}.meta.json"
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            lines.append(f"{head}, no meta written")
            continue
        try:
            ref = cardformat.read(reference_path(suite)).md5
        except (OSError, cardformat.CardError):
            ref = None
        same = "the reference's" if meta.get("card_md5") == ref else f"reference {ref}"
        clauses = " ".join(f"{k}:{v['status']}" for k, v in sorted(meta.get("clauses", {}).items()))
        line = f"{head}, card {meta.get('card_md5')} ({same}), {clauses}, ok {meta.get('ok')}"
        if backend == "cuda" and meta.get("ok") is True:
            to_commit.mkdir(parents=True, exist_ok=True)
            target = to_commit / f"{suite}.cuda.meta.json"
            shutil.copyfile(path, target)
            real, why = real_gpu_run(target, ref)
            if not real:
                target.unlink()
            line += f"; {'to commit' if real else 'not to commit'}: {why}"
        lines.append(line)
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["tree"] and len(argv) == 2:
        print(" ".join(tree(Path(argv[1]))))
    elif argv == ["versions"]:
        print(versions())
    elif argv[:1] == ["select"] and len(argv) == 2:
        print("\n".join(select(argv[1], sys.stdin.read())))
    elif argv[:1] == ["cards"] and len(argv) == 5:
        print("\n".join(cards(argv[1], *map(Path, argv[2:]))))
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
