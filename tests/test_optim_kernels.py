"""Every optimizer kernel gives the oracle's bits, on arbitrary float32 inputs including subnormals."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import CPU_BACKENDS, assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mojolike import registry
from mojolike.oracles import optim as spec

finite = st.floats(width=32, allow_subnormal=True, allow_nan=False, allow_infinity=False)
nonneg = st.floats(0, 2.0**100, width=32, allow_subnormal=True)
unit = st.floats(0, 1, exclude_max=True, width=32, allow_subnormal=True)
sizes = st.sampled_from([1, 7, 31, 33, 1023, 1025])


def vectors(count: int):
    return sizes.flatmap(lambda n: st.tuples(*[arrays(np.float32, n, elements=finite)] * count))


def oracle():
    return registry.kernels("test", "optim", "oracle", "identical")


def kernels(backend):
    return registry.kernels("test", "optim", backend, "identical")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@settings(max_examples=30, deadline=None)
@given(vecs=vectors(4), lr=nonneg, b1=unit, b2=unit, eps=nonneg, wd=nonneg, t=st.integers(1, 10**6),
       decoupled=st.booleans(), maximize=st.booleans(), decay=st.booleans())
def test_adam_kernel_equals_the_oracle(backend, vecs, lr, b1, b2, eps, wd, t, decoupled, maximize, decay):
    s = spec.AdamHyper.of(lr, (b1, b2), eps, wd if decay else 0.0, decoupled, maximize).scalars(t)
    args = [np.float32(x) for x in (s.beta1, s.beta2, s.eps, s.weight_decay, s.one_minus_beta1,
                                    s.one_minus_beta2, s.step_size, s.sqrt_bc2, s.param_decay)]
    args += [np.bool_(s.coupled), np.bool_(s.decoupled), np.bool_(s.maximize)]
    mine = [v.copy() for v in vecs]
    ref = [v.copy() for v in vecs]
    with np.errstate(all="ignore"):
        kernels(backend).adam(mine[0], mine[1], mine[2], mine[3], *args)
    oracle().adam(ref[0], ref[1], ref[2], ref[3], *args)
    for name, a, b in zip(("p", "g", "m", "v"), mine, ref):
        assert_same_bits(a, b, f"{backend} adam {name}")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@settings(max_examples=30, deadline=None)
@given(vecs=vectors(3), lr=nonneg, mu=nonneg, damp=finite, wd=nonneg, first=st.booleans(),
       use_momentum=st.booleans(), nesterov=st.booleans(), maximize=st.booleans(), decay=st.booleans())
def test_sgd_kernel_equals_the_oracle(backend, vecs, lr, mu, damp, wd, first, use_momentum, nesterov,
                                      maximize, decay):
    h = spec.SGDHyper.of(lr, mu if use_momentum else 0.0, damp, wd if decay else 0.0, nesterov, maximize)
    s = h.scalars()
    args = [np.bool_(first)] + [np.float32(x) for x in (s.lr, s.momentum, s.one_minus_dampening,
                                                        s.weight_decay)]
    args += [np.bool_(x) for x in (s.use_momentum, s.use_decay, s.nesterov, s.maximize)]
    mine, ref = [v.copy() for v in vecs], [v.copy() for v in vecs]
    with np.errstate(all="ignore"):
        kernels(backend).sgd(mine[0], mine[1], mine[2], *args)
    oracle().sgd(ref[0], ref[1], ref[2], *args)
    for name, a, b in zip(("p", "g", "b"), mine, ref):
        assert_same_bits(a, b, f"{backend} sgd {name}")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@settings(max_examples=30, deadline=None)
@given(data=st.data(), max_norm=st.floats(2.0**-20, 2.0**20, width=32))
def test_clip_norms_and_coefficient_equal_the_oracle(backend, data, max_norm):
    counts = data.draw(st.lists(st.integers(1, 2100), min_size=1, max_size=6))
    x = data.draw(arrays(np.float32, sum(counts), elements=st.floats(-(2.0**50), 2.0**50, width=32)))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    k, o = kernels(backend), oracle()
    mine, ref = k.segment_sumsq(x, offsets), o.segment_sumsq(x, offsets)
    assert_same_bits(mine, ref, f"{backend} per-tensor sumsq")
    for a, b in zip(k.clip_coef(mine, np.float32(max_norm), np.float32(spec.CLIP_EPS)),
                    o.clip_coef(ref, np.float32(max_norm), np.float32(spec.CLIP_EPS))):
        assert_same_bits(a, b, f"{backend} clip total/coef")
    g1, g2 = x.copy(), x.copy()
    coef = o.clip_coef(ref, np.float32(max_norm), np.float32(spec.CLIP_EPS))[1]
    with np.errstate(all="ignore"):
        k.scale(g1, coef)
    o.scale(g2, coef)
    assert_same_bits(g1, g2, f"{backend} scale")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@settings(max_examples=20, deadline=None)
@given(vecs=vectors(2))
def test_accumulation_add_and_finiteness_check_equal_the_oracle(backend, vecs):
    a, b = vecs
    out1, out2 = np.empty_like(a), np.empty_like(a)
    with np.errstate(all="ignore"):
        kernels(backend).add(a, b, out1)
    oracle().add(a, b, out2)
    assert_same_bits(out1, out2, f"{backend} add")
    assert kernels(backend).all_finite(a)
    bad = a.copy()
    bad[-1] = np.inf
    assert not kernels(backend).all_finite(bad)
    bad[-1] = np.nan
    assert not kernels(backend).all_finite(bad)
