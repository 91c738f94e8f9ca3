"""The cpu-cffi build: only the contract's flags reach the compiler, the cache key names the
compiler and the command line, and a module proves its arithmetic before it serves a mode.

Fresh builds run in subprocesses with their own MOJOLIKE_CACHE_DIR, so neither a module
built with bad flags nor a changed floating-point state can reach this process.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from mojolike.core.families import FAMILIES
from mojolike.native.c import build, selftest

import mojolike

TESTS = Path(__file__).resolve().parent
X86 = platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.skipif(not {b.name: b.available for b in mojolike.backends()}["cpu-cffi"],
                                reason="cpu-cffi cannot build here")


def run_python(code: str, tmp_path: Path, **env_extra) -> dict:
    """Run `code` in a fresh interpreter with its own cache folder; it prints one JSON line last."""
    env = {**os.environ, "MOJOLIKE_CACHE_DIR": str(tmp_path / "cache"), **env_extra}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_fresh_build_ignores_cflags_cppflags_ldflags_and_cpath_in_the_environment(tmp_path):
    hostile = tmp_path / "include"
    hostile.mkdir()
    (hostile / "stdint.h").write_text('#error "CPATH reached the compiler"\n')
    (hostile / "evil.h").write_text('#error "CPPFLAGS reached the compiler"\n')
    got = run_python("""
        import json, numpy as np, mojolike
        from mojolike.core import fpstate
        from mojolike.native.c import build
        from mojolike.core.registry import kernels
        k = kernels("test", "fold", "cpu-cffi", "identical")
        y = mojolike.fold(np.full(3000, 1e-40, np.float32), backend="cpu-cffi")
        p = build.plan("identical", k.details["openmp"])
        print(json.dumps({"details": k.details, "expected": p.command,
                          "compile": list(p.compile), "fold": int(np.float32(y).view(np.uint32)),
                          "subnormals_kept": float(2.2250738585072014e-308) * 0.5 != 0.0,
                          "fp_ok": fpstate.state().ok, "fp_state": fpstate.state().describe()}))
    """, tmp_path, CFLAGS="-ffast-math -mfpmath=387",
        CPPFLAGS=f"-ffast-math -include {hostile / 'evil.h'}", LDFLAGS="-ffast-math",
        CPATH=str(hostile), C_INCLUDE_PATH=str(hostile))
    d = got["details"]
    assert d["build_command"] == got["expected"]
    assert got["compile"][1:1 + len(build.FLAGS["identical"])] == build.FLAGS["identical"]
    assert "387" not in d["build_command"] and "-ffast-math" not in d["build_command"]
    assert d["selftest"] == "passed"
    assert got["subnormals_kept"], "the process was switched to flush-to-zero"
    assert got["fp_ok"], got["fp_state"]
    assert got["fold"] == 0x2CC2B17


BAD_FLAGS = [
    pytest.param(["-ffp-contract=fast", "-mfma"] if X86 else ["-ffp-contract=fast"], "contraction",
                 id="fma-contraction"),
    pytest.param(["-ffast-math"], "serial sum", id="fast-math"),
    pytest.param(["-mfpmath=387"], "excess range", id="x87",
                 marks=pytest.mark.skipif(not X86, reason="x87 is an x86 unit")),
]


@pytest.mark.parametrize("flags, check", BAD_FLAGS)
def test_a_module_built_with_flags_that_change_bits_is_refused_by_its_self_test(tmp_path, flags,
                                                                               check):
    if "-mfma" in flags and "fma" not in Path("/proc/cpuinfo").read_text().split():
        pytest.skip("this CPU has no FMA unit to run an -mfma build on")
    got = run_python(f"""
        import json, mojolike
        from mojolike.native.c import build
        build.FAMILIES = ("fold",)  # the self-test needs fold.c only: a quick build
        build.FLAGS["identical"] = build.FLAGS["identical"] + {flags!r}
        try:
            build.load("identical")
            print(json.dumps({{"refused": None}}))
        except mojolike.BackendUnavailable as e:
            print(json.dumps({{"refused": str(e), "option": e.option}}))
    """, tmp_path)
    assert got["refused"] is not None, f"a module built with {flags} was accepted"
    assert got["option"] == "numeric_mode"
    assert "self-test" in got["refused"] and f"{check} on thread" in got["refused"]
    assert " ".join(flags) in got["refused"]  # the message shows the build command


def test_a_module_linked_with_fast_math_is_refused_by_the_loader(tmp_path):
    got = run_python("""
        import json, mojolike
        from mojolike.native.c import build
        build.FAMILIES = ("fold",)
        commands = build.commands
        def with_fast_math_link(mode, cc, openmp):
            c, link = commands(mode, cc, openmp)
            return c, [link[0], "-ffast-math", *link[1:]]  # gcc then links crtfastmath
        build.commands = with_fast_math_link
        try:
            build.load("identical")
            print(json.dumps({"refused": None}))
        except mojolike.BackendUnavailable as e:
            print(json.dumps({"refused": str(e)}))
    """, tmp_path)
    assert got["refused"] is not None
    assert "its build used -ffast-math, which the contract does not allow" in got["refused"]


@pytest.mark.skipif(not X86 and platform.machine().lower() not in ("aarch64", "arm64"),
                    reason="the fpenv helper sets MXCSR or FPCR")
def test_a_worker_thread_with_flush_to_zero_fails_the_self_test(tmp_path):
    build.load("identical")  # the module, warm in the cache the subprocess shares
    got = run_python(f"""
        import json, sys
        sys.path.insert(0, {str(TESTS)!r})
        import numpy as np, fpenv, mojolike
        from mojolike.native.c import build
        p = build._cached_plan("identical")
        m = build._import(p.name, build._path(p.name))
        with fpenv.changed(ftz=True, daz=True):  # OpenMP's worker copies this state when it starts
            m.lib.mj_set_num_threads(2)
            x, out = np.ones(1 << 16, np.float32), np.empty(64, np.float32)  # a parallel fold
            m.lib.mj_fold_partials(m.ffi.from_buffer("float[]", x), x.size,
                                   m.ffi.from_buffer("float[]", out))
        try:  # the loading thread is right again; the worker is not
            build.load("identical")
            print(json.dumps({{"refused": None}}))
        except mojolike.BackendUnavailable as e:
            print(json.dumps({{"refused": str(e)}}))
    """, tmp_path, MOJOLIKE_CACHE_DIR=str(build.cache_dir().parent))
    assert got["refused"] is not None
    assert "flush-to-zero on thread 1:" in got["refused"]
    assert "on thread 0" not in got["refused"] and "threads 0" not in got["refused"]


def test_the_cache_key_changes_with_the_compiler_identity_and_the_command_line():
    cc = build.Compiler("/usr/bin/cc", "/usr/bin/x86_64-linux-gnu-gcc-12",
                        "cc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation",
                        "x86_64-linux-gnu")
    c, link = build.commands("identical", cc, True)
    key = build.cache_key("identical", cc, c, link)
    assert build.cache_key("identical", cc, list(c), list(link)) == key
    others = [
        ("identical", replace(cc, version=cc.version.replace("12.2.0", "12.3.0")), c, link),
        ("identical", replace(cc, real_path="/usr/bin/clang-16"), c, link),
        ("identical", replace(cc, path="/opt/bin/cc"), c, link),
        ("identical", replace(cc, target="aarch64-linux-gnu"), c, link),
        ("identical", cc, [*c[:-4], "-mfma", *c[-4:]], link),
        ("identical", cc, c, [*link[:1], "-ffast-math", *link[1:]]),
        ("identical", cc, *build.commands("identical", cc, False)),
        ("deterministic", cc, c, link),
    ]
    keys = {build.cache_key(*args) for args in others}
    assert key not in keys and len(keys) == len(others)


def test_the_kernels_details_carry_the_build_command_read_back_from_the_module():
    module = build.load("identical")
    text = lambda f: module.ffi.string(f()).decode()
    compile_ = shlex.split(text(module.lib.mj_compile_command))
    assert compile_[1:1 + len(build.FLAGS["identical"])] == build.FLAGS["identical"]
    for family in FAMILIES:
        d = mojolike.core.registry.kernels("test", family, "cpu-cffi", "identical").details
        assert d["build_command"] == text(module.lib.mj_build_command)
        assert d["build_command"].startswith(shlex.join(compile_) + " && ")
        assert d["compiler"] == compile_[0] == text(module.lib.mj_build_compiler)
        assert d["compiler_version"] == text(module.lib.mj_build_compiler_version) != ""
        assert d["selftest"] == "passed"


def test_the_loader_refuses_a_module_whose_build_added_a_flag_after_the_contract_flags():
    flags = " ".join(build.FLAGS["identical"])

    class Lib:
        mj_build_mode = staticmethod(lambda: b"identical")
        mj_build_flags = staticmethod(lambda: flags.encode())
        mj_compile_command = staticmethod(
            lambda: f"/usr/bin/cc {flags} -mfpmath=387 -fPIC -c mojolike_c.c -o mojolike_c.o".encode())
        mj_link_command = staticmethod(lambda: b"/usr/bin/cc -shared mojolike_c.o -o mojolike_c.so")

    class Module:
        ffi, lib, __file__ = type("FFI", (), {"string": staticmethod(lambda b: b)}), Lib, "fake.so"

    with pytest.raises(mojolike.BackendUnavailable, match="its build used -mfpmath=387"):
        build.check_build(Module(), "identical")


def test_deterministic_mode_allows_contraction_in_the_self_test_and_identical_mode_does_not(
        monkeypatch):
    module = build.load("identical")
    fused = [selftest.Failure(0, "contraction", 0x33800000, 0)]
    monkeypatch.setattr(selftest, "failures", lambda m: fused)
    assert "contraction on thread 0" in selftest.verify(module, "deterministic")
    with pytest.raises(mojolike.BackendUnavailable, match="contraction on thread 0: got 0x33800000"):
        selftest.verify(module, "identical")
