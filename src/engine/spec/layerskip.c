/*
 * layerskip.c — self-speculative proposer (--spec-type layerskip): the
 * target itself, run through its first k layers only and then its own final
 * norm and LM head, drafts greedily; no extra weights, no second KV cache.
 * Sources: Zhang et al. 2024, "Draft & Verify: Lossless Large Language Model
 * Acceleration via Self-Speculative Decoding" (skip layers of the target to
 * draft); Elhoushi et al. 2024, "LayerSkip" (early exit at layer k through the
 * shared LM head, verify with the rest). The code is ours.
 *
 * Owns: nothing but k and a batch. Must not: touch slots or the engine's
 * batch. It runs ember_decode on the target's context from inside the
 * proposer seam (before the step's target batch is built into a decode).
 *
 * KV handling: the slot's sequence holds tokens[0, n - 1); the draft pass
 * decodes the last token at position n - 1 and then each draft token but the
 * last, with ember_set_layer_limit(k), so it writes K/V of layers [0, k) at
 * positions [n - 1, n - 1 + draft) and nothing for layers >= k. Before
 * returning it truncates the sequence back to n - 1 (ember_seq_truncate, no
 * copy): the target's verification batch then decodes the same positions
 * through every layer, overwriting those rows, and the engine's usual
 * rollback drops the rejected ones. So a full decode never attends to a
 * row that only the draft wrote. (The first-k-layer work on those positions
 * is done twice; keeping it would need the residual stream at layer k per
 * row: not done.)
 */
#include "engine/spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

typedef struct layerskip {
    ember_context *ctx;     /* the target's (not owned) */
    int32_t n_layer, n_layer_model, n_vocab;
    ember_batch b;
} layerskip;

/* argmax of logits[n] and its softmax probability */
static ember_token top1(const float *l, int32_t n, float *p)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) if (l[i] > l[best]) best = i;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(l[i] - l[best]));
    *p = (float)(1.0 / sum);
    return best;
}

static int32_t layerskip_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *out,
                                 float *q)
{
    layerskip *ls = self;
    const ember_seq_id seq = in->slot;
    const ember_pos n_past = in->n_tokens - 1;   /* the last token is not in the KV yet */
    if (n_past < 0 || ember_seq_len(ls->ctx, seq) != n_past) return 0;
    if (ember_set_layer_limit(ls->ctx, ls->n_layer) != EMBER_OK) return 0;
    int32_t n_out = 0;
    ember_token t = in->tokens[n_past];
    for (;;) {
        ls->b.n_tokens = 1;
        ls->b.token[0] = t;
        ls->b.pos[0] = n_past + n_out;
        ls->b.seq_id[0] = seq;
        ls->b.logits[0] = 1;
        if (ember_decode(ls->ctx, &ls->b) != EMBER_OK) break;   /* e.g. the pool is full: draft what we have */
        const float *l = ember_get_logits(ls->ctx, 0);
        if (!l) break;
        float p;
        t = top1(l, ls->n_vocab, &p);
        if (p < p_min) break;
        out[n_out] = t;
        if (q) q[n_out] = 1.0f;
        if (++n_out >= n_max) break;
    }
    ember_set_layer_limit(ls->ctx, 0);
    if (ember_seq_len(ls->ctx, seq) > n_past && ember_seq_truncate(ls->ctx, seq, n_past) != EMBER_OK) {
        /* cannot happen (truncating to a shorter length of an existing
         * sequence); if it did, the rows would be unsafe to keep */
        ember_seq_remove(ls->ctx, seq);
        return 0;
    }
    return n_out;
}

static void layerskip_describe(void *self, char *buf, size_t cap)
{
    layerskip *ls = self;
    snprintf(buf, cap, "self-speculative, the target's first %d of %d layers + its LM head", ls->n_layer,
             ls->n_layer_model);
}

static void layerskip_free(void *self)
{
    layerskip *ls = self;
    if (!ls) return;
    ember_batch_free(&ls->b);
    free(ls);
}

ember_status spec_layerskip_new(ember_context *target, const ember_model *m, int32_t n_layer, spec_proposer *out)
{
    const int32_t nl = ember_model_n_layer(m);
    if (n_layer < 1 || n_layer >= nl)
        return ember_error(EMBER_ERR_INVALID_ARG, "layer-skip proposer: --spec-layers %d not in [1, %d) (the model has %d layers)",
                           n_layer, nl, nl);
    ember_status st = ember_set_layer_limit(target, n_layer);   /* refused by architectures that cannot stop early */
    if (st != EMBER_OK) return st;
    ember_set_layer_limit(target, 0);
    layerskip *ls = calloc(1, sizeof *ls);
    if (!ls) return ember_error(EMBER_ERR_NOMEM, "layer-skip proposer");
    ls->ctx = target;
    ls->n_layer = n_layer;
    ls->n_layer_model = nl;
    ls->n_vocab = ember_model_n_vocab(m);
    if ((st = ember_batch_init(1, &ls->b)) != EMBER_OK) {
        free(ls);
        return st;
    }
    *out = (spec_proposer){.name = "layerskip", .self = ls, .costly = true, .propose = layerskip_propose,
                           .describe = layerskip_describe, .free = layerskip_free};
    return EMBER_OK;
}
