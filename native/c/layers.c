/* The layers family (contracts/layers.md): the fold-tree GEMM, row, column and segment
   folds, RMSNorm and relu; the C spelling of native/layers.py.

   GEMM. out[i][j] = fold over k of a[i][k] * b[j][k]. Lane l of chunk c of a cell sums
   the products at k = 1024c + 32t + l, t ascending, so the 32 lanes of one step are 32
   contiguous products, kept in vectors: an R x C tile of cells runs two passes of 16
   lanes (one cache line of each step) with R*C vector accumulators per pass in
   registers, each vector of a row of `a` meeting C rows of `b`. The butterfly follows in
   registers, then the pairwise tree over chunks (fold.c's mj_pairwise; one translation
   unit). Per block, a group of C rows of `b` stays in L1 while the block's rows of `a`
   (in L2) pass by; threads take whole blocks and a cell is one thread's serial work, so
   neither the thread count nor the other rows of the call reach a cell's bits.

   Instruction sets. The tile and the row folds are compiled for AVX-512, AVX2 and the
   baseline (SSE2 on x86-64, NEON on arm64) with target attributes, and the widest the
   CPU runs is used. Each does the same IEEE multiply and add lane by lane, never fused
   (-ffp-contract=off reaches every target), so every path gives the same bits. */
#include <stdlib.h>

typedef float mj_ly_v16 __attribute__((vector_size(64)));
typedef float mj_ly_v16u __attribute__((vector_size(64), aligned(4), may_alias));
typedef float mj_ly_v8 __attribute__((vector_size(32)));
typedef float mj_ly_v8u __attribute__((vector_size(32), aligned(4), may_alias));
typedef float mj_ly_v4 __attribute__((vector_size(16)));
typedef float mj_ly_v4u __attribute__((vector_size(16), aligned(4), may_alias));

#define MJ_LY_TILE_MAX 24              /* cells in the largest tile (the lane buffer's size) */
#define MJ_LY_A_BLOCK_BYTES (512 << 10) /* the rows of `a` a block keeps in L2 */
#define MJ_LY_B_BLOCK_ROWS 64          /* rows of `b` per block (the unit of parallel work) */
#define MJ_LY_COLS 64                  /* columns per task in the column folds */

/* fold.c's butterfly with its levels spelled out (so they vectorize): a[j] = a[j] + a[j + off]
   for off = 16, 8, 4, 2, 1; returns the chunk partial a[0]. */
static inline __attribute__((always_inline)) float mj_ly_butterfly(float *a) {
    for (int j = 0; j < 16; j++) a[j] = a[j] + a[j + 16];
    for (int j = 0; j < 8; j++) a[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++) a[j] = a[j] + a[j + 4];
    for (int j = 0; j < 2; j++) a[j] = a[j] + a[j + 2];
    return a[0] + a[1];
}

/* The fold's partial of one chunk of len <= 1024 values, x[k] (y == 0) or the rounded
   x[k] * y[k]: 32 lanes from -0.0, the whole steps, the short last step (its padded slots
   would add -0.0, so they are skipped), the butterfly. Inlined with a constant `y`. */
static inline __attribute__((always_inline)) float mj_ly_chunk_partial(const float *x,
                                                                       const float *y,
                                                                       int64_t len) {
    float acc[MJ_LANES];
    for (int j = 0; j < MJ_LANES; j++) acc[j] = -0.0f;
    int64_t whole = len / MJ_LANES * MJ_LANES;
    for (int64_t i = 0; i < whole; i += MJ_LANES) {
        if (y) {
            for (int j = 0; j < MJ_LANES; j++) {
                float p = x[i + j] * y[i + j];
                acc[j] = acc[j] + p;
            }
        } else {
            for (int j = 0; j < MJ_LANES; j++) acc[j] = acc[j] + x[i + j];
        }
    }
    for (int64_t k = whole; k < len; k++) {
        float v = x[k];
        if (y) {
            float p = v * y[k];
            v = p;
        }
        acc[k - whole] = acc[k - whole] + v;
    }
    return mj_ly_butterfly(acc);
}

/* The chunk partials of one row x[0..c) into out[0..ceil(c / 1024)), compiled once per
   instruction set below. */
