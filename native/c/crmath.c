/* Correctly rounded expf/logf/sinpif/cospif: the C spelling of native/crmath.py's
   exp_elem, log_elem, sinpi_elem and cospi_elem. Binary64 + - * only, one IEEE operation per statement, in the same
   order (built with -ffp-contract=off: no product is fused into an add), then a
   rounding test: y - 2^-50|y| and y + 2^-50|y| must round to the same binary32
   value, else the slot gets the UNDECIDED pattern and is counted. Every table
   and constant comes from Python in mj_crmath_tab; none is written here.
   Blocks of elements run in parallel (OpenMP); each slot depends on its input
   alone and the undecided count is an integer sum, so threads never reach the bits.
   Bit patterns move through memcpy, never through a float register. */
#include <string.h>

/* The same definition as in crmath.h (cffi compiles a check of every field's
   offset and size against this one, so the two cannot drift apart silently). */
typedef struct {
    double inv_ln2_32, ln2_32_hi, ln2_32_lo, ln2_hi, ln2_lo, shifter, err, one, two_m23, two_m24;
    double e2, e3, e4, e5, e6, l2, l3, l4, l5, l6, l7, l8;
    double s0, s1, s2, s3, s4, s5, s6, s7, s8, c1, c2, c3, c4, c5, c6, c7, c8, zero, half, minus_one;
    const double *exp2_32, *pow2, *log_inv, *log_hi, *log_lo;
    int64_t pow2_bias, sqrt2_m24, block;
    float exp_huge, exp_tiny, trig_big, trig_inf;
    uint32_t undecided, quiet_bit, default_nan, pos_inf_bits, neg_inf_bits, one_bits;
} mj_crmath_tab;

static inline uint32_t mj_bits_at(const float *x, int64_t i) { uint32_t u; memcpy(&u, x + i, sizeof u); return u; }
static inline void mj_put_bits(float *out, int64_t i, uint32_t u) { memcpy(out + i, &u, sizeof u); }

/* e^x rounded to binary32 when *ok, for finite exp_tiny <= x <= exp_huge */
static inline float mj_exp_elem(float x, const mj_crmath_tab *T, int *ok) {
    double xd = (double)x;
    double t = xd * T->inv_ln2_32;
    t = t + T->shifter;
    double kd = t - T->shifter; /* round(x * 32 / ln 2), ties to even */
    int32_t k = (int32_t)kd; /* |k| < 2^13; 32-bit integers let the loop vectorize */
    int32_t j = k & 31;
    int32_t q = (k - j) / 32; /* exact: e^x = 2^q * 2^(j/32) * e^r */
    double c = kd * T->ln2_32_hi;
    double r = xd - c; /* exact */
    c = kd * T->ln2_32_lo;
    r = r - c;
    double u = r * T->e6;
    u = u + T->e5;
    u = r * u;
    u = u + T->e4;
    u = r * u;
    u = u + T->e3;
    u = r * u;
    u = u + T->e2;
    u = r * u;
    u = u + T->one;
    double p = r * u;
    double tj = T->exp2_32[j];
    double y = tj * p;
    y = tj + y;
    y = y * T->pow2[q + T->pow2_bias]; /* exact */
    double eb = y * T->err;
    double ylo = y - eb;
    double yhi = y + eb;
    float a = (float)ylo;
    float b = (float)yhi;
    *ok = a == b;
    return a;
}

