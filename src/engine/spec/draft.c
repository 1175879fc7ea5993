/*
 * draft.c — draft-model proposer (-md FILE): a smaller model with the same
 * vocabulary, its own ember_context and KV pool (sequence i = slot i), that
 * drafts greedily and stops when its top probability falls below p_min.
 *
 * Owns: the draft model, its context and, per slot, the tokens its KV holds.
 * Must not: touch the target's context. Sync rule: before drafting, the
 * draft KV is cut back to the longest common prefix with the slot's tokens
 * (rejected drafts, a new request) and the missing tokens are decoded, so
 * the proposer needs no notice from the engine besides the tokens.
 * Draft tokens are the draft's argmax (q = one-hot), which the engine
 * verifies with the rule in spec.h.
 */
#include "engine/spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

typedef struct draft {
    ember_model *m;
    ember_context *ctx;
    ember_batch b;
    char path[256];
    int32_t n_slots, n_ctx, n_vocab, n_batch;
    ember_token **kv_tok;   /* [n_slots][n_ctx + 1] tokens in the draft KV */
    int32_t *n_kv;
    bool gpu;               /* placed on the GPU backend (--spec-draft-ngl) */
} draft;

static void draft_forget(draft *d, int32_t slot)
{
    if (d->n_kv[slot] > 0) ember_seq_remove(d->ctx, slot);
    d->n_kv[slot] = 0;
}

/* Top token of logits [n] and its softmax probability. */
static ember_token top1(const float *l, int32_t n, float *p)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) if (l[i] > l[best]) best = i;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(l[i] - l[best]));
    *p = (float)(1.0 / sum);
    return best;
}

static int32_t draft_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *out, float *q)
{
    draft *d = self;
    int32_t slot = in->slot, n = in->n_tokens;
    if (slot < 0 || slot >= d->n_slots || n < 1 || n + n_max > d->n_ctx) return 0;
    /* keep the common prefix of the draft KV and tokens[0, n - 1) */
    int32_t k = 0, lim = d->n_kv[slot] < n - 1 ? d->n_kv[slot] : n - 1;
    while (k < lim && d->kv_tok[slot][k] == in->tokens[k]) k++;
    if (k == 0) draft_forget(d, slot);
    else if (k < d->n_kv[slot] && ember_seq_truncate(d->ctx, slot, k) != EMBER_OK) { draft_forget(d, slot); k = 0; }
    d->n_kv[slot] = k;
    /* decode tokens[k, n) (the last one with logits), in n_batch chunks */
    while (k < n) {
        int32_t c = n - k < d->n_batch ? n - k : d->n_batch;
        d->b.n_tokens = c;
        for (int32_t j = 0; j < c; j++) {
            d->b.token[j] = in->tokens[k + j];
            d->b.pos[j] = k + j;
            d->b.seq_id[j] = slot;
            d->b.logits[j] = k + j == n - 1;
        }
        if (ember_decode(d->ctx, &d->b) != EMBER_OK) { draft_forget(d, slot); return 0; }
        memcpy(d->kv_tok[slot] + k, in->tokens + k, sizeof(ember_token) * (size_t)c);
        k += c;
        d->n_kv[slot] = k;
    }
    /* a draft with recurrent layers cannot cut its state back: keep it as
     * of n, so the next call's truncate to the accepted prefix (>= n)
     * restores it and decodes only the accepted tokens, instead of failing
     * and decoding the whole context again (a no-op for other drafts) */
    if (ember_seq_checkpoint(d->ctx, slot) != EMBER_OK) { draft_forget(d, slot); return 0; }
    int32_t n_out = 0;
    for (;;) {
        const float *l = ember_get_logits(d->ctx, -1);
        if (!l) break;
        float p;
        ember_token t = top1(l, d->n_vocab, &p);
        if (p < p_min) break;
        out[n_out] = t;
        if (q) q[n_out] = 1.0f;
        n_out++;
        if (n_out >= n_max) break;
        d->b.n_tokens = 1;
        d->b.token[0] = t;
        d->b.pos[0] = d->n_kv[slot];
        d->b.seq_id[0] = slot;
        d->b.logits[0] = 1;
        if (ember_decode(d->ctx, &d->b) != EMBER_OK) break;
        d->kv_tok[slot][d->n_kv[slot]++] = t;
    }
    return n_out;
}

static void draft_slot_reset(void *self, int32_t slot) { (void)self; (void)slot; /* the prefix sync handles it */ }

