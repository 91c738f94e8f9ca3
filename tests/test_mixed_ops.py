"""scaled_dot_product_attention (forward and backward) and embedding on bfloat16 / float16
inputs: the float32 op on the exactly widened inputs, bit for bit, on every backend; mixed
operand types refused by name with nothing written."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mojolike
from mojolike.core.refusals import Refusal

TYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
CASES = [(t, b) for t in sorted(TYPES) for b in ("oracle", "cpu-numba", "cpu-cffi")] + \
    [("bfloat16", "cuda-sim")]


def _low(shape, t, seed):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return mojolike.cast(a, t, backend="oracle")


def _wide(a):
    return mojolike.cast(a, "float32", backend="oracle")


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32).tolist()


@pytest.mark.parametrize("t,backend", CASES)
def test_low_precision_attention_is_the_float32_attention_on_the_widened_inputs(t, backend):
    q, k, v = (_low((1, 2, 3, 4), t, s) for s in (1, 2, 3))
    on = {"backend": backend}
    got = mojolike.scaled_dot_product_attention(q, k, v, is_causal=True, **on)
    want = mojolike.scaled_dot_product_attention(_wide(q), _wide(k), _wide(v), is_causal=True,
                                                 backend="oracle")
    assert got.dtype == np.float32 and _bits(got) == _bits(want)
    do = np.random.default_rng(4).standard_normal(got.shape).astype(np.float32)
    grads = mojolike.scaled_dot_product_attention_backward(do, q, k, v, is_causal=True, **on)
    wants = mojolike.scaled_dot_product_attention_backward(do, _wide(q), _wide(k), _wide(v),
                                                           is_causal=True, backend="oracle")
    for g, w in zip(grads, wants):
        assert g.dtype == np.float32 and _bits(g) == _bits(w)


@pytest.mark.parametrize("t,backend", CASES)
def test_a_low_precision_embedding_gives_its_rows_widened(t, backend):
    table = _low((5, 3), t, 7)
    ids = np.int64([[4, 0], [4, 2]])
    got = mojolike.embedding(ids, table, backend=backend)
    assert got.dtype == np.float32 and got.shape == (2, 2, 3)
    assert _bits(got) == _bits(mojolike.embedding(ids, _wide(table), backend="oracle"))


def test_attention_refuses_mixed_operand_types_by_name():
    q = _low((1, 1, 2, 4), "bfloat16", 1)
    k = np.ones((1, 1, 2, 4), np.float32)
    with pytest.raises(Refusal) as info:
        mojolike.scaled_dot_product_attention(q, k, k, backend="oracle")
    assert info.value.option == "query" and "float32" in info.value.reason
    with pytest.raises(Refusal) as info:
        mojolike.scaled_dot_product_attention(q, _low((1, 1, 2, 4), "float16", 2), q,
                                              backend="oracle")
    assert info.value.option == "key"


def test_a_low_precision_embedding_refuses_bad_ids_and_shapes_by_name():
    table = _low((5, 3), "float16", 7)
    with pytest.raises(Refusal) as info:
        mojolike.embedding(np.int64([5]), table, backend="oracle")
    assert "ids" in info.value.option
    with pytest.raises(Refusal) as info:
        mojolike.embedding(np.int64([0]), table.reshape(-1), backend="oracle")
    assert info.value.option == "weight"
