/* Learning-rate schedule values: the C spelling of native/schedule.py's pieces
   (warmup_ve, linear_ve, sin_ve, cos_ve, decide). Binary64 + - * / only, one IEEE
   operation per statement, in the same order (built with -ffp-contract=off: no
   product is fused into an add), then the rounding test: v - E and v + E must round
   to the same binary32 value, else the step gets the UNDECIDED pattern and is
   counted. The polynomial coefficients and every constant come from Python in
   mj_sched_tab; none is written here. The integers T - t, T - W, t - W (all at most
   2^40) are formed as integers and converted exactly.
   Blocks of steps run in parallel (OpenMP); each step depends on its own t alone
   and the undecided count is an integer sum, so threads never reach the bits. */
#include <string.h>

/* The same definition as in schedule.h (cffi checks every field against this one). */
typedef struct {
    double sin_c[9], cos_c[10];
    double err, zero;
    int64_t block, constant, linear, cosine;
    uint32_t undecided;
} mj_sched_tab;

typedef struct { double v, e; } mj_sched_ve;

/* warmup, 1 <= t <= W: v = (P t) / W; td = t and wd = W, converted exactly */
static inline mj_sched_ve mj_sched_warmup(float p, double td, double wd, const mj_sched_tab *S) {
    mj_sched_ve r;
    double v = (double)p * td; /* exact for t < 2^29 (24 + 29 bits) */
    v = v / wd;
    r.v = v;
    r.e = v * S->err; /* exact */
    return r;
}

/* M + (P - M) g and its bound 2^-44 (|M| + |D g|) */
static inline mj_sched_ve mj_sched_decay(float p, float m, double g, const mj_sched_tab *S) {
    mj_sched_ve r;
    double md = (double)m;
    double d = (double)p - md;
    double dg = d * g;
    r.v = md + dg;
    double am = md < S->zero ? -md : md;
    double adg = dg < S->zero ? -dg : dg;
    double e = am + adg;
    r.e = e * S->err; /* exact */
    return r;
}

/* The decay pieces take num and den, the integers of their quotient converted exactly:
   linear and sine num = T - t, cosine num = t - W; den = T - W. */

/* linear decay, W < t < T: r = (T - t) / (T - W) */
static inline mj_sched_ve mj_sched_linear(float p, float m, double num, double den,
                                          const mj_sched_tab *S) {
    double r = num / den;
    return mj_sched_decay(p, m, r, S);
}

/* cosine decay with 2 (T - t) <= T - W: s = S(u), u = (T - t) / (T - W) */
static inline mj_sched_ve mj_sched_sin(float p, float m, double num, double den,
                                       const mj_sched_tab *S) {
    double u = num / den;
    double u2 = u * u;
    const int top = (int)(sizeof S->sin_c / sizeof S->sin_c[0]) - 1;
    double h = S->sin_c[top];
    for (int k = top - 1; k >= 0; k--) {
        h = u2 * h;
        h = h + S->sin_c[k];
    }
    double s = u * h;
    double f = s * s;
    return mj_sched_decay(p, m, f, S);
}

/* cosine decay with 2 (T - t) > T - W: s = C(w), w = (t - W) / (T - W) */
static inline mj_sched_ve mj_sched_cos(float p, float m, double num, double den,
                                       const mj_sched_tab *S) {
    double x = num / den;
    double x2 = x * x;
    const int top = (int)(sizeof S->cos_c / sizeof S->cos_c[0]) - 1;
    double h = S->cos_c[top];
    for (int k = top - 1; k >= 0; k--) {
        h = x2 * h;
        h = h + S->cos_c[k];
    }
    double f = h * h;
    return mj_sched_decay(p, m, f, S);
}

static inline float mj_sched_decide(mj_sched_ve r, int *ok) {
    double lo = r.v - r.e;
    double hi = r.v + r.e;
    float a = (float)lo;
    float b = (float)hi;
    *ok = a == b;
    return a;
}

