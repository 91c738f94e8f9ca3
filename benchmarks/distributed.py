"""mojolike.distributed.all_reduce_grads against torch.distributed.all_reduce on local gloo ranks.

    python benchmarks/distributed.py [--elements 16777216] [--worlds 2,4] [--rounds 5]
                                     [--backend cpu-numba]

For each world size, fresh local processes (one thread each) hold one float32 gradient of
`--elements` values (2^24, 16.8 M, by default; each rank's own normal values). Each round
times, on every rank between barriers, one `all_reduce_grads` and one
`torch.distributed.all_reduce(SUM)` of a fresh copy of the same array; a round's time is
the slowest rank's, the best and the median round are printed, with the ratio (target:
at most 1.5x torch). Bytes sent: what each rank handed to write calls during one call
(/proc/self/io wchar: gloo's sockets), against 2 (W-1)/W of the gradient's bytes.
Bits: rank 0 rebuilds every rank's gradient and checks that ours equal
`mojolike.accumulate_grads` over them, and counts the elements where torch's sum differs.
"other processes used x cores" is the machine's CPU use beyond this benchmark's own
processes while it ran (figures are worth quoting only when it stays near 0).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fold import OtherLoad, cpu_model  # noqa: E402

HERE = os.path.abspath(__file__)


def _gradient(rank: int, n: int) -> np.ndarray:
    return np.random.default_rng(rank).standard_normal(n, dtype=np.float32)


def job(rank: int, world: int, elements: int, rounds: int, backend: str) -> dict:
    import torch
    import torch.distributed as dist
    from mojolike.contracts.ranks import bytes_written

    import mojolike
    from mojolike import distributed as md
    src = _gradient(rank, elements)
    ours_t, torch_t, ours_b, torch_b = [], [], [], []
    for r in range(rounds + 1):  # round 0 warms both paths up and is not kept
        x = src.copy()
        dist.barrier()
        w0, t0 = bytes_written(), time.perf_counter()
        md.all_reduce_grads(x, backend=backend)
        t1, w1 = time.perf_counter(), bytes_written()
        y = torch.from_numpy(src.copy())
        dist.barrier()
        w2, t2 = bytes_written(), time.perf_counter()
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        t3, w3 = time.perf_counter(), bytes_written()
        if r:
            ours_t.append(t1 - t0), torch_t.append(t3 - t2)
            ours_b.append(w1 - w0), torch_b.append(w3 - w2)
    out = {"ours_s": ours_t, "torch_s": torch_t, "ours_bytes": ours_b, "torch_bytes": torch_b}
    if rank == 0:
        want = mojolike.accumulate_grads([_gradient(p, elements) for p in range(world)],
                                         [2048] * world, backend=backend)
        out["ours_equal"] = bool((x.view(np.uint32) == want.view(np.uint32)).all())
        out["torch_differs"] = int((y.numpy().view(np.uint32) != want.view(np.uint32)).sum())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", default="cpu-numba")
    args = ap.parse_args()
    import torch
    from mojolike.contracts.ranks import launch
    print(f"{cpu_model()}; torch {torch.__version__}; backend {args.backend}; "
          f"{args.elements} float32 gradients ({4 * args.elements / 2**20:.0f} MiB) per rank")
    env = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    for w in (int(v) for v in args.worlds.split(",")):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        with OtherLoad() as other:
            runs = launch(w, f"{HERE}:job", {"elements": args.elements, "rounds": args.rounds,
                                             "backend": args.backend}, timeout=1200, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        ranks_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        others = max(0.0, other.cores - ranks_cpu / (time.monotonic() - t0))
        bad = [r for r in runs if not r.ok]
        if bad:
            raise SystemExit(f"rank {bad[0].rank} failed: {bad[0].error or bad[0].stderr[-2000:]}")
        v = [r.values for r in runs]
        ours = [max(x["ours_s"][i] for x in v) for i in range(args.rounds)]
        theirs = [max(x["torch_s"][i] for x in v) for i in range(args.rounds)]
        bound = 2 * (w - 1) / w * 4 * args.elements
        sent = max(max(x["ours_bytes"]) for x in v)
        tsent = max(max(x["torch_bytes"]) for x in v)
        med = lambda a: float(np.median(a))
        print(f"W={w}: all_reduce_grads best {min(ours) * 1e3:.1f} ms, median {med(ours) * 1e3:.1f} "
              f"ms; torch all_reduce best {min(theirs) * 1e3:.1f} ms, median "
              f"{med(theirs) * 1e3:.1f} ms; ratio best {min(ours) / min(theirs):.2f}x, median "
              f"{med(ours) / med(theirs):.2f}x (target <= 1.5x)")
        print(f"     bytes sent per rank (most of any rank): ours {sent} ({sent / bound:.4f} of "
              f"2(W-1)/W x {4 * args.elements} = {bound:.0f}), torch {tsent} "
              f"({tsent / bound:.4f})")
        print(f"     bits: ours == accumulate_grads over the ranks: {v[0]['ours_equal']}; torch's "
              f"sum differs at {v[0]['torch_differs']} of {args.elements} elements "
              f"({v[0]['torch_differs'] / args.elements:.1%}); other processes used "
              f"{others:.2f} cores")


if __name__ == "__main__":
    main()
