"""The reference model and its data: TinyLM starts from torch's initializer formulas, its forward
and backward give the oracle's bits on the CPU backends and agree with a torch transcription,
dropout is keyed by position, and the text's windows are fixed by position and tile the text.

Torch comparison: the model's sums (GEMMs over 8 or 16 terms, softmax over 256 classes, the
weight gradients over 16 rows, RMSNorm's mean squares) run in torch's own order and exp/log,
so the loss is compared within 1e-5 relative and every gradient within 1e-4 relative plus 5e-7
absolute (on this case the largest difference seen is 7.5e-8, gradients being up to 0.2); a
wrong rule moves them by orders of magnitude more.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import CPU_BACKENDS
from conftest import assert_same_bits as _same

from mojolike import Generator, Refusal, Tape
from mojolike.training import data
from mojolike.training.models import TinyLM, linear_bound

CONFIG = dict(d_model=8, d_hidden=16, dropout=0.1, seed=3)


def assert_same_bits(got, want, what=""):
    _same(np.asarray(got).reshape(-1), np.asarray(want).reshape(-1), what)


class Spy(Generator):
    """A Generator that remembers what its dropouts drew."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.seen = []

    def dropout(self, x, p, offset=0, stream=None, **unknown):
        y, key = super().dropout(x, p, offset=offset, stream=stream, **unknown)
        self.seen.append((y, key))
        return y, key


def step(backend, tokens, targets, **kw):
    model = TinyLM(**CONFIG, backend=backend)
    tape = Tape(backend=backend)
    gen = Spy(11, backend=backend)
    loss = model.forward(tape, tokens, targets, gen, **kw)
    return model, loss, tape.backward(loss), gen


# -- initialization ------------------------------------------------------------------------------
@pytest.mark.parametrize("fan_in", [1, 3, 8, 16, 64, 100, 512, 768, 3072])
def test_the_linear_bound_is_torchs_kaiming_uniform_with_a_sqrt5_rounded_once(fan_in):
    gain = torch.nn.init.calculate_gain("leaky_relu", math.sqrt(5))
    weight_bound = math.sqrt(3.0) * gain / math.sqrt(fan_in)  # torch's kaiming_uniform_
    bias_bound = 1 / math.sqrt(fan_in)  # torch's nn.Linear.reset_parameters
    b = linear_bound(fan_in)
    assert b == float(np.float32(weight_bound)) == float(np.float32(bias_bound))
    assert float(np.float32(b)) == b


def test_initial_parameters_follow_torchs_initializers_with_exact_bounds():
    model = TinyLM(d_model=64, d_hidden=96, seed=5)
    p = dict(model.named_parameters())
    assert [n for n, _ in model.named_parameters()] == list(TinyLM.NAMES)
    g = Generator(5)
    assert_same_bits(p["embed.weight"], g.normal((256, 64), stream=0), "nn.Embedding: normal(0, 1)")
    e = p["embed.weight"]
    assert abs(float(e.mean())) < 0.03 and abs(float(e.std()) - 1) < 0.03
    for name in ("norm1.weight", "norm2.weight"):
        assert p[name].tolist() == [1.0] * 64  # nn.RMSNorm
    for i, (name, fan_in) in enumerate([("fc1.weight", 64), ("fc1.bias", 64), ("fc2.weight", 96),
                                        ("fc2.bias", 96)], start=2):
        a, b = p[name], linear_bound(fan_in)
        # the Generator's exact-bound initializer: xavier with fan_out = 5 fan_in has bound
        # sqrt(6 / (6 fan_in)) = 1/sqrt(fan_in), rounded once
        want = g.xavier_uniform(a.shape, fan_in=fan_in, fan_out=5 * fan_in, stream=i)
        assert_same_bits(a, want, name)
        assert np.abs(a).max() <= b
    w = p["fc1.weight"]
    b = linear_bound(64)
    assert np.abs(w).max() > 0.99 * b and abs(float(w.var()) - b * b / 3) < 0.1 * b * b / 3
    torch.manual_seed(0)
    ref = torch.nn.Linear(64, 96)  # torch's draw has the same support
    assert float(ref.weight.detach().abs().max()) <= b and float(ref.bias.detach().abs().max()) <= b
    h = p["head.weight"]
    assert h.shape == (256, 64) and np.abs(h).max() <= linear_bound(64)
    assert_same_bits(h, g.xavier_uniform((256, 64), fan_in=64, fan_out=320, stream=7), "head")


