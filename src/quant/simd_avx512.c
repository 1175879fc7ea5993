/*
 * simd_avx512.c — the AVX-512 variant of every vec_dot and of the
 * Q8_0/Q8_1/Q8_K activation quantizers.
 *
 * Owns: 512-bit kernels for the k-quants (Q2_K..Q6_K) and the F32/F16/BF16
 * dots; every other kernel is the 256-bit code of
 * simd256.h compiled here with AVX-512 F/BW/VL/DQ + VNNI, where u8 x s8 dot
 * products become VPDPBUSD and Q5 high bits become mask registers (on this
 * class of CPU the 32-element block formats are limited by per-block scalar
 * work, not vector width; see bench/results/quant-cpu.md).
 * Compiled with the AVX-512 flags (CMake, by file name); only called after
 * quant.c has checked CPUID and XCR0.
 * Must not: be called on a CPU without AVX-512 F/BW/VL/DQ/VNNI.
 */
#include "quant/simd256.h"

static inline float hsum_ps512(__m512 v) { return _mm512_reduce_add_ps(v); }

/* ---- F32 / F16 / BF16 x F32 -------------------------------------------------- */

#define DOT_PLAIN_512(NAME, LOAD, CONV, T)                                               \
    static void NAME(int64_t n, float *s, const void *vx, const void *vy)                \
    {                                                                                    \
        const T *x = vx;                                                                 \
        const float *y = vy;                                                             \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                      \
        int64_t i = 0;                                                                   \
        for (; i + 64 <= n; i += 64) {                                                   \
            a0 = _mm512_fmadd_ps(LOAD(x + i), _mm512_loadu_ps(y + i), a0);               \
            a1 = _mm512_fmadd_ps(LOAD(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);     \
            a2 = _mm512_fmadd_ps(LOAD(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);     \
            a3 = _mm512_fmadd_ps(LOAD(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);     \
        }                                                                                \
        for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(LOAD(x + i), _mm512_loadu_ps(y + i), a0); \
        float r = hsum_ps512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
        for (; i < n; i++) r += CONV(x[i]) * y[i];                                       \
        *s = r;                                                                          \
    }
static inline __m512 load_f32x16(const float *p) { return _mm512_loadu_ps(p); }
static inline float id_f32(float f) { return f; }
static inline __m512 load_f16x16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 load_bf16x16(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
DOT_PLAIN_512(dot_f32_512, load_f32x16, id_f32, float)
DOT_PLAIN_512(dot_f16_512, load_f16x16, ember_fp16_to_fp32, uint16_t)
DOT_PLAIN_512(dot_bf16_512, load_bf16x16, ember_bf16_to_fp32, uint16_t)

/* ---- Q4_K / Q5_K ---------------------------------------------------------------
 * A 64-element chunk c (sub-blocks 2c, 2c+1) is one zmm: the 32 packed bytes
 * are broadcast to both halves and the upper half shifted by 4. u8 x s8
 * products in i16 pairs (VPMADDUBSW), then VPDPWSSD with the sub-block scale
 * repeated in i16 pairs: exact i32 sums. */

/* [s[2c] x 8 dwords, s[2c+1] x 8 dwords], each dword = scale in both i16 */
static inline __m512i k4_chunk_scales(__m512i pairs, int c)
{
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(2 * c)), pairs);
}

static inline __m512i k4_scale_pairs(__m128i sm)
{
    __m512i s = _mm512_cvtepu8_epi32(sm); /* 8 scales in dwords 0..7 (8..15: mins, unused) */
    return _mm512_or_si512(s, _mm512_slli_epi32(s, 16));
}

static inline int _mm256_reduce_add_epi32_emb(__m256i v)
{
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(t);
}

/* One Q4_K x Q8_K super-block's exact integer parts: the 8 dwords returned
 * sum to sum_j sc_j (q . a)_j over its 8 sub-blocks j, the 8 of *msum to
 * sum_j m_j (bsums_2j + bsums_2j+1) (ggml's vec_dot_q4_K_q8_K). */
static inline __attribute__((always_inline)) __m256i k4_block_sums(const block_q4_K *x, const block_q8_K *y,
                                                                   __m256i *msum)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m128i sm = k4_scales_mins(x->scales);
    *msum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), k4_mins_x2(sm));
    const __m512i pairs = k4_scale_pairs(sm);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * c)));
        q = _mm512_and_si512(_mm512_srlv_epi64(q, shift), m4);
        __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y->qs + 64 * c));
        sumi = _mm512_dpwssd_epi32(sumi, p, k4_chunk_scales(pairs, c));
    }
    return _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
}

/* The sums of 8 vectors of 8 i32, in order, as one vector (three rounds of
 * pairwise adds: 6 VPHADDD and one cross-lane add for 8 sums, where 8
 * separate horizontal sums take ~7 instructions each). */
