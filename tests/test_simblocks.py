"""The simulator worker's waiting block manager runs kernels exactly as numba's polling one does.

Each check runs in a fresh process with NUMBA_ENABLE_CUDASIM=1 (it must be set before
numba is imported): the same kernels under the stock manager, then under the one
`simblocks.install()` puts in, compared element for element.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    from numba import cuda, float32
    from mojolike.native.cuda import simblocks
    from mojolike.native.cuda.fold import KERNELS, chunk_table

    @cuda.jit
    def tree_sum(x, out):
        # shared memory, a barrier per level, and half the threads idle at each
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        s[t] = x[cuda.blockIdx.x * 64 + t]
        step = 32
        while step >= 1:
            cuda.syncthreads()
            if t < step:
                s[t] = s[t] + s[t + step]
            step //= 2
        if t == 0:
            out[cuda.blockIdx.x] = s[0]

    @cuda.jit
    def early_exit(x, out):
        # threads past 20 leave before the barrier: the rest meet without them
        t = cuda.threadIdx.x
        if t >= 20:
            return
        s = cuda.shared.array(32, float32)
        s[t] = x[t]
        cuda.syncthreads()
        out[t] = s[19 - t]

    @cuda.jit
    def fails(out):
        t = cuda.threadIdx.x
        cuda.syncthreads()
        if t == 5:
            out[100] = 1.0  # out of bounds: the simulator raises
        cuda.syncthreads()
        out[t] = t

    def run_all():
        rng = np.random.default_rng(3)
        x = rng.standard_normal(64 * 5).astype(np.float32)
        sums = np.zeros(5, np.float32)
        tree_sum[5, 64](x, sums)
        mirrored = np.zeros(32, np.float32)
        early_exit[1, 32](x, mirrored)
        fn, _ = KERNELS["chunk_partials"]
        chunk = cuda.jit(fn)
        y = rng.standard_normal(3000).astype(np.float32)
        starts, stops, _ = chunk_table([0, 3000])
        partials = np.zeros(starts.size, np.float32)
        chunk[1, 32](y, y, True, starts, stops, partials)
        try:
            fails[1, 32](np.zeros(32, np.float32))
            error = None
        except Exception as e:
            error = type(e).__name__ + ": " + str(e)
        return {"sums": sums.view(np.uint32).tolist(), "mirrored": mirrored.view(np.uint32).tolist(),
                "partials": partials.view(np.uint32).tolist(), "error": error}

    stock = run_all()
    installed = simblocks.install()
    print(json.dumps({"installed": installed, "stock": stock, "waiting": run_all()}))
''')


def run_in_simulator() -> dict:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def test_the_waiting_block_manager_gives_the_stock_managers_results_and_errors():
    got = run_in_simulator()
    assert got["installed"], "simblocks no longer fits this numba-cuda's simulator"
    stock, waiting = got["stock"], got["waiting"]
    assert stock["sums"] and stock["partials"] and any(stock["mirrored"])
    for key in ("sums", "mirrored", "partials"):
        assert waiting[key] == stock[key], key
    assert stock["error"] and "tid=[5, 0, 0]" in stock["error"], stock["error"]
    assert waiting["error"] == stock["error"]


def test_the_simulator_worker_installs_the_waiting_manager():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    code = ("import sys; from mojolike.native.cuda import simworker;"
            "import numba.cuda.simulator.kernel as k; sys.stdin = open('/dev/null');"
            "simworker.serve = lambda i, o: print(k.BlockManager.__module__, file=sys.stderr);"
            "simworker.main()")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == "mojolike.native.cuda.simblocks"
