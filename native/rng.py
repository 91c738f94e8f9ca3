"""numba CPU kernels for Philox4x32-10, uniform and normal draws and dropout (contracts/rng.md).

The element functions `philox`, `uniform_elem`, `dropout_elem` and `normal_pair`
are written once here: integer operations on uint64 values below 2^32 (a 32x32
product is an exact 64-bit product), the float primitives add/mul/sqrt (the plain
binary32 operators and the IEEE square root on the CPU), `f32_bits` (a binary32
value's pattern) and the correctly rounded element functions of `native/crmath.py`
(`log_elem`, `sinpi_elem`, `cospi_elem`); `native/cuda/rng.py` compiles the same
source with libdevice `f*_rn` and the CUDA crmath functions (numpy under the
simulator). The C kernels in `native/c/rng.c` are the independent second spelling.

A draw covers stream positions offset .. offset + n - 1. Its head (the positions
before the first multiple of 4) and tail (after the last) are done one element at
a time; the whole blocks in between are parallel (prange over tasks of
TASK_BLOCKS blocks), one Philox call giving four consecutive outputs, in a loop
that LLVM vectorizes (the products become vpmuludq). A normal draw, which needs a
block's four words together, fits the same shape: a block gives two Box-Muller
pairs, four outputs. Where logf, sinpif or cospif is undecided (the rounding test
of native/crmath.py could not decide; no u1 or u2 of a normal draw is, by an
exhaustive check of their 2^24 values each) the slot gets the UNDECIDED pattern
and is counted; the caller gives it the oracle's value.

Caching: these kernels inline native/crmath.py's element functions, and numba's
cache=True checks only this file, so after editing native/crmath.py clear the
numba cache (the __pycache__ *.nbi/*.nbc files); a fresh checkout builds clean.

Reproducibility: a value depends on (key, stream, position) only; the split into
head, tasks and tail, and the thread count, never reach it.

>>> import numpy as np
>>> out = np.empty(3, np.float32)
>>> load("identical").uniform_into(0, 0, 0, 0, np.float32(0), np.float32(1), out), out.tolist()
(0, [0.3990464210510254, 0.8805201649665833, 0.7357127666473389])
>>> load("identical").normal_into(0, 0, 0, 0, np.float32(0), np.float32(1), out), out.tolist()
(0, [0.9911374449729919, -0.9246627688407898, -0.6176090836524963])
"""
from __future__ import annotations

import math
from operator import add, mul

import numba
import numpy as np
from numba import float32, int64, njit, prange, types, uint32, uint64, void

from ..oracles import rng as oracle
from . import crmath
from .base import NumbaBase

sqrt = math.sqrt  # numba lowers math.sqrt of a float32 to the IEEE sqrtss instruction
PRIMITIVES = ("add", "mul", "sqrt")
# the correctly rounded element functions (a, decided) of native/crmath.py; the CUDA
# module binds these names to its own compilations of the same source
log_elem = crmath._log_elem
sinpi_elem = crmath._sinpi_elem
cospi_elem = crmath._cospi_elem
CRMATH = ("log_elem", "sinpi_elem", "cospi_elem")
UNDECIDED = crmath.UNDECIDED
_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction
TASK_BLOCKS = 2048  # Philox blocks (8192 outputs) per parallel task

U64 = np.uint64
M0, M1 = U64(oracle.M0), U64(oracle.M1)
W0, W1 = U64(oracle.W0), U64(oracle.W1)
MASK32 = U64(oracle.MASK32)
SH32, SH8, SH2, LOW2 = U64(32), U64(8), U64(2), U64(3)
ROUNDS = oracle.ROUNDS
TWO_M24 = np.float32(oracle.TWO_M24)
TWO_M23 = np.float32(oracle.TWO_M23)
MINUS_TWO = np.float32(-2.0)
U1_MIN_BITS, U1_MAX_BITS = 0x33800000, 0x3F800000  # the patterns of 2^-24 and 1.0: u1's range
ONE_U = U64(1)
ZERO = np.float32(0.0)