static void draft_describe(void *self, char *buf, size_t cap)
{
    draft *d = self;
    snprintf(buf, cap, "draft model %s, %s, %d layers, on the %s", d->path, ember_model_arch(d->m), ember_model_n_layer(d->m),
             d->gpu ? "GPU" : "CPU");
}

static void draft_free(void *self)
{
    draft *d = self;
    if (!d) return;
    if (d->kv_tok)
        for (int32_t i = 0; i < d->n_slots; i++) free(d->kv_tok[i]);
    free(d->kv_tok);
    free(d->n_kv);
    ember_batch_free(&d->b);
    if (d->ctx) ember_context_free(d->ctx);
    if (d->m) ember_model_free(d->m);
    free(d);
}

/* Same vocabulary: same size and the same text for every token. */
static ember_status check_vocab(const ember_model *target, const ember_model *dm, const char *path)
{
    const struct ember_vocab *vt = ember_model_vocab(target), *vd = ember_model_vocab(dm);
    int32_t nt = ember_vocab_n_tokens(vt), nd = ember_vocab_n_tokens(vd);
    if (nt != nd || ember_model_n_vocab(target) != ember_model_n_vocab(dm))
        return ember_error(EMBER_ERR_INVALID_ARG, "draft model %s: vocabulary of %d tokens, the target has %d", path, nd,
                           nt);
    for (ember_token i = 0; i < nt; i++) {
        size_t la, lb;
        const char *a = ember_vocab_text(vt, i, &la), *b = ember_vocab_text(vd, i, &lb);
        if (la != lb || (la && memcmp(a, b, la)))
            return ember_error(EMBER_ERR_INVALID_ARG, "draft model %s: token %d differs from the target's (%.*s vs %.*s)",
                               path, i, (int)(lb < 40 ? lb : 40), b ? b : "", (int)(la < 40 ? la : 40), a ? a : "");
    }
    return EMBER_OK;
}

ember_status spec_draft_new(const char *path, ember_model *target, int32_t n_slots, int32_t n_ctx, int32_t n_threads,
                            const ember_model_params *mp_in, spec_proposer *out)
{
    draft *d = calloc(1, sizeof *d);
    if (!d) return ember_error(EMBER_ERR_NOMEM, "draft model");
    snprintf(d->path, sizeof d->path, "%s", path);
    ember_status st;
    const ember_model_params mp = mp_in ? *mp_in : ember_model_default_params();
    if ((st = ember_model_load(path, &mp, &d->m)) != EMBER_OK) goto fail;
    if ((st = check_vocab(target, d->m, path)) != EMBER_OK) goto fail;
    d->n_slots = n_slots;
    d->n_ctx = n_ctx;
    d->n_vocab = ember_model_n_vocab(d->m);
    d->n_batch = 256;
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_kv_tokens = (uint32_t)n_ctx * (uint32_t)n_slots;
    cp.n_seq_max = (uint32_t)n_slots;
    cp.n_batch = (uint32_t)d->n_batch;
    cp.n_ubatch = (uint32_t)d->n_batch;
    cp.n_threads = n_threads;
    if ((st = ember_context_new(d->m, &cp, &d->ctx)) != EMBER_OK) goto fail;
    /* the registry's rule (backend.h ember_backend_new), for the description */
    d->gpu = mp.n_gpu_layers != 0 && ember_gpu_count() > 0;
    /* a GPU backend places weights and K/V on first use: now, not in the first request */
    if ((st = ember_context_warmup(d->ctx, NULL)) != EMBER_OK) goto fail;
    if ((st = ember_batch_init(d->n_batch, &d->b)) != EMBER_OK) goto fail;
    d->kv_tok = calloc((size_t)n_slots, sizeof *d->kv_tok);
    d->n_kv = calloc((size_t)n_slots, sizeof *d->n_kv);
    if (!d->kv_tok || !d->n_kv) { st = ember_error(EMBER_ERR_NOMEM, "draft model: %d slots", n_slots); goto fail; }
    for (int32_t i = 0; i < n_slots; i++)
        if (!(d->kv_tok[i] = malloc(sizeof(ember_token) * ((size_t)n_ctx + 1)))) {
            st = ember_error(EMBER_ERR_NOMEM, "draft model: %d slots x %d tokens", n_slots, n_ctx);
            goto fail;
        }
    *out = (spec_proposer){.name = "draft", .self = d, .costly = true, .propose = draft_propose, .slot_reset = draft_slot_reset,
                           .describe = draft_describe, .free = draft_free};
    return EMBER_OK;
fail:
    draft_free(d);
    return st;
}
