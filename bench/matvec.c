/*
 * matvec.c — decode (one-token) matmul speed of the CPU backend on a real
 * weight: how close one weight read per token gets to the memory bandwidth
 * (bench/membw.c) that bounds token generation.
 *
 * Owns: timing the backend's matmul op for 1 token (or -b tokens) against one
 * named tensor of a GGUF file; median and best of R calls, in ms and GB/s of
 * weight bytes, and the median CPU time of all threads (on a shared machine
 * wall time includes waiting for a core; CPU time does not). Must not: be a test (speed is never asserted).
 *
 * usage: matvec MODEL [-w TENSOR] [-t threads] [-r reps] [-b tokens]
 *   default tensor: output.weight, else token_embd.weight (tied head)
 */
#include "backend/backend.h"
#include "gguf/gguf.h"
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clk(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: matvec MODEL [-w TENSOR] [-t threads] [-r reps] [-b tokens]\n");
        return 2;
    }
    const char *name = NULL;
    int threads = 1, reps = 20, n_tok = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-w")) name = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-b")) n_tok = atoi(argv[i + 1]);
    }
    if (reps < 1 || reps > 10000 || n_tok < 1 || n_tok > 4096) return 2;
    ember_gguf *g = NULL;
    if (ember_gguf_open(argv[1], &g) != EMBER_OK) {
        fprintf(stderr, "matvec: %s\n", ember_last_error());
        return 1;
    }
    const ember_gguf_tensor *t = name ? ember_gguf_get_tensor(g, name) : ember_gguf_get_tensor(g, "output.weight");
    if (!t && !name) t = ember_gguf_get_tensor(g, "token_embd.weight");
    if (!t || t->n_dims != 2) {
        fprintf(stderr, "matvec: no 2-D tensor %s\n", name ? name : "output.weight/token_embd.weight");
        return 1;
    }
    ember_weight w = {.type = t->type, .n_in = t->ne[0], .n_out = t->ne[1], .data = t->data, .name = t->name};
    w.row_bytes = (size_t)(w.n_in / ember_type_block_size(w.type)) * ember_type_block_bytes(w.type);
    ember_backend_limits lim = {.max_tokens = n_tok, .max_n_in = w.n_in, .max_kv_tokens = 16, .max_head_dim = 16};
    ember_backend *be = NULL;
    ember_backend_options bo = ember_backend_options_default();   /* EMBER_PREFETCH etc. from the environment */
    bo.n_threads = threads;
    if (ember_backend_options_env(&bo) != EMBER_OK || ember_backend_cpu_new(&bo, &lim, &be) != EMBER_OK) {
        fprintf(stderr, "matvec: %s\n", ember_last_error());
        return 1;
    }
    float *x = malloc(sizeof(float) * (size_t)(w.n_in * n_tok));
    float *y = malloc(sizeof(float) * (size_t)(w.n_out * n_tok));
    double *ts = malloc(sizeof(double) * (size_t)reps), *cs = malloc(sizeof(double) * (size_t)reps);
    for (int64_t i = 0; i < w.n_in * n_tok; i++) x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    const ember_weight *ws[1] = {&w};
    float *ys[1] = {y};
    be->ops->matmul(be, x, n_tok, 1, ws, ys);   /* warm-up: page in the mapping */
    for (int r = 0; r < reps; r++) {
        double t0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
        be->ops->matmul(be, x, n_tok, 1, ws, ys);
        ts[r] = clk(CLOCK_MONOTONIC) - t0;
        cs[r] = clk(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(ts, (size_t)reps, sizeof(double), cmp_d);
    qsort(cs, (size_t)reps, sizeof(double), cmp_d);
    const double bytes = (double)w.row_bytes * (double)w.n_out;
    printf("matvec %s %s [%lld x %lld] %.1f MB, %d tok, -t %d: median %.3f ms (%.2f GB/s), best %.3f ms (%.2f GB/s);"
           " CPU time median %.3f ms\n",
           w.name, ember_type_name(w.type), (long long)w.n_out, (long long)w.n_in, bytes / 1e6, n_tok, threads,
           ts[reps / 2] * 1e3, bytes / ts[reps / 2] / 1e9, ts[0] * 1e3, bytes / ts[0] / 1e9, cs[reps / 2] * 1e3);
    free(x); free(y); free(ts); free(cs);
    ember_backend_free(be);
    ember_gguf_close(g);
    return 0;
}
