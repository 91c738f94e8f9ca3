"""The backend registry: which kernels exist, which can run here, and loading them.

Backends: `oracle` (pure Python, the definition), `cpu-numba`, `cpu-cffi`, `cuda`
(a real NVIDIA GPU) and `cuda-sim` (the CUDA kernels under numba's simulator, run
in a worker process unless this process already has NUMBA_ENABLE_CUDASIM=1).

Modes: `identical` is the contract (the oracle's bits everywhere);
`deterministic` (same bits run to run and across threads on one backend) and
`fast` carry no contract and are labelled so wherever they appear.

Selection: the call's `backend=` / `numeric_mode=`, else MOJOLIKE_BACKEND /
MOJOLIKE_NUMERIC_MODE, else `cpu-numba` / `identical`. Loading compiles on first
use (numba `cache=True`, the cffi build cache); importing this module compiles
nothing.

>>> [b.name for b in backends()][:3]
['oracle', 'cpu-numba', 'cpu-cffi']
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import threading
from dataclasses import dataclass

from . import fpstate
from .entry import entry_point
from .families import loader
from .refusals import BackendUnavailable, refuse

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda", "cuda-sim")
MODES = ("identical", "deterministic", "fast")
DEFAULT_BACKEND = "cpu-numba"
DEFAULT_MODE = "identical"
CONTRACT_MODE = "identical"

_DESCRIPTIONS = {
    "oracle": "pure Python, exact binary32 emulation; the definition",
    "cpu-numba": "numba on the CPU, parallel over chunks",
    "cpu-cffi": "C through cffi, OpenMP where available",
    "cuda": "numba CUDA on an NVIDIA GPU",
    "cuda-sim": "the CUDA kernels under numba's CUDA simulator (slow; for CI)",
}


def mode_label(mode: str) -> str:
    """How a mode is shown next to results: only `identical` carries the contract."""
    return mode if mode == CONTRACT_MODE else f"{mode} (no contract)"


@dataclass(frozen=True)
class BackendInfo:
    name: str
    available: bool
    reason: str  # why not, when unavailable; how it runs, when available
    description: str


def simulator_process() -> bool:
    """True when numba's CUDA simulator is (or will be) active in this process."""
    if "numba" in sys.modules:
        from numba import config
        return bool(config.ENABLE_CUDASIM)
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def runs_in_worker(backend: str) -> bool:
    """True when `backend`'s kernels run in a worker process: the simulator, asked for by a
    process that already uses numba for real."""
    return backend == "cuda-sim" and not simulator_process()


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _cuda_status() -> tuple[bool, str]:
    if simulator_process():
        return False, "this process runs numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    if not _have("numba.cuda"):
        return False, "numba-cuda is not installed"
    from numba import cuda
    if cuda.is_available():
        name = cuda.get_current_device().name  # bytes in older numba-cuda, str through cuda.core
        return True, f"GPU: {name.decode() if isinstance(name, bytes) else name}"
    try:
        from numba.cuda.cudadrv.driver import driver
        driver.initialize()
    except Exception as e:  # the driver's own words say why
        first = next((ln.strip() for ln in str(e).splitlines()
                      if ln.strip() and "Error at driver init" not in ln), str(e))
        return False, f"no usable NVIDIA GPU: {first}"
    return False, "no usable NVIDIA GPU: numba.cuda.is_available() is False"


def _status(name: str) -> tuple[bool, str]:
    if name == "oracle":
        return True, "always"
    if name == "cpu-numba":
        return (True, "numba") if _have("numba") else (False, "numba is not installed")
    if name == "cpu-cffi":
        if not _have("cffi"):
            return False, "cffi is not installed"
        from ..native.c import build
        if build.cached_build_exists():
            return True, "cached build"
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(cc) is None:
            return False, f"no C compiler ({cc!r} not found) and no cached build"
        return True, f"compiles with {cc} on first use"
    if name == "cuda":
        return _cuda_status()
    if name == "cuda-sim":
        if not _have("numba.cuda"):
            return False, "numba-cuda is not installed"
        return True, "in this process" if simulator_process() else "in a worker process"
    raise KeyError(name)


_status_cache: dict[str, tuple[bool, str]] = {}


def _cached_status(name: str) -> tuple[bool, str]:
    if name not in _status_cache:
        _status_cache[name] = _status(name)
    return _status_cache[name]


