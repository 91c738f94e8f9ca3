"""numba CPU kernels for fold, sumsq and dot, and per-segment sums of squares.

Parallel over groups of 1024-element chunks (prange), on the calling thread below
native/threads.PARALLEL_MIN elements (a serial twin of the same kernel). A chunk's 32 lane
accumulators are two explicit vectors (native/simd.py: lanes 0-15 and 16-31),
so the loop is packed on every target LLVM may pick, with no reassociation:
each step adds one row of 32 elements lane by lane, as the tree says, and
simd.vbutterfly makes the butterfly's additions. Chunk partials are combined
by the pairwise tree serially; that tree depends on n alone, so every thread
count gives the same bits.

`segment_sumsq` takes the segments as a table of addresses
(mojolike.core.pieces.table): each segment is its own fold tree, and one parallel
pass covers the chunks of every segment, so many small tensors cost one launch
and separate arrays are read where they lie.

Reproducibility: identical mode gives the oracle's bits (contracts/fold.md).
sumsq(x) is dot(x, x): both fold the rounded products x[i]*x[i].

>>> import numpy as np
>>> k = load("identical")
>>> k.fold(np.float32([1, 2, 3]))
np.float32(6.0)
>>> segment_sumsq(np.float32([3, 4, 1]), [0, 2, 3]).tolist()
[25.0, 1.0]
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import float32, int64, njit, prange, types, void
from numba.core.extending import intrinsic

from ..core.pieces import table
from ..oracles.fold import CHUNK, LANES
from .base import NumbaBase
from .simd import WIDTH, vadd, vbutterfly, vload, vmul, vsplat
from .threads import Twin

NEG_ZERO = np.float32(-0.0)
GROUP = 16  # chunks per parallel task: amortizes the lane array over 16 KiB of input

_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
_INLINE = dict(inline="always", error_model="numpy")
# Inputs are typed read-only: writable arrays convert to it, and callers may pass read-only buffers.
IN = types.Array(float32, 1, "C", readonly=True)
I64 = types.Array(int64, 1, "C", readonly=True)
assert LANES == 2 * WIDTH  # a chunk row is two vectors


@intrinsic
def _f32_pointer(typingctx, addr):
    """The integer addr as a float32 pointer (LLVM inttoptr)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.PointerType(ir.FloatType()))
    return types.CPointer(float32)(addr), codegen


@njit(**_INLINE)
def at(addr, n):
    """The float32 array of n elements at address addr (an entry of mojolike.core.pieces.table)."""
    return numba.carray(_f32_pointer(addr), n)


@njit(void(float32[::1]), **_INLINE)
def _butterfly(acc):
    off = LANES // 2
    while off >= 1:
        for j in range(off):
            acc[j] = acc[j] + acc[j + off]
        off //= 2


@njit(**_INLINE)
def _chunk_fold(x, base, n, acc):
    """The fold tree's partial of x[base : min(base + 1024, n)]."""
    if base + CHUNK <= n:
        lo = vsplat(NEG_ZERO)
        hi = vsplat(NEG_ZERO)
        for i in range(LANES):
            row = base + i * LANES
            lo = vadd(lo, vload(x, row))
            hi = vadd(hi, vload(x, row + WIDTH))
        return vbutterfly(lo, hi)  # exactly the scalar butterfly's additions
    acc[:] = NEG_ZERO  # the last, short chunk: padded slots add -0.0, so skip them
    for k in range(base, n):
        acc[k - base & (LANES - 1)] = acc[k - base & (LANES - 1)] + x[k]
    _butterfly(acc)
    return acc[0]


@njit(**_INLINE)
def _chunk_dot(a, b, base, n, acc):
    """The fold tree's partial of the rounded products a[k]*b[k] of one chunk."""
    if base + CHUNK <= n:
        lo = vsplat(NEG_ZERO)
        hi = vsplat(NEG_ZERO)
        for i in range(LANES):
            row = base + i * LANES
            lo = vadd(lo, vmul(vload(a, row), vload(b, row)))
            hi = vadd(hi, vmul(vload(a, row + WIDTH), vload(b, row + WIDTH)))
        return vbutterfly(lo, hi)  # exactly the scalar butterfly's additions
    acc[:] = NEG_ZERO
    for k in range(base, n):
        p = a[k] * b[k]
        acc[k - base & (LANES - 1)] = acc[k - base & (LANES - 1)] + p
    _butterfly(acc)
    return acc[0]


