/* SGD, Adam/AdamW, the clip and accumulation: the C spelling of oracles/optim.py.
   One IEEE operation per statement, in the oracle's order; -ffp-contract=off keeps
   every product rounded before it is added. Elementwise loops are parallel over
   elements (no reductions); the clip's sums are the fold tree of fold.c.

   The step kernels take each operand as a table of addresses, one per tensor, and
   the tensors' offsets: separate arrays are updated where they lie, and a flat
   array is a table of one. The work is split by element ranges (MJ_TASK elements
   per task, across tensor boundaries), never by tensor, so one big tensor spreads
   over every thread. Every step reads a gradient as g * coef (grad_scale: the
   clip's or the loss scaler's factor, 1 when there is none, x * 1 being x), before
   maximize and weight decay; with `write_back` the scaled value is also stored into
   g, otherwise g is only read.

   The steps with cast twins (mj_sgd_twins_table, mj_adam_twins_table) take one more
   table, of uint16 twin addresses, and each tensor's kind (0 none, 1 bfloat16, 2 float16):
   right after an element's new p is stored, its pattern is rounded to the twin's type by
   mixed.c's mj_bf16_of / mj_f16_of (mojolike.cast's rounding). The element loops take the
   kind as a constant, so the steps without twins (kind 0) compile to the loops they were. */
#define MJ_TASK 16384

/* mixed.c's casts (defined later in this compilation unit: the families' sources are
   concatenated in FAMILIES order) */
static inline uint16_t mj_bf16_of(uint32_t u);
static inline uint16_t mj_f16_of(uint32_t u);

/* The twin pattern of the master value x: bfloat16 (kind 1) or float16 (kind 2). */
static inline __attribute__((always_inline)) uint16_t mj_twin_of(float x, int kind) {
    union { float f; uint32_t u; } bits = { x };
    return kind == 1 ? mj_bf16_of(bits.u) : mj_f16_of(bits.u);
}

#define MJ_AT16(table, t) ((uint16_t *)(intptr_t)(table)[t])

#define MJ_AT(table, t) ((float *)(intptr_t)(table)[t])

/* The tensor holding element lo: the last t with offsets[t] <= lo. */
static int64_t mj_tensor_of(const int64_t *offsets, int64_t nseg, int64_t lo) {
    int64_t a = 0, b = nseg - 1;
    while (a < b) {
        int64_t mid = (a + b + 1) / 2;
        if (offsets[mid] <= lo) a = mid; else b = mid - 1;
    }
    return a;
}

/* For each task, each run [i0, i1) of local indices into tensor t: BODY sees t, i0, i1. */
#define MJ_FOR_RUNS(offsets, nseg, BODY)                                            \
    do {                                                                            \
        int64_t n_ = (offsets)[nseg];                                               \
        int64_t ntasks_ = (n_ + MJ_TASK - 1) / MJ_TASK;                             \
        _Pragma("omp parallel for schedule(static) if(n_ >= MJ_PARALLEL_MIN)")      \
        for (int64_t task_ = 0; task_ < ntasks_; task_++) {                         \
            int64_t lo_ = task_ * MJ_TASK;                                          \
            int64_t hi_ = lo_ + MJ_TASK < n_ ? lo_ + MJ_TASK : n_;                  \
            int64_t t = mj_tensor_of(offsets, nseg, lo_);                           \
            for (; lo_ < hi_; t++) {                                                \
                int64_t end_ = (offsets)[t + 1] < hi_ ? (offsets)[t + 1] : hi_;     \
                int64_t i0 = lo_ - (offsets)[t], i1 = end_ - (offsets)[t];          \
                BODY;                                                               \
                lo_ = end_;                                                         \
            }                                                                       \
        }                                                                           \
    } while (0)

/* The element loops, inlined with `write_back` a constant so that each copy is one plain
   loop the compiler vectorizes. */
