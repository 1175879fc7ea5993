/*
 * grammar_llama.c — llama.cpp's side of bench/grammar: the same GBNF, token
 * trace and logits (bench/grammar_trace.h) through llama.cpp's grammar
 * sampler (llama_sampler_init_grammar), as its common_sampler does it:
 *   lazy  (grammar_first=false): greedy draw; check the drawn token by
 *         applying the grammar to a one-token array; if rejected, apply the
 *         grammar to all 262,144 candidates and draw again; accept.
 *   eager (grammar_first=true): apply the grammar to all candidates, draw,
 *         accept.
 * Each step is paired with an unconstrained greedy draw on the same logits;
 * per-step minimum over passes, mean over steps (as bench/grammar.c).
 * Building the candidate array from logits is part of every llama.cpp
 * sampling step (llama_sampler_sample does it), so it is timed in both the
 * unconstrained baseline (array + greedy) and the constrained step.
 *
 * usage: grammar_llama MODEL.gguf OUTDIR [PASSES]   (OUTDIR from bench/grammar)
 * Must not: use ember code.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "../grammar_trace.h"

static volatile int32_t sink;

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l; (void)t; (void)u; }

static int has_decoy(size_t i, int r)
{
    if (r <= 0) return 0;
    if (r >= 100) return 1;
    return (i * (size_t)r) / 100 != ((i + 1) * (size_t)r) / 100;
}

static int32_t argmax_cand(const llama_token_data_array *a)
{
    size_t best = 0;
    for (size_t i = 1; i < a->size; i++) if (a->data[i].logit > a->data[best].logit) best = i;
    return a->data[best].id;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: grammar_llama MODEL.gguf OUTDIR [PASSES]\n"); return 2; }
    int passes = argc > 3 ? atoi(argv[3]) : 5;
    char path[4096];
    snprintf(path, sizeof path, "%s/grammar.gbnf", argv[2]);
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return 1; }
    static char gbnf[1 << 20];
    size_t gl = fread(gbnf, 1, sizeof gbnf - 1, f);
    gbnf[gl] = 0;
    fclose(f);
    snprintf(path, sizeof path, "%s/trace.txt", argv[2]);
    f = fopen(path, "r");
    if (!f) { perror(path); return 1; }
    int32_t tok[4096], decoy[4096];
    size_t n = 0;
    while (n < 4096 && fscanf(f, "%d %d", &tok[n], &decoy[n]) == 2) n++;
    fclose(f);

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int32_t nv = llama_vocab_n_tokens(vocab);
    struct llama_sampler *gs = llama_sampler_init_grammar(vocab, gbnf, "root");
    if (!gs) { fprintf(stderr, "grammar failed\n"); return 1; }

    float *noise = malloc((size_t)nv * sizeof *noise), *logits = malloc((size_t)nv * sizeof *logits);
    llama_token_data *cand = malloc((size_t)nv * sizeof *cand);
    gt_noise(noise, nv);

    struct { const char *name; int eager; int r; } rows[] = {
        { "lazy, 0% rejected", 0, 0 }, { "lazy, 10% rejected", 0, 10 },
        { "lazy, 100% rejected", 0, 100 }, { "eager mask", 1, 0 },
    };
    printf("llama.cpp grammar sampler, vocab %d, %zu steps, %d passes\n\n", nv, n, passes);
    printf("| mode | greedy us/step | mode us/step | mode / greedy |\n|---|---:|---:|---:|\n");
    double *bmin = malloc(n * sizeof *bmin), *cmin = malloc(n * sizeof *cmin);
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
        for (size_t i = 0; i < n; i++) bmin[i] = cmin[i] = 1e30;
        for (int p = 0; p < passes; p++) {
            llama_sampler_reset(gs);
            for (size_t i = 0; i < n; i++) {
                int32_t d = has_decoy(i, rows[k].r) ? decoy[i] : -1;
                gt_step_logits(logits, noise, nv, tok[i], d);
                double t0 = gt_now_us();
                for (int32_t j = 0; j < nv; j++) { cand[j].id = j; cand[j].logit = logits[j]; cand[j].p = 0; }
                llama_token_data_array base = { cand, (size_t)nv, -1, false };
                int32_t tb = argmax_cand(&base);
                double dt = gt_now_us() - t0;
                if (dt < bmin[i]) bmin[i] = dt;
                sink += tb;
                gt_step_logits(logits, noise, nv, tok[i], d);
                t0 = gt_now_us();
                for (int32_t j = 0; j < nv; j++) { cand[j].id = j; cand[j].logit = logits[j]; cand[j].p = 0; }
                llama_token_data_array arr = { cand, (size_t)nv, -1, false };
                int32_t t;
                if (rows[k].eager) {
                    llama_sampler_apply(gs, &arr);
                    t = argmax_cand(&arr);
                } else {
                    t = argmax_cand(&arr);
                    llama_token_data one = { t, 1.0f, 0.0f };
                    llama_token_data_array single = { &one, 1, -1, false };
                    llama_sampler_apply(gs, &single);
                    if (single.data[0].logit == -INFINITY) {
                        llama_sampler_apply(gs, &arr);
                        t = argmax_cand(&arr);
                    }
                }
                llama_sampler_accept(gs, t);
                dt = gt_now_us() - t0;
                if (dt < cmin[i]) cmin[i] = dt;
                if (t != tok[i]) { fprintf(stderr, "step %zu: drew %d expected %d\n", i, t, tok[i]); return 1; }
            }
        }
        double sb = 0, sc = 0;
        for (size_t i = 0; i < n; i++) { sb += bmin[i]; sc += cmin[i]; }
        printf("| %s | %.1f | %.1f | %.3f |\n", rows[k].name, sb / n, sc / n, sc / sb);
    }
    llama_sampler_free(gs);
    llama_model_free(model);
    free(noise); free(logits); free(cand); free(bmin); free(cmin);
    return 0;
}
