/*
 * ref_k.c — scalar reference kernels for the 256-wide super-block formats
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K and IQ4_XS.
 *
 * Owns: dequantization (bit-exact with gguf-py quants.py: same float32
 * operations, same order, no FMA), reference quantizers, the Q8_K activation
 * quantizer (scalar), and the scalar vec_dot of each format with Q8_K.
 * The quantizers follow the structure of ggml-quants.c (per sub-block scale
 * and min, then 6/4-bit quantization of those against a super-block d/dmin)
 * but without its iterative scale search (make_qkx2_quants etc.): they are a
 * correct reference for tests and tools, not a replacement for llama-quantize.
 * Must not: use SIMD intrinsics.
 */
#include <math.h>
#include "quant/blocks.h"

#define FP16(x) ember_fp16_to_fp32(x)
#define TOFP16(x) ember_fp32_to_fp16(x)

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
static inline int nearest(float v) { return (int)lrintf(v); }

/* Value of largest magnitude in x[0..n) (signed), 0 if all zero. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    return max;
}

/* ---- element unpackers (layouts: gguf-py quants.py dequantize_blocks) ------ */

static void unpack_q2_K(const block_q2_K *b, int8_t q[QK_K])
{
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, g = (e % 128) / 32, l = e % 32;
        q[e] = (int8_t)((b->qs[h * 32 + l] >> (2 * g)) & 3);
    }
}
/* value in [-4, 3] */
static void unpack_q3_K(const block_q3_K *b, int8_t q[QK_K], int sc[16])
{
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, g = (e % 128) / 32, l = e % 32;
        int lo = (b->qs[h * 32 + l] >> (2 * g)) & 3;
        int hb = (b->hmask[l] >> (e / 32)) & 1;
        q[e] = (int8_t)(lo - (hb ? 0 : 4));
    }
    for (int i = 0; i < 16; i++) {
        int low = i < 8 ? (b->scales[i] & 0xF) : (b->scales[i - 8] >> 4);
        int high = (b->scales[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (low | (high << 4)) - 32;
    }
}
/* unsigned 0..15 (Q4_K) or 0..31 (Q5_K, qh != NULL) */
static void unpack_q45_K(const uint8_t *qs, const uint8_t *qh, int8_t q[QK_K])
{
    for (int e = 0; e < QK_K; e++) {
        int j = e / 32, l = e % 32, c = j / 2;
        int v = (j & 1) ? (qs[c * 32 + l] >> 4) : (qs[c * 32 + l] & 0xF);
        if (qh) v |= ((qh[l] >> j) & 1) << 4;
        q[e] = (int8_t)v;
    }
}
/* value in [-32, 31] */
static void unpack_q6_K(const block_q6_K *b, int8_t q[QK_K])
{
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
        int lo = (b->ql[h * 64 + (g & 1) * 32 + l] >> (4 * (g >> 1))) & 0xF;
        int hi = (b->qh[h * 32 + l] >> (2 * g)) & 3;
        q[e] = (int8_t)((lo | (hi << 4)) - 32);
    }
}
/* kvalue in [-127, 113]; scales ls-32 */
static void unpack_iq4_xs(const block_iq4_xs *b, int8_t q[QK_K], int sc[8])
{
    for (int e = 0; e < QK_K; e++) {
        int j = e / 32, l = e % 32;
        int v = l < 16 ? (b->qs[j * 16 + l] & 0xF) : (b->qs[j * 16 + l - 16] >> 4);
        q[e] = ember_kvalues_iq4nl[v];
    }
    for (int j = 0; j < 8; j++) {
        int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4);
        sc[j] = ls - 32;
    }
}

/* ---- dequantization -------------------------------------------------------- */

void ember_dequantize_q2_K(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q2_K *x = vx;
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d), dmin = FP16(x[i].dmin);
        unpack_q2_K(&x[i], q);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)(x[i].scales[j] & 0xF), ml = dmin * (float)(x[i].scales[j] >> 4);
            for (int k = 0; k < 16; k++) {
                float t = dl * (float)q[j * 16 + k];
                y[j * 16 + k] = t - ml;
            }
        }
    }
}

void ember_dequantize_q3_K(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q3_K *x = vx;
    int8_t q[QK_K];
    int sc[16];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d);
        unpack_q3_K(&x[i], q, sc);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)sc[j];
            for (int k = 0; k < 16; k++) y[j * 16 + k] = dl * (float)q[j * 16 + k];
        }
    }
}

