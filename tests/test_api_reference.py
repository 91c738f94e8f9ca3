"""The API reference builds from the docstrings (pdoc, no network) and documents the public
entry points a user calls."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mojolike_docs_api", ROOT / "docs" / "api.py")
api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api)  # docs/api.py, the build script


def test_the_api_reference_builds_a_page_per_public_module_naming_the_entry_points(tmp_path):
    assert importlib.util.find_spec("pdoc") is not None, "pdoc is a test dependency"
    pages = api.build(tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in pages}
    for module in api.PUBLIC:
        assert module.replace(".", "/") + ".html" in names, module
    top = (tmp_path / "mojolike.html").read_text()
    for entry in ("AdamW", "fold", "scaled_dot_product_attention", "cross_entropy", "Tape"):
        assert f'id="{entry}"' in top, entry
    assert "Reproducibility" in top  # the docstrings' sections reach the page
    assert 'id="GPT"' in (tmp_path / "mojolike" / "models.html").read_text()
