"""linear and matmul on bfloat16 / float16 operands equal the float32 op on the exactly widened
operands, bit for bit, on every backend (contracts/mixed.md clause 9); mixed operand types are
refused by name, and float32 calls keep their bits and refusals. cuda-sim: tiny shapes.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_same_bits, available

import mojolike

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")
LOW = (ml_dtypes.bfloat16, np.float16)


def _backends():
    return [pytest.param(b, marks=pytest.mark.skipif(not available(b), reason=f"{b} cannot run here"))
            for b in BACKENDS]


def _low(shape, dtype, seed):
    # values whose float32 products keep more bits than the low type: a contraction that
    # rounded its products to the low precision would change the result
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(dtype)


@pytest.mark.parametrize("dtype", LOW, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("backend", _backends())
def test_low_precision_linear_equals_the_float32_linear_of_the_widened_inputs(backend, dtype):
    k = 40 if backend == "cuda-sim" else 1100
    x, w, b = _low((3, k), dtype, 1), _low((2, k), dtype, 2), _low((2,), dtype, 3)
    y = mojolike.linear(x, w, b, backend=backend)
    assert y.dtype == np.float32 and y.shape == (3, 2)
    want = mojolike.linear(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32),
                           backend=backend)
    assert_same_bits(y, want, f"linear {np.dtype(dtype).name} on {backend}")
    y0 = mojolike.linear(x, w, backend=backend)
    assert_same_bits(y0, mojolike.linear(x.astype(np.float32), w.astype(np.float32), backend=backend))


@pytest.mark.parametrize("dtype", LOW, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("backend", _backends())
def test_low_precision_matmul_equals_the_float32_matmul_of_the_widened_inputs(backend, dtype):
    a, b = _low((2, 2, 24), dtype, 4), _low((24, 3), dtype, 5)
    y = mojolike.matmul(a, b, backend=backend)
    want = mojolike.matmul(a.astype(np.float32), b.astype(np.float32), backend=backend)
    assert y.dtype == np.float32 and y.shape == (2, 2, 3)
    assert_same_bits(y, want, f"matmul {np.dtype(dtype).name} on {backend}")


def test_the_low_precision_result_is_the_oracle_and_not_a_low_precision_sum():
    # the float32 fold of exact widened products, checked against a hand value:
    # 1 + 2^-7 and 1 - 2^-8 are bfloat16; their product 1 + 2^-8 - 2^-15 is not, float32 keeps it
    x = np.array([[1 + 2.0 ** -7]], ml_dtypes.bfloat16)
    w = np.array([[1 - 2.0 ** -8]], ml_dtypes.bfloat16)
    assert x.astype(np.float32).tolist() == [[1 + 2.0 ** -7]] and w.astype(np.float32).tolist() == [[1 - 2.0 ** -8]]
    for backend in ("oracle", "cpu-numba", "cpu-cffi"):
        assert mojolike.linear(x, w, backend=backend).tolist() == [[1 + 2.0 ** -8 - 2.0 ** -15]]


@pytest.mark.parametrize("option, call", [
    # beside float32 (or float64) the low-precision operand is named, as the float32 op names it
    ("x", lambda: mojolike.linear(np.ones((1, 2), ml_dtypes.bfloat16), np.ones((1, 2), np.float32))),
    ("weight", lambda: mojolike.linear(np.ones((1, 2), np.float32), np.ones((1, 2), np.float16))),
    ("bias", lambda: mojolike.linear(np.ones((1, 2), np.float16), np.ones((1, 2), np.float16),
                                     np.ones(1, ml_dtypes.bfloat16))),
    ("b", lambda: mojolike.matmul(np.ones((1, 2), ml_dtypes.bfloat16), np.ones((2, 1), np.float16))),
    ("b", lambda: mojolike.matmul(np.ones((1, 2), np.float64), np.ones((2, 1), np.float16))),
])
def test_mixed_operand_types_are_refused_by_name(option, call):
    with pytest.raises(mojolike.Refusal) as e:
        call()
    assert e.value.option == option and "one type" in str(e.value)


def test_float32_calls_keep_their_refusal_of_low_precision_elsewhere():
    with pytest.raises(mojolike.Refusal, match="only float32 buffers are covered"):
        mojolike.rms_norm(np.ones((1, 2), ml_dtypes.bfloat16))
    with pytest.raises(mojolike.Refusal, match="has dtype float64; only float32"):
        mojolike.linear(np.ones((1, 2)), np.ones((1, 2)))
