/*
 * gemm_avx2.c — register-blocked matmul tiles for the 32-element block
 * formats (Q4_0, Q5_0, Q8_0 weights x Q8_0 activations; Q4_1, Q5_1 weights x
 * Q8_1 activations), used for prefill where many tokens share each weight
 * row. A tile is GEMM_RM weight rows x GEMM_RN tokens: each weight block is
 * unpacked to int8 once and reused for GEMM_RN tokens, each activation block
 * is loaded once for GEMM_RM rows.
 *
 * Math (same as ggml's vec_dot for these pairs, so results match up to float
 * summation order): per block, isum = sum_k qw[k] * qa[k] exactly in int32,
 * then acc += isum * d_w * d_a; for the _1 formats also + m_w * s_a, where
 * s_a = d_a * sum(qa) is stored in the Q8_1 block.
 * Block layouts: ggml-common.h (block_q4_0 {f16 d; u8 qs[16]}: element j in
 * the low nibble of qs[j], j+16 in the high nibble; q5 adds u32 qh, bit j =
 * 5th bit of element j; _1 formats add f16 m after d; q8_0 {f16 d; i8 qs[32]};
 * q8_1 {f16 d; f16 s; i8 qs[32]}).
 * Must not: be called without AVX2/FMA/F16C (cpu.c checks CPUID).
 */
#include "backend/cpu/cpu.h"

#include <immintrin.h>
#include <string.h>

static inline float h2f(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline __m256i nibbles(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 0xFF in byte j where bit j of the little-endian u32 at p is set */
static inline __m256i bits32(const uint8_t *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    const __m256i sel = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u), sel);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

/* Unpack one weight block to int8: signed formats give q, the _1 formats
 * give q >= 0 (their min is applied separately). */
static inline __m256i unpack_q4_0(const uint8_t *b) { return _mm256_sub_epi8(nibbles(b + 2), _mm256_set1_epi8(8)); }
/* q - 16 = nibble | 0xF0 where the 5th bit is clear */
static inline __m256i unpack_q5_0(const uint8_t *b) { return _mm256_or_si256(nibbles(b + 6), _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8((char)0xF0))); }
static inline __m256i unpack_q8_0(const uint8_t *b) { return _mm256_loadu_si256((const __m256i *)(b + 2)); }
static inline __m256i unpack_q4_1(const uint8_t *b) { return nibbles(b + 4); }
static inline __m256i unpack_q5_1(const uint8_t *b) { return _mm256_or_si256(nibbles(b + 8), _mm256_and_si256(bits32(b + 4), _mm256_set1_epi8(0x10))); }

static inline float hsum(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* The tiled formats: weights in 32-element blocks dotted with Q8_0 (Q4_0,
 * Q5_0, Q8_0) or Q8_1 (Q4_1, Q5_1) activations. */
static const bool gemm_types[EMBER_TYPE_COUNT] = {
    [EMBER_TYPE_Q4_0] = true, [EMBER_TYPE_Q5_0] = true, [EMBER_TYPE_Q8_0] = true,
    [EMBER_TYPE_Q4_1] = true, [EMBER_TYPE_Q5_1] = true,
};

bool ember_cpu_gemm_supported(uint32_t type) { return type < EMBER_TYPE_COUNT && gemm_types[type]; }

/* One 2-row x 4-token tile kernel per format, and a 2 x 1 one for single
 * tokens (decode, ragged ends) that sums each output in the same order, so a
 * token's result does not depend on the tile it falls in. Rows past the end
 * are padded by repeating the first one (their results are not stored). The
 * 2 x 1 kernel prefetches the weights ember_cpu_prefetch_bytes ahead. */
#define DEFINE_TILE(NAME, UNPACK, HAS_MIN, WBS, RN)                                                 \
static void NAME(int64_t nb, const uint8_t *w0, const uint8_t *w1, const uint8_t *const *ar,      \
                 float out[2][4])                                                                \
{                                                                                                \
    const size_t ABS = HAS_MIN ? 36 : 34, AQ = HAS_MIN ? 4 : 2;                                   \
    const __m256i ones = _mm256_set1_epi16(1);                                                    \
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;                            \
    __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;                                            \
    float m00 = 0, m01 = 0, m02 = 0, m03 = 0, m10 = 0, m11 = 0, m12 = 0, m13 = 0;                 \
    for (int64_t b = 0; b < nb; b++) {                                                            \
        const uint8_t *b0 = w0 + b * WBS, *b1 = w1 + b * WBS;                                     \
        if (RN == 1) {                                                                            \
            _mm_prefetch((const char *)b0 + ember_cpu_prefetch_bytes, _MM_HINT_T0);               \
            _mm_prefetch((const char *)b1 + ember_cpu_prefetch_bytes, _MM_HINT_T0);               \
        }                                                                                         \
        const __m256i q0 = UNPACK(b0), q1 = UNPACK(b1);                                           \
        const __m256i u0 = HAS_MIN ? q0 : _mm256_sign_epi8(q0, q0);                               \
        const __m256i u1 = HAS_MIN ? q1 : _mm256_sign_epi8(q1, q1);                               \
        const float d0 = h2f(b0), d1 = h2f(b1);                                                   \
        const float n0 = HAS_MIN ? h2f(b0 + 2) : 0.0f, n1 = HAS_MIN ? h2f(b1 + 2) : 0.0f;         \
        _Pragma("GCC unroll 4")                                                                   \
        for (int j = 0; j < RN; j++) {                                                            \
            const uint8_t *ab = ar[j] + b * ABS;                                                  \
            const __m256i a = _mm256_loadu_si256((const __m256i *)(ab + AQ));                     \
            const float ad = h2f(ab);                                                             \
            const __m256i s0 = HAS_MIN ? a : _mm256_sign_epi8(a, q0);                             \
            const __m256i s1 = HAS_MIN ? a : _mm256_sign_epi8(a, q1);                             \
            const __m256 p0 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u0, s0), ones)); \
            const __m256 p1 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u1, s1), ones)); \
            const __m256 e0 = _mm256_set1_ps(d0 * ad), e1 = _mm256_set1_ps(d1 * ad);               \
            const float as = HAS_MIN ? h2f(ab + 2) : 0.0f;                                        \
            switch (j) {                                                                          \
            case 0: c00 = _mm256_fmadd_ps(p0, e0, c00); c10 = _mm256_fmadd_ps(p1, e1, c10);       \
                    if (HAS_MIN) { m00 += n0 * as; m10 += n1 * as; } break;                       \
            case 1: c01 = _mm256_fmadd_ps(p0, e0, c01); c11 = _mm256_fmadd_ps(p1, e1, c11);       \
                    if (HAS_MIN) { m01 += n0 * as; m11 += n1 * as; } break;                       \
            case 2: c02 = _mm256_fmadd_ps(p0, e0, c02); c12 = _mm256_fmadd_ps(p1, e1, c12);       \
                    if (HAS_MIN) { m02 += n0 * as; m12 += n1 * as; } break;                       \
            default: c03 = _mm256_fmadd_ps(p0, e0, c03); c13 = _mm256_fmadd_ps(p1, e1, c13);      \
                    if (HAS_MIN) { m03 += n0 * as; m13 += n1 * as; } break;                       \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    out[0][0] = hsum(c00) + m00; out[0][1] = hsum(c01) + m01; out[0][2] = hsum(c02) + m02; out[0][3] = hsum(c03) + m03; \
    out[1][0] = hsum(c10) + m10; out[1][1] = hsum(c11) + m11; out[1][2] = hsum(c12) + m12; out[1][3] = hsum(c13) + m13; \
}

