/*
 * cuda_ops.cu — normalisation, RoPE, gated activations, elementwise ops and
 * KV-cache stores.
 *
 * Owns: the small memory-bound kernels of a transformer layer.
 * Must not: allocate or synchronise (graph capture), or know models.
 */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_q8_act.cuh"
#include <cuda_fp16.h>

namespace {

/* ADD = false: y = norm(x) * w; ADD = true: y += norm(x) * w. One CTA per row. */
template <bool ADD>
__global__ void k_rms_norm(const float *__restrict__ x, const float *__restrict__ w, float *y, int64_t n, float eps)
{
    ember_pdl_wait();
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    const float inv = ember_row_inv_rms(xr, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __fmul_rn(__fmul_rn(xr[i], inv), w ? w[i] : 1.f);
        /* explicit roundings: an FMA of (x*inv)*w + y would not be the CPU's norm-then-add */
        if (ADD) yr[i] = __fadd_rn(yr[i], v);
        else yr[i] = v;
    }
}

/* One CTA per (token, head); threads over the n_rot/2 rotated pairs.
 * theta follows ggml_rope's f32 arithmetic step for step (theta_base = pos,
 * times theta_scale once per pair; / ff; * freq_scale), so the CPU backend
 * and this kernel turn by the same angles. */
__global__ void k_rope(float *x, const int32_t *__restrict__ pos, int n_head, int head_dim, int n_rot, int neox,
                       float theta_scale, float freq_scale, const float *__restrict__ ff)
{
    ember_pdl_wait();
    const int64_t t = blockIdx.y;
    float *xh = x + (t * n_head + blockIdx.x) * (int64_t)head_dim;
    const float p = (float)pos[t];
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float tb = p;
        for (int k = 0; k < i; k++) tb *= theta_scale;
        const float theta = freq_scale * (ff ? tb / ff[i] : tb);
        float s, c;
        sincosf(theta, &s, &c);
        const int i0 = neox ? i : 2 * i;
        const int i1 = neox ? i + half : 2 * i + 1;
        const float x0 = xh[i0], x1 = xh[i1];
        /* the CPU backend's rotation: the first product fused */
        xh[i0] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
        xh[i1] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
    }
}

/* exp(x) as the CPU backend's ggml_expf (src/backend/cpu/cpu.c; ggml_v_expf,
 * from ARM's optimized routines), operation for operation */
