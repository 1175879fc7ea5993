/*
 * perplexity.c — `ember perplexity`: perplexity of a text, computed the way
 * llama.cpp's llama-perplexity does it (tools/perplexity/perplexity.cpp,
 * default mode), so that the two numbers can be compared:
 *   - the whole file is tokenized with special tokens added (BOS when the
 *     vocabulary asks for it) and split into n_chunk = n_tokens / n_ctx
 *     chunks of n_ctx tokens (a tail shorter than n_ctx is dropped);
 *   - each chunk starts from an empty cache; its first token is replaced by
 *     BOS when the vocabulary adds BOS;
 *   - only the second half is scored: for positions j in [n_ctx/2, n_ctx-1)
 *     the negative log-likelihood of token j+1 under softmax(logits[j]);
 *   - PPL = exp(mean nll); its error is PPL * sqrt((E[nll^2] - E[nll]^2) /
 *     (count - 1)), as printed in llama.cpp's "Final estimate" line.
 * Owns: the options and that computation. Must not: change the model.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ember perplexity -m FILE -f TEXT [-c N] [-b N] [-t N] [--chunks N]\n"
        "  -m, --model FILE   GGUF model\n"
        "  -f, --file TEXT    text to score\n"
        "  -c, --ctx-size N   tokens per chunk (default 512)\n"
        "  -b, --batch-size N tokens per decode call (default min(n_ctx, 512))\n"
        "  -t, --threads N    (default: all cores)\n"
        "      --chunks N     score at most N chunks (default: all)\n");
}

static int fail(const char *what, ember_status st)
{
    fprintf(stderr, "ember: %s: %s: %s\n", what, ember_status_name(st), ember_last_error());
    return 1;
}

/* -log softmax(logits)[tok] over n entries, in double */
static double nll_of(const float *logits, int32_t n, ember_token tok)
{
    float max_l = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max_l) max_l = logits[i];
    double sum = 0.0;   /* float exponentials, double sum: as llama-perplexity */
    for (int32_t i = 0; i < n; i++)
        sum += expf(logits[i] - max_l);
    return -((double)(logits[tok] - max_l) - log(sum));
}

