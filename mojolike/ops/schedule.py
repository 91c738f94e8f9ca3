"""Learning-rate schedules: warmup, then a constant rate or a linear or cosine decay.

Each value is the binary32 nearest the exact real value of its formula
(contracts/schedule.md): the kernels decide almost every step with a binary64
rounding test and mark the rest UNDECIDED; `finish` gives those steps the
oracle's value, so every backend returns the same bits. Steps are one-based:
`lr_at(1)` is the rate of the first optimizer step, and any optimizer takes a
schedule as `lr_schedule=`.

>>> import mojolike
>>> s = mojolike.WarmupCosineLR(1.0, warmup_steps=2, total_steps=8, backend="oracle")
>>> s.lr_values(9).tolist()
[0.5, 1.0, 0.9330127239227295, 0.75, 0.5, 0.25, 0.0669872984290123, 0.0, 0.0]
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..core import checks, fallbacks
from ..core.entry import entry_point
from ..core.refusals import Refusal, refuse
from ..core.registry import CONTRACT_MODE, check_fp_state, kernels
from ..oracles import schedule as spec
from ..oracles.f32 import f32_to_bits

UNDECIDED = 0x7FA00DAD  # the kernels' mark for a step the fast route could not decide
BLOCK = 4096  # lr_at serves steps from aligned blocks of this many values (clause 7)
KEEP_BLOCKS = 8  # recent blocks kept for scattered steps (8 x 4096 floats: about 1 MB)
MAX_STEPS = 2**40  # the largest step, warmup or total the contract covers
_KEYS = ("kind", "peak_lr", "warmup_steps", "total_steps", "min_lr")


def finish(kind: int, P: float, M: float, W: int, T: int, t0: int, out: np.ndarray,
           undecided: int) -> int:
    """Give the `undecided` UNDECIDED slots of out (steps t0, t0 + 1, ...) the oracle's value,
    reporting each step to `fallbacks` with the schedule's config."""
    if undecided:
        idx = np.flatnonzero(out.view(np.uint32) == UNDECIDED)
        assert idx.size == undecided, (idx.size, undecided)
        config = (f32_to_bits(P), f32_to_bits(M), W, T)
        for i in idx.tolist():
            out[i] = v = spec.value(kind, P, M, W, T, t0 + i)
            fallbacks.record("schedule", spec.KINDS[kind], t0 + i, f32_to_bits(v), config)
    return undecided


def _rate(entry: str, name: str, x) -> float:
    """The binary32 value nearest a rate >= 0 (ints and Fractions rounded once, exactly)."""
    # a zero rate is +0.0: the kernels' schedules compute the rate, so a -0.0 could not survive
    return checks.real32(entry, name, x, low=0.0) + 0.0


def _count(entry: str, name: str, x, low: int, what: str) -> int:
    return checks.integer(entry, name, x, low=low, high=MAX_STEPS,
                          what=f"an integer >= {what} and at most 2^40, the largest step count the "
                               f"contract covers")