static void dequant_q45_K(const uint8_t *scales, uint16_t dh, uint16_t dminh, const int8_t *q, float *y)
{
    const float d = FP16(dh), dmin = FP16(dminh);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ember_k4_scale_min(j, scales, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        for (int k = 0; k < 32; k++) {
            float t = dl * (float)q[j * 32 + k];
            y[j * 32 + k] = t - ml;
        }
    }
}

void ember_dequantize_q4_K(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q4_K *x = vx;
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        unpack_q45_K(x[i].qs, NULL, q);
        dequant_q45_K(x[i].scales, x[i].d, x[i].dmin, q, y);
    }
}

void ember_dequantize_q5_K(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q5_K *x = vx;
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        unpack_q45_K(x[i].qs, x[i].qh, q);
        dequant_q45_K(x[i].scales, x[i].d, x[i].dmin, q, y);
    }
}

void ember_dequantize_q6_K(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q6_K *x = vx;
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d);
        unpack_q6_K(&x[i], q);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)x[i].scales[j];
            for (int k = 0; k < 16; k++) y[j * 16 + k] = dl * (float)q[j * 16 + k];
        }
    }
}

void ember_dequantize_q8_K(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
}

void ember_dequantize_iq4_xs(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_iq4_xs *x = vx;
    int8_t q[QK_K];
    int sc[8];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d);
        unpack_iq4_xs(&x[i], q, sc);
        for (int j = 0; j < 8; j++) {
            const float dl = d * (float)sc[j];
            for (int k = 0; k < 32; k++) y[j * 32 + k] = dl * (float)q[j * 32 + k];
        }
    }
}

/* ---- quantization ---------------------------------------------------------- */

/* Q8_K (ggml quantize_row_q8_K_ref): id = 127/amax, q = round-to-nearest-even
 * (x*id), d = 1/id, bsums = sums of 16. The scalar activation quantizer is
 * the same function; the SIMD ones reproduce it bit for bit. */
void ember_quantize_q8_K_scalar(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0;
        for (int j = 0; j < QK_K; j++) { float a = fabsf(x[j]); amax = a > amax ? a : amax; }
        if (amax == 0) { memset(&y[i], 0, sizeof y[i]); continue; }
        const float id = 127.0f / amax;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)ember_round_small(x[j] * id);
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / id;
    }
}
void ember_quantize_q8_K_ref(const float *restrict x, void *restrict y, int64_t n)
{
    ember_quantize_q8_K_scalar(x, y, n);
}

/* Scale and min (min <= 0) of x[0..n) for unsigned levels 0..nmax: start
 * from (max-min)/nmax, then alternate nearest-level assignment with the
 * least-squares (scale, min) for those levels (the idea of ggml's
 * make_qkx2_quants, without its weights and search grid). */
static void fit_scale_min(const float *x, int n, int nmax, float *scale, float *min)
{
    float mn = 0, mx = x[0];
    for (int k = 0; k < n; k++) { mn = fminf(mn, x[k]); mx = fmaxf(mx, x[k]); }
    float sc = (mx - mn) / (float)nmax;
    *scale = sc; *min = mn;
    if (sc <= 0) return;
    double best = 0;
    for (int k = 0; k < n; k++) {
        float e = sc * (float)clampi(nearest((x[k] - mn) / sc), 0, nmax) + mn - x[k];
        best += (double)e * e;
    }
    for (int it = 0; it < 4; it++) {
        double sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int k = 0; k < n; k++) {
            int q = clampi(nearest((x[k] - mn) / sc), 0, nmax);
            sq += q; sqq += (double)q * q; sx += x[k]; sqx += (double)q * x[k];
        }
        double det = n * sqq - sq * sq;
        if (det <= 0) break;
        double a = (n * sqx - sq * sx) / det, b = (sx - a * sq) / n;
        if (b > 0) { b = 0; a = sqq > 0 ? sqx / sqq : 0; }
        if (a <= 0) break;
        double err = 0;
        for (int k = 0; k < n; k++) {
            double e = a * clampi(nearest((x[k] - (float)b) / (float)a), 0, nmax) + b - x[k];
            err += e * e;
        }
        if (err >= best) break;
        best = err; sc = (float)a; mn = (float)b;
        *scale = sc; *min = mn;
    }
}

/* Q2_K: per 16 elements scale and min (fit_scale_min), both as 4-bit
 * multiples of the super-block d, dmin; d and dmin are picked from a few
 * candidates around max/15 by total squared error. */
