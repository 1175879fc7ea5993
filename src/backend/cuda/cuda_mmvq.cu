/*
 * cuda_mmvq.cu — the default decode mat-vec y = W x on Q8-quantized
 * activations: the same integer block dots as the exact kernels of
 * cuda_q8.cu (dp4a; exact in any order), summed in free float order.
 *
 * Why a second set: the exact kernels replay the CPU backend's float chain
 * block after block (every lane waits on the previous block's shuffles),
 * which kept E4B's Q4_K mat-vecs at ~1.3 TB/s (bench/results/cuda-h200.md,
 * session 21 profile). Here every lane keeps its own partial sums over the
 * blocks it reads, the loop carries no shuffle, several blocks' loads are
 * in flight per lane, and one warp reduction ends the row. Before waiting
 * on the previous kernel (programmatic dependent launch), each warp asks L2
 * for its row (prefetch.global.L2): weights never depend on the previous
 * kernel, so a CTA resident early has its row on chip when it may start.
 * EMBER_CUDA_EXACT=1 selects the exact kernels (a debugging mode).
 *
 * Layouts: ggml-common.h block_q4_0 ... block_q6_K (as cuda_q8.cu); the
 * activation buffer: cuda_q8.cu's header comment. Formulas per block:
 *   32-element formats: d_w d_a sum_i (q_i - OFF) a_i  (+ m_w s_a with a min)
 *   Q4_K: d_w d_a sum_j sc_j (q . a)_j - dmin_w d_a sum_j m_j (sum a)_j
 *   Q6_K: d_w d_a sum_j sc_j (q - 32) . a over 16-element groups j
 * (ggml's vec_dot_q*_q8_*; src/quant/simd*.c are ours).
 * Must not: allocate or synchronise (graph capture), or know models.
 */
#include "backend/cuda/cuda_q8.cuh"

using namespace ember_cu;

