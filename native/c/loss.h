/* Cross-entropy over class indices (cffi parses this file).
   expf/logf come from crmath.c, their tables in mj_crmath_tab (crmath.h). */
int64_t mj_cross_entropy(const float *z, const int64_t *t, int64_t n, int64_t v,
                         int64_t ignore_index, float c1, float c2, float qt, int smoothing, float g,
                         int want_grad, float *grad, float *rows, int32_t *status,
                         const mj_crmath_tab *tab);