/* ln x rounded to binary32 when *ok, for x = m 2^(e-23), 2^23 <= m < 2^24 */
static inline float mj_log_core(int32_t m, int32_t e, const mj_crmath_tab *T, int *ok) {
    /* from sqrt2_m24 up: x = 2^(e+1) t, t = m 2^-24 in [sqrt(1/2), 1), cell m >> 16;
       below: x = 2^e t, t = m 2^-23 in [1, sqrt 2), cell (m >> 16) - 128.
       Written as selects so that the loop vectorizes. */
    int32_t big = m >= (int32_t)T->sqrt2_m24;
    e = e + big;
    int32_t idx = (m >> 16) - 128 + 128 * big;
    double scale = big ? T->two_m24 : T->two_m23;
    double t = (double)m * scale; /* exact */
    double r = t * T->log_inv[idx]; /* exact */
    r = r - T->one; /* exact */
    double ed = (double)e;
    double hi = ed * T->ln2_hi; /* exact */
    hi = hi + T->log_hi[idx]; /* exact */
    double lo = ed * T->ln2_lo;
    lo = lo + T->log_lo[idx];
    double w = r * T->l8;
    w = w + T->l7;
    w = r * w;
    w = w + T->l6;
    w = r * w;
    w = w + T->l5;
    w = r * w;
    w = w + T->l4;
    w = r * w;
    w = w + T->l3;
    w = r * w;
    w = w + T->l2;
    double r2 = r * r;
    w = r2 * w;
    double p = r + w;
    double s = lo + p;
    double y = hi + s;
    double eb = y * T->err;
    if (eb < 0) eb = -eb;
    double ylo = y - eb;
    double yhi = y + eb;
    float a = (float)ylo;
    float b = (float)yhi;
    *ok = a == b;
    return a;
}

/* ln x for the positive finite x with pattern u (subnormals normalized here) */
static inline float mj_log_elem(uint32_t u, const mj_crmath_tab *T, int *ok) {
    int32_t ex = (int32_t)((u >> 23) & 0xFF);
    int32_t m = (int32_t)(u & 0x7FFFFF);
    int32_t e;
    if (ex == 0) {
        e = -126;
        while (m < 0x800000) {
            m = m << 1;
            e = e - 1;
        }
    } else {
        m = m | 0x800000;
        e = ex - 127;
    }
    return mj_log_core(m, e, T, ok);
}

/* slot i when the first pass flagged its block; returns 1 if undecided */
static inline int64_t mj_expf_slot(const float *x, float *out, int64_t i, const mj_crmath_tab *T) {
    float v = x[i];
    if (v != v) {
        mj_put_bits(out, i, mj_bits_at(x, i) | T->quiet_bit);
    } else if (v >= T->exp_huge) {
        mj_put_bits(out, i, T->pos_inf_bits);
    } else if (v <= T->exp_tiny) {
        mj_put_bits(out, i, 0);
    } else {
        int ok;
        float a = mj_exp_elem(v, T, &ok);
        if (ok) {
            out[i] = a;
        } else {
            mj_put_bits(out, i, T->undecided);
            return 1;
        }
    }
    return 0;
}

int64_t mj_expf(const float *x, float *out, int64_t n, const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab; /* a private copy: stores to out cannot alias it */
    int64_t nblocks = (n + T.block - 1) / T.block;
    int64_t undecided = 0;
    #pragma omp parallel for schedule(static) reduction(+:undecided)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = c * T.block;
        int64_t hi = lo + T.block < n ? lo + T.block : n;
        /* first pass without branches: clamp into range (NaN too), flag what to redo */
        int redo = 0;
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i];
            float w = v > T.exp_tiny ? v : T.exp_tiny;
            w = w < T.exp_huge ? w : T.exp_huge;
            int ok;
            out[i] = mj_exp_elem(w, &T, &ok);
            redo |= (!ok) | (w != v);
        }
        if (redo)
            for (int64_t i = lo; i < hi; i++) undecided += mj_expf_slot(x, out, i, &T);
    }
    return undecided;
}

static inline int64_t mj_logf_slot(const float *x, float *out, int64_t i, const mj_crmath_tab *T) {
    uint32_t u = mj_bits_at(x, i);
    if (u == 0 || u >= T->pos_inf_bits) { /* +0, +inf, NaN, or the sign bit set */
        if ((u & 0x7FFFFFFF) > T->pos_inf_bits)
            mj_put_bits(out, i, u | T->quiet_bit);
        else if (u == T->pos_inf_bits)
            mj_put_bits(out, i, T->pos_inf_bits);
        else if ((u & 0x7FFFFFFF) == 0)
            mj_put_bits(out, i, T->neg_inf_bits);
        else
            mj_put_bits(out, i, T->default_nan);
        return 0;
    }
    int ok;
    float a = mj_log_elem(u, T, &ok);
    if (ok) {
        out[i] = a;
        return 0;
    }
    mj_put_bits(out, i, T->undecided);
    return 1;
}