namespace ember_q8 {

namespace {

/* Ask L2 for row wr[0, row_bytes): one 128-byte line per lane per step. */
__device__ __forceinline__ void prefetch_row(const uint8_t *wr, size_t row_bytes)
{
    const uintptr_t lo = (uintptr_t)wr & ~(uintptr_t)127, hi = (uintptr_t)wr + row_bytes;
    for (uintptr_t p = lo + (uintptr_t)(threadIdx.x & 31) * 128; p < hi; p += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* 32-element formats: lane = 4k + j, k (0..7) one of 8 consecutive blocks,
 * j (0..3) the units j and j + 4 (elements 4j..4j+3 and 16+4j..16+4j+3 for
 * the nibble formats, whose two units share one 4-byte load). */
template <class T, int NC>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmvq32(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad,
         const float *__restrict__ as, int64_t n)
{
    const uint8_t *wr;
    float *y;
    int64_t n_rows, row;
    const bool has = mm_seg_row(ms, row_bytes, wr, y, n_rows, row);
    if (has) prefetch_row(wr, row_bytes);
    ember_pdl_wait();
    if (!has) return;
    const int lane = threadIdx.x & 31, j = lane & 3, k = lane >> 2;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
#pragma unroll 4
    for (int b = k; b < nb; b += 8) {
        const uint8_t *blk = wr + (size_t)b * T::BYTES;
        const int u0 = (int)T::unit(blk, j), u1 = (int)T::unit(blk, j + 4);
        const float wd = ld_f16(blk);
        const float wm = T::MIN ? ld_f16(blk + 2) : 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 32;
            const int a0 = *reinterpret_cast<const int *>(a + 4 * j), a1 = *reinterpret_cast<const int *>(a + 16 + 4 * j);
            int s = __dp4a(u1, a1, __dp4a(u0, a0, 0));
            if (T::OFF) s -= T::OFF * __dp4a(0x01010101, a1, __dp4a(0x01010101, a0, 0));
            const int64_t bi = c * (n / 32) + b;
            acc[c] = fmaf((float)s, wd * ad[bi], acc[c]);
            if (T::MIN && j == 0) acc[c] = fmaf(wm, as[bi], acc[c]);
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float v = warp_sum(acc[c]);
        if (lane == 0) y[(int64_t)c * n_rows + row] = v;
    }
}

/* byte i (0..11) of the Q4_K scale words s0..s2 (runtime i: no local array) */
__device__ __forceinline__ int sbyte(uint32_t s0, uint32_t s1, uint32_t s2, int i)
{
    const uint32_t w = i < 4 ? s0 : (i < 8 ? s1 : s2);
    return (int)((w >> (8 * (i & 3))) & 0xFFu);
}

/* Q4_K: lane = 8k + t: k (0..3) one of 4 consecutive super-blocks, t the
 * 16 quant bytes 16t..16t+15 (group g = t/2 of 64 elements: low nibbles
 * are sub-block 2g, high nibbles 2g+1). d, dmin and the 12 scale bytes come
 * in one 16-byte load (rows are 144-byte multiples of 16-aligned tensors). */
template <int NC>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmvq4_K(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad, int64_t n)
{
    const uint8_t *wr;
    float *y;
    int64_t n_rows, row;
    const bool has = mm_seg_row(ms, row_bytes, wr, y, n_rows, row);
    if (has) prefetch_row(wr, row_bytes);
    ember_pdl_wait();
    if (!has) return;
    const int lane = threadIdx.x & 31, t = lane & 7, k = lane >> 3, g = t >> 1, hf = t & 1;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
#pragma unroll 4
    for (int b = k; b < nb; b += 4) {
        const uint8_t *blk = wr + (size_t)b * 144;
        const uint4 hd = *reinterpret_cast<const uint4 *>(blk);
        const float dw = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xFFFFu)));
        const float dmw = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        const int j0 = 2 * g, j1 = 2 * g + 1;
        int sc0, m0, sc1, m1;
        if (g < 2) {   /* j < 4 */
            sc0 = sbyte(hd.y, hd.z, hd.w, j0) & 63;
            m0 = sbyte(hd.y, hd.z, hd.w, j0 + 4) & 63;
            sc1 = sbyte(hd.y, hd.z, hd.w, j1) & 63;
            m1 = sbyte(hd.y, hd.z, hd.w, j1 + 4) & 63;
        } else {
            sc0 = (sbyte(hd.y, hd.z, hd.w, j0 + 4) & 0xF) | ((sbyte(hd.y, hd.z, hd.w, j0 - 4) >> 6) << 4);
            m0 = (sbyte(hd.y, hd.z, hd.w, j0 + 4) >> 4) | ((sbyte(hd.y, hd.z, hd.w, j0) >> 6) << 4);
            sc1 = (sbyte(hd.y, hd.z, hd.w, j1 + 4) & 0xF) | ((sbyte(hd.y, hd.z, hd.w, j1 - 4) >> 6) << 4);
            m1 = (sbyte(hd.y, hd.z, hd.w, j1 + 4) >> 4) | ((sbyte(hd.y, hd.z, hd.w, j1) >> 6) << 4);
        }
        const uint4 qv = *reinterpret_cast<const uint4 *>(blk + 16 + 32 * g + 16 * hf);
        const uint32_t q[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 256 + 64 * g + 16 * hf;
            const int4 alo = *reinterpret_cast<const int4 *>(a), ahi = *reinterpret_cast<const int4 *>(a + 32);
            const int al[4] = {alo.x, alo.y, alo.z, alo.w}, ah[4] = {ahi.x, ahi.y, ahi.z, ahi.w};
            int dlo = 0, dhi = 0, slo = 0, shi = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                dlo = __dp4a((int)(q[i] & 0x0F0F0F0Fu), al[i], dlo);
                dhi = __dp4a((int)((q[i] >> 4) & 0x0F0F0F0Fu), ah[i], dhi);
                slo = __dp4a(0x01010101, al[i], slo);
                shi = __dp4a(0x01010101, ah[i], shi);
            }
            const float da = ad[c * (n / 256) + b];
            acc[c] = fmaf((float)(sc0 * dlo + sc1 * dhi), dw * da, acc[c]);
            acc[c] = fmaf(-(float)(m0 * slo + m1 * shi), dmw * da, acc[c]);
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float v = warp_sum(acc[c]);
        if (lane == 0) y[(int64_t)c * n_rows + row] = v;
    }
}

/* Q6_K: lane = 8k + l: k (0..3) one of 4 consecutive super-blocks, l the
 * bytes 4l..4l+3 of each of the block's 8 chunks of 32 elements (chunk
 * c = 4h + kq: u = (ql[64h + 32(kq&1) + b] >> 4(kq>>1)) & 15 |
 * ((qh[32h + b] >> 2kq) & 3) << 4, element 32c + b, scale sc[2c + b/16]);
 * the -32 offset as 32 * (sum of the scaled activation sums). */
template <int NC>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmvq6_K(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad, int64_t n)
{
    const uint8_t *wr;
    float *y;
    int64_t n_rows, row;
    const bool has = mm_seg_row(ms, row_bytes, wr, y, n_rows, row);
    if (has) prefetch_row(wr, row_bytes);
    ember_pdl_wait();
    if (!has) return;
    const int lane = threadIdx.x & 31, l = lane & 7, k = lane >> 3, hs = l >= 4;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
#pragma unroll 2
    for (int b = k; b < nb; b += 4) {
        const uint8_t *blk = wr + (size_t)b * 210;
        const int8_t *sc = reinterpret_cast<const int8_t *>(blk + 192);
        const float dw = ld_f16(blk + 208);
        uint32_t u[8];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const uint32_t qh = ld_u32_a2(blk + 128 + 32 * hh + 4 * l);
#pragma unroll
            for (int lo = 0; lo < 2; lo++) {
                const uint32_t ql = ld_u32_a2(blk + 64 * hh + 32 * lo + 4 * l);
#pragma unroll
                for (int hi = 0; hi < 2; hi++) {
                    const int kq = lo + 2 * hi;
                    u[4 * hh + kq] = ((ql >> (4 * hi)) & 0x0F0F0F0Fu) | (((qh >> (2 * kq)) & 0x03030303u) << 4);
                }
            }
        }
        int scu[8];
#pragma unroll
        for (int ch = 0; ch < 8; ch++) scu[ch] = sc[2 * ch + hs];
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 256;
            int vv = 0, ss = 0;
#pragma unroll
            for (int ch = 0; ch < 8; ch++) {
                const int av = *reinterpret_cast<const int *>(a + 32 * ch + 4 * l);
                vv += scu[ch] * __dp4a((int)u[ch], av, 0);
                ss += scu[ch] * __dp4a(0x01010101, av, 0);
            }
            acc[c] = fmaf((float)(vv - 32 * ss), dw * ad[c * (n / 256) + b], acc[c]);
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float v = warp_sum(acc[c]);
        if (lane == 0) y[(int64_t)c * n_rows + row] = v;
    }
}

