"""mojolike.models.GPT: parameter names and order, GPT-2's initializer, the same bits on every CPU
backend and thread count, logits and per-token losses without a tape equal to the tape's, and the
safetensors files: a round trip bit for bit, Hugging Face's spellings, and every refusal by name
before any tensor is read."""
from __future__ import annotations

import json
import math
import tracemalloc
from fractions import Fraction

import numba
import numpy as np
import pytest
from conftest import assert_same_bits
from safetensors.numpy import save_file

import mojolike
from mojolike.core.refusals import Refusal
from mojolike.models import GPT
from mojolike.training import gpt, gpt_io
from mojolike.training.gpt import INIT_STD, parameter_shapes, residual_std

TINY = {"vocab_size": 11, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 8}
SMALL = {"vocab_size": 64, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}
BLOCK = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
         "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
         "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")


def refused(option: str, fn, *args, **kwargs) -> Refusal:
    with pytest.raises(Refusal) as info:
        fn(*args, **kwargs)
    assert info.value.option == option, str(info.value)
    return info.value


def randomized(model: GPT, seed: int) -> GPT:
    """The model with every parameter drawn wide (0.3 spread; layer-norm weights around 1), so
    that roundings show in every op; the arrays are updated in place."""
    rng = np.random.default_rng(seed)
    for name, a in model.named_parameters():
        a[...] = rng.standard_normal(a.shape) * 0.3 + (1.0 if ".ln_" in name and
                                                       name.endswith("weight") else 0.0)
    return model


def batch(vocab: int, B: int, T: int, seed: int, ignore_one: bool = True):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (B, T))
    targets = rng.integers(0, vocab, (B, T))
    if ignore_one:
        targets[0, 1] = -100
    return tokens, targets


# -- parameters and the initializer ----------------------------------------------------------------
def test_parameters_have_hugging_faces_names_shapes_and_order():
    model = GPT(**SMALL)
    C = 32
    want = [("transformer.wte.weight", (64, C)), ("transformer.wpe.weight", (16, C))]
    shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C),
              "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,),
              "ln_2.weight": (C,), "ln_2.bias": (C,), "mlp.c_fc.weight": (C, 4 * C),
              "mlp.c_fc.bias": (4 * C,), "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}
    for layer in range(2):
        want += [(f"transformer.h.{layer}.{n}", shapes[n]) for n in BLOCK]
    want += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
    got = [(n, a.shape) for n, a in model.named_parameters()]
    assert got == want
    assert model.NAMES == tuple(n for n, _ in want)
    assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in model.parameters())
    assert [id(a) for a in model.parameters()] == [id(a) for _, a in model.named_parameters()]


def test_without_bias_the_biases_are_absent():
    names = GPT(**SMALL, bias=False).NAMES
    assert not any(n.endswith(".bias") for n in names)
    assert len(names) == 2 + 2 * 6 + 1


def test_without_bias_the_model_trains_saves_and_loads(tmp_path):
    config = dict(TINY, bias=False)
    want = on_tape("oracle", config, 1, 4)
    assert_same(on_tape("cpu-cffi", config, 1, 4), want, "bias=False cpu-cffi")
    model = randomized(GPT(**config, backend="oracle"), 0)
    tokens, _ = batch(11, 1, 4, 1)
    assert_same_bits(model.logits(tokens).reshape(-1), want[1].reshape(-1), "bias=False logits")
    model.save_safetensors(tmp_path / "m.safetensors")
    again = GPT.from_safetensors(tmp_path / "m.safetensors")
    assert again.bias is False and again.NAMES == model.NAMES


def test_the_init_stds_are_the_float32_values_nearest_their_exact_values():
    assert np.float32(INIT_STD) == INIT_STD
    below, above = np.nextafter(np.float32(INIT_STD), np.float32(0)), \
        np.nextafter(np.float32(INIT_STD), np.float32(1))
    exact = Fraction(1, 50)
    assert abs(Fraction(float(INIT_STD)) - exact) < abs(Fraction(float(below)) - exact)
    assert abs(Fraction(float(INIT_STD)) - exact) < abs(Fraction(float(above)) - exact)
    for n_layer in (1, 2, 4, 12, 48):
        r = np.float32(residual_std(n_layer))
        assert float(r) == residual_std(n_layer)
        x = Fraction(1, 2500) / (2 * n_layer)  # (0.02 / sqrt(2 n))^2, exactly
        lo = (Fraction(float(np.nextafter(r, np.float32(0)))) + Fraction(float(r))) / 2
        hi = (Fraction(float(np.nextafter(r, np.float32(1)))) + Fraction(float(r))) / 2
        assert lo * lo < x < hi * hi, n_layer  # sqrt(x) lies between the midpoints around r
    assert residual_std(4) == pytest.approx(0.02 / math.sqrt(8), rel=1e-7)


