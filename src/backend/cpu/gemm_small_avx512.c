/*
 * gemm_small_avx512.c — matmul for batches of 2+ tokens, by groups of up to
 * 16 (speculative verification steps, decoding slots, prefill; cpu.c routes
 * Q5_0 above 16 tokens to its prefill tile) of the 32-element block formats
 * (Q4_0, Q5_0, Q8_0 x Q8_0; Q4_1, Q5_1 x Q8_1) with AVX-512 VNNI. Each weight
 * block is unpacked once into both 256-bit halves of a zmm and dotted with
 * two tokens at a time (token 2p in the low half, 2p + 1 in the high half),
 * for all the batch's tokens, R rows per pass; the activations come packed
 * by ember_cpu_small_pack (pairs of tokens' quants side by side, their
 * scales widened to f32 lanes) so every operand is one load.
 *
 * Numerics: every output is bit-identical to the one-token mat-vec of
 * gemm_avx512.c (vec_q*, the decode path that matches ggml's vec_dot): the
 * same exact int32 lanes (sum over elements 4l..4l+3 of q_w * q_a, the
 * unsigned-offset trick of gemm_avx512.c undone exactly in int32), then per
 * block and lane acc = fma(float(lane), d_w * d_a, acc), for the _1 formats
 * m = fma(m_w, s_a, m) per block, and at the end the 8 lanes summed in
 * hsum's order plus m. Integer sums do not depend on order; the float steps
 * are per output the same operations in the same order, only run for 2
 * outputs (lanes) or 16 (the m sums, one lane per token) at once. So a
 * token's result does not depend on the batch it is in.
 * Must not: run unless ember_cpu_variant_active() is AVX512 (cpu.c checks);
 * be given more than EMBER_CPU_SMALL_MAX tokens in one call.
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

/* ---- activation packing ------------------------------------------------------------- */

/* Block b of the packed layout (EMBER_CPU_SMALL_STRIDE(np) bytes, np =
 * ceil(n_tokens / 2)): [np pairs x 64 quant bytes][np pairs x 16 f32 d]
 * [16 f32 s, one per token][np pairs x 16 int32: -128 * (sum of the 4 quants
 * that lane holds), the exact int32 start that undoes the unsigned offset of
 * Q8_0 weights (Q4_0 and Q5_0 shift it down to -8x / -16x)]. The last
 * token also zeroes the pad token of an odd batch and the unused s lanes,
 * so no lane ever reads stale bits (denormals would slow the FMAs). */
void ember_cpu_small_pack(uint32_t vdt, int64_t n_in, int64_t n_tokens, int64_t t, const uint8_t *xq_row, void *pk)
{
    const int64_t nb = n_in / 32, np = (n_tokens + 1) / 2;
    /* Q8_0 {d; qs[32]} or Q8_1 {d, s; qs[32]}: the 32 values end the block */
    const size_t bs = ember_type_block_bytes(vdt), qoff = bs - 32;
    const size_t stride = EMBER_CPU_SMALL_STRIDE(np);
    const bool last = t == n_tokens - 1;
    uint8_t *base = pk;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = xq_row + (size_t)b * bs;
        uint8_t *o = base + (size_t)b * stride;
        float *dv = (float *)(o + (size_t)np * 64);
        float *sv = (float *)(o + (size_t)np * 128);
        int32_t *iv = (int32_t *)(o + (size_t)np * 128 + 64);
        memcpy(o + (size_t)t * 32, blk + qoff, 32);
        for (int l = 0; l < 8; l++) {
            const int8_t *q = (const int8_t *)(blk + qoff) + 4 * l;
            iv[t * 8 + l] = -128 * (q[0] + q[1] + q[2] + q[3]);
        }
        const float d = h2f(blk);
        for (int k = 0; k < 8; k++) dv[t * 8 + k] = d;
        sv[t] = vdt == EMBER_TYPE_Q8_1 ? h2f(blk + 2) : 0.0f;
        if (last) {
            if (n_tokens % 2) {
                memset(o + (size_t)(t + 1) * 32, 0, 32);
                memset(dv + (t + 1) * 8, 0, 8 * sizeof(float));
                memset(iv + (t + 1) * 8, 0, 8 * sizeof(int32_t));
            }
            for (int64_t k = n_tokens; k < 16; k++) sv[k] = 0.0f;
        }
    }
}

