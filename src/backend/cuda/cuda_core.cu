/*
 * cuda_core.cu — device context, memory, weight upload and CUDA graphs.
 *
 * Owns: the ember_cuda context (stream, cuBLAS handle, scratch), device and
 * mapped-host allocations with byte counters, and graph capture around the
 * context's stream.
 * Must not: launch compute kernels (cuda_matmul.cu, cuda_ops.cu, cuda_attn.cu).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

extern "C" int ember_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

bool ember_cuda_pdl_on = true;

extern "C" ember_status ember_cuda_new(int device, const ember_backend_options *opt, ember_cuda **out)
{
    const ember_backend_options o = opt ? *opt : ember_backend_options_default();
    ember_cuda_pdl_on = o.cuda_pdl;

    EMBER_CUDA_NONNULL(out);
    *out = NULL;
    int n = ember_cuda_device_count();
    if (device < 0 || device >= n)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: device %d does not exist (%d device(s) found)",
                           device, n);
    ember_cuda *cu = (ember_cuda *)calloc(1, sizeof *cu);
    if (!cu) return ember_error(EMBER_ERR_NOMEM, "cuda: context allocation failed");
    cu->device = device;
    ember_status s = ember_cuda_check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop;
    if (s == EMBER_OK) s = ember_cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    if (s == EMBER_OK) {
        snprintf(cu->name, sizeof cu->name, "%s", prop.name);
        s = ember_cuda_check(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    if (s == EMBER_OK && cublasCreate(&cu->cublas) != CUBLAS_STATUS_SUCCESS)
        s = ember_error(EMBER_ERR_INTERNAL, "cuda: cublasCreate failed");
    if (s == EMBER_OK && cublasSetStream(cu->cublas, cu->stream) != CUBLAS_STATUS_SUCCESS)
        s = ember_error(EMBER_ERR_INTERNAL, "cuda: cublasSetStream failed");
    /* Prefill GEMMs run on the tensor cores in TF32 (10-bit mantissa
     * products, F32 sums): 1.5x pp512 on the H200 with perplexity within
     * 0.2% of the CPU backend's (bench/results/cuda-h200.md).
     * EMBER_CUDA_TF32=0 keeps exact F32 products. */
    cu->gemm_f16 = o.cuda_gemm_f16;
    cu->attn_min_keys = o.cuda_attn_min_keys;
    cu->mmvq_rows = o.cuda_mmvq_rows;
    cu->mmvq_smem = o.cuda_mmvq_smem;
    ember_cuda_set_mmvq_mr(cu, o.cuda_mmvq_mr);
    ember_cuda_set_mmvq_tc(cu, o.cuda_mmvq_tc);
    cu->exact_mm = o.cuda_exact || !o.cuda_mmvq;
    if (s == EMBER_OK && o.cuda_tf32 &&
        cublasSetMathMode(cu->cublas, CUBLAS_TF32_TENSOR_OP_MATH) != CUBLAS_STATUS_SUCCESS)
        s = ember_error(EMBER_ERR_INTERNAL, "cuda: cublasSetMathMode failed");
    /* cuBLAS's own default workspace is 32 MiB on Hopper; ours is small
     * (prefill GEMMs only; EMBER_CUDA_CUBLAS_WS_MIB sets it, 0: cuBLAS's).
     * After cublasSetStream, which resets the handle to the default pool. */
    const long ws_mib = o.cuda_cublas_ws_mib;
    if (s == EMBER_OK && ws_mib > 0) {
        const size_t b = (size_t)ws_mib << 20;
        if (cudaMalloc(&cu->cublas_ws, b) != cudaSuccess) {
            (void)cudaGetLastError();
            cu->cublas_ws = NULL;
            s = ember_error(EMBER_ERR_NOMEM, "cuda: cannot allocate a %ld MiB cuBLAS workspace", ws_mib);
        } else if (cublasSetWorkspace(cu->cublas, cu->cublas_ws, b) != CUBLAS_STATUS_SUCCESS) {
            s = ember_error(EMBER_ERR_INTERNAL, "cuda: cublasSetWorkspace failed");
        } else {
            cu->cublas_ws_bytes = b;
        }
    }
    /* The driver reserves cudaLimitStackSize (1 KiB by default) of local
     * memory for every thread the device can hold: 1 KiB x 132 SMs x 2048 =
     * 264 MiB on an H200, counted in the context's footprint. Our kernels
     * need at most a few dozen bytes (sincosf's slow path); the driver grows
     * the limit by itself for a kernel that needs more (cuCtxSetLimit: "The
     * driver automatically increases the per-thread stack size for each
     * kernel launch as needed"). EMBER_CUDA_STACK sets the bytes. */
    if (s == EMBER_OK) {
        const long stack = o.cuda_stack_bytes;
        if (stack >= 0) (void)cudaDeviceSetLimit(cudaLimitStackSize, (size_t)stack);
        (void)cudaGetLastError();
        size_t cur = 0;
        if (cudaDeviceGetLimit(&cur, cudaLimitStackSize) == cudaSuccess) cu->stack_per_thread = cur;
        (void)cudaGetLastError();
        cu->stack_threads = (size_t)prop.multiProcessorCount * (size_t)prop.maxThreadsPerMultiProcessor;
    }
    if (s == EMBER_OK) s = ember_cuda_ops_init(cu);
    if (s != EMBER_OK) {
        ember_cuda_free(cu);
        return s;
    }
    *out = cu;
    return EMBER_OK;
}

