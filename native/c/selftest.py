"""The known-answer self-test a cpu-cffi module passes before it serves a mode.

`mj_selftest` (selftest.c) computes, on every OpenMP thread at once, a few
results whose bits a wrong floating-point environment or a wrong build changes,
from inputs passed here at run time (so the compiler cannot fold them). Each
thread's bits are compared with the oracle's (`mojolike.oracles.f32`,
`mojolike.oracles.fold`):

    flush-to-zero       a*b with a subnormal product
    denormals-are-zero  a subnormal input times 2^30
    excess range        (a*b)*c where a*b overflows binary32 (x87 registers keep it)
    product then sum    p = a*b; p + c (x87 excess precision, or FMA contraction)
    contraction         q = a*b; q - c, where a fused multiply-add gives q's rounding error
    association         (a + b) + c, where a + (b + c) gives another value
    serial sum          a left-to-right sum of 64 values (a vectorized sum reassociates it)
    fold of subnormals  mj_fold_partials + mj_pairwise over 3000 copies of 1e-40
    fold                the same over 3000 mixed values whose sum depends on the tree

Modes. identical: every check must pass, else BackendUnavailable naming each
failed check, the thread, the bits got and expected, and the build command.
deterministic (built with -ffp-contract=fast): "product then sum" and
"contraction" are not required, FMA contraction being allowed; every other check
is (flush-to-zero or a reassociating build would make the bits depend on what
else the process loaded, or on the build). fast: nothing is required (the mode
carries no promise); the outcome is reported in the kernels' details.

Reproducibility: the expected bits come from the oracle at run time, never from
a table, and worker threads are checked too, since a thread may carry another
floating-point state than the one that loaded the module.

>>> from mojolike.native.c import build
>>> failures(build.load("identical"))
[]
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...core.refusals import BackendUnavailable
from ...oracles import f32
from ...oracles import fold as ofold

CHECKS = ("flush-to-zero", "denormals-are-zero", "excess range", "product then sum",
          "contraction", "association", "serial sum", "fold of subnormals", "fold")
_STATE = "flush-to-zero or denormals-are-zero in that thread (a library built with -ffast-math sets them)"
_REASSOCIATION = "reassociation in the build (-ffast-math, -fassociative-math)"
CAUSES = {"flush-to-zero": _STATE, "denormals-are-zero": _STATE, "fold of subnormals": _STATE,
          "excess range": "x87 arithmetic in the build (-mfpmath=387)",
          "product then sum": "x87 excess precision or FMA contraction in the build",
          "contraction": "FMA contraction in the build (-ffp-contract=fast with FMA instructions)",
          "association": _REASSOCIATION, "serial sum": _REASSOCIATION, "fold": _REASSOCIATION}
NOT_REQUIRED = {"identical": frozenset(),
                "deterministic": frozenset({"product then sum", "contraction"}),
                "fast": frozenset(CHECKS)}

ONE, TWO_M24, ONE_P12 = 0x3F800000, 0x33800000, 0x3F800800  # 1, 2^-24, 1 + 2^-12
INPUTS = (0x1C800000, 0x1CC00000,  # 2^-70, 1.5 * 2^-70: product 1.5 * 2^-140
          0x00000200, 0x4E800000,  # 2^-140 (subnormal), 2^30
          0x71800000, 0x71800000, 0x0D800000,  # 2^100, 2^100, 2^-100
          ONE_P12, ONE_P12, 0xBF800000,  # (1 + 2^-12)^2 rounds to 1 + 2^-11; then - 1
          ONE_P12, ONE_P12, 0x3F801000,  # the same product minus 1 + 2^-11
          ONE, TWO_M24, TWO_M24)  # (1 + 2^-24) + 2^-24: two ties to even
SERIAL = (ONE,) + (TWO_M24,) * 63
FOLD_N = 3000
_SMALL = (0x33800000, 0x34000000, 0x34400000, 0x34800000, 0x34A00000)  # k * 2^-24, k = 1..5
FOLD_INPUTS = ((0x000116C2,) * FOLD_N,  # float32(1e-40)
               tuple((ONE if i // 250 % 2 == 0 else 0xBF800000) if i % 250 == 3
                     else _SMALL[i * 7 % 5] for i in range(FOLD_N)))
_UNWRITTEN = 0x7FC0DEAD  # a NaN no check produces


@dataclass(frozen=True)
class Failure:
    thread: int
    check: str
    got: int
    want: int

    def __str__(self) -> str:
        return _describe([self])


def _describe(found: list[Failure]) -> str:
    """One clause per (check, got, expected), naming the threads it happened on."""
    groups: dict[tuple[str, int, int], list[int]] = {}
    for f in found:
        groups.setdefault((f.check, f.got, f.want), []).append(f.thread)
    return "; ".join(f"{check} on thread{'s' if len(ts) > 1 else ''} {', '.join(map(str, ts))}: "
                     f"got 0x{got:08x}, expected 0x{want:08x}"
                     for (check, got, want), ts in groups.items())


def _floats(bits) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)  # a reinterpretation: no rounding, no FTZ


@functools.lru_cache(maxsize=1)
def expected() -> tuple[int, ...]:
    """The oracle's bits for each check, in CHECKS order."""
    a = [f32.bits_to_f32(u) for u in INPUTS]
    acc = -0.0
    for u in SERIAL:
        acc = f32.add(acc, f32.bits_to_f32(u))
    values = [f32.mul(a[0], a[1]), f32.mul(a[2], a[3]), f32.mul(f32.mul(a[4], a[5]), a[6]),
              f32.add(f32.mul(a[7], a[8]), a[9]), f32.sub(f32.mul(a[10], a[11]), a[12]),
              f32.add(f32.add(a[13], a[14]), a[15]), acc,
              *(ofold.fold([f32.bits_to_f32(u) for u in xs]) for xs in FOLD_INPUTS)]
    return tuple(f32.f32_to_bits(v) for v in values)


