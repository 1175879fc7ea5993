/*
 * ref_legacy.c — scalar reference kernels for F32, F16, BF16 and the 32-wide
 * block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL.
 *
 * Owns: dequantization (bit-exact with gguf-py quants.py: the same float32
 * operations in the same order, no FMA), reference quantizers (the math of
 * ggml-quants.c quantize_row_*_ref), the scalar activation quantizers, and the
 * scalar vec_dot of each weight format with its activation format.
 * Must not: use SIMD intrinsics (this file is the baseline the SIMD variants
 * are tested against).
 */
#include <math.h>
#include "quant/blocks.h"

#define FP16(x) ember_fp16_to_fp32(x)
#define TOFP16(x) ember_fp32_to_fp16(x)

/* ---- F32 / F16 / BF16 ---------------------------------------------------- */

void ember_dequantize_f32(const void *restrict x, float *restrict y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}
void ember_quantize_f32_ref(const float *restrict x, void *restrict y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}
void ember_dequantize_f16(const void *restrict x, float *restrict y, int64_t n)
{
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = FP16(h[i]);
}
void ember_quantize_f16_ref(const float *restrict x, void *restrict y, int64_t n)
{
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = TOFP16(x[i]);
}
void ember_dequantize_bf16(const void *restrict x, float *restrict y, int64_t n)
{
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = ember_bf16_to_fp32(h[i]);
}
void ember_quantize_bf16_ref(const float *restrict x, void *restrict y, int64_t n)
{
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = ember_fp32_to_bf16(x[i]);
}

/* Plain-type dots accumulate in 8 float lanes, the order the SIMD variants
 * also start from; the activations are F32. */
void ember_vec_dot_f32_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const float *x = vx, *y = vy;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)x[i] * y[i];
    *s = (float)acc;
}
void ember_vec_dot_f16_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const uint16_t *x = vx;
    const float *y = vy;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)FP16(x[i]) * y[i];
    *s = (float)acc;
}
void ember_vec_dot_bf16_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const uint16_t *x = vx;
    const float *y = vy;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)ember_bf16_to_fp32(x[i]) * y[i];
    *s = (float)acc;
}

/* ---- Q4_0: d*(q-8) -------------------------------------------------------- */

void ember_dequantize_q4_0(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = d * (float)((x[i].qs[j] & 0xF) - 8);
            y[j + QK4_0 / 2] = d * (float)((x[i].qs[j] >> 4) - 8);
        }
    }
}

/* ggml quantize_row_q4_0_ref: d = max/-8 where max is the value of largest
 * magnitude; q = min(15, (int8_t)(x/d + 8.5)). */
void ember_quantize_q4_0_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK4_0; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        y[i].d = TOFP16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int a = (int)(x[j] * id + 8.5f), b = (int)(x[j + QK4_0 / 2] * id + 8.5f);
            a = a > 15 ? 15 : a; b = b > 15 ? 15 : b;
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

/* ---- Q4_1: d*q + m -------------------------------------------------------- */

void ember_dequantize_q4_1(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            float a = d * (float)(x[i].qs[j] & 0xF), b = d * (float)(x[i].qs[j] >> 4);
            y[j] = a + m;
            y[j + QK4_1 / 2] = b + m;
        }
    }
}

/* ggml quantize_row_q4_1_ref: d = (max-min)/15, m = min, q = min(15, (x-min)/d + 0.5). */
void ember_quantize_q4_1_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK4_1; j++) { min = fminf(min, x[j]); max = fmaxf(max, x[j]); }
        const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
        y[i].d = TOFP16(d);
        y[i].m = TOFP16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int a = (int)((x[j] - min) * id + 0.5f), b = (int)((x[j + QK4_1 / 2] - min) * id + 0.5f);
            a = a > 15 ? 15 : a; b = b > 15 ? 15 : b;
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

/* ---- Q5_0: d*(q-16), bit 4 of element j in qh bit j ------------------------ */

void ember_dequantize_q5_0(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = FP16(x[i].d);
        const uint32_t qh = ember_load_u32(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            int a = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int b = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)(a - 16);
            y[j + QK5_0 / 2] = d * (float)(b - 16);
        }
    }
}

void ember_quantize_q5_0_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK5_0; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        y[i].d = TOFP16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int a = (int)(x[j] * id + 16.5f), b = (int)(x[j + QK5_0 / 2] * id + 16.5f);
            a = a > 31 ? 31 : a; b = b > 31 ? 31 : b;
            y[i].qs[j] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
            qh |= (uint32_t)(a >> 4) << j;
            qh |= (uint32_t)(b >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* ---- Q5_1: d*q + m --------------------------------------------------------- */

void ember_dequantize_q5_1(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        const uint32_t qh = ember_load_u32(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            int a = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int b = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            float fa = d * (float)a, fb = d * (float)b;
            y[j] = fa + m;
            y[j + QK5_1 / 2] = fb + m;
        }
    }
}

