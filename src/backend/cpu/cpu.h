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

/* A thread's decoded Q4_K weight rows (ember_cpu_gemm_kq_avx512): rows
 * [r0, r1) of the weight at w, decoded during matmul op gen, are in dec. */
typedef struct ember_kq_cache {
    void *dec;
    const uint8_t *w;   /* NULL: nothing held */
    int64_t r0, r1;
    uint64_t gen;
} ember_kq_cache;

/* Query heads of one KV head that prefill attention processes together. */
#define ATTN_GROUP 8

typedef struct cpu_thread_scratch {
    float *scores;    /* [ATTN_GROUP][max_kv_tokens] */
    float *vrow;      /* [max_head_dim] */
    float *acc;       /* [ATTN_GROUP][max_head_dim] */
    void *qconv;      /* query head in K's dot format, max_head_dim*4 bytes */
    uint16_t *vkq16;  /* [max_head_dim] f16 output accumulator (ggml's flash-attention numerics) */
    float *mq;        /* [EMBER_CPU_ATTN_MAXQ][2 * max_head_dim] for ember_cpu_attn_f16_multi_avx512 */
    ember_kq_cache kq; /* decoded Q4_K rows (kq.dec: ember_cpu_gemm_kq_scratch_bytes(max_n_in), 64-byte
                        * aligned, or NULL without VNNI) */
} cpu_thread_scratch;

typedef struct cpu_backend {
    ember_backend base;
    ember_threadpool *tp;
    int32_t n_threads;
    ember_backend_limits lim;
    void *act;            /* quantized activations [max_tokens, max_n_in] of any vec_dot_type */
    int32_t *asum;        /* [max_tokens, max_n_in / 32]: int8 sum per Q8_0/Q8_1 block */
    uint8_t *xg;          /* interleaved Q8_0 activations (EMBER_XG_*), max_tokens rounded up to 8; NULL without VNNI */
    size_t xg_bytes;
    size_t act_bytes;
    cpu_thread_scratch *ts;
    void *small_pk;       /* activations packed for ember_cpu_gemm_small_avx512, or NULL */
    uint64_t scratch_bytes;
    uint64_t mm_gen;      /* matmul ops run (the threads' ember_kq_cache keys) */
    /* kernels this backend uses: what the CPU has, less what its options
     * turn off (EMBER_NO_GEMM, _VNNI, _SMALL_GEMM, _ATTN_MULTI) */
    bool gemm;            /* AVX2 tiles for the 32-element formats */
    bool vnni;            /* AVX-512 VNNI tiles */
    bool small;           /* AVX-512 VNNI small-batch kernel (gemm_small_avx512.c) */
    bool dot_pf;          /* decode mat-vecs through the traits' vec_dot_pf where there is one */
    bool attn_multi;      /* AVX-512 F16-cache attention for several queries (attn_avx512.c) */
} cpu_backend;

/* Decode mat-vecs prefetch the weight bytes this far ahead of the ones being
 * read (EMBER_PREFETCH of the first CPU backend created; process-wide). */
extern int ember_cpu_prefetch_bytes;

/* f16 -> f32 by table (exact), f32 -> f16 round-to-nearest-even. */
extern float ember_cpu_f16_table[65536];
static inline float cpu_f16_to_f32(uint16_t h) { return ember_cpu_f16_table[h]; }

/* dot of n f16 values with n f16 values in the order of ggml_vec_dot_f16 as
 * llama.cpp's x86 AVX-512 build runs it (ggml-cpu/vec.cpp, simd-mappings.h):
 * four accumulators of 16 f32 lanes over steps of 64 elements (fused
 * multiply-add), folded 0+2, 1+3, then 0+1, the 16 lanes summed as GCC's
 * _mm512_reduce_add_ps (8+8, 4+4, then [0]+[2], [1]+[3], then the two), the
 * n % 64 leftovers added one by one in double; rounded to f32 at the end.
 * Every variant gives the same bits. */
float ember_cpu_dot_f16(int64_t n, const uint16_t *a, const uint16_t *b);
float ember_cpu_dot_f16_avx2(int64_t n, const uint16_t *a, const uint16_t *b);
/* y[i] += a * f16(x[i]) */
void ember_cpu_axpy_f16(int64_t n, float a, const uint16_t *x, float *y);
void ember_cpu_axpy_f16_avx2(int64_t n, float a, const uint16_t *x, float *y);
/* ggml_vec_mad_f16 (the f16 accumulator of ggml's flash attention) as the
 * AVX-512-FP16 build runs it: the first n & ~127 elements in f16 arithmetic,
 * y[i] = f16(y[i] + x[i] * f16(a)) rounded once (vfmadd...ph); the rest
 * (the scalar loop, contracted to an f32 FMA) y[i] = f16(fmaf(x[i], a, y[i])).
 * The single f16 rounding is reproduced exactly with f32 arithmetic: the
 * product of two f16 is exact in f32, the sum's error is recovered by TwoSum
 * and folded into the last bit (round to odd), which a round-to-nearest
 * conversion to f16 then honours (Boldo & Melquiond 2008). */
