/*
 * rt_decode.c — drive ember_decode directly: greedy continuation of a
 * prompt given as token ids, and pp/tg timing.
 *
 *   rt_decode MODEL [-t N] [-n N_GEN] [-ctk f16|q8_0] [-ctv ...] [-pp N] [-tg N] [-r REPS] ids...
 * With ids: prints the n greedy continuation ids (one line). With -pp/-tg:
 * times a prompt of N tokens (ubatch 512) and N single-token decodes, like
 * llama-bench, and prints tokens/second.
 * Must not: be used as a test oracle (it is our own code).
 */
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ember_kv_type parse_kv(const char *s)
{
    if (!strcmp(s, "q8_0")) return EMBER_KV_Q8_0;
    if (!strcmp(s, "f32")) return EMBER_KV_F32;
    return EMBER_KV_F16;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL [-t N] [-n N] [-pp N] [-tg N] [-r R] [-ctk T] [-ctv T] ids...\n", argv[0]); return 2; }
    ember_context_params cp = ember_context_default_params();
    int n_gen = 16, pp = 0, tg = 0, reps = 3;
    int ids[4096], n_ids = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) cp.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-pp") && i + 1 < argc) pp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-tg") && i + 1 < argc) tg = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-ctk") && i + 1 < argc) cp.type_k = parse_kv(argv[++i]);
        else if (!strcmp(argv[i], "-ctv") && i + 1 < argc) cp.type_v = parse_kv(argv[++i]);
        else if (n_ids < 4096) ids[n_ids++] = atoi(argv[i]);
    }
    ember_model *m;
    if (ember_model_load(argv[1], NULL, &m)) { fprintf(stderr, "load: %s\n", ember_last_error()); return 1; }
    cp.n_ctx = 2048;
    ember_context *ctx;
    if (ember_context_new(m, &cp, &ctx)) { fprintf(stderr, "context: %s\n", ember_last_error()); return 1; }
    ember_batch b;
    ember_batch_init(2048, &b);
    const int nv = ember_model_n_vocab(m);
    if (n_ids > 0) {
        b.n_tokens = n_ids;
        for (int i = 0; i < n_ids; i++) { b.token[i] = ids[i]; b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = i == n_ids - 1; }
        int pos = n_ids;
        for (int g = 0; g < n_gen; g++) {
            if (ember_decode(ctx, &b)) { fprintf(stderr, "decode: %s\n", ember_last_error()); return 1; }
            const float *lg = ember_get_logits(ctx, b.n_tokens - 1);
            int t = argmax(lg, nv);
            if (getenv("RT_DEBUG")) {
                double mx = lg[t], se = 0;
                for (int i = 0; i < nv; i++) se += exp((double)lg[i] - mx);
                fprintf(stderr, "step %d: best %d logprob %f\n", g, t, -log(se));
            }
            printf("%d%c", t, g == n_gen - 1 ? '\n' : ' ');
            b.n_tokens = 1; b.token[0] = t; b.pos[0] = pos++; b.seq_id[0] = 0; b.logits[0] = 1;
        }
    }
    if (pp > 0 || tg > 0) {
        double best_pp = 0, best_tg = 0;
        for (int r = 0; r < reps; r++) {
            ember_seq_remove(ctx, 0);
            if (pp > 0) {
                double t0 = now_s();
                for (int p0 = 0; p0 < pp; p0 += 512) {
                    int n = pp - p0 < 512 ? pp - p0 : 512;
                    b.n_tokens = n;
                    for (int i = 0; i < n; i++) { b.token[i] = (p0 + i) * 7 % nv; b.pos[i] = p0 + i; b.seq_id[i] = 0; b.logits[i] = p0 + i == pp - 1; }
                    if (ember_decode(ctx, &b)) { fprintf(stderr, "decode: %s\n", ember_last_error()); return 1; }
                }
                double dt = now_s() - t0;
                if (pp / dt > best_pp) best_pp = pp / dt;
                ember_seq_remove(ctx, 0);
            }
            if (tg > 0) {
                double t0 = now_s();
                for (int i = 0; i < tg; i++) {
                    b.n_tokens = 1; b.token[0] = (i * 13) % nv; b.pos[0] = i; b.seq_id[0] = 0; b.logits[0] = 1;
                    if (ember_decode(ctx, &b)) { fprintf(stderr, "decode: %s\n", ember_last_error()); return 1; }
                }
                double dt = now_s() - t0;
                if (tg / dt > best_tg) best_tg = tg / dt;
            }
        }
        if (pp > 0) printf("pp%d: %.2f t/s\n", pp, best_pp);
        if (tg > 0) printf("tg%d: %.2f t/s\n", tg, best_tg);
    }
    ember_batch_free(&b);
    ember_context_free(ctx);
    ember_model_free(m);
    return 0;
}