def test_the_same_seed_gives_the_same_parameters_and_another_seed_others():
    a, b, c = TinyLM(d_model=8, seed=1), TinyLM(d_model=8, seed=1), TinyLM(d_model=8, seed=2)
    for x, y, z in zip(a.parameters(), b.parameters(), c.parameters()):
        assert_same_bits(x, y)
    assert not np.array_equal(a.parameters()[0], c.parameters()[0])


# -- forward and backward -----------------------------------------------------------------------
TOKENS, TARGETS = data.batch(5, batch_size=2, seq_len=8)


@pytest.fixture(scope="module")
def oracle_step():
    return step("oracle", TOKENS, TARGETS)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_training_step_gives_the_oracles_bits(oracle_step, backend):
    _, want_loss, want, _ = oracle_step
    _, loss, got, _ = step(backend, TOKENS, TARGETS)
    assert_same_bits(loss.data, want_loss.data, f"loss on {backend}")
    for name, g, w in zip(TinyLM.NAMES, got, want):
        assert_same_bits(g, w, f"{name} on {backend}")


def test_a_training_step_agrees_with_a_torch_transcription(oracle_step):
    model, loss, grads, gen = oracle_step
    (_, key), = gen.seen
    mask, _ = Generator(11).dropout(np.ones((16, 8), np.float32), key.p, offset=key.offset,
                                    stream=key.stream)
    P = [torch.from_numpy(a.copy()).requires_grad_() for a in model.parameters()]
    emb, n1, w1, b1, w2, b2, n2, head = P
    x = F.embedding(torch.from_numpy(TOKENS.reshape(-1)), emb)
    m = F.linear(torch.relu(F.linear(F.rms_norm(x, (8,), n1), w1, b1)), w2, b2)
    z = F.rms_norm(x + m * torch.from_numpy(mask), (8,), n2)
    theirs = F.cross_entropy(F.linear(z, head), torch.from_numpy(TARGETS.reshape(-1)))
    theirs.backward()
    np.testing.assert_allclose(loss.item(), float(theirs.detach()), rtol=1e-5)
    assert abs(loss.item() - math.log(256)) < 0.5
    for name, g, t in zip(TinyLM.NAMES, grads, P):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-4, atol=5e-7, err_msg=name)


def test_dropout_is_keyed_by_position_so_a_microbatch_draws_what_the_batch_draws():
    _, _, _, whole = step("cpu-numba", TOKENS, TARGETS, dropout_stream=4)
    _, _, _, second = step("cpu-numba", TOKENS[1:], TARGETS[1:], dropout_stream=4, row_offset=1)
    (y, _), = whole.seen
    (y1, key1), = second.seen
    assert (key1.stream, key1.offset, key1.n) == (4, 8 * 8, 8 * 8)
    assert_same_bits(y1, y[8:], "rows 8..15 of the batch's dropout")
    assert (y1 == 0).any() and (y1 != 0).any()


def test_evaluation_draws_no_dropout_and_consumes_no_stream():
    gen = Generator(11)
    model, tape = TinyLM(**CONFIG), Tape()
    model.forward(tape, TOKENS, TARGETS, gen, training=False)
    model.forward(tape, TOKENS, TARGETS, None, training=False)
    assert gen.state_dict()["counter"] == 0
    model.forward(tape, TOKENS, TARGETS, gen)
    assert gen.state_dict()["counter"] == 1


def test_the_model_registers_its_own_arrays_once_per_tape():
    model, tape = TinyLM(d_model=8), Tape()
    handles = model.register(tape)
    assert all(h.data is a for h, a in zip(handles, model.parameters()))
    m = tape.mark()
    assert model.register(tape) == handles and tape.mark() == m
    model.forward(tape, TOKENS, TARGETS, training=False)
    assert tape.params == handles
    tape.reset_to(0)
    again = model.register(tape)
    assert again != handles and tape.params == again


@pytest.mark.parametrize("kw,option", [
    (dict(tokens=TOKENS + 256), "tokens[0]"),
    (dict(tokens=TOKENS.reshape(-1)), "tokens"),
    (dict(tokens=TOKENS.astype(np.float32)), "tokens"),
    (dict(targets=TARGETS[:1]), "targets"),
    (dict(targets=np.where(TARGETS == TARGETS[0, 0], -1, TARGETS)), "targets[0]"),
    (dict(generator_for_dropout=None), "generator_for_dropout"),
    (dict(training=1), "training"),
    (dict(reduction="none"), "reduction"),
    (dict(tape=object()), "tape"),
    (dict(row_offset=-1), "row_offset"),
    (dict(row_offset=2**60), "row_offset"),
    (dict(dropout_stream=-1), "dropout_stream"),
    (dict(num_items=0), "num_items"),
    (dict(num_items=4, reduction="sum"), "num_items"),
])
def test_bad_forward_input_is_refused_before_the_tape_is_touched(kw, option):
    model, tape = TinyLM(**CONFIG), Tape()
    args = dict(tape=tape, tokens=TOKENS, targets=TARGETS, generator_for_dropout=Generator(0))
    args.update(kw)
    with pytest.raises(Refusal) as e:
        model.forward(**args)
    assert e.value.option == option and e.value.entry_point == "mojolike.models.TinyLM.forward"
    assert tape.mark() == 0