__device__ __forceinline__ float ggml_expf_d(float x)
{
    const float r = 0x1.8p23f;
    const float z = __fmaf_rn(x, 0x1.715476p+0f, r);
    const float n = __fsub_rn(z, r);
    const float b = __fmaf_rn(-n, 0x1.7f7d1cp-20f, __fmaf_rn(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = __fmul_rn(b, b);
    const float j = __fmaf_rn(__fmaf_rn(__fmaf_rn(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                        __fmaf_rn(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                              u, __fmaf_rn(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}
/* silu as the CPU backend's swiglu: x / (1 + ggml_expf(0 - x)) */
__device__ __forceinline__ float act_silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, ggml_expf_d(0.0f - x))); }
__device__ __forceinline__ float act_gelu_tanh(float x)
{
    /* the CPU backend's arrangement, k x (1 + a x^2), without contractions
     * (tanh in double cost ~6% of decode: the fused GLU kernel runs few CTAs) */
    const float k = 0.79788456080286535588f; /* sqrt(2/pi) */
    const float inner = __fmul_rn(__fmul_rn(k, x), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, x), x)));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

/* f16(gelu(f16 x)) by the f16 bits of x, made on the host by the CPU
 * backend's formula and libm (ember_cuda_ops_init), so both backends look
 * up the same values (CUDA's tanhf and glibc's differ in the last bit now
 * and then, which moves the f16 rounding of some results). */
__device__ float g_gelu_f16_tab[65536];

__device__ __forceinline__ float act_gelu_tanh_f16(float x)
{
    if (x <= -10.f) return 0.f;
    if (x >= 10.f) return x;
    return g_gelu_f16_tab[__half_as_ushort(__float2half_rn(x))];
}

template <int ACT>
__global__ void k_glu(const float *gate, const float *up, float *out, int64_t n)
{
    ember_pdl_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        const float a = ACT == EMBER_CUDA_ACT_SILU        ? act_silu(g)
                        : ACT == EMBER_CUDA_ACT_GELU_TANH ? act_gelu_tanh(g)
                                                          : act_gelu_tanh_f16(g);
        /* the CPU writes +0 below -10 (not 0 * up) */
        out[i] = ACT == EMBER_CUDA_ACT_GELU_TANH_F16 && g <= -10.f ? 0.f : a * up[i];
    }
}

__global__ void k_add(const float *a, const float *b, float *y, int64_t n)
{
    ember_pdl_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

__global__ void k_scale(float *x, float s, int64_t n)
{
    ember_pdl_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* Gemma's post-norm fused with the residual add: y = norm(x) * w (y may be
 * x), residual += y. One CTA per row. */
__global__ void k_rms_norm_add_out(const float *x, const float *__restrict__ w, float *y, float *residual, int64_t n,
                                   float eps)
{
    ember_pdl_wait();
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n, *rr = residual + (int64_t)blockIdx.x * n;
    const float inv = ember_row_inv_rms(xr, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __fmul_rn(__fmul_rn(xr[i], inv), w ? w[i] : 1.f);
        yr[i] = v;
        rr[i] = __fadd_rn(rr[i], v); /* not contracted into an FMA with the norm's product */
    }
}

/* out = act(gate) * up (as k_glu) and r = out rounded to Q8_K blocks of 256
 * (as ember_cuda_round_act: id = 127/amax, d = 1/id, q = rint(out * id)).
 * One warp per block of 256; lane l holds elements l, l+32, ..., l+224. */
template <int ACT>
__global__ void k_glu_round_q8K(const float *gate, const float *up, float *out, float *r, int64_t n_blocks)
{
    ember_pdl_wait();
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    float v[8], amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int64_t j = blk * 256 + i * 32 + lane;
        const float g = gate[j];
        const float a = ACT == EMBER_CUDA_ACT_SILU        ? act_silu(g)
                        : ACT == EMBER_CUDA_ACT_GELU_TANH ? act_gelu_tanh(g)
                                                          : act_gelu_tanh_f16(g);
        v[i] = ACT == EMBER_CUDA_ACT_GELU_TANH_F16 && g <= -10.f ? 0.f : a * up[j];
        amax = fmaxf(amax, fabsf(v[i]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d = amax != 0.0f ? 1.0f / id : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int64_t j = blk * 256 + i * 32 + lane;
        out[j] = v[i];
        r[j] = rintf(__fmul_rn(v[i], id)) * d;
    }
}

/* y = rms_norm(x) * w and r = y rounded to Q8_0 blocks of 32 (what
 * ember_cuda_round_act does: d = amax/127 kept as f16, q = rint(y * 127/amax))
 * in one pass. One CTA per row; n % 32 == 0, so each warp's 32 consecutive
 * elements are one block. */
__global__ void k_rms_norm_round_q8(const float *x, const float *__restrict__ w, float *y, float *r, int64_t n,
                                    float eps)
{
    ember_pdl_wait();
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n, *rr = r + (int64_t)blockIdx.x * n;
    const float inv = ember_row_inv_rms(xr, n, eps);
    const int64_t warp0 = threadIdx.x & ~31;
    for (int64_t base = warp0; base < n; base += blockDim.x) {
        const int64_t i = base + (threadIdx.x & 31);
        const float v = __fmul_rn(__fmul_rn(xr[i], inv), w ? w[i] : 1.f);
        float amax = fabsf(v);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const float d16 = __half2float(__float2half_rn(d));
        yr[i] = v;
        rr[i] = rintf(__fmul_rn(v, id)) * d16;
    }
}

/* ---- prefill GEMM inputs in f16 (ember_cuda_rows_f16) ------------------- */

/* The power of two s that brings a row's max |v| = a under 2^14 (f16 ends
 * at 65504; the GEMM's alpha gives s back): 1 when a already is, or when a
 * is inf/NaN (those stay what they are). The rule of k_to_half_scaled
 * (cuda_matmul.cu), per row. */
__device__ __forceinline__ float row_f16_scale(float a)
{
    return a > 16384.f && a <= 3.0e38f ? exp2f(ceilf(log2f(a / 16384.f))) : 1.f;
}

/* Max over the CTA (blockDim.x a multiple of 32); every thread returns it. */
__device__ __forceinline__ float block_max(float m)
{
    __shared__ float red_m[32];
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) red_m[warp] = m;
    __syncthreads();
    m = lane < (int)(blockDim.x >> 5) ? red_m[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

/* One CTA per row r of n values v: KIND ROW_COPY v = x; ROW_NORM v = y =
 * rms_norm(x) * w (k_rms_norm's operations, so y has its bits); ROW_GLU v =
 * y = act(x) * w (x the gate, w the up rows, k_glu's operations; y may be
 * x). RB 32 / 256: v rounded to Q8_0 (Q8_1) / Q8_K blocks as
 * ember_cuda_round_act does (k_round_q8_0 / k_round_q8_K: the activations
 * the CPU backend's vec_dot sees), RB 0: not rounded. Then h = f16(v / s)
 * with s = row_f16_scale(max |v|), srow[r] = s, and *smax = max(*smax, s)
 * (the bits of a positive float order as unsigned). Each warp takes groups
 * of G consecutive values (one Q8 block; 32 without rounding), lane l the
 * values l + 32 j; the second pass rereads what the same thread wrote (or
 * x) and rounds again, the same way. n % G == 0. */
enum { ROW_COPY = 0, ROW_NORM = 1, ROW_GLU = 2 };
template <int KIND, int ACT, int RB>
__global__ void k_rows_f16(const float *x, const float *w, float *y, __half *__restrict__ h, float *__restrict__ srow,
                           unsigned *__restrict__ smax, int64_t n, float eps)
{
    constexpr int G = RB == 256 ? 256 : 32, J = G / 32;
    ember_pdl_wait();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * n;
    const float *wr = KIND == ROW_GLU ? w + r * n : w;
    float *yr = KIND == ROW_COPY ? nullptr : y + r * n;
    __half *hr = h + r * n;
    const float inv = KIND == ROW_NORM ? ember_row_inv_rms(xr, n, eps) : 1.f;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const int64_t n_groups = n / G;
    /* v rounded in place to its block (all lanes of the warp take part) */
    auto round_group = [&](float (&v)[J]) {
        if (RB == 0) return;
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < J; j++) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const float d = RB == 256 ? (amax != 0.0f ? 1.0f / id : 0.0f) : __half2float(__float2half_rn(amax / 127.0f));
#pragma unroll
        for (int j = 0; j < J; j++) v[j] = rintf(__fmul_rn(v[j], id)) * d;
    };
    float amax = 0.f;
    for (int64_t g = warp; g < n_groups; g += n_warps) {
        float v[J];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int64_t i = g * G + j * 32 + lane;
            if (KIND == ROW_NORM) {
                v[j] = __fmul_rn(__fmul_rn(xr[i], inv), wr ? wr[i] : 1.f);
            } else if (KIND == ROW_GLU) {
                const float gt = xr[i];
                const float a = ACT == EMBER_CUDA_ACT_SILU        ? act_silu(gt)
                                : ACT == EMBER_CUDA_ACT_GELU_TANH ? act_gelu_tanh(gt)
                                                                  : act_gelu_tanh_f16(gt);
                v[j] = ACT == EMBER_CUDA_ACT_GELU_TANH_F16 && gt <= -10.f ? 0.f : a * wr[i];
            } else {
                v[j] = xr[i];
            }
            if (KIND != ROW_COPY) yr[i] = v[j];
        }
        round_group(v);
#pragma unroll
        for (int j = 0; j < J; j++) amax = v[j] != v[j] ? INFINITY : fmaxf(amax, fabsf(v[j]));
    }
    const float s = row_f16_scale(block_max(amax));
    const float is = 1.f / s;   /* exact: s is a power of two */
    for (int64_t g = warp; g < n_groups; g += n_warps) {
        float v[J];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int64_t i = g * G + j * 32 + lane;
            v[j] = KIND == ROW_COPY ? xr[i] : yr[i];
        }
        round_group(v);
#pragma unroll
        for (int j = 0; j < J; j++) hr[g * G + j * 32 + lane] = __float2half_rn(v[j] * is);
    }
    if (threadIdx.x == 0) {
        srow[r] = s;
        atomicMax(smax, __float_as_uint(s));
    }
}

/* After k_rows_f16: ab[0] = S = *smax (the GEMM's alpha), ab[1] = 0 (beta),
 * and each row with s[r] < S brought to S (times s[r] / S, a power of two:
 * exact unless the f16 result is subnormal). Rows by CTA, grid-strided;
 * nothing but the first word read when every row kept s = 1. */
__global__ void k_rows_f16_finish(__half *h, const float *__restrict__ srow, const unsigned *__restrict__ smax,
                                  float *__restrict__ ab, int64_t n, int64_t n_rows)
{
    ember_pdl_wait();
    const float S = __uint_as_float(*smax);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ab[0] = S;
        ab[1] = 0.f;
    }
    if (S == 1.f) return;
    for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const float f = srow[r] / S;
        if (f == 1.f) continue;
        __half *hr = h + r * n;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) hr[i] = __float2half_rn(__half2float(hr[i]) * f);
    }
}


