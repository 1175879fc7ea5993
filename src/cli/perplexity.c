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
 *
 * KL divergence of this run (Q) from a base (P), as llama-perplexity's
 * --kl-divergence measures a model against a base: for every scored
 * position KL(P || Q) = sum_i p_i (log p_i - log q_i) over the whole
 * vocabulary, whether both put the same token first ("Same top p"), and
 * both perplexities; printed as llama-perplexity prints its KL block (mean
 * KLD with its standard error, median, 99th percentile, maximum; same top
 * p; ln(PPL(Q)/PPL(base))), and with --kl-json FILE as JSON (also every
 * position's KLD in scoring order, "kld_by_position": chunk c's position
 * first_scored + i at c * per_chunk + i), with the first --kl-dump N
 * positions' rows (for an independent check of the arithmetic: "test" this
 * run's logits, "test_lp" and "base_lp" the two log-prob rows the sum took,
 * "base" the CPU base's logits with --kl-divergence-cpu; "base_file" says
 * which mode wrote the JSON). Both
 * distributions enter the sum as float32 log-probabilities (log-softmax in
 * double with float exponentials, as llama-perplexity, rounded to float32:
 * the base file's precision), so every mode does the same arithmetic. The
 * base comes from one of:
 *   --kl-divergence-cpu: the same chunks decoded by a second context on the
 *     CPU (the model loaded again with -ngl 0, the file mapped once more),
 *     in this process: this run's backend (the GPU with -ngl) against the
 *     CPU backend;
 *   --kl-divergence-base FILE (llama-perplexity's two-run workflow): without
 *     --kl-divergence the run is a plain perplexity run that also saves its
 *     log-probabilities to FILE (the format below, written chunk by chunk);
 *     with --kl-divergence a later run reads FILE, checks that it was made
 *     with the same n_ctx, n_vocab and tokens, and compares against it.
 *
 * Base file (our own format; llama-perplexity's "_logits_" file keeps
 * uint16-quantized log-probs, this one float32), little-endian:
 *   char     magic[8]   "EMBKLB01"
 *   uint32   version    1
 *   uint32   n_ctx, n_vocab, n_chunk
 *   uint32   first      first scored position of a chunk (n_ctx / 2)
 *   uint32   n_scored   scored positions per chunk (n_ctx - 1 - first)
 *   int32    tokens[n_chunk * n_ctx]  the text's tokens as tokenized (a
 *                       chunk's first token as in the text, not the BOS
 *                       that replaces it in the decode)
 *   float32  logp[n_chunk][n_scored][n_vocab]  log-softmax of the logits at
 *                       chunk position first + j (predicting token
 *                       first + j + 1), chunk-major
 * so its size is 32 + 4 n_chunk n_ctx + 4 n_chunk n_scored n_vocab bytes
 * (SmolLM2, -c 512: 24 MiB a chunk; Gemma 3: 255 MiB a chunk).
 * Owns: the options, that computation and that file format. Must not:
 * change the model.
 */
#include <math.h>
#include <stdint.h>
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
        "      --chunks N     score at most N chunks (default: all; against a base file: the base's)\n"
        "  -ctk, -ctv TYPE    KV cache types of this run (f16, q8_0, f32; default f16; the CPU base keeps f16)\n"
        "      --kl-divergence-cpu  also decode every chunk on the CPU backend and report the KL divergence\n"
        "                     of this run's logits from the CPU's, same top-1 and both perplexities\n"
        "      --kl-divergence-base FILE  alone: save this run's log-probabilities to FILE as a base\n"
        "                     (float32, n_ctx/2-1 rows of n_vocab per chunk: large)\n"
        "      --kl-divergence with --kl-divergence-base FILE: report the KL divergence of this run from\n"
        "                     that saved base (same -c, model vocabulary and text), as --kl-divergence-cpu\n"
        "      --kl-json FILE write those statistics as JSON\n"
        "      --kl-dump N    with --kl-json: include the first N scored positions' rows (base, test)\n");
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

/* log-softmax of logits[0..n) into out[0..n), natural-log probabilities
 * rounded to float32 (computed in double with float exponentials, as
 * nll_of); the rows of the base file and of every KL sum. */
static void logprobs_f32(const float *logits, int32_t n, float *out)
{
    float max_l = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max_l) max_l = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += expf(logits[i] - max_l);
    const double ls = log(sum);
    for (int32_t i = 0; i < n; i++) out[i] = (float)((double)(logits[i] - max_l) - ls);
}

/* index of the first largest of x[0..n) */
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