extern "C" void ember_cuda_free(ember_cuda *cu)
{
    if (!cu) return;
    cudaSetDevice(cu->device);
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    if (cu->scratch) cudaFree(cu->scratch);
    if (cu->counters) cudaFree(cu->counters);
    if (cu->cublas) cublasDestroy(cu->cublas);
    if (cu->cublas_ws) cudaFree(cu->cublas_ws);
    if (cu->top_ev) cudaEventDestroy(cu->top_ev);
    for (int t = 0; t < EMBER_CUDA_TIMERS; t++)
        for (int e = 0; e < 2; e++)
            if (cu->tm_ev[t][e]) cudaEventDestroy(cu->tm_ev[t][e]);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    free(cu);
}

extern "C" const char *ember_cuda_device_name(const ember_cuda *cu)
{
    return cu ? cu->name : "";
}

extern "C" ember_status ember_cuda_malloc(ember_cuda *cu, size_t bytes, void **out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(out);
    *out = NULL;
    if (bytes == 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: malloc of 0 bytes");
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return ember_error(EMBER_ERR_NOMEM, "cuda: cannot allocate %zu bytes on %s (%zu of %zu free): %s",
                           bytes, cu->name, free_b, total_b, cudaGetErrorString(e));
    }
    cu->device_bytes += bytes;
    *out = p;
    return EMBER_OK;
}

extern "C" void ember_cuda_mfree(ember_cuda *cu, void *p, size_t bytes)
{
    if (!cu || !p) return;
    cudaFree(p);
    cu->device_bytes -= bytes <= cu->device_bytes ? bytes : cu->device_bytes;
}

extern "C" ember_status ember_cuda_host_alloc(ember_cuda *cu, size_t bytes, void **out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(out);
    *out = NULL;
    if (cudaMallocHost(out, bytes ? bytes : 4) != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return ember_error(EMBER_ERR_NOMEM, "cuda: cannot allocate %zu bytes of pinned host memory", bytes);
    }
    cu->host_bytes += bytes;
    return EMBER_OK;
}

extern "C" void ember_cuda_host_free(ember_cuda *cu, void *p, size_t bytes)
{
    if (!cu || !p) return;
    cudaFreeHost(p);
    cu->host_bytes -= bytes <= cu->host_bytes ? bytes : cu->host_bytes;
}

extern "C" ember_status ember_cuda_upload(ember_cuda *cu, void *dst, const void *src, size_t bytes)
{
    EMBER_CUDA_NONNULL(cu);
    if (bytes == 0) return EMBER_OK;
    EMBER_CUDA_NONNULL(dst);
    EMBER_CUDA_NONNULL(src);
    /* Pageable source: cudaMemcpyAsync stages it before returning, so the
     * caller may reuse src; a sync-free path matters only for pinned src. */
    return ember_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu->stream),
                            "upload (cudaMemcpyAsync H2D)");
}

