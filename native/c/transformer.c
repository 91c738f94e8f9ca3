/* The transformer family (contracts/transformer.md): softmax / log_softmax rows and their
   backward, layer_norm rows and its backward, and the fused scaled-dot-product attention,
   forward and backward; the C spelling of oracles/transformer.py and oracles/attention.py.

   Folds. Every sum is fold.c's tree (one translation unit: mj_butterfly, mj_pairwise,
   MJ_LANES, MJ_CHUNK). A fold over an index n whose terms arrive one at a time (keys j of a
   row, rows i of a key) keeps 32 lanes per output, lane n mod 32, reset to -0.0 at every
   chunk of 1024 indices and flushed through the butterfly into that chunk's partial at its
   last index; the partials meet in the pairwise tree at the end. A position that does not
   take part adds nothing (x + -0.0 = x), so it is skipped, yet the flush still happens at
   every chunk end: the tree depends on the index alone, and no block size reaches a bit.
   A vector of outputs (o_i[0..Ev), S_i) shares one lane index, so the lanes are laid out
   lane-major and every update is a loop over contiguous coordinates (it vectorizes).

   expf/logf are crmath.c's mj_exp_elem / mj_log_elem with their rounding test; a value
   they cannot decide marks its row (softmax) or head (attention) in status, counted in
   the return value. Dropout words are rng.c's Philox (mj_rng_word_at, mj_rng_unit).

   Threads. OpenMP over rows, or over (head, query block) and (head, key block) tasks,
   each one thread's serial work writing its own outputs; a head's status is the OR of its
   tasks' flags, taken after the parallel region. So the thread count never reaches the
   bits. Built with -ffp-contract=off: no product is fused into an add. */
#include <stdlib.h>
#include <string.h>

#define MJ_TF_BQ 16 /* query rows per forward task (not part of any result) */

/* ---- fold pieces ---------------------------------------------------------------------- */

/* The partial of one chunk x[0..len) (len <= 1024), or of the rounded x[k] * y[k]. */
static inline float mj_tf_chunk(const float *x, const float *y, int64_t len) {
    float acc[MJ_LANES];
    for (int j = 0; j < MJ_LANES; j++) acc[j] = -0.0f;
    int64_t whole = len / MJ_LANES * MJ_LANES;
    for (int64_t i = 0; i < whole; i += MJ_LANES) {
        if (y) {
            for (int j = 0; j < MJ_LANES; j++) {
                float p = x[i + j] * y[i + j];
                acc[j] = acc[j] + p;
            }
        } else {
            for (int j = 0; j < MJ_LANES; j++) acc[j] = acc[j] + x[i + j];
        }
    }
    for (int64_t k = whole; k < len; k++) { /* the short last step: padded slots are skipped */
        float t = x[k];
        if (y) {
            float p = t * y[k];
            t = p;
        }
        acc[k - whole] = acc[k - whole] + t;
    }
    mj_butterfly(acc);
    return acc[0];
}

/* fold of x[0..n) (y == 0) or dot(x, y); part holds ceil(n / 1024) floats when n > 1024. */
static inline float mj_tf_fold(const float *x, const float *y, int64_t n, float *part) {
    if (n <= MJ_CHUNK) return mj_tf_chunk(x, y, n);
    int64_t nc = (n + MJ_CHUNK - 1) / MJ_CHUNK;
    for (int64_t c = 0; c < nc; c++) {
        int64_t len = n - c * MJ_CHUNK < MJ_CHUNK ? n - c * MJ_CHUNK : MJ_CHUNK;
        part[c] = mj_tf_chunk(x + c * MJ_CHUNK, y ? y + c * MJ_CHUNK : 0, len);
    }
    return mj_pairwise(part, nc);
}

static void mj_tf_lanes_reset(float *lanes, int64_t w) {
    for (int64_t t = 0; t < MJ_LANES * w; t++) lanes[t] = -0.0f;
}

/* lane[d] += a * x[d] for d < w, each product rounded first */
static inline void mj_tf_axpy(float *lane, float a, const float *x, int64_t w) {
    for (int64_t d = 0; d < w; d++) {
        float t = a * x[d];
        lane[d] = lane[d] + t;
    }
}

/* The butterfly over the 32 lanes (32 x w, lane-major) column by column; dst[0..w) = lane
   0, the chunk's partials; the lanes start again from -0.0. */
static void mj_tf_flush(float *lanes, int64_t w, float *dst) {
    for (int off = MJ_LANES / 2; off >= 1; off /= 2)
        for (int l = 0; l < off; l++) {
            float *a = lanes + l * w;
            const float *b = lanes + (l + off) * w;
            for (int64_t d = 0; d < w; d++) a[d] = a[d] + b[d];
        }
    for (int64_t d = 0; d < w; d++) dst[d] = lanes[d];
    mj_tf_lanes_reset(lanes, w);
}

