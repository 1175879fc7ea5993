/*
 * cuda_attn.cu — flash-attention over a paged F16 KV cache (decode and, for
 * now, prefill too), with GQA and sliding windows.
 *
 * Owns: one CTA per (key split, KV head, query row); the G = n_head /
 * n_head_kv query heads sharing a KV head are processed together so each K/V
 * row is read once. Each warp walks every 4th key of the split with an online
 * softmax (Milakov & Gimelshein 2018; Dao et al. 2022, FlashAttention); the
 * warps, then the splits ("flash decoding", split-K), are merged by
 * rescaling with their running maxima; the last CTA of a (token, KV head)
 * to finish merges the splits, so one launch does it all. q is rounded to f16 before the dot
 * products, as ggml's F16-cache attention does (and our CPU backend).
 * Must not: allocate or synchronise during a step (the partial results live
 * in the context's scratch and the split counters in its counter array,
 * both sized on a first call), or know KV policy.
 * Head sizes: tuned kernels for 64, 128, 256 and 512 (G <= 4 at 512); any
 * other size in [1, 1024], and any G above kMaxG, run a generic kernel
 * (k_attn_any: one CTA per head and query, no key splits).
 */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_q8_act.cuh"
#include "backend/expf_glibc.h"
#include <cuda_fp16.h>

namespace {

constexpr int kWarps = 8;
constexpr int kMaxG = 8;      /* query heads per KV head supported */
constexpr int kMaxSplits = 256;

struct attn_args {
    int n_head, n_head_kv, G;
    float scale, softcap;
    int n_swa, page_size, max_pages;
    int n_splits, chunk; /* grid splits; keys per split for the longest context (span / n_splits) */
    int chunk_min;       /* keys per split at least (EMBER_CUDA_ATTN_MIN_KEYS; <= chunk) */
};

/* The output's Q8 blocks, written beside out when qm >= 0 (the quantized
 * input of the next matmul; cuda_q8.cu's buffer for [n_tokens, n_head *
 * head_dim]): qm 0 Q8_0, 1 Q8_1, 2 Q8_K; G * D a multiple of the block. */
struct attn_q8 {
    int8_t *qs;
    float *d, *s;
    int qm;
};

/* Quantize the n values of y (shared memory) that start at element e0 of
 * the Q8 buffer (e0 and n whole blocks), one block per warp in turn
 * (cuda_q8_act.cuh's quantizers). All threads call it. */
__device__ __forceinline__ void quant_span(const attn_q8 &o, const float *y, int64_t e0, int n)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (o.qm == 2) {
        for (int b = warp; b < n / 256; b += nw) {
            float v[8];
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = y[b * 256 + 8 * lane + i];
            ember_q8_blockK(v, o.qs + e0 + b * 256, o.d + e0 / 256 + b);
        }
        return;
    }
    for (int b = warp; b < n / 32; b += nw) {
        const float v = y[b * 32 + lane];
        const int64_t g = e0 / 32 + b;
        if (o.qm == 1)
            ember_q8_block32<true>(v, o.qs + e0 + b * 32, o.d + g, o.s + g);
        else
            ember_q8_block32<false>(v, o.qs + e0 + b * 32, o.d + g, nullptr);
    }
}

template <int E>
__device__ __forceinline__ void load_half_row(const __half *p, float *v)
{
    if constexpr (E == 8) {
        const uint4 r = *reinterpret_cast<const uint4 *>(p);
        const uint32_t a[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&a[i]));
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    } else if constexpr (E == 4) {
        const uint2 r = *reinterpret_cast<const uint2 *>(p);
        const uint32_t a[2] = {r.x, r.y};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&a[i]));
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    } else if constexpr (E == 16) {
        load_half_row<8>(p, v);
        load_half_row<8>(p + 8, v + 8);
    } else {
        static_assert(E == 2, "head_dim 64, 128, 256 or 512");
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(p));
        v[0] = f.x;
        v[1] = f.y;
    }
}

