/* Cross-entropy over class indices (contracts/loss.md): the C spelling of native/loss.py.
   Per row: mx = max_j z_j; e_j = expf(z_j - mx); S = fold(e); L = logf(S);
   nll = L - d_t; with smoothing A = fold_j(L - d_j), loss = c1*nll + c2*A;
   with the gradient, grad_j = (e_j / S - q_j) * g, e_j kept in grad from the S pass.
   expf/logf are crmath.c's mj_exp_elem/mj_log_elem (one translation unit), each
   with its rounding test; a row with an undecided value gets status 1. Their
   tables travel in crmath.c's mj_crmath_tab.
   The fold tree is fold.c's (mj_butterfly, mj_pairwise: one translation unit).
   Rows run in parallel (OpenMP); a row is one thread's serial work, so the thread
   count never reaches the bits. */
#include <stdlib.h>
#include <string.h>

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
static int64_t mj_ce_exp_chunk(const float *z, int64_t m, float mx, float *dst, const mj_crmath_tab *T) {
    int64_t bad = 0;
    for (int64_t k = 0; k < m; k++) {
        float d = z[k] - mx;
        int keep = d > T->exp_tiny;
        float w = keep ? d : T->exp_tiny;
        int ok;
        float a = mj_exp_elem(w, T, &ok);
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
                     const mj_crmath_tab *T) {
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
    uint32_t sbits;
    memcpy(&sbits, &s, sizeof sbits); /* S >= 1: positive, finite, normal */
    float lg = mj_log_elem(sbits, T, &ok);
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
                         const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab; /* a private copy: stores to the outputs cannot alias it */
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
