"""The vector tanhf, erff and GELU kernels (native/verf_tanh.py, native/vgelu.py) give the scalar
ones' bits (native/erf_tanh.py), lane by lane, UNDECIDED slots and their count included.

The scalars are checked against the oracle elsewhere (tests/test_erf_tanh_kernels.py and
the exhaustive walks); here every lane of the vector spelling must equal them: special
values, the ends of the ranges, the known undecided inputs (contracts/erf_tanh_hard.py,
and the GELU inputs whose inner tanhf/erff/expf argument is one of them), random bit
patterns and activations, at lengths that leave a scalar tail in a block.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from mojolike.contracts.crmath import HARD_EXP
from mojolike.contracts.erf_tanh_hard import HARD_ERF, HARD_TANH
from mojolike.native import erf_tanh, vgelu
from mojolike.native.simd import WIDTH, vload, vstore
from mojolike.native.simd64 import mask_bits
from mojolike.native.verf_tanh import verf_any, vtanh_any
from mojolike.oracles import erf_tanh as spec
from mojolike.oracles.f32 import bits_to_f32, f32_to_bits, mul
from numba import njit

UNDECIDED = erf_tanh.UNDECIDED
POISON = 0xDEADBEEF  # outputs start as this, so an unwritten slot cannot pass
SPECIALS = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF,
            0x7F800001, 0x7FA00DAD, 0xFFB12345, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
            0x7F7FFFFF, 0xFF7FFFFF, 0x3E800000, 0xBE800000, 0x3F000000, 0xBF000000, 0x3F800000]


@njit(error_model="numpy")
def _both(x, use_erf, vec, vec_ok, sca, sca_ok):
    for i in range(0, x.size, WIDTH):
        r, ok = verf_any(vload(x, i)) if use_erf else vtanh_any(vload(x, i))
        vstore(vec, i, r)
        m = mask_bits(ok)
        for j in range(WIDTH):
            vec_ok[i + j] = (m >> j) & 1 == 1
    for i in range(x.size):
        sca[i], sca_ok[i] = erf_tanh.erf_any(x[i]) if use_erf else erf_tanh.tanh_any(x[i])


def _near(u: int, k: int) -> list[int]:
    return [(u & 0x7FFFFFFF) + d | s for d in range(-k, k + 1) for s in (0, 0x80000000)]


def _patterns(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)


def _element_inputs() -> np.ndarray:
    ends = [u for e in (spec.TANH_ONE_BITS, spec.ERF_ONE_BITS, 0x3E800000, 0x3F000000)
            for u in _near(e, 40)]
    rng = np.random.default_rng(5)
    values = (rng.standard_normal(1 << 16) * 2).astype(np.float32).view(np.uint32)
    u = np.concatenate([np.uint32(SPECIALS + ends + list(HARD_TANH) + list(HARD_ERF)), values,
                        _patterns(4, 1 << 17)])
    return np.concatenate([u, np.zeros(-u.size % WIDTH, np.uint32)]).view(np.float32)


@pytest.mark.parametrize("name", ["tanhf", "erff"])
def test_every_lane_of_the_vector_function_equals_the_scalar_bits_and_decided_flag(name):
    x = _element_inputs()
    vec, sca = np.empty_like(x), np.empty_like(x)
    vec_ok, sca_ok = np.empty(x.size, np.bool_), np.empty(x.size, np.bool_)
    _both(x, name == "erff", vec, vec_ok, sca, sca_ok)
    bad = np.flatnonzero((vec.view(np.uint32) != sca.view(np.uint32)) | (vec_ok != sca_ok))
    assert not bad.size, [f"0x{u:08X}" for u in x.view(np.uint32)[bad[:8]]]
    hard = np.isin(x.view(np.uint32), np.uint32(HARD_ERF if name == "erff" else HARD_TANH))
    assert hard.any() and not sca_ok[hard].any()  # the known undecided inputs are in the test


def _inverse_hits(hard, f, lo: float, hi: float) -> list[int]:
    """Binary32 x (either sign) whose f(x), computed as the oracle does, is one of `hard`:
    bisect f(x) = h in binary64, then look at the patterns around the root."""
    out = []
    for h in hard:
        target, a, b = bits_to_f32(h), lo, hi
        if not bits_to_f32(f(a)) <= abs(target) <= bits_to_f32(f(b)):
            continue
        for _ in range(80):
            mid = (a + b) / 2
            a, b = (mid, b) if bits_to_f32(f(mid)) < abs(target) else (a, mid)
        for u in _near(f32_to_bits(a), 4):
            if f(bits_to_f32(u)) == h:
                out.append(u)
    return out


@functools.cache
def _gelu_hard() -> list[int]:
    erf_arg = lambda x: f32_to_bits(mul(x, spec.ALPHA))  # noqa: E731
    tanh_arg = lambda x: f32_to_bits(spec._tanh_inner(x, mul(x, x)))  # noqa: E731
    exp_arg = lambda x: f32_to_bits(mul(mul(x, x), -0.5))  # noqa: E731
    neg_exp = [h for h in HARD_EXP if h >> 31]  # (x x) -0.5 is never positive
    found = (_inverse_hits(HARD_ERF, erf_arg, 0.0, 8.0) + _inverse_hits(HARD_TANH, tanh_arg, 0.0, 20.0)
             + [u for h in neg_exp for u in _inverse_hits([h & 0x7FFFFFFF], lambda x: exp_arg(x) & 0x7FFFFFFF,
                                                             0.0, 20.0)])
    return sorted(set(found))


def _gelu_inputs() -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(9)
    hard = _gelu_hard()
    acts = (rng.standard_normal(1 << 17) * 1.5).astype(np.float32).view(np.uint32)
    x = np.concatenate([np.uint32(SPECIALS + hard * 3), acts, _patterns(10, 1 << 16),
                        np.uint32(hard), acts[:37]])  # 37: a scalar tail after the last vector
    dy = rng.standard_normal(x.size).astype(np.float32)
    dy[:4] = np.float32([np.nan, np.inf, -0.0, 0.0])
    return x.view(np.float32), dy, len(hard)


KERNELS = {"forward": lambda m, dy, x, tanh, out: m.gelu_into(x, tanh, out),
           "backward": lambda m, dy, x, tanh, out: m.gelu_backward_into(dy, x, tanh, out)}


@pytest.mark.parametrize("tanh", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("way", list(KERNELS))
def test_the_vector_gelu_kernel_writes_the_scalar_kernels_bits_and_counts_the_same_undecided(way, tanh):
    x, dy, n_hard = _gelu_inputs()
    assert n_hard, "no GELU input reaches a hard tanhf/erff/expf argument"
    for off in (0, 3):  # the second run starts off a vector boundary (unaligned loads)
        got, want = (np.full(x.size - off, POISON, np.uint32).view(np.float32) for _ in range(2))
        n_got = KERNELS[way](vgelu, dy[off:], x[off:], tanh, got)
        n_want = KERNELS[way](erf_tanh, dy[off:], x[off:], tanh, want)
        assert n_got == n_want == int((got.view(np.uint32) == UNDECIDED).sum())
        bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        assert not bad.size, [f"x=0x{u:08X}" for u in x[off:].view(np.uint32)[bad[:8]]]
    assert n_want > 0  # the hard inputs reached an undecided inner function


def test_a_nan_result_is_the_canonical_pattern_and_undecided_slots_are_marked():
    x = np.float32([np.nan] * WIDTH + [-np.inf] * WIDTH)
    x.view(np.uint32)[1] = 0xFFB12345  # a payload: GELU keeps none
    x = np.concatenate([x, np.uint32(_gelu_hard()).view(np.float32)])
    x = np.concatenate([x, np.zeros(-x.size % WIDTH, np.float32)])
    out = np.full(x.size, POISON, np.uint32).view(np.float32)
    n = vgelu.gelu_into(x, False, out)
    ob = out.view(np.uint32)
    assert (ob[:2 * WIDTH] == 0x7FC00000).all()  # -inf / 2 * (1 + erff(-inf)) is NaN as well
    assert n == int((ob == UNDECIDED).sum()) and n > 0
