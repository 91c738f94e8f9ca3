"""Every optimizer kernel gives the oracle's bits, on arbitrary float32 inputs including subnormals.

cuda-sim runs the fixed small cases of `SIM_CASES` in a simulator process of its own, with
the kernels called directly (the step kernels take keyword arguments).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CPU_BACKENDS, assert_same_bits, available
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from mojolike.oracles import optim as spec

from mojolike.core import registry
from mojolike.core.pieces import Pieces

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


# -- grad_scale, write_back, and the per-tensor folds ------------------------------------------

DEVICE_BACKENDS = CPU_BACKENDS + (("cuda",) if available("cuda") else ())
SCALES = (1.0, 0.5, 2.0**-16, 65536.0, 0.7310585, 3.0e-39)  # the last is subnormal
SGD_VARIANTS = {"plain": (0.0, False, 0.0), "momentum": (0.9, False, 0.0),
                "nesterov": (0.9, True, 0.0), "momentum and decay": (0.9, False, 0.01),
                "decay": (0.0, False, 0.1)}
ADAM_VARIANTS = {"adam": (0.0, False), "adam with decay": (0.01, False), "adamw": (0.01, True)}


def cells(rng, n: int) -> np.ndarray:
    """n float32 values over many binades, with zeros of both signs and subnormals."""
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    pick = rng.integers(0, 16, n)
    x[pick == 0] = np.float32(0.0)
    x[pick == 1] = np.float32(-0.0)
    x[pick == 2] = (rng.standard_normal(int((pick == 2).sum())) * 1e-40).astype(np.float32)
    return x


def operand(k, arrays_: list[np.ndarray]):
    """Tensors as the backend's kernels take them: pieces where they can, else one flat copy."""
    if k.takes_pieces:
        return Pieces(arrays_, np.concatenate([[0], np.cumsum([a.size for a in arrays_])]).astype(np.int64))
    return np.concatenate(arrays_)


def flat(x) -> np.ndarray:
    return np.concatenate(x.arrays) if isinstance(x, Pieces) else x


def read_only(arrays_: list[np.ndarray]) -> list[np.ndarray]:
    out = [a.copy() for a in arrays_]
    for a in out:
        a.setflags(write=False)
    return out


def step_args(kind: str, variant: str, maximize: bool, first: bool) -> tuple[list, int]:
    """(the kernel's scalars and flags, how many state arrays it takes)."""
    if kind == "sgd":
        mu, nesterov, wd = SGD_VARIANTS[variant]
        s = spec.SGDHyper.of(0.01, mu, 0.1 if mu else 0.0, wd, nesterov, maximize).scalars()
        args = [np.bool_(first)] + [np.float32(x) for x in (s.lr, s.momentum, s.one_minus_dampening,
                                                            s.weight_decay)]
        return args + [np.bool_(x) for x in (s.use_momentum, s.use_decay, s.nesterov, s.maximize)], 1
    wd, decoupled = ADAM_VARIANTS[variant]
    s = spec.AdamHyper.of(1e-3, (0.9, 0.999), 1e-8, wd, decoupled, maximize).scalars(3)
    args = [np.float32(x) for x in (s.beta1, s.beta2, s.eps, s.weight_decay, s.one_minus_beta1,
                                    s.one_minus_beta2, s.step_size, s.sqrt_bc2, s.param_decay)]
    return args + [np.bool_(s.coupled), np.bool_(s.decoupled), np.bool_(s.maximize)], 2


