/*
 * cuda_matmul.cu — quantized mat-vec / small-batch matmul and row lookup.
 *
 * Owns: y = W x for weights in GGUF block formats (one warp per output row,
 * lanes over consecutive units of the row, up to 8 activation columns per
 * pass so W is read once per 8 columns) and dequantized row lookup
 * (embeddings). Activations stay F32; weights are dequantized in registers
 * (cuda_quant.cuh); sums are F32.
 * Must not: allocate or synchronise (graph capture), or know models.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_quant.cuh"

#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

using namespace ember_cu;

namespace {

constexpr int kWarps = 4; /* rows per CTA of the mat-vec kernel */
constexpr int kMaxCols = 8;
constexpr int64_t kGemmMinCols = EMBER_CUDA_GEMM_MIN_COLS;   /* wider batches go through cuBLAS */
constexpr int64_t kGemmScratchFloats = 4 << 20;    /* dequantized rows per GEMM chunk (16 MiB: a 10240 x 2560
                                                        * matrix in 7 GEMMs of >= 1638 rows; was 64 MiB) */

/* y[c*n_rows + r] = sum_k W[r][k] x[c*ne0 + k], c < NC. Each warp owns R
 * consecutive rows so that every x value loaded serves R rows. */
template <class T, int NC, int R>
__global__ void __launch_bounds__(kWarps * 32)
k_matvec(const uint8_t *__restrict__ W, size_t row_bytes, int units_per_row, const float *__restrict__ x,
         int64_t ne0, float *__restrict__ y, int64_t n_rows)
{
    ember_pdl_wait();
    const int lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5)) * R;
    if (row0 >= n_rows) return;
    const uint8_t *wr[R];
#pragma unroll
    for (int rr = 0; rr < R; rr++) /* rows past the end re-read the last row; never stored */
        wr[rr] = W + (row0 + rr < n_rows ? row0 + rr : n_rows - 1) * row_bytes;
    float acc[NC][R];
#pragma unroll
    for (int c = 0; c < NC; c++)
