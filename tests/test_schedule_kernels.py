"""The schedule kernels give the oracle's values on every backend, and leave the same steps UNDECIDED.

Every step a kernel decides must carry exactly the bits of `oracles/schedule.value`;
a step the rounding test cannot decide carries UNDECIDED (0x7FA00DAD). cpu-numba,
cpu-cffi and cuda-sim run the binary64 operation sequence of contracts/schedule.md
clause 6, which `oracles/schedule.fast_value` spells in Python floats, so each
backend's UNDECIDED steps must be exactly the steps where fast_value's (v, E) fails
the test. cuda-sim runs in a worker process, so it gets at most SIM_CALL steps a
call; cuda (a real GPU) runs where one is present.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from conftest import available
from mojolike.native.schedule import BLOCK, CONSTANT, COSINE, LINEAR, UNDECIDED
from mojolike.oracles import schedule as oracle
from mojolike.oracles.f32 import f32_to_bits

from mojolike.core import interfaces, registry

BACKENDS = ("cpu-numba", "cpu-cffi", "cuda-sim", "cuda")  # cuda: skipped without a GPU
CPU = ("cpu-numba", "cpu-cffi")
SIM_CALL = 300  # steps per cuda-sim call
POISON = 0xDEADBEEF  # out is filled with this first, so an unwritten slot cannot pass


def f32(x) -> float:
    return float(np.float32(x))


def from_bits(u: int) -> float:
    return float(np.uint32(u).view(np.float32))


# (name, kind, P, M, W, T): every step 1 .. T + 10 (ConstantLR: W + 30) is checked
CASES = [
    ("constant-w0", CONSTANT, f32(1e-3), 0.0, 0, 0),
    ("constant-w1", CONSTANT, f32(0.1), 0.0, 1, 0),
    ("constant-w7", CONSTANT, f32(3e-4), f32(1e-5), 7, 0),
    ("constant-w250-huge", CONSTANT, f32(1e10), 0.0, 250, 0),
    ("linear-w0", LINEAR, 1.0, 0.0, 0, 100),
    ("linear-w1-min", LINEAR, f32(0.1), f32(1e-3), 1, 50),
    ("linear-w7", LINEAR, f32(3e-4), f32(1e-5), 7, 120),
    ("linear-w=t", LINEAR, f32(1e-3), f32(1e-5), 20, 20),
    ("linear-t=w+1", LINEAR, f32(0.5), f32(0.1), 9, 10),
    ("linear-m>p", LINEAR, f32(1e-4), f32(1e-2), 5, 80),
    ("linear-tiny", LINEAR, f32(1e-30), f32(1e-44), 3, 90),
    ("linear-huge", LINEAR, f32(1e10), f32(3.0), 4, 90),
    ("linear-ties", LINEAR, from_bits(0x3D92F47A), 0.0, 0, 192),  # 4 exact midpoints: undecided
    ("cosine-w0", COSINE, 1.0, 0.0, 0, 100),
    ("cosine-w1", COSINE, f32(6e-4), f32(6e-5), 1, 61),
    ("cosine-w10", COSINE, f32(6e-4), f32(6e-5), 10, 200),
    ("cosine-w=t", COSINE, f32(0.3), f32(0.01), 25, 25),
    ("cosine-t=w+1", COSINE, f32(0.5), f32(0.1), 9, 10),
    ("cosine-t=w+2", COSINE, f32(0.5), f32(0.1), 9, 11),
    ("cosine-m>p", COSINE, f32(1e-5), f32(1e-3), 3, 150),
    ("cosine-tiny", COSINE, f32(1e-30), 0.0, 5, 90),
    ("cosine-subnormal", COSINE, f32(1e-40), f32(1e-44), 2, 60),
    ("cosine-huge", COSINE, f32(1e10), 1.0, 4, 90),
    ("cosine-zero", COSINE, 0.0, 0.0, 3, 30),
    ("cosine-p=m", COSINE, f32(0.25), f32(0.25), 3, 30),
    ("cosine-thirds", COSINE, from_bits(0x3BE5460A), 0.0, 0, 288),  # p = 1/3: 3P/4 a midpoint
]

# Steps where the binary64 value v of the fast route, rounded without the test, is
# not the exact value rounded (the exact value is not a midpoint): found by
# benchmarks/schedule_hard_search.py (seed 0: 3.1 * 10^10 random cosine and linear decay
# steps, 31 such steps, 2 of them linear).
# (kind, P bits, M bits, W, T, t, binary32(v) bits, oracle bits)
HARD = [
    (LINEAR, 0x37B9CABD, 0x2B95C82E, 380, 24058, 10176, 0x3759DA6A, 0x3759DA6B),
    (LINEAR, 0x3835BF89, 0x2B3DE2C2, 652, 100212, 95673, 0x36049380, 0x36049381),
    (COSINE, 0x3E37529A, 0x3DB920F2, 822, 45687, 24479, 0x3E060EAC, 0x3E060EAB),  # S(u)
    (COSINE, 0x3BD2CAB2, 0x00000000, 64, 21156, 5001, 0x3BB78E92, 0x3BB78E93),  # C(w), M = 0
    (COSINE, 0x36AF667F, 0x2DBF4103, 427, 81326, 80030, 0x3164EA44, 0x3164EA45),  # S(u), near T
    (COSINE, 0x3DDEDEEF, 0x3DCFCF6B, 430, 60604, 12452, 0x3DDD6F86, 0x3DDD6F85),  # C(w), M near P
]
# exact midpoints that binary32(v) rounds the wrong way (the oracle rounds them to even);
# the same search found 12036 (1791 linear; cosine ones at p = 1/3, 2/3, 1/2)
TIES = [
    (LINEAR, 0x3BDC8773, 0x00000000, 406, 97006, 43876, 0x3B7294FF, 0x3B7294FE),
    (COSINE, 0x3C0029A4, 0x3B20CA4C, 299, 27743, 9447, 0x3BD457BF, 0x3BD457C0),
]


def kernels(backend: str):
    if not available(backend):
        pytest.skip(f"backend {backend} is not available here")
    return registry.kernels("test", "schedule", backend, "identical")


def run(backend: str, kind, P, M, W, T, t0: int, n: int) -> np.ndarray:
    """The bit patterns of steps t0 .. t0 + n - 1; checks the count against the UNDECIDED slots."""
    k = kernels(backend)
    step = SIM_CALL if backend == "cuda-sim" else max(1, n)
    got = np.empty(n, np.uint32)
    for lo in range(0, n, step):
        out = np.full(min(step, n - lo), POISON, np.uint32).view(np.float32)
        count = k.schedule_into(kind, np.float32(P), np.float32(M), W, T, t0 + lo, out)
        assert isinstance(count, (int, np.integer))  # an int (numpy's through the cuda-sim proxy)
        bits = out.view(np.uint32)
        assert count == int((bits == UNDECIDED).sum()), f"{backend}: count {count}"
        got[lo:lo + bits.size] = bits
    return got


@lru_cache(maxsize=None)
def oracle_bits(kind, P, M, W, T, t0: int, n: int) -> np.ndarray:
    return np.array([f32_to_bits(oracle.value(kind, P, M, W, T, t)) for t in range(t0, t0 + n)],
                    np.uint32)


@lru_cache(maxsize=None)
def route(kind, P, M, W, T, t0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(undecided, binary32(v)) of the Python spelling of the fast route, per step."""
    ve = np.array([oracle.fast_value(kind, P, M, W, T, t) for t in range(t0, t0 + n)], np.float64)
    v, e = ve[:, 0], ve[:, 1]
    lo, hi = (v - e).astype(np.float32), (v + e).astype(np.float32)
    return lo != hi, v.astype(np.float32).view(np.uint32)


