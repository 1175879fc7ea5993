/*
 * recurrent_avx2.c — AVX2 + FMA kernels of the recurrent ops (recurrent.c
 * picks them at run time when ember_cpu_variant_active() >= EMBER_CPU_AVX2).
 * The same formulas as the scalar code there, 8 lanes at a time; only the
 * summation order of the dot products differs.
 */
#include "backend/cpu/cpu.h"

#include <immintrin.h>
#include <math.h>

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

/* The 4 sums of v0..v3's lanes, in order (two rounds of VHADDPS, then the
 * two 128-bit halves added) */
static inline __m128 hsum4x8(__m256 v0, __m256 v1, __m256 v2, __m256 v3)
{
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* oa[i] = a . v_i and ob[i] = b . v_i for the m vectors v_i = v + i * ldv,
 * all of length n (floats): 4 vectors at a time, 8 independent FMA chains
 * (one dot a call kept a single 4-cycle chain per dot: the chunked delta
 * rule's S K^T and its k / q products spent ~6% of a Qwen3.5 prefill there,
 * perf 2026-12-07). Lane sums in the hsum4x8 order. */
void ember_cpu_dots2_f32_avx2(int32_t n, const float *a, const float *b, const float *v, int64_t ldv, int32_t m,
                              float *oa, float *ob)
{
    int32_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const float *v0 = v + (int64_t)i * ldv, *v1 = v0 + ldv, *v2 = v1 + ldv, *v3 = v2 + ldv;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        int32_t k = 0;
        for (; k + 8 <= n; k += 8) {
            const __m256 x = _mm256_loadu_ps(a + k), y = _mm256_loadu_ps(b + k);
            const __m256 w0 = _mm256_loadu_ps(v0 + k), w1 = _mm256_loadu_ps(v1 + k);
            const __m256 w2 = _mm256_loadu_ps(v2 + k), w3 = _mm256_loadu_ps(v3 + k);
            a0 = _mm256_fmadd_ps(x, w0, a0); b0 = _mm256_fmadd_ps(y, w0, b0);
            a1 = _mm256_fmadd_ps(x, w1, a1); b1 = _mm256_fmadd_ps(y, w1, b1);
            a2 = _mm256_fmadd_ps(x, w2, a2); b2 = _mm256_fmadd_ps(y, w2, b2);
            a3 = _mm256_fmadd_ps(x, w3, a3); b3 = _mm256_fmadd_ps(y, w3, b3);
        }
        float sa[4], sb[4];
        _mm_storeu_ps(sa, hsum4x8(a0, a1, a2, a3));
        _mm_storeu_ps(sb, hsum4x8(b0, b1, b2, b3));
        for (; k < n; k++) {
            sa[0] += a[k] * v0[k]; sa[1] += a[k] * v1[k]; sa[2] += a[k] * v2[k]; sa[3] += a[k] * v3[k];
            sb[0] += b[k] * v0[k]; sb[1] += b[k] * v1[k]; sb[2] += b[k] * v2[k]; sb[3] += b[k] * v3[k];
        }
        for (int j = 0; j < 4; j++) { oa[i + j] = sa[j]; ob[i + j] = sb[j]; }
    }
    for (; i < m; i++) {
        const float *vi = v + (int64_t)i * ldv;
        __m256 sa = _mm256_setzero_ps(), sb = sa;
        int32_t k = 0;
        for (; k + 8 <= n; k += 8) {
            const __m256 w = _mm256_loadu_ps(vi + k);
            sa = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), w, sa);
            sb = _mm256_fmadd_ps(_mm256_loadu_ps(b + k), w, sb);
        }
        float ra = hsum8(sa), rb = hsum8(sb);
        for (; k < n; k++) { ra += a[k] * vi[k]; rb += b[k] * vi[k]; }
        oa[i] = ra;
        ob[i] = rb;
    }
}

/* y = scale * y, then y += c[s] * x_s for s = 0..m-1 in that order (x_s =
 * x + s * ldx; n floats): the same roundings as a multiply and m fused
 * axpys one after another, with y kept in registers 64 floats at a time
 * instead of loaded and stored by every axpy. */
void ember_cpu_axpy_n_f32_avx2(int32_t n, float scale, const float *c, const float *x, int64_t ldx, int32_t m, float *y)
{
    const __m256 sc = _mm256_set1_ps(scale);
    int32_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256 r[8];
        for (int u = 0; u < 8; u++) r[u] = scale == 1.0f ? _mm256_loadu_ps(y + i + 8 * u) : _mm256_mul_ps(_mm256_loadu_ps(y + i + 8 * u), sc);
        for (int32_t s = 0; s < m; s++) {
            const __m256 cs = _mm256_set1_ps(c[s]);
            const float *xs = x + (int64_t)s * ldx + i;
            for (int u = 0; u < 8; u++) r[u] = _mm256_fmadd_ps(cs, _mm256_loadu_ps(xs + 8 * u), r[u]);
        }
        for (int u = 0; u < 8; u++) _mm256_storeu_ps(y + i + 8 * u, r[u]);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 r = scale == 1.0f ? _mm256_loadu_ps(y + i) : _mm256_mul_ps(_mm256_loadu_ps(y + i), sc);
        for (int32_t s = 0; s < m; s++) r = _mm256_fmadd_ps(_mm256_set1_ps(c[s]), _mm256_loadu_ps(x + (int64_t)s * ldx + i), r);
        _mm256_storeu_ps(y + i, r);
    }
    for (; i < n; i++) {
        float r = scale == 1.0f ? y[i] : y[i] * scale;
        for (int32_t s = 0; s < m; s++) r = fmaf(c[s], x[(int64_t)s * ldx + i], r);
        y[i] = r;
    }
}