#define MJ_LY_ROW_CHUNKS(NAME, ATTR)                                                              \
    ATTR static void NAME(const float *x, int64_t c, float *out) {                                \
        for (int64_t q = 0; q * MJ_CHUNK < c; q++) {                                              \
            int64_t len = c - q * MJ_CHUNK < MJ_CHUNK ? c - q * MJ_CHUNK : MJ_CHUNK;              \
            out[q] = mj_ly_chunk_partial(x + q * MJ_CHUNK, 0, len);                              \
        }                                                                                         \
    }

/* ROTn(v, o)[j] = v[(j + o) mod n]: the butterfly's levels inside one vector. */
#define MJ_LY_IDX4(o, m) (0 + (o)) & (m), (1 + (o)) & (m), (2 + (o)) & (m), (3 + (o)) & (m)
#define MJ_LY_IDX8(o, m) MJ_LY_IDX4(o, m), MJ_LY_IDX4((o) + 4, m)
#define MJ_LY_IDX16(o, m) MJ_LY_IDX8(o, m), MJ_LY_IDX8((o) + 8, m)
#if defined(__clang__)
#define MJ_LY_ROT16(v, o) __builtin_shufflevector(v, v, MJ_LY_IDX16(o, 15))
#define MJ_LY_ROT8(v, o) __builtin_shufflevector(v, v, MJ_LY_IDX8(o, 7))
#define MJ_LY_ROT4(v, o) __builtin_shufflevector(v, v, MJ_LY_IDX4(o, 3))
#else
typedef int mj_ly_i16 __attribute__((vector_size(64)));
typedef int mj_ly_i8 __attribute__((vector_size(32)));
typedef int mj_ly_i4 __attribute__((vector_size(16)));
#define MJ_LY_ROT16(v, o) __builtin_shuffle(v, (mj_ly_i16){MJ_LY_IDX16(o, 15)})
#define MJ_LY_ROT8(v, o) __builtin_shuffle(v, (mj_ly_i8){MJ_LY_IDX8(o, 7)})
#define MJ_LY_ROT4(v, o) __builtin_shuffle(v, (mj_ly_i4){MJ_LY_IDX4(o, 3)})
#endif
/* the butterfly's levels below W: a[j] = a[j] + a[j + off] for j < off (the other lanes
   are never read again) */
#define MJ_LY_INNER16(u) do { u = u + MJ_LY_ROT16(u, 8); u = u + MJ_LY_ROT16(u, 4);            \
                              u = u + MJ_LY_ROT16(u, 2); u = u + MJ_LY_ROT16(u, 1); } while (0)
#define MJ_LY_INNER8(u) do { u = u + MJ_LY_ROT8(u, 4); u = u + MJ_LY_ROT8(u, 2);                \
                             u = u + MJ_LY_ROT8(u, 1); } while (0)
#define MJ_LY_INNER4(u) do { u = u + MJ_LY_ROT4(u, 2); u = u + MJ_LY_ROT4(u, 1); } while (0)

/* One step of the tile at offset o of rows A[r] and B[c]: W lanes at a time, each product
   rounded, then added to its lane. */
