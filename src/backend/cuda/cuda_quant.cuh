/*
 * cuda_quant.cuh — per-type "unit" dequantizers for the CUDA kernels.
 *
 * Owns: for each supported ggml block format, how one thread turns one unit
 * (a few contiguous bytes of a block) into F32 weights and where in the
 * block those weights sit. Lanes of a warp take consecutive units, so a warp
 * reads consecutive bytes of a row (coalesced).
 * Block layouts: ggml-common.h (block_q4_0 ... block_q6_K); confirmed
 * against gguf-py gguf/quants.py dequantize_blocks, our test oracle.
 * Must not: hold kernels (cuda_matmul.cu) or host code.
 *
 * Interface of a traits struct T:
 *   QK     elements per block        BYTES  bytes per block
 *   UNITS  units per block           NRUN, RUN  a unit yields NRUN runs of RUN
 *                                    contiguous elements (RUN is 4 or 8)
 *   load(blk, u, w, off): w[NRUN*RUN] weights, off[NRUN] element offset of
 *                         each run within the block.
 */
#ifndef EMBER_CUDA_QUANT_CUH
#define EMBER_CUDA_QUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

namespace ember_cu {

__host__ __device__ __forceinline__ float ld_f16(const uint8_t *p)
{
    return __half2float(*reinterpret_cast<const __half *>(p));
}
__host__ __device__ __forceinline__ uint32_t ld_u16(const uint8_t *p)
{
    return *reinterpret_cast<const uint16_t *>(p);
}
/* 4 bytes from a 2-byte-aligned address */
__host__ __device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t *p)
{
    return ld_u16(p) | (ld_u16(p + 2) << 16);
}
__host__ __device__ __forceinline__ uint32_t ld_u32(const uint8_t *p)
{
    return *reinterpret_cast<const uint32_t *>(p);
}

/* (float)v - off for 0 <= v < 2^16 without the quarter-rate I2F: 2^23 + v
 * has v as its mantissa; the subtraction is exact (Sterbenz). */
__device__ __forceinline__ float u2f(uint32_t v, float off = 0.f)
{
    return __int_as_float(0x4B000000u | v) - (8388608.f + off);
}

/* Q4_0: d (f16), qs[16]; element j<16 = low nibble of qs[j], j>=16 = high
 * nibble of qs[j-16]; w = (q - 8) * d. */
struct tq4_0 {
    static constexpr int QK = 32, BYTES = 18, UNITS = 4, NRUN = 2, RUN = 4;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const float d = ld_f16(b);
        const uint32_t q = ld_u32_a2(b + 2 + 4 * u);
        off[0] = 4 * u;
        off[1] = 16 + 4 * u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t byte = (q >> (8 * i)) & 0xFF;
            w[i] = u2f(byte & 15, 8.f) * d;
            w[4 + i] = u2f(byte >> 4, 8.f) * d;
        }
    }
};

/* Q4_1: d, m (f16), qs[16] as Q4_0; w = q * d + m. */
struct tq4_1 {
    static constexpr int QK = 32, BYTES = 20, UNITS = 4, NRUN = 2, RUN = 4;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const uint32_t q = ld_u32(b + 4 + 4 * u);
        off[0] = 4 * u;
        off[1] = 16 + 4 * u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t byte = (q >> (8 * i)) & 0xFF;
            w[i] = fmaf(u2f(byte & 15), d, m);
            w[4 + i] = fmaf(u2f(byte >> 4), d, m);
        }
    }
};

/* Q5_0: d (f16), qh (u32: bit j = 5th bit of element j), qs[16] as Q4_0;
 * w = (q - 16) * d. */
struct tq5_0 {
    static constexpr int QK = 32, BYTES = 22, UNITS = 4, NRUN = 2, RUN = 4;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const float d = ld_f16(b);
        const uint32_t qh = ld_u32_a2(b + 2);
        const uint32_t q = ld_u32_a2(b + 6 + 4 * u);
        off[0] = 4 * u;
        off[1] = 16 + 4 * u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int j = 4 * u + i;
            const uint32_t byte = (q >> (8 * i)) & 0xFF;
            const uint32_t lo = (byte & 15) | (((qh >> j) & 1) << 4);
            const uint32_t hi = (byte >> 4) | (((qh >> (j + 16)) & 1) << 4);
            w[i] = u2f(lo, 16.f) * d;
            w[4 + i] = u2f(hi, 16.f) * d;
        }
    }
};

