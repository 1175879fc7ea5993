/*
 * mtp.c — Gemma 4 MTP proposer (--spec-type draft-mtp, --spec-draft-model
 * FILE): a `gemma4-assistant` draft that reads the target's K/V and its
 * post-final-norm hidden state and drafts one token per forward, all at the
 * position of the token it continues (docs/mtp.md; llama.cpp
 * common/speculative.cpp:1331-1746, common_speculative_impl_draft_mtp with
 * shared memory, is the behaviour followed).
 *
 * Owns: the draft model, its per-slot copies of the target K/V it reads
 * (src/model/mtp.h) with the tokens of the held positions, and per slot the
 * target's final states (normed: the draft's h) of the last target decode's
 * entries. Must not: touch the target's context. Sync rule: absorb takes the
 * hidden states of every target decode (prompt chunks and verification
 * batches, rejected drafts included; a batch that starts before the held
 * positions first cuts them back to its start). Before drafting, the held
 * positions are cut to the slot's committed ones (tokens[0, n_tokens - 1));
 * when they do not match those tokens, or the state of the last committed
 * position is not among the kept ones, the slot drafts nothing (llama.cpp's
 * pending_h is that state: accept() picks row n_accepted of the last
 * verification, speculative.cpp:1733-1746). Draft tokens are argmaxes
 * (q = one-hot), verified by the engine with the rule in spec.h.
 */
#include "engine/spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/mtp.h"

#define MTP_TOP_K 10                   /* the draft sampler's top-k (speculative.cpp:1389-1397) */
#define MTP_H_ROWS (SPEC_MAX_DRAFT + 1) /* final states kept per slot: a verification batch's rows */
#define MTP_CHUNK 32                    /* rows gathered per injection */

typedef struct mtp {
    ember_model *m;
    const ember_model *target;
    ember_mtp_ctx *c;
    char path[256];
    int32_t n_slots, n_ctx, n_vocab, n_bb, n_src;
    int32_t n_hidden;
    int32_t layers[4];      /* target layers whose states absorb reads (ember_mtp_hidden_layers) */
    ember_token *kv_tok;    /* [n_slots][n_ctx] the token at each held position */
    float *h;               /* [n_slots][MTP_H_ROWS][n_bb] normed final states */
    int32_t *h_pos0, *h_n;  /* [n_slots] position of h row 0, rows kept */
    float *in;              /* [MTP_CHUNK][n_src][n_bb] gathered K/V-owner inputs */
    float *logits;          /* [n_vocab] */
    float *hs;              /* [n_bb] the chained h */
} mtp;

static void mtp_absorb(void *self, int32_t slot, ember_pos pos0, const ember_token *tok, int32_t n,
                       const float *(*get)(void *ctx, int32_t i, int32_t j), void *ctx, int32_t i0)
{
    mtp *f = self;
    if (slot < 0 || slot >= f->n_slots || n <= 0 || pos0 < 0) return;
    f->h_n[slot] = 0;
    ember_mtp_truncate(f->c, slot, pos0);
    if (ember_mtp_n_pos(f->c, slot) != pos0) return;   /* a gap: positions before pos0 were never seen */
    const size_t B = (size_t)f->n_bb;
    for (int32_t r0 = 0; r0 < n; r0 += MTP_CHUNK) {
        const int32_t k = n - r0 < MTP_CHUNK ? n - r0 : MTP_CHUNK;
        if (pos0 + r0 + k > f->n_ctx) return;
        for (int32_t r = 0; r < k; r++)
            for (int32_t j = 0; j < f->n_src; j++) {
                const float *x = get(ctx, i0 + r0 + r, j);
                if (!x) return;
                memcpy(f->in + ((size_t)r * (size_t)f->n_src + (size_t)j) * B, x, sizeof(float) * B);
            }
        if (ember_mtp_inject(f->c, slot, k, f->in) != EMBER_OK) return;
        memcpy(f->kv_tok + (size_t)slot * (size_t)f->n_ctx + (size_t)(pos0 + r0), tok + r0, sizeof(ember_token) * (size_t)k);
    }
    /* the final states of the batch's last rows (the draft's h) */
    const int32_t keep = n < MTP_H_ROWS ? n : MTP_H_ROWS;
    for (int32_t r = 0; r < keep; r++) {
        const float *x = get(ctx, i0 + n - keep + r, f->n_src);
        if (!x) return;
        ember_mtp_final_norm(f->c, x, f->h + ((size_t)slot * MTP_H_ROWS + (size_t)r) * B);
    }
    f->h_pos0[slot] = pos0 + n - keep;
    f->h_n[slot] = keep;
}

static void mtp_fork(void *self, int32_t src, int32_t dst, int32_t n)
{
    mtp *f = self;
    if (src < 0 || src >= f->n_slots || dst < 0 || dst >= f->n_slots || n < 0 || n > f->n_ctx) return;
    ember_mtp_fork(f->c, src, dst, n);
    memcpy(f->kv_tok + (size_t)dst * (size_t)f->n_ctx, f->kv_tok + (size_t)src * (size_t)f->n_ctx, sizeof(ember_token) * (size_t)n);
    f->h_n[dst] = 0;   /* the rest of dst's prompt is decoded next and brings its states */
}

/* Index of the largest of l[n] and its probability within the top
 * MTP_TOP_K (a top-k sampler's candidates, renormalized). */
static ember_token top1(const float *l, int32_t n, float *p)
{
    float top[MTP_TOP_K];
    int32_t nt = 0, best = 0;
    for (int32_t i = 0; i < n; i++) {
        if (l[i] > l[best]) best = i;
        if (nt < MTP_TOP_K || l[i] > top[nt - 1]) {
            int32_t k = nt < MTP_TOP_K ? nt++ : nt - 1;
            while (k > 0 && top[k - 1] < l[i]) { top[k] = top[k - 1]; k--; }
            top[k] = l[i];
        }
    }
    double sum = 0;
    for (int32_t k = 0; k < nt; k++) sum += exp((double)(top[k] - top[0]));
    *p = (float)(1.0 / sum);
    return best;
}