#define MJ_LY_STEP(VT, W, R, C, V, A, B, o)                                                       \
    _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                          \
        _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) {                                     \
            VT x = *(const VT##u *)((A)[r] + (o) + W * v);                                        \
            _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) {                                \
                VT p = x * *(const VT##u *)((B)[c] + (o) + W * v);                                \
                acc[r][c][v] = acc[r][c][v] + p;                                                  \
            }                                                                                     \
        }

/* One R x C tile over one chunk: `steps` whole steps from pa[r] and pb[c], then, with ta, the
   short last step from ta[r] and tb[c] (32 floats each, padded with -0.0 and +0.0: a padded
   product is -0.0, which changes no lane). Two passes of 16 lanes (one cache line of each
   step; the lanes are independent sums), a cell's 16 lanes in 16 / W vectors, fully
   unrolled over r, c and v so the accumulators live in registers; then the butterfly.
   s (R*C*32 floats) holds the lanes; s[(r*C + c)*32] is the chunk partial of cell (r, c). */
#define MJ_LY_TILE(NAME, ATTR, VT, W, R, C, INNER)                                               \
    ATTR static void NAME(const float *const *pa, const float *const *pb, int64_t steps,          \
                          const float *const *ta, const float *const *tb, float *s) {             \
        enum { V = 16 / W };                                                                      \
        const VT z = -(VT){0.0f};                                                                 \
        const float *ra[R], *rb[C];                                                               \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) ra[r] = pa[r];                       \
        _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) rb[c] = pb[c];                       \
        for (int q = 0; q < MJ_LANES; q += 16) {                                                  \
            VT acc[R][C][V];                                                                      \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                  \
                _Pragma("GCC unroll 16") for (int c = 0; c < C; c++)                              \
                    _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) acc[r][c][v] = z;         \
            for (int64_t t = 0; t < steps; t++) {                                                 \
                MJ_LY_STEP(VT, W, R, C, V, ra, rb, MJ_LANES * t + q)                              \
            }                                                                                     \
            if (ta) {                                                                             \
                MJ_LY_STEP(VT, W, R, C, V, ta, tb, q)                                             \
            }                                                                                     \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                  \
                _Pragma("GCC unroll 16") for (int c = 0; c < C; c++)                              \
                    _Pragma("GCC unroll 4") for (int v = 0; v < V; v++)                           \
                        *(VT##u *)(s + (r * C + c) * MJ_LANES + q + W * v) = acc[r][c][v];        \
        }                                                                                         \
        for (int cell = 0; cell < R * C; cell++) {                                                \
            VT u[MJ_LANES / W];                                                                   \
            _Pragma("GCC unroll 8") for (int i = 0; i < MJ_LANES / W; i++)                        \
                u[i] = *(const VT##u *)(s + cell * MJ_LANES + i * W);                             \
            _Pragma("GCC unroll 8") for (int off = MJ_LANES / 2; off >= W; off /= 2)              \
                _Pragma("GCC unroll 8") for (int i = 0; i < off / W; i++)                         \
                    u[i] = u[i] + u[i + off / W];                                                 \
            INNER(u[0]);                                                                          \
            s[cell * MJ_LANES] = u[0][0];                                                         \
        }                                                                                         \
    }

typedef void (*mj_ly_tile_fn)(const float *const *, const float *const *, int64_t,
                              const float *const *, const float *const *, float *);
typedef void (*mj_ly_rows_fn)(const float *, int64_t, float *);

/* The code compiled for one instruction set: the GEMM's R x C tile, its 1 x C form for the
   last rows of a block (so a call of fewer than R rows computes no copies), the row folds. */
typedef struct {
    mj_ly_tile_fn tile, tile1;
    int rows, cols;  /* R, C */
    mj_ly_rows_fn row_chunks;
    const char *name;
} mj_ly_isa;

/* SSE2 (x86-64's baseline) has 16 vector registers: 1 x 3 cells, 12 accumulators */
MJ_LY_TILE(mj_ly_tile_base, , mj_ly_v4, 4, 1, 3, MJ_LY_INNER4)
MJ_LY_ROW_CHUNKS(mj_ly_row_chunks_base, )

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define MJ_LY_X86 1
#define MJ_LY_AVX2 __attribute__((target("avx2")))
#define MJ_LY_AVX512 __attribute__((target("avx512f")))
/* 16 ymm registers: 1 x 6 cells, 12 accumulators */
MJ_LY_TILE(mj_ly_tile_avx2, MJ_LY_AVX2, mj_ly_v8, 8, 1, 6, MJ_LY_INNER8)
MJ_LY_ROW_CHUNKS(mj_ly_row_chunks_avx2, MJ_LY_AVX2)
/* 32 zmm registers: 4 x 6 cells, 24 accumulators */
MJ_LY_TILE(mj_ly_tile_avx512, MJ_LY_AVX512, mj_ly_v16, 16, 4, 6, MJ_LY_INNER16)
MJ_LY_TILE(mj_ly_tile1_avx512, MJ_LY_AVX512, mj_ly_v16, 16, 1, 6, MJ_LY_INNER16)
MJ_LY_ROW_CHUNKS(mj_ly_row_chunks_avx512, MJ_LY_AVX512)
#endif

