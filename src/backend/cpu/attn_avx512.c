/*
 * attn_avx512.c — attention over an F16 KV cache for a few queries at once
 * (2..63 query rows in a call: speculative verification, several slots),
 * AVX-512. Owns: one KV head's keys and values read and converted once for
 * every query of a group (the heads that share that KV head x a run of
 * tokens that share a block table) instead of once per query.
 *
 * Numerics: per query exactly the one-query loop of cpu.c attn_run (ggml's
 * flash attention below GGML_FA_TILE_Q rows, one query row at a time):
 * q rounded to f16; score = ember_cpu_dot_f16 order (four 16-lane FMA
 * accumulators over steps of 64, folded 0+2, 1+3, then 0+1, 16 lanes summed
 * 8+8, 4+4, [0]+[2], [1]+[3], the two) times kq_scale; online softmax with
 * libm expf and S = fma(S, ms, vs); the f16 V accumulator updated as
 * ember_cpu_mad_f16 / ember_cpu_scale_f16 (first hv & ~127 elements with a
 * single f16 rounding of y + x * f16(a), the rest f16(fma(x, a, y))). The
 * accumulator is kept as f32 values that are always f16-exact, which is the
 * same number. So a query's output does not depend on the queries beside it.
 * Must not: run unless ember_cpu_variant_active() is AVX512; take head dims
 * that are not multiples of 64 (cpu.c checks).
 */
#include "backend/cpu/cpu.h"
#include "backend/expf_glibc.h"

#include <math.h>
#include <string.h>

#include <immintrin.h>

/* f32 -> nearest f16 -> f32, 16 lanes */
static inline __m512 round_f16(__m512 v)
{
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* 16 lanes of f16(y + p) with one rounding, p exact in f32: TwoSum, then the
 * sum rounded to odd so the f16 conversion rounds as the exact sum would
 * (cpu.h, ember_cpu_mad_f16) */
static inline __m512 f16_sum_exact16(__m512 y, __m512 p)
{
    const __m512 s = _mm512_add_ps(y, p), bb = _mm512_sub_ps(s, y);
    const __m512 err = _mm512_add_ps(_mm512_sub_ps(y, _mm512_sub_ps(s, bb)), _mm512_sub_ps(p, bb));
    const __mmask16 inexact = _mm512_cmp_ps_mask(err, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    const __m512i away = _mm512_srai_epi32(_mm512_xor_si512(_mm512_castps_si512(s), _mm512_castps_si512(err)), 31);
    __m512i u = _mm512_mask_add_epi32(_mm512_castps_si512(s), inexact, _mm512_castps_si512(s), away);
    u = _mm512_mask_or_epi32(u, inexact, u, _mm512_set1_epi32(1));
    return round_f16(_mm512_castsi512_ps(u));
}

/* sum of the 16 lanes in the order of GCC's _mm512_reduce_add_ps */
static inline float reduce16(__m512 t)
{
    const __m256 u = _mm256_add_ps(_mm512_extractf32x8_ps(t, 1), _mm512_castps512_ps256(t));
    const __m128 v = _mm_add_ps(_mm256_extractf128_ps(u, 1), _mm256_castps256_ps128(u));
    const __m128 w = _mm_add_ps(v, _mm_movehl_ps(v, v));   /* [0]+[2], [1]+[3] */
    return _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w)));
}

/* ---- expf, 16 at a time, bit-identical to the libm expf ---------------------------------
 * ggml's flash attention calls libm expf. glibc (2.28 on; x86-64 picks its
 * FMA build, __expf_fma, on this hardware) computes it in double (glibc
 * sysdeps/ieee754/flt-32/e_expf.c, from ARM's optimized-routines): with
 * N = 32, z = fma(N/ln2, x, 0x1.8p52), k = low bits of z, kd = z - 0x1.8p52,
 * r = fma(N/ln2, x, -kd), s = 2^(k/N) from a 32-entry table (bits of
 * 2^(i/32) less i << 47, plus k << 47), y = fma(fma(C0, r, C1), r*r,
 * fma(C2, r, 1)) * s, rounded to float; |x| >= 88 (top bits >= 0x42a) takes
 * the special cases (-inf -> 0, inf/nan -> x + x, overflow -> inf, below
 * log(2^-150) -> 0, below log(2^-149) -> 0x1.4p-75f squared). The
 * polynomial's coefficients are glibc's (read from libm's __exp2f_data);
 * the table is 2^(i/32) rounded to double. Since another libm may differ,
 * ember_cpu_expf_vec_check compares this with the process's expf at start-up
 * over a sweep of inputs, and the multi-query attention uses it only if
 * every result matched (otherwise it calls expf per query). */
static const uint64_t exp2f_tab[32] = EMBER_EXPF_TAB_INIT;

static bool expf_vec_ok;