/* ", \"key\": [x0, ..., x(n-1)]" of a float row into the JSON dump */
static void json_row(FILE *f, const char *key, const float *x, int32_t n)
{
    fprintf(f, ", \"%s\": [", key);
    for (int32_t i = 0; i < n; i++) json_num(f, i ? ", " : "", x[i], false);
    fprintf(f, "]");
}

/* KL statistics of a run against a base (the CPU backend or a base file) */
typedef struct kl_stats {
    double *kld;         /* [count] per scored position, nats */
    long count, cap, same_top;
    double nll_base, nll_base2;   /* sums of -log p(next) under the base */
    double nll_test;     /* sum of -log q(next) under this run (float32 log-probs, as the base's) */
    FILE *dump;          /* JSON rows of the first n_dump positions, or NULL */
    long n_dump;
} kl_stats;

/* One scored position: lp / lq the base's / this run's log-probabilities
 * over n entries (logprobs_f32 rows), next the true next token. For the
 * dump, base_logits (the CPU base's logits; NULL against a base file) and
 * test_logits (this run's, [n]) are written beside lp ("base_lp") and lq
 * ("test_lp"). The KL sum is in double. False when out of memory. */
static bool kl_add(kl_stats *k, const float *lp, const float *lq, int32_t n, ember_token next,
                   const float *base_logits, const float *test_logits)
{
    double kl = 0.0;
    for (int32_t i = 0; i < n; i++) {
        const double p = (double)lp[i];
        if (p > -INFINITY) kl += exp(p) * (p - (double)lq[i]);   /* p = 0 contributes 0 */
    }
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
        if (base_logits) json_row(k->dump, "base", base_logits, n);
        json_row(k->dump, "base_lp", lp, n);
        json_row(k->dump, "test", test_logits, n);
        json_row(k->dump, "test_lp", lq, n);
        fprintf(k->dump, "}");
    }
    k->kld[k->count++] = kl;
    k->same_top += argmax(lp, n) == argmax(lq, n);
    k->nll_base += -(double)lp[next];
    k->nll_base2 += (double)lp[next] * (double)lp[next];
    k->nll_test += -(double)lq[next];
    return true;
}

/* Print llama-perplexity's KL block (tools/perplexity/perplexity.cpp,
 * kl_divergence) for k (count > 0) against `against` (words for the
 * header); both perplexities there are of the float32 log-probs the KL sum
 * uses (PPL(Q) may differ from the "Final estimate" line, whose nll is in
 * double, in the 8th digit; against itself the ratio is exactly 1); with kj also
 * the JSON tail (kld_by_position, n, first_scored, per_chunk, the
 * statistics) after the open dump list, closing the object. Sorts k->kld.
 * False when writing kj fails (kj is closed either way). */
static bool kl_report(kl_stats *k, const char *against, FILE *kj, const char *kj_path,
                      long first, long per_chunk)
{
    double sum = 0.0, sum2 = 0.0;
    for (long i = 0; i < k->count; i++) {
        sum += k->kld[i];
        sum2 += k->kld[i] * k->kld[i];
    }
    const double mk = sum / (double)k->count, vk = sum2 / (double)k->count - mk * mk;
    const double ek = k->count > 1 && vk > 0 ? sqrt(vk / (double)(k->count - 1)) : 0.0;
    if (kj) {   /* every scored position's KLD in scoring order (chunk-major), before the sort */
        fprintf(kj, "], \"kld_by_position\": [");
        for (long i = 0; i < k->count; i++) json_num(kj, i ? ", " : "", k->kld[i], false);
    }
    qsort(k->kld, (size_t)k->count, sizeof *k->kld, cmp_double);
    const double kmed = k->kld[k->count / 2], k99 = k->kld[(long)(0.99 * (double)(k->count - 1))];
    const double kmax = k->kld[k->count - 1];
    const double mb = k->nll_base / (double)k->count, ppl_b = exp(mb);
    const double mean_nll = k->nll_test / (double)k->count, ppl = exp(mean_nll);
    const double same = (double)k->same_top / (double)k->count;
    printf("====== Perplexity statistics (vs %s) ======\n", against);
    printf("Mean PPL(Q)                   : %10.6f\n", ppl);
    printf("Mean PPL(base)                : %10.6f\n", ppl_b);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f\n", mean_nll - mb);
    printf("====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f +/- %10.6f\n", mk, ek);
    printf("Maximum KLD: %10.6f\n", kmax);
    printf("99.0%%   KLD: %10.6f\n", k99);
    printf("Median  KLD: %10.6f\n", kmed);
    printf("====== Token probability statistics ======\n");
    printf("Same top p: %6.3f %%\n", 100.0 * same);
    if (!kj) return true;
    fprintf(kj, "], \"n\": %ld, \"first_scored\": %ld, \"per_chunk\": %ld", k->count, first, per_chunk);
    const char *keys[] = {"mean_kld", "mean_kld_err", "median_kld", "p99_kld", "max_kld", "same_top", "ppl",
                          "ppl_base"};
    const double vals[] = {mk, ek, kmed, k99, kmax, same, ppl, ppl_b};
    for (size_t q = 0; q < sizeof vals / sizeof *vals; q++) {
        fprintf(kj, ", \"%s\": ", keys[q]);
        json_num(kj, "", vals[q], true);
    }
    fprintf(kj, "}\n");
    if (fclose(kj) != 0) {
        fprintf(stderr, "ember: cannot write %s\n", kj_path);
        return false;
    }
    return true;
}

