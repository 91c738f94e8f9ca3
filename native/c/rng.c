/* Philox4x32-10 (Salmon et al., SC'11; Random123), uniform draws and dropout: the C
   spelling of oracles/rng.py (contracts/rng.md). Position pos of stream s is word
   pos % 4 of Philox(counter = (b lo, b hi, s lo, s hi), key), b = pos / 4.
   The whole blocks of a draw are parallel (OpenMP) and vectorized by gcc (the
   32x32 -> 64 products become pmuludq); the head and tail go one element at a
   time. Each value depends on its position alone, so no thread count reaches the bits. */
#define MJ_PHILOX_M0 0xD2511F53u
#define MJ_PHILOX_M1 0xCD9E8D57u
#define MJ_PHILOX_W0 0x9E3779B9u
#define MJ_PHILOX_W1 0xBB67AE85u
#define MJ_PHILOX_ROUNDS 10

/* (*c0, *c1, *c2, *c3) <- Philox4x32-10 of that counter under key (k0, k1). Pointers to
   the caller's locals, not an array or a struct: inlined, they stay in registers and
   gcc vectorizes the caller's loop over blocks. */
static inline void mj_philox(uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3, uint32_t k0,
                             uint32_t k1) {
    uint32_t a0 = *c0, a1 = *c1, a2 = *c2, a3 = *c3;
    for (int r = 0; r < MJ_PHILOX_ROUNDS; r++) {
        if (r > 0) { /* uint32_t arithmetic: mod 2^32 */
            k0 += MJ_PHILOX_W0;
            k1 += MJ_PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)MJ_PHILOX_M0 * a0;
        uint64_t p1 = (uint64_t)MJ_PHILOX_M1 * a2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ a1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ a3 ^ k1;
        a1 = (uint32_t)p1;
        a3 = (uint32_t)p0;
        a0 = n0;
        a2 = n2;
    }
    *c0 = a0;
    *c1 = a1;
    *c2 = a2;
    *c3 = a3;
}

/* u = (w >> 8) * 2^-24: exact, in [0, 1) */
static inline float mj_rng_unit(uint32_t w) {
    float m = (float)(int32_t)(w >> 8);
    return m * 0x1p-24f;
}

static inline float mj_rng_uniform_elem(uint32_t w, float low, float d) {
    float t = d * mj_rng_unit(w);
    return low + t;
}

static inline float mj_rng_dropout_elem(float x, uint32_t w, float p, float scale) {
    float m = mj_rng_unit(w) >= p ? scale : 0.0f;
    return x * m; /* dropped: a signed zero, or NaN for an inf or NaN x */
}

static inline uint32_t mj_rng_word_at(uint32_t k0, uint32_t k1, uint64_t stream, uint64_t pos) {
    uint64_t b = pos >> 2;
    uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    mj_philox(&c0, &c1, &c2, &c3, k0, k1);
    switch (pos & 3) {
        case 0: return c0;
        case 1: return c1;
        case 2: return c2;
        default: return c3;
    }
}

void mj_philox_blocks(const uint32_t *counters, int64_t n, uint32_t k0, uint32_t k1, uint32_t *out) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const uint32_t *c = counters + 4 * i;
        uint32_t c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
        mj_philox(&c0, &c1, &c2, &c3, k0, k1);
        out[4 * i] = c0;
        out[4 * i + 1] = c1;
        out[4 * i + 2] = c2;
        out[4 * i + 3] = c3;
    }
}

/* head: outputs before the first whole block; then nblocks whole blocks from block b0 */
static inline void mj_rng_split(uint64_t offset, int64_t n, int64_t *head, uint64_t *b0,
                                int64_t *nblocks) {
    int64_t h = (int64_t)((4 - (offset & 3)) & 3);
    *head = h < n ? h : n;
    *b0 = (offset + (uint64_t)*head) >> 2; /* offset + head == 2^64 only when no block follows */
    *nblocks = (n - *head) / 4;
}

