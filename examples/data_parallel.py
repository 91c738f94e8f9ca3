"""Two ranks, one result: run with `torchrun --standalone --nproc-per-node 2 examples/data_parallel.py`.

Each rank holds the same parameters and its own microbatch gradient (here drawn from a
Generator keyed by the rank); `mojolike.distributed.step` sums the gradients over the
ranks by the fixed pairwise tree and takes an AdamW step with the folded clip. Every rank
ends with the same parameters, and they are the bits one process gets from
`accumulate_grads` over both microbatches followed by the same step, which rank 0 checks.
"""
import numpy as np
import torch.distributed as dist

import mojolike
import mojolike.distributed as md


def params():
    g = mojolike.Generator(seed=7)
    return [g.kaiming_uniform((64, 32), fan_in=32), np.zeros(64, np.float32)]


def grads(rank):
    g = mojolike.Generator(seed=100 + rank)
    return [g.normal((64, 32)), g.normal((64,))]


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
w = params()
opt = mojolike.AdamW(w, lr=1e-3)
md.step(opt, grads(rank), tokens=2048, max_norm=1.0)   # all_reduce_grads, then opt.step
print(f"rank {rank}: checksum {mojolike.grad_checksum(w)}")

if rank == 0:  # one process, both microbatches: the same bits
    alone = params()
    total = mojolike.accumulate_grads([grads(r) for r in range(world)], [2048] * world)
    mojolike.AdamW(alone, lr=1e-3).step(total, max_norm=1.0)
    same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(w, alone))
    print(f"rank 0: equal to one process: {same}")
dist.destroy_process_group()
