/*
 * simd256.h — 256-bit x86 kernels shared by simd_avx2.c and simd_avx512.c.
 *
 * Owns: vec_dot of every weight format with its activation format and the
 * Q8_0/Q8_1/Q8_K activation quantizers, written with 256-bit intrinsics.
 * Included (static functions) by both SIMD files: compiled in simd_avx2.c
 * with -mavx2 -mfma -mf16c, and in simd_avx512.c with the AVX-512 flags,
 * where the s8 x u8 products become VPDPBUSD (AVX512-VNNI on 256-bit regs).
 * Integer block sums are exact and identical to the scalar reference; only
 * the order of the float accumulation differs.
 * Must not: be included outside src/quant/simd_*.c.
 */
#ifndef EMBER_QUANT_SIMD256_H
#define EMBER_QUANT_SIMD256_H

#include <immintrin.h>
#include <math.h>
#include "quant/blocks.h"

/* each including file exports only the kernels it does not replace */
#pragma GCC diagnostic ignored "-Wunused-function"

/* fp16 -> fp32 by table (quant.c fills it before any kernel can run): two
 * loads, no shuffle-port uops, unlike VCVTPH2PS on a scalar */
#define H2F(h) ember_fp16_table[h]
#define H2F_BCAST(h) _mm256_broadcast_ss(&ember_fp16_table[h])

static inline float hsum_ps256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline int hsum_i32_256(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}
static inline float hmax_ps256(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* sum over groups of 4 of u8(a) * s8(b) -> 8 x i32 (no saturation: a <= 127
 * or the pair sums fit in i16 for all our callers) */
static inline __m256i dot_us8(__m256i a, __m256i b)
{
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}
/* the same for s8(a) * s8(b), a != -128 */
static inline __m256i dot_ss8(__m256i a, __m256i b)
{
    return dot_us8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}
/* 16 bytes of packed nibbles -> 32 bytes: low nibbles, then high nibbles */
static inline __m256i nibbles32(const uint8_t *p)
{
    /* broadcast load (no shuffle uop), then shift only the upper lane */
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    b = _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}
/* 32 bits -> 32 bytes, 0xFF where bit j of *p is set (byte j) */
static inline __m256i bitmask32(const uint8_t *p)
{
    const __m256i sel = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                           0x0303030303030303LL);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)ember_load_u32(p)), sel);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, bits), bits);
}

/* ---- F32 / F16 / BF16 weights x F32 activations --------------------------- */

static void dot_f32_256(int64_t n, float *s, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float r = hsum_ps256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) r += x[i] * y[i];
    *s = r;
}

static inline __m256 load_f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load_bf16x8(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define DOT_HALF_256(NAME, LOAD, CONV)                                                     \
    static void NAME(int64_t n, float *s, const void *vx, const void *vy)                  \
    {                                                                                      \
        const uint16_t *x = vx;                                                            \
        const float *y = vy;                                                               \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                        \
        int64_t i = 0;                                                                     \
        for (; i + 32 <= n; i += 32) {                                                     \
            a0 = _mm256_fmadd_ps(LOAD(x + i), _mm256_loadu_ps(y + i), a0);                 \
            a1 = _mm256_fmadd_ps(LOAD(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);         \
            a2 = _mm256_fmadd_ps(LOAD(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);       \
            a3 = _mm256_fmadd_ps(LOAD(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);       \
        }                                                                                  \
        for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(LOAD(x + i), _mm256_loadu_ps(y + i), a0); \
        float r = hsum_ps256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
        for (; i < n; i++) r += CONV(x[i]) * y[i];                                         \
        *s = r;                                                                            \
    }
DOT_HALF_256(dot_f16_256, load_f16x8, ember_fp16_to_fp32)
DOT_HALF_256(dot_bf16_256, load_bf16x8, ember_bf16_to_fp32)

/* ---- 32-wide blocks --------------------------------------------------------
 * Per block: exact i32 lanes, converted and scaled by d_x*d_y into 8 float
 * lanes; two accumulators hide the FMA latency. */

/* Q4_1/Q5_1 x Q8_1 block scales straight from memory: VCVTPH2PS of 4 halves
 * at &x->d and &y->d (d then m, d then s; the rest is ignored but stays
 * inside the block). Lane 0 of the product is d_x*d_y, lane 1 is m_x*s_y.
 * (Formats with one scale use the fp16 table instead: fewer uops there.) */
static inline __m128 block_scales(const void *xd, const void *yd)
{
    return _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)xd)),
                      _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)yd)));
}