static inline __attribute__((always_inline)) void
mj_sgd_run(float *restrict p, float *restrict g, float *restrict b, int64_t i0, int64_t i1,
           int first, float lr, float momentum, float one_minus_damp, float wd, int use_momentum,
           int use_decay, int nesterov, int maximize, float coef, int write_back,
           uint16_t *restrict tw, int kind) {
    for (int64_t i = i0; i < i1; i++) {
        float gi = g[i] * coef;
        if (write_back) g[i] = gi;
        if (maximize) gi = -gi;
        if (use_decay) {
            float t = wd * p[i];
            gi = gi + t;
        }
        if (use_momentum) { /* without momentum b is a 1-element placeholder, never touched */
            float bi;
            if (first) {
                bi = gi;
            } else {
                float t1 = b[i] * momentum;
                float t2 = one_minus_damp * gi;
                bi = t1 + t2;
            }
            b[i] = bi;
            if (nesterov) {
                float t = momentum * bi;
                gi = gi + t;
            } else {
                gi = bi;
            }
        }
        float u = lr * gi;
        float pn = p[i] - u;
        p[i] = pn;
        if (kind) tw[i] = mj_twin_of(pn, kind);
    }
}

static inline __attribute__((always_inline)) void
mj_adam_run(float *restrict p, float *restrict g, float *restrict m, float *restrict v, int64_t i0,
            int64_t i1, float beta1, float beta2, float eps, float wd, float one_minus_b1,
            float one_minus_b2, float step_size, float sqrt_bc2, float param_decay, int coupled,
            int decoupled, int maximize, float coef, int write_back, uint16_t *restrict tw,
            int kind) {
    for (int64_t i = i0; i < i1; i++) {
        float gi = g[i] * coef;
        if (write_back) g[i] = gi;
        if (maximize) gi = -gi;
        float pi = p[i];
        if (decoupled) pi = pi * param_decay;
        if (coupled) {
            float t = wd * pi;
            gi = gi + t;
        }
        float m1 = beta1 * m[i];
        float m2 = one_minus_b1 * gi;
        float mi = m1 + m2;
        float v1 = beta2 * v[i];
        float gg = gi * gi;
        float v2 = one_minus_b2 * gg;
        float vi = v1 + v2;
        float s = __builtin_sqrtf(vi); /* IEEE sqrt: with -fno-math-errno an instruction, not libm */
        float q = s / sqrt_bc2;
        float d = q + eps;
        float r = mi / d;
        float u = step_size * r;
        float pn = pi - u;
        p[i] = pn;
        if (kind) tw[i] = mj_twin_of(pn, kind);
        m[i] = mi;
        v[i] = vi;
    }
}

void mj_sgd_table(const int64_t *P, const int64_t *G, const int64_t *B, const int64_t *offsets,
                  int64_t nseg, int first, float lr, float momentum, float one_minus_damp, float wd,
                  int use_momentum, int use_decay, int nesterov, int maximize, float coef,
                  int write_back) {
    MJ_FOR_RUNS(offsets, nseg, {
        if (write_back)
            mj_sgd_run(MJ_AT(P, t), MJ_AT(G, t), MJ_AT(B, t), i0, i1, first, lr, momentum,
                       one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize, coef, 1,
                       (uint16_t *)0, 0);
        else
            mj_sgd_run(MJ_AT(P, t), MJ_AT(G, t), MJ_AT(B, t), i0, i1, first, lr, momentum,
                       one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize, coef, 0,
                       (uint16_t *)0, 0);
    });
}

void mj_adam_table(const int64_t *P, const int64_t *G, const int64_t *M, const int64_t *V,
                   const int64_t *offsets, int64_t nseg, float beta1, float beta2, float eps,
                   float wd, float one_minus_b1, float one_minus_b2, float step_size, float sqrt_bc2,
                   float param_decay, int coupled, int decoupled, int maximize, float coef,
                   int write_back) {
    MJ_FOR_RUNS(offsets, nseg, {
        if (write_back)
            mj_adam_run(MJ_AT(P, t), MJ_AT(G, t), MJ_AT(M, t), MJ_AT(V, t), i0, i1, beta1, beta2,
                        eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2, param_decay,
                        coupled, decoupled, maximize, coef, 1, (uint16_t *)0, 0);
        else
            mj_adam_run(MJ_AT(P, t), MJ_AT(G, t), MJ_AT(M, t), MJ_AT(V, t), i0, i1, beta1, beta2,
                        eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2, param_decay,
                        coupled, decoupled, maximize, coef, 0, (uint16_t *)0, 0);
    });
}

