"""numba CPU kernels for the learning-rate schedules (contracts/schedule.md clause 6).

Each step t is evaluated in binary64 (+ - * / only, one operation per statement,
no fused multiply-add) together with a bound E on its error:

- warmup (t <= W): v = (P t) / W, E = 2^-44 v;
- ConstantLR after warmup: P (E = 0), and t >= T: M (E = 0), both exact;
- linear: D = P - M, r = (T - t) / (T - W), v = M + D r, E = 2^-44 (|M| + |D r|);
- cosine: s = S(u) = sin(pi u / 2), u = (T - t) / (T - W), when 2 (T - t) <= T - W
  (that is u <= 1/2: the division is monotone and 1/2 is a binary64 value), else
  s = C(w) = cos(pi w / 2), w = (t - W) / (T - W); f = s s, v = M + D f,
  E = 2^-44 (|M| + |D f|). S and C are Horner forms in u^2 / w^2 with the
  binary64 coefficients of `oracles/schedule.kernel_coefficients()`.

The integers T - t, T - W, t - W are formed as integers and converted exactly
(all steps are at most 2^40). A step is decided when binary32(v - E) ==
binary32(v + E); the exact value lies in [v - E, v + E], so it rounds to that
value. A step the test cannot decide gets the pattern UNDECIDED (a signalling
NaN, never a rate) and is counted; the caller gives it the oracle's exact value.

The arithmetic is written once, in the pieces `warmup_ve`, `linear_ve`, `sin_ve`,
`cos_ve` (each returns (v, E)), `schedule_ve` (picks the piece) and `decide`,
with the primitive names dadd/dsub/dmul/ddiv/narrow/widen; `schedule_elem` is
`decide(schedule_ve(...))`. On the CPU the names are the binary64 operators;
`native/cuda/schedule.py` re-binds the same source to libdevice `d*_rn`, and
`native/c/schedule.c` is the second spelling. The CPU kernel splits each block of
steps into runs of one piece (warmup, cosine, sine, linear, tail), so each run is
a loop without branches; a block with an undecided step is redone step by step
through `schedule_elem`.

Reproducibility: every step depends on (kind, P, M, W, T, t) alone, so neither
the block split nor the thread count reaches the bits; the undecided count is an
integer sum. The decided value is the exact value rounded, so it cannot depend on
the backend; the undecided steps are the same on every backend because the
operation sequence is.

>>> import numpy as np
>>> out = np.empty(6, np.float32)
>>> k = load("identical")
>>> k.schedule_into(LINEAR, np.float32(1.0), np.float32(0.0), 2, 6, 1, out), out.tolist()
(0, [0.5, 1.0, 0.75, 0.5, 0.25, 0.0])
>>> k.schedule_into(COSINE, np.float32(1.0), np.float32(0.0), 0, 4, 1, out), out.tolist()
(0, [0.8535534143447876, 0.5, 0.1464466154575348, 0.0, 0.0, 0.0])
"""
from __future__ import annotations

from operator import add as dadd
from operator import mul as dmul
from operator import sub as dsub
from operator import truediv as ddiv

import numba
import numpy as np
from numba import float32, int64, njit, prange

from ..oracles import schedule as oracle
from .base import NumbaBase

narrow = np.float32  # binary64 -> binary32, round to nearest even
widen = np.float64  # exact (binary32 values, and integers up to 2^53)
PRIMITIVES = ("dadd", "dsub", "dmul", "ddiv", "narrow", "widen")
_STRICT = dict(cache=True, error_model="numpy")  # fastmath off: no contraction, no reassociation
_INLINE = dict(inline="always", error_model="numpy")

UNDECIDED = 0x7FA00DAD  # a signalling NaN: no rate is a NaN, so it marks only undecided steps
CONSTANT, LINEAR, COSINE = 0, 1, 2
BLOCK = 4096  # steps per parallel task

_A, _B = oracle.kernel_coefficients()
SIN = np.array(_A, np.float64)  # S(u) = u (SIN[0] + u^2 (SIN[1] + ... + u^2 SIN[8]))
COS = np.array(_B, np.float64)  # C(w) = COS[0] + w^2 (COS[1] + ... + w^2 COS[9])
SIN_TOP = SIN.size - 1
COS_TOP = COS.size - 1
ERR = np.float64(2.0 ** -44)  # the error bound, relative to |M| + |D g| (warmup: to v)
ZERO = np.float64(0.0)