/* K and V rows of a step in one launch: blockIdx.y 0 stores K, 1 stores V. */
__global__ void k_kv_store2(const float *__restrict__ sk, int64_t rk, const float *__restrict__ sv, int64_t rv,
                            const int32_t *__restrict__ cells, __half *ck, __half *cv)
{
    ember_pdl_wait();
    const int32_t cell = cells[blockIdx.x];
    if (cell < 0) return;
    const int64_t row = blockIdx.y ? rv : rk;
    const float *s = (blockIdx.y ? sv : sk) + (int64_t)blockIdx.x * row;
    __half *d = (blockIdx.y ? cv : ck) + (int64_t)cell * row;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) d[i] = __float2half_rn(s[i]);
}

__global__ void k_softcap(float *x, float cap, int64_t n)
{
    ember_pdl_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

__global__ void k_kv_store(const float *__restrict__ src, int64_t row, const int32_t *__restrict__ cells,
                           __half *cache)
{
    ember_pdl_wait();
    const int32_t cell = cells[blockIdx.x];
    if (cell < 0) return;
    const float *s = src + (int64_t)blockIdx.x * row;
    __half *d = cache + (int64_t)cell * row;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) d[i] = __float2half_rn(s[i]);
}

unsigned elementwise_grid(int64_t n)
{
    int64_t g = (n + 255) / 256;
    return (unsigned)(g > 65535 ? 65535 : (g < 1 ? 1 : g));
}


/* Row quantizers of the fused norm kernels (one CTA per row, all threads
 * call them): y[i] = x[i] * inv * w[i] (w NULL: 1; inv 1 and w NULL: x as
 * is) written to yr when yr, and its Q8 blocks with cuda_q8.cu's quantizers
 * (ggml's x86 quantize_row_q8_0/1: d = amax/127, q = rint(y * 127/amax), d
 * and s = sum(q) * d stored through f16; quantize_row_q8_K: id = 127/amax,
 * q = rint(y * id), d = 1/id). qs, qd, qsum: this row's blocks. */
template <int QM> /* 0: Q8_0, 1: Q8_1 (n % 32 == 0), 2: Q8_K (n % 256 == 0) */
__device__ __forceinline__ void norm_quant_row(const float *xr, float inv, const float *__restrict__ w, float *yr,
                                               int8_t *qs, float *qd, float *qsum, int64_t n)
{
    const int lane = threadIdx.x & 31;
    if (QM == 2) {
        const int nw = blockDim.x >> 5;
        for (int64_t blk = threadIdx.x >> 5; blk < n / 256; blk += nw) {
            float v[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int64_t j = blk * 256 + 8 * lane + i;
                v[i] = __fmul_rn(__fmul_rn(xr[j], inv), w ? w[j] : 1.f);
                if (yr) yr[j] = v[i];
            }
            ember_q8_blockK(v, qs + blk * 256, qd + blk);
        }
        return;
    }
    const int64_t warp0 = threadIdx.x & ~31;
    for (int64_t base = warp0; base < n; base += blockDim.x) {
        const int64_t i = base + lane;
        const float v = __fmul_rn(__fmul_rn(xr[i], inv), w ? w[i] : 1.f);
        if (yr) yr[i] = v;
        ember_q8_block32<QM == 1>(v, qs + base, qd + base / 32, QM == 1 ? qsum + base / 32 : nullptr);
    }
}