static const mj_ly_isa mj_ly_isas[] = {
    {mj_ly_tile_base, mj_ly_tile_base, 1, 3, mj_ly_row_chunks_base,
     "baseline: GEMM tile 1x3, 4 floats a vector"},
#ifdef MJ_LY_X86
    {mj_ly_tile_avx2, mj_ly_tile_avx2, 1, 6, mj_ly_row_chunks_avx2,
     "avx2: GEMM tile 1x6, 8 floats a vector"},
    {mj_ly_tile_avx512, mj_ly_tile1_avx512, 4, 6, mj_ly_row_chunks_avx512,
     "avx512f: GEMM tile 4x6, 16 floats a vector"},
#endif
};
#define MJ_LY_NISAS ((int)(sizeof mj_ly_isas / sizeof mj_ly_isas[0]))

static int mj_ly_path = -1;  /* the entry of mj_ly_isas in use; -1 until chosen */

static int mj_ly_supported(int path) {
    if (path < 0 || path >= MJ_LY_NISAS) return 0;
#ifdef MJ_LY_X86
    __builtin_cpu_init();
    if (path == 1) return __builtin_cpu_supports("avx2");
    if (path == 2) return __builtin_cpu_supports("avx512f");
#endif
    return 1;
}

/* The instruction set of the vector loops: `request` -1 keeps the current one, -2 picks the
   widest this CPU runs, 0.. asks for that entry (ignored if the CPU lacks it). Returns the
   entry in use. Every entry does the same IEEE operations lane by lane, so they give the
   same bits; only the speed differs. */
int mj_layers_path(int request) {
    if (request == -2 || (request == -1 && mj_ly_path < 0)) {
        int best = 0;
        for (int p = 0; p < MJ_LY_NISAS; p++)
            if (mj_ly_supported(p)) best = p;
        mj_ly_path = best;
    } else if (request >= 0 && mj_ly_supported(request)) {
        mj_ly_path = request;
    }
    return mj_ly_path;
}

const char *mj_layers_path_name(int path) {
    return path >= 0 && path < MJ_LY_NISAS ? mj_ly_isas[path].name : "";
}

/* The chunk partials of an R x C tile over k in [base, end) (end - base <= 1024) into
   s[cell * 32]: the whole steps from the rows, the short last step from padded copies. */
static void mj_ly_tile_chunk(mj_ly_tile_fn tile, int R, int C, const float *const *pa,
                             const float *const *pb, int64_t base, int64_t end, float *s) {
    const float *qa[MJ_LY_TILE_MAX], *qb[MJ_LY_TILE_MAX], *ta[MJ_LY_TILE_MAX], *tb[MJ_LY_TILE_MAX];
    float pad_a[MJ_LY_TILE_MAX][MJ_LANES], pad_b[MJ_LY_TILE_MAX][MJ_LANES];
    int64_t steps = (end - base) / MJ_LANES, k0 = base + steps * MJ_LANES;
    for (int r = 0; r < R; r++) qa[r] = pa[r] + base;
    for (int c = 0; c < C; c++) qb[c] = pb[c] + base;
    if (k0 == end) {
        tile(qa, qb, steps, 0, 0, s);
        return;
    }
    for (int r = 0; r < R; r++) {
        for (int j = 0; j < MJ_LANES; j++) pad_a[r][j] = k0 + j < end ? pa[r][k0 + j] : -0.0f;
        ta[r] = pad_a[r];
    }
    for (int c = 0; c < C; c++) {
        for (int j = 0; j < MJ_LANES; j++) pad_b[c][j] = k0 + j < end ? pb[c][k0 + j] : 0.0f;
        tb[c] = pad_b[c];
    }
    tile(qa, qb, steps, ta, tb, s);
}

/* The cells of rows [i_lo, i_hi) of `a` by rows [j_lo, j_hi) of `b`, into out (M, N), or
   with chunks_out their chunk partials into out (nchunks, M, N). Chunk by chunk of K (the
   block's rows of `a` for one chunk stay in L2), each group of C rows of `b` (kept in L1),
   each group of R rows of `a`. The last group of `b` is completed with copies of its last
   row (computed, not stored); the last rows of `a` come one at a time. part holds the
   block's chunk partials, (i_hi - i_lo) * nb * nchunks floats, when K > 1024. */
