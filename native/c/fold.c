/* The canonical fold tree: 32 lanes x 32 steps per 1024-element chunk, lane start
   -0.0, butterfly 16/8/4/2/1, then the pairwise tree over chunk partials.
   One IEEE operation per statement; built with -ffp-contract=off so no a*b+c is
   fused. Chunks run in parallel (OpenMP) but each partial depends on its chunk
   alone, so the thread count never reaches the bits. */
#define MJ_LANES 32
#define MJ_CHUNK 1024
/* Below this many elements a loop runs on the calling thread: waking a thread pool
   costs more than the work, and idle workers spinning against another runtime's
   (numba's) can hold a small step for milliseconds. Threads never reach the bits. */
#define MJ_PARALLEL_MIN 32768

static void mj_butterfly(float *acc) {
    for (int off = MJ_LANES / 2; off >= 1; off /= 2)
        for (int j = 0; j < off; j++)
            acc[j] = acc[j] + acc[j + off];
}

/* y[k] is a[k] (fold) or the rounded product a[k]*b[k] (dot, sumsq). Inlined
   into both entry points, so each gets a loop without the branch. */
static inline void mj_partials(const float *a, const float *b, int64_t n, float *partials) {
    int64_t nchunks = (n + MJ_CHUNK - 1) / MJ_CHUNK;
    #pragma omp parallel for schedule(static) if(n >= MJ_PARALLEL_MIN)
    for (int64_t c = 0; c < nchunks; c++) {
        float acc[MJ_LANES];
        for (int j = 0; j < MJ_LANES; j++) acc[j] = -0.0f;
        int64_t base = c * MJ_CHUNK;
        if (base + MJ_CHUNK <= n) {
            for (int i = 0; i < MJ_LANES; i++) {
                const float *ra = a + base + (int64_t)i * MJ_LANES;
                if (b) {
                    const float *rb = b + base + (int64_t)i * MJ_LANES;
                    for (int j = 0; j < MJ_LANES; j++) {
                        float p = ra[j] * rb[j];
                        acc[j] = acc[j] + p;
                    }
                } else {
                    for (int j = 0; j < MJ_LANES; j++) acc[j] = acc[j] + ra[j];
                }
            }
        } else { /* the short last chunk: padded slots would add -0.0, so skip them */
            for (int64_t k = base; k < n; k++) {
                float y = a[k];
                if (b) {
                    float p = y * b[k];
                    y = p;
                }
                acc[(k - base) & (MJ_LANES - 1)] = acc[(k - base) & (MJ_LANES - 1)] + y;
            }
        }
        mj_butterfly(acc);
        partials[c] = acc[0];
    }
}

void mj_fold_partials(const float *x, int64_t n, float *partials) {
    mj_partials(x, 0, n, partials);
}

void mj_dot_partials(const float *a, const float *b, int64_t n, float *partials) {
    mj_partials(a, b, n, partials);
}

float mj_pairwise(float *p, int64_t k) {
    while (k > 1) {
        int64_t h = k / 2;
        for (int64_t i = 0; i < h; i++) p[i] = p[2 * i] + p[2 * i + 1];
        if (k % 2 == 1) {
            p[h] = p[k - 1];
            k = h + 1;
        } else {
            k = h;
        }
    }
    return p[0];
}
