/* Cross-entropy over class indices (cffi parses this file).
   The expf/logf tables and constants travel in mj_loss_tab, filled from native/crmath.py. */
typedef struct {
    double inv_ln2_32, ln2_32_hi, ln2_32_lo, ln2_hi, ln2_lo, shifter, err, one, two_m23, two_m24;
    double e2, e3, e4, e5, e6, l2, l3, l4, l5, l6, l7, l8;
    const double *exp2_32, *pow2, *log_inv, *log_hi, *log_lo;
    int64_t pow2_bias, sqrt2_m24;
    float exp_tiny;
} mj_loss_tab;
int64_t mj_cross_entropy(const float *z, const int64_t *t, int64_t n, int64_t v,
                         int64_t ignore_index, float c1, float c2, float qt, int smoothing, float g,
                         int want_grad, float *grad, float *rows, int32_t *status,
                         const mj_loss_tab *tab);