/* the value at step t, by the piece its position picks (native/schedule.py's schedule_elem) */
static inline float mj_sched_elem(int64_t kind, float p, float m, int64_t w, int64_t total,
                                  int64_t t, const mj_sched_tab *S, int *ok) {
    mj_sched_ve r;
    if (t <= w) {
        r = mj_sched_warmup(p, (double)t, (double)w, S);
    } else if (kind == S->constant) {
        *ok = 1;
        return p;
    } else if (t >= total) {
        *ok = 1;
        return m;
    } else if (kind == S->linear) {
        r = mj_sched_linear(p, m, (double)(total - t), (double)(total - w), S);
    } else if (2 * (total - t) <= total - w) {
        r = mj_sched_sin(p, m, (double)(total - t), (double)(total - w), S);
    } else {
        r = mj_sched_cos(p, m, (double)(t - w), (double)(total - w), S);
    }
    return mj_sched_decide(r, ok);
}

static inline int64_t mj_sched_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t mj_sched_max(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t mj_schedule(int64_t kind, float p, float m, int64_t w, int64_t total, int64_t t0,
                    float *out, int64_t n, const mj_sched_tab *tab) {
    const mj_sched_tab S = *tab; /* a private copy: stores to out cannot alias it */
    int64_t nblocks = (n + S.block - 1) / S.block;
    int64_t undecided = 0;
    /* one block (lr_at's unit) runs on the calling thread: no team per block */
    #pragma omp parallel for schedule(static) reduction(+:undecided) if(nblocks > 1)
    for (int64_t c = 0; c < nblocks; c++) {
        int64_t lo = t0 + c * S.block; /* the steps of this block: [lo, hi) */
        int64_t hi = t0 + mj_sched_min(c * S.block + S.block, n);
        /* runs of one piece: warmup [lo, warm_end), cosine [warm_end, cos_end),
           sine or linear [cos_end, decay_end), P or M [decay_end, hi) */
        int64_t warm_end = mj_sched_min(hi, mj_sched_max(lo, w + 1));
        int64_t cos_end = warm_end, decay_end = warm_end;
        if (kind != S.constant) {
            decay_end = mj_sched_min(hi, mj_sched_max(warm_end, total));
            if (kind == S.cosine)
                cos_end = mj_sched_min(decay_end, mj_sched_max(warm_end, (total + w + 1) / 2));
        }
        /* first pass: a loop without branches per run; flag the block if a step is undecided.
           A run is at most one block long, so its steps go by a 32-bit offset i (the loops
           vectorize): the piece's integer is the run's first one plus or minus i, and both
           it and the sum are integers below 2^53, so base + (double)i is (double)(base + i). */
        int unsure = 0;
        int ok;
        double den = (double)(total - w);
        double base = (double)lo;
        for (int32_t i = 0; i < (int32_t)(warm_end - lo); i++) {
            double td = base + (double)i; /* t */
            out[lo - t0 + i] = mj_sched_decide(mj_sched_warmup(p, td, (double)w, &S), &ok);
            unsure |= !ok;
        }
        base = (double)(warm_end - w);
        for (int32_t i = 0; i < (int32_t)(cos_end - warm_end); i++) {
            double num = base + (double)i; /* t - W */
            out[warm_end - t0 + i] = mj_sched_decide(mj_sched_cos(p, m, num, den, &S), &ok);
            unsure |= !ok;
        }
        base = (double)(total - cos_end);
        if (kind == S.linear) {
            for (int32_t i = 0; i < (int32_t)(decay_end - cos_end); i++) {
                double num = base - (double)i; /* T - t */
                out[cos_end - t0 + i] = mj_sched_decide(mj_sched_linear(p, m, num, den, &S), &ok);
                unsure |= !ok;
            }
        } else {
            for (int32_t i = 0; i < (int32_t)(decay_end - cos_end); i++) {
                double num = base - (double)i; /* T - t */
                out[cos_end - t0 + i] = mj_sched_decide(mj_sched_sin(p, m, num, den, &S), &ok);
                unsure |= !ok;
            }
        }
        float tail = kind == S.constant ? p : m;
        for (int64_t t = decay_end; t < hi; t++) out[t - t0] = tail;
        if (unsure) { /* rare (about 1 step in 10^5, ties included): redo the block step by step */
            for (int64_t t = lo; t < hi; t++) {
                mj_sched_elem(kind, p, m, w, total, t, &S, &ok);
                if (!ok) {
                    memcpy(out + (t - t0), &S.undecided, sizeof S.undecided);
                    undecided += 1;
                }
            }
        }
    }
    return undecided;
}