static double q2_K_pack(const float *x, const float *scale, const float *min, float d_try, float dmin_try,
                        block_q2_K *y)
{
    memset(y, 0, sizeof *y);
    y->d = TOFP16(d_try);
    y->dmin = TOFP16(dmin_try);
    const float d = FP16(y->d), dmin = FP16(y->dmin);
    double err = 0;
    for (int j = 0; j < 16; j++) {
        int sc = d > 0 ? clampi(nearest(scale[j] / d), 0, 15) : 0;
        int m = dmin > 0 ? clampi(nearest(min[j] / dmin), 0, 15) : 0;
        y->scales[j] = (uint8_t)(sc | (m << 4));
        const float dl = d * (float)sc, ml = dmin * (float)m;
        for (int k = 0; k < 16; k++) {
            int e = j * 16 + k, h = e / 128, g = (e % 128) / 32, l = e % 32;
            int q = dl > 0 ? clampi(nearest((x[e] + ml) / dl), 0, 3) : 0;
            y->qs[h * 32 + l] |= (uint8_t)(q << (2 * g));
            double r = (double)dl * q - ml - x[e];
            err += r * r;
        }
    }
    return err;
}

void ember_quantize_q2_K_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q2_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scale[16], min[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            float mn;
            fit_scale_min(x + j * 16, 16, 3, &scale[j], &mn);
            min[j] = -mn;
            max_scale = fmaxf(max_scale, scale[j]);
            max_min = fmaxf(max_min, min[j]);
        }
        block_q2_K best, tmp;
        double best_err = q2_K_pack(x, scale, min, max_scale / 15, max_min / 15, &best);
        for (int a = -4; a <= 4; a++)
            for (int b = -2; b <= 2; b++) {
                if (!a && !b) continue;
                double e = q2_K_pack(x, scale, min, max_scale / (15.0f + 0.5f * (float)a),
                                     max_min / (15.0f + 0.5f * (float)b), &tmp);
                if (e < best_err) { best_err = e; best = tmp; }
            }
        y[i] = best;
    }
}

/* Q3_K: per 16 elements a signed scale (max -> -4), as 6-bit signed multiples
 * of d; q in [-4, 3]. */
void ember_quantize_q3_K_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q3_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scale[16];
        for (int j = 0; j < 16; j++) scale[j] = signed_absmax(x + j * 16, 16) / -4;
        const float smax = signed_absmax(scale, 16);
        memset(&y[i], 0, sizeof y[i]);
        y[i].d = TOFP16(smax ? smax / -32 : 0.0f);
        const float d = FP16(y[i].d);
        for (int j = 0; j < 16; j++) {
            int sc = d != 0 ? clampi(nearest(scale[j] / d), -32, 31) : 0;
            int s = sc + 32;
            if (j < 8) y[i].scales[j] |= (uint8_t)(s & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((s & 0xF) << 4);
            y[i].scales[8 + j % 4] |= (uint8_t)((s >> 4) << (2 * (j / 4)));
            const float dl = d * (float)sc;
            for (int k = 0; k < 16; k++) {
                int e = j * 16 + k, h = e / 128, g = (e % 128) / 32, l = e % 32;
                int q = (dl != 0 ? clampi(nearest(x[e] / dl), -4, 3) : 0) + 4;
                y[i].qs[h * 32 + l] |= (uint8_t)((q & 3) << (2 * g));
                y[i].hmask[l] |= (uint8_t)(((q >> 2) & 1) << (e / 32));
            }
        }
    }
}

/* Q4_K / Q5_K: per 32 elements scale=(max-min)/nmax and min (<= 0), both as
 * 6-bit multiples of d, dmin; scales packed as gguf-py get_scale_min reads. */
