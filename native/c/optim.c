/* SGD, Adam/AdamW, the clip and accumulation: the C spelling of oracles/optim.py.
   One IEEE operation per statement, in the oracle's order; -ffp-contract=off keeps
   every product rounded before it is added. Elementwise loops are parallel over
   elements (no reductions); the clip's sums are the fold tree of fold.c. */

void mj_sgd(float *p, const float *g, float *b, int64_t n, int first, float lr, float momentum,
            float one_minus_damp, float wd, int use_momentum, int use_decay, int nesterov, int maximize) {
    #pragma omp parallel for schedule(static) if(n >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float gi = maximize ? -g[i] : g[i];
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
        p[i] = p[i] - u;
    }
}

void mj_adam(float *p, const float *g, float *m, float *v, int64_t n, float beta1, float beta2,
             float eps, float wd, float one_minus_b1, float one_minus_b2, float step_size,
             float sqrt_bc2, float param_decay, int coupled, int decoupled, int maximize) {
    #pragma omp parallel for schedule(static) if(n >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float gi = maximize ? -g[i] : g[i];
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
        p[i] = pi - u;
        m[i] = mi;
        v[i] = vi;
    }
}

void mj_scale(float *g, int64_t n, float coef) {
    #pragma omp parallel for schedule(static) if(n >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) g[i] = g[i] * coef;
}

void mj_add(const float *a, const float *b, float *out, int64_t n) {
    #pragma omp parallel for schedule(static) if(n >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

int mj_all_finite(const float *x, int64_t n) {
    int bad = 0;
    /* an integer OR: its order cannot matter */
    #pragma omp parallel for schedule(static) reduction(|:bad) if(n >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - x[i]; /* NaN exactly when x[i] is inf or NaN */
        bad |= d != d;
    }
    return !bad;
}

/* work: at least ceil(len/1024) floats for the longest segment */
void mj_segment_sumsq(const float *x, const int64_t *offsets, int64_t nseg, float *out, float *work) {
    for (int64_t s = 0; s < nseg; s++) {
        int64_t lo = offsets[s], len = offsets[s + 1] - offsets[s];
        mj_dot_partials(x + lo, x + lo, len, work);
        out[s] = mj_pairwise(work, (len + MJ_CHUNK - 1) / MJ_CHUNK);
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
