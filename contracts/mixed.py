"""The mixed suite: casts over every class of value, threads, refusals, negative controls (contracts/mixed.md).

>>> [c.id for c in cases()][:3]
['specials', 'ties-bf16', 'ties-f16']
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..core.checks import cast_types
from ..ops import layers, transformer
from ..oracles import f32
from ..oracles import mixed as spec
from ..oracles.fold import fold_tree
from . import mixed_attention, mixed_fma, mixed_refusals, mixed_scaler, mixed_twins
from .casegen import SplitMix64
from .harness import refusal_clause, with_1_and_2_threads

NAME = "mixed"
FAMILY = "mixed"
PROFILE = "mojolike.identical.mixed.v1"
REQUIRES = ("ml_dtypes", None)  # bfloat16 is ml_dtypes' numpy type (a dependency, not an extra)
BF16 = cast_types().get("bfloat16")  # None only where ml_dtypes is missing: the suite is not run
CAST = {"bfloat16": BF16, "float16": np.float16}
THREAD_N = 1 << 22

SPECIALS = (0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000,
            0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0xFFC01234, 0x7FFFFFFF,
            0xFFFFFFFF, 0x7F80FFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,
            0xFF7FFFFF, 0x477FE000, 0x38800000, 0x33800000, 0x33000000, 0xB3000000, 0x33000001)


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # "narrow" (x float32), "widen-bf16", "widen-f16" (h: uint16), "linear",
    # "matmul", "window", "twins", "low-op" (attention, embedding)
    data: np.ndarray
    operands: tuple = ()  # linear: (x, weight, bias); matmul: (a, b); all of one low type;
    # window: (mixed_scaler.Window,); twins: (mixed_twins.TwinCase,); low-op: (LowCase,)


def _f32(patterns) -> np.ndarray:
    return np.array(patterns, np.uint32).view(np.float32)


def _signed(r: SplitMix64, patterns: list[int]) -> list[int]:
    return [u | (r.next() & 1) << 31 for u in patterns]


def _ties(key: str, lo_exp: int, hi_exp: int, drop: int, n: int) -> list[int]:
    """Patterns whose `drop` low bits are exactly half (ties), with the kept bit even or odd,
    and their neighbours one pattern below and above, exponents in [lo_exp, hi_exp]."""
    r = SplitMix64(key)
    out = []
    for _ in range(n):
        e = lo_exp + r.below(hi_exp - lo_exp + 1)
        kept = (r.next() & ((1 << (23 - drop)) - 1)) << drop
        base = e << 23 | kept | 1 << (drop - 1)
        out += [base, base - 1, base + 1]
    return _signed(r, out)


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    r = SplitMix64("mixed/cases")
    sub_bf16 = _signed(r, [r.next() & 0x7FFFFF for _ in range(96)] + [0x8000, 0x18000, 0x7FFF,
                                                                       0x17FFF, 0x7F8000])
    # float16 subnormals: |x| in [2^-26, 2^-14), exponents 101..112, ties k * 2^-25 (k odd)
    sub_f16 = [(101 + r.below(12)) << 23 | (r.next() & 0x7FFFFF) for _ in range(96)]
    sub_f16 += [spec.round_to(0, k, -25, spec.F32) for k in (1, 3, 5, 7, 2047, 2045)]
    overflow = [0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7FFFFF, 0x7F7EFFFF, 0x7F7E8000,
                0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000, 0x47C35000, 0x7E967699]
    nan = [0x7F800000 | (r.next() & 0x7FFFFF) | 1 for _ in range(30)] + [0x7FC00000, 0x7F800001]
    normal = [(r.below(254) + 1) << 23 | (r.next() & 0x7FFFFF) for _ in range(256)]
    narrow = [
        ("specials", list(SPECIALS)),
        ("ties-bf16", _ties("mixed/ties-bf16", 1, 254, 16, 64)),
        ("ties-f16", _ties("mixed/ties-f16", 113, 142, 13, 64)),
        ("subnormal-bf16", sub_bf16),
        ("subnormal-f16", _signed(r, sub_f16)),
        ("overflow", _signed(r, overflow) + [u | 0x80000000 for u in overflow]),
        ("nan", _signed(r, nan)),
        ("zeros", [0x00000000, 0x80000000] * 4),
        ("normal", _signed(r, normal)),
        ("bits", [r.next() & 0xFFFFFFFF for _ in range(512)]),
    ]
    out = [Case(cid, "narrow", _f32(p)) for cid, p in narrow]
    # every exponent field with both signs and a few significands, NaN payloads among them
    f16 = [s << 15 | e << 10 | m for s in (0, 1) for e in range(32)
           for m in (0, 1, 0x200, 0x3FF, 0x155, r.next() & 0x3FF)]
    bf16 = [s << 15 | e << 7 | m for s in (0, 1) for e in range(256)
            for m in (0, 1, 0x40, 0x7F)]
    out.append(Case("widen-f16", "widen-f16", np.array(f16, np.uint16)))
    out.append(Case("widen-bf16", "widen-bf16", np.array(bf16, np.uint16)))
    for t in ("bfloat16", "float16"):
        out.append(_contraction(f"linear-{t}", "linear", t, ((2, 1030), (3, 1030), (3,))))
        out.append(_contraction(f"matmul-{t}", "matmul", t, ((2, 2, 40), (40, 3))))
    for cid, op, t, shapes, fields in mixed_fma.CASES:
        ops = tuple(a.view(CAST[t]) for a in mixed_fma.operands(cid, t, shapes, fields))
        out.append(Case(cid, op, np.zeros(0, np.float32), ops))
    out += [Case(w.id, "window", np.zeros(0, np.float32), (w,)) for w in mixed_scaler.WINDOWS]
    out += [Case(t.id, "twins", np.zeros(0, np.float32), (t,)) for t in mixed_twins.TWIN_CASES]
    out += [Case(c.id, "low-op", np.zeros(0, np.float32), (c,)) for c in mixed_attention.CASES]
    return tuple(out)


def _low(key: str, shape, t: str) -> np.ndarray:
    """Low-precision values with full significands over a few binades, both signs, from the
    patterns' integers (rounded once by the oracle's cast)."""
    r = SplitMix64(key)
    n = int(np.prod(shape))
    pats = [(r.next() & 1) << 31 | (124 + r.below(6)) << 23 | (r.next() & 0x7FFFFF) for _ in range(n)]
    cast = spec.to_bf16_bits if t == "bfloat16" else spec.to_f16_bits
    return np.array([cast(u) for u in pats], np.uint16).view(CAST[t]).reshape(shape)


def _contraction(cid: str, op: str, t: str, shapes) -> Case:
    operands = tuple(_low(f"mixed/{cid}/{i}", shape, t) for i, shape in enumerate(shapes))
    return Case(cid, op, np.zeros(0, np.float32), operands)


def _patterns16(a: np.ndarray) -> np.ndarray:
    """uint16 patterns as the card's float32 cells: each pattern zero-extended to 32 bits
    (never a NaN pattern, so the card's NaN class cannot merge two of them)."""
    return a.astype(np.uint32).view(np.float32)


def _patterns32(out: np.ndarray) -> np.ndarray:
    """float32 results as the card's cells: each pattern's high and low halves, zero-extended,
    so a NaN's sign and payload reach the card."""
    b = out.view(np.uint32)
    return np.stack([b >> 16, b & 0xFFFF], axis=1).reshape(-1).astype(np.uint32).view(np.float32)


def _public(k, op: str):
    """The public op on k's backend; a negative control brings its own."""
    if isinstance(k, _Control):
        return getattr(k, op)
    fn = layers.linear if op == "linear" else transformer.matmul
    return lambda *args: fn(*args, backend=k.backend)


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    """The suite's outputs of one case on kernels `k`, in card order."""
    if case.kind == "window":
        if isinstance(k, _Control):
            return k.window(case.operands[0])
        return mixed_scaler.run(case.operands[0], k.backend)
    if case.kind == "twins":
        if isinstance(k, _Control):
            return k.twins(case.operands[0])
        return mixed_twins.run(case.operands[0], k.backend)
    if case.kind == "low-op":
        if isinstance(k, _Control):
            return k.low_op(case.operands[0])
        return mixed_attention.run(case.operands[0], k.backend)
    if case.kind in ("linear", "matmul"):
        return [(case.kind, np.asarray(_public(k, case.kind)(*case.operands), np.float32))]
    if case.kind == "narrow":
        res = []
        for name in ("to_bf16", "to_f16"):
            out = np.empty(case.data.size, np.uint16)
            getattr(k, name)(case.data, out)
            res.append((name, _patterns16(out)))
        return res
    out = np.empty(case.data.size, np.float32)
    name = "from_bf16" if case.kind == "widen-bf16" else "from_f16"
    getattr(k, name)(case.data, out)
    return [(name, _patterns32(out))]


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_threads(k), "f": clause_refusals(k), "g": clause_widened(k)}


