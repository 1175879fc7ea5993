/*
 * cuda_mmvq_lane.cuh — one lane's share of a row in the fast mat-vec
 * kernels (cuda_mmvq.cu), as __host__ __device__ functions: a kernel runs
 * them on the 32 lanes of a warp and sums the lanes' partial results; the
 * host test tests/unit/cuda/test_mmvq_host.cu runs the same code on the CPU
 * for all 32 lanes against gguf-py's dequantized blocks, so the kernels'
 * arithmetic is checked without a GPU.
 *
 * Every function: wr the row's blocks, nb its blocks, aq/ad(/as) the Q8
 * activation buffer's views (cuda_q8.cu's layout) for column 0 of the
 * launch, n the row length, lane 0..31; adds the lane's partial dot of
 * column c to acc[c] for c < NC.
 * Must not: use warp intrinsics or anything but plain loads.
 */
#ifndef EMBER_CUDA_MMVQ_LANE_CUH
#define EMBER_CUDA_MMVQ_LANE_CUH

#include "backend/cuda/cuda_q8.cuh"

/* unroll hints for the device pass only (the host pass of these
 * __host__ __device__ functions does not know the pragma) */
#ifdef __CUDA_ARCH__
#define EMBER_UNROLL _Pragma("unroll")
#define EMBER_UNROLL_N(s) _Pragma(s)
#else
#define EMBER_UNROLL
#define EMBER_UNROLL_N(s)
#endif

namespace ember_q8 {

/* 4 signed bytes of a times those of b, plus c (the dp4a instruction) */
__host__ __device__ __forceinline__ int dp4a_s(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}

__host__ __device__ __forceinline__ float f16_bits(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu)));
}

/* 32-element formats: lane = 4k + j, k (0..7) one of 8 consecutive blocks,
 * j (0..3) the units j and j + 4 (elements 4j..4j+3 and 16+4j..16+4j+3:
 * for the nibble formats the two units share one 4-byte load). */
template <class T, int NC>
__host__ __device__ __forceinline__ void mmvq32_lane(const uint8_t *wr, int nb, const int8_t *aq, const float *ad,
                                                     const float *as, int64_t n, int lane, float *acc)
{
    const int j = lane & 3, k = lane >> 2;
EMBER_UNROLL_N("unroll 4")
    for (int b = k; b < nb; b += 8) {
        const uint8_t *blk = wr + (size_t)b * T::BYTES;
        const int u0 = (int)T::unit(blk, j), u1 = (int)T::unit(blk, j + 4);
        const float wd = ld_f16(blk);
        const float wm = T::MIN ? ld_f16(blk + 2) : 0.0f;
EMBER_UNROLL
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 32;
            const int a0 = *reinterpret_cast<const int *>(a + 4 * j), a1 = *reinterpret_cast<const int *>(a + 16 + 4 * j);
            int s = dp4a_s(u1, a1, dp4a_s(u0, a0, 0));
            if (T::OFF) s -= T::OFF * dp4a_s(0x01010101, a1, dp4a_s(0x01010101, a0, 0));
            const int64_t bi = c * (n / 32) + b;
            acc[c] = fmaf((float)s, wd * ad[bi], acc[c]);
            if (T::MIN && j == 0) acc[c] = fmaf(wm, as[bi], acc[c]);
        }
    }
}

/* byte i (0..11) of the Q4_K scale words s0..s2 (runtime i: no local array) */
__host__ __device__ __forceinline__ int sbyte(uint32_t s0, uint32_t s1, uint32_t s2, int i)
{
    const uint32_t w = i < 4 ? s0 : (i < 8 ? s1 : s2);
    return (int)((w >> (8 * (i & 3))) & 0xFFu);
}

/* Super-blocks of a Q4_K row whose loads one lane keeps in flight at
 * once: every load of a pass is issued before the first one is used (a
 * row of E4B's 2560 columns is 10 super-blocks: one pass). Fewer with more
 * columns, whose activations take the registers. */
template <int NC> struct kpass {
    static constexpr int U = NC <= 2 ? 4 : (NC <= 4 ? 2 : 1);
};

/* Q4_K: lane = 8k + t: k (0..3) one of 4 consecutive super-blocks, t the
 * 16 quant bytes 16t..16t+15 (group g = t/2 of 64 elements: low nibbles
 * are sub-block 2g, high nibbles 2g+1). d, dmin and the 12 scale bytes come
 * in one 16-byte load (rows are 144-byte multiples of 16-aligned tensors);
 * scales and mins as ggml's get_scale_min_k4, selected without a branch
 * (the lanes of one warp hold both halves). A pass loads the headers and
 * quants of kpass<NC>::U super-blocks (4U apart) before any arithmetic. */
