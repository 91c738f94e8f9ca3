"""The crmath kernels give the oracle's expf/logf/sinpif/cospif bits on every backend, and mark the same slots UNDECIDED.

Every slot a kernel decides must carry exactly the oracle's bit pattern (NaN
payloads included); a slot the rounding test cannot decide carries UNDECIDED, and
since cpu-numba, cpu-cffi and cuda-sim run the same binary64 operation sequence,
they must leave exactly the same slots undecided. cuda-sim runs in a worker
process at about 0.1 ms per element, so it gets at most SIM_CALL elements a call.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import available
from mojolike.native.crmath import UNDECIDED
from mojolike.oracles import crmath as oracle

from mojolike.core import interfaces, registry

BACKENDS = ("cpu-numba", "cpu-cffi", "cuda-sim")
SIM_CALL = 300  # elements per cuda-sim call
ORACLE = {"expf": oracle.expf_bits, "logf": oracle.logf_bits, "sinpif": oracle.sinpif_bits,
          "cospif": oracle.cospif_bits}
FUNCS = tuple(ORACLE)
POISON = 0xDEADBEEF  # out is filled with this first, so an unwritten slot cannot pass

# Every input the numba kernel leaves UNDECIDED: found by running cpu-numba's expf_into
# and logf_into on all 2^32 binary32 bit patterns (np.arange over the patterns in chunks
# of 2^24; about 2.5 minutes on 2 cores). The oracle decides each of them.
HARD_EXPF = (
    0x377EFF81, 0x39C6BE5B, 0x4001B249, 0x40315B33, 0xB3000000, 0xBAE0E25C, 0xBBF0EDF1, 0xC16912CD,
)
HARD_LOGF = (
    0x064CB44B, 0x07C060FA, 0x0DC8BBA4, 0x0F61FF63, 0x111C87F8, 0x145CB6D4, 0x14907055, 0x16C5EE7A,
    0x18B06F2A, 0x1A8446CB, 0x1B81AB52, 0x1F116AB8, 0x22925AD4, 0x2423C085, 0x28E3FA26, 0x29E6126B,
    0x29FD22F8, 0x2C4C24B7, 0x2E492984, 0x3418949B, 0x38DCBE38, 0x39C31348, 0x39C7B1F9, 0x3BF86EF0,
    0x3C413D3A, 0x41178FEB, 0x464D5B2B, 0x4665A9A6, 0x4C5D65A5, 0x4D604EBE, 0x4E85F412, 0x54AF989D,
    0x5D800341, 0x5EE8984E, 0x5F64C24A, 0x62B467BA, 0x64E27FA3, 0x65D890D3, 0x66A8C860, 0x66ABBD63,
    0x6914CB96, 0x6D1F23EB, 0x6F31A8EC, 0x7405DEE8, 0x79E7EC37, 0x7D98B8F4,
)
HARD_SINPIF = (
    0x34E54DB5, 0x361652F2, 0x385A58FC, 0x386ACAF6, 0x3CEEB990, 0x3D80C8A4, 0x3DFD7F58, 0x3F605015,
    0xB4E54DB5, 0xB61652F2, 0xB85A58FC, 0xB86ACAF6, 0xBCEEB990, 0xBD80C8A4, 0xBDFD7F58, 0xBF605015,
)
HARD_COSPIF = (
    0x390D23E4, 0x398721A7, 0x3B25BCA6, 0x3EC0A02A, 0x3EDFCDD7, 0x3EF11467, 0x3F1FAFEB,
    0xB90D23E4, 0xB98721A7, 0xBB25BCA6, 0xBEC0A02A, 0xBEDFCDD7, 0xBEF11467, 0xBF1FAFEB,
)
HARD = {"expf": HARD_EXPF, "logf": HARD_LOGF, "sinpif": HARD_SINPIF, "cospif": HARD_COSPIF}
ALL_HARD = HARD_EXPF + HARD_LOGF + HARD_SINPIF + HARD_COSPIF


def kernels(backend: str):
    if not available(backend):
        pytest.skip(f"backend {backend} is not available here")
    return registry.kernels("test", "crmath", backend, "identical")


def f32_bits(values) -> list[int]:
    return [int(u) for u in np.asarray(values, np.float32).view(np.uint32)]


def around(value, k: int = 8) -> list[int]:
    """The bit patterns of the binary32 values within k steps of `value`, on its side of zero."""
    u = f32_bits([value])[0] if not isinstance(value, int) else value
    return [u + d for d in range(-k, k + 1) if u + d >= 0 and (u + d) >> 31 == u >> 31]


SPECIALS = [
    0x00000000, 0x80000000,  # +-0
    0x7F800000, 0xFF800000,  # +-inf
    0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF,  # quiet NaNs, payloads
    0x7F800001, 0xFF800001, 0x7FA00DAD, 0xFFA00DAD, 0x7FB12345,  # signalling NaNs (UNDECIDED's own pattern too)
    0x00000001, 0x80000001, 0x00000002, 0x00000003, 0x00400000,  # subnormals: smallest, ...
    0x007FFFFF, 0x807FFFFF,  # largest subnormal
    0x00800000, 0x80800000, 0x00800001,  # smallest normal
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,  # largest normal
    0x3F800000, 0xBF800000,  # +-1
    0x40000000, 0x3F000000, 0x402DF854, 0x3F317218,  # 2, 1/2, e, ln 2
]
EXP_EDGES = sorted(set(
    around(88.72283935546875, 16)  # e^x near FLT_MAX: the last finite results, then +inf
    + around(89.0, 4) + around(-104.0, 4)  # the clamps
    + around(-103.97207708, 16)  # e^x near 2^-150: the last nonzero results
    + around(-103.2789, 4)  # e^x near 2^-149, the least subnormal
    + around(-87.33654475, 16)  # e^x near 2^-126: normal to subnormal
    + around(-88.0, 4) + around(-100.0, 4)  # subnormal results
    + around(2.0 ** -24, 4) + around(-(2.0 ** -24), 4) + around(2.0 ** -25, 4)  # e^x rounds to 1 or 1-ulp
    + around(-(2.0 ** -25), 4) + around(1e-3, 2) + around(-1e-3, 2)
    + around(np.log(2.0) / 32, 2) + around(-np.log(2.0) / 64, 2)  # table cell edges
    + around(10.0, 2) + around(-10.0, 2) + around(50.0, 2)))
LOG_EDGES = sorted(set(
    around(1.0, 16)  # ln x near 0
    + around(0x3F3504F3, 4) + around(0x3FB504F3, 4)  # sqrt(1/2), sqrt 2: where the tables switch
    + [0x00000001, 0x00000002, 0x00000003, 0x00000005, 0x000FFFFF, 0x00100000, 0x00400001]
    + [0x007FFFFE, 0x00B504F3, 0x00B504F2, 0x7F7FFFFF, 0x7F3504F3, 0x7F3504F2]
    + [(127 << 23) | (j << 16) | t for j in (0, 1, 2, 52, 53, 54) for t in (0, 0xFFFF)]  # cells of [1, sqrt 2)
    + [(126 << 23) | (j << 16) | t for j in (53, 54, 126, 127) for t in (0, 0xFFFF)]  # cells of [sqrt(1/2), 1)
    + around(2.7182817, 2) + around(10.0, 2) + around(0.1, 2) + around(1e-30, 2) + around(1e30, 2)))
PI_EDGES = sorted(set(
    [u for s in (1.0, -1.0) for j in range(0, 33) for u in around(s * j / 4, 3)]  # multiples of 1/4
    + [u for s in (1.0, -1.0) for v in (2.0**21 + 0.25, 2.0**22 - 0.25, 2.0**22 + 0.5, 2.0**23 - 0.5,
                                         2.0**23 + 1, 2.0**24 - 1, 2.0**24, 2.0**24 + 2, 1e30)
       for u in around(s * v, 3)]  # where x turns into multiples of 1/2, integers, even integers
    + around(1e-30, 2) + around(-1e-30, 2) + around(2.0**-126, 2) + around(-(2.0**-126), 2)))


def run(backend: str, func: str, patterns) -> tuple[np.ndarray, int]:
    """(result bit patterns, the kernel's undecided count); checks that x is untouched."""
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
    """Every decided slot has the oracle's bits; the count is the number of UNDECIDED slots."""
    got, count = run(backend, func, patterns)
    undecided = got == UNDECIDED
    assert count == int(undecided.sum()), f"{backend} {func}: count {count}, slots {int(undecided.sum())}"
    want = np.array([ORACLE[func](int(u)) for u in np.asarray(patterns, np.uint64)], np.uint32)
    bad = np.nonzero((got != want) & ~undecided)[0]
    if bad.size:
        pytest.fail(f"{backend} {func}: {bad.size} slots differ from the oracle, first: " + ", ".join(
            f"x=0x{int(np.uint32(patterns[i])):08x} got=0x{got[i]:08x} oracle=0x{want[i]:08x}"
            for i in bad[:8]))
    return got


def random_patterns(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


def random_values(seed: int, n: int, lo: float, hi: float) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32)
    return x.view(np.uint32)


def sample(backend: str, n: int) -> int:
    return min(n, SIM_CALL) if backend == "cuda-sim" else n


@pytest.mark.parametrize("backend", BACKENDS)
def test_expf_gives_the_oracle_bits_on_special_values_and_range_edges(backend):
    assert_oracle_bits(backend, "expf", SPECIALS + EXP_EDGES)


@pytest.mark.parametrize("backend", BACKENDS)
def test_logf_gives_the_oracle_bits_on_special_values_and_table_edges(backend):
    assert_oracle_bits(backend, "logf", SPECIALS + LOG_EDGES)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("func", ["sinpif", "cospif"])
def test_sinpif_and_cospif_give_the_oracle_bits_on_special_values_and_multiples_of_a_quarter(backend, func):
    assert_oracle_bits(backend, func, SPECIALS + PI_EDGES)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("func", ["sinpif", "cospif"])
def test_sinpif_and_cospif_of_random_values_in_minus_4_to_4_give_the_oracle_bits(backend, func):
    assert_oracle_bits(backend, func, random_values(13, sample(backend, 4000), -4.0, 4.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("func", FUNCS)
def test_random_bit_patterns_give_the_oracle_bits(backend, func):
    assert_oracle_bits(backend, func, random_patterns(1, sample(backend, 4000)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_expf_of_random_values_in_its_finite_range_gives_the_oracle_bits(backend):
    assert_oracle_bits(backend, "expf", random_values(2, sample(backend, 4000), -104.0, 89.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_logf_of_random_values_up_to_ten_gives_the_oracle_bits(backend):
    x = random_values(3, sample(backend, 4000), 0.0, 10.0)
    assert_oracle_bits(backend, "logf", np.where(x == 0, np.uint32(0x41200000), x))  # (0, 10]


@pytest.mark.parametrize("backend", BACKENDS)
def test_logf_of_random_positive_floats_of_every_magnitude_gives_the_oracle_bits(backend):
    rng = np.random.default_rng(4)
    assert_oracle_bits(backend, "logf", rng.integers(1, 0x7F800000, sample(backend, 4000), dtype=np.uint32))


@pytest.mark.parametrize("func", FUNCS)
def test_the_hard_cases_are_undecided_on_every_backend_and_the_oracle_decides_them(func):
    hard = list(HARD[func])
    assert hard, f"the 2^32 scan found {func} inputs the fast path leaves undecided"
    # the hard cases among ordinary inputs, so that the positions are what is compared
    mixed = np.concatenate([random_values(5, 40, 0.5, 80.0), np.uint32(hard), random_values(6, 40, 0.5, 80.0)])
    where = np.arange(40, 40 + len(hard))
    for backend in BACKENDS:
        got = assert_oracle_bits(backend, func, mixed)
        assert np.array_equal(np.nonzero(got == UNDECIDED)[0], where), backend
    for u in hard:  # the oracle still decides each
        assert ORACLE[func](u) != UNDECIDED


@pytest.mark.parametrize("func", FUNCS)
def test_cffi_gives_the_numba_bits_on_every_slot_of_a_large_array(func):
    """Same operation sequence, so the same bits everywhere, UNDECIDED slots included."""
    rng = np.random.default_rng(7)
    lo, hi = {"expf": (-104.0, 89.0), "logf": (0.0, 100.0)}.get(func, (-4.0, 4.0))
    x = np.concatenate([rng.uniform(lo, hi, 1 << 21).astype(np.float32).view(np.uint32),
                        random_patterns(8, 1 << 20), np.uint32(ALL_HARD + tuple(SPECIALS))])
    a, na = run("cpu-numba", func, x)
    b, nb = run("cpu-cffi", func, x)
    assert na == nb
    diff = np.nonzero(a != b)[0]
    assert diff.size == 0, [f"x=0x{x[i]:08x} numba=0x{a[i]:08x} cffi=0x{b[i]:08x}" for i in diff[:8]]


@pytest.mark.parametrize("func", FUNCS)
def test_cuda_sim_gives_the_numba_bits_on_every_slot(func):
    x = np.concatenate([np.uint32(SPECIALS), np.uint32(ALL_HARD),
                        random_patterns(9, 100), random_values(10, 100, -104.0, 89.0)])
    a, na = run("cpu-numba", func, x)
    b, nb = run("cuda-sim", func, x)
    assert na == nb and (a == b).all()


@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
def test_the_bits_do_not_depend_on_the_thread_count(backend):
    k = kernels(backend)
    x = np.concatenate([random_values(11, 1 << 18, -104.0, 89.0), random_patterns(12, 1 << 16)])
    before = k.get_num_threads()
    try:
        results = []
        for threads in sorted({1, 2, max(1, k.max_threads())}):
            k.set_num_threads(threads)
            results.append([run(backend, f, x)[0] for f in FUNCS])
    finally:
        k.set_num_threads(before)
    for r in results[1:]:
        assert all((a == b).all() for a, b in zip(results[0], r))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_kernels_report_their_backend_mode_and_what_they_write(backend):
    k = kernels(backend)
    assert (k.backend, k.numeric_mode) == (backend, "identical")
    assert interfaces.writes("crmath") == {**{f"{f}_into": (1,) for f in FUNCS},
                                           "tanhf_into": (1,), "erff_into": (1,),
                                           "gelu_into": (2,), "gelu_backward_into": (3,)}
