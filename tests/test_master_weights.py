"""with_master_weights: TinyLM's forward reads bfloat16 / float16 twins of its float32
masters, gives the float32 tape's bits on the rounded weights and activations, and an
optimizer given the twins keeps them equal to the rounded masters step after step."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mojolike
from mojolike import data
from mojolike.core.refusals import Refusal
from mojolike.mixed_precision import with_master_weights
from mojolike.models import GPT, TinyLM

TYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
SMALL = {"d_model": 8, "d_hidden": 16, "vocab": 256, "chunk_size": 1024}


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32).tolist()


def _rounded(a, low):
    return mojolike.cast(mojolike.cast(a, low, backend="oracle"), "float32", backend="oracle")


def _assert_twins_are_the_rounded_masters(model, low):
    for p, t in zip(model.parameters(), model.twins()):
        assert t.view(np.uint16).tolist() == mojolike.cast(
            p, low, backend="oracle").view(np.uint16).tolist()


def _reference(masters, low, tokens, targets, eps=None):
    """TinyLM's forward written out on a float32 oracle tape: the weights rounded to `low`
    and widened, and each contraction's input activation rounded where the model casts it
    (`low` None: the float32 model, nothing rounded)."""
    tape = mojolike.Tape(backend="oracle")
    emb, n1, w1, b1, w2, b2, n2, head = (tape.param(p if low is None else _rounded(p, low))
                                         for p in masters)
    r = (lambda v: v) if low is None else (lambda v: tape.cast(tape.cast(v, low), "float32"))
    x = tape.embedding(tokens.reshape(-1), emb)
    h = tape.relu(r(tape.linear(r(tape.rms_norm(x, n1, eps)), w1, b1)))  # relu reads it rounded
    m = tape.linear(r(h), w2, b2)  # relu's result is of the low type already: r(h) is h
    z = tape.rms_norm(tape.add(x, m), n2, eps)
    loss = tape.chunked_lm_head_loss(z, head, targets.reshape(-1), chunk_size=1024)
    return loss, tape.backward(loss)


@pytest.mark.parametrize("low,backend", [(t, b) for t in sorted(TYPES)
                                         for b in ("oracle", "cpu-numba", "cpu-cffi")]
                         + [("bfloat16", "cuda-sim")])
def test_the_loss_and_gradients_are_the_float32_tapes_on_the_rounded_values(low, backend):
    model = with_master_weights(TinyLM(**SMALL, seed=3), low)
    tokens, targets = data.batch(0, batch_size=1, seq_len=4)
    tape = mojolike.Tape(backend=backend)
    loss = model.forward(tape, tokens, targets)
    grads = tape.backward(loss)
    want, want_grads = _reference(model.parameters(), low, tokens, targets)
    assert _bits(loss.data) == _bits(want.data)
    assert len(grads) == len(want_grads) == 8
    for g, w in zip(grads, want_grads):
        assert g.dtype == np.float32 and _bits(g) == _bits(w)


def test_the_twins_are_the_rounded_masters_and_the_float32_forward_is_unchanged():
    plain, mixed = TinyLM(**SMALL, seed=1), with_master_weights(TinyLM(**SMALL, seed=1), "bfloat16")
    assert plain.precision == "float32" and plain.twins() == [] and mixed.precision == "bfloat16"
    for p, t in zip(mixed.parameters(), mixed.twins()):
        assert t.dtype == TYPES["bfloat16"] and t.shape == p.shape
    _assert_twins_are_the_rounded_masters(mixed, "bfloat16")
    tokens, targets = data.batch(1, batch_size=2, seq_len=4)
    a, b = mojolike.Tape(backend="oracle"), mojolike.Tape(backend="oracle")
    la, lb = plain.forward(a, tokens, targets), mixed.forward(b, tokens, targets)
    assert la.data.dtype == lb.data.dtype == np.float32 and _bits(la.data) != _bits(lb.data)
    assert _bits(la.data) == _bits(_reference(plain.parameters(), None, tokens, targets)[0].data)


@pytest.mark.parametrize("low", sorted(TYPES))
def test_an_adamw_run_keeps_the_twins_equal_to_the_rounded_masters_on_every_cpu_backend(low):
    tokens, targets = data.batch(2, batch_size=2, seq_len=4)
    losses = {}
    for backend in ("oracle", "cpu-numba", "cpu-cffi"):
        model = with_master_weights(TinyLM(**SMALL, seed=5), low)
        opt = mojolike.AdamW(model.parameters(), lr=1e-2, twins=model.twins(), backend=backend)
        seen = []
        for _ in range(3):
            tape = mojolike.Tape(backend=backend)
            loss = model.forward(tape, tokens, targets)
            opt.step(tape.backward(loss))
            seen.append(tuple(_bits(np.atleast_1d(loss.data))))
            _assert_twins_are_the_rounded_masters(model, low)
        losses[backend] = seen
    assert losses["oracle"] == losses["cpu-numba"] == losses["cpu-cffi"]
    assert len(set(losses["oracle"])) == 3  # the steps moved the loss


def test_a_frozen_parameter_keeps_its_float32_storage_and_a_contraction_rounds_it():
    model = with_master_weights(TinyLM(**SMALL, seed=2), "float16",
                                frozen=("norm1.weight", "fc1.weight"))
    twins = model.twins()
    assert twins[1] is None and twins[2] is None and all(t is not None for t in twins[3:])
    tokens, targets = data.batch(0, batch_size=1, seq_len=4)
    tape = mojolike.Tape(backend="oracle")
    loss = model.forward(tape, tokens, targets)
    want, _ = _reference(model.parameters(), "float16", tokens, targets)  # norm1 is ones: exact
    assert _bits(loss.data) == _bits(want.data)
    assert model.parameters()[2].dtype == np.float32


@pytest.mark.parametrize("call,option", [
    (lambda: with_master_weights(object(), "bfloat16"), "model"),
    (lambda: with_master_weights(with_master_weights(TinyLM(d_model=4), "float16"), "float16"),
     "model"),
    (lambda: with_master_weights(TinyLM(d_model=4), "float32"), "dtype"),
    (lambda: with_master_weights(TinyLM(d_model=4), np.float64), "dtype"),
    (lambda: with_master_weights(TinyLM(d_model=4), "bfloat16", frozen=["fc3.weight"]), "frozen"),
    (lambda: with_master_weights(TinyLM(d_model=4), "bfloat16", frozen="fc1.weight"), "frozen"),
    (lambda: with_master_weights(TinyLM(d_model=4), "bfloat16", cast_head=True), "cast_head"),
])
def test_what_master_weights_do_not_cover_is_refused_by_name(call, option):
    with pytest.raises(Refusal) as info:
        call()
    assert info.value.option == option
    assert info.value.entry_point == "mojolike.mixed_precision.with_master_weights"


GPT_SMALL = {"vocab_size": 32, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 8}


@pytest.mark.parametrize("low", sorted(TYPES))
def test_a_gpt_with_master_weights_steps_to_one_loss_curve_on_every_cpu_backend(low):
    r = np.random.default_rng(3)
    tokens, targets = r.integers(0, 32, (2, 8)), r.integers(0, 32, (2, 8))
    curves = {}
    for backend in ("oracle", "cpu-numba", "cpu-cffi"):
        model = with_master_weights(GPT(**GPT_SMALL, seed=1, backend=backend), low)
        opt = mojolike.AdamW(model.parameters(), lr=1e-2, twins=model.twins(), backend=backend)
        curve = []
        for _ in range(2):
            tape = mojolike.Tape(backend=backend)
            loss = model.forward(tape, tokens, targets)
            # the eager forward (logits) reads the same twins and casts as the tape's
            eager = mojolike.cross_entropy(model.logits(tokens).reshape(-1, 32), targets.reshape(-1),
                                           backend=backend)
            assert _bits(eager) == _bits(loss.data)
            opt.step(tape.backward(loss))
            curve.append(tuple(_bits(np.atleast_1d(loss.data))))
            _assert_twins_are_the_rounded_masters(model, low)
        curves[backend] = curve
    assert curves["oracle"] == curves["cpu-numba"] == curves["cpu-cffi"]
    plain = GPT(**GPT_SMALL, seed=1, backend="oracle")
    tape = mojolike.Tape(backend="oracle")
    assert _bits(plain.forward(tape, tokens, targets).data) != list(curves["oracle"][0])


@pytest.mark.parametrize("low, backend, frozen", [
    ("bfloat16", "oracle", ()), ("bfloat16", "cpu-numba", ()), ("float16", "cpu-cffi", ()),
    ("bfloat16", "cpu-numba", ("transformer.wte.weight", "transformer.h.0.mlp.c_fc.weight",
                               "transformer.h.0.ln_1.weight")),
])
def test_a_gpt_with_master_weights_generates_the_log_probs_of_its_token_losses(low, backend,
                                                                                frozen):
    # the KV-cache decoder reads the twins and casts as the training forward: each log-prob
    # is -token_losses at its position bit for bit, greedy and sampled, prompts of two lengths
    model = with_master_weights(GPT(**GPT_SMALL, seed=2, backend=backend), low, frozen=frozen)
    prompts = [[1, 2, 3], [4]]
    for options in ({"temperature": 0}, {"temperature": 0.9, "top_k": 7, "seed": 5}):
        tokens, logprobs = model.generate(prompts, 4, **options)
        for seq, lps, pr in zip(tokens, logprobs, prompts):
            t = np.int64([seq])
            losses = model.token_losses(t[:, :-1], t[:, 1:])[0]
            assert _bits(np.float32(lps)) == _bits(-losses[len(pr) - 1:])
    plain = GPT(**GPT_SMALL, seed=2, backend=backend)  # the twins are what the decoder read
    assert plain.generate(prompts, 4, **options)[1] != logprobs


def test_a_refused_call_leaves_the_model_in_float32():
    model = TinyLM(d_model=4)
    with pytest.raises(Refusal):
        with_master_weights(model, "bfloat16", frozen=["nope"])
    assert model.precision == "float32" and model.twins() == []
