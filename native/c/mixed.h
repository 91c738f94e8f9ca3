/* Casts float32 <-> bfloat16 / float16 on bit patterns (cffi parses this file). */
void mj_to_bf16(const uint32_t *x, uint16_t *out, int64_t n);
void mj_to_f16(const uint32_t *x, uint16_t *out, int64_t n);
void mj_from_bf16(const uint16_t *h, uint32_t *out, int64_t n);
void mj_from_f16(const uint16_t *h, uint32_t *out, int64_t n);
