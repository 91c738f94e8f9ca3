"""PTX lint: every CUDA kernel compiles (cc 9.0, no GPU needed) to round-to-nearest
float instructions only: no fma, no .approx, no .ftz.

CI sets MOJOLIKE_REQUIRE_PTX_LINT=1, so there a missing NVRTC/NVVM fails instead of skipping.
"""
from __future__ import annotations

import os
import re

import pytest

from mojolike.registry import simulator_process

FLOAT_OP = re.compile(r"^\s*(?:@%p\d+\s+)?(add|sub|mul|div|sqrt|fma|mad|rcp|rsqrt|ex2|lg2)((?:\.\w+)*)\.(f16|bf16|f32|f64)\b",
                      re.MULTILINE)


def lint(ptx: str) -> list[str]:
    """Problems in a PTX text; empty when every float op is a plain .rn add/sub/mul/div/sqrt."""
    problems = []
    for m in FLOAT_OP.finditer(ptx):
        op, mods = m.group(1), m.group(2).split(".")
        line = m.group(0).strip()
        if op in ("fma", "mad", "rcp", "rsqrt", "ex2", "lg2"):
            problems.append(f"{op} instruction: {line}")
        elif "rn" not in mods:
            problems.append(f"no .rn: {line}")
    problems += [f".approx: {ln.strip()}" for ln in ptx.splitlines() if ".approx" in ln]
    problems += [f".ftz: {ln.strip()}" for ln in ptx.splitlines() if ".ftz" in ln]
    return problems


def compile_ptx(fn, sig) -> str:
    if simulator_process():
        pytest.skip("this process runs the CUDA simulator, which cannot compile PTX")
    from numba import cuda
    try:
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
    except Exception as e:  # NVVM/NVRTC missing or unusable
        if os.environ.get("MOJOLIKE_REQUIRE_PTX_LINT") == "1":
            raise
        pytest.skip(f"cannot compile PTX here ({type(e).__name__}: {e}); install numba-cuda[cu13]")
    return ptx


def cuda_kernels():
    from mojolike.native.cuda import crmath, fold, loss, optim, rng, schedule
    return [(f"{mod.__name__.rsplit('.', 1)[1]}.{name}", fn, sig)
            for mod in (fold, optim, crmath, loss, schedule, rng)
            for name, (fn, sig) in mod.KERNELS.items()]


@pytest.mark.parametrize("name,fn,sig", cuda_kernels(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_cuda_kernel_compiles_to_round_to_nearest_float_ops_only(name, fn, sig):
    ptx = compile_ptx(fn, sig)
    assert FLOAT_OP.search(ptx), f"{name}: no float instruction found; is the lint reading this PTX?"
    problems = lint(ptx)
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_the_lint_catches_a_contracted_multiply_add():
    from numba import float32, void

    def contracted(a, out):  # plain operators: numba-cuda contracts a*a + out into fma
        out[0] = a[0] * a[1] + out[0]

    ptx = compile_ptx(contracted, void(float32[::1], float32[::1]))
    assert any("fma" in p for p in lint(ptx)), ptx[-800:]
