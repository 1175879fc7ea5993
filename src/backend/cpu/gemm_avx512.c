/*
 * gemm_avx512.c — AVX-512 VNNI version of the prefill matmul tiles for the
 * 32-element block formats (see gemm_avx2.c for the math): 4 weight rows x 4
 * tokens per tile (32 vector registers hold the 16 accumulators); and the
 * Q4_K / Q6_K (x Q8_K) prefill tiles, 4 rows x 4 tokens, whose outputs are
 * bit-identical to those formats' one-token vec_dot (see tile_q4_K); and for
 * Q4_0/Q5_0/Q8_0 prefill a 4 rows x 8 tokens tile with two outputs per zmm
 * over interleaved activations (see tile_x), same per-output arithmetic.
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
#include "quant/blocks.h"

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
    static const tile_fn tiles[EMBER_TYPE_COUNT] = {
        [EMBER_TYPE_Q4_0] = tile_q4_0, [EMBER_TYPE_Q5_0] = tile_q5_0, [EMBER_TYPE_Q8_0] = tile_q8_0,
        [EMBER_TYPE_Q4_1] = tile_q4_1, [EMBER_TYPE_Q5_1] = tile_q5_1,
    };
    static const tile_fn vecs[EMBER_TYPE_COUNT] = {
        [EMBER_TYPE_Q4_0] = vec_q4_0, [EMBER_TYPE_Q5_0] = vec_q5_0, [EMBER_TYPE_Q8_0] = vec_q8_0,
        [EMBER_TYPE_Q4_1] = vec_q4_1, [EMBER_TYPE_Q5_1] = vec_q5_1,
    };
    const tile_fn tile = tiles[type], vec = vecs[type];   /* type: ember_cpu_gemm_supported */
    const int64_t nb = n_in / (int64_t)ember_type_block_size(type);
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

/* ---- Q4_K x Q8_K prefill tile -------------------------------------------------------
 * 4 weight rows x 4 tokens per pass. For each (row, token, super-block) it
 * forms the same two exact integers as the one-token dot (quant/simd_avx512.c
 * dot_q4_K_512; ref_k.c ember_vec_dot_q4_K_scalar): sumi = sum over the 8
 * sub-blocks of scale * sum(q * y), msum = sum over the 16 bsums of
 * min * bsum. Integer sums do not depend on the order they are added in, so
 * only the float steps must match, and they are the dot's, per output:
 * acc = fma((float)sumi, d_w * d_a, acc), accm = fma((float)msum,
 * dmin_w * d_a, accm), result acc - accm -- done here in 16 lanes at once,
 * lane 4 * row + token. A token's result is therefore bit-identical to the
 * decode mat-vec and independent of the tile it falls in. The weight nibble
 * unpacking and scale shuffles are shared by the 4 tokens, the activation
 * loads by the 4 rows. */

/* 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K super-block from
 * its 12 packed bytes (layout: gguf-py Q4_K.dequantize_blocks); reads 16
 * bytes at q (the last 4 are quants, unused) */
static inline __m128i q4k_scales_mins(const uint8_t *q)
{
    const __m128i x = _mm_loadu_si128((const __m128i *)q);
    const __m128i p = _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 1, 0, 0));
    const __m128i c = _mm_srlv_epi32(_mm_shuffle_epi32(x, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(0, 0, 0, 4));
    const __m128i lo = _mm_and_si128(p, _mm_setr_epi32(0x3F3F3F3F, 0, 0x3F3F3F3F, 0));
    const __m128i hi = _mm_or_si128(_mm_and_si128(c, _mm_set1_epi32(0x0F0F0F0F)),
                                    _mm_and_si128(_mm_srli_epi32(p, 2), _mm_set1_epi32(0x30303030)));
    return _mm_or_si128(lo, _mm_and_si128(hi, _mm_setr_epi32(0, -1, 0, -1)));
}