/* One CTA per row of n. ADD = kAddPost (Gemma's post-norm and residual add,
 * as k_rms_norm_add_out): y1 = rms_norm(x) * w1, residual += y1; ADD =
 * kAddPlain (the pre-norm blocks' residual add, as k_add): residual += x
 * (w1, y1, eps1 unused). Then the quantized row is of the new residual: y =
 * rms_norm(residual) * w (NORM2) or the residual itself. Without ADD: y =
 * rms_norm(x) * w. y (NULL: not written) and its Q8 blocks (qs [rows * n],
 * qd / qsum per block, the cuda_q8.cu buffer). */
enum { kAddNone = 0, kAddPost = 1, kAddPlain = 2 };

template <int QM, int ADD, bool NORM2>
__global__ void k_norm_quant(const float *x, const float *__restrict__ w1, float *y1, float *residual, float eps1,
                             const float *__restrict__ w, float *y, int8_t *qs, float *qd, float *qsum, int64_t n,
                             float eps)
{
    ember_pdl_wait();
    const int64_t r = blockIdx.x;
    const int64_t bs = QM == 2 ? 256 : 32;
    const float *src = x + r * n;
    if (ADD) {
        const float *xr = x + r * n;
        float *rr = residual + r * n;
        if (ADD == kAddPlain) {
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) rr[i] = __fadd_rn(rr[i], xr[i]);
        } else {
            float *y1r = y1 + r * n;
            const float inv1 = ember_row_inv_rms(xr, n, eps1);
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
                const float v = __fmul_rn(__fmul_rn(xr[i], inv1), w1 ? w1[i] : 1.f);
                y1r[i] = v;
                rr[i] = __fadd_rn(rr[i], v); /* not contracted into an FMA with the norm's product */
            }
        }
        __syncthreads();   /* the row's new residual, written by all threads, is read by all */
        src = rr;
    }
    const float inv = !ADD || NORM2 ? ember_row_inv_rms(src, n, eps) : 1.0f;
    norm_quant_row<QM>(src, inv, !ADD || NORM2 ? w : nullptr, y ? y + r * n : nullptr, qs + r * n, qd + r * (n / bs),
                       QM == 1 ? qsum + r * (n / bs) : nullptr, n);
}

/* k_norm_quant for rows of n <= kNormRegK * blockDim.x (blockDim.x =
 * ember_norm_threads(n)): the same arithmetic in the same order (thread t
 * sums elements t + k blockDim.x, k ascending, then ember_block_sum_d), but
 * the row is read from global memory once: the weights are loaded before
 * the programmatic-dependent-launch wait (they do not depend on the
 * previous kernel), x and the residual right after it, all held in
 * registers; the quantizer reads the new residual from shared memory
 * (dynamic, n floats) instead of re-reading it from L2. The old kernel read
 * x, the residual and the weights in four dependent trips. */
constexpr int kNormRegK = 8;

template <int QM, int ADD, bool NORM2>
__global__ void k_norm_quant_reg(const float *x, const float *__restrict__ w1, float *y1, float *residual, float eps1,
                                 const float *__restrict__ w, float *y, int8_t *qs, float *qd, float *qsum, int64_t n,
                                 float eps)
{
    extern __shared__ float row_s[];
    const int64_t r = blockIdx.x;
    const int64_t bs = QM == 2 ? 256 : 32;
    const int T = blockDim.x, t = threadIdx.x;
    float wv1[kNormRegK], xv[kNormRegK], rv[kNormRegK];
#pragma unroll
    for (int k = 0; k < kNormRegK; k++) {
        const int64_t i = t + (int64_t)k * T;
        wv1[k] = ADD == kAddPost && i < n ? (w1 ? w1[i] : 1.f) : 0.f;
    }
    if ((!ADD || NORM2) && w) /* the quantizer's weights, one 128-byte line per thread */
        for (int64_t i = (int64_t)t * 32; i < n; i += (int64_t)T * 32) asm volatile("prefetch.global.L1 [%0];" ::"l"(w + i));
    ember_pdl_wait();
#pragma unroll
    for (int k = 0; k < kNormRegK; k++) {
        const int64_t i = t + (int64_t)k * T;
        xv[k] = i < n ? x[r * n + i] : 0.f;
        rv[k] = ADD && i < n ? residual[r * n + i] : 0.f;
    }
    if (ADD == kAddPlain) {
#pragma unroll
        for (int k = 0; k < kNormRegK; k++) {
            const int64_t i = t + (int64_t)k * T;
            if (i >= n) continue;
            rv[k] = __fadd_rn(rv[k], xv[k]);
            residual[r * n + i] = rv[k];
        }
    } else if (ADD) {
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < kNormRegK; k++)
            if (t + (int64_t)k * T < n) ss += (double)__fmul_rn(xv[k], xv[k]);
        ss = ember_block_sum_d(ss);
        const float inv1 = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / (double)n), eps1)));
#pragma unroll
        for (int k = 0; k < kNormRegK; k++) {
            const int64_t i = t + (int64_t)k * T;
            if (i >= n) continue;
            const float v = __fmul_rn(__fmul_rn(xv[k], inv1), wv1[k]);
            y1[r * n + i] = v;
            rv[k] = __fadd_rn(rv[k], v); /* not contracted into an FMA with the norm's product */
            residual[r * n + i] = rv[k];
        }
    } else {
#pragma unroll
        for (int k = 0; k < kNormRegK; k++) rv[k] = xv[k];
    }
    float inv = 1.0f;
    if (!ADD || NORM2) {
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < kNormRegK; k++)
            if (t + (int64_t)k * T < n) ss += (double)__fmul_rn(rv[k], rv[k]);
        ss = ember_block_sum_d(ss);
        inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / (double)n), eps)));
    }