def warmup_ve(P, W, t):
    """(v, E) of a warmup step, 1 <= t <= W."""
    v = dmul(widen(P), widen(t))  # exact for t < 2^29 (24 + 29 bits)
    v = ddiv(v, widen(W))
    e = dmul(v, ERR)  # exact
    return v, e


def _decay_ve(P, M, g):
    """(v, E) of M + (P - M) g."""
    md = widen(M)
    d = dsub(widen(P), md)
    dg = dmul(d, g)
    v = dadd(md, dg)
    am = md
    if am < ZERO:
        am = -am
    adg = dg
    if adg < ZERO:
        adg = -adg
    e = dadd(am, adg)
    e = dmul(e, ERR)  # exact
    return v, e


def linear_ve(P, M, W, T, t):
    """(v, E) of a linear decay step, W < t < T."""
    r = ddiv(widen(T - t), widen(T - W))
    return _decay_ve(P, M, r)


def sin_ve(P, M, W, T, t):
    """(v, E) of a cosine decay step with 2 (T - t) <= T - W, W < t < T."""
    u = ddiv(widen(T - t), widen(T - W))
    u2 = dmul(u, u)
    h = SIN[SIN_TOP]
    for k in range(SIN_TOP - 1, -1, -1):
        h = dmul(u2, h)
        h = dadd(h, SIN[k])
    s = dmul(u, h)
    f = dmul(s, s)
    return _decay_ve(P, M, f)


def cos_ve(P, M, W, T, t):
    """(v, E) of a cosine decay step with 2 (T - t) > T - W, W < t < T."""
    w = ddiv(widen(t - W), widen(T - W))
    w2 = dmul(w, w)
    h = COS[COS_TOP]
    for k in range(COS_TOP - 1, -1, -1):
        h = dmul(w2, h)
        h = dadd(h, COS[k])
    f = dmul(h, h)
    return _decay_ve(P, M, f)


def schedule_ve(kind, P, M, W, T, t):
    """(v, E) of step t; E = 0 where the value is P or M exactly."""
    if t <= W:
        return warmup_ve(P, W, t)
    if kind == CONSTANT:
        return widen(P), ZERO
    if t >= T:
        return widen(M), ZERO
    if kind == LINEAR:
        return linear_ve(P, M, W, T, t)
    if 2 * (T - t) <= T - W:
        return sin_ve(P, M, W, T, t)
    return cos_ve(P, M, W, T, t)


def decide(v, e):
    """(a, decided): a = binary32(v - E), decided when binary32(v + E) is the same value."""
    a = narrow(dsub(v, e))
    b = narrow(dadd(v, e))
    return a, a == b


def schedule_elem(kind, P, M, W, T, t):
    """(a, decided): a = the schedule's binary32 value at step t when decided."""
    v, e = schedule_ve(kind, P, M, W, T, t)
    return decide(v, e)


# The pieces call each other by these names; `native/cuda/schedule.py` binds them in this order.
PIECES = ("warmup_ve", "_decay_ve", "linear_ve", "sin_ve", "cos_ve", "schedule_ve", "decide",
          "schedule_elem")
_PY = {name: globals()[name] for name in PIECES}  # the plain Python sources
for _name in PIECES:  # the CPU versions: the module globals become dispatchers, inlined
    globals()[_name] = njit(**_INLINE)(_PY[_name])
del _name

OUT = float32[::1]
OUT_BITS = numba.types.Array(numba.uint32, 1, "C")


