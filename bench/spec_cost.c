/*
 * spec_cost.c — what a speculative verification step costs on this backend:
 * the time of one ember_decode of k tokens of one sequence (k = 1 is a plain
 * decode step; k = 1 + draft length is a verification step) after a prompt
 * of P tokens, with logits for every row (verification) and for the last row
 * only (shows the LM head's share), and the time of a layer-limited 1-token
 * decode (a layer-skip draft step) for several layer counts.
 *
 *   spec_cost MODEL [-t N] [-p P] [-r REPS] [-k 1,2,3,...] [-l 4,8,...] [-cpu 1]
 * -cpu 1 times process CPU time instead of wall time: with -t 1 that is the
 * work a step costs whatever else loads the machine (a busy shared box
 * stretches wall time by its load, not by our work).
 * Prints a markdown table. Each timing is the median over REPS rounds, each
 * round timing every configuration once (interleaved: load drift on a shared
 * machine hits all alike); the sequence is truncated back to P after each
 * run (KV rollback, as the engine does after verification). k values must
 * start with 1 (the baseline).
 * Must not: be used as a test oracle (it is our own code).
 */
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int use_cpu_time;   /* -cpu: process CPU time instead of wall time */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(use_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        out[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

/* ms of decoding k tokens at positions [P, P + k) of sequence 0, then the
 * rollback to P */
static double time_once(ember_context *ctx, ember_batch *b, int P, int k, int all_logits, int r, int n_vocab)
{
    b->n_tokens = k;
    for (int i = 0; i < k; i++) {
        b->token[i] = (ember_token)(1000 + 37 * i + r) % n_vocab;
        b->pos[i] = P + i;
        b->seq_id[i] = 0;
        b->logits[i] = all_logits || i == k - 1;
    }
    double t0 = now_s();
    if (ember_decode(ctx, b) != EMBER_OK) {
        fprintf(stderr, "decode: %s\n", ember_last_error());
        exit(1);
    }
    double t = (now_s() - t0) * 1e3;
    ember_seq_truncate(ctx, 0, P);
    return t;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: spec_cost MODEL [-t N] [-p P] [-r REPS] [-k LIST] [-l LIST]\n");
        return 2;
    }
    const char *path = argv[1];
    int n_threads = 0, P = 256, reps = 9;
    int ks[32] = {1, 2, 3, 4, 5, 6, 8, 12, 16}, n_k = 9;
    int ls[32] = {0}, n_l = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) n_threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) P = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-k")) n_k = parse_list(argv[i + 1], ks, 32);
        else if (!strcmp(argv[i], "-l")) n_l = parse_list(argv[i + 1], ls, 32);
        else if (!strcmp(argv[i], "-cpu")) use_cpu_time = atoi(argv[i + 1]);
    }
    ember_model *m;
    ember_model_params mp = ember_model_default_params();
    if (ember_model_load(path, &mp, &m) != EMBER_OK) {
        fprintf(stderr, "load: %s\n", ember_last_error());
        return 1;
    }
    int n_vocab = ember_model_n_vocab(m), n_layer = ember_model_n_layer(m);
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)(P + 64);
    cp.n_batch = (uint32_t)(P > 64 ? P : 64);
    cp.n_ubatch = 512;
    cp.n_threads = n_threads;
    ember_context *ctx;
    if (ember_context_new(m, &cp, &ctx) != EMBER_OK) {
        fprintf(stderr, "context: %s\n", ember_last_error());
        return 1;
    }
    ember_batch b;
    ember_batch_init((int32_t)cp.n_batch, &b);
    b.n_tokens = P;
    for (int i = 0; i < P; i++) {
        b.token[i] = (ember_token)(500 + 13 * i) % n_vocab;
        b.pos[i] = i;
        b.seq_id[i] = 0;
        b.logits[i] = i == P - 1;
    }
    if (ember_decode(ctx, &b) != EMBER_OK) {
        fprintf(stderr, "prompt: %s\n", ember_last_error());
        return 1;
    }
    printf("model %s (%s, %d layers, n_vocab %d), prompt %d tokens, -t %d, median of %d, %s time\n\n", path,
           ember_model_arch(m), n_layer, n_vocab, P, n_threads, reps, use_cpu_time ? "process CPU" : "wall");
    /* interleaved: every repetition times every configuration once, so load
     * drift on a shared machine hits them alike */
    enum { MAXR = 101 };
    if (reps > MAXR) reps = MAXR;
    static double t_all[32][MAXR], t_last[32][MAXR], t_lay[32][MAXR], t_full[MAXR];
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < n_k; i++) {
            t_all[i][r] = time_once(ctx, &b, P, ks[i], 1, r, n_vocab);
            t_last[i][r] = time_once(ctx, &b, P, ks[i], 0, r, n_vocab);
        }
        t_full[r] = time_once(ctx, &b, P, 1, 1, r, n_vocab);
        for (int i = 0; i < n_l; i++) {
            if (ember_set_layer_limit(ctx, ls[i]) != EMBER_OK) {
                fprintf(stderr, "layer limit %d: %s\n", ls[i], ember_last_error());
                return 1;
            }
            t_lay[i][r] = time_once(ctx, &b, P, 1, 1, r, n_vocab);
            ember_set_layer_limit(ctx, 0);
        }
    }
    printf("| k tokens | ms, logits every row | x of k=1 | ms, logits last row | x of k=1 | LM head share |\n");
    printf("|---|---|---|---|---|---|\n");
    double base_all = 0, base_last = 0;
    for (int i = 0; i < n_k; i++) {
        double all = median(t_all[i], reps), last = median(t_last[i], reps);
        if (i == 0) { base_all = all; base_last = last; }
        printf("| %d | %.2f | %.2f | %.2f | %.2f | %.0f%% |\n", ks[i], all, all / base_all, last, last / base_last,
               100.0 * (all - last) / all);
    }
    if (n_l > 0) {
        double full = median(t_full, reps);
        printf("\n| layers run (layer-skip draft step, 1 token) | ms | x of full step |\n|---|---|---|\n");
        for (int i = 0; i < n_l; i++) {
            double t = median(t_lay[i], reps);
            printf("| %d of %d | %.2f | %.2f |\n", ls[i] ? ls[i] : n_layer, n_layer, t, t / full);
        }
    }
    ember_batch_free(&b);
    ember_context_free(ctx);
    ember_model_free(m);
    return 0;
}
