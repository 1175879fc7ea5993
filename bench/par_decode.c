/*
 * par_decode.c — aggregate decode speed of N parallel sequences, measured
 * as llama.cpp's llama-batched-bench measures it (tools/batched-bench):
 * N sequences each get a prompt of PP random tokens (one batch), then TG
 * steps decode one token per sequence in one batch of N; reported: the
 * prompt time, the decode time and N*TG / decode time (S_TG, tok/s).
 *
 *   par_decode MODEL [-np N] [-pp PP] [-tg TG] [-r REPS] [-ngl N] [-t THREADS]
 * Must not: be a test (speed is never asserted) or sample (tokens are
 * random, as in llama-batched-bench).
 */
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [-np N] [-pp PP] [-tg TG] [-r REPS] [-ngl N] [-t THREADS]\n", argv[0]);
        return 2;
    }
    int np = 8, pp = 128, tg = 128, reps = 3, ngl = -1, nt = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-np")) np = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-pp")) pp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-tg")) tg = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-ngl")) ngl = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) nt = atoi(argv[i + 1]);
    }
    if (np < 1 || pp < 1 || tg < 1 || reps < 1) return 2;
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = ngl;
    ember_model *m = NULL;
    if (ember_model_load(argv[1], &mp, &m) != EMBER_OK) {
        fprintf(stderr, "load: %s\n", ember_last_error());
        return 1;
    }
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)(pp + tg + 1);
    cp.n_kv_tokens = (uint32_t)((pp + tg + 32) * np);
    cp.n_seq_max = (uint32_t)np;
    if (nt > 0) cp.n_threads = nt;
    cp.n_batch = (uint32_t)(pp * np > 2048 ? 2048 : pp * np);
    if ((int)cp.n_batch < np) cp.n_batch = (uint32_t)np;
    cp.n_ubatch = cp.n_batch < 512 ? cp.n_batch : 512;
    ember_context *c = NULL;
    ember_batch b;
    if (ember_context_new(m, &cp, &c) != EMBER_OK || ember_batch_init((int32_t)cp.n_batch, &b) != EMBER_OK) {
        fprintf(stderr, "context: %s\n", ember_last_error());
        return 1;
    }
    const int nv = ember_model_n_vocab(m);
    uint64_t rng = 42;
    double best_tg = 0, t_pp_sum = 0, t_tg_sum = 0;
    for (int r = 0; r <= reps; r++) {   /* r == 0: warm-up */
        for (int s = 0; s < np; s++) ember_seq_remove(c, s);
        const double t0 = now_s();
        /* prompts, in batches of n_batch entries */
        int s = 0, p = 0;
        while (s < np) {
            b.n_tokens = 0;
            while (s < np && b.n_tokens < (int32_t)cp.n_batch) {
                const int i = b.n_tokens++;
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                b.token[i] = (ember_token)((rng >> 33) % (uint64_t)nv);
                b.pos[i] = p;
                b.seq_id[i] = s;
                b.logits[i] = p == pp - 1;
                if (++p == pp) {
                    p = 0;
                    s++;
                }
            }
            if (ember_decode(c, &b) != EMBER_OK) {
                fprintf(stderr, "decode: %s\n", ember_last_error());
                return 1;
            }
        }
        const double t1 = now_s();
        for (int g = 0; g < tg; g++) {
            b.n_tokens = np;
            for (int k = 0; k < np; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                b.token[k] = (ember_token)((rng >> 33) % (uint64_t)nv);
                b.pos[k] = pp + g;
                b.seq_id[k] = k;
                b.logits[k] = 1;
            }
            if (ember_decode(c, &b) != EMBER_OK || !ember_get_logits(c, np - 1)) {
                fprintf(stderr, "decode: %s\n", ember_last_error());
                return 1;
            }
        }
        const double t2 = now_s();
        if (r == 0) continue;
        t_pp_sum += t1 - t0;
        t_tg_sum += t2 - t1;
        const double s_tg = (double)np * tg / (t2 - t1);
        if (s_tg > best_tg) best_tg = s_tg;
    }
    printf("par_decode: np %d pp %d tg %d: prompt %.3f s (S_PP %.1f tok/s), decode %.3f s, S_TG %.1f tok/s "
           "(best of %d: %.1f)\n", np, pp, tg, t_pp_sum / reps, (double)np * pp * reps / t_pp_sum, t_tg_sum / reps,
           (double)np * tg * reps / t_tg_sum, reps, best_tg);
    ember_batch_free(&b);
    ember_context_free(c);
    ember_model_free(m);
    return 0;
}