IN = types.Array(float32, 1, "C", readonly=True)
OUT = float32[::1]
OUT_BITS = uint32[::1]
CTR_IN = types.Array(uint32, 2, "C", readonly=True)
CTR_OUT = uint32[:, ::1]


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1): uint64 words below 2^32."""
    for r in range(ROUNDS):
        if r > 0:
            k0 = (k0 + W0) & MASK32
            k1 = (k1 + W1) & MASK32
        p0 = c0 * M0  # below 2^64: exact
        p1 = c2 * M1
        c0, c1, c2, c3 = (p1 >> SH32) ^ c1 ^ k0, p1 & MASK32, (p0 >> SH32) ^ c3 ^ k1, p0 & MASK32
    return c0, c1, c2, c3


def uniform_elem(w, low, d):
    """low + d u, u = (w >> 8) 2^-24 (exact), in binary32: the product rounded, then the sum.

    (w >> 8) goes through int32, whose conversion vectorizes (uint64's does not); it is below 2^24.
    """
    u = mul(np.float32(np.int32(w >> SH8)), TWO_M24)
    return add(low, mul(d, u))


def dropout_elem(x, w, p, scale):
    """x * scale where u >= p, else x * 0.0 (a signed zero; NaN for inf or NaN x)."""
    u = mul(np.float32(np.int32(w >> SH8)), TWO_M24)
    return mul(x, scale if u >= p else ZERO)


def f32_bits_cpu(x):
    """The bit pattern of the binary32 value x, as an int64."""
    return np.int64(np.float32(x).view(np.uint32))


_jit = njit(inline="always", error_model="numpy")
f32_bits = _jit(f32_bits_cpu)


def normal_pair(wa, wb, mean, std):
    """(v_even, v_odd, ok_even, ok_odd): mean + std r cospif(u2) and mean + std r sinpif(u2)
    for the Box-Muller pair (wa, wb) (clause 4), and whether each value is decided.

    u1 = ((wa >> 8) + 1) 2^-24 in (0, 1] and u2 = (wb >> 8) 2^-23 in [0, 2), both exact
    (the integers are at most 2^24; int32 conversions vectorize, uint64's do not);
    r = sqrt(-2 logf(u1)) (the product by -2 exact); then each z = r t and mean + std z,
    two roundings. u2 lies in sinpi_elem's range (|x| <= 2^24). u1's pattern lies in
    [U1_MIN_BITS, U1_MAX_BITS] already: clamping it there changes nothing, but tells the
    compiler that log_elem's subnormal branch (a loop) is dead, and the loop over blocks
    then vectorizes (2.2x faster on AVX2).
    """
    u1 = mul(np.float32(np.int32((wa >> SH8) + ONE_U)), TWO_M24)
    u2 = mul(np.float32(np.int32(wb >> SH8)), TWO_M23)
    lg, ok_l = log_elem(min(max(f32_bits(u1), U1_MIN_BITS), U1_MAX_BITS))
    r = sqrt(mul(MINUS_TWO, lg))
    c, ok_c = cospi_elem(u2)
    s, ok_s = sinpi_elem(u2)
    v0 = add(mean, mul(std, mul(r, c)))
    v1 = add(mean, mul(std, mul(r, s)))
    return v0, v1, ok_l & ok_c, ok_l & ok_s


_philox = _jit(philox)
_uniform_elem = _jit(uniform_elem)
_dropout_elem = _jit(dropout_elem)
_normal_pair = _jit(normal_pair)


@_jit
def _word_at(k0, k1, s0, s1, pos):
    """The word at stream position pos (uint64): word pos mod 4 of block pos div 4."""
    b = pos >> SH2
    w0, w1, w2, w3 = _philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
    r = pos & LOW2
    return w0 if r == 0 else w1 if r == 1 else w2 if r == 2 else w3


@_jit
def _split(offset, n):
    """(head, first whole block, whole blocks): head = outputs before the first whole block."""
    head = min(np.int64((U64(4) - (offset & LOW2)) & LOW2), n)
    return head, (offset + U64(head)) >> SH2, (n - head) // 4


@njit(void(CTR_IN, uint64, uint64, CTR_OUT), parallel=True, **_STRICT)
def _philox_blocks(counters, k0, k1, out):
    for i in prange(counters.shape[0]):
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = _philox(
            U64(counters[i, 0]), U64(counters[i, 1]), U64(counters[i, 2]), U64(counters[i, 3]),
            k0, k1)


@njit(void(uint64, uint64, uint64, uint64, float32, float32, OUT), parallel=True, **_STRICT)
def _uniform(k0, k1, stream, offset, low, high, out):
    n = out.size
    d = high - low
    s0, s1 = stream & MASK32, stream >> SH32
    head, b0, nblocks = _split(offset, n)
    for i in range(head):
        out[i] = _uniform_elem(_word_at(k0, k1, s0, s1, offset + U64(i)), low, d)
    for t in prange((nblocks + TASK_BLOCKS - 1) // TASK_BLOCKS):
        j0 = t * TASK_BLOCKS
        seg = out[head + 4 * j0:]  # a slice: non-negative indices let LLVM vectorize
        bt = b0 + U64(j0)
        for j in range(min(TASK_BLOCKS, nblocks - j0)):
            b = bt + U64(j)
            w0, w1, w2, w3 = _philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
            seg[4 * j] = _uniform_elem(w0, low, d)
            seg[4 * j + 1] = _uniform_elem(w1, low, d)
            seg[4 * j + 2] = _uniform_elem(w2, low, d)
            seg[4 * j + 3] = _uniform_elem(w3, low, d)
    for i in range(head + 4 * nblocks, n):
        out[i] = _uniform_elem(_word_at(k0, k1, s0, s1, offset + U64(i)), low, d)


@njit(void(IN, uint64, uint64, uint64, uint64, float32, float32, OUT), parallel=True, **_STRICT)
def _dropout(x, k0, k1, stream, offset, p, scale, y):
    n = y.size
    s0, s1 = stream & MASK32, stream >> SH32
    head, b0, nblocks = _split(offset, n)
    for i in range(head):
        y[i] = _dropout_elem(x[i], _word_at(k0, k1, s0, s1, offset + U64(i)), p, scale)
    for t in prange((nblocks + TASK_BLOCKS - 1) // TASK_BLOCKS):
        j0 = t * TASK_BLOCKS
        xs, ys = x[head + 4 * j0:], y[head + 4 * j0:]
        bt = b0 + U64(j0)
        for j in range(min(TASK_BLOCKS, nblocks - j0)):
            b = bt + U64(j)
            w0, w1, w2, w3 = _philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
            ys[4 * j] = _dropout_elem(xs[4 * j], w0, p, scale)
            ys[4 * j + 1] = _dropout_elem(xs[4 * j + 1], w1, p, scale)
            ys[4 * j + 2] = _dropout_elem(xs[4 * j + 2], w2, p, scale)
            ys[4 * j + 3] = _dropout_elem(xs[4 * j + 3], w3, p, scale)
    for i in range(head + 4 * nblocks, n):
        y[i] = _dropout_elem(x[i], _word_at(k0, k1, s0, s1, offset + U64(i)), p, scale)


@_jit
def _normal_at(k0, k1, s0, s1, pos, mean, std):
    """(value, decided) at stream position pos (uint64): the pair of its block, cos or sin."""
    b = pos >> SH2
    w0, w1, w2, w3 = _philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
    r = pos & LOW2
    wa = w0 if r < U64(2) else w2
    wb = w1 if r < U64(2) else w3
    v0, v1, ok0, ok1 = _normal_pair(wa, wb, mean, std)
    if r & ONE_U:
        return v1, ok1
    return v0, ok0


@_jit
def _normal_slot(k0, k1, s0, s1, pos, mean, std, out, ob, i):
    """out[i] = the value at position pos, or the UNDECIDED pattern; returns 1 if undecided."""
    v, ok = _normal_at(k0, k1, s0, s1, pos, mean, std)
    if ok:
        out[i] = v
        return 0
    ob[i] = UNDECIDED
    return 1


@njit(int64(uint64, uint64, uint64, uint64, float32, float32, OUT, OUT_BITS), parallel=True,
      **_STRICT)
def _normal(k0, k1, stream, offset, mean, std, out, ob):
    n = out.size
    s0, s1 = stream & MASK32, stream >> SH32
    head, b0, nblocks = _split(offset, n)
    undecided = 0
    for i in range(head):
        undecided += _normal_slot(k0, k1, s0, s1, offset + U64(i), mean, std, out, ob, i)
    ntasks = (nblocks + TASK_BLOCKS - 1) // TASK_BLOCKS
    counts = np.zeros(ntasks, np.int64)
    for t in prange(ntasks):
        j0 = t * TASK_BLOCKS
        seg = out[head + 4 * j0:]
        bt = b0 + U64(j0)
        m = min(TASK_BLOCKS, nblocks - j0)
        unsure = 0
        for j in range(m):
            b = bt + U64(j)
            w0, w1, w2, w3 = _philox(b & MASK32, b >> SH32, s0, s1, k0, k1)
            v0, v1, ok0, ok1 = _normal_pair(w0, w1, mean, std)
            v2, v3, ok2, ok3 = _normal_pair(w2, w3, mean, std)
            seg[4 * j] = v0
            seg[4 * j + 1] = v1
            seg[4 * j + 2] = v2
            seg[4 * j + 3] = v3
            unsure += not (ok0 & ok1 & ok2 & ok3)
        if unsure:  # never seen (see the module notes): mark the task's undecided slots
            segb = ob[head + 4 * j0:]
            c = 0
            for i in range(4 * m):
                pos = (bt << SH2) + U64(i)
                v, ok = _normal_at(k0, k1, s0, s1, pos, mean, std)
                if not ok:
                    segb[i] = UNDECIDED
                    c += 1
            counts[t] = c
    for i in range(head + 4 * nblocks, n):
        undecided += _normal_slot(k0, k1, s0, s1, offset + U64(i), mean, std, out, ob, i)
    return undecided + counts.sum()  # integers: the order cannot matter


class NumbaRng(NumbaBase):
    """Philox blocks, uniform and normal draws and dropout on the CPU with numba (the family "rng")."""

    backend = "cpu-numba"
    takes_pieces = False

    def __init__(self, mode: str):
        self.numeric_mode = mode  # every mode runs the identical kernels: they keep the stronger promise
        self.details = {"numba": numba.__version__, "threads": numba.get_num_threads()}

    def philox_into(self, counters, key0, key1, out) -> None:
        """out[i] = Philox4x32-10(counters[i], (key0, key1)); counters and out (n, 4) uint32."""
        _philox_blocks(counters, U64(key0), U64(key1), out)

    def uniform_into(self, key0, key1, stream, offset, low, high, out) -> int:
        """out[i] = the uniform at position offset + i of `stream` (float32 low, high); returns 0."""
        _uniform(U64(key0), U64(key1), U64(stream), U64(offset), np.float32(low), np.float32(high),
                 out)
        return 0

    def dropout_into(self, x, key0, key1, stream, offset, p, scale, y) -> int:
        """y[i] = x[i] * scale where position offset + i is kept, else x[i] * 0.0; returns 0."""
        _dropout(x, U64(key0), U64(key1), U64(stream), U64(offset), np.float32(p),
                 np.float32(scale), y)
        return 0

    def normal_into(self, key0, key1, stream, offset, mean, std, out) -> int:
        """out[i] = the normal value at position offset + i of `stream` (float32 mean, std);
        returns the number of slots left UNDECIDED (the caller gives them the oracle's value)."""
        return int(_normal(U64(key0), U64(key1), U64(stream), U64(offset), np.float32(mean),
                           np.float32(std), out, out.view(np.uint32)))


def load(mode: str, backend: str = "cpu-numba") -> NumbaRng:
    return NumbaRng(mode)
