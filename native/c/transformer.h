/* The transformer family: softmax / log_softmax rows, layer_norm rows and the fused
   scaled-dot-product attention, forward and backward (cffi parses this file). expf/logf are
   crmath.c's element functions with their tables in mj_crmath_tab (crmath.h). Functions
   returning int64_t give the number of marked rows / heads, or -1 when a work buffer could
   not be allocated. */
int64_t mj_softmax_rows(const float *x, int64_t m, int64_t n, int log, float *y, int32_t *status,
                        const mj_crmath_tab *tab);
int64_t mj_softmax_backward_rows(const float *dy, const float *y, int64_t m, int64_t n, int log,
                                 float *dx, int32_t *status, const mj_crmath_tab *tab);
int64_t mj_layer_norm_rows(const float *x, int64_t m, int64_t d, const float *w, int has_w,
                           const float *b, int has_b, float eps, float *y);
int64_t mj_layer_norm_backward_rows(const float *dy, const float *x, int64_t m, int64_t d,
                                    const float *w, int has_w, float eps, float *dx, float *h);
int64_t mj_attention_forward(const float *q, const float *k, const float *v, int64_t nb,
                             int64_t nh, int64_t nl, int64_t ns, int64_t ne, int64_t nev,
                             const uint8_t *mask_bool, const float *mask_add, int mask_kind,
                             const int64_t *mask_strides, int causal, float scale, float p,
                             float keep_scale, uint32_t k0, uint32_t k1, uint64_t stream,
                             int64_t block_k, float *o, float *stats, int32_t *status,
                             const mj_crmath_tab *tab);
int64_t mj_attention_backward(const float *d_o, const float *q, const float *k, const float *v,
                              const float *o, const float *stats, int64_t nb, int64_t nh,
                              int64_t nl, int64_t ns, int64_t ne, int64_t nev,
                              const uint8_t *mask_bool, const float *mask_add, int mask_kind,
                              const int64_t *mask_strides, int causal, float scale, float p,
                              float keep_scale, uint32_t k0, uint32_t k1, uint64_t stream,
                              int64_t block_q, int64_t block_k, float *dq, float *dk, float *dv,
                              int32_t *status, const mj_crmath_tab *tab);
