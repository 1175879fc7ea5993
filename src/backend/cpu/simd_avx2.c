/*
 * simd_avx2.c — AVX2/F16C/FMA versions of the CPU backend's small vector
 * helpers (f16 and f32 dot products, f16 axpy, f32 -> f16 rows). Compiled
 * with -mavx2 -mfma -mf16c and called only when CPUID reports AVX2.
 * Must not: be called on CPUs without AVX2 (cpu.c picks at run time).
 */
#include "backend/cpu/cpu.h"

#include <immintrin.h>

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
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
        __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8)));
        __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8)));
        s0 = _mm256_fmadd_ps(a0, b0, s0);
        s1 = _mm256_fmadd_ps(a1, b1, s1);
    }
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += cpu_f16_to_f32(a[i]) * cpu_f16_to_f32(b[i]);
    return s;
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

void ember_cpu_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float a)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256 vy = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_fmadd_ps(vx, va, vy), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = (uint16_t)_cvtss_sh(cpu_f16_to_f32(y[i]) + cpu_f16_to_f32(x[i]) * a, _MM_FROUND_TO_NEAREST_INT);
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
