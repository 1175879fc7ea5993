/*
 * gemm_avx512.c — AVX-512 VNNI version of the prefill matmul tiles for the
 * 32-element block formats (see gemm_avx2.c for the math): 4 weight rows x 4
 * tokens per tile (32 vector registers hold the 16 accumulators).
 *
 * VNNI's dpbusd multiplies unsigned by signed bytes straight into int32, so
 * weights are unpacked unsigned (q + off: off = 8 for Q4_0, 16 for Q5_0, 128
 * for Q8_0, 0 for the _1 formats) and the offset is taken back exactly in
 * int32 by starting each lane's accumulator at -off * (the sum of the four
 * activation bytes that lane multiplies). Every int32 lane then holds what
 * ggml's vec_dot and llamafile's tinyBLAS hold, sum over elements 4l..4l+3 of
 * q_w * q_a, so the float accumulation that follows rounds as theirs does.
 * Decode (4 x 1) prefetches each weight row ember_cpu_prefetch_bytes ahead:
 * rows are read in address order, and without it the hardware prefetcher
 * (which stops at 4 KiB pages) leaves the loads waiting on memory.
 * Must not: run unless ember_cpu_variant_active() is AVX512 (which implies
 * AVX512BW/VL/VNNI; cpu.c checks).
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

static inline uint32_t ld32(const uint8_t *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return u;
}

static inline __m256i nibbles(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

static inline __m256i u_q4_0(const uint8_t *b) { return nibbles(b + 2); }
static inline __m256i u_q5_0(const uint8_t *b)
{
    __m256i n = nibbles(b + 6);
    return _mm256_mask_add_epi8(n, (__mmask32)ld32(b + 2), n, _mm256_set1_epi8(16));
}
static inline __m256i u_q8_0(const uint8_t *b)
{
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + 2)), _mm256_set1_epi8((char)0x80));
}
static inline __m256i u_q4_1(const uint8_t *b) { return nibbles(b + 4); }
static inline __m256i u_q5_1(const uint8_t *b)
{
    __m256i n = nibbles(b + 8);
    return _mm256_mask_add_epi8(n, (__mmask32)ld32(b + 4), n, _mm256_set1_epi8(16));
}

static inline float hsum(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

#define DEFINE_TILE(NAME, UNPACK, OFF, HAS_MIN, WBS, RN)                                           \
static void NAME(int64_t nb, const uint8_t *const *wr, const uint8_t *const *ar,                 \
                 const int32_t *const *as, float out[4][4])                                       \
{                                                                                                \
    const size_t ABS = HAS_MIN ? 36 : 34, AQ = HAS_MIN ? 4 : 2;                                   \
    (void)as;                                                                                     \
    __m256 c[4][4];                                                                               \
    float m[4][4];                                                                                \
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                                           \
        _Pragma("GCC unroll 4") for (int j = 0; j < RN; j++) { c[i][j] = _mm256_setzero_ps(); m[i][j] = 0.0f; } \
    for (int64_t b = 0; b < nb; b++) {                                                            \
        __m256i wu[4];                                                                            \
        float wd[4], wm[4];                                                                       \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                     \
            const uint8_t *blk = wr[i] + b * WBS;                                                 \
            if (RN == 1) _mm_prefetch((const char *)blk + ember_cpu_prefetch_bytes, _MM_HINT_T0); \
            wu[i] = UNPACK(blk);                                                                  \
            wd[i] = h2f(blk);                                                                     \
            wm[i] = HAS_MIN ? h2f(blk + 2) : 0.0f;                                                \
        }                                                                                         \
        _Pragma("GCC unroll 4") for (int j = 0; j < RN; j++) {                                    \
            const uint8_t *ab = ar[j] + b * ABS;                                                  \
            const __m256i a = _mm256_loadu_si256((const __m256i *)(ab + AQ));                     \
            const float ad = h2f(ab);                                                             \
            const float s = HAS_MIN ? h2f(ab + 2) : 0.0f;                                         \
            const __m256i init = OFF ? _mm256_sub_epi32(_mm256_setzero_si256(),                   \
                                         _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)(OFF)), a)) \
                                     : _mm256_setzero_si256();                                    \
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                 \
                const __m256i p = _mm256_dpbusd_epi32(init, wu[i], a);                            \
                c[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd[i] * ad), c[i][j]); \
                if (HAS_MIN) m[i][j] = __builtin_fmaf(wm[i], s, m[i][j]);                       \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                                           \
        _Pragma("GCC unroll 4") for (int j = 0; j < RN; j++) out[i][j] = hsum(c[i][j]) + m[i][j];  \
}

/* 4 x 4 tiles, and 4 x 1 for single tokens (decode, ragged ends); both sum
 * each output in the same order, so a token's result does not depend on
 * the tile it falls in. */