void ember_cpu_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float a);
void ember_cpu_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float a);
/* ggml_vec_scale_f16 likewise: y[i] = f16(y[i] * f16(a)) for the first
 * n & ~127 elements, f16(y[i] * a) for the rest. */
void ember_cpu_scale_f16(int64_t n, uint16_t *y, float a);
void ember_cpu_scale_f16_avx2(int64_t n, uint16_t *y, float a);
/* y[i] = silu(y[i]) * x[i] with ggml_vec_swiglu_f32's numerics in its AVX-512
 * build (ggml-cpu/vec.h ggml_v_expf, ggml_v_silu: x / (1 + exp(-x)) with a
 * polynomial exp, from ARM's optimized routines), operation for operation,
 * FMAs included. */
void ember_cpu_swiglu(int64_t n, float *y, const float *x);
void ember_cpu_swiglu_avx2(int64_t n, float *y, const float *x);
/* Elements of a row that ggml's AVX-512-FP16 f16 vector loops cover
 * (GGML_F16_STEP = 128); the rest go through its scalar loop. */
#define EMBER_GGML_F16_STEP 128
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

/* Q8_0 activations interleaved for the AVX-512 prefill tiles: tokens in
 * groups of 8 (token t in group t / 8, slot t % 8); a group holds, per
 * 32-element block, EMBER_XG_BLOCK bytes: the 8 slots' int8 values
 * (32 each, at EMBER_XG_QS), -16 * (sum of values 4l..4l+3) as int32 for lanes
 * l = 0..7 (32 bytes each, at EMBER_XG_NS), and the block scale as f32 (at
 * EMBER_XG_D). A group spans n_in / 32 * EMBER_XG_BLOCK bytes. */
#define EMBER_XG_QS 0
#define EMBER_XG_NS 256
#define EMBER_XG_D 512
#define EMBER_XG_BLOCK 544
/* Writes token `slot` of the group at xg from its Q8_0 row xq of n_in values. */
void ember_cpu_q8_0_interleave_avx512(int64_t n_in, const uint8_t *xq, uint8_t *xg, int slot);
/* Q4_0/Q5_0/Q8_0 weights x Q8_0 activations, 4 rows x 8 (or 4) tokens per
 * pass with two outputs per zmm; every output bit-identical to the one-token
 * vec_dot. xq: the Q8_0 rows (xq_row apart; used for single tokens), xg the
 * same tokens interleaved (above); t0 must be a multiple of 8. AVX-512 VNNI
 * only. Writes y[t * ldy + r] for r in [r0, r1), t in [t0, t1). */
void ember_cpu_gemm_q32x_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes, const uint8_t *xq,
                                size_t xq_row, const uint8_t *xg, float *y, int64_t ldy,
                                int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* Prefill attention inner loops (attn_prefill_avx512.c), bit-identical per output to
 * the AVX2 one-row helpers; head sizes must be multiples of 16.
 * qk: out[r * 8 + q] = ember_cpu_dot_f32_f16_avx2(n, a[q], b[r]) for nq <= 8
 * query heads and nr = 4 or fewer K rows.
 * pv: y[q][d] = sum over j = lo..hi, in order, of fma(w[q * w_stride + j - lo],
 * v_j[d], .) from 0, where v_j is the f16 row at v + (blocks[j / bt] * bt +
 * j % bt) * v_row_bytes (v already offset to the head); as repeated
 * ember_cpu_axpy_f16_avx2 calls on zeroed y. */
void ember_cpu_attn_qk_avx512(int64_t n, int nq, const float *const *a, int nr, const uint16_t *const *b, float *out);
void ember_cpu_attn_pv_avx512(int64_t hv, int nq, int32_t lo, int32_t hi, const float *w, size_t w_stride,
                              const uint8_t *v, size_t v_row_bytes, const int32_t *blocks, int32_t bt, float *const *y);

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
/* Q4_K or Q6_K weights [n_out, n_in] (row_bytes apart) x Q8_K activations
 * [n_tokens, n_in] (xq_row apart), 4 rows x 4 tokens per pass; every output
 * bit-identical to the format's vec_dot (so batch invariant). AVX-512 VNNI
 * only. Writes y[t * ldy + r] for r in [r0, r1), t in [t0, t1). cache:
 * NULL, or a thread's ember_kq_cache whose dec holds
 * ember_cpu_gemm_kq_scratch_bytes(n_in) bytes (64-byte aligned): Q4_K rows
 * are decoded there once (same bits) and kept for the thread's next call
 * with the same weight rows and the same gen (one matmul op's number: a
 * thread takes many token groups of one row tile in turn). */