/* Q5_1: d, m (f16), qh (u32), qs[16]; w = q * d + m. */
struct tq5_1 {
    static constexpr int QK = 32, BYTES = 24, UNITS = 4, NRUN = 2, RUN = 4;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const uint32_t qh = ld_u32(b + 4);
        const uint32_t q = ld_u32(b + 8 + 4 * u);
        off[0] = 4 * u;
        off[1] = 16 + 4 * u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int j = 4 * u + i;
            const uint32_t byte = (q >> (8 * i)) & 0xFF;
            const uint32_t lo = (byte & 15) | (((qh >> j) & 1) << 4);
            const uint32_t hi = (byte >> 4) | (((qh >> (j + 16)) & 1) << 4);
            w[i] = fmaf(u2f(lo), d, m);
            w[4 + i] = fmaf(u2f(hi), d, m);
        }
    }
};

/* Q8_0: d (f16), qs[32] int8; w = q * d. */
struct tq8_0 {
    static constexpr int QK = 32, BYTES = 34, UNITS = 4, NRUN = 1, RUN = 8;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const float d = ld_f16(b);
        const uint32_t q0 = ld_u32_a2(b + 2 + 8 * u), q1 = ld_u32_a2(b + 6 + 8 * u);
        off[0] = 8 * u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            /* int8 q = (q ^ 0x80) - 128 */
            w[i] = u2f(((q0 >> (8 * i)) & 0xFF) ^ 0x80, 128.f) * d;
            w[4 + i] = u2f(((q1 >> (8 * i)) & 0xFF) ^ 0x80, 128.f) * d;
        }
    }
};

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block, packed
 * in 12 bytes (ggml get_scale_min_k4). */
__device__ __forceinline__ void k4_scale_min(const uint8_t *s, int j, float *sc, float *mn)
{
    if (j < 4) {
        *sc = (float)(s[j] & 63);
        *mn = (float)(s[j + 4] & 63);
    } else {
        *sc = (float)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *mn = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q4_K: d, dmin (f16), scales[12], qs[128]. Group g (0..3) of 64 elements:
 * qs[32g + l] low nibble -> element 64g + l (sub-block 2g), high nibble ->
 * 64g + 32 + l (sub-block 2g+1); w = d*sc*q - dmin*m. */
struct tq4_K {
    static constexpr int QK = 256, BYTES = 144, UNITS = 16, NRUN = 2, RUN = 8;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const int g = u >> 2, o = (u & 3) * 8;
        const float d = ld_f16(b), dmin = ld_f16(b + 2);
        float sc0, m0, sc1, m1;
        k4_scale_min(b + 4, 2 * g, &sc0, &m0);
        k4_scale_min(b + 4, 2 * g + 1, &sc1, &m1);
        const float d0 = d * sc0, d1 = d * sc1, c0 = dmin * m0, c1 = dmin * m1;
        const uint2 q = *reinterpret_cast<const uint2 *>(b + 16 + 32 * g + o);
        off[0] = 64 * g + o;
        off[1] = 64 * g + 32 + o;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t byte = ((i < 4 ? q.x : q.y) >> (8 * (i & 3))) & 0xFF;
            w[i] = d0 * u2f(byte & 15) - c0;
            w[8 + i] = d1 * u2f(byte >> 4) - c1;
        }
    }
};

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]; as Q4_K plus a 5th bit:
 * element 32s + l takes bit s of qh[l]. */