/* lane k of the result = sum of the 16 int32 lanes of v[k] */
static inline __m512i reduce16_epi32(const __m512i v[16])
{
    __m512i a[8], b[4];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)   /* each 128-bit lane: partial sums of v[4k..4k+3] */
        b[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
    const __m512i c0 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[0], b[1], 0x88), _mm512_shuffle_i32x4(b[0], b[1], 0xDD));
    const __m512i c1 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2], b[3], 0x88), _mm512_shuffle_i32x4(b[2], b[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(c0, c1, 0x88), _mm512_shuffle_i32x4(c0, c1, 0xDD));
}

/* The Q4_K tiles' shared steps (tile_q4_K, tile_q4_K_dec). The 4 tokens'
 * 8 pair sums of bsums (|.| <= 32 * 128, exact in i16) in the 4 128-bit
 * lanes of the result, token j in lane j. */
static inline __m512i kq_pair_sums(const block_q8_K *const *y)
{
    __m128i b32[4];
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m256i pr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[j]->bsums), _mm256_set1_epi16(1));
        b32[j] = _mm_packs_epi32(_mm256_castsi256_si128(pr), _mm256_extracti128_si256(pr, 1));
    }
    return _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(b32[0]), b32[1], 1),
                                                 b32[2], 2), b32[3], 3);
}

/* msum[i]'s 128-bit lane j holds 4 dwords that sum to msum(i, j): their
 * sums, lane 4i + j of the result. */
static inline __m512i kq_msum_lanes(const __m512i msum[4])
{
    const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(msum[0], msum[1]), _mm512_unpackhi_epi32(msum[0], msum[1]));
    const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(msum[2], msum[3]), _mm512_unpackhi_epi32(msum[2], msum[3]));
    const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));   /* lane 4j + i */
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
}

/* One super-block's sums into the tile's accumulators (lane 4i + j: row i,
 * token j): acc += sumi * d_w * d_a, accm += mi * dmin_w * d_a. */
static inline void kq_tile_acc(const __m512i *sumi, __m512i mi, const float *dw, const float *mw, const float *da,
                               __m512 *acc, __m512 *accm)
{
    const __m512i si = reduce16_epi32(sumi);
    const __m512 dwv = _mm512_setr_ps(dw[0], dw[0], dw[0], dw[0], dw[1], dw[1], dw[1], dw[1],
                                      dw[2], dw[2], dw[2], dw[2], dw[3], dw[3], dw[3], dw[3]);
    const __m512 mwv = _mm512_setr_ps(mw[0], mw[0], mw[0], mw[0], mw[1], mw[1], mw[1], mw[1],
                                      mw[2], mw[2], mw[2], mw[2], mw[3], mw[3], mw[3], mw[3]);
    const __m512 dav = _mm512_castps128_ps512(_mm_loadu_ps(da));
    const __m512 dav4 = _mm512_shuffle_f32x4(dav, dav, 0);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(dwv, dav4), *acc);
    *accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mi), _mm512_mul_ps(mwv, dav4), *accm);
}