/* The pairwise tree over the k partial rows p[c * w + 0..w), column by column, in place:
   the folds end in p[0..w). */
static void mj_tf_pairwise_cols(float *p, int64_t k, int64_t w) {
    while (k > 1) {
        int64_t h = k / 2;
        for (int64_t i = 0; i < h; i++)
            for (int64_t d = 0; d < w; d++) p[i * w + d] = p[2 * i * w + d] + p[(2 * i + 1) * w + d];
        if (k % 2 == 1) {
            for (int64_t d = 0; d < w; d++) p[h * w + d] = p[(k - 1) * w + d];
            k = h + 1;
        } else {
            k = h;
        }
    }
}

/* ---- element functions ---------------------------------------------------------------- */

/* expf(d) for every binary32 d (NaN stays NaN, +0 at and below exp_tiny, +inf at and above
   exp_huge); *ok = 0 when the rounding test could not decide it. Branch-free. */
static inline float mj_tf_exp(float d, const mj_crmath_tab *T, int *ok) {
    int keep = d > T->exp_tiny; /* false for NaN */
    int huge = d >= T->exp_huge;
    float w = keep ? d : T->exp_tiny;
    w = w < T->exp_huge ? w : T->exp_huge;
    int good;
    float a = mj_exp_elem(w, T, &good);
    float r = keep ? a : 0.0f;
    r = huge ? __builtin_inff() : r;
    r = d != d ? d : r;
    *ok = good | !keep | huge;
    return r;
}

/* logf(s) for s NaN or positive finite (a softmax row's S: NaN, or in [1, n]) */
static inline float mj_tf_log(float s, const mj_crmath_tab *T, int *ok) {
    if (s != s) {
        *ok = 1;
        return s;
    }
    uint32_t u;
    memcpy(&u, &s, sizeof u);
    return mj_log_elem(u, T, ok);
}

/* max_j x_j, exact, NaN when one is NaN (the zero's sign is free: it changes no output) */
static inline float mj_tf_max(const float *x, int64_t n) {
    float acc[MJ_LANES];
    int nan[MJ_LANES];
    for (int j = 0; j < MJ_LANES; j++) {
        acc[j] = x[0];
        nan[j] = 0;
    }
    int64_t whole = n / MJ_LANES * MJ_LANES;
    for (int64_t b = 0; b < whole; b += MJ_LANES)
        for (int j = 0; j < MJ_LANES; j++) {
            float v = x[b + j];
            nan[j] |= v != v;
            acc[j] = v > acc[j] ? v : acc[j];
        }
    for (int64_t k = whole; k < n; k++) {
        float v = x[k];
        nan[0] |= v != v;
        acc[0] = v > acc[0] ? v : acc[0];
    }
    float mx = acc[0];
    int any = nan[0];
    for (int j = 1; j < MJ_LANES; j++) {
        mx = acc[j] > mx ? acc[j] : mx;
        any |= nan[j];
    }
    return any ? __builtin_nanf("") : mx;
}

/* ---- softmax and log_softmax rows (clauses 1-3) --------------------------------------- */

/* One row; returns 1 when an expf or logf was undecided. part: ceil(n / 1024) floats. */
static int mj_tf_softmax_row(const float *x, int64_t n, int log, float *y, float *part,
                             const mj_crmath_tab *T) {
    float mx = mj_tf_max(x, n);
    int64_t nc = (n + MJ_CHUNK - 1) / MJ_CHUNK;
    int bad = 0;
    for (int64_t c = 0; c < nc; c++) {
        int64_t base = c * MJ_CHUNK;
        int64_t len = n - base < MJ_CHUNK ? n - base : MJ_CHUNK;
        for (int64_t k = base; k < base + len; k++) {
            float d = x[k] - mx;
            int ok;
            y[k] = mj_tf_exp(d, T, &ok); /* e_j, kept in y until S is known */
            bad |= !ok;
        }
        part[c] = mj_tf_chunk(y + base, 0, len);
    }
    float s = mj_pairwise(part, nc);
    if (!log) {
        for (int64_t k = 0; k < n; k++) y[k] = y[k] / s;
        return bad;
    }
    int ok;
    float lg = mj_tf_log(s, T, &ok);
    bad |= !ok;
    for (int64_t k = 0; k < n; k++) {
        float d = x[k] - mx;
        y[k] = d - lg;
    }
    return bad;
}

