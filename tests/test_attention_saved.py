"""scaled_dot_product_attention(..., return_saved=True) and its backward's `saved=`: the
backward does not run the forward again, gives the same bits as the backward that does, and
refuses by name a `saved` made by any other call. Under mojolike.torch.certified() the aten
backward finds its forward's saved statistics the same way."""
from __future__ import annotations

import numpy as np
import pytest

import mojolike
from mojolike.ops import attention as attn

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi")


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


Q, K, V, DO = data((2, 2, 9, 5), 1), data((2, 2, 11, 5), 2), data((2, 2, 11, 3), 3), data((2, 2, 9, 3), 4)


def same(a, b):
    assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("options", [
    {"is_causal": True},
    {"attn_mask": data((9, 11), 5)},
    {"dropout_p": 0.25, "stream": 3},
], ids=["causal", "float-mask", "dropout"])
def test_a_backward_from_saved_gives_the_bits_of_one_that_runs_the_forward_again(backend, options):
    on = {"backend": backend, **options}
    if "dropout_p" in options:
        on["generator"] = mojolike.Generator(7)
    o, saved = mojolike.scaled_dot_product_attention(Q, K, V, return_saved=True, **on)
    same(o, mojolike.scaled_dot_product_attention(Q, K, V, **on))
    again = mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, **on)
    for got, want in zip(mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, saved=saved, **on),
                         again):
        same(got, want)


def test_saved_holds_copies_so_later_changes_to_the_callers_arrays_cannot_reach_it():
    q = Q.copy()
    o, saved = mojolike.scaled_dot_product_attention(q, K, V, is_causal=True, return_saved=True)
    want = mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, is_causal=True)
    o[...] = 0
    q[0, 0, 0, 0] += 1
    with pytest.raises(mojolike.Refusal) as e:  # the changed query is not the forward's
        mojolike.scaled_dot_product_attention_backward(DO, q, K, V, is_causal=True, saved=saved)
    assert e.value.option == "saved" and "different query" in str(e.value)
    for got, w in zip(mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, is_causal=True,
                                                                     saved=saved), want):
        same(got, w)


@pytest.mark.parametrize("change,word", [
    ({"key": Q[:, :, :, :5] + 1}, "different key"),
    ({"value": V + 1}, "different value"),
    ({"is_causal": False}, "different is_causal"),
    ({"scale": 0.5}, "different scale"),
    ({"attn_mask": np.ones((9, 11), bool), "is_causal": False}, "different attn_mask"),
], ids=["key", "value", "is_causal", "scale", "attn_mask"])
def test_saved_from_another_call_is_refused_by_name_and_nothing_is_written(change, word):
    args = {"query": Q, "key": K, "value": V, "is_causal": True}
    _, saved = mojolike.scaled_dot_product_attention(**args, return_saved=True)
    args.update(change)
    if change.get("key") is not None:
        args["key"] = data(K.shape, 9)
    before = [a.copy() for a in (DO, Q, K, V)]
    with pytest.raises(mojolike.Refusal) as e:
        mojolike.scaled_dot_product_attention_backward(DO, **args, saved=saved)
    assert e.value.entry_point == "mojolike.scaled_dot_product_attention_backward"
    assert e.value.option == "saved" and word in str(e.value)
    for a, b in zip((DO, Q, K, V), before):
        same(a, b)


def test_saved_from_another_dropout_stream_is_refused():
    on = {"dropout_p": 0.25, "generator": mojolike.Generator(7)}
    _, saved = mojolike.scaled_dot_product_attention(Q, K, V, stream=3, return_saved=True, **on)
    with pytest.raises(mojolike.Refusal, match="different stream"):
        mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, stream=4, saved=saved, **on)


def test_saved_must_be_what_the_forward_returned_and_return_saved_a_bool():
    with pytest.raises(mojolike.Refusal) as e:
        mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, saved=(Q, K))
    assert e.value.option == "saved"
    gen = mojolike.Generator(7)
    with pytest.raises(mojolike.Refusal) as e:
        mojolike.scaled_dot_product_attention(Q, K, V, dropout_p=0.25, generator=gen,
                                              return_saved=1)
    assert e.value.option == "return_saved"
    assert gen.state_dict()["counter"] == 0  # the refused call took no stream


def test_a_forward_that_takes_the_generators_stream_saves_that_stream():
    gen = mojolike.Generator(7)
    gen.next_stream()
    on = {"dropout_p": 0.25, "generator": gen}
    _, saved = mojolike.scaled_dot_product_attention(Q, K, V, return_saved=True, **on)
    want = mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, stream=1, **on)
    for got, w in zip(mojolike.scaled_dot_product_attention_backward(DO, Q, K, V, stream=1,
                                                                     saved=saved, **on), want):
        same(got, w)


def test_low_precision_inputs_use_saved_like_float32_ones():
    ml = pytest.importorskip("ml_dtypes")
    q, k, v = (a.astype(ml.bfloat16) for a in (Q, K, V))
    _, saved = mojolike.scaled_dot_product_attention(q, k, v, is_causal=True, return_saved=True)
    want = mojolike.scaled_dot_product_attention_backward(DO, q, k, v, is_causal=True)
    for got, w in zip(mojolike.scaled_dot_product_attention_backward(DO, q, k, v, is_causal=True,
                                                                     saved=saved), want):
        same(got, w)


def test_the_certified_torch_backward_runs_no_second_forward(monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    import mojolike.torch
    forwards = []
    real = attn.forward
    monkeypatch.setattr(attn, "forward", lambda *a, **kw: forwards.append(1) or real(*a, **kw))
    q, k, v, do = (data((2, 2, 9, 8), seed) for seed in (11, 12, 13, 14))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    with mojolike.torch.certified(backend="cpu-numba"):
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(torch.tensor(do))
    assert len(forwards) == 1
    want = mojolike.scaled_dot_product_attention_backward(do, q, k, v, is_causal=True)
    for t, w in zip((tq, tk, tv), want):
        same(t.grad.numpy(), w)
