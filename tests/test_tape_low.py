"""The tape on bfloat16 / float16 values (contracts/mixed.md clause 30): the ops that keep an
input keep it in its own precision and give a float32 tape's bits on the rounded values; the
ops whose backward reads no input keep none of their inputs' arrays."""
from __future__ import annotations

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

import mojolike
from mojolike.core.refusals import Refusal

TYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")


def _bits(a) -> list[int]:
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 2: np.uint16}[a.dtype.itemsize]).ravel().tolist()


def _draw(shape, seed: int) -> np.ndarray:
    # normals with a spread of exponents and both signs: the casts round most of them
    g = np.random.default_rng(seed)
    return (g.standard_normal(shape) * np.exp2(g.integers(-6, 4, shape))).astype(np.float32)


def _rounded(a: np.ndarray, low: str) -> np.ndarray:
    return mojolike.cast(mojolike.cast(a, low, backend="oracle"), "float32", backend="oracle")


# op(tape, x) on a value; rounds: the result is rounded to the input's type (gelu, relu)
OPS = {
    "relu": (lambda t, x: t.relu(x), True),
    "gelu": (lambda t, x: t.gelu(x), True),
    "gelu-tanh": (lambda t, x: t.gelu(x, "tanh"), True),
    "layer_norm": (lambda t, x: t.layer_norm(x, (8,), t.const(np.linspace(0.5, 2, 8, dtype=np.float32)),
                                             t.const(np.full(8, 0.25, np.float32))), False),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("low", sorted(TYPES))
@pytest.mark.parametrize("name", sorted(OPS))
def test_an_op_on_a_low_precision_value_is_the_float32_op_on_it_widened(name, low, backend):
    op, rounds = OPS[name]
    x0, g0 = _draw((6, 8), 1), _draw((6, 8), 2)
    tape = mojolike.Tape(backend=backend)
    p = tape.param(x0)
    y = op(tape, tape.cast(p, low))
    up = tape.const(g0)
    (grad,) = tape.backward(tape.sum(tape.mul(tape.cast(y, "float32") if rounds else y, up)))

    ref = mojolike.Tape(backend="oracle")  # the float32 tape on the rounded input
    q = ref.param(_rounded(x0, low))
    want = op(ref, q)
    (want_grad,) = ref.backward(ref.sum(ref.mul(want, ref.const(g0))))
    if rounds:
        assert y.data.dtype == TYPES[low]
        want_data = mojolike.cast(want.data, low, backend="oracle")
    else:
        assert y.data.dtype == np.float32
        want_data = want.data
    assert _bits(y.data) == _bits(want_data)
    assert grad.dtype == np.float32 and _bits(grad) == _bits(want_grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_low_precision_attention_on_the_tape_is_the_float32_attention_on_the_widened_inputs(backend):
    q0, k0, v0, g0 = (_draw((1, 2, 5, 4), s) for s in range(4))
    tape = mojolike.Tape(backend=backend)
    ps = [tape.param(a) for a in (q0, k0, v0)]
    o = tape.scaled_dot_product_attention(*(tape.cast(p, "bfloat16") for p in ps), is_causal=True)
    grads = tape.backward(tape.sum(tape.mul(o, tape.const(g0))))

    ref = mojolike.Tape(backend="oracle")
    rs = [ref.param(_rounded(a, "bfloat16")) for a in (q0, k0, v0)]
    want = ref.scaled_dot_product_attention(*rs, is_causal=True)
    want_grads = ref.backward(ref.sum(ref.mul(want, ref.const(g0))))
    assert o.data.dtype == np.float32 and _bits(o.data) == _bits(want.data)
    for g, w in zip(grads, want_grads):
        assert _bits(g) == _bits(w)


def test_the_shape_ops_move_low_precision_values_keeping_their_type():
    tape = mojolike.Tape(backend="cpu-numba")
    x0 = _draw((2, 3, 4), 5)
    p = tape.param(x0)
    v = tape.cast(p, "float16")
    a, b = v.split([1, 2], dim=1)
    parts = [v.reshape(6, 4), v.transpose(0, 2), v.permute(2, 0, 1), v[1, 1:], b.mT,
             v.narrow(2, 1, 2), a]
    assert all(t.data.dtype == np.float16 for t in parts)
    assert _bits(parts[1].data) == _bits(np.transpose(v.data, (2, 1, 0)))
    total = tape.sum(tape.cast(parts[0], "float32"))
    for t in parts[1:]:
        total = tape.add(total, tape.sum(tape.cast(t, "float32")))
    (g,) = tape.backward(total)
    # every element reaches the parameter through reshape, transpose, permute and a's or b's
    # mT (the split's parts cover it once), plus the slices: [1, 1:] and the narrow
    want = np.full(x0.shape, 4.0, np.float32)
    want[1, 1:] += 1
    want[:, :, 1:3] += 1
    assert g.tolist() == want.tolist()


def test_a_cast_keeps_no_array_of_its_input_and_the_gradient_still_reaches_it():
    tape = mojolike.Tape(backend="cpu-numba")
    w = tape.param(_draw((4, 3), 7))
    x = tape.linear(tape.const(_draw((5, 3), 8)), w)  # a float32 activation
    kept = weakref.ref(x.data)
    low = tape.cast(x, "bfloat16")
    s = tape.relu(low)
    del x
    gc.collect()
    assert kept() is None  # freed: the cast's node holds its input's place, not its array
    (g,) = tape.backward(tape.sum(tape.cast(s, "float32")))
    assert g.shape == (4, 3) and g.dtype == np.float32


@pytest.mark.parametrize("make", [
    lambda t, v: t.add(v, t.const(np.float32(2.0))),
    lambda t, v: t.sub(v, t.const(np.float32(2.0))),
    lambda t, v: t.neg(v), lambda t, v: t.exp(v), lambda t, v: t.tanh(v),
    lambda t, v: t.sum(v, dim=0), lambda t, v: t.mean(v), lambda t, v: t.softmax(v),
    lambda t, v: t.log_softmax(v), lambda t, v: t.relu(v), lambda t, v: t.transpose(v, 0, 1),
    lambda t, v: v[1:], lambda t, v: t.cat([v, v]),
], ids=["add", "sub", "neg", "exp", "tanh", "sum", "mean", "softmax", "log_softmax", "relu",
        "transpose", "getitem", "cat"])  # not reshape: its result is a view of its input
def test_an_op_whose_backward_reads_no_input_keeps_no_input_array(make):
    tape = mojolike.Tape(backend="oracle")
    w = tape.param(np.float32([[0.5, -1.0, 2.0], [1.5, 0.25, -3.0]]))
    v = tape.mul(w, tape.const(np.float32(2.0)))
    kept = weakref.ref(v.data)
    y = make(tape, v)
    del v
    gc.collect()
    assert kept() is None
    (g,) = tape.backward(tape.sum(y))
    assert g.shape == (2, 3)


def test_relu_keeps_its_result_and_gives_torchs_gradient_for_zeros_and_nan():
    tape = mojolike.Tape(backend="cpu-cffi")
    x0 = np.float32([-1.0, -0.0, 0.0, 2.0, np.nan, -np.inf])
    p = tape.param(x0)
    y = tape.relu(tape.cast(p, "bfloat16"))
    assert y.data.dtype == ml_dtypes.bfloat16
    (g,) = tape.backward(tape.sum(tape.mul(tape.cast(y, "float32"), np.float32(3.0))))
    assert _bits(g) == _bits(np.float32([0.0, 0.0, 0.0, 3.0, 3.0, 0.0]))


@pytest.mark.parametrize("make, option", [
    (lambda t, v: t.layer_norm(v, (3,), t.cast(t.const(np.ones(3, np.float32)), "bfloat16")),
     "weight"),
    (lambda t, v: t.scaled_dot_product_attention(v, t.const(np.ones((1, 1, 2, 3), np.float32)),
                                                 v), "query"),
    (lambda t, v: t.scaled_dot_product_attention(v, v, t.cast(
        t.const(np.ones((1, 1, 2, 3), np.float32)), "float16")), "value"),
    (lambda t, v: t.rms_norm(v), "x"),
    (lambda t, v: t.mul(v, v), "a"),
])
def test_what_clause_30_does_not_cover_is_refused_by_name(make, option):
    tape = mojolike.Tape(backend="oracle")
    v = tape.cast(tape.param(np.float32([[[[1.0, 2.0, 3.0], [0.5, 0.25, 4.0]]]])), "bfloat16")
    with pytest.raises(Refusal) as e:
        make(tape, v)
    assert e.value.option == option
