"""Local gloo worlds for tests, the distributed suite and benchmarks: W fresh processes on this machine.

`launch(W, "package.module:function", args)` starts W processes of this Python
(`python -m mojolike.contracts.ranks`), each joins one gloo world through a
FileStore on a temporary file (no port is opened for the rendezvous), calls
`function(rank, world_size, **args)` and writes what it returns (a dict of
numpy arrays and JSON values) to the temporary folder, as .npz without pickle
and .json. A job may also be a file, `path/to/file.py:function`. The parent
waits at most `timeout` seconds, then ends the ranks still running (its own
children, by process id) and reports them.

>>> r = RankResult(rank=0, returncode=0, arrays={}, values={"ok": True}, error=None, stderr="")
>>> r.ok, r.values["ok"]
(True, True)
"""
from __future__ import annotations

import datetime
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import numpy as np

INIT_TIMEOUT_S = 60.0



def bytes_written() -> int:
    """Bytes this process has handed to write calls so far (/proc/self/io wchar: gloo's sockets
    included); -1 where the system does not say."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))
    except (OSError, StopIteration, ValueError):
        return -1

@dataclass
class RankResult:
    rank: int
    returncode: int | None  # None: ended by the parent after the timeout
    arrays: dict
    values: dict
    error: dict | None  # {"type", "message", "option"} of an exception the job raised
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.error is None


def launch(world_size: int, job: str, args: dict | None = None, *, timeout: float = 120.0,
           env: dict | None = None) -> list[RankResult]:
    """Run `job` on `world_size` fresh local gloo ranks; one RankResult per rank, in rank order."""
    with tempfile.TemporaryDirectory(prefix="mojolike-dist-") as folder:
        store = os.path.join(folder, "store")
        spec = json.dumps(args or {})
        full_env = dict(os.environ, **(env or {}))
        procs = []
        for rank in range(world_size):
            cmd = [sys.executable, "-m", "mojolike.contracts.ranks", job, str(rank),
                   str(world_size), store, folder, spec]
            err = open(os.path.join(folder, f"rank{rank}.stderr"), "w+b")
            procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                           env=full_env), err))
        deadline = time.monotonic() + timeout
        codes = []
        for proc, _ in procs:
            try:
                codes.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        for (proc, _), code in zip(procs, codes):
            if code is None:
                proc.kill()  # only our own children, by their process
                proc.wait()
        return [_collect(folder, rank, code, err) for rank, (code, (_, err)) in
                enumerate(zip(codes, procs))]


def _collect(folder: str, rank: int, code: int | None, err) -> RankResult:
    err.seek(0)
    stderr = err.read().decode(errors="replace")[-4000:]
    err.close()
    arrays, values, error = {}, {}, None
    npz = os.path.join(folder, f"rank{rank}.npz")
    if os.path.exists(npz):
        with np.load(npz, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    js = os.path.join(folder, f"rank{rank}.json")
    if os.path.exists(js):
        with open(js) as f:
            saved = json.load(f)
        values, error = saved.get("values", {}), saved.get("error")
    return RankResult(rank, code, arrays, values, error, stderr)


def _load(job: str):
    where, name = job.rsplit(":", 1)
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"_mojolike_job_{os.getpid()}", where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _rank_main(argv: list[str]) -> int:
    job, rank, world, store, folder, spec = argv
    rank, world = int(rank), int(world)
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S))
    arrays, values, error = {}, {}, None
    try:
        out = _load(job)(rank, world, **json.loads(spec)) or {}
        for k, v in out.items():
            (arrays if isinstance(v, np.ndarray) else values)[k] = v
    except Exception as e:  # reported to the parent, which decides what it means
        error = {"type": type(e).__name__, "message": str(e), "option": getattr(e, "option", None),
                 "trace": traceback.format_exc()[-2000:]}
    np.savez(os.path.join(folder, f"rank{rank}.npz"), **arrays)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump({"values": values, "error": error}, f)
    if error is None:
        dist.destroy_process_group()
    # a failed group may hold threads blocked on dead peers; leave without waiting for them
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1:]))