#pragma unroll
    for (int k = 0; k < kNormRegK; k++) {
        const int64_t i = t + (int64_t)k * T;
        if (i < n) row_s[i] = rv[k];
    }
    __syncthreads();
    norm_quant_row<QM>(row_s, inv, !ADD || NORM2 ? w : nullptr, y ? y + r * n : nullptr, qs + r * n, qd + r * (n / bs),
                       QM == 1 ? qsum + r * (n / bs) : nullptr, n);
}

/* out = act(gate) * up (as k_glu) and its Q8_K blocks (cuda_q8.cu's
 * quantizer: id = 127/amax, q = rint(out * id), d = 1/id). One warp per
 * block of 256; lane l holds elements 8l..8l+7. */
template <int ACT>
__global__ void k_glu_quant_q8K(const float *gate, const float *up, float *out, int8_t *qs, float *qd, int64_t n_blocks)
{
    ember_pdl_wait();
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int64_t j = blk * 256 + 8 * lane + i;
        const float g = gate[j];
        const float a = ACT == EMBER_CUDA_ACT_SILU        ? act_silu(g)
                        : ACT == EMBER_CUDA_ACT_GELU_TANH ? act_gelu_tanh(g)
                                                          : act_gelu_tanh_f16(g);
        v[i] = ACT == EMBER_CUDA_ACT_GELU_TANH_F16 && g <= -10.f ? 0.f : a * up[j];
        out[j] = v[i];
    }
    ember_q8_blockK(v, qs + blk * 256, qd + blk);
}

} /* namespace */

/* src/quant/fp16.c (quant.h itself is C-only: restrict) */
extern "C" float ember_fp16_to_fp32(uint16_t h);
extern "C" uint16_t ember_fp32_to_fp16(float f);

/* The GELU table of act_gelu_tanh_f16: 0.5 x (1 + tanh(sqrt(2/pi) x
 * fma(0.044715 x, x, 1))) for every f16 x, rounded to f16, exactly as
 * src/backend/cpu/cpu.c init_tables computes it (same expression, same
 * libm). Synchronous; called by ember_cuda_new on the context's device. */
ember_status ember_cuda_ops_init(ember_cuda *cu)
{
    (void)cu;
    float *tab = (float *)malloc(65536 * sizeof(float));
    if (!tab) return ember_error(EMBER_ERR_NOMEM, "cuda: GELU table");
    for (uint32_t i = 0; i < 65536; i++) {
        const float x = ember_fp16_to_fp32((uint16_t)i);
        const float g = 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * fmaf(0.044715f * x, x, 1.0f)));
        tab[i] = ember_fp16_to_fp32(ember_fp32_to_fp16(g));
    }
    const ember_status s =
        ember_cuda_check(cudaMemcpyToSymbol(g_gelu_f16_tab, tab, 65536 * sizeof(float)), "GELU table upload");
    free(tab);
    return s;
}

extern "C" ember_status ember_cuda_rms_norm(ember_cuda *cu, const float *x, const float *w, float *y, int64_t n,
                                            int64_t n_rows, float eps)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(y);
    if (n <= 0 || n_rows <= 0 || n_rows > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rms_norm: bad shape [%lld, %lld]", (long long)n_rows,
                           (long long)n);
    ember_launch(k_rms_norm<false>, (unsigned)n_rows, ember_norm_threads(n), 0, cu->stream, x, w, y, n, eps);
    return ember_cuda_launched("rms_norm");
}

extern "C" ember_status ember_cuda_rms_norm_add(ember_cuda *cu, const float *x, const float *w, float *residual,
                                                int64_t n, int64_t n_rows, float eps)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(residual);
    if (n <= 0 || n_rows <= 0 || n_rows > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rms_norm_add: bad shape [%lld, %lld]",
                           (long long)n_rows, (long long)n);
    ember_launch(k_rms_norm<true>, (unsigned)n_rows, ember_norm_threads(n), 0, cu->stream, x, w, residual, n, eps);
    return ember_cuda_launched("rms_norm_add");
}

extern "C" ember_status ember_cuda_rope(ember_cuda *cu, float *x, const int32_t *pos, int64_t n_tokens, int n_head,
                                        int head_dim, int n_rot, ember_cuda_rope_mode mode, float freq_base,
                                        float freq_scale, const float *freq_factors)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(pos);
    if (n_tokens <= 0 || n_tokens > 65535 || n_head <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot > head_dim ||
        n_rot % 2 != 0)
        return ember_error(EMBER_ERR_INVALID_ARG,
                           "cuda: rope: bad shape (n_tokens %lld, n_head %d, head_dim %d, n_rot %d)",
                           (long long)n_tokens, n_head, head_dim, n_rot);
    if (mode != EMBER_CUDA_ROPE_NORMAL && mode != EMBER_CUDA_ROPE_NEOX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rope: unknown mode %d", (int)mode);
    if (!(freq_base > 0.f) || !(freq_scale > 0.f))
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rope: freq_base %g, freq_scale %g must be > 0",
                           (double)freq_base, (double)freq_scale);
    const int half = n_rot / 2;
    const int threads = half >= 128 ? 128 : ((half + 31) / 32) * 32;
    dim3 grid((unsigned)n_head, (unsigned)n_tokens);
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    ember_launch(k_rope, grid, threads, 0, cu->stream, x, pos, n_head, head_dim, n_rot, mode == EMBER_CUDA_ROPE_NEOX,
                                             theta_scale, freq_scale, freq_factors);
    return ember_cuda_launched("rope");
}

