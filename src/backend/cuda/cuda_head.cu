/*
 * cuda_head.cu — a layer's Q/K/V head preparation in one kernel.
 *
 * Owns: ember_cuda_head_prep, the fused form of what every attention layer
 * does between its Q/K/V projection and attention: per-head RMSNorm
 * (Gemma 3/4, Qwen 3), RoPE, and the F16 store of K and V into the paged
 * cache. Apart, these are up to six launches per layer of a few microseconds
 * each over a few KiB (Gemma 3 270M decode: 5 of ~17 kernels a layer,
 * bench/results/cuda-h200.md); cuda_fuse.c records them as they are
 * called and launches this one kernel in their place.
 * The arithmetic is that of the kernels it replaces (cuda_ops.cu k_rms_norm,
 * cuda_rope_tab.cu k_rope_tab, k_kv_store2), with the norm's reduction over
 * the same number of threads, so fusion changes no bit.
 * Must not: allocate or synchronise (graph capture), or know models.
 */
#include "backend/cuda/cuda_common.cuh"
#include <cuda_fp16.h>

namespace {

/* One CTA per (head of any part, token): blockIdx.x runs over the parts'
 * heads in order, blockIdx.y over tokens; the row goes through shared
 * memory (head_dim floats). Before the programmatic-dependent-launch wait
 * (none of it is written by the previous kernel): the norm weights, the
 * step's position and cell, and the RoPE (cos, sin) of this thread's pairs;
 * after it, one read of the row into registers (thread t holds elements
 * t + k blockDim.x, k < kHeadK: head_dim <= 1024 at ember_norm_threads'
 * sizes needs at most 4), summed in ember_row_inv_rms' order. */
constexpr int kHeadK = 4, kHeadPairs = 2;

__global__ void k_head_prep(ember_cuda_head_args a)
{
    extern __shared__ float row[];
    const int64_t t = blockIdx.y;
    int h = (int)blockIdx.x, p = 0;
    while (p + 1 < a.n_parts && h >= a.part[p].n_head) h -= a.part[p++].n_head;
    const ember_cuda_head_part &P = a.part[p];
    const int D = a.head_dim, T = blockDim.x, tid = threadIdx.x;
    float wn[kHeadK];
#pragma unroll
    for (int k = 0; k < kHeadK; k++) {
        const int i = tid + k * T;
        wn[k] = P.norm && P.norm_w && i < D ? P.norm_w[i] : 1.f;
    }
    const int32_t pos = P.rope ? a.pos[t] : 0;
    const int32_t cell = P.cache ? a.cells[t] : -1;
    const int half = P.n_rot / 2;
    float rc[kHeadPairs] = {1.f, 1.f}, rs[kHeadPairs] = {0.f, 0.f};
    if (P.rope)
#pragma unroll
        for (int k = 0; k < kHeadPairs; k++) {
            const int i = tid + k * T;
            if (i < half)
                ember_rope_tab_cs(pos, i, reinterpret_cast<const float2 *>(P.tab), P.n_pos, P.n_tab, P.theta_scale,
                                  P.freq_scale, P.ff, rc[k], rs[k]);
        }
    ember_pdl_wait();
    float *xr = P.x + (t * P.n_head + h) * (int64_t)D;
    float xv[kHeadK];
#pragma unroll
    for (int k = 0; k < kHeadK; k++) {
        const int i = tid + k * T;
        xv[k] = i < D ? xr[i] : 0.f;
    }
    float inv = 1.0f;
    if (P.norm) { /* ember_row_inv_rms on the registers */
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < kHeadK; k++)
            if (tid + k * T < D) ss += (double)__fmul_rn(xv[k], xv[k]);
        ss = ember_block_sum_d(ss);
        inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / (double)D), P.eps)));
    }
#pragma unroll
    for (int k = 0; k < kHeadK; k++) {
        const int i = tid + k * T;
        if (i < D) row[i] = P.norm ? __fmul_rn(__fmul_rn(xv[k], inv), wn[k]) : xv[k];
    }
    __syncthreads();
    if (P.rope) {
#pragma unroll
        for (int k = 0; k < kHeadPairs; k++) {
            const int i = tid + k * T;
            if (i >= half) continue;
            const int i0 = P.neox ? i : 2 * i;
            const int i1 = P.neox ? i + half : 2 * i + 1;
            const float x0 = row[i0], x1 = row[i1];
            row[i0] = __fmaf_rn(x0, rc[k], -__fmul_rn(x1, rs[k]));
            row[i1] = __fmaf_rn(x0, rs[k], __fmul_rn(x1, rc[k]));
        }
        __syncthreads();
    }
    __half *dst = cell >= 0 ? reinterpret_cast<__half *>(P.cache) + ((int64_t)cell * P.n_head + h) * D : nullptr;
    for (int i = tid; i < D; i += T) {
        const float v = row[i];
        if (P.norm || P.rope) xr[i] = v;
        if (dst) dst[i] = __float2half_rn(v);
    }
}

} /* namespace */

extern "C" ember_status ember_cuda_head_prep(ember_cuda *cu, const ember_cuda_head_args *a)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(a);
    if (a->n_parts < 1 || a->n_parts > 3 || a->n_tokens <= 0 || a->n_tokens > 65535 || a->head_dim <= 0 ||
        a->head_dim > 1024 || a->head_dim % 2)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: head_prep: bad shape (parts %d, n_tokens %d, head_dim %d)",
                           (int)a->n_parts, (int)a->n_tokens, (int)a->head_dim);
    int64_t heads = 0;
    for (int32_t i = 0; i < a->n_parts; i++) {
        const ember_cuda_head_part *P = &a->part[i];
        if (!P->x || P->n_head <= 0)
            return ember_error(EMBER_ERR_INVALID_ARG, "cuda: head_prep: part %d: no tensor or no heads", (int)i);
        if (P->rope && (!a->pos || !P->tab || P->n_rot <= 0 || P->n_rot > a->head_dim || P->n_rot % 2 ||
                        P->n_tab < 0 || P->n_tab > P->n_rot / 2 || P->n_pos < 0))
            return ember_error(EMBER_ERR_INVALID_ARG, "cuda: head_prep: part %d: bad RoPE (n_rot %d, n_tab %d)", (int)i,
                               (int)P->n_rot, (int)P->n_tab);
        if (P->cache && !a->cells)
            return ember_error(EMBER_ERR_INVALID_ARG, "cuda: head_prep: part %d stores without cells", (int)i);
        heads += P->n_head;
    }
    if (heads > 65535) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: head_prep: %lld heads", (long long)heads);
    /* the kernel's registers: kHeadK elements and kHeadPairs RoPE pairs per thread */
    const int th = ember_norm_threads(a->head_dim);
    if ((a->head_dim + th - 1) / th > kHeadK || (a->head_dim / 2 + th - 1) / th > kHeadPairs)
        return ember_error(EMBER_ERR_INTERNAL, "cuda: head_prep: head_dim %d over %d threads", (int)a->head_dim, th);
    ember_launch(k_head_prep, dim3((unsigned)heads, (unsigned)a->n_tokens), th,
                 (size_t)a->head_dim * sizeof(float), cu->stream, *a);
    return ember_cuda_launched("head_prep");
}
