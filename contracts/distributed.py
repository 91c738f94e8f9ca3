"""The distributed suite: the gradient all-reduce on local gloo ranks, the same bits for every
world size and for one process, the bytes it moves, torch's own sum as the negative control, and
refusals made by every rank together (contracts/distributed.md).

One world of four fresh processes per backend runs every case: the whole world (W = 4),
two pairs (W = 2), four singletons (W = 1) and the first three ranks (W = 3), each a few
steps of Adam with the clip after the reduction; `single` and `single3` are the same
steps in this process with `mojolike.accumulate_grads`.

>>> [c.id for c in cases()], sum(SIZES), TOKENS
(['single', 'w1', 'w2', 'w4', 'single3', 'w3'], 138, 2048)
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

import mojolike

from ..core import registry
from ..core.refusals import Refusal
from . import casegen
from .ranks import bytes_written, launch

NAME = "distributed"
FAMILY = "optim"
PROFILE = "mojolike.identical.distributed.fp32.v1"
REQUIRES = ("torch", "distributed")  # the module the suite needs, and the extra that brings it

SHAPES = ((37,), (8, 12), (5,))
SIZES = tuple(int(np.prod(s)) for s in SHAPES)
MICROBATCHES = 4
STEPS = 3
TOKENS = 2048  # per microbatch: two whole 1024-token chunks, so every split here is aligned
LR, MAX_NORM = 1e-2, 1.0
PROBE = 16384  # elements of the bandwidth probe: framing is under 2% of its bytes
WORLD = 4
JOB = "mojolike.contracts.distributed:rank_job"
RECORDS = ("reduced", "norms", "params", "exp_avg", "exp_avg_sq")  # per case, in card order


@dataclass(frozen=True)
class Case:
    id: str
    world_size: int  # 0: one process, no torch.distributed
    microbatches: int


def cases() -> tuple[Case, ...]:
    return (Case("single", 0, 4), Case("w1", 1, 4), Case("w2", 2, 4), Case("w4", 4, 4),
            Case("single3", 0, 3), Case("w3", 3, 3))


def microbatch(step: int, j: int) -> list[np.ndarray]:
    return [casegen.draw("normal", f"distributed/step{step}/mb{j}/t{i}", n).reshape(s)
            for i, (n, s) in enumerate(zip(SIZES, SHAPES))]


def initial_params() -> list[np.ndarray]:
    return [casegen.draw("unit", f"distributed/param{i}", n).reshape(s)
            for i, (n, s) in enumerate(zip(SIZES, SHAPES))]


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in arrays])


def train(backend: str, local, reduce) -> dict[str, np.ndarray]:
    """STEPS steps of Adam with the clip: local(step) gives this process's gradient (a list),
    reduce(grads) sums it over the ranks in place; the records of clause 13."""
    params = initial_params()
    opt = mojolike.Adam(params, lr=LR, backend=backend)
    reduced, norms = [], []
    for s in range(STEPS):
        grads = local(s)
        reduce(grads)
        reduced.append(_flat(grads))
        norms.append(opt.step(grads, max_norm=MAX_NORM))
    state = opt.state_dict()
    return {"reduced": np.concatenate(reduced), "norms": np.float32(norms),
            "params": _flat(params), "exp_avg": _flat(state["exp_avg"]),
            "exp_avg_sq": _flat(state["exp_avg_sq"])}


def _accumulated(backend: str, step: int, which) -> list[np.ndarray]:
    return mojolike.accumulate_grads([microbatch(step, j) for j in which], [TOKENS] * len(which),
                                     backend=backend)


@functools.cache
def single(backend: str, m: int) -> dict[str, np.ndarray]:
    """The steps in this process, the gradient accumulated over m microbatches (cached)."""
    return train(backend, lambda s: _accumulated(backend, s, range(m)), lambda g: None)


# -- the ranks ------------------------------------------------------------------------------------
def _torch_sum(group):
    import torch
    import torch.distributed as dist

    def reduce(grads):
        flat = torch.from_numpy(_flat(grads))
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
        start = 0
        for g in grads:
            g.reshape(-1)[:] = flat.numpy()[start:start + g.size]
            start += g.size
    return reduce


def rank_job(rank: int, world: int, backend: str, control: bool = True) -> dict:
    """Every run of one rank in the world of WORLD ranks (run by `launch`)."""
    import torch.distributed as dist

    from .. import distributed as md
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    singles = [dist.new_group([r]) for r in range(world)]
    three = dist.new_group([0, 1, 2])
    # (case, group, this rank's microbatches, its tokens); every group's ranks split the batch
    q = rank % 2
    runs = [("w1", singles[rank], range(4)), ("w2", pairs[rank // 2], (2 * q, 2 * q + 1)),
            ("w4", None, (rank,))] + ([("w3", three, (rank,))] if rank < 3 else [])
    out, values = {}, {}
    for case, group, mine in runs:
        local = lambda s, mine=mine: _accumulated(backend, s, mine)
        out[case] = train(backend, local, lambda g, group=group, mine=mine: md.all_reduce_grads(
            g, tokens=TOKENS * len(mine), group=group, backend=backend))
        if control:
            out["control-" + case] = train(backend, local, _torch_sum(group))
    arrays = {f"{case}/{name}": a for case, recs in out.items() for name, a in recs.items()}
    values["bandwidth"] = _bandwidth(rank, backend, {"w2": pairs[rank // 2], "w4": None})
    values["refusals"] = _probes(rank, backend, three)
    return {**arrays, **values}


def _bandwidth(rank: int, backend: str, groups: dict) -> dict:
    """Bytes sent by one all_reduce_grads of PROBE elements: write calls measured, and counted."""
    from .. import distributed as md
    got = {}
    for name, group in groups.items():
        g = casegen.bulk_normal(PROBE, f"distributed/probe/{rank}")
        before = bytes_written()
        ex = md.all_reduce_grads(g, group=group, backend=backend)
        after = bytes_written()
        got[name] = {"measured": after - before if before >= 0 else None,
                     "payload": ex.bytes_sent, "control": ex.control_bytes,
                     "world_size": ex.world_size}
    return got


def _probes(rank: int, backend: str, three) -> list:
    """Each refusal probe of clause 16 on this rank: (expected option, option raised or None,
    whether this rank's buffers were left as they were)."""
    from .. import distributed as md
    got = []
    for expect, bad_rank, change, kw in _refusal_rows(three):
        if kw and rank != bad_rank:
            continue  # a probe with its own group: only the rank outside it calls
        grads = microbatch(0, rank % MICROBATCHES)
        call = dict(tokens=TOKENS, backend=backend, **kw)
        if rank == bad_rank or bad_rank == "all":
            grads, call = change(grads, call)
        before = [np.asarray(g).tobytes() for g in grads]
        try:
            md.all_reduce_grads(grads, **call)
            raised = None
        except Refusal as e:
            raised = e.option
        got.append([expect, raised, [np.asarray(g).tobytes() for g in grads] == before])
    return got


def _readonly(g):
    g[0].flags.writeable = False
    return g


def _refusal_rows(three):
    swap = lambda fn: (lambda g, c: (fn(g), c))
    call = lambda **kw: (lambda g, c: (g, dict(c, **kw)))
    nonfinite = lambda v: swap(lambda g: [g[0], g[1], np.where(np.arange(5) == 2, v, g[2])
                                          .astype(np.float32)])
    return [
        ("grads", 2, swap(lambda g: [g[0], g[1].reshape(12, 8), g[2]]), {}),
        ("grads", 1, swap(lambda g: g[:2]), {}),
        ("grads[1]", 3, swap(lambda g: [g[0], g[1].astype(np.float64), g[2]]), {}),
        ("grads[0]", 1, swap(_readonly), {}),
        ("grads", 0, nonfinite(np.inf), {}),
        ("grads", 2, nonfinite(np.nan), {}),
        ("tokens", "all", call(tokens=3 * 1024), {}),
        ("tokens", 1, call(tokens=None), {}),
        ("tokens", 2, call(tokens=0), {}),
        ("backend", 3, call(backend="tpu"), {}),
        ("frob", 0, call(frob=True), {}),
        ("timeout", "all", call(timeout=0), {}),
        ("group", 3, lambda g, c: (g, c), {"group": three}),
    ]


_worlds: dict[str, list] = {}


def world(backend: str):
    """The world's RankResults on `backend` (run once per backend and process)."""
    if backend not in _worlds:
        env = {"NUMBA_ENABLE_CUDASIM": "1" if backend == "cuda-sim" else "0",
               "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        # torch's sum is the negative control, an oracle variant: computed in the oracle's world
        runs = launch(WORLD, JOB, {"backend": backend, "control": backend == "oracle"},
                      timeout=600, env=env)
        failed = [r for r in runs if not r.ok]
        if failed:
            r = failed[0]
            raise RuntimeError(f"distributed suite: rank {r.rank} on {backend} failed (exit "
                               f"{r.returncode}): {(r.error or {}).get('trace') or r.stderr[-1500:]}")
        _worlds[backend] = runs
    return _worlds[backend]


def _records(recs: dict) -> list[tuple[str, np.ndarray]]:
    return [(name, recs[name]) for name in RECORDS]


def _case_records(backend: str, case: Case, prefix: str = "") -> dict[str, np.ndarray]:
    rank0 = world(backend)[0].arrays
    return {name: rank0[f"{prefix}{case.id}/{name}"] for name in RECORDS}


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    if case.world_size == 0:
        return _records(single("oracle" if isinstance(k, _Control) else k.backend,
                               case.microbatches))
    if isinstance(k, _Control):
        return _records(_case_records("oracle", case, "control-"))
    return _records(_case_records(k.backend, case))


def digest(recs: list[tuple[str, np.ndarray]]) -> str:
    h = hashlib.md5()
    for name, a in recs:
        h.update(name.encode() + np.asarray(a, np.float32).tobytes())
    return h.hexdigest()


# -- clause (c): every world size, every rank, one process ---------------------------------------
def clause_invariance(k) -> tuple[str, str]:
    runs = world(k.backend)
    want = {4: digest(_records(single(k.backend, 4))), 3: digest(_records(single(k.backend, 3)))}
    notes, ok = [], True
    for case in cases():
        if not case.world_size:
            continue
        ranks = [r for r in runs if f"{case.id}/params" in r.arrays]
        per_rank = {digest(_records({n: r.arrays[f"{case.id}/{n}"] for n in RECORDS}))
                    for r in ranks}
        # every rank takes part in W = 1, 2 and 4 (four singletons, two pairs), three in W = 3
        same = per_rank == {want[case.microbatches]} and len(ranks) == (3 if case.world_size == 3
                                                                        else WORLD)
        ok &= same
        notes.append(f"W={case.world_size}: " + (f"all {len(ranks)} ranks {next(iter(per_rank))[:12]}"
                                                  if same else f"DIFFERS {sorted(per_rank)} "
                                                               f"({len(ranks)} ranks)"))
    differ = control_differs()
    return ("pass" if ok else "fail"), (
        "; ".join(notes) + f"; single process: 4 microbatches {want[4][:12]}, 3 microbatches "
        f"{want[3][:12]}; torch's all_reduce(SUM) on the same gradients differs from one "
        f"process at W = {differ or 'none'}")


def control_differs() -> list[int]:
    """The world sizes at which torch's all_reduce(SUM) differs from one process (on the oracle)."""
    want = {m: digest(_records(single("oracle", m))) for m in (3, 4)}
    return [c.world_size for c in cases() if c.world_size and
            digest(_records(_case_records("oracle", c, "control-"))) != want[c.microbatches]]


# -- clause (d): the bytes a rank moves -----------------------------------------------------------
def clause_bandwidth(k) -> tuple[str, str]:
    ok, notes = True, []
    for name in ("w2", "w4"):
        seen = [r.values["bandwidth"][name] for r in world(k.backend)]
        w = seen[0]["world_size"]
        bound = 2 * (w - 1) / w * 4 * PROBE
        worst = max(s["measured"] for s in seen) if all(s["measured"] is not None for s in seen) \
            else None
        counted = max(s["payload"] for s in seen)
        ok &= counted <= bound + 4 * w and (worst is None or worst <= 1.02 * bound + 4096)
        notes.append(f"W={w}, {PROBE} elements: payload {counted} bytes sent per rank (bound "
                     f"2(W-1)/W x {4 * PROBE} = {bound:.0f}), "
                     + (f"measured by write calls at most {worst} bytes" if worst is not None
                        else "not measured (no /proc/self/io)"))
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (f): refusals -------------------------------------------------------------------------
def clause_refusals(k) -> tuple[str, str]:
    failures, count = [], 0
    for r in world(k.backend):
        for expect, raised, kept in r.values["refusals"]:
            count += 1
            if raised != expect or not kept:
                failures.append(f"rank {r.rank}: {expect}: " + (
                    f"raised {raised!r}" if raised != expect else "a buffer changed"))
    local = _local_refusals(k.backend)
    failures += local
    rows = len(_refusal_rows(None))
    if failures:
        return "fail", f"{len(failures)} wrong: " + "; ".join(failures[:4])
    return "pass", (f"{rows} refusals, {count} rank-calls: every rank of the group raised the "
                    f"expected option and kept its buffers; without a process group: 'group'")


def _local_refusals(backend: str) -> list[str]:
    from .. import distributed as md
    g = [np.ones(3, np.float32)]
    try:
        md.all_reduce_grads(g, backend=backend)
    except Refusal as e:
        return [] if e.option == "group" and g[0].tolist() == [1, 1, 1] else [f"group: {e.option}"]
    return ["group: not refused without a process group"]


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "d": clause_bandwidth(k), "f": clause_refusals(k)}


# -- clause (e): the negative control -------------------------------------------------------------
class _Control:
    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE

    def __init__(self, name: str, describe: str):
        self.name, self.describe = name, describe


def negative_controls() -> list[_Control]:
    return [_Control("torch-all-reduce-sum", "torch.distributed.all_reduce(SUM) (gloo) instead "
                     "of the pairwise tree, on the same per-rank gradients")]