extern "C" ember_status ember_cuda_glu(ember_cuda *cu, ember_cuda_act act, const float *gate, const float *up,
                                       float *out, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(gate);
    EMBER_CUDA_NONNULL(up);
    EMBER_CUDA_NONNULL(out);
    if (n <= 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: glu: n = %lld", (long long)n);
    if (act == EMBER_CUDA_ACT_SILU)
        ember_launch(k_glu<EMBER_CUDA_ACT_SILU>, elementwise_grid(n), 256, 0, cu->stream, gate, up, out, n);
    else if (act == EMBER_CUDA_ACT_GELU_TANH)
        ember_launch(k_glu<EMBER_CUDA_ACT_GELU_TANH>, elementwise_grid(n), 256, 0, cu->stream, gate, up, out, n);
    else if (act == EMBER_CUDA_ACT_GELU_TANH_F16)
        ember_launch(k_glu<EMBER_CUDA_ACT_GELU_TANH_F16>, elementwise_grid(n), 256, 0, cu->stream, gate, up, out, n);
    else
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: glu: unknown activation %d", (int)act);
    return ember_cuda_launched("glu");
}

extern "C" ember_status ember_cuda_add(ember_cuda *cu, const float *a, const float *b, float *y, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(a);
    EMBER_CUDA_NONNULL(b);
    EMBER_CUDA_NONNULL(y);
    if (n <= 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: add: n = %lld", (long long)n);
    ember_launch(k_add, elementwise_grid(n), 256, 0, cu->stream, a, b, y, n);
    return ember_cuda_launched("add");
}

extern "C" ember_status ember_cuda_scale(ember_cuda *cu, float *x, float s, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    if (n <= 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: scale: n = %lld", (long long)n);
    ember_launch(k_scale, elementwise_grid(n), 256, 0, cu->stream, x, s, n);
    return ember_cuda_launched("scale");
}

extern "C" ember_status ember_cuda_rms_norm_add_out(ember_cuda *cu, const float *x, const float *w, float *y,
                                                    float *residual, int64_t n, int64_t n_rows, float eps)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(y);
    EMBER_CUDA_NONNULL(residual);
    if (n <= 0 || n_rows <= 0 || n_rows > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rms_norm_add_out: bad shape [%lld, %lld]",
                           (long long)n_rows, (long long)n);
    ember_launch(k_rms_norm_add_out, (unsigned)n_rows, ember_norm_threads(n), 0, cu->stream, x, w, y, residual, n, eps);
    return ember_cuda_launched("rms_norm_add_out");
}

extern "C" ember_status ember_cuda_glu_round_q8K(ember_cuda *cu, ember_cuda_act act, const float *gate,
                                                  const float *up, float *out, float *r, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(gate);
    EMBER_CUDA_NONNULL(up);
    EMBER_CUDA_NONNULL(out);
    EMBER_CUDA_NONNULL(r);
    if (n <= 0 || n % 256 != 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: glu_round_q8K: n = %lld", (long long)n);
    const int64_t nb = n / 256;
    const unsigned grid = (unsigned)((nb + 7) / 8);
    if (act == EMBER_CUDA_ACT_SILU)
        ember_launch(k_glu_round_q8K<EMBER_CUDA_ACT_SILU>, grid, 256, 0, cu->stream, gate, up, out, r, nb);
    else if (act == EMBER_CUDA_ACT_GELU_TANH)
        ember_launch(k_glu_round_q8K<EMBER_CUDA_ACT_GELU_TANH>, grid, 256, 0, cu->stream, gate, up, out, r, nb);
    else if (act == EMBER_CUDA_ACT_GELU_TANH_F16)
        ember_launch(k_glu_round_q8K<EMBER_CUDA_ACT_GELU_TANH_F16>, grid, 256, 0, cu->stream, gate, up, out, r, nb);
    else
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: glu_round_q8K: unknown activation %d", (int)act);
    return ember_cuda_launched("glu_round_q8K");
}

extern "C" ember_status ember_cuda_rms_norm_round_q8(ember_cuda *cu, const float *x, const float *w, float *y,
                                                     float *r, int64_t n, int64_t n_rows, float eps)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(y);
    EMBER_CUDA_NONNULL(r);
    if (n <= 0 || n % 32 != 0 || n_rows <= 0 || n_rows > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rms_norm_round_q8: bad shape [%lld, %lld]",
                           (long long)n_rows, (long long)n);
    ember_launch(k_rms_norm_round_q8, (unsigned)n_rows, ember_norm_threads(n), 0, cu->stream, x, w, y, r, n, eps);
    return ember_cuda_launched("rms_norm_round_q8");
}

template <int KIND, int ACT>
static void launch_rows_f16(ember_cuda *cu, int rb, unsigned grid, int threads, const float *x, const float *w, float *y,
                            __half *h, float *srow, unsigned *smax, int64_t n, float eps)
{
    if (rb == 256) ember_launch(k_rows_f16<KIND, ACT, 256>, grid, threads, 0, cu->stream, x, w, y, h, srow, smax, n, eps);
    else if (rb == 32) ember_launch(k_rows_f16<KIND, ACT, 32>, grid, threads, 0, cu->stream, x, w, y, h, srow, smax, n, eps);
    else ember_launch(k_rows_f16<KIND, ACT, 0>, grid, threads, 0, cu->stream, x, w, y, h, srow, smax, n, eps);
}

extern "C" ember_status ember_cuda_rows_f16(ember_cuda *cu, ember_cuda_row_kind kind, ember_cuda_act act, uint32_t round,
                                           const float *x, const float *w, float *y, int64_t n, int64_t n_rows, float eps,
                                           void *h, float *srow, unsigned *smax, float *ab)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(h);
    EMBER_CUDA_NONNULL(srow);
    EMBER_CUDA_NONNULL(smax);
    EMBER_CUDA_NONNULL(ab);
    const int rb = round == EMBER_TYPE_Q8_K ? 256 : (round == EMBER_TYPE_Q8_0 || round == EMBER_TYPE_Q8_1) ? 32 : 0;
    if (rb == 0 && round != EMBER_TYPE_F32)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: rows_f16: rounding to %s", ember_type_name(round));
    if (n <= 0 || n % (rb == 256 ? 256 : 32) != 0 || n_rows <= 0 || n_rows > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rows_f16: bad shape [%lld, %lld]", (long long)n_rows,
                           (long long)n);
    if (kind != EMBER_CUDA_ROW_COPY && !y) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rows_f16: y is NULL");
    if (kind == EMBER_CUDA_ROW_GLU && !w) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rows_f16: up rows are NULL");
    ember_status s = ember_cuda_check(cudaMemsetAsync(smax, 0, sizeof *smax, cu->stream), "rows_f16 (max)");
    if (s != EMBER_OK) return s;
    const unsigned grid = (unsigned)n_rows;
    __half *hh = (__half *)h;
    switch (kind) {
    case EMBER_CUDA_ROW_COPY:
        launch_rows_f16<ROW_COPY, 0>(cu, rb, grid, 256, x, w, y, hh, srow, smax, n, eps);
        break;
    case EMBER_CUDA_ROW_NORM:   /* k_rms_norm's thread count: the same double sum, the same y */
        launch_rows_f16<ROW_NORM, 0>(cu, rb, grid, ember_norm_threads(n), x, w, y, hh, srow, smax, n, eps);
        break;
    case EMBER_CUDA_ROW_GLU:
        if (act == EMBER_CUDA_ACT_SILU)
            launch_rows_f16<ROW_GLU, EMBER_CUDA_ACT_SILU>(cu, rb, grid, 256, x, w, y, hh, srow, smax, n, eps);
        else if (act == EMBER_CUDA_ACT_GELU_TANH)
            launch_rows_f16<ROW_GLU, EMBER_CUDA_ACT_GELU_TANH>(cu, rb, grid, 256, x, w, y, hh, srow, smax, n, eps);
        else if (act == EMBER_CUDA_ACT_GELU_TANH_F16)
            launch_rows_f16<ROW_GLU, EMBER_CUDA_ACT_GELU_TANH_F16>(cu, rb, grid, 256, x, w, y, hh, srow, smax, n, eps);
        else
            return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rows_f16: unknown activation %d", (int)act);
        break;
    default:
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rows_f16: unknown kind %d", (int)kind);
    }
    if ((s = ember_cuda_launched("rows_f16")) != EMBER_OK) return s;
    const unsigned fgrid = (unsigned)(n_rows < 1024 ? n_rows : 1024);
    ember_launch(k_rows_f16_finish, fgrid, 256, 0, cu->stream, hh, (const float *)srow, (const unsigned *)smax, ab, n, n_rows);
    return ember_cuda_launched("rows_f16 (finish)");
}

extern "C" ember_status ember_cuda_kv_store2(ember_cuda *cu, const float *k, int64_t rk, const float *v, int64_t rv,
                                             int64_t n_tokens, const int32_t *cells, uint16_t *k_cache,
                                             uint16_t *v_cache)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(k);
    EMBER_CUDA_NONNULL(v);
    EMBER_CUDA_NONNULL(cells);
    EMBER_CUDA_NONNULL(k_cache);
    EMBER_CUDA_NONNULL(v_cache);
    if (n_tokens <= 0 || n_tokens > INT32_MAX || rk <= 0 || rv <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: kv_store2: bad shape [%lld, %lld/%lld]",
                           (long long)n_tokens, (long long)rk, (long long)rv);
    ember_launch(k_kv_store2, dim3((unsigned)n_tokens, 2), 128, 0, cu->stream, k, rk, v, rv, cells,
                 reinterpret_cast<__half *>(k_cache), reinterpret_cast<__half *>(v_cache));
    return ember_cuda_launched("kv_store2");
}

