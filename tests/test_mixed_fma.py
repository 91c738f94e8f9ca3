"""cpu-numba's fused multiply-add GEMM for low-precision linear / matmul (contracts/mixed.md
clause 10): it runs only where every product is exact, and then gives the oracle's bits; the
range check sends the suite's underflow and overflow cases to the multiply-then-add kernel,
and forcing the fused kernel there does change the bits.
"""
from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest
from conftest import assert_same_bits
from mojolike.contracts import mixed_fma
from mojolike.native import mixed_gemm, target

import mojolike
from mojolike.core import registry

TYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
BITS = {"bfloat16": 8, "float16": 11}
# the range cases whose products are all exact (the rest must take the fallback)
EXACT = {"linear-float16-range": True, "linear-bfloat16-wide": True,
         "linear-bfloat16-underflow": False, "matmul-bfloat16-overflow": False}

needs_fma = pytest.mark.skipif(not mixed_gemm.HAS_FMA, reason="this CPU has no FMA")


def _kernels():
    return registry.kernels("test", "mixed", "cpu-numba", "identical")


def _f32(values) -> np.ndarray:
    return np.asarray(values, np.float32).reshape(-1).view(np.uint32)


def _case(cid):
    _, op, t, shapes, fields = next(c for c in mixed_fma.CASES if c[0] == cid)
    return op, t, [p.view(TYPES[t]) for p in mixed_fma.operands(cid, t, shapes, fields)]


def _gemm_operands(op, ops):
    """The float32 a (M, K), b (N, K) and bias gemm_nt reads for the case's operands."""
    wide = [o.astype(np.float32) for o in ops]
    if op == "linear":
        return wide[0], wide[1], (wide[2] if len(wide) > 2 else None)
    return wide[0], np.ascontiguousarray(wide[1].T), None


def _fused(a, b, bias, t):
    """gemm_nt_exact's verdict and output (NaN where it wrote nothing)."""
    out = np.full((a.shape[0], b.shape[0]), np.nan, np.float32)
    ran = _kernels().gemm_nt_exact(a, b, bias if bias is not None else np.zeros(1, np.float32),
                                   bias is not None, out, BITS[t])
    return ran, out


# -- the range check ----------------------------------------------------------------------------
def test_float16_products_are_exact_over_every_finite_binade():
    f16 = np.float16([65504, -2.0 ** -24, 2.0 ** -14, 1.5, 0]).astype(np.float32)
    assert mixed_gemm.exact_products(_f32(f16), _f32(f16), 11)


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_an_infinite_or_nan_operand_is_never_exact(special):
    assert not mixed_gemm.exact_products(_f32([1.0, special]), _f32([1.0]), 11)
    assert not mixed_gemm.exact_products(_f32([1.0]), _f32([special, 0.0]), 8)


def test_bfloat16_products_are_exact_down_to_the_smallest_normal_and_no_further():
    assert mixed_gemm.exact_products(_f32([2.0 ** -63]), _f32([2.0 ** -63, 1.0]), 8)
    assert not mixed_gemm.exact_products(_f32([2.0 ** -63]), _f32([2.0 ** -64, 1.0]), 8)


def test_bfloat16_products_are_exact_up_to_below_two_to_the_128_and_no_further():
    big = float(np.float32(ml_dtypes.bfloat16(1.9921875 * 2.0 ** 63)))  # the largest of 2^63's binade
    assert mixed_gemm.exact_products(_f32([big]), _f32([big]), 8)  # below 2^128
    assert not mixed_gemm.exact_products(_f32([big]), _f32([2.0 ** 64]), 8)


def test_zeros_give_exact_products_and_subnormals_count_as_two_to_the_minus_149():
    assert mixed_gemm.exact_products(_f32([0.0, -0.0]), _f32([2.0 ** 127, 2.0 ** -149]), 8)
    assert mixed_gemm.exact_products(_f32([2.0 ** -140]), _f32([2.0 ** 23]), 8)
    assert not mixed_gemm.exact_products(_f32([2.0 ** -140]), _f32([2.0 ** 22]), 8)


def test_significands_wider_than_twelve_bits_are_never_exact():
    assert not mixed_gemm.exact_products(_f32([1.0]), _f32([1.0]), 13)


def test_the_target_probe_sees_fma_on_skylake_avx512_and_zen_and_none_on_baseline_x86(monkeypatch):
    for cpu, has in (("skylake-avx512", True), ("znver3", True), ("znver4", True),
                     ("x86-64", False), ("nehalem", False)):
        monkeypatch.setattr(numba.config, "CPU_NAME", cpu)
        monkeypatch.setattr(numba.config, "CPU_FEATURES", "")  # the target's own features
        assert target.has_fma() is has, cpu