/* ---- weight unpacking: one block into both halves of a zmm, unsigned ----------------- */

static inline __m512i nib2(const uint8_t *qs)
{
    const __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs));
    return _mm512_and_si512(_mm512_srlv_epi64(b, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
}

static inline __mmask64 qh2(const uint8_t *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return (__mmask64)u | ((__mmask64)u << 32);
}

static inline __m512i w_q4_0(const uint8_t *b) { return nib2(b + 2); }
static inline __m512i w_q5_0(const uint8_t *b)
{
    const __m512i n = nib2(b + 6);
    return _mm512_mask_add_epi8(n, qh2(b + 2), n, _mm512_set1_epi8(16));
}
static inline __m512i w_q8_0(const uint8_t *b)
{
    return _mm512_xor_si512(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 2))), _mm512_set1_epi8((char)0x80));
}
static inline __m512i w_q4_1(const uint8_t *b) { return nib2(b + 4); }
static inline __m512i w_q5_1(const uint8_t *b)
{
    const __m512i n = nib2(b + 8);
    return _mm512_mask_add_epi8(n, qh2(b + 4), n, _mm512_set1_epi8(16));
}

/* f16 -> f32 by the exact table: a load, not an ALU op (the vector ports are
 * the bottleneck here) */
static inline float h2f_tab(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return ember_cpu_f16_table[h];
}

/* a zeroed register by the zero idiom (no execution port); the compiler
 * would otherwise copy a zero register, a uop on the busy vector ports */
static inline __m512i zero_idiom(void)
{
    __m512i z;
    __asm__("vpxord %0, %0, %0" : "=v"(z));
    return z;
}

/* the int32 lane starts for weights with unsigned offset OFF (8, 16, 128)
 * from the packed -128 * lane sums: a fresh load each time (dpbusd
 * overwrites its accumulator; a load costs no vector-port uop) */
static inline __m512i init_ld(const int32_t *p, int off)
{
    __m512i v;
    __asm__("vmovdqu32 %1, %0" : "=v"(v) : "m"(*(const int32_t(*)[16])p));
    return off == 128 ? v : _mm512_srai_epi32(v, off == 16 ? 3 : 4);
}

