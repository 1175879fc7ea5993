/*
 * cuda_check.c — the CUDA backend against the CPU backend on a real model:
 * greedy continuations of 16 prompts (same ids?), first-position logits
 * (max |diff| relative to the logits' range), and tokens/second of each.
 *
 *   cuda_check MODEL [-n N_GEN] [-p N_PROMPTS] [-g GOLDEN.json]
 * With -g (a tests/golden/runtime JSON file, made by llama.cpp) the prompts are
 * the golden's prompt_ids and each backend's continuation is also compared
 * with llama.cpp's (its "tokens", up to its length).
 * Prints, per prompt, the index of the first differing token (or "same")
 * and, at a divergence, the CPU's top-2 logit margin there (a near-tie
 * explains it). Exit 0 always: the numbers are the result (issue 7 wants
 * >= 15 of 16 prompts equal over 128 tokens).
 * Must not: be used as a test oracle for the CPU backend (both are ours).
 */
#include "ember.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const k_prompts[16] = {
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "To make a good cup of coffee, you should",
    "The three laws of thermodynamics are",
    "def fibonacci(n):",
    "My favourite book is",
    "In 1969, Neil Armstrong",
    "The best way to learn a new language is",
    "Photosynthesis is the process by which",
    "Here is a list of ten fruits: apple,",
    "The quick brown fox",
    "Dear hiring manager, I am writing to apply for",
    "The weather today is",
    "A robot walks into a bar and",
    "SELECT name, age FROM users WHERE",
    "The most important thing about friendship is",
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *x, int n, float *margin)
{
    int best = 0, second = -1;
    for (int i = 1; i < n; i++) {
        if (x[i] > x[best]) {
            second = best;
            best = i;
        } else if (second < 0 || x[i] > x[second]) {
            second = i;
        }
    }
    if (margin) *margin = second >= 0 ? x[best] - x[second] : 0.f;
    return best;
}

/* Greedy continuation: ids[0..n_prompt) in, gen[n_gen] out; first-position
 * logits copied to first_logits; margins[i] = top-2 margin at step i. */
