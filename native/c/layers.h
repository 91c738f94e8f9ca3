/* The layers family: fold-tree GEMM, row/column/segment folds, RMSNorm, relu (cffi parses
   this file). Functions returning int64_t give -1 when a work buffer could not be allocated. */
int mj_layers_path(int request);
const char *mj_layers_path_name(int path);
int64_t mj_gemm_nt(const float *a, const float *b, int64_t m, int64_t n, int64_t kk,
                   const float *bias, int has_bias, int chunks_out, float *out);
void mj_row_chunk_folds(const float *a, int64_t m, int64_t c, float *out);
int64_t mj_col_fold(const float *a, const float *b, int64_t m, int64_t ncols, float *out);
int64_t mj_segment_fold(const float *dy, int64_t width, const int64_t *order, const int64_t *starts,
                        const int64_t *rows, int64_t nseg, float *out);
int64_t mj_rms_norm(const float *x, int64_t m, int64_t d, const float *w, int has_w, float eps,
                    float *y);
int64_t mj_rms_norm_backward(const float *dy, const float *x, int64_t m, int64_t d, const float *w,
                             int has_w, float eps, float *dx, float *hbuf);
void mj_relu(const float *x, int64_t n, float *out);
