"""Philox4x32-10, the Generator, uniform draws and dropout (contracts/rng.md).

Known answers (Random123's vectors), every kernel backend against the oracle bit
for bit, invariance under splitting and threads, the state round trip, every
refusal by name, moments at a stated significance, and torch's dropout semantics.
"""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CPU_BACKENDS, assert_same_bits, available, backend_case_params
from hypothesis import given, settings
from hypothesis import strategies as st
from mojolike.oracles import f32
from mojolike.oracles import rng as spec

import mojolike
from mojolike import Generator, Refusal
from mojolike.core import registry
from mojolike.random import DropoutKey, philox4x32_10

KAT_FILE = Path(__file__).parent / "data" / "philox4x32_10_kat.txt"
# Random123 tests/kat_vectors, the "philox4x32 7" lines (commit 9545ff6): counter, key, expected
KAT_7_ROUNDS = [
    ((0, 0, 0, 0), (0, 0), (0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A)),
]
SIM = pytest.mark.skipif(not available("cuda-sim"), reason="numba-cuda is not installed")
KERNEL_BACKENDS = [*CPU_BACKENDS, pytest.param("cuda-sim", marks=SIM)]
EVERY_BACKEND = ["oracle", *KERNEL_BACKENDS]
BIG_SEED = 0xFEDC_BA98_7654_3210  # both key words nonzero
BIG_STREAM = 0x1_0000_0003  # both stream words nonzero


def kat_vectors() -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    out = []
    for line in KAT_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            w = [int(t, 16) for t in line.split()]
            assert len(w) == 10, line
            out.append((tuple(w[:4]), tuple(w[4:6]), tuple(w[6:])))
    return out


def hexwords(ws) -> str:
    return " ".join(f"{int(w):08x}" for w in ws)


# -- known answers -------------------------------------------------------------------------------

def test_the_known_answer_file_holds_random123s_three_standard_vectors():
    assert [v[0] for v in kat_vectors()] == [(0,) * 4, (0xFFFFFFFF,) * 4,
                                             (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344)]


@pytest.mark.parametrize("counter,key,want", kat_vectors(), ids=lambda v: hexwords(v[:1]))
def test_the_oracle_reproduces_random123s_known_answer_vectors(counter, key, want):
    got = spec.philox4x32_10(counter, key)
    assert got == want, (f"FAIL ctr={hexwords(counter)} key={hexwords(key)} got={hexwords(got)} "
                         f"ref={hexwords(want)}")


@pytest.mark.parametrize("counter,key,want", KAT_7_ROUNDS, ids=lambda v: hexwords(v[:1]))
def test_seven_rounds_reproduce_random123s_seven_round_vectors_and_differ_from_ten(counter, key, want):
    assert spec.philox4x32_10(counter, key, rounds=7) == want
    assert spec.philox4x32_10(counter, key, rounds=7) != spec.philox4x32_10(counter, key)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_public_philox_reproduces_the_known_answer_vectors_on_every_backend(backend):
    for counter, key, want in kat_vectors():
        got = philox4x32_10(np.uint32(counter), np.uint32(key), backend=backend)
        assert got.dtype == np.uint32 and got.shape == (4,)
        assert tuple(got.tolist()) == want, f"FAIL {backend} ctr={hexwords(counter)} got={hexwords(got)}"
    # many counters under one key: (n, 4) in, (n, 4) out
    counters = np.uint32([[i, 7 * i, 0xFFFFFFFF - i, i << 20] for i in range(37)])
    got = philox4x32_10(counters, np.uint32([0x01234567, 0x89ABCDEF]), backend=backend)
    want = [spec.philox4x32_10(c, (0x01234567, 0x89ABCDEF)) for c in counters.tolist()]
    assert [tuple(r) for r in got.tolist()] == want