/* softmax: c = fold(dy * y), dx = y * (dy - c); log: c = fold(dy), dx = dy - expf(y) * c */
static int mj_tf_softmax_backward_row(const float *dy, const float *y, int64_t n, int log,
                                      float *dx, float *part, const mj_crmath_tab *T) {
    int bad = 0;
    if (!log) {
        float c = mj_tf_fold(dy, y, n, part);
        for (int64_t k = 0; k < n; k++) {
            float t = dy[k] - c;
            dx[k] = y[k] * t;
        }
        return 0;
    }
    float c = mj_tf_fold(dy, 0, n, part);
    for (int64_t k = 0; k < n; k++) {
        int ok;
        float e = mj_tf_exp(y[k], T, &ok);
        bad |= !ok;
        float t = e * c;
        dx[k] = dy[k] - t;
    }
    return bad;
}

/* The row kernels' shared loop: rows in parallel, each with its partials buffer. */
#define MJ_TF_ROWS(M, N, WORK, ...)                                                             \
    int64_t marked = 0;                                                                         \
    int failed = 0;                                                                             \
    int64_t nchunks = ((N) + MJ_CHUNK - 1) / MJ_CHUNK, rows_ = (M), size_ = (M) * (N);           \
    _Pragma("omp parallel if(size_ >= MJ_PARALLEL_MIN) reduction(+:marked) reduction(|:failed)") \
    {                                                                                           \
        float *WORK = malloc(sizeof(float) * (size_t)nchunks);                                  \
        failed |= !WORK;                                                                        \
        _Pragma("omp for schedule(static)")                                                     \
        for (int64_t r = 0; r < rows_; r++) {                                                   \
            if (!WORK) continue;                                                                \
            __VA_ARGS__                                                                         \
        }                                                                                       \
        free(WORK);                                                                             \
    }                                                                                           \
    return failed ? -1 : marked;

int64_t mj_softmax_rows(const float *x, int64_t m, int64_t n, int log, float *y, int32_t *status,
                        const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab; /* a private copy: stores to y cannot alias it */
    MJ_TF_ROWS(m, n, part, {
        int bad = mj_tf_softmax_row(x + r * n, n, log, y + r * n, part, &T);
        status[r] = bad;
        marked += bad;
    })
}

int64_t mj_softmax_backward_rows(const float *dy, const float *y, int64_t m, int64_t n, int log,
                                 float *dx, int32_t *status, const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab;
    MJ_TF_ROWS(m, n, part, {
        int bad = mj_tf_softmax_backward_row(dy + r * n, y + r * n, n, log, dx + r * n, part, &T);
        status[r] = bad;
        marked += bad;
    })
}

/* ---- layer_norm rows (clauses 4-5) ---------------------------------------------------- */

/* c_j = x_j - mean into c; returns rstd = 1 / sqrt(fold(c * c) / nD + eps). */
static float mj_tf_ln_stats(const float *x, int64_t d, float eps, float *c, float *part) {
    float nd = (float)d;
    float mean = mj_tf_fold(x, 0, d, part) / nd;
    for (int64_t j = 0; j < d; j++) c[j] = x[j] - mean;
    float var = mj_tf_fold(c, c, d, part) / nd;
    float t = var + eps;
    float root = __builtin_sqrtf(t); /* IEEE sqrt (an instruction with -fno-math-errno) */
    return 1.0f / root;
}

int64_t mj_layer_norm_rows(const float *x, int64_t m, int64_t d, const float *w, int has_w,
                           const float *b, int has_b, float eps, float *y) {
    MJ_TF_ROWS(m, d, part, {
        float *yr = y + r * d;
        float rstd = mj_tf_ln_stats(x + r * d, d, eps, yr, part); /* yr holds c */
        for (int64_t j = 0; j < d; j++) {
            float h = yr[j] * rstd;
            if (has_w) {
                float hw = h * w[j];
                h = hw;
            }
            if (has_b) {
                float hb = h + b[j];
                h = hb;
            }
            yr[j] = h;
        }
    })
}

/* h = c * rstd; g = dy * w (dy without weight); a = fold(g) / nD, mm = fold(g * h) / nD;
   dx = rstd * ((g - a) - h * mm). dx holds g until a and mm are known. */
int64_t mj_layer_norm_backward_rows(const float *dy, const float *x, int64_t m, int64_t d,
                                    const float *w, int has_w, float eps, float *dx, float *h) {
    MJ_TF_ROWS(m, d, part, {
        float *hr = h + r * d, *dr = dx + r * d;
        const float *gr = dy + r * d;
        float nd = (float)d;
        float rstd = mj_tf_ln_stats(x + r * d, d, eps, hr, part);
        for (int64_t j = 0; j < d; j++) {
            float hj = hr[j] * rstd;
            hr[j] = hj;
            float g = gr[j];
            if (has_w) {
                float gw = g * w[j];
                g = gw;
            }
            dr[j] = g;
        }
        float a = mj_tf_fold(dr, 0, d, part) / nd;
        float mm = mj_tf_fold(dr, hr, d, part) / nd;
        for (int64_t j = 0; j < d; j++) {
            float u = dr[j] - a;
            float hm = hr[j] * mm;
            float t = u - hm;
            dr[j] = rstd * t;
        }
    })
}

