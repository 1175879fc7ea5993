/*
 * bench.c — `ember bench`: prompt-processing (pp) and generation (tg) speed,
 * measured the way llama.cpp's llama-bench measures them
 * (tools/llama-bench/llama-bench.cpp) so that the two can stand side by side:
 *   - pp N: N random tokens (the first is BOS when the vocabulary adds BOS)
 *     decoded from an empty cache in batches of n_batch, logits for the last
 *     entry of each batch only;
 *   - tg N: from an empty cache, N single-token decodes with logits, starting
 *     from BOS, then random tokens;
 *   - one untimed warm-up of each test, then -r repetitions; the cache is
 *     cleared before each. Reported: the median tok/s (and mean +- sd, as
 *     llama-bench prints) over the repetitions.
 *   - -c N sizes the context (KV cache) beyond the llama-bench default of
 *     n_prompt + n_gen, to see speed and memory at a serving context; on a
 *     GPU the device memory in use (cudaMemGetInfo) before the model loads
 *     and after the runs is printed, and their difference is ember's.
 * Owns: those measurements and their table. Must not: be a test (speed is
 * never asserted here) or sample (tokens are random, as in llama-bench).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ember bench -m FILE [-p N] [-n N] [-r N] [-t N] [-b N] [-ub N] [-c N] [-o md|json]\n"
        "  -m, --model FILE       GGUF model\n"
        "  -p, --n-prompt N       prompt tokens for the pp test (default 512; 0 = skip)\n"
        "  -n, --n-gen N          tokens for the tg test (default 128; 0 = skip)\n"
        "  -r, --repetitions N    timed repetitions (default 5)\n"
        "  -t, --threads N        (default: all cores)\n"
        "  -b, --batch-size N     (default 2048, as llama-bench)\n"
        "  -ub, --ubatch-size N   tokens per forward pass (default 512, as llama-bench; at most -b)\n"
        "  -c, --ctx-size N       context size (default n_prompt + n_gen, as llama-bench)\n"
        "  -ngl N                 0 = CPU; default -1 = all layers on the GPU when there is one\n"
        "  --device I             CUDA device index (default 0)\n"
        "  -o, --output md|json   table (default) or one JSON object\n");
}

static int fail(const char *what, ember_status st)
{
    fprintf(stderr, "ember: %s: %s: %s\n", what, ember_status_name(st), ember_last_error());
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_result {
    double median, mean, sd;
    double *ts;   /* tok/s per repetition */
} bench_result;