#define DOT32_STEP(ACC, MS, k)                                                           \
    {                                                                                    \
        const XT *b = &x[i + (k)];                                                       \
        const YT *c = &y[i + (k)];                                                       \
        __m256i qx = QX;                                                                 \
        __m256i p = DOT(qx, _mm256_loadu_si256((const __m256i *)c->qs));                 \
        if (HAS_MS) {                                                                    \
            __m128 sc = block_scales(&b->d, &c->d);                                      \
            ACC = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcastss_ps(sc), ACC); \
            MS = _mm_add_ps(MS, sc);                                                     \
        } else {                                                                         \
            ACC = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(H2F_BCAST(b->d), H2F_BCAST(c->d)), ACC); \
        }                                                                                \
    }

/* Per block: exact i32 lanes, converted and scaled by d_x*d_y into 8 float
 * lanes; two accumulators hide the FMA latency. HAS_MS adds m_x*s_y. */
#define DOT32_LOOP()                                                                  \
    const XT *x = vx;                                                                 \
    const YT *y = vy;                                                                 \
    const int64_t nb = n / 32;                                                        \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                    \
    __m128 ms0 = _mm_setzero_ps(), ms1 = _mm_setzero_ps();                            \
    int64_t i = 0;                                                                    \
    for (; i + 1 < nb; i += 2) {                                                      \
        DOT32_STEP(acc0, ms0, 0)                                                      \
        DOT32_STEP(acc1, ms1, 1)                                                      \
    }                                                                                 \
    for (; i < nb; i++) DOT32_STEP(acc0, ms0, 0)                                      \
    float r = hsum_ps256(_mm256_add_ps(acc0, acc1));                                  \
    if (HAS_MS) {                                                                     \
        __m128 ms = _mm_add_ps(ms0, ms1);                                             \
        r += _mm_cvtss_f32(_mm_movehdup_ps(ms));                                      \
    }                                                                                 \
    *s = r;

/* Q5 high bits: AVX-512BW/VL turn the 32 bits straight into a byte mask */
#if defined(__AVX512BW__) && defined(__AVX512VL__)
static inline __m256i q5_signed(const uint8_t *qs, const uint8_t *qh)
{
    __m256i nib = nibbles32(qs);
    return _mm256_mask_sub_epi8(nib, _cvtu32_mask32(~ember_load_u32(qh)), nib, _mm256_set1_epi8(16));
}
static inline __m256i q5_unsigned(const uint8_t *qs, const uint8_t *qh)
{
    __m256i nib = nibbles32(qs);
    return _mm256_mask_add_epi8(nib, _cvtu32_mask32(ember_load_u32(qh)), nib, _mm256_set1_epi8(16));
}
#else
/* q-16 = nibble | 0xF0 where the high bit is clear, = nibble where set */
static inline __m256i q5_signed(const uint8_t *qs, const uint8_t *qh)
{
    return _mm256_or_si256(nibbles32(qs), _mm256_andnot_si256(bitmask32(qh), _mm256_set1_epi8((char)0xF0)));
}
static inline __m256i q5_unsigned(const uint8_t *qs, const uint8_t *qh)
{
    return _mm256_or_si256(nibbles32(qs), _mm256_and_si256(bitmask32(qh), _mm256_set1_epi8(0x10)));
}
#endif

static void dot_q4_0_256(int64_t n, float *s, const void *vx, const void *vy)
{
#define XT block_q4_0
#define YT block_q8_0
#define QX _mm256_sub_epi8(nibbles32(b->qs), _mm256_set1_epi8(8))
#define DOT dot_ss8
#define HAS_MS 0
    DOT32_LOOP()
#undef XT
#undef YT
#undef QX
#undef DOT
#undef HAS_MS
}

static void dot_q4_1_256(int64_t n, float *s, const void *vx, const void *vy)
{
#define XT block_q4_1
#define YT block_q8_1
#define QX nibbles32(b->qs)
#define DOT dot_us8
#define HAS_MS 1
    DOT32_LOOP()
#undef XT
#undef YT
#undef QX
#undef DOT
#undef HAS_MS
}

