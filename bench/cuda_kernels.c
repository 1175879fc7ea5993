/*
 * cuda_kernels.c — per-kernel timing of the CUDA backend on the shapes of
 * gemma-3-270m (Q4_K_M) and SmolLM2-135M (Q4_1): mat-vec per weight type and
 * batch width, and flash-attention decode at several context lengths.
 * Each kernel is captured 200 times into one CUDA graph, so the time per
 * call excludes host launch overhead; the effective bandwidth is weight
 * bytes / time (H200 HBM3e peak: 4.8 TB/s).
 * Weights are random blocks (timing does not depend on the values; F16
 * scale fields are zeroed so no NaN/Inf work is timed).
 * Usage: build/bench/cuda_kernels   (needs -DEMBER_CUDA=ON and a GPU)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember.h"
#include "base/types.h"

#ifdef EMBER_CUDA
#include "backend/cuda/cuda_backend.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CK(x)                                                                                       \
    do {                                                                                            \
        if ((x) != EMBER_OK) {                                                                      \
            fprintf(stderr, "%s failed: %s\n", #x, ember_last_error());                             \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

enum { REPS = 200 };

/* time one call of `fn` by capturing REPS calls into a graph */
typedef void (*call_fn)(ember_cuda *cu, void *arg);

static double time_graph(ember_cuda *cu, call_fn fn, void *arg)
{
    fn(cu, arg); /* warm-up: sizes scratch */
    CK(ember_cuda_synchronize(cu));
    ember_cuda_graph *g = NULL;
    CK(ember_cuda_graph_begin(cu));
    for (int i = 0; i < REPS; i++) fn(cu, arg);
    CK(ember_cuda_graph_end(cu, &g));
    CK(ember_cuda_graph_launch(cu, g));
    CK(ember_cuda_synchronize(cu));
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now_s();
        CK(ember_cuda_graph_launch(cu, g));
        CK(ember_cuda_synchronize(cu));
        const double t = (now_s() - t0) / REPS;
        if (t < best) best = t;
    }
    ember_cuda_graph_free(g);
    return best;
}

struct mm_arg {
    ember_cuda_tensor w;
    float *x, *y;
    int n_cols;
};

static void mm_call(ember_cuda *cu, void *a)
{
    struct mm_arg *m = a;
    CK(ember_cuda_matmul(cu, &m->w, m->x, m->n_cols, m->y));
}

static void bench_matmul(ember_cuda *cu, uint32_t type, int64_t ne0, int64_t ne1, const char *what)
{
    uint64_t row_bytes = 0;
    ember_type_row_bytes(type, (uint64_t)ne0, &row_bytes);
    const size_t bytes = row_bytes * (size_t)ne1;
    uint8_t *host = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) host[i] = (uint8_t)(i * 2654435761u >> 13);
    /* zero f16 scale fields so no Inf/NaN arithmetic runs (K-quants: d,dmin first; Q6_K: d last) */
    const size_t bb = ember_type_block_bytes(type);
    if (bb > 2)
        for (size_t b = 0; b < bytes / bb; b++) {
            if (type == EMBER_TYPE_Q6_K) memset(host + b * bb + bb - 2, 0, 2);
            else memset(host + b * bb, 0, 4);
        }
    struct mm_arg m;
    CK(ember_cuda_tensor_upload(cu, type, ne0, ne1, host, false, &m.w));
    free(host);
    CK(ember_cuda_malloc(cu, sizeof(float) * ne0 * 8, (void **)&m.x));
    CK(ember_cuda_malloc(cu, sizeof(float) * ne1 * 8, (void **)&m.y));
    CK(ember_cuda_memzero(cu, m.x, sizeof(float) * ne0 * 8));
    printf("%-28s %-5s [%6lld x %5lld] %7.2f MB", what, ember_type_name(type), (long long)ne1, (long long)ne0,
           bytes / 1e6);
    static const int cols[] = {1, 4, 8};
    for (int i = 0; i < 3; i++) {
        m.n_cols = cols[i];
        const double t = time_graph(cu, mm_call, &m);
        printf("  b%d %7.2f us %6.0f GB/s", cols[i], t * 1e6, bytes / t / 1e9);
    }
    printf("\n");
    ember_cuda_mfree(cu, m.x, sizeof(float) * ne0 * 8);
    ember_cuda_mfree(cu, m.y, sizeof(float) * ne1 * 8);
    ember_cuda_tensor_release(cu, &m.w);
}

struct at_arg {
    ember_cuda_attn_params p;
    float *q, *out;
    int32_t *pos, *seq, *bt;
    uint16_t *k, *v;
};

static void at_call(ember_cuda *cu, void *a)
{
    struct at_arg *t = a;
    CK(ember_cuda_attn(cu, &t->p, t->q, 1, t->pos, t->seq, t->bt, t->k, t->v, t->out));
}

