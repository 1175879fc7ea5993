/*
 * cuda_q8.cu — integer mat-vec on Q8-quantized activations, in the CPU
 * backend's arithmetic.
 *
 * Owns: quantizing F32 activation rows into Q8_0 / Q8_1 / Q8_K (the bytes
 * of src/quant's from_float: ggml's x86 quantize_row_q8_*), and y = W x for
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K weights against them: exact
 * integer block dots (dp4a), then the float steps of the CPU backend's
 * kernel for that type, in its order, so each output is bit-identical to
 * the CPU backend's (src/backend/cpu/gemm_avx512.c / gemm_avx2.c vec tiles
 * for the 32-element formats, src/quant/simd*.c dot_q4_K / dot_q6_K_256):
 *   Q4_0..Q8_0: 8 float lanes, lane l = elements 4l..4l+3 of every block:
 *       c_l = fma((float)isum_l, d_w * d_a, c_l) block after block; result
 *       ((c0+c4)+(c2+c6)) + ((c1+c5)+(c3+c7)) + m, m = fma(m_w, s_a, m)
 *       block after block (0 for formats without a min).
 *   Q4_K: acc = fma((float)sumi, d_w * d_a, acc), accm = fma((float)msum,
 *       dmin_w * d_a, accm) super-block after super-block; acc - accm.
 *   Q6_K: 8 lanes, lane l = sum over the 8 chunks of 32 of scale * (bytes
 *       4l..4l+3) minus 32 * (bsums[2l] sc[2l] + bsums[2l+1] sc[2l+1]);
 *       per lane acc = fma(d_a * d_w, (float)lane, acc); the same
 *       horizontal sum as above.
 * Integer sums are exact in any order; only the float steps above are
 * ordered, and they are the CPU's step for step (no contraction: every
 * float operation is an explicit __f*_rn intrinsic).
 * Must not: allocate or synchronise (graph capture), or know models.
 *
 * Quantized activation buffer (ember_cuda_q8_bytes): qs int8 [n_cols * n],
 * then (16-byte aligned) d float [n_cols * n / bs] (Q8_0/Q8_1: the f16 d
 * widened; Q8_K: the f32 d), then for Q8_1 s float [n_cols * n / 32] (the
 * f16 s widened).
 */
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_q8_act.cuh"

using namespace ember_cu;
using namespace ember_q8;