int64_t mj_logf(const float *x, float *out, int64_t n, const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab;
    int64_t nblocks = (n + T.block - 1) / T.block;
    int64_t undecided = 0;
    #pragma omp parallel for schedule(static) reduction(+:undecided)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = c * T.block;
        int64_t hi = lo + T.block < n ? lo + T.block : n;
        /* first pass: positive normal inputs only, no branches; the rest are redone */
        int redo = 0;
        for (int64_t i = lo; i < hi; i++) {
            uint32_t u = mj_bits_at(x, i);
            int special = (u < 0x800000) | (u >= T.pos_inf_bits);
            uint32_t w = special ? T.one_bits : u;
            int32_t m = (int32_t)((w & 0x7FFFFF) | 0x800000);
            int32_t e = (int32_t)((w >> 23) & 0xFF) - 127;
            int ok;
            out[i] = mj_log_core(m, e, &T, &ok);
            redo |= special | (!ok);
        }
        if (redo)
            for (int64_t i = lo; i < hi; i++) undecided += mj_logf_slot(x, out, i, &T);
    }
    return undecided;
}

/* sin(pi r) and cos(pi r) by their Taylor polynomials in r2 = r*r, in the order of
   sinpi_elem/cospi_elem (both functions compute both polynomials, then select) */
static inline void mj_pi_sc(double r, double r2, const mj_crmath_tab *T, double *s, double *c) {
    double h = r2 * T->s8;
    h = h + T->s7;
    h = r2 * h;
    h = h + T->s6;
    h = r2 * h;
    h = h + T->s5;
    h = r2 * h;
    h = h + T->s4;
    h = r2 * h;
    h = h + T->s3;
    h = r2 * h;
    h = h + T->s2;
    h = r2 * h;
    h = h + T->s1;
    h = r2 * h;
    h = h + T->s0;
    *s = r * h;
    double g = r2 * T->c8;
    g = g + T->c7;
    g = r2 * g;
    g = g + T->c6;
    g = r2 * g;
    g = g + T->c5;
    g = r2 * g;
    g = g + T->c4;
    g = r2 * g;
    g = g + T->c3;
    g = r2 * g;
    g = g + T->c2;
    g = r2 * g;
    g = g + T->c1;
    g = r2 * g;
    *c = g + T->one;
}

/* |x| = n/2 + r exactly (|r| <= 1/4) for finite |x| <= 2^24; returns n, sets *r */
static inline int32_t mj_pi_reduce(double ax, const mj_crmath_tab *T, double *r) {
    double t = ax + ax; /* exact */
    t = t + T->shifter;
    double nd = t - T->shifter; /* round(2|x|), ties to even */
    double h = nd * T->half;
    *r = ax - h; /* exact */
    return (int32_t)nd;
}

/* bit ? a : b through the bit patterns: the value of the select in the Python source,
   spelled so that the compiler never puts the arithmetic that made a or b under a branch
   (with trapping math on, a float operation under a branch blocks vectorization) */