/* One call of the run with write_back and the twin's kind as constants. */
#define MJ_SGD_TW(WB, KIND)                                                                   \
    mj_sgd_run(MJ_AT(P, t), MJ_AT(G, t), MJ_AT(B, t), i0, i1, first, lr, momentum,             \
               one_minus_damp, wd, use_momentum, use_decay, nesterov, maximize, coef, WB,      \
               MJ_AT16(TW, t), KIND)

void mj_sgd_twins_table(const int64_t *P, const int64_t *G, const int64_t *B, const int64_t *TW,
                        const int64_t *kinds, const int64_t *offsets, int64_t nseg, int first,
                        float lr, float momentum, float one_minus_damp, float wd,
                        int use_momentum, int use_decay, int nesterov, int maximize, float coef,
                        int write_back) {
    MJ_FOR_RUNS(offsets, nseg, {
        int64_t kind = kinds[t];
        if (write_back) {
            if (kind == 1) MJ_SGD_TW(1, 1);
            else if (kind == 2) MJ_SGD_TW(1, 2);
            else MJ_SGD_TW(1, 0);
        } else {
            if (kind == 1) MJ_SGD_TW(0, 1);
            else if (kind == 2) MJ_SGD_TW(0, 2);
            else MJ_SGD_TW(0, 0);
        }
    });
}

#define MJ_ADAM_TW(WB, KIND)                                                                  \
    mj_adam_run(MJ_AT(P, t), MJ_AT(G, t), MJ_AT(M, t), MJ_AT(V, t), i0, i1, beta1, beta2, eps,  \
                wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2, param_decay, coupled,      \
                decoupled, maximize, coef, WB, MJ_AT16(TW, t), KIND)

void mj_adam_twins_table(const int64_t *P, const int64_t *G, const int64_t *M, const int64_t *V,
                         const int64_t *TW, const int64_t *kinds, const int64_t *offsets,
                         int64_t nseg, float beta1, float beta2, float eps, float wd,
                         float one_minus_b1, float one_minus_b2, float step_size, float sqrt_bc2,
                         float param_decay, int coupled, int decoupled, int maximize, float coef,
                         int write_back) {
    MJ_FOR_RUNS(offsets, nseg, {
        int64_t kind = kinds[t];
        if (write_back) {
            if (kind == 1) MJ_ADAM_TW(1, 1);
            else if (kind == 2) MJ_ADAM_TW(1, 2);
            else MJ_ADAM_TW(1, 0);
        } else {
            if (kind == 1) MJ_ADAM_TW(0, 1);
            else if (kind == 2) MJ_ADAM_TW(0, 2);
            else MJ_ADAM_TW(0, 0);
        }
    });
}

void mj_scale_table(const int64_t *G, const int64_t *offsets, int64_t nseg, float coef) {
    MJ_FOR_RUNS(offsets, nseg, {
        float *restrict g = MJ_AT(G, t);
        for (int64_t i = i0; i < i1; i++) g[i] = g[i] * coef;
    });
}

/* x - x is +0 for finite x and NaN for inf and NaN, and a NaN stays NaN through every later
   add: 64 lane sums per task (elementwise, so the compiler vectorizes them; four independent
   vector chains, so the adds do not wait on one another's latency) say whether the task saw
   a non-finite value. */