static void tile_q4_K(int64_t nb, const uint8_t *const *wr, const uint8_t *const *ar, float out[4][4])
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const block_q4_K *x[4];
        const block_q8_K *y[4];
        __m512i pairs[4], sumi[16], msum[4], mi;
        float dw[4], mw[4], da[4];
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            x[i] = (const block_q4_K *)wr[i] + b;
            y[i] = (const block_q8_K *)ar[i] + b;
            dw[i] = _cvtsh_ss(x[i]->d);
            mw[i] = _cvtsh_ss(x[i]->dmin);
            da[i] = y[i]->d;
        }
        /* msum(i, j) = sum over the 8 sub-blocks k of min_i[k] * (bsums_j[2k] + bsums_j[2k+1]) */
        const __m512i b = kq_pair_sums(y);
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m128i sm = q4k_scales_mins(x[i]->scales);
            const __m512i s = _mm512_cvtepu8_epi32(sm);
            pairs[i] = _mm512_or_si512(s, _mm512_slli_epi32(s, 16));   /* scale in both i16 */
            /* lane j of msum[i]: 4 dwords that sum to msum(i, j) */
            msum[i] = _mm512_madd_epi16(b, _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8))));
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) sumi[4 * i + j] = _mm512_setzero_si512();
        }
        mi = kq_msum_lanes(msum);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i q[4], sc[4];
            #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
                const __m512i p = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i]->qs + 32 * c)));
                q[i] = _mm512_and_si512(_mm512_srlv_epi64(p, shift), m4);
                sc[i] = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(2 * c)), pairs[i]);
            }
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i a = _mm512_loadu_si512(y[j]->qs + 64 * c);
                #pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    sumi[4 * i + j] = _mm512_dpwssd_epi32(sumi[4 * i + j], _mm512_maddubs_epi16(q[i], a), sc[i]);
            }
        }
        kq_tile_acc(sumi, mi, dw, mw, da, &acc, &accm);
    }
    _mm512_storeu_ps(&out[0][0], _mm512_sub_ps(acc, accm));
}

/* The same tile over 4 rows decoded once for every token group of a call
 * (gemm_kq with scratch): per (row, super-block) the chunk vectors q[c] and
 * scale vectors sc[c] of tile_q4_K, the mins as 8 x i16 and d, dmin as f32.
 * The integers and float steps are tile_q4_K's, so are the bits; the nibble
 * unpacking and scale shuffles, which tile_q4_K redoes for each group of 4
 * tokens, are done once per row. */
typedef struct kq4_dec {
    __m512i q[4], sc[4];
    __m128i mins;
    float d, dmin;
} kq4_dec;

static void decode_q4_K(int64_t nb, const uint8_t *row, kq4_dec *out)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (int64_t b = 0; b < nb; b++) {
        const block_q4_K *x = (const block_q4_K *)row + b;
        kq4_dec *o = out + b;
        const __m128i sm = q4k_scales_mins(x->scales);
        const __m512i s = _mm512_cvtepu8_epi32(sm);
        const __m512i pairs = _mm512_or_si512(s, _mm512_slli_epi32(s, 16));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i p = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * c)));
            o->q[c] = _mm512_and_si512(_mm512_srlv_epi64(p, shift), m4);
            o->sc[c] = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(2 * c)), pairs);
        }
        o->mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        o->d = _cvtsh_ss(x->d);
        o->dmin = _cvtsh_ss(x->dmin);
    }
}

static void tile_q4_K_dec(int64_t nb, const kq4_dec *const *dec, const uint8_t *const *ar, float out[4][4])
{
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const block_q8_K *y[4];
        const kq4_dec *x[4];
        __m512i sumi[16], msum[4], mi;
        float dw[4], mw[4], da[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            y[j] = (const block_q8_K *)ar[j] + b;
            x[j] = dec[j] + b;
            da[j] = y[j]->d;
            dw[j] = x[j]->d;
            mw[j] = x[j]->dmin;
        }
        const __m512i bb = kq_pair_sums(y);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            msum[i] = _mm512_madd_epi16(bb, _mm512_broadcast_i32x4(x[i]->mins));
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) sumi[4 * i + j] = _mm512_setzero_si512();
        }
        mi = kq_msum_lanes(msum);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i q[4], sc[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                q[i] = _mm512_load_si512(&x[i]->q[c]);
                sc[i] = _mm512_load_si512(&x[i]->sc[c]);
            }
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i a = _mm512_loadu_si512(y[j]->qs + 64 * c);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    sumi[4 * i + j] = _mm512_dpwssd_epi32(sumi[4 * i + j], _mm512_maddubs_epi16(q[i], a), sc[i]);
            }
        }
        kq_tile_acc(sumi, mi, dw, mw, da, &acc, &accm);
    }
    _mm512_storeu_ps(&out[0][0], _mm512_sub_ps(acc, accm));
}