static int run(ember_context *ctx, int nv, const ember_token *ids, int n_prompt, int n_gen, ember_token *gen,
               float *first_logits, float *margins, double *secs)
{
    ember_batch b;
    if (ember_batch_init(n_prompt + 1, &b) != EMBER_OK) return -1;
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.seq_id[i] = 0;
        b.logits[i] = i == n_prompt - 1;
    }
    b.n_tokens = n_prompt;
    const double t0 = now_s();
    int pos = n_prompt;
    for (int g = 0; g < n_gen; g++) {
        if (ember_decode(ctx, &b) != EMBER_OK) {
            fprintf(stderr, "decode: %s\n", ember_last_error());
            ember_batch_free(&b);
            return -1;
        }
        const float *lg = ember_get_logits(ctx, -1);
        if (g == 0 && first_logits) memcpy(first_logits, lg, sizeof(float) * nv);
        gen[g] = argmax(lg, nv, &margins[g]);
        b.n_tokens = 1;
        b.token[0] = gen[g];
        b.pos[0] = pos++;
        b.seq_id[0] = 0;
        b.logits[0] = 1;
    }
    *secs = now_s() - t0;
    ember_batch_free(&b);
    ember_seq_remove(ctx, 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [-n N_GEN] [-p N_PROMPTS]\n", argv[0]);
        return 2;
    }
    int n_gen = 128, n_prompts = 16;
    const char *golden_path = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-p")) n_prompts = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-g")) golden_path = argv[i + 1];
    }
    if (n_prompts > 16) n_prompts = 16;
    json_t *golden = NULL, *gens = NULL;
    if (golden_path) {
        json_error_t je;
        golden = json_load_file(golden_path, 0, &je);
        gens = golden ? json_object_get(golden, "generations") : NULL;
        if (!json_is_array(gens)) {
            fprintf(stderr, "%s: no generations array (%s)\n", golden_path, je.text);
            return 1;
        }
        if ((int)json_array_size(gens) < n_prompts) n_prompts = (int)json_array_size(gens);
    }
    int same_llama[2] = {0, 0};
    ember_model *m[2] = {NULL, NULL};
    ember_context *c[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        ember_model_params mp = ember_model_default_params();
        mp.n_gpu_layers = k == 0 ? 0 : -1;
        if (ember_model_load(argv[1], &mp, &m[k]) != EMBER_OK) {
            fprintf(stderr, "load: %s\n", ember_last_error());
            return 1;
        }
        ember_context_params cp = ember_context_default_params();
        cp.n_ctx = 1024;
        cp.n_batch = 512;
        cp.n_ubatch = 512;
        cp.n_seq_max = 1;
        if (ember_context_new(m[k], &cp, &c[k]) != EMBER_OK) {
            fprintf(stderr, "context: %s\n", ember_last_error());
            return 1;
        }
    }
    const int nv = ember_model_n_vocab(m[0]);
    float *lg[2] = {malloc(sizeof(float) * nv), malloc(sizeof(float) * nv)};
    ember_token *gen[2] = {malloc(sizeof(ember_token) * n_gen), malloc(sizeof(ember_token) * n_gen)};
    float *mar[2] = {malloc(sizeof(float) * n_gen), malloc(sizeof(float) * n_gen)};
    int same = 0;
    double secs[2] = {0, 0}, worst_rel = 0;
    printf("model %s (%s), %d prompts x %d greedy tokens, CPU vs CUDA\n", argv[1], ember_model_arch(m[0]), n_prompts,
           n_gen);
    for (int p = 0; p < n_prompts; p++) {
        ember_token *ids = NULL;
        size_t n_ids = 0;
        json_t *gj = gens ? json_array_get(gens, (size_t)p) : NULL;
        if (gj) {
            json_t *pi = json_object_get(gj, "prompt_ids");
            n_ids = json_array_size(pi);
            ids = malloc(sizeof(ember_token) * (n_ids + 1));
            for (size_t i = 0; i < n_ids; i++) ids[i] = (ember_token)json_integer_value(json_array_get(pi, i));
        } else if (ember_tokenize(ember_model_vocab(m[0]), k_prompts[p], strlen(k_prompts[p]), true, false, &ids, &n_ids) !=
            EMBER_OK) {
            fprintf(stderr, "tokenize: %s\n", ember_last_error());
            return 1;
        }
        for (int k = 0; k < 2; k++) {
            double s = 0;
            if (run(c[k], nv, ids, (int)n_ids, n_gen, gen[k], lg[k], mar[k], &s)) return 1;
            secs[k] += s;
        }
        float lo = lg[0][0], hi = lg[0][0];
        double maxd = 0;
        for (int i = 0; i < nv; i++) {
            if (lg[0][i] < lo) lo = lg[0][i];
            if (lg[0][i] > hi) hi = lg[0][i];
            const double d = fabs((double)lg[0][i] - lg[1][i]);
            if (d > maxd) maxd = d;
        }
        const double rel = maxd / (hi - lo);
        if (rel > worst_rel) worst_rel = rel;
        if (gj) {
            json_t *gt = json_object_get(gj, "tokens");
            int nl = (int)json_array_size(gt);
            if (nl > n_gen) nl = n_gen;
            for (int k = 0; k < 2; k++) {
                int d = -1;
                for (int g = 0; g < nl; g++)
                    if (gen[k][g] != (ember_token)json_integer_value(json_array_get(gt, (size_t)g))) {
                        d = g;
                        break;
                    }
                if (d < 0) same_llama[k]++;
                printf("  %s vs llama.cpp (%d tokens): %s", k ? "CUDA" : "CPU ", nl, d < 0 ? "same\n" : "");
                if (d >= 0) printf("differs at %d\n", d);
            }
        }
        int diff = -1;
        for (int g = 0; g < n_gen; g++)
            if (gen[0][g] != gen[1][g]) {
                diff = g;
                break;
            }
        if (diff < 0) {
            same++;
            printf("prompt %2d: same (%zu prompt tokens); first logits max|diff| %.3g = %.2e of range\n", p, n_ids,
                   maxd, rel);
        } else {
            printf("prompt %2d: differs at token %d (CPU top-2 margin there %.4f); first logits max|diff| %.3g = "
                   "%.2e of range\n", p, diff, mar[0][diff], maxd, rel);
        }
        free(ids);
    }
    printf("equal continuations: %d of %d; worst first-position logit diff %.2e of the logit range\n", same,
           n_prompts, worst_rel);
    if (golden)
        printf("equal to llama.cpp's golden continuation: CPU %d of %d, CUDA %d of %d\n", same_llama[0], n_prompts,
               same_llama[1], n_prompts);
    json_decref(golden);
    printf("time (prefill + %d decodes, all prompts): CPU %.2f s, CUDA %.2f s\n", n_gen, secs[0], secs[1]);
    for (int k = 0; k < 2; k++) {
        free(lg[k]);
        free(gen[k]);
        free(mar[k]);
        ember_context_free(c[k]);
        ember_model_free(m[k]);
    }
    return 0;
}