#pragma unroll
        for (int rr = 0; rr < R; rr++) acc[c][rr] = 0.f;
    for (int u = lane; u < units_per_row; u += 32) {
        const int blk = u / T::UNITS, iu = u % T::UNITS;
        float w[R][T::NRUN * T::RUN];
        int off[T::NRUN];
#pragma unroll
        for (int rr = 0; rr < R; rr++) T::load(wr[rr] + (size_t)blk * T::BYTES, iu, w[rr], off);
        const float *xb = x + (int64_t)blk * T::QK;
#pragma unroll
        for (int c = 0; c < NC; c++) {
#pragma unroll
            for (int r = 0; r < T::NRUN; r++) {
                float xv[T::RUN];
#pragma unroll
                for (int i = 0; i < T::RUN; i += 4) {
                    const float4 v = *reinterpret_cast<const float4 *>(xb + c * ne0 + off[r] + i);
                    xv[i] = v.x;
                    xv[i + 1] = v.y;
                    xv[i + 2] = v.z;
                    xv[i + 3] = v.w;
                }
#pragma unroll
                for (int rr = 0; rr < R; rr++)
#pragma unroll
                    for (int i = 0; i < T::RUN; i++) acc[c][rr] = fmaf(w[rr][r * T::RUN + i], xv[i], acc[c][rr]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++)
#pragma unroll
        for (int rr = 0; rr < R; rr++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[c][rr] += __shfl_xor_sync(0xffffffffu, acc[c][rr], o);
    /* all lanes hold all sums; lane c*R + rr stores one */
#pragma unroll
    for (int c = 0; c < NC; c++)
#pragma unroll
        for (int rr = 0; rr < R; rr++)
            if (lane == ((c * R + rr) & 31) && row0 + rr < n_rows) y[(int64_t)c * n_rows + row0 + rr] = acc[c][rr];
}

/* out[i][k] = W[ids[i]][k]; one CTA per id. */
template <class T>
__global__ void k_get_rows(const uint8_t *__restrict__ W, size_t row_bytes, int units_per_row, int64_t n_rows,
                           int64_t ne0, const int32_t *__restrict__ ids, float *__restrict__ out)
{
    ember_pdl_wait();
    const int32_t id = ids[blockIdx.x];
    float *o = out + (int64_t)blockIdx.x * ne0;
    if (id < 0 || id >= n_rows) {
        for (int64_t k = threadIdx.x; k < ne0; k += blockDim.x) o[k] = 0.f;
        return;
    }
    const uint8_t *wr = W + (int64_t)id * row_bytes;
    for (int u = threadIdx.x; u < units_per_row; u += blockDim.x) {
        const int blk = u / T::UNITS, iu = u % T::UNITS;
        float w[T::NRUN * T::RUN];
        int off[T::NRUN];
        T::load(wr + (size_t)blk * T::BYTES, iu, w, off);
        float *ob = o + (int64_t)blk * T::QK;
#pragma unroll
        for (int r = 0; r < T::NRUN; r++)
#pragma unroll
            for (int i = 0; i < T::RUN; i++) ob[off[r] + i] = w[r * T::RUN + i];
    }
}

/* p[0, RUN) = w[0, RUN): F32 as is; f16 rounded, 16 or 8 bytes at a time
 * when p allows it (runs start at multiples of RUN in 16-byte aligned rows). */
template <int RUN>
__device__ __forceinline__ void store_run(float *p, const float *w)
{
#pragma unroll
    for (int i = 0; i < RUN; i++) p[i] = w[i];
}

template <int RUN>
__device__ __forceinline__ void store_run(__half *p, const float *w)
{
    if constexpr (RUN % 8 == 0) {
        if (((uintptr_t)p & 15) == 0) {
#pragma unroll
            for (int k = 0; k < RUN; k += 8) {
                uint4 v;
                __half2 *h = reinterpret_cast<__half2 *>(&v);
#pragma unroll
                for (int j = 0; j < 4; j++) h[j] = __floats2half2_rn(w[k + 2 * j], w[k + 2 * j + 1]);
                *reinterpret_cast<uint4 *>(p + k) = v;
            }
            return;
        }
    } else if constexpr (RUN % 4 == 0) {
        if (((uintptr_t)p & 7) == 0) {
#pragma unroll
            for (int k = 0; k < RUN; k += 4) {
                uint2 v;
                __half2 *h = reinterpret_cast<__half2 *>(&v);
                h[0] = __floats2half2_rn(w[k], w[k + 1]);
                h[1] = __floats2half2_rn(w[k + 2], w[k + 3]);
                *reinterpret_cast<uint2 *>(p + k) = v;
            }
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < RUN; i++) p[i] = __float2half_rn(w[i]);
}

/* out[r][k] = W[r0 + r][k] for r < n_rows (one CTA per row), as F32 or f16. */
template <class T, class O = float>
__global__ void k_dequant_rows(const uint8_t *__restrict__ W, size_t row_bytes, int units_per_row, int64_t r0,
                               int64_t ne0, O *__restrict__ out)
{
    ember_pdl_wait();
    const uint8_t *wr = W + (r0 + blockIdx.x) * row_bytes;
    O *o = out + (int64_t)blockIdx.x * ne0;
    for (int u = threadIdx.x; u < units_per_row; u += blockDim.x) {
        const int blk = u / T::UNITS, iu = u % T::UNITS;
        float w[T::NRUN * T::RUN];
        int off[T::NRUN];
        T::load(wr + (size_t)blk * T::BYTES, iu, w, off);
        O *ob = o + (int64_t)blk * T::QK;
#pragma unroll
        for (int r = 0; r < T::NRUN; r++) store_run<T::RUN>(ob + off[r], w + r * T::RUN);
    }
}

/* amax[0] = max |x[i]| (as the bits of a non-negative float, which order
 * like unsigned integers), i < n; amax must start at 0. NaN counts as
 * +inf. */
__global__ void k_amax(const float *__restrict__ x, int64_t n, unsigned *__restrict__ amax)
{
    ember_pdl_wait();
    float m = 0.f;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    const int64_t n4 = (uintptr_t)x % 16 == 0 ? n / 4 : 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x4[i];
        const float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
        m = (v.x != v.x || v.y != v.y || v.z != v.z || v.w != v.w) ? INFINITY : fmaxf(m, a);
    }
    for (int64_t i = 4 * n4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = fabsf(x[i]);
        m = v != v ? INFINITY : fmaxf(m, v);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    __shared__ float wm[32];
    if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x >> 5) ? wm[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) atomicMax(amax, __float_as_uint(m));   /* one atomic per block */
    }
}

/* xh[i] = f16(x[i] / s) with s the power of two that brings max|x| under
 * 2^14 (1 when it already is; f16 ends at 65504), and ab[0] = s, ab[1] = 0:
 * the GEMM's alpha and beta, so y = s * (W xh) keeps large activations
 * (random-weight files reach past f16's range) at f16's relative
 * precision. */
__global__ void k_to_half_scaled(const float *__restrict__ x, int64_t n, const unsigned *__restrict__ amax,
                                 __half *__restrict__ xh, float *__restrict__ ab)
{
    ember_pdl_wait();
    const float a = __uint_as_float(*amax);
    float s = 1.f;
    if (a > 16384.f && a <= 3.0e38f) s = exp2f(ceilf(log2f(a / 16384.f)));
    const float inv = 1.f / s;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ab[0] = s;
        ab[1] = 0.f;
    }
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        xh[i] = __float2half_rn(x[i] * inv);
}

template <class T, int NC>
void launch_matvec(cudaStream_t st, const ember_cuda_tensor *w, const float *x, float *y)
{
    /* rows per warp: 1 for mat-vec (most warps in flight), more as the batch
     * grows and reuse of x starts to matter */
    constexpr int R = NC == 1 ? 1 : (NC <= 3 ? 2 : 4);
    const int units = (int)(w->ne0 / T::QK) * T::UNITS;
    const unsigned grid = (unsigned)((w->ne1 + kWarps * R - 1) / (kWarps * R));
    ember_launch(k_matvec<T, NC, R>, grid, kWarps * 32, 0, st, (const uint8_t *)w->data, w->row_bytes, units, x, w->ne0, y,
                                                     w->ne1);
}

template <class T>
void matvec_cols(cudaStream_t st, const ember_cuda_tensor *w, const float *x, int nc, float *y)
{
    switch (nc) {
    case 1: launch_matvec<T, 1>(st, w, x, y); break;
    case 2: launch_matvec<T, 2>(st, w, x, y); break;
    case 3: launch_matvec<T, 3>(st, w, x, y); break;
    case 4: launch_matvec<T, 4>(st, w, x, y); break;
    case 5: launch_matvec<T, 5>(st, w, x, y); break;
    case 6: launch_matvec<T, 6>(st, w, x, y); break;
    case 7: launch_matvec<T, 7>(st, w, x, y); break;
    default: launch_matvec<T, 8>(st, w, x, y); break;
    }
}

/* Prefill: weights dequantized to F32 a chunk of rows at a time into the
 * context's scratch, then one GEMM through cuBLAS: TF32 tensor-core products
 * by default (the handle's math mode, cuda_core.cu), exact F32 products with
 * EMBER_CUDA_TF32=0 (then results match the mat-vec kernels up to
 * summation order). */
/* The f16 form (default; EMBER_CUDA_GEMM_F16=0, cu->gemm_f16 false: the TF32 form below):
 * weights dequantized to f16 (the values of Q4_K/Q6_K/Q5_0/Q8_0 blocks are
 * small integers times an f16 scale product, so f16 holds them to 11
 * bits), activations rounded to f16 once per matmul, products on the f16
 * tensor cores with F32 accumulation and output (cublasGemmEx), as
 * llama.cpp's cuBLAS path does for quantized weights. Half the dequantized
 * bytes of the TF32 form and twice its tensor rate. */

/* What the f16 form last converted (ember_cuda_matmul_multi): weights that
 * read the same x in one call share its f16 copy, which stays in the
 * scratch after the weight rows as long as the scratch is not moved. */
struct f16x_memo {
    const void *scr;
    const float *x;
    int64_t nx;
};

/* Rows of W dequantized per GEMM chunk of the f16 form: 32 MiB of f16 rows
 * (E4B's 10240 x 2560 in two), a multiple of 128 rows so that every chunk's
 * output y + r0 keeps the 16-byte alignment cuBLAS's fast kernels need (an
 * odd r0 once picked align1 kernels at a third of the speed:
 * bench/results/cuda-h200.md), at most ne1. *b_w: the chunk's bytes, sized
 * by the row length alone, so that x's copy after it sits at the same place
 * for every weight of one row length. */
static int64_t f16_chunk_rows(const ember_cuda_tensor *w, size_t *b_w)
{
    int64_t chunk = 4 * kGemmScratchFloats / w->ne0;
    if (chunk >= 128) chunk -= chunk % 128;
    if (chunk < 1) chunk = 1;
    *b_w = ((size_t)(chunk * w->ne0) * sizeof(__half) + 255) & ~(size_t)255;
    return chunk > w->ne1 ? w->ne1 : chunk;
}

/* y = alpha * (W xh) + beta * y, alpha = ab[0] and beta = ab[1] read from
 * the device: W dequantized to f16 into wh `chunk` rows at a time, each
 * chunk one cublasGemmEx. */
template <class T>
ember_status gemm_f16_rows(ember_cuda *cu, const ember_cuda_tensor *w, const __half *xh, const float *ab, int64_t n_cols,
                           float *y, __half *wh, int64_t chunk)
{
    const int units = (int)(w->ne0 / T::QK) * T::UNITS;
    ember_status s;
    if (cublasSetPointerMode(cu->cublas, CUBLAS_POINTER_MODE_DEVICE) != CUBLAS_STATUS_SUCCESS)
        return ember_error(EMBER_ERR_INTERNAL, "cuda: matmul: cublasSetPointerMode failed");
    for (int64_t r0 = 0; r0 < w->ne1; r0 += chunk) {
        const int64_t nr = w->ne1 - r0 < chunk ? w->ne1 - r0 : chunk;
        ember_launch(k_dequant_rows<T, __half>, (unsigned)nr, 128, 0, cu->stream, (const uint8_t *)w->data, w->row_bytes,
                     units, r0, w->ne0, wh);
        if ((s = ember_cuda_launched("matmul (dequantize rows to f16)")) != EMBER_OK) return s;
        /* column-major view: Y[r][c] at y[c*ne1 + r] = sum_k Wh[r][k] Xh[c][k] */
        const cublasStatus_t cs =
            cublasGemmEx(cu->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n_cols, (int)w->ne0, ab, wh, CUDA_R_16F,
                         (int)w->ne0, xh, CUDA_R_16F, (int)w->ne0, ab + 1, y + r0, CUDA_R_32F, (int)w->ne1, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            cublasSetPointerMode(cu->cublas, CUBLAS_POINTER_MODE_HOST);
            return ember_error(EMBER_ERR_INTERNAL, "cuda: matmul: cublasGemmEx (f16) failed (status %d)", (int)cs);
        }
    }
    if (cublasSetPointerMode(cu->cublas, CUBLAS_POINTER_MODE_HOST) != CUBLAS_STATUS_SUCCESS)
        return ember_error(EMBER_ERR_INTERNAL, "cuda: matmul: cublasSetPointerMode failed");
    return EMBER_OK;
}

template <class T>
ember_status matmul_gemm_f16(ember_cuda *cu, const ember_cuda_tensor *w, const float *x, int64_t n_cols, float *y,
                             f16x_memo *memo)
{
    size_t b_w;
    const int64_t chunk = f16_chunk_rows(w, &b_w);
    const size_t b_x = ((size_t)(n_cols * w->ne0) * sizeof(__half) + 255) & ~(size_t)255;
    void *scr = NULL;
    ember_status s = ember_cuda_scratch(cu, b_w + b_x + 256, &scr);
    if (s != EMBER_OK) return s;
    __half *wh = (__half *)scr, *xh = (__half *)((char *)scr + b_w);
    unsigned *amax = (unsigned *)((char *)scr + b_w + b_x);
    float *ab = (float *)(amax + 4);
    const int64_t nx = n_cols * w->ne0;
    if (!memo || memo->scr != scr || memo->x != x || memo->nx != nx) {
        const unsigned grid = (unsigned)((nx + 255) / 256 < 1024 ? (nx + 255) / 256 : 1024);
        if ((s = ember_cuda_check(cudaMemsetAsync(amax, 0, sizeof *amax, cu->stream), "matmul (amax)")) != EMBER_OK)
            return s;
        ember_launch(k_amax, grid, 256, 0, cu->stream, x, nx, amax);
        ember_launch(k_to_half_scaled, grid, 256, 0, cu->stream, x, nx, (const unsigned *)amax, xh, ab);
        if ((s = ember_cuda_launched("matmul (f16 activations)")) != EMBER_OK) return s;
        if (memo) *memo = {scr, x, nx};
    }
    return gemm_f16_rows<T>(cu, w, xh, ab, n_cols, y, wh, chunk);
}

/* ember_cuda_matmul_multi_f16's one weight: its rows dequantized into the
 * context's scratch (x is already f16, elsewhere). */
template <class T>
ember_status matmul_f16x_t(ember_cuda *cu, const ember_cuda_tensor *w, const __half *xh, const float *ab,
                           int64_t n_cols, float *y)
{
    if (w->ne0 % T::QK != 0)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: matmul: %s row length %lld is not a multiple of %d",
                           ember_type_name(w->type), (long long)w->ne0, T::QK);
    size_t b_w;
    const int64_t chunk = f16_chunk_rows(w, &b_w);
    void *scr = NULL;
    const ember_status s = ember_cuda_scratch(cu, b_w, &scr);
    if (s != EMBER_OK) return s;
    return gemm_f16_rows<T>(cu, w, xh, ab, n_cols, y, (__half *)scr, chunk);
}

