/* Correctly rounded expf/logf/sinpif/cospif over flat float32 arrays (cffi parses this file).
   The tables and constants travel in mj_crmath_tab, filled from native/crmath.py. */
typedef struct {
    double inv_ln2_32, ln2_32_hi, ln2_32_lo, ln2_hi, ln2_lo, shifter, err, one, two_m23, two_m24;
    double e2, e3, e4, e5, e6, l2, l3, l4, l5, l6, l7, l8;
    double s0, s1, s2, s3, s4, s5, s6, s7, s8, c1, c2, c3, c4, c5, c6, c7, c8, zero, half, minus_one;
    const double *exp2_32, *pow2, *log_inv, *log_hi, *log_lo;
    int64_t pow2_bias, sqrt2_m24, block;
    float exp_huge, exp_tiny, trig_big, trig_inf;
    uint32_t undecided, quiet_bit, default_nan, pos_inf_bits, neg_inf_bits, one_bits;
} mj_crmath_tab;
int64_t mj_expf(const float *x, float *out, int64_t n, const mj_crmath_tab *tab);
int64_t mj_logf(const float *x, float *out, int64_t n, const mj_crmath_tab *tab);
int64_t mj_sinpif(const float *x, float *out, int64_t n, const mj_crmath_tab *tab);
int64_t mj_cospif(const float *x, float *out, int64_t n, const mj_crmath_tab *tab);
/* tanhf/erff (mj_odd, erf = 0 or 1) and GELU (tanh = 0 or 1); constants from native/erf_tanh.py */
typedef struct {
    double tanh_poly_err, tanh_err, erf_poly_err, erf_err0, erf_err1, erf_stop;
    double tanh_poly_end, erf_poly_end, tanh_one, erf_one, two, two_over_sqrt_pi;
    const double *tanh_c, *erf_c;
    float zero32, one32, half32, minus_half32, three32, alpha, beta, kappa, beta_erf, pos_inf32;
} mj_erf_tanh_tab;
int64_t mj_odd(const float *x, float *out, int64_t n, int use_erf, const mj_crmath_tab *tab,
               const mj_erf_tanh_tab *etab);
int64_t mj_gelu(const float *x, float *out, int64_t n, int use_tanh, const mj_crmath_tab *tab,
                const mj_erf_tanh_tab *etab);
int64_t mj_gelu_backward(const float *dy, const float *x, float *dx, int64_t n, int use_tanh,
                         const mj_crmath_tab *tab, const mj_erf_tanh_tab *etab);