/* ---- Q6_K x Q8_K prefill tile -------------------------------------------------------
 * 4 weight rows x 4 tokens per pass, bit-identical per output to the Q6_K
 * vec_dot (quant/simd256.h dot_q6_K_256, whose 8 int32 lanes per super-block
 * are ggml's AVX2 vec_dot_q6_K_q8_K lanes): lane l (0..7) = sum over the 8
 * 32-byte chunks of scale * (sum of the 4 products u * y at bytes 4l..4l+3
 * of the chunk) minus 32 * (bsums[2l] * sc[2l] + bsums[2l+1] * sc[2l+1]).
 * Here two chunks share a zmm (lanes 0..7 and 8..15, folded at the end of
 * the super-block), which gives the same exact integers; the float steps
 * are the dot's: per lane acc = fma(d_a * d_w, (float)lane, acc), then the
 * dot's horizontal sum order ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
static void tile_q6_K(int64_t nb, const uint8_t *const *wr, const uint8_t *const *ar, float out[4][4])
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3);
    const __m512i hs0 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2), hs1 = _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc[8];   /* zmm 2i + j/2: (row i, token j) in the low half for even j, high for odd */
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const block_q6_K *x[4];
        const block_q8_K *y[4];
        __m512i pairs[4], sumi[16];
        __m256i sc16[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            x[i] = (const block_q6_K *)wr[i] + b;
            y[i] = (const block_q8_K *)ar[i] + b;
            const __m128i s8 = _mm_loadu_si128((const __m128i *)x[i]->scales);
            sc16[i] = _mm256_cvtepi8_epi16(s8);
            const __m512i s = _mm512_cvtepi8_epi32(s8);
            pairs[i] = _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s, 16));
        }
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) sumi[k] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) {   /* g = 0: chunks u0,u1 (y + 0, + 32); g = 1: u2,u3 (+ 64, + 96) */
                __m512i u[4], sc[4];
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    const __m512i l = _mm512_loadu_si512(x[i]->ql + 64 * h);
                    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i]->qh + 32 * h)));
                    const __m512i lo = g ? _mm512_and_si512(_mm512_srli_epi16(l, 4), m4) : _mm512_and_si512(l, m4);
                    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(hb, g ? hs1 : hs0), m3);
                    u[i] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
                    sc[i] = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(8 * h + 4 * g)), pairs[i]);
                }
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const __m512i a = _mm512_loadu_si512(y[j]->qs + 128 * h + 64 * g);
#pragma GCC unroll 4
                    for (int i = 0; i < 4; i++)
                        sumi[4 * i + j] = _mm512_dpwssd_epi32(sumi[4 * i + j], _mm512_maddubs_epi16(u[i], a), sc[i]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m512i sc2 = _mm512_inserti64x4(_mm512_castsi256_si512(sc16[i]), sc16[i], 1);
            const float dw = _cvtsh_ss(x[i]->d);
#pragma GCC unroll 2
            for (int jp = 0; jp < 2; jp++) {
                const __m512i s0 = sumi[4 * i + 2 * jp], s1 = sumi[4 * i + 2 * jp + 1];
                __m512i v = _mm512_add_epi32(_mm512_shuffle_i32x4(s0, s1, 0x44), _mm512_shuffle_i32x4(s0, s1, 0xEE));
                const __m512i bs = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[2 * jp]->bsums)),
                                                      _mm256_loadu_si256((const __m256i *)y[2 * jp + 1]->bsums), 1);
                v = _mm512_sub_epi32(v, _mm512_slli_epi32(_mm512_madd_epi16(bs, sc2), 5));
                const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(y[2 * jp]->d * dw), _mm256_set1_ps(y[2 * jp + 1]->d * dw), 1);
                acc[2 * i + jp] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(v), acc[2 * i + jp]);
            }
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        float l[16];
        _mm512_storeu_ps(l, acc[k]);
        for (int h = 0; h < 2; h++) {
            const float *v = l + 8 * h;
            out[k / 2][2 * (k % 2) + h] = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        }
    }
}

