"""Build and load the C kernels: cffi writes the C source, the contract's flags compile it.

Supported: Linux and macOS with gcc or clang (Python's C compiler, `sysconfig`'s CC,
else `cc`, found on PATH). Elsewhere, or without such a compiler, the loader
raises BackendUnavailable saying what is missing.

The build. cffi emits the C source (`ffi.emit_c_code`) and the compiler runs twice
in a temporary folder, on relative file names, in a minimal environment (PATH,
TMPDIR, LANG=C), so CFLAGS, CPPFLAGS, LDFLAGS, CPATH, C_INCLUDE_PATH,
GCC_EXEC_PREFIX, COMPILER_PATH and Python's own build flags never reach it:

    <cc> <FLAGS[mode]> -fPIC [-fopenmp] -I<python include> -c mojolike_c.c -o mojolike_c.o
    <cc> -shared [-fopenmp] [-undefined dynamic_lookup] mojolike_c.o -o mojolike_c.so

The link line carries no floating-point flag: with -ffast-math there (mode "fast")
gcc would link crtfastmath, which switches the whole process to flush-to-zero when
the module loads. -fopenmp is added when a probe program links with it.

The cache. The module lives in a per-user folder under a name hashed from
everything that can change its code (`cache_key`): the mode, the compiler's path,
real path, `--version` and `-dumpmachine` outputs, both command lines, the C
sources and this module's preamble, the cffi version, EXT_SUFFIX and the platform.
A warm cache compiles nothing; it runs `cc --version` and `cc -dumpmachine` once
per process.

The checks. Both command lines, the mode, the flags and the compiler are string
literals in the module, written before compiling. The loader (`check_build`)
refuses a module whose compile command does not carry exactly FLAGS[mode], in
order, right after the compiler, or that used any option an extension does not
need. In identical mode `mojolike.core.fpstate.check` then refuses a process whose
floating-point state is wrong, and before the module serves any mode its
known-answer self-test runs on every OpenMP thread (native/c/selftest.py).

Threads. The kernels' loops run on the calling thread below MJ_PARALLEL_MIN
elements (native/c/fold.c), so a small step wakes no thread pool. While the module
loads (import and self-test), OMP_WAIT_POLICY=PASSIVE is set in the environment
unless the user set that variable; it is removed right after. An OpenMP runtime
that starts with this module reads it once and then sleeps between parallel
regions instead of spinning: spinning workers of two runtimes (numba's and this
module's, when they link different copies) hold each other's regions off the
cores for milliseconds. A runtime already running in the process is not
affected; one that starts here and that numba or torch later share is passive
for them too.

Reproducibility: FLAGS is the contract; the same sources, compiler and commands
give the same module name, and a module reports the commands that built it.

>>> FLAGS["identical"]
['-O3', '-fno-fast-math', '-fno-math-errno', '-ffp-contract=off']
>>> describe(load("identical"))["build_command"].split()[1:5] == FLAGS["identical"]
True

Cache folder: MOJOLIKE_CACHE_DIR, else $XDG_CACHE_HOME/mojolike, else ~/.cache/mojolike.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import io
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ...core.families import FAMILIES  # the C sources are concatenated in this order
from ...core.refusals import BackendUnavailable

HERE = Path(__file__).resolve().parent
SELFTEST = "selftest"  # appended after the families: it calls fold.c's kernels

# The contract. Order matters: later flags win, and -ffp-contract=off must follow -O3.
FLAGS = {
    "identical": ["-O3", "-fno-fast-math", "-fno-math-errno", "-ffp-contract=off"],
    "deterministic": ["-O3", "-fno-fast-math", "-fno-math-errno", "-ffp-contract=fast"],
    "fast": ["-O3", "-ffast-math"],
}

ENTRY = "mojolike cpu-cffi loader"
SOURCE, OBJECT, OUTPUT = "mojolike_c.c", "mojolike_c.o", "mojolike_c.so"
# Besides FLAGS[mode] and -I<dir>, the only words a build command may hold.
_EXTENSION_WORDS = {"-fPIC", "-fopenmp", "-c", "-o", "-shared", "-undefined", "dynamic_lookup",
                    SOURCE, OBJECT, OUTPUT}
_EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"

_PREAMBLE = """\
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
static const char mj_mode_str[] = {mode};
static const char mj_flags_str[] = {flags};
static const char mj_compile_str[] = {compile};
static const char mj_link_str[] = {link};
static const char mj_command_str[] = {command};
static const char mj_compiler_str[] = {compiler};
static const char mj_compiler_version_str[] = {version};
const char *mj_build_mode(void) {{ return mj_mode_str; }}
const char *mj_build_flags(void) {{ return mj_flags_str; }}
const char *mj_compile_command(void) {{ return mj_compile_str; }}
const char *mj_link_command(void) {{ return mj_link_str; }}
const char *mj_build_command(void) {{ return mj_command_str; }}
const char *mj_build_compiler(void) {{ return mj_compiler_str; }}
const char *mj_build_compiler_version(void) {{ return mj_compiler_version_str; }}
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
const char *mj_compile_command(void);
const char *mj_link_command(void);
const char *mj_build_command(void);
const char *mj_build_compiler(void);
const char *mj_build_compiler_version(void);
int mj_openmp(void);
void mj_set_num_threads(int n);
int mj_get_max_threads(void);
"""


@dataclass(frozen=True)
class Compiler:
    """The C compiler a build runs: `path` as found on PATH (what runs), and what identifies it."""

    path: str
    real_path: str
    version: str  # the whole `--version` output
    target: str  # `-dumpmachine`

    @property
    def version_line(self) -> str:
        return self.version.splitlines()[0] if self.version else ""


@dataclass(frozen=True)
class Plan:
    """One build: the two command lines and the module name they hash to."""

    mode: str
    compiler: Compiler
    openmp: bool
    compile: tuple[str, ...]
    link: tuple[str, ...]
    name: str

    @property
    def command(self) -> str:
        return f"{shlex.join(self.compile)} && {shlex.join(self.link)}"


def cache_dir() -> Path:
    root = os.environ.get("MOJOLIKE_CACHE_DIR")
    if root:
        return Path(root) / "cffi"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "mojolike" / "cffi"


def _sources() -> tuple[str, str]:
    names = (*FAMILIES, SELFTEST)
    c = "".join((HERE / f"{f}.c").read_text() for f in names)
    h = "".join((HERE / f"{f}.h").read_text() for f in names)
    return c, h


def _env(tmp: Path | str | None) -> dict[str, str]:
    """The compiler's whole environment: nothing from the caller's but PATH."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C", "LC_ALL": "C"}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return env


