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
 * --kl-divergence-cpu: fidelity of this run's backend (the GPU with -ngl)
 * against the CPU backend, as llama-perplexity's --kl-divergence measures a
 * model against a base: the same chunks are decoded by a second context on
 * the CPU (the model loaded again with -ngl 0, the file mapped once more),
 * and for every scored position KL(P_cpu || P_this) = sum_i p_i (log p_i -
 * log q_i) over the whole vocabulary (log-softmax in double), whether both
 * put the same token first ("Same top p"), and both perplexities. Printed
 * as llama-perplexity prints its KL block (mean KLD with its standard error,
 * median, 99th percentile, maximum; same top p; ln(PPL(Q)/PPL(base))), and
 * with --kl-json FILE as JSON (also every position's KLD in scoring order,
 * "kld_by_position": chunk c's position first_scored + i at c * per_chunk
 * + i), with the first --kl-dump N positions' two logits rows, base and
 * test (for an independent check of the arithmetic).
 * Owns: the options and that computation. Must not: change the model.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "serve_setup.h"   /* serve_parse_kv_type */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ember perplexity -m FILE -f TEXT [-c N] [-b N] [-t N] [--chunks N]\n"
        "  -m, --model FILE   GGUF model\n"
        "  -f, --file TEXT    text to score\n"
        "  -c, --ctx-size N   tokens per chunk (default 512)\n"
        "  -b, --batch-size N tokens per decode call (default min(n_ctx, 512))\n"
        "  -t, --threads N    (default: all cores)\n"
        "      --chunks N     score at most N chunks (default: all)\n"
        "  -ctk, -ctv TYPE    KV cache types of this run (f16, q8_0, f32; default f16; the CPU base keeps f16)\n"
        "      --kl-divergence-cpu  also decode every chunk on the CPU backend and report the KL divergence\n"
        "                     of this run's logits from the CPU's, same top-1 and both perplexities\n"
        "      --kl-json FILE write those statistics as JSON\n"
        "      --kl-dump N    with --kl-json: include the first N scored positions' logits rows (base, test)\n");
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

/* log-softmax of logits[0..n) into out (double; float exponentials as nll_of) */
static void log_softmax(const float *logits, int32_t n, double *out)
{
    float max_l = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max_l) max_l = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += expf(logits[i] - max_l);
    const double ls = log(sum);
    for (int32_t i = 0; i < n; i++) out[i] = (double)(logits[i] - max_l) - ls;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* v as a JSON number, or null when it is not finite (JSON has no NaN/Inf) */
static void json_num(FILE *f, const char *sep, double v, bool full)
{
    if (isfinite(v)) fprintf(f, full ? "%s%.17g" : "%s%.9g", sep, v);
    else fprintf(f, "%snull", sep);
}

/* KL statistics of a run against the CPU base */
typedef struct kl_stats {
    double *kld;         /* [count] per scored position */
    long count, cap, same_top;
    double nll_base, nll_base2;
    FILE *dump;          /* JSON rows of the first n_dump positions, or NULL */
    long n_dump;
} kl_stats;

/* One scored position: base (CPU) and test logits, the true next token. */
static bool kl_add(kl_stats *k, const float *base, const float *test, int32_t n, ember_token next, double *lp, double *lq)
{
    log_softmax(base, n, lp);
    log_softmax(test, n, lq);
    double kl = 0.0;
    for (int32_t i = 0; i < n; i++) kl += exp(lp[i]) * (lp[i] - lq[i]);
    if (k->count == k->cap) {
        const long cap = k->cap ? 2 * k->cap : 1024;
        double *v = realloc(k->kld, sizeof *v * (size_t)cap);
        if (!v) return false;
        k->kld = v;
        k->cap = cap;
    }
    if (k->dump && k->count < k->n_dump) {
        fprintf(k->dump, "%s{\"kld\": ", k->count ? ", " : "");
        json_num(k->dump, "", kl, true);
        fprintf(k->dump, ", \"base\": [");
        for (int32_t i = 0; i < n; i++) json_num(k->dump, i ? ", " : "", base[i], false);
        fprintf(k->dump, "], \"test\": [");
        for (int32_t i = 0; i < n; i++) json_num(k->dump, i ? ", " : "", test[i], false);
        fprintf(k->dump, "]}");
    }
    k->kld[k->count++] = kl;
    k->same_top += argmax(base, n) == argmax(test, n);
    k->nll_base += -lp[next];
    k->nll_base2 += lp[next] * lp[next];
    return true;
}

