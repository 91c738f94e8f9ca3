/* SGD, Adam/AdamW, the clip and accumulation (cffi parses this file). Tables hold one
   float32 address per tensor (TW: a uint16 twin's; kinds: 0 none, 1 bfloat16, 2 float16);
   offsets[t] is tensor t's first element (offsets[nseg] = n). */
void mj_sgd_table(const int64_t *P, const int64_t *G, const int64_t *B, const int64_t *offsets,
                  int64_t nseg, int first, float lr, float momentum, float one_minus_damp, float wd,
                  int use_momentum, int use_decay, int nesterov, int maximize, float coef,
                  int write_back);
void mj_adam_table(const int64_t *P, const int64_t *G, const int64_t *M, const int64_t *V,
                   const int64_t *offsets, int64_t nseg, float beta1, float beta2, float eps,
                   float wd, float one_minus_b1, float one_minus_b2, float step_size, float sqrt_bc2,
                   float param_decay, int coupled, int decoupled, int maximize, float coef,
                   int write_back);
void mj_sgd_twins_table(const int64_t *P, const int64_t *G, const int64_t *B, const int64_t *TW,
                        const int64_t *kinds, const int64_t *offsets, int64_t nseg, int first,
                        float lr, float momentum, float one_minus_damp, float wd,
                        int use_momentum, int use_decay, int nesterov, int maximize, float coef,
                        int write_back);
void mj_adam_twins_table(const int64_t *P, const int64_t *G, const int64_t *M, const int64_t *V,
                         const int64_t *TW, const int64_t *kinds, const int64_t *offsets,
                         int64_t nseg, float beta1, float beta2, float eps, float wd,
                         float one_minus_b1, float one_minus_b2, float step_size, float sqrt_bc2,
                         float param_decay, int coupled, int decoupled, int maximize, float coef,
                         int write_back);
void mj_scale_table(const int64_t *G, const int64_t *offsets, int64_t nseg, float coef);
int mj_all_finite_table(const int64_t *X, const int64_t *offsets, int64_t nseg);
void mj_add(const float *a, const float *b, float *out, int64_t n);
void mj_segment_sumsq_table(const int64_t *X, const int64_t *offsets, const int64_t *starts,
                            int64_t nseg, float *partials, float *out);
void mj_segment_sums_table(const int64_t *X, const int64_t *offsets, const int64_t *starts,
                           int64_t nseg, int squares, float *partials, float *partials2,
                           float *sums, float *sumsqs);
void mj_clip_coef(const float *sumsqs, int64_t n, float max_norm, float eps, float *work, float *out);