def test_the_initializer_is_gpt2s_drawn_from_one_stream_per_parameter():
    model = GPT(vocab_size=256, block_size=64, n_layer=4, n_head=4, n_embd=128, seed=3)
    p = dict(model.named_parameters())
    wte = p["transformer.wte.weight"]
    proj = p["transformer.h.1.mlp.c_proj.weight"]  # (512, 128): 65536 draws
    assert abs(float(wte.std()) / 0.02 - 1) < 0.02
    assert abs(float(proj.std()) / (0.02 / math.sqrt(8)) - 1) < 0.02
    assert abs(float(p["transformer.h.0.attn.c_proj.weight"].std()) / (0.02 / math.sqrt(8)) - 1) \
        < 0.03
    assert abs(float(p["transformer.h.0.mlp.c_fc.weight"].std()) / 0.02 - 1) < 0.02
    for name, a in p.items():
        if name.endswith(".bias"):
            assert (a.view(np.uint32) == 0).all(), name  # +0.0, not -0.0
        elif ".ln_" in name:
            assert (a == 1.0).all(), name
    g = mojolike.Generator(3)
    for i, (name, a) in enumerate(model.named_parameters()):
        if name.endswith("weight") and ".ln_" not in name:
            std = residual_std(4) if name.endswith("c_proj.weight") else INIT_STD
            assert_same_bits(a.reshape(-1), g.normal(a.shape, 0.0, std, stream=i).reshape(-1), name)
    again = GPT(vocab_size=256, block_size=64, n_layer=4, n_head=4, n_embd=128, seed=3,
                backend="cpu-cffi")
    for (name, a), b in zip(model.named_parameters(), again.parameters()):
        assert_same_bits(a.reshape(-1), b.reshape(-1), f"cpu-cffi init {name}")


# -- the forward and its gradients ------------------------------------------------------------------
def on_tape(backend: str, config: dict, B: int, T: int, seed: int = 0, dropout_seed=None):
    """(loss, logits, gradients) of a randomized model on `backend`."""
    model = randomized(GPT(**config, backend=backend), seed)
    tokens, targets = batch(config["vocab_size"], B, T, seed + 1)
    tape = mojolike.Tape(backend=backend)
    gen = None if dropout_seed is None else mojolike.Generator(dropout_seed)
    loss = model.forward(tape, tokens, targets, gen)
    logits = loss._node.inputs[0].data.copy()  # the cross_entropy node's input
    grads = tape.backward(loss)
    assert all(g is not None for g in grads)
    return loss.data, logits, grads


def assert_same(a, b, what: str) -> None:
    assert_same_bits(a[0], b[0], f"{what} loss")
    assert_same_bits(a[1].reshape(-1), b[1].reshape(-1), f"{what} logits")
    assert len(a[2]) == len(b[2])
    for i, (u, v) in enumerate(zip(a[2], b[2])):
        assert_same_bits(u.reshape(-1), v.reshape(-1), f"{what} gradient of parameter {i}")


def test_the_tiny_gpt_has_the_oracles_loss_and_gradients_on_cpu_numba_and_cpu_cffi():
    want = on_tape("oracle", TINY, 1, 4)
    assert np.isfinite(want[0]) and want[0] > 0
    for backend in ("cpu-numba", "cpu-cffi"):
        assert_same(on_tape(backend, TINY, 1, 4), want, backend)


def test_the_tiny_gpt_with_dropout_has_the_oracles_bits_on_cpu_numba_and_cpu_cffi():
    config = dict(TINY, dropout=0.25)
    want = on_tape("oracle", config, 1, 4, dropout_seed=7)
    plain = on_tape("oracle", TINY, 1, 4)
    assert want[0] != plain[0]  # the dropout took effect
    for backend in ("cpu-numba", "cpu-cffi"):
        assert_same(on_tape(backend, config, 1, 4, dropout_seed=7), want, backend)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here")
def test_the_gpt_gives_the_same_bits_with_one_and_two_numba_threads():
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = on_tape("cpu-numba", SMALL, 2, 16, seed=5)
        numba.set_num_threads(2)
        two = on_tape("cpu-numba", SMALL, 2, 16, seed=5)
    finally:
        numba.set_num_threads(before)
    assert_same(one, two, "2 threads")


