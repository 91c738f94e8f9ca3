/* fold, sumsq, dot over float32 (declarations only: cffi parses this file). */
void mj_fold_partials(const float *x, int64_t n, float *partials);
void mj_dot_partials(const float *a, const float *b, int64_t n, float *partials);
float mj_pairwise(float *partials, int64_t k);