template <int NC>
void launch_fast_nc(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, unsigned grid,
                    const q8_view &a, int64_t n)
{
    const int nb32 = (int)(n / 32), nb256 = (int)(n / 256);
    switch (type) {
    case EMBER_TYPE_Q4_0:
        ember_launch(k_mmvq32<uq4_0, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q4_1:
        ember_launch(k_mmvq32<uq4_1, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q5_0:
        ember_launch(k_mmvq32<uq5_0, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q5_1:
        ember_launch(k_mmvq32<uq5_1, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q8_0:
        ember_launch(k_mmvq32<uq8_0, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q4_K:
        ember_launch(k_mmvq4_K<NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb256, a.qs, a.d, n);
        break;
    default: /* Q6_K (checked by the caller) */
        ember_launch(k_mmvq6_K<NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb256, a.qs, a.d, n);
        break;
    }
}

} /* namespace */

void mmvq_fast_launch(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, unsigned grid,
                      const q8_view &a, int64_t n, int nc)
{
    switch (nc) {
    case 1: launch_fast_nc<1>(st, type, row_bytes, ms, grid, a, n); break;
    case 2: launch_fast_nc<2>(st, type, row_bytes, ms, grid, a, n); break;
    case 3: launch_fast_nc<3>(st, type, row_bytes, ms, grid, a, n); break;
    case 4: launch_fast_nc<4>(st, type, row_bytes, ms, grid, a, n); break;
    case 5: launch_fast_nc<5>(st, type, row_bytes, ms, grid, a, n); break;
    case 6: launch_fast_nc<6>(st, type, row_bytes, ms, grid, a, n); break;
    case 7: launch_fast_nc<7>(st, type, row_bytes, ms, grid, a, n); break;
    default: launch_fast_nc<8>(st, type, row_bytes, ms, grid, a, n); break;
    }
}

} /* namespace ember_q8 */