class Untied:
    """The tape, but the head's linear reads its own weight `head` (a copy of wte)."""

    def __init__(self, tape, head):
        self.tape, self.head = tape, head

    def __getattr__(self, name):
        return getattr(self.tape, name)

    def linear(self, x, weight):
        return self.tape.linear(x, self.head)


def test_the_tied_embedding_gets_the_heads_gradient_plus_the_embeddings():
    model = randomized(GPT(**TINY, backend="oracle"), 2)
    tokens, targets = batch(11, 1, 4, 3)
    tape = mojolike.Tape(backend="oracle")
    tied = tape.backward(model.forward(tape, tokens, targets))[0]
    # the same graph with the head reading a separate copy: the two contributions apart
    tape = mojolike.Tape(backend="oracle")
    params = model.register(tape)
    head = tape.param(model.parameters()[0].copy())
    z = gpt._trunk(Untied(tape, head), model, params, tokens, None)
    grads = tape.backward(tape.cross_entropy(z, targets.reshape(-1)))
    d_emb, d_head = grads[0], grads[-1]
    assert np.abs(d_emb).max() > 0 and np.abs(d_head).max() > 0
    assert_same_bits(tied.reshape(-1), np.add(d_head, d_emb).reshape(-1), "d wte")


def test_logits_without_a_tape_equal_the_tape_forwards_logits_bit_for_bit():
    for backend in ("oracle", "cpu-numba", "cpu-cffi"):
        _, logits, _ = on_tape(backend, TINY, 1, 4)
        model = randomized(GPT(**TINY), 0)
        tokens, _ = batch(11, 1, 4, 1)
        got = model.logits(tokens, backend=backend)
        assert got.shape == (1, 4, 11) and got.dtype == np.float32
        assert_same_bits(got.reshape(-1), logits.reshape(-1), f"{backend} logits")


def test_logits_are_batch_and_prefix_invariant():
    model = randomized(GPT(**SMALL, backend="cpu-numba"), 4)
    tokens, _ = batch(64, 3, 16, 9)
    whole = model.logits(tokens)
    alone = model.logits(tokens[1:2])
    prefix = model.logits(tokens[2:3, :5])
    assert_same_bits(alone.reshape(-1), whole[1:2].reshape(-1), "alone")
    assert_same_bits(prefix.reshape(-1), whole[2:3, :5].reshape(-1), "prefix")


def test_evaluation_without_training_has_no_dropout_and_the_logits_bits():
    model = randomized(GPT(**TINY, dropout=0.5, backend="cpu-numba"), 1)
    tokens, targets = batch(11, 2, 6, 2)
    tape = mojolike.Tape(backend="cpu-numba")
    loss = model.forward(tape, tokens, targets, None, False)
    assert_same_bits(loss._node.inputs[0].data.reshape(-1), model.logits(tokens).reshape(-1),
                     "eval logits")


def test_token_losses_are_cross_entropy_none_of_the_logits_and_the_log_probs_negated():
    model = randomized(GPT(**SMALL, backend="cpu-numba"), 6)
    tokens, targets = batch(64, 2, 16, 7)
    rows = model.token_losses(tokens, targets)
    z = model.logits(tokens).reshape(-1, 64)
    want = mojolike.cross_entropy(z, targets.reshape(-1), reduction="none", backend="cpu-numba")
    assert rows.shape == (2, 16)
    assert_same_bits(rows.reshape(-1), want, "token losses")
    assert rows[0, 1] == 0.0  # the ignored target
    logp = mojolike.log_softmax(z, -1, backend="cpu-numba")
    t = targets.reshape(-1)
    keep = t != -100
    np.testing.assert_allclose(-rows.reshape(-1)[keep], logp[np.arange(32)[keep], t[keep]],
                               rtol=1e-5, atol=1e-6)
    tape = mojolike.Tape(backend="cpu-numba")
    loss = model.forward(tape, tokens, targets, reduction="sum")
    assert_same_bits(loss.data, mojolike.fold(rows.reshape(-1), backend="cpu-numba"), "sum")


# -- refusals of the model and its calls -----------------------------------------------------------
def test_bad_config_values_are_refused_by_name():
    refused("n_head", GPT, vocab_size=11, n_head=3, n_embd=8)
    refused("dropout", GPT, dropout=1.0)
    refused("n_layer", GPT, n_layer=0)
    refused("vocab_size", GPT, vocab_size=2.0)
    refused("bias", GPT, bias=1)
    refused("layer_norm_epsilon", GPT, layer_norm_epsilon=-1e-5)
    refused("seed", GPT, seed=-1)
    refused("n_embed", GPT, n_embed=8)