static void dot_q5_0_256(int64_t n, float *s, const void *vx, const void *vy)
{
#define XT block_q5_0
#define YT block_q8_0
#define QX q5_signed(b->qs, b->qh)
#define DOT dot_ss8
#define HAS_MS 0
    DOT32_LOOP()
#undef XT
#undef YT
#undef QX
#undef DOT
#undef HAS_MS
}

static void dot_q5_1_256(int64_t n, float *s, const void *vx, const void *vy)
{
#define XT block_q5_1
#define YT block_q8_1
#define QX q5_unsigned(b->qs, b->qh)
#define DOT dot_us8
#define HAS_MS 1
    DOT32_LOOP()
#undef XT
#undef YT
#undef QX
#undef DOT
#undef HAS_MS
}

static void dot_q8_0_256(int64_t n, float *s, const void *vx, const void *vy)
{
#define XT block_q8_0
#define YT block_q8_0
#define QX _mm256_loadu_si256((const __m256i *)b->qs)
#define DOT dot_ss8
#define HAS_MS 0
    DOT32_LOOP()
#undef XT
#undef YT
#undef QX
#undef DOT
#undef HAS_MS
}

static inline __m256i iq4nl_table(void)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ember_kvalues_iq4nl));
}
static void dot_iq4_nl_256(int64_t n, float *s, const void *vx, const void *vy)
{
    const __m256i tab = iq4nl_table();
#define XT block_iq4_nl
#define YT block_q8_0
#define QX _mm256_shuffle_epi8(tab, nibbles32(b->qs))
#define DOT dot_ss8
#define HAS_MS 0
    DOT32_LOOP()
#undef XT
#undef YT
#undef QX
#undef DOT
#undef HAS_MS
}

/* ---- k-quants x Q8_K -------------------------------------------------------- */

/* Unpack Q4_K/Q5_K 6-bit scales and mins (same bits as ember_k4_scale_min):
 * bytes 0..7 = scales, 8..15 = mins. With a = bytes 0..3, b = 4..7,
 * c = 8..11 of the packed field, the four dwords are a&0x3F.., (c&0x0F..) |
 * ((a>>2)&0x30..), b&0x3F.., ((c>>4)&0x0F..) | ((b>>2)&0x30..). Reads 16
 * bytes at q: the 12 scale bytes and the first 4 quant bytes (unused). */
static inline __m128i k4_scales_mins(const uint8_t *q)
{
    const __m128i x = _mm_loadu_si128((const __m128i *)q);
    const __m128i p = _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 1, 0, 0));                 /* a a b b */
    const __m128i c = _mm_srlv_epi32(_mm_shuffle_epi32(x, _MM_SHUFFLE(2, 2, 2, 2)),
                                     _mm_setr_epi32(0, 0, 0, 4));                      /* c c c c>>4 */
    const __m128i lo = _mm_and_si128(p, _mm_setr_epi32(0x3F3F3F3F, 0, 0x3F3F3F3F, 0));
    const __m128i hi = _mm_or_si128(_mm_and_si128(c, _mm_set1_epi32(0x0F0F0F0F)),
                                    _mm_and_si128(_mm_srli_epi32(p, 2), _mm_set1_epi32(0x30303030)));
    return _mm_or_si128(lo, _mm_and_si128(hi, _mm_setr_epi32(0, -1, 0, -1)));
}
/* mins m_j, each twice (for the two bsums of sub-block j), as 16 x i16 */
static inline __m256i k4_mins_x2(__m128i sm)
{
    return _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
}

/* sum over 16 sub-blocks of 16 of bsums[j] * w[j] (w as 16 x i16) */
static inline int bsums_dot(const int16_t *bsums, __m256i w)
{
    return hsum_i32_256(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), w));
}


/* s16: 16 x i16 sub-block scales. Returns sc[t] (t even) in every i16 of
 * the low 128 bits and sc[t+1] in the high 128 bits: VPERMD + VPSHUFB */
static inline __m256i scale_pair_v(__m256i s16, int t)
{
    const __m256i shuf = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(s16, _mm256_set1_epi32(t / 2)), shuf);
}

/* Q3_K: the 16 6-bit scales (offset 32 removed), as int8 (layout: gguf-py
 * Q3_K.dequantize_blocks; four at a time with 32-bit masks) */