/* ---- attention (clauses 10-15) -------------------------------------------------------- */

/* One call's arguments; head bh = b * nh + h. */
typedef struct {
    const float *q, *k, *v, *d_o, *o, *stats;
    const uint8_t *mb;
    const float *ma;
    int kind, causal;
    int64_t ms0, ms1, ms2, ms3;
    float scale, p, keep_scale;
    uint32_t k0, k1;
    uint64_t stream;
    int64_t nb, nh, nl, ns, ne, nev;
    const mj_crmath_tab *T;
} mj_tf_att;

/* The mask offset of row i of head bh (add j * ms3 for key j). */
static inline int64_t mj_tf_mrow(const mj_tf_att *A, int64_t bh, int64_t i) {
    return (bh / A->nh) * A->ms0 + (bh % A->nh) * A->ms1 + i * A->ms2;
}

/* 1 and *s = s_ij = scale * dot(q_i, k_j) (+ m_ij) when key j takes part in row i, else 0.
   kh: the head's keys; part: ceil(E / 1024) floats. */
static inline int mj_tf_score(const mj_tf_att *A, const float *qi, const float *kh, int64_t mrow,
                              int64_t i, int64_t j, float *part, float *s) {
    if (A->causal && j > i) return 0;
    if (A->kind == 1 && !A->mb[mrow + j * A->ms3]) return 0;
    float dt = mj_tf_fold(qi, kh + j * A->ne, A->ne, part);
    float t = A->scale * dt;
    if (A->kind == 2) {
        float mv = A->ma[mrow + j * A->ms3];
        t = t + mv;
    }
    *s = t;
    return 1;
}

/* c_ij: keep_scale when position ((b H + h) L + i) S + j of the stream is kept, else 0.0 */
static inline float mj_tf_keep(const mj_tf_att *A, int64_t bh, int64_t i, int64_t j) {
    uint64_t pos = (uint64_t)(bh * A->nl + i) * (uint64_t)A->ns + (uint64_t)j;
    uint32_t w = mj_rng_word_at(A->k0, A->k1, A->stream, pos);
    return mj_rng_unit(w) >= A->p ? A->keep_scale : 0.0f;
}

/* Forward rows [i0, i1) of head bh, keys in blocks of bk: pass 1 the row maxima, pass 2
   e_ij, S_i and the weighted sums on the fold's lanes (row r's lanes: 32 x (Ev + 1),
   S_i in the last column). Returns 1 when an expf was undecided. */
