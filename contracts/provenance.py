"""What a card's meta records about the run that produced it: versions, host, compiler, threads,
and on a real GPU the device; and whether a committed cuda meta counts as a real GPU run.

None of this goes in a card (the card is the same on every machine); it goes in the
`.meta.json` beside it, so a reader can tell which software and hardware gave those bits.

Reproducibility: nothing here changes a result; a probe that fails records None.

>>> v = versions()
>>> sorted(v) == sorted(VERSIONED) and v["python"].count(".") == 2
True
>>> threads("oracle")
'n/a'
"""
from __future__ import annotations

import functools
import json
import platform
import shutil
import subprocess
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

VERSIONED = ("python", "numpy", "numba", "llvmlite", "cffi", "numba-cuda")
# what a cuda meta must carry, non-empty, to count as a run on a real GPU
CUDA_FIELDS = ("device", "compute_capability", "driver", "runtime")


def versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in VERSIONED[1:]:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def _cpuinfo() -> tuple[str | None, str | None]:
    """(model, ISA flags) from /proc/cpuinfo: x86 'model name'/'flags', aarch64 'Features'."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, None
    fields: dict[str, str] = {}
    for ln in text.splitlines():
        key, sep, val = ln.partition(":")
        if sep:
            fields.setdefault(key.strip(), val.strip())
    model = fields.get("model name") or fields.get("Model") or fields.get("Hardware") or \
        (f"CPU implementer {fields['CPU implementer']} part {fields.get('CPU part')}"
         if "CPU implementer" in fields else None)
    return model, fields.get("flags") or fields.get("Features")


@functools.lru_cache(maxsize=1)
def host() -> dict:
    model, flags = _cpuinfo() if sys.platform.startswith("linux") else (None, None)
    from ..core import fpstate
    return {"os": platform.platform(), "machine": platform.machine(),
            "cpu_model": model or platform.processor() or platform.machine(),
            "isa_flags": flags or f"unknown (no /proc/cpuinfo on {sys.platform})",
            "fp_state": f"{fpstate.state().describe()}; checked by: {fpstate.mechanism()}"}


@functools.lru_cache(maxsize=1)
def _probe_cc() -> dict:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    path = shutil.which(cc)
    if path is None:
        return {"compiler": cc, "version": None, "source": f"{cc!r} not found on this host"}
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
        first = (r.stdout or r.stderr).strip().splitlines()
    except (OSError, subprocess.SubprocessError) as e:
        return {"compiler": path, "version": None, "source": f"`{cc} --version` failed: {e}"}
    return {"compiler": path, "version": first[0] if first else None,
            "source": f"`{cc} --version` on this host"}


def compiler(details: dict | None = None) -> dict:
    """The C compiler: read back from a cpu-cffi module's `details` when it carries it, else probed."""
    d = details or {}
    if d.get("compiler"):
        out = {"compiler": d["compiler"], "version": d.get("compiler_version"),
               "source": "read back from the loaded cpu-cffi module"}
    else:
        out = dict(_probe_cc())
        out["source"] += (" (the cpu-cffi module does not report its compiler)" if details
                          else " (not the cpu-cffi run's own record)")
    for key in ("build_command", "flags"):
        if key in d:
            out[key] = d[key]
    return out


def threads(backend: str, k=None):
    """numba's thread count (cpu-numba), OpenMP's max threads (cpu-cffi), else 'n/a'."""
    if backend in ("cpu-numba", "cpu-cffi") and k is not None:
        return k.get_num_threads()
    return "n/a"


def cuda_device() -> dict:
    """Device name, compute capability, driver and runtime versions of the current GPU
    (each None when it cannot be read)."""
    from numba import cuda
    out: dict = dict.fromkeys(CUDA_FIELDS)
    try:
        dev = cuda.get_current_device()
        out["device"] = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        out["compute_capability"] = ".".join(map(str, dev.compute_capability))
    except Exception:  # metadata only: gpu_status reports the missing field
        pass
    try:
        from numba.cuda.cudadrv.driver import driver
        out["driver"] = ".".join(map(str, driver.get_version()))
    except Exception:
        pass
    try:
        out["runtime"] = ".".join(map(str, cuda.runtime.get_version()))
    except Exception:
        pass
    return out


def of_run(backend: str, details: dict, threads_value) -> dict:
    """The provenance fields of one backend's meta."""
    out = {"versions": versions(), "host": dict(host()), "compiler": compiler(
        details if backend == "cpu-cffi" else None), "threads": threads_value}
    if backend == "cuda":
        out["cuda"] = cuda_device()
    return out


def real_gpu_run(meta_path: Path, reference_md5: str | None) -> tuple[bool, str]:
    """(True, why) when the committed cuda meta at `meta_path` is a real GPU run of the card
    whose md5 is `reference_md5`: backend "cuda", every CUDA_FIELDS value present and
    non-empty, and its card_md5 equal to the reference's; else (False, the failed condition)."""
    if not meta_path.exists():
        return False, f"no {meta_path.name} beside the reference cards"
    try:
        m = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        return False, f"{meta_path.name} is not readable JSON ({e})"
    if not isinstance(m, dict) or m.get("backend") != "cuda":
        got = m.get("backend") if isinstance(m, dict) else type(m).__name__
        return False, f"{meta_path.name} has backend {got!r}, not 'cuda'"
    dev = m.get("cuda") if isinstance(m.get("cuda"), dict) else {}
    missing = [f for f in CUDA_FIELDS if dev.get(f) in (None, "")]
    if missing:
        return False, f"{meta_path.name} lacks cuda {', '.join(missing)}"
    if reference_md5 is None:
        return False, "the reference card is missing or invalid, so no run can match it"
    if m.get("card_md5") != reference_md5:
        return False, (f"{meta_path.name} certifies card md5 {m.get('card_md5')}, not the "
                       f"reference card's {reference_md5}")
    return True, (f"{meta_path.name}: {dev['device']} (compute capability {dev['compute_capability']}, "
                  f"driver {dev['driver']}, runtime {dev['runtime']}) gave the reference card")