DEFINE_TILE(tile_q4_0, u_q4_0, 8, 0, 18, 4)
DEFINE_TILE(tile_q5_0, u_q5_0, 16, 0, 22, 4)
DEFINE_TILE(tile_q8_0, u_q8_0, 128, 0, 34, 4)
DEFINE_TILE(tile_q4_1, u_q4_1, 0, 1, 20, 4)
DEFINE_TILE(tile_q5_1, u_q5_1, 0, 1, 24, 4)
DEFINE_TILE(vec_q4_0, u_q4_0, 8, 0, 18, 1)
DEFINE_TILE(vec_q5_0, u_q5_0, 16, 0, 22, 1)
DEFINE_TILE(vec_q8_0, u_q8_0, 128, 0, 34, 1)
DEFINE_TILE(vec_q4_1, u_q4_1, 0, 1, 20, 1)
DEFINE_TILE(vec_q5_1, u_q5_1, 0, 1, 24, 1)

void ember_cpu_gemm_q32_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes,
                               const uint8_t *xq, size_t xq_row, const int32_t *asum, float *y, int64_t ldy,
                               int64_t r0, int64_t r1, int64_t t0, int64_t t1)
{
    typedef void (*tile_fn)(int64_t, const uint8_t *const *, const uint8_t *const *, const int32_t *const *, float[4][4]);
    const tile_fn tile = type == EMBER_TYPE_Q4_0 ? tile_q4_0 : type == EMBER_TYPE_Q5_0 ? tile_q5_0 : type == EMBER_TYPE_Q8_0 ? tile_q8_0
                       : type == EMBER_TYPE_Q4_1 ? tile_q4_1 : tile_q5_1;
    const tile_fn vec = type == EMBER_TYPE_Q4_0 ? vec_q4_0 : type == EMBER_TYPE_Q5_0 ? vec_q5_0 : type == EMBER_TYPE_Q8_0 ? vec_q8_0
                      : type == EMBER_TYPE_Q4_1 ? vec_q4_1 : vec_q5_1;
    const int64_t nb = n_in / 32;
    for (int64_t r = r0; r < r1; r += 4) {
        const int64_t rm = r1 - r < 4 ? r1 - r : 4;
        const uint8_t *wr[4];
        for (int i = 0; i < 4; i++) wr[i] = w + (size_t)(i < rm ? r + i : r) * row_bytes;
        for (int64_t t = t0; t < t1;) {
            const int64_t rn = t1 - t < 4 ? 1 : 4;
            const uint8_t *ar[4];
            const int32_t *as[4];
            for (int j = 0; j < 4; j++) {
                const int64_t tj = j < rn ? t + j : t;
                ar[j] = xq + (size_t)tj * xq_row;
                as[j] = asum + tj * nb;
            }
            float out[4][4];
            (rn == 4 ? tile : vec)(nb, wr, ar, as, out);
            for (int i = 0; i < rm; i++)
                for (int j = 0; j < rn; j++) y[(t + j) * ldy + r + i] = out[i][j];
            t += rn;
        }
    }
}