template <int D, int G>
__global__ void __launch_bounds__(kWarps * 32)
k_attn(attn_args a, const float *__restrict__ q, const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
       const int32_t *__restrict__ block_table, const __half *__restrict__ kc, const __half *__restrict__ vc,
       float *__restrict__ out, float *__restrict__ part_o, float2 *__restrict__ part_ml,
       unsigned *__restrict__ done, attn_q8 oq)
{
    constexpr int E = D / 32;
    constexpr int U = D >= 512 ? 2 : 4;
    const int split = blockIdx.x, hkv = blockIdx.y;
    const int64_t t = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    /* pos, seq and the block table are the step's arrays (uploaded before
     * the step's first kernel, never written by a kernel): read before the
     * programmatic-dependent-launch wait, with the first keys' cells, so
     * that after it only q and K/V are loaded. */
    const int p = pos[t];
    const int s = seq[t];
    const int lo = a.n_swa > 0 ? max(0, p - a.n_swa + 1) : 0;
    /* this query's split length: min_keys, or longer where its keys
     * outnumber the grid's splits (at most a.chunk, the length the grid
     * was sized for): a graph sized for a long context still splits a
     * short one into min_keys-key pieces */
    const int n_keys = p - lo + 1;
    const int chunk = max(a.chunk_min, (n_keys + a.n_splits - 1) / a.n_splits);
    const int k_begin = lo + split * chunk;
    const int k_end = min(p + 1, k_begin + chunk);
    /* splits past this query's keys leave at once and take no part in the
     * merge: the grid is sized for the longest context (a graph keeps it),
     * the work for the keys there are (n_eff splits; one writes the output
     * itself). Every CTA of (t, hkv) reads the same pos, so they agree.
     * They write nothing, so they may leave before the wait (the others
     * wait, so the grid still ends after the previous kernel). */
    const int n_eff = a.n_splits == 1 ? 1 : min(a.n_splits, (n_keys + chunk - 1) / chunk);
    if (split >= n_eff) return;
    const int32_t *bt = block_table + (int64_t)s * a.max_pages;
    /* Keys j = k_begin + warp + kWarps*(U*it + u): U keys per iteration,
     * all K/V loads issued before any math so their latencies overlap
     * (fewer at D = 512, where q and the accumulators already hold 32 G
     * registers per lane). The cells of the next iteration's keys are
     * loaded one iteration ahead (the first before the wait). */
    int64_t cell[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int j = k_begin + warp + u * kWarps;
        cell[u] = j < k_end ? (int64_t)bt[j / a.page_size] * a.page_size + j % a.page_size : 0;
    }
    ember_pdl_wait();

    float qr[G][E], acc[G][E], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            acc[g][e] = 0.f;
            qr[g][e] = 0.f;
        }
        {
            const float *qh = q + (t * a.n_head + (int64_t)hkv * G + g) * D + lane * E;
#pragma unroll
            for (int e = 0; e < E; e++) qr[g][e] = __half2float(__float2half_rn(qh[e])) * a.scale;
        }
    }

    for (int j0 = k_begin + warp; j0 < k_end; j0 += kWarps * U) {
        float kr[U][E], vr[U][E];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = j0 + u * kWarps;
            ok[u] = j < k_end;
            if (ok[u]) {
                const int64_t off = (cell[u] * a.n_head_kv + hkv) * D + lane * E;
                load_half_row<E>(kc + off, kr[u]);
                load_half_row<E>(vc + off, vr[u]);
            } else {
#pragma unroll
                for (int e = 0; e < E; e++) kr[u][e] = vr[u][e] = 0.f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = j0 + kWarps * U + u * kWarps;
            cell[u] = j < k_end ? (int64_t)bt[j / a.page_size] * a.page_size + j % a.page_size : 0;
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float d[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                d[u] = 0.f;
#pragma unroll
                for (int e = 0; e < E; e++) d[u] = fmaf(qr[g][e], kr[u][e], d[u]);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int u = 0; u < U; u++) d[u] += __shfl_xor_sync(0xffffffffu, d[u], o);
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (a.softcap > 0.f) d[u] = a.softcap * tanhf(d[u] / a.softcap);
                if (ok[u]) mx = fmaxf(mx, d[u]);
            }
            const float c = expf(m[g] - mx); /* 0 on the first keys (m = -inf) */
            float pr[U], psum = 0.f;
#pragma unroll
            for (int u = 0; u < U; u++) {
                pr[u] = ok[u] ? expf(d[u] - mx) : 0.f;
                psum += pr[u];
            }
            l[g] = l[g] * c + psum;
#pragma unroll
            for (int e = 0; e < E; e++) {
                float o = acc[g][e] * c;
#pragma unroll
                for (int u = 0; u < U; u++) o = fmaf(pr[u], vr[u][e], o);
                acc[g][e] = o;
            }
            m[g] = mx;
        }
    }

    /* merge the warps: dynamic shared memory holds [kWarps][G][D] partial
     * outputs, then [kWarps][G] maxima and sums, then (oq) the [G][D]
     * output to quantize */
    extern __shared__ float smem[];
    float *sm_o = smem;
    float *sm_m = smem + kWarps * G * D, *sm_l = sm_m + kWarps * G;
    float *sm_y = sm_l + kWarps * G;
    const int64_t e0 = (t * a.n_head + (int64_t)hkv * G) * D; /* this CTA's first output element */
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int e = 0; e < E; e++) sm_o[(warp * G + g) * D + lane * E + e] = acc[g][e];
        if (lane == 0) {
            sm_m[warp * G + g] = m[g];
            sm_l[warp * G + g] = l[g];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        const int g = i / D, dd = i % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; w++) M = fmaxf(M, sm_m[w * G + g]);
        float L = 0.f, O = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < kWarps; w++) {
                const float mw = sm_m[w * G + g];
                const float f = mw == -INFINITY ? 0.f : expf(mw - M);
                L += sm_l[w * G + g] * f;
                O += sm_o[(w * G + g) * D + dd] * f;
            }
        }
        const int64_t h = (int64_t)hkv * G + g;
        if (n_eff == 1) {
            const float y = L > 0.f ? O / L : 0.f;
            out[(t * a.n_head + h) * D + dd] = y;
            if (oq.qm >= 0) sm_y[i] = y;
        } else {
            const int64_t ps = (t * a.n_head + h) * a.n_splits + split;
            part_o[ps * D + dd] = O;
            if (dd == 0) part_ml[ps] = make_float2(M, L);
        }
    }
    if (n_eff == 1) {
        if (oq.qm >= 0) {
            __syncthreads();
            quant_span(oq, sm_y, e0, G * D);
        }
        return;
    }

    /* The last CTA of this (token, KV head) to finish merges the splits
     * (the threadFenceReduction pattern of the CUDA samples) and re-arms the
     * counter for the next call, so a captured graph can replay. */
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *cnt = done + t * a.n_head_kv + hkv;
        last = atomicAdd(cnt, 1u) == (unsigned)n_eff - 1;
        if (last) *cnt = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    /* split weights exp(m_i - M) per head, in shared memory (reusing sm_o);
     * warp g handles head g, lanes across the splits. Loads bypass L1
     * (__ldcg): the partials were written by other SMs. */
    float *wsp = sm_o; /* [G][n_splits] */
    __shared__ float sm_L[G];
    for (int g = warp; g < G; g += kWarps) {
        const float2 *ml = part_ml + (t * a.n_head + (int64_t)hkv * G + g) * a.n_splits;
        float M = -INFINITY;
        for (int i = lane; i < n_eff; i += 32) M = fmaxf(M, __ldcg(&ml[i]).x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float L = 0.f;
        for (int i = lane; i < n_eff; i += 32) {
            const float2 v = __ldcg(&ml[i]);
            const float f = (M == -INFINITY || v.x == -INFINITY) ? 0.f : expf(v.x - M);
            wsp[g * a.n_splits + i] = f;
            L += v.y * f;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
        if (lane == 0) sm_L[g] = L;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        const int g = i / D, dd = i % D;
        const int64_t th = t * a.n_head + (int64_t)hkv * G + g;
        const float *po = part_o + th * a.n_splits * D + dd;
        const float *wg = wsp + g * a.n_splits;
        float O = 0.f;
#pragma unroll 8
        for (int k = 0; k < n_eff; k++) O = fmaf(__ldcg(po + (int64_t)k * D), wg[k], O);
        const float y = sm_L[g] > 0.f ? O / sm_L[g] : 0.f;
        out[th * D + dd] = y;
        if (oq.qm >= 0) sm_y[i] = y;
    }
    if (oq.qm >= 0) {
        __syncthreads();
        quant_span(oq, sm_y, e0, G * D);
    }
}

template <int D, int G>
ember_status launch(ember_cuda *cu, const attn_args &a, int64_t n_tokens, const float *q, const int32_t *pos,
                    const int32_t *seq, const int32_t *bt, const __half *kc, const __half *vc, float *out,
                    const attn_q8 &oq)
{
    float *part_o = NULL;
    float2 *part_ml = NULL;
    unsigned *done = NULL;
    if (a.n_splits > 1) {
        const size_t n_part = (size_t)n_tokens * a.n_head * a.n_splits;
        void *scr = NULL;
        ember_status s = ember_cuda_scratch(cu, n_part * (D * sizeof(float) + sizeof(float2)), &scr);
        if (s != EMBER_OK) return s;
        part_ml = (float2 *)scr;
        part_o = (float *)((char *)scr + n_part * sizeof(float2));
        s = ember_cuda_counters(cu, (size_t)n_tokens * a.n_head_kv, &done);
        if (s != EMBER_OK) return s;
    }
    /* warp partials; the last CTA's split weights reuse that space */
    size_t sm_o = (size_t)kWarps * G * D;
    if ((size_t)G * kMaxSplits > sm_o) sm_o = (size_t)G * kMaxSplits;
    const size_t smem = (sm_o + 2 * (size_t)kWarps * G + (size_t)G * D) * sizeof(float); /* + the output to quantize */
    static bool attr_set = false; /* once per instantiation */
    if (!attr_set) {
        ember_status s = ember_cuda_check(
            cudaFuncSetAttribute(k_attn<D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
            "attn (shared memory opt-in)");
        if (s != EMBER_OK) return s;
        attr_set = true;
    }
    dim3 grid((unsigned)a.n_splits, (unsigned)a.n_head_kv, (unsigned)n_tokens);
    ember_launch(k_attn<D, G>, grid, kWarps * 32, smem, cu->stream, a, q, pos, seq, bt, kc, vc, out, part_o, part_ml, done, oq);
    return ember_cuda_launched("attn");
}

/* ---- CPU-order attention (EMBER_CUDA_EXACT) -------------------------
 * The CPU backend's flash attention for calls of < 64 queries over an F16
 * cache (cpu.c attn_run, ggml's one-row-at-a-time kernel), step for step:
 *  - q rounded to f16 (to_f16_row);
 *  - per key, in key order, s = dot_f16(q, k) * scale with cpu.h's
 *    ember_cpu_dot_f16 order: 64 partial sums p[e] (element e mod 64, fused
 *    multiply-adds in index order), t[l] = (p[l] + p[l+32]) + (p[l+16] +
 *    p[l+48]) for l < 16, u[l] = t[l+8] + t[l], v[l] = u[l+4] + u[l], then
 *    (v0 + v2) + (v1 + v3); head sizes are multiples of 64 so there is no
 *    double-precision tail;
 *  - online softmax in f32 (if s > M: ms = expf(M_old - s), vkq rescaled by
 *    scale_f16; else vs = expf(s - M)); vkq updated by mad_f16; S = fmaf(S,
 *    ms, vs);
 *  - mad_f16 / scale_f16 (cpu.h): for dims below D & ~127 the factor is
 *    rounded to f16 first and the f16 result is rounded once (the product of
 *    two f16 is exact in f32; the sum's single rounding by TwoSum + round to
 *    odd, as ember_cpu_mad_f16); above it (D = 64) f16(fmaf(v, vs, vkq)) and
 *    f16(vkq * ms) with the f32 factors;
 *  - out = f32(vkq) * (1 / S), both correctly rounded.
 * One CTA of D threads per (head, query): thread d owns output dim d; the
 * warps score the keys of a chunk, one key per warp. Every float operation
 * is an explicit _rn intrinsic so nvcc contracts nothing. The host emulation
 * in tests/unit/cuda/test_cuda_attn_emul.c mirrors this kernel line by line
 * and is compared bit for bit with the CPU op without a GPU. expf is
 * glibc's algorithm (expf_cpu below), so the exponentials are the CPU's. */
constexpr int kExactChunk = 64;

__device__ __forceinline__ float f16r(float x) { return __half2float(__float2half_rn(x)); }
/* expf as glibc (>= 2.27, x86_64, its FMA and non-FMA builds alike) computes
 * it: the table-driven method of ARM's optimized-routines (Szabolcs Nagy
 * 2017), in double: x/ln2 scaled by N = 32, k its nearest integer (by the
 * 1.5 * 2^52 shift), r = x*N/ln2 - k, 2^(k/N) from a 32-entry table of
 * 2^(i/32) (exponent bits folded, tab[i] = bits(2^(i/32)) - (i << 47);
 * computed here by exp2l and rounded), a degree-3 polynomial in r, one
 * rounding to float at the end. Arguments here are <= 0: -inf and those
 * below -0x1.9fe368p6 give 0 as glibc's special cases do. The host copy in
 * tests/unit/backend/test_attn_exact_emul.c is checked against the C
 * library's expf over a sample of every float in [-104, 0]. */
__device__ const unsigned long long kExpTab[32] = EMBER_EXPF_TAB_INIT;

__device__ __forceinline__ float expf_cpu(float x)
{
    if (x != x) return __fadd_rn(x, x);
    if (x < EMBER_EXPF_MIN) return 0.f;   /* -inf included */
    const double kInvLn2N = EMBER_EXPF_INV_LN2_N, kShift = EMBER_EXPF_SHIFT;
    const double kC0 = EMBER_EXPF_C0, kC1 = EMBER_EXPF_C1, kC2 = EMBER_EXPF_C2;
    const double z = __dmul_rn(kInvLn2N, (double)x);
    double kd = __dadd_rn(z, kShift);
    const unsigned long long ki = (unsigned long long)__double_as_longlong(kd);
    kd = __dsub_rn(kd, kShift);
    const double r = __dsub_rn(z, kd);
    const double s = __longlong_as_double((long long)(kExpTab[ki % 32] + (ki << 47)));
    const double p = __fma_rn(kC0, r, kC1), r2 = __dmul_rn(r, r);
    const double y = __fma_rn(p, r2, __fma_rn(kC2, r, 1.0));
    return __double2float_rn(__dmul_rn(y, s));
}

/* f16(y + p) rounded once (ember_cpu_mad_f16's f16_sum_exact) */
__device__ __forceinline__ float f16_sum_exact(float y, float p)
{
    const float s = __fadd_rn(y, p), bb = __fsub_rn(s, y);
    const float err = __fadd_rn(__fsub_rn(y, __fsub_rn(s, bb)), __fsub_rn(p, bb));
    if (err == 0.f) return f16r(s);
    uint32_t u = __float_as_uint(s);
    if ((u >> 31) != (signbit(err) ? 1u : 0u)) u -= 1;   /* s was rounded away from zero */
    u |= 1;
    return f16r(__uint_as_float(u));
}

template <int D>
__global__ void __launch_bounds__(D)
k_attn_exact(const float *__restrict__ q, const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
             const int32_t *__restrict__ block_table, const __half *__restrict__ kc, const __half *__restrict__ vc,
             float *__restrict__ out, int n_head, int n_head_kv, float scale, int n_swa, int page_size,
             int max_pages)
{
    static_assert(D % 64 == 0, "CPU-order dot: head size a multiple of 64");
    constexpr int kNp = D & ~127;   /* EMBER_GGML_F16_STEP */
    ember_pdl_wait();
    __shared__ float qs[D];
    __shared__ float sc[kExactChunk];
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int g = h / (n_head / n_head_kv);
    const int p = pos[t];
    const int lo = n_swa > 0 ? max(0, p - n_swa + 1) : 0;
    const int32_t *bt = block_table + (int64_t)seq[t] * max_pages;
    const int d = threadIdx.x, warp = d >> 5, lane = d & 31;
    qs[d] = f16r(q[(t * n_head + h) * D + d]);
    __syncthreads();
    float vk = 0.f, M = -INFINITY, S = 0.f;
    for (int j0 = lo; j0 <= p; j0 += kExactChunk) {
        const int nk = min(kExactChunk, p + 1 - j0);
        /* scores: one key per warp; lane l holds p[l] and p[l + 32] */
        for (int kk = warp; kk < nk; kk += D / 32) {
            const int j = j0 + kk;
            const int64_t cell = (int64_t)bt[j / page_size] * page_size + j % page_size;
            const __half *kr = kc + (cell * n_head_kv + g) * D;
            float p0 = 0.f, p1 = 0.f;
            for (int i = 0; i < D; i += 64) {
                p0 = __fmaf_rn(qs[i + lane], __half2float(kr[i + lane]), p0);
                p1 = __fmaf_rn(qs[i + lane + 32], __half2float(kr[i + lane + 32]), p1);
            }
            const float a = __fadd_rn(p0, p1);                                  /* p[l] + p[l+32] */
            const float tl = __fadd_rn(a, __shfl_down_sync(0xffffffffu, a, 16)); /* t[l], l < 16 */
            const float ul = __fadd_rn(__shfl_down_sync(0xffffffffu, tl, 8), tl); /* u[l], l < 8 */
            const float vl = __fadd_rn(__shfl_down_sync(0xffffffffu, ul, 4), ul); /* v[l], l < 4 */
            const float xl = __fadd_rn(vl, __shfl_down_sync(0xffffffffu, vl, 2)); /* v0+v2, v1+v3 */
            const float r = __fadd_rn(xl, __shfl_down_sync(0xffffffffu, xl, 1));
            if (lane == 0) sc[kk] = __fmul_rn(r, scale);
        }
        __syncthreads();
        for (int kk = 0; kk < nk; kk++) {
            const int j = j0 + kk;
            const int64_t cell = (int64_t)bt[j / page_size] * page_size + j % page_size;
            const float v = __half2float(vc[(cell * n_head_kv + g) * D + d]);
            const float s = sc[kk];
            float ms = 1.f, vs = 1.f;
            if (s > M) {
                const float m_old = M;
                M = s;
                ms = expf_cpu(__fsub_rn(m_old, M));
                vk = f16r(__fmul_rn(vk, d < kNp ? f16r(ms) : ms));   /* scale_f16 */
            } else {
                vs = expf_cpu(__fsub_rn(s, M));
            }
            vk = d < kNp ? f16_sum_exact(vk, __fmul_rn(v, f16r(vs))) : f16r(__fmaf_rn(v, vs, vk));   /* mad_f16 */
            S = __fmaf_rn(S, ms, vs);
        }
        __syncthreads();
    }
    const float inv = S == 0.f ? 0.f : __fdiv_rn(1.f, S);
    out[(t * n_head + h) * D + d] = __fmul_rn(vk, inv);
}

/* The CPU backend's attention for calls of >= 64 queries over an F16 cache
 * (cpu.c attn_run_grouped, ggml's tiled all-f32 kernel), step for step:
 *  - q in f32 (not rounded); per key s = dot_f32_f16(q, k) * scale in the
 *    order of ember_cpu_dot_f32_f16_avx2: 16 partial sums P[l] (element l
 *    mod 16, fused multiply-adds in index order), w[k] = P[k] + P[k+8],
 *    x[k] = w[k] + w[k+4], then (x0 + x2) + (x1 + x3); head sizes are
 *    multiples of 16 so there is no scalar tail;
 *  - mx = the largest s; then in key order e_j = expf(s_j - mx), sum += e_j
 *    (f32, sequential) and acc[d] = fmaf(e_j, v_j[d], acc[d]) (axpy_f16);
 *  - out = acc * (1 / sum).
 * Two passes over the keys (the second recomputes the scores: same bits).
 * One CTA of D threads per (head, query), thread d owns dim d. */
template <int D>
__global__ void __launch_bounds__(D)
k_attn_exact_tiled(const float *__restrict__ q, const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                   const int32_t *__restrict__ block_table, const __half *__restrict__ kc,
                   const __half *__restrict__ vc, float *__restrict__ out, int n_head, int n_head_kv, float scale,
                   int n_swa, int page_size, int max_pages)
{
    static_assert(D % 64 == 0 && D >= kExactChunk, "one thread per key of a chunk");
    ember_pdl_wait();
    __shared__ float qs[D];
    __shared__ float sc[kExactChunk];
    __shared__ float wmax[D / 32];
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int g = h / (n_head / n_head_kv);
    const int p = pos[t];
    const int lo = n_swa > 0 ? max(0, p - n_swa + 1) : 0;
    const int32_t *bt = block_table + (int64_t)seq[t] * max_pages;
    const int d = threadIdx.x, warp = d >> 5, lane = d & 31;
    qs[d] = q[(t * n_head + h) * D + d];
    __syncthreads();
    /* one key per warp; lane l < 16 holds P[l] */
    auto score = [&](int j) -> float {
        const int64_t cell = (int64_t)bt[j / page_size] * page_size + j % page_size;
        const __half *kr = kc + (cell * n_head_kv + g) * D;
        float part = 0.f;
        if (lane < 16)
            for (int i = 0; i < D; i += 16) part = __fmaf_rn(qs[i + lane], __half2float(kr[i + lane]), part);
        const float w = __fadd_rn(part, __shfl_down_sync(0xffffffffu, part, 8));   /* s0 + s1 */
        const float x = __fadd_rn(w, __shfl_down_sync(0xffffffffu, w, 4));         /* lo + hi halves */
        const float y = __fadd_rn(x, __shfl_down_sync(0xffffffffu, x, 2));         /* movehl */
        const float r = __fadd_rn(y, __shfl_down_sync(0xffffffffu, y, 1));         /* movehdup + add_ss */
        return __fmul_rn(r, scale);
    };
    float mx = -INFINITY;
    for (int j = lo + warp; j <= p; j += D / 32) {
        const float s = score(j);
        if (s > mx) mx = s;
    }
    if (lane == 0) wmax[warp] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < D / 32; w++)
        if (wmax[w] > mx) mx = wmax[w];
    float acc = 0.f, sum = 0.f;
    for (int j0 = lo; j0 <= p; j0 += kExactChunk) {
        const int nk = min(kExactChunk, p + 1 - j0);
        for (int kk = warp; kk < nk; kk += D / 32) {
            const float s = score(j0 + kk);
            if (lane == 0) sc[kk] = s;
        }
        __syncthreads();
        if (d < nk) sc[d] = expf_cpu(__fsub_rn(sc[d], mx));
        __syncthreads();
        for (int kk = 0; kk < nk; kk++) {
            const int j = j0 + kk;
            const int64_t cell = (int64_t)bt[j / page_size] * page_size + j % page_size;
            const float e = sc[kk];
            sum = __fadd_rn(sum, e);
            acc = __fmaf_rn(e, __half2float(vc[(cell * n_head_kv + g) * D + d]), acc);
        }
        __syncthreads();
    }
    out[(t * n_head + h) * D + d] = __fmul_rn(acc, __fdiv_rn(1.f, sum));
}

/* ---- any head size (the generic path) -------------------------------
 * For head sizes without a tuned kernel (the tiny test models' 16 and 32,
 * or 80, 96, ...; any D in [1, 1024]) and for more than kMaxG query heads per
 * KV head: one CTA of round_up(D, 32) threads per (head, query row); thread
 * d owns output dim d. Keys go in chunks of kAnyChunk: each warp scores
 * keys (lanes over the dims, q rounded to f16 as above, in shared memory),
 * then every thread rescales its accumulator once per chunk by the new
 * running maximum (online softmax) and adds p_j v_j[d] in key order. No key
 * splits: long contexts are slow here but exact to F32 rounding. */
constexpr int kAnyChunk = 64;
constexpr int kAnyMaxD = 1024;

__global__ void __launch_bounds__(kAnyMaxD)
k_attn_any(attn_args a, int D, const float *__restrict__ q, const int32_t *__restrict__ pos,
           const int32_t *__restrict__ seq, const int32_t *__restrict__ block_table, const __half *__restrict__ kc,
           const __half *__restrict__ vc, float *__restrict__ out)
{
    ember_pdl_wait();
    extern __shared__ float any_sm[];
    float *qs = any_sm;          /* [D] */
    float *sc = any_sm + D;      /* [kAnyChunk] */
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int hkv = h / a.G;
    const int p = pos[t];
    const int lo = a.n_swa > 0 ? max(0, p - a.n_swa + 1) : 0;
    const int32_t *bt = block_table + (int64_t)seq[t] * a.max_pages;
    const int d = threadIdx.x, warp = d >> 5, lane = d & 31, n_warps = blockDim.x >> 5;
    for (int i = d; i < D; i += blockDim.x)
        qs[i] = __half2float(__float2half_rn(q[(t * a.n_head + h) * D + i])) * a.scale;
    __syncthreads();
    float acc = 0.f, M = -INFINITY, L = 0.f;
    for (int j0 = lo; j0 <= p; j0 += kAnyChunk) {
        const int nk = min(kAnyChunk, p + 1 - j0);
        for (int kk = warp; kk < nk; kk += n_warps) {
            const int j = j0 + kk;
            const int64_t cell = (int64_t)bt[j / a.page_size] * a.page_size + j % a.page_size;
            const __half *kr = kc + (cell * a.n_head_kv + hkv) * D;
            float s = 0.f;
            for (int i = lane; i < D; i += 32) s = fmaf(qs[i], __half2float(kr[i]), s);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (a.softcap > 0.f) s = a.softcap * tanhf(s / a.softcap);
            if (lane == 0) sc[kk] = s;
        }
        __syncthreads();
        float mx = M;
        for (int kk = 0; kk < nk; kk++) mx = fmaxf(mx, sc[kk]);
        const float c = expf(M - mx); /* 0 on the first chunk (M = -inf) */
        acc *= c;
        L *= c;
        for (int kk = 0; kk < nk; kk++) {
            const float pr = expf(sc[kk] - mx);
            L += pr;
            if (d < D) {
                const int j = j0 + kk;
                const int64_t cell = (int64_t)bt[j / a.page_size] * a.page_size + j % a.page_size;
                acc = fmaf(pr, __half2float(vc[(cell * a.n_head_kv + hkv) * D + d]), acc);
            }
        }
        M = mx;
        __syncthreads(); /* sc is rewritten by the next chunk */
    }
    if (d < D) out[(t * a.n_head + h) * D + d] = L > 0.f ? acc / L : 0.f;
}

ember_status launch_any(ember_cuda *cu, const attn_args &a, int D, int64_t n_tokens, const float *q,
                        const int32_t *pos, const int32_t *seq, const int32_t *bt, const __half *kc,
                        const __half *vc, float *out)
{
    const int threads = (D + 31) / 32 * 32;
    const size_t smem = ((size_t)D + kAnyChunk) * sizeof(float);
    const dim3 grid((unsigned)a.n_head, (unsigned)n_tokens);
    ember_launch(k_attn_any, grid, threads, smem, cu->stream, a, D, q, pos, seq, bt, kc, vc, out);
    return ember_cuda_launched("attn (any head size)");
}

/* G (query heads per KV head) is a template argument so no lane works on
 * absent heads. */
template <int D>
ember_status launch_g(ember_cuda *cu, const attn_args &a, int64_t n_tokens, const float *q, const int32_t *pos,
                      const int32_t *seq, const int32_t *bt, const __half *kc, const __half *vc, float *out,
                      const attn_q8 &oq)
{
    switch (a.G) {
    case 1: return launch<D, 1>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 2: return launch<D, 2>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 3: return launch<D, 3>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 4: return launch<D, 4>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 5: return launch<D, 5>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 6: return launch<D, 6>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 7: return launch<D, 7>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    default: return launch<D, 8>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    }
}

/* D = 512 (Gemma 4's full-attention layers): q and the accumulators take 32 G
 * registers per lane, so the tuned kernel stops at G = 4; more heads per KV
 * head take the generic kernel. */
ember_status launch_512(ember_cuda *cu, const attn_args &a, int64_t n_tokens, const float *q, const int32_t *pos,
                        const int32_t *seq, const int32_t *bt, const __half *kc, const __half *vc, float *out,
                        const attn_q8 &oq)
{
    switch (a.G) {
    case 1: return launch<512, 1>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 2: return launch<512, 2>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 3: return launch<512, 3>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    case 4: return launch<512, 4>(cu, a, n_tokens, q, pos, seq, bt, kc, vc, out, oq);
    default: return launch_any(cu, a, 512, n_tokens, q, pos, seq, bt, kc, vc, out);
    }
}

} /* namespace */