static void mj_ly_gemm_block(const mj_ly_isa *T, const float *a, const float *b, int64_t m,
                             int64_t n, int64_t kk, int64_t i_lo, int64_t i_hi, int64_t j_lo,
                             int64_t j_hi, int64_t nb, const float *bias, int has_bias,
                             int chunks_out, float *part, float *out) {
    const int R = T->rows, C = T->cols;
    int64_t nchunks = (kk + MJ_CHUNK - 1) / MJ_CHUNK;
    float s[MJ_LY_TILE_MAX * MJ_LANES];
    const float *pa[MJ_LY_TILE_MAX], *pb[MJ_LY_TILE_MAX];
    int rows = R;
    for (int64_t ch = 0; ch < nchunks; ch++) {
        int64_t base = ch * MJ_CHUNK, end = base + MJ_CHUNK < kk ? base + MJ_CHUNK : kk;
        for (int64_t j0 = j_lo; j0 < j_hi; j0 += C) {
            for (int c = 0; c < C; c++)  /* past the last row: compute a copy, store nothing */
                pb[c] = b + (j0 + c < j_hi ? j0 + c : j_hi - 1) * kk;
            for (int64_t i0 = i_lo; i0 < i_hi; i0 += rows) {
                int full = i_hi - i0 >= R;  /* else the last rows, one at a time */
                rows = full ? R : 1;
                for (int r = 0; r < rows; r++) pa[r] = a + (i0 + r) * kk;
                mj_ly_tile_chunk(full ? T->tile : T->tile1, rows, C, pa, pb, base, end, s);
                for (int r = 0; r < rows; r++)
                    for (int c = 0; c < C && j0 + c < j_hi; c++) {
                        float v = s[(r * C + c) * MJ_LANES];
                        int64_t i = i0 + r, j = j0 + c;
                        if (chunks_out) {
                            out[(ch * m + i) * n + j] = v;
                        } else if (nchunks == 1) {
                            if (has_bias) v = v + bias[j];
                            out[i * n + j] = v;
                        } else {
                            part[((i - i_lo) * nb + (j - j_lo)) * nchunks + ch] = v;
                        }
                    }
            }
        }
    }
    if (chunks_out || nchunks == 1) return;
    for (int64_t i = i_lo; i < i_hi; i++)
        for (int64_t j = j_lo; j < j_hi; j++) {
            float v = mj_pairwise(part + ((i - i_lo) * nb + (j - j_lo)) * nchunks, nchunks);
            if (has_bias) v = v + bias[j];
            out[i * n + j] = v;
        }
}

/* out (M, N) = the cells (+ bias); with chunks_out, out (nchunks, M, N) = their chunk
   partials before the pairwise tree. Threads take whole blocks. Returns 0, or -1 when a
   work buffer could not be allocated (out is then partly written). */
int64_t mj_gemm_nt(const float *a, const float *b, int64_t m, int64_t n, int64_t kk,
                   const float *bias, int has_bias, int chunks_out, float *out) {
    const mj_ly_isa *T = &mj_ly_isas[mj_layers_path(-1)];
    const int R = T->rows, C = T->cols;
    int64_t nchunks = (kk + MJ_CHUNK - 1) / MJ_CHUNK;
    int64_t span = kk < MJ_CHUNK ? kk : MJ_CHUNK;  /* the floats of a row one chunk reads */
    int64_t mb = MJ_LY_A_BLOCK_BYTES / ((int64_t)sizeof(float) * span * R) * R;
    if (mb < R) mb = R;
    if (mb > 256) mb = 256 / R * R;
    int64_t nb = (MJ_LY_B_BLOCK_ROWS + C - 1) / C * C;
    int64_t nbi = (m + mb - 1) / mb, nbj = (n + nb - 1) / nb;
    int need_part = !chunks_out && nchunks > 1;
    int failed = 0;
    #pragma omp parallel if((double)m * (double)n * (double)kk >= 32.0 * MJ_PARALLEL_MIN) \
        reduction(|:failed)
    {
        float *part = need_part ? malloc(sizeof(float) * mb * nb * nchunks) : 0;
        failed |= need_part && !part;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < nbi * nbj; blk++) {
            if (need_part && !part) continue;
            int64_t i_lo = blk / nbj * mb, j_lo = blk % nbj * nb;
            mj_ly_gemm_block(T, a, b, m, n, kk, i_lo, i_lo + mb < m ? i_lo + mb : m, j_lo,
                             j_lo + nb < n ? j_lo + nb : n, nb, bias, has_bias, chunks_out, part,
                             out);
        }
        free(part);
    }
    return failed ? -1 : 0;
}