static inline __m128i q3_K_scales(const uint8_t *b)
{
    /* dwords: a0&0x0F.. | (a2&3..)<<4, a1&0x0F.. | ((a2>>2)&3..)<<4,
     * (a0>>4)&0x0F.. | ((a2>>4)&3..)<<4, (a1>>4)&0x0F.. | ((a2>>6)&3..)<<4 */
    const __m128i a01 = _mm_loadl_epi64((const __m128i *)b);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(a01, _MM_SHUFFLE(1, 0, 1, 0)),
                                                    _mm_setr_epi32(0, 0, 4, 4)), _mm_set1_epi32(0x0F0F0F0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)ember_load_u32(b + 8)),
                                                    _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi32(0x03030303));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}

static inline int hsum_epi32_256(__m256i v)
{
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(t);
}

/* Before reading a weight block of `bytes` at blk: prefetch the lines pf
 * bytes past it (pf > 0), for the _pf dots (quant.h ember_vec_dot_pf_fn). A
 * prefetch does not fault, so the lines past the end of a row may be named. */
static inline __attribute__((always_inline)) void prefetch_block(const void *blk, size_t bytes, int32_t pf)
{
    if (pf <= 0) return;
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)blk + pf + o, _MM_HINT_T0);
}

static inline __attribute__((always_inline)) void dot_q4_K_256_pf(int64_t n, float *s, const void *vx, const void *vy,
                                                                  int32_t pf)
{
    const block_q4_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float acc = 0, accm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_block(x + i, sizeof *x, pf);
        const __m128i smv = k4_scales_mins(x[i].scales);
        uint8_t sm[16];
        _mm_storeu_si128((__m128i *)sm, smv);
        __m256i mins = k4_mins_x2(smv);
        int msum = bsums_dot(y[i].bsums, mins);
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(q4 + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c)));
            __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32)));
            p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16(sm[2 * c]));
            p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16(sm[2 * c + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        /* llama.cpp's repacked-gemv order (ref_k.c ember_vec_dot_q4_K_scalar) */
        acc = fmaf((float)hsum_epi32_256(sumi), H2F(x[i].d) * y[i].d, acc);
        accm = fmaf((float)msum, H2F(x[i].dmin) * y[i].d, accm);
    }
    *s = acc - accm;
}
static void dot_q4_K_256(int64_t n, float *s, const void *vx, const void *vy) { dot_q4_K_256_pf(n, s, vx, vy, 0); }

static void dot_q5_K_256(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q5_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i smv = k4_scales_mins(x[i].scales);
        uint8_t sm[16];
        _mm_storeu_si128((__m128i *)sm, smv);
        __m256i mins = k4_mins_x2(smv);
        int msum = bsums_dot(y[i].bsums, mins);
        const uint8_t *q5 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(q5 + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hb = _mm256_srli_epi16(hb, 1);
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hb = _mm256_srli_epi16(hb, 1);
            __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c)));
            __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32)));
            p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16(sm[2 * c]));
            p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16(sm[2 * c + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        const float d = y[i].d * H2F(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += y[i].d * H2F(x[i].dmin) * (float)msum;
    }
    *s = hsum_ps256(acc) - accm;
}

/* Q6_K: q = u - 32 with u = ql | qh<<4 in 0..63; sum u*y by maddubs, the -32
 * through bsums once per super-block. */
static inline __attribute__((always_inline)) void dot_q6_K_256_pf(int64_t n, float *s, const void *vx, const void *vy,
                                                                  int32_t pf)
{
    const block_q6_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_block(x + i, sizeof *x, pf);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i u0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
            __m256i u1 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
            __m256i u2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
            __m256i u3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
            const int8_t *q8h = q8 + 128 * h;
            __m256i p0 = _mm256_maddubs_epi16(u0, _mm256_loadu_si256((const __m256i *)q8h));
            __m256i p1 = _mm256_maddubs_epi16(u1, _mm256_loadu_si256((const __m256i *)(q8h + 32)));
            __m256i p2 = _mm256_maddubs_epi16(u2, _mm256_loadu_si256((const __m256i *)(q8h + 64)));
            __m256i p3 = _mm256_maddubs_epi16(u3, _mm256_loadu_si256((const __m256i *)(q8h + 96)));
            p0 = _mm256_madd_epi16(p0, scale_pair_v(sc16, 8 * h + 0));
            p1 = _mm256_madd_epi16(p1, scale_pair_v(sc16, 8 * h + 2));
            p2 = _mm256_madd_epi16(p2, scale_pair_v(sc16, 8 * h + 4));
            p3 = _mm256_madd_epi16(p3, scale_pair_v(sc16, 8 * h + 6));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
        }
        /* the -32 offset per lane as ggml's AVX2 vec_dot_q6_K_q8_K takes it
         * back (lane l: sub-blocks 2l, 2l+1), so each int32 lane, and the
         * float accumulation after it, is theirs */
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(
                   _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc16), 5));
        const float d = y[i].d * H2F(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}