/* 8 floats (as doubles' source) -> 8 floats */
static inline __m256 expf8(__m256 x)
{
    const __m512d invln2n = _mm512_set1_pd(EMBER_EXPF_INV_LN2_N), shift = _mm512_set1_pd(EMBER_EXPF_SHIFT);
    const __m512d c0 = _mm512_set1_pd(EMBER_EXPF_C0), c1 = _mm512_set1_pd(EMBER_EXPF_C1),
                  c2 = _mm512_set1_pd(EMBER_EXPF_C2);
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d z = _mm512_fmadd_pd(invln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(z);
    const __m512d kd = _mm512_sub_pd(z, shift);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, kd);
    const __m512i t0 = _mm512_loadu_si512(exp2f_tab), t1 = _mm512_loadu_si512(exp2f_tab + 8);
    const __m512i t2 = _mm512_loadu_si512(exp2f_tab + 16), t3 = _mm512_loadu_si512(exp2f_tab + 24);
    const __m512i lo = _mm512_permutex2var_epi64(t0, ki, t1), hi = _mm512_permutex2var_epi64(t2, ki, t3);
    const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i t = _mm512_add_epi64(_mm512_mask_blend_epi64(upper, lo, hi), _mm512_slli_epi64(ki, 47));
    const __m512d zz = _mm512_fmadd_pd(c0, r, c1), r2 = _mm512_mul_pd(r, r);
    const __m512d y0 = _mm512_fmadd_pd(c2, r, _mm512_set1_pd(1.0));
    const __m512d y = _mm512_mul_pd(_mm512_fmadd_pd(zz, r2, y0), _mm512_castsi512_pd(t));
    __m256 res = _mm512_cvtpd_ps(y);
    /* |x| >= 88 or nan: glibc's special cases (rare) */
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i abstop = _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(0x7ff));
    const __mmask8 big = _mm256_cmpge_epi32_mask(abstop, _mm256_set1_epi32(0x42a));
    if (big) {
        float xs[8], rs[8];
        _mm256_storeu_ps(xs, x);
        _mm256_storeu_ps(rs, res);
        for (int l = 0; l < 8; l++) {
            if (!(big >> l & 1)) continue;
            uint32_t u;
            memcpy(&u, &xs[l], 4);
            const uint32_t top = (u >> 20) & 0x7ff;
            volatile float tiny = 0x1.4p-75f, huge = 0x1p97f, zero_ish = 0x1p-95f;
            if (u == 0xff800000u) rs[l] = 0.0f;
            else if (top >= 0x7f8) rs[l] = xs[l] + xs[l];
            else if (xs[l] > 0x1.62e42ep6f) rs[l] = huge * huge;
            else if (xs[l] < EMBER_EXPF_MIN) rs[l] = zero_ish * zero_ish;
            else if (xs[l] < -0x1.9d1d9ep6f) rs[l] = tiny * tiny;
            /* else: the formula's value stands */
        }
        res = _mm256_loadu_ps(rs);
    }
    return res;
}

