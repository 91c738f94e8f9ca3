"""Data parallel on torch.distributed: a gradient all-reduce whose bits do not depend on the world size.

`all_reduce_grads(grads, tokens, group)` gives every rank, in place, bit for bit
`mojolike.accumulate_grads([g_rank0, g_rank1, ...], tokens)`: the pairwise tree
over the ranks' gradients in rank order, an odd last one carried up
(contracts/distributed.md). torch.distributed is the transport (a gloo group,
CPU tensors; launched the usual way, e.g. `torchrun`); torch is imported only
when a function here is called, and refused by name when it is missing.

>>> import mojolike.distributed as md
>>> md.slices(10, 4)
[(0, 3), (3, 6), (6, 8), (8, 10)]
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import Refusal, refuse
from ..optim.base import _Optimizer
from .wire import (
    DIVERGED,
    STEP_OPTIONS,
    WROTE,
    Header,
    Ledger,
    RanksDiverged,
    agree,
    local_header,
    step_fields,
)

TIMEOUT_S = 300.0  # a rank that has not joined within this is taken as dead
_ledger = Ledger()  # every group's call count and last outcome in this process


class CollectiveFailed(RuntimeError):
    """A rank exited or stalled during the reduction, or the transport failed; nothing was
    written on this rank."""


@dataclass(frozen=True)
class Exchange:
    """What one call moved on this rank: payload bytes of the slice exchange and of the gather
    (sent, received), bytes of the two small agreement rounds, and the world size."""
    world_size: int
    elements: int
    bytes_sent: int
    bytes_received: int
    control_bytes: int
    seconds: float


@entry_point("mojolike.distributed.slices")
def slices(n: int, world_size: int, **unknown) -> list[tuple[int, int]]:
    """Rank p reduces elements [start, stop) of the flat gradient: n split into world_size
    consecutive slices, the first n % world_size one element longer."""
    q, r = divmod(n, world_size)
    edges = [0]
    for p in range(world_size):
        edges.append(edges[-1] + q + (p < r))
    return list(zip(edges[:-1], edges[1:]))


def _torch(entry: str):
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        refuse(entry, "torch", f"is not installed ({e}); install the extra: "
                               f"pip install 'mojolike[distributed]'")
    if not dist.is_available():
        refuse(entry, "torch", "was built without torch.distributed")
    return torch, dist


def _group(entry: str, dist, group):
    if not dist.is_initialized():
        refuse(entry, "group", "has no process group to use: call "
                               "torch.distributed.init_process_group('gloo', ...) first (torchrun "
                               "sets the environment it reads)")
    g = dist.group.WORLD if group is None else group
    try:
        backend = str(dist.get_backend(g))
        rank = dist.get_rank(g)
    except (ValueError, RuntimeError) as e:
        refuse(entry, "group", f"is not a process group of this process ({e})")
    if "gloo" not in backend:
        refuse(entry, "group", f"uses backend {backend!r}; the reduction runs on a gloo group "
                               f"(CPU tensors): create one with torch.distributed.new_group("
                               f"backend='gloo')")
    if rank < 0:
        refuse(entry, "group", "does not contain this rank")
    return g, rank, dist.get_world_size(g)


def _timeout(entry: str, timeout) -> float:
    t = checks.exact(entry, "timeout", timeout)
    if not t > 0:
        refuse(entry, "timeout", "must be a positive number of seconds", value=timeout)
    return float(t)


class _Clock:
    """One deadline for every wait of a call: the whole call waits at most `timeout` seconds."""

    def __init__(self, entry: str, timeout: float, world: int, rank: int):
        self.deadline = time.monotonic() + timeout
        self.entry, self.timeout, self.world, self.rank = entry, timeout, world, rank

    def round(self, what: str, start, *args, **kwargs) -> None:
        """Start one transport operation and wait for it. Whatever the transport raises, when the
        operation starts (gloo's "Connection closed by peer") or while it is waited for, becomes
        CollectiveFailed naming the round."""
        try:
            works = start(*args, **kwargs)
        except Exception as e:
            self.fail(what, e)
        self.wait(works, what)

    def wait(self, works, what: str) -> None:
        for w in works if isinstance(works, list) else [works]:
            left = max(0.001, self.deadline - time.monotonic())
            try:
                ok = w.wait(timeout=datetime.timedelta(seconds=left))
            except Exception as e:
                self.fail(what, e)
            if ok is False:
                self.fail(what, "the wait returned without completing")

    def fail(self, what: str, why) -> None:
        # the last round is the one no protocol makes atomic: the peers may have finished it
        peers = (" The other ranks may have completed the call and written theirs: the next call "
                 "on this group finds that out and then refuses on every rank (RanksDiverged, "
                 "contracts/distributed.md clause 18)." if what == _LAST else "")
        failed = CollectiveFailed(
            f"{self.entry}: {what} did not complete on rank {self.rank} of {self.world} within "
            f"timeout={self.timeout:g} s ({str(why).strip()[:300]}): a rank exited or stalled, or "
            f"the transport failed. Nothing was written to grads on this rank; the process group "
            f"cannot be trusted after this (destroy it and restart the job from a "
            f"checkpoint).{peers}")
        raise failed from (why if isinstance(why, BaseException) else None)


_LAST = "the final agreement"


class _Call:
    """One call's transport: torch, the group, this rank, the clock, what moved. Made before any
    message, so its refusals are this rank's alone (the others cannot agree without it)."""

    def __init__(self, entry: str, group, timeout):
        self.entry = entry
        self.t0 = time.perf_counter()
        _, self.dist = _torch(entry)
        self.g, self.rank, self.world = _group(entry, self.dist, group)
        self.clock = _Clock(entry, _timeout(entry, timeout), self.world, self.rank)
        self.elements = self.sent = self.received = 0

    @contextlib.contextmanager
    def reduced(self, local):
        """Agree, reduce, and yield the reduced flat gradient (a workspace buffer, valid inside the
        block); the caller writes its buffers inside and then calls `wrote`."""
        number, previous = _ledger.begin(self.g)
        mine = dataclasses.replace(local.header, sequence=number, previous=previous)
        headers = self._headers(mine)
        try:
            agree(self.entry, self.rank, headers, mine)
        except RanksDiverged:
            _ledger.end(self.g, DIVERGED)
            raise
        n = self.elements = headers[0].elements
        cuts = slices(n, self.world)
        flat = local.flat if local.flat is not None else np.concatenate(local.views)
        size = cuts[self.rank][1] - cuts[self.rank][0]
        key, (recv, out) = _workspace(self.world * size, n)
        try:
            self.sent, self.received = _reduce(self, flat, cuts, local.k, recv, out)
            yield out
        finally:
            _release(key, (recv, out))

    def wrote(self) -> None:
        _ledger.end(self.g, WROTE)

    def exchange(self) -> Exchange:
        control = 2 * (self.world - 1) * Header.BYTES + 2 * (self.world - 1) * 8
        return Exchange(self.world, self.elements, self.sent, self.received, control,
                        time.perf_counter() - self.t0)

    def _headers(self, mine: Header) -> list[Header]:
        import torch
        mine_t = torch.from_numpy(mine.pack())
        got = [torch.empty_like(mine_t) for _ in range(self.world)]
        self.clock.round("the header exchange", self.dist.all_gather, got, mine_t, group=self.g,
                         async_op=True)
        headers = []
        for r, t in enumerate(got):
            try:
                headers.append(Header.unpack(t.numpy()))
            except ValueError:
                refuse(self.entry, "group", f"received from rank {r} a header of another format: "
                                            f"mojolike versions differ between the ranks, or their "
                                            f"calls no longer pair up after a call that failed on "
                                            f"some ranks only; restore every rank from one "
                                            f"checkpoint and start a new process group")
        return headers


@entry_point("mojolike.distributed.all_reduce_grads", together=True)
def all_reduce_grads(grads, tokens=None, group=None, *, timeout=TIMEOUT_S, numeric_mode=None,
                     backend=None, entry, **unknown) -> Exchange:
    """Replace every rank's gradients, in place, with their pairwise sum over the ranks.

    Each rank passes its local gradient (one buffer or a list, the same layout on every
    rank) and, optionally, `tokens`: the positive count of tokens it covers. The result
    on every rank is `mojolike.accumulate_grads([g_0, ..., g_{W-1}], ...)` over the
    ranks in group order. The flat gradient is cut into W slices; `all_to_all_single`
    brings each rank the W contributions to its slice, which it adds by the pairwise
    tree with the optim family's add kernel of `backend`; the reduced slices are then
    sent to every rank. No rank receives more than 2 (W-1)/W of the gradient bytes
    (what a ring all-reduce moves), plus two small agreement rounds.

    Refused on every rank together, before anything is sent or written: a rank whose
    arguments are refused (its own message, named to the others), different layouts
    (tensor count and shapes), different numeric modes, tokens given on some ranks
    only, non-finite gradients, and in identical mode tokens that are not aligned
    (`mojolike.accumulation_is_aligned(tokens of every rank, W)` is False). A rank
    that exits or stalls, or a transport that fails, makes the others raise
    `CollectiveFailed` within `timeout` seconds (the whole call; the group's own timeout
    also applies); every rank writes its gradients only after every rank reported its
    slice reduced. A failure in that last round can reach some ranks only; the next call
    on the group then raises `RanksDiverged` (a Refusal, option "group") on every rank,
    as does every later one (contracts/distributed.md clause 18).

    Reproducibility: the bits depend on the ranks' gradients and their order alone,
    never on the transport's algorithm; they are the same on every backend in
    identical mode. A rank's own gradient that is a pairwise sum of 2^k aligned
    microbatches is a whole subtree, so 1, 2 or 4 ranks sharing 4 microbatches give
    the same bits (contracts/distributed.md).

    >>> import os, tempfile, numpy as np, torch.distributed as dist
    >>> store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    >>> dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    >>> g = [np.float32([1.5, -2.0]), np.float32([3.0])]
    >>> all_reduce_grads(g, tokens=2048, backend="oracle").world_size, g
    (1, [array([ 1.5, -2. ], dtype=float32), array([3.], dtype=float32)])
    >>> dist.destroy_process_group()
    """
    call = _Call(entry, group, timeout)
    # every other check is made on each rank and agreed on by all of them, so they refuse together
    local = local_header(entry, grads, tokens, numeric_mode, backend,
                         functools.partial(all_reduce_grads.__entry__.check, entry, unknown))
    with call.reduced(local) as out:
        _write(local.views, out)  # every rank reduced its slice: write the caller's buffers now
        call.wrote()
    return call.exchange()


def _write(views, out: np.ndarray) -> None:
    start = 0
    for v in views:
        np.copyto(v, out[start:start + v.size])
        start += v.size


def _shaped(local, out: np.ndarray):
    """The reduced gradient as views of `out` in the caller's layout (a list or one buffer)."""
    parts, start = [], 0
    for v, shape in zip(local.views, local.shapes):
        parts.append(out[start:start + v.size].reshape(shape))
        start += v.size
    return parts if local.listed else parts[0]


def _reduce(call: _Call, flat, cuts, k, recv, out):
    """(payload bytes sent, received), the reduced flat gradient left in `out`: exchange the
    slices, add this rank's W contributions by the pairwise tree, gather every slice, agree that
    all succeeded. Every transport call goes through the clock's `round`."""
    import torch
    dist, g, rank, world, clock = call.dist, call.g, call.rank, call.world, call.clock
    lo, hi = cuts[rank]
    size = hi - lo
    clock.round("the slice exchange", dist.all_to_all_single, torch.from_numpy(recv),
                torch.from_numpy(flat), output_split_sizes=[size] * world,
                input_split_sizes=[b - a for a, b in cuts], group=g, async_op=True)
    failed = None
    mine = out[lo:hi]
    try:
        _tree([recv[j * size:(j + 1) * size] for j in range(world)], k, mine)
    except Exception as err:  # still take part in the gather, so the others learn of it
        failed = err
    ops = []
    for p in range(world):
        if p != rank:
            peer = dist.get_global_rank(g, p) if g is not dist.group.WORLD else p
            a, b = cuts[p]
            ops.append(dist.P2POp(dist.isend, torch.from_numpy(mine), peer, g))
            ops.append(dist.P2POp(dist.irecv, torch.from_numpy(out[a:b]), peer, g))
    if ops:
        clock.round("the gather of the reduced slices", dist.batch_isend_irecv, ops)
    status = torch.tensor([0 if failed is not None else 1], dtype=torch.int64)
    clock.round(_LAST, dist.all_reduce, status, op=dist.ReduceOp.MIN, group=g, async_op=True)
    if failed is not None:
        raise failed
    if int(status[0]) != 1:
        clock.fail("the reduction", "another rank failed to reduce its slice")
    # a2a: the other slices of my gradient out, W - 1 contributions to mine in; the gather: my
    # slice out to W - 1 ranks, the other slices in. Sent and received are equal.
    others = sum(b - a for p, (a, b) in enumerate(cuts) if p != rank)
    moved = 4 * (others + (world - 1) * size)
    return moved, moved


def _tree(rows: list[np.ndarray], k, result: np.ndarray) -> None:
    """oracles.fold.pairwise over the rows with the add kernel, the last addition (or, for one
    row, a copy) written into `result`."""
    level = rows
    while len(level) > 2:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            nxt.append(np.empty_like(level[i]))
            k.add(level[i], level[i + 1], nxt[-1])
        level = nxt + level[len(level) - len(level) % 2:]
    if len(level) == 2:
        k.add(level[0], level[1], result)
    else:
        np.copyto(result, level[0])


_spare: dict = {}  # (recv, out) of the last call that ended, reused by a call of the same sizes
_spare_lock = threading.Lock()


def _workspace(received: int, n: int):
    """(key, buffers for the received slices and the gathered result). The last call's are reused
    when the sizes match (fresh pages cost a fault each on first touch); they are taken out while
    a call uses them, so a call running beside another one in this process gets new ones."""
    key = (received, n)
    with _spare_lock:
        got = _spare.pop(key, None)
    if got is None:
        got = np.empty(received, np.float32), np.empty(n, np.float32)
    return key, got


def _release(key, buffers) -> None:
    with _spare_lock:
        _spare.clear()
        _spare[key] = buffers


@entry_point("mojolike.distributed.step", also=STEP_OPTIONS, torch=("closure",),
             together=True)
def step(optimizer, grads, tokens=None, group=None, *, timeout=TIMEOUT_S, entry, **step_options):
    """One data-parallel step: `all_reduce_grads` on the optimizer's backend and mode, then
    `optimizer.step(grads, **step_options)`; returns what the step returns.

    Every rank holds the same parameters before the step, so every rank holds the same
    parameters after it: the single-process step on the accumulated gradient, bit for bit.
    Before anything is sent, every rank checks its step (the optimizer's own checks of
    `step_options` and `grads`, writing nothing) and the header round agrees on it: a
    step refused on one rank, step options that differ between ranks, or optimizers whose
    type, hyperparameters or step count differ, make every rank raise the same Refusal,
    named `mojolike.distributed.step`, with every buffer and attribute as it was. The sums
    are written to `grads` only once the optimizer has stepped on them; a step refused
    after the reduction (a sum whose norm overflows) leaves `grads` as they were too.

    Reproducibility: as `all_reduce_grads` and the optimizer's step (contracts/step.md).

    >>> import os, tempfile, numpy as np, torch.distributed as dist, mojolike
    >>> store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    >>> dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    >>> w = [np.ones(3, np.float32)]
    >>> opt = mojolike.SGD(w, lr=0.5, backend="oracle")
    >>> step(opt, [np.float32([1, 2, 4])], max_norm=10.0), w[0]
    (4.582575798034668, array([ 0.5,  0. , -1. ], dtype=float32))
    >>> dist.destroy_process_group()
    """
    call = _Call(entry, group, timeout)
    ours = isinstance(optimizer, _Optimizer)  # else step_fields refuses it, in the header round
    check_keywords = functools.partial(step.__entry__.check, entry)
    local = local_header(entry, grads, tokens, optimizer.numeric_mode if ours else None,
                         optimizer.backend if ours else None,
                         check=lambda: step_fields(entry, optimizer, grads, step_options,
                                                   check_keywords))
    with call.reduced(local) as out:
        try:
            result = optimizer.step(_shaped(local, out), **step_options)
        except Refusal as r:
            raise r.at(entry) from None
        _write(local.views, out)  # the clipped sums, when the clip is in place
        call.wrote()
    return result
