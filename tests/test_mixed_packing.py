"""Widening where it costs no copy (contracts/mixed.md clause 30): cpu-numba's GEMM widens a
bfloat16 / float16 operand inside its packing, the tape's linear backward takes the kept input
and weight as they are, and relu and gelu widen a low-precision input a block at a time. Every
widening is exact, so each path has the bits of the float32 op on the widened values."""
from __future__ import annotations

import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from numba import njit

import mojolike
from mojolike import data
from mojolike.mixed_precision import with_master_weights
from mojolike.models import TinyLM
from mojolike.native import gemm_outer
from mojolike.native.layers import _PLACEHOLDER
from mojolike.native.simd import WIDTH, vload_bf16, vload_f16, vstore
from mojolike.ops.layers import linear_backward_low
from mojolike.training import tape_mixed

TYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@njit
def _widen_all_bf16(h, out):
    for i in range(0, h.size, WIDTH):
        vstore(out, i, vload_bf16(h, i))


@njit
def _widen_all_f16(h, out):
    for i in range(0, h.size, WIDTH):
        vstore(out, i, vload_f16(h, i))


@pytest.mark.parametrize("low", sorted(TYPES))
def test_the_vector_loads_widen_every_pattern_as_the_cast_does(low):
    patterns = np.arange(1 << 16, dtype=np.uint16)
    out = np.empty(patterns.size, np.float32)
    (_widen_all_bf16 if low == "bfloat16" else _widen_all_f16)(patterns, out)
    want = mojolike.cast(patterns.view(TYPES[low]), "float32", backend="oracle")
    assert np.array_equal(_bits(out), _bits(want))  # NaN payloads and signs included


def _operands(low: str, shape, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    v = g.standard_normal(shape) * np.exp2(g.integers(-30, 10, shape))
    flat = v.reshape(-1)
    flat[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 2.0 ** -20]  # -0.0, a float16 subnormal
    return v.astype(TYPES[low])


@pytest.mark.parametrize("form", ["nn", "tn"])
@pytest.mark.parametrize("low", sorted(TYPES))
@pytest.mark.parametrize("m, n, k", [(4, 96, 1), (5, 100, 1023), (9, 200, 1025), (64, 96, 40)])
def test_the_gemm_packing_a_low_precision_b_equals_the_float32_gemm_on_it_widened(form, low, m,
                                                                                   n, k):
    g = np.random.default_rng(m + n + k)
    a = g.standard_normal((m, k) if form == "nn" else (k, m)).astype(np.float32)
    b = _operands(low, (k, n), k)
    wide = mojolike.cast(b, "float32", backend="oracle")
    args = (m * n * k // 32, a.reshape(-1))
    want, got = np.empty(m * n, np.float32), np.empty(m * n, np.float32)
    float32_kernel = gemm_outer.gemm_outer_nn if form == "nn" else gemm_outer.gemm_outer_tn
    float32_kernel(*args, wide.reshape(-1), m, n, k, _PLACEHOLDER, False, False, want)
    gemm_outer.gemm_outer_low(form, low)(*args, b.view(np.uint16).reshape(-1), m, n, k,
                                         _PLACEHOLDER, False, False, got)
    assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("low", sorted(TYPES))
@pytest.mark.parametrize("rows, n, k", [(3, 5, 7), (8, 4, 100), (6, 100, 97)])
def test_linear_backward_on_kept_low_precision_values_is_the_float32_backward_on_them_widened(
        backend, low, rows, n, k):
    dy = np.random.default_rng(rows).standard_normal((rows, n)).astype(np.float32)
    x, w = _operands(low, (rows, k), 1), _operands(low, (n, k), 2) * TYPES[low](0.5)
    got = linear_backward_low("test", dy, x, w, True, backend=backend)
    want = mojolike.linear_backward(dy, mojolike.cast(x, "float32", backend="oracle"),
                                    mojolike.cast(w, "float32", backend="oracle"),
                                    backend="oracle")
    for g, f in zip(got, want):
        assert g.dtype == np.float32 and np.array_equal(_bits(g), _bits(f))


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba"])
@pytest.mark.parametrize("low", sorted(TYPES))
@pytest.mark.parametrize("op", ["relu", "gelu", "gelu-tanh"])
def test_relu_and_gelu_widen_a_low_precision_input_in_blocks_with_the_whole_ops_bits(
        monkeypatch, backend, low, op):
    monkeypatch.setattr(tape_mixed, "WIDE_ELEMENTS", 40)  # 100 elements: blocks of 40, 40, 20
    x = _operands(low, (4, 25), 3)
    tape = mojolike.Tape(backend=backend)
    v = tape.cast(tape.const(mojolike.cast(x, "float32", backend="oracle")), low)  # x, exactly
    y = tape.relu(v) if op == "relu" else tape.gelu(v, "tanh" if op == "gelu-tanh" else "none")
    wide = mojolike.cast(x, "float32", backend="oracle")
    whole = (mojolike.relu(wide, backend="oracle") if op == "relu" else
             mojolike.gelu(wide, "tanh" if op == "gelu-tanh" else "none", backend="oracle"))
    want = mojolike.cast(whole, low, backend="oracle")
    assert y.data.dtype == want.dtype
    assert np.array_equal(y.data.view(np.uint16), want.view(np.uint16))


def _step_peak(low: str | None) -> int:
    model = TinyLM(d_model=128, dropout=0.0, seed=0, chunk_size=1024)
    tokens, targets = data.batch(0, batch_size=8, seq_len=128)
    if low:
        with_master_weights(model, low)

    def step():
        tape = mojolike.Tape(backend="cpu-numba")
        tape.backward(model.forward(tape, tokens, targets))

    step()  # compiled code and caches are not counted
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_bfloat16_step_holds_no_float32_copy_of_a_whole_activation():
    # the MLP's hidden activation is the largest: widened whole (relu's input in the forward,
    # fc2's kept input in the backward) the bfloat16 step's peak exceeded the float32 one's
    assert _step_peak("bfloat16") < 0.95 * _step_peak(None)