static void dot_q6_K_256(int64_t n, float *s, const void *vx, const void *vy) { dot_q6_K_256_pf(n, s, vx, vy, 0); }

/* Q3_K: q = u - 4 with u = low2 | hbit<<2 in 0..7; the -4 through bsums. */
static void dot_q3_K_256(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sc16 = _mm256_cvtepi8_epi16(q3_K_scales(x[i].scales));
        int corr = bsums_dot(y[i].bsums, sc16);
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m256i u = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16(qs, 2);
                u = _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(hm, one), 2));
                hm = _mm256_srli_epi16(hm, 1);
                int t = 8 * h + 2 * g;
                __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(y[i].qs + 16 * t)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair_v(sc16, t)));
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(4 * corr, 0, 0, 0, 0, 0, 0, 0));
        const float d = y[i].d * H2F(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}

static void dot_q2_K_256(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i mins = _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_andnot_si128(_mm256_castsi256_si128(m4), sc8), 4));
        int msum = bsums_dot(y[i].bsums, mins);
        __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm256_castsi256_si128(m4)));
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m256i u = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16(qs, 2);
                int t = 8 * h + 2 * g;
                __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(y[i].qs + 16 * t)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair_v(sc16, t)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
        accm += y[i].d * H2F(x[i].dmin) * (float)msum;
    }
    *s = hsum_ps256(acc) - accm;
}

static void dot_iq4_xs_256(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq4_xs *x = vx;
    const block_q8_K *y = vy;
    const __m256i tab = iq4nl_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* 8 scales ls = 4 low bits (scales_l nibbles, in order) | 2 high bits
         * (scales_h >> 2j) << 4, minus 32, repeated in both i16 of a dword
         * for VPMADDWD; stored so that each is a broadcast load */
        uint32_t l = ember_load_u32(x[i].scales_l);
        __m128i lo = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)(l & 0x0F0F0F0F)),
                                       _mm_cvtsi32_si128((int)((l >> 4) & 0x0F0F0F0F)));
        __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x[i].scales_h),
                                                        _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                      _mm256_set1_epi32(3));
        __m256i ls = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(lo), _mm256_slli_epi32(hi, 4)),
                                      _mm256_set1_epi32(32));
        ls = _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(ls, 16));
        int32_t sv[8];
        _mm256_storeu_si256((__m256i *)sv, ls);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i q = _mm256_shuffle_epi8(tab, nibbles32(x[i].qs + 16 * j));
            __m256i yy = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * j));
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(yy, q));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi32(sv[j])));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}

/* ---- activation quantizers ---------------------------------------------------
 * Bit-exact with ember_quantize_q8_*_scalar: same amax, same d and id, the
 * same product x*id rounded to nearest even (VCVTPS2DQ under the default
 * MXCSR), fp16 by VCVTPS2PH round-to-nearest-even. */