static inline __m256i hsum8_x8_epi32(const __m256i v[8])
{
    const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    /* e: [sum of v0..v3's low 4 lanes | sum of their high 4], f the same for v4..v7 */
    const __m256i e = _mm256_hadd_epi32(a, b), f = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(e, f, 0x20), _mm256_permute2x128_si256(e, f, 0x31));
}

/* The float steps are llama.cpp's repacked-gemv order (ref_k.c
 * ember_vec_dot_q4_K_scalar): per super-block, in order, acc += S d_w d_a
 * and accm += M dmin_w d_a with S, M its exact integer sums. Those sums are
 * taken 4 super-blocks at a time (one joint horizontal reduction instead
 * of 8 single ones: the Q4_K decode dot was bound by its vector
 * instructions, perf 2026-12-07); the integers, so the bits, are the same. */
static inline __attribute__((always_inline)) void dot_q4_K_512_pf(int64_t n, float *s, const void *vx, const void *vy,
                                                                  int32_t pf)
{
    const block_q4_K *x = vx;
    const block_q8_K *y = vy;
    const int64_t nb = n / QK_K;
    float acc = 0, accm = 0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        __m256i v[8];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            prefetch_block(x + i + k, sizeof *x, pf);
            v[k] = k4_block_sums(x + i + k, y + i + k, &v[4 + k]);
        }
        float f[8];
        _mm256_storeu_ps(f, _mm256_cvtepi32_ps(hsum8_x8_epi32(v)));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            acc = fmaf(f[k], H2F(x[i + k].d) * y[i + k].d, acc);
            accm = fmaf(f[4 + k], H2F(x[i + k].dmin) * y[i + k].d, accm);
        }
    }
    for (; i < nb; i++) {
        prefetch_block(x + i, sizeof *x, pf);
        __m256i msum;
        const __m256i sumi = k4_block_sums(x + i, y + i, &msum);
        acc = fmaf((float)_mm256_reduce_add_epi32_emb(sumi), H2F(x[i].d) * y[i].d, acc);
        accm = fmaf((float)_mm256_reduce_add_epi32_emb(msum), H2F(x[i].dmin) * y[i].d, accm);
    }
    *s = acc - accm;
}
static void dot_q4_K_512(int64_t n, float *s, const void *vx, const void *vy) { dot_q4_K_512_pf(n, s, vx, vy, 0); }

static void dot_q5_K_512(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q5_K *x = vx;
    const block_q8_K *y = vy;
    const __m512i m4 = _mm512_set1_epi8(0xF), one = _mm512_set1_epi8(1);
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i hshift = _mm512_setr_epi64(0, 0, 0, 0, 1, 1, 1, 1);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sm = k4_scales_mins(x[i].scales);
        __m256i mins = k4_mins_x2(sm);
        __m256i msum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), mins);
        __m512i pairs = k4_scale_pairs(sm);
        __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qh));
        __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c)));
            q = _mm512_and_si512(_mm512_srlv_epi64(q, shift), m4);
            /* high bits: bit 2c of qh[l] for the low half, bit 2c+1 for the high half
             * (64-bit shifts by <= 7 leave bit 0 of each byte from that byte) */
            __m512i h = _mm512_srlv_epi64(hb, _mm512_add_epi64(hshift, _mm512_set1_epi64(2 * c)));
            q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(h, one), 4));
            __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y[i].qs + 64 * c));
            sumi = _mm512_dpwssd_epi32(sumi, p, k4_chunk_scales(pairs, c));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * H2F(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].dmin)), _mm256_cvtepi32_ps(msum), accm);
    }
    *s = hsum_ps512(acc) - hsum_ps256(accm);
}

/* ---- Q6_K ---------------------------------------------------------------------
 * Per 128-element half: ql (64 bytes) gives elements 0..63 (low nibbles) and
 * 64..127 (high nibbles) directly; qh (32 bytes) is broadcast to both halves
 * of a zmm and shifted per half. u = ql | qh<<4 in 0..63, the -32 through
 * bsums. Each 128-bit lane is one 16-element sub-block with its own scale. */
/* Q6_K: dot_q6_K_256, whose int32 lanes are those of ggml's vec_dot_q6_K_q8_K */

/* ---- Q3_K / Q2_K ---------------------------------------------------------------
 * A zmm holds two 32-element groups (g, g+1) of one 128-element half: the 32
 * packed bytes are broadcast to both halves and shifted by 2g / 2g+2; each
 * 128-bit lane is then one 16-element sub-block. */

