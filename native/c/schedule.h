/* Learning-rate schedule values by the fast route of contracts/schedule.md clause 6
   (cffi parses this file). The coefficients and constants travel in mj_sched_tab,
   filled from native/schedule.py. */
typedef struct {
    double sin_c[9], cos_c[10];
    double err, zero;
    int64_t block, constant, linear, cosine;
    uint32_t undecided;
} mj_sched_tab;
int64_t mj_schedule(int64_t kind, float p, float m, int64_t w, int64_t total, int64_t t0,
                    float *out, int64_t n, const mj_sched_tab *tab);