template <int NC>
__host__ __device__ __forceinline__ void mmvq4_K_lane(const uint8_t *wr, int nb, const int8_t *aq, const float *ad,
                                                      int64_t n, int lane, float *acc)
{
    constexpr int U = kpass<NC>::U;
    const int t = lane & 7, k = lane >> 3, g = t >> 1, hf = t & 1;
    const bool lo = g < 2;
    const int j0 = 2 * g, j1 = 2 * g + 1;
    for (int b0 = k; b0 < nb; b0 += 4 * U) {
        uint4 hd[U], qv[U];
EMBER_UNROLL
        for (int u = 0; u < U; u++) {
            const int b = b0 + 4 * u;
            if (b < nb) {
                const uint8_t *blk = wr + (size_t)b * 144;
                hd[u] = *reinterpret_cast<const uint4 *>(blk);
                qv[u] = *reinterpret_cast<const uint4 *>(blk + 16 + 32 * g + 16 * hf);
            } else {
                hd[u] = make_uint4(0u, 0u, 0u, 0u);
                qv[u] = hd[u];
            }
        }
EMBER_UNROLL
        for (int u = 0; u < U; u++) {
            const int b = b0 + 4 * u;
            if (b >= nb) continue;
            const uint4 h = hd[u];
            const float dw = f16_bits(h.x), dmw = f16_bits(h.x >> 16);
            /* bytes j, j + 4 and (for g >= 2) j - 4 of the 12 scale bytes */
            const int a0 = sbyte(h.y, h.z, h.w, j0), b40 = sbyte(h.y, h.z, h.w, j0 + 4);
            const int a1 = sbyte(h.y, h.z, h.w, j1), b41 = sbyte(h.y, h.z, h.w, j1 + 4);
            const int c0 = sbyte(h.y, h.z, h.w, lo ? j0 : j0 - 4), c1 = sbyte(h.y, h.z, h.w, lo ? j1 : j1 - 4);
            const int sc0 = lo ? (a0 & 63) : ((b40 & 0xF) | ((c0 >> 6) << 4));
            const int m0 = lo ? (b40 & 63) : ((b40 >> 4) | ((a0 >> 6) << 4));
            const int sc1 = lo ? (a1 & 63) : ((b41 & 0xF) | ((c1 >> 6) << 4));
            const int m1 = lo ? (b41 & 63) : ((b41 >> 4) | ((a1 >> 6) << 4));
            const uint32_t q[4] = {qv[u].x, qv[u].y, qv[u].z, qv[u].w};
EMBER_UNROLL
            for (int c = 0; c < NC; c++) {
                const int8_t *a = aq + c * n + (int64_t)b * 256 + 64 * g + 16 * hf;
                const int4 alo = *reinterpret_cast<const int4 *>(a), ahi = *reinterpret_cast<const int4 *>(a + 32);
                const int al[4] = {alo.x, alo.y, alo.z, alo.w}, ah[4] = {ahi.x, ahi.y, ahi.z, ahi.w};
                int dlo = 0, dhi = 0, slo = 0, shi = 0;
EMBER_UNROLL
                for (int i = 0; i < 4; i++) {
                    dlo = dp4a_s((int)(q[i] & 0x0F0F0F0Fu), al[i], dlo);
                    dhi = dp4a_s((int)((q[i] >> 4) & 0x0F0F0F0Fu), ah[i], dhi);
                    slo = dp4a_s(0x01010101, al[i], slo);
                    shi = dp4a_s(0x01010101, ah[i], shi);
                }
                const float da = ad[c * (n / 256) + b];
                acc[c] = fmaf((float)(sc0 * dlo + sc1 * dhi), dw * da, acc[c]);
                acc[c] = fmaf(-(float)(m0 * slo + m1 * shi), dmw * da, acc[c]);
            }
        }
    }
}

/* Q6_K: lane = 8k + l: k (0..3) one of 4 consecutive super-blocks, l the
 * bytes 4l..4l+3 of each of the block's 8 chunks of 32 elements (chunk
 * c = 4h + kq: u = (ql[64h + 32(kq&1) + b] >> 4(kq>>1)) & 15 |
 * ((qh[32h + b] >> 2kq) & 3) << 4, element 32c + b, scale sc[2c + b/16]);
 * the -32 offset as 32 times the scaled activation sums. (A pass of
 * kpass<NC>::U super-blocks loaded first, as Q4_K's, took 72 registers
 * and was 14% slower on E4B's down projection: H200 2026-12-03.) */
template <int NC>
__host__ __device__ __forceinline__ void mmvq6_K_lane(const uint8_t *wr, int nb, const int8_t *aq, const float *ad,
                                                      int64_t n, int lane, float *acc)
{
    const int l = lane & 7, k = lane >> 3, hs = l >= 4;
EMBER_UNROLL_N("unroll 2")
    for (int b = k; b < nb; b += 4) {
        const uint8_t *blk = wr + (size_t)b * 210;
        const int8_t *sc = reinterpret_cast<const int8_t *>(blk + 192);
        const float dw = ld_f16(blk + 208);
        uint32_t u[8];
EMBER_UNROLL
        for (int hh = 0; hh < 2; hh++) {
            const uint32_t qh = ld_u32_a2(blk + 128 + 32 * hh + 4 * l);
EMBER_UNROLL
            for (int lo = 0; lo < 2; lo++) {
                const uint32_t ql = ld_u32_a2(blk + 64 * hh + 32 * lo + 4 * l);
EMBER_UNROLL
                for (int hi = 0; hi < 2; hi++) {
                    const int kq = lo + 2 * hi;
                    u[4 * hh + kq] = ((ql >> (4 * hi)) & 0x0F0F0F0Fu) | (((qh >> (2 * kq)) & 0x03030303u) << 4);
                }
            }
        }
        int scu[8];
EMBER_UNROLL
        for (int ch = 0; ch < 8; ch++) scu[ch] = sc[2 * ch + hs];
EMBER_UNROLL
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 256;
            int vv = 0, ss = 0;
EMBER_UNROLL
            for (int ch = 0; ch < 8; ch++) {
                const int av = *reinterpret_cast<const int *>(a + 32 * ch + 4 * l);
                vv += scu[ch] * dp4a_s((int)u[ch], av, 0);
                ss += scu[ch] * dp4a_s(0x01010101, av, 0);
            }
            acc[c] = fmaf((float)(vv - 32 * ss), dw * ad[c * (n / 256) + b], acc[c]);
        }
    }
}

} /* namespace ember_q8 */

#endif