/* The fold of x[0..d) (y == 0) or of the rounded x[k] * y[k]; part holds ceil(d / 1024)
   floats. */
static inline float mj_ly_fold_row(const float *x, const float *y, int64_t d, float *part) {
    int64_t nchunks = (d + MJ_CHUNK - 1) / MJ_CHUNK;
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t len = d - c * MJ_CHUNK < MJ_CHUNK ? d - c * MJ_CHUNK : MJ_CHUNK;
        part[c] = mj_ly_chunk_partial(x + c * MJ_CHUNK, y ? y + c * MJ_CHUNK : 0, len);
    }
    return mj_pairwise(part, nchunks);
}

/* out (M, ceil(C/1024)): each row's chunk partials (no pairwise tree), a row per task. */
void mj_row_chunk_folds(const float *a, int64_t m, int64_t c, float *out) {
    mj_ly_rows_fn row_chunks = mj_ly_isas[mj_layers_path(-1)].row_chunks;
    int64_t nchunks = (c + MJ_CHUNK - 1) / MJ_CHUNK;
    #pragma omp parallel for schedule(static) if(m * c >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < m; i++) row_chunks(a + i * c, c, out + i * nchunks);
}

/* The lanes of one chunk of rows q0..q1 (q1 - q0 <= 1024) of w <= MJ_LY_COLS columns from
   j0, the row of position q being order[q] (q itself without `order`), each value a[row][j]
   or the rounded a[row][j] * b[row][j]; then the butterfly; the partials go to dst[0..w).
   Lanes no row reaches hold -0.0, and adding -0.0 changes nothing, so the butterfly skips
   them: a chunk of one row costs a copy. */
static void mj_ly_rows_chunk(const float *a, const float *b, const int64_t *order, int64_t q0,
                             int64_t q1, int64_t ncols, int64_t j0, int64_t w, float *dst) {
    float acc[MJ_LANES][MJ_LY_COLS];
    int64_t used = q1 - q0 < MJ_LANES ? q1 - q0 : MJ_LANES;
    for (int64_t lane = 0; lane < used; lane++)
        for (int64_t j = 0; j < w; j++) acc[lane][j] = -0.0f;
    for (int64_t q = q0; q < q1; q++) {
        int64_t row = order ? order[q] : q;
        const float *x = a + row * ncols + j0;
        float *l = acc[(q - q0) & (MJ_LANES - 1)];
        if (b) {
            const float *y = b + row * ncols + j0;
            for (int64_t j = 0; j < w; j++) {
                float p = x[j] * y[j];
                l[j] = l[j] + p;
            }
        } else {
            for (int64_t j = 0; j < w; j++) l[j] = l[j] + x[j];
        }
    }
    for (int off = MJ_LANES / 2; off >= 1; off /= 2) {
        for (int64_t lane = 0; lane < off && lane + off < used; lane++)
            for (int64_t j = 0; j < w; j++) acc[lane][j] = acc[lane][j] + acc[lane + off][j];
        if (used > off) used = off;
    }
    for (int64_t j = 0; j < w; j++) dst[j] = acc[0][j];
}

