/*
 * cuda_common.cuh — internals shared by the CUDA backend's .cu files: the
 * context struct, error helpers, scratch memory.
 * Must not: be included from C code (use cuda_backend.h).
 */
#ifndef EMBER_CUDA_COMMON_CUH
#define EMBER_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"
extern "C" {
#include "base/status.h"
}

struct ember_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    char name[256];
    uint64_t device_bytes; /* held through ember_cuda_malloc / tensor upload */
    uint64_t host_bytes;   /* mapped pinned host memory */
    void *scratch;         /* grows on demand; never shrinks */
    size_t scratch_bytes;
    unsigned *counters;    /* zeroed; kernels re-arm what they use */
    size_t n_counters;
    void *cublas_ws;       /* our cuBLAS workspace (cublasSetWorkspace) */
    size_t cublas_ws_bytes;
    size_t stack_per_thread; /* cudaLimitStackSize after ember_cuda_new set it */
    size_t stack_threads;  /* SMs x resident threads per SM: the stack reservation's multiplier */
    bool capturing;
    bool gemm_f16;         /* quantized prefill GEMMs on f16 tensor cores (options: EMBER_CUDA_GEMM_F16) */
    bool exact_mm;         /* decode mat-vecs in the CPU backend's float order (EMBER_CUDA_EXACT; cuda_q8.cu) */
    int attn_min_keys;     /* shortest key split of the decode attention (EMBER_CUDA_ATTN_MIN_KEYS; cuda_attn.cu) */
    int mmvq_rows;         /* rows per warp of a one-column mat-vec, 0 = by shape (EMBER_CUDA_MMVQ_ROWS; cuda_mmvq.cu) */
    bool mmvq_smem;        /* one-column mat-vecs stage their rows in shared memory (EMBER_CUDA_MMVQ_SMEM; cuda_mmvq.cu) */
    int mmvq_mr;           /* rows per warp of a 2-8 column Q4_K/Q6_K mat-vec, 1, 2 or 4 (EMBER_CUDA_MMVQ_MR; cuda_mmvq.cu) */
    int mmvq_tc;           /* Q4_K/Q6_K mat-vecs of >= this many (2..8) columns on the tensor cores, 0 = never (EMBER_CUDA_MMVQ_TC; cuda_mmvq.cu) */
    uint64_t generation;   /* bumped whenever scratch or counters move (graphs hold their addresses) */
    cudaEvent_t top_ev;    /* after the download of ember_cuda_logits_top_start (created on first use) */
    cudaEvent_t tm_ev[EMBER_CUDA_TIMERS][2]; /* ember_cuda_timer_mark: start, end (created on first use) */
    bool tm_set[EMBER_CUDA_TIMERS][2];
};

/* Turn a CUDA runtime error into EMBER_ERR_INTERNAL with `what` in the
 * message; cudaSuccess gives EMBER_OK. */
static inline ember_status ember_cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return EMBER_OK;
    return ember_error(EMBER_ERR_INTERNAL, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* Error of the last kernel launch (configuration errors; no sync). */
static inline ember_status ember_cuda_launched(const char *kernel)
{
    return ember_cuda_check(cudaGetLastError(), kernel);
}

/* Scratch of at least `bytes` on the device (shared by all kernels of one
 * context, used within one call). Grows outside graph capture only. */
ember_status ember_cuda_scratch(ember_cuda *cu, size_t bytes, void **out);

/* At least n zeroed device counters; kernels must leave them zero.
 * Grows outside graph capture only. */
ember_status ember_cuda_counters(ember_cuda *cu, size_t n, unsigned **out);

/* Programmatic dependent launch (Hopper, CUDA 12+): kernels are launched
 * with programmatic stream serialization so that the next kernel of a step
 * is scheduled while this one drains; every kernel starts with
 * ember_pdl_wait(), which waits for the previous kernel to complete (and
 * its memory to be visible) before touching memory, then lets the next one
 * launch. Without the attribute the wait is a no-op. EMBER_CUDA_PDL=0 turns
 * the attribute off (plain launches). */
extern bool ember_cuda_pdl_on;


__device__ __forceinline__ void ember_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute
 * when enabled; errors are left for ember_cuda_launched to read. */
template <typename... KArgs, typename... Args>
static inline void ember_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                Args... args)
{
    if (!ember_cuda_pdl_on) {
        kernel<<<grid, block, smem, stream>>>(args...);
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

/* Online-softmax pair (m, s) = (max, sum exp(x - max)) of the whole block
 * from each thread's own pair (Milakov & Gimelshein 2018): warp shuffles,
 * then warp 0 over the warps; every thread returns with the block's pair.
 * blockDim.x must be a multiple of 32; all threads must call it. */
__device__ __forceinline__ void ember_block_max_sumexp(float &m, float &s)
{
    __shared__ float sm[32], ss[32];
    auto merge = [](float &m1, float &s1) {
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m1, o), s2 = __shfl_xor_sync(0xffffffffu, s1, o);
            const float mm = fmaxf(m1, m2);
            s1 = (m1 == -INFINITY ? 0.f : s1 * __expf(m1 - mm)) + (m2 == -INFINITY ? 0.f : s2 * __expf(m2 - mm));
            m1 = mm;
        }
    };
    merge(m, s);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();   /* sm/ss may still be read by an earlier call */
    if (lane == 0) {
        sm[w] = m;
        ss[w] = s;
    }
    __syncthreads();
    if (w == 0) {
        m = lane < nw ? sm[lane] : -INFINITY;
        s = lane < nw ? ss[lane] : 0.f;
        merge(m, s);
        if (lane == 0) {
            sm[0] = m;
            ss[0] = s;
        }
    }
    __syncthreads();
    m = sm[0];
    s = ss[0];
}