def check_scaled_step(k, kind: str, variant: str, sizes: list[int], seed: int, scale: float,
                      maximize: bool, write_back: bool, first: bool = False) -> None:
    """k's step reading g * scale equals the oracle's step on g scaled first (oracle.scale), and
    the oracle's own grad_scale; g is bit-unchanged, or with write_back holds g * scale."""
    rng = np.random.default_rng(seed)
    args, nstate = step_args(kind, variant, maximize, first)
    p, g = [cells(rng, n) for n in sizes], [cells(rng, n) for n in sizes]
    n = sum(sizes)
    state = [np.abs(cells(rng, n)) if i == 1 else cells(rng, n) for i in range(nstate)]  # v >= 0
    s = np.float32(scale)
    o = oracle()
    ref_p, ref_g, ref_state = np.concatenate(p), np.concatenate(g), [x.copy() for x in state]
    o.scale(ref_g, s)
    getattr(o, kind)(ref_p, ref_g, *ref_state, *args)
    own_p, own_g, own_state = np.concatenate(p), np.concatenate(g), [x.copy() for x in state]
    getattr(o, kind)(own_p, own_g, *own_state, *args, grad_scale=s, write_back=write_back)
    mine_p = operand(k, [a.copy() for a in p])
    mine_g = operand(k, [a.copy() for a in g] if write_back else read_only(g))
    mine_state = [x.copy() for x in state]
    with np.errstate(all="ignore"):
        getattr(k, kind)(mine_p, mine_g, *mine_state, *args, grad_scale=s, write_back=write_back)
    what = f"{k.backend} {kind} {variant} sizes={sizes} scale={scale} maximize={maximize}"
    for name, mine, own, ref in [("p", flat(mine_p), own_p, ref_p)] + [
            (f"state[{i}]", a, b, c) for i, (a, b, c) in enumerate(zip(mine_state, own_state, ref_state))]:
        assert_same_bits(own, ref, f"oracle {what} {name}")
        assert_same_bits(mine, ref, f"{what} {name}")
    want_g = ref_g if write_back else np.concatenate(g)
    assert (flat(mine_g).view(np.uint32) == want_g.view(np.uint32)).all(), f"{what} g (write_back={write_back})"
    assert (own_g.view(np.uint32) == want_g.view(np.uint32)).all(), f"oracle {what} g"


def special_cells(rng, n: int) -> np.ndarray:
    """cells() with infinities, NaNs and values whose squares overflow binary32."""
    x = cells(rng, n)
    pick = rng.integers(0, 40, n)
    x[pick == 0] = np.float32(np.inf)
    x[pick == 1] = np.float32(-np.inf)
    x[pick == 2] = np.float32(np.nan)
    x[pick == 3] = np.float32(3.0e38)
    x[pick == 4] = np.float32(-2.0e19)
    return x


def check_segment_sums(k, sizes: list[int], seed: int, specials: bool) -> None:
    """segment_fold and segment_fold_sumsq equal the oracle's fold and sumsq per tensor, an
    empty tensor's -0.0; the sums of squares equal k's segment_sumsq."""
    rng = np.random.default_rng(seed)
    xs = [(special_cells if specials else cells)(rng, n) for n in sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    x = operand(k, xs)
    want_sum, want_sq = oracle().segment_fold_sumsq(np.concatenate(xs), offsets)
    with np.errstate(all="ignore"):
        got_fold = k.segment_fold(x, offsets)
        got_sum, got_sq = k.segment_fold_sumsq(x, offsets)
    what = f"{k.backend} sizes={sizes} specials={specials}"
    assert_same_bits(got_fold, want_sum, f"{what} segment_fold")
    assert_same_bits(got_sum, want_sum, f"{what} segment_fold_sumsq sums")
    assert_same_bits(got_sq, want_sq, f"{what} segment_fold_sumsq sumsqs")
    assert (flat(x).view(np.uint32) == np.concatenate(xs).view(np.uint32)).all(), f"{what} x written"
    if all(sizes):  # segment_sumsq takes non-empty tensors only
        with np.errstate(all="ignore"):
            assert_same_bits(got_sq, k.segment_sumsq(x, offsets), f"{what} against segment_sumsq")
    for i, n in enumerate(sizes):
        if n == 0:
            assert got_sum[i].view(np.uint32) == got_sq[i].view(np.uint32) == np.uint32(0x80000000), what


tensor_sizes = st.lists(st.sampled_from([1, 5, 15, 16, 17, 31, 33, 47, 100, 1023, 1025, 2100]),
                        min_size=1, max_size=5)
scales = st.sampled_from(SCALES)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("variant", list(SGD_VARIANTS))
@settings(max_examples=12, deadline=None)
@given(sizes=tensor_sizes, seed=st.integers(0, 2**32 - 1), scale=scales, maximize=st.booleans(),
       first=st.booleans())
def test_a_read_only_grad_scale_in_sgd_leaves_the_gradients_unchanged_and_equals_scaling_them_first(
        backend, variant, sizes, seed, scale, maximize, first):
    check_scaled_step(kernels(backend), "sgd", variant, sizes, seed, scale, maximize, False, first)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("variant", list(ADAM_VARIANTS))
@settings(max_examples=12, deadline=None)
@given(sizes=tensor_sizes, seed=st.integers(0, 2**32 - 1), scale=scales, maximize=st.booleans())
def test_a_read_only_grad_scale_in_adam_leaves_the_gradients_unchanged_and_equals_scaling_them_first(
        backend, variant, sizes, seed, scale, maximize):
    check_scaled_step(kernels(backend), "adam", variant, sizes, seed, scale, maximize, False)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("kind,variant", [("sgd", v) for v in SGD_VARIANTS] + [("adam", v) for v in ADAM_VARIANTS])
@settings(max_examples=6, deadline=None)
@given(sizes=tensor_sizes, seed=st.integers(0, 2**32 - 1), scale=scales, maximize=st.booleans())
def test_grad_scale_with_write_back_stores_the_scaled_gradients(backend, kind, variant, sizes, seed,
                                                                scale, maximize):
    check_scaled_step(kernels(backend), kind, variant, sizes, seed, scale, maximize, True)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("kind,variant", [("sgd", "nesterov"), ("adam", "adamw")])
def test_grad_scale_holds_across_parallel_tasks_and_tensor_boundaries(backend, kind, variant):
    # 16384 elements per task on the CPUs: these tensors cross a task boundary mid-tensor
    for write_back in (False, True):
        check_scaled_step(kernels(backend), kind, variant, [16390, 3, 17], 7, 0.3, True, write_back)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 2, 17, 32, 33, 1023, 1024, 1025, 2049, 3000]),
                      min_size=1, max_size=6),
       seed=st.integers(0, 2**32 - 1), specials=st.booleans())
