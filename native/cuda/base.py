"""What every CUDA kernel set shares: the target, the jitted kernels, the launch helpers.

Each family module (native/cuda/fold.py, crmath.py, ...) lists its kernels as
`KERNELS = {name: (python function, signature)}` (the PTX lint compiles the same
table) and derives its kernel set from `CudaBase`, which jits them and reports
the device. `device` compiles a CPU module's element function for this target
(libdevice primitives on a GPU, numpy scalars under the simulator), the one
retargeting helper of native/retarget.py.

Reproducibility: kernels loop grid- or warp-stride, so the launch geometry these
helpers pick never reaches the bits.

>>> grid(1000, 256) == min(MAX_BLOCKS, 4), grid(0)
(True, 1)
"""
from __future__ import annotations

import threading

import numpy as np
from numba import cuda

from ..retarget import retarget
from . import prims

SIMULATOR = prims.SIMULATOR
BACKEND = "cuda-sim" if SIMULATOR else "cuda"
THREADS = 32 * prims.WARPS  # 256 on a GPU; the simulator runs a Python thread per CUDA thread
# Grid-stride loops; the simulator gets one block, so a launch creates 32 threads, not one per element.
MAX_BLOCKS = 1 if SIMULATOR else 65535
_DEVICE_JIT = None if SIMULATOR else cuda.jit(device=True, inline="always")


def device(fn, primitives=(), **names):
    """`fn` (a CPU module's function, jitted or not) as a device function of this target:
    the names in `primitives` resolved to native/cuda/prims.py's, the other `names` to the
    objects given. Under the simulator it stays plain Python: it calls no CUDA API, and
    skips the simulator's device-function wrapper."""
    return retarget(fn, _DEVICE_JIT, **{p: getattr(prims, p) for p in primitives}, **names)


def grid(units: int, per_block: int = THREADS) -> int:
    """Blocks for `units` of work at `per_block` a block, at least 1, at most MAX_BLOCKS."""
    return max(1, min(MAX_BLOCKS, (units + per_block - 1) // per_block))


def undecided_slots(out: np.ndarray, pattern: int) -> int:
    """The number of slots of out (float32, on the host) holding the UNDECIDED pattern."""
    return int(np.count_nonzero(out.view(np.uint32) == pattern))


def device_details() -> dict:
    """The device's name, compute capability and driver version (metadata on every card)."""
    if SIMULATOR:
        return {"device": "numba CUDA simulator"}
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    out = {"device": name, "compute_capability": ".".join(map(str, dev.compute_capability))}
    try:
        from numba.cuda.cudadrv.driver import driver
        out["driver"] = ".".join(map(str, driver.get_version()))
    except Exception as e:  # the version is metadata; its absence must not stop a run
        out["driver"] = f"unknown ({type(e).__name__})"
    return out


class Jitted:
    """A family's kernels by name, each compiled when first asked for: numba-cuda compiles an
    explicit signature at once, and a family's whole table costs seconds per kernel on the
    host (inlining the crmath pieces), most of which a process never launches.

    The compiled kernel is the one an eager table would hold (same function, signature,
    options), so the bits do not depend on when it was compiled."""

    def __init__(self, table: dict, cache: bool):
        self._table, self._cache, self._done = table, cache, {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str):
        k = self._done.get(name)
        if k is None:
            fn, sig = self._table[name]  # an unknown name is a KeyError, as from a dict
            with self._lock:
                k = self._done.get(name)
                if k is None:
                    k = self._done[name] = cuda.jit(sig, cache=self._cache)(fn)
        return k

    def __contains__(self, name: str) -> bool:
        return name in self._table

    def compiled(self) -> list[str]:
        """The names compiled so far."""
        return sorted(self._done)


class CudaBase:
    """A family's kernel set on an NVIDIA GPU (or the simulator): `KERNELS` jitted into
    `self._k` on first use, every numeric mode running the rn kernels (they keep the strongest
    promise)."""

    KERNELS: dict = {}  # name -> (python function, signature)
    CACHE = False  # numba's on-disk cache for the jitted kernels

    def __init__(self, mode: str):
        self.backend = BACKEND
        self.numeric_mode = mode
        self._k = Jitted(self.KERNELS, self.CACHE)
        self.details = device_details()

    def _launch(self, name, blocks, args, writes=()):
        """Run kernel `name` on args: numpy arrays travel to the device flattened, and those
        at the positions in `writes` come back after; device arrays stay (viewed flat)."""
        dev, back = [], []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                d = cuda.to_device(a.reshape(-1))
                if i in writes:
                    back.append((a, d))
                a = d
            elif not isinstance(a, np.generic) and getattr(a, "ndim", 1) > 1:
                a = a.reshape(a.size)
            dev.append(a)
        self._k[name][blocks, THREADS](*dev)
        for host, d in back:
            d.copy_to_host(host.reshape(-1))