@njit(void(IN, float32[::1]), parallel=True, **_STRICT)
def _fold_partials(x, partials):
    nchunks = partials.size
    for g in prange((nchunks + GROUP - 1) // GROUP):
        acc = np.empty(LANES, np.float32)
        for c in range(g * GROUP, min(g * GROUP + GROUP, nchunks)):
            partials[c] = _chunk_fold(x, c * CHUNK, x.size, acc)


@njit(void(IN, IN, float32[::1]), parallel=True, **_STRICT)
def _dot_partials(a, b, partials):
    nchunks = partials.size
    for g in prange((nchunks + GROUP - 1) // GROUP):
        acc = np.empty(LANES, np.float32)
        for c in range(g * GROUP, min(g * GROUP + GROUP, nchunks)):
            partials[c] = _chunk_dot(a, b, c * CHUNK, a.size, acc)


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


@njit(**_INLINE)
def chunk_starts(offsets):
    """starts[s]: the index of segment s's first chunk among all segments' chunks (nseg + 1
    entries; the last is the number of chunks)."""
    nseg = offsets.size - 1
    starts = np.empty(nseg + 1, np.int64)
    starts[0] = 0
    for s in range(nseg):
        starts[s + 1] = starts[s] + (offsets[s + 1] - offsets[s] + CHUNK - 1) // CHUNK
    return starts


@njit(void(I64, I64, float32[::1]), parallel=True, **_STRICT)
def _segment_sumsq(addrs, offsets, out):
    """out[s] = sumsq of the segment of offsets[s+1] - offsets[s] floats at addrs[s].

    One parallel pass over the chunks of all segments (groups of GROUP chunks, which may
    straddle segments), then each segment's pairwise tree over its own partials.
    """
    nseg = addrs.size
    starts = chunk_starts(offsets)
    nchunks = starts[nseg]
    partials = np.empty(nchunks, np.float32)
    for g in prange((nchunks + GROUP - 1) // GROUP):
        acc = np.empty(LANES, np.float32)
        c0 = g * GROUP
        s = np.searchsorted(starts, c0, side="right") - 1
        for c in range(c0, min(c0 + GROUP, nchunks)):
            while starts[s + 1] <= c:
                s += 1
            n = offsets[s + 1] - offsets[s]
            x = at(addrs[s], n)
            partials[c] = _chunk_dot(x, x, (c - starts[s]) * CHUNK, n, acc)
    for s in range(nseg):
        out[s] = _pairwise(partials[starts[s]:starts[s + 1]])


# the kernels tests/test_vectorized.py compiles for every target, and the packed
# operations their loops must hold
HOT_KERNELS = {"fold._fold_partials": (_fold_partials, ("addps",)),
               "fold._dot_partials": (_dot_partials, ("mulps", "addps")),
               "fold._segment_sumsq": (_segment_sumsq, ("mulps", "addps"))}

# called with the number of elements first: below native/threads.PARALLEL_MIN they run on
# the calling thread
fold_partials = Twin(_fold_partials)
dot_partials = Twin(_dot_partials)
segment_sumsq_kernel = Twin(_segment_sumsq)


def _workspace(n: int) -> np.ndarray:
    return np.empty((n + CHUNK - 1) // CHUNK, np.float32)


def segment_sumsq(x, offsets) -> np.ndarray:
    """sumsq of every segment (the tree restarts at each): x is one flat array cut at
    `offsets`, or pieces, or a list of 1-D float32 arrays of the sizes `offsets` says."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    out = np.empty(offsets.size - 1, np.float32)
    segment_sumsq_kernel(offsets[-1], table(x, offsets), offsets, out)
    return out


class NumbaFold(NumbaBase):
    """fold/sumsq/dot on the CPU with numba; bits independent of the thread count."""

    takes_pieces = False

    def __init__(self, mode: str):
        super().__init__(mode)
        self.details["kernels"] = "vendor (numpy)" if mode == "fast" else "fold tree"

    def fold(self, x):
        if self.numeric_mode == "fast":
            return np.float32(np.sum(x, dtype=np.float32))
        p = _workspace(x.size)
        fold_partials(x.size, x, p)
        return np.float32(_pairwise(p))

    def dot(self, a, b):
        if self.numeric_mode == "fast":
            return np.float32(np.dot(a, b))
        p = _workspace(a.size)
        dot_partials(a.size, a, b, p)
        return np.float32(_pairwise(p))

    def sumsq(self, x):
        return self.dot(x, x)


def load(mode: str, backend: str = "cpu-numba") -> NumbaFold:
    """Kernels for `mode`. identical and deterministic share the fold-tree kernels
    (they already keep the stronger promise); fast hands the sum to numpy."""
    return NumbaFold(mode)