def check(backend: str, kind, P, M, W, T, t0: int, n: int, what: str) -> np.ndarray:
    """Decided steps are the oracle's bits; the UNDECIDED steps are fast_value's undecided steps."""
    got = run(backend, kind, P, M, W, T, t0, n)
    undecided = got == UNDECIDED
    assert not (got == POISON).any(), f"{what} {backend}: a slot was not written"
    want_undecided, _ = route(kind, P, M, W, T, t0, n)
    steps = np.arange(t0, t0 + n)
    assert (undecided == want_undecided).all(), (
        f"{what} {backend}: UNDECIDED at steps {steps[undecided].tolist()[:8]}, "
        f"fast_value undecided at {steps[want_undecided].tolist()[:8]}")
    want = oracle_bits(kind, P, M, W, T, t0, n)
    bad = np.nonzero((got != want) & ~undecided)[0]
    if bad.size:
        pytest.fail(f"{what} {backend}: {bad.size} steps differ from the oracle, first: " + ", ".join(
            f"t={t0 + i} got=0x{got[i]:08x} oracle=0x{want[i]:08x}" for i in bad[:8]))
    return got


def case_steps(kind, W, T) -> int:
    return W + 30 if kind == CONSTANT else T + 10


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,kind,P,M,W,T", CASES, ids=[c[0] for c in CASES])
def test_every_decided_step_is_the_oracle_value(backend, name, kind, P, M, W, T):
    check(backend, kind, P, M, W, T, 1, case_steps(kind, W, T), name)


