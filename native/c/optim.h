/* SGD, Adam/AdamW, the clip and accumulation over flat float32 arrays (cffi parses this file). */
void mj_sgd(float *p, const float *g, float *b, int64_t n, int first, float lr, float momentum,
            float one_minus_damp, float wd, int use_momentum, int use_decay, int nesterov, int maximize);
void mj_adam(float *p, const float *g, float *m, float *v, int64_t n, float beta1, float beta2,
             float eps, float wd, float one_minus_b1, float one_minus_b2, float step_size,
             float sqrt_bc2, float param_decay, int coupled, int decoupled, int maximize);
void mj_scale(float *g, int64_t n, float coef);
void mj_add(const float *a, const float *b, float *out, int64_t n);
int mj_all_finite(const float *x, int64_t n);
void mj_segment_sumsq(const float *x, const int64_t *offsets, int64_t nseg, float *out, float *work);
void mj_clip_coef(const float *sumsqs, int64_t n, float max_norm, float eps, float *work, float *out);
