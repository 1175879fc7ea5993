/*
 * simd_avx2.c — AVX2/F16C/FMA versions of the CPU backend's small vector
 * helpers (f16 and f32 dot products, f16 axpy, f32 -> f16 rows). Compiled
 * with -mavx2 -mfma -mf16c and called only when CPUID reports AVX2.
 * Must not: be called on CPUs without AVX2 (cpu.c picks at run time).
 */
#include "backend/cpu/cpu.h"

#include <immintrin.h>
#include <math.h>

static inline float hsum256(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

float ember_cpu_dot_f16_avx2(int64_t n, const uint16_t *a, const uint16_t *b)
{
    /* ggml's AVX-512 order (cpu.h): accumulator j is the pair acc[2j] (lanes
     * 0-7), acc[2j+1] (lanes 8-15) */
    __m256 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 8; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8 * j))),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8 * j))), acc[j]);
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    double s = (double)hsum256(_mm256_add_ps(hi, lo));
    for (int64_t i = np; i < n; i++) s += (double)(cpu_f16_to_f32(a[i]) * cpu_f16_to_f32(b[i]));
    return (float)s;
}

void ember_cpu_axpy_f16_avx2(int64_t n, float a, const uint16_t *x, float *y)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, vx, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += a * cpu_f16_to_f32(x[i]);
}

float ember_cpu_dot_f32_avx2(int64_t n, const float *a, const float *b)
{
    __m256 s0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(s0);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

void ember_cpu_f32_to_f16_row_avx2(int64_t n, const float *x, uint16_t *y)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = (uint16_t)_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* 8 lanes of f16(y + p) rounded once, p exact in f32 (cpu.h: TwoSum, then
 * round to odd before the conversion) */
static inline __m128i f16_sum_exact8(__m256 y, __m256 p)
{
    const __m256 s = _mm256_add_ps(y, p), bb = _mm256_sub_ps(s, y);
    const __m256 err = _mm256_add_ps(_mm256_sub_ps(y, _mm256_sub_ps(s, bb)), _mm256_sub_ps(p, bb));
    const __m256i inexact = _mm256_castps_si256(_mm256_cmp_ps(err, _mm256_setzero_ps(), _CMP_NEQ_UQ));
    /* rounded away from zero: sign(err) != sign(s) -> step back one ulp (add -1) */
    const __m256i away = _mm256_srai_epi32(_mm256_xor_si256(_mm256_castps_si256(s), _mm256_castps_si256(err)), 31);
    __m256i u = _mm256_add_epi32(_mm256_castps_si256(s), _mm256_and_si256(away, inexact));
    u = _mm256_or_si256(u, _mm256_and_si256(inexact, _mm256_set1_epi32(1)));
    return _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT);
}

void ember_cpu_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float a)
{
    const int64_t np = n & ~(int64_t)(EMBER_GGML_F16_STEP - 1);
    const __m256 vh = _mm256_set1_ps(_cvtsh_ss(_cvtss_sh(a, _MM_FROUND_TO_NEAREST_INT)));
    int64_t i = 0;
    for (; i < np; i += 8) {
        const __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        const __m256 vy = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        _mm_storeu_si128((__m128i *)(y + i), f16_sum_exact8(vy, _mm256_mul_ps(vx, vh)));
    }
    const __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) {
        const __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        const __m256 vy = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_fmadd_ps(vx, va, vy), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = (uint16_t)_cvtss_sh(fmaf(cpu_f16_to_f32(x[i]), a, cpu_f16_to_f32(y[i])), _MM_FROUND_TO_NEAREST_INT);
}

void ember_cpu_scale_f16_avx2(int64_t n, uint16_t *y, float a)
{
    const int64_t np = n & ~(int64_t)(EMBER_GGML_F16_STEP - 1);
    const __m256 vh = _mm256_set1_ps(_cvtsh_ss(_cvtss_sh(a, _MM_FROUND_TO_NEAREST_INT)));
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 vy = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_mul_ps(vy, i < np ? vh : va), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = (uint16_t)_cvtss_sh(cpu_f16_to_f32(y[i]) * a, _MM_FROUND_TO_NEAREST_INT);
}

float ember_cpu_dot_f32_f16_avx2(int64_t n, const float *a, const uint16_t *b)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8))), s1);
    }
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * cpu_f16_to_f32(b[i]);
    return s;
}

/* The dot above for nq (<= 8) f32 rows a[q] against one f16 row b, converting
 * b once: out[q] is bit-identical to ember_cpu_dot_f32_f16_avx2(n, a[q], b). */
void ember_cpu_dot_f32_f16_multi_avx2(int64_t n, int nq, const float *const *a, const uint16_t *b, float *out)
{
    __m256 s0[8], s1[8];
    for (int q = 0; q < nq; q++) s0[q] = s1[q] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
        const __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8)));
        for (int q = 0; q < nq; q++) {
            s0[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a[q] + i), b0, s0[q]);
            s1[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a[q] + i + 8), b1, s1[q]);
        }
    }
    for (int q = 0; q < nq; q++) {
        float s = hsum256(_mm256_add_ps(s0[q], s1[q]));
        for (int64_t k = i; k < n; k++) s += a[q][k] * cpu_f16_to_f32(b[k]);
        out[q] = s;
    }
}

/* y[q][i] += w[q] * f16(x[i]) for nq rows, converting x once: each y[q] is
 * bit-identical to ember_cpu_axpy_f16_avx2(n, w[q], x, y[q]). */
void ember_cpu_axpy_f16_multi_avx2(int64_t n, int nq, const float *w, const uint16_t *x, float *const *y)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        for (int q = 0; q < nq; q++)
            _mm256_storeu_ps(y[q] + i, _mm256_fmadd_ps(_mm256_set1_ps(w[q]), vx, _mm256_loadu_ps(y[q] + i)));
    }
    for (int q = 0; q < nq; q++)
        for (int64_t k = i; k < n; k++) y[q][k] += w[q] * cpu_f16_to_f32(x[k]);
}

/* ggml_v_expf (cpu.c ggml_expf), 8 lanes; 2^n applied as two exact powers
 * of two so that only the last product rounds (as VSCALEFPS). */
static inline __m256 ggml_expf8(__m256 x)
{
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256i ni = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-192.0f)), _mm256_set1_ps(192.0f)));
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
    return _mm256_blendv_ps(res, alt, big);
}

void ember_cpu_swiglu_avx2(int64_t n, float *y, const float *x)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(y + i);
        const __m256 e = ggml_expf8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(x + i)));
    }
    if (i < n) ember_cpu_swiglu(n - i, y + i, x + i);
}