int cmd_perplexity(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    long n_ctx = 512, n_batch = 0, n_threads = 0, n_chunks = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const int g = cli_gpu_option(argc, argv, &i);
        if (g < 0) return 2;
        if (g > 0) continue;
        bool is_m = !strcmp(a, "-m") || !strcmp(a, "--model"), is_f = !strcmp(a, "-f") || !strcmp(a, "--file");
        bool is_c = !strcmp(a, "-c") || !strcmp(a, "--ctx-size"), is_b = !strcmp(a, "-b") || !strcmp(a, "--batch-size");
        bool is_t = !strcmp(a, "-t") || !strcmp(a, "--threads"), is_n = !strcmp(a, "--chunks");
        if (!(is_m || is_f || is_c || is_b || is_t || is_n)) {
            fprintf(stderr, "ember perplexity: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!(v = cli_value(argc, argv, &i)))
            return 2;
        if (is_m) model = v;
        else if (is_f) file = v;
        else if (is_c && !cli_int(a, v, 4, 1 << 20, &n_ctx)) return 2;
        else if (is_b && !cli_int(a, v, 1, 1 << 20, &n_batch)) return 2;
        else if (is_t && !cli_int(a, v, 1, 1024, &n_threads)) return 2;
        else if (is_n && !cli_int(a, v, 1, 1L << 30, &n_chunks)) return 2;
    }
    if (!model || !file) {
        usage(stderr);
        return 2;
    }
    if (n_batch <= 0 || n_batch > n_ctx)
        n_batch = n_ctx < 512 ? n_ctx : 512;

    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "ember: cannot open %s\n", file);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long flen = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = flen >= 0 ? malloc((size_t)flen + 1) : NULL;
    if (!text || fread(text, 1, (size_t)flen, f) != (size_t)flen) {
        fprintf(stderr, "ember: cannot read %s\n", file);
        free(text);
        fclose(f);
        return 1;
    }
    fclose(f);
    text[flen] = '\0';

    cli_model cm;
    ember_status st = cli_model_load(model, &cm);
    if (st != EMBER_OK) {
        free(text);
        return fail(model, st);
    }
    int rc = 1;
    ember_token *tokens = NULL;
    size_t n_tokens = 0;
    ember_context *ctx = NULL;
    ember_batch batch = {0};
    st = ember_tokenize(cm.vocab, text, (size_t)flen, true, false, &tokens, &n_tokens);
    free(text);
    if (st != EMBER_OK) {
        fail("tokenize", st);
        goto out;
    }
    if (n_tokens < 2 * (size_t)n_ctx) {
        fprintf(stderr, "ember: need at least %ld tokens for -c %ld; %s has %zu\n", 2 * n_ctx, n_ctx, file,
                n_tokens);
        goto out;
    }
    const int32_t n_vocab = ember_model_n_vocab(cm.model);
    const bool add_bos = ember_vocab_add_bos(cm.vocab);
    const ember_token bos = ember_vocab_bos(cm.vocab);
    long n_chunk = (long)(n_tokens / (size_t)n_ctx);
    if (n_chunks > 0 && n_chunks < n_chunk)
        n_chunk = n_chunks;

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_seq_max = 1;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_ubatch = (uint32_t)(n_batch < 512 ? n_batch : 512);
    cp.n_threads = n_threads > 0 ? (int32_t)n_threads : cli_n_cpus();
    if ((st = ember_context_new(cm.model, &cp, &ctx)) != EMBER_OK) {
        fail("context", st);
        goto out;
    }
    if ((st = ember_batch_init((int32_t)n_batch, &batch)) != EMBER_OK) {
        fail("batch", st);
        goto out;
    }
    fprintf(stderr, "ember: %zu tokens, %ld chunks of %ld, scoring positions [%ld, %ld) of each\n", n_tokens,
            n_chunk, n_ctx, n_ctx / 2, n_ctx - 1);

    const long first = n_ctx / 2;
    double nll = 0.0, nll2 = 0.0;
    long count = 0;
    double t0 = cli_now();
    for (long c = 0; c < n_chunk; c++) {
        const ember_token *chunk = tokens + (size_t)c * (size_t)n_ctx;
        if ((st = ember_seq_remove(ctx, 0)) != EMBER_OK) {
            fail("clear", st);
            goto out;
        }
        for (long b0 = 0; b0 < n_ctx; b0 += n_batch) {
            int32_t m = (int32_t)(n_ctx - b0 < n_batch ? n_ctx - b0 : n_batch);
            batch.n_tokens = m;
            for (int32_t k = 0; k < m; k++) {
                long pos = b0 + k;
                batch.token[k] = (pos == 0 && add_bos && bos >= 0) ? bos : chunk[pos];
                batch.pos[k] = (ember_pos)pos;
                batch.seq_id[k] = 0;
                batch.logits[k] = pos >= first && pos < n_ctx - 1;
            }
            if ((st = ember_decode(ctx, &batch)) != EMBER_OK) {
                fail("decode", st);
                goto out;
            }
            for (int32_t k = 0; k < m; k++) {
                long pos = b0 + k;
                if (!batch.logits[k])
                    continue;
                const float *lg = ember_get_logits(ctx, k);
                if (!lg) {
                    fprintf(stderr, "ember: no logits for position %ld\n", pos);
                    goto out;
                }
                double v = nll_of(lg, n_vocab, chunk[pos + 1]);
                nll += v;
                nll2 += v * v;
                count++;
            }
        }
        printf("[%ld]%.4f,", c + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    printf("\n");
    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    double ppl = exp(mean);
    double err = var > 0 ? sqrt(var / (double)(count - 1)) * ppl : 0.0;
    double dt = cli_now() - t0;
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    fprintf(stderr, "ember: %ld chunks, %ld scored tokens, %.2f s (%.1f tok/s) | peak RSS %.1f MiB\n", n_chunk, count,
            dt, (double)(n_chunk * n_ctx) / dt, (double)cli_peak_rss() / (1024.0 * 1024.0));
    rc = 0;
out:
    free(tokens);
    ember_batch_free(&batch);
    ember_context_free(ctx);
    cli_model_free(&cm);
    return rc;
}
