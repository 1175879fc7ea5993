/*
 * dflash.c — DFlash proposer (--spec-type draft-dflash, --spec-draft-model
 * FILE): a block-diffusion draft that reads the target's hidden states and
 * proposes a whole block in one forward pass (docs/dflash.md; llama.cpp
 * common/speculative.cpp:922-1288 is the behaviour followed).
 *
 * Owns: the draft model, its K/V per slot (src/model/dflash.h) and, per
 * slot, the tokens whose target features it holds. Must not: touch the
 * target's context. Sync rule: absorb injects the features of every target
 * decode (prompt chunks and verification batches; a batch that starts
 * before the held positions first cuts them back to its start). Before a
 * block is drafted the held positions are cut to the slot's committed ones
 * (tokens[0, n_tokens - 1)); when they do not match those tokens (a new
 * request, a prefix-cache hit on the slot's own cache that it never saw)
 * the slot drafts nothing; a prefix forked from another slot's cache comes
 * with that slot's features (fork). Draft tokens are argmaxes (q = one-hot), verified by the engine
 * with the rule in spec.h, so output stays lossless whatever the draft says.
 */
#include "engine/spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/dflash.h"

#define DFLASH_TOP_K 10   /* the draft sampler's top-k (common/speculative.cpp:1027-1034) */

typedef struct dflash {
    ember_model *m;
    const ember_model *target;
    const ember_dflash *d;
    ember_dflash_ctx *c;
    char path[256];
    int32_t n_slots, n_ctx, n_vocab, n_in;
    int32_t n_block;        /* masked positions of every block: min(--spec-draft-n-max, block_size - 1) */
    int32_t layers[EMBER_DFLASH_MAX_TARGET_LAYERS];   /* ember layers: target_layers[k] - 1 */
    ember_token *kv_tok;    /* [n_slots][n_ctx] the token at each held position */
    float *feat;            /* [32][n_in] gathered feature rows */
    float *logits;          /* [block_size - 1][n_vocab] host rows (a draft on the CPU), or NULL */
    ember_logits_top *top;  /* [block_size - 1] the rows' heads (a draft on a GPU: its logits never leave the device), or NULL */
    ember_token *block;     /* [block_size] */
    bool blocked;           /* a block ran since the last dflash_device_seconds */
} dflash;

static void dflash_absorb(void *self, int32_t slot, ember_pos pos0, const ember_token *tok, int32_t n,
                          const float *(*get)(void *ctx, int32_t i, int32_t j), void *ctx, int32_t i0)
{
    dflash *f = self;
    if (slot < 0 || slot >= f->n_slots || n <= 0 || pos0 < 0) return;
    ember_dflash_truncate(f->c, slot, pos0);
    if (ember_dflash_n_pos(f->c, slot) != pos0) return;   /* a gap: positions before pos0 were never seen */
    const int32_t E = f->d->n_embd_target, nl = f->d->n_target_layers;
    for (int32_t r0 = 0; r0 < n; r0 += 32) {
        const int32_t k = n - r0 < 32 ? n - r0 : 32;
        if (pos0 + r0 + k > f->n_ctx) return;
        for (int32_t r = 0; r < k; r++)
            for (int32_t j = 0; j < nl; j++) {
                const float *h = get(ctx, i0 + r0 + r, j);
                if (!h) return;
                memcpy(f->feat + ((size_t)r * (size_t)nl + (size_t)j) * (size_t)E, h, sizeof(float) * (size_t)E);
            }
        if (ember_dflash_inject(f->c, slot, k, f->feat) != EMBER_OK) return;
        memcpy(f->kv_tok + (size_t)slot * (size_t)f->n_ctx + (size_t)(pos0 + r0), tok + r0, sizeof(ember_token) * (size_t)k);
    }
}

/* spec_proposer.device_seconds: the last block and the injections before it on the draft's device clock */
static double dflash_device_seconds(void *self)
{
    dflash *f = self;
    if (!f->blocked) return -1.0;
    f->blocked = false;
    return ember_dflash_device_seconds(f->c);
}