/* ---- the base file (format in the header comment) ---- */

#define KLB_MAGIC "EMBKLB01"
#define KLB_VERSION 1u
#define KLB_HEADER 32L   /* magic, version, n_ctx, n_vocab, n_chunk, first, n_scored */

/* Write the header and the tokens[0 .. n_chunk * n_ctx) of a base file to
 * f (opened "wb"). False on a write error. */
static bool klb_write_header(FILE *f, long n_ctx, int32_t n_vocab, long n_chunk, const ember_token *tokens)
{
    const uint32_t h[6] = {KLB_VERSION, (uint32_t)n_ctx, (uint32_t)n_vocab, (uint32_t)n_chunk,
                           (uint32_t)(n_ctx / 2), (uint32_t)(n_ctx - 1 - n_ctx / 2)};
    const size_t nt = (size_t)n_chunk * (size_t)n_ctx;
    _Static_assert(sizeof(ember_token) == 4, "tokens are stored as int32");
    return fwrite(KLB_MAGIC, 1, 8, f) == 8 && fwrite(h, sizeof *h, 6, f) == 6 &&
           fwrite(tokens, sizeof *tokens, nt, f) == nt;
}

/* Open the base file `path` for a run with n_ctx, n_vocab and this text's
 * tokens[0..n_tokens): checks the magic, version, that the header is
 * consistent with the file's size (a truncated or padded file is refused),
 * that n_ctx and n_vocab equal this run's and that the base's tokens are a
 * prefix of this text's. Returns the file positioned at the first log-prob
 * row and the base's chunk count in *n_chunk; NULL (a message on stderr,
 * nothing held) on any mismatch or read error. */
static FILE *klb_open(const char *path, long n_ctx, int32_t n_vocab, const ember_token *tokens, size_t n_tokens,
                      long *n_chunk)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ember: cannot open the KL base %s\n", path);
        return NULL;
    }
    char magic[8];
    uint32_t h[6];
    ember_token *bt = NULL;
    long fsize = -1;
    if (fseek(f, 0, SEEK_END) == 0) fsize = ftell(f);
    if (fsize < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "ember: cannot read the KL base %s\n", path);
        goto bad;
    }
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, KLB_MAGIC, 8) != 0) {
        fprintf(stderr, "ember: %s is not an ember KL base file (made by --kl-divergence-base without "
                        "--kl-divergence)\n", path);
        goto bad;
    }
    if (fread(h, sizeof *h, 6, f) != 6) {
        fprintf(stderr, "ember: the KL base %s is truncated (header)\n", path);
        goto bad;
    }
    if (h[0] != KLB_VERSION) {
        fprintf(stderr, "ember: the KL base %s has format version %u; this ember reads %u\n", path, h[0],
                KLB_VERSION);
        goto bad;
    }
    const uint32_t b_ctx = h[1], b_vocab = h[2], b_chunk = h[3];
    if (b_ctx < 4 || b_ctx > (1u << 20) || b_vocab < 1 || b_vocab > (1u << 26) || b_chunk < 1 ||
        h[4] != b_ctx / 2 || h[5] != b_ctx - 1 - b_ctx / 2) {
        fprintf(stderr, "ember: the KL base %s has an inconsistent header (n_ctx %u, n_vocab %u, n_chunk %u)\n",
                path, b_ctx, b_vocab, b_chunk);
        goto bad;
    }
    /* bytes per chunk (< 2^48) and the whole size, checked against the file's without overflow */
    const uint64_t per_chunk = 4u * (uint64_t)b_ctx + 4u * (uint64_t)h[5] * b_vocab;
    if ((uint64_t)(fsize - KLB_HEADER) / per_chunk != b_chunk || (uint64_t)(fsize - KLB_HEADER) % per_chunk) {
        fprintf(stderr, "ember: the KL base %s is %ld bytes; its header (n_ctx %u, n_vocab %u, %u chunks) "
                        "needs %llu: truncated or malformed\n", path, fsize, b_ctx, b_vocab, b_chunk,
                (unsigned long long)((uint64_t)KLB_HEADER + per_chunk * b_chunk));
        goto bad;
    }
    if ((long)b_ctx != n_ctx) {
        fprintf(stderr, "ember: the KL base %s was made with -c %u; this run has -c %ld\n", path, b_ctx, n_ctx);
        goto bad;
    }
    if ((int32_t)b_vocab != n_vocab) {
        fprintf(stderr, "ember: the KL base %s has a vocabulary of %u tokens; this model has %d\n", path,
                b_vocab, n_vocab);
        goto bad;
    }
    const size_t nt = (size_t)b_chunk * b_ctx;
    if (nt > n_tokens) {
        fprintf(stderr, "ember: the KL base %s scores %u chunks of %u tokens; this text has only %zu tokens\n",
                path, b_chunk, b_ctx, n_tokens);
        goto bad;
    }
    if (!(bt = malloc(sizeof *bt * nt)) || fread(bt, sizeof *bt, nt, f) != nt) {
        fprintf(stderr, "ember: cannot read the KL base's tokens from %s\n", path);
        goto bad;
    }
    for (size_t i = 0; i < nt; i++)
        if (bt[i] != tokens[i]) {
            fprintf(stderr, "ember: the KL base %s was made from another text: token %zu is %d there, %d here\n",
                    path, i, bt[i], tokens[i]);
            goto bad;
        }
    free(bt);
    *n_chunk = (long)b_chunk;
    return f;
