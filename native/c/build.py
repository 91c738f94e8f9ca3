"""Build and load the C kernels through cffi, once per (mode, sources, flags).

The compiled module lives in a per-user cache keyed by the hash of the sources,
the flags and the Python ABI; when the cache is warm nothing is compiled. The
module reports the mode and flags it was built with, and the loader refuses a
module whose report does not match the request.

Cache folder: MOJOLIKE_CACHE_DIR, else $XDG_CACHE_HOME/mojolike, else ~/.cache/mojolike.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from ...refusals import BackendUnavailable

HERE = Path(__file__).resolve().parent
FAMILIES = ("fold", "optim", "crmath", "loss", "schedule", "rng")

# Order matters: later flags win, and -ffp-contract=off must follow -O3.
FLAGS = {
    "identical": ["-O3", "-fno-fast-math", "-fno-math-errno", "-ffp-contract=off"],
    "deterministic": ["-O3", "-fno-fast-math", "-fno-math-errno", "-ffp-contract=fast"],
    "fast": ["-O3", "-ffast-math"],
}

_PREAMBLE = """\
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
static const char mj_mode_str[] = "{mode}";
static const char mj_flags_str[] = "{flags}";
const char *mj_build_mode(void) {{ return mj_mode_str; }}
const char *mj_build_flags(void) {{ return mj_flags_str; }}
int mj_openmp(void) {{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}}
void mj_set_num_threads(int n) {{
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}}
int mj_get_max_threads(void) {{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}}
"""

_CDEF_INFO = """\
const char *mj_build_mode(void);
const char *mj_build_flags(void);
int mj_openmp(void);
void mj_set_num_threads(int n);
int mj_get_max_threads(void);
"""


def cache_dir() -> Path:
    root = os.environ.get("MOJOLIKE_CACHE_DIR")
    if root:
        return Path(root) / "cffi"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "mojolike" / "cffi"


def _sources() -> tuple[str, str]:
    c = "".join((HERE / f"{f}.c").read_text() for f in FAMILIES)
    h = "".join((HERE / f"{f}.h").read_text() for f in FAMILIES)
    return c, h


def module_name(mode: str) -> str:
    import cffi
    c, h = _sources()
    key = "\0".join([mode, " ".join(FLAGS[mode]), c, h, cffi.__version__,
                     sysconfig.get_config_var("EXT_SUFFIX") or "", sys.platform])
    return f"_mojolike_c_{mode}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _cached(name: str) -> Path | None:
    path = cache_dir() / (name + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    return path if path.exists() else None


def cached_build_exists(mode: str = "identical") -> bool:
    return _cached(module_name(mode)) is not None


def _openmp_works(tmp: Path) -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    probe = tmp / "omp_probe.c"
    probe.write_text("#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
    try:
        r = subprocess.run(cc + ["-fopenmp", str(probe), "-o", str(tmp / "omp_probe")],
                           capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _build(mode: str, name: str) -> Path:
    import cffi
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix="build-") as tmpdir:
        tmp = Path(tmpdir)
        omp = ["-fopenmp"] if _openmp_works(tmp) else []
        flags = FLAGS[mode] + omp
        c, h = _sources()
        ffi = cffi.FFI()
        ffi.cdef(_CDEF_INFO + h)
        ffi.set_source(name, _PREAMBLE.format(mode=mode, flags=" ".join(flags)) + c,
                       extra_compile_args=flags, extra_link_args=omp)
        built = Path(ffi.compile(tmpdir=str(tmp)))
        final = dest / built.name
        os.replace(built, final)  # atomic: a concurrent loader sees the old state or the whole file
    return final


def _import(name: str, path: Path):
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def check_build(module, mode: str) -> None:
    """Refuse a module whose reported mode or flags differ from what `mode` requires."""
    ffi, lib = module.ffi, module.lib
    got_mode = ffi.string(lib.mj_build_mode()).decode()
    got_flags = ffi.string(lib.mj_build_flags()).decode().split()
    want = FLAGS[mode]
    if got_mode != mode or got_flags[:len(want)] != want:
        raise BackendUnavailable(
            "mojolike cpu-cffi loader", f"numeric_mode={mode!r}",
            f"found a C module built for mode {got_mode!r} with flags {' '.join(got_flags)!r}, "
            f"not {mode!r} with {' '.join(want)!r}; delete {cache_dir()} to rebuild it")


def load(mode: str):
    """The cffi module for `mode`, built on first use; has `.ffi` and `.lib`."""
    name = module_name(mode)
    path = _cached(name)
    if path is None:
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(cc) is None:
            raise BackendUnavailable("mojolike cpu-cffi loader", "backend='cpu-cffi'",
                                     f"needs a C compiler ({cc!r} not found) for its first build")
        path = _build(mode, name)
    module = _import(name, path)
    check_build(module, mode)
    return module
