"""The train suite's whole runs, shared by its TinyLM clauses (contracts/train.py) and its GPT
clauses (contracts/train_gpt.py): a run's outputs, an aligned split against one batch, and the
same run on 1 and 2 threads."""
from __future__ import annotations

from ..training.trainer import TrainConfig, Trainer
from .harness import with_1_and_2_threads


def run_outputs(backend: str, **config) -> list[tuple[str, bytes]]:
    """Every record and final value of a Trainer run of `config` on `backend`, as bytes."""
    t = Trainer(TrainConfig(**config), backend=backend)
    t.run()
    return [(name, a.tobytes()) for name, a in t.outputs()]


def split_against_batch(backend: str, cfg: dict) -> tuple[bool, list[str]]:
    """(two microbatches give one batch's outputs, the names of the outputs that differ)."""
    two = run_outputs(backend, microbatches=2, **cfg)
    one = run_outputs(backend, microbatches=1, **cfg)
    return two == one, [n for (n, a), (_, b) in zip(two, one) if a != b]


def on_1_and_2_threads(k, cfg: dict) -> tuple[bool | None, str]:
    """(the run of `cfg` in two microbatches gives the same outputs on 1 and 2 threads, or None
    when the thread count could not be set, and why)."""
    seen, why = with_1_and_2_threads(k, lambda: run_outputs(k.backend, microbatches=2, **cfg))
    return (None, why) if seen is None else (seen[0] == seen[1], why)