/* dst[0..w) = the pairwise tree over the k partial rows p[i * stride + 0..w) (overwritten). */
static void mj_ly_pairwise_cols(float *p, int64_t k, int64_t stride, int64_t w, float *dst) {
    while (k > 1) {
        int64_t h = k / 2;
        for (int64_t i = 0; i < h; i++)
            for (int64_t j = 0; j < w; j++)
                p[i * stride + j] = p[2 * i * stride + j] + p[(2 * i + 1) * stride + j];
        if (k % 2 == 1) {
            for (int64_t j = 0; j < w; j++) p[h * stride + j] = p[(k - 1) * stride + j];
            k = h + 1;
        } else {
            k = h;
        }
    }
    for (int64_t j = 0; j < w; j++) dst[j] = p[j];
}

/* out[j] = fold over rows i of a[i][j] (b == 0) or of the rounded a[i][j] * b[i][j].
   Tasks are (chunk of rows, group of columns); their partials meet in the pairwise tree
   afterwards, so the split never reaches the bits. Returns 0, or -1 without memory. */
int64_t mj_col_fold(const float *a, const float *b, int64_t m, int64_t ncols, float *out) {
    int64_t nchunks = (m + MJ_CHUNK - 1) / MJ_CHUNK;
    int64_t ngroups = (ncols + MJ_LY_COLS - 1) / MJ_LY_COLS;
    float *part = nchunks > 1 ? malloc(sizeof(float) * nchunks * ncols) : out;
    if (!part) return -1;
    int par = m * ncols >= MJ_PARALLEL_MIN;
    #pragma omp parallel for schedule(dynamic, 1) if(par)
    for (int64_t t = 0; t < nchunks * ngroups; t++) {
        int64_t c = t / ngroups, j0 = t % ngroups * MJ_LY_COLS;
        int64_t w = ncols - j0 < MJ_LY_COLS ? ncols - j0 : MJ_LY_COLS;
        int64_t q1 = (c + 1) * MJ_CHUNK < m ? (c + 1) * MJ_CHUNK : m;
        mj_ly_rows_chunk(a, b, 0, c * MJ_CHUNK, q1, ncols, j0, w, part + c * ncols + j0);
    }
    if (nchunks > 1) {
        #pragma omp parallel for schedule(static) if(par)
        for (int64_t g = 0; g < ngroups; g++) {
            int64_t j0 = g * MJ_LY_COLS;
            int64_t w = ncols - j0 < MJ_LY_COLS ? ncols - j0 : MJ_LY_COLS;
            mj_ly_pairwise_cols(part + j0, nchunks, ncols, w, out + j0);
        }
        free(part);
    }
    return 0;
}

/* out[rows[s]][:] = fold over q in [starts[s], starts[s+1]) of dy[order[q]][:], for every
   segment s < nseg; the other rows of out are untouched. A segment is one thread's work.
   Returns 0, or -1 without memory (out is then partly written). */
int64_t mj_segment_fold(const float *dy, int64_t width, const int64_t *order, const int64_t *starts,
                        const int64_t *rows, int64_t nseg, float *out) {
    int64_t most = 0;
    for (int64_t s = 0; s < nseg; s++)
        if (starts[s + 1] - starts[s] > most) most = starts[s + 1] - starts[s];
    int64_t maxchunks = (most + MJ_CHUNK - 1) / MJ_CHUNK;
    int failed = 0;
    #pragma omp parallel if((starts[nseg] - starts[0]) * width >= MJ_PARALLEL_MIN) \
        reduction(|:failed)
    {
        float *part = maxchunks > 1 ? malloc(sizeof(float) * maxchunks * MJ_LY_COLS) : 0;
        failed |= maxchunks > 1 && !part;
        #pragma omp for schedule(dynamic, 16)
        for (int64_t s = 0; s < nseg; s++) {
            int64_t count = starts[s + 1] - starts[s];
            int64_t nchunks = (count + MJ_CHUNK - 1) / MJ_CHUNK;
            float *dst = out + rows[s] * width;
            if (nchunks > 1 && !part) continue;
            for (int64_t j0 = 0; j0 < width; j0 += MJ_LY_COLS) {
                int64_t w = width - j0 < MJ_LY_COLS ? width - j0 : MJ_LY_COLS;
                for (int64_t c = 0; c < nchunks; c++) {
                    int64_t q0 = starts[s] + c * MJ_CHUNK;
                    int64_t q1 = q0 + MJ_CHUNK < starts[s + 1] ? q0 + MJ_CHUNK : starts[s + 1];
                    mj_ly_rows_chunk(dy, 0, order, q0, q1, width, j0, w,
                                     nchunks == 1 ? dst + j0 : part + c * MJ_LY_COLS);
                }
                if (nchunks > 1) mj_ly_pairwise_cols(part, nchunks, MJ_LY_COLS, w, dst + j0);
            }
        }
        free(part);
    }
    return failed ? -1 : 0;
}

