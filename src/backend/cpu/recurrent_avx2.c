/*
 * recurrent_avx2.c — AVX2 + FMA kernels of the recurrent ops (recurrent.c
 * picks them at run time when ember_cpu_variant_active() >= EMBER_CPU_AVX2).
 * The same formulas as the scalar code there, 8 lanes at a time; only the
 * summation order of the dot products differs.
 */
#include "backend/cpu/cpu.h"

#include <immintrin.h>

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One value row S [n] of the recurrent delta rule: S = decay * S;
 * S += beta * (v - S . k) * k; returns S . q. */
float ember_cpu_gdr_row_avx2(int32_t n, float *S, const float *k, const float *q, float decay, float beta, float v)
{
    const __m256 dc = _mm256_set1_ps(decay);
    __m256 acc = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(S + i), dc);
        _mm256_storeu_ps(S + i, s);
        acc = _mm256_fmadd_ps(s, _mm256_loadu_ps(k + i), acc);
    }
    float kv = hsum8(acc);
    for (; i < n; i++) { S[i] *= decay; kv += S[i] * k[i]; }
    const float d = beta * (v - kv);
    const __m256 dd = _mm256_set1_ps(d);
    acc = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 s = _mm256_fmadd_ps(dd, _mm256_loadu_ps(k + i), _mm256_loadu_ps(S + i));
        _mm256_storeu_ps(S + i, s);
        acc = _mm256_fmadd_ps(s, _mm256_loadu_ps(q + i), acc);
    }
    float o = hsum8(acc);
    for (; i < n; i++) { S[i] += d * k[i]; o += S[i] * q[i]; }
    return o;
}

/* y[i] += a * x[i], i < n */
void ember_cpu_axpy_f32_avx2(int32_t n, float a, const float *x, float *y)
{
    const __m256 va = _mm256_set1_ps(a);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}