static inline double mj_pick(int64_t bit, double a, double b) { /* bit: 0 or 1 */
    uint64_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    uint64_t m = (uint64_t)0 - (uint64_t)bit;
    uint64_t u = (ua & m) | (ub & ~m);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* rounding test shared by both: a = binary32 y when *ok */
static inline float mj_pi_round(double y, const mj_crmath_tab *T, int *ok) {
    double eb = y * T->err;
    /* |eb| (+0 for a zero y): the value of Python's `eb if eb > 0 else 0 - eb`, taken by
       clearing the sign bit (eb is never NaN) */
    uint64_t ue;
    memcpy(&ue, &eb, sizeof ue);
    ue = ue & 0x7FFFFFFFFFFFFFFFull;
    memcpy(&eb, &ue, sizeof eb);
    double ylo = y - eb;
    double yhi = y + eb;
    float a = (float)ylo;
    float b = (float)yhi;
    *ok = a == b;
    return a;
}

/* sin(pi x) rounded to binary32 when *ok, for finite |x| <= 2^24 */
static inline float mj_sinpi_elem(float x, const mj_crmath_tab *T, int *ok) {
    double xd = (double)x;
    double m1 = T->minus_one, p1 = T->one; /* loaded first: a select, not a conditional load */
    double sg = xd < T->zero ? m1 : p1; /* odd; -0 keeps sg = 1 */
    double ax = xd * sg; /* exact */
    double r;
    int32_t n = mj_pi_reduce(ax, T, &r);
    double r2 = r * r;
    double s, c;
    mj_pi_sc(r, r2, T, &s, &c);
    double v = mj_pick(n & 1, c, s); /* s, c, -s, -c for n = 0..3 mod 4 */
    double nv = T->zero - v; /* exact; +0 for v = +0 */
    v = mj_pick((n >> 1) & 1, nv, v);
    double y = v * sg;
    return mj_pi_round(y, T, ok);
}

/* cos(pi x) rounded to binary32 when *ok, for finite |x| <= 2^24 */
static inline float mj_cospi_elem(float x, const mj_crmath_tab *T, int *ok) {
    double xd = (double)x;
    double m1 = T->minus_one, p1 = T->one;
    double sg = xd < T->zero ? m1 : p1; /* even */
    double ax = xd * sg; /* exact */
    double r;
    int32_t n = mj_pi_reduce(ax, T, &r);
    double r2 = r * r;
    double s, c;
    mj_pi_sc(r, r2, T, &s, &c);
    double v = mj_pick(n & 1, s, c); /* c, -s, -c, s for n = 0..3 mod 4 */
    double nv = T->zero - v;
    double y = mj_pick(((n + 1) >> 1) & 1, nv, v);
    return mj_pi_round(y, T, ok);
}

/* finite inputs clamped to [-2^24, 2^24] (every larger |x| is an even integer: the same
   result); NaN goes to -2^24 here and is redone */
static inline float mj_pi_clamp(float v, const mj_crmath_tab *T) {
    float w = v > -T->trig_big ? v : -T->trig_big;
    return w < T->trig_big ? w : T->trig_big;
}

static inline int mj_pi_finite(float v, const mj_crmath_tab *T) {
    return (v > -T->trig_inf) & (v < T->trig_inf);
}

/* slot i when the first pass flagged its block; returns 1 if undecided */
static inline int64_t mj_pi_slot(const float *x, float *out, int64_t i, int cos, const mj_crmath_tab *T) {
    float v = x[i];
    if (v != v) {
        mj_put_bits(out, i, mj_bits_at(x, i) | T->quiet_bit);
        return 0;
    }
    if (!mj_pi_finite(v, T)) {
        mj_put_bits(out, i, T->default_nan);
        return 0;
    }
    int ok;
    float w = mj_pi_clamp(v, T);
    float a = cos ? mj_cospi_elem(w, T, &ok) : mj_sinpi_elem(w, T, &ok);
    if (ok) {
        out[i] = a;
        return 0;
    }
    mj_put_bits(out, i, T->undecided);
    return 1;
}

int64_t mj_sinpif(const float *x, float *out, int64_t n, const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab;
    int64_t nblocks = (n + T.block - 1) / T.block;
    int64_t undecided = 0;
    #pragma omp parallel for schedule(static) reduction(+:undecided)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = c * T.block;
        int64_t hi = lo + T.block < n ? lo + T.block : n;
        /* first pass without branches: clamp, flag NaN, inf and the undecided */
        int redo = 0;
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i];
            int ok;
            out[i] = mj_sinpi_elem(mj_pi_clamp(v, &T), &T, &ok);
            redo |= (!ok) | (!mj_pi_finite(v, &T));
        }
        if (redo)
            for (int64_t i = lo; i < hi; i++) undecided += mj_pi_slot(x, out, i, 0, &T);
    }
    return undecided;
}