/* the 8 lanes of a 256-bit half summed as gemm_avx512.c's hsum does */
static inline float hsum8(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* R rows [r, r + R) (rows past rm repeat row r and are not written) x all
 * n_tokens tokens (NP = ceil(n_tokens / 2) pairs). */
#define DEFINE_SMALL(NAME, UNPACK, OFF, HAS_MIN, WBS)                                                         \
static inline __attribute__((always_inline)) void NAME##_body(                                              \
    int64_t nb, const uint8_t *w, size_t row_bytes, int64_t r, int64_t rm, const uint8_t *pk,               \
    int64_t n_tokens, float *y, int64_t ldy, const int R, const int NP)                                      \
{                                                                                                            \
    const size_t stride = EMBER_CPU_SMALL_STRIDE(NP);                                                        \
    const uint8_t *wr[8];                                                                                    \
    __m512 acc[8][8], m[8];                                                                                  \
    _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                                    \
        wr[i] = w + (size_t)(r + (i < rm ? i : 0)) * row_bytes;                                              \
        m[i] = _mm512_setzero_ps();                                                                          \
        _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();              \
    }                                                                                                        \
    for (int64_t b = 0; b < nb; b++) {                                                                       \
        const uint8_t *o = pk + (size_t)b * stride;                                                          \
        const float *dv = (const float *)(o + (size_t)NP * 64);                                              \
        const int32_t *iv = (const int32_t *)(o + (size_t)NP * 128 + 64);                                    \
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                                \
            const uint8_t *blk = wr[i] + b * WBS;                                                            \
            _mm_prefetch((const char *)blk + ember_cpu_prefetch_bytes, _MM_HINT_T0);                         \
            const __m512i wu = UNPACK(blk);                                                                  \
            const __m512 wd = _mm512_set1_ps(h2f_tab(blk));                                                      \
            if (HAS_MIN)                                                                                     \
                m[i] = _mm512_fmadd_ps(_mm512_set1_ps(h2f_tab(blk + 2)),                                         \
                                       _mm512_loadu_ps((const float *)(o + (size_t)NP * 128)), m[i]);        \
            _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++) {                                           \
                const __m512i pi = _mm512_dpbusd_epi32(OFF ? init_ld(iv + 16 * p, OFF) : zero_idiom(), wu,           \
                                                       _mm512_loadu_si512(o + 64 * p));                      \
                acc[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pi), _mm512_mul_ps(wd, _mm512_loadu_ps(dv + 16 * p)), \
                                            acc[i][p]);                                                      \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                                    \
        if (i >= rm) break;                                                                                  \
        float mv[16];                                                                                        \
        _mm512_storeu_ps(mv, m[i]);                                                                          \
        _Pragma("GCC unroll 8") for (int p = 0; p < NP; p++) {                                               \
            y[(2 * p) * ldy + r + i] = hsum8(_mm512_castps512_ps256(acc[i][p])) + mv[2 * p];                \
            if (2 * p + 1 < n_tokens)                                                                        \
                y[(2 * p + 1) * ldy + r + i] = hsum8(_mm512_extractf32x8_ps(acc[i][p], 1)) + mv[2 * p + 1];  \
        }                                                                                                    \
    }                                                                                                        \
}                                                                                                            \
static void NAME(int64_t nb, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const uint8_t *pk,  \
                 int64_t n_tokens, float *y, int64_t ldy)                                                    \
{                                                                                                            \
    const int np = (int)((n_tokens + 1) / 2);                                                                \
    switch (np) {                                                                                            \
    case 1: for (int64_t r = r0; r < r1; r += 8) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 8, 1); break; \
    case 2: for (int64_t r = r0; r < r1; r += 4) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 4, 2); break; \
    case 3: for (int64_t r = r0; r < r1; r += 4) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 4, 3); break; \
    case 4: for (int64_t r = r0; r < r1; r += 4) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 4, 4); break; \
    case 5: for (int64_t r = r0; r < r1; r += 2) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 2, 5); break; \
    case 6: for (int64_t r = r0; r < r1; r += 2) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 2, 6); break; \
    case 7: for (int64_t r = r0; r < r1; r += 2) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 2, 7); break; \
    default: for (int64_t r = r0; r < r1; r += 2) NAME##_body(nb, w, row_bytes, r, r1 - r, pk, n_tokens, y, ldy, 2, 8); break; \
    }                                                                                                        \
}

DEFINE_SMALL(small_q4_0, w_q4_0, 8, 0, 18)
DEFINE_SMALL(small_q5_0, w_q5_0, 16, 0, 22)
DEFINE_SMALL(small_q8_0, w_q8_0, 128, 0, 34)
DEFINE_SMALL(small_q4_1, w_q4_1, 0, 1, 20)
DEFINE_SMALL(small_q5_1, w_q5_1, 0, 1, 24)

void ember_cpu_gemm_small_avx512(uint32_t type, int64_t n_in, const uint8_t *w, size_t row_bytes, const void *pk,
                                 int64_t n_tokens, float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    const int64_t nb = n_in / 32;
    switch (type) {
    case EMBER_TYPE_Q4_0: small_q4_0(nb, w, row_bytes, r0, r1, pk, n_tokens, y, ldy); break;
    case EMBER_TYPE_Q5_0: small_q5_0(nb, w, row_bytes, r0, r1, pk, n_tokens, y, ldy); break;
    case EMBER_TYPE_Q8_0: small_q8_0(nb, w, row_bytes, r0, r1, pk, n_tokens, y, ldy); break;
    case EMBER_TYPE_Q4_1: small_q4_1(nb, w, row_bytes, r0, r1, pk, n_tokens, y, ldy); break;
    default: small_q5_1(nb, w, row_bytes, r0, r1, pk, n_tokens, y, ldy); break;
    }
}