static int mj_tf_forward_task(const mj_tf_att *A, int64_t bh, int64_t i0, int64_t i1, int64_t bk,
                              float *work, float *o, float *stats) {
    const int64_t ne = A->ne, nev = A->nev, ns = A->ns, w1 = nev + 1, nr = i1 - i0;
    const int64_t ncs = (ns + MJ_CHUNK - 1) / MJ_CHUNK;
    const float *qh = A->q + bh * A->nl * ne, *kh = A->k + bh * ns * ne, *vh = A->v + bh * ns * nev;
    float *part = work, *mx = part + (ne + MJ_CHUNK - 1) / MJ_CHUNK, *ebuf = mx + MJ_TF_BQ;
    float *lanes = ebuf + bk, *parts = lanes + MJ_TF_BQ * MJ_LANES * w1;
    unsigned char *tk = (unsigned char *)(parts + MJ_TF_BQ * ncs * w1);
    int live[MJ_TF_BQ], nan[MJ_TF_BQ];
    int64_t cnt[MJ_TF_BQ];
    int bad = 0;
    for (int64_t r = 0; r < nr; r++) {
        mx[r] = -__builtin_inff();
        nan[r] = 0;
        cnt[r] = 0;
        mj_tf_lanes_reset(lanes + r * MJ_LANES * w1, w1);
    }
    for (int64_t j0 = 0; j0 < ns; j0 += bk) { /* pass 1: the row maxima */
        int64_t j1 = j0 + bk < ns ? j0 + bk : ns;
        for (int64_t r = 0; r < nr; r++) {
            const float *qi = qh + (i0 + r) * ne;
            int64_t mrow = mj_tf_mrow(A, bh, i0 + r);
            for (int64_t j = j0; j < j1; j++) {
                float s;
                if (!mj_tf_score(A, qi, kh, mrow, i0 + r, j, part, &s)) continue;
                cnt[r]++;
                nan[r] |= s != s;
                mx[r] = s > mx[r] ? s : mx[r];
            }
        }
    }
    for (int64_t r = 0; r < nr; r++) {
        mx[r] = nan[r] ? __builtin_nanf("") : mx[r];
        live[r] = cnt[r] > 0 && mx[r] != -__builtin_inff(); /* else the row is empty */
    }
    for (int64_t j0 = 0; j0 < ns; j0 += bk) { /* pass 2: e_ij, S_i, the weighted sums */
        int64_t j1 = j0 + bk < ns ? j0 + bk : ns;
        for (int64_t r = 0; r < nr; r++) {
            if (!live[r]) continue;
            int64_t i = i0 + r, mrow = mj_tf_mrow(A, bh, i);
            const float *qi = qh + i * ne;
            for (int64_t j = j0; j < j1; j++) {
                float s;
                tk[j - j0] = (unsigned char)mj_tf_score(A, qi, kh, mrow, i, j, part, &s);
                if (!tk[j - j0]) continue;
                float dd = s - mx[r];
                int ok;
                ebuf[j - j0] = mj_tf_exp(dd, A->T, &ok);
                bad |= !ok;
            }
            float *ln = lanes + r * MJ_LANES * w1, *pr = parts + r * ncs * w1;
            for (int64_t j = j0; j < j1; j++) {
                if (tk[j - j0]) {
                    float e = ebuf[j - j0], wt = e;
                    if (A->p > 0.0f) {
                        float c = mj_tf_keep(A, bh, i, j);
                        wt = e * c;
                    }
                    float *lane = ln + (j & (MJ_LANES - 1)) * w1;
                    mj_tf_axpy(lane, wt, vh + j * nev, nev);
                    lane[nev] = lane[nev] + e;
                }
                if ((j & (MJ_CHUNK - 1)) == MJ_CHUNK - 1) mj_tf_flush(ln, w1, pr + (j / MJ_CHUNK) * w1);
            }
        }
    }
    for (int64_t r = 0; r < nr; r++) {
        int64_t i = i0 + r;
        float *oi = o + (bh * A->nl + i) * nev, *st = stats + (bh * A->nl + i) * 2;
        if (!live[r]) {
            for (int64_t d = 0; d < nev; d++) oi[d] = 0.0f;
            st[0] = -__builtin_inff();
            st[1] = 0.0f;
            continue;
        }
        float *ln = lanes + r * MJ_LANES * w1, *pr = parts + r * ncs * w1;
        if (ns & (MJ_CHUNK - 1)) mj_tf_flush(ln, w1, pr + (ns / MJ_CHUNK) * w1);
        mj_tf_pairwise_cols(pr, ncs, w1);
        float s = pr[nev];
        for (int64_t d = 0; d < nev; d++) oi[d] = pr[d] / s;
        st[0] = mx[r];
        st[1] = s;
    }
    return bad;
}

/* status[bh] = OR of its tasks' flags (per head: ntask consecutive flags); returns the count */
static int64_t mj_tf_mark(const unsigned char *flags, int64_t nbh, int64_t ntask, int32_t *status) {
    int64_t marked = 0;
    for (int64_t bh = 0; bh < nbh; bh++) {
        int any = 0;
        for (int64_t t = 0; t < ntask; t++) any |= flags[bh * ntask + t];
        status[bh] = any;
        marked += any;
    }
    return marked;
}

static void mj_tf_init(mj_tf_att *A, const float *q, const float *k, const float *v, int64_t nb,
                       int64_t nh, int64_t nl, int64_t ns, int64_t ne, int64_t nev,
                       const uint8_t *mask_bool, const float *mask_add, int mask_kind,
                       const int64_t *ms, int causal, float scale, float p, float keep_scale,
                       uint32_t k0, uint32_t k1, uint64_t stream, const mj_crmath_tab *T) {
    memset(A, 0, sizeof *A);
    A->q = q;
    A->k = k;
    A->v = v;
    A->mb = mask_bool;
    A->ma = mask_add;
    A->kind = mask_kind;
    A->causal = causal;
    A->ms0 = ms[0];
    A->ms1 = ms[1];
    A->ms2 = ms[2];
    A->ms3 = ms[3];
    A->scale = scale;
    A->p = p;
    A->keep_scale = keep_scale;
    A->k0 = k0;
    A->k1 = k1;
    A->stream = stream;
    A->nb = nb;
    A->nh = nh;
    A->nl = nl;
    A->ns = ns;
    A->ne = ne;
    A->nev = nev;
    A->T = T;
}