/* Q4_K or Q6_K weights (x Q8_K): see ember_cpu_gemm_kq_avx512 in cpu.h */
size_t ember_cpu_gemm_kq_scratch_bytes(int64_t n_in)
{
    return EMBER_CPU_KQ_ROWS * (size_t)(n_in / 256) * sizeof(kq4_dec);
}

void ember_cpu_gemm_kq_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes, const uint8_t *xq,
                              size_t xq_row, float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                              ember_kq_cache *cache, uint64_t gen)
{
    void (*const tile)(int64_t, const uint8_t *const *, const uint8_t *const *, float[4][4]) =
        type == EMBER_TYPE_Q4_K ? tile_q4_K : tile_q6_K;
    const int64_t nb = n_in / 256;
    /* Q4_K over more than one group of 4 tokens: the rows decoded once, and
     * kept for this thread's next token groups of the same rows (perf,
     * 2026-12-07: decoding them again for every item of 32 tokens took 6%
     * of a Qwen3.5-4B prefill) */
    kq4_dec *dec = NULL;
    if (type == EMBER_TYPE_Q4_K && cache && cache->dec && t1 - t0 > 4 && r1 - r0 <= EMBER_CPU_KQ_ROWS) {
        dec = cache->dec;
        if (cache->w != w || cache->r0 != r0 || cache->r1 != r1 || cache->gen != gen) {
            for (int64_t r = r0; r < r1; r++) decode_q4_K(nb, w + (size_t)r * row_bytes, dec + (size_t)(r - r0) * (size_t)nb);
            *cache = (ember_kq_cache){.dec = dec, .w = w, .r0 = r0, .r1 = r1, .gen = gen};
        }
    }
    for (int64_t r = r0; r < r1; r += 4) {
        const int64_t rm = r1 - r < 4 ? r1 - r : 4;
        const uint8_t *wr[4];
        const kq4_dec *dr[4];
        for (int i = 0; i < 4; i++) {
            wr[i] = w + (size_t)(i < rm ? r + i : r) * row_bytes;
            dr[i] = dec ? dec + (size_t)(r - r0 + (i < rm ? i : 0)) * (size_t)nb : NULL;
        }
        for (int64_t t = t0; t < t1; t += 4) {
            const int64_t tn = t1 - t < 4 ? t1 - t : 4;
            const uint8_t *ar[4];
            for (int j = 0; j < 4; j++) ar[j] = xq + (size_t)(j < tn ? t + j : t) * xq_row;
            float out[4][4];
            if (dec) tile_q4_K_dec(nb, dr, ar, out);
            else tile(nb, wr, ar, out);
            for (int i = 0; i < rm; i++)
                for (int j = 0; j < tn; j++) y[(t + j) * ldy + r + i] = out[i][j];
        }
    }
}

/* ---- Q4_0 / Q5_0 / Q8_0 x Q8_0 prefill tile, 4 rows x NT tokens in zmm -------------
 * The same per-output arithmetic as tile_q5_0 / vec_q5_0 above (and so as
 * ggml's one-token vec_dot): per 32-element block, 8 int32 lanes, lane l =
 * sum over elements 4l..4l+3 of q_w * q_a (exact), then per lane
 * acc = fma((float)lane, d_w * d_a, acc), and at the end hsum(acc) in
 * hsum()'s order. Here one zmm holds two outputs, (row 2p, token j) in
 * lanes 0..7 and (row 2p + 1, token j) in lanes 8..15, so each dpbusd,
 * convert, multiply and fma does two outputs' work; the rows' unpacked
 * weights are built once per block for NT tokens. The offset of the
 * unsigned weights is taken back by starting each lane at
 * -off * (sum of the lane's 4 activation bytes): ns holds -16 * (that sum) per
 * token, block and lane, precomputed once per matmul (see
 * ember_cpu_q8_0_aux_avx512), and ad the activation scales as f32. */

