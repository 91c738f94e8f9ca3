"""Every hot numba kernel is packed float arithmetic in its loops on every x86-64 target LLVM may pick.

A numba module lists its hot kernels in `HOT_KERNELS`: label -> dispatcher, whose
loops must hold some packed float arithmetic, or label -> (dispatcher, mnemonics),
whose loops must hold each of those packed operations (SSE names, e.g. ("mulps",
"addps")). This test finds every module of native/ that has one, so a new family
adds itself with that one line. `HOT_KERNELS_AVX2` lists what is packed only where
the target has AVX2 (loops that look up a table per element, which LLVM
vectorizes with gathers).

No hot kernel may hold a fused multiply-add (an x86 vfmadd/vfmsub/vfnmadd/vfnmsub, or a
call of libm's fmaf) anywhere in its code, except the kernels named in FMA_ALLOWED: a
module lists those in `FMA_KERNELS` (the mixed family's FMA GEMM, which runs only where
every product is exact, contracts/mixed.md clause 10). On a target with FMA each of them
must hold packed vfmadd in its loops; on one without, the module's `HAS_FMA` must be False
(LLVM would call fmaf, so the module never runs them there). They are compiled without
parallel=True (their serial twin: the same statements, a quarter of the compile time).
For each target one subprocess compiles them all for NUMBA_CPU_NAME=<target> with
NUMBA_CPU_FEATURES="" (the target's own features, not the host's) and counts the
packed instructions inside loops (between a label and a backward jump to it) in
`inspect_asm`. Compilation only: nothing runs, so any host can check any target.

The subprocess imports the modules with `numba.njit(signature)` made lazy (nothing
compiles at import) and compiles each hot kernel afresh, without the cache, for the
signatures its decorator named, so the inspected code is always the current source's
and a target costs only its hot kernels' compilation.

Run one target by hand: python tests/test_vectorized.py haswell
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mojolike.core.families import FAMILIES

NATIVE = Path(__file__).resolve().parent.parent / "native"
# target -> (mnemonic prefix, register classes a packed operation may use, has AVX2)
TARGETS = {
    "generic": ("", ("xmm",), False),  # baseline x86-64: SSE2, four xmm per 16-lane vector
    "haswell": ("v", ("ymm",), True),
    "znver3": ("v", ("ymm",), True),
    "skylake-avx512": ("v", ("zmm", "ymm"), True),
}
NO_FMA_TARGETS = {"generic"}  # the others have FMA3


# the only kernels whose code may hold a fused multiply-add, by label
FMA_ALLOWED = {"mixed_gemm._gemm_nt_fma", "gemm_outer._gemm_outer_fma"}
FUSED = re.compile(r"vf(n?)m(add|sub)\w*")  # x86 FMA3/FMA4 mnemonics
FMAF = re.compile(r"\bfmaf\b")  # libm's fmaf, called or its address loaded (movabsq $fmaf)


def hot_modules() -> list[str]:
    """The native modules whose source defines HOT_KERNELS or FMA_KERNELS (read as text: no
    import here)."""
    return sorted(p.stem for p in NATIVE.glob("*.py")
                  if re.search(r"^(HOT|FMA)_KERNELS\b", p.read_text(), re.MULTILINE))


def fused_ops(asm: str, loops_only: bool = False) -> dict[str, int]:
    """Counts of 'mnemonic:register' for fused multiply-adds (and 'fmaf' for each line naming
    libm's fmaf), in the whole text or inside loops only."""
    lines = asm.splitlines()
    inside = _loop_lines(lines) if loops_only else range(len(lines))
    counts = collections.Counter()
    for i in inside:
        words = lines[i].split()
        if FMAF.search(lines[i]):
            counts["fmaf"] += 1
        if not words or not FUSED.fullmatch(words[0]):
            continue
        reg = next((r for r in ("zmm", "ymm", "xmm") if r in lines[i]), "other")
        counts[f"{words[0]}:{reg}"] += 1
    return dict(counts)


def _loop_lines(lines: list[str]) -> set[int]:
    """The lines between a label and a backward jump to it."""
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\.?\w+):", line))}
    inside = set()
    for i, line in enumerate(lines):
        words = line.split()
        if len(words) > 1 and words[0].startswith("j") and labels.get(words[1], i) < i:
            inside.update(range(labels[words[1]], i + 1))
    return inside


