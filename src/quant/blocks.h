/*
 * blocks.h — ggml block structs and the per-variant kernel declarations,
 * private to src/quant/.
 *
 * Owns: the byte layout of every block format (facts from ggml-common.h,
 * cross-checked against gguf-py quants.py and GGML_QUANT_SIZES; the static
 * asserts below pin the sizes), and the names of the scalar/AVX2/AVX-512
 * kernels that quant.c puts into the traits table.
 * Must not: contain code (only small inline helpers) or be included outside
 * src/quant/.
 */
#ifndef EMBER_QUANT_BLOCKS_H
#define EMBER_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>
#include "quant/quant.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* fp16 fields are raw IEEE half bits. */
typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;             /* d*(q-8) */
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;          /* d*q+m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0; /* d*(q-16) */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;                  /* d*q */
typedef struct { uint16_t d, s; int8_t qs[QK8_1]; } block_q8_1;               /* s = d*sum(q) */
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;          /* d*kvalues[q] */

/* k-quants: super-blocks of 256 */
typedef struct {
    uint8_t scales[QK_K / 16]; /* low 4 bits scale, high 4 bits min, per 16 */
    uint8_t qs[QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;
} block_q2_K;
typedef struct {
    uint8_t hmask[QK_K / 8];   /* high bit (set = no -4 offset) */
    uint8_t qs[QK_K / 4];      /* low 2 bits */
    uint8_t scales[12];        /* 16 6-bit scales, offset 32 */
    uint16_t d;
} block_q3_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE]; /* 8 6-bit scales + 8 6-bit mins */
    uint8_t qs[QK_K / 2];
} block_q4_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16]; /* sum of each 16 qs */
} block_q8_K;
typedef struct {
    uint16_t d;
    uint16_t scales_h;        /* 2 high bits of each of the 8 scales */
    uint8_t scales_l[QK_K / 64]; /* 4 low bits, two per byte */
    uint8_t qs[QK_K / 2];
} block_iq4_xs;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(block_q8_1) == 36, "q8_1");
_Static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(block_q3_K) == 110, "q3_K");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K");
_Static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs");

/* fp16 bits -> fp32, all 65536 values; filled by the first
 * ember_quant_traits_get() (SIMD kernels read it; scalar code does not). */
extern float ember_fp16_table[65536];

/* IQ4_NL / IQ4_XS non-linear levels (ggml-common.h kvalues_iq4nl; the same
 * numbers as gguf-py IQ4_NL.kvalues). */
extern const int8_t ember_kvalues_iq4nl[16];

/* Unpack the j-th (0..7) 6-bit scale and min of a Q4_K/Q5_K block (layout:
 * gguf-py Q4_K.get_scale_min; ggml get_scale_min_k4). */
static inline void ember_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Round to nearest, ties to even, for |v| < 2^22 (here |v| <= 127.x): adding
 * and subtracting 1.5*2^23 leaves the integer in the float's low mantissa
 * bits under the default rounding mode; the same result as lrintf and as
 * VCVTPS2DQ, without a libm call. */
static inline int ember_round_small(float v)
{
    const float m = 12582912.0f; /* not folded away: no -ffast-math */
    return (int)((v + m) - m);
}

static inline uint32_t ember_load_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* ---- kernels, by variant ------------------------------------------------ */
#define EMBER_DECL_DOT(v, t) void ember_vec_dot_##t##_##v(int64_t n, float *restrict s, \
                                 const void *restrict x, const void *restrict y);
#define EMBER_DECL_DOTS(v) \
    EMBER_DECL_DOT(v, f32) EMBER_DECL_DOT(v, f16) EMBER_DECL_DOT(v, bf16) \
    EMBER_DECL_DOT(v, q4_0) EMBER_DECL_DOT(v, q4_1) EMBER_DECL_DOT(v, q5_0) \
    EMBER_DECL_DOT(v, q5_1) EMBER_DECL_DOT(v, q8_0) EMBER_DECL_DOT(v, iq4_nl) \
    EMBER_DECL_DOT(v, q2_K) EMBER_DECL_DOT(v, q3_K) EMBER_DECL_DOT(v, q4_K) \
    EMBER_DECL_DOT(v, q5_K) EMBER_DECL_DOT(v, q6_K) EMBER_DECL_DOT(v, iq4_xs)
#define EMBER_DECL_Q8(v) \
    void ember_quantize_q8_0_##v(const float *restrict x, void *restrict y, int64_t n); \
    void ember_quantize_q8_1_##v(const float *restrict x, void *restrict y, int64_t n); \
    void ember_quantize_q8_K_##v(const float *restrict x, void *restrict y, int64_t n);

EMBER_DECL_DOTS(scalar)
EMBER_DECL_DOTS(avx2)
EMBER_DECL_DOTS(avx512)
/* vec_dot with prefetch (quant.h ember_vec_dot_pf_fn) */
#define EMBER_DECL_DOT_PF(v, t) void ember_vec_dot_pf_##t##_##v(int64_t n, float *restrict s, \
                                    const void *restrict x, const void *restrict y, int32_t pf);
EMBER_DECL_DOT_PF(avx2, q4_K) EMBER_DECL_DOT_PF(avx2, q6_K)
EMBER_DECL_DOT_PF(avx512, q4_K) EMBER_DECL_DOT_PF(avx512, q6_K)
EMBER_DECL_Q8(scalar)
EMBER_DECL_Q8(avx2)
EMBER_DECL_Q8(avx512)

/* scalar reference dequantizers and quantizers */
#define EMBER_DECL_REF(t) \
    void ember_dequantize_##t(const void *restrict x, float *restrict y, int64_t n); \
    void ember_quantize_##t##_ref(const float *restrict x, void *restrict y, int64_t n);
EMBER_DECL_REF(f32) EMBER_DECL_REF(f16) EMBER_DECL_REF(bf16)
EMBER_DECL_REF(q4_0) EMBER_DECL_REF(q4_1) EMBER_DECL_REF(q5_0) EMBER_DECL_REF(q5_1)
EMBER_DECL_REF(q8_0) EMBER_DECL_REF(q8_1) EMBER_DECL_REF(iq4_nl)
EMBER_DECL_REF(q2_K) EMBER_DECL_REF(q3_K) EMBER_DECL_REF(q4_K) EMBER_DECL_REF(q5_K)
EMBER_DECL_REF(q6_K) EMBER_DECL_REF(q8_K) EMBER_DECL_REF(iq4_xs)

#endif
