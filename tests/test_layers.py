"""The public layers: every linear cell is mojolike.dot of its rows, rows never depend on their
batch, the chunked head equals the unfused composition in bits and in bounded memory, and bad
input is refused by name before anything is written."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from conftest import CPU_BACKENDS, assert_same_bits
from mojolike.oracles.fold import pairwise

import mojolike
from mojolike import Refusal
from mojolike.ops import head as _layers_head
from mojolike.ops.head import _PairwiseCounter


def data(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("k", [1, 2, 31, 32, 33, 100, 1023, 1024, 1025, 2047, 2048, 2049, 3000, 5000])
def test_every_linear_cell_is_the_dot_of_its_rows(backend, k):
    rng = np.random.default_rng(k)
    m, n = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    x, w, b = data((m, k), k), data((n, k), k + 1), data(n, k + 2)
    y = mojolike.linear(x, w, b, backend=backend)
    want = np.float32([[np.float32(mojolike.dot(x[i], w[j], backend="cpu-numba")) + b[j]
                        for j in range(n)] for i in range(m)])
    assert_same_bits(y, want, f"linear {m}x{n}x{k} on {backend}")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_row_gives_the_same_bits_at_every_batch_size(backend):
    x, w = data((64, 300), 1), data((50, 300), 2)
    full = mojolike.linear(x, w, backend=backend)
    for m in range(1, 64):
        assert_same_bits(mojolike.linear(x[:m], w, backend=backend), full[:m], f"{m} rows")
    for i in (0, 31, 63):
        assert_same_bits(mojolike.linear(x[i], w, backend=backend), full[i], f"row {i} alone, 1-D")


@pytest.fixture(params=["row blocks", "vocabulary chunks"])
def head_way(request, monkeypatch):
    """Both ways through the vocabulary: whole-vocabulary row blocks (any block of at least
    one row) or three walks over vocabulary chunks (never row blocks)."""
    monkeypatch.setattr(_layers_head, "MIN_BLOCK_ROWS", 1 if request.param == "row blocks" else 1 << 60)
    return request.param


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("size", [1024, 2048, 4096])
def test_the_chunked_head_equals_the_unfused_composition(backend, size, head_way):
    h, w = data((6, 20), 3), data((5000, 20), 4)
    t = np.random.default_rng(5).integers(0, 5000, 6)
    t[2] = -100
    on = dict(backend=backend)
    z = mojolike.linear(h, w, **on)
    loss, dz = mojolike.cross_entropy(z, t, label_smoothing=0.05, return_grad=True, **on)
    dh, dw, _ = mojolike.linear_backward(dz, h, w, bias=False, **on)
    got = mojolike.chunked_lm_head_loss(h, w, t, label_smoothing=0.05, return_grad=True,
                                        chunk_size=size, **on)
    assert_same_bits(got[0], loss, "loss")
    assert_same_bits(got[1], dh, "d_hidden")
    assert_same_bits(got[2], dw, "d_weight")
    none = mojolike.chunked_lm_head_loss(h, w, t, reduction="none", chunk_size=size, **on)
    assert_same_bits(none, mojolike.cross_entropy(z, t, reduction="none", **on), "'none'")


def head_and_its_extra_memory(h, w, t, size):
    """((loss, d_hidden, d_weight), the peak bytes beyond the outputs) of a head call with
    label smoothing 0.1, measured with tracemalloc after a first call has compiled."""
    mojolike.chunked_lm_head_loss(h, w, t, chunk_size=1024, return_grad=True)
    tracemalloc.start()
    try:
        out = mojolike.chunked_lm_head_loss(h, w, t, chunk_size=size, return_grad=True,
                                            label_smoothing=0.1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak - out[1].nbytes - out[2].nbytes


def test_the_chunked_head_holds_about_three_row_by_chunk_buffers_beyond_its_outputs():
    h, w = data((64, 32), 6), data((16384, 32), 7)
    t = np.random.default_rng(8).integers(0, 16384, 64)
    for size in (1024, 4096):
        _, extra = head_and_its_extra_memory(h, w, t, size)
        assert extra <= 3.5 * 64 * size * 4, (size, extra)  # contracts/layers.md clause 10
        assert extra < 64 * 16384 * 4  # less than the (rows, vocab) logits alone


def test_the_chunked_head_by_row_blocks_stays_within_the_same_memory_and_bits():
    h, w = data((256, 16), 16), data((8192, 16), 17)
    t = np.random.default_rng(18).integers(0, 8192, 256)
    size = 1024
    assert 256 * size // 8192 >= _layers_head.MIN_BLOCK_ROWS  # this call takes row blocks
    want = mojolike.cross_entropy(mojolike.linear(h, w), t, label_smoothing=0.1, return_grad=True)
    (loss, dh, dw), extra = head_and_its_extra_memory(h, w, t, size)
    assert extra <= 3.5 * 256 * size * 4, extra  # contracts/layers.md clause 10
    dh_want, dw_want, _ = mojolike.linear_backward(want[1], h, w, bias=False)
    assert_same_bits(loss, want[0], "loss")
    assert_same_bits(dh, dh_want, "d_hidden")
    assert_same_bits(dw, dw_want, "d_weight")


@pytest.mark.parametrize("n", list(range(1, 70)))
def test_the_pairwise_counter_builds_the_pairwise_tree(n):
    values = data(n, n, scale=1e3).astype(np.float32) * np.float32(1e5) ** (np.arange(n) % 3)
    c = _PairwiseCounter()
    for v in values:
        c.push(np.float32([v]))
    want = pairwise([np.float32(v) for v in values], lambda a, b: np.float32(a + b))
    assert_same_bits(c.finish(), want, f"{n} partials")


def test_mlp_sessions_are_independent_of_their_company_and_may_be_empty():
    w1, b1, w2, b2 = data((9, 12), 9), data(9, 10), data((4, 9), 11), data(4, 12)
    s = [data((3, 12), 13), np.zeros((0, 12), np.float32), data((2, 12), 14)]
    out = mojolike.mlp_inference_sessions(s, w1, b1, w2, b2)
    assert out.shape == (5, 4)
    assert_same_bits(out[3:], mojolike.mlp_inference_sessions([s[2]], w1, b1, w2, b2), "alone")
    assert mojolike.mlp_inference_sessions([np.zeros((0, 12), np.float32)], w1, b1, w2, b2).shape == (0, 4)


def test_embedding_backward_folds_positions_in_ascending_order_and_zeroes_padding():
    dy = np.float32([[1e8], [1.0], [-1e8], [5.0]])
    ids = np.int64([2, 2, 2, 0])
    g = mojolike.embedding_backward(dy, ids, 3, padding_idx=0)
    assert g[:, 0].tolist() == [0.0, 0.0, 1.0]  # lanes: 1e8, 1, -1e8 each alone, then the butterfly
    assert not np.signbit(g[0, 0]) and not np.signbit(g[1, 0])


def test_out_of_range_ids_are_refused_before_anything_is_written():
    w, dy = data((4, 3), 15), data((2, 3), 16)
    before = (w.tobytes(), dy.tobytes())
    for ids, option in ((np.int64([1, 4]), "ids[1]"), (np.int64([-1, 0]), "ids[0]"),
                        (np.float32([0, 1]), "ids")):
        with pytest.raises(Refusal) as e:
            mojolike.embedding(ids, w)
        assert e.value.option == option
        with pytest.raises(Refusal):
            mojolike.embedding_backward(dy, ids, 4)
    assert (w.tobytes(), dy.tobytes()) == before


@pytest.mark.parametrize("call,option", [
    (lambda: mojolike.linear(data((2, 5), 1), data((3, 4), 2)), "weight"),
    (lambda: mojolike.linear(data((2, 5), 1).astype(np.float16), data((3, 5), 2)), "x"),
    (lambda: mojolike.linear(data((2, 5), 1), data((3, 5), 2), data(4, 3)), "bias"),
    (lambda: mojolike.linear_backward(data((2, 4), 1), data((2, 5), 2), data((3, 5), 3)), "dy"),
    (lambda: mojolike.rms_norm(data((2, 5), 1), (5,)), "weight"),
    (lambda: mojolike.rms_norm(data((2, 5), 1), eps="1e-6"), "eps"),
    (lambda: mojolike.embedding(np.int64([0]), data((3, 2), 1), sparse=True), "sparse"),
    (lambda: mojolike.chunked_lm_head_loss(data((2, 3), 1), data((7, 3), 2), [0, 1], chunk_size=512),
     "chunk_size"),
    (lambda: mojolike.chunked_lm_head_loss(data((2, 3), 1), data((7, 3), 2), [0, 1], reduce=True),
     "reduce"),
    (lambda: mojolike.relu(data(3, 1), inplace=True), "inplace"),
])
def test_bad_layer_input_is_refused_by_option(call, option):
    with pytest.raises(Refusal) as e:
        call()
    assert e.value.option == option, str(e.value)


def test_a_head_whose_logits_overflow_is_refused_like_cross_entropy(head_way):
    h, w = np.full((2, 3), 1e30, np.float32), np.full((5, 3), 3e38, np.float32)
    with pytest.raises(Refusal) as e:
        mojolike.chunked_lm_head_loss(h, w, [0, 1], return_grad=True)
    assert e.value.option == "hidden" and "non-finite logit" in str(e.value)
