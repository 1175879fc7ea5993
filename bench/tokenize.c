/*
 * tokenize.c — benchmark: ember_tokenize on a text file (default: the 1 MiB
 * mixed corpus text), in process, with the vocabulary load timed apart.
 * bench/tokenize.sh runs it beside bench/llama/tokenize_llama.c on the same
 * file and machine and records the ratio in bench/results/tokenizer.md.
 *
 * usage: tokenize MODEL.gguf FILE [REPEATS]
 * prints: "ember load_ms=.. tokenize_ms_min=.. tokenize_ms_median=.. n_tokens=.."
 * (add_special=false, parse_special=false, as the llama.cpp side).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

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
    if (argc < 3) { fprintf(stderr, "usage: tokenize MODEL FILE [REPEATS]\n"); return 2; }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (reps < 1) reps = 1;
    FILE *f = fopen(argv[2], "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", argv[2]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) { fclose(f); return 1; }
    fclose(f);
    double t0 = now_ms();
    ember_gguf *g;
    ember_vocab *v;
    if (ember_gguf_open(argv[1], &g) || ember_vocab_load(g, &v)) {
        fprintf(stderr, "%s\n", ember_last_error());
        return 1;
    }
    ember_gguf_close(g);
    double t1 = now_ms();
    double *ms = malloc(sizeof(double) * (size_t)reps);
    size_t nt = 0;
    for (int r = 0; r < reps; r++) {
        ember_token *ids;
        double a = now_ms();
        if (ember_tokenize(v, text, (size_t)n, false, false, &ids, &nt)) {
            fprintf(stderr, "%s\n", ember_last_error());
            return 1;
        }
        ms[r] = now_ms() - a;
        free(ids);
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmpd);
    printf("ember load_ms=%.1f tokenize_ms_min=%.1f tokenize_ms_median=%.1f n_tokens=%zu\n",
           t1 - t0, ms[0], ms[reps / 2], nt);
    ember_vocab_free(v);
    free(ms);
    free(text);
    return 0;
}
