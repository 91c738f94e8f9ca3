"""numba CPU kernels for the casts float32 <-> bfloat16 / float16 (oracles/mixed.py).

Low-precision buffers are uint16 bit patterns. The element functions `bf16_elem`,
`f16_elem` and `from_f16_elem` do a cast in integer arithmetic on the bit pattern
(widened to int64, so no uint32 wraps and no numpy promotion rule reaches them);
native/cuda/mixed.py compiles the same source for its target, and the optimizer's twin
refresh (native/optim_twins.py) inlines them. The CPU cast kernels do the same casts
in branch-free passes on uint32 lanes over a block, so that LLVM packs them, with one
float32 operation where it does the work:

- to float16, a |x| below 2^-14 (the float16 subnormals) is rounded by the add
  |x| + 0.5, whose ulp is 2^-24, the float16 subnormal quantum: the hardware's
  round-to-nearest-even is the cast's, and the result's bits minus those of 0.5
  are the float16 pattern (1024, the smallest normal, when it rounds up);
- from float16, the pattern shifted into place, (h & 0x7FFF) << 13, read as a
  float32 and multiplied by 2^112 is the value exactly (subnormals included),
  then infinities and NaN get the all-ones exponent and every value its sign.

Both float operations are exact or correctly rounded IEEE operations; they assume
what identical mode checks (round to nearest, no flush to zero, subnormal inputs
not treated as zero).

`NumbaMixed.gemm_nt_exact` is the low-precision linear / matmul's fused multiply-add
GEMM (native/mixed_gemm.py, loaded on its first call), which runs only where every
product is exact (contracts/mixed.md clause 10) and otherwise leaves the call to the
layers family's float32 GEMM.

Reproducibility: the casts are elementwise, so the thread count cannot reach the bits;
the GEMM gives the float32 GEMM's bits (native/mixed_gemm.py).

>>> import numpy as np
>>> out = np.empty(3, np.uint16)
>>> k = load("identical")
>>> k.to_f16(np.float32([1.0, 65520.0, 2.0 ** -25 * 3]), out); [hex(v) for v in out.tolist()]
['0x3c00', '0x7c00', '0x2']
"""
from __future__ import annotations

import numpy as np
from numba import float32, njit, prange, types, uint16, uint32, void

from ..oracles import mixed as oracle
from .base import NumbaBase

_STRICT = {"cache": True, "error_model": "numpy"}  # fastmath off
BLOCK = 8192  # elements per parallel task
BF16_NAN = oracle.BF16_NAN
F16_NAN = oracle.F16_NAN
HALF = np.float32(0.5)
HALF_BITS = 0x3F000000
ABS_MASK = np.uint32(0x7FFFFFFF)
TWO_112 = np.float32(2.0 ** 112)
wide = np.int64  # an integer of the bit pattern, widened so that nothing wraps


def bf16_elem(u):
    """The bfloat16 pattern of the float32 pattern u: add half an ulp less one, plus the
    kept bit's parity (ties to even), and drop the low 16 bits; a carry runs into the
    exponent and, from the largest finite values, to infinity."""
    a = u & 0x7FFFFFFF
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return BF16_NAN if a > 0x7F800000 else r


def f16_elem(u):
    """The float16 pattern of the float32 pattern u, by cases on |x|."""
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    if a > 0x7F800000:
        return F16_NAN
    if a >= 0x477FF000:  # |x| >= 65520, halfway from 65504 (odd) to 2^16: infinity
        return sign | 0x7C00
    if a >= 0x38800000:  # a float16 normal: rebias the exponent, round off 13 bits
        b = a - 0x38000000
        return sign | ((b + 0xFFF + ((b >> 13) & 1)) >> 13)
    if a <= 0x33000000:  # |x| <= 2^-25, half the smallest subnormal (a tie to 0)
        return sign
    m = (a & 0x7FFFFF) | 0x800000  # |x| = m * 2^(e - 150), in units of 2^-24: m >> (126 - e)
    shift = 126 - (a >> 23)
    r = m >> shift
    rem = m & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if rem > half or (rem == half and (r & 1) == 1):
        r += 1
    return sign | r


def from_f16_elem(h):
    """The float32 pattern of the float16 pattern h (exact; a NaN keeps sign and payload)."""
    s = (h & 0x8000) << 16
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0x1F:
        return s | 0x7F800000 | (m << 13)
    if e != 0:
        return s | ((e + 112) << 23) | (m << 13)
    if m == 0:
        return s
    p = 9  # the leading bit of a subnormal's m: the value is 2^(p - 24) * m / 2^p
    while (m >> p) == 0:
        p -= 1
    return s | ((p + 103) << 23) | ((m << (23 - p)) & 0x7FFFFF)


IN = types.Array(float32, 1, "C", readonly=True)
IN_BITS = types.Array(uint32, 1, "C", readonly=True)
IN_HALF = types.Array(uint16, 1, "C", readonly=True)
OUT_HALF = uint16[::1]
OUT_BITS = uint32[::1]


# The CPU kernels work on uint32 lanes (u32 constants: a 64-bit int would halve the
# vector width) over one block's slices, which LLVM packs; no value is out of uint32's
# range except in the NaN lanes, whose result the last select replaces.
u32 = uint32


@njit(void(IN_BITS, OUT_HALF), parallel=True, **_STRICT)
def _to_bf16(xb, out):
    n = xb.size
    for c in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = c * BLOCK, min(n, c * BLOCK + BLOCK)
        src, dst = xb[lo:hi], out[lo:hi]
        for j in range(hi - lo):
            u = src[j]
            r = (u + u32(0x7FFF) + ((u >> u32(16)) & u32(1))) >> u32(16)  # bf16_elem's
            nan = (u & u32(0x7FFFFFFF)) > u32(0x7F800000)
            dst[j] = uint16(BF16_NAN) if nan else uint16(r)


