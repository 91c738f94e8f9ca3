"""The tanhf, erff and GELU kernels give the oracle's bits on every backend, and mark the same slots UNDECIDED.

Every slot a kernel decides must carry exactly the oracle's bit pattern (NaN payloads
included for tanhf/erff, the canonical NaN for GELU, as oracles/erf_tanh.py gives);
cpu-numba, cpu-cffi and cuda-sim run one binary64 operation sequence, so they leave
the same slots undecided: the inputs of contracts/erf_tanh_hard.py, which the
exhaustive walk (benchmarks/erf_tanh_kernels_exhaustive.py) found. cuda-sim runs in a
worker process at about 0.1 ms per element, so it gets small arrays.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import available
from mojolike.contracts.erf_tanh_hard import HARD_ERF, HARD_TANH, known_fallback
from mojolike.native.erf_tanh import UNDECIDED
from mojolike.oracles import erf_tanh as spec
from mojolike.oracles.f32 import bits_to_f32, f32_to_bits, mul

import mojolike.math
from mojolike.core import fallbacks, interfaces, registry
from mojolike.ops.crmath import finish, finish_gelu, finish_gelu_backward

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")
FAST = ("cpu-numba", "cpu-cffi")
SIM_CALL = 300  # elements per cuda-sim call
ORACLE = {"tanhf": spec.tanhf_bits, "erff": spec.erff_bits}
HARD = {"tanhf": HARD_TANH, "erff": HARD_ERF}
FUNCS = tuple(ORACLE)
POISON = 0xDEADBEEF  # out is filled with this first, so an unwritten slot cannot pass


def kernels(backend: str):
    if backend != "oracle" and not available(backend):
        pytest.skip(f"backend {backend} is not available here")
    return registry.kernels("test", "crmath", backend, "identical")


def bits(values) -> list[int]:
    return [int(u) for u in np.asarray(values, np.float32).view(np.uint32)]


def around(u: int, k: int = 6) -> list[int]:
    """The patterns within k steps of pattern u, on its side of zero."""
    return [u + d for d in range(-k, k + 1) if u + d >= 0 and (u + d) >> 31 == u >> 31]


def signed(patterns) -> list[int]:
    return sorted({p for u in patterns for p in (u & 0x7FFFFFFF, u | 0x80000000)})


SPECIALS = [
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-inf
    0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0x7FA00DAD, 0xFFA00DAD, 0x7FB12345,  # NaNs
    0x00000001, 0x80000001, 0x00000002, 0x00400000, 0x007FFFFF, 0x807FFFFF,  # subnormals
    0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF,  # least and largest normal
    0x3F800000, 0xBF800000, 0x40000000, 0x3F000000, 0x40400000,  # 1, 2, 1/2, 3
]
EDGES = signed(
    around(spec.TANH_ONE_BITS, 8) + around(spec.ERF_ONE_BITS, 8)  # where +-1 is fixed
    + around(0x3E800000, 4) + around(0x3F000000, 4)  # the branch points 1/4 (tanh) and 1/2 (erf)
    + around(0x39800000, 4) + around(0x3A000000, 4) + around(0x3A800000, 4)  # 2^-12..2^-10: tanh x near x
    + around(0x32000000, 2) + around(0x0C000000, 2) + around(0x40800000, 2) + around(0x40E00000, 2)
    + [u for v in (0.1, 0.25, 0.75, 1.5, 2.5, 3.5, 3.9, 5.0, 8.0, 8.99, 9.0) for u in around(bits([v])[0], 2)])


def run(backend: str, func: str, patterns) -> tuple[np.ndarray, int]:
    """(result bit patterns, the undecided count); x is checked untouched."""
    k = kernels(backend)
    xb = np.asarray(patterns, np.uint64).astype(np.uint32)
    step = SIM_CALL if backend == "cuda-sim" else max(1, xb.size)
    got, count = np.empty_like(xb), 0
    for lo in range(0, xb.size, step):
        x = xb[lo:lo + step].copy().view(np.float32)
        out = np.full(x.size, POISON, np.uint32).view(np.float32)
        count += getattr(k, func + "_into")(x, out)
        assert (x.view(np.uint32) == xb[lo:lo + step]).all(), f"{backend} {func} wrote its input"
        got[lo:lo + step] = out.view(np.uint32)
    return got, count


def assert_oracle_bits(backend: str, func: str, patterns) -> np.ndarray:
    got, count = run(backend, func, patterns)
    undecided = got == UNDECIDED
    assert count == int(undecided.sum()), f"{backend} {func}: count {count}, slots {int(undecided.sum())}"
    assert backend != "oracle" or count == 0
    want = np.array([ORACLE[func](int(u)) for u in np.asarray(patterns, np.uint64)], np.uint32)
    bad = np.nonzero((got != want) & ~undecided)[0]
    assert not bad.size, f"{backend} {func}: {bad.size} slots differ, first: " + ", ".join(
        f"x=0x{int(np.uint32(patterns[i])):08x} got=0x{got[i]:08x} oracle=0x{want[i]:08x}" for i in bad[:8])
    return got


def random_patterns(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


def random_values(seed: int, n: int, lo: float, hi: float) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32).view(np.uint32)


@pytest.mark.parametrize("func", FUNCS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_special_values_subnormals_and_thresholds_give_the_oracle_bits(backend, func):
    got = assert_oracle_bits(backend, func, SPECIALS + EDGES)
    nan = np.uint32(SPECIALS[4:12])
    assert (got[4:12] == (nan | 0x00400000)).all()  # NaN quieted, payload and sign kept


@pytest.mark.parametrize("func", FUNCS)
@pytest.mark.parametrize("backend", FAST)
def test_random_patterns_and_values_give_the_oracle_bits(backend, func):
    hi = 10.0 if func == "tanhf" else 4.0
    x = np.concatenate([random_patterns(1, 10000), random_values(2, 5000, -hi, hi),
                        random_values(3, 5000, -0.6, 0.6)])
    assert_oracle_bits(backend, func, x)


@pytest.mark.parametrize("func", FUNCS)
def test_cuda_sim_gives_the_oracle_bits_on_random_patterns_and_values(func):
    assert_oracle_bits("cuda-sim", func, np.concatenate([random_patterns(4, 120), random_values(5, 120, -5.0, 5.0)]))


@pytest.mark.parametrize("func", FUNCS)
def test_the_hard_cases_are_undecided_on_every_backend_and_the_oracle_decides_them(func):
    hard = list(HARD[func])
    assert hard, f"the 2^32 walk found {func} inputs the kernels leave undecided"
    mixed = np.concatenate([random_values(6, 30, -3.0, 3.0), np.uint32(hard), random_values(7, 30, -3.0, 3.0)])
    where = np.arange(30, 30 + len(hard))
    for backend in BACKENDS[1:]:
        got = assert_oracle_bits(backend, func, mixed)
        assert np.array_equal(np.nonzero(got == UNDECIDED)[0], where), backend


@pytest.mark.parametrize("func", FUNCS)
def test_cffi_gives_the_numba_bits_on_every_slot_of_a_large_array(func):
    x = np.concatenate([random_values(8, 1 << 19, -5.0, 5.0), random_patterns(9, 1 << 18),
                        np.uint32(HARD_TANH + HARD_ERF + tuple(SPECIALS))])
    a, na = run("cpu-numba", func, x)
    b, nb = run("cpu-cffi", func, x)
    assert na == nb
    diff = np.nonzero(a != b)[0]
    assert diff.size == 0, [f"x=0x{x[i]:08x} numba=0x{a[i]:08x} cffi=0x{b[i]:08x}" for i in diff[:8]]


# -- GELU ----------------------------------------------------------------------------------

GELU = {False: spec.gelu_erf, True: spec.gelu_tanh}
GELU_GRAD = {False: spec.gelu_erf_grad, True: spec.gelu_tanh_grad}


def gelu_inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([np.uint32(SPECIALS + EDGES), random_values(10, n, -8.0, 8.0),
                        random_values(11, n // 4, -0.01, 0.01), random_patterns(12, n // 4)]).view(np.float32)
    dy = np.random.default_rng(13).standard_normal(x.size).astype(np.float32)
    dy[:4] = np.float32([np.nan, np.inf, -0.0, 0.0])
    return x, dy


def gelu_run(backend: str, tanh: bool, x, dy):
    k = kernels(backend)
    step = SIM_CALL if backend == "cuda-sim" else max(1, x.size)
    y, dx, ny, ndx = np.empty(x.size, np.uint32), np.empty(x.size, np.uint32), 0, 0
    for lo in range(0, x.size, step):
        xs, ds = x[lo:lo + step].copy(), dy[lo:lo + step].copy()
        out = np.full(xs.size, POISON, np.uint32).view(np.float32)
        ny += k.gelu_into(xs, tanh, out)
        y[lo:lo + step] = out.view(np.uint32)
        out = np.full(xs.size, POISON, np.uint32).view(np.float32)
        ndx += k.gelu_backward_into(ds, xs, tanh, out)
        dx[lo:lo + step] = out.view(np.uint32)
    return y, ny, dx, ndx


@pytest.mark.parametrize("tanh", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gelu_forward_and_backward_give_the_oracle_bits(backend, tanh):
    x, dy = gelu_inputs(60 if backend in ("cuda-sim", "oracle") else 4000)
    y, ny, dx, ndx = gelu_run(backend, tanh, x, dy)
    assert ny == int((y == UNDECIDED).sum()) and ndx == int((dx == UNDECIDED).sum())
    xv = [bits_to_f32(int(u)) for u in x.view(np.uint32)]
    want_y = np.uint32([f32_to_bits(GELU[tanh](v)) for v in xv])
    want_dx = np.uint32([f32_to_bits(GELU_GRAD[tanh](float(d), v)) for d, v in zip(dy.tolist(), xv)])
    for name, got, want in (("y", y, want_y), ("dx", dx, want_dx)):
        bad = np.nonzero((got != want) & (got != UNDECIDED))[0]
        assert not bad.size, f"{backend} {name}: " + ", ".join(
            f"x=0x{x.view(np.uint32)[i]:08x} got=0x{got[i]:08x} oracle=0x{want[i]:08x}" for i in bad[:8])


def _erf_inner_hard(hard) -> np.ndarray:
    """Inputs x with x * ALPHA on a hard erff input (searched near hard / ALPHA)."""
    out = []
    for h in hard:
        v = bits_to_f32(h) / spec.ALPHA
        for u in around(f32_to_bits(v), 3):
            if f32_to_bits(mul(bits_to_f32(u), spec.ALPHA)) == h:
                out.append(u)
                break
    return np.uint32(out).view(np.float32)


def test_gelu_erf_slots_whose_erff_is_undecided_are_undecided_and_finish_to_the_oracle():
    x = _erf_inner_hard(HARD_ERF)
    assert x.size, "no binary32 x has x * ALPHA on a hard erff input"
    dy = np.ones_like(x)
    for backend in FAST:
        y, ny, dx, ndx = gelu_run(backend, False, x, dy)
        assert ny == x.size and (y == UNDECIDED).all() and ndx == x.size
    k = kernels("cpu-numba")
    out = np.empty_like(x)
    with fallbacks.collect() as got:
        n = finish_gelu(x, False, out, k.gelu_into(x, False, out))
    assert n == x.size
    assert out.view(np.uint32).tolist() == [f32_to_bits(spec.gelu_erf(float(v))) for v in x]
    assert [r.kind for r in got] == ["gelu_erf"] * x.size and all(known_fallback(r) for r in got)
    dx = np.empty_like(x)
    with fallbacks.collect() as got:
        finish_gelu_backward(dy, x, False, dx, k.gelu_backward_into(dy, x, False, dx))
    assert dx.view(np.uint32).tolist() == [f32_to_bits(spec.gelu_erf_grad(1.0, float(v))) for v in x]
    assert got and all(r.kind == "gelu_erf_grad" and known_fallback(r) for r in got)


def test_the_gelu_finish_helpers_give_undecided_slots_the_oracle_value_and_report_them():
    x = np.float32([0.5, -1.25, 3.0])
    dy = np.float32([2.0, -1.0, 0.5])
    for tanh, kind in ((False, "gelu_erf"), (True, "gelu_tanh")):
        out = np.float32([7.0, 7.0, 7.0])
        out.view(np.uint32)[1] = UNDECIDED
        with fallbacks.collect() as got:
            assert finish_gelu(x, tanh, out, 1) == 1
        assert out.view(np.uint32)[1] == f32_to_bits(GELU[tanh](-1.25)) and out[0] == 7.0
        assert [(r.kind, r.at) for r in got] == [(kind, f32_to_bits(-1.25))]
        dx = np.float32([7.0, 7.0, 7.0])
        dx.view(np.uint32)[2] = UNDECIDED
        with fallbacks.collect() as got:
            assert finish_gelu_backward(dy, x, tanh, dx, 1) == 1
        assert dx.view(np.uint32)[2] == f32_to_bits(GELU_GRAD[tanh](0.5, 3.0))
        assert [(r.kind, r.at) for r in got] == [(kind + "_grad", f32_to_bits(3.0))]
        assert not known_fallback(got[0])  # 3.0 is no hard case


# -- the public functions ------------------------------------------------------------------

@pytest.mark.parametrize("backend", FAST + ("oracle",))
def test_public_tanhf_and_erff_give_the_oracle_bits_hard_cases_included_and_report_those(backend):
    for name, hard in (("tanhf", HARD_TANH), ("erff", HARD_ERF)):
        x = np.concatenate([np.uint32(SPECIALS), np.uint32(hard)]).view(np.float32).reshape(1, -1)
        with fallbacks.collect() as got:
            y = getattr(mojolike.math, name)(x, backend=backend)
        assert y.shape == x.shape and y.dtype == np.float32
        assert y.view(np.uint32).ravel().tolist() == [ORACLE[name](int(u)) for u in x.view(np.uint32).ravel()]
        if backend != "oracle":
            assert sorted(r.at for r in got) == sorted(hard) and all(known_fallback(r) for r in got)


def test_finish_knows_tanhf_and_erff():
    x = np.uint32(HARD_TANH[:1]).view(np.float32)
    out = np.uint32([UNDECIDED]).view(np.float32)
    assert finish("tanhf", x, out, 1) == 1 and out.view(np.uint32)[0] == spec.tanhf_bits(HARD_TANH[0])


def test_the_new_methods_are_in_the_interface_with_what_they_write():
    w = interfaces.writes("crmath")
    assert (w["tanhf_into"], w["erff_into"], w["gelu_into"], w["gelu_backward_into"]) == ((1,), (1,), (2,), (3,))


@pytest.mark.parametrize("backend", FAST)
def test_the_bits_do_not_depend_on_the_thread_count(backend):
    k = kernels(backend)
    x = np.concatenate([random_values(14, 1 << 16, -5.0, 5.0), random_patterns(15, 1 << 15)])
    dy = np.random.default_rng(16).standard_normal(x.size).astype(np.float32)
    before = k.get_num_threads()
    try:
        results = []
        for threads in sorted({1, 2, max(1, k.max_threads())}):
            k.set_num_threads(threads)
            results.append([run(backend, f, x)[0] for f in FUNCS]
                           + [np.concatenate(gelu_run(backend, t, x.view(np.float32), dy)[::2]) for t in (False, True)])
    finally:
        k.set_num_threads(before)
    for r in results[1:]:
        assert all((a == b).all() for a, b in zip(results[0], r))