int64_t mj_attention_forward(const float *q, const float *k, const float *v, int64_t nb,
                             int64_t nh, int64_t nl, int64_t ns, int64_t ne, int64_t nev,
                             const uint8_t *mask_bool, const float *mask_add, int mask_kind,
                             const int64_t *mask_strides, int causal, float scale, float p,
                             float keep_scale, uint32_t k0, uint32_t k1, uint64_t stream,
                             int64_t block_k, float *o, float *stats, int32_t *status,
                             const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab;
    mj_tf_att A;
    mj_tf_init(&A, q, k, v, nb, nh, nl, ns, ne, nev, mask_bool, mask_add, mask_kind, mask_strides,
               causal, scale, p, keep_scale, k0, k1, stream, &T);
    int64_t bk = block_k < 1 ? 1 : block_k < ns ? block_k : ns;
    int64_t nqb = (nl + MJ_TF_BQ - 1) / MJ_TF_BQ, nbh = nb * nh, ntask = nbh * nqb;
    int64_t ncs = (ns + MJ_CHUNK - 1) / MJ_CHUNK, w1 = nev + 1;
    size_t floats = (size_t)((ne + MJ_CHUNK - 1) / MJ_CHUNK + MJ_TF_BQ + bk +
                             MJ_TF_BQ * (MJ_LANES + ncs) * w1);
    size_t bytes = floats * sizeof(float) + (size_t)bk;
    unsigned char *flags = calloc((size_t)ntask, 1);
    if (!flags) return -1;
    int failed = 0;
    double work = (double)nbh * (double)nl * (double)ns * (double)(ne + nev);
    #pragma omp parallel if(work >= MJ_PARALLEL_MIN) reduction(|:failed)
    {
        float *buf = malloc(bytes);
        failed |= !buf;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++) {
            if (!buf) continue;
            int64_t bh = t / nqb, i0 = t % nqb * MJ_TF_BQ;
            int64_t i1 = i0 + MJ_TF_BQ < nl ? i0 + MJ_TF_BQ : nl;
            flags[t] = (unsigned char)mj_tf_forward_task(&A, bh, i0, i1, bk, buf, o, stats);
        }
        free(buf);
    }
    int64_t marked = failed ? -1 : mj_tf_mark(flags, nbh, nqb, status);
    free(flags);
    return marked;
}

/* A backward row's forward values: mx_i, S_i from stats, D_i = dot(do_i, o_i); 0 when the
   row is empty (mx_i = -inf). */
static inline int mj_tf_row_info(const mj_tf_att *A, int64_t bh, int64_t i, float *part,
                                 float *mx, float *s, float *dd) {
    const float *st = A->stats + (bh * A->nl + i) * 2;
    *mx = st[0];
    *s = st[1];
    if (*mx == -__builtin_inff()) return 0;
    const float *row = A->d_o + (bh * A->nl + i) * A->nev;
    *dd = mj_tf_fold(row, A->o + (bh * A->nl + i) * A->nev, A->nev, part);
    return 1;
}

/* dS_ij and (p_ij * c_ij) of a taking-part position with score s; *ok as mj_tf_exp. */
static inline float mj_tf_ds(const mj_tf_att *A, int64_t bh, int64_t i, int64_t j, float s,
                             float mx, float big_s, float dd, const float *doi, const float *vj,
                             float *part, float *pc, int *ok) {
    float e = mj_tf_exp(s - mx, A->T, ok);
    float pij = e / big_s;
    float dp = mj_tf_fold(doi, vj, A->nev, part);
    *pc = pij;
    if (A->p > 0.0f) {
        float c = mj_tf_keep(A, bh, i, j);
        float t = pij * c;
        float u = dp * c;
        *pc = t;
        dp = u;
    }
    float u = dp - dd;
    return pij * u;
}

/* dK, dV of keys [j0, j1) of head bh: folds over i ascending, query blocks of bq rows;
   key jj's lanes are 32 x (E + Ev), dK's columns first. Returns 1 if an expf was undecided. */