namespace {



/* ---- activation quantizers ------------------------------------------------ */

/* One warp per block of 32: lane i holds x[i]. Q8_0 / Q8_1 as ggml's x86
 * quantize_row_q8_0/1: d = amax/127, id = 127/amax (0 when d == 0),
 * q = round-to-nearest-even(x * id), d stored as f16; Q8_1 also
 * s = f16((float)sum(q) * d) with the f32 d. */
template <bool Q81>
__global__ void k_quant_q8_32(const float *__restrict__ x, int8_t *__restrict__ qs, float *__restrict__ d,
                              float *__restrict__ s, int64_t n_blocks)
{
    ember_pdl_wait();
    const int64_t g = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (g >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    ember_q8_block32<Q81>(x[g * 32 + lane], qs + g * 32, d + g, Q81 ? s + g : nullptr);
}

/* One warp per block of 256 (Q8_K, ggml quantize_row_q8_K): lane i holds
 * elements 8i..8i+7 (cuda_q8_act.cuh). */
__global__ void k_quant_q8_K(const float *__restrict__ x, int8_t *__restrict__ qs, float *__restrict__ d,
                             int64_t n_blocks)
{
    ember_pdl_wait();
    const int64_t g = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (g >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    const float4 a = *reinterpret_cast<const float4 *>(x + g * 256 + 8 * lane);
    const float4 b = *reinterpret_cast<const float4 *>(x + g * 256 + 8 * lane + 4);
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    ember_q8_blockK(v, qs + g * 256, d + g);
}


/* One warp per weight row; NC activation columns. Lane = 8k + l: k picks
 * one of 4 consecutive blocks, l the element group 4l..4l+3 (the CPU's
 * float lane). The integer dots of 4 blocks are formed in parallel, then
 * every lane runs the float chain over those blocks in order (shuffles
 * bring block kk's values), so the chain is the CPU's. */
template <class T, int NC>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmq32(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad,
        const float *__restrict__ as, int64_t n)
{
    ember_pdl_wait();
    const uint8_t *wr;
    float *y;
    int64_t n_rows, row;
    if (!mm_seg_row(ms, row_bytes, wr, y, n_rows, row)) return;
    const int lane = threadIdx.x & 31, l = lane & 7, k = lane >> 3;
    float acc[NC], mac[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = mac[c] = 0.0f;
#pragma unroll 2 /* the next blocks' loads overlap this chain */
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int b = b0 + k;
        int p[NC];
        float f[NC], sv[NC], wm = 0.0f;
        if (b < nb) {
            const uint8_t *blk = wr + (size_t)b * T::BYTES;
            const int u = (int)T::unit(blk, l);
            const float wd = ld_f16(blk);
            if (T::MIN) wm = ld_f16(blk + 2);
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int a = *reinterpret_cast<const int *>(aq + c * n + (int64_t)b * 32 + 4 * l);
                int s = __dp4a(u, a, 0);
                if (T::OFF) s -= T::OFF * __dp4a(0x01010101, a, 0);
                p[c] = s;
                const int64_t bi = c * (n / 32) + b;
                f[c] = __fmul_rn(wd, ad[bi]);
                sv[c] = T::MIN ? as[bi] : 0.0f;
            }
        } else {
#pragma unroll
            for (int c = 0; c < NC; c++) p[c] = 0, f[c] = 0.0f, sv[c] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if (b0 + kk >= nb) break; /* uniform over the warp */
            const int src = 8 * kk + l;
            const float wmk = T::MIN ? __shfl_sync(0xffffffffu, wm, src) : 0.0f;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int pk = __shfl_sync(0xffffffffu, p[c], src);
                const float fk = __shfl_sync(0xffffffffu, f[c], src);
                acc[c] = __fmaf_rn(__int2float_rn(pk), fk, acc[c]);
                if (T::MIN) mac[c] = __fmaf_rn(wmk, __shfl_sync(0xffffffffu, sv[c], src), mac[c]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        /* AVX hsum of 8 lanes: (l, l+4), then (0, 2), (1, 3), then the two */
        float v = __fadd_rn(acc[c], __shfl_xor_sync(0xffffffffu, acc[c], 4));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
        if (lane == 0) y[(int64_t)c * n_rows + row] = __fadd_rn(v, mac[c]);
    }
}


/* Q4_K: one warp per row; lane = 8k + t: k picks one of 4 consecutive
 * super-blocks, t (0..7) the 16 quant bytes 16t..16t+15 (group g = t/2 of
 * 64 elements: low nibbles are sub-block 2g, high nibbles 2g+1). */
template <int NC>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmq4_K(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad, int64_t n)
{
    ember_pdl_wait();
    const uint8_t *wr;
    float *y;
    int64_t n_rows, row;
    if (!mm_seg_row(ms, row_bytes, wr, y, n_rows, row)) return;
    const int lane = threadIdx.x & 31, t = lane & 7, k = lane >> 3, g = t >> 1, hf = t & 1;
    float acc[NC], accm[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = accm[c] = 0.0f;
#pragma unroll 2 /* the next blocks' loads overlap this chain */
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int b = b0 + k;
        int is[NC], ms[NC];
        float fd[NC], fm[NC];
        if (b < nb) {
            const uint8_t *blk = wr + (size_t)b * 144;
            const float dw = ld_f16(blk), dmw = ld_f16(blk + 2);
            int sc0, m0, sc1, m1;
            k4_sm_int(blk + 4, 2 * g, &sc0, &m0);
            k4_sm_int(blk + 4, 2 * g + 1, &sc1, &m1);
            const uint4 qv = *reinterpret_cast<const uint4 *>(blk + 16 + 32 * g + 16 * hf);
            const uint32_t q[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int8_t *a = aq + c * n + (int64_t)b * 256 + 64 * g + 16 * hf;
                const uint4 alo = *reinterpret_cast<const uint4 *>(a), ahi = *reinterpret_cast<const uint4 *>(a + 32);
                const int al[4] = {(int)alo.x, (int)alo.y, (int)alo.z, (int)alo.w};
                const int ah[4] = {(int)ahi.x, (int)ahi.y, (int)ahi.z, (int)ahi.w};
                int dlo = 0, dhi = 0, slo = 0, shi = 0;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    dlo = __dp4a((int)(q[i] & 0x0F0F0F0Fu), al[i], dlo);
                    dhi = __dp4a((int)((q[i] >> 4) & 0x0F0F0F0Fu), ah[i], dhi);
                    slo = __dp4a(0x01010101, al[i], slo);
                    shi = __dp4a(0x01010101, ah[i], shi);
                }
                is[c] = sc0 * dlo + sc1 * dhi;
                ms[c] = m0 * slo + m1 * shi;
                const float da = ad[c * (n / 256) + b];
                fd[c] = __fmul_rn(dw, da);
                fm[c] = __fmul_rn(dmw, da);
            }
        } else {
#pragma unroll
            for (int c = 0; c < NC; c++) is[c] = ms[c] = 0, fd[c] = fm[c] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < NC; c++) {
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) {
                is[c] += __shfl_xor_sync(0xffffffffu, is[c], o);
                ms[c] += __shfl_xor_sync(0xffffffffu, ms[c], o);
            }
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if (b0 + kk >= nb) break; /* uniform over the warp */
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int isk = __shfl_sync(0xffffffffu, is[c], 8 * kk), msk = __shfl_sync(0xffffffffu, ms[c], 8 * kk);
                const float fdk = __shfl_sync(0xffffffffu, fd[c], 8 * kk), fmk = __shfl_sync(0xffffffffu, fm[c], 8 * kk);
                acc[c] = __fmaf_rn(__int2float_rn(isk), fdk, acc[c]);
                accm[c] = __fmaf_rn(__int2float_rn(msk), fmk, accm[c]);
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int c = 0; c < NC; c++) y[(int64_t)c * n_rows + row] = __fsub_rn(acc[c], accm[c]);
    }
}

/* Q6_K: one warp per row, four super-blocks per step. Lane = 8k + l: k
 * picks one of 4 consecutive super-blocks, l is the CPU's int32 lane (bytes
 * 4l..4l+3 of each 32-element chunk). A lane sums its block's 8 chunks and
 * its share of the bsums correction exactly (int32), then every lane adds
 * the 4 blocks in block order, acc_l = fma(d, (float)lane_l, acc_l): the
 * CPU's float steps in its order (bit-identical, test_cuda_q8), with 4
 * blocks' loads in flight instead of one (E4B's 10240-wide Q6_K rows ran
 * at 0.7 TB/s one block a step). Chunk c = 4h + kq: u = (ql[64h +
 * 32(kq&1) + b] >> 4(kq>>1)) & 15 | ((qh[32h + b] >> 2kq) & 3) << 4,
 * element 32c + b. */
template <int NC>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmq6_K(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad, int64_t n)
{
    ember_pdl_wait();
    const uint8_t *wr;
    float *y;
    int64_t n_rows, row;
    if (!mm_seg_row(ms, row_bytes, wr, y, n_rows, row)) return;
    const int lane = threadIdx.x & 31, l = lane & 7, k = lane >> 3;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
#pragma unroll 2
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int b = b0 + k;
        int v[NC];
        float f[NC];
        if (b < nb) {
            const uint8_t *blk = wr + (size_t)b * 210;
            const int8_t *sc = reinterpret_cast<const int8_t *>(blk + 192);
            const float dw = ld_f16(blk + 208);
            uint32_t u[8];
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const uint32_t qh = ld_u32_a2(blk + 128 + 32 * hh + 4 * l);
#pragma unroll
                for (int lo = 0; lo < 2; lo++) {   /* kq & 1 */
                    const uint32_t ql = ld_u32_a2(blk + 64 * hh + 32 * lo + 4 * l);
#pragma unroll
                    for (int hi = 0; hi < 2; hi++) {   /* kq >> 1 */
                        const int kq = lo + 2 * hi;
                        u[4 * hh + kq] = ((ql >> (4 * hi)) & 0x0F0F0F0Fu) | (((qh >> (2 * kq)) & 0x03030303u) << 4);
                    }
                }
            }
            int scu[8];
#pragma unroll
            for (int ch = 0; ch < 8; ch++) scu[ch] = sc[2 * ch + (l >= 4)];
            const int scb0 = sc[2 * l], scb1 = sc[2 * l + 1];
            const float fb = dw;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int8_t *a = aq + c * n + (int64_t)b * 256;
                int vv = 0;
#pragma unroll
                for (int ch = 0; ch < 8; ch++)
                    vv += scu[ch] * __dp4a((int)u[ch], *reinterpret_cast<const int *>(a + 32 * ch + 4 * l), 0);
                /* bsums correction, elements 32l .. 32l + 31 (scale 2l, then 2l + 1) */
                const int4 a0 = *reinterpret_cast<const int4 *>(a + 32 * l), a1 = *reinterpret_cast<const int4 *>(a + 32 * l + 16);
                int s0 = __dp4a(0x01010101, a0.x, 0), s1 = __dp4a(0x01010101, a1.x, 0);
                s0 = __dp4a(0x01010101, a0.y, s0);
                s1 = __dp4a(0x01010101, a1.y, s1);
                s0 = __dp4a(0x01010101, a0.z, s0);
                s1 = __dp4a(0x01010101, a1.z, s1);
                s0 = __dp4a(0x01010101, a0.w, s0);
                s1 = __dp4a(0x01010101, a1.w, s1);
                vv -= 32 * (scb0 * s0 + scb1 * s1);
                v[c] = vv;
                f[c] = __fmul_rn(ad[c * (n / 256) + b], fb);
            }
        } else {
#pragma unroll
            for (int c = 0; c < NC; c++) v[c] = 0, f[c] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if (b0 + kk >= nb) break; /* uniform over the warp */
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int vk = __shfl_sync(0xffffffffu, v[c], 8 * kk + l);
                const float fk = __shfl_sync(0xffffffffu, f[c], 8 * kk + l);
                acc[c] = __fmaf_rn(fk, __int2float_rn(vk), acc[c]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        float v = __fadd_rn(acc[c], __shfl_xor_sync(0xffffffffu, acc[c], 4));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
        if (lane == 0) y[(int64_t)c * n_rows + row] = v;
    }
}


template <int NC>
void launch_nc(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, unsigned grid, const q8_view &a,
               int64_t n)
{
    const int nb32 = (int)(n / 32), nb256 = (int)(n / 256);
    switch (type) {
    case EMBER_TYPE_Q4_0:
        ember_launch(k_mmq32<uq4_0, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q4_1:
        ember_launch(k_mmq32<uq4_1, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q5_0:
        ember_launch(k_mmq32<uq5_0, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q5_1:
        ember_launch(k_mmq32<uq5_1, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q8_0:
        ember_launch(k_mmq32<uq8_0, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q4_K:
        ember_launch(k_mmq4_K<NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb256, a.qs, a.d, n);
        break;
    default: /* Q6_K (checked by the caller) */
        ember_launch(k_mmq6_K<NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb256, a.qs, a.d, n);
        break;
    }
}

} /* namespace */

extern "C" uint32_t ember_cuda_q8_act_type(uint32_t wtype)
{
    switch (wtype) {
    case EMBER_TYPE_Q4_0:
    case EMBER_TYPE_Q5_0:
    case EMBER_TYPE_Q8_0: return EMBER_TYPE_Q8_0;
    case EMBER_TYPE_Q4_1:
    case EMBER_TYPE_Q5_1: return EMBER_TYPE_Q8_1;
    case EMBER_TYPE_Q4_K:
    case EMBER_TYPE_Q6_K: return EMBER_TYPE_Q8_K;
    default: return EMBER_TYPE_F32;
    }
}

extern "C" size_t ember_cuda_q8_bytes(uint32_t act_type, int64_t n, int64_t n_cols)
{
    const int64_t bs = (int64_t)ember_type_block_size(act_type);   /* Q8_0/Q8_1: 32, Q8_K: 256 */
    const size_t nd = (size_t)(n_cols * (n / bs));
    return align16((size_t)(n * n_cols)) + nd * sizeof(float) * (act_type == EMBER_TYPE_Q8_1 ? 2 : 1);
}

extern "C" ember_status ember_cuda_quantize_q8(ember_cuda *cu, uint32_t act_type, const float *x, int64_t n,
                                               int64_t n_cols, void *buf)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(buf);
    if (act_type != EMBER_TYPE_Q8_0 && act_type != EMBER_TYPE_Q8_1 && act_type != EMBER_TYPE_Q8_K)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: quantize_q8: activation type %s",
                           ember_type_name(act_type));
    const int64_t bs = (int64_t)ember_type_block_size(act_type);   /* Q8_0/Q8_1: 32, Q8_K: 256 */
    if (n <= 0 || n % bs != 0 || n_cols <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: quantize_q8: n = %lld (a multiple of %lld), n_cols = %lld",
                           (long long)n, (long long)bs, (long long)n_cols);
    const q8_view v = q8_split(act_type, buf, n, n_cols);
    const int64_t nb = n_cols * (n / bs);
    const unsigned grid = (unsigned)((nb + 7) / 8);
    if (act_type == EMBER_TYPE_Q8_K)
        ember_launch(k_quant_q8_K, grid, 256, 0, cu->stream, x, (int8_t *)v.qs, (float *)v.d, nb);
    else if (act_type == EMBER_TYPE_Q8_1)
        ember_launch(k_quant_q8_32<true>, grid, 256, 0, cu->stream, x, (int8_t *)v.qs, (float *)v.d, (float *)v.s, nb);
    else
        ember_launch(k_quant_q8_32<false>, grid, 256, 0, cu->stream, x, (int8_t *)v.qs, (float *)v.d, (float *)NULL, nb);
    return ember_cuda_launched("quantize_q8");
}

extern "C" ember_status ember_cuda_matmul_q8_multi(ember_cuda *cu, int32_t n_w, const ember_cuda_tensor *const *ws,
                                                   const void *buf, int64_t n_cols, float *const *ys)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(ws);
    EMBER_CUDA_NONNULL(buf);
    EMBER_CUDA_NONNULL(ys);
    if (n_w < 1 || n_w > 3 || n_cols <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: matmul_q8: %d weights (1..3), n_cols = %lld", n_w, (long long)n_cols);
    const ember_cuda_tensor *w = ws[0];
    for (int32_t k = 0; k < n_w; k++) {
        if (!ws[k] || !ws[k]->data || ws[k]->ne0 <= 0 || ws[k]->ne1 <= 0 || !ys[k])
            return ember_error(EMBER_ERR_INVALID_ARG, "cuda: matmul_q8: empty weight or output %d", k);
        if (ws[k]->type != w->type || ws[k]->ne0 != w->ne0 || ws[k]->row_bytes != w->row_bytes)
            return ember_error(EMBER_ERR_INVALID_ARG, "cuda: matmul_q8: weights of one launch must share type and row length");
    }
    const uint32_t at = ember_cuda_q8_act_type(w->type);
    if (at == EMBER_TYPE_F32)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: matmul_q8: no integer kernel for %s", ember_type_name(w->type));
    const int64_t n = w->ne0, bs = (int64_t)ember_type_block_size(at);
    if (n % bs != 0 || n / 32 > INT32_MAX)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: matmul_q8: %s row length %lld", ember_type_name(w->type),
                           (long long)n);
    unsigned ctas[3] = {0, 0, 0}, grid = 0, end[3] = {0, 0, 0};
    for (int32_t k = 0; k < n_w; k++) {
        ctas[k] = (unsigned)((ws[k]->ne1 + kWarpsQ8 - 1) / kWarpsQ8);
        grid += ctas[k];
        end[k] = grid;
    }
    const q8_view a = q8_split(at, buf, n, n_cols);
    for (int64_t c0 = 0; c0 < n_cols; c0 += kMaxColsQ8) {
        const int nc = (int)(n_cols - c0 < kMaxColsQ8 ? n_cols - c0 : kMaxColsQ8);
        q8_view v = a;
        v.qs += c0 * n;
        v.d += c0 * (n / bs);
        if (v.s) v.s += c0 * (n / bs);
        mm_seg ms = {};
        ms.W0 = (const uint8_t *)ws[0]->data;
        ms.y0 = ys[0] + c0 * ws[0]->ne1;
        ms.n0 = ws[0]->ne1;
        ms.end0 = end[0];
        ms.end1 = n_w > 1 ? end[1] : end[0];
        if (n_w > 1) {
            ms.W1 = (const uint8_t *)ws[1]->data;
            ms.y1 = ys[1] + c0 * ws[1]->ne1;
            ms.n1 = ws[1]->ne1;
        }
        if (n_w > 2) {
            ms.W2 = (const uint8_t *)ws[2]->data;
            ms.y2 = ys[2] + c0 * ws[2]->ne1;
            ms.n2 = ws[2]->ne1;
        }
        if (!cu->exact_mm) {
            mmvq_fast_launch(cu->stream, w->type, w->row_bytes, ms, grid, v, n, nc, cu->mmvq_rows, cu->mmvq_smem,
                             cu->mmvq_mr, cu->mmvq_tc);
            continue;
        }
        switch (nc) {
        case 1: launch_nc<1>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        case 2: launch_nc<2>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        case 3: launch_nc<3>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        case 4: launch_nc<4>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        case 5: launch_nc<5>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        case 6: launch_nc<6>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        case 7: launch_nc<7>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        default: launch_nc<8>(cu->stream, w->type, w->row_bytes, ms, grid, v, n); break;
        }
    }
    return ember_cuda_launched("matmul_q8");
}

extern "C" ember_status ember_cuda_matmul_q8(ember_cuda *cu, const ember_cuda_tensor *w, const void *buf,
                                             int64_t n_cols, float *y)
{
    EMBER_CUDA_NONNULL(w);
    EMBER_CUDA_NONNULL(y);
    return ember_cuda_matmul_q8_multi(cu, 1, &w, buf, n_cols, &y);
}

extern "C" void ember_cuda_set_exact_matvec(ember_cuda *cu, bool on)
{
    if (cu) cu->exact_mm = on;
}

extern "C" void ember_cuda_set_mmvq_rows(ember_cuda *cu, int rows_per_warp)
{
    if (cu) cu->mmvq_rows = rows_per_warp < 0 ? 0 : rows_per_warp;
}

extern "C" void ember_cuda_set_mmvq_mr(ember_cuda *cu, int rows_per_warp)
{
    if (cu) cu->mmvq_mr = rows_per_warp < 2 ? 1 : (rows_per_warp > 2 ? 4 : 2);
}

extern "C" void ember_cuda_set_mmvq_tc(ember_cuda *cu, int min_cols)
{
    if (cu) cu->mmvq_tc = min_cols <= 0 ? 0 : (min_cols < 2 ? 2 : min_cols);
}

extern "C" void ember_cuda_set_mmvq_smem(ember_cuda *cu, bool on)
{
    if (cu) cu->mmvq_smem = on;
}
