"""The header every rank sends before a reduction, and the rule by which all ranks refuse together.

A header is a fixed record of int64 values: the layout (a hash of the tensor count
and shapes, the element count, the tensor count), the finite flag, the tokens (-1
for None), the numeric mode, this call's number on the group and how the previous
call ended on this rank, the step's options (for `mojolike.distributed.step`) and a
digest of the optimizer, and, when this rank's own arguments were refused, the
option and reason of its refusal as UTF-8 text. Every rank gathers every header
and applies `agree` to the same list, so every rank reaches the same verdict
before any gradient byte is sent.

>>> h = Header(refused=False, layout=7, elements=3, tensors=1, finite=True, tokens=-1, mode=0)
>>> Header.unpack(h.pack()) == h, Header.BYTES
(True, 392)
"""
from __future__ import annotations

import hashlib
import json
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..core import checks, registry
from ..core.refusals import Refusal, refuse
from ..optim.params import as_list, end_to_end
from ..oracles.fold import split_is_exact

_MAGIC = 0x6D6A_6C6B_6472_0002  # "mjlkdr", version 2
_TEXT = 32  # int64 words of refusal text (256 bytes)
_FIXED = 17
NOTHING, WROTE, DIVERGED = 0, 1, 2  # how a call ended on a rank: what its caller's buffers hold
_NONE = -1  # an absent step option (the int64 -1 is a NaN as float64, never a checked value)
ALL_REDUCE = (0, _NONE, _NONE, _NONE, _NONE)  # the step fields of an all_reduce_grads call
STEP_OPTIONS = ("max_norm", "grad_scale", "clip", "update_gate")  # what step passes on
_CLIPS = ("inplace", "fold")


class RanksDiverged(Refusal):
    """A call on a group whose ranks no longer hold the same state (a call ended differently on
    some ranks); every later call on the group is refused too."""


@dataclass
class Header:
    refused: bool
    layout: int
    elements: int
    tensors: int
    finite: bool
    tokens: int  # -1: not given
    mode: int
    option: str = ""
    reason: str = ""
    sequence: int = 0  # this call's number on the group, counted on this rank
    previous: int = NOTHING  # how the previous call on the group ended on this rank
    step: tuple = ALL_REDUCE  # (1 for step, max_norm, grad_scale as float64 bits, clip, gate)
    optimizer: int = 0  # digest of the optimizer's type, hyperparameters and t; 0 for none
    refusal: Refusal | None = field(default=None, compare=False)  # this rank's own, not sent

    BYTES = 8 * (_FIXED + _TEXT)

    def pack(self) -> np.ndarray:
        text = (self.option + "\0" + self.reason).encode()[:8 * _TEXT]
        words = np.frombuffer(text.ljust(8 * _TEXT, b"\0"), np.int64)
        head = [_MAGIC, int(self.refused), self.layout, self.elements, self.tensors,
                int(self.finite), self.tokens, self.mode, self.sequence, self.previous,
                *self.step, self.optimizer, len(text)]
        return np.concatenate([np.array(head, np.int64), words])

    @classmethod
    def unpack(cls, a: np.ndarray) -> "Header":
        if a.size != _FIXED + _TEXT or int(a[0]) != _MAGIC:
            raise ValueError("a header of another format")
        text = a[_FIXED:].tobytes()[:int(a[_FIXED - 1])].decode(errors="replace")
        option, _, reason = text.partition("\0")
        return cls(bool(a[1]), int(a[2]), int(a[3]), int(a[4]), bool(a[5]), int(a[6]), int(a[7]),
                   option, reason, int(a[8]), int(a[9]), tuple(int(x) for x in a[10:15]),
                   int(a[15]))


class Ledger:
    """Per process group, in this process: the number of the last call and how it ended here.
    A call is counted NOTHING when it starts and WROTE only once it wrote the caller's buffers,
    so an exception anywhere in between leaves the pessimistic answer."""

    def __init__(self):
        self._calls = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def begin(self, group) -> tuple[int, int]:
        """(this call's number, how the previous one ended), recorded before the first message."""
        with self._lock:
            number, ended = self._calls.get(group, (0, NOTHING))
            self._calls[group] = (number + 1, DIVERGED if ended == DIVERGED else NOTHING)
            return number + 1, ended

    def end(self, group, outcome: int) -> None:
        with self._lock:
            number, ended = self._calls[group]
            if ended != DIVERGED:  # divergence is for good: no later call clears it
                self._calls[group] = (number, outcome)


@dataclass
class Local:
    """This rank's header and, when its arguments passed, the caller's flat views, one flat view
    of them all (or None), whether grads was a list, the tensors' shapes, and the kernels."""
    header: Header
    views: list | None = None
    flat: np.ndarray | None = None
    listed: bool = False
    shapes: list | None = None
    k: object = None