struct tq5_K {
    static constexpr int QK = 256, BYTES = 176, UNITS = 16, NRUN = 2, RUN = 8;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const int g = u >> 2, o = (u & 3) * 8;
        const float d = ld_f16(b), dmin = ld_f16(b + 2);
        float sc0, m0, sc1, m1;
        k4_scale_min(b + 4, 2 * g, &sc0, &m0);
        k4_scale_min(b + 4, 2 * g + 1, &sc1, &m1);
        const float d0 = d * sc0, d1 = d * sc1, c0 = dmin * m0, c1 = dmin * m1;
        const uint2 q = *reinterpret_cast<const uint2 *>(b + 48 + 32 * g + o);
        const uint2 h = *reinterpret_cast<const uint2 *>(b + 16 + o);
        off[0] = 64 * g + o;
        off[1] = 64 * g + 32 + o;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t byte = ((i < 4 ? q.x : q.y) >> (8 * (i & 3))) & 0xFF;
            const uint32_t hb = ((i < 4 ? h.x : h.y) >> (8 * (i & 3))) & 0xFF;
            const uint32_t lo = (byte & 15) | (((hb >> (2 * g)) & 1) << 4);
            const uint32_t hi = (byte >> 4) | (((hb >> (2 * g + 1)) & 1) << 4);
            w[i] = d0 * u2f(lo) - c0;
            w[8 + i] = d1 * u2f(hi) - c1;
        }
    }
};

/* Q6_K: ql[128], qh[64], scales[16] int8, d (f16). Half n (0..1), l (0..31):
 * element 128n + 32k + l, k = 0..3, takes the low (k=0,1) or high (k=2,3)
 * nibble of ql[64n + l + 32(k&1)] and bits 2k..2k+1 of qh[32n + l];
 * w = d * scales[(128n + 32k + l) / 16] * (q - 32). */
struct tq6_K {
    static constexpr int QK = 256, BYTES = 210, UNITS = 16, NRUN = 4, RUN = 4;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const int n = u >> 3, l0 = (u & 7) * 4;
        const float d = ld_f16(b + 208);
        const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192) + 8 * n + l0 / 16;
        const uint32_t qa = ld_u32_a2(b + 64 * n + l0);
        const uint32_t qb = ld_u32_a2(b + 64 * n + 32 + l0);
        const uint32_t qh = ld_u32_a2(b + 128 + 32 * n + l0);
        const float s0 = d * sc[0], s1 = d * sc[2], s2 = d * sc[4], s3 = d * sc[6];
#pragma unroll
        for (int k = 0; k < 4; k++) off[k] = 128 * n + 32 * k + l0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t a = (qa >> (8 * i)) & 0xFF, c = (qb >> (8 * i)) & 0xFF;
            const uint32_t h = (qh >> (8 * i)) & 0xFF;
            w[i] = s0 * u2f((a & 15) | ((h & 3) << 4), 32.f);
            w[4 + i] = s1 * u2f((c & 15) | (((h >> 2) & 3) << 4), 32.f);
            w[8 + i] = s2 * u2f((a >> 4) | (((h >> 4) & 3) << 4), 32.f);
            w[12 + i] = s3 * u2f((c >> 4) | (((h >> 6) & 3) << 4), 32.f);
        }
    }
};

/* Plain types, 8 elements per "block" (rows must be a multiple of 8). */
struct tf16 {
    static constexpr int QK = 8, BYTES = 16, UNITS = 1, NRUN = 1, RUN = 8;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const uint4 v = *reinterpret_cast<const uint4 *>(b);
        const uint32_t a[4] = {v.x, v.y, v.z, v.w};
        off[0] = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __half2 h = *reinterpret_cast<const __half2 *>(&a[i]);
            const float2 f = __half22float2(h);
            w[2 * i] = f.x;
            w[2 * i + 1] = f.y;
        }
    }
};

struct tbf16 {
    static constexpr int QK = 8, BYTES = 16, UNITS = 1, NRUN = 1, RUN = 8;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const uint4 v = *reinterpret_cast<const uint4 *>(b);
        const uint32_t a[4] = {v.x, v.y, v.z, v.w};
        off[0] = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = __uint_as_float(a[i] << 16);
            w[2 * i + 1] = __uint_as_float(a[i] & 0xFFFF0000u);
        }
    }
};

struct tf32 {
    static constexpr int QK = 8, BYTES = 32, UNITS = 2, NRUN = 1, RUN = 4;
    __device__ static void load(const uint8_t *b, int u, float *w, int *off)
    {
        const float4 v = *reinterpret_cast<const float4 *>(b + 16 * u);
        off[0] = 4 * u;
        w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
    }
};

} /* namespace ember_cu */

#endif
