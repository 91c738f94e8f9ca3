/* The known-answer self-test: operations whose bits flush-to-zero, denormals-are-zero,
   x87 excess precision, FMA contraction or reassociation would change, and two folds
   through the real mj_fold_partials/mj_pairwise, computed on every OpenMP thread.
   The inputs arrive from Python at run time (the compiler cannot fold them) and
   Python compares each thread's results with the oracle's bits (native/c/selftest.py).
   One IEEE operation per statement, as in the kernels. */
#define MJ_SELFTEST_OUT 9

int mj_selftest_width(void) { return MJ_SELFTEST_OUT; }

static void mj_selftest_one(const float *in, const float *seq, int64_t nseq, const float *fold_in,
                            int64_t nfold, float *work, float *out) {
    out[0] = in[0] * in[1];   /* a subnormal product: 0 under flush-to-zero */
    out[1] = in[2] * in[3];   /* a subnormal input scaled to a normal: 0 under denormals-are-zero */
    float big = in[4] * in[5]; /* overflows binary32; an x87 register keeps it finite */
    out[2] = big * in[6];
    float p = in[7] * in[8];  /* rounded, then the sum shows what was dropped */
    out[3] = p + in[9];
    float q = in[10] * in[11]; /* q - c is 0 unless fused into one rounding */
    out[4] = q - in[12];
    float s = in[13] + in[14]; /* (a + b) + c, not a + (b + c) */
    out[5] = s + in[15];
    float acc = -0.0f;         /* a serial sum: vectorizing it reassociates it */
    for (int64_t i = 0; i < nseq; i++) acc = acc + seq[i];
    out[6] = acc;
    int64_t k = (nfold + MJ_CHUNK - 1) / MJ_CHUNK;
    mj_fold_partials(fold_in, nfold, work);
    out[7] = mj_pairwise(work, k);
    mj_fold_partials(fold_in + nfold, nfold, work);
    out[8] = mj_pairwise(work, k);
}

/* work: nthreads * ceil(nfold / 1024) floats; out: nthreads * MJ_SELFTEST_OUT floats.
   Returns how many threads ran (each wrote its own slice). */
int mj_selftest(const float *in, const float *seq, int64_t nseq, const float *fold_in, int64_t nfold,
                float *work, float *out, int nthreads) {
    int64_t k = (nfold + MJ_CHUNK - 1) / MJ_CHUNK;
    int ran = 1;
#ifdef _OPENMP
    #pragma omp parallel num_threads(nthreads)
    {
        int t = omp_get_thread_num();
        if (t == 0) ran = omp_get_num_threads();
        mj_selftest_one(in, seq, nseq, fold_in, nfold, work + t * k, out + t * MJ_SELFTEST_OUT);
    }
#else
    (void)nthreads;
    mj_selftest_one(in, seq, nseq, fold_in, nfold, work, out);
#endif
    return ran;
}