class LRSchedule:
    """What the three schedules share; `LRSchedule.from_config(d)` rebuilds any of them."""

    kind = ""  # the config name: "constant", "linear" or "cosine"
    _CODE = -1  # the kernels' kind code

    @entry_point()
    def __init__(self, peak_lr, warmup_steps=0, total_steps=None, min_lr=0.0, *, backend=None,
                 numeric_mode=None, entry, **unknown):
        e = self._entry = entry
        self.peak_lr = _rate(e, "peak_lr", peak_lr)
        self.min_lr = _rate(e, "min_lr", min_lr)
        self.warmup_steps = W = _count(e, "warmup_steps", warmup_steps, 0, "0")
        if total_steps is None:
            if self._CODE != spec.CONSTANT:
                refuse(e, "total_steps", f"is missing; {type(self).__name__} needs the step "
                                         "where the decay reaches min_lr")
            self.total_steps = None
        else:
            self.total_steps = _count(e, "total_steps", total_steps, max(1, W),
                                      f"max(1, warmup_steps) = {max(1, W)}")
        self._k = kernels(e, "schedule", backend, numeric_mode)
        self.backend, self.numeric_mode = self._k.backend, self._k.numeric_mode
        # the kernel's arguments; total = 0 for the constant schedule (unused)
        self._args = (self._CODE, np.float32(self.peak_lr), np.float32(self.min_lr), W,
                      self.total_steps or 0)
        self._spec = (self._CODE, self.peak_lr, self.min_lr, W, self.total_steps or 0)
        self._cache: tuple[int, list] = (1, [])  # (first step, values) of the hot block
        self._blocks: dict[int, list] = {}  # recent blocks by first step, for scattered steps

    # -- values ----------------------------------------------------------------------------
    def _into(self, t0: int, out: np.ndarray) -> np.ndarray:
        check_fp_state(self._entry, self.numeric_mode)
        finish(*self._spec, t0, out, self._k.schedule_into(*self._args, t0, out))
        return out

    @entry_point()
    def lr_at(self, t, *, entry, **unknown) -> float:
        """The rate of one-based step t, a Python float (a binary32 value).

        Served from a cached block of 4096 consecutive steps, computed in one kernel
        call when t leaves the block: a training loop pays one list lookup per step.
        """
        if type(t) is int:
            t0, block = self._cache
            i = t - t0
            if 0 <= i < len(block):  # t0 >= 1, so a hit is a step >= 1
                return block[i]
        return self._fill(entry, t)

    def _fill(self, e: str, t) -> float:
        t = checks.integer(e, "t", t, low=1, high=MAX_STEPS,
                           what="an integer step in [1, 2^40] (steps are one-based)")
        t0 = (t - 1) // BLOCK * BLOCK + 1  # aligned, so that scattered steps share blocks
        block = self._blocks.get(t0)
        if block is None:
            block = self._into(t0, np.empty(BLOCK, np.float32)).tolist()
            if len(self._blocks) >= KEEP_BLOCKS:
                del self._blocks[next(iter(self._blocks))]  # the oldest
            self._blocks[t0] = block
        self._cache = (t0, block)  # one assignment: a reader sees an old or a new pair, never a mix
        return block[t - t0]

    @entry_point()
    def lr_values(self, n, *, entry, **unknown) -> np.ndarray:
        """The float32 array of the rates of steps 1..n."""
        e = entry
        n = checks.integer(e, "n", n, low=1, high=MAX_STEPS, what="an integer in [1, 2^40]")
        checks.shape(e, "n", n)  # refused before allocating when it cannot fit in memory
        return self._into(1, checks.empty(e, "n", n))

    @entry_point()
    def bits_at(self, t, *, entry, **unknown) -> int:
        """The binary32 bit pattern of lr_at(t)."""
        return f32_to_bits(self._fill(entry, t))

    # -- configuration ---------------------------------------------------------------------
    @entry_point()
    def config(self, **unknown) -> dict:
        """The schedule as a plain dict (rates as their binary32 values); from_config inverts it."""
        return {"kind": self.kind, "peak_lr": self.peak_lr, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "min_lr": self.min_lr}

    @classmethod
    @entry_point()
    def from_config(cls, d, *, backend=None, numeric_mode=None, entry, **unknown) -> LRSchedule:
        """The schedule `d` describes (as config() returns it); on LRSchedule, of d's kind."""
        e = entry
        if not isinstance(d, Mapping):
            refuse(e, "d", f"must be a dict as config() returns, got {type(d).__name__}")
        extra = sorted(str(k) for k in d if k not in _KEYS)
        if extra:
            refuse(e, ", ".join(extra), f"is not a config key of a schedule; the keys are "
                                        f"{', '.join(_KEYS)}")
        kind = d.get("kind", cls.kind or None)
        target = _BY_KIND.get(kind) if isinstance(kind, str) else None
        if target is None:
            refuse(e, "kind", f"is not a schedule kind; choose one of {', '.join(_BY_KIND)}", value=kind)
        if cls is not LRSchedule and target is not cls:
            refuse(e, "kind", f"is not {cls.__name__}'s kind ({cls.kind!r}); use "
                              f"mojolike.{target.__name__}.from_config", value=kind)
        if "peak_lr" not in d:
            refuse(e, "peak_lr", "is missing from the config")
        args = {k: v for k, v in d.items() if k != "kind"}
        try:
            return target(**args, backend=backend, numeric_mode=numeric_mode)
        except Refusal as r:  # a bad value in the config: refused under this entry point's name
            raise r.at(e) from None

    def __repr__(self) -> str:
        mode = "" if self.numeric_mode == CONTRACT_MODE else f", numeric_mode={self.numeric_mode!r}"
        return (f"{type(self).__name__}(peak_lr={str(np.float32(self.peak_lr))}, "
                f"warmup_steps={self.warmup_steps}, total_steps={self.total_steps}, "
                f"min_lr={str(np.float32(self.min_lr))}, backend={self.backend!r}{mode})")