static void summarize(double *ts, int n, bench_result *r)
{
    double s = 0.0, s2 = 0.0;
    for (int i = 0; i < n; i++) {
        s += ts[i];
        s2 += ts[i] * ts[i];
    }
    r->mean = s / n;
    r->sd = n > 1 ? sqrt(fmax(0.0, (s2 - n * r->mean * r->mean) / (n - 1))) : 0.0;
    double *c = malloc(sizeof(double) * (size_t)n);
    memcpy(c, ts, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    r->median = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    r->ts = ts;
}

/* a small LCG so that the random tokens are the same from run to run */
static uint32_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static ember_status run_pp(ember_context *ctx, ember_batch *b, int32_t n_prompt, int32_t n_batch, int32_t n_vocab,
                           ember_token bos, uint64_t *rng)
{
    ember_status st = ember_seq_remove(ctx, 0);
    for (int32_t done = 0; st == EMBER_OK && done < n_prompt;) {
        int32_t m = n_prompt - done < n_batch ? n_prompt - done : n_batch;
        b->n_tokens = m;
        for (int32_t k = 0; k < m; k++) {
            b->token[k] = (done + k == 0 && bos >= 0) ? bos : (ember_token)(next_rand(rng) % (uint32_t)n_vocab);
            b->pos[k] = done + k;
            b->seq_id[k] = 0;
            b->logits[k] = k == m - 1;
        }
        st = ember_decode(ctx, b);
        done += m;
    }
    return st;
}

static ember_status run_tg(ember_context *ctx, ember_batch *b, int32_t n_gen, int32_t n_vocab, ember_token bos,
                           uint64_t *rng)
{
    ember_status st = ember_seq_remove(ctx, 0);
    ember_token t = bos >= 0 ? bos : (ember_token)(next_rand(rng) % (uint32_t)n_vocab);
    for (int32_t i = 0; st == EMBER_OK && i < n_gen; i++) {
        b->n_tokens = 1;
        b->token[0] = t;
        b->pos[0] = i;
        b->seq_id[0] = 0;
        b->logits[0] = 1;
        st = ember_decode(ctx, b);
        if (st == EMBER_OK && !ember_get_logits(ctx, 0))
            st = EMBER_ERR_INTERNAL;
        t = (ember_token)(next_rand(rng) % (uint32_t)n_vocab);
    }
    return st;
}

int cmd_bench(int argc, char **argv)
{
    const char *model = NULL, *output = "md";
    long n_prompt = 512, n_gen = 128, reps = 5, n_threads = 0, n_batch = 2048, n_ubatch = 512, n_ctx_arg = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const int g = cli_gpu_option(argc, argv, &i);
        if (g < 0)
            return 2;
        if (g > 0)
            continue;
        if (!(v = cli_value(argc, argv, &i)))
            return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) output = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) { if (!cli_int(a, v, 0, 1 << 20, &n_prompt)) return 2; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) { if (!cli_int(a, v, 0, 1 << 20, &n_gen)) return 2; }
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) { if (!cli_int(a, v, 1, 1000, &reps)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!cli_int(a, v, 1, 1024, &n_threads)) return 2; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (!cli_int(a, v, 1, 1 << 20, &n_batch)) return 2; }
        else if (!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) { if (!cli_int(a, v, 1, 1 << 20, &n_ubatch)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 1, 1 << 24, &n_ctx_arg)) return 2; }
        else {
            fprintf(stderr, "ember bench: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || (strcmp(output, "md") && strcmp(output, "json")) || (n_prompt == 0 && n_gen == 0)) {
        usage(stderr);
        return 2;
    }
    if (n_threads <= 0)
        n_threads = cli_n_cpus();

    if (n_ctx_arg > 0 && n_ctx_arg < n_prompt + n_gen) {
        fprintf(stderr, "ember bench: -c %ld is smaller than n_prompt + n_gen = %ld\n", n_ctx_arg, n_prompt + n_gen);
        return 2;
    }
    /* GPU memory in use before anything of ours is on the device */
    uint64_t gpu_free0 = 0, gpu_total = 0;
    bool gpu_mem = cli_on_gpu() &&
                   ember_gpu_memory_info(cli_device, &gpu_free0, &gpu_total) == EMBER_OK;

    cli_model cm;
    ember_status st = cli_model_load(model, &cm);
    if (st != EMBER_OK)
        return fail(model, st);
    const int32_t n_vocab = ember_vocab_n_tokens(cm.vocab);
    const ember_token bos = ember_vocab_add_bos(cm.vocab) ? ember_vocab_bos(cm.vocab) : -1;
    /* as llama-bench: one context per test, sized n_prompt + n_gen */
    long n_ctx = n_ctx_arg > 0 ? n_ctx_arg : n_prompt + n_gen;
    long nb = n_batch < n_prompt ? n_batch : (n_prompt > 0 ? n_prompt : 1);
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_seq_max = 1;
    cp.n_batch = (uint32_t)nb;
    cp.n_ubatch = (uint32_t)(nb < n_ubatch ? nb : n_ubatch);
    cp.n_threads = (int32_t)n_threads;
    ember_context *ctx = NULL;
    ember_batch batch = {0};
    double *ts_pp = calloc((size_t)reps, sizeof(double)), *ts_tg = calloc((size_t)reps, sizeof(double));
    int rc = 1;
    uint64_t rng = 42;
    if (!ts_pp || !ts_tg) {
        fprintf(stderr, "ember: out of memory\n");
        goto out;
    }
    if ((st = ember_context_new(cm.model, &cp, &ctx)) != EMBER_OK) {
        fail("context", st);
        goto out;
    }
    if ((st = ember_batch_init((int32_t)nb, &batch)) != EMBER_OK) {
        fail("batch", st);
        goto out;
    }
    /* warm-up: a full pp, one tg token (llama-bench's warm-up runs) */
    if (n_prompt > 0 && (st = run_pp(ctx, &batch, (int32_t)n_prompt, (int32_t)nb, n_vocab, bos, &rng)) != EMBER_OK) {
        fail("pp warm-up", st);
        goto out;
    }
    if (n_gen > 0 && (st = run_tg(ctx, &batch, 1, n_vocab, bos, &rng)) != EMBER_OK) {
        fail("tg warm-up", st);
        goto out;
    }
    for (long r = 0; r < reps; r++) {
        if (n_prompt > 0) {
            double t0 = cli_now();
            if ((st = run_pp(ctx, &batch, (int32_t)n_prompt, (int32_t)nb, n_vocab, bos, &rng)) != EMBER_OK) {
                fail("pp", st);
                goto out;
            }
            ts_pp[r] = (double)n_prompt / (cli_now() - t0);
        }
        if (n_gen > 0) {
            double t0 = cli_now();
            if ((st = run_tg(ctx, &batch, (int32_t)n_gen, n_vocab, bos, &rng)) != EMBER_OK) {
                fail("tg", st);
                goto out;
            }
            ts_tg[r] = (double)n_gen / (cli_now() - t0);
        }
    }
    bench_result pp = {0}, tg = {0};
    if (n_prompt > 0) summarize(ts_pp, (int)reps, &pp);
    if (n_gen > 0) summarize(ts_tg, (int)reps, &tg);
    double size_mib = (double)ember_model_size_bytes(cm.model) / (1024.0 * 1024.0);
    double rss_mib = (double)cli_peak_rss() / (1024.0 * 1024.0);
    uint64_t gpu_free1 = 0;
    if (gpu_mem && ember_gpu_memory_info(cli_device, &gpu_free1, &gpu_total) != EMBER_OK) gpu_mem = false;
    /* used before (driver context, other processes) and after; the
     * difference is what this process allocated: weights, KV, scratch */
    const double mib = 1024.0 * 1024.0;
    const double gpu_used0 = (double)(gpu_total - gpu_free0) / mib, gpu_used1 = (double)(gpu_total - gpu_free1) / mib;
    if (!strcmp(output, "json")) {
        printf("{\"model\":\"%s\",\"arch\":\"%s\",\"size_bytes\":%llu,\"threads\":%ld,\"n_batch\":%ld,"
               "\"n_ubatch\":%u,\"reps\":%ld,\"n_ctx\":%ld,\"peak_rss_bytes\":%llu",
               model, ember_model_arch(cm.model), (unsigned long long)ember_model_size_bytes(cm.model), n_threads,
               nb, cp.n_ubatch, reps, n_ctx, (unsigned long long)cli_peak_rss());
        if (gpu_mem)
            printf(",\"gpu_used_before_bytes\":%llu,\"gpu_used_after_bytes\":%llu",
                   (unsigned long long)(gpu_total - gpu_free0), (unsigned long long)(gpu_total - gpu_free1));
        const char *names[2] = {"pp", "tg"};
        bench_result *res[2] = {&pp, &tg};
        long ns[2] = {n_prompt, n_gen};
        for (int k = 0; k < 2; k++) {
            if (!ns[k])
                continue;
            printf(",\"%s\":{\"n\":%ld,\"median_ts\":%.3f,\"mean_ts\":%.3f,\"sd_ts\":%.3f,\"ts\":[", names[k], ns[k],
                   res[k]->median, res[k]->mean, res[k]->sd);
            for (long r = 0; r < reps; r++)
                printf("%s%.3f", r ? "," : "", res[k]->ts[r]);
            printf("]}");
        }
        printf("}\n");
    } else {
        printf("| model | size | threads | test | t/s (median) | t/s (mean ± sd) |\n");
        printf("| ----- | ---: | ------: | ---: | -----------: | --------------: |\n");
        if (n_prompt > 0)
            printf("| %s | %.2f MiB | %ld | pp%ld | %.2f | %.2f ± %.2f |\n", ember_model_arch(cm.model), size_mib,
                   n_threads, n_prompt, pp.median, pp.mean, pp.sd);
        if (n_gen > 0)
            printf("| %s | %.2f MiB | %ld | tg%ld | %.2f | %.2f ± %.2f |\n", ember_model_arch(cm.model), size_mib,
                   n_threads, n_gen, tg.median, tg.mean, tg.sd);
        printf("\npeak RSS %.1f MiB (n_ctx %ld)\n", rss_mib, n_ctx);
        if (gpu_mem)
            printf("GPU memory in use: %.1f MiB before loading, %.1f MiB after the runs: %.1f MiB for this model "
                   "and context (n_ctx %ld; total %.0f MiB)\n", gpu_used0, gpu_used1, gpu_used1 - gpu_used0, n_ctx,
                   (double)gpu_total / mib);
        if (gpu_mem) ember_context_print_memory(ctx, stdout);
    }
    rc = 0;
out:
    free(ts_pp);
    free(ts_tg);
    ember_batch_free(&batch);
    ember_context_free(ctx);
    cli_model_free(&cm);
    return rc;
}
