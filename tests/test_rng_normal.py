"""Normal draws and the initializers of contracts/rng.md (clauses 4, 5 and 7).

The oracle against the clause written out here, every kernel backend against the
oracle bit for bit, split draws and thread counts, the public fallback for slots a
kernel leaves undecided, moments and a chi-square at stated significance, the
initializers' bounds against exact arithmetic and torch's formulas, and every
refusal by name.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
import torch
from conftest import CPU_BACKENDS, assert_same_bits, available, backend_case_params
from hypothesis import given, settings
from hypothesis import strategies as st
from mojolike.oracles import crmath as cr
from mojolike.oracles import f32
from mojolike.oracles import rng as spec

from mojolike import Generator, Refusal
from mojolike.core import registry
from mojolike.ops.crmath import UNDECIDED

SIM = pytest.mark.skipif(not available("cuda-sim"), reason="numba-cuda is not installed")
KERNEL_BACKENDS = [*CPU_BACKENDS, pytest.param("cuda-sim", marks=SIM)]
BIG_SEED = 0xFEDC_BA98_7654_3210  # both key words nonzero
BIG_STREAM = 0x1_0000_0003  # both stream words nonzero


@lru_cache(maxsize=None)
def oracle_normal(seed, stream, n, mean, std, offset) -> np.ndarray:
    return np.float32(spec.normal(seed, stream, n, mean, std, offset))


# -- the oracle is clause 4 -------------------------------------------------------------------------

def clause_4(seed: int, stream: int, q: int, mean: float, std: float) -> float:
    """Clause 4 for stream position q, written out from the contract text."""
    b = q // 4
    w = spec.philox4x32_10((b % 2**32, b >> 32, stream % 2**32, stream >> 32),
                           (seed % 2**32, seed >> 32))
    wa, wb = (w[0], w[1]) if q % 4 in (0, 1) else (w[2], w[3])
    u1 = Fraction((wa >> 8) + 1, 2**24)
    u2 = Fraction(wb >> 8, 2**23)
    assert 0 < u1 <= 1 and 0 <= u2 < 2
    lg = cr.logf(float(u1))
    r = f32.sqrt(f32.mul(-2.0, lg))
    assert f32.mul(-2.0, lg) == -2.0 * lg  # the product by -2 is exact
    t = cr.cospif(float(u2)) if q % 2 == 0 else cr.sinpif(float(u2))
    z = f32.mul(r, t)
    return f32.add(f32.round_float(mean), f32.mul(f32.round_float(std), z))


def test_the_oracle_draws_clause_4_pairs_by_position_cos_at_even_and_sin_at_odd_positions():
    for seed, stream, offset, n in [(0, 0, 0, 12), (BIG_SEED, BIG_STREAM, 2**64 - 9, 9), (5, 1, 3, 7)]:
        want = [clause_4(seed, stream, offset + i, 0.25, 3.0) for i in range(n)]
        got = spec.normal(seed, stream, n, 0.25, 3.0, offset)
        assert [f32.f32_to_bits(v) for v in got] == [f32.f32_to_bits(v) for v in want]


def test_the_two_values_of_a_pair_share_their_radius_so_their_squares_sum_to_r_squared():
    # z_even^2 + z_odd^2 = r^2 (cos^2 + sin^2): within a few float32 roundings
    z = spec.normal(11, 2, 4000)
    for q in range(0, 4000, 2):
        block = spec.philox4x32_10(spec.block_counter(q // 4, 2), spec.key_of(11))
        a = q & 2
        r = spec.normal_radius(spec.normal_units(block[a], block[a + 1])[0])
        assert abs(z[q] ** 2 + z[q + 1] ** 2 - r * r) <= 8 * 2.0**-24 * max(r * r, 2.0**-100)


def test_u1_of_one_gives_a_zero_radius_and_the_value_mean_and_the_extremes_are_bounded():
    top, bottom = 0xFFFFFFFF, 0x000000FF  # (w >> 8) = 2^24 - 1 (u1 = 1) and 0 (u1 = 2^-24)
    assert spec.normal_units(top, top) == (1.0, 2.0 - 2.0**-23)
    assert spec.normal_units(bottom, bottom) == (2.0**-24, 0.0)
    assert math.copysign(1.0, spec.normal_radius(1.0)) == -1.0 and spec.normal_radius(1.0) == 0.0
    for q in (0, 1):
        assert f32.same(spec.normal_value((top, 0, 0, 0), q, 0.0, 1.0), 0.0)  # +0: 0 + (+-0)
        assert spec.normal_value((top, 12345 << 8, 0, 0), q, -1.5, 4.0) == -1.5
    rmax = spec.normal_radius(2.0**-24)
    assert rmax == f32.sqrt(f32.mul(-2.0, cr.logf(2.0**-24))) and 5.76 < rmax < 5.77
    assert spec.normal_value((bottom, bottom, 0, 0), 0, 0.0, 1.0) == rmax  # cos(0) = 1
    assert f32.same(spec.normal_value((bottom, bottom, 0, 0), 1, 0.0, 1.0), 0.0)  # sin(0) = +0


# -- every kernel backend equals the oracle ---------------------------------------------------------

# (seed, stream, offset, n, mean, std): heads and tails of every length, 64-bit seeds, streams
# and positions up to the last one, std 0, a shifted mean
NORMAL_CASES = [
    (0, 0, 0, 1, 0.0, 1.0), (1, 2, 1, 2, 0.0, 1.0), (3, 4, 2, 3, -1.0, 0.5), (5, 6, 3, 5, 2.5, 0.0),
    (BIG_SEED, BIG_STREAM, 5, 13, -3.0, 7.0), (7, 0, 0, 200, 0.1, 0.01),
    (8, 2**64 - 1, 2**64 - 11, 11, 1e-3, 3e30), (2**64 - 1, 9, 2**40 + 3, 150, -2.0, 1e-30),
]
BIG_NORMAL_CASES = [(BIG_SEED, BIG_STREAM, 3, 2 * 8192 + 7, 1.0, 2.0)]  # two parallel tasks


def _ids(case) -> str:
    seed, s, off, n, mean, std = case
    return f"s{s % 1000}-off{off % 1000}-n{n}-N({mean:g},{std:g})"


@pytest.mark.parametrize("backend,case", backend_case_params(KERNEL_BACKENDS, NORMAL_CASES,
                                                             BIG_NORMAL_CASES))
def test_normal_equals_the_oracle_on_every_kernel_backend(backend, case):
    seed, s, offset, n, mean, std = case
    g = Generator(seed, backend=backend)
    got = g.normal(n, mean, std, stream=s, offset=offset)
    assert_same_bits(got, oracle_normal(seed, s, n, mean, std, offset), f"{backend} normal {_ids(case)}")
    assert g.state_dict()["counter"] == 0, "an explicit stream must not move the counter"


def test_the_oracle_backend_is_the_oracle_and_a_shape_is_filled_in_c_order():
    g = Generator(BIG_SEED, backend="oracle")
    got = g.normal((3, 5), -1.0, 2.0, stream=7)
    assert got.shape == (3, 5) and got.dtype == np.float32
    assert_same_bits(got.reshape(-1), oracle_normal(BIG_SEED, 7, 15, -1.0, 2.0, 0), "oracle backend")


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), stream=st.integers(0, 2**64 - 1),
       offset=st.integers(0, 2**64 - 41), n=st.integers(1, 40),
       mean=st.floats(-1e30, 1e30), std=st.floats(0, 1e30))
def test_normal_on_the_cpu_backends_equals_the_oracle_for_any_seed_stream_offset_mean_and_std(
        seed, stream, offset, n, mean, std):
    want = np.float32(spec.normal(seed, stream, n, mean, std, offset))
    for backend in CPU_BACKENDS:
        got = Generator(seed, backend=backend).normal(n, mean, std, stream=stream, offset=offset)
        assert_same_bits(got, want, f"{backend} seed={seed} stream={stream} offset={offset} n={n}")


def test_the_numba_pair_function_equals_the_oracle_at_the_extreme_words():
    from mojolike.native import rng as nrng
    ends = [0x00000000, 0x000000FF, 0x00000100, 0x7FFFFFFF, 0x80000000, 0xFFFFFEFF, 0xFFFFFFFF]
    for wa in ends:
        for wb in ends + [0x40000000, 0xC0000000, 0x20000000, 0x60000000]:  # u2 = 1/2, 3/2, 1/4, 3/4
            for mean, std in [(0.0, 1.0), (-2.5, 3.0)]:
                v0, v1, ok0, ok1 = nrng._normal_pair(np.uint64(wa), np.uint64(wb), np.float32(mean),
                                                     np.float32(std))
                assert ok0 and ok1
                for q, v in ((0, v0), (1, v1)):
                    want = spec.normal_value((wa, wb, 0, 0), q, mean, std)
                    assert_same_bits(v, want, f"pair {wa:08x} {wb:08x} q={q} N({mean},{std})")


# -- the undecided slots ----------------------------------------------------------------------------

def test_no_u1_and_no_u2_of_a_normal_draw_is_undecided_by_the_fast_logf_sinpif_cospif():
    # all 2^24 values each: u1 = k 2^-24, k = 1..2^24, and u2 = k 2^-23, k = 0..2^24 - 1
    k = registry.kernels("test", "crmath", "cpu-numba", "identical")
    j = np.arange(1 << 24, dtype=np.int64)
    out = np.empty(1 << 24, np.float32)
    u = (j + 1).astype(np.float32) * np.float32(2.0**-24)
    assert k.logf_into(u, out) == 0
    u = j.astype(np.float32) * np.float32(2.0**-23)
    assert k.sinpif_into(u, out) == 0 and k.cospif_into(u, out) == 0


class MarkingKernels:
    """cpu-numba's rng kernels, with chosen slots of each normal draw turned UNDECIDED."""

    backend, numeric_mode = "cpu-numba", "identical"
    details: dict = {}
    takes_pieces = False

    def __init__(self, slots, miscount: int = 0):
        self._k = registry.kernels("test", "rng", "cpu-numba", "identical")
        self.slots, self.miscount = slots, miscount

    def normal_into(self, key0, key1, stream, offset, mean, std, out) -> int:
        assert self._k.normal_into(key0, key1, stream, offset, mean, std, out) == 0
        out.view(np.uint32)[self.slots] = UNDECIDED
        return len(self.slots) + self.miscount