static void dflash_fork(void *self, int32_t src, int32_t dst, int32_t n)
{
    dflash *f = self;
    if (src < 0 || src >= f->n_slots || dst < 0 || dst >= f->n_slots || n < 0 || n > f->n_ctx) return;
    ember_dflash_fork(f->c, src, dst, n);
    memcpy(f->kv_tok + (size_t)dst * (size_t)f->n_ctx, f->kv_tok + (size_t)src * (size_t)f->n_ctx, sizeof(ember_token) * (size_t)n);
}

/* The argmax of a row from its head (ember_dflash_block_top, k =
 * DFLASH_TOP_K) and its probability within those candidates: the same
 * token and the same arithmetic as top1 below on the row itself (ties to
 * the lowest id, the sum over the DFLASH_TOP_K largest values). */
static ember_token head1(const ember_logits_top *t, float *p)
{
    double sum = 0;
    for (int32_t k = 0; k < t->n; k++) sum += exp((double)(t->logit[k] - t->logit[0]));
    *p = (float)(1.0 / sum);
    return t->id[0];
}

/* Index of the largest of l[n] and its probability within the top
 * DFLASH_TOP_K (a top-k sampler's candidates, renormalized). */
static ember_token top1(const float *l, int32_t n, float *p)
{
    float top[DFLASH_TOP_K];
    int32_t nt = 0, best = 0;
    for (int32_t i = 0; i < n; i++) {
        if (l[i] > l[best]) best = i;
        /* keep the DFLASH_TOP_K largest values, descending */
        if (nt < DFLASH_TOP_K || l[i] > top[nt - 1]) {
            int32_t k = nt < DFLASH_TOP_K ? nt++ : nt - 1;
            while (k > 0 && top[k - 1] < l[i]) { top[k] = top[k - 1]; k--; }
            top[k] = l[i];
        }
    }
    double sum = 0;
    for (int32_t k = 0; k < nt; k++) sum += exp((double)(top[k] - top[0]));
    *p = (float)(1.0 / sum);
    return best;
}

static int32_t dflash_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *out, float *q)
{
    dflash *f = self;
    const int32_t slot = in->slot, anchor = in->n_tokens - 1;
    if (slot < 0 || slot >= f->n_slots || anchor < 1) return 0;
    /* features of every committed position, for these very tokens */
    if (ember_dflash_n_pos(f->c, slot) < anchor ||
        memcmp(f->kv_tok + (size_t)slot * (size_t)f->n_ctx, in->tokens, sizeof(ember_token) * (size_t)anchor) != 0)
        return 0;
    ember_dflash_truncate(f->c, slot, anchor);   /* drop rejected drafts' positions */
    /* the block always has n_block masked positions, however many drafts
     * this step may use (the block attends both ways, so its length changes
     * every row; llama.cpp's is --spec-draft-n-max + 1 too, speculative.cpp:1203) */
    const int32_t n = f->n_block;
    if (n_max <= 0 || anchor + 1 + n > f->n_ctx) return 0;
    f->block[0] = in->tokens[anchor];
    for (int32_t i = 1; i <= n; i++) f->block[i] = f->d->mask_token;
    /* on a GPU only the rows' heads come down; on the CPU the host pass
     * over the rows (no log-partition to compute) */
    const ember_status st = f->top ? ember_dflash_block_top(f->c, slot, f->block, n + 1, DFLASH_TOP_K, f->top)
                                   : ember_dflash_block(f->c, slot, f->block, n + 1, f->logits);
    if (st != EMBER_OK) return 0;
    f->blocked = true;
    if (n_max > n) n_max = n;
    int32_t k = 0;
    for (; k < n_max; k++) {
        float p;
        const ember_token t = f->top ? head1(&f->top[k], &p)
                                     : top1(f->logits + (size_t)k * (size_t)f->n_vocab, f->n_vocab, &p);
        if (p < p_min) break;
        out[k] = t;
        if (q) q[k] = 1.0f;
    }
    return k;
}