def test_the_cases_reach_undecided_steps_and_every_piece():
    """The cases above exercise UNDECIDED (warmup and decay ties) and both polynomials."""
    undecided = 0
    pieces = set()
    for _, kind, P, M, W, T in CASES:
        n = case_steps(kind, W, T)
        undecided += int(route(kind, P, M, W, T, 1, n)[0].sum())
        for t in range(1, n + 1):
            if W < t < T and kind != CONSTANT:
                pieces.add("linear" if kind == LINEAR else "S" if 2 * (T - t) <= T - W else "C")
    assert undecided >= 20
    assert pieces == {"linear", "S", "C"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", HARD + TIES, ids=lambda c: f"{c[0]}-{c[3]}-{c[4]}-{c[5]}")
def test_hard_steps_are_undecided_everywhere(backend, case):
    """binary32(v) is wrong at these steps, so the test must not decide them (clause 6)."""
    kind, pb, mb, W, T, t, wrong, right = case
    P, M = from_bits(pb), from_bits(mb)
    assert f32_to_bits(oracle.value(kind, P, M, W, T, t)) == right
    v, _ = oracle.fast_value(kind, P, M, W, T, t)
    assert f32_to_bits(f32(v)) == wrong != right
    t0 = t - 150  # a window of SIM_CALL steps around the hard one
    got = check(backend, kind, P, M, W, T, t0, SIM_CALL, f"hard t={t}")
    assert got[t - t0] == UNDECIDED


def test_the_numba_pieces_compute_fast_values_v_and_e_bit_for_bit():
    """native/schedule.py's schedule_ve is oracles/schedule.fast_value, operation for operation."""
    from mojolike.native.schedule import schedule_ve
    rng = np.random.default_rng(4)
    for kind, P, M, W, T in random_configs(5, 60):
        for t in rng.integers(1, max(T, W) + 20, 40).tolist() + [W, W + 1, T - 1, T]:
            if t < 1:
                continue
            got = schedule_ve(kind, np.float32(P), np.float32(M), W, T, t)
            want = oracle.fast_value(kind, P, M, W, T, t)
            assert (float(got[0]).hex(), float(got[1]).hex()) == (want[0].hex(), want[1].hex()), (
                f"{(kind, P, M, W, T)} t={t}: numba {got}, fast_value {want}")


def random_configs(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        kind = int(rng.integers(0, 3))
        P = f32(np.exp(rng.uniform(np.log(1e-7), np.log(10.0))))
        M = [0.0, f32(rng.uniform(0, 1) * P), f32(rng.uniform(0, 2) * P)][int(rng.integers(0, 3))]
        W = int(rng.integers(0, 3000))
        T = 0 if kind == CONSTANT else W + int(rng.integers(0, 200_000))
        yield kind, P, M, W, max(T, 1) if kind != CONSTANT else 0


def test_cpu_backends_agree_bit_for_bit_on_long_runs():
    """numba and C: the same bits (UNDECIDED steps included) on 30 runs of 2 * 10^5 steps."""
    total_undecided = 0
    for kind, P, M, W, T in random_configs(1, 30):
        a = run("cpu-numba", kind, P, M, W, T, 1, 200_000)
        b = run("cpu-cffi", kind, P, M, W, T, 1, 200_000)
        diff = np.nonzero(a != b)[0]
        assert not diff.size, (f"{(kind, P, M, W, T)}: numba and C differ at steps {(diff + 1)[:8]}: "
                               f"0x{a[diff[0]]:08x} vs 0x{b[diff[0]]:08x}")
        total_undecided += int((a == UNDECIDED).sum())
    assert total_undecided > 0


def test_undecided_steps_identical_across_backends():
    """Windows around the steps cpu-numba leaves UNDECIDED: every backend leaves exactly those."""
    windows = []
    for kind, P, M, W, T in random_configs(2, 1000):
        a = run("cpu-numba", kind, P, M, W, T, 1, 100_000)
        hits = np.nonzero(a == UNDECIDED)[0]
        if hits.size:
            t0 = max(1, int(hits[-1]) + 1 - 100)
            windows.append(((kind, P, M, W, T), t0))
            if len(windows) == 4:
                break
    assert len(windows) == 4
    for cfg, t0 in windows:
        results = {b: run(b, *cfg, t0, 200) for b in BACKENDS if available(b)}
        masks = {b: r == UNDECIDED for b, r in results.items()}
        base = masks["cpu-numba"]
        assert base.any()
        for b, m in masks.items():
            assert (m == base).all(), f"{cfg} from t0={t0}: {b} undecided steps differ from cpu-numba"
            assert (results[b] == results["cpu-numba"]).all(), f"{cfg} from t0={t0}: {b} bits differ"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_block_starting_at_t0_is_the_slice_of_the_block_from_step_1(backend):
    if backend == "cuda-sim":
        cfgs = [(COSINE, f32(0.3), f32(1e-3), 40, 200), (LINEAR, f32(0.7), 0.0, 0, 150),
                (CONSTANT, f32(0.2), 0.0, 60, 0)]
        n, starts = 250, (2, 37, 40, 41, 100, 101, 149, 150, 151, 199, 200, 201)
        length = 49
    else:
        cfgs = [(COSINE, f32(0.3), f32(1e-3), 1000, 3 * BLOCK + 5), (LINEAR, f32(0.7), 0.0, 0, 9000),
                (CONSTANT, f32(0.2), 0.0, 5000, 0), (COSINE, f32(2.0), f32(3.0), 4096, 8193)]
        n = 4 * BLOCK + 17
        starts = (2, 17, 999, 1000, 1001, BLOCK - 1, BLOCK, BLOCK + 1, 5000, 6145, 8193, 8194,
                  3 * BLOCK + 5, 3 * BLOCK + 6, 4 * BLOCK)
        length = BLOCK + 3
    for cfg in cfgs:
        full = run(backend, *cfg, 1, n)
        for t0 in starts:
            m = min(length, n - t0 + 1)
            part = run(backend, *cfg, t0, m)
            assert (part == full[t0 - 1:t0 - 1 + m]).all(), f"{backend} {cfg}: t0={t0} differs"


@pytest.mark.parametrize("backend", CPU)
def test_one_and_two_threads_give_the_same_bits(backend):
    k = kernels(backend)
    if k.max_threads() < 2:
        pytest.skip("one CPU thread only")
    before = k.get_num_threads()
    results = {}
    try:
        for threads in (1, 2):
            k.set_num_threads(threads)
            results[threads] = [run(backend, *cfg, 1, 50_000) for cfg in random_configs(3, 6)]
    finally:
        k.set_num_threads(before)
    for a, b in zip(results[1], results[2]):
        assert (a == b).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_steps_near_two_to_the_forty(backend):
    big = 2 ** 40
    for kind, P, M, W, T, t0 in [
        (COSINE, f32(0.3), f32(1e-6), big - 10 ** 6, big, big - 10 ** 6 - 20),  # warmup end, C(w)
        (COSINE, f32(0.3), f32(1e-6), 5, big, big - 40),  # S(u) near T, then M
        (LINEAR, f32(0.3), f32(1e-6), 2 ** 39, big, big - 40),
        (CONSTANT, f32(0.3), 0.0, big - 30, 0, big - 60),
        (LINEAR, f32(1e-3), 0.0, 0, big, 1),
    ]:
        check(backend, kind, P, M, W, T, t0, 60, f"t0={t0}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_negative_zero_rate_gives_positive_zero(backend):
    for kind, P, M, W, T in [(CONSTANT, -0.0, 0.0, 2, 0), (LINEAR, f32(0.5), -0.0, 1, 4),
                             (COSINE, -0.0, -0.0, 2, 6)]:
        got = check(backend, kind, P, M, W, T, 1, 8, f"{(kind, P, M)}")
        assert (got != 0x80000000).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_empty_out_writes_nothing(backend):
    assert kernels(backend).schedule_into(COSINE, np.float32(1), np.float32(0), 0, 10, 1,
                                          np.empty(0, np.float32)) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_kernels_report_their_labels(backend):
    k = kernels(backend)
    assert (k.backend, k.numeric_mode) == (backend, "identical")
    assert interfaces.writes("schedule") == {"schedule_into": (6,)}