int mj_all_finite_table(const int64_t *X, const int64_t *offsets, int64_t nseg) {
    int bad = 0;
    int64_t n = offsets[nseg];
    int64_t ntasks = (n + MJ_TASK - 1) / MJ_TASK;
    /* an integer OR: its order cannot matter */
    #pragma omp parallel for schedule(static) reduction(|:bad) if(n >= MJ_PARALLEL_MIN)
    for (int64_t task = 0; task < ntasks; task++) {
        float acc[64] = {0.0f};
        int64_t lo = task * MJ_TASK, hi = lo + MJ_TASK < n ? lo + MJ_TASK : n;
        for (int64_t t = mj_tensor_of(offsets, nseg, lo); lo < hi; t++) {
            int64_t end = offsets[t + 1] < hi ? offsets[t + 1] : hi;
            const float *x = MJ_AT(X, t);
            int64_t i = lo - offsets[t], stop = end - offsets[t];
            for (; i + 64 <= stop; i += 64)
                for (int j = 0; j < 64; j++) {
                    float d = x[i + j] - x[i + j];
                    acc[j] = acc[j] + d;
                }
            for (; i + 16 <= stop; i += 16)
                for (int j = 0; j < 16; j++) {
                    float d = x[i + j] - x[i + j];
                    acc[j] = acc[j] + d;
                }
            for (; i < stop; i++) {
                float d = x[i] - x[i];
                acc[0] = acc[0] + d;
            }
            lo = end;
        }
        for (int j = 0; j < 64; j++) bad |= acc[j] != acc[j];
    }
    return !bad;
}