def failures(module) -> list[Failure]:
    """Run mj_selftest on every OpenMP thread; the checks whose bits differ from the oracle's."""
    ffi, lib = module.ffi, module.lib
    width = lib.mj_selftest_width()
    if width != len(CHECKS):
        raise RuntimeError(f"selftest.c writes {width} results, selftest.py checks {len(CHECKS)}")
    threads = max(1, lib.mj_get_max_threads())
    inputs, serial = _floats(INPUTS), _floats(SERIAL)
    folds = _floats(FOLD_INPUTS[0] + FOLD_INPUTS[1])
    work = np.empty(threads * -(-FOLD_N // 1024), np.float32)
    out = np.full(threads * width, _UNWRITTEN, np.uint32)
    f = lambda a: ffi.from_buffer("float[]", a)
    ran = lib.mj_selftest(f(inputs), f(serial), serial.size, f(folds), FOLD_N, f(work),
                          f(out.view(np.float32)), threads)
    got = out.reshape(threads, width)
    want = expected()
    return [Failure(t, CHECKS[k], int(got[t, k]), want[k])
            for t in range(max(1, min(ran, threads))) for k in range(width)
            if int(got[t, k]) != want[k]]


def verify(module, mode: str) -> str:
    """Refuse (BackendUnavailable) a module that fails a check `mode` requires; else a summary."""
    found = failures(module)
    bad = [f for f in found if f.check not in NOT_REQUIRED[mode]]
    command = module.ffi.string(module.lib.mj_build_command()).decode()
    if bad:
        raise BackendUnavailable(
            "mojolike cpu-cffi loader", "numeric_mode",
            f"is refused: the C module {module.__file__} failed its known-answer self-test: "
            f"{_describe(bad)}. Likely cause: {'; or '.join(dict.fromkeys(CAUSES[f.check] for f in bad))}. "
            f"It was built with `{command}`", value=mode)
    if found:
        return f"passed the checks {mode} mode requires; not required there: {_describe(found)}"
    return "passed"