/* rows w0, w1 of one block in the two 256-bit halves, unsigned (q + off) */
static inline __m512i u2_q4_0(const uint8_t *b0, const uint8_t *b1, int q5)
{
    const int o = q5 ? 6 : 2;
    const __m512i x = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(b0 + o))),
                                                  0xFF00, _mm_loadu_si128((const __m128i *)(b1 + o)));
    __m512i n = _mm512_and_si512(_mm512_srlv_epi64(x, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
    if (q5) n = _mm512_mask_add_epi8(n, (__mmask64)((uint64_t)ld32(b0 + 2) | (uint64_t)ld32(b1 + 2) << 32), n,
                                     _mm512_set1_epi8(16));
    return n;
}

static inline __m512i u2_q8_0(const uint8_t *b0, const uint8_t *b1)
{
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                                         _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
    return _mm512_xor_si512(x, _mm512_set1_epi8((char)0x80));
}

/* [f16 at b0] x 8, [f16 at b1] x 8 as f32 */
static inline __m512 d2(const uint8_t *b0, const uint8_t *b1)
{
    uint16_t h0, h1;
    memcpy(&h0, b0, 2);
    memcpy(&h1, b1, 2);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), _mm512_castps128_ps512(f));
}

/* TYPE: 0 = Q4_0, 1 = Q5_0, 2 = Q8_0 (compile-time constant after inlining).
 * xg: the token group's interleaved activations (EMBER_XG_* layout in cpu.h),
 * tokens 0..NT-1 of the group; out[4][NT]. */
static inline __attribute__((always_inline)) void
tile_x(const int TYPE, const int NT, int64_t nb, const uint8_t *const *wr, const uint8_t *xg, float *out)
{
    const size_t WBS = TYPE == 0 ? 18 : TYPE == 1 ? 22 : 34;
    const uint8_t *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3];
    __m512 c[2][8];
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++)
#pragma GCC unroll 8
        for (int j = 0; j < NT; j++) c[p][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, xg += EMBER_XG_BLOCK) {
        __m512i wu[2];
        __m512 wd[2];
        const size_t o = (size_t)b * WBS;
        wu[0] = TYPE == 2 ? u2_q8_0(w0 + o, w1 + o) : u2_q4_0(w0 + o, w1 + o, TYPE == 1);
        wu[1] = TYPE == 2 ? u2_q8_0(w2 + o, w3 + o) : u2_q4_0(w2 + o, w3 + o, TYPE == 1);
        wd[0] = d2(w0 + o, w1 + o);
        wd[1] = d2(w2 + o, w3 + o);
#pragma GCC unroll 8
        for (int j = 0; j < NT; j++) {
            const __m512i a = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xg + EMBER_XG_QS + 32 * j)));
            /* ns holds -16 * sum: exact for Q5_0, halved (exact) for Q4_0, times 8 for Q8_0 */
            const __m512i ns = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xg + EMBER_XG_NS + 32 * j)));
            const __m512i init = TYPE == 1 ? ns : TYPE == 0 ? _mm512_srai_epi32(ns, 1) : _mm512_slli_epi32(ns, 3);
            float adj;
            memcpy(&adj, xg + EMBER_XG_D + 4 * j, 4);
            const __m512 da = _mm512_set1_ps(adj);
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                const __m512i s = _mm512_dpbusd_epi32(init, wu[p], a);
                c[p][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd[p], da), c[p][j]);
            }
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++)
#pragma GCC unroll 8
        for (int j = 0; j < NT; j++) {
            out[(2 * p) * NT + j] = hsum(_mm512_castps512_ps256(c[p][j]));
            out[(2 * p + 1) * NT + j] = hsum(_mm512_extractf32x8_ps(c[p][j], 1));
        }
}

