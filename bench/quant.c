/*
 * quant.c — single-thread throughput of every vec_dot and activation
 * quantizer, per CPU variant.
 *
 * Owns: timing only (no correctness: tests/unit/quant/ does that).
 * Method: a weight row of N values (default 4096 = L1-resident and 65536 =
 * L2-resident, as ggml tests/test-quantize-perf.cpp -3 uses) and its
 * activation row; the kernel is called R times per sample (~20 us), 300
 * samples, and the fastest sample is kept (the machine may be shared). We
 * report cycles per 32 values from RDTSC (the unit test-quantize-perf prints
 * as "min cycles/32 vals") and GB/s of weight bytes (activation quantizers:
 * GB/s of F32 input) from the fastest sample's wall time.
 * Usage: quant [--csv] [--size N]... [--type NAME]...
 * Must not: be run as a test (timings are not assertions).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>
#include "quant/quant.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static volatile float sink;

typedef struct result { double cycles32, gbs; } result;

typedef void (*bench_fn)(void *ctx);

static result measure(bench_fn fn, void *ctx, int64_t n_values, double bytes)
{
    /* calibrate repetitions to ~20 us per sample */
    int reps = 1;
    for (;;) {
        double t0 = now_ns();
        for (int r = 0; r < reps; r++) fn(ctx);
        double dt = now_ns() - t0;
        if (dt > 20000 || reps > (1 << 20)) break;
        reps *= 2;
    }
    double best_ns = INFINITY, best_cyc = INFINITY;
    for (int s = 0; s < 300; s++) {
        double t0 = now_ns();
        unsigned long long c0 = __rdtsc();
        for (int r = 0; r < reps; r++) fn(ctx);
        unsigned long long c1 = __rdtsc();
        double dt = now_ns() - t0;
        if (dt < best_ns) best_ns = dt;
        if ((double)(c1 - c0) < best_cyc) best_cyc = (double)(c1 - c0);
    }
    result r = {best_cyc / reps * 32.0 / (double)n_values, bytes * reps / best_ns};
    return r;
}

typedef struct dot_ctx { ember_vec_dot_fn f; int64_t n; const void *x, *y; } dot_ctx;
static void run_dot(void *p)
{
    dot_ctx *c = p;
    float s;
    c->f(c->n, &s, c->x, c->y);
    sink = s;
}
typedef struct q_ctx { ember_from_float_fn f; int64_t n; const float *x; void *y; } q_ctx;
static void run_quant(void *p)
{
    q_ctx *c = p;
    c->f(c->x, c->y, c->n);
}

static const uint32_t types[] = {
    EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_1, EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0,
    EMBER_TYPE_IQ4_NL, EMBER_TYPE_Q2_K, EMBER_TYPE_Q3_K, EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K,
    EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_XS, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_F32,
};

static bool wanted(const char *name, char **sel, int nsel)
{
    if (!nsel) return true;
    for (int i = 0; i < nsel; i++)
        if (!strcasecmp(sel[i], name)) return true;
    return false;
}

int main(int argc, char **argv)
{
    bool csv = false;
    int64_t sizes[8];
    int nsizes = 0;
    char *sel[32];
    int nsel = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv")) csv = true;
        else if (!strcmp(argv[i], "--size") && i + 1 < argc && nsizes < 8) sizes[nsizes++] = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--type") && i + 1 < argc && nsel < 32) sel[nsel++] = argv[++i];
        else { fprintf(stderr, "usage: %s [--csv] [--size N]... [--type NAME]...\n", argv[0]); return 2; }
    }
    if (!nsizes) { sizes[0] = 4096; sizes[1] = 65536; nsizes = 2; }
    for (int k = 0; k < nsizes; k++)
        if (sizes[k] <= 0 || sizes[k] % 256) { fprintf(stderr, "sizes must be multiples of 256\n"); return 2; }

    if (csv) printf("kind,type,variant,n,cycles_per_32,gb_per_s\n");
    else printf("| kind | type | variant | values | cycles/32 vals | GB/s |\n|---|---|---|---:|---:|---:|\n");

    for (int k = 0; k < nsizes; k++) {
        const int64_t n = sizes[k];
        float *xf = malloc(n * sizeof(float)), *af = malloc(n * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            xf[i] = 0.1f + 2.0f * cosf((float)i); /* ggml's synthetic data */
            af[i] = 0.1f + 2.0f * cosf((float)i + 1.0f);
        }
        void *wq = malloc(n * 4 + 64), *aq = malloc(n * 4 + 64);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            const ember_quant_traits *w = ember_quant_traits_get(types[t]);
            if (!wanted(w->name, sel, nsel)) continue;
            const ember_quant_traits *a = ember_quant_traits_get(w->vec_dot_type);
            uint64_t wbytes;
            ember_type_row_bytes(w->type, (uint64_t)n, &wbytes);
            w->from_float_ref(xf, wq, n);
            a->from_float(af, aq, n);
            for (int v = 0; v < EMBER_CPU_VARIANT_COUNT; v++) {
                if (!w->vec_dot_variant[v]) continue;
                dot_ctx c = {w->vec_dot_variant[v], n, wq, aq};
                result r = measure(run_dot, &c, n, (double)wbytes);
                const char *vn = ember_cpu_variant_name((ember_cpu_variant)v);
                if (csv) printf("vec_dot,%s,%s,%lld,%.3f,%.2f\n", w->name, vn, (long long)n, r.cycles32, r.gbs);
                else printf("| vec_dot | %s | %s | %lld | %.2f | %.2f |\n", w->name, vn, (long long)n, r.cycles32, r.gbs);
                fflush(stdout);
            }
        }
        const uint32_t acts[] = {EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_1, EMBER_TYPE_Q8_K};
        for (int t = 0; t < 3; t++) {
            const ember_quant_traits *a = ember_quant_traits_get(acts[t]);
            if (!wanted(a->name, sel, nsel)) continue;
            for (int v = 0; v < EMBER_CPU_VARIANT_COUNT; v++) {
                if (!a->from_float_variant[v]) continue;
                q_ctx c = {a->from_float_variant[v], n, af, aq};
                result r = measure(run_quant, &c, n, (double)n * 4);
                const char *vn = ember_cpu_variant_name((ember_cpu_variant)v);
                if (csv) printf("quantize,%s,%s,%lld,%.3f,%.2f\n", a->name, vn, (long long)n, r.cycles32, r.gbs);
                else printf("| quantize | %s | %s | %lld | %.2f | %.2f |\n", a->name, vn, (long long)n, r.cycles32, r.gbs);
                fflush(stdout);
            }
        }
        free(xf); free(af); free(wq); free(aq);
    }
    return 0;
}
