/*
 * tokenize_llama.c — llama.cpp's side of bench/tokenize: time llama_tokenize
 * (libllama, vocab only) on a text file, in process, the same way
 * bench/tokenize.c times ember_tokenize. Not part of the ember build:
 * bench/tokenize.sh compiles it against the llama.cpp tree.
 *
 * usage: tokenize_llama MODEL.gguf FILE [REPEATS]
 * prints: "llama.cpp load_ms=.. tokenize_ms_min=.. tokenize_ms_median=.. n_tokens=.."
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud) { (void)level; (void)text; (void)ud; }

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: tokenize_llama MODEL FILE [REPEATS]\n"); return 2; }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (reps < 1) reps = 1;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (fread(text, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    double t0 = now_ms();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    double t1 = now_ms();
    int32_t cap = (int32_t)n + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    double *ms = malloc(sizeof(double) * (size_t)reps);
    int32_t nt = 0;
    for (int r = 0; r < reps; r++) {
        double a = now_ms();
        nt = llama_tokenize(vocab, text, (int32_t)n, ids, cap, false, false);
        ms[r] = now_ms() - a;
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmpd);
    printf("llama.cpp load_ms=%.1f tokenize_ms_min=%.1f tokenize_ms_median=%.1f n_tokens=%d\n",
           t1 - t0, ms[0], ms[reps / 2], nt);
    llama_model_free(model);
    return 0;
}
