/* Cross-entropy over class indices (contracts/loss.md): the C spelling of native/loss.py.
   Per row: mx = max_j z_j; e_j = expf(z_j - mx); S = fold(e); L = logf(S);
   nll = L - d_t; with smoothing A = fold_j(L - d_j), loss = c1*nll + c2*A;
   with the gradient, grad_j = (e_j / S - q_j) * g, e_j kept in grad from the S pass.
   expf/logf are native/crmath.py's exp_elem/log_elem written again here (binary64
   + - * only, one IEEE operation per statement, the same order; built with
   -ffp-contract=off), each with its rounding test; a row with an undecided value
   gets status 1. Every table and constant comes from Python in mj_loss_tab.
   The fold tree is fold.c's (mj_butterfly, mj_pairwise: one translation unit).
   Rows run in parallel (OpenMP); a row is one thread's serial work, so the thread
   count never reaches the bits. */
#include <stdlib.h>
#include <string.h>

/* The same definition as in loss.h (cffi checks every field against this one). */
typedef struct {
    double inv_ln2_32, ln2_32_hi, ln2_32_lo, ln2_hi, ln2_lo, shifter, err, one, two_m23, two_m24;
    double e2, e3, e4, e5, e6, l2, l3, l4, l5, l6, l7, l8;
    const double *exp2_32, *pow2, *log_inv, *log_hi, *log_lo;
    int64_t pow2_bias, sqrt2_m24;
    float exp_tiny;
} mj_loss_tab;

/* e^x rounded to binary32 when *ok, for finite exp_tiny <= x <= 0 */
static inline float mj_ce_exp(float x, const mj_loss_tab *T, int *ok) {
    double xd = (double)x;
    double t = xd * T->inv_ln2_32;
    t = t + T->shifter;
    double kd = t - T->shifter; /* round(x * 32 / ln 2), ties to even */
    int32_t k = (int32_t)kd; /* |k| < 2^13 */
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

/* ln S rounded to binary32 when *ok, for S >= 1 finite (so never subnormal) */
static inline float mj_ce_log(float s, const mj_loss_tab *T, int *ok) {
    uint32_t bits;
    memcpy(&bits, &s, sizeof bits);
    int64_t u = bits;
    int64_t m = (u & 0x7FFFFF) | 0x800000;
    int64_t e = ((u >> 23) & 0xFF) - 127;
    int64_t idx;
    double scale;
    if (m >= T->sqrt2_m24) { /* S = 2^(e+1) t, t = m 2^-24 in [sqrt(1/2), 1) */
        e = e + 1;
        idx = m >> 16;
        scale = T->two_m24;
    } else { /* S = 2^e t, t = m 2^-23 in [1, sqrt 2) */
        idx = (m >> 16) - 128;
        scale = T->two_m23;
    }
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
    double sum = lo + p;
    double y = hi + sum;
    double eb = y * T->err;
    if (eb < 0) eb = -eb;
    double ylo = y - eb;
    double yhi = y + eb;
    float a = (float)ylo;
    float b = (float)yhi;
    *ok = a == b;
    return a;
}

/* max_j z_j through 32 lane maxima (exact, so the order is free) */
static float mj_ce_row_max(const float *z, int64_t v) {
    float acc[MJ_LANES];
    for (int j = 0; j < MJ_LANES; j++) acc[j] = z[0];
    int64_t full = v - v % MJ_LANES;
    for (int64_t b = 0; b < full; b += MJ_LANES)
        for (int j = 0; j < MJ_LANES; j++) {
            float x = z[b + j];
            acc[j] = x > acc[j] ? x : acc[j];
        }
    for (int64_t k = full; k < v; k++) acc[0] = z[k] > acc[0] ? z[k] : acc[0];
    float mx = acc[0];
    for (int j = 1; j < MJ_LANES; j++) mx = acc[j] > mx ? acc[j] : mx;
    return mx;
}

/* dst[k] = expf(z[k] - mx) for k < m; returns how many were undecided. Branch-free:
   d <= exp_tiny (expf = +0) is clamped into the domain and replaced by +0. */
static int64_t mj_ce_exp_chunk(const float *z, int64_t m, float mx, float *dst, const mj_loss_tab *T) {
    int64_t bad = 0;
    for (int64_t k = 0; k < m; k++) {
        float d = z[k] - mx;
        int keep = d > T->exp_tiny;
        float w = keep ? d : T->exp_tiny;
        int ok;
        float a = mj_ce_exp(w, T, &ok);
        dst[k] = keep ? a : 0.0f;
        bad += keep & !ok;
    }
    return bad;
}

/* the fold tree's partial of the chunk x[0..m), m <= 1024 */
static float mj_ce_chunk_partial(const float *x, int64_t m) {
    float acc[MJ_LANES];
    for (int j = 0; j < MJ_LANES; j++) acc[j] = -0.0f;
    if (m == MJ_CHUNK) {
        for (int i = 0; i < MJ_LANES; i++)
            for (int j = 0; j < MJ_LANES; j++) acc[j] = acc[j] + x[i * MJ_LANES + j];
    } else { /* the short last chunk: padded slots add -0.0, so skip them */
        for (int64_t k = 0; k < m; k++) acc[k & (MJ_LANES - 1)] = acc[k & (MJ_LANES - 1)] + x[k];
    }
    mj_butterfly(acc);
    return acc[0];
}

/* the fold tree's partial of L - (z[k] - mx) over the chunk z[0..m) */
static float mj_ce_smooth_partial(const float *z, int64_t m, float mx, float lg) {
    float acc[MJ_LANES];
    for (int j = 0; j < MJ_LANES; j++) acc[j] = -0.0f;
    for (int64_t k = 0; k < m; k++) {
        float d = z[k] - mx;
        float y = lg - d;
        acc[k & (MJ_LANES - 1)] = acc[k & (MJ_LANES - 1)] + y;
    }
    mj_butterfly(acc);
    return acc[0];
}

/* One row; returns 1 if it had an undecided expf/logf (its outputs are then unspecified).
   work: nchunks partials, then 1024 slots for e_j when grad is 0. */
static int mj_ce_row(const float *z, int64_t v, int64_t t, float c1, float c2, float qt,
                     int smoothing, float g, float *grad, float *row_out, float *work,
                     const mj_loss_tab *T) {
    int64_t nchunks = (v + MJ_CHUNK - 1) / MJ_CHUNK;
    float *partials = work, *ebuf = work + nchunks;
    float mx = mj_ce_row_max(z, v);
    int64_t bad = 0;
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t base = c * MJ_CHUNK;
        int64_t m = v - base < MJ_CHUNK ? v - base : MJ_CHUNK;
        float *dst = grad ? grad + base : ebuf;
        bad += mj_ce_exp_chunk(z + base, m, mx, dst, T);
        partials[c] = mj_ce_chunk_partial(dst, m);
    }
    float s = mj_pairwise(partials, nchunks);
    int ok;
    float lg = mj_ce_log(s, T, &ok);
    if (bad || !ok) return 1;
    float dt = z[t] - mx;
    float nll = lg - dt;
    if (smoothing) {
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t base = c * MJ_CHUNK;
            int64_t m = v - base < MJ_CHUNK ? v - base : MJ_CHUNK;
            partials[c] = mj_ce_smooth_partial(z + base, m, mx, lg);
        }
        float a = mj_pairwise(partials, nchunks);
        float u = c1 * nll;
        float w = c2 * a;
        *row_out = u + w;
    } else {
        *row_out = nll;
    }
    if (grad) {
        float et = grad[t];
        for (int64_t k = 0; k < v; k++) {
            float p = grad[k] / s;
            float q = p - c2;
            grad[k] = q * g;
        }
        float p = et / s;
        float q = p - qt;
        grad[t] = q * g;
    }
    return 0;
}