# -- the suite's range cases --------------------------------------------------------------------
@needs_fma
@pytest.mark.parametrize("cid", list(EXACT))
def test_range_cases_take_the_fused_kernel_only_where_exact_and_match_the_oracle(cid):
    op, t, ops = _case(cid)
    f = mojolike.linear if op == "linear" else mojolike.matmul
    want = f(*ops, backend="oracle")
    assert_same_bits(f(*ops, backend="cpu-numba"), want, cid)
    ran, out = _fused(*_gemm_operands(op, ops), t)
    assert ran is EXACT[cid]
    if ran:
        assert_same_bits(out.reshape(want.shape), want, f"{cid}: the fused kernel")
    else:
        assert np.isnan(out).all()  # a refused call writes nothing


@needs_fma
@pytest.mark.parametrize("cid", ["linear-bfloat16-underflow", "matmul-bfloat16-overflow"])
def test_forcing_the_fused_kernel_where_products_are_inexact_changes_the_bits(cid):
    op, _, ops = _case(cid)
    a, b, bias = _gemm_operands(op, ops)
    want = (mojolike.linear if op == "linear" else mojolike.matmul)(*ops, backend="oracle")
    out = np.empty((a.shape[0], b.shape[0]), np.float32)
    has = bias is not None
    mixed_gemm.gemm_nt_fma(1, a.reshape(-1), b.reshape(-1), a.shape[0], b.shape[0], a.shape[1],
                           bias if has else np.zeros(16, np.float32), has, False, out.reshape(-1))
    differ = (out.reshape(want.shape).view(np.uint32) != want.view(np.uint32)).sum()
    assert differ >= (5 if cid == "linear-bfloat16-underflow" else 2), (out, want)


@needs_fma
def test_linear_and_matmul_route_exact_low_precision_calls_to_the_fused_kernel(monkeypatch):
    calls = []
    kernel = mixed_gemm.gemm_nt_fma
    monkeypatch.setattr(mixed_gemm, "gemm_nt_fma", lambda *args: calls.append(args[3:6]) or kernel(*args))
    for cid in EXACT:
        op, _, ops = _case(cid)
        (mojolike.linear if op == "linear" else mojolike.matmul)(*ops, backend="cpu-numba")
    assert calls == [(2, 3, 96), (2, 3, 96)]  # (M, N, K) of the two exact cases only


# -- random shapes ------------------------------------------------------------------------------
def _random(shape, t, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(TYPES[t])


@needs_fma
@pytest.mark.parametrize("t", list(TYPES))
@pytest.mark.parametrize("m, n, k", [(5, 7, 1100), (3, 13, 2100), (1, 1, 33)])
def test_the_fused_kernel_equals_the_oracle_on_random_shapes(t, m, n, k):
    x, w, b = _random((m, k), t, 1), _random((n, k), t, 2), _random((n,), t, 3)
    ran, out = _fused(*_gemm_operands("linear", (x, w, b)), t)
    assert ran
    assert_same_bits(out, mojolike.linear(x, w, b, backend="oracle"), f"{t} {m}x{n}x{k}")
    assert_same_bits(mojolike.linear(x, w, backend="cpu-numba"),
                     mojolike.linear(x, w, backend="oracle"), f"{t} {m}x{n}x{k} without bias")


@needs_fma
@pytest.mark.parametrize("t", list(TYPES))
def test_the_fused_kernel_gives_the_float32_kernels_bits_on_one_and_two_threads(t):
    # 37 rows (not a multiple of 4), 140 columns (three blocks, not a multiple of 6), K = 1100
    # (two chunks, a short last step): enough work for the parallel kernel, several blocks
    x, w, b = _random((37, 1100), t, 4), _random((140, 1100), t, 5), _random((140,), t, 6)
    a32, w32, b32 = x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)
    want = mojolike.linear(a32, w32, b32, backend="cpu-numba")  # the float32 kernel
    before = numba.get_num_threads()
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            ran, out = _fused(a32, w32, b32, t)
            assert ran
            assert_same_bits(out, want, f"{t} on {threads} threads")
            assert_same_bits(mojolike.linear(x, w, b, backend="cpu-numba"), want, f"{t} API")
    finally:
        numba.set_num_threads(before)


@needs_fma
def test_a_batched_low_precision_matmul_equals_the_oracle():
    a, b = _random((2, 3, 70), "bfloat16", 7), _random((70, 5), "bfloat16", 8)
    assert_same_bits(mojolike.matmul(a, b, backend="cpu-numba"),
                     mojolike.matmul(a, b, backend="oracle"), "matmul bfloat16")


def test_nan_payloads_take_the_multiply_then_add_kernel_and_are_the_float32_ops():
    x = _random((2, 40), "float16", 9)
    x.view(np.uint16)[0, 3] = 0x7D23  # a signalling NaN with a payload
    w = _random((3, 40), "float16", 10)
    ran, _ = _fused(*_gemm_operands("linear", (x, w)), "float16")
    assert not ran
    got = mojolike.linear(x, w, backend="cpu-numba")
    assert_same_bits(got, mojolike.linear(x.astype(np.float32), w.astype(np.float32),
                                          backend="cpu-numba"), "NaN row")
    assert np.isnan(got[0]).all() and not np.isnan(got[1]).any()