void mj_add(const float *a, const float *b, float *out, int64_t n) {
    #pragma omp parallel for schedule(static) if(n >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* out[s] = sumsq of segment s (nseg segments at X[s], offsets[s+1] - offsets[s] floats each).
   starts[s] = the index of segment s's first chunk (starts[nseg] = all chunks), partials holds
   them all. One parallel loop over groups of whole chunks, which fold.c folds exactly as it
   folds the whole segment (a chunk's partial depends on that chunk alone); a group is below
   MJ_PARALLEL_MIN, so mj_dot_partials runs it on the calling thread. */
#define MJ_SEG_GROUP 8

/* The floats of segment s that its chunks [c, stop) cover: *x is the first, the count returned. */
static inline int64_t mj_segment_span(const int64_t *X, const int64_t *offsets,
                                      const int64_t *starts, int64_t s, int64_t c, int64_t stop,
                                      const float **x) {
    int64_t first = (c - starts[s]) * MJ_CHUNK;
    int64_t len = offsets[s + 1] - offsets[s];
    int64_t last = (stop - starts[s]) * MJ_CHUNK < len ? (stop - starts[s]) * MJ_CHUNK : len;
    *x = MJ_AT(X, s) + first;
    return last - first;
}
void mj_segment_sumsq_table(const int64_t *X, const int64_t *offsets, const int64_t *starts,
                            int64_t nseg, float *partials, float *out) {
    int64_t nchunks = starts[nseg];
    int64_t ngroups = (nchunks + MJ_SEG_GROUP - 1) / MJ_SEG_GROUP;
    #pragma omp parallel for schedule(static) if(offsets[nseg] >= MJ_PARALLEL_MIN)
    for (int64_t grp = 0; grp < ngroups; grp++) {
        int64_t c = grp * MJ_SEG_GROUP;
        int64_t c_end = c + MJ_SEG_GROUP < nchunks ? c + MJ_SEG_GROUP : nchunks;
        for (int64_t s = mj_tensor_of(starts, nseg, c); c < c_end; s++) {
            int64_t stop = starts[s + 1] < c_end ? starts[s + 1] : c_end;
            if (stop > c) {
                const float *x;
                int64_t n = mj_segment_span(X, offsets, starts, s, c, stop, &x);
                mj_dot_partials(x, x, n, partials + c);
            }
            c = stop;
        }
    }
    for (int64_t s = 0; s < nseg; s++)
        out[s] = mj_pairwise(partials + starts[s], starts[s + 1] - starts[s]);
}

/* The fold tree's partials of x[0..n) (n <= MJ_SEG_GROUP chunks: called on one thread) and of
   the rounded squares x[k]*x[k], from one read: each equal to fold.c's fold and dot partials. */
static void mj_fold_sumsq_partials(const float *x, int64_t n, float *partials, float *partials2) {
    int64_t nchunks = (n + MJ_CHUNK - 1) / MJ_CHUNK;
    for (int64_t c = 0; c < nchunks; c++) {
        float acc[MJ_LANES], acc2[MJ_LANES];
        for (int j = 0; j < MJ_LANES; j++) {
            acc[j] = -0.0f;
            acc2[j] = -0.0f;
        }
        int64_t base = c * MJ_CHUNK;
        if (base + MJ_CHUNK <= n) {
            for (int i = 0; i < MJ_LANES; i++) {
                const float *r = x + base + (int64_t)i * MJ_LANES;
                for (int j = 0; j < MJ_LANES; j++) {
                    float y = r[j];
                    float q = y * y;
                    acc[j] = acc[j] + y;
                    acc2[j] = acc2[j] + q;
                }
            }
        } else { /* the short last chunk: padded slots would add -0.0, so skip them */
            for (int64_t k = base; k < n; k++) {
                float y = x[k];
                float q = y * y;
                acc[(k - base) & (MJ_LANES - 1)] = acc[(k - base) & (MJ_LANES - 1)] + y;
                acc2[(k - base) & (MJ_LANES - 1)] = acc2[(k - base) & (MJ_LANES - 1)] + q;
            }
        }
        mj_butterfly(acc);
        mj_butterfly(acc2);
        partials[c] = acc[0];
        partials2[c] = acc2[0];
    }
}

/* sums[s] = fold of segment s and, with `squares`, sumsqs[s] = its sumsq from the same read
   (without, partials2 and sumsqs are not touched). Laid out as mj_segment_sumsq_table; an
   empty segment's sums are -0.0, the identity the tree pads with. */
void mj_segment_sums_table(const int64_t *X, const int64_t *offsets, const int64_t *starts,
                           int64_t nseg, int squares, float *partials, float *partials2,
                           float *sums, float *sumsqs) {
    int64_t nchunks = starts[nseg];
    int64_t ngroups = (nchunks + MJ_SEG_GROUP - 1) / MJ_SEG_GROUP;
    #pragma omp parallel for schedule(static) if(offsets[nseg] >= MJ_PARALLEL_MIN)
    for (int64_t grp = 0; grp < ngroups; grp++) {
        int64_t c = grp * MJ_SEG_GROUP;
        int64_t c_end = c + MJ_SEG_GROUP < nchunks ? c + MJ_SEG_GROUP : nchunks;
        for (int64_t s = mj_tensor_of(starts, nseg, c); c < c_end; s++) {
            int64_t stop = starts[s + 1] < c_end ? starts[s + 1] : c_end;
            if (stop > c) {
                const float *x;
                int64_t n = mj_segment_span(X, offsets, starts, s, c, stop, &x);
                if (squares)
                    mj_fold_sumsq_partials(x, n, partials + c, partials2 + c);
                else
                    mj_fold_partials(x, n, partials + c);
            }
            c = stop;
        }
    }
    for (int64_t s = 0; s < nseg; s++) {
        int64_t k = starts[s + 1] - starts[s];
        sums[s] = k ? mj_pairwise(partials + starts[s], k) : -0.0f;
        if (squares) sumsqs[s] = k ? mj_pairwise(partials2 + starts[s], k) : -0.0f;
    }
}

/* work: n + ceil(n/1024) floats; out[0] = total norm, out[1] = clip coefficient */
void mj_clip_coef(const float *sumsqs, int64_t n, float max_norm, float eps, float *work, float *out) {
    float *sq = work, *partials = work + n;
    for (int64_t j = 0; j < n; j++) {
        float norm = __builtin_sqrtf(sumsqs[j]);
        sq[j] = norm * norm;
    }
    mj_fold_partials(sq, n, partials);
    float total = __builtin_sqrtf(mj_pairwise(partials, (n + MJ_CHUNK - 1) / MJ_CHUNK));
    float den = total + eps;
    float coef = max_norm / den;
    out[0] = total;
    out[1] = coef > 1.0f ? 1.0f : coef;
}
