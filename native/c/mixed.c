/* Casts between float32 and bfloat16 / float16: the C spelling, integer arithmetic only
   on the bit patterns (oracles/mixed.py is the definition; native/mixed.py the numba one).
   Narrowing rounds to nearest, ties to even: the dropped bits are compared with half the
   kept quantum, subnormals kept, overflow to infinity, every NaN to the target's canonical
   quiet NaN with the sign clear (0x7FC0, 0x7E00). Widening is exact; a NaN keeps its sign
   and payload. Elementwise, OpenMP over the elements: threads cannot reach the bits. */

static inline uint16_t mj_round_shift(uint32_t m, int shift) {
    /* m >> shift rounded to nearest, ties to even (1 <= shift <= 31) */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u)))
        r += 1u;
    return (uint16_t)r;
}

static inline uint16_t mj_bf16_of(uint32_t u) {
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return 0x7FC0u;
    /* the top 16 bits rounded; a carry out of the significand raises the exponent
       (to infinity from the largest finite values) */
    return (uint16_t)((u & 0x80000000u) >> 16 | mj_round_shift(a, 16));
}

static inline uint16_t mj_f16_of(uint32_t u) {
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    int e = (int)(a >> 23);
    if (a > 0x7F800000u)
        return 0x7E00u;
    if (e >= 143) /* |x| >= 2^16, infinity included */
        return sign | 0x7C00u;
    if (e >= 113) { /* |x| >= 2^-14: the float16 exponent is e - 112; the sum may carry to 0x7C00 */
        uint32_t biased = ((uint32_t)(e - 112) << 23) | (a & 0x7FFFFFu);
        return sign | mj_round_shift(biased, 13);
    }
    if (e < 102) /* |x| < 2^-25: rounds to zero */
        return sign;
    /* |x| = (2^23 + f) * 2^(e - 150) = that many units of 2^-24 shifted right by 126 - e */
    return sign | mj_round_shift((a & 0x7FFFFFu) | 0x800000u, 126 - e);
}

static inline uint32_t mj_f32_of_f16(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu)
        return s | 0x7F800000u | (m << 13);
    if (e != 0)
        return s | ((e + 112u) << 23) | (m << 13);
    if (m == 0)
        return s;
    /* subnormal m * 2^-24: shift m up until its leading bit is the hidden bit (bit 10) */
    uint32_t k = 0;
    while (!(m & 0x400u)) {
        m <<= 1;
        k++;
    }
    return s | ((113u - k) << 23) | ((m & 0x3FFu) << 13);
}

void mj_to_bf16(const uint32_t *x, uint16_t *out, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = mj_bf16_of(x[i]);
}

void mj_to_f16(const uint32_t *x, uint16_t *out, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = mj_f16_of(x[i]);
}

void mj_from_bf16(const uint16_t *h, uint32_t *out, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = (uint32_t)h[i] << 16;
}

void mj_from_f16(const uint16_t *h, uint32_t *out, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = mj_f32_of_f16(h[i]);
}
