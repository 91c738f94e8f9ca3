"""What the CPU numba compiles for can do, asked of LLVM: the assembly it emits for a probe.

Kernels that pick a code shape per target (native/layers.py's GEMM tile, native/vexp.py's
table lookup) ask here at import. The answer follows NUMBA_CPU_NAME / NUMBA_CPU_FEATURES
where set, else the host, as numba's own target does, so a process compiling for another
target (tests/test_vectorized.py) gets that target's shape; the target is in numba's cache
key, so a cached kernel never carries another target's shape.

Reproducibility: a shape changes which instructions compute a value, never the value: each
kernel that asks states why its shapes give the same bits.

>>> has_zmm() in (True, False)
True
"""
from __future__ import annotations

import functools

import llvmlite.binding as llvm
import numba


def target_asm(ir_text: str) -> tuple[str, str]:
    """(the assembly LLVM emits for the module `ir_text` on the CPU numba compiles for, the
    process triple): NUMBA_CPU_NAME / NUMBA_CPU_FEATURES where set, else the host's."""
    cpu = numba.config.CPU_NAME
    if cpu is None or cpu == "host":
        cpu = llvm.get_host_cpu_name()
    features = numba.config.CPU_FEATURES
    if features is None:
        features = llvm.get_host_cpu_features().flatten()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features)
    probe = llvm.parse_assembly(ir_text)
    probe.triple = triple
    return machine.emit_assembly(probe), triple


@functools.cache
def add16_asm() -> tuple[str, str]:
    """The assembly of one 16-float vector addition, and the triple."""
    return target_asm("define <16 x float> @probe(<16 x float> %a, <16 x float> %b) {\n"
                      "  %c = fadd <16 x float> %a, %b\n  ret <16 x float> %c\n}\n")


def has_zmm() -> bool:
    """Whether the target holds a 16-float vector in one 512-bit register (AVX-512F)."""
    return "zmm" in add16_asm()[0]


def has_fma() -> bool:
    """Whether the CPU numba compiles for (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, else the host)
    does a fused multiply-add of vectors in an instruction: LLVM's code for one, without a
    call (a target without FMA gets libm's fmaf, which certified paths never use)."""
    asm, _ = target_asm(
        "declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)\n"
        "define <4 x float> @probe(<4 x float> %a, <4 x float> %b, <4 x float> %c) {\n"
        "  %d = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b, <4 x float> %c)\n"
        "  ret <4 x float> %d\n}\n")
    return "call" not in asm and "jmp" not in asm and "fma" in asm

