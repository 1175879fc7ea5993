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
#include <time.h>

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
    /* prefetch: every ready slot's block drafted in passes of several slots
     * before the step's proposals; propose answers from them */
    int32_t *pf_n;          /* [n_slots] n_tokens of the input a slot's prefetched block drafts for; 0: none */
    ember_token *pf_last;   /* [n_slots] its anchor token */
    ember_token *pf_tok;    /* [n_slots][n_block] each row's argmax */
    float *pf_p;            /* [n_slots][n_block] and its top-10 probability */
    ember_logits_top *pass_top; /* [per pass][n_block] a pass's heads (a draft on a GPU) */
    float *pass_logits;     /* [per pass][n_block][n_vocab] a pass's rows (a draft on the CPU) */
    int32_t *pf_seq;        /* [n_slots] a pass's sequences */
    ember_token *pf_block;  /* [n_slots][n_block + 1] a pass's blocks */
    double pf_share;        /* seconds of the last prefetch per block (device, or process CPU time); < 0: none */
    bool pf_served;         /* a propose was served from it since the last dflash_device_seconds */
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

/* spec_proposer.device_seconds: the last block and the injections before it on the draft's device clock
 * (a block served from a prefetch: its share of the prefetch's time) */
static double dflash_device_seconds(void *self)
{
    dflash *f = self;
    if (f->pf_served) {
        f->pf_served = false;
        return f->pf_share;
    }
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

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* Whether slot's features cover every committed position of in's tokens
 * (then cut to them: rejected drafts' positions dropped). */
static bool slot_ready(dflash *f, const spec_input *in)
{
    const int32_t slot = in->slot, anchor = in->n_tokens - 1;
    if (slot < 0 || slot >= f->n_slots || anchor < 1) return false;
    /* features of every committed position, for these very tokens */
    if (ember_dflash_n_pos(f->c, slot) < anchor ||
        memcmp(f->kv_tok + (size_t)slot * (size_t)f->n_ctx, in->tokens, sizeof(ember_token) * (size_t)anchor) != 0)
        return false;
    ember_dflash_truncate(f->c, slot, anchor);   /* drop rejected drafts' positions */
    return true;
}

/* spec_proposer.prefetch: the blocks of every ready slot among in[n], in
 * passes of as many slots as the draft's rows allow (one read of its
 * weights and one launch sequence for all of them); propose answers from
 * them. Only slots whose block fits the draft context. */
static void dflash_prefetch(void *self, const spec_input *in, int32_t n_in)
{
    dflash *f = self;
    const int32_t n = f->n_block, per = ember_dflash_max_blocks(f->c, n + 1);
    for (int32_t i = 0; i < f->n_slots; i++) f->pf_n[i] = 0;
    f->pf_share = -1.0;
    f->pf_served = false;
    if (per < 2 || n_in < 2) return;
    if (!f->pass_top && !f->pass_logits) {   /* a pass's heads or rows, once */
        if (f->top) f->pass_top = malloc(sizeof *f->pass_top * (size_t)per * (size_t)n);
        else f->pass_logits = malloc(sizeof(float) * (size_t)per * (size_t)n * (size_t)f->n_vocab);
        if (!f->pass_top && !f->pass_logits) return;
    }
    const double t0 = cpu_seconds();
    double dev = 0;
    int32_t n_blocks = 0, g = 0;
    for (int32_t i = 0; i <= n_in; i++) {
        if (i < n_in) {
            const spec_input *x = &in[i];
            if (x->slot < 0 || x->slot >= f->n_slots || f->pf_n[x->slot] != 0) continue;
            bool dup = false;
            for (int32_t j = 0; j < g; j++) dup |= f->pf_seq[j] == x->slot;
            if (dup || !slot_ready(f, x) || x->n_tokens + n > f->n_ctx) continue;
            f->pf_seq[g] = x->slot;
            f->pf_n[x->slot] = -x->n_tokens;   /* in this pass, not yet drafted */
            ember_token *b = f->pf_block + (size_t)g * (size_t)(n + 1);
            b[0] = x->tokens[x->n_tokens - 1];
            for (int32_t k = 1; k <= n; k++) b[k] = f->d->mask_token;
            g++;
        }
        if (g == 0 || (g < per && i < n_in)) continue;
        /* a pass of g slots: their heads (a GPU draft) or rows (the CPU) */
        const ember_status st = f->pass_top
            ? ember_dflash_blocks_top(f->c, g, f->pf_seq, f->pf_block, n + 1, DFLASH_TOP_K, f->pass_top)
            : ember_dflash_blocks(f->c, g, f->pf_seq, f->pf_block, n + 1, f->pass_logits);
        const double d = st == EMBER_OK ? ember_dflash_device_seconds(f->c) : -1.0;
        dev = d >= 0 && dev >= 0 ? dev + d : -1.0;
        for (int32_t j = 0; j < g; j++) {
            const int32_t slot = f->pf_seq[j];
            if (st != EMBER_OK) {   /* the slot drafts by itself */
                f->pf_n[slot] = 0;
                continue;
            }
            for (int32_t k = 0; k < n; k++) {
                const size_t r = (size_t)j * (size_t)n + (size_t)k, o = (size_t)slot * (size_t)n + (size_t)k;
                f->pf_tok[o] = f->pass_top ? head1(&f->pass_top[r], &f->pf_p[o])
                                           : top1(f->pass_logits + r * (size_t)f->n_vocab, f->n_vocab, &f->pf_p[o]);
            }
            f->pf_last[slot] = f->pf_block[(size_t)j * (size_t)(n + 1)];
            f->pf_n[slot] = -f->pf_n[slot];
            n_blocks++;
        }
        g = 0;
    }
    if (n_blocks > 0) f->pf_share = (dev >= 0 ? dev : cpu_seconds() - t0) / n_blocks;
}

static int32_t dflash_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *out, float *q)
{
    dflash *f = self;
    const int32_t slot = in->slot, anchor = in->n_tokens - 1;
    /* the block always has n_block masked positions, however many drafts
     * this step may use (the block attends both ways, so its length changes
     * every row; llama.cpp's is --spec-draft-n-max + 1 too, speculative.cpp:1203) */
    const int32_t n = f->n_block;
    const ember_token *tok;
    const float *pr;
    if (slot >= 0 && slot < f->n_slots && anchor >= 1 && f->pf_n[slot] == in->n_tokens &&
        f->pf_last[slot] == in->tokens[anchor] && slot_ready(f, in)) {
        /* this step's prefetch drafted the slot's block */
        f->pf_n[slot] = 0;
        if (n_max <= 0) return 0;
        f->pf_served = true;
        tok = f->pf_tok + (size_t)slot * (size_t)n;
        pr = f->pf_p + (size_t)slot * (size_t)n;
    } else {
        if (slot >= 0 && slot < f->n_slots) f->pf_n[slot] = 0;
        if (!slot_ready(f, in)) return 0;
        if (n_max <= 0 || anchor + 1 + n > f->n_ctx) return 0;
        f->block[0] = in->tokens[anchor];
        for (int32_t i = 1; i <= n; i++) f->block[i] = f->d->mask_token;
        /* on a GPU only the rows' heads come down; on the CPU the host pass
         * over the rows (no log-partition to compute) */
        const ember_status st = f->top ? ember_dflash_block_top(f->c, slot, f->block, n + 1, DFLASH_TOP_K, f->top)
                                       : ember_dflash_block(f->c, slot, f->block, n + 1, f->logits);
        if (st != EMBER_OK) return 0;
        f->blocked = true;
        f->pf_served = false;
        ember_token *t = f->pf_tok + (size_t)slot * (size_t)n;
        float *p = f->pf_p + (size_t)slot * (size_t)n;
        const int32_t m = n_max < n ? n_max : n;
        for (int32_t k = 0; k < m; k++)
            t[k] = f->top ? head1(&f->top[k], &p[k]) : top1(f->logits + (size_t)k * (size_t)f->n_vocab, f->n_vocab, &p[k]);
        tok = t;
        pr = p;
    }
    if (n_max > n) n_max = n;
    int32_t k = 0;
    for (; k < n_max; k++) {
        if (pr[k] < p_min) break;
        out[k] = tok[k];
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
    free(f->pf_n);
    free(f->pf_last);
    free(f->pf_tok);
    free(f->pf_p);
    free(f->pass_top);
    free(f->pass_logits);
    free(f->pf_seq);
    free(f->pf_block);
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
    const size_t ns = (size_t)n_slots, nb = (size_t)f->n_block;
    f->pf_n = calloc(ns, sizeof *f->pf_n);
    f->pf_last = calloc(ns, sizeof *f->pf_last);
    f->pf_tok = calloc(ns * nb, sizeof *f->pf_tok);
    f->pf_p = calloc(ns * nb, sizeof *f->pf_p);
    f->pf_seq = calloc(ns, sizeof *f->pf_seq);
    f->pf_block = calloc(ns * (nb + 1), sizeof *f->pf_block);
    f->pf_share = -1.0;
    if (!f->kv_tok || !f->feat || (!f->logits && !f->top) || !f->block || !f->pf_n || !f->pf_last || !f->pf_tok ||
        !f->pf_p || !f->pf_seq || !f->pf_block) {
        st = ember_error(EMBER_ERR_NOMEM, "DFlash draft: %d slots x %d positions", n_slots, n_ctx);
        goto fail;
    }
    *out = (spec_proposer){.name = "draft-dflash", .self = f, .costly = true,
                           .n_hidden_layers = f->d->n_target_layers, .hidden_layers = f->layers,
                           .propose = dflash_propose, .absorb = dflash_absorb, .fork = dflash_fork,
                           .describe = dflash_describe, .free = dflash_free, .prefetch = dflash_prefetch,
                           .device_seconds = dflash_device_seconds};
    return EMBER_OK;
fail:
    dflash_free(f);
    return st;
}
