"""The KV-cache decoder of mojolike.training.generate gives the training forward's bits: every
generated token's log-prob is the negated per-token loss of the whole generated sequence, the
cached logits are full_logits' rows, a prompt decodes the same alone or among prompts of other
lengths, and the sampled tokens are the same on the oracle, cpu-numba, cpu-cffi and with 1 or 2
numba threads. The model is a tiny GPT-2 (vocab 13, block 16, 2 layers, 2 heads, n_embd 8) with
random weights in the spec's names."""
from __future__ import annotations

import numba
import numpy as np
import pytest
from conftest import assert_same_bits

import mojolike
from mojolike import Tape
from mojolike.core.refusals import Refusal
from mojolike.training.generate import (
    KVCache,
    choose,
    decode_step,
    full_logits,
    generate,
    parameter_shapes,
)

CONFIG = {"vocab_size": 13, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 8,
          "layer_norm_epsilon": 1e-5}
PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10], [0, 12]]
SAMPLED = {"temperature": 0.9, "top_k": 6, "seed": 11}


def weights(seed=0, config=CONFIG):
    """Random weights in the spec's names, large enough that the logits spread over a few units."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in parameter_shapes(config).items():
        a = rng.standard_normal(shape) * (0.1 if name.endswith("bias") else 0.5)
        if ".ln_" in name and name.endswith("weight"):
            a = a * 0.2 + 1.0
        out[name] = a.astype(np.float32)
    return out


W = weights()


def tape_logits(w, tokens, backend):
    """The training forward written on the tape as torch code reads (B, T) -> (B, T, V)."""
    c, nh, eps = CONFIG["n_embd"], CONFIG["n_head"], CONFIG["layer_norm_epsilon"]
    tape = Tape(backend=backend)
    p = {n: tape.param(a) for n, a in w.items()}
    b, t = tokens.shape
    x = tape.embedding(tokens, p["transformer.wte.weight"]) + \
        tape.embedding(np.arange(t), p["transformer.wpe.weight"])
    for layer in range(CONFIG["n_layer"]):
        g = {n[len(f"transformer.h.{layer}."):]: v for n, v in p.items()
             if n.startswith(f"transformer.h.{layer}.")}
        h = tape.layer_norm(x, (c,), g["ln_1.weight"], g["ln_1.bias"], eps)
        q, k, v = (h @ g["attn.c_attn.weight"] + g["attn.c_attn.bias"]).split(c, dim=2)
        q, k, v = (a.view(b, t, nh, c // nh).transpose(1, 2) for a in (q, k, v))
        y = tape.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + (y @ g["attn.c_proj.weight"] + g["attn.c_proj.bias"])
        h = tape.layer_norm(x, (c,), g["ln_2.weight"], g["ln_2.bias"], eps)
        h = tape.gelu(h @ g["mlp.c_fc.weight"] + g["mlp.c_fc.bias"], approximate="tanh")
        x = x + (h @ g["mlp.c_proj.weight"] + g["mlp.c_proj.bias"])
    x = tape.layer_norm(x, (c,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    return tape.linear(x.reshape(b * t, c), p["transformer.wte.weight"]).data.reshape(b, t, -1)


def assert_parity(tokens, logprobs, prompts, backend):
    """Each log-prob is -(cross_entropy(full_logits(sequence) row, token, reduction='none'))."""
    for seq, lps, pr in zip(tokens, logprobs, prompts):
        z = full_logits(W, CONFIG, np.int64([seq]), backend=backend)[0]
        want = -mojolike.cross_entropy(z[:-1], np.int64(seq[1:]), reduction="none",
                                       backend=backend)
        assert len(lps) == len(seq) - len(pr)
        assert_same_bits(np.float32(lps), want[len(pr) - 1:], f"log-probs of {seq}")


def test_full_logits_are_the_tapes_training_forward_bit_for_bit():
    tokens = np.int64([[3, 1, 4, 1, 5, 9, 2, 6], [5, 3, 5, 8, 9, 7, 9, 3]])
    got = full_logits(W, CONFIG, tokens, backend="cpu-numba")
    assert got.shape == (2, 8, 13)
    assert_same_bits(got.reshape(-1), tape_logits(W, tokens, "cpu-numba").reshape(-1), "logits")


@pytest.mark.parametrize("options", [{"temperature": 0}, SAMPLED, {"temperature": 1.0, "seed": 3}],
                         ids=["greedy", "top-k", "plain"])
def test_every_generated_log_prob_is_the_training_forwards_negated_token_loss(options):
    tokens, logprobs = generate(W, CONFIG, PROMPTS, 6, backend="cpu-numba", **options)
    assert [t[:len(p)] for t, p in zip(tokens, PROMPTS)] == PROMPTS
    assert all(0 <= t < 13 for seq in tokens for t in seq)
    assert_parity(tokens, logprobs, PROMPTS, "cpu-numba")


def test_sampling_draws_differ_from_greedy_and_between_seeds():
    greedy = generate(W, CONFIG, PROMPTS, 8, temperature=0, backend="cpu-numba")[0]
    runs = [generate(W, CONFIG, PROMPTS, 8, temperature=1.5, seed=s, backend="cpu-numba")[0]
            for s in range(3)]
    assert any(r != greedy for r in runs) and len({str(r) for r in runs}) > 1


def test_the_kv_cache_logits_are_full_logits_rows_bit_for_bit():
    seqs = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11], [12, 0, 1, 2, 3, 4]]
    cache = KVCache(CONFIG, [len(s) for s in seqs])
    # a causal prefill of different lengths, one-token steps with a prompt sitting out, then a
    # three-token chunk over a filled cache
    plan = [[s[:2] for s in seqs[:2]] + [seqs[2][:4]], [[s[2]] for s in seqs[:2]] + [[]],
            [[seqs[0][3]], [], [seqs[2][4]]], [seqs[0][4:7], [], [seqs[2][5]]]]
    for step in plan:
        starts = list(cache.lengths)
        got = decode_step(W, CONFIG, cache, step, all_logits=True, backend="cpu-numba")
        r = 0
        for p, seg in enumerate(step):
            if not seg:
                continue
            end = starts[p] + len(seg)
            want = full_logits(W, CONFIG, np.int64([seqs[p][:end]]), backend="cpu-numba")[0]
            assert_same_bits(got[r:r + len(seg)].reshape(-1), want[starts[p]:end].reshape(-1),
                             f"prompt {p} positions {starts[p]}..{end - 1}")
            r += len(seg)
        assert r == got.shape[0]
    last = decode_step(W, CONFIG, cache, [[seqs[0][7]], [], []], backend="cpu-numba")
    want = full_logits(W, CONFIG, np.int64([seqs[0]]), backend="cpu-numba")[0, -1]
    assert_same_bits(last.reshape(-1), want, "last row only")
    assert cache.lengths == [8, 3, 6]


@pytest.mark.parametrize("options", [{"temperature": 0}, SAMPLED], ids=["greedy", "sampled"])
def test_a_prompt_decodes_the_same_alone_as_among_prompts_of_other_lengths(options):
    tokens, logprobs = generate(W, CONFIG, PROMPTS, 5, backend="cpu-numba", **options)
    for i, pr in enumerate(PROMPTS):
        alone = generate(W, CONFIG, [pr], 5, streams=[i], backend="cpu-numba", **options)
        assert alone[0] == [tokens[i]]
        assert_same_bits(np.float32(alone[1][0]), np.float32(logprobs[i]), f"prompt {i}")
    # the default stream is the prompt's index: the first prompt needs no streams=
    first = generate(W, CONFIG, PROMPTS[:1], 5, backend="cpu-numba", **options)
    assert first[0] == tokens[:1]


def run_all(backend, prompts=PROMPTS[:2], n=3):
    return [generate(W, CONFIG, prompts, n, backend=backend, **o)
            for o in ({"temperature": 0}, SAMPLED)]


def assert_same_runs(got, want, what):
    for (ta, la), (tb, lb) in zip(got, want):
        assert ta == tb, what
        for a, b in zip(la, lb):
            assert_same_bits(np.float32(a), np.float32(b), what)


def test_the_oracle_cpu_numba_and_cpu_cffi_generate_the_same_tokens_and_log_probs():
    want = run_all("oracle")
    assert_same_runs(run_all("cpu-numba"), want, "cpu-numba")
    assert_same_runs(run_all("cpu-cffi"), want, "cpu-cffi")


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here")
def test_one_and_two_numba_threads_generate_the_same_tokens_and_log_probs():
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = run_all("cpu-numba", PROMPTS, 6)
        numba.set_num_threads(2)
        two = run_all("cpu-numba", PROMPTS, 6)
    finally:
        numba.set_num_threads(before)
    assert_same_runs(one, two, "2 threads")


def test_greedy_ties_go_to_the_lowest_id():
    logits = np.float32([[1, 5, 5, 2], [0, 0, 0, 0], [-0.0, 0.0, -1, -2]])
    got = choose(logits, np.float32(0), None, mojolike.Generator(0), [0, 1, 2], [0, 0, 0],
                 {"backend": "cpu-numba"})
    assert got == [1, 0, 0]
    flat = {n: np.full(s, 0.25, np.float32) for n, s in parameter_shapes(CONFIG).items()}
    tokens, _ = generate(flat, CONFIG, [[3, 4]], 3, temperature=0, backend="cpu-numba")
    assert tokens == [[3, 4, 0, 0, 0]]  # every logit equal


def test_top_k_keeps_exactly_k_ids_with_ties_at_the_kth_value_to_the_lower_ids():
    logits = np.float32([[3, 1, 3, 3, 0, 2]] * 64)
    on = {"backend": "cpu-numba"}
    got = choose(logits, np.float32(1), 2, mojolike.Generator(5), list(range(64)), [0] * 64, on)
    assert set(got) == {0, 2}
    got = choose(logits, np.float32(1), 1, mojolike.Generator(5), list(range(64)), [0] * 64, on)
    assert set(got) == {0}


def test_a_sampled_token_is_the_first_id_whose_sequential_running_sum_exceeds_u_times_the_total():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((40, 13)).astype(np.float32) * 2
    on = {"backend": "cpu-numba"}
    positions = list(range(3, 43))
    got = choose(logits, np.float32(0.7), 9, mojolike.Generator(8), list(range(40)), positions, on)
    gen = mojolike.Generator(8, backend="oracle")
    for i, row in enumerate(logits):
        z = row / np.float32(0.7)
        keep = sorted(range(13), key=lambda j: (-z[j], j))[:9]
        z = np.where(np.isin(np.arange(13), keep), z, np.float32(-np.inf)).astype(np.float32)
        p = mojolike.softmax(z, backend="oracle")
        run, c = [], np.float32(0)
        for v in p:  # one float32 addition per id, in id order
            c = np.float32(c + v)
            run.append(c)
        u = gen.uniform(1, stream=i, offset=positions[i])[0]
        thr = np.float32(u * run[-1])
        want = next((j for j, s in enumerate(run) if s > thr), None)
        if want is None:
            want = next(j for j, s in enumerate(run) if s >= run[-1])
        assert got[i] == want, i
        assert p[[j for j in range(13) if j not in keep]].tolist() == [0.0] * 4


def test_zero_new_tokens_return_the_prompts():
    assert generate(W, CONFIG, PROMPTS, 0, backend="cpu-numba") == (PROMPTS, [[]] * 4)


def refusal(option, *args, **kwargs):
    with pytest.raises(Refusal) as err:
        generate(*args, **kwargs)
    assert err.value.option == option, str(err.value)


def test_generate_refuses_what_it_does_not_cover_by_name():
    w, c = W, CONFIG
    refusal("prompts", w, c, [], 2)
    refusal("prompts", w, c, "abc", 2)
    refusal("prompts[1]", w, c, [[1], []], 2)
    refusal("prompts[1]", w, c, [[1], [[1, 2]]], 2)
    refusal("prompts[0]", w, c, [[1.0, 2.0]], 2)
    refusal("prompts[0]", w, c, [[1, 13]], 2)
    refusal("prompts[1]", w, c, [[1], [-1]], 2)
    refusal("max_new_tokens", w, c, [[1] * 10], 7)
    refusal("max_new_tokens", w, c, [[1]], -1)
    refusal("temperature", w, c, [[1]], 2, temperature=-0.5)
    refusal("temperature", w, c, [[1]], 2, temperature=float("nan"))
    refusal("temperature", w, c, [[1]], 2, temperature=float("inf"))
    refusal("top_k", w, c, [[1]], 2, top_k=0)
    refusal("top_k", w, c, [[1]], 2, top_k=14)
    refusal("seed", w, c, [[1]], 2, seed=-1)
    refusal("streams", w, c, [[1], [2]], 2, streams=[0])
    refusal("no_such_keyword", w, c, [[1]], 2, no_such_keyword=1)
    refusal("weights['transformer.ln_f.bias']", {k: v for k, v in w.items()
                                                 if k != "transformer.ln_f.bias"}, c, [[1]], 2)
    refusal("weights['transformer.wte.weight']", {**w, "transformer.wte.weight": w[
        "transformer.wte.weight"][:12]}, c, [[1]], 2)
    refusal("weights['lm_head.weight']", {**w, "lm_head.weight": w["transformer.wte.weight"]},
            c, [[1]], 2)
    refusal("config.n_head", w, {**c, "n_head": 3}, [[1]], 2)
    refusal("config.vocab_size", w, {k: v for k, v in c.items() if k != "vocab_size"}, [[1]], 2)
    refusal("temperature", w, c, [[1]], 2, temperature=1e-40)  # logits / temperature overflow


def test_the_decoder_refuses_a_full_cache_and_a_mismatched_config():
    cache = KVCache(CONFIG, [2, 3])
    decode_step(W, CONFIG, cache, [[1, 2], [3]], backend="cpu-numba")
    for option, args in (("tokens[0]", ([[4], []],)), ("tokens", ([[]] * 2,)),
                         ("tokens", ([[4]],))):
        with pytest.raises(Refusal) as err:
            decode_step(W, CONFIG, cache, *args, backend="cpu-numba")
        assert err.value.option == option
    with pytest.raises(Refusal) as err:
        decode_step(W, {**CONFIG, "layer_norm_epsilon": 1e-6}, cache, [[], [4]])
    assert err.value.option == "config"
    with pytest.raises(Refusal) as err:
        KVCache(CONFIG, [17])
    assert err.value.option == "capacities[0]"
    assert cache.lengths == [2, 1]


def test_a_model_without_biases_generates_with_parity():
    cfg = {**CONFIG, "bias": False}
    w = weights(2, cfg)
    assert not any(n.endswith("bias") for n in w)
    tokens, logprobs = generate(w, cfg, PROMPTS[:2], 4, backend="cpu-numba", **SAMPLED)
    for seq, lps, pr in zip(tokens, logprobs, PROMPTS):
        z = full_logits(w, cfg, np.int64([seq]), backend="cpu-numba")[0]
        want = -mojolike.cross_entropy(z[:-1], np.int64(seq[1:]), reduction="none",
                                       backend="cpu-numba")
        assert_same_bits(np.float32(lps), want[len(pr) - 1:], f"log-probs of {seq}")


@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
def test_a_short_prompt_beside_one_past_a_fold_chunk_decodes_as_it_does_alone(backend):
    # the short prompt's attention rows fold over the long one's 1030+ positions, all but its
    # own holding -0.0: whole trailing fold chunks must change no bit
    cfg = {**CONFIG, "block_size": 1040, "n_layer": 1}
    w = weights(3, cfg)
    long = np.random.default_rng(5).integers(0, 13, 1030).tolist()
    prompts = [long, [7, 1, 2]]
    tokens, logprobs = generate(w, cfg, prompts, 3, backend=backend, **SAMPLED)
    for i, pr in enumerate(prompts):
        alone = generate(w, cfg, [pr], 3, streams=[i], backend=backend, **SAMPLED)
        assert alone[0] == [tokens[i]]
        assert_same_bits(np.float32(alone[1][0]), np.float32(logprobs[i]), f"prompt {i}")
    z = full_logits(w, cfg, np.int64([tokens[1]]), backend=backend)[0]
    want = -mojolike.cross_entropy(z[:-1], np.int64(tokens[1][1:]), reduction="none",
                                   backend=backend)
    assert_same_bits(np.float32(logprobs[1]), want[2:], "the short prompt's log-probs")


def test_every_entry_point_refuses_an_unknown_keyword_by_name():
    cache = KVCache(CONFIG, [4])
    calls = [lambda **k: full_logits(W, CONFIG, np.int64([[1]]), **k),
             lambda **k: decode_step(W, CONFIG, cache, [[1]], **k),
             lambda **k: KVCache(CONFIG, [4], **k), lambda **k: parameter_shapes(CONFIG, **k)]
    for call in calls:
        with pytest.raises(Refusal) as err:
            call(bogus_keyword=1)
        assert err.value.option == "bogus_keyword"
    assert cache.lengths == [0]


def test_log_probs_are_the_gpt_models_negated_token_losses_bit_for_bit():
    from mojolike.training.gpt import GPT
    model = GPT(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=8, seed=1,
                backend="cpu-numba")
    w = dict(model.named_parameters())
    for options in ({"temperature": 0}, SAMPLED):
        tokens, logprobs = generate(w, model.config, PROMPTS, 5, backend="cpu-numba", **options)
        for seq, lps, pr in zip(tokens, logprobs, PROMPTS):
            t = np.int64([seq])
            losses = model.token_losses(t[:, :-1], t[:, 1:], backend="cpu-numba")[0]
            assert_same_bits(np.float32(lps), -losses[len(pr) - 1:], f"log-probs of {seq}")
            assert_same_bits(full_logits(w, model.config, t, backend="cpu-numba").reshape(-1),
                             model.logits(t, backend="cpu-numba").reshape(-1), "logits")
