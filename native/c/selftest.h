/* The known-answer self-test of a loaded module (declarations only: cffi parses this file). */
int mj_selftest_width(void);
int mj_selftest(const float *in, const float *seq, int64_t nseq, const float *fold_in, int64_t nfold,
                float *work, float *out, int nthreads);