int64_t mj_cross_entropy(const float *z, const int64_t *t, int64_t n, int64_t v,
                         int64_t ignore_index, float c1, float c2, float qt, int smoothing, float g,
                         int want_grad, float *grad, float *rows, int32_t *status,
                         const mj_loss_tab *tab) {
    const mj_loss_tab T = *tab; /* a private copy: stores to the outputs cannot alias it */
    int64_t nchunks = (v + MJ_CHUNK - 1) / MJ_CHUNK;
    int64_t undecided = 0;
    int failed = 0;
    #pragma omp parallel reduction(+:undecided) reduction(|:failed)
    {
        float *work = malloc((size_t)(nchunks + MJ_CHUNK) * sizeof(float));
        if (!work) failed = 1;
        /* dynamic: ignored rows are cheap; which thread runs a row cannot reach its bits */
        #pragma omp for schedule(dynamic, 4)
        for (int64_t r = 0; r < n; r++) {
            float *grow = want_grad ? grad + r * v : 0;
            status[r] = 0;
            if (t[r] == ignore_index) {
                rows[r] = 0.0f;
                if (grow)
                    for (int64_t k = 0; k < v; k++) grow[k] = 0.0f;
                continue;
            }
            if (!work) continue;
            if (mj_ce_row(z + r * v, v, t[r], c1, c2, qt, smoothing, g, grow, rows + r, work, &T)) {
                status[r] = 1;
                undecided += 1;
            }
        }
        free(work);
    }
    return failed ? -1 : undecided;
}