def test_targets_may_be_ignored_as_in_torch():
    t = TARGETS.copy()
    t[0, :3] = -100
    _, loss, grads, _ = step("cpu-numba", TOKENS, t)
    assert math.isfinite(loss.item()) and all(g is not None for g in grads)


@pytest.mark.parametrize("kw,option", [(dict(d_model=0), "d_model"), (dict(dropout=1.0), "dropout"),
                                       (dict(chunk_size=1500), "chunk_size"), (dict(eps=-1.0), "eps"),
                                       (dict(width=4), "width")])
def test_bad_model_configurations_are_refused_by_name(kw, option):
    with pytest.raises(Refusal) as e:
        TinyLM(**kw)
    assert e.value.option == option


# -- the data stream -----------------------------------------------------------------------------
def test_the_stream_is_the_shipped_text_after_its_header_line():
    s = data.default_stream()
    raw = data.SHIPPED.read_bytes()
    header, text = raw.split(b"\n", 1)
    assert b"pydoc_data.topics" in header and b"3.11.7" in header and b"PSF License" in header
    assert len(s) == len(text) == 131072
    assert s.tokens.tobytes() == text and s.md5 == hashlib.md5(text).hexdigest()
    assert s.tokens.max() < data.VOCAB == 256
    assert data.TextStream().md5 == s.md5  # read again: the same bytes
    text.decode("utf-8")  # cut between characters


def test_the_shipped_text_is_the_start_of_the_pydoc_topics_of_python_3_11_7():
    import sys
    if sys.version_info[:3] != (3, 11, 7):
        pytest.skip("the excerpt's source is Python 3.11.7's pydoc_data; this Python ships others")
    assert data.shipped_text() == data.pydoc_text()[:131072]


def test_batches_are_fixed_by_step_and_position():
    a = data.batch(7, 4, 32)
    b = data.TextStream().batch(7, 4, 32)
    for x, y in zip(a, b):
        assert x.dtype == np.int64 and x.shape == (4, 32) and np.array_equal(x, y)
    s = data.default_stream()
    tok, tgt = s.windows(7 * 4 + 2, 2, 32)  # the second half of step 7 as a microbatch
    assert np.array_equal(tok, a[0][2:]) and np.array_equal(tgt, a[1][2:])
    assert not np.array_equal(data.batch(8, 4, 32)[0], a[0])


@pytest.mark.parametrize("seq_len", [1, 7, 64, 1000])
def test_the_windows_tile_the_text_and_wrap_around(seq_len):
    s = data.default_stream()
    w = s.num_windows(seq_len)
    assert w == (len(s) - 1) // seq_len
    tok, tgt = s.windows(0, w, seq_len)
    assert np.array_equal(tok.reshape(-1), s.tokens[:w * seq_len])
    assert np.array_equal(tgt.reshape(-1), s.tokens[1:w * seq_len + 1])
    for a, b in zip(s.windows(w, 2, seq_len), s.windows(0, 2, seq_len)):
        assert np.array_equal(a, b)
    big = 10**30  # positions past int64 still map to windows exactly
    assert np.array_equal(s.windows(big, 1, seq_len)[0], s.windows(big % w, 1, seq_len)[0])


def test_a_small_text_cuts_into_the_windows_it_says():
    s = data.TextStream(b"abcdefg")
    tok, tgt = s.batch(1, 2, 2)  # windows 2 and 3 mod 3 = 0
    assert bytes(tok.astype("u1").reshape(-1)) == b"efab" and bytes(tgt.astype("u1").reshape(-1)) == b"fgbc"


@pytest.mark.parametrize("call,option", [
    (lambda: data.batch(-1, 2, 8), "step"),
    (lambda: data.batch(0, 0, 8), "batch_size"),
    (lambda: data.batch(0, 2, 0), "seq_len"),
    (lambda: data.TextStream(b"ab").batch(0, 1, 2), "seq_len"),
    (lambda: data.TextStream("text"), "text"),
    (lambda: data.batch(0, 2, 8, shuffle=True), "shuffle"),
])
def test_bad_data_requests_are_refused_by_name(call, option):
    with pytest.raises(Refusal) as e:
        call()
    assert e.value.option == option