template <class T>
ember_status matmul_gemm(ember_cuda *cu, const ember_cuda_tensor *w, const float *x, int64_t n_cols, float *y,
                         f16x_memo *memo)
{
    if (cu->gemm_f16 && w->type != EMBER_TYPE_F32) return matmul_gemm_f16<T>(cu, w, x, n_cols, y, memo);
    if (memo) *memo = {NULL, NULL, 0};   /* this form's rows may reach where the f16 copy lay */
    const int units = (int)(w->ne0 / T::QK) * T::UNITS;
    int64_t chunk = kGemmScratchFloats / w->ne0;
    if (chunk >= 128) chunk -= chunk % 128;   /* aligned outputs (see matmul_gemm_f16) */
    if (chunk < 1) chunk = 1;
    if (chunk > w->ne1) chunk = w->ne1;
    void *scr = NULL;
    ember_status s = ember_cuda_scratch(cu, (size_t)(chunk * w->ne0) * sizeof(float), &scr);
    if (s != EMBER_OK) return s;
    float *wf = (float *)scr;
    const float one = 1.0f, zero = 0.0f;
    for (int64_t r0 = 0; r0 < w->ne1; r0 += chunk) {
        const int64_t nr = w->ne1 - r0 < chunk ? w->ne1 - r0 : chunk;
        ember_launch(k_dequant_rows<T>, (unsigned)nr, 128, 0, cu->stream, (const uint8_t *)w->data, w->row_bytes, units, r0,
                                                                w->ne0, wf);
        s = ember_cuda_launched("matmul (dequantize rows)");
        if (s != EMBER_OK) return s;
        /* column-major view: Y[r][c] at y[c*ne1 + r] = sum_k Wf[r][k] X[c][k] */
        const cublasStatus_t cs = cublasSgemm(cu->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n_cols, (int)w->ne0,
                                              &one, wf, (int)w->ne0, x, (int)w->ne0, &zero, y + r0, (int)w->ne1);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return ember_error(EMBER_ERR_INTERNAL, "cuda: matmul: cublasSgemm failed (status %d)", (int)cs);
    }
    return EMBER_OK;
}