#define EMBER_CPU_KQ_ROWS 16   /* rows a cache holds (a prefill row tile) */
size_t ember_cpu_gemm_kq_scratch_bytes(int64_t n_in);
void ember_cpu_gemm_kq_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes, const uint8_t *xq,
                              size_t xq_row, float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                              ember_kq_cache *cache, uint64_t gen);

/* Batches of Q4_0/Q5_0/Q8_0/Q4_1/Q5_1 weights x 2.. tokens, by groups of up
 * to EMBER_CPU_SMALL_MAX tokens, AVX-512 VNNI (gemm_small_avx512.c). The
 * caller packs each token's Q8_0/Q8_1 activation row (xq_row, n_in / 32
 * blocks) of a group of n_tokens with ember_cpu_small_pack into that group's
 * pk (ember_cpu_small_pack_bytes(n_in, n_tokens) bytes; tokens may be packed
 * by different threads), then ember_cpu_gemm_small_avx512 writes
 * y[t * ldy + r] for r in [r0, r1) and every token t of the group, each
 * bit-identical to the one-token mat-vec. */
#define EMBER_CPU_SMALL_MAX 16

/* F16 cache attention for nq <= EMBER_CPU_ATTN_MAXQ queries that read KV head
 * g through one block table (qq[q]->blocks all equal), q rows qh[q] [hk],
 * results to out[q] [hv]; per query bit-identical to the one-query loop of
 * cpu.c attn_run (attn_avx512.c). head_dim_k, head_dim_v multiples of 64;
 * scratch holds nq * (hk + hv) floats. AVX-512 only. */
#define EMBER_CPU_ATTN_MAXQ 16
/* Checks the vector expf of attn_avx512.c against this process's libm expf
 * (bit for bit over a sweep of inputs) and lets the multi-query attention
 * use it only if all match; returns whether they did. AVX-512 only. */
bool ember_cpu_expf_vec_check(void);
void ember_cpu_attn_f16_multi_avx512(const ember_kv_layer_view *kv, const ember_attn_params *p, int32_t g, int nq,
                                     const float *const *qh, const ember_attn_query *const *qq, float *const *out,
                                     float *scratch);
#define EMBER_CPU_SMALL_STRIDE(np) ((size_t)(np) * 192 + 64)   /* packed bytes per block */
static inline size_t ember_cpu_small_pack_bytes(int64_t n_in, int64_t n_tokens)
{
    return (size_t)(n_in / 32) * EMBER_CPU_SMALL_STRIDE((n_tokens + 1) / 2);
}
void ember_cpu_small_pack(uint32_t vdt, int64_t n_in, int64_t n_tokens, int64_t t, const uint8_t *xq_row, void *pk);
void ember_cpu_gemm_small_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes, const void *pk,
                                 int64_t n_tokens, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* Recurrent (linear-attention) ops, recurrent.c: formulas, shapes and
 * sources at their entries in ember_backend_ops (backend.h). */
void ember_cpu_conv1d_silu(ember_backend *be, float *y, const float *x, const float *w, int64_t n_ch, int32_t d_conv,
                           float *const *state, int32_t n);
void ember_cpu_gated_delta_rule(ember_backend *be, const ember_gdr_params *p, const float *qkv, int64_t ld,
                                const float *alpha, const float *b, float *const *state, int32_t n, float *out);
void ember_cpu_sigmoid_mul(ember_backend *be, float *x, const float *g, int64_t n);
void ember_cpu_copy_strided(ember_backend *be, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                            int64_t n_rows, int64_t n_cols);
/* AVX2 + FMA kernels they use (recurrent_avx2.c): one value row of the
 * recurrent delta rule (S = decay S; S += beta (v - S.k) k; returns S.q). */
float ember_cpu_gdr_row_avx2(int32_t n, float *S, const float *k, const float *q, float decay, float beta, float v);
/* The chunked form's batches: oa[i] = a . v_i, ob[i] = b . v_i for m
 * vectors v_i (ldv floats apart, n long); y = scale y + sum_s c[s] x_s in
 * the order s = 0..m-1 (each step one FMA: the bits of m axpys). */
void ember_cpu_dots2_f32_avx2(int32_t n, const float *a, const float *b, const float *v, int64_t ldv, int32_t m,
                              float *oa, float *ob);
void ember_cpu_axpy_n_f32_avx2(int32_t n, float scale, const float *c, const float *x, int64_t ldx, int32_t m, float *y);

#endif