def _unavailable(reason: str) -> BackendUnavailable:
    return BackendUnavailable(ENTRY, "backend", reason, value="cpu-cffi")


@functools.lru_cache(maxsize=None)
def compiler() -> Compiler:
    """The compiler this process builds with (asked once per process)."""
    if not (sys.platform.startswith("linux") or sys.platform == "darwin"):
        raise _unavailable(f"builds its C module on Linux and macOS (with gcc or clang) only; "
                           f"this platform is {sys.platform}")
    name = (sysconfig.get_config_var("CC") or "cc").split()[0]
    path = shutil.which(name)
    if path is None:
        raise _unavailable(f"needs gcc or clang to build its C module; {name!r} (Python's C "
                           f"compiler) is not on PATH")

    def ask(option: str) -> str:
        try:
            r = subprocess.run([path, option], capture_output=True, text=True, env=_env(None),
                               timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise _unavailable(f"could not run `{path} {option}`: {e}") from None
        if r.returncode != 0:
            raise _unavailable(f"`{path} {option}` exited with {r.returncode}: {r.stderr.strip()[-300:]}")
        return r.stdout.strip()

    version = ask("--version")
    if "clang" not in version and "Free Software Foundation" not in version:
        raise _unavailable(f"builds its C module with gcc or clang only; {path} says "
                           f"{version.splitlines()[0] if version else '(nothing)'!r}")
    return Compiler(path, os.path.realpath(path), version, ask("-dumpmachine"))


def _includes() -> list[str]:
    paths = sysconfig.get_paths()
    dirs = [paths["include"]]
    if paths.get("platinclude") and paths["platinclude"] != paths["include"]:
        dirs.append(paths["platinclude"])
    return [f"-I{d}" for d in dirs]


def commands(mode: str, cc: Compiler, openmp: bool) -> tuple[list[str], list[str]]:
    """The compile and link command lines of a build (run in the build folder)."""
    omp = ["-fopenmp"] if openmp else []
    compile_ = [cc.path, *FLAGS[mode], "-fPIC", *omp, *_includes(), "-c", SOURCE, "-o", OBJECT]
    darwin = ["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []
    link = [cc.path, "-shared", *omp, *darwin, OBJECT, "-o", OUTPUT]
    return compile_, link


def cache_key(mode: str, cc: Compiler, compile_: list[str], link: list[str]) -> str:
    """The hash a module's name carries: every input that can change its code."""
    import cffi
    c, h = _sources()
    parts = [mode, cc.path, cc.real_path, cc.version, cc.target, shlex.join(compile_),
             shlex.join(link), c, h, _PREAMBLE, _CDEF_INFO, cffi.__version__, _EXT_SUFFIX,
             sys.platform, platform.machine()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def plan(mode: str, openmp: bool, cc: Compiler | None = None) -> Plan:
    cc = cc or compiler()
    compile_, link = commands(mode, cc, openmp)
    name = f"_mojolike_c_{mode}_{cache_key(mode, cc, compile_, link)[:16]}"
    return Plan(mode, cc, openmp, tuple(compile_), tuple(link), name)


def _path(name: str) -> Path:
    return cache_dir() / (name + _EXT_SUFFIX)


def _cached_plan(mode: str) -> Plan | None:
    """The plan of a module already in the cache (an OpenMP build preferred)."""
    return next((p for p in (plan(mode, True), plan(mode, False)) if _path(p.name).exists()), None)


def cached_build_exists(mode: str = "identical") -> bool:
    try:
        return _cached_plan(mode) is not None
    except BackendUnavailable:
        return False


def _run(argv, tmp: Path, what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), cwd=tmp, env=_env(tmp), capture_output=True, text=True,
                              timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise _unavailable(f"could not run the {what} `{shlex.join(argv)}`: {e}") from None


def _openmp_works(cc: Compiler) -> bool:
    with tempfile.TemporaryDirectory(prefix="mojolike-omp-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "probe.c").write_text("#include <omp.h>\n"
                                     "int main(void){return omp_get_max_threads() < 1;}\n")
        r = _run([cc.path, "-fopenmp", "probe.c", "-o", "probe"], tmp, "OpenMP probe")
        return r.returncode == 0


def _c_string(s: str) -> str:
    """A C string literal holding `s` (octal escapes for anything but plain ASCII)."""
    out = []
    for b in s.encode():
        ch = chr(b)
        out.append("\\" + ch if ch in '\\"' else ch if 32 <= b < 127 and ch != "?" else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _preamble(p: Plan) -> str:
    return _PREAMBLE.format(
        mode=_c_string(p.mode), flags=_c_string(" ".join(FLAGS[p.mode])),
        compile=_c_string(shlex.join(p.compile)), link=_c_string(shlex.join(p.link)),
        command=_c_string(p.command), compiler=_c_string(p.compiler.path),
        version=_c_string(p.compiler.version_line))


def _build(p: Plan) -> Path:
    import cffi
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix="build-") as tmpdir:
        tmp = Path(tmpdir)
        c, h = _sources()
        ffi = cffi.FFI()
        ffi.cdef(_CDEF_INFO + h)
        ffi.set_source(p.name, _preamble(p) + c)
        with contextlib.redirect_stdout(io.StringIO()):  # cffi says "generating <file>"
            ffi.emit_c_code(str(tmp / SOURCE))
        for argv, what in ((p.compile, "compile command"), (p.link, "link command")):
            r = _run(argv, tmp, what)
            if r.returncode != 0:
                raise _unavailable(f"could not build its C module: `{shlex.join(argv)}` exited "
                                   f"with {r.returncode}: {r.stderr.strip()[-600:]}")
        final = _path(p.name)
        os.replace(tmp / OUTPUT, final)  # atomic: a concurrent loader sees the old state or the whole file
    return final


def _import(name: str, path: Path):
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _text(module, fn) -> str:
    return module.ffi.string(fn()).decode()


def check_build(module, mode: str, expected: Plan | None = None) -> None:
    """Refuse a module built for another mode, or with other options than FLAGS[mode] and what
    an extension needs; with `expected`, also one whose commands differ from that plan's."""
    lib, want = module.lib, FLAGS[mode]
    got_mode = _text(module, lib.mj_build_mode)
    compile_ = shlex.split(_text(module, lib.mj_compile_command))
    link = shlex.split(_text(module, lib.mj_link_command))
    others = [w for w in compile_[1 + len(want):] + link[1:]
              if w not in _EXTENSION_WORDS and not w.startswith("-I")]
    if got_mode != mode:
        problem = f"it was built for mode {got_mode!r}, not {mode!r} (which needs {' '.join(want)})"
    elif compile_[1:1 + len(want)] != want:
        problem = f"its compile command does not carry {' '.join(want)} right after the compiler"
    elif others:
        problem = f"its build used {' '.join(others)}, which the contract does not allow"
    elif _text(module, lib.mj_build_flags) != " ".join(want):
        problem = f"it reports the flags {_text(module, lib.mj_build_flags)!r}"
    elif expected is not None and (tuple(compile_), tuple(link)) != (expected.compile, expected.link):
        problem = f"its build commands are not this compiler's `{expected.command}`"
    else:
        return
    raise BackendUnavailable(
        ENTRY, "numeric_mode",
        f"refuses the C module {getattr(module, '__file__', module)}: {problem}; it was built with "
        f"`{shlex.join(compile_)} && {shlex.join(link)}`. Delete {cache_dir()} to rebuild it",
        value=mode)


def describe(module) -> dict:
    """What the module says about its build, for the kernels' details (and the certify meta)."""
    lib = module.lib
    return {"mode": _text(module, lib.mj_build_mode), "flags": _text(module, lib.mj_build_flags),
            "build_command": _text(module, lib.mj_build_command),
            "compiler": _text(module, lib.mj_build_compiler),
            "compiler_version": _text(module, lib.mj_build_compiler_version),
            "openmp": bool(lib.mj_openmp()), "module": module.__file__,
            "selftest": _selftest_outcome.get(module.__file__, "not run")}


_loaded: dict[str, object] = {}
_selftest_outcome: dict[str, str] = {}
_lock = threading.Lock()


def load(mode: str):
    """The cffi module for `mode` (`.ffi`, `.lib`), built on first use, checked and self-tested
    once per process."""
    with _lock:
        module = _loaded.get(mode)
        if module is None:
            module = _loaded[mode] = _load(mode)
    return module


def _load(mode: str):
    from . import selftest
    p = _cached_plan(mode)
    if p is None:
        cc = compiler()
        p = plan(mode, _openmp_works(cc), cc)
        path = _build(p)
    else:
        path = _path(p.name)
    with passive_wait():  # the self-test's parallel region starts a lazily initialized runtime
        module = _import(p.name, path)
        check_build(module, mode, p)
        if mode == "identical":
            from ...core import fpstate  # a library built with -ffast-math may have set FTZ on load
            fpstate.check(ENTRY)
        _selftest_outcome[module.__file__] = selftest.verify(module, mode)
    return module


@contextlib.contextmanager
def passive_wait():
    """OMP_WAIT_POLICY=PASSIVE while the module loads, unless the user set the variable: an
    OpenMP runtime that starts now reads it once and then sleeps between parallel regions
    instead of spinning against another runtime's threads (numba's, whose pool
    native/threads.py starts through this too). A runtime already running is not
    affected."""
    if "OMP_WAIT_POLICY" in os.environ:
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)