def test_tokens_out_of_range_or_too_long_are_refused_before_the_tape_is_touched():
    model = GPT(**TINY, backend="oracle")
    tape = mojolike.Tape(backend="oracle")
    ok = np.zeros((1, 4), np.int64)
    refused("tokens[2]", model.forward, tape, np.array([[1, 2, 11, 0]]), ok)
    refused("tokens", model.forward, tape, np.zeros((1, 9), np.int64), np.zeros((1, 9), np.int64))
    refused("targets[0]", model.forward, tape, ok, np.array([[-1, 0, 0, 0]]))
    refused("targets", model.forward, tape, ok, np.zeros((1, 3), np.int64))
    refused("reduction", model.forward, tape, ok, ok, reduction="none")
    refused("generator_for_dropout", GPT(**TINY, dropout=0.1).forward, tape, ok, ok)
    assert tape.mark() == 0 and tape.params == ()
    refused("tokens", model.logits, np.zeros((2, 9), np.int64))
    refused("tokens[1]", model.token_losses, np.array([[0, -1]]), np.zeros((1, 2), np.int64))


# -- safetensors files ------------------------------------------------------------------------------
def test_save_and_load_round_trip_bit_for_bit(tmp_path):
    model = randomized(GPT(**SMALL, layer_norm_epsilon=1e-6), 8)
    path = tmp_path / "model.safetensors"
    model.save_safetensors(path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["model_type"] == "gpt2"
    assert {k: cfg[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions")} == \
        {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 64, "n_positions": 16}
    assert cfg["layer_norm_epsilon"] == float(np.float32(1e-6))
    again = GPT.from_safetensors(path, backend="cpu-numba")
    assert again.NAMES == model.NAMES
    assert {k: v for k, v in again.config.items() if k != "seed"} == \
        {k: v for k, v in model.config.items() if k != "seed"}
    for (name, a), b in zip(model.named_parameters(), again.parameters()):
        assert_same_bits(b.reshape(-1), a.reshape(-1), name)
        assert b.flags.writeable and b.flags.c_contiguous and b.dtype == np.float32
    tokens, _ = batch(64, 1, 16, 0)
    assert_same_bits(again.logits(tokens).reshape(-1),
                     model.logits(tokens, backend="cpu-numba").reshape(-1), "logits")


def hf_file(tmp_path, model: GPT, *, prefix=True, head=None, buffers=False, drop=None,
            change=None, config=True) -> str:
    """A safetensors file of `model`'s tensors as Hugging Face spells them (with or without the
    'transformer.' prefix, an lm_head.weight, the attention-mask buffers), optionally one name
    dropped or one tensor replaced; config.json beside it."""
    tensors = {}
    for name, a in model.named_parameters():
        key = name if prefix else name.removeprefix("transformer.")
        tensors[key] = a
    if head is not None:
        tensors["lm_head.weight"] = head
    if buffers:
        T = model.block_size
        for layer in range(model.n_layer):
            tensors[f"h.{layer}.attn.bias"] = np.tril(np.ones((T, T), np.float32))[None, None]
            tensors[f"h.{layer}.attn.masked_bias"] = np.full((), -1e4, np.float32)
    if drop is not None:
        del tensors[drop]
    if change is not None:
        tensors.update(change)
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    if config:
        (tmp_path / "config.json").write_text(json.dumps(gpt_io.hf_config(model)))
    return str(path)


def test_hugging_face_spellings_load_buffers_ignored_and_the_tied_head_accepted(tmp_path):
    model = randomized(GPT(**TINY), 1)
    path = hf_file(tmp_path, model, prefix=False, head=model.parameters()[0].copy(), buffers=True)
    again = GPT.from_safetensors(path)
    for (name, a), b in zip(model.named_parameters(), again.parameters()):
        assert_same_bits(b.reshape(-1), a.reshape(-1), name)


def test_a_config_dict_replaces_config_json(tmp_path):
    model = GPT(**TINY)
    path = hf_file(tmp_path, model, config=False)
    cfg = {"n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 11, "n_positions": 8}
    assert GPT.from_safetensors(path, cfg).config["layer_norm_epsilon"] == float(np.float32(1e-5))


@pytest.fixture
def no_reads(monkeypatch):
    """Fail the test if any tensor's data is read (every read goes through gpt_io._read)."""
    def read(f, key):
        raise AssertionError(f"tensor {key} was read before the refusal")
    monkeypatch.setattr(gpt_io, "_read", read)


def test_file_mismatches_are_refused_by_name_before_any_tensor_is_read(tmp_path, no_reads):
    model = GPT(**TINY)
    w = model.parameters()
    cases = [
        ("transformer.h.0.attn.c_atn.weight",
         {"change": {"transformer.h.0.attn.c_atn.weight": w[4]}}),  # an unexpected name
        ("transformer.h.0.mlp.c_fc.bias", {"drop": "transformer.h.0.mlp.c_fc.bias"}),  # missing
        ("transformer.h.0.attn.c_attn.weight",
         {"change": {"transformer.h.0.attn.c_attn.weight": np.zeros((24, 8), np.float32)}}),
        ("transformer.wpe.weight",
         {"change": {"transformer.wpe.weight": w[1].astype(np.float16)}}),
        ("transformer.ln_f.bias",
         {"change": {"transformer.ln_f.bias": w[-1].astype(np.float64)}}),
        ("lm_head.weight", {"head": np.zeros((11, 4), np.float32)}),
        ("wte.weight", {"change": {"wte.weight": w[0]}}),  # stored twice
        ("h.1.attn.bias", {"change": {"h.1.attn.bias": np.zeros((1, 1, 8, 8), np.float32)}}),
    ]
    for option, kw in cases:
        for p in tmp_path.iterdir():
            p.unlink()
        r = refused(option, GPT.from_safetensors, hf_file(tmp_path, model, **kw))
        if kw.get("change", {}).get("transformer.wpe.weight") is not None:
            assert "mixed precision" in str(r) and "F16" in str(r)


def test_an_untied_head_is_refused(tmp_path):
    model = GPT(**TINY)
    head = model.parameters()[0].copy()
    head[0, 0] += 1
    r = refused("lm_head.weight", GPT.from_safetensors, hf_file(tmp_path, model, head=head))
    assert "untied" in str(r)


def test_config_problems_are_refused_by_name_before_any_tensor_is_read(tmp_path, no_reads):
    model = GPT(**TINY)
    path = hf_file(tmp_path, model, config=False)
    refused("config.json", GPT.from_safetensors, path)  # absent
    (tmp_path / "config.json").write_text("{not json")
    refused("config.json", GPT.from_safetensors, path)
    (tmp_path / "config.json").write_text("[1, 2]")
    refused("config.json", GPT.from_safetensors, path)
    good = gpt_io.hf_config(model)
    for key, value, option in (("n_head", 3, 'config.json["n_head"]'),
                               ("n_positions", 0, 'config.json["n_positions"]'),
                               ("n_layer", "1", 'config.json["n_layer"]'),
                               ("n_embd", None, 'config.json["n_embd"]'),
                               ("layer_norm_epsilon", -1.0, 'config.json["layer_norm_epsilon"]'),
                               ("activation_function", "gelu", 'config.json["activation_function"]'),
                               ("model_type", "gpt_neo", 'config.json["model_type"]')):
        bad = dict(good)
        if value is None:
            del bad[key]
        else:
            bad[key] = value
        (tmp_path / "config.json").write_text(json.dumps(bad))
        refused(option, GPT.from_safetensors, path)
    # a config that fits json but not the file: the shapes are refused by name
    (tmp_path / "config.json").write_text(json.dumps(dict(good, n_positions=16)))
    refused("transformer.wpe.weight", GPT.from_safetensors, path)
    refused('config["vocab_size"]', GPT.from_safetensors, path, {"n_layer": 1})
    refused("config", GPT.from_safetensors, path, [1])
    refused("path", GPT.from_safetensors, str(tmp_path / "absent.safetensors"))
    (tmp_path / "junk.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad}....")
    refused("path", GPT.from_safetensors, str(tmp_path / "junk.safetensors"))


def test_a_refused_file_allocates_nothing_like_its_tensors(tmp_path):
    # an F16 tensor stored last in a file of 8 MB of float32 tensors: the refusal comes from the
    # header, so the load allocates a small fraction of that
    cfg = {"vocab_size": 8192, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 256, "bias": True}
    tensors = {n: np.zeros(s, np.float32) for n, s in parameter_shapes(cfg).items()}
    tensors["transformer.ln_f.bias"] = np.zeros(256, np.float16)
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    size = sum(a.nbytes for a in tensors.values())
    assert size > 8e6
    del tensors
    config = {"n_layer": 1, "n_head": 2, "n_embd": 256, "vocab_size": 8192, "n_positions": 8}
    tracemalloc.start()
    try:
        refused("transformer.ln_f.bias", GPT.from_safetensors, str(path), config)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size / 50, peak