template <class T>
ember_status matmul_t(ember_cuda *cu, const ember_cuda_tensor *w, const float *x, int64_t n_cols, float *y,
                      f16x_memo *memo)
{
    if (w->ne0 % T::QK != 0)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: matmul: %s row length %lld is not a multiple of %d",
                           ember_type_name(w->type), (long long)w->ne0, T::QK);
    if (w->ne0 / T::QK * T::UNITS > INT32_MAX)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: matmul: row of %lld elements too long",
                           (long long)w->ne0);
    if (n_cols > kGemmMinCols) return matmul_gemm<T>(cu, w, x, n_cols, y, memo);
    for (int64_t c0 = 0; c0 < n_cols; c0 += kMaxCols) {
        const int nc = (int)(n_cols - c0 < kMaxCols ? n_cols - c0 : kMaxCols);
        /* the kernel indexes y with n_rows stride per column: offset both */
        matvec_cols<T>(cu->stream, w, x + c0 * w->ne0, nc, y + c0 * w->ne1);
    }
    return ember_cuda_launched("matmul");
}

template <class T>
ember_status dequant_rows_t(ember_cuda *cu, const ember_cuda_tensor *w, float *out)
{
    if (w->ne0 % T::QK != 0)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: dequant_rows: %s row length %lld is not a multiple of %d",
                           ember_type_name(w->type), (long long)w->ne0, T::QK);
    const int units = (int)(w->ne0 / T::QK) * T::UNITS;
    ember_launch(k_dequant_rows<T>, (unsigned)w->ne1, 128, 0, cu->stream, (const uint8_t *)w->data, w->row_bytes, units,
                 (int64_t)0, w->ne0, out);
    return ember_cuda_launched("dequant_rows");
}