def _low_and_widened(k, case: Case) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each output of a contraction or low-op case, with the float32 op's on the widened inputs."""
    if case.kind == "low-op":
        low = mixed_attention.run(case.operands[0], k.backend)
        wide = mixed_attention.run(case.operands[0], k.backend, widen=True)
        return [(a, b) for (_, a), (_, b) in zip(low, wide)]
    fn = _public(k, case.kind)
    return [(fn(*case.operands), fn(*(o.astype(np.float32) for o in case.operands)))]


def clause_widened(k) -> tuple[str, str]:
    """Clause (g): each low-precision linear / matmul / attention (forward and backward) /
    embedding equals, bit for bit (NaN one class), the float32 op on the same backend applied
    to the exactly widened inputs."""
    bad, cells, n = [], 0, 0
    for case in cases():
        if case.kind not in ("linear", "matmul", "low-op"):
            continue
        n += 1
        for low, wide in _low_and_widened(k, case):
            low, wide = np.asarray(low, np.float32), np.asarray(wide, np.float32)
            cells += low.size
            same = (low.view(np.uint32) == wide.view(np.uint32)) | (np.isnan(low) & np.isnan(wide))
            if low.shape != wide.shape or not same.all():
                bad.append(case.id)
    if bad:
        return "fail", f"low precision differs from the float32 op on widened inputs: {', '.join(dict.fromkeys(bad))}"
    return "pass", f"{n} cases, {cells} cells equal the float32 op on the widened operands"


