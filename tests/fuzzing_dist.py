"""Failing ranks for the fuzz target `distributed_failures`: a scenario runs on a local gloo world.

A scenario is a list of calls of `mojolike.distributed.all_reduce_grads` (or `step`);
each call may carry one fault on one rank: a bad argument (refused together), an inf
cell, a transport call that raises, a rank that exits, or one that stalls past the
timeout, at the k-th transport call of that rank. `job_scenario` runs in each rank
(through mojolike.contracts.ranks.launch) and returns one outcome per call;
`check(scenario, results)` states the promise: a call that returns on a rank gives
the one-process sum there; a call that raises leaves that rank's gradients as they
were and raises Refusal or CollectiveFailed; a rank that reached the end never hangs.
"""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np

SHAPES = ((300,), (5, 7))
TOKENS = 2048
TIMEOUT_S = 2.0
FAULTS = ("none", "bad_max_norm", "inf", "shape", "raise", "exit", "stall")
# isend and irecv are left unwrapped: torch's P2POp accepts only its own two functions (an
# identity check), and the step hands them to batch_isend_irecv, which is wrapped
TRANSPORT = ("all_to_all_single", "batch_isend_irecv", "send", "recv",
             "all_gather", "all_gather_into_tensor", "broadcast", "barrier", "all_reduce")


def grads(rank: int, call: int) -> list[np.ndarray]:
    rng = np.random.default_rng([rank, call, 7])
    return [(rng.standard_normal(s) * 2.0 ** rng.integers(-6, 7, s)).astype(np.float32)
            for s in SHAPES]


def md5(arrays) -> str:
    return hashlib.md5(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def expected(call: int, world: int) -> str:
    """The one-process sum of every rank's gradients for `call` (cpu-numba, aligned tokens)."""
    import mojolike
    return md5(mojolike.accumulate_grads([grads(r, call) for r in range(world)],
                                         [TOKENS] * world, backend="cpu-numba"))


def _hook(dist, at: int, how: str):
    """Make the at-th transport call of this rank raise, exit or stall; returns an undo."""
    count, saved = [0], {}

    def wrap(name, real):
        def call(*args, **kwargs):
            count[0] += 1
            if count[0] == at:
                if how == "exit":
                    os._exit(3)
                if how == "stall":
                    time.sleep(TIMEOUT_S * 3)
                if how == "raise":
                    raise RuntimeError("injected transport failure (Connection closed by peer)")
            return real(*args, **kwargs)
        return call

    for name in TRANSPORT:
        real = getattr(dist, name, None)
        if real is not None:
            saved[name] = real
            setattr(dist, name, wrap(name, real))
    return lambda: [setattr(dist, n, f) for n, f in saved.items()]


def job_scenario(rank: int, world: int, scenario: list) -> dict:
    """Each call of the scenario on this rank; its outcome as (kind, detail, gradients' md5)."""
    import torch.distributed as dist

    import mojolike
    from mojolike import distributed as md
    out = []
    for i, (use_step, fault, faulty, at) in enumerate(scenario):
        g = grads(rank, i)
        mine = fault if rank == faulty else "none"
        kw = {}
        if mine == "bad_max_norm":
            kw["max_norm"] = -1.0
        if mine == "inf":
            g[0][3] = np.float32(np.inf)
        if mine == "shape":
            g = [g[0][:-1], g[1]]
        before = md5(g)
        undo = _hook(dist, at, mine) if mine in ("raise", "exit", "stall") else (lambda: None)
        try:
            if use_step:
                opt = mojolike.SGD([np.zeros(s[0] if len(s) == 1 else s, np.float32)
                                    for s in (x.shape for x in g)], lr=1.0, backend="cpu-numba")
                md.step(opt, g, tokens=TOKENS, timeout=TIMEOUT_S, max_norm=kw.get("max_norm"))
            else:
                if "max_norm" in kw:  # all_reduce_grads has no max_norm: the same fault, by name
                    kw = {"max_nrom": -1.0}
                md.all_reduce_grads(g, tokens=TOKENS, timeout=TIMEOUT_S, backend="cpu-numba", **kw)
            out.append(["ok", "", md5(g), before])
        except mojolike.Refusal as e:
            out.append(["refused", f"{e.entry_point}|{e.option}", md5(g), before])
        except md.CollectiveFailed as e:
            out.append(["failed", str(e)[:200], md5(g), before])
        except Exception as e:  # noqa: BLE001 - reported: any other exception breaks the promise
            out.append(["raised", f"{type(e).__name__}: {e}"[:300], md5(g), before])
        finally:
            undo()
    return {"outcomes": out}


def check(scenario: list, results, world: int) -> str | None:
    """The first broken promise of one run of `scenario`, or None."""
    for r in results:
        if r.error is not None:
            return f"rank {r.rank}: the job raised {r.error['type']}: {r.error['message'][:200]}"
    exited = {r.rank for r in results if r.returncode == 3}
    hung = [r.rank for r in results if r.returncode is None]
    if hung:
        return f"ranks {hung} did not finish within the launch's timeout"
    for i, (use_step, fault, faulty, at) in enumerate(scenario):
        for r in results:
            if r.rank in exited:
                continue
            outcomes = r.values.get("outcomes", [])
            if i >= len(outcomes):
                return f"rank {r.rank}: no outcome for call {i}"
            kind, detail, after, before = outcomes[i]
            if kind == "raised":
                return f"rank {r.rank}, call {i} ({fault} on rank {faulty}): {detail}"
            if kind == "ok" and not use_step and after != expected(i, world):
                return f"rank {r.rank}, call {i} ({fault} on rank {faulty}): returned other bits"
            if kind == "refused" and not detail.startswith("mojolike.distributed."):
                return f"rank {r.rank}, call {i}: refused as {detail}, not as the distributed entry"
            if kind in ("refused", "failed") and after != before:
                return f"rank {r.rank}, call {i} ({fault}): {kind} but its gradients changed"
            if fault in ("bad_max_norm", "shape", "inf") and kind == "ok":
                return f"rank {r.rank}, call {i}: {fault} on rank {faulty} was not refused"
        if any(r.rank in exited for r in results) and fault == "exit":
            break  # the world is gone: later calls have no peer
    return None