static void quantize_q45_K(const float *x, int nmax, uint16_t *dh, uint16_t *dminh,
                           uint8_t scales[K_SCALE_SIZE], uint8_t q[QK_K])
{
    float scale[8], min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float mn;
        fit_scale_min(x + j * 32, 32, nmax, &scale[j], &mn);
        min[j] = -mn;
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, min[j]);
    }
    *dh = TOFP16(max_scale / 63);
    *dminh = TOFP16(max_min / 63);
    const float d = FP16(*dh), dmin = FP16(*dminh);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi(nearest(scale[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0 ? clampi(nearest(min[j] / dmin), 0, 63) : 0);
        const float dl = d * (float)sc[j], ml = dmin * (float)m[j];
        for (int k = 0; k < 32; k++)
            q[j * 32 + k] = (uint8_t)(dl > 0 ? clampi(nearest((x[j * 32 + k] + ml) / dl), 0, nmax) : 0);
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

void ember_quantize_q4_K_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q4_K *y = vy;
    uint8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_q45_K(x, 15, &y[i].d, &y[i].dmin, y[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[c * 32 + l] = (uint8_t)(q[c * 64 + l] | (q[c * 64 + 32 + l] << 4));
    }
}

void ember_quantize_q5_K_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q5_K *y = vy;
    uint8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_q45_K(x, 31, &y[i].d, &y[i].dmin, y[i].scales, q);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[c * 32 + l] = (uint8_t)((q[c * 64 + l] & 0xF) | ((q[c * 64 + 32 + l] & 0xF) << 4));
        for (int e = 0; e < QK_K; e++) y[i].qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
    }
}

/* Q6_K: per 16 elements a signed scale (max -> -32), as int8 multiples of d
 * (the largest -> -128, ggml quantize_row_q6_K_ref); q in [-32, 31]. */
void ember_quantize_q6_K_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q6_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scale[16];
        for (int j = 0; j < 16; j++) scale[j] = signed_absmax(x + j * 16, 16) / -32;
        const float smax = signed_absmax(scale, 16);
        memset(&y[i], 0, sizeof y[i]);
        y[i].d = TOFP16(smax ? smax / -128 : 0.0f);
        const float d = FP16(y[i].d);
        for (int j = 0; j < 16; j++) {
            int sc = d != 0 ? clampi(nearest(scale[j] / d), -128, 127) : 0;
            y[i].scales[j] = (int8_t)sc;
            const float dl = d * (float)sc;
            for (int k = 0; k < 16; k++) {
                int e = j * 16 + k, h = e / 128, r = e % 128, g = r / 32, l = r % 32;
                int q = (dl != 0 ? clampi(nearest(x[e] / dl), -32, 31) : 0) + 32;
                y[i].ql[h * 64 + (g & 1) * 32 + l] |= (uint8_t)((q & 0xF) << (4 * (g >> 1)));
                y[i].qh[h * 32 + l] |= (uint8_t)((q >> 4) << (2 * g));
            }
        }
    }
}

static int iq4_nearest_k(float v)
{
    int best = 0;
    float be = fabsf(v - ember_kvalues_iq4nl[0]);
    for (int k = 1; k < 16; k++) {
        float e = fabsf(v - ember_kvalues_iq4nl[k]);
        if (e < be) { be = e; best = k; }
    }
    return best;
}

/* IQ4_XS: per 32 elements a signed scale (max -> kvalues[0] = -127), as 6-bit
 * signed multiples of d (largest -> -32); nearest non-linear level. */
void ember_quantize_iq4_xs_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scale[8];
        for (int j = 0; j < 8; j++) scale[j] = signed_absmax(x + j * 32, 32) / -127;
        const float smax = signed_absmax(scale, 8);
        memset(&y[i], 0, sizeof y[i]);
        y[i].d = TOFP16(smax ? smax / -32 : 0.0f);
        const float d = FP16(y[i].d);
        uint16_t sh = 0;
        for (int j = 0; j < 8; j++) {
            int sc = d != 0 ? clampi(nearest(scale[j] / d), -32, 31) : 0;
            int ls = sc + 32;
            y[i].scales_l[j / 2] |= (uint8_t)((ls & 0xF) << (4 * (j % 2)));
            sh |= (uint16_t)((ls >> 4) << (2 * j));
            const float dl = d * (float)sc, idl = dl != 0 ? 1.0f / dl : 0.0f;
            for (int l = 0; l < 16; l++) {
                int a = iq4_nearest_k(x[j * 32 + l] * idl), b = iq4_nearest_k(x[j * 32 + 16 + l] * idl);
                y[i].qs[j * 16 + l] = (uint8_t)(a | (b << 4));
            }
        }
        y[i].scales_h = sh;
    }
}

/* ---- scalar dots with Q8_K --------------------------------------------------
 * Each computes exact integer sums per super-block, then
 *   s += y.d * (d * sum_j sc_j * dot_j  -  dmin * sum_j m_j * ysum_j)
 * (ggml ggml_vec_dot_*_q8_K_generic; ysum from Q8_K bsums). */

static inline int dot16(const int8_t *a, const int8_t *b, int n)
{
    int s = 0;
    for (int k = 0; k < n; k++) s += a[k] * b[k];
    return s;
}

