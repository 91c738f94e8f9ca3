"""A small C helper that sets the calling thread's floating-point state, for tests only.

It reads and writes MXCSR (x86-64) or FPCR (aarch64) directly, the way a library
built with -ffast-math does when it loads, so tests can prove that identical mode
refuses such a state. Use `changed(...)` as a context manager: it restores the
saved state on exit, whatever happens inside.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import platform
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

SOURCE = r"""
#include <fenv.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
uint64_t fp_get(void) { return _mm_getcsr(); }
void fp_set(uint64_t v) { _mm_setcsr((unsigned)v); }
uint64_t fp_ftz_bit(void) { return 0x8000; }
uint64_t fp_daz_bit(void) { return 0x40; }
#elif defined(__aarch64__)
uint64_t fp_get(void) { uint64_t v; __asm__ volatile("mrs %0, fpcr" : "=r"(v)); return v; }
void fp_set(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v)); }
uint64_t fp_ftz_bit(void) { return 1u << 24; }  /* FZ flushes inputs and outputs */
uint64_t fp_daz_bit(void) { return 1u << 24; }
#else
#error "fpenv helper: only x86-64 and aarch64"
#endif
int fp_round(int mode) {
    static const int modes[4] = {FE_TONEAREST, FE_TOWARDZERO, FE_DOWNWARD, FE_UPWARD};
    return fesetround(modes[mode & 3]);
}
"""
ROUNDING = {"nearest": 0, "toward zero": 1, "downward": 2, "upward": 3}
_lib = None


def lib():
    """The compiled helper (built once per test session into a temporary folder)."""
    global _lib
    if _lib is None:
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(cc) is None:
            raise RuntimeError(f"the fpenv test helper needs a C compiler ({cc!r} not found)")
        tmp = Path(tempfile.mkdtemp(prefix="mojolike-fpenv-"))
        name = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
        src, so = tmp / f"fpenv_{name}.c", tmp / f"fpenv_{name}.so"
        src.write_text(SOURCE)
        subprocess.run([cc, "-O1", "-shared", "-fPIC", str(src), "-o", str(so)], check=True,
                       capture_output=True)
        _lib = ctypes.CDLL(str(so))
        _lib.fp_get.restype = ctypes.c_uint64
        _lib.fp_set.argtypes = [ctypes.c_uint64]
        _lib.fp_ftz_bit.restype = ctypes.c_uint64
        _lib.fp_daz_bit.restype = ctypes.c_uint64
        _lib.fp_round.argtypes = [ctypes.c_int]
    return _lib


def supported() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64")


@contextlib.contextmanager
def changed(*, ftz: bool = False, daz: bool = False, rounding: str = "nearest"):
    """Inside the block the calling thread has the requested state; the old one after."""
    h = lib()
    saved = h.fp_get()
    try:
        v = saved
        if ftz:
            v |= h.fp_ftz_bit()
        if daz:
            v |= h.fp_daz_bit()
        h.fp_set(v)
        if h.fp_round(ROUNDING[rounding]) != 0:
            raise RuntimeError(f"fesetround refused {rounding!r}")
        yield
    finally:
        h.fp_set(saved)
