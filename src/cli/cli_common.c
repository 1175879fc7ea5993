/*
 * cli_common.c — shared helpers of the `ember` subcommands (see cli_common.h).
 */
#include "cli_common.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"

int32_t cli_n_gpu_layers = -1, cli_device = 0;

bool cli_on_gpu(void) { return cli_n_gpu_layers != 0 && ember_gpu_count() > 0; }

int cli_gpu_option(int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const bool ngl = !strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers");
    if (!ngl && strcmp(a, "--device") && strcmp(a, "-dev")) return 0;
    const char *v = cli_value(argc, argv, i);
    long x;
    if (!v || !cli_int(a, v, ngl ? -1 : 0, ngl ? 100000 : 64, &x)) return -1;
    if (ngl) cli_n_gpu_layers = (int32_t)x;
    else cli_device = (int32_t)x;
    return 1;
}

ember_status cli_model_load(const char *path, cli_model *out)
{
    memset(out, 0, sizeof *out);
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = cli_n_gpu_layers;
    mp.device = cli_device;
    ember_status st = ember_model_load(path, &mp, &out->model);
    if (st != EMBER_OK)
        return st;
    out->vocab = ember_model_vocab(out->model);
    if (!out->vocab || ember_model_n_vocab(out->model) < ember_vocab_n_tokens(out->vocab)) {
        int32_t nm = ember_model_n_vocab(out->model), nv = out->vocab ? ember_vocab_n_tokens(out->vocab) : 0;
        cli_model_free(out);
        return ember_error(EMBER_ERR_FORMAT, "%s: the output layer has %d rows for %d vocabulary tokens", path,
                           nm, nv);
    }
    return EMBER_OK;
}

void cli_model_free(cli_model *m)
{
    if (!m)
        return;
    ember_model_free(m->model);   /* owns the vocabulary */
    m->model = NULL;
    m->vocab = NULL;
}

bool cli_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "ember: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v) || v < lo || v > hi) {
        fprintf(stderr, "ember: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "ember: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

ember_status cli_parse_ids(const char *s, int32_t n_vocab, ember_token **out, int32_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t cap = 16, n = 0;
    ember_token *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return ember_error(EMBER_ERR_NOMEM, "prompt ids: out of memory");
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '[' || *p == ']')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_vocab) {
            free(ids);
            return ember_error(EMBER_ERR_INVALID_ARG, "prompt ids: entry %zu ('%.12s') is not a token id in [0, %d)",
                               n, p, n_vocab);
        }
        if (n == cap) {
            ember_token *t = realloc(ids, 2 * cap * sizeof *ids);
            if (!t) {
                free(ids);
                return ember_error(EMBER_ERR_NOMEM, "prompt ids: out of memory");
            }
            ids = t;
            cap *= 2;
        }
        ids[n++] = (ember_token)v;
        p = end;
    }
    *out = ids;
    *n_out = (int32_t)n;
    return EMBER_OK;
}

ember_status cli_decode_tokens(ember_context *ctx, ember_batch *batch, int32_t n_batch,
                               const ember_token *tokens, int32_t n, ember_pos pos0,
                               ember_seq_id seq, bool want_last, int32_t *idx_last)
{
    for (int32_t done = 0; done < n;) {
        int32_t m = n - done < n_batch ? n - done : n_batch;
        batch->n_tokens = m;
        for (int32_t k = 0; k < m; k++) {
            batch->token[k] = tokens[done + k];
            batch->pos[k] = pos0 + done + k;
            batch->seq_id[k] = seq;
            batch->logits[k] = 0;
        }
        bool last = done + m == n;
        if (last && want_last)
            batch->logits[m - 1] = 1;
        ember_status st = ember_decode(ctx, batch);
        if (st != EMBER_OK)
            return st;
        if (last && idx_last)
            *idx_last = m - 1;
        done += m;
    }
    return EMBER_OK;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t cli_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u;   /* Linux: kilobytes */
}

int cli_n_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