void mj_uniform(uint32_t k0, uint32_t k1, uint64_t stream, uint64_t offset, float low, float high,
                float *out, int64_t n) {
    float d = high - low;
    uint32_t s0 = (uint32_t)stream, s1 = (uint32_t)(stream >> 32);
    int64_t head, nblocks;
    uint64_t b0;
    mj_rng_split(offset, n, &head, &b0, &nblocks);
    for (int64_t i = 0; i < head; i++)
        out[i] = mj_rng_uniform_elem(mj_rng_word_at(k0, k1, stream, offset + (uint64_t)i), low, d);
    float *o = out + head;
    #pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < nblocks; j++) {
        uint64_t b = b0 + (uint64_t)j;
        uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32), c2 = s0, c3 = s1;
        mj_philox(&c0, &c1, &c2, &c3, k0, k1);
        o[4 * j] = mj_rng_uniform_elem(c0, low, d);
        o[4 * j + 1] = mj_rng_uniform_elem(c1, low, d);
        o[4 * j + 2] = mj_rng_uniform_elem(c2, low, d);
        o[4 * j + 3] = mj_rng_uniform_elem(c3, low, d);
    }
    for (int64_t i = head + 4 * nblocks; i < n; i++)
        out[i] = mj_rng_uniform_elem(mj_rng_word_at(k0, k1, stream, offset + (uint64_t)i), low, d);
}

void mj_dropout(const float *x, uint32_t k0, uint32_t k1, uint64_t stream, uint64_t offset, float p,
                float scale, float *y, int64_t n) {
    uint32_t s0 = (uint32_t)stream, s1 = (uint32_t)(stream >> 32);
    int64_t head, nblocks;
    uint64_t b0;
    mj_rng_split(offset, n, &head, &b0, &nblocks);
    for (int64_t i = 0; i < head; i++)
        y[i] = mj_rng_dropout_elem(x[i], mj_rng_word_at(k0, k1, stream, offset + (uint64_t)i), p,
                                   scale);
    const float *xs = x + head;
    float *ys = y + head;
    #pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < nblocks; j++) {
        uint64_t b = b0 + (uint64_t)j;
        uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32), c2 = s0, c3 = s1;
        mj_philox(&c0, &c1, &c2, &c3, k0, k1);
        ys[4 * j] = mj_rng_dropout_elem(xs[4 * j], c0, p, scale);
        ys[4 * j + 1] = mj_rng_dropout_elem(xs[4 * j + 1], c1, p, scale);
        ys[4 * j + 2] = mj_rng_dropout_elem(xs[4 * j + 2], c2, p, scale);
        ys[4 * j + 3] = mj_rng_dropout_elem(xs[4 * j + 3], c3, p, scale);
    }
    for (int64_t i = head + 4 * nblocks; i < n; i++)
        y[i] = mj_rng_dropout_elem(x[i], mj_rng_word_at(k0, k1, stream, offset + (uint64_t)i), p,
                                   scale);
}

#include <string.h> /* memcpy (crmath.c includes it too) */

/* ---- normal draws (clause 4): Box-Muller on the pairs (w0, w1) and (w2, w3) of a block ----
   logf, sinpif and cospif are crmath.c's element functions (compiled in the same unit);
   a slot whose value one of them cannot decide gets the UNDECIDED pattern and is counted. */

/* the two values of the pair (wa, wb): *v0 = mean + std r cospif(u2) (even positions),
   *v1 = mean + std r sinpif(u2) (odd); *ok0, *ok1: decided */
static inline void mj_rng_normal_pair(uint32_t wa, uint32_t wb, float mean, float std,
                                      const mj_crmath_tab *T, float *v0, float *v1, int *ok0,
                                      int *ok1) {
    float u1 = (float)(int32_t)((wa >> 8) + 1u) * 0x1p-24f; /* exact, in (0, 1] */
    float u2 = (float)(int32_t)(wb >> 8) * 0x1p-23f; /* exact, in [0, 2) */
    uint32_t ub;
    memcpy(&ub, &u1, sizeof ub);
    /* ub is in [pattern of 2^-24, pattern of 1] already: the clamp changes nothing but lets
       the compiler drop mj_log_elem's subnormal loop, so the loop over blocks vectorizes */
    ub = ub < 0x33800000u ? 0x33800000u : ub;
    ub = ub > 0x3F800000u ? 0x3F800000u : ub;
    int okl, okc, oks;
    float lg = mj_log_elem(ub, T, &okl);
    float t = -2.0f * lg; /* exact */
    float r = __builtin_sqrtf(t); /* IEEE sqrt (an instruction with -fno-math-errno) */
    float c = mj_cospi_elem(u2, T, &okc);
    float s = mj_sinpi_elem(u2, T, &oks);
    float zc = r * c;
    float zs = r * s;
    float pc = std * zc;
    float ps = std * zs;
    *v0 = mean + pc;
    *v1 = mean + ps;
    *ok0 = okl & okc;
    *ok1 = okl & oks;
}

