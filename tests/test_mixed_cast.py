"""mojolike.cast: float32 <-> bfloat16 / float16 on every backend equals the oracle bit for bit.

Every class of value is pinned by known patterns (ties both ways, the targets'
subnormals, overflow, NaN payloads, signed zeros, widening), checked on the oracle
against those patterns and on every backend against the oracle. cuda-sim runs in the
registry's simulator worker with tiny arrays. numpy / ml_dtypes / torch agree with the
oracle off NaN (contracts/mixed.md clause 5 says where they disagree on NaN).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import available
from hypothesis import given, settings
from hypothesis import strategies as st
from mojolike.oracles import mixed as spec

import mojolike

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")
BF16 = ml_dtypes.bfloat16

# (class, float32 pattern, bfloat16 pattern, float16 pattern)
NARROW = [
    ("zero", 0x00000000, 0x0000, 0x0000),
    ("negative zero", 0x80000000, 0x8000, 0x8000),
    ("one", 0x3F800000, 0x3F80, 0x3C00),
    ("bf16 tie, kept bit even: down", 0x3F808000, 0x3F80, 0x3C04),
    ("bf16 tie, kept bit odd: up", 0x3F818000, 0x3F82, 0x3C0C),
    ("bf16 just above a tie: up", 0x3F808001, 0x3F81, 0x3C04),
    ("bf16 negative tie, odd: away", 0xBF818000, 0xBF82, 0xBC0C),
    ("f16 tie, kept bit even: down", 0x3F801000, 0x3F80, 0x3C00),
    ("f16 tie, kept bit odd: up", 0x3F803000, 0x3F80, 0x3C02),
    ("f16 just below a tie: down", 0x3F802FFF, 0x3F80, 0x3C01),
    ("f16 smallest subnormal", 0x33800000, 0x3380, 0x0001),
    ("f16 half the smallest subnormal: tie to zero", 0x33000000, 0x3300, 0x0000),
    ("f16 just above half: the smallest subnormal", 0x33000001, 0x3300, 0x0001),
    ("f16 three halves of the smallest: tie to 2", 0x33C00000, 0x33C0, 0x0002),
    ("f16 largest subnormal rounds up to the smallest normal", 0x387FFFFF, 0x3880, 0x0400),
    ("negative f16 subnormal", 0xB3C00000, 0xB3C0, 0x8002),
    ("bf16 = f32 subnormal, kept", 0x00010000, 0x0001, 0x0000),
    ("bf16 subnormal tie, even: down", 0x00008000, 0x0000, 0x0000),
    ("bf16 subnormal tie, odd: up", 0x00018000, 0x0002, 0x0000),
    ("f16 largest finite", 0x477FE000, 0x4780, 0x7BFF),
    ("f16 overflow threshold 65520: inf", 0x477FF000, 0x4780, 0x7C00),
    ("f16 just under the threshold", 0x477FEFFF, 0x4780, 0x7BFF),
    ("negative f16 overflow", 0xC77FF000, 0xC780, 0xFC00),
    ("bf16 overflow threshold: inf", 0x7F7F8000, 0x7F80, 0x7C00),
    ("bf16 just under the threshold", 0x7F7F7FFF, 0x7F7F, 0x7C00),
    ("float32 max", 0x7F7FFFFF, 0x7F80, 0x7C00),
    ("infinity", 0x7F800000, 0x7F80, 0x7C00),
    ("negative infinity", 0xFF800000, 0xFF80, 0xFC00),
    ("quiet NaN", 0x7FC00000, 0x7FC0, 0x7E00),
    ("negative quiet NaN: sign cleared", 0xFFC00000, 0x7FC0, 0x7E00),
    ("signalling NaN, payload in the low bits", 0x7F800001, 0x7FC0, 0x7E00),
    ("NaN with a payload", 0xFFC01234, 0x7FC0, 0x7E00),
    ("all-ones NaN", 0xFFFFFFFF, 0x7FC0, 0x7E00),
]
# (class, float16 pattern, bfloat16 pattern, float32 of f16, float32 of bf16)
WIDEN = [
    ("zero", 0x0000, 0x0000, 0x00000000, 0x00000000),
    ("negative zero", 0x8000, 0x8000, 0x80000000, 0x80000000),
    ("smallest subnormal", 0x0001, 0x0001, 0x33800000, 0x00010000),
    ("largest subnormal", 0x03FF, 0x007F, 0x387FC000, 0x007F0000),
    ("negative subnormal", 0x8200, 0x8040, 0xB8000000, 0x80400000),
    ("one", 0x3C00, 0x3F80, 0x3F800000, 0x3F800000),
    ("largest finite", 0x7BFF, 0x7F7F, 0x477FE000, 0x7F7F0000),
    ("infinity", 0x7C00, 0x7F80, 0x7F800000, 0x7F800000),
    ("negative infinity", 0xFC00, 0xFF80, 0xFF800000, 0xFF800000),
    ("signalling NaN kept", 0x7C01, 0x7F81, 0x7F802000, 0x7F810000),
    ("negative NaN with payload kept", 0xFE01, 0xFFC1, 0xFFC02000, 0xFFC10000),
]


def _backends():
    return [pytest.param(b, marks=pytest.mark.skipif(not available(b), reason=f"{b} cannot run here"))
            for b in BACKENDS]


def _f32(patterns) -> np.ndarray:
    return np.array(patterns, np.uint32).view(np.float32)


def _hex(a) -> list[str]:
    return [f"0x{int(v):04x}" for v in np.asarray(a).tolist()]


def test_the_oracle_gives_the_known_pattern_of_every_class():
    for what, u, b, h in NARROW:
        assert (spec.to_bf16_bits(u), spec.to_f16_bits(u)) == (b, h), what
    for what, h, b, wh, wb in WIDEN:
        assert (spec.from_f16_bits(h), spec.from_bf16_bits(b)) == (wh, wb), what


@pytest.mark.parametrize("backend", _backends())
def test_every_narrowing_class_equals_the_oracle_bit_for_bit_on_every_backend(backend):
    x = _f32([u for _, u, _, _ in NARROW])
    got_b = mojolike.cast(x, BF16, backend=backend).view(np.uint16)
    got_h = mojolike.cast(x, np.float16, backend=backend).view(np.uint16)
    assert got_b.dtype == np.uint16
    for (what, _, b, h), gb, gh in zip(NARROW, got_b.tolist(), got_h.tolist()):
        assert (f"0x{gb:04x}", f"0x{gh:04x}") == (f"0x{b:04x}", f"0x{h:04x}"), what


@pytest.mark.parametrize("backend", _backends())
def test_widening_is_exact_and_keeps_nan_payloads_on_every_backend(backend):
    h = np.array([r[1] for r in WIDEN], np.uint16).view(np.float16)
    b = np.array([r[2] for r in WIDEN], np.uint16).view(BF16)
    got_h = mojolike.cast(h, "float32", backend=backend).view(np.uint32).tolist()
    got_b = mojolike.cast(b, np.float32, backend=backend).view(np.uint32).tolist()
    for (what, _, _, wh, wb), gh, gb in zip(WIDEN, got_h, got_b):
        assert (hex(gh), hex(gb)) == (hex(wh), hex(wb)), what


def _sample(n: int, key: int) -> np.ndarray:
    """Random patterns plus dense runs around every boundary the casts have."""
    rng = np.random.default_rng(key)
    edges = [0x33000000, 0x38800000, 0x477FF000, 0x7F7F8000, 0x00008000, 0x7F800000]
    runs = [np.arange(e - 64, e + 64, dtype=np.int64) for e in edges]
    u = np.concatenate([rng.integers(0, 2**32, n, dtype=np.int64), *runs])
    u = np.concatenate([u, u ^ 0x80000000]).astype(np.uint32)
    return u


@pytest.mark.parametrize("backend", [b for b in _backends() if b.values[0] != "oracle"])
def test_random_and_boundary_patterns_equal_the_oracle_on_every_backend(backend):
    u = _sample(200 if backend == "cuda-sim" else 20000, 7)
    x = u.view(np.float32)
    for dtype, fn in ((BF16, spec.to_bf16_bits), (np.float16, spec.to_f16_bits)):
        got = mojolike.cast(x, dtype, backend=backend).view(np.uint16)
        want = np.array([fn(int(v)) for v in u.tolist()], np.uint16)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"x=0x{int(u[bad[0]]):08x} got {_hex(got[bad[:1]])} oracle {_hex(want[bad[:1]])}"
    h = np.arange(0, 65536, 1 if backend != "cuda-sim" else 61, dtype=np.uint32).astype(np.uint16)
    for dtype, fn in ((np.float16, spec.from_f16_bits), (BF16, spec.from_bf16_bits)):
        got = mojolike.cast(h.view(dtype), "float32", backend=backend).view(np.uint32)
        want = np.array([fn(int(v)) for v in h.tolist()], np.uint32)
        assert (got == want).all(), f"{np.dtype(dtype).name}: {int(np.sum(got != want))} patterns differ"


@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
@settings(max_examples=300, deadline=None)
@given(patterns=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_the_cpu_backends_equal_the_oracle_on_any_patterns(backend, patterns):
    x = _f32(patterns)
    got = mojolike.cast(x, np.float16, backend=backend).view(np.uint16).tolist()
    assert got == [spec.to_f16_bits(u) for u in patterns]
    got = mojolike.cast(x, BF16, backend=backend).view(np.uint16).tolist()
    assert got == [spec.to_bf16_bits(u) for u in patterns]


def test_off_nan_the_oracle_equals_ml_dtypes_numpy_and_torch():
    torch = pytest.importorskip("torch")
    u = _sample(50000, 11)
    x = u.view(np.float32)
    keep = ~np.isnan(x)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the point
        lib_b, lib_h = x.astype(BF16).view(np.uint16), x.astype(np.float16).view(np.uint16)
    t = torch.from_numpy(x.copy())
    tb = t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    th = t.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    ours_b = mojolike.cast(x, BF16, backend="cpu-numba").view(np.uint16)
    ours_h = mojolike.cast(x, np.float16, backend="cpu-numba").view(np.uint16)
    for name, ours, theirs in (("ml_dtypes", ours_b, lib_b), ("numpy", ours_h, lib_h),
                               ("torch bf16", ours_b, tb), ("torch f16", ours_h, th)):
        assert int(np.sum((ours != theirs) & keep)) == 0, name


@pytest.mark.parametrize("backend", _backends())
def test_out_is_written_and_returned_and_a_new_array_keeps_the_shape(backend):
    x = np.float32([[1.0, 2.0], [3.0, 65520.0]])
    out = np.zeros(4, np.float16)
    assert mojolike.cast(x, "float16", out=out, backend=backend) is out
    assert out.view(np.uint16).tolist() == [0x3C00, 0x4000, 0x4200, 0x7C00]
    wide = np.zeros((2, 2), np.float32)
    assert mojolike.cast(out, "float32", out=wide, backend=backend) is wide
    assert wide.tolist() == [[1.0, 2.0], [3.0, np.inf]]
    y = mojolike.cast(x, "bfloat16", backend=backend)
    assert y.shape == (2, 2) and y.dtype == np.dtype(BF16)


@pytest.mark.parametrize("option, call", [
    ("x", lambda: mojolike.cast(np.float64([1.0]), "float16")),
    ("dtype", lambda: mojolike.cast(np.float32([1.0]), "float64")),
    ("dtype", lambda: mojolike.cast(np.float32([1.0]), np.float32)),
    ("dtype", lambda: mojolike.cast(np.float16([1.0]), BF16)),
    ("out", lambda: mojolike.cast(np.float32([1.0]), "float16", out=np.empty(1, BF16))),
    ("rounding", lambda: mojolike.cast(np.float32([1.0]), "float16", rounding="stochastic")),
])
def test_cast_refuses_what_the_contract_does_not_cover_by_name(option, call):
    with pytest.raises(mojolike.Refusal) as e:
        call()
    assert e.value.option == option and str(e.value).startswith("mojolike.cast: ")


def test_a_refused_cast_leaves_out_untouched():
    x = np.float32([1.0, 2.0])
    out = np.full(2, 7.0, np.float16)
    with pytest.raises(mojolike.Refusal, match="x and out share memory"):
        mojolike.cast(x, "float16", out=x.view(np.float16)[:2])
    with pytest.raises(mojolike.Refusal, match="out has 2 elements; x has 3"):
        mojolike.cast(np.float32([1.0, 2.0, 3.0]), "float16", out=out)
    assert out.tolist() == [7.0, 7.0]


def test_other_entry_points_still_refuse_bfloat16_and_float16_by_name_with_the_old_text():
    for dtype in (BF16, np.float16):
        with pytest.raises(mojolike.Refusal) as e:
            mojolike.fold(np.ones(4, dtype))
        assert e.value.option == "x"
        assert f"has dtype {np.dtype(dtype).name}; only float32 buffers are covered (float16, " \
               "bfloat16 and float64 are not converted)" in str(e.value)


def _cuda_kernels():
    if not available("cuda-sim"):
        return []
    from mojolike.native.cuda import mixed as cuda_mixed
    return [pytest.param(name, fn, sig, id=name) for name, (fn, sig) in cuda_mixed.KERNELS.items()]


@pytest.mark.parametrize("name, fn, sig", _cuda_kernels())
def test_the_cuda_casts_compile_to_integer_work_only_no_float_instruction_at_all(name, fn, sig):
    # tests/test_ptx_lint.py asserts each kernel it lints has float instructions; these have
    # none by design (integer bit operations), which is what this checks, with the same lint
    from test_ptx_lint import compile_ptx, float_ops, lint
    ptx = compile_ptx(fn, sig)
    assert ".entry" in ptx and ("shl.b" in ptx or "shr" in ptx), f"{name}: is this the kernel's PTX?"
    assert float_ops(ptx) == [] and lint(ptx) == [], name
