/*
 * cpu.h — internals shared by the CPU backend's files (not a public API).
 *
 * Owns: the CPU backend state (thread pool, scratch) and the SIMD helpers the
 * kernels pick at run time. Must not: be included outside src/backend/cpu/.
 */
#ifndef EMBER_BACKEND_CPU_H
#define EMBER_BACKEND_CPU_H

#include "backend/backend.h"
#include "base/threadpool.h"
#include "quant/quant.h"

#include <stdatomic.h>

/* Query heads of one KV head that prefill attention processes together. */
#define ATTN_GROUP 8

typedef struct cpu_thread_scratch {
    float *scores;    /* [ATTN_GROUP][max_kv_tokens] */
    float *vrow;      /* [max_head_dim] */
    float *acc;       /* [ATTN_GROUP][max_head_dim] */
    void *qconv;      /* query head in K's dot format, max_head_dim*4 bytes */
    uint16_t *vkq16;  /* [max_head_dim] f16 output accumulator (ggml's flash-attention numerics) */
} cpu_thread_scratch;

typedef struct cpu_backend {
    ember_backend base;
    ember_threadpool *tp;
    int32_t n_threads;
    ember_backend_limits lim;
    void *act;            /* quantized activations [max_tokens, max_n_in] of any vec_dot_type */
    int32_t *asum;        /* [max_tokens, max_n_in / 32]: int8 sum per Q8_0/Q8_1 block */
    size_t act_bytes;
    cpu_thread_scratch *ts;
    uint64_t scratch_bytes;
} cpu_backend;

/* Decode mat-vecs prefetch the weight bytes this far ahead of the ones being
 * read (set once at backend creation). */
extern int ember_cpu_prefetch_bytes;

/* f16 -> f32 by table (exact), f32 -> f16 round-to-nearest-even. */
extern float ember_cpu_f16_table[65536];
static inline float cpu_f16_to_f32(uint16_t h) { return ember_cpu_f16_table[h]; }

/* dot of n f16 values with n f16 values, f32 accumulation. */
float ember_cpu_dot_f16(int64_t n, const uint16_t *a, const uint16_t *b);
float ember_cpu_dot_f16_avx2(int64_t n, const uint16_t *a, const uint16_t *b);
/* y[i] += a * f16(x[i]) */
void ember_cpu_axpy_f16(int64_t n, float a, const uint16_t *x, float *y);
void ember_cpu_axpy_f16_avx2(int64_t n, float a, const uint16_t *x, float *y);
/* y[i] = f16(f32(y[i]) + f32(x[i]) * a): ggml_vec_mad_f16 (f16 accumulator) */
void ember_cpu_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float a);
void ember_cpu_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float a);
/* dot of f32 a with f16 b, f32 accumulation */
float ember_cpu_dot_f32_f16(int64_t n, const float *a, const uint16_t *b);
float ember_cpu_dot_f32_f16_avx2(int64_t n, const float *a, const uint16_t *b);
/* nq <= 8 queries against one f16 row; bit-identical to nq single calls of
 * the AVX2 versions above (simd_avx2.c). */
void ember_cpu_dot_f32_f16_multi(int64_t n, int nq, const float *const *a, const uint16_t *b, float *out);
void ember_cpu_dot_f32_f16_multi_avx2(int64_t n, int nq, const float *const *a, const uint16_t *b, float *out);
void ember_cpu_axpy_f16_multi(int64_t n, int nq, const float *w, const uint16_t *x, float *const *y);
void ember_cpu_axpy_f16_multi_avx2(int64_t n, int nq, const float *w, const uint16_t *x, float *const *y);
float ember_cpu_dot_f32(int64_t n, const float *a, const float *b);
float ember_cpu_dot_f32_avx2(int64_t n, const float *a, const float *b);
void ember_cpu_f32_to_f16_row(int64_t n, const float *x, uint16_t *y);
void ember_cpu_f32_to_f16_row_avx2(int64_t n, const float *x, uint16_t *y);

/* Tiled matmul for Q4_0/Q5_0/Q8_0 (x Q8_0) and Q4_1/Q5_1 (x Q8_1) weights;
 * see gemm_avx2.c. */
bool ember_cpu_gemm_supported(uint32_t type);
void ember_cpu_gemm_q32_avx2(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes,
                             const uint8_t *xq, size_t xq_row, float *y, int64_t ldy,
                             int64_t r0, int64_t r1, int64_t t0, int64_t t1);
/* The same with AVX-512 VNNI; asum [n_tokens, n_in / 32] holds the sum of
 * each activation block's int8 values. */
void ember_cpu_gemm_q32_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes,
                               const uint8_t *xq, size_t xq_row, const int32_t *asum, float *y, int64_t ldy,
                               int64_t r0, int64_t r1, int64_t t0, int64_t t1);

#endif