static void dflash_describe(void *self, char *buf, size_t cap)
{
    dflash *f = self;
    char layers[96] = "";
    size_t o = 0;
    for (int32_t k = 0; k < f->d->n_target_layers && o + 8 < sizeof layers; k++)
        o += (size_t)snprintf(layers + o, sizeof layers - o, "%s%d", k ? "," : "", f->d->target_layers[k]);
    snprintf(buf, cap, "DFlash draft %s, %d layers, block_size=%d, mask_token_id=%d, n_extract=%d (target layers %s), "
             "blocks of 1 + %d, on the %s backend", f->path, ember_model_n_layer(f->m), f->d->block_size, f->d->mask_token,
             f->d->n_target_layers, layers, f->n_block, ember_dflash_ctx_backend(f->c));
}

static void dflash_free(void *self)
{
    dflash *f = self;
    if (!f) return;
    ember_dflash_ctx_free(f->c);
    free(f->kv_tok);
    free(f->feat);
    free(f->logits);
    free(f->top);
    free(f->block);
    if (f->m) ember_model_free(f->m);
    free(f);
}

ember_status spec_dflash_new(const char *path, const ember_model *target, int32_t n_slots, int32_t n_ctx, int32_t n_threads,
                             int32_t n_max, const ember_model_params *mp_in, spec_proposer *out)
{
    dflash *f = calloc(1, sizeof *f);
    if (!f) return ember_error(EMBER_ERR_NOMEM, "DFlash draft");
    snprintf(f->path, sizeof f->path, "%s", path);
    ember_status st;
    const ember_model_params mp = mp_in ? *mp_in : ember_model_default_params();
    if ((st = ember_model_load(path, &mp, &f->m)) != EMBER_OK) goto fail;
    if (!(f->d = ember_model_dflash(f->m))) {
        st = ember_error(EMBER_ERR_INVALID_ARG, "--spec-type draft-dflash: %s has architecture %s, not dflash", path,
                         ember_model_arch(f->m));
        goto fail;
    }
    if (f->d->n_target_layers > EMBER_MAX_HIDDEN_LAYERS) {
        st = ember_error(EMBER_ERR_UNSUPPORTED, "%s: DFlash draft reads %d target layers, at most %d are supported", path,
                         f->d->n_target_layers, EMBER_MAX_HIDDEN_LAYERS);
        goto fail;
    }
    if ((st = ember_dflash_ctx_new(f->m, target, n_slots, n_ctx, n_threads, &f->c)) != EMBER_OK) goto fail;
    f->target = target;
    f->n_slots = n_slots;
    f->n_ctx = n_ctx;
    f->n_vocab = ember_model_n_vocab(target);
    f->n_in = f->d->n_target_layers * f->d->n_embd_target;
    f->n_block = n_max < 1 ? 1 : n_max < f->d->block_size - 1 ? n_max : f->d->block_size - 1;
    for (int32_t k = 0; k < f->d->n_target_layers; k++) f->layers[k] = f->d->target_layers[k] - 1;
    f->kv_tok = calloc((size_t)n_slots * (size_t)n_ctx, sizeof *f->kv_tok);
    f->feat = malloc(sizeof(float) * 32 * (size_t)f->n_in);
    if (ember_dflash_device_heads(f->c))
        f->top = malloc(sizeof *f->top * (size_t)(f->d->block_size - 1));
    else
        f->logits = malloc(sizeof(float) * (size_t)(f->d->block_size - 1) * (size_t)f->n_vocab);
    f->block = malloc(sizeof(ember_token) * (size_t)f->d->block_size);
    if (!f->kv_tok || !f->feat || (!f->logits && !f->top) || !f->block) {
        st = ember_error(EMBER_ERR_NOMEM, "DFlash draft: %d slots x %d positions", n_slots, n_ctx);
        goto fail;
    }
    *out = (spec_proposer){.name = "draft-dflash", .self = f, .costly = true,
                           .n_hidden_layers = f->d->n_target_layers, .hidden_layers = f->layers,
                           .propose = dflash_propose, .absorb = dflash_absorb, .fork = dflash_fork,
                           .describe = dflash_describe, .free = dflash_free,
                           .device_seconds = dflash_device_seconds};
    return EMBER_OK;
fail:
    dflash_free(f);
    return st;
}