static int32_t mtp_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *out, float *q)
{
    mtp *f = self;
    const int32_t slot = in->slot, pos = in->n_tokens - 1;   /* the last token: sampled, not yet in the target's K/V */
    if (slot < 0 || slot >= f->n_slots || pos < 1 || n_max <= 0) return 0;
    if (ember_mtp_n_pos(f->c, slot) < pos ||
        memcmp(f->kv_tok + (size_t)slot * (size_t)f->n_ctx, in->tokens, sizeof(ember_token) * (size_t)pos) != 0)
        return 0;
    const int32_t r = pos - 1 - f->h_pos0[slot];   /* the state that predicted the last token */
    if (r < 0 || r >= f->h_n[slot]) return 0;
    ember_mtp_truncate(f->c, slot, pos);   /* drop rejected drafts' positions */
    memcpy(f->hs, f->h + ((size_t)slot * MTP_H_ROWS + (size_t)r) * (size_t)f->n_bb, sizeof(float) * (size_t)f->n_bb);
    /* every step at the same position (speculative.cpp:1697-1702), chained
     * through the draft's h_next */
    ember_token tok = in->tokens[pos];
    int32_t k = 0;
    for (; k < n_max; k++) {
        if (ember_mtp_step(f->c, slot, tok, pos, f->hs, f->logits, f->hs) != EMBER_OK) break;
        float p;
        tok = top1(f->logits, f->n_vocab, &p);
        if (p < p_min) break;
        out[k] = tok;
        if (q) q[k] = 1.0f;
    }
    return k;
}

static void mtp_describe(void *self, char *buf, size_t cap)
{
    mtp *f = self;
    const ember_mtp *d = ember_model_mtp(f->m);
    char owners[32] = "";
    for (int32_t k = 0, o = 0; k < f->n_src && o < (int)sizeof owners - 8; k++)
        o += snprintf(owners + o, sizeof owners - (size_t)o, "%s%d", k ? "," : "", f->layers[k] + 1);
    snprintf(buf, cap, "MTP draft %s (gemma4-assistant), %d layers of n_embd %d over the target's %d, reading the "
             "K/V of target layers %s and its final state, on the %s backend", f->path, d->n_layer_nextn,
             ember_model_n_embd(f->m), f->n_bb, owners, ember_mtp_ctx_backend(f->c));
}

static void mtp_free(void *self)
{
    mtp *f = self;
    if (!f) return;
    ember_mtp_ctx_free(f->c);
    free(f->kv_tok);
    free(f->h);
    free(f->h_pos0);
    free(f->h_n);
    free(f->in);
    free(f->logits);
    free(f->hs);
    if (f->m) ember_model_free(f->m);
    free(f);
}

ember_status spec_mtp_new(const char *path, const ember_model *target, int32_t n_slots, int32_t n_ctx, int32_t n_threads,
                          const ember_model_params *mp_in, spec_proposer *out)
{
    mtp *f = calloc(1, sizeof *f);
    if (!f) return ember_error(EMBER_ERR_NOMEM, "MTP draft");
    snprintf(f->path, sizeof f->path, "%s", path);
    ember_status st;
    const ember_model_params mp = mp_in ? *mp_in : ember_model_default_params();
    if ((st = ember_model_load(path, &mp, &f->m)) != EMBER_OK) goto fail;
    if (!ember_model_mtp(f->m)) {
        st = ember_error(EMBER_ERR_INVALID_ARG, "--spec-type draft-mtp: %s has architecture %s, not gemma4-assistant", path,
                         ember_model_arch(f->m));
        goto fail;
    }
    if ((st = ember_mtp_ctx_new(f->m, target, n_slots, n_ctx, n_threads, &f->c)) != EMBER_OK) goto fail;
    f->target = target;
    f->n_slots = n_slots;
    f->n_ctx = n_ctx;
    f->n_vocab = ember_model_n_vocab(target);
    f->n_bb = ember_model_n_embd(target);
    f->n_hidden = ember_mtp_hidden_layers(f->c, f->layers);
    f->n_src = f->n_hidden - 1;
    f->kv_tok = calloc((size_t)n_slots * (size_t)n_ctx, sizeof *f->kv_tok);
    f->h = malloc(sizeof(float) * (size_t)n_slots * MTP_H_ROWS * (size_t)f->n_bb);
    f->h_pos0 = calloc((size_t)n_slots, sizeof *f->h_pos0);
    f->h_n = calloc((size_t)n_slots, sizeof *f->h_n);
    f->in = malloc(sizeof(float) * MTP_CHUNK * (size_t)f->n_src * (size_t)f->n_bb);
    f->logits = malloc(sizeof(float) * (size_t)f->n_vocab);
    f->hs = malloc(sizeof(float) * (size_t)f->n_bb);
    if (!f->kv_tok || !f->h || !f->h_pos0 || !f->h_n || !f->in || !f->logits || !f->hs) {
        st = ember_error(EMBER_ERR_NOMEM, "MTP draft: %d slots x %d positions", n_slots, n_ctx);
        goto fail;
    }
    *out = (spec_proposer){.name = "draft-mtp", .self = f, .costly = true,
                           .n_hidden_layers = f->n_hidden, .hidden_layers = f->layers,
                           .propose = mtp_propose, .absorb = mtp_absorb, .fork = mtp_fork,
                           .describe = mtp_describe, .free = mtp_free};
    return EMBER_OK;
fail:
    mtp_free(f);
    return st;
}