def test_the_oracle_maps_seed_stream_and_element_to_counter_and_key_as_clause_2_says():
    seed, s = BIG_SEED, BIG_STREAM
    for i in (0, 1, 2, 3, 4, 7, 4 * 2**32 + 5, 2**64 - 1):
        b = i // 4
        block = spec.philox4x32_10((b % 2**32, b >> 32, s % 2**32, s >> 32), (seed % 2**32, seed >> 32))
        assert spec.uniform_word(seed, s, i) == block[i % 4]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_uniform_values_are_the_top_24_bits_of_the_philox_words_of_clause_2(backend):
    n, s, seed = 64, BIG_STREAM, BIG_SEED
    u = Generator(seed, backend=backend).uniform(n, stream=s)
    b = np.arange(n // 4, dtype=np.uint64)
    counters = np.stack([b & 0xFFFFFFFF, b >> 32, np.full_like(b, s & 0xFFFFFFFF),
                         np.full_like(b, s >> 32)], axis=1).astype(np.uint32)
    w = philox4x32_10(counters, np.uint32(spec.key_of(seed)), backend=backend).reshape(-1)
    assert_same_bits(u, (w >> 8).astype(np.float32) * np.float32(2.0 ** -24), f"{backend} uniform")


# -- every kernel backend equals the oracle ---------------------------------------------------------

# (seed, stream, offset, n, low, high): heads and tails of every length, whole parallel tasks
# (2048 blocks), 64-bit seeds, streams and positions up to the last one
UNIFORM_CASES = [
    (0, 0, 0, 1, 0.0, 1.0), (1, 2, 1, 2, 0.0, 1.0), (3, 4, 2, 3, -1.0, 1.0), (5, 6, 3, 5, 2.5, 2.5),
    (BIG_SEED, BIG_STREAM, 5, 13, -3.0, 7.0), (7, 0, 0, 200, -0.1, 0.1),
    (8, 2**64 - 1, 2**64 - 11, 11, 1e-3, 3e38), (2**64 - 1, 9, 2**40 + 3, 150, -2.0, -1.5),
]
BIG_UNIFORM_CASES = [(BIG_SEED, BIG_STREAM, 3, 2 * 8192 + 7, -1.0, 3.0), (11, 12, 0, 8192 * 3, 0.0, 1.0)]


def _uniform_ids(case) -> str:
    seed, s, off, n, lo, hi = case
    return f"s{s % 1000}-off{off % 1000}-n{n}-[{lo:g},{hi:g}]"


def _pairs(small, big):
    return backend_case_params(KERNEL_BACKENDS, small, big)


@pytest.mark.parametrize("backend,case", _pairs(UNIFORM_CASES, BIG_UNIFORM_CASES))
def test_uniform_equals_the_oracle_on_every_kernel_backend(backend, case):
    seed, s, offset, n, low, high = case
    got = Generator(seed, backend=backend).uniform(n, low, high, stream=s, offset=offset)
    want = np.float32(spec.uniform(seed, s, n, low, high, offset))
    assert_same_bits(got, want, f"{backend} uniform {_uniform_ids(case)}")


SPECIALS = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.0, -7.5])


def _dropout_input(n: int, seed: int) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal(n) * 3).astype(np.float32)
    x[: min(n, SPECIALS.size)] = SPECIALS[: min(n, SPECIALS.size)]
    return x


# (seed, stream, offset, n, p)
DROPOUT_CASES = [(0, 0, 0, 11, 0.5), (1, 5, 3, 17, 0.1), (BIG_SEED, BIG_STREAM, 2**63 + 1, 199, 0.3),
                 (4, 9, 0, 64, 0.0), (5, 6, 2, 150, 0.999), (6, 2**64 - 1, 2**64 - 30, 30, 0.75)]
BIG_DROPOUT_CASES = [(7, 8, 1, 2 * 8192 + 5, 0.2)]


@pytest.mark.parametrize("backend,case", _pairs(DROPOUT_CASES, BIG_DROPOUT_CASES))
def test_dropout_and_its_backward_equal_the_oracle_on_every_kernel_backend(backend, case):
    seed, s, offset, n, p = case
    x = _dropout_input(n, seed)
    x.flags.writeable = False  # dropout only reads x
    g = Generator(seed, backend=backend)
    y, key = g.dropout(x, p, offset=offset, stream=s)
    assert key == DropoutKey(seed, s, offset, f32.round_float(p), n)
    want = np.float32(spec.dropout(x.tolist(), p, seed, s, offset))
    assert_same_bits(y, want, f"{backend} dropout {case}")
    dy = _dropout_input(n, seed + 1)
    want_dx = np.float32(spec.dropout_backward(dy.tolist(), p, seed, s, offset))
    assert_same_bits(g.dropout_backward(dy, key), want_dx, f"{backend} dropout_backward {case}")
    assert g.state_dict()["counter"] == 0, "an explicit stream must not move the counter"


@settings(max_examples=25, deadline=None)
@given(xs=st.lists(st.floats(width=32, allow_subnormal=True), min_size=1, max_size=40),
       p=st.floats(0.0, 0.99), offset=st.integers(0, 2**64 - 41), stream=st.integers(0, 2**64 - 1))