/* Sum over the CTA in double (blockDim.x a multiple of 32, <= 1024); every
 * thread returns the sum. All threads must call it. */
__device__ __forceinline__ double ember_block_sum_d(double v)
{
    __shared__ double red_d[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) red_d[warp] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = lane < nw ? red_d[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* 1 / sqrt(mean(x^2) + eps) for one row xr[0..n) read by the whole CTA, as
 * the CPU backend computes it (ggml_rms_norm): squares in f32, summed in
 * double, mean rounded to f32, then an IEEE sqrt and division, so both
 * backends scale rows alike (no measurable cost on the H200:
 * bench/results/cuda-h200.md, leases 4-5). The double sum's order follows
 * blockDim.x: kernels that must agree bit for bit launch
 * ember_norm_threads(n) threads. */
__device__ __forceinline__ float ember_row_inv_rms(const float *xr, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)__fmul_rn(xr[i], xr[i]);
    ss = ember_block_sum_d(ss);
    const float mean = (float)(ss / (double)n);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

/* Threads of a CTA that normalises rows of n elements. */
static inline int ember_norm_threads(int64_t n)
{
    return n >= 1024 ? 512 : (n >= 256 ? 256 : (n > 64 ? 128 : 32));
}

/* (cos, sin) of RoPE pair i at position p (cuda_rope_tab.cu says why):
 * from tab [n_pos][n_tab] (cos, sin) when p is in [0, n_pos) and i < n_tab,
 * else the angle by ggml_rope's f32 steps (theta_base = p, times
 * theta_scale once per pair, / ff[i] when ff, * freq_scale), then glibc's
 * small-angle results below 2^-12 or sincosf. */
__device__ __forceinline__ void ember_rope_tab_cs(int32_t p, int i, const float2 *__restrict__ tab, int32_t n_pos,
                                                  int n_tab, float theta_scale, float freq_scale,
                                                  const float *__restrict__ ff, float &c, float &s)
{
    if (p >= 0 && p < n_pos && i < n_tab) {
        const float2 cs = tab[(int64_t)p * n_tab + i];
        c = cs.x;
        s = cs.y;
        return;
    }
    float tb = (float)p;
    for (int k = 0; k < i; k++) tb = __fmul_rn(tb, theta_scale);
    const float theta = __fmul_rn(freq_scale, ff ? __fdiv_rn(tb, ff[i]) : tb);
    if (fabsf(theta) < 0x1p-12f) {   /* glibc's small-angle results */
        s = theta;
        c = 1.0f;
    } else {
        sincosf(theta, &s, &c);
    }
}

/* Device tables of cuda_ops.cu (the GELU lookup); ember_cuda_new calls it. */
ember_status ember_cuda_ops_init(ember_cuda *cu);

#define EMBER_CUDA_NONNULL(p) \
    do { if ((p) == NULL) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: %s: " #p " is NULL", __func__); } while (0)

#endif