extern "C" ember_status ember_cuda_download(ember_cuda *cu, void *dst, const void *src, size_t bytes)
{
    EMBER_CUDA_NONNULL(cu);
    if (bytes == 0) return EMBER_OK;
    EMBER_CUDA_NONNULL(dst);
    EMBER_CUDA_NONNULL(src);
    ember_status s = ember_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu->stream),
                                      "download (cudaMemcpyAsync D2H)");
    if (s != EMBER_OK) return s;
    return ember_cuda_check(cudaStreamSynchronize(cu->stream), "download (stream sync)");
}

extern "C" ember_status ember_cuda_copy(ember_cuda *cu, void *dst, const void *src, size_t bytes)
{
    EMBER_CUDA_NONNULL(cu);
    if (bytes == 0) return EMBER_OK;
    EMBER_CUDA_NONNULL(dst);
    EMBER_CUDA_NONNULL(src);
    return ember_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu->stream),
                            "copy (cudaMemcpyAsync D2D)");
}

extern "C" ember_status ember_cuda_memzero(ember_cuda *cu, void *dst, size_t bytes)
{
    EMBER_CUDA_NONNULL(cu);
    if (bytes == 0) return EMBER_OK;
    EMBER_CUDA_NONNULL(dst);
    return ember_cuda_check(cudaMemsetAsync(dst, 0, bytes, cu->stream), "cudaMemsetAsync");
}

extern "C" ember_status ember_cuda_synchronize(ember_cuda *cu)
{
    EMBER_CUDA_NONNULL(cu);
    return ember_cuda_check(cudaStreamSynchronize(cu->stream), "stream synchronize");
}

extern "C" ember_status ember_cuda_timer_mark(ember_cuda *cu, int32_t timer, bool end)
{
    EMBER_CUDA_NONNULL(cu);
    if (timer < 0 || timer >= EMBER_CUDA_TIMERS)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: timer %d not in [0, %d)", timer, EMBER_CUDA_TIMERS);
    if (cu->capturing) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: timer mark during graph capture");
    cudaEvent_t *ev = &cu->tm_ev[timer][end ? 1 : 0];
    ember_status st;
    if (!*ev && (st = ember_cuda_check(cudaEventCreate(ev), "timer (event)")) != EMBER_OK) return st;
    if ((st = ember_cuda_check(cudaEventRecord(*ev, cu->stream), "timer (event record)")) != EMBER_OK) return st;
    if (!end) cu->tm_set[timer][1] = false;
    cu->tm_set[timer][end ? 1 : 0] = true;
    return EMBER_OK;
}

extern "C" ember_status ember_cuda_timer_seconds(ember_cuda *cu, int32_t timer, double *s)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(s);
    *s = -1.0;
    if (timer < 0 || timer >= EMBER_CUDA_TIMERS)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: timer %d not in [0, %d)", timer, EMBER_CUDA_TIMERS);
    if (!cu->tm_set[timer][0] || !cu->tm_set[timer][1]) return EMBER_OK;
    ember_status st = ember_cuda_check(cudaEventSynchronize(cu->tm_ev[timer][1]), "timer (event wait)");
    if (st != EMBER_OK) return st;
    float ms = 0.0f;
    st = ember_cuda_check(cudaEventElapsedTime(&ms, cu->tm_ev[timer][0], cu->tm_ev[timer][1]), "timer (elapsed)");
    if (st == EMBER_OK) *s = (double)ms * 1e-3;
    return st;
}

extern "C" uint64_t ember_cuda_device_bytes(const ember_cuda *cu) { return cu ? cu->device_bytes : 0; }
extern "C" uint64_t ember_cuda_host_bytes(const ember_cuda *cu) { return cu ? cu->host_bytes : 0; }
extern "C" void ember_cuda_mem_stats(const ember_cuda *cu, ember_cuda_mem_stats_t *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!cu) return;
    out->device_bytes = cu->device_bytes;
    out->host_bytes = cu->host_bytes;
    out->scratch_bytes = cu->scratch_bytes;
    out->counters_bytes = cu->n_counters * sizeof(unsigned);
    out->cublas_ws_bytes = cu->cublas_ws_bytes;
    size_t cur = cu->stack_per_thread;
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && dev == cu->device && cudaDeviceGetLimit(&cur, cudaLimitStackSize) != cudaSuccess)
        cur = cu->stack_per_thread;
    (void)cudaGetLastError();
    out->stack_per_thread = cur;
    out->stack_bytes = (uint64_t)cur * cu->stack_threads;
    out->gelu_table_bytes = 65536 * sizeof(float);
}

