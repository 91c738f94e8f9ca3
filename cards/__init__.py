"""The committed reference cards, one `<suite>.card` per suite (the regression guard)."""
from pathlib import Path

DIR = Path(__file__).resolve().parent


def reference_path(suite: str) -> Path:
    return DIR / f"{suite}.card"
