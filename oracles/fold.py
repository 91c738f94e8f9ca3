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


def chunk_partial(ys: Sequence, add: Callable[[float, float], float],
                  lanes: int, start: float, accumulate: Callable) -> float:
    """One chunk's partial: `lanes` accumulators from `start`, then the butterfly (steps 2-3)."""
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
    partials = [chunk_partial(ys[c:c + chunk], add, lanes, start, accumulate or add)
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


def split_trees_equal(sizes: Sequence[int]) -> bool:
    """The definition behind `split_is_exact`: build both addition trees and compare them.

    Two addition trees over the same values agree for every input exactly when they are
    equal up to swapping the operands of an addition (binary32 addition is commutative,
    not associative), so this compares the two trees in that canonical form. Time and
    memory grow with the total size: use it to check `split_is_exact`, not for training.

    >>> split_trees_equal([2048, 2048]), split_trees_equal([3072, 3072]), split_trees_equal([1, 1])
    (True, False, True)
    """
    edges = _edges(sizes)
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


def _edges(sizes: Sequence[int]) -> list[int]:
    edges = [0]
    for s in sizes:
        edges.append(edges[-1] + int(s))
    return edges


def is_cluster(a: int, b: int, m: int) -> bool:
    """True when leaves [a, b) are exactly the leaves under one node of `pairwise` over m leaves.

    Node j of level L covers [j 2^L, min((j+1) 2^L, m)): an interval that ends before m is
    a cluster when its length is a power of two that divides its start; one that ends at m
    when its start is a multiple of the least power of two >= its length.
    """
    r = b - a
    if r < 1 or a < 0 or b > m:
        return False
    if b < m:
        return r & (r - 1) == 0 and a % r == 0
    return a % (1 << (r - 1).bit_length()) == 0


def _clusters(m: int):
    """Every node of `pairwise` over m leaves as an interval [a, b) (2m - 1 of them)."""
    size = 1
    while True:
        for a in range(0, m, size):
            yield a, min(a + size, m)
        if size >= m:
            return
        size *= 2


def split_is_exact(sizes: Sequence[int]) -> bool:
    """True exactly when folding consecutive pieces of these sizes separately and combining
    the results by `pairwise` gives fold's bits over the whole, for every input.

    Equal to `split_trees_equal` (the definition), in time polynomial in the number of
    pieces and the bits of the sizes. Both trees are full binary trees over the same
    leaves, so they are equal when every node of the split tree is a node of the whole
    one. The whole tree's nodes above the chunks are the intervals of `is_cluster` over
    its chunks. A piece that begins on a chunk boundary and ends on one (or at the end)
    brings the chunk trees the whole tree has, then pairwise over its own chunks: one
    partial interval per level. Pieces inside one chunk must make that chunk's tree
    exactly (checked on its at most 1024 positions, with `split_trees_equal`'s shapes).
    Every node of pairwise over the pieces is then either inside such a chunk or a run
    of whole chunks.

    >>> split_is_exact([2048, 2048]), split_is_exact([3072, 3072]), split_is_exact([1, 1])
    (True, False, True)
    >>> split_is_exact([2 ** 40] * 2 + [1024]), split_is_exact([3 * 2 ** 30, 2 ** 30])
    (True, False)
    """
    edges = _edges(sizes)
    n, k = edges[-1], len(edges) - 1
    chunks = (n + CHUNK - 1) // CHUNK

    def boundary(e: int) -> bool:
        return e % CHUNK == 0 or e == n

    def chunk_of(e: int) -> int:  # the chunk index of a boundary position
        return (e + CHUNK - 1) // CHUNK

    groups: dict[int, list[int]] = {}  # chunk -> the pieces lying inside it
    for i in range(k):
        a, b = edges[i], edges[i + 1]
        if boundary(a) and boundary(b):
            p, q = chunk_of(a), chunk_of(b)
            c = q - p  # the piece's own pairwise over its c chunks, shifted to p
            if p % (1 << (c.bit_length() - 1)) != 0:  # its full blocks must be aligned
                return False
            for level in range(1, c.bit_length() + 1):
                r = c % (1 << level)
                if r and not is_cluster(q - r, q, chunks):
                    return False
        elif a // CHUNK == (b - 1) // CHUNK:
            groups.setdefault(a // CHUNK, []).append(i)
        else:
            return False  # straddles a chunk boundary without being whole chunks
    for c, members in groups.items():
        lo, hi = members[0], members[-1] + 1
        if not (boundary(edges[lo]) and boundary(edges[hi]) and is_cluster(lo, hi, k)):
            return False
        interned: dict = {}

        def node(x, y):
            if x is None or y is None:
                return y if x is None else x
            return interned.setdefault((x, y) if x <= y else (y, x), len(interned) + 1)

        leaf = lambda j: -(j + 1)  # noqa: E731
        whole = _shape_of_fold(edges[lo], edges[hi], leaf, node)
        if whole != pairwise([_shape_of_fold(edges[i], edges[i + 1], leaf, node)
                              for i in range(lo, hi)], node):
            return False
    for a, b in _clusters(k):
        lo, hi = edges[a], edges[b]
        if lo // CHUNK in groups and hi - lo <= CHUNK and not (boundary(lo) and boundary(hi)):
            continue  # inside a chunk made of small pieces: checked above
        if not (boundary(lo) and boundary(hi) and is_cluster(chunk_of(lo), chunk_of(hi), chunks)):
            return False
    return True