extern "C" uint64_t ember_cuda_mem_generation(const ember_cuda *cu) { return cu ? cu->generation : 0; }

ember_status ember_cuda_scratch(ember_cuda *cu, size_t bytes, void **out)
{
    if (bytes <= cu->scratch_bytes) {
        *out = cu->scratch;
        return EMBER_OK;
    }
    if (cu->capturing)
        return ember_error(EMBER_ERR_INTERNAL,
                           "cuda: scratch must grow to %zu bytes during graph capture; run the step once "
                           "before capturing it", bytes);
    /* work already queued may still use the old scratch */
    ember_status s = ember_cuda_check(cudaStreamSynchronize(cu->stream), "scratch grow (sync)");
    if (s != EMBER_OK) return s;
    if (cu->scratch) cudaFree(cu->scratch);
    cu->generation++;
    cu->scratch = NULL;
    cu->scratch_bytes = 0;
    size_t want = bytes + bytes / 4;
    if (cudaMalloc(&cu->scratch, want) != cudaSuccess) {
        (void)cudaGetLastError();
        cu->scratch = NULL;
        return ember_error(EMBER_ERR_NOMEM, "cuda: cannot allocate %zu bytes of scratch", want);
    }
    cu->scratch_bytes = want;
    *out = cu->scratch;
    return EMBER_OK;
}

ember_status ember_cuda_counters(ember_cuda *cu, size_t n, unsigned **out)
{
    if (n <= cu->n_counters) {
        *out = cu->counters;
        return EMBER_OK;
    }
    if (cu->capturing)
        return ember_error(EMBER_ERR_INTERNAL, "cuda: counters must grow to %zu during graph capture; run the step "
                           "once before capturing it", n);
    ember_status s = ember_cuda_check(cudaStreamSynchronize(cu->stream), "counters grow (sync)");
    if (s != EMBER_OK) return s;
    if (cu->counters) cudaFree(cu->counters);
    cu->generation++;
    cu->counters = NULL;
    cu->n_counters = 0;
    size_t want = n < 1024 ? 1024 : n;
    if (cudaMalloc(&cu->counters, want * sizeof(unsigned)) != cudaSuccess) {
        (void)cudaGetLastError();
        cu->counters = NULL;
        return ember_error(EMBER_ERR_NOMEM, "cuda: cannot allocate %zu counters", want);
    }
    s = ember_cuda_check(cudaMemset(cu->counters, 0, want * sizeof(unsigned)), "counters (memset)");
    if (s != EMBER_OK) return s;
    cu->n_counters = want;
    *out = cu->counters;
    return EMBER_OK;
}

/* ---- weights ------------------------------------------------------------- */