def packed_in_loops(asm: str) -> dict[str, int]:
    """Counts of 'mnemonic:register' for packed single/double arithmetic inside loops."""
    lines = asm.splitlines()
    counts = collections.Counter()
    for i in _loop_lines(lines):
        words = lines[i].split()
        if words and re.fullmatch(r"v?(add|sub|mul|div|sqrt|max|min)p[sd]", words[0]):
            reg = next((r for r in ("zmm", "ymm", "xmm") if r in lines[i]), "other")
            counts[f"{words[0]}:{reg}"] += 1
    return dict(counts)


def _compile_lazily() -> None:
    """Make `numba.njit(signature)` record its signatures instead of compiling at import, so
    that importing a module compiles nothing: the target's process then compiles only the hot
    kernels (each for its recorded signatures), not the whole library for every target."""
    import numba
    eager = numba.njit

    def njit(*args, **options):
        if args and not callable(args[0]):  # njit(signature or list of them, **options)
            sigs = args[0] if isinstance(args[0], list) else [args[0]]

            def wrap(fn):
                d = eager(**options)(fn)
                d.recorded_signatures = sigs
                return d
            return wrap
        return eager(*args, **options)
    numba.njit = njit


def compile_and_count(modules: list[str]) -> dict:
    """In the target's process: {"hot": {module.kernel: {"want": [...], "packed": counts,
    "fused": counts}}, "fma": {module.kernel: {"has_fma": ..., "fused": loop counts}}}."""
    import importlib

    _compile_lazily()
    from numba import njit
    def entry(value):  # (dispatcher, mnemonics); None: any packed arithmetic
        return value if isinstance(value, tuple) else (value, None)

    out, fma = {}, {}
    for name in modules:
        mod = importlib.import_module(f"mojolike.native.{name}")
        for label, d in getattr(mod, "FMA_KERNELS", {}).items():
            options = {k: v for k, v in d.targetoptions.items()
                       if k not in ("cache", "nopython", "parallel")}
            fresh = njit(**options)(d.py_func)
            counts = collections.Counter()
            for sig in getattr(d, "recorded_signatures", None) or d.signatures:
                fresh.compile(sig)
                counts.update(fused_ops(fresh.inspect_asm(fresh.signatures[-1]), loops_only=True))
            fma[label] = {"has_fma": bool(mod.HAS_FMA), "fused": dict(counts)}
        hot = {k: entry(v) for k, v in getattr(mod, "HOT_KERNELS", {}).items()}
        avx2 = {k: entry(v) for k, v in getattr(mod, "HOT_KERNELS_AVX2", {}).items()}
        for label, (d, _) in {**hot, **avx2}.items():
            options = {k: v for k, v in d.targetoptions.items() if k not in ("cache", "nopython")}
            fresh = njit(**options)(d.py_func)  # compiled anew: inspect_asm refuses cached code
            counts, fused = collections.Counter(), collections.Counter()
            for sig in getattr(d, "recorded_signatures", None) or d.signatures:
                fresh.compile(sig)
                asm = fresh.inspect_asm(fresh.signatures[-1])
                counts.update(packed_in_loops(asm))
                fused.update(fused_ops(asm))
            out[label] = {"want": hot[label][1] if label in hot else [],
                          "want_avx2": avx2[label][1] if label in avx2 else [],
                          "packed": dict(counts), "fused": dict(fused)}
    return {"hot": out, "fma": fma}


def start_target(target: str, cache: Path) -> subprocess.Popen:
    env = dict(os.environ, NUMBA_CPU_NAME=target, NUMBA_CPU_FEATURES="",
               NUMBA_CACHE_DIR=str(cache / target))
    # at low priority: started early (see start_targets), they take the time other tests leave
    return subprocess.Popen([sys.executable, __file__, target], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.nice(10))


def start_targets(config, names) -> dict[str, subprocess.Popen]:
    """One compiling process per target in `names`, all started at once."""
    cache = getattr(config, "cache", None)
    root = Path(cache.mkdir("mojolike-numba-targets") if cache is not None
                else tempfile.mkdtemp(prefix="mojolike-numba-targets-"))
    return {t: start_target(t, root) for t in dict.fromkeys(names)}  # once each, in order