#define DEFINE_TILE_X(NAME, TYPE, NT)                                                                  \
static void NAME(int64_t nb, const uint8_t *const *wr, const uint8_t *xg, float *out) { tile_x(TYPE, NT, nb, wr, xg, out); }
DEFINE_TILE_X(tile8_q4_0, 0, 8)
DEFINE_TILE_X(tile8_q5_0, 1, 8)
DEFINE_TILE_X(tile8_q8_0, 2, 8)
DEFINE_TILE_X(tile4_q4_0, 0, 4)
DEFINE_TILE_X(tile4_q5_0, 1, 4)
DEFINE_TILE_X(tile4_q8_0, 2, 4)

void ember_cpu_q8_0_interleave_avx512(int64_t n_in, const uint8_t *xq, uint8_t *xg, int slot)
{
    const int64_t nb = n_in / 32;
    const __m256i sixteen = _mm256_set1_epi8(16);
    for (int64_t b = 0; b < nb; b++, xg += EMBER_XG_BLOCK) {
        const uint8_t *blk = xq + b * 34;
        const float d = h2f(blk);
        const __m256i a = _mm256_loadu_si256((const __m256i *)(blk + 2));
        _mm256_storeu_si256((__m256i *)(xg + EMBER_XG_QS + 32 * slot), a);
        _mm256_storeu_si256((__m256i *)(xg + EMBER_XG_NS + 32 * slot),
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), sixteen, a)));
        memcpy(xg + EMBER_XG_D + 4 * slot, &d, 4);
    }
}

void ember_cpu_gemm_q32x_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes, const uint8_t *xq,
                                size_t xq_row, const uint8_t *xg, float *y, int64_t ldy,
                                int64_t r0, int64_t r1, int64_t t0, int64_t t1)
{
    typedef void (*tile_fn)(int64_t, const uint8_t *const *, const uint8_t *, float *);
    const tile_fn t8 = type == EMBER_TYPE_Q4_0 ? tile8_q4_0 : type == EMBER_TYPE_Q5_0 ? tile8_q5_0 : tile8_q8_0;
    const tile_fn t4 = type == EMBER_TYPE_Q4_0 ? tile4_q4_0 : type == EMBER_TYPE_Q5_0 ? tile4_q5_0 : tile4_q8_0;
    typedef void (*vec_fn)(int64_t, const uint8_t *const *, const uint8_t *const *, const int32_t *const *, float[4][4]);
    const vec_fn v1 = type == EMBER_TYPE_Q4_0 ? vec_q4_0 : type == EMBER_TYPE_Q5_0 ? vec_q5_0 : vec_q8_0;
    const int64_t nb = n_in / 32;
    for (int64_t r = r0; r < r1; r += 4) {
        const int64_t rm = r1 - r < 4 ? r1 - r : 4;
        const uint8_t *wr[4];
        for (int i = 0; i < 4; i++) wr[i] = w + (size_t)(i < rm ? r + i : r) * row_bytes;
        for (int64_t t = t0; t < t1;) {
            /* 8- and 4-token tiles start at a group boundary (t0 is a multiple of 8) */
            const int64_t rn = t % 8 == 0 && t1 - t >= 8 ? 8 : t % 8 == 0 && t1 - t >= 4 ? 4 : 1;
            float out[32];
            if (rn == 1) {
                const uint8_t *ar[4] = {xq + (size_t)t * xq_row};
                float o4[4][4];
                v1(nb, wr, ar, NULL, o4);
                for (int i = 0; i < 4; i++) out[i] = o4[i][0];
            } else {
                (rn == 8 ? t8 : t4)(nb, wr, xg + (size_t)(t / 8) * (size_t)nb * EMBER_XG_BLOCK, out);
            }
            for (int i = 0; i < rm; i++)
                for (int j = 0; j < rn; j++) y[(t + j) * ldy + r + i] = out[i * rn + j];
            t += rn;
        }
    }
}