extern "C" bool ember_cuda_type_supported(uint32_t type)
{
    switch (type) {
    case EMBER_TYPE_F32: case EMBER_TYPE_F16: case EMBER_TYPE_BF16:
    case EMBER_TYPE_Q4_0: case EMBER_TYPE_Q4_1: case EMBER_TYPE_Q5_0: case EMBER_TYPE_Q5_1:
    case EMBER_TYPE_Q8_0: case EMBER_TYPE_Q4_K: case EMBER_TYPE_Q5_K: case EMBER_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

extern "C" ember_status ember_cuda_tensor_upload(ember_cuda *cu, uint32_t type, int64_t ne0, int64_t ne1,
                                                 const void *host, bool keep_in_host, ember_cuda_tensor *out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(host);
    EMBER_CUDA_NONNULL(out);
    memset(out, 0, sizeof *out);
    if (!ember_cuda_type_supported(type))
        return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: no kernels for tensor type %s (%u)",
                           ember_type_name(type), type);
    uint64_t row_bytes = 0;
    if (ne0 <= 0 || ne1 <= 0 || !ember_type_row_bytes(type, (uint64_t)ne0, &row_bytes))
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: bad %s tensor shape [%lld, %lld] (row length must be "
                           "a positive multiple of %zu)", ember_type_name(type), (long long)ne1,
                           (long long)ne0, ember_type_block_size(type));
    if ((uint64_t)ne1 > UINT64_MAX / row_bytes)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: tensor of %lld rows overflows", (long long)ne1);
    size_t bytes = (size_t)(row_bytes * (uint64_t)ne1);
    cudaSetDevice(cu->device);
    if (keep_in_host) {
        void *h = NULL, *d = NULL;
        if (cudaHostAlloc(&h, bytes, cudaHostAllocMapped) != cudaSuccess) {
            (void)cudaGetLastError();
            return ember_error(EMBER_ERR_NOMEM, "cuda: cannot allocate %zu bytes of pinned host memory", bytes);
        }
        memcpy(h, host, bytes);
        if (cudaHostGetDevicePointer(&d, h, 0) != cudaSuccess) {
            (void)cudaGetLastError();
            cudaFreeHost(h);
            return ember_error(EMBER_ERR_INTERNAL, "cuda: cudaHostGetDevicePointer failed");
        }
        out->data = d;
        out->in_host = true;
        cu->host_bytes += bytes;
    } else {
        void *d = NULL;
        ember_status s = ember_cuda_malloc(cu, bytes, &d);
        if (s != EMBER_OK) return s;
        /* on our stream, then wait: a pageable cudaMemcpy on the legacy
         * stream may return before its DMA lands, and our non-blocking
         * stream would not wait for it */
        s = ember_cuda_check(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, cu->stream), "tensor upload");
        if (s == EMBER_OK) s = ember_cuda_check(cudaStreamSynchronize(cu->stream), "tensor upload (sync)");
        if (s != EMBER_OK) {
            cudaFree(d);
            cu->device_bytes -= bytes;
            return s;
        }
        out->data = d;
    }
    out->type = type;
    out->ne0 = ne0;
    out->ne1 = ne1;
    out->row_bytes = (size_t)row_bytes;
    return EMBER_OK;
}

extern "C" void ember_cuda_tensor_release(ember_cuda *cu, ember_cuda_tensor *t)
{
    if (!cu || !t || !t->data) return;
    size_t bytes = t->row_bytes * (size_t)t->ne1;
    if (t->in_host) {
        void *h = NULL;
        /* the device alias of a mapped allocation: find the host pointer */
        cudaPointerAttributes a;
        if (cudaPointerGetAttributes(&a, t->data) == cudaSuccess && a.hostPointer) h = a.hostPointer;
        cudaFreeHost(h ? h : t->data);
        cu->host_bytes -= bytes;
    } else {
        cudaFree(t->data);
        cu->device_bytes -= bytes;
    }
    memset(t, 0, sizeof *t);
}

/* ---- graphs -------------------------------------------------------------- */

struct ember_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" ember_status ember_cuda_graph_begin(ember_cuda *cu)
{
    EMBER_CUDA_NONNULL(cu);
    if (cu->capturing) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: graph capture already in progress");
    ember_status s = ember_cuda_check(cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal),
                                      "cudaStreamBeginCapture");
    if (s == EMBER_OK) cu->capturing = true;
    return s;
}

extern "C" ember_status ember_cuda_graph_end(ember_cuda *cu, ember_cuda_graph **out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(out);
    *out = NULL;
    if (!cu->capturing) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: no graph capture in progress");
    cu->capturing = false;
    cudaGraph_t g = NULL;
    ember_status s = ember_cuda_check(cudaStreamEndCapture(cu->stream, &g), "cudaStreamEndCapture");
    if (s != EMBER_OK) return s;
    cudaGraphExec_t ex = NULL;
    s = ember_cuda_check(cudaGraphInstantiate(&ex, g, 0), "cudaGraphInstantiate");
    if (s != EMBER_OK) {
        cudaGraphDestroy(g);
        return s;
    }
    ember_cuda_graph *r = (ember_cuda_graph *)calloc(1, sizeof *r);
    if (!r) {
        cudaGraphExecDestroy(ex);
        cudaGraphDestroy(g);
        return ember_error(EMBER_ERR_NOMEM, "cuda: graph allocation failed");
    }
    r->graph = g;
    r->exec = ex;
    *out = r;
    return EMBER_OK;
}

extern "C" ember_status ember_cuda_graph_launch(ember_cuda *cu, ember_cuda_graph *g)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(g);
    return ember_cuda_check(cudaGraphLaunch(g->exec, cu->stream), "cudaGraphLaunch");
}

extern "C" void ember_cuda_graph_free(ember_cuda_graph *g)
{
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
}