static int mj_tf_dkdv_task(const mj_tf_att *A, int64_t bh, int64_t j0, int64_t j1, int64_t bq,
                           float *work, float *dk, float *dv) {
    const int64_t ne = A->ne, nev = A->nev, nl = A->nl, w2 = ne + nev, nk = j1 - j0;
    const int64_t ncl = (nl + MJ_CHUNK - 1) / MJ_CHUNK;
    const int64_t pe = ((ne > nev ? ne : nev) + MJ_CHUNK - 1) / MJ_CHUNK;
    const float *qh = A->q + bh * nl * ne, *kh = A->k + bh * A->ns * ne;
    const float *vh = A->v + bh * A->ns * nev, *dh = A->d_o + bh * nl * nev;
    float *part = work, *mx = part + pe, *bs = mx + bq, *dd = bs + bq, *lanes = dd + bq;
    float *parts = lanes + nk * MJ_LANES * w2;
    unsigned char *anyk = (unsigned char *)(parts + nk * ncl * w2), *live = anyk + nk;
    int bad = 0;
    for (int64_t jj = 0; jj < nk; jj++) {
        mj_tf_lanes_reset(lanes + jj * MJ_LANES * w2, w2);
        anyk[jj] = 0;
    }
    for (int64_t i0 = 0; i0 < nl; i0 += bq) {
        int64_t i1 = i0 + bq < nl ? i0 + bq : nl;
        for (int64_t i = i0; i < i1; i++)
            live[i - i0] = (unsigned char)mj_tf_row_info(A, bh, i, part, mx + i - i0, bs + i - i0,
                                                         dd + i - i0);
        for (int64_t jj = 0; jj < nk; jj++) {
            int64_t j = j0 + jj;
            float *ln = lanes + jj * MJ_LANES * w2;
            for (int64_t i = i0; i < i1; i++) {
                int64_t r = i - i0;
                float s;
                if (live[r] && mj_tf_score(A, qh + i * ne, kh, mj_tf_mrow(A, bh, i), i, j, part, &s)) {
                    float pc;
                    int ok;
                    float ds = mj_tf_ds(A, bh, i, j, s, mx[r], bs[r], dd[r], dh + i * nev,
                                        vh + j * nev, part, &pc, &ok);
                    bad |= !ok;
                    float *lane = ln + (i & (MJ_LANES - 1)) * w2;
                    mj_tf_axpy(lane, ds, qh + i * ne, ne);
                    mj_tf_axpy(lane + ne, pc, dh + i * nev, nev);
                    anyk[jj] = 1;
                }
                if ((i & (MJ_CHUNK - 1)) == MJ_CHUNK - 1)
                    mj_tf_flush(ln, w2, parts + (jj * ncl + i / MJ_CHUNK) * w2);
            }
        }
    }
    for (int64_t jj = 0; jj < nk; jj++) {
        int64_t j = j0 + jj;
        float *ln = lanes + jj * MJ_LANES * w2, *pr = parts + jj * ncl * w2;
        if (nl & (MJ_CHUNK - 1)) mj_tf_flush(ln, w2, pr + (nl / MJ_CHUNK) * w2);
        mj_tf_pairwise_cols(pr, ncl, w2);
        float *dkj = dk + (bh * A->ns + j) * ne, *dvj = dv + (bh * A->ns + j) * nev;
        for (int64_t x = 0; x < ne; x++) {
            float f = anyk[jj] ? pr[x] : 0.0f; /* no term: the fold is +0.0 */
            dkj[x] = A->scale * f;
        }
        for (int64_t x = 0; x < nev; x++) dvj[x] = anyk[jj] ? pr[ne + x] : 0.0f;
    }
    return bad;
}

/* dQ of rows [i0, i1) of head bh: folds over j ascending, key blocks of bk keys; row r's
   lanes are 32 x E. Returns 1 if an expf was undecided. */
static int mj_tf_dq_task(const mj_tf_att *A, int64_t bh, int64_t i0, int64_t i1, int64_t bk,
                         float *work, float *dq) {
    const int64_t ne = A->ne, nev = A->nev, ns = A->ns, nr = i1 - i0;
    const int64_t ncs = (ns + MJ_CHUNK - 1) / MJ_CHUNK;
    const int64_t pe = ((ne > nev ? ne : nev) + MJ_CHUNK - 1) / MJ_CHUNK;
    const float *qh = A->q + bh * A->nl * ne, *kh = A->k + bh * ns * ne;
    const float *vh = A->v + bh * ns * nev, *dh = A->d_o + bh * A->nl * nev;
    float *part = work, *mx = part + pe, *bs = mx + nr, *dd = bs + nr, *lanes = dd + nr;
    float *parts = lanes + nr * MJ_LANES * ne;
    unsigned char *anyr = (unsigned char *)(parts + nr * ncs * ne), *live = anyr + nr;
    int bad = 0;
    for (int64_t r = 0; r < nr; r++) {
        live[r] = (unsigned char)mj_tf_row_info(A, bh, i0 + r, part, mx + r, bs + r, dd + r);
        anyr[r] = 0;
        mj_tf_lanes_reset(lanes + r * MJ_LANES * ne, ne);
    }
    for (int64_t j0 = 0; j0 < ns; j0 += bk) {
        int64_t j1 = j0 + bk < ns ? j0 + bk : ns;
        for (int64_t r = 0; r < nr; r++) {
            if (!live[r]) continue; /* an empty row's dq is scale * +0.0 */
            int64_t i = i0 + r, mrow = mj_tf_mrow(A, bh, i);
            float *ln = lanes + r * MJ_LANES * ne;
            for (int64_t j = j0; j < j1; j++) {
                float s;
                if (mj_tf_score(A, qh + i * ne, kh, mrow, i, j, part, &s)) {
                    float pc;
                    int ok;
                    float ds = mj_tf_ds(A, bh, i, j, s, mx[r], bs[r], dd[r], dh + i * nev,
                                        vh + j * nev, part, &pc, &ok);
                    bad |= !ok;
                    mj_tf_axpy(ln + (j & (MJ_LANES - 1)) * ne, ds, kh + j * ne, ne);
                    anyr[r] = 1;
                }
                if ((j & (MJ_CHUNK - 1)) == MJ_CHUNK - 1)
                    mj_tf_flush(ln, ne, parts + (r * ncs + j / MJ_CHUNK) * ne);
            }
        }
    }
    for (int64_t r = 0; r < nr; r++) {
        float *ln = lanes + r * MJ_LANES * ne, *pr = parts + r * ncs * ne;
        float *dqi = dq + (bh * A->nl + i0 + r) * ne;
        if (anyr[r]) {
            if (ns & (MJ_CHUNK - 1)) mj_tf_flush(ln, ne, pr + (ns / MJ_CHUNK) * ne);
            mj_tf_pairwise_cols(pr, ncs, ne);
        }
        for (int64_t x = 0; x < ne; x++) {
            float f = anyr[r] ? pr[x] : 0.0f;
            dqi[x] = A->scale * f;
        }
    }
    return bad;
}