static void expf16(const float *x, float *y)
{
    _mm256_storeu_ps(y, expf8(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, expf8(_mm256_loadu_ps(x + 8)));
}

bool ember_cpu_expf_vec_check(void)
{
    /* every 40503rd float bit pattern (~106k values, ~1 ms; a sweep of every 97th, 44M, matched too on glibc 2.36
     * covering every exponent, both special-case edges and the table
     * indices), plus infinities, nans and the thresholds' neighbours */
    float x[16], y[16];
    int n = 0;
    bool ok = true;
    for (uint64_t u = 0; u <= 0xffffffffu && ok; u += 40503) {
        uint32_t b = (uint32_t)u;
        memcpy(&x[n++], &b, 4);
        if (n == 16) {
            expf16(x, y);
            for (int l = 0; l < 16; l++) {
                const float r = expf(x[l]);
                if (memcmp(&r, &y[l], 4) != 0 && !(r != r && y[l] != y[l])) ok = false;
            }
            n = 0;
        }
    }
    const float edge[16] = {-INFINITY, INFINITY, NAN, -0.0f, 0.0f, -0x1.9fe368p6f, nextafterf(-0x1.9fe368p6f, 0.0f),
                            -0x1.9d1d9ep6f, nextafterf(-0x1.9d1d9ep6f, 0.0f), nextafterf(-0x1.9d1d9ep6f, -INFINITY),
                            0x1.62e42ep6f, nextafterf(0x1.62e42ep6f, INFINITY), -88.0f, 88.0f, -87.99f, -1e-30f};
    expf16(edge, y);
    for (int l = 0; l < 16; l++) {
        const float r = expf(edge[l]);
        if (memcmp(&r, &y[l], 4) != 0 && !(r != r && y[l] != y[l])) ok = false;
    }
    expf_vec_ok = ok;
    return ok;
}

void ember_cpu_attn_f16_multi_avx512(const ember_kv_layer_view *kv, const ember_attn_params *p, int32_t g, int nq,
                                     const float *const *qh, const ember_attn_query *const *qq, float *const *out,
                                     float *scratch)
{
    const int32_t hk = p->head_dim_k, hv = p->head_dim_v, bt = kv->block_tokens;
    const int32_t nf16 = hv & ~(EMBER_GGML_F16_STEP - 1);   /* elements in ggml's f16 vector loop */
    const size_t k_head_bytes = (size_t)hk * 2, v_head_bytes = (size_t)hv * 2;
    float *qf = scratch;                                    /* [nq][hk] f16-rounded queries */
    float *acc = scratch + (size_t)nq * (size_t)hk;         /* [nq][hv] f16-exact accumulators */
    float M[EMBER_CPU_ATTN_MAXQ], S[EMBER_CPU_ATTN_MAXQ];
    int32_t lo[EMBER_CPU_ATTN_MAXQ], hi[EMBER_CPU_ATTN_MAXQ], jlo = INT32_MAX, jhi = -1;
    for (int q = 0; q < nq; q++) {
        for (int32_t d = 0; d < hk; d += 16) _mm512_storeu_ps(qf + (size_t)q * hk + d, round_f16(_mm512_loadu_ps(qh[q] + d)));
        for (int32_t d = 0; d < hv; d += 16) _mm512_storeu_ps(acc + (size_t)q * hv + d, _mm512_setzero_ps());
        M[q] = -INFINITY;
        S[q] = 0.0f;
        lo[q] = p->n_swa > 0 && qq[q]->pos - p->n_swa + 1 > 0 ? qq[q]->pos - p->n_swa + 1 : 0;
        hi[q] = qq[q]->pos;
        if (lo[q] < jlo) jlo = lo[q];
        if (hi[q] > jhi) jhi = hi[q];
    }
    const int32_t *blocks = qq[0]->blocks;   /* shared by every query of the group */
    const bool vexp = expf_vec_ok;
    for (int32_t j = jlo; j <= jhi; j++) {
        const int64_t row = (int64_t)blocks[j / bt] * bt + j % bt;
        const uint16_t *kr = (const uint16_t *)((const uint8_t *)kv->k + (size_t)row * kv->k_row_bytes + (size_t)g * k_head_bytes);
        const uint16_t *vr = (const uint16_t *)((const uint8_t *)kv->v + (size_t)row * kv->v_row_bytes + (size_t)g * v_head_bytes);
        /* scores of the queries that see key j */
        float sc[EMBER_CPU_ATTN_MAXQ], arg[EMBER_CPU_ATTN_MAXQ], e[EMBER_CPU_ATTN_MAXQ];
        uint32_t active = 0, up = 0;
        for (int q = 0; q < nq; q++) {
            arg[q] = 0.0f;
            if (j < lo[q] || j > hi[q]) continue;
            active |= 1u << q;
            const float *qv = qf + (size_t)q * hk;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int32_t i = 0; i < hk; i += 64) {
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(qv + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i))), a0);
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(qv + i + 16), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i + 16))), a1);
                a2 = _mm512_fmadd_ps(_mm512_loadu_ps(qv + i + 32), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i + 32))), a2);
                a3 = _mm512_fmadd_ps(_mm512_loadu_ps(qv + i + 48), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i + 48))), a3);
            }
            const float s = reduce16(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3))) * p->kq_scale;
            sc[q] = s;
            /* the one exp of this key: ms = exp(M_old - s) when s is a new
             * maximum, else vs = exp(s - M) */
            if (s > M[q]) { up |= 1u << q; arg[q] = M[q] - s; }
            else arg[q] = s - M[q];
        }
        if (vexp) {
            expf16(arg, e);
        } else {
            for (int q = 0; q < nq; q++)
                if (active >> q & 1) e[q] = expf(arg[q]);
        }
        for (int q = 0; q < nq; q++) {
            if (!(active >> q & 1)) continue;
            float ms = 1.0f, vs = 1.0f;
            float *y = acc + (size_t)q * hv;
            if (up >> q & 1) {
                M[q] = sc[q];
                ms = e[q];
                const __m512 mh = _mm512_set1_ps(_cvtsh_ss(_cvtss_sh(ms, _MM_FROUND_TO_NEAREST_INT))), mf = _mm512_set1_ps(ms);
                for (int32_t d = 0; d < hv; d += 16)
                    _mm512_storeu_ps(y + d, round_f16(_mm512_mul_ps(_mm512_loadu_ps(y + d), d < nf16 ? mh : mf)));
            } else {
                vs = e[q];
            }
            const __m512 vh = _mm512_set1_ps(_cvtsh_ss(_cvtss_sh(vs, _MM_FROUND_TO_NEAREST_INT))), vf = _mm512_set1_ps(vs);
            int32_t d = 0;
            for (; d < nf16; d += 16) {
                const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + d)));
                _mm512_storeu_ps(y + d, f16_sum_exact16(_mm512_loadu_ps(y + d), _mm512_mul_ps(x, vh)));
            }
            for (; d < hv; d += 16) {
                const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + d)));
                _mm512_storeu_ps(y + d, round_f16(_mm512_fmadd_ps(x, vf, _mm512_loadu_ps(y + d))));
            }
            S[q] = fmaf(S[q], ms, vs);
        }
    }
    for (int q = 0; q < nq; q++) {
        const __m512 inv = _mm512_set1_ps(S[q] == 0.0f ? 0.0f : 1.0f / S[q]);
        for (int32_t d = 0; d < hv; d += 16)
            _mm512_storeu_ps(out[q] + d, _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)q * hv + d), inv));
    }
}