class ConstantLR(LRSchedule):
    """Linear warmup to `peak_lr`, then `peak_lr` for every later step.

    Rate of one-based step t: `P t / W` for t <= W (W = warmup_steps >= 1), else
    `P`, rounded once to binary32 (P = binary32(peak_lr)). `total_steps` and
    `min_lr` are accepted, checked and kept in the config, but do not change a rate.
    Not torch's `ConstantLR` (a constant factor for a number of steps): this is
    "warmup, then constant".

    Parameters: peak_lr >= 0; warmup_steps, an integer >= 0; total_steps, None or
    an integer >= max(1, warmup_steps); min_lr >= 0; backend, numeric_mode as
    everywhere. Steps and counts up to 2^40.

    Reproducibility: each rate is the binary32 nearest the exact value, the same
    bits on every backend and thread count (contracts/schedule.md).

    >>> import mojolike
    >>> s = mojolike.ConstantLR(0.5, warmup_steps=3, backend="oracle")
    >>> s.lr_values(5).tolist(), s.lr_at(10**6), hex(s.bits_at(1))
    ([0.1666666716337204, 0.3333333432674408, 0.5, 0.5, 0.5], 0.5, '0x3e2aaaab')
    """

    kind = "constant"
    _CODE = spec.CONSTANT


class WarmupLinearLR(LRSchedule):
    """Linear warmup to `peak_lr`, then a linear decay to `min_lr` at `total_steps`.

    Rate of one-based step t: `P t / W` for t <= W; `M + (P - M) (T - t) / (T - W)`
    for W < t < T; `M` from T on (P, M = binary32(peak_lr), binary32(min_lr),
    W = warmup_steps, T = total_steps), each the exact rational rounded once to
    binary32. With W = T, step W is P and every later step M. `min_lr > peak_lr`
    is allowed (the rate then rises).

    Parameters: peak_lr >= 0; warmup_steps, an integer >= 0; total_steps, an
    integer >= max(1, warmup_steps), required; min_lr >= 0; backend, numeric_mode.

    Reproducibility: as ConstantLR.

    >>> import mojolike
    >>> s = mojolike.WarmupLinearLR(1.0, warmup_steps=1, total_steps=5, min_lr=0.5, backend="oracle")
    >>> s.lr_values(6).tolist()
    [1.0, 0.875, 0.75, 0.625, 0.5, 0.5]
    >>> mojolike.WarmupLinearLR(1.0, total_steps=3, backend="oracle").config()
    {'kind': 'linear', 'peak_lr': 1.0, 'warmup_steps': 0, 'total_steps': 3, 'min_lr': 0.0}
    """

    kind = "linear"
    _CODE = spec.LINEAR


class WarmupCosineLR(LRSchedule):
    """Linear warmup to `peak_lr`, then a half-cosine decay to `min_lr` at `total_steps`.

    Rate of one-based step t: `P t / W` for t <= W; for W < t < T,
    `M + (P - M) (1 + cos(pi p)) / 2` with `p = (t - W) / (T - W)`; `M` from T on;
    the exact real value rounded once to binary32 (never `math.cos`). This is the
    closed form torch's `CosineAnnealingLR` documents (eta_max = P, eta_min = M,
    T_max = T - W), shifted by the warmup.

    Parameters: as WarmupLinearLR.

    Reproducibility: as ConstantLR; the value is defined by the real cosine, so no
    libm, vendor or thread count reaches it.

    >>> import mojolike
    >>> s = mojolike.WarmupCosineLR(0.001, warmup_steps=100, total_steps=1000, backend="oracle")
    >>> s.lr_at(50), s.lr_at(550), s.lr_at(1000)
    (0.0005000000237487257, 0.0005000000237487257, 0.0)
    >>> s
    WarmupCosineLR(peak_lr=0.001, warmup_steps=100, total_steps=1000, min_lr=0.0, backend='oracle')
    """

    kind = "cosine"
    _CODE = spec.COSINE


_BY_KIND = {c.kind: c for c in (ConstantLR, WarmupLinearLR, WarmupCosineLR)}
