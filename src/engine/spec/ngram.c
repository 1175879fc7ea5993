/*
 * ngram.c — prompt-lookup / n-gram proposer: finds the longest suffix of the
 * slot's tokens (length ngram_max down to ngram_min) that occurred earlier
 * in the same tokens, and drafts what followed its most recent earlier
 * occurrence. Input-grounded work (rewrite, extract, summarize a given text,
 * code edits) repeats long spans of the prompt, which this catches for free.
 * Source: Saxena 2023, "Prompt Lookup Decoding" (the method; code is ours).
 *
 * Owns: nothing per slot (stateless). Must not: touch the model or the KV.
 * Cost: O(n_tokens * ngram_max) per call, a scan from the end.
 */
#include "engine/spec/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

typedef struct ngram { int32_t n_min, n_max, last_match; } ngram;

#define NGRAM_MATCH_CAP 64   /* match lengths are counted up to this */

static int32_t ngram_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *draft,
                             float *q)
{
    (void)p_min;
    ngram *g = self;
    g->last_match = 0;
    const ember_token *t = in->tokens;
    int32_t n = in->n_tokens;
    for (int32_t len = g->n_max; len >= g->n_min; len--) {
        if (len > n - 1) continue;
        const ember_token *key = t + n - len;
        /* latest earlier occurrence: start positions i with i + len <= n - 1 */
        for (int32_t i = n - len - 1; i >= 0; i--) {
            if (t[i] != key[0] || memcmp(t + i, key, sizeof *t * (size_t)len) != 0) continue;
            /* how far the match reaches back beyond the key: a long one means
             * the output is copying a span (grounded work), a short one may
             * be a chance repeat (engine: per-slot acceptance by match length) */
            int32_t m = len;
            while (m < NGRAM_MATCH_CAP && i - (m - len) - 1 >= 0 && t[i - (m - len) - 1] == t[n - m - 1]) m++;
            g->last_match = m;
            int32_t from = i + len, k = 0;
            while (k < n_max && from + k < n) {
                draft[k] = t[from + k];
                if (q) q[k] = 1.0f;
                k++;
            }
            if (k > 0) return k;
        }
    }
    return 0;
}

static int32_t ngram_match_len(void *self) { return ((const ngram *)self)->last_match; }

static void ngram_describe(void *self, char *buf, size_t cap)
{
    const ngram *g = self;
    snprintf(buf, cap, "prompt lookup, key %d..%d tokens", g->n_min, g->n_max);
}

static void ngram_free(void *self) { free(self); }

ember_status spec_ngram_new(int32_t ngram_min, int32_t ngram_max, spec_proposer *out)
{
    if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64)
        return ember_error(EMBER_ERR_INVALID_ARG, "n-gram proposer: key lengths %d..%d (need 1 <= min <= max <= 64)",
                           ngram_min, ngram_max);
    ngram *g = malloc(sizeof *g);
    if (!g) return ember_error(EMBER_ERR_NOMEM, "n-gram proposer");
    g->n_min = ngram_min;
    g->n_max = ngram_max;
    g->last_match = 0;
    *out = (spec_proposer){.name = "ngram", .self = g, .propose = ngram_propose, .match_len = ngram_match_len,
                           .describe = ngram_describe,
                           .free = ngram_free};
    return EMBER_OK;
}