def test_dropout_on_the_cpu_backends_equals_the_oracle_for_any_float32_input(xs, p, offset, stream):
    x = np.float32(xs)
    want = np.float32(spec.dropout(x.tolist(), p, 42, stream, offset))
    for backend in CPU_BACKENDS:
        y, _ = Generator(42, backend=backend).dropout(x, p, offset=offset, stream=stream)
        assert_same_bits(y, want, f"{backend} dropout p={p} offset={offset} stream={stream}")


# -- invariance: split draws, threads -------------------------------------------------------------

@pytest.mark.parametrize("backend", ["oracle", *CPU_BACKENDS])
def test_a_draw_split_in_pieces_with_offsets_equals_the_unsplit_draw(backend):
    n = 40 if backend == "oracle" else 20_011
    cuts = [0, 1, 3, 7, 8, 13, n // 2 + 1, n - 2, n]
    g = Generator(BIG_SEED, backend=backend)
    whole = g.uniform(n, -2.0, 5.0, stream=3)
    pieces = [g.uniform(b - a, -2.0, 5.0, stream=3, offset=a) for a, b in zip(cuts, cuts[1:])]
    assert_same_bits(np.concatenate(pieces), whole, f"{backend} uniform pieces")
    x = _dropout_input(n, 1)
    y, key = g.dropout(x, 0.4, stream=4)
    parts = [g.dropout(x[a:b], 0.4, offset=a, stream=4)[0] for a, b in zip(cuts, cuts[1:])]
    assert_same_bits(np.concatenate(parts), y, f"{backend} dropout microbatches")
    dx = [g.dropout_backward(x[a:b], DropoutKey(key.seed, 4, a, key.p, b - a))
          for a, b in zip(cuts, cuts[1:])]
    assert_same_bits(np.concatenate(dx), g.dropout_backward(x, key), f"{backend} backward pieces")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_one_and_two_threads_give_the_same_bits(backend):
    k = registry.kernels("test", "rng", backend, "identical")
    n = 50_003  # seven parallel tasks of 2048 blocks, a head and a tail
    x = _dropout_input(n, 3)
    g = Generator(BIG_SEED, backend=backend)
    before = k.get_num_threads()
    seen = []
    try:
        for threads in (1, 2):
            k.set_num_threads(threads)
            u = g.uniform(n, stream=1, offset=1)
            y, _ = g.dropout(x, 0.3, stream=2, offset=2)
            seen.append((u.view(np.uint32).copy(), y.view(np.uint32).copy()))
    finally:
        k.set_num_threads(before)
    assert (seen[0][0] == seen[1][0]).all() and (seen[0][1] == seen[1][1]).all(), f"{backend}: 2 threads vs 1"


# -- the generator's state ------------------------------------------------------------------------

def test_each_draw_without_a_stream_takes_the_next_stream_and_state_dict_round_trips():
    g = Generator(BIG_SEED, backend="cpu-numba")
    a = g.uniform(5)
    assert g.next_stream() == 1 and g.state_dict() == {"seed": BIG_SEED, "counter": 2}
    _, key = g.dropout(np.ones(3, np.float32), 0.5)
    assert key.stream == 2
    g.uniform(4, stream=77)  # an explicit stream leaves the counter alone
    state = g.state_dict()
    assert state == {"seed": BIG_SEED, "counter": 3}
    later = [g.uniform(6), g.dropout(np.ones(9, np.float32), 0.25)[0]]
    h = Generator(0, backend="cpu-cffi")
    h.load_state_dict(state)
    assert h.seed == BIG_SEED and h.state_dict() == state
    for got, want in zip([h.uniform(6), h.dropout(np.ones(9, np.float32), 0.25)[0]], later):
        assert_same_bits(got, want, "after load_state_dict")
    assert_same_bits(Generator(BIG_SEED, backend="oracle").uniform(5), a, "stream 0")


def test_the_last_stream_can_be_drawn_and_then_the_generator_is_exhausted():
    g = Generator(1, backend="oracle")
    g.load_state_dict({"seed": 1, "counter": 2**64 - 1})
    assert_same_bits(g.uniform(3), np.float32(spec.uniform(1, 2**64 - 1, 3)), "last stream")
    assert g.state_dict()["counter"] == 2**64
    with pytest.raises(Refusal, match="exhausted"):
        g.uniform(3)
    assert_same_bits(g.uniform(2, stream=5), np.float32(spec.uniform(1, 5, 2)), "explicit stream")


# -- refusals ------------------------------------------------------------------------------------

def _exhausted() -> Generator:
    g = Generator(3, backend="cpu-numba")
    g.load_state_dict({"seed": 3, "counter": 2**64})
    return g


X = np.float32([1.0, -2.0, 3.0])
KEY = DropoutKey(3, 0, 0, 0.5, 3)
# (what, call(generator), word the message must contain)
REFUSALS = [
    ("seed below 0", lambda g: Generator(-1), "seed"),
    ("seed of 2^64", lambda g: Generator(2**64), "seed"),
    ("seed not an int", lambda g: Generator(1.0), "seed"),
    ("seed a bool", lambda g: Generator(True), "seed"),
    ("unknown generator keyword", lambda g: Generator(1, device="cuda"), "device"),
    ("unknown backend", lambda g: Generator(1, backend="gpu"), "backend"),
    ("zero dimension", lambda g: g.uniform((2, 0)), "shape"),
    ("negative size", lambda g: g.uniform(-3), "shape"),
    ("non-integer dimension", lambda g: g.uniform((2, 1.5)), "shape"),
    ("shape not a tuple", lambda g: g.uniform("3"), "shape"),
    ("non-finite low", lambda g: g.uniform(3, float("nan")), "low"),
    ("infinite high", lambda g: g.uniform(3, 0.0, math.inf), "high"),
    ("high beyond float32", lambda g: g.uniform(3, 0.0, 1e39), "high"),
    ("low above high", lambda g: g.uniform(3, 1.0, 0.0), "low"),
    ("range overflowing float32", lambda g: g.uniform(3, -3e38, 3e38), "high - low"),
    ("stream of 2^64", lambda g: g.uniform(3, stream=2**64), "stream"),
    ("negative stream", lambda g: g.uniform(3, stream=-1), "stream"),
    ("draw past position 2^64", lambda g: g.uniform(3, offset=2**64 - 2), "offset"),
    ("negative offset", lambda g: g.uniform(3, offset=-1), "offset"),
    ("unknown uniform keyword", lambda g: g.uniform(3, dtype=np.float64), "dtype"),
    ("exhausted uniform", lambda g: _exhausted().uniform(3), "exhausted"),
    ("exhausted dropout", lambda g: _exhausted().dropout(X, 0.5), "exhausted"),
    ("exhausted next_stream", lambda g: _exhausted().next_stream(), "exhausted"),
    ("p of 1", lambda g: g.dropout(X, 1.0), "p"),
    ("negative p", lambda g: g.dropout(X, -0.1), "p"),
    ("NaN p", lambda g: g.dropout(X, float("nan")), "p"),
    ("p rounding to 1 in float32", lambda g: g.dropout(X, 0.99999999), "rounds to 1.0"),
    ("float64 x", lambda g: g.dropout(np.float64([1.0, 2.0]), 0.5), "float64"),
    ("empty x", lambda g: g.dropout(np.float32([]), 0.5), "empty"),
    ("dropout past position 2^64", lambda g: g.dropout(X, 0.5, offset=2**64 - 2), "offset"),
    ("training=False", lambda g: g.dropout(X, 0.5, training=False), "training"),
    ("inplace=True", lambda g: g.dropout(X, 0.5, inplace=True), "inplace"),
    ("unknown dropout keyword", lambda g: g.dropout(X, 0.5, generator=None), "generator"),
    ("dy of another size", lambda g: g.dropout_backward(np.float32([1, 2]), KEY), "dy"),
    ("float64 dy", lambda g: g.dropout_backward(np.float64([1, 2, 3]), KEY), "dy"),
    ("not a key", lambda g: g.dropout_backward(X, (1, 2)), "key"),
    ("key with p outside [0, 1)", lambda g: g.dropout_backward(X, KEY._replace(p=1.0)), "key.p"),
    ("unknown backward keyword", lambda g: g.dropout_backward(X, KEY, p=0.5), "p is not a keyword"),
    ("state without counter", lambda g: g.load_state_dict({"seed": 1}), "state"),
    ("counter beyond 2^64", lambda g: g.load_state_dict({"seed": 1, "counter": 2**64 + 1}), "counter"),
    ("float counter", lambda g: philox4x32_10(np.float32([0, 0, 0, 0]), np.uint32([0, 0])), "counter"),
    ("counter of 3 words", lambda g: philox4x32_10(np.uint32([0, 0, 0]), np.uint32([0, 0])), "counter"),
    ("key of 3 words", lambda g: philox4x32_10(np.uint32([0] * 4), np.uint32([0, 0, 0])), "key"),
    ("word of 2^32", lambda g: philox4x32_10(np.int64([0, 0, 0, 2**32]), np.uint32([0, 0])), "counter"),
]


@pytest.mark.parametrize("what,call,word", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_each_refusal_names_its_option_and_leaves_buffers_and_the_counter_untouched(what, call, word):
    g = Generator(3, backend="cpu-numba")
    g.next_stream()
    x_before, key_before = X.copy(), KEY
    with pytest.raises(Refusal) as e:
        call(g)
    assert word in str(e.value), str(e.value)
    assert g.state_dict() == {"seed": 3, "counter": 1}, f"{what}: the counter moved"
    assert_same_bits(X, x_before, f"{what}: x was written")
    assert KEY == key_before


def test_a_dropout_into_a_read_only_input_is_fine_and_training_true_is_accepted():
    x = X.copy()
    x.flags.writeable = False
    y, _ = Generator(0, backend="cpu-cffi").dropout(x, 0.5, training=True, inplace=False)
    assert y.shape == x.shape and y.flags.writeable


# -- moments at a stated significance ---------------------------------------------------------------

N_MOMENTS = 10**6
Z_999 = 3.090232306167813  # the standard normal 0.999 quantile


def chi2_quantile_wilson_hilferty(k: int, z: float) -> float:
    """Wilson-Hilferty: chi2_k quantile ~ k (1 - 2/(9k) + z sqrt(2/(9k)))^3 (error < 0.1% at k = 63)."""
    return k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3


def test_wilson_hilferty_gives_the_tabulated_chi_square_quantile():
    assert abs(chi2_quantile_wilson_hilferty(63, Z_999) - 103.442) < 0.1  # tables: 103.442


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_uniform_moments_and_a_64_bin_chi_square_pass_at_stated_significance(backend):
    u = Generator(2024, backend=backend).uniform(N_MOMENTS).astype(np.float64)
    # u is uniform on {k 2^-24}: mean (1 - 2^-24)/2, variance (1 - 2^-48)/12
    mean, var = (1 - 2.0**-24) / 2, (1 - 2.0**-48) / 12
    assert abs(u.mean() - mean) < 5 * math.sqrt(var / N_MOMENTS), u.mean()  # 5 sigma
    # the sample variance has standard deviation sqrt((mu4 - var^2)/n), mu4 = 1/80
    assert abs(u.var() - var) < 5 * math.sqrt((1 / 80 - var**2) / N_MOMENTS), u.var()
    counts = np.bincount((u * 64).astype(np.int64), minlength=64)
    expected = N_MOMENTS / 64
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < chi2_quantile_wilson_hilferty(63, Z_999), chi2  # rejects a good generator 1 time in 1000


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_dropout_keeps_one_minus_p_of_the_elements_within_five_sigma(backend):
    p = 0.1
    y, _ = Generator(7, backend=backend).dropout(np.ones(N_MOMENTS, np.float32), p)
    # kept when (w >> 8) >= ceil(p32 2^24): probability q exactly
    q = 1 - math.ceil(Fraction(f32.round_float(p)) * 2**24) / 2**24
    kept = int(np.count_nonzero(y))
    assert abs(kept - N_MOMENTS * q) < 5 * math.sqrt(N_MOMENTS * q * (1 - q)), kept


# -- torch's semantics ------------------------------------------------------------------------------

def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between same-signed finite float32 values."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_dropout_matches_torch_kept_values_scaled_by_one_over_one_minus_p_and_zeros_elsewhere(p):
    x = (np.random.default_rng(11).standard_normal(20_000) + 0.01).astype(np.float32)
    x[x == 0] = 1.0
    y, key = Generator(5, backend="cpu-numba").dropout(x, p)
    kept = y != 0
    # torch's rule: kept values are x / (1 - p); ours round 1/(1-p) to float32 once, then the product
    exact = (x.astype(np.float64) / (1 - float(np.float32(p)))).astype(np.float32)
    assert ulps(y[kept], exact[kept]).max() <= 1
    assert (np.signbit(y[~kept]) == np.signbit(x[~kept])).all() and (y[~kept] == 0).all()
    # torch itself, on the same x and the same float32 p: its kept values are within 1 ulp of ours
    # (another mask, the same rule). With p as a double torch's scale differs more: p = 0.9 gives
    # 1/(1-0.9) = 10.0 but 1/(1-float32(0.9)) = 9.999998 (4 ulps); the contract rounds p first.
    torch.manual_seed(0)
    yt = torch.nn.functional.dropout(torch.from_numpy(x), float(np.float32(p))).numpy()
    both = kept & (yt != 0)
    assert both.any() and ulps(y[both], yt[both]).max() <= 1
    assert abs(kept.mean() - (yt != 0).mean()) < 10 * math.sqrt(p * (1 - p) / x.size)


def test_generator_and_random_are_public_names():
    assert mojolike.Generator is Generator and mojolike.random.philox4x32_10 is philox4x32_10
    assert "Generator" in mojolike.__all__ and "random" in mojolike.__all__