void ember_quantize_q5_1_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK5_1; j++) { min = fminf(min, x[j]); max = fmaxf(max, x[j]); }
        const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
        y[i].d = TOFP16(d);
        y[i].m = TOFP16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            int a = (int)((x[j] - min) * id + 0.5f), b = (int)((x[j + QK5_1 / 2] - min) * id + 0.5f);
            a = a > 31 ? 31 : a; b = b > 31 ? 31 : b;
            y[i].qs[j] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
            qh |= (uint32_t)(a >> 4) << j;
            qh |= (uint32_t)(b >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* ---- Q8_0 / Q8_1: d*q ------------------------------------------------------ */

void ember_dequantize_q8_0(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}
void ember_dequantize_q8_1(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < QK8_1; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* ggml quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d) (ties away from 0). */
void ember_quantize_q8_0_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) { float a = fabsf(x[j]); amax = a > amax ? a : amax; }
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[i].d = TOFP16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}
/* ggml quantize_row_q8_1_ref: as Q8_0, plus s = d*sum(q). */
void ember_quantize_q8_1_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        float amax = 0;
        for (int j = 0; j < QK8_1; j++) { float a = fabsf(x[j]); amax = a > amax ? a : amax; }
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) { y[i].qs[j] = (int8_t)roundf(x[j] * id); sum += y[i].qs[j]; }
        y[i].d = TOFP16(d);
        y[i].s = TOFP16((float)sum * d);
    }
}

/* Activation quantizers (the `from_float` of the scalar variant): the bytes of
 * ggml's CPU quantize_row_q8_0 / quantize_row_q8_1 (ggml-cpu/arch/x86/quants.c),
 * which llama.cpp runs on activations: unlike the _ref ones the multiplier is
 * id = 127/amax (not 1/d; the two differ by an ulp for some amax, which moves
 * x*id across a rounding boundary now and then) and ties round to even
 * (ember_round_small, as the SIMD conversions). All variants give identical
 * bytes. */
void ember_quantize_q8_0_scalar(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) { float a = fabsf(x[j]); amax = a > amax ? a : amax; }
        const float d = amax / 127, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = TOFP16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)ember_round_small(x[j] * id);
    }
}
void ember_quantize_q8_1_scalar(const float *restrict x, void *restrict vy, int64_t n)
{
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        float amax = 0;
        for (int j = 0; j < QK8_1; j++) { float a = fabsf(x[j]); amax = a > amax ? a : amax; }
        const float d = amax / 127, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) { y[i].qs[j] = (int8_t)ember_round_small(x[j] * id); sum += y[i].qs[j]; }
        y[i].d = TOFP16(d);
        y[i].s = TOFP16((float)sum * d);
    }
}

/* ---- IQ4_NL: d*kvalues[q] -------------------------------------------------- */

void ember_dequantize_iq4_nl(const void *restrict vx, float *restrict y, int64_t n)
{
    const block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * (float)ember_kvalues_iq4nl[x[i].qs[j] & 0xF];
            y[j + QK4_NL / 2] = d * (float)ember_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

static int iq4_nearest(float v)
{
    int best = 0;
    float be = fabsf(v - ember_kvalues_iq4nl[0]);
    for (int k = 1; k < 16; k++) {
        float e = fabsf(v - ember_kvalues_iq4nl[k]);
        if (e < be) { be = e; best = k; }
    }
    return best;
}

/* Simplified from ggml quantize_row_iq4_nl_ref (no scale search): d chosen so
 * the value of largest magnitude maps onto -127 (kvalues[0]); each element
 * takes the nearest level. */
void ember_quantize_iq4_nl_ref(const float *restrict x, void *restrict vy, int64_t n)
{
    block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK4_NL; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        const uint16_t dh = TOFP16(max / -127);
        const float d = FP16(dh), id = d ? 1.0f / d : 0.0f;
        y[i].d = dh;
        for (int j = 0; j < QK4_NL / 2; j++)
            y[i].qs[j] = (uint8_t)(iq4_nearest(x[j] * id) | (iq4_nearest(x[j + QK4_NL / 2] * id) << 4));
    }
}

/* ---- scalar dots ----------------------------------------------------------- */

void ember_vec_dot_q4_0_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q4_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++)
            sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        sum += (float)sumi * (FP16(x[i].d) * FP16(y[i].d));
    }
    *s = sum;
}

void ember_vec_dot_q4_1_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q4_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_1 / 2; j++)
            sumi += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        sum += (float)sumi * (FP16(x[i].d) * FP16(y[i].d)) + FP16(x[i].m) * FP16(y[i].s);
    }
    *s = sum;
}

void ember_vec_dot_q5_0_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q5_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const uint32_t qh = ember_load_u32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            int a = ((x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4)) - 16;
            int b = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += a * y[i].qs[j] + b * y[i].qs[j + 16];
        }
        sum += (float)sumi * (FP16(x[i].d) * FP16(y[i].d));
    }
    *s = sum;
}

void ember_vec_dot_q5_1_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q5_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const uint32_t qh = ember_load_u32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            int a = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int b = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi += a * y[i].qs[j] + b * y[i].qs[j + 16];
        }
        sum += (float)sumi * (FP16(x[i].d) * FP16(y[i].d)) + FP16(x[i].m) * FP16(y[i].s);
    }
    *s = sum;
}

void ember_vec_dot_q8_0_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_q8_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sum += (float)sumi * (FP16(x[i].d) * FP16(y[i].d));
    }
    *s = sum;
}

void ember_vec_dot_iq4_nl_scalar(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy)
{
    const block_iq4_nl *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++)
            sumi += ember_kvalues_iq4nl[x[i].qs[j] & 0xF] * y[i].qs[j] +
                    ember_kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        sum += (float)sumi * (FP16(x[i].d) * FP16(y[i].d));
    }
    *s = sum;
}