void ember_vec_dot_q2_K_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    int8_t q[QK_K];
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack_q2_K(&x[i], q);
        int isum = 0, msum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (x[i].scales[j] & 0xF) * dot16(q + j * 16, y[i].qs + j * 16, 16);
            msum += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        sum += y[i].d * (FP16(x[i].d) * (float)isum - FP16(x[i].dmin) * (float)msum);
    }
    *s = sum;
}

void ember_vec_dot_q3_K_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    int8_t q[QK_K];
    int sc[16];
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack_q3_K(&x[i], q, sc);
        int isum = 0;
        for (int j = 0; j < 16; j++) isum += sc[j] * dot16(q + j * 16, y[i].qs + j * 16, 16);
        sum += y[i].d * (FP16(x[i].d) * (float)isum);
    }
    *s = sum;
}

static float dot_q45_K(const uint8_t *scales, uint16_t dh, uint16_t dminh, const int8_t *q, const block_q8_K *y)
{
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ember_k4_scale_min(j, scales, &sc, &m);
        isum += sc * dot16(q + j * 32, y->qs + j * 32, 32);
        msum += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    return y->d * (FP16(dh) * (float)isum - FP16(dminh) * (float)msum);
}

/* Q4_K x Q8_K in the float order of llama.cpp's x86 build, which repacks
 * Q4_K weights (ggml-cpu/repack.cpp q4_K_8x8) and runs
 * ggml_gemv_q4_K_8x8_q8_K for a token: per super-block the scaled integer
 * sums isum = sum_j sc_j (q4 . q8)_j and imin = sum_j m_j bsum_j, exact; then
 * A = fma(isum, d*d8, A) and M = fma(imin, dmin*d8, M) across super-blocks;
 * result A - M. (Its 4-token gemm, used for prompt rows in groups of four,
 * rounds differently; ember keeps one order for every batch shape.) */
void ember_vec_dot_q4_K_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q4_K *x = vx;
    const block_q8_K *y = vy;
    int8_t q[QK_K];
    float acc = 0, accm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack_q45_K(x[i].qs, NULL, q);
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            ember_k4_scale_min(j, x[i].scales, &sc, &m);
            isum += sc * dot16(q + j * 32, y[i].qs + j * 32, 32);
            msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        acc = fmaf((float)isum, FP16(x[i].d) * y[i].d, acc);
        accm = fmaf((float)msum, FP16(x[i].dmin) * y[i].d, accm);
    }
    *s = acc - accm;
}

void ember_vec_dot_q5_K_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q5_K *x = vx;
    const block_q8_K *y = vy;
    int8_t q[QK_K];
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack_q45_K(x[i].qs, x[i].qh, q);
        sum += dot_q45_K(x[i].scales, x[i].d, x[i].dmin, q, &y[i]);
    }
    *s = sum;
}

void ember_vec_dot_q6_K_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q6_K *x = vx;
    const block_q8_K *y = vy;
    int8_t q[QK_K];
    float sum = 0;
    /* ggml's AVX2 order (simd256.h dot_q6_K_256): 8 int32 lanes, lane l
     * holding elements 32c+4l..32c+4l+3 (c = 0..7) of the unsigned 6-bit
     * values, minus 32 * the scaled sums of sub-blocks 2l and 2l+1; each lane
     * accumulated in f32 by FMA; lanes summed (0+4, 2+6) + (1+5, 3+7). */
    float acc[8] = {0};
    (void)sum;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack_q6_K(&x[i], q);
        int32_t lane[8] = {0};
        for (int e = 0; e < QK_K; e++)
            lane[(e % 32) / 4] += x[i].scales[e / 16] * (q[e] + 32) * y[i].qs[e];
        for (int l = 0; l < 8; l++)
            lane[l] -= 32 * (y[i].bsums[2 * l] * x[i].scales[2 * l] + y[i].bsums[2 * l + 1] * x[i].scales[2 * l + 1]);
        const float d = y[i].d * FP16(x[i].d);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    *s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void ember_vec_dot_iq4_xs_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_iq4_xs *x = vx;
    const block_q8_K *y = vy;
    int8_t q[QK_K];
    int sc[8];
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack_iq4_xs(&x[i], q, sc);
        int isum = 0;
        for (int j = 0; j < 8; j++) isum += sc[j] * dot16(q + j * 32, y[i].qs + j * 32, 32);
        sum += y[i].d * (FP16(x[i].d) * (float)isum);
    }
    *s = sum;
}