template <class T>
ember_status get_rows_t(ember_cuda *cu, const ember_cuda_tensor *w, const int32_t *ids, int64_t n_ids, float *out)
{
    if (w->ne0 % T::QK != 0)
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: get_rows: %s row length %lld is not a multiple of %d",
                           ember_type_name(w->type), (long long)w->ne0, T::QK);
    const int units = (int)(w->ne0 / T::QK) * T::UNITS;
    ember_launch(k_get_rows<T>, (unsigned)n_ids, 128, 0, cu->stream, (const uint8_t *)w->data, w->row_bytes, units, w->ne1,
                                                         w->ne0, ids, out);
    return ember_cuda_launched("get_rows");
}

/* One warp per block of 32 (Q8_0/Q8_1): lane i holds x[i]. */
__global__ void k_round_q8_0(const float *__restrict__ x, float *__restrict__ y, int64_t n_blocks)
{
    ember_pdl_wait();
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    const float v = x[blk * 32 + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    /* ggml's CPU quantize_row_q8_0/q8_1 (what src/quant's activation
     * quantizers reproduce): id = 127/amax (not 1/d), ties to even */
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d16 = __half2float(__float2half_rn(d));
    y[blk * 32 + lane] = rintf(__fmul_rn(v, id)) * d16;
}

/* One warp per block of 256 (Q8_K): lane i holds 8 elements. */
__global__ void k_round_q8_K(const float *__restrict__ x, float *__restrict__ y, int64_t n_blocks)
{
    ember_pdl_wait();
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    float v[8], amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = x[blk * 256 + i * 32 + lane];
        amax = fmaxf(amax, fabsf(v[i]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d = amax != 0.0f ? 1.0f / id : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) y[blk * 256 + i * 32 + lane] = rintf(__fmul_rn(v[i], id)) * d;
}

ember_status check_tensor(const ember_cuda_tensor *w, const char *fn)
{
    if (!w || !w->data || w->ne0 <= 0 || w->ne1 <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: %s: empty or NULL weight tensor", fn);
    return EMBER_OK;
}

} /* namespace */

#define EMBER_CUDA_TYPE_DISPATCH(type, FN, ...)                                                   \
    switch (type) {                                                                               \
    case EMBER_TYPE_F32: return FN<tf32>(__VA_ARGS__);                                            \
    case EMBER_TYPE_F16: return FN<tf16>(__VA_ARGS__);                                            \
    case EMBER_TYPE_BF16: return FN<tbf16>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q4_0: return FN<tq4_0>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q4_1: return FN<tq4_1>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q5_0: return FN<tq5_0>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q5_1: return FN<tq5_1>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q8_0: return FN<tq8_0>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q4_K: return FN<tq4_K>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q5_K: return FN<tq5_K>(__VA_ARGS__);                                          \
    case EMBER_TYPE_Q6_K: return FN<tq6_K>(__VA_ARGS__);                                          \
    default:                                                                                      \
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: no kernel for tensor type %s (%u)",      \
                           ember_type_name(type), (unsigned)(type));                              \
    }

/* One weight's matmul (memo: the f16 copy of x shared within ember_cuda_matmul_multi, or NULL). */
static ember_status matmul_one(ember_cuda *cu, const ember_cuda_tensor *w, const float *x, int64_t n_cols, float *y,
                               f16x_memo *memo)
{
    ember_status s = check_tensor(w, "matmul");
    if (s != EMBER_OK) return s;
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(y);
    EMBER_CUDA_TYPE_DISPATCH(w->type, matmul_t, cu, w, x, n_cols, y, memo)
}

extern "C" ember_status ember_cuda_matmul(ember_cuda *cu, const ember_cuda_tensor *w, const float *x,
                                          int64_t n_cols, float *y)
{
    EMBER_CUDA_NONNULL(cu);
    if (n_cols <= 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: matmul: n_cols = %lld", (long long)n_cols);
    return matmul_one(cu, w, x, n_cols, y, NULL);
}

extern "C" ember_status ember_cuda_matmul_multi(ember_cuda *cu, int32_t n_w, const ember_cuda_tensor *const *ws,
                                                const float *const *xs, int64_t n_cols, float *const *ys)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(ws);
    EMBER_CUDA_NONNULL(xs);
    EMBER_CUDA_NONNULL(ys);
    if (n_w < 1 || n_cols <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: matmul: %d weights, n_cols = %lld", (int)n_w, (long long)n_cols);
    f16x_memo memo = {NULL, NULL, 0};
    for (int32_t k = 0; k < n_w; k++) {
        const ember_status s = matmul_one(cu, ws[k], xs[k], n_cols, ys[k], &memo);
        if (s != EMBER_OK) return s;
    }
    return EMBER_OK;
}

/* One weight of ember_cuda_matmul_multi_f16, by its type. */
static ember_status matmul_f16x_one(ember_cuda *cu, const ember_cuda_tensor *w, const __half *xh, const float *ab,
                                    int64_t n_cols, float *y)
{
    EMBER_CUDA_TYPE_DISPATCH(w->type, matmul_f16x_t, cu, w, xh, ab, n_cols, y)
}

extern "C" ember_status ember_cuda_matmul_multi_f16(ember_cuda *cu, int32_t n_w, const ember_cuda_tensor *const *ws,
                                                    const void *xh, const float *ab, int64_t n_cols, float *const *ys)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(ws);
    EMBER_CUDA_NONNULL(xh);
    EMBER_CUDA_NONNULL(ab);
    EMBER_CUDA_NONNULL(ys);
    if (n_w < 1 || n_cols <= kGemmMinCols || n_cols > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: matmul_f16: %d weights, n_cols = %lld", (int)n_w,
                           (long long)n_cols);
    for (int32_t k = 0; k < n_w; k++) {
        const ember_cuda_tensor *w = ws[k];
        ember_status s = check_tensor(w, "matmul_f16");
        if (s != EMBER_OK) return s;
        EMBER_CUDA_NONNULL(ys[k]);
        if (w->type == EMBER_TYPE_F32)
            return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: matmul_f16: F32 weights keep their TF32/F32 GEMM");
        if ((s = matmul_f16x_one(cu, w, (const __half *)xh, ab, n_cols, ys[k])) != EMBER_OK) return s;
    }
    return EMBER_OK;
}

extern "C" ember_status ember_cuda_dequant_rows(ember_cuda *cu, uint32_t type, const void *rows, int64_t ne0,
                                                int64_t n_rows, float *out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(rows);
    EMBER_CUDA_NONNULL(out);
    uint64_t rb = 0;
    if (!ember_cuda_type_supported(type) || ne0 <= 0 || !ember_type_row_bytes(type, (uint64_t)ne0, &rb))
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: dequant_rows: type %s, row length %lld", ember_type_name(type),
                           (long long)ne0);
    if (n_rows <= 0 || n_rows > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: dequant_rows: n_rows = %lld", (long long)n_rows);
    const ember_cuda_tensor t = {.type = type, .ne0 = ne0, .ne1 = n_rows, .row_bytes = (size_t)rb,
                                 .data = const_cast<void *>(rows), .in_host = false};
    EMBER_CUDA_TYPE_DISPATCH(type, dequant_rows_t, cu, &t, out)
}

extern "C" ember_status ember_cuda_get_rows(ember_cuda *cu, const ember_cuda_tensor *w, const int32_t *ids,
                                            int64_t n_ids, float *out)
{
    EMBER_CUDA_NONNULL(cu);
    ember_status s = check_tensor(w, "get_rows");
    if (s != EMBER_OK) return s;
    EMBER_CUDA_NONNULL(ids);
    EMBER_CUDA_NONNULL(out);
    if (n_ids <= 0 || n_ids > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: get_rows: n_ids = %lld", (long long)n_ids);
    EMBER_CUDA_TYPE_DISPATCH(w->type, get_rows_t, cu, w, ids, n_ids, out)
}

extern "C" ember_status ember_cuda_round_act(ember_cuda *cu, uint32_t act_type, const float *x, float *y, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(y);
    if (n <= 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: round_act: n = %lld", (long long)n);
    const int64_t bs = (int64_t)ember_type_block_size(act_type);   /* Q8_0/Q8_1: 32, Q8_K: 256 */
    if (act_type == EMBER_TYPE_F32) {
        return x == y ? EMBER_OK : ember_cuda_copy(cu, y, x, (size_t)n * sizeof(float));
    } else if (act_type != EMBER_TYPE_Q8_0 && act_type != EMBER_TYPE_Q8_1 && act_type != EMBER_TYPE_Q8_K) {
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: round_act: activation type %s",
                           ember_type_name(act_type));
    }
    if (n % bs != 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: round_act: n = %lld is not a multiple of %lld",
                           (long long)n, (long long)bs);
    const int64_t nb = n / bs;
    const unsigned grid = (unsigned)((nb + 7) / 8);
    if (bs == 32) ember_launch(k_round_q8_0, grid, 256, 0, cu->stream, x, y, nb);
    else ember_launch(k_round_q8_K, grid, 256, 0, cu->stream, x, y, nb);
    return ember_cuda_launched("round_act");
}
