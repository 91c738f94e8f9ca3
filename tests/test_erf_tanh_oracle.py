"""The correctly rounded tanhf/erff oracle and torch's GELU formulas on it (oracles/erf_tanh.py)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from mojolike.oracles import crmath
from mojolike.oracles import erf_tanh as spec
from mojolike.oracles.crmath import _decide
from mojolike.oracles.f32 import bits_to_f32, f32_to_bits, round_float, round_fraction
from mojolike.oracles.schedule import pi_interval

SIGN = 0x80000000

SPECIAL_TANH = {  # input pattern -> tanhf pattern
    0x00000000: 0x00000000, 0x80000000: 0x80000000,  # +-0 keep their sign
    0x7F800000: 0x3F800000, 0xFF800000: 0xBF800000,  # +-inf give +-1
    0x7F800001: 0x7FC00001, 0xFFC01234: 0xFFC01234, 0x7FFFFFFF: 0x7FFFFFFF,  # NaNs quieted
    0x00000001: 0x00000001, 0x807FFFFF: 0x807FFFFF,  # subnormals: tanh x rounds to x
    0x3F800000: 0x3F42F7D6,  # tanh 1
    0x7F7FFFFF: 0x3F800000, 0xFF7FFFFF: 0xBF800000,
}
SPECIAL_ERF = {
    0x00000000: 0x00000000, 0x80000000: 0x80000000,
    0x7F800000: 0x3F800000, 0xFF800000: 0xBF800000,
    0x7F800001: 0x7FC00001, 0xFFC01234: 0xFFC01234, 0x7FFFFFFF: 0x7FFFFFFF,
    0x00000001: 0x00000001, 0x80000001: 0x80000001,  # 2/sqrt(pi) 2^-149 = 1.128 2^-149
    0x00000004: 0x00000005,  # 4.51 2^-149
    0x3F800000: 0x3F57BB3D,  # erf 1
    0x7F7FFFFF: 0x3F800000, 0xFF7FFFFF: 0xBF800000,
}

# inputs whose exact value lies within 2^-23 ulp of a rounding boundary, found by
# screening every tanh input from 2^-12 to TANH_ONE with np.tanh and 2^25 sampled erf
# inputs with math.erf, then measured with the oracle's enclosures (as
# benchmarks/erf_tanh_exhaustive.py lists them): pattern -> (result pattern, log2 ulps
# from the nearest midpoint)
HARD_TANH = {
    0x3AC37DE2: (0x3AC37DD9, -26.6), 0x3EEE0566: (0x3EDE3CBE, -25.8),
    0x3CD41B91: (0x3CD40F70, -25.3), 0x40ACB4D0: (0x3F7FFD50, -25.2),
}
HARD_ERF = {
    0x39C0057D: (0x39D8AC49, -27.6), 0x3F043A75: (0x3F08EED3, -25.5),
    0x3B13E8A5: (0x3B26E59A, -24.1), 0x3576249F: (0x358ADF11, -23.1),
}
ERF_FIRST_ONE_BITS = 0x407AD445  # the least binary32 with erff = 1 (3.91921...)


def _sample_patterns(seed: int, n: int, lo: int, hi: int) -> list[int]:
    return [int(u) for u in np.random.default_rng(seed).integers(lo, hi, size=n)]


def _midpoint_distance(lo: Fraction, hi: Fraction) -> Fraction:
    """How far (in ulps of the result) the enclosed value lies from the nearest midpoint."""
    v = abs(lo + hi) / 2
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    q = v / Fraction(2) ** (e - 23)
    return abs(q - q.numerator // q.denominator - Fraction(1, 2))


def test_the_oracle_gives_the_special_values():
    for u, want in SPECIAL_TANH.items():
        assert spec.tanhf_bits(u) == want, hex(u)
    for u, want in SPECIAL_ERF.items():
        assert spec.erff_bits(u) == want, hex(u)


def test_tanh_and_erf_are_odd_bit_for_bit():
    for u in _sample_patterns(1, 400, 0, 0x7F800000):
        assert spec.tanhf_bits(u | SIGN) == spec.tanhf_bits(u) | SIGN, hex(u)
        assert spec.erff_bits(u | SIGN) == spec.erff_bits(u) | SIGN, hex(u)


@pytest.mark.parametrize("name", ["tanh", "erf"])
def test_the_oracle_is_within_one_ulp_of_math_on_sampled_inputs(name):
    oracle, ref = (spec.tanhf_bits, math.tanh) if name == "tanh" else (spec.erff_bits, math.erf)
    # the interesting binades (2^-20 .. 16) densely, every other finite value sparsely
    patterns = _sample_patterns(2, 1500, 0x35800000, 0x41800000) + _sample_patterns(3, 500, 0, 0x7F800000)
    for u in patterns:
        x = bits_to_f32(u)
        got, want = oracle(u), f32_to_bits(round_float(ref(x)))
        assert abs(got - want) <= 1, (hex(u), hex(got), hex(want))  # same sign: patterns are ordered


def test_the_hard_points_are_decided_exactly():
    for table, bits, interval in ((HARD_TANH, spec.tanhf_bits, spec.tanh_interval),
                                  (HARD_ERF, spec.erff_bits, spec.erf_interval)):
        for u, (want, log2_distance) in table.items():
            lo, hi = interval(bits_to_f32(u), 320)
            assert f32_to_bits(round_fraction(lo)) == f32_to_bits(round_fraction(hi)) == want, hex(u)
            assert bits(u) == want and bits(u | SIGN) == want | SIGN, hex(u)
            d = _midpoint_distance(lo, hi)
            assert abs(math.log2(d) - log2_distance) < 0.1, (hex(u), math.log2(d))


def test_tanh_becomes_one_exactly_above_half_log_of_two_to_the_26_minus_one():
    # 1 - tanh x = 2 / (e^(2x) + 1) < 2^-25 exactly when x > ln(2^26 - 1) / 2
    lo, hi = crmath.log_interval(float(2 ** 26 - 1), 200)
    below = bits_to_f32(spec.TANH_ONE_BITS - 1)
    assert Fraction(below) < lo / 2 and hi / 2 < Fraction(spec.TANH_ONE)
    # the enclosure itself agrees on both sides of the threshold the shortcut uses
    assert _decide(spec._tanh_enclosure(spec.TANH_ONE)) == 1.0
    assert f32_to_bits(_decide(spec._tanh_enclosure(below))) == 0x3F7FFFFF
    assert spec.tanhf_bits(spec.TANH_ONE_BITS - 1) == 0x3F7FFFFF
    for u in _sample_patterns(4, 50, spec.TANH_ONE_BITS, 0x7F800000):
        assert spec.tanhf_bits(u) == 0x3F800000 and spec.tanhf_bits(u | SIGN) == 0xBF800000


def test_erf_becomes_one_by_the_erfc_bound_at_its_threshold():
    # erfc(T) < e^(-T^2) / (T sqrt(pi)) <= 2^-25, i.e. e_hi^2 2^50 <= T^2 pi_lo
    t = spec.ERF_ONE
    _, e_hi = crmath.exp_interval(-(t * t), 200)  # t * t is exact in binary64 (8 bits squared)
    pi_lo, _ = pi_interval(200)
    assert Fraction(t) ** 2 == Fraction(t * t)
    assert e_hi ** 2 * 2 ** 50 <= Fraction(t) ** 2 * pi_lo
    # below the threshold the enclosure decides; it reaches 1 a little earlier
    assert _decide(spec._erf_enclosure(bits_to_f32(ERF_FIRST_ONE_BITS))) == 1.0
    assert spec.erff_bits(ERF_FIRST_ONE_BITS) == 0x3F800000
    assert spec.erff_bits(ERF_FIRST_ONE_BITS - 1) == 0x3F7FFFFF
    for u in _sample_patterns(5, 8, ERF_FIRST_ONE_BITS, 0x41000000):  # up to 8: the enclosure runs
        assert _decide(spec._erf_enclosure(bits_to_f32(u))) == 1.0, hex(u)
    for u in _sample_patterns(6, 50, spec.ERF_ONE_BITS, 0x7F800000):
        assert spec.erff_bits(u) == 0x3F800000 and spec.erff_bits(u | SIGN) == 0xBF800000


def test_tanh_of_a_tiny_input_rounds_to_the_input_itself():
    # x - x^3/3 < tanh x < x, and below 2^-13 x^3/3 is under half the gap below x
    for u in _sample_patterns(7, 200, 1, 0x39000000):
        assert spec.tanhf_bits(u) == u, hex(u)
    # ... while above it tanh x moves off x
    assert spec.tanhf_bits(0x3C000000) != 0x3C000000  # 2^-7


def test_erf_of_a_subnormal_or_tiny_input_is_two_x_over_sqrt_pi_rounded():
    pi_lo, pi_hi = pi_interval(200)
    # sqrt(pi) bounds from the pi bounds: s_lo^2 <= pi_lo, s_hi^2 >= pi_hi
    s_lo, s_hi = Fraction(math.isqrt(int(pi_lo * 2 ** 400)), 2 ** 200), Fraction(math.isqrt(int(pi_hi * 2 ** 400)) + 1, 2 ** 200)
    patterns = list(range(1, 40)) + _sample_patterns(8, 200, 1, 0x00800000) + _sample_patterns(9, 100, 0x00800000, 0x20000000)
    for u in patterns:
        x = Fraction(bits_to_f32(u))
        lo = 2 * x / s_hi * (1 - x * x / 3)  # erf x = 2/sqrt(pi) (x - x^3/3 + ...), alternating
        hi = 2 * x / s_lo
        want = f32_to_bits(round_fraction(lo))
        assert want == f32_to_bits(round_fraction(hi)), hex(u)
        assert spec.erff_bits(u) == want, hex(u)


@pytest.mark.parametrize("name", ["tanh", "erf"])
def test_the_intervals_enclose_the_value_with_the_asked_width(name):
    interval, ref = (spec.tanh_interval, math.tanh) if name == "tanh" else (spec.erf_interval, math.erf)
    for x in (2.0 ** -140, -1e-8, 0.3, -1.5, 3.0, 7.5, 20.0, -100.0):
        lo, hi = interval(x, 120)
        assert lo <= hi and (lo > 0) == (x > 0)
        assert abs(float(lo) - ref(x)) <= 4e-16 * abs(ref(x))
        if abs(x) < 7:
            assert hi - lo <= abs(lo) * Fraction(1, 2 ** 112)
            lo2, hi2 = interval(x, 240)
            assert lo <= hi2 and lo2 <= hi  # two enclosures of one value overlap
    assert interval(0.0) == (0, 0)


def test_gelu_constants_are_torchs_binary64_expressions_rounded_once():
    m_sqrt2, m_2_sqrtpi, m_sqrt1_2 = 1.41421356237309504880, 1.12837916709551257390, 0.707106781186547524401
    assert spec.ALPHA == round_float(m_sqrt1_2)
    assert spec.BETA == round_float(m_sqrt2 * m_2_sqrtpi * 0.5)
    assert spec.KAPPA == round_float(0.044715)
    assert spec.BETA_ERF == round_float(m_2_sqrtpi * m_sqrt1_2 * 0.5)


def test_gelu_at_infinities_and_large_inputs_follows_the_formula():
    inf = math.inf
    assert spec.gelu_erf(inf) == inf and spec.gelu_tanh(inf) == inf
    assert math.isnan(spec.gelu_erf(-inf)) and math.isnan(spec.gelu_tanh(-inf))  # -inf * 0
    assert f32_to_bits(spec.gelu_erf(-20.0)) == SIGN and f32_to_bits(spec.gelu_tanh(-1e20)) == SIGN
    assert spec.gelu_erf_grad(1.0, 1e20) == 1.0 and math.isnan(spec.gelu_tanh_grad(1.0, 1e20))  # inf * 0


def _torch_inputs():
    rng = np.random.default_rng(10)
    x = np.concatenate([rng.standard_normal(250) * 3, rng.uniform(-12, 12, 50)]).astype(np.float32)
    return x, rng.standard_normal(x.size).astype(np.float32)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_its_gradient_agree_with_torch_within_its_erf_and_tanh_error(approximate):
    """torch's float32 CPU gelu takes oneDNN's erf GELU (mkldnn on) or ATen's vectorized
    kernel, with their own erf/tanh approximations of a few ulps near 1; those errors are
    magnified by 1 + erf, 1 + tanh and the derivatives' factors. The bound: 4 (|x| 2^-24 +
    ulp(y)) for the forward, 4 (|dy| (1 + |x|^k) 2^-24 + ulp(g)) for the gradient, with k = 1
    for erf and k = 3 for tanh (its derivative multiplies the tanh error by about x^3 / 8)."""
    torch = pytest.importorskip("torch")
    x, dy = _torch_inputs()
    forward, grad = ((spec.gelu_erf, spec.gelu_erf_grad) if approximate == "none"
                     else (spec.gelu_tanh, spec.gelu_tanh_grad))
    ty = torch.nn.functional.gelu(torch.from_numpy(x), approximate=approximate).numpy().astype(np.float64)
    tg = torch.ops.aten.gelu_backward(torch.from_numpy(dy), torch.from_numpy(x),
                                      approximate=approximate).numpy().astype(np.float64)
    y = np.array([forward(float(v)) for v in x])
    g = np.array([grad(float(d), float(v)) for d, v in zip(dy, x)])
    ax = np.abs(x.astype(np.float64))
    k = 1 if approximate == "none" else 3
    assert np.all(np.abs(y - ty) <= 4 * (ax * 2.0 ** -24 + np.spacing(np.abs(y).astype(np.float32))))
    assert np.all(np.abs(g - tg) <= 4 * (np.abs(dy) * (1 + ax ** k) * 2.0 ** -24
                                         + np.spacing(np.abs(g).astype(np.float32))))
