"""Build the API reference (HTML) from the public modules' docstrings with pdoc; no network.

    python docs/api.py [OUT]      (default: docs/api-html, which git ignores)

The public modules are the ones a user imports: the package's names (`mojolike`), its
facades (`math`, `random`, `models`, `data`, `train`), `mojolike.distributed` and the
PyTorch package `mojolike.torch`. Kernels, oracles and contracts are documented in their
own modules and in ARCHITECTURE.md, not here. tests/test_api_reference.py builds it.
"""
from __future__ import annotations

import sys
from pathlib import Path

PUBLIC = ("mojolike", "mojolike.math", "mojolike.random", "mojolike.models", "mojolike.data",
          "mojolike.train", "mojolike.distributed", "mojolike.torch", "mojolike.torch.optim",
          "mojolike.torch.nn", "mojolike.torch.amp", "mojolike.torch.dispatch")


def build(out: Path) -> list[Path]:
    """Write the reference under `out`; the HTML files written."""
    import pdoc
    import pdoc.render
    pdoc.render.configure(docformat="markdown", show_source=False,
                          footer_text="mojolike: the same bits on every backend")
    pdoc.pdoc(*PUBLIC, output_directory=out)
    return sorted(out.rglob("*.html"))


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "api-html")
    pages = build(out)
    print(f"{len(pages)} pages under {out}")
