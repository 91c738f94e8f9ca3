"""numba CPU kernels for fold, sumsq and dot.

Parallel over groups of 1024-element chunks (prange); each chunk keeps its 32
lane accumulators in a small array, so the inner loop over lanes is elementwise:
a vectorizer needs no reassociation (LLVM vectorizes the dot loop; the fold loop
it leaves scalar, about 1.0-1.3x np.sum in benchmarks/fold.py). Chunk partials
are combined by the pairwise tree serially; that tree depends on n alone, so
every thread count gives the same bits.

Reproducibility: identical mode gives the oracle's bits (contracts/fold.md).
sumsq(x) is dot(x, x): both fold the rounded products x[i]*x[i].

>>> import numpy as np
>>> k = load("identical")
>>> k.fold(np.float32([1, 2, 3]))
np.float32(6.0)
"""
from __future__ import annotations

import numba
import numpy as np
from numba import float32, njit, prange, types, void

from ..oracles.fold import CHUNK, LANES

NEG_ZERO = np.float32(-0.0)
GROUP = 16  # chunks per parallel task: amortizes the lane array over 16 KiB of input

_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
# Inputs are typed read-only: writable arrays convert to it, and callers may pass read-only buffers.
IN = types.Array(float32, 1, "C", readonly=True)


@njit(void(float32[::1]), inline="always", **_STRICT)
def _butterfly(acc):
    off = LANES // 2
    while off >= 1:
        for j in range(off):
            acc[j] = acc[j] + acc[j + off]
        off //= 2


@njit(void(IN, float32[::1]), parallel=True, **_STRICT)
def _fold_partials(x, partials):
    n = x.size
    nchunks = partials.size
    for g in prange((nchunks + GROUP - 1) // GROUP):
        acc = np.empty(LANES, np.float32)
        for c in range(g * GROUP, min(g * GROUP + GROUP, nchunks)):
            acc[:] = NEG_ZERO
            base = c * CHUNK
            if base + CHUNK <= n:
                for i in range(LANES):
                    row = base + i * LANES
                    for j in range(LANES):
                        acc[j] = acc[j] + x[row + j]
            else:  # the last, short chunk: padded slots add -0.0, so skip them
                for k in range(base, n):
                    acc[k - base & (LANES - 1)] = acc[k - base & (LANES - 1)] + x[k]
            _butterfly(acc)
            partials[c] = acc[0]


# The same loop as _fold_partials with a product per element. Written out twice on
# purpose: merged behind a flag, LLVM stops vectorizing this loop (2.6x slower,
# benchmarks/fold.py). The C kernel, which gcc vectorizes either way, is merged.
@njit(void(IN, IN, float32[::1]), parallel=True, **_STRICT)
def _dot_partials(a, b, partials):
    n = a.size
    nchunks = partials.size
    for g in prange((nchunks + GROUP - 1) // GROUP):
        acc = np.empty(LANES, np.float32)
        for c in range(g * GROUP, min(g * GROUP + GROUP, nchunks)):
            acc[:] = NEG_ZERO
            base = c * CHUNK
            if base + CHUNK <= n:
                for i in range(LANES):
                    row = base + i * LANES
                    for j in range(LANES):
                        p = a[row + j] * b[row + j]
                        acc[j] = acc[j] + p
            else:
                for k in range(base, n):
                    p = a[k] * b[k]
                    acc[k - base & (LANES - 1)] = acc[k - base & (LANES - 1)] + p
            _butterfly(acc)
            partials[c] = acc[0]


@njit(float32(float32[::1]), **_STRICT)
def _pairwise(p):
    """Level by level, (p0+p1), (p2+p3), ...; an odd last partial is carried up. Overwrites p."""
    k = p.size
    while k > 1:
        h = k // 2
        for i in range(h):
            p[i] = p[2 * i] + p[2 * i + 1]
        if k % 2 == 1:
            p[h] = p[k - 1]
            k = h + 1
        else:
            k = h
    return p[0]


def _workspace(n: int) -> np.ndarray:
    return np.empty((n + CHUNK - 1) // CHUNK, np.float32)


def segment_sumsq(x: np.ndarray, offsets) -> np.ndarray:
    """sumsq of every segment x[offsets[s]:offsets[s+1]] (the tree restarts at each start).

    One parallel pass per segment: a kernel over all segments at once, with chunk
    starts read from an array, lost LLVM's vectorization (2-4x slower).
    """
    out = np.empty(len(offsets) - 1, np.float32)
    for s in range(out.size):
        seg = x[offsets[s]:offsets[s + 1]]
        p = _workspace(seg.size)
        _dot_partials(seg, seg, p)
        out[s] = _pairwise(p)
    return out


class NumbaThreads:
    """The thread count of numba kernels (the thread clauses vary it; the bits must not)."""

    @staticmethod
    def set_num_threads(n: int) -> None:
        numba.set_num_threads(n)

    @staticmethod
    def get_num_threads() -> int:
        return numba.get_num_threads()

    @staticmethod
    def max_threads() -> int:
        return numba.config.NUMBA_NUM_THREADS


class NumbaFold(NumbaThreads):
    """fold/sumsq/dot on the CPU with numba; bits independent of the thread count."""

    backend = "cpu-numba"

    def __init__(self, mode: str):
        self.numeric_mode = mode
        self.details = {"numba": numba.__version__, "threads": numba.get_num_threads(),
                        "kernels": "vendor (numpy)" if mode == "fast" else "fold tree"}

    def fold(self, x):
        if self.numeric_mode == "fast":
            return np.float32(np.sum(x, dtype=np.float32))
        p = _workspace(x.size)
        _fold_partials(x, p)
        return np.float32(_pairwise(p))

    def dot(self, a, b):
        if self.numeric_mode == "fast":
            return np.float32(np.dot(a, b))
        p = _workspace(a.size)
        _dot_partials(a, b, p)
        return np.float32(_pairwise(p))

    def sumsq(self, x):
        return self.dot(x, x)


def load(mode: str, backend: str = "cpu-numba") -> NumbaFold:
    """Kernels for `mode`. identical and deterministic share the fold-tree kernels
    (they already keep the stronger promise); fast hands the sum to numpy."""
    return NumbaFold(mode)
