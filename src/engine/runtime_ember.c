/*
 * runtime_ember.c — binds the engine's runtime table (engine.h) to the real
 * runtime of include/ember.h: one ember_context whose sequence i is slot i.
 *
 * Owns: nothing but the adapters. Must not: add behaviour; each entry calls
 * the ember_* function of the same name.
 */
#include "engine/runtime_ember.h"

#include "sample/constrained.h"
#include "sample/sampler.h"

#include <math.h>

static ember_status rt_decode(void *c, const ember_batch *b) { return ember_decode(c, b); }
static const float *rt_get_logits(void *c, int32_t i) { return ember_get_logits(c, i); }
static ember_status rt_seq_remove(void *c, ember_seq_id s) { return ember_seq_remove(c, s); }
static ember_status rt_seq_truncate(void *c, ember_seq_id s, ember_pos n) { return ember_seq_truncate(c, s, n); }
static ember_status rt_seq_fork(void *c, ember_seq_id a, ember_seq_id b, ember_pos n) { return ember_seq_fork(c, a, b, n); }
static ember_status rt_seq_checkpoint(void *c, ember_seq_id s) { return ember_seq_checkpoint(c, s); }
static ember_status rt_seq_ctx_checkpoint(void *c, ember_seq_id s) { return ember_seq_ctx_checkpoint(c, s); }
static ember_pos rt_seq_len(void *c, ember_seq_id s) { return ember_seq_len(c, s); }
static uint32_t rt_kv_free(void *c) { return ember_kv_free_tokens(c); }
static ember_status rt_sampler_new(void *c, const ember_sampler_params *p, int32_t n_vocab, ember_sampler **out)
{
    return ember_sampler_new(p, n_vocab, out);
}
static void rt_sampler_free(void *c, ember_sampler *s) { ember_sampler_free(s); }
static ember_token rt_sample(void *c, ember_sampler *s, const float *l) { return ember_sampler_sample(s, l); }
static void rt_accept(void *c, ember_sampler *s, ember_token t) { ember_sampler_accept(s, t); }
static ember_status rt_sample_grammar(void *c, ember_sampler *s, struct ember_grammar_state *g, const float *l,
                                      int32_t n_vocab, float *scratch, ember_token *out)
{
    return ember_sample_constrained(s, g, l, n_vocab, scratch, out);
}
static ember_status rt_set_hidden(void *c, int32_t n, const int32_t *l) { return ember_set_hidden_layers(c, n, l); }
static const float *rt_get_hidden(void *c, int32_t i, int32_t j) { return ember_get_hidden(c, i, j); }
static const float *rt_get_embd(void *c, int32_t i) { return ember_get_embeddings_ith(c, i); }

static ember_status rt_logits_top(void *c, int32_t n, const int32_t *entries, int32_t k, ember_logits_top *out)
{
    return ember_get_logits_top(c, n, entries, k, out);
}
static ember_status rt_top_start(void *c, int32_t n, const int32_t *entries, int32_t k, bool *queued)
{
    return ember_get_logits_top_start(c, n, entries, k, queued);
}
static ember_status rt_top_finish(void *c, ember_logits_top *out) { return ember_get_logits_top_finish(c, out); }
static ember_status rt_decode_fed(void *c, const ember_batch *b, const int32_t *top_row)
{
    return ember_decode_fed(c, b, top_row);
}
static int32_t rt_sampler_top_k(void *c, const ember_sampler *s) { return ember_sampler_top_k(s); }
static double rt_decode_device_seconds(void *c) { return ember_decode_device_seconds(c); }
static ember_status rt_sample_top(void *c, ember_sampler *s, const ember_logits_top *t, ember_token *out)
{
    return ember_sampler_sample_top(s, t, out);
}

static int cmp_p_desc(const void *x, const void *y)
{
    const ember_candidate *a = x, *b = y;
    return (a->p < b->p) - (a->p > b->p);
}

static void rt_post_probs(void *c, ember_sampler *s, const float *logits, ember_token chosen, int32_t k,
                          engine_tok *rec)
{
    (void)c;
    const ember_candidate *cand;
    int32_t n = ember_sampler_candidates(s, logits, &cand);
    rec->token = chosen;
    rec->logprob = -INFINITY;
    rec->n_top = 0;
    ember_candidate best[ENGINE_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < n; i++) {
        if (cand[i].id == chosen) rec->logprob = cand[i].p > 0 ? logf(cand[i].p) : -INFINITY;
        if (!(cand[i].p > 0)) continue;   /* as llama-server: candidates of p 0 are not listed */
        /* keep the k most probable (insertion into a short sorted list) */
        int32_t m = rec->n_top;
        if (m == k && (k == 0 || cand[i].p <= best[m - 1].p)) continue;
        if (m < k) m++;
        int32_t j = m - 1;
        while (j > 0 && cmp_p_desc(&cand[i], &best[j - 1]) < 0) { best[j] = best[j - 1]; j--; }
        best[j] = cand[i];
        rec->n_top = m;
    }
    for (int32_t i = 0; i < rec->n_top; i++) {
        rec->top[i] = best[i].id;
        rec->top_logprob[i] = logf(best[i].p);
    }
}

engine_runtime engine_runtime_ember(ember_context *ctx, int32_t n_vocab, int32_t n_embd)
{
    const bool fed = ember_context_token_feedback(ctx);
    return (engine_runtime){
        .ctx = ctx, .n_vocab = n_vocab, .decode = rt_decode, .get_logits = rt_get_logits,
        .seq_remove = rt_seq_remove, .seq_truncate = rt_seq_truncate, .seq_fork = rt_seq_fork,
        .seq_checkpoint = rt_seq_checkpoint,
        .seq_ctx_checkpoint = ember_context_wants_checkpoints(ctx) ? rt_seq_ctx_checkpoint : NULL,
        .seq_len = rt_seq_len, .kv_free_tokens = rt_kv_free, .sampler_new = rt_sampler_new,
        .sampler_free = rt_sampler_free, .sampler_sample = rt_sample, .sampler_accept = rt_accept,
        .sampler_sample_grammar = rt_sample_grammar,
        .n_embd = n_embd, .set_hidden_layers = rt_set_hidden, .get_hidden = rt_get_hidden,
        .get_embeddings = ember_context_embeddings_supported(ctx) ? rt_get_embd : NULL,
        .logits_top = rt_logits_top, .sampler_top_k = rt_sampler_top_k, .sampler_sample_top = rt_sample_top,
        .sampler_post_probs = rt_post_probs,
        .logits_top_start = fed ? rt_top_start : NULL,
        .logits_top_finish = fed ? rt_top_finish : NULL,
        .decode_fed = fed ? rt_decode_fed : NULL,
        .decode_device_seconds = rt_decode_device_seconds,
    };
}
