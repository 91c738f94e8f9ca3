/* Philox4x32-10 blocks, uniform draws and dropout (declarations only: cffi parses this file). */
void mj_philox_blocks(const uint32_t *counters, int64_t n, uint32_t k0, uint32_t k1, uint32_t *out);
void mj_uniform(uint32_t k0, uint32_t k1, uint64_t stream, uint64_t offset, float low, float high,
                float *out, int64_t n);
void mj_dropout(const float *x, uint32_t k0, uint32_t k1, uint64_t stream, uint64_t offset, float p,
                float scale, float *y, int64_t n);
int64_t mj_normal(uint32_t k0, uint32_t k1, uint64_t stream, uint64_t offset, float mean,
                  float std, float *out, int64_t n, const mj_crmath_tab *tab);