@entry_point("mojolike.backends")
def backends(**unknown) -> list[BackendInfo]:
    """Every backend, whether it can run in this process and, if not, why."""
    return [BackendInfo(name, *_cached_status(name), _DESCRIPTIONS[name]) for name in BACKENDS]


def _pick(entry: str, option: str, value, env: str, default: str, choices: tuple[str, ...],
          what: str) -> str:
    if value is None and os.environ.get(env):
        value, option = os.environ[env], env
    value = default if value is None else value
    if value not in choices:
        refuse(entry, option, f"is not {what}; choose one of {', '.join(choices)}", value=value)
    return value


def resolve(entry: str, backend: str | None, numeric_mode: str | None) -> tuple[str, str]:
    """The (backend, mode) a call runs with: argument, else environment, else default."""
    backend = _pick(entry, "backend", backend, "MOJOLIKE_BACKEND", DEFAULT_BACKEND, BACKENDS,
                    "a backend")
    numeric_mode = _pick(entry, "numeric_mode", numeric_mode, "MOJOLIKE_NUMERIC_MODE", DEFAULT_MODE,
                         MODES, "a numeric mode")
    if backend == "oracle" and numeric_mode != CONTRACT_MODE:
        refuse(entry, "numeric_mode", "has no oracle; the oracle defines the identical mode only",
               value=numeric_mode)
    return backend, numeric_mode


_loaded: dict[tuple[str, str, str], object] = {}
_lock = threading.Lock()
_used = threading.local()


def kernels(entry: str, family: str, backend: str | None = None, numeric_mode: str | None = None):
    """The loaded kernels of `family` for the resolved backend and mode.

    The kernels report the backend and mode they were built for; a mismatch is
    refused by name rather than returning bits under the wrong label. In identical
    mode the calling thread's floating-point state is checked first (`fpstate`).
    """
    backend, mode = resolve(entry, backend, numeric_mode)
    check_fp_state(entry, mode)
    key = (family, backend, mode)
    k = _loaded.get(key)
    if k is None:
        with _lock:
            k = _loaded.get(key)
            if k is None:
                ok, why = _cached_status(backend)  # probes only this backend (no GPU probe for CPU calls)
                if not ok:
                    raise BackendUnavailable(entry, "backend", f"cannot run here: {why}", value=backend)
                if runs_in_worker(backend):
                    from ..native.cuda.simworker import proxy
                    k = proxy(family, mode)
                else:
                    module, factory = loader(family, backend).split(":")
                    k = getattr(importlib.import_module(module), factory)(mode, backend=backend)
                check_label(entry, k, backend, mode)
                _loaded[key] = k
    _used.kernels = k
    return k


@contextlib.contextmanager
def override(family: str, backend: str, mode: str, k):
    """Serve `k` as the kernels of (family, backend, mode) inside the block.

    For negative controls, which must run deliberately wrong kernels through the
    public API; nothing else uses it.
    """
    key = (family, backend, mode)
    saved = _loaded.get(key)
    _loaded[key] = k
    try:
        yield
    finally:
        if saved is None:
            _loaded.pop(key, None)
        else:
            _loaded[key] = saved


def check_fp_state(entry: str, mode: str) -> None:
    """Refuse identical mode by name when the calling thread does not round to nearest with
    subnormals kept; kernels held across calls (optimizers, schedules) call this per call."""
    if mode == CONTRACT_MODE and fpstate.deviation():
        fpstate.refuse(entry)


def check_label(entry: str, k, backend: str, mode: str) -> None:
    got = (getattr(k, "backend", None), getattr(k, "numeric_mode", None))
    if got != (backend, mode):
        raise BackendUnavailable(
            entry, "backend", f"loaded kernels report backend={got[0]!r} numeric_mode={got[1]!r}, "
            f"not {backend!r} / {mode!r}; refusing to return bits under the wrong label",
            value=backend)


@entry_point("mojolike.backend_used")
def backend_used(**unknown) -> str | None:
    """The backend reported by the kernels of the last call in this thread (None before any)."""
    k = getattr(_used, "kernels", None)
    return None if k is None else k.backend


@entry_point("mojolike.numeric_mode_used")
def numeric_mode_used(**unknown) -> str | None:
    """The numeric mode reported by the kernels of the last call in this thread."""
    k = getattr(_used, "kernels", None)
    return None if k is None else k.numeric_mode
