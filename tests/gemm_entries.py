"""Operands for the GEMM tests and their bits: normal entries with sparse specials, and bit
patterns with every NaN one class (contracts/fold.md clause 7)."""
from __future__ import annotations

import numpy as np

NAN = np.uint32(0x7FC00000)


def patterns(x: np.ndarray) -> np.ndarray:
    """The uint32 bit patterns, every NaN as 0x7fc00000."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).copy()
    u[np.isnan(x)] = NAN
    return u


def entries(shape, seed: int, special: bool) -> np.ndarray:
    """Normal values; with `special`, about one entry in 40 replaced by -0.0, +0.0, a
    subnormal, +-inf or NaN (sparse enough that most cells of a short K stay finite)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if special:
        picks = np.float32([-0.0, 0.0, 1e-40, -3e-42, np.inf, -np.inf, np.nan, 1e-45])
        where = rng.random(shape) < 0.025
        x[where] = rng.choice(picks, size=int(where.sum()))
    return x