def test_segment_fold_and_segment_fold_sumsq_equal_the_oracle_per_tensor(backend, sizes, seed,
                                                                        specials):
    check_segment_sums(kernels(backend), sizes, seed, specials)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_segment_folds_propagate_inf_and_nan_and_overflowing_squares(backend):
    k = kernels(backend)
    cases = {"inf": ([1.0, np.inf, 2.0], np.inf, np.inf), "-inf": ([1.0, -np.inf], -np.inf, np.inf),
             "inf - inf": ([np.inf, -np.inf], np.nan, np.inf), "nan": ([np.nan, 1.0], np.nan, np.nan),
             "squares overflow": ([2.0e19, -2.0e19], 0.0, np.inf)}
    for name, (vals, want_sum, want_sq) in cases.items():
        x = np.float32(vals)
        with np.errstate(all="ignore"):
            sums, sqs = k.segment_fold_sumsq(operand(k, [x]), [0, x.size])
        assert_same_bits(sums, np.float32([want_sum]), f"{backend} {name} sum")
        assert_same_bits(sqs, np.float32([want_sq]), f"{backend} {name} sumsq")
    check_segment_sums(k, [40000, 0, 1025], 11, True)


# fixed small cases for the simulator: (function name, arguments after the kernels)
SIM_CASES = (
    [("check_scaled_step", ("sgd", v, [17, 33], 3, 0.7310585, m, wb, False))
     for v in SGD_VARIANTS for m in (False, True) for wb in (False, True)]
    + [("check_scaled_step", ("sgd", "momentum", [5], 4, 65536.0, False, False, True))]
    + [("check_scaled_step", ("adam", v, [17, 33], 5, 2.0**-16, m, wb))
       for v in ADAM_VARIANTS for m in (False, True) for wb in (False, True)]
    + [("check_segment_sums", ([1, 0, 33, 1025], 6, s)) for s in (False, True)]
)

_SIM_DRIVER = """
import sys
sys.path.insert(0, {tests!r})
import test_optim_kernels as t
from mojolike.core import registry
k = registry.kernels("test", "optim", "cuda-sim", "identical")
assert k.backend == "cuda-sim" and type(k).__name__ == "CudaOptim", (k.backend, type(k))
for name, args in t.SIM_CASES:
    getattr(t, name)(k, *args)
print("passed", len(t.SIM_CASES))
"""


@pytest.mark.skipif(not available("cuda-sim"), reason="numba-cuda is not installed")
def test_cuda_sim_grad_scale_write_back_and_segment_folds_equal_the_oracle():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", _SIM_DRIVER.format(tests=str(Path(__file__).parent))],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.split() == ["passed", str(len(SIM_CASES))]