extern "C" ember_status ember_cuda_attn(ember_cuda *cu, const ember_cuda_attn_params *p, const float *q,
                                        int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                                        const int32_t *block_table, const uint16_t *k_cache,
                                        const uint16_t *v_cache, float *out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(p);
    EMBER_CUDA_NONNULL(q);
    EMBER_CUDA_NONNULL(pos);
    EMBER_CUDA_NONNULL(seq);
    EMBER_CUDA_NONNULL(block_table);
    EMBER_CUDA_NONNULL(k_cache);
    EMBER_CUDA_NONNULL(v_cache);
    EMBER_CUDA_NONNULL(out);
    if (n_tokens <= 0 || n_tokens > 65535)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: attn: n_tokens = %lld (1..65535)", (long long)n_tokens);
    if (p->n_head <= 0 || p->n_head_kv <= 0 || p->n_head % p->n_head_kv != 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: attn: n_head %d is not a multiple of n_head_kv %d",
                           p->n_head, p->n_head_kv);
    if (p->head_dim < 1 || p->head_dim > kAnyMaxD)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: attn: head_dim %d (1..%d supported)", p->head_dim,
                           kAnyMaxD);
    if (p->page_size <= 0 || p->max_pages <= 0 || p->max_ctx <= 0 ||
        (int64_t)p->page_size * p->max_pages < p->max_ctx)
        return ember_error(EMBER_ERR_INVALID_ARG,
                           "cuda: attn: page_size %d x max_pages %d cannot hold max_ctx %d positions",
                           p->page_size, p->max_pages, p->max_ctx);
    if (p->n_swa < 0 || !(p->scale > 0.f) || p->softcap < 0.f)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: attn: n_swa %d, scale %g, softcap %g", p->n_swa,
                           (double)p->scale, (double)p->softcap);
    if (p->q8_buf && p->q8_type != EMBER_TYPE_Q8_0 && p->q8_type != EMBER_TYPE_Q8_1 && p->q8_type != EMBER_TYPE_Q8_K)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: attn: quantized output as %s", ember_type_name(p->q8_type));
    if (p->q8_buf && (int64_t)p->n_head * p->head_dim % (int64_t)ember_type_block_size(p->q8_type) != 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: attn: n_head %d x head_dim %d is not whole %s blocks",
                           p->n_head, p->head_dim, ember_type_name(p->q8_type));

    attn_args a;
    a.n_head = p->n_head;
    a.n_head_kv = p->n_head_kv;
    a.G = p->n_head / p->n_head_kv;
    a.scale = p->scale;
    a.softcap = p->softcap;
    a.n_swa = p->n_swa;
    a.page_size = p->page_size;
    a.max_pages = p->max_pages;
    /* Keys one query may see, at most; split them so that the grid has
     * ~1024+ CTAs when the batch alone does not (decode of one sequence). */
    const int span = p->n_swa > 0 && p->n_swa < p->max_ctx ? p->n_swa : p->max_ctx;
    const int64_t rows = n_tokens * p->n_head_kv;
    int64_t want = rows >= 1024 ? 1 : (1024 + rows - 1) / rows;
    const int min_keys = cu->attn_min_keys > 0 ? cu->attn_min_keys : 32;
    int64_t by_len = (span + min_keys - 1) / min_keys; /* no split shorter than min_keys keys (default 32) */
    int64_t ns = want < by_len ? want : by_len;
    if (ns > kMaxSplits) ns = kMaxSplits;
    if (ns < 1) ns = 1;
    a.chunk = (int)((span + ns - 1) / ns);
    a.n_splits = (int)((span + a.chunk - 1) / a.chunk);
    a.chunk_min = min_keys < a.chunk ? min_keys : a.chunk;

    const __half *kc = reinterpret_cast<const __half *>(k_cache);
    const __half *vc = reinterpret_cast<const __half *>(v_cache);
    ember_status st;
    if (p->exact) {
        if (p->softcap > 0.f)
            return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: attn: CPU-order attention has no softcap");
        const dim3 grid((unsigned)p->n_head, (unsigned)n_tokens);
#define EXACT_CASE(DD)                                                                                          \
    case DD:                                                                                                    \
        if (p->exact_tiled)                                                                                     \
            ember_launch(k_attn_exact_tiled<DD>, grid, DD, 0, cu->stream, q, pos, seq, block_table, kc, vc, out, \
                         p->n_head, p->n_head_kv, p->scale, p->n_swa, p->page_size, p->max_pages);              \
        else                                                                                                    \
            ember_launch(k_attn_exact<DD>, grid, DD, 0, cu->stream, q, pos, seq, block_table, kc, vc, out,       \
                         p->n_head, p->n_head_kv, p->scale, p->n_swa, p->page_size, p->max_pages);              \
        break;
        switch (p->head_dim) {
            EXACT_CASE(64)
            EXACT_CASE(128)
            EXACT_CASE(256)
            EXACT_CASE(512)
        default: /* no CPU-order kernel for this size: the generic one (F32 order, not the CPU's) */
            st = launch_any(cu, a, p->head_dim, n_tokens, q, pos, seq, block_table, kc, vc, out);
            if (st != EMBER_OK) return st;
        }
#undef EXACT_CASE
        st = ember_cuda_launched("attn (CPU order)");
        if (st != EMBER_OK || !p->q8_buf) return st;
        return ember_cuda_quantize_q8(cu, p->q8_type, out, (int64_t)p->n_head * p->head_dim, n_tokens, p->q8_buf);
    }
    /* the tuned kernels quantize their own output when a CTA's G heads are
     * whole blocks; otherwise the quantizer runs after the attention */
    const int D = p->head_dim;
    const bool tuned = a.G <= kMaxG && (D == 64 || D == 128 || D == 256 || (D == 512 && a.G <= 4));
    attn_q8 oq = {NULL, NULL, NULL, -1};
    if (p->q8_buf && tuned && (int64_t)a.G * D % (int64_t)ember_type_block_size(p->q8_type) == 0) {
        const ember_q8::q8_view v = ember_q8::q8_split(p->q8_type, p->q8_buf, (int64_t)p->n_head * D, n_tokens);
        oq.qs = const_cast<int8_t *>(v.qs);
        oq.d = const_cast<float *>(v.d);
        oq.s = const_cast<float *>(v.s);
        oq.qm = p->q8_type == EMBER_TYPE_Q8_0 ? 0 : p->q8_type == EMBER_TYPE_Q8_1 ? 1 : 2;
    }
    if (!tuned)
        st = launch_any(cu, a, D, n_tokens, q, pos, seq, block_table, kc, vc, out);
    else if (D == 64)
        st = launch_g<64>(cu, a, n_tokens, q, pos, seq, block_table, kc, vc, out, oq);
    else if (D == 128)
        st = launch_g<128>(cu, a, n_tokens, q, pos, seq, block_table, kc, vc, out, oq);
    else if (D == 256)
        st = launch_g<256>(cu, a, n_tokens, q, pos, seq, block_table, kc, vc, out, oq);
    else
        st = launch_512(cu, a, n_tokens, q, pos, seq, block_table, kc, vc, out, oq);
    if (st != EMBER_OK || !p->q8_buf || oq.qm >= 0) return st;
    return ember_cuda_quantize_q8(cu, p->q8_type, out, (int64_t)p->n_head * D, n_tokens, p->q8_buf);
}