def local_header(entry: str, grads, tokens, numeric_mode, backend, check_keywords=None,
                 check=None) -> Local:
    """This rank's Header and views; a refusal of this rank's arguments is carried in the header,
    raised later by `agree`. `check_keywords()` refuses the keywords the entry does not take;
    `check()` (for `step`) validates the step without writing anything and gives the step
    fields and the optimizer digest of the header."""
    try:
        if check_keywords is not None:
            check_keywords()
        k = registry.kernels(entry, "optim", backend, numeric_mode)
        items, listed = as_list(entry, "grads", grads)
        views = [checks.as_f32(entry, f"grads[{i}]" if listed else "grads", x, writable=True)
                 for i, x in enumerate(items)]
        checks.disjoint(entry, [(f"grads[{i}]", v) for i, v in enumerate(views)])
        count = -1 if tokens is None else checks.integer(entry, "tokens", tokens, low=1, high=2**62)
        step, optimizer = (ALL_REDUCE, 0) if check is None else check()
    except Refusal as r:
        return Local(Header(True, 0, 0, 0, True, -1, 0, r.option, r.reason, refusal=r))
    shapes = [list(checks.shape_of(x)) for x in items]
    digest = hashlib.md5(json.dumps([listed, shapes]).encode()).digest()
    finite = all(k.all_finite(v) for v in views)
    flat = views[0] if len(views) == 1 else end_to_end(views)
    mode = registry.MODES.index(k.numeric_mode)
    head = Header(False, int.from_bytes(digest[:8], "little", signed=True),
                  sum(v.size for v in views), len(views), finite, count, mode,
                  step=step, optimizer=optimizer)
    return Local(head, views, flat, listed, [tuple(x) for x in shapes], k)


def step_fields(entry: str, optimizer, grads, options: dict,
                check_keywords) -> tuple[tuple, int]:
    """The header's step fields and optimizer digest, after `check_keywords(options)` (the
    options step takes, or a refusal of the others) and the optimizer's own checks of the step
    (a dry run: update_gate=False reads the arguments and writes nothing); its refusals are
    raised as `entry`'s."""
    from ..optim.base import _gate, _Optimizer
    if not isinstance(optimizer, _Optimizer):
        refuse(entry, "optimizer", f"must be a mojolike optimizer (mojolike.SGD, Adam or AdamW), "
                                   f"not {type(optimizer).__name__}")
    rest = check_keywords(options)
    max_norm, grad_scale = rest.get("max_norm"), rest.get("grad_scale")
    clip, gate = rest.get("clip", "inplace"), rest.get("update_gate", True)
    try:
        optimizer._step(grads, max_norm, grad_scale, clip, update_gate=False)
        gate = _gate(optimizer._ENTRY, gate)
        groups = optimizer._groups_checked()
    except Refusal as r:
        raise r.at(entry) from None
    bits = lambda v: _NONE if v is None else int(np.float64(v).view(np.int64))
    step = (1, bits(max_norm if max_norm is None else float(np.float32(max_norm))),
            bits(grad_scale if grad_scale is None else float(np.float32(grad_scale))),
            _CLIPS.index(clip), int(gate))
    canon = [type(optimizer).__name__, optimizer.t,
             [sorted((str(key), _canon(v)) for key, v in g.items()) for g in groups]]
    digest = hashlib.md5(json.dumps(canon).encode()).digest()
    return step, int.from_bytes(digest[:8], "little", signed=True)


def _canon(v):
    """A hyperparameter as the kernels see it: numbers as their binary32 value (0.1 and
    float32(0.1) step alike), a schedule by its type."""
    if isinstance(v, (bool, np.bool_)) or v is None or isinstance(v, str):
        return v if not isinstance(v, np.bool_) else bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(np.float32(v)).hex()
    if isinstance(v, (tuple, list)):
        return [_canon(x) for x in v]
    return type(v).__name__