/* the value at stream position pos; *ok: decided */
static inline float mj_rng_normal_at(uint32_t k0, uint32_t k1, uint64_t stream, uint64_t pos,
                                     float mean, float std, const mj_crmath_tab *T, int *ok) {
    uint64_t b = pos >> 2;
    uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    mj_philox(&c0, &c1, &c2, &c3, k0, k1);
    float v0, v1;
    int ok0, ok1;
    if (pos & 2)
        mj_rng_normal_pair(c2, c3, mean, std, T, &v0, &v1, &ok0, &ok1);
    else
        mj_rng_normal_pair(c0, c1, mean, std, T, &v0, &v1, &ok0, &ok1);
    *ok = (pos & 1) ? ok1 : ok0;
    return (pos & 1) ? v1 : v0;
}

/* out[i] <- the value at pos, or the UNDECIDED pattern; returns 1 if undecided */
static inline int64_t mj_rng_normal_slot(uint32_t k0, uint32_t k1, uint64_t stream, uint64_t pos,
                                         float mean, float std, float *out, int64_t i,
                                         const mj_crmath_tab *T) {
    int ok;
    float v = mj_rng_normal_at(k0, k1, stream, pos, mean, std, T, &ok);
    if (ok) {
        out[i] = v;
        return 0;
    }
    mj_put_bits(out, i, T->undecided);
    return 1;
}

int64_t mj_normal(uint32_t k0, uint32_t k1, uint64_t stream, uint64_t offset, float mean,
                  float std, float *out, int64_t n, const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab;
    uint32_t s0 = (uint32_t)stream, s1 = (uint32_t)(stream >> 32);
    int64_t head, nblocks;
    uint64_t b0;
    mj_rng_split(offset, n, &head, &b0, &nblocks);
    int64_t undecided = 0;
    for (int64_t i = 0; i < head; i++)
        undecided += mj_rng_normal_slot(k0, k1, stream, offset + (uint64_t)i, mean, std, out, i, &T);
    float *o = out + head;
    int64_t unsure = 0;
    #pragma omp parallel for schedule(static) reduction(+:unsure)
    for (int64_t j = 0; j < nblocks; j++) {
        uint64_t b = b0 + (uint64_t)j;
        uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32), c2 = s0, c3 = s1;
        mj_philox(&c0, &c1, &c2, &c3, k0, k1);
        float v0, v1, v2, v3;
        int ok0, ok1, ok2, ok3;
        mj_rng_normal_pair(c0, c1, mean, std, &T, &v0, &v1, &ok0, &ok1);
        mj_rng_normal_pair(c2, c3, mean, std, &T, &v2, &v3, &ok2, &ok3);
        o[4 * j] = v0;
        o[4 * j + 1] = v1;
        o[4 * j + 2] = v2;
        o[4 * j + 3] = v3;
        unsure += !(ok0 & ok1 & ok2 & ok3);
    }
    if (unsure) /* never seen (no u1 or u2 is undecided): mark the undecided slots */
        for (int64_t i = 0; i < 4 * nblocks; i++) {
            int ok;
            mj_rng_normal_at(k0, k1, stream, (b0 << 2) + (uint64_t)i, mean, std, &T, &ok);
            if (!ok) {
                mj_put_bits(o, i, T.undecided);
                undecided++;
            }
        }
    for (int64_t i = head + 4 * nblocks; i < n; i++)
        undecided += mj_rng_normal_slot(k0, k1, stream, offset + (uint64_t)i, mean, std, out, i, &T);
    return undecided;
}