int64_t mj_attention_backward(const float *d_o, const float *q, const float *k, const float *v,
                              const float *o, const float *stats, int64_t nb, int64_t nh,
                              int64_t nl, int64_t ns, int64_t ne, int64_t nev,
                              const uint8_t *mask_bool, const float *mask_add, int mask_kind,
                              const int64_t *mask_strides, int causal, float scale, float p,
                              float keep_scale, uint32_t k0, uint32_t k1, uint64_t stream,
                              int64_t block_q, int64_t block_k, float *dq, float *dk, float *dv,
                              int32_t *status, const mj_crmath_tab *tab) {
    const mj_crmath_tab T = *tab;
    mj_tf_att A;
    mj_tf_init(&A, q, k, v, nb, nh, nl, ns, ne, nev, mask_bool, mask_add, mask_kind, mask_strides,
               causal, scale, p, keep_scale, k0, k1, stream, &T);
    A.d_o = d_o;
    A.o = o;
    A.stats = stats;
    int64_t bq = block_q < 1 ? 1 : block_q < nl ? block_q : nl;
    int64_t bk = block_k < 1 ? 1 : block_k < ns ? block_k : ns;
    int64_t nkb = (ns + bk - 1) / bk, nqb = (nl + bq - 1) / bq, nbh = nb * nh;
    int64_t per = nkb + nqb; /* a head's flags: its key blocks', then its query blocks' */
    int64_t ncl = (nl + MJ_CHUNK - 1) / MJ_CHUNK, ncs = (ns + MJ_CHUNK - 1) / MJ_CHUNK;
    int64_t pe = ((ne > nev ? ne : nev) + MJ_CHUNK - 1) / MJ_CHUNK;
    size_t a_floats = (size_t)(pe + 3 * bq + bk * (MJ_LANES + ncl) * (ne + nev));
    size_t b_floats = (size_t)(pe + 3 * bq + bq * (MJ_LANES + ncs) * ne);
    size_t bytes = (a_floats > b_floats ? a_floats : b_floats) * sizeof(float) +
                   (size_t)(2 * (bk > bq ? bk : bq));
    unsigned char *flags = calloc((size_t)(nbh * per), 1);
    if (!flags) return -1;
    int failed = 0;
    double work = (double)nbh * (double)nl * (double)ns * (double)(ne + nev);
    #pragma omp parallel if(work >= MJ_PARALLEL_MIN) reduction(|:failed)
    {
        float *buf = malloc(bytes);
        failed |= !buf;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < nbh * nkb; t++) {
            if (!buf) continue;
            int64_t bh = t / nkb, j0 = t % nkb * bk, j1 = j0 + bk < ns ? j0 + bk : ns;
            flags[bh * per + t % nkb] = (unsigned char)mj_tf_dkdv_task(&A, bh, j0, j1, bq, buf,
                                                                       dk, dv);
        }
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < nbh * nqb; t++) {
            if (!buf) continue;
            int64_t bh = t / nqb, i0 = t % nqb * bq, i1 = i0 + bq < nl ? i0 + bq : nl;
            flags[bh * per + nkb + t % nqb] = (unsigned char)mj_tf_dq_task(&A, bh, i0, i1, bk, buf,
                                                                           dq);
        }
        free(buf);
    }
    int64_t marked = failed ? -1 : mj_tf_mark(flags, nbh, per, status);
    free(flags);
    return marked;
}