static inline __m256 abs_ps256(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

/* 4 x 8 i32 (elements in order) -> 32 i8 in order */
static inline __m256i pack_i32x32_i8(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i r = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* lane k of the result = max over the 8 lanes of m[k] */
static inline __m256 hmax_8x8(const __m256 m[8])
{
    __m256 t[4], u[2];
    for (int k = 0; k < 4; k++)
        t[k] = _mm256_max_ps(_mm256_unpacklo_ps(m[2 * k], m[2 * k + 1]), _mm256_unpackhi_ps(m[2 * k], m[2 * k + 1]));
    for (int k = 0; k < 2; k++)
        u[k] = _mm256_max_ps(_mm256_shuffle_ps(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_max_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
}
/* lane k of the result = sum over the 8 lanes of s[k] */
static inline __m256i hsum_8x8_epi32(const __m256i s[8])
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* Q8_0 / Q8_1 rows, 8 blocks at a time so that the two divisions per block
 * (d = amax/127, id = 127/amax, as the scalar code) run 8-wide. */
static void quantize_q8_x_256(const float *x, void *vy, int64_t n, bool q8_1)
{
    const int64_t nb = n / 32;
    const size_t bsz = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    uint8_t *out = vy;
    int64_t i = 0;
    for (; i < nb; i += 8) {
        const int g = nb - i >= 8 ? 8 : (int)(nb - i);
        const float *xb = x + 32 * i;
        __m256 m[8];
        for (int k = 0; k < 8; k++) {
            if (k >= g) { m[k] = _mm256_setzero_ps(); continue; }
            const float *p = xb + 32 * k;
            m[k] = _mm256_max_ps(_mm256_max_ps(abs_ps256(_mm256_loadu_ps(p)), abs_ps256(_mm256_loadu_ps(p + 8))),
                                 _mm256_max_ps(abs_ps256(_mm256_loadu_ps(p + 16)), abs_ps256(_mm256_loadu_ps(p + 24))));
        }
        const __m256 amax = hmax_8x8(m);
        const __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.0f));
        const __m256 nz = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_OQ);
        const __m256 id = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(127.0f), amax), nz);
        float idv[8];
        uint16_t dh[8];
        _mm256_storeu_ps(idv, id);
        _mm_storeu_si128((__m128i *)dh, _mm256_cvtps_ph(d, 0));
        __m256i sums[8];
        for (int k = 0; k < g; k++) {
            const float *p = xb + 32 * k;
            const __m256 v = _mm256_broadcast_ss(&idv[k]);
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p), v));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 8), v));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 16), v));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 24), v));
            uint8_t *blk = out + (size_t)(i + k) * bsz;
            _mm256_storeu_si256((__m256i *)(blk + (q8_1 ? 4 : 2)), pack_i32x32_i8(i0, i1, i2, i3));
            memcpy(blk, &dh[k], 2);
            if (q8_1) sums[k] = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        }
        if (q8_1) {
            for (int k = g; k < 8; k++) sums[k] = _mm256_setzero_si256();
            uint16_t sh[8];
            _mm_storeu_si128((__m128i *)sh, _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtepi32_ps(hsum_8x8_epi32(sums)), d), 0));
            for (int k = 0; k < g; k++) memcpy(out + (size_t)(i + k) * bsz + 2, &sh[k], 2);
        }
    }
}
static void quantize_q8_0_256(const float *x, void *vy, int64_t n) { quantize_q8_x_256(x, vy, n, false); }
static void quantize_q8_1_256(const float *x, void *vy, int64_t n) { quantize_q8_x_256(x, vy, n, true); }

/* bsums of 256 stored q8: sums of each 16 bytes, in order */
static inline void q8k_bsums_256(const int8_t *q, int16_t *bsums)
{
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i r[2];
    for (int h = 0; h < 2; h++) {
        __m256i v[4];
        for (int k = 0; k < 4; k++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(q + 128 * h + 32 * k));
            v[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, b), ones16); /* 4 i32 per 16 bytes */
        }
        __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
        /* lane0: groups 0,2,4,6 ; lane1: groups 1,3,5,7 (of this half) */
        r[h] = _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
    __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256((__m256i *)bsums, p);
}

static void quantize_q8_K_256(const float *x, void *vy, int64_t n)
{
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
        for (int j = 0; j < QK_K; j += 32) {
            m0 = _mm256_max_ps(m0, abs_ps256(_mm256_loadu_ps(x + j)));
            m1 = _mm256_max_ps(m1, abs_ps256(_mm256_loadu_ps(x + j + 8)));
            m2 = _mm256_max_ps(m2, abs_ps256(_mm256_loadu_ps(x + j + 16)));
            m3 = _mm256_max_ps(m3, abs_ps256(_mm256_loadu_ps(x + j + 24)));
        }
        const float amax = hmax_ps256(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
        if (amax == 0) { memset(&y[i], 0, sizeof y[i]); continue; }
        const float id = 127.0f / amax;
        const __m256 vid = _mm256_set1_ps(id);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i r = pack_i32x32_i8(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), vid)),
                                       _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), vid)),
                                       _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 16), vid)),
                                       _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 24), vid)));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), r);
        }
        q8k_bsums_256(y[i].qs, y[i].bsums);
        y[i].d = 1.0f / id;
    }
}

#endif