extern "C" ember_status ember_cuda_softcap(ember_cuda *cu, float *x, float cap, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    if (n <= 0 || !(cap > 0.f))
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: softcap: n = %lld, cap = %g", (long long)n, (double)cap);
    ember_launch(k_softcap, elementwise_grid(n), 256, 0, cu->stream, x, cap, n);
    return ember_cuda_launched("softcap");
}

extern "C" ember_status ember_cuda_kv_store(ember_cuda *cu, const float *src, int64_t n_tokens, int64_t row,
                                            const int32_t *cells, uint16_t *cache)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(src);
    EMBER_CUDA_NONNULL(cells);
    EMBER_CUDA_NONNULL(cache);
    if (n_tokens <= 0 || n_tokens > INT32_MAX || row <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: kv_store: bad shape [%lld, %lld]", (long long)n_tokens,
                           (long long)row);
    ember_launch(k_kv_store, (unsigned)n_tokens, 128, 0, cu->stream, src, row, cells, reinterpret_cast<__half *>(cache));
    return ember_cuda_launched("kv_store");
}

/* The d array of a cuda_q8.cu activation buffer of n_rows x n (16-byte
 * aligned after the int8 qs). */
static float *q8_d(void *buf, int64_t n, int64_t n_rows)
{
    return (float *)((char *)buf + (((size_t)(n * n_rows) + 15) & ~(size_t)15));
}

