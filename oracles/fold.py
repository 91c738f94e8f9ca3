"""The canonical reduction tree `fold`, and the sums built on it, as exact definitions.

fold(x), for binary32 values x[0..n), n >= 1:

1. pad to a multiple of CHUNK = 1024 with -0.0;
2. in each chunk, lane j (of LANES = 32) sums x[c*1024 + i*32 + j] for
   i = 0..31 in order, starting from -0.0;
3. the 32 lane values combine by the butterfly a[j] = a[j] + a[j+off],
   off = 16, 8, 4, 2, 1; lane 0 is the chunk partial;
4. chunk partials combine pairwise, level by level: (p0+p1), (p2+p3), ...,
   an odd last partial carried up unchanged.

sumsq(x) is fold of the rounded squares x[i]*x[i]; dot(a, b) is fold of the
rounded products a[i]*b[i]. Every + and * is one binary32 operation.

Reproducibility: the tree depends on n alone. Padding with -0.0 changes nothing
(x + -0.0 is x for every x, +0.0 included), so padded slots are skipped.

>>> fold([1.0, 2.0 ** -24, 2.0 ** -24])   # lanes 0..2 hold one value each
1.0
>>> sumsq([3.0, 4.0])
25.0
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from . import f32

LANES = 32
CHUNK = LANES * LANES  # 32 steps of 32 lanes
LANE_START = -0.0
BUTTERFLY = (16, 8, 4, 2, 1)


def _chunk_partial(ys: Sequence, add: Callable[[float, float], float],
                   lanes: int, start: float, accumulate: Callable) -> float:
    acc = [start] * lanes
    for i, y in enumerate(ys):
        acc[i % lanes] = accumulate(acc[i % lanes], y)
    off = lanes // 2
    while off >= 1:
        for j in range(off):
            acc[j] = add(acc[j], acc[j + off])
        off //= 2
    return acc[0]


def pairwise(partials: Sequence[float], add: Callable[[float, float], float] = f32.add) -> float:
    """Combine partials level by level, (p0+p1), (p2+p3), ...; an odd last one is carried up."""
    level = list(partials)
    while len(level) > 1:
        nxt = [add(level[k], level[k + 1]) for k in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def fold_tree(ys: Sequence, *, lanes: int = LANES, start: float = LANE_START,
              add: Callable[[float, float], float] = f32.add,
              accumulate: Callable | None = None) -> float:
    """fold with its constants as parameters, so negative controls can vary one at a time.

    `accumulate(acc, y)` is the lane step (default `add`); `add` combines lanes and partials.
    """
    if len(ys) == 0:
        raise ValueError("fold needs at least one value")
    chunk = lanes * 32  # 32 steps per lane, as in the canonical tree
    partials = [_chunk_partial(ys[c:c + chunk], add, lanes, start, accumulate or add)
                for c in range(0, len(ys), chunk)]
    return pairwise(partials, add)


def fold(x: Sequence[float]) -> float:
    """The canonical sum of binary32 values `x` (see the module docstring)."""
    return fold_tree(x)


def sumsq(x: Sequence[float]) -> float:
    """fold of the rounded squares x[i]*x[i]."""
    return fold_tree([f32.mul(v, v) for v in x])


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """fold of the rounded products a[i]*b[i]; a and b have one length."""
    if len(a) != len(b):
        raise ValueError(f"dot needs equal lengths, got {len(a)} and {len(b)}")
    return fold_tree([f32.mul(u, v) for u, v in zip(a, b)])


def _shape_of_fold(lo: int, hi: int, leaf, node) -> object:
    """The addition tree of fold over positions [lo, hi), as interned nodes. Additions of
    -0.0 (lane starts, empty lanes) are the identity and leave no node."""
    partials = []
    for c in range(lo, hi, CHUNK):
        lanes = [None] * LANES
        for k in range(c, min(c + CHUNK, hi)):
            lanes[(k - c) % LANES] = node(lanes[(k - c) % LANES], leaf(k))
        off = LANES // 2
        while off >= 1:
            for j in range(off):
                lanes[j] = node(lanes[j], lanes[j + off])
            off //= 2
        partials.append(lanes[0])
    return pairwise(partials, node)


def split_is_exact(sizes: Sequence[int]) -> bool:
    """True exactly when folding consecutive pieces of these sizes separately and combining
    the results by `pairwise` gives fold's bits over the whole, for every input.

    Two addition trees over the same values agree for every input exactly when they are
    equal up to swapping the operands of an addition (binary32 addition is commutative,
    not associative), so this compares the two trees in that canonical form.

    >>> split_is_exact([2048, 2048]), split_is_exact([3072, 3072]), split_is_exact([1, 1])
    (True, False, True)
    """
    edges = [0]
    for s in sizes:
        edges.append(edges[-1] + int(s))
    n, cuts = edges[-1], set(edges)
    for e in edges[1:-1]:
        # A chunk holding a cut is a sum in the whole tree; in the split tree a sum over
        # two pieces is a sum of whole pieces, so the chunk must begin and end at cuts.
        c = e - e % CHUNK
        if e % CHUNK and (c not in cuts or min(c + CHUNK, n) not in cuts):
            return False
    interned: dict = {}

    def node(a, b):
        if a is None or b is None:
            return b if a is None else a
        return interned.setdefault((a, b) if a <= b else (b, a), len(interned) + 1)

    if all(e % CHUNK == 0 for e in edges):
        def shape(lo, hi):  # both trees hold the same chunks: chunks stand in for their elements
            return pairwise([-(c + 1) for c in range(lo // CHUNK, (hi + CHUNK - 1) // CHUNK)], node)
    else:
        def shape(lo, hi):
            return _shape_of_fold(lo, hi, lambda k: -(k + 1), node)
    whole = shape(0, n)
    return whole == pairwise([shape(a, b) for a, b in zip(edges[:-1], edges[1:])], node)