def clause_threads(k) -> tuple[str, str]:
    """Clause (c): the same bits with 1 and 2 threads on 2^22 inputs spread over every pattern."""
    if not hasattr(k, "set_num_threads"):
        return "n/a", f"{k.backend} has no host thread count; its kernels are elementwise"
    x = (np.arange(THREAD_N, dtype=np.uint64) * np.uint64(1021) % np.uint64(1 << 32)).astype(
        np.uint32).view(np.float32)
    h = (np.arange(THREAD_N, dtype=np.uint64) % np.uint64(1 << 16)).astype(np.uint16)

    def run():
        res = []
        for name in ("to_bf16", "to_f16"):
            out = np.empty(THREAD_N, np.uint16)
            getattr(k, name)(x, out)
            res.append(out)
        for name in ("from_bf16", "from_f16"):
            out = np.empty(THREAD_N, np.float32)
            getattr(k, name)(h, out)
            res.append(out.view(np.uint32))
        return res

    seen, why = with_1_and_2_threads(k, run)
    if seen is None:
        return "fail", why
    same = all((a == b).all() for a, b in zip(*seen))
    detail = f"the four casts of {THREAD_N} patterns each"
    return ("pass", detail + ": same bits with 1 and 2 threads") if same else \
        ("fail", detail + ": 1 and 2 threads differ")


def clause_refusals(k) -> tuple[str, str]:
    """Clause (f): the refusals of cast, of linear and matmul on mixed or float64 operands, and
    of entry points without a low-precision form, by name, every caller buffer untouched."""
    return refusal_clause(*mixed_refusals.table(k.backend))


# -- clause (e): negative controls --------------------------------------------------------------
class _Control:
    """A wrong cast with the kernels' interface; the harness must reject its card."""

    backend = "negative-control"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, bf16=None, f16=None, widen=None):
        self.name, self.describe = name, describe
        self._bf16 = bf16 or spec.to_bf16_bits
        self._f16 = f16 or spec.to_f16_bits
        self._widen = widen or spec.from_f16_bits

    def to_bf16(self, x, out):
        out[:] = [self._bf16(u) for u in x.view(np.uint32).tolist()]

    def to_f16(self, x, out):
        out[:] = [self._f16(u) for u in x.view(np.uint32).tolist()]

    def from_bf16(self, h, out):
        out.view(np.uint32)[:] = [spec.from_bf16_bits(v) for v in h.tolist()]

    def from_f16(self, h, out):
        out.view(np.uint32)[:] = [self._widen(v) for v in h.tolist()]

    # the windowed scaler, on the oracle, with the control's scaler
    scaler_type = mixed_scaler.GradScaler

    def window(self, w) -> list[tuple[str, np.ndarray]]:
        return mixed_scaler.run(w, "oracle", self.scaler_type)

    # the twin-refresh steps, on the oracle; `stale` twins are never written after a step
    stale_twins = False

    def twins(self, case) -> list[tuple[str, np.ndarray]]:
        return mixed_twins.run(case, "oracle", stale=self.stale_twins)

    # attention and embedding, on the oracle; `low_results` rounds them to the inputs' type
    low_results = False

    def low_op(self, case) -> list[tuple[str, np.ndarray]]:
        got = mixed_attention.run(case, "oracle")
        return mixed_attention.rounded(got, case.t) if self.low_results else got

    # the contractions, on the oracle: the fold of the products (`_product`), bias added after
    def _product(self, a: float, b: float, t: str) -> float:
        return f32.mul(a, b)

    def _dot(self, a, b, t: str) -> float:
        return fold_tree([self._product(u, v, t) for u, v in zip(a, b)])

    def linear(self, x, w, b=None):
        t = x.dtype.name
        xs, ws = x.astype(np.float32).tolist(), w.astype(np.float32).tolist()
        y = np.float32([[self._dot(xi, wj, t) for wj in ws] for xi in xs])
        return y if b is None else np.float32([[f32.add(v, float(bj)) for v, bj in zip(row, b.astype(np.float32))]
                                               for row in y.tolist()])

    def matmul(self, a, b):
        t = a.dtype.name
        bt = b.astype(np.float32).T.tolist()
        rows = a.astype(np.float32).reshape(-1, a.shape[-1]).tolist()
        return np.float32([[self._dot(r, c, t) for c in bt] for r in rows]).reshape(
            a.shape[:-1] + (b.shape[-1],))