int64_t mj_cospif(const float *x, float *out, int64_t n, const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab;
    int64_t nblocks = (n + T.block - 1) / T.block;
    int64_t undecided = 0;
    #pragma omp parallel for schedule(static) reduction(+:undecided)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = c * T.block;
        int64_t hi = lo + T.block < n ? lo + T.block : n;
        int redo = 0;
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i];
            int ok;
            out[i] = mj_cospi_elem(mj_pi_clamp(v, &T), &T, &ok);
            redo |= (!ok) | (!mj_pi_finite(v, &T));
        }
        if (redo)
            for (int64_t i = lo; i < hi; i++) undecided += mj_pi_slot(x, out, i, 1, &T);
    }
    return undecided;
}

/* tanhf, erff and torch's GELU on them: the C spelling of native/erf_tanh.py (its
   docstring states the algorithm and the error budgets), operation for operation, so
   that the computed binary64 values, the rounding tests and hence the UNDECIDED slots
   are cpu-numba's. The constants travel in mj_erf_tanh_tab, filled from that module. */
typedef struct {
    double tanh_poly_err, tanh_err, erf_poly_err, erf_err0, erf_err1, erf_stop;
    double tanh_poly_end, erf_poly_end, tanh_one, erf_one, two, two_over_sqrt_pi;
    const double *tanh_c, *erf_c; /* T3 .. T23 and R0 .. R13 */
    float zero32, one32, half32, minus_half32, three32, alpha, beta, kappa, beta_erf, pos_inf32;
} mj_erf_tanh_tab;

/* e^t in binary64 for |t| <= 20 (exp64) */
static inline double mj_exp64(double t, const mj_crmath_tab *T) {
    double s = t * T->inv_ln2_32;
    s = s + T->shifter;
    double kd = s - T->shifter;
    int32_t k = (int32_t)kd;
    int32_t j = k & 31;
    int32_t q = (k - j) / 32; /* exact */
    double c = kd * T->ln2_32_hi;
    double r = t - c;
    c = kd * T->ln2_32_lo;
    r = r - c;
    double w = r * T->e6;
    w = w + T->e5;
    w = r * w;
    w = w + T->e4;
    w = r * w;
    w = w + T->e3;
    w = r * w;
    w = w + T->e2;
    w = r * w;
    w = w + T->one;
    double p = r * w;
    double tj = T->exp2_32[j];
    double y = tj * p;
    y = tj + y;
    return y * T->pow2[q + T->pow2_bias]; /* exact */
}

/* binary32 of sg * y when y - eb and y + eb (signed alike) round to one value (round_test) */
static inline float mj_round_test(double y, double eb, double sg, int *ok) {
    double ys = y * sg;
    double lo = ys - eb;
    double hi = ys + eb;
    float a = (float)lo;
    float b = (float)hi;
    *ok = a == b;
    return a;
}

static inline float mj_tanh_elem(double a, double sg, const mj_crmath_tab *T, const mj_erf_tanh_tab *E, int *ok) {
    if (a < E->tanh_poly_end) {
        double a2 = a * a; /* exact */
        double h = a2 * E->tanh_c[10];
        for (int k = 9; k >= 0; k--) {
            h = h + E->tanh_c[k];
            h = a2 * h;
        }
        h = a * h;
        double y = a + h;
        double eb = y * E->tanh_poly_err;
        return mj_round_test(y, eb, sg, ok);
    }
    double a2x = a + a;
    double e = mj_exp64(a2x, T);
    double num = e - T->one;
    double den = e + T->one;
    double y = num / den;
    double eb = y * E->tanh_err;
    return mj_round_test(y, eb, sg, ok);
}