int cmd_perplexity(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *kl_json = NULL;
    long n_ctx = 512, n_batch = 0, n_threads = 0, n_chunks = -1, kl_dump = 0;
    bool kl = false;
    ember_kv_type type_k = EMBER_KV_F16, type_v = EMBER_KV_F16;
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
        bool is_kj = !strcmp(a, "--kl-json"), is_kd = !strcmp(a, "--kl-dump");
        bool is_ck = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k"), is_cv = !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v");
        if (!strcmp(a, "--kl-divergence-cpu")) {
            kl = true;
            continue;
        }
        if (!(is_m || is_f || is_c || is_b || is_t || is_n || is_kj || is_kd || is_ck || is_cv)) {
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
        else if (is_kj) kl_json = v;
        else if (is_kd && !cli_int(a, v, 0, 1 << 20, &kl_dump)) return 2;
        else if ((is_ck || is_cv) && !serve_parse_kv_type(v, is_ck ? &type_k : &type_v)) {
            fprintf(stderr, "ember perplexity: %s expects f16, q8_0 or f32\n", a);
            return 2;
        }
    }
    if ((kl_json || kl_dump) && !kl) {
        fprintf(stderr, "ember perplexity: --kl-json and --kl-dump need --kl-divergence-cpu\n");
        return 2;
    }
    if (kl_dump && !kl_json) {
        fprintf(stderr, "ember perplexity: --kl-dump needs --kl-json FILE\n");
        return 2;
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
    ember_context *ctx = NULL, *bctx = NULL;
    ember_batch batch = {0};
    cli_model bm = {0};   /* --kl-divergence-cpu: the model again, on the CPU */
    kl_stats ks = {0};
    double *lp = NULL, *lq = NULL;
    FILE *kj = NULL;
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
    cp.type_k = type_k;
    cp.type_v = type_v;
    if ((st = ember_context_new(cm.model, &cp, &ctx)) != EMBER_OK) {
        fail("context", st);
        goto out;
    }
    cp.type_k = cp.type_v = EMBER_KV_F16;   /* the base's (the CPU default) */
    if ((st = ember_batch_init((int32_t)n_batch, &batch)) != EMBER_OK) {
        fail("batch", st);
        goto out;
    }
    if (kl) {
        const int32_t ngl = cli_n_gpu_layers;
        cli_n_gpu_layers = 0;
        st = cli_model_load(model, &bm);
        cli_n_gpu_layers = ngl;
        if (st != EMBER_OK) {
            fail("base model (CPU)", st);
            goto out;
        }
        if ((st = ember_context_new(bm.model, &cp, &bctx)) != EMBER_OK) {
            fail("base context (CPU)", st);
            goto out;
        }
        lp = malloc(sizeof *lp * (size_t)n_vocab);
        lq = malloc(sizeof *lq * (size_t)n_vocab);
        if (!lp || !lq) {
            fprintf(stderr, "ember: out of memory for the KL rows\n");
            goto out;
        }
        if (kl_json && !(kj = fopen(kl_json, "w"))) {
            fprintf(stderr, "ember: cannot write %s\n", kl_json);
            goto out;
        }
        if (kj) {
            fprintf(kj, "{\"dump\": [");
            ks.dump = kj;
            ks.n_dump = kl_dump;
        }
    }
    fprintf(stderr, "ember: %zu tokens, %ld chunks of %ld, scoring positions [%ld, %ld) of each\n", n_tokens,
            n_chunk, n_ctx, n_ctx / 2, n_ctx - 1);

    const long first = n_ctx / 2;
    double nll = 0.0, nll2 = 0.0;
    long count = 0;
    double t0 = cli_now();
    for (long c = 0; c < n_chunk; c++) {
        const ember_token *chunk = tokens + (size_t)c * (size_t)n_ctx;
        if ((st = ember_seq_remove(ctx, 0)) != EMBER_OK || (bctx && (st = ember_seq_remove(bctx, 0)) != EMBER_OK)) {
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
            /* the base's rows stay in its own context's logits buffer while this
             * run decodes (each context has its own backend and buffers), so
             * they are read in place: no copy of n_batch x n_vocab floats */
            if (bctx && (st = ember_decode(bctx, &batch)) != EMBER_OK) {
                fail("decode (CPU base)", st);
                goto out;
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
                const float *bl = bctx ? ember_get_logits(bctx, k) : NULL;
                if (bctx && !bl) {
                    fprintf(stderr, "ember: no base logits for position %ld\n", pos);
                    goto out;
                }
                if (bctx && !kl_add(&ks, bl, lg, n_vocab, chunk[pos + 1], lp, lq)) {
                    fprintf(stderr, "ember: out of memory for the KL statistics\n");
                    goto out;
                }
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
    if (bctx && ks.count > 0) {
        /* llama-perplexity's KL block (tools/perplexity/perplexity.cpp, kl_divergence) */
        double sum = 0.0, sum2 = 0.0;
        for (long i = 0; i < ks.count; i++) {
            sum += ks.kld[i];
            sum2 += ks.kld[i] * ks.kld[i];
        }
        const double mk = sum / (double)ks.count, vk = sum2 / (double)ks.count - mk * mk;
        const double ek = ks.count > 1 && vk > 0 ? sqrt(vk / (double)(ks.count - 1)) : 0.0;
        if (kj) {   /* every scored position's KLD in scoring order (chunk-major), before the sort */
            fprintf(kj, "], \"kld_by_position\": [");
            for (long i = 0; i < ks.count; i++) json_num(kj, i ? ", " : "", ks.kld[i], false);
        }
        qsort(ks.kld, (size_t)ks.count, sizeof *ks.kld, cmp_double);
        const double kmed = ks.kld[ks.count / 2], k99 = ks.kld[(long)(0.99 * (double)(ks.count - 1))];
        const double mb = ks.nll_base / (double)ks.count, ppl_b = exp(mb);
        const double same = (double)ks.same_top / (double)ks.count;
        printf("====== Perplexity statistics (vs the CPU backend) ======\n");
        printf("Mean PPL(Q)                   : %10.6f\n", ppl);
        printf("Mean PPL(base)                : %10.6f\n", ppl_b);
        printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f\n", mean - mb);
        printf("====== KL divergence statistics ======\n");
        printf("Mean    KLD: %10.6f +/- %10.6f\n", mk, ek);
        printf("Maximum KLD: %10.6f\n", ks.kld[ks.count - 1]);
        printf("99.0%%   KLD: %10.6f\n", k99);
        printf("Median  KLD: %10.6f\n", kmed);
        printf("====== Token probability statistics ======\n");
        printf("Same top p: %6.3f %%\n", 100.0 * same);
        if (kj) {
            fprintf(kj, "], \"n\": %ld, \"first_scored\": %ld, \"per_chunk\": %ld", ks.count, first,
                    n_ctx - 1 - first);
            const char *keys[] = {"mean_kld", "mean_kld_err", "median_kld", "p99_kld", "max_kld", "same_top", "ppl",
                                  "ppl_base"};
            const double vals[] = {mk, ek, kmed, k99, ks.kld[ks.count - 1], same, ppl, ppl_b};
            for (size_t q = 0; q < sizeof vals / sizeof *vals; q++) {
                fprintf(kj, ", \"%s\": ", keys[q]);
                json_num(kj, "", vals[q], true);
            }
            fprintf(kj, "}\n");
            if (fclose(kj) != 0) {
                kj = NULL;
                fprintf(stderr, "ember: cannot write %s\n", kl_json);
                goto out;
            }
            kj = NULL;
        }
    }
    fprintf(stderr, "ember: %ld chunks, %ld scored tokens, %.2f s (%.1f tok/s) | peak RSS %.1f MiB\n", n_chunk, count,
            dt, (double)(n_chunk * n_ctx) / dt, (double)cli_peak_rss() / (1024.0 * 1024.0));
    rc = 0;
out:
    if (kj) fclose(kj);
    free(ks.kld);
    free(lp);
    free(lq);
    free(tokens);
    ember_batch_free(&batch);
    ember_context_free(bctx);
    ember_context_free(ctx);
    if (bm.model) cli_model_free(&bm);
    cli_model_free(&cm);
    return rc;
}