def stop_targets(procs: dict[str, subprocess.Popen]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


@pytest.fixture(scope="module")
def targets(request) -> dict[str, subprocess.Popen]:
    """The compiling processes: conftest starts them when collection selects these tests, so
    they run beside the tests before this module; each test waits for its own."""
    procs = getattr(request.config, "mojolike_targets", None) or start_targets(request.config, TARGETS)
    yield procs
    stop_targets(procs)


def test_every_family_but_schedule_and_rng_lists_its_hot_kernels():
    # schedule and rng list no HOT_KERNELS: this guards the other families from losing theirs
    assert set(FAMILIES) - {"schedule", "rng"} <= set(hot_modules())


def test_the_asm_reader_counts_packed_operations_inside_loops_only():
    asm = """
    mulps %xmm1, %xmm0
.LBB0_2:
    vmulps (%rax), %zmm1, %zmm2
    vaddps %zmm2, %zmm0, %zmm0
    mulss %xmm3, %xmm4
    jne .LBB0_2
    vaddps %ymm1, %ymm0, %ymm0
    jmp .LBB0_9
.LBB0_9:
    ret
"""
    assert packed_in_loops(asm) == {"vmulps:zmm": 1, "vaddps:zmm": 1}


def test_the_asm_reader_counts_fused_multiply_adds_and_fmaf_calls():
    asm = """
    vfmadd231ss %xmm1, %xmm0, %xmm2
.LBB0_2:
    vfmadd231ps (%rax), %zmm1, %zmm2
    vfnmsub213ps %ymm2, %ymm0, %ymm0
    vmulps %zmm1, %zmm2, %zmm3
    callq fmaf@PLT
    callq memcpy@PLT
    jne .LBB0_2
    movabsq $fmaf, %r13
"""
    assert fused_ops(asm) == {"vfmadd231ss:xmm": 1, "vfmadd231ps:zmm": 1, "vfnmsub213ps:ymm": 1,
                              "fmaf": 2}
    assert fused_ops(asm, loops_only=True) == {"vfmadd231ps:zmm": 1, "vfnmsub213ps:ymm": 1,
                                               "fmaf": 1}


_FOUND: dict[str, dict] = {}  # each target's output, read once (two tests look at it)


def _found(targets, target) -> dict:
    if target not in _FOUND:
        out, err = targets[target].communicate(timeout=1800)
        assert targets[target].returncode == 0, err[-4000:]
        _FOUND[target] = json.loads(out.splitlines()[-1])
    return _FOUND[target]


@pytest.mark.parametrize("target", list(TARGETS))
def test_hot_kernels_are_packed_in_their_loops_on_every_target(target, targets):
    prefix, regs, has_avx2 = TARGETS[target]
    found = _found(targets, target)["hot"]
    assert found, "no hot kernel was compiled"
    missing = []
    for kernel, entry in found.items():
        if entry["want"] is None:  # any packed arithmetic will do
            if not any(k.startswith(prefix) and k.split(":")[1] in regs for k in entry["packed"]):
                missing.append(f"{kernel}: no packed arithmetic on {'/'.join(regs)} in a loop "
                               f"(found {entry['packed']})")
            continue
        wanted = entry["want"] + ((entry["want_avx2"] or []) if has_avx2 else [])
        for op in wanted:
            if not any(entry["packed"].get(f"{prefix}{op}:{r}", 0) for r in regs):
                missing.append(f"{kernel}: no packed {prefix}{op} on {'/'.join(regs)} in a loop "
                               f"(found {entry['packed']})")
    assert not missing, f"{target}:\n" + "\n".join(missing)


@pytest.mark.parametrize("target", list(TARGETS))
def test_only_the_allowed_fma_kernels_fuse_and_they_do_where_the_target_has_fma(target, targets):
    found = _found(targets, target)
    assert set(found["fma"]) == FMA_ALLOWED  # the modules' FMA_KERNELS are the allow-list
    fused = {k: e["fused"] for k, e in found["hot"].items() if e["fused"]}
    assert not fused, f"{target}: fused multiply-adds in float32 kernels: {fused}"
    regs = TARGETS[target][1]
    for label, e in found["fma"].items():
        if target in NO_FMA_TARGETS:  # the module must know it has no FMA there
            assert e["has_fma"] is False, f"{label}: HAS_FMA on {target}"
            continue
        assert e["has_fma"] is True, f"{label}: no HAS_FMA on {target}"
        packed = {k: v for k, v in e["fused"].items() if k.split(":")[0].endswith("ps")
                  and k.split(":")[-1] in regs}
        assert packed and "fmaf" not in e["fused"], f"{label} on {target}: {e['fused']}"


if __name__ == "__main__":  # the target's process: NUMBA_CPU_NAME is set by the caller
    print(json.dumps(compile_and_count(hot_modules())))