static inline float mj_erf_elem(double a, double sg, const mj_crmath_tab *T, const mj_erf_tanh_tab *E, int *ok) {
    if (a < E->erf_poly_end) {
        double a2 = a * a; /* exact */
        double h = a2 * E->erf_c[13];
        for (int k = 12; k >= 1; k--) {
            h = h + E->erf_c[k];
            h = a2 * h;
        }
        double y = E->erf_c[0] + h;
        y = a * y;
        double eb = y * E->erf_poly_err;
        return mj_round_test(y, eb, sg, ok);
    }
    double z = a * a; /* exact */
    double mz = T->zero - z;
    double e = mj_exp64(mz, T);
    z = z + z; /* exact */
    double t = T->one, s = T->one, k = T->one, err = E->erf_err0;
    for (;;) {
        k = k + E->two;
        t = t * z;
        t = t / k;
        s = s + t;
        err = err + E->erf_err1;
        double ts = t * E->erf_stop;
        if (ts <= s) break;
    }
    double y = E->two_over_sqrt_pi * a;
    y = y * e;
    y = y * s;
    double eb = y * err;
    return mj_round_test(y, eb, sg, ok);
}

/* tanhf(v), erff(v) for v not NaN (tanh_value, erf_value) */
static inline float mj_tanh_value(float v, const mj_crmath_tab *T, const mj_erf_tanh_tab *E, int *ok) {
    *ok = 1;
    if (v == E->zero32) return v;
    double xd = (double)v;
    double sg = xd < T->zero ? T->minus_one : T->one;
    double a = xd * sg;
    if (a >= E->tanh_one) return (float)sg;
    return mj_tanh_elem(a, sg, T, E, ok);
}

static inline float mj_erf_value(float v, const mj_crmath_tab *T, const mj_erf_tanh_tab *E, int *ok) {
    *ok = 1;
    if (v == E->zero32) return v;
    double xd = (double)v;
    double sg = xd < T->zero ? T->minus_one : T->one;
    double a = xd * sg;
    if (a >= E->erf_one) return (float)sg;
    return mj_erf_elem(a, sg, T, E, ok);
}

/* the same, NaN passed through (tanh_any, erf_any, exp_any) */
static inline float mj_tanh_any(float v, const mj_crmath_tab *T, const mj_erf_tanh_tab *E, int *ok) {
    *ok = 1;
    return v != v ? v : mj_tanh_value(v, T, E, ok);
}

static inline float mj_erf_any(float v, const mj_crmath_tab *T, const mj_erf_tanh_tab *E, int *ok) {
    *ok = 1;
    return v != v ? v : mj_erf_value(v, T, E, ok);
}

static inline float mj_exp_any(float v, const mj_crmath_tab *T, const mj_erf_tanh_tab *E, int *ok) {
    *ok = 1;
    if (v != v) return v;
    if (v >= T->exp_huge) return E->pos_inf32;
    if (v <= T->exp_tiny) return E->zero32;
    return mj_exp_elem(v, T, ok);
}

static inline void mj_put(float r, float *out, int64_t i, const mj_crmath_tab *T) {
    if (r != r) mj_put_bits(out, i, T->default_nan);
    else out[i] = r;
}

static inline int64_t mj_odd_slot(const float *x, float *out, int64_t i, int use_erf, const mj_crmath_tab *T,
                                  const mj_erf_tanh_tab *E) {
    float v = x[i];
    if (v != v) {
        mj_put_bits(out, i, mj_bits_at(x, i) | T->quiet_bit);
        return 0;
    }
    int ok;
    float r = use_erf ? mj_erf_value(v, T, E, &ok) : mj_tanh_value(v, T, E, &ok);
    if (ok) {
        out[i] = r;
        return 0;
    }
    mj_put_bits(out, i, T->undecided);
    return 1;
}

static inline float mj_tanh_inner(float v, float x_sq, const mj_erf_tanh_tab *E) {
    float x_cube = x_sq * v;
    float kx = E->kappa * x_cube;
    float s = v + kx;
    return E->beta * s;
}

static inline int64_t mj_gelu_slot(const float *x, float *out, int64_t i, int use_tanh, const mj_crmath_tab *T,
                                   const mj_erf_tanh_tab *E) {
    float v = x[i];
    int ok;
    float r;
    if (use_tanh) {
        float x_sq = v * v;
        float t = mj_tanh_any(mj_tanh_inner(v, x_sq, E), T, E, &ok);
        float hx = E->half32 * v;
        float c = E->one32 + t;
        r = hx * c;
    } else {
        float hx = v * E->half32;
        float w = v * E->alpha;
        float t = mj_erf_any(w, T, E, &ok);
        float c = E->one32 + t;
        r = hx * c;
    }
    if (!ok) {
        mj_put_bits(out, i, T->undecided);
        return 1;
    }
    mj_put(r, out, i, T);
    return 0;
}