@njit(void(IN, IN_BITS, OUT_HALF), parallel=True, **_STRICT)
def _to_f16(x, xb, out):
    # per block: |x| into a float32 scratch (by its bits), the one add, then the integer
    # cases; each pass a plain loop over the scratch
    n = x.size
    for c in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = c * BLOCK, min(n, c * BLOCK + BLOCK)
        src, dst = xb[lo:hi], out[lo:hi]
        small = np.empty(hi - lo, np.float32)  # |x| + 0.5: the subnormal case's rounding
        sb = small.view(np.uint32)
        for j in range(hi - lo):
            sb[j] = src[j] & ABS_MASK
        for j in range(hi - lo):
            small[j] = small[j] + HALF
        for j in range(hi - lo):
            u = src[j]
            a = u & ABS_MASK
            b = a - u32(0x38000000)  # wraps below 2^-14, where the subnormal case replaces it
            r = (b + u32(0xFFF) + ((b >> u32(13)) & u32(1))) >> u32(13)
            r = sb[j] - u32(HALF_BITS) if a < u32(0x38800000) else r
            r = u32(0x7C00) if a >= u32(0x477FF000) else r
            r = r | ((u >> u32(16)) & u32(0x8000))
            dst[j] = uint16(F16_NAN) if a > u32(0x7F800000) else uint16(r)


@njit(void(IN_HALF, OUT_BITS), parallel=True, **_STRICT)
def _from_bf16(h, ob):
    n = h.size
    for c in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = c * BLOCK, min(n, c * BLOCK + BLOCK)
        src, dst = h[lo:hi], ob[lo:hi]
        for j in range(hi - lo):
            dst[j] = u32(src[j]) << u32(16)


@njit(void(IN_HALF, OUT_BITS), parallel=True, **_STRICT)
def _from_f16(h, ob):
    n = h.size
    for c in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = c * BLOCK, min(n, c * BLOCK + BLOCK)
        src, dst = h[lo:hi], ob[lo:hi]
        t = np.empty(hi - lo, np.float32)  # the shifted pattern, then its value times 2^112
        tb = t.view(np.uint32)
        for j in range(hi - lo):
            tb[j] = (u32(src[j]) & u32(0x7FFF)) << u32(13)
        for j in range(hi - lo):
            t[j] = t[j] * TWO_112
        for j in range(hi - lo):
            v = u32(src[j])
            special = u32(0x7F800000) if (v & u32(0x7C00)) == u32(0x7C00) else u32(0)
            dst[j] = tb[j] | special | ((v & u32(0x8000)) << u32(16))


# the kernels tests/test_vectorized.py compiles for every target; the bfloat16 casts are
# integer work only, which that test (it counts packed float operations) cannot see
HOT_KERNELS = {"mixed._to_f16": (_to_f16, ("addps",)),
               "mixed._from_f16": (_from_f16, ("mulps",))}


_NO_BIAS = np.zeros(16, np.float32)  # the GEMM's bias argument when there is none


class NumbaMixed(NumbaBase):
    """The casts on the CPU with numba, parallel over blocks of 8192 elements."""

    takes_pieces = False

    def to_bf16(self, x, out) -> None:
        """Write the bfloat16 patterns of x (flat float32) into out (flat uint16)."""
        _to_bf16(x.view(np.uint32), out)

    def to_f16(self, x, out) -> None:
        """Write the float16 patterns of x into out (flat uint16)."""
        _to_f16(x, x.view(np.uint32), out)

    def from_bf16(self, h, out) -> None:
        """Write the bfloat16 patterns h (flat uint16) widened into out (flat float32)."""
        _from_bf16(h, out.view(np.uint32))

    def from_f16(self, h, out) -> None:
        """Write the float16 patterns h widened into out (flat float32)."""
        _from_f16(h, out.view(np.uint32))

    def gemm_nt_exact(self, a, b, bias, has_bias, out, significand) -> bool:
        """The layers family's gemm_nt (out = fold_k a[i, k] * b[j, k] (+ bias[j]); a (M, K),
        b (N, K), out (M, N), float32) with one fused multiply-add per lane step, when the
        target has FMA and every product of a's and b's values (widened from a type of
        `significand` bits) is exact: then it writes out and returns True, the float32 op's
        bits (native/mixed_gemm.py). Otherwise it writes nothing and returns False, and the
        caller runs the float32 gemm_nt. Only cpu-numba has this method."""
        # imported on first use: a process that only casts never loads the GEMM
        from . import gemm_outer, mixed_gemm

        if not mixed_gemm.HAS_FMA or not mixed_gemm.exact_products(
                a.reshape(-1).view(np.uint32), b.reshape(-1).view(np.uint32), significand):
            return False
        m, k = a.shape
        n = b.shape[0]
        # the outer-product tiles where they run (native/gemm_outer.py), the same bits
        kernel = gemm_outer.gemm_outer_fma if gemm_outer.usable(m, n, k) else mixed_gemm.gemm_nt_fma
        kernel(m * n * k // 32, a.reshape(-1), b.reshape(-1), m, n, k,
               bias if has_bias else _NO_BIAS, bool(has_bias), False, out.reshape(-1))
        return True


def load(mode: str, backend: str = "cpu-numba") -> NumbaMixed:
    return NumbaMixed(mode)