def agree(entry: str, rank: int, headers: list[Header], mine: Header) -> None:
    """Raise the same Refusal (same option) on every rank, or return on every rank."""
    _diverged(entry, headers)
    for r, h in enumerate(headers):
        if h.refused:
            if r == rank:
                raise mine.refusal
            raise Refusal(entry, h.option, f"was refused on rank {r}: {h.reason}; no rank reduced "
                                           f"or wrote anything")
    modes = {registry.MODES[h.mode] for h in headers}
    if len(modes) > 1:
        raise Refusal(entry, "numeric_mode", f"differs between ranks ({', '.join(sorted(modes))}); "
                                             f"every rank must run one numeric mode")
    first = headers[0]
    for r, h in enumerate(headers):
        if (h.layout, h.elements, h.tensors) != (first.layout, first.elements, first.tensors):
            raise Refusal(entry, "grads", f"on rank {r} have another layout than on rank 0 "
                                          f"({h.tensors} tensors of {h.elements} elements against "
                                          f"{first.tensors} of {first.elements}, or other shapes); "
                                          f"every rank must pass the same parameter layout")
    _same_step(entry, headers)
    given = [h.tokens >= 0 for h in headers]
    if any(given) and not all(given):
        raise Refusal(entry, "tokens", f"is given on ranks {[r for r, g in enumerate(given) if g]} "
                                       f"and not on the others; pass it on every rank or on none")
    counts = [h.tokens for h in headers]
    if all(given) and registry.MODES[first.mode] == registry.CONTRACT_MODE and \
            not split_is_exact(counts):
        raise Refusal(entry, "tokens", "of the ranks are not aligned "
                                       "(mojolike.accumulation_is_aligned is False): their sum "
                                       "would not have the unsplit batch's bits; give each rank "
                                       "whole 1024-token subtrees of the batch, or pass "
                                       "numeric_mode='deterministic'", value=counts)
    bad = [r for r, h in enumerate(headers) if not h.finite]
    if bad:
        raise Refusal(entry, "grads", f"hold inf or NaN on rank(s) {bad}; no rank reduced or wrote "
                                      f"anything (a loss scaler can skip this step on every rank "
                                      f"alike by catching this Refusal)")


_RESTORE = ("restore every rank from one checkpoint and start a new process group; every later "
            "call on this group is refused (contracts/distributed.md clause 18)")


def _diverged(entry: str, headers: list[Header]) -> None:
    """Refuse, on every rank, a group whose ranks ended an earlier call differently."""
    if any(h.previous == DIVERGED for h in headers):
        raise RanksDiverged(entry, "group", f"diverged in an earlier call on ranks "
                                            f"{[r for r, h in enumerate(headers) if h.previous == DIVERGED]}; "
                                            + _RESTORE)
    numbers = [h.sequence for h in headers]
    if len(set(numbers)) > 1:
        raise RanksDiverged(entry, "group", f"ranks are at different calls ({', '.join(f'rank {r}: call {n}' for r, n in enumerate(numbers))}): "
                                            f"an earlier call failed or was refused on some ranks "
                                            f"only, so their gradients or parameters may differ; "
                                            + _RESTORE)
    wrote = [r for r, h in enumerate(headers) if h.previous == WROTE]
    if wrote and len(wrote) < len(headers):
        others = [r for r in range(len(headers)) if r not in wrote]
        raise RanksDiverged(entry, "group", f"diverged: call {numbers[0] - 1} on this group wrote "
                                            f"the reduced gradients on ranks {wrote} and raised "
                                            f"with nothing written on ranks {others} (a failure or "
                                            f"timeout in its last round reached some ranks only), "
                                            f"so the ranks now hold different gradients or "
                                            f"parameters; " + _RESTORE)


def _shown(i: int, v: int):
    if v == _NONE:
        return None
    if i in (1, 2):
        return float(np.int64(v).view(np.float64))
    return _CLIPS[v] if i == 3 else bool(v)


def _same_step(entry: str, headers: list[Header]) -> None:
    """Every rank makes the same call with the same step options and an alike optimizer, or
    their parameters would part."""
    kinds = [h.step[0] for h in headers]
    if len(set(kinds)) > 1:
        raise Refusal(entry, "optimizer", f"is given on ranks {[r for r, k in enumerate(kinds) if k]} "
                                          f"(mojolike.distributed.step) and not on ranks "
                                          f"{[r for r, k in enumerate(kinds) if not k]} "
                                          f"(all_reduce_grads); every rank must make the same call")
    for i, name in enumerate(STEP_OPTIONS, 1):
        values = [h.step[i] for h in headers]
        if len(set(values)) > 1:
            shown = ", ".join(f"{_shown(i, v)!r} on rank {r}" for r, v in enumerate(values))
            raise Refusal(entry, name, f"differs between ranks ({shown}); every rank must pass "
                                       f"the same {name}, or their parameters would diverge")
    digests = [h.optimizer for h in headers]
    if len(set(digests)) > 1:
        raise Refusal(entry, "optimizer", f"differs between ranks (ranks "
                                          f"{[r for r, d in enumerate(digests) if d != digests[0]]} "
                                          f"against rank 0): its type, hyperparameters "
                                          f"(param_groups) or step count t, so the ranks' "
                                          f"parameters would diverge; build every rank's optimizer "
                                          f"alike, or restore every rank from one checkpoint")