static inline int64_t mj_gelu_grad_slot(const float *dy, const float *x, float *out, int64_t i, int use_tanh,
                                        const mj_crmath_tab *T, const mj_erf_tanh_tab *E) {
    float d = dy[i], v = x[i];
    int ok, ok2 = 1;
    float r;
    if (use_tanh) {
        float x_sq = v * v;
        float t = mj_tanh_any(mj_tanh_inner(v, x_sq, E), T, E, &ok);
        float left = E->half32 * v;
        float right = E->one32 + t;
        float left_derivative = E->half32 * right;
        float tt = t * t;
        float tanh_derivative = E->one32 - tt;
        float k3 = E->three32 * E->kappa;
        float k3x = k3 * x_sq;
        float ik = E->one32 + k3x;
        float inner_derivative = E->beta * ik;
        float lt = left * tanh_derivative;
        float right_derivative = lt * inner_derivative;
        float sum = left_derivative + right_derivative;
        r = d * sum;
    } else {
        float w = v * E->alpha;
        float t = mj_erf_any(w, T, E, &ok);
        float x_sq = v * v;
        float ea = x_sq * E->minus_half32;
        float e = mj_exp_any(ea, T, E, &ok2);
        float c = E->one32 + t;
        float cdf = E->half32 * c;
        float pdf = E->beta_erf * e;
        float xp = v * pdf;
        float sum = cdf + xp;
        r = d * sum;
    }
    if (!(ok && ok2)) {
        mj_put_bits(out, i, T->undecided);
        return 1;
    }
    mj_put(r, out, i, T);
    return 0;
}

int64_t mj_odd(const float *x, float *out, int64_t n, int use_erf, const mj_crmath_tab *tab,
               const mj_erf_tanh_tab *etab) {
    const mj_crmath_tab T = *tab;
    const mj_erf_tanh_tab E = *etab;
    int64_t nblocks = (n + T.block - 1) / T.block;
    int64_t undecided = 0;
    #pragma omp parallel for schedule(static) reduction(+:undecided)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = c * T.block;
        int64_t hi = lo + T.block < n ? lo + T.block : n;
        for (int64_t i = lo; i < hi; i++) undecided += mj_odd_slot(x, out, i, use_erf, &T, &E);
    }
    return undecided;
}

int64_t mj_gelu(const float *x, float *out, int64_t n, int use_tanh, const mj_crmath_tab *tab,
                const mj_erf_tanh_tab *etab) {
    const mj_crmath_tab T = *tab;
    const mj_erf_tanh_tab E = *etab;
    int64_t nblocks = (n + T.block - 1) / T.block;
    int64_t undecided = 0;
    #pragma omp parallel for schedule(static) reduction(+:undecided)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = c * T.block;
        int64_t hi = lo + T.block < n ? lo + T.block : n;
        for (int64_t i = lo; i < hi; i++) undecided += mj_gelu_slot(x, out, i, use_tanh, &T, &E);
    }
    return undecided;
}

int64_t mj_gelu_backward(const float *dy, const float *x, float *dx, int64_t n, int use_tanh,
                         const mj_crmath_tab *tab, const mj_erf_tanh_tab *etab) {
    const mj_crmath_tab T = *tab;
    const mj_erf_tanh_tab E = *etab;
    int64_t nblocks = (n + T.block - 1) / T.block;
    int64_t undecided = 0;
    #pragma omp parallel for schedule(static) reduction(+:undecided)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = c * T.block;
        int64_t hi = lo + T.block < n ? lo + T.block : n;
        for (int64_t i = lo; i < hi; i++) undecided += mj_gelu_grad_slot(dy, x, dx, i, use_tanh, &T, &E);
    }
    return undecided;
}