DEFINE_TILE(tile_q4_0, unpack_q4_0, 0, 18, 4)
DEFINE_TILE(tile_q5_0, unpack_q5_0, 0, 22, 4)
DEFINE_TILE(tile_q8_0, unpack_q8_0, 0, 34, 4)
DEFINE_TILE(tile_q4_1, unpack_q4_1, 1, 20, 4)
DEFINE_TILE(tile_q5_1, unpack_q5_1, 1, 24, 4)
DEFINE_TILE(vec_q4_0, unpack_q4_0, 0, 18, 1)
DEFINE_TILE(vec_q5_0, unpack_q5_0, 0, 22, 1)
DEFINE_TILE(vec_q8_0, unpack_q8_0, 0, 34, 1)
DEFINE_TILE(vec_q4_1, unpack_q4_1, 1, 20, 1)
DEFINE_TILE(vec_q5_1, unpack_q5_1, 1, 24, 1)

/* y[t * ldy + r] for r in [r0, r1), t in [t0, t1): rows of w (row_bytes each)
 * against activation rows xq (xq_row bytes each, Q8_0 or Q8_1 blocks). */
void ember_cpu_gemm_q32_avx2(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes,
                             const uint8_t *xq, size_t xq_row, float *y, int64_t ldy,
                             int64_t r0, int64_t r1, int64_t t0, int64_t t1)
{
    typedef void (*kern_fn)(int64_t, const uint8_t *, const uint8_t *, const uint8_t *const *, float[2][4]);
    static const kern_fn tiles[EMBER_TYPE_COUNT] = {
        [EMBER_TYPE_Q4_0] = tile_q4_0, [EMBER_TYPE_Q5_0] = tile_q5_0, [EMBER_TYPE_Q8_0] = tile_q8_0,
        [EMBER_TYPE_Q4_1] = tile_q4_1, [EMBER_TYPE_Q5_1] = tile_q5_1,
    };
    static const kern_fn vecs[EMBER_TYPE_COUNT] = {
        [EMBER_TYPE_Q4_0] = vec_q4_0, [EMBER_TYPE_Q5_0] = vec_q5_0, [EMBER_TYPE_Q8_0] = vec_q8_0,
        [EMBER_TYPE_Q4_1] = vec_q4_1, [EMBER_TYPE_Q5_1] = vec_q5_1,
    };
    const kern_fn tile = tiles[type], vec = vecs[type];   /* type: ember_cpu_gemm_supported */
    const int64_t nb = n_in / (int64_t)ember_type_block_size(type);
    for (int64_t r = r0; r < r1; r += 2) {
        const int64_t rm = r1 - r < 2 ? r1 - r : 2;
        const uint8_t *w0 = w + (size_t)r * row_bytes, *w1 = rm > 1 ? w0 + row_bytes : w0;
        for (int64_t t = t0; t < t1;) {
            const int64_t rn = t1 - t < 4 ? 1 : 4;
            const uint8_t *ar[4];
            for (int j = 0; j < 4; j++) ar[j] = xq + (size_t)(j < rn ? t + j : t) * xq_row;
            float out[2][4];
            (rn == 4 ? tile : vec)(nb, w0, w1, ar, out);
            for (int i = 0; i < rm; i++)
                for (int j = 0; j < rn; j++) y[(t + j) * ldy + r + i] = out[i][j];
            t += rn;
        }
    }
}