/* r = 1 / sqrt(fold(x*x) / D + eps): division, addition, square root, division. */
static float mj_ly_rms_scale(const float *x, int64_t d, float eps, float *part) {
    float ms = mj_ly_fold_row(x, x, d, part) / (float)d;
    float t = ms + eps;
    float root = __builtin_sqrtf(t);  /* IEEE sqrt (an instruction with -fno-math-errno) */
    return 1.0f / root;
}

/* y[i][j] = (x[i][j] * r_i) * w[j] (x[i][j] * r_i without a weight), a row per task.
   Returns 0, or -1 without memory. */
int64_t mj_rms_norm(const float *x, int64_t m, int64_t d, const float *w, int has_w, float eps,
                    float *y) {
    int64_t nchunks = (d + MJ_CHUNK - 1) / MJ_CHUNK;
    int failed = 0;
    #pragma omp parallel if(m * d >= MJ_PARALLEL_MIN) reduction(|:failed)
    {
        float *part = malloc(sizeof(float) * nchunks);
        failed |= !part;
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < m; i++) {
            if (!part) continue;
            const float *xi = x + i * d;
            float *yi = y + i * d;
            float r = mj_ly_rms_scale(xi, d, eps, part);
            if (has_w) {
                for (int64_t j = 0; j < d; j++) {
                    float h = xi[j] * r;
                    yi[j] = h * w[j];
                }
            } else {
                for (int64_t j = 0; j < d; j++) yi[j] = xi[j] * r;
            }
        }
        free(part);
    }
    return failed ? -1 : 0;
}

/* dx = r * (g - h * c) with g = dy * w (dy without a weight), h = x * r and
   c = fold(g * h) / D, a row per task; with a weight also hbuf = h (for dweight).
   dx holds the products g * h until c is known. Returns 0, or -1 without memory. */
int64_t mj_rms_norm_backward(const float *dy, const float *x, int64_t m, int64_t d, const float *w,
                             int has_w, float eps, float *dx, float *hbuf) {
    int64_t nchunks = (d + MJ_CHUNK - 1) / MJ_CHUNK;
    int failed = 0;
    #pragma omp parallel if(m * d >= MJ_PARALLEL_MIN) reduction(|:failed)
    {
        float *part = malloc(sizeof(float) * nchunks);
        failed |= !part;
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < m; i++) {
            if (!part) continue;
            const float *xi = x + i * d, *gi = dy + i * d;
            float *di = dx + i * d;
            float r = mj_ly_rms_scale(xi, d, eps, part);
            if (has_w) {
                float *hi = hbuf + i * d;
                for (int64_t j = 0; j < d; j++) {
                    float h = xi[j] * r;
                    float g = gi[j] * w[j];
                    di[j] = g * h;
                    hi[j] = h;
                }
            } else {
                for (int64_t j = 0; j < d; j++) {
                    float h = xi[j] * r;
                    di[j] = gi[j] * h;
                }
            }
            float c = mj_ly_fold_row(di, 0, d, part) / (float)d;
            for (int64_t j = 0; j < d; j++) {
                float h = xi[j] * r;
                float g = gi[j];
                if (has_w) {
                    float gw = g * w[j];
                    g = gw;
                }
                float hc = h * c;
                float u = g - hc;
                di[j] = r * u;
            }
        }
        free(part);
    }
    return failed ? -1 : 0;
}

/* torch's relu: x when x >= 0 (-0.0 stays -0.0) or NaN, else +0.0. */
void mj_relu(const float *x, int64_t n, float *out) {
    #pragma omp parallel for schedule(static) if(n >= MJ_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        out[i] = v < 0.0f ? 0.0f : v;
    }
}