/* i8 scales -> dwords holding the scale in both i16 */
static inline __m512i scale_pairs16(__m128i sc8, bool is_signed)
{
    __m512i s = is_signed ? _mm512_cvtepi8_epi32(sc8) : _mm512_cvtepu8_epi32(sc8);
    return _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s, 16));
}

static void dot_q3_K_512(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    const __m512i lane4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i pair = _mm512_setr_epi64(0, 0, 0, 0, 1, 1, 1, 1);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sc8 = q3_K_scales(x[i].scales);
        __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), _mm256_cvtepi8_epi16(sc8));
        __m512i pairs = scale_pairs16(sc8, true);
        __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].hmask));
        __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h)));
#pragma GCC unroll 2
            for (int gp = 0; gp < 2; gp++) {
                /* groups g = 2gp, 2gp+1: low 2 bits at shift 2g, high bit = hmask bit 4h+g */
                __m512i u = _mm512_and_si512(_mm512_srlv_epi64(qs, _mm512_slli_epi64(_mm512_add_epi64(pair, _mm512_set1_epi64(2 * gp)), 1)), m3);
                __m512i hb = _mm512_and_si512(_mm512_srlv_epi64(hm, _mm512_add_epi64(pair, _mm512_set1_epi64(4 * h + 2 * gp))), one);
                u = _mm512_or_si512(u, _mm512_slli_epi16(hb, 2));
                __m512i p = _mm512_maddubs_epi16(u, _mm512_loadu_si512(y[i].qs + 128 * h + 64 * gp));
                __m512i scv = _mm512_permutexvar_epi32(_mm512_add_epi32(lane4, _mm512_set1_epi32(8 * h + 4 * gp)), pairs);
                sumi = _mm512_dpwssd_epi32(sumi, p, scv);
            }
        }
        /* q = u - 4: subtract 4*sum(sc*bsums) in the low 8 lanes */
        sumi = _mm512_sub_epi32(sumi, _mm512_castsi256_si512(_mm256_slli_epi32(corr, 2)));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * H2F(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps512(acc);
}

static void dot_q2_K_512(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    const __m512i lane4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i pair = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        __m256i msum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), mins);
        __m512i pairs = scale_pairs16(_mm_and_si128(sc8, m4), false);
        __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h)));
#pragma GCC unroll 2
            for (int gp = 0; gp < 2; gp++) {
                __m512i u = _mm512_and_si512(_mm512_srlv_epi64(qs, _mm512_add_epi64(pair, _mm512_set1_epi64(4 * gp))), m3);
                __m512i p = _mm512_maddubs_epi16(u, _mm512_loadu_si512(y[i].qs + 128 * h + 64 * gp));
                __m512i scv = _mm512_permutexvar_epi32(_mm512_add_epi32(lane4, _mm512_set1_epi32(8 * h + 4 * gp)), pairs);
                sumi = _mm512_dpwssd_epi32(sumi, p, scv);
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * H2F(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].dmin)), _mm256_cvtepi32_ps(msum), accm);
    }
    *s = hsum_ps512(acc) - hsum_ps256(accm);
}

#define EXPORT_DOT(t, impl) \
    void ember_vec_dot_##t##_avx512(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) \
    { impl(n, s, x, y); }
EXPORT_DOT(f32, dot_f32_512) EXPORT_DOT(f16, dot_f16_512) EXPORT_DOT(bf16, dot_bf16_512)
EXPORT_DOT(q4_0, dot_q4_0_256) EXPORT_DOT(q4_1, dot_q4_1_256) EXPORT_DOT(q5_0, dot_q5_0_256)
EXPORT_DOT(q5_1, dot_q5_1_256) EXPORT_DOT(q8_0, dot_q8_0_256) EXPORT_DOT(iq4_nl, dot_iq4_nl_256)
EXPORT_DOT(q2_K, dot_q2_K_512) EXPORT_DOT(q3_K, dot_q3_K_512) EXPORT_DOT(q4_K, dot_q4_K_512)
EXPORT_DOT(q5_K, dot_q5_K_512) EXPORT_DOT(q6_K, dot_q6_K_256) EXPORT_DOT(iq4_xs, dot_iq4_xs_256)

void ember_vec_dot_pf_q4_K_avx512(int64_t n, float *restrict s, const void *restrict x, const void *restrict y, int32_t pf)
{ dot_q4_K_512_pf(n, s, x, y, pf); }
void ember_vec_dot_pf_q6_K_avx512(int64_t n, float *restrict s, const void *restrict x, const void *restrict y, int32_t pf)
{ dot_q6_K_256_pf(n, s, x, y, pf); }

void ember_quantize_q8_0_avx512(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0_256(x, y, n); }
void ember_quantize_q8_1_avx512(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1_256(x, y, n); }
void ember_quantize_q8_K_avx512(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_K_256(x, y, n); }
