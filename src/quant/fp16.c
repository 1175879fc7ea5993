/*
 * fp16.c — IEEE binary16 and bfloat16 <-> binary32 conversions (scalar).
 *
 * Owns: the bit-level conversions declared in quant.h. fp16->fp32 is exact
 * (subnormals included); fp32->fp16 rounds to nearest even (IEEE 754-2008
 * §4.3.1), as F16C's VCVTPS2PH with imm 0 and numpy's astype(float16) do.
 * bf16 rounding follows ggml_compute_fp32_to_bf16 (ggml-impl.h) and gguf-py
 * BF16.quantize_blocks: NaN forced quiet, then round to nearest even.
 * Must not: depend on the CPU variant (SIMD files use F16C themselves).
 */
#include <string.h>
#include "quant/quant.h"

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float ember_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (man << 13)); /* inf/nan */
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t ember_fp32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFF;
    if (ax > 0x7F800000u) return sign | 0x7E00 | (uint16_t)((ax >> 13) & 0x3FF); /* NaN */
    if (ax >= 0x477FF000u) return sign | 0x7C00; /* >= 65520 rounds to inf (or is inf) */
    if (ax < 0x38800000u) {
        /* result is fp16 subnormal or zero: value = ax_float; scale by 2^24 and
         * round to nearest even integer */
        if (ax < 0x33000000u) return sign; /* < 2^-25: rounds to 0 (tie at 2^-25 -> 0, even) */
        uint32_t e = ax >> 23;                 /* biased exponent, 102..112 */
        uint32_t m = (ax & 0x7FFFFF) | 0x800000; /* 24-bit significand */
        uint32_t shift = 126 - e;              /* value*2^24 = m >> (126-e+? ) */
        /* value = m * 2^(e-127-23); times 2^24 -> m * 2^(e-126) = m >> (126-e) */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    /* normal: rebias exponent, round mantissa 23 -> 10 bits */
    uint32_t r = ax - 0x38000000u; /* exponent rebias 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return sign | (uint16_t)q;
}

float ember_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t ember_fp32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + (0x7FFF + ((u >> 16) & 1))) >> 16);
}