def test_slots_a_kernel_leaves_undecided_get_the_oracles_value_at_their_position():
    slots = [0, 1, 6, 7, 38]
    with registry.override("rng", "cpu-numba", "identical", MarkingKernels(slots)):
        got = Generator(BIG_SEED, backend="cpu-numba").normal(39, 0.5, 2.0, stream=3, offset=5)
    assert_same_bits(got, oracle_normal(BIG_SEED, 3, 39, 0.5, 2.0, 5), "after the fallback")


def test_a_kernel_whose_undecided_count_does_not_match_its_marks_is_an_error():
    with registry.override("rng", "cpu-numba", "identical", MarkingKernels([2], miscount=1)):
        with pytest.raises(RuntimeError, match="undecided"):
            Generator(1, backend="cpu-numba").normal(8)


# -- invariance: split draws, threads -------------------------------------------------------------

@pytest.mark.parametrize("backend", ["oracle", *KERNEL_BACKENDS])
def test_a_normal_draw_split_in_pieces_with_odd_and_even_offsets_equals_the_unsplit_draw(backend):
    n = {"oracle": 41, "cuda-sim": 61}.get(backend, 20_011)
    cuts = [0, 1, 3, 6, 7, 13, n // 2 + 1, n - 2, n]  # pieces start at odd and even positions
    g = Generator(BIG_SEED, backend=backend)
    whole = g.normal(n, 1.0, 3.0, stream=5, offset=2)
    pieces = [g.normal(b - a, 1.0, 3.0, stream=5, offset=2 + a) for a, b in zip(cuts, cuts[1:])]
    assert_same_bits(np.concatenate(pieces), whole, f"{backend} normal pieces")
    one_by_one = [g.normal(1, 1.0, 3.0, stream=5, offset=2 + i)[0] for i in range(min(n, 9))]
    assert_same_bits(np.float32(one_by_one), whole[:9], f"{backend} single positions")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_one_and_two_threads_give_the_same_normal_bits(backend):
    k = registry.kernels("test", "rng", backend, "identical")
    n = 50_003  # seven parallel tasks of 2048 blocks, a head and a tail
    g = Generator(BIG_SEED, backend=backend)
    before = k.get_num_threads()
    seen = []
    try:
        for threads in (1, 2):
            k.set_num_threads(threads)
            seen.append(g.normal(n, 0.5, 2.0, stream=1, offset=3).view(np.uint32).copy())
            seen.append(g.kaiming_normal(n, 37, stream=2).view(np.uint32).copy())
    finally:
        k.set_num_threads(before)
    assert (seen[0] == seen[2]).all() and (seen[1] == seen[3]).all(), f"{backend}: 2 threads vs 1"


def test_the_cpu_backends_agree_on_a_draw_of_a_million():
    a = Generator(99, backend="cpu-numba").normal(10**6 + 3, stream=4, offset=1)
    b = Generator(99, backend="cpu-cffi").normal(10**6 + 3, stream=4, offset=1)
    assert_same_bits(a, b, "cpu-numba vs cpu-cffi")


# -- moments at a stated significance ---------------------------------------------------------------

N_MOMENTS = 10**6
Z_999 = 3.090232306167813  # the standard normal 0.999 quantile
BINS = 64


def chi2_quantile_wilson_hilferty(k: int, z: float) -> float:
    """Wilson-Hilferty: chi2_k quantile ~ k (1 - 2/(9k) + z sqrt(2/(9k)))^3 (error < 0.1% at k = 63)."""
    return k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3


def normal_quantile(p: float) -> float:
    """Phi^-1(p) by bisection on Phi(x) = (1 + erf(x / sqrt 2)) / 2 (to about 1e-15)."""
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if (1 + math.erf(mid / math.sqrt(2))) / 2 < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def test_the_bin_edges_are_the_standard_normal_quantiles():
    assert normal_quantile(0.5) == pytest.approx(0.0, abs=1e-12)
    assert normal_quantile(0.999) == pytest.approx(Z_999, abs=1e-12)
    assert normal_quantile(1 / 64) == pytest.approx(-2.153874694061456, abs=1e-12)  # tables


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_normal_moments_and_a_64_bin_chi_square_pass_at_stated_significance(backend):
    z = Generator(2024, backend=backend).normal(N_MOMENTS).astype(np.float64)
    # mean 0, variance 1; the sample variance has standard deviation sqrt((mu4 - 1)/n), mu4 = 3
    assert abs(z.mean()) < 5 * math.sqrt(1 / N_MOMENTS), z.mean()  # 5 sigma
    assert abs(z.var() - 1) < 5 * math.sqrt((3 - 1) / N_MOMENTS), z.var()
    edges = np.array([normal_quantile(k / BINS) for k in range(1, BINS)])
    counts = np.bincount(np.searchsorted(edges, z), minlength=BINS)
    expected = N_MOMENTS / BINS
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < chi2_quantile_wilson_hilferty(BINS - 1, Z_999), chi2  # rejects a good one 1 in 1000


def test_scaled_draws_have_the_requested_mean_and_standard_deviation():
    z = Generator(5, backend="cpu-numba").normal(N_MOMENTS, -3.0, 0.25).astype(np.float64)
    assert abs(z.mean() + 3.0) < 5 * 0.25 / math.sqrt(N_MOMENTS)
    assert abs(z.std() / 0.25 - 1) < 5 * math.sqrt(2 / N_MOMENTS) / 2 + 1e-6


# -- initializers -----------------------------------------------------------------------------------

def is_nearest_f32_of_sqrt(v: float, x: Fraction) -> bool:
    """v is the binary32 nearest sqrt(x): (v - ulp/2)^2 <= x <= (v + ulp/2)^2 (a normal v > 0)."""
    ulp = Fraction(2) ** (math.frexp(v)[1] - 24)
    lo, hi = Fraction(v) - ulp / 2, Fraction(v) + ulp / 2
    if Fraction(v) == Fraction(2) ** (math.frexp(v)[1] - 1):  # a power of two: the ulp below is half
        lo = Fraction(v) - ulp / 4
    return lo * lo <= x <= hi * hi


SQRT2_F32 = f32.bits_to_f32(0x3FB504F3)  # the binary32 nearest sqrt(2)


@pytest.mark.parametrize("what,got,want", [
    ("kaiming_uniform fan_in=6", spec.kaiming_uniform_bound(6), 1.0),
    ("kaiming_uniform fan_in=24", spec.kaiming_uniform_bound(24), 0.5),
    ("kaiming_uniform fan_in=3", spec.kaiming_uniform_bound(3), SQRT2_F32),
    ("kaiming_uniform fan_in=12 gain=2", spec.kaiming_uniform_bound(12, 2.0), 1.0),
    ("kaiming_uniform fan_in=1 gain=0", spec.kaiming_uniform_bound(1, 0.0), 0.0),
    ("kaiming_normal fan_in=2", spec.kaiming_normal_std(2), 1.0),
    ("kaiming_normal fan_in=8", spec.kaiming_normal_std(8), 0.5),
    ("kaiming_normal fan_in=1", spec.kaiming_normal_std(1), SQRT2_F32),
    ("kaiming_normal fan_in=4 gain=3", spec.kaiming_normal_std(4, 3.0), 1.5),
    ("xavier_uniform 1+5", spec.xavier_uniform_bound(1, 5), 1.0),
    ("xavier_uniform 10+14 gain=0.5", spec.xavier_uniform_bound(10, 14, 0.5), 0.25),
    ("xavier_normal 1+1", spec.xavier_normal_std(1, 1), 1.0),
    ("xavier_normal 4+4", spec.xavier_normal_std(4, 4), 0.5),
    # float32(sqrt 2) / sqrt 2 = 1 - 1.7e-8: within half an ulp (3e-8) below 1.0
    ("xavier_normal 2+2 gain=f32(sqrt2)", spec.xavier_normal_std(2, 2, SQRT2_F32), 1.0),
    ("xavier_uniform 2+2 gain=f32(sqrt2)", spec.xavier_uniform_bound(2, 2, SQRT2_F32),
     f32.bits_to_f32(0x3FDDB3D7)),  # float32(sqrt 3): f32(sqrt 2) sqrt(3/2) = sqrt 3 (1 - 1.7e-8)
])
def test_initializer_scales_equal_hand_checked_values(what, got, want):
    assert f32.same(got, want), (what, got, want)


def test_initializer_scales_are_the_float32_nearest_their_exact_value():
    for fan_in in list(range(1, 300)) + [511, 512, 1000, 4096, 12_345, 2**31 - 1]:
        assert is_nearest_f32_of_sqrt(spec.kaiming_uniform_bound(fan_in), Fraction(6, fan_in))
        assert is_nearest_f32_of_sqrt(spec.kaiming_normal_std(fan_in), Fraction(2, fan_in))
        for gain in (0.1, 1.0, 5.0 / 3):  # rounded to float32 first
            g = Fraction(f32.round_float(gain))
            assert is_nearest_f32_of_sqrt(spec.kaiming_uniform_bound(fan_in, f32.round_float(gain)),
                                          3 * g * g / fan_in)
            assert is_nearest_f32_of_sqrt(spec.kaiming_normal_std(fan_in, f32.round_float(gain)),
                                          g * g / fan_in)
        fan_out = 3 * fan_in + 1
        assert is_nearest_f32_of_sqrt(spec.xavier_uniform_bound(fan_in, fan_out),
                                      Fraction(6, fan_in + fan_out))
        assert is_nearest_f32_of_sqrt(spec.xavier_normal_std(fan_in, fan_out),
                                      Fraction(2, fan_in + fan_out))


def ulps(a: float, b: float) -> int:
    return abs(f32.f32_to_bits(a) - f32.f32_to_bits(b))


def test_initializer_scales_equal_torchs_formulas_within_one_ulp():
    # torch.nn.init's own expressions, in binary64, rounded to float32 at the end
    gain_relu = torch.nn.init.calculate_gain("leaky_relu", 0)
    assert gain_relu == math.sqrt(2.0)
    worst = 0
    for fan_in in list(range(1, 2000)) + [4096, 65_536, 10**6]:
        fan_out = (7 * fan_in) % 1000 + 1
        std = gain_relu / math.sqrt(fan_in)
        pairs = [
            (spec.kaiming_uniform_bound(fan_in), math.sqrt(3.0) * std),
            (spec.kaiming_normal_std(fan_in), std),
            (spec.kaiming_uniform_bound(fan_in, 1.0), math.sqrt(3.0) * (1.0 / math.sqrt(fan_in))),
            (spec.xavier_uniform_bound(fan_in, fan_out),
             math.sqrt(3.0) * (1.0 * math.sqrt(2.0 / float(fan_in + fan_out)))),
            (spec.xavier_normal_std(fan_in, fan_out, 0.5), 0.5 * math.sqrt(2.0 / float(fan_in + fan_out))),
        ]
        for ours, theirs in pairs:
            worst = max(worst, ulps(ours, float(np.float32(theirs))))
    assert worst <= 1


@pytest.mark.parametrize("backend", ["oracle", *KERNEL_BACKENDS])
def test_initializers_equal_the_oracle_and_are_uniform_or_normal_with_their_scale(backend):
    g = Generator(BIG_SEED, backend=backend)
    n = 37
    cases = [
        (g.kaiming_uniform((n,), 6, stream=1), spec.kaiming_uniform(BIG_SEED, 1, n, 6)),
        (g.kaiming_uniform(n, 300, 0.5, stream=2), spec.kaiming_uniform(BIG_SEED, 2, n, 300, 0.5)),
        (g.kaiming_normal(n, 3, stream=3), spec.kaiming_normal(BIG_SEED, 3, n, 3)),
        (g.kaiming_normal(n, 300, 1.5, stream=4), spec.kaiming_normal(BIG_SEED, 4, n, 300, 1.5)),
        (g.xavier_uniform(n, 20, 30, stream=5), spec.xavier_uniform(BIG_SEED, 5, n, 20, 30)),
        (g.xavier_uniform(n, 2, 4, 2.0, stream=6), spec.xavier_uniform(BIG_SEED, 6, n, 2, 4, 2.0)),
        (g.xavier_normal(n, 20, 30, stream=7), spec.xavier_normal(BIG_SEED, 7, n, 20, 30)),
        (g.xavier_normal(n, 1, 1, 0.1, stream=8), spec.xavier_normal(BIG_SEED, 8, n, 1, 1, 0.1)),
    ]
    for i, (got, want) in enumerate(cases):
        assert_same_bits(got, np.float32(want), f"{backend} initializer case {i}")
    b = spec.kaiming_uniform_bound(300, 0.5)
    assert_same_bits(cases[1][0], g.uniform(n, -b, b, stream=2), f"{backend} kaiming_uniform")
    s = spec.xavier_normal_std(20, 30)
    assert_same_bits(cases[6][0], g.normal(n, 0.0, s, stream=7), f"{backend} xavier_normal")
    assert g.state_dict()["counter"] == 0


def test_initializers_without_a_stream_take_the_next_stream_and_keep_their_shape():
    g = Generator(3, backend="cpu-numba")
    w = g.kaiming_uniform((4, 6), fan_in=6)
    assert w.shape == (4, 6) and w.dtype == np.float32 and np.abs(w).max() <= 1.0
    v = g.xavier_normal((2, 3, 5), 15, 10)
    assert v.shape == (2, 3, 5) and g.state_dict()["counter"] == 2
    assert_same_bits(v, Generator(3, backend="oracle").xavier_normal((2, 3, 5), 15, 10, stream=1),
                     "stream 1")


def test_torchs_kaiming_uniform_draws_lie_within_our_bound_and_fill_it():
    # torch draws from [-bound, bound] with its double-precision bound: within 1 ulp of ours
    fan_in = 37
    t = torch.empty(64, fan_in)
    torch.manual_seed(0)
    torch.nn.init.kaiming_uniform_(t, a=0, nonlinearity="leaky_relu")
    ours = Generator(0, backend="cpu-numba").kaiming_uniform((64, fan_in), fan_in)
    b = spec.kaiming_uniform_bound(fan_in)
    nxt = float(np.nextafter(np.float32(b), np.float32(np.inf)))
    assert np.abs(t.numpy()).max() <= nxt and np.abs(ours).max() <= b
    assert np.abs(ours).max() > 0.99 * b and np.abs(t.numpy()).max() > 0.99 * b


# -- refusals ------------------------------------------------------------------------------------

def _exhausted() -> Generator:
    g = Generator(3, backend="cpu-numba")
    g.load_state_dict({"seed": 3, "counter": 2**64})
    return g


# (what, call(generator), word the message must contain)
REFUSALS = [
    ("negative std", lambda g: g.normal(3, 0.0, -1.0), "std"),
    ("tiny negative std", lambda g: g.normal(3, 0.0, -1e-60), "std"),
    ("NaN std", lambda g: g.normal(3, 0.0, float("nan")), "std"),
    ("infinite std", lambda g: g.normal(3, 0.0, math.inf), "std"),
    ("std beyond float32", lambda g: g.normal(3, 0.0, 1e39), "std"),
    ("std not a number", lambda g: g.normal(3, 0.0, "1"), "std"),
    ("NaN mean", lambda g: g.normal(3, float("nan")), "mean"),
    ("infinite mean", lambda g: g.normal(3, -math.inf), "mean"),
    ("zero dimension", lambda g: g.normal((2, 0)), "shape"),
    ("negative size", lambda g: g.normal(-3), "shape"),
    ("non-integer dimension", lambda g: g.normal((2, 1.5)), "shape"),
    ("bool dimension", lambda g: g.normal((2, True)), "shape"),
    ("shape not a tuple", lambda g: g.normal("3"), "shape"),
    ("normal stream of 2^64", lambda g: g.normal(3, stream=2**64), "stream"),
    ("normal past position 2^64", lambda g: g.normal(3, offset=2**64 - 2), "offset"),
    ("negative normal offset", lambda g: g.normal(3, offset=-1), "offset"),
    ("unknown normal keyword", lambda g: g.normal(3, dtype=np.float64), "dtype"),
    ("generator keyword", lambda g: g.normal(3, generator=None), "generator"),
    ("exhausted normal", lambda g: _exhausted().normal(3), "exhausted"),
    ("fan_in of 0", lambda g: g.kaiming_uniform(3, 0), "fan_in"),
    ("negative fan_in", lambda g: g.kaiming_normal(3, -4), "fan_in"),
    ("float fan_in", lambda g: g.kaiming_uniform(3, 6.0), "fan_in"),
    ("bool fan_in", lambda g: g.kaiming_normal(3, True), "fan_in"),
    ("xavier fan_out of 0", lambda g: g.xavier_uniform(3, 4, 0), "fan_out"),
    ("xavier float fan_in", lambda g: g.xavier_normal(3, 4.5, 2), "fan_in"),
    ("negative gain", lambda g: g.kaiming_uniform(3, 6, -1.0), "gain"),
    ("NaN gain", lambda g: g.kaiming_normal(3, 6, float("nan")), "gain"),
    ("infinite gain", lambda g: g.xavier_uniform(3, 2, 2, math.inf), "gain"),
    ("gain beyond float32", lambda g: g.xavier_normal(3, 2, 2, 1e39), "gain"),
    ("xavier gain None", lambda g: g.xavier_uniform(3, 2, 2, None), "gain"),
    ("gain not a number", lambda g: g.kaiming_uniform(3, 6, "relu"), "gain"),
    ("bound overflowing float32", lambda g: g.kaiming_uniform(3, 1, 3e38), "gain"),
    ("width 2 bound overflowing float32", lambda g: g.xavier_uniform(3, 1, 5, 2e38), "gain"),
    ("initializer zero dimension", lambda g: g.xavier_normal((3, 0), 2, 2), "shape"),
    ("initializer offset", lambda g: g.kaiming_uniform(3, 6, offset=1), "offset"),
    ("initializer unknown keyword", lambda g: g.kaiming_normal(3, 6, mode="fan_out"), "mode"),
    ("initializer nonlinearity", lambda g: g.kaiming_uniform(3, 6, nonlinearity="relu"),
     "nonlinearity"),
    ("initializer stream of 2^64", lambda g: g.xavier_uniform(3, 2, 2, stream=2**64), "stream"),
    ("exhausted initializer", lambda g: _exhausted().kaiming_uniform(3, 6), "exhausted"),
]


@pytest.mark.parametrize("what,call,word", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_each_normal_and_initializer_refusal_names_its_option_and_leaves_the_counter(what, call, word):
    g = Generator(3, backend="cpu-numba")
    g.next_stream()
    with pytest.raises(Refusal) as e:
        call(g)
    assert word in str(e.value), str(e.value)
    assert g.state_dict() == {"seed": 3, "counter": 1}, f"{what}: the counter moved"


def test_std_zero_and_gain_zero_are_accepted_and_give_the_mean_and_zeros():
    g = Generator(4, backend="cpu-cffi")
    assert_same_bits(g.normal(9, 1.25, 0.0), np.full(9, 1.25, np.float32), "std 0")
    assert_same_bits(g.normal(9, 0.0, -0.0), np.zeros(9, np.float32), "std -0 is +0")
    assert_same_bits(g.kaiming_uniform(9, 6, 0.0), np.zeros(9, np.float32), "gain 0 (uniform)")
    assert (g.xavier_normal(9, 2, 2, 0.0) == 0).all()