@njit(inline="always", **_STRICT)
def _split(kind, W, T, lo, hi):
    """The runs of one piece in steps [lo, hi): the ends of warmup, cosine, decay and the tail."""
    warm_end = min(hi, max(lo, W + 1))  # warmup: [lo, warm_end)
    if kind == CONSTANT:
        return warm_end, warm_end, warm_end, hi
    decay_end = min(hi, max(warm_end, T))  # decay: [warm_end, decay_end), tail: [decay_end, hi)
    cos_end = warm_end
    if kind == COSINE:  # C(w) where 2 t < T + W, S(u) from ceil((T + W) / 2) on
        cos_end = min(decay_end, max(warm_end, (T + W + 1) // 2))
    return warm_end, cos_end, decay_end, hi


@njit(inline="always", **_STRICT)
def _block(kind, P, M, W, T, t0, out, ob, c):
    """Steps of block c (BLOCK steps from t0 + c*BLOCK) into out; returns its UNDECIDED count."""
    n = out.size
    lo = t0 + c * BLOCK  # the steps of this block: [lo, hi)
    hi = t0 + min(c * BLOCK + BLOCK, n)
    warm_end, cos_end, decay_end, _ = _split(kind, W, T, lo, hi)
    # first pass: a loop without branches per run, flag the block if any step is undecided
    unsure = 0
    for t in range(lo, warm_end):
        v, e = warmup_ve(P, W, t)
        a, ok = decide(v, e)
        out[t - t0] = a
        unsure += not ok
    for t in range(warm_end, cos_end):
        v, e = cos_ve(P, M, W, T, t)
        a, ok = decide(v, e)
        out[t - t0] = a
        unsure += not ok
    if kind == LINEAR:
        for t in range(cos_end, decay_end):
            v, e = linear_ve(P, M, W, T, t)
            a, ok = decide(v, e)
            out[t - t0] = a
            unsure += not ok
    else:
        for t in range(cos_end, decay_end):
            v, e = sin_ve(P, M, W, T, t)
            a, ok = decide(v, e)
            out[t - t0] = a
            unsure += not ok
    tail = P if kind == CONSTANT else M
    for t in range(decay_end, hi):
        out[t - t0] = tail
    undecided = 0
    if unsure:  # rare (about 1 step in 10^5, ties included): redo the block step by step
        for t in range(lo, hi):
            a, ok = schedule_elem(kind, P, M, W, T, t)
            if not ok:
                ob[t - t0] = UNDECIDED
                undecided += 1
    return undecided


@njit(int64(int64, float32, float32, int64, int64, int64, OUT, OUT_BITS), parallel=True, **_STRICT)
def _schedule(kind, P, M, W, T, t0, out, ob):
    nblocks = (out.size + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for c in prange(nblocks):
        counts[c] = _block(kind, P, M, W, T, t0, out, ob, c)
    return counts.sum()  # integers: the order cannot matter


@njit(int64(int64, float32, float32, int64, int64, int64, OUT, OUT_BITS), **_STRICT)
def _schedule_one_block(kind, P, M, W, T, t0, out, ob):
    # one block (lr_at's unit) on the calling thread: no thread-pool launch per block
    return _block(kind, P, M, W, T, t0, out, ob, 0)


def _rate(x) -> np.float32:
    """x as binary32, -0.0 made +0.0 (the oracle's zero rate is +0; a kernel copies P and M)."""
    return np.float32(x) + np.float32(0.0)


class NumbaSchedule(NumbaBase):
    """Schedule values on the CPU with numba, parallel over blocks of 4096 steps."""

    backend = "cpu-numba"
    takes_pieces = False

    def __init__(self, mode: str):
        self.numeric_mode = mode
        self.details = {"numba": numba.__version__, "threads": numba.get_num_threads()}

    def schedule_into(self, kind, peak, min_lr, warmup, total, t0, out) -> int:
        """Write the values of steps t0 .. t0 + out.size - 1 into out; returns the UNDECIDED count.

        kind: CONSTANT, LINEAR or COSINE; peak, min_lr: binary32 rates (>= 0, finite);
        warmup >= 0; total >= max(1, warmup) (unused by CONSTANT); t0 >= 1; all <= 2^40.
        out: flat float32, C-contiguous. The caller checks the arguments.
        """
        run = _schedule_one_block if out.size <= BLOCK else _schedule
        return int(run(int(kind), _rate(peak), _rate(min_lr), int(warmup), int(total), int(t0), out,
                       out.view(np.uint32)))


def load(mode: str, backend: str = "cpu-numba") -> NumbaSchedule:
    return NumbaSchedule(mode)
