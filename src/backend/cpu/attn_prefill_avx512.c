/*
 * attn_prefill_avx512.c — AVX-512 inner loops of the CPU backend's prefill attention
 * (attn_run_grouped in cpu.c: F16 cache, >= 64 queries, the query heads of
 * one KV head together).
 *
 * Owns: scores of up to 4 K rows x up to 4 query heads per pass, and the
 * V-weighted sums with the output accumulators held in registers across all
 * V rows. Both give per output exactly the operations, in the same order,
 * of the AVX2 one-row helpers they replace (simd_avx2.c
 * ember_cpu_dot_f32_f16_avx2, ember_cpu_axpy_f16_avx2), so results do not
 * change bit for bit: the dot's two 8-lane accumulators (elements i..i+7
 * and i+8..i+15 of each 16) are the two halves of one zmm; axpy is
 * element-wise, y[d] = fma(w_j, v_j[d], y[d]) for j in order, whatever the
 * vector width. Must not: run unless ember_cpu_variant_active() is AVX512;
 * be used for head sizes that are not a multiple of 16 (the AVX2 helpers
 * handle tails).
 */
#include "backend/cpu/cpu.h"

#include <immintrin.h>

static inline float hsum256(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline __attribute__((always_inline)) void
qk_tile(const int NR, const int NQ, int64_t n, const float *const *a, const uint16_t *const *b, float *out)
{
    __m512 s[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) s[r][q] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __m512 k[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) k[r] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b[r] + i)));
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) {
            const __m512 x = _mm512_loadu_ps(a[q] + i);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) s[r][q] = _mm512_fmadd_ps(x, k[r], s[r][q]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++)
            out[r * 8 + q] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(s[r][q]), _mm512_extractf32x8_ps(s[r][q], 1)));
}

#define QK(NR, NQ) static void qk_##NR##_##NQ(int64_t n, const float *const *a, const uint16_t *const *b, float *out) \
    { qk_tile(NR, NQ, n, a, b, out); }
QK(4, 1) QK(4, 2) QK(4, 3) QK(4, 4) QK(1, 1) QK(1, 2) QK(1, 3) QK(1, 4)

void ember_cpu_attn_qk_avx512(int64_t n, int nq, const float *const *a, int nr, const uint16_t *const *b, float *out)
{
    static void (*const f4[4])(int64_t, const float *const *, const uint16_t *const *, float *) = {qk_4_1, qk_4_2, qk_4_3, qk_4_4};
    static void (*const f1[4])(int64_t, const float *const *, const uint16_t *const *, float *) = {qk_1_1, qk_1_2, qk_1_3, qk_1_4};
    for (int q0 = 0; q0 < nq; q0 += 4) {
        const int m = nq - q0 < 4 ? nq - q0 : 4;
        if (nr == 4) f4[m - 1](n, a + q0, b, out + q0);
        else
            for (int r = 0; r < nr; r++) f1[m - 1](n, a + q0, b + r, out + r * 8 + q0);
    }
}

static inline __attribute__((always_inline)) void
pv_tile(const int NQ, const int NK, int64_t d0, int32_t lo, int32_t hi, const float *w, size_t w_stride, const uint8_t *v,
        size_t v_row_bytes, const int32_t *blocks, int32_t bt, float *const *y)
{
    __m512 c[4][4];
#pragma GCC unroll 4
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 4
        for (int k = 0; k < NK; k++) c[q][k] = _mm512_setzero_ps();
    for (int32_t j = lo; j <= hi;) {
        const int32_t blk = j / bt, end = (blk + 1) * bt - 1 < hi ? (blk + 1) * bt - 1 : hi;
        const uint8_t *row = v + ((size_t)blocks[blk] * (size_t)bt + (size_t)(j % bt)) * v_row_bytes;
        for (; j <= end; j++, row += v_row_bytes) {
            const uint16_t *x = (const uint16_t *)row + d0;
            __m512 vx[4];
#pragma GCC unroll 4
            for (int k = 0; k < NK; k++) vx[k] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + 16 * k)));
#pragma GCC unroll 4
            for (int q = 0; q < NQ; q++) {
                const __m512 wq = _mm512_set1_ps(w[(size_t)q * w_stride + (size_t)(j - lo)]);
#pragma GCC unroll 4
                for (int k = 0; k < NK; k++) c[q][k] = _mm512_fmadd_ps(wq, vx[k], c[q][k]);
            }
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 4
        for (int k = 0; k < NK; k++) _mm512_storeu_ps(y[q] + d0 + 16 * k, c[q][k]);
}

#define PV(NQ, NK) static void pv_##NQ##_##NK(int64_t d0, int32_t lo, int32_t hi, const float *w, size_t ws, \
                                   const uint8_t *v, size_t vrb, const int32_t *blocks, int32_t bt, float *const *y) \
    { pv_tile(NQ, NK, d0, lo, hi, w, ws, v, vrb, blocks, bt, y); }
PV(1, 1) PV(1, 2) PV(1, 3) PV(1, 4) PV(2, 1) PV(2, 2) PV(2, 3) PV(2, 4)
PV(3, 1) PV(3, 2) PV(3, 3) PV(3, 4) PV(4, 1) PV(4, 2) PV(4, 3) PV(4, 4)

void ember_cpu_attn_pv_avx512(int64_t hv, int nq, int32_t lo, int32_t hi, const float *w, size_t w_stride,
                              const uint8_t *v, size_t v_row_bytes, const int32_t *blocks, int32_t bt, float *const *y)
{
    typedef void (*pv_fn)(int64_t, int32_t, int32_t, const float *, size_t, const uint8_t *, size_t,
                          const int32_t *, int32_t, float *const *);
    static const pv_fn f[4][4] = {{pv_1_1, pv_1_2, pv_1_3, pv_1_4}, {pv_2_1, pv_2_2, pv_2_3, pv_2_4},
                                  {pv_3_1, pv_3_2, pv_3_3, pv_3_4}, {pv_4_1, pv_4_2, pv_4_3, pv_4_4}};
    for (int q0 = 0; q0 < nq; q0 += 4) {
        const int m = nq - q0 < 4 ? nq - q0 : 4;
        for (int64_t d0 = 0; d0 < hv; d0 += 64) {
            const int nk = hv - d0 >= 64 ? 4 : (int)((hv - d0) / 16);
            f[m - 1][nk - 1](d0, lo, hi, w + (size_t)q0 * w_stride, w_stride, v, v_row_bytes, blocks, bt, y + q0);
        }
    }
}