template <int ADD, bool NORM2>
static void launch_norm_quant(ember_cuda *cu, uint32_t act_type, const float *x, const float *w1, float *y1,
                              float *residual, float eps1, const float *w, float *y, void *buf, int64_t n,
                              int64_t n_rows, float eps)
{
    float *d = q8_d(buf, n, n_rows);
    const unsigned grid = (unsigned)n_rows;
    const int th = ember_norm_threads(n);
    if (n <= (int64_t)kNormRegK * th && n * (int64_t)sizeof(float) <= 48 * 1024) {
        const size_t sh = (size_t)n * sizeof(float);
        if (act_type == EMBER_TYPE_Q8_0)
            ember_launch(k_norm_quant_reg<0, ADD, NORM2>, grid, th, sh, cu->stream, x, w1, y1, residual, eps1, w, y,
                         (int8_t *)buf, d, (float *)NULL, n, eps);
        else if (act_type == EMBER_TYPE_Q8_1)
            ember_launch(k_norm_quant_reg<1, ADD, NORM2>, grid, th, sh, cu->stream, x, w1, y1, residual, eps1, w, y,
                         (int8_t *)buf, d, d + n_rows * (n / 32), n, eps);
        else
            ember_launch(k_norm_quant_reg<2, ADD, NORM2>, grid, th, sh, cu->stream, x, w1, y1, residual, eps1, w, y,
                         (int8_t *)buf, d, (float *)NULL, n, eps);
        return;
    }
    if (act_type == EMBER_TYPE_Q8_0)
        ember_launch(k_norm_quant<0, ADD, NORM2>, grid, th, 0, cu->stream, x, w1, y1, residual, eps1, w, y,
                     (int8_t *)buf, d, (float *)NULL, n, eps);
    else if (act_type == EMBER_TYPE_Q8_1)
        ember_launch(k_norm_quant<1, ADD, NORM2>, grid, th, 0, cu->stream, x, w1, y1, residual, eps1, w, y,
                     (int8_t *)buf, d, d + n_rows * (n / 32), n, eps);
    else
        ember_launch(k_norm_quant<2, ADD, NORM2>, grid, th, 0, cu->stream, x, w1, y1, residual, eps1, w, y,
                     (int8_t *)buf, d, (float *)NULL, n, eps);
}

static ember_status norm_quant_check(uint32_t act_type, int64_t n, int64_t n_rows, const char *what)
{
    if (n <= 0 || n_rows <= 0 || n_rows > INT32_MAX || n % 32 != 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: %s: bad shape [%lld, %lld]", what, (long long)n_rows,
                           (long long)n);
    if (act_type != EMBER_TYPE_Q8_0 && act_type != EMBER_TYPE_Q8_1 && !(act_type == EMBER_TYPE_Q8_K && n % 256 == 0))
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: %s: activation type %s for rows of %lld", what,
                           ember_type_name(act_type), (long long)n);
    return EMBER_OK;
}

extern "C" ember_status ember_cuda_rms_norm_quant_q8(ember_cuda *cu, uint32_t act_type, const float *x, const float *w,
                                                     float *y, void *buf, int64_t n, int64_t n_rows, float eps)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(y);
    EMBER_CUDA_NONNULL(buf);
    ember_status st = norm_quant_check(act_type, n, n_rows, "rms_norm_quant_q8");
    if (st) return st;
    launch_norm_quant<kAddNone, false>(cu, act_type, x, NULL, NULL, NULL, 0.f, w, y, buf, n, n_rows, eps);
    return ember_cuda_launched("rms_norm_quant_q8");
}

extern "C" ember_status ember_cuda_add_norm_quant_q8(ember_cuda *cu, uint32_t act_type, const float *x,
                                                     const float *w1, float *y1, float *residual, float eps1,
                                                     const float *w, float *y, void *buf, int64_t n, int64_t n_rows,
                                                     float eps, bool norm2)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(residual);
    EMBER_CUDA_NONNULL(buf);
    if (norm2) EMBER_CUDA_NONNULL(y);
    ember_status st = norm_quant_check(act_type, n, n_rows, "add_norm_quant_q8");
    if (st) return st;
    if (!y1 && norm2)   /* the plain residual add */
        launch_norm_quant<kAddPlain, true>(cu, act_type, x, NULL, NULL, residual, 0.f, w, y, buf, n, n_rows, eps);
    else if (!y1)
        launch_norm_quant<kAddPlain, false>(cu, act_type, x, NULL, NULL, residual, 0.f, NULL, NULL, buf, n, n_rows, eps);
    else if (norm2)
        launch_norm_quant<kAddPost, true>(cu, act_type, x, w1, y1, residual, eps1, w, y, buf, n, n_rows, eps);
    else
        launch_norm_quant<kAddPost, false>(cu, act_type, x, w1, y1, residual, eps1, NULL, NULL, buf, n, n_rows, eps);
    return ember_cuda_launched("add_norm_quant_q8");
}

extern "C" ember_status ember_cuda_glu_quant_q8K(ember_cuda *cu, ember_cuda_act act, const float *gate,
                                                 const float *up, float *out, void *buf, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(gate);
    EMBER_CUDA_NONNULL(up);
    EMBER_CUDA_NONNULL(out);
    EMBER_CUDA_NONNULL(buf);
    if (n <= 0 || n % 256 != 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: glu_quant_q8K: n = %lld", (long long)n);
    const int64_t nb = n / 256;
    const unsigned grid = (unsigned)((nb + 7) / 8);
    int8_t *qs = (int8_t *)buf;
    float *d = q8_d(buf, n, 1);
    if (act == EMBER_CUDA_ACT_SILU)
        ember_launch(k_glu_quant_q8K<EMBER_CUDA_ACT_SILU>, grid, 256, 0, cu->stream, gate, up, out, qs, d, nb);
    else if (act == EMBER_CUDA_ACT_GELU_TANH)
        ember_launch(k_glu_quant_q8K<EMBER_CUDA_ACT_GELU_TANH>, grid, 256, 0, cu->stream, gate, up, out, qs, d, nb);
    else if (act == EMBER_CUDA_ACT_GELU_TANH_F16)
        ember_launch(k_glu_quant_q8K<EMBER_CUDA_ACT_GELU_TANH_F16>, grid, 256, 0, cu->stream, gate, up, out, qs, d, nb);
    else
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: glu_quant_q8K: unknown activation %d", (int)act);
    return ember_cuda_launched("glu_quant_q8K");
}