class _RoundedProducts(_Control):
    """Each product rounded to the operands' low precision before it is added."""

    def __init__(self):
        super().__init__("low-products", "products rounded to the low precision before the add")

    def _product(self, a: float, b: float, t: str) -> float:
        u = f32.f32_to_bits(f32.mul(a, b))
        if t == "bfloat16":
            return f32.bits_to_f32(spec.from_bf16_bits(spec.to_bf16_bits(u)))
        return f32.bits_to_f32(spec.from_f16_bits(spec.to_f16_bits(u)))


class _FusedEverywhere(_Control):
    """A fused multiply-add at every lane step, also where a bfloat16 product underflows or
    overflows float32: the contract's bits only where every product is exact (float16, and
    bfloat16 products in float32's normal range)."""

    def __init__(self):
        super().__init__("fma-underflow", "FMA used where a bfloat16 product underflows or "
                                          "overflows float32")

    def _dot(self, a, b, t: str) -> float:
        return mixed_fma.fused_dot(a, b)


class _NotSticky(_Control):
    """A window flag that a later clean step of the window clears."""

    scaler_type = mixed_scaler.ForgetfulScaler

    def __init__(self):
        super().__init__("window-not-sticky", "a window flag that a later clean step clears")


class _StaleTwins(_Control):
    """Twins cast once before the first step and not refreshed after any step (the steps run
    without twins)."""

    stale_twins = True

    def __init__(self):
        super().__init__("twin-stale", "a twin not refreshed after a step")


class _LowResults(_Control):
    """Attention's and embedding's float32 results rounded to the inputs' low type."""

    low_results = True

    def __init__(self):
        super().__init__("low-attention", "attention results rounded to the inputs' low type")


def _truncate_f16(u: int) -> int:
    """The float16 value nearest zero of the two around x: the rounded pattern, stepped one
    pattern towards zero when its magnitude exceeds |x| (patterns are monotone in magnitude)."""
    v = spec.to_f16_bits(u)
    if (u & 0x7FFFFFFF) > 0x7F800000 or (u & 0x7FFFFFFF) == 0x7F800000:
        return v
    return v - 1 if spec.from_f16_bits(v) & 0x7FFFFFFF > u & 0x7FFFFFFF else v


def _nan_signed_bf16(u: int) -> int:
    return (u >> 16) & 0x8000 | 0x7FC0 if (u & 0x7FFFFFFF) > 0x7F800000 else spec.to_bf16_bits(u)


def _flush_f16(u: int) -> int:
    v = spec.to_f16_bits(u)
    return v & 0x8000 if (v & 0x7C00) == 0 else v


def _ties_away_bf16(u: int) -> int:
    a = u & 0x7FFFFFFF
    return spec.BF16_NAN if a > 0x7F800000 else (u & 0x80000000 | a + 0x8000) >> 16


def _quieting_widen(h: int) -> int:
    v = spec.from_f16_bits(h)
    return v | 0x00400000 if (v & 0x7F800000) == 0x7F800000 and v & 0x7FFFFF else v


def negative_controls() -> list[_Control]:
    return [
        _Control("truncate", "narrowing drops the low bits (round toward zero)",
                 bf16=lambda u: spec.BF16_NAN if (u & 0x7FFFFFFF) > 0x7F800000 else u >> 16,
                 f16=_truncate_f16),
        _Control("ties-away", "bfloat16 ties rounded away from zero",
                 bf16=_ties_away_bf16),
        _Control("nan-sign", "a NaN keeps its sign (ml_dtypes' bfloat16 astype)",
                 bf16=_nan_signed_bf16),
        _Control("flush", "float16 subnormal results flushed to zero", f16=_flush_f16),
        _Control("quiet-widen", "widening float16 quiets a signalling NaN", widen=_quieting_widen),
        _RoundedProducts(),
        _FusedEverywhere(),
        _NotSticky(),
        _StaleTwins(),
        _LowResults(),
    ]
