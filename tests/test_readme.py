"""The README's Python examples run as written, in order, in a fresh namespace."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def test_the_readme_has_python_examples():
    assert len(python_blocks()) >= 5


def test_every_python_example_of_the_readme_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write files (opt.npz)
    namespace: dict = {}
    for i, block in enumerate(python_blocks()):
        exec(compile(block, f"README.md python block {i}", "exec"), namespace)
    assert (tmp_path / "opt.npz").exists()
    assert namespace["step"] == 19 and namespace["norm"] is not None  # the training loop ran to its end