bad:
    free(bt);
    fclose(f);
    return NULL;
}

/* Read the base's next log-prob row (n floats) from f into lp. False (a
 * message on stderr) when the file ends early or a value is no
 * log-probability (NaN or above 0, with a little room for rounding). */
static bool klb_read_row(FILE *f, const char *path, float *lp, int32_t n)
{
    if (fread(lp, sizeof *lp, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "ember: cannot read a log-prob row from the KL base %s\n", path);
        return false;
    }
    for (int32_t i = 0; i < n; i++)
        if (!(lp[i] <= 1e-3f)) {
            fprintf(stderr, "ember: the KL base %s holds %g where a log-probability belongs: malformed\n", path,
                    (double)lp[i]);
            return false;
        }
    return true;
}

typedef enum { KL_NONE, KL_CPU, KL_SAVE, KL_FILE } kl_mode;

int cmd_perplexity(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *kl_json = NULL, *kl_base = NULL;
    long n_ctx = 512, n_batch = 0, n_threads = 0, n_chunks = -1, kl_dump = 0;
    bool kl_cpu = false, kl_cmp = false;
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
        bool is_kj = !strcmp(a, "--kl-json"), is_kd = !strcmp(a, "--kl-dump"), is_kb = !strcmp(a, "--kl-divergence-base");
        bool is_ck = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k"), is_cv = !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v");
        if (!strcmp(a, "--kl-divergence-cpu")) {
            kl_cpu = true;
            continue;
        }
        if (!strcmp(a, "--kl-divergence")) {
            kl_cmp = true;
            continue;
        }
        if (!(is_m || is_f || is_c || is_b || is_t || is_n || is_kj || is_kd || is_kb || is_ck || is_cv)) {
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
        else if (is_kb) kl_base = v;
        else if (is_kd && !cli_int(a, v, 0, 1 << 20, &kl_dump)) return 2;
        else if ((is_ck || is_cv) && !serve_parse_kv_type(v, is_ck ? &type_k : &type_v)) {
            fprintf(stderr, "ember perplexity: %s expects f16, q8_0 or f32\n", a);
            return 2;
        }
    }
    if (kl_cpu && (kl_base || kl_cmp)) {
        fprintf(stderr, "ember perplexity: --kl-divergence-cpu compares against the CPU in this process; it does "
                        "not go with --kl-divergence-base / --kl-divergence\n");
        return 2;
    }
    if (kl_cmp && !kl_base) {
        fprintf(stderr, "ember perplexity: --kl-divergence needs --kl-divergence-base FILE (a base saved by an "
                        "earlier run with --kl-divergence-base FILE alone)\n");
        return 2;
    }
    const kl_mode mode = kl_cpu ? KL_CPU : kl_cmp ? KL_FILE : kl_base ? KL_SAVE : KL_NONE;
    if ((kl_json || kl_dump) && mode != KL_CPU && mode != KL_FILE) {
        fprintf(stderr, "ember perplexity: --kl-json and --kl-dump need --kl-divergence-cpu or "
                        "--kl-divergence --kl-divergence-base FILE\n");
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
    float *lp = NULL, *lq = NULL;   /* [n_vocab] log-prob rows: the base's, this run's */
    FILE *kj = NULL, *kb = NULL;    /* the JSON file; the base file (read or written) */
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
    if (mode == KL_FILE) {   /* the base's chunks (checked against this text), at most --chunks of them */
        if (!(kb = klb_open(kl_base, n_ctx, n_vocab, tokens, n_tokens, &n_chunk)))
            goto out;
    }
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
    if (mode == KL_CPU) {
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
    }
    if (mode != KL_NONE) {
        lp = malloc(sizeof *lp * (size_t)n_vocab);
        lq = malloc(sizeof *lq * (size_t)n_vocab);
        if (!lp || !lq) {
            fprintf(stderr, "ember: out of memory for the KL rows\n");
            goto out;
        }
    }
    if (kl_json && !(kj = fopen(kl_json, "w"))) {
        fprintf(stderr, "ember: cannot write %s\n", kl_json);
        goto out;
    }
    if (kj) {
        fprintf(kj, "{\"base_file\": %s, \"dump\": [", mode == KL_FILE ? "true" : "false");
        ks.dump = kj;
        ks.n_dump = kl_dump;
    }
    const long first = n_ctx / 2;
    if (mode == KL_SAVE) {
        if (!(kb = fopen(kl_base, "wb")) || !klb_write_header(kb, n_ctx, n_vocab, n_chunk, tokens)) {
            fprintf(stderr, "ember: cannot write the KL base %s\n", kl_base);
            goto out;
        }
        fprintf(stderr, "ember: saving the log-probabilities to %s (%.1f MiB)\n", kl_base,
                ((double)KLB_HEADER + 4.0 * (double)n_chunk * ((double)n_ctx + (double)(n_ctx - 1 - first) *
                 (double)n_vocab)) / (1024.0 * 1024.0));
    }
    fprintf(stderr, "ember: %zu tokens, %ld chunks of %ld, scoring positions [%ld, %ld) of each\n", n_tokens,
            n_chunk, n_ctx, first, n_ctx - 1);

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
                if (mode == KL_NONE)
                    continue;
                logprobs_f32(lg, n_vocab, lq);
                if (mode == KL_SAVE) {   /* streamed: one row at a time */
                    if (fwrite(lq, sizeof *lq, (size_t)n_vocab, kb) != (size_t)n_vocab) {
                        fprintf(stderr, "ember: cannot write the KL base %s\n", kl_base);
                        goto out;
                    }
                    continue;
                }
                const float *bl = NULL;   /* the CPU base's logits, for the dump */
                if (mode == KL_CPU) {
                    if (!(bl = ember_get_logits(bctx, k))) {
                        fprintf(stderr, "ember: no base logits for position %ld\n", pos);
                        goto out;
                    }
                    logprobs_f32(bl, n_vocab, lp);
                } else if (!klb_read_row(kb, kl_base, lp, n_vocab)) {
                    goto out;
                }
                if (!kl_add(&ks, lp, lq, n_vocab, chunk[pos + 1], bl, lg)) {
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
    if (mode == KL_SAVE) {
        const int e = fclose(kb);
        kb = NULL;
        if (e != 0) {
            fprintf(stderr, "ember: cannot write the KL base %s\n", kl_base);
            goto out;
        }
        fprintf(stderr, "ember: saved the KL base to %s\n", kl_base);
    }
    if ((mode == KL_CPU || mode == KL_FILE) && ks.count > 0) {
        char against[1024];
        if (mode == KL_CPU) snprintf(against, sizeof against, "the CPU backend");
        else snprintf(against, sizeof against, "the base %s", kl_base);
        FILE *j = kj;
        kj = NULL;   /* kl_report closes it */
        if (!kl_report(&ks, against, j, kl_json, first, n_ctx - 1 - first))
            goto out;
    }
    fprintf(stderr, "ember: %ld chunks, %ld scored tokens, %.2f s (%.1f tok/s) | peak RSS %.1f MiB\n", n_chunk, count,
            dt, (double)(n_chunk * n_ctx) / dt, (double)cli_peak_rss() / (1024.0 * 1024.0));
    rc = 0;
out:
    if (kj) fclose(kj);
    if (kb) {
        fclose(kb);
        if (mode == KL_SAVE) remove(kl_base);   /* no half-written base is left to be read later */
    }
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
