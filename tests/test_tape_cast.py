"""Tape.cast: the rounded value forward, the float32 gradient passed to the float32 source;
the tape's linear and matmul on low-precision values keep them in their own precision and
give the float32 tape's bits on the widened values."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mojolike
from mojolike.core.refusals import Refusal

BACKENDS = ["oracle", "cpu-numba", "cpu-cffi", "cuda-sim"]
TYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}


def _data(seed: int):
    r = np.random.default_rng(seed)
    x = r.standard_normal((3, 5)).astype(np.float32)
    w1 = (r.standard_normal((4, 5)) * 0.7).astype(np.float32)
    b1 = r.standard_normal(4).astype(np.float32)
    w2 = (r.standard_normal((4, 2)) * 1.3).astype(np.float32)
    return x, w1, b1, w2


def _net(tape, x, params, low):
    """linear -> relu -> matmul -> mean; with `low`, each contraction's operands are cast."""
    w1, b1, w2 = params
    c = (lambda v: tape.cast(v, low)) if low else (lambda v: v)
    h = tape.relu(tape.linear(c(x), c(w1), c(b1)))
    return tape.mean(tape.matmul(c(h), c(w2)))


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32).tolist()


@pytest.mark.parametrize("low", sorted(TYPES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cast_network_has_the_float32_tapes_bits_on_the_rounded_values(backend, low):
    x, w1, b1, w2 = _data(3)
    tape = mojolike.Tape(backend=backend)
    params = [tape.param(a) for a in (w1, b1, w2)]
    loss = _net(tape, tape.const(x), params, low)
    grads = tape.backward(loss)

    # the float32 tape on the values the casts produce: the weights rounded, and the hidden
    # activation rounded where the low network rounds it
    def rounded(a):
        return mojolike.cast(mojolike.cast(a, low, backend="oracle"), "float32", backend="oracle")
    ref = mojolike.Tape(backend="oracle")
    rp = [ref.param(rounded(a)) for a in (w1, b1, w2)]
    h = ref.relu(ref.linear(ref.const(rounded(x)), rp[0], rp[1]))
    hr = ref.cast(ref.cast(h, low), "float32")
    want = ref.mean(ref.matmul(hr, rp[2]))
    assert _bits(loss.data) == _bits(want.data)
    for g, r in zip(grads, ref.backward(want)):
        assert g.dtype == np.float32 and _bits(g) == _bits(r)


@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
def test_the_cast_networks_gradients_are_the_oracles_on_the_cpu_backends(backend):
    x, w1, b1, w2 = _data(5)
    out = []
    for b in ("oracle", backend):
        tape = mojolike.Tape(backend=b)
        params = [tape.param(a) for a in (w1, b1, w2)]
        out.append([_bits(g) for g in tape.backward(_net(tape, tape.const(x), params, "bfloat16"))])
    assert out[0] == out[1]


def test_the_contractions_keep_their_low_precision_inputs_for_the_backward():
    x, w1, b1, _ = _data(1)
    tape = mojolike.Tape(backend="oracle")
    y = tape.linear(tape.cast(tape.const(x), "bfloat16"), tape.cast(tape.param(w1), "bfloat16"))
    kept = y._node.inputs
    assert y.data.dtype == np.float32
    assert [v.data.dtype for v in kept] == [TYPES["bfloat16"]] * 2
    assert sum(v.data.nbytes for v in kept) == (x.nbytes + w1.nbytes) // 2


def test_a_twin_is_the_forwards_value_and_the_gradient_reaches_the_master():
    w = np.float32([[1.00390625, -3.0], [0.1, 7.0]])
    twin = mojolike.cast(w, "float16", backend="oracle")
    tape = mojolike.Tape(backend="oracle")
    p = tape.param(w)
    t = tape.cast(p, "float16", twin=twin)
    assert t.data is twin
    y = tape.matmul(tape.cast(tape.const(np.float32([[2.0, 1.0]])), "float16"), t)
    (g,) = tape.backward(tape.sum(y))
    assert g.tolist() == [[2.0, 2.0], [1.0, 1.0]]


def test_a_cast_to_float32_widens_exactly_and_passes_the_gradient_on():
    tape = mojolike.Tape(backend="cpu-numba")
    w = np.float32([1.5, -2.25, 3.4e38])  # past bfloat16's largest finite value by over half an ulp
    p = tape.param(w)
    wide = tape.cast(tape.cast(p, "bfloat16"), "float32")
    assert wide.data.dtype == np.float32
    assert wide.data.tolist()[:2] == [1.5, -2.25] and np.isinf(wide.data[2])
    assert tape.backward(tape.sum(tape.mul(wide, 2.0)))[0].tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("make, option, words", [
    (lambda t, v: t.add(v, v), "a", "bfloat16 value"),
    (lambda t, v: t.exp(v), "x", "tape.cast(x, 'float32')"),
    (lambda t, v: t.rms_norm(v), "x", "tape.cast(x, 'float32')"),
    (lambda t, v: t.cat([v, v]), "tensors[0]", "tape.cast(x, 'float32')"),
    (lambda t, v: t.cast(v, "bfloat16"), "dtype", "own type"),
    (lambda t, v: t.cast(v, "float16"), "dtype", "not covered"),
    (lambda t, v: t.cast(v, "float32", twin=np.zeros(2, np.float32)), "twin", "float32 value"),
])
def test_low_precision_values_are_refused_by_name_where_an_op_takes_float32(make, option, words):
    tape = mojolike.Tape(backend="oracle")
    v = tape.cast(tape.param(np.float32([1.0, 2.0])), "bfloat16")
    with pytest.raises(Refusal) as e:
        make(tape, v)
    assert e.value.option == option and words in str(e.value)


@pytest.mark.parametrize("twin, words", [
    (np.zeros(2, np.float16), "bfloat16 array of x's shape"),
    (np.zeros(3, ml_dtypes.bfloat16), "bfloat16 array of x's shape"),
    (np.zeros(2, np.float64), "float64"),
])
def test_a_twin_of_another_type_or_shape_is_refused_by_name(twin, words):
    tape = mojolike.Tape(backend="oracle")
    p = tape.param(np.float32([1.0, 2.0]))
    with pytest.raises(Refusal) as e:
        tape.cast(p, "bfloat16", twin=twin)
    assert e.value.option == "twin" and words in str(e.value)