static void bench_attn(ember_cuda *cu, int n_head, int n_head_kv, int head_dim, int n_swa, int n_ctx)
{
    struct at_arg t;
    memset(&t, 0, sizeof t);
    t.p = (ember_cuda_attn_params){.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                                   .scale = 0.0625f, .n_swa = n_swa, .page_size = 16,
                                   .max_pages = (n_ctx + 15) / 16, .max_ctx = n_ctx};
    const size_t kv = (size_t)n_ctx * n_head_kv * head_dim * 2;
    CK(ember_cuda_malloc(cu, kv, (void **)&t.k));
    CK(ember_cuda_malloc(cu, kv, (void **)&t.v));
    CK(ember_cuda_memzero(cu, t.k, kv));
    CK(ember_cuda_memzero(cu, t.v, kv));
    CK(ember_cuda_malloc(cu, sizeof(float) * n_head * head_dim, (void **)&t.q));
    CK(ember_cuda_malloc(cu, sizeof(float) * n_head * head_dim, (void **)&t.out));
    CK(ember_cuda_memzero(cu, t.q, sizeof(float) * n_head * head_dim));
    int32_t *bt = malloc(sizeof(int32_t) * t.p.max_pages);
    for (int i = 0; i < t.p.max_pages; i++) bt[i] = i;
    CK(ember_cuda_malloc(cu, sizeof(int32_t) * t.p.max_pages, (void **)&t.bt));
    CK(ember_cuda_upload(cu, t.bt, bt, sizeof(int32_t) * t.p.max_pages));
    free(bt);
    int32_t pos = n_ctx - 1, seq = 0;
    CK(ember_cuda_malloc(cu, 4, (void **)&t.pos));
    CK(ember_cuda_malloc(cu, 4, (void **)&t.seq));
    CK(ember_cuda_upload(cu, t.pos, &pos, 4));
    CK(ember_cuda_upload(cu, t.seq, &seq, 4));
    const double s = time_graph(cu, at_call, &t);
    const int keys = n_swa > 0 && n_swa < n_ctx ? n_swa : n_ctx;
    const double bytes = 2.0 * keys * n_head_kv * head_dim * 2;
    printf("attn decode H%d/KV%d D%d swa%-4d ctx %5d: %7.2f us %6.0f GB/s of K+V\n", n_head, n_head_kv, head_dim,
           n_swa, n_ctx, s * 1e6, bytes / s / 1e9);
    ember_cuda_mfree(cu, t.k, kv);
    ember_cuda_mfree(cu, t.v, kv);
    ember_cuda_mfree(cu, t.q, sizeof(float) * n_head * head_dim);
    ember_cuda_mfree(cu, t.out, sizeof(float) * n_head * head_dim);
    ember_cuda_mfree(cu, t.bt, sizeof(int32_t) * t.p.max_pages);
    ember_cuda_mfree(cu, t.pos, 4);
    ember_cuda_mfree(cu, t.seq, 4);
}

int main(void)
{
    if (ember_cuda_device_count() == 0) {
        printf("cuda_kernels: no CUDA device\n");
        return 0;
    }
    ember_cuda *cu = NULL;
    ember_backend_options opt = ember_backend_options_default();
    CK(ember_backend_options_env(&opt));
    CK(ember_cuda_new(0, &opt, &cu));
    printf("device: %s; per-call times from graphs of %d calls\n", ember_cuda_device_name(cu), REPS);
    /* gemma-3-270m Q4_K_M */
    bench_matmul(cu, EMBER_TYPE_Q5_0, 640, 1024, "gemma3 attn_q");
    bench_matmul(cu, EMBER_TYPE_Q5_0, 640, 2048, "gemma3 ffn_gate/up");
    bench_matmul(cu, EMBER_TYPE_Q4_K, 2048, 640, "gemma3 ffn_down");
    bench_matmul(cu, EMBER_TYPE_Q6_K, 2048, 640, "gemma3 ffn_down (Q6_K)");
    bench_matmul(cu, EMBER_TYPE_Q4_K, 1024, 640, "gemma3 attn_output");
    bench_matmul(cu, EMBER_TYPE_Q8_0, 640, 262144, "gemma3 output (tied embd)");
    /* SmolLM2-135M Q4_1 */
    bench_matmul(cu, EMBER_TYPE_Q4_1, 576, 1536, "smollm2 ffn_gate/up");
    bench_matmul(cu, EMBER_TYPE_Q4_1, 1536, 576, "smollm2 ffn_down");
    bench_matmul(cu, EMBER_TYPE_Q8_0, 576, 49152, "smollm2 output");
    /* big matrices to see the bandwidth plateau */
    bench_matmul(cu, EMBER_TYPE_Q4_K, 4096, 14336, "8B-class ffn (bandwidth)");
    bench_matmul(cu, EMBER_TYPE_Q5_K, 4096, 14336, "8B-class ffn (bandwidth)");
    bench_matmul(cu, EMBER_TYPE_Q6_K, 4096, 14336, "8B-class ffn (bandwidth)");
    bench_matmul(cu, EMBER_TYPE_Q4_0, 4096, 14336, "8B-class ffn (bandwidth)");
    bench_matmul(cu, EMBER_TYPE_Q8_0, 4096, 14336, "8B-class ffn (bandwidth)");
    bench_matmul(cu, EMBER_TYPE_F16, 4096, 14336, "8B-class ffn (bandwidth)");
    bench_matmul(cu, EMBER_TYPE_BF16, 4096, 14336, "8B-class ffn (bandwidth)");
    bench_attn(cu, 4, 1, 256, 0, 512);
    bench_attn(cu, 4, 1, 256, 0, 4096);
    bench_attn(cu, 4, 1, 256, 512, 4096);
    bench_attn(cu, 4, 1, 256, 0, 32768);
    bench_attn(cu, 9, 3, 64, 0, 4096);
    ember_cuda_free(cu);
    return 0;
}

#else

int main(void)
{
    printf("cuda_kernels: built without -DEMBER_CUDA=ON\n");
    return 0;
}

#endif
