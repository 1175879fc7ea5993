/*
 * slot.c — one slot's part of a step: propose batch entries, then sample,
 * accept and emit. It is the seam for speculative decoding: propose puts the
 * slot's draft (src/engine/spec, e->cfg.spec) after its last sampled token
 * in the same batch as every other slot's entries; after_decode verifies the
 * draft against the target's logits with the slot's own sampler, emits the
 * accepted tokens plus one, and rolls the rejected K/V back with
 * seq_truncate (no copy). Every draw (verified drafts included) goes
 * through slot_draw: the request's grammar (a clone of its template state,
 * checked lazily and masked only on rejection, then advanced) and tokens
 * forced by the request's hook (reasoning budget), which the grammar may
 * veto.
 *
 * Owns: a slot's token history, its sampler, stop-string and UTF-8 hold-back
 * of output text, log-probabilities. Must not: pick which slots run (the
 * scheduler does) or call decode.
 */
#include "engine/engine_internal.h"
#include "base/status.h"
#include "sample/grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void engine_batch_add(ember_batch *b, ember_token t, ember_pos pos, ember_seq_id seq, bool logits, bool embd)
{
    int32_t i = b->n_tokens++;
    b->token[i] = t;
    b->pos[i] = pos;
    b->seq_id[i] = seq;
    b->logits[i] = logits ? 1 : 0;
    b->embd[i] = embd ? 1 : 0;
}

/* Whether an embedding request reads position pos of its prompt [n]. */
static bool embd_wants(ember_pooling pooling, int32_t pos, int32_t n)
{
    switch (pooling) {
    case EMBER_POOLING_CLS: return pos == 0;
    case EMBER_POOLING_LAST: return pos == n - 1;
    default: return true;   /* NONE, MEAN */
    }
}

/* This step's draft for a generating slot, at most `room` tokens: bounded
 * by the batch budget, the slot's n_ctx (the K/V of the last token plus the
 * draft must fit) and its n_predict (the step emits up to draft + 1). */
static int32_t spec_slot_draft(engine *e, slot *s, int32_t room)
{
    int32_t ctx_room = e->cfg.n_ctx - (s->n_past + 1);
    int32_t pred_room = s->n_predict - s->n_generated - 1;
    if (ctx_room < room) room = ctx_room;
    if (pred_room < room) room = pred_room;
    if (room < 0) room = 0;
    if (room == 0 && s->n_hidden_rows == 0) return 0;
    const spec_proposer *pr = &e->cfg.spec->prop;
    spec_input in = {.slot = s->id, .tokens = s->tokens, .n_tokens = s->n_tokens, .n_prompt = s->n_prompt,
                     .n_hidden = pr->n_hidden_layers, .hidden_layer = pr->hidden_layers,
                     .n_hidden_rows = s->hidden ? s->n_hidden_rows : 0, .hidden_pos = s->hidden_pos,
                     .hidden = s->hidden, .n_embd = e->rt.n_embd};
    int32_t n = spec_engine_propose(e->cfg.spec, &in, room, s->draft);
    s->n_hidden_rows = 0;   /* handed over once */
    return n;
}

void slots_spec_prefetch(engine *e, const bool *deferred)
{
    if (!e->cfg.spec || !e->cfg.spec->prop.prefetch) return;
    spec_input in[64];
    int32_t n = 0;
    for (int32_t i = 0; i < e->cfg.n_slots && n < (int32_t)(sizeof in / sizeof in[0]); i++) {
        slot *s = &e->slots[i];
        if (s->state != SLOT_GENERATE || deferred[i]) continue;
        if (e->cfg.n_ctx - (s->n_past + 1) < 1 || s->n_predict - s->n_generated - 1 < 1) continue;
        in[n++] = (spec_input){.slot = s->id, .tokens = s->tokens, .n_tokens = s->n_tokens, .n_prompt = s->n_prompt,
                               .n_embd = e->rt.n_embd};
    }
    spec_engine_prefetch(e->cfg.spec, in, n);
}

int32_t slot_propose(engine *e, slot *s, int32_t budget)
{
    s->i_logits = -1;
    s->n_batch_entries = 0;
    if (budget <= 0) return 0;
    ember_batch *b = &e->batch;
    s->i_batch0 = b->n_tokens;
    if (s->state == SLOT_GENERATE) {
        /* the last sampled token, then this slot's draft (verified in the same batch) */
        s->i_logits = b->n_tokens;
        engine_batch_add(b, s->tokens[s->n_tokens - 1], s->n_past, s->id, true, false);
        s->n_batch_entries = 1;
        s->n_draft = e->cfg.spec ? spec_slot_draft(e, s, budget - 1) : 0;
        /* a recurrent state cannot be cut back: keep it as of n_past, so the
         * rollback of rejected drafts restores it and recomputes the kept ones */
        if (s->n_draft > 0 && e->rt.seq_checkpoint) e->rt.seq_checkpoint(e->rt.ctx, s->id);
        for (int32_t k = 0; k < s->n_draft; k++) engine_batch_add(b, s->draft[k], s->n_past + 1 + k, s->id, true, false);
        s->n_batch_entries += s->n_draft;
    } else if (s->state == SLOT_PREFILL) {
        int32_t n = s->prefill_end - s->n_past;
        if (n > budget) n = budget;
        if (e->rt.seq_ctx_checkpoint) {   /* end at the next block boundary (a checkpoint there) */
            const int32_t I = slot_ckpt_interval(e), next = (s->n_past / I + 1) * I;
            if (s->n_past + n > next) n = next - s->n_past;
        }
        const engine_req_params *p = &s->req->p;
        for (int32_t k = 0; k < n; k++) {
            int32_t pos = s->n_past + k;
            if (p->embd) {   /* no logits: the final hidden states of the positions pooling reads */
                engine_batch_add(b, s->tokens[pos], pos, s->id, false, embd_wants(p->pooling, pos, s->n_prompt));
                continue;
            }
            bool last = pos == s->prefill_end - 1;
            if (last) s->i_logits = b->n_tokens;
            engine_batch_add(b, s->tokens[pos], pos, s->id, last, false);
        }
        s->n_batch_entries = n;
    }
    return s->n_batch_entries;
}

/* Keep the target's hidden states of batch entries i0 .. i0 + n - 1 (one
 * slot's verified positions, consecutive) for the slot's next proposal. */
static void keep_hidden(engine *e, slot *s, int32_t i0, int32_t n)
{
    s->n_hidden_rows = 0;
    if (!s->hidden || n <= 0) return;
    const int32_t nh = e->cfg.spec->prop.n_hidden_layers;
    const size_t row = (size_t)e->rt.n_embd;
    for (int32_t r = 0; r < n; r++)
        for (int32_t j = 0; j < nh; j++) {
            const float *h = e->rt.get_hidden(e->rt.ctx, i0 + r, j);
            if (!h) return;
            memcpy(s->hidden + ((size_t)r * (size_t)nh + (size_t)j) * row, h, row * sizeof(float));
        }
    s->n_hidden_rows = n;
    s->hidden_pos = e->batch.pos[i0];
}

/* Bytes at the end of text[len] that start a UTF-8 sequence not yet complete. */
static size_t utf8_incomplete_tail(const char *text, size_t len)
{
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        unsigned char c = (unsigned char)text[len - back];
        if ((c & 0xC0) == 0x80) continue;          /* continuation byte */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

size_t stop_holdback(const char *text, size_t len, const char *const *stop, int32_t n_stop)
{
    size_t hold = 0;
    for (int32_t i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        size_t max = sl - 1 < len ? sl - 1 : len;   /* a full match is found elsewhere */
        for (size_t k = max; k > hold; k--)
            if (!memcmp(text + len - k, stop[i], k)) { hold = k; break; }
    }
    return hold;
}

static void req_commit(engine_req *r, const char *text, size_t n)
{
    if (n == 0) return;
    pthread_mutex_lock(&r->mu);
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n + 1) cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t) { pthread_mutex_unlock(&r->mu); return; }
        r->text = t;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, text, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Append a piece of output; commit what can no longer be part of a stop
 * string or an unfinished UTF-8 character. Finishes the request (STOP) when a
 * stop string appears: the text before it is committed, the rest dropped. */
void slot_emit_text(engine *e, slot *s, const char *piece, int32_t n, bool final)
{
    engine_req *r = s->req;
    if (n > 0) {
        if (s->pending_len + (size_t)n > s->pending_cap) {
            size_t cap = s->pending_cap ? s->pending_cap : 64;
            while (cap < s->pending_len + (size_t)n) cap *= 2;
            char *p = realloc(s->pending, cap);
            if (!p) return;
            s->pending = p;
            s->pending_cap = cap;
        }
        memcpy(s->pending + s->pending_len, piece, (size_t)n);
        s->pending_len += (size_t)n;
    }
    const char *const *stop = (const char *const *)r->p.stop;
    size_t first = SIZE_MAX;
    int32_t which = -1;
    for (int32_t i = 0; i < r->p.n_stop; i++) {
        size_t sl = strlen(stop[i]);
        if (sl > s->pending_len) continue;
        const char *hit = memmem(s->pending, s->pending_len, stop[i], sl);
        if (hit && (size_t)(hit - s->pending) < first) { first = (size_t)(hit - s->pending); which = i; }
    }
    if (first != SIZE_MAX) {
        pthread_mutex_lock(&r->mu);
        r->stop_index = which;
        pthread_mutex_unlock(&r->mu);
        req_commit(r, s->pending, first);
        s->pending_len = 0;
        slot_release(e, s, ENGINE_FINISH_STOP, NULL);
        return;
    }
    size_t hold = 0;
    if (!final) {
        hold = stop_holdback(s->pending, s->pending_len, stop, r->p.n_stop);
        size_t u = utf8_incomplete_tail(s->pending, s->pending_len);
        if (u > hold) hold = u;
    }
    size_t n_commit = s->pending_len - hold;
    req_commit(r, s->pending, n_commit);
    if (hold) memmove(s->pending, s->pending + n_commit, hold);   /* pending is NULL before the first piece */
    s->pending_len = hold;
}

ember_status slot_constrain_begin(engine *e, slot *s)
{
    s->force = NULL;
    s->n_force = 0;
    if (!s->req || !s->req->p.grammar) return EMBER_OK;
    ember_status st = ember_grammar_state_clone(s->req->p.grammar, &s->grammar);
    if (st != EMBER_OK) return st;
    s->masked = malloc(sizeof *s->masked * (size_t)e->rt.n_vocab);
    if (!s->masked) return ember_error(EMBER_ERR_NOMEM, "grammar: logits copy of %d", e->rt.n_vocab);
    return EMBER_OK;
}

static void slot_constrain_end(slot *s)
{
    ember_grammar_state_free(s->grammar);
    s->grammar = NULL;
    free(s->masked);
    s->masked = NULL;
    s->force = NULL;
    s->n_force = 0;
}

/* Draw the next token: a token the request's hook forces, or a sample,
 * constrained by the grammar the lazy way (grammar.h's seam: draw, check,
 * mask and redraw only on rejection). Returns -1 when the grammar allows
 * nothing (the slot is released with an error). */
static ember_token slot_draw(engine *e, slot *s, const float *logits)
{
    if (s->n_force > 0) {
        /* the grammar is the client's hard constraint: a forced token it
         * cannot take ends the forcing, and sampling goes on under it */
        if (!s->grammar || ember_grammar_accept(s->grammar, *s->force) == EMBER_OK) {
            s->n_force--;
            return *s->force++;
        }
        s->force = NULL;
        s->n_force = 0;
    }
    if (s->grammar && e->rt.sampler_sample_grammar) {
        ember_token t = -1;
        ember_status st = e->rt.sampler_sample_grammar(e->rt.ctx, s->smpl, s->grammar, logits, e->rt.n_vocab,
                                                       s->masked, &t);
        if (st == EMBER_OK) st = ember_grammar_accept(s->grammar, t);
        if (st != EMBER_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "grammar: no allowed token after %d generated (%s)", s->n_generated,
                     ember_last_error());
            slot_release(e, s, ENGINE_FINISH_ERROR, msg);
            return -1;
        }
        return t;
    }
    ember_token t = e->rt.sampler_sample(e->rt.ctx, s->smpl, logits);
    if (!s->grammar) return t;
    if (!ember_grammar_token_allowed(s->grammar, t)) {
        memcpy(s->masked, logits, sizeof *s->masked * (size_t)e->rt.n_vocab);
        ember_status st = ember_grammar_apply(s->grammar, s->masked, e->rt.n_vocab);
        if (st == EMBER_OK) t = e->rt.sampler_sample(e->rt.ctx, s->smpl, s->masked);
        if (st != EMBER_OK || !ember_grammar_token_allowed(s->grammar, t)) {
            char msg[256];
            snprintf(msg, sizeof msg, "grammar: no allowed token after %d generated (%s)", s->n_generated,
                     st != EMBER_OK ? ember_last_error() : "every allowed token has zero probability");
            slot_release(e, s, ENGINE_FINISH_ERROR, msg);
            return -1;
        }
    }
    if (ember_grammar_accept(s->grammar, t) != EMBER_OK) {
        slot_release(e, s, ENGINE_FINISH_ERROR, "grammar: accepting the sampled token failed");
        return -1;
    }
    return t;
}

void slot_release(engine *e, slot *s, engine_finish f, const char *err)
{
    engine_req *r = s->req;
    slot_constrain_end(s);
    if (!r) return;
    if (f != ENGINE_FINISH_STOP && f != ENGINE_FINISH_CANCELLED && s->pending_len)
        req_commit(r, s->pending, s->pending_len);   /* length/error: flush what is held back */
    s->pending_len = 0;
    pthread_mutex_lock(&r->mu);
    r->n_generated = s->n_generated;
    pthread_mutex_unlock(&r->mu);
    engine_req_finish(r, f, err);
    if (s->smpl) e->rt.sampler_free(e->rt.ctx, s->smpl);
    s->smpl = NULL;
    pthread_mutex_lock(&e->mu);
    e->st.n_requests_done++;
    if (f == ENGINE_FINISH_CANCELLED) e->st.n_requests_cancelled++;
    pthread_mutex_unlock(&e->mu);
    engine_req_release(r);
    s->req = NULL;
    s->state = SLOT_IDLE;
    s->last_used = e->step_no;
}

/* log softmax of logits[n_vocab] at `t`, and the top `k` alternatives. */
static void fill_logprobs(engine *e, const float *logits, engine_tok *rec, int32_t k)
{
    int32_t nv = e->rt.n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < nv; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < nv; i++) sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    rec->logprob = logits[rec->token] - lse;
    rec->n_top = 0;
    for (int32_t i = 0; i < nv; i++) {        /* insertion into a sorted top-k */
        float v = logits[i];
        if (rec->n_top == k && (k == 0 || v <= rec->top_logprob[k - 1])) continue;
        int32_t j = rec->n_top < k ? rec->n_top++ : k - 1;
        while (j > 0 && rec->top_logprob[j - 1] < v) {
            rec->top_logprob[j] = rec->top_logprob[j - 1];
            rec->top[j] = rec->top[j - 1];
            j--;
        }
        rec->top_logprob[j] = v;
        rec->top[j] = i;
    }
    for (int32_t j = 0; j < rec->n_top; j++) rec->top_logprob[j] -= lse;
}

/* fill_logprobs from a row's head (slot_heads asked for >= k entries, and
 * the sampled token is in it: the argmax or a top-k survivor). */
static void fill_logprobs_head(const ember_logits_top *h, engine_tok *rec, int32_t k)
{
    rec->logprob = -INFINITY;
    for (int32_t i = 0; i < h->n; i++)
        if (h->id[i] == rec->token) { rec->logprob = h->logit[i] - h->lse; break; }
    rec->n_top = k < h->n ? k : h->n;
    for (int32_t j = 0; j < rec->n_top; j++) {
        rec->top[j] = h->id[j];
        rec->top_logprob[j] = h->logit[j] - h->lse;
    }
}

/* The head size a slot's rows need this step, or 0 when they are read in
 * full: a grammar or forced tokens (they look at the whole row), a sampler
 * that needs the row (bias, penalties, a draw over all tokens), or more
 * logprobs alternatives than a head holds. */
int32_t slot_head_k(engine *e, slot *s)
{
    if (!s->req || s->grammar || s->n_force > 0 || s->req->p.post_sampling_probs) return 0;
    int32_t k = e->rt.sampler_top_k(e->rt.ctx, s->smpl);
    if (k <= 0) return 0;
    if (s->req->p.logprobs) {
        const int32_t want = s->req->p.top_logprobs > 1 ? s->req->p.top_logprobs : 1;
        if (want > EMBER_LOGITS_TOP_MAX) return 0;
        if (want > k) k = want;
    }
    return k;
}

bool slot_heads_room(engine *e, int32_t n)
{
    if (n <= e->heads_cap) return true;
    ember_logits_top *h = realloc(e->heads, sizeof *h * (size_t)n);
    if (h) e->heads = h;
    int32_t *r = realloc(e->head_rows, sizeof *r * (size_t)n);
    if (r) e->head_rows = r;
    if (!h || !r) return false;
    e->heads_cap = n;
    return true;
}

void slot_heads(engine *e)
{
    for (int32_t i = 0; i < e->cfg.n_slots; i++) e->slots[i].has_head = false;
    if (!e->rt.logits_top || !e->rt.sampler_top_k || !e->rt.sampler_sample_top) return;
    int32_t n = 0, k = 1;
    for (int32_t pass = 0; pass < 2; pass++) {   /* 0: count and size; 1: list the rows */
        int32_t m = 0;
        for (int32_t i = 0; i < e->cfg.n_slots; i++) {
            slot *s = &e->slots[i];
            if (s->n_batch_entries == 0 || s->i_logits < 0) continue;
            const int32_t ks = pass == 0 ? slot_head_k(e, s) : (s->has_head ? 1 : 0);
            if (ks <= 0) continue;
            if (pass == 0) {
                if (ks > k) k = ks;
                s->has_head = true;
            } else {
                s->head0 = m;
                for (int32_t j = 0; j <= s->n_draft; j++) e->head_rows[m + j] = s->i_logits + j;
            }
            m += 1 + s->n_draft;
        }
        n = m;
        if (n == 0) return;
        if (pass == 0 && !slot_heads_room(e, n)) {   /* rows are read in full instead */
            for (int32_t i = 0; i < e->cfg.n_slots; i++) e->slots[i].has_head = false;
            return;
        }
    }
    if (e->rt.logits_top(e->rt.ctx, n, e->head_rows, k, e->heads) != EMBER_OK)
        for (int32_t i = 0; i < e->cfg.n_slots; i++) e->slots[i].has_head = false;
}

/* Record, emit and check one sampled token `t` (drawn from `logits`, or
 * from the row's head `head` when logits is NULL).
 * Returns false when the slot finished (EOG, stop string, length). */
static bool emit_token(engine *e, slot *s, ember_token t, const float *logits, const ember_logits_top *head)
{
    engine_req *r = s->req;
    engine_tok post;   /* post_sampling_probs: the chain's view, before t is accepted (its penalties) */
    bool have_post = r->p.logprobs && r->p.post_sampling_probs && logits;
    if (have_post) e->rt.sampler_post_probs(e->rt.ctx, s->smpl, logits, t, r->p.top_logprobs, &post);
    e->rt.sampler_accept(e->rt.ctx, s->smpl, t);
    s->tokens[s->n_tokens++] = t;
    s->n_generated++;

    pthread_mutex_lock(&r->mu);
    if (r->t_first_token == 0) r->t_first_token = engine_now();
    r->n_generated = s->n_generated;
    if (r->p.logprobs) {
        if (r->n_toks == r->toks_cap) {
            int32_t cap = r->toks_cap ? r->toks_cap * 2 : 16;
            engine_tok *nt = realloc(r->toks, sizeof *nt * (size_t)cap);
            if (nt) { r->toks = nt; r->toks_cap = cap; }
        }
        if (r->n_toks < r->toks_cap) {
            engine_tok *rec = &r->toks[r->n_toks];
            rec->token = t;
            if (have_post) *rec = post;
            else if (logits) fill_logprobs(e, logits, rec, r->p.top_logprobs);
            else fill_logprobs_head(head, rec, r->p.top_logprobs);
            r->n_toks++;
        }
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);

    if (!r->p.ignore_eos && e->vocab.is_eog(e->vocab.ud, t)) {
        slot_emit_text(e, s, NULL, 0, true);
        if (s->req) slot_release(e, s, ENGINE_FINISH_STOP, NULL);
        return false;
    }
    char buf[1024];   /* longer than any vocabulary piece we know (pieces are < 256 bytes) */
    int32_t n = e->vocab.token_piece(e->vocab.ud, t, buf, (int32_t)sizeof buf);
    if (n < 0 || n > (int32_t)sizeof buf) n = 0;
    if (r->p.hook.on_token) {
        const ember_token *force = NULL;
        int32_t n_force = 0;
        r->p.hook.on_token(r->p.hook.ud, t, buf, n, &force, &n_force);
        if (force && n_force > 0 && s->n_force == 0) { s->force = force; s->n_force = n_force; }
    }
    bool last = s->n_generated >= s->n_predict;
    slot_emit_text(e, s, buf, n, last);
    if (s->req && last) slot_release(e, s, ENGINE_FINISH_LENGTH, NULL);
    return s->req != NULL;
}

/* The prefix cache's block checkpoint of a recurrent state (engine.h,
 * ckpt_interval): after a step that took s from n_past0 to s->n_past, at a
 * block boundary, across one, or at the end of the prompt. */
static void block_checkpoint(engine *e, slot *s, int32_t n_past0, bool prompt_end)
{
    if (!e->rt.seq_ctx_checkpoint || s->n_past <= 0) return;
    const int32_t I = slot_ckpt_interval(e);
    if (prompt_end || s->n_past / I != n_past0 / I) e->rt.seq_ctx_checkpoint(e->rt.ctx, s->id);   /* best effort */
}

/* An embedding request's entries of this step: each position pooling reads
 * is kept (NONE: its row; CLS, LAST: the one row) or summed (MEAN, in
 * double; the sum starts over at position 0, so a preempted request that is
 * prefilled again counts each position once); once the whole prompt is in,
 * the request finishes STOP with its rows. */
static void slot_embd_after_decode(engine *e, slot *s)
{
    engine_req *r = s->req;
    const int32_t i0 = s->i_batch0, n = s->n_batch_entries, n_embd = e->rt.n_embd, n_past0 = s->n_past;
    s->n_past += n;
    s->n_batch_entries = 0;
    /* the slot keeps this prompt's cache like a completion's, so its
     * recurrent state is checkpointed the same way (prefix reuse later) */
    block_checkpoint(e, s, n_past0, s->n_past >= s->prefill_end);
    const ember_pooling pool = r->p.pooling;
    for (int32_t k = 0; k < n; k++) {
        const int32_t pos = e->batch.pos[i0 + k];
        if (!e->batch.embd[i0 + k]) continue;
        const float *h = e->rt.get_embeddings(e->rt.ctx, i0 + k);
        if (!h) { slot_release(e, s, ENGINE_FINISH_ERROR, "no embedding for the slot's entry"); return; }
        if (pool == EMBER_POOLING_MEAN) {
            if (pos == 0) memset(s->embd_sum, 0, sizeof *s->embd_sum * (size_t)n_embd);
            for (int32_t j = 0; j < n_embd; j++) s->embd_sum[j] += h[j];
        } else {
            const size_t row = pool == EMBER_POOLING_NONE ? (size_t)pos : 0;
            memcpy(r->embd + row * (size_t)n_embd, h, sizeof *h * (size_t)n_embd);
        }
    }
    if (s->n_past < s->prefill_end) return;   /* prefill continues next step */
    if (pool == EMBER_POOLING_MEAN)
        for (int32_t j = 0; j < n_embd; j++) r->embd[j] = (float)(s->embd_sum[j] / (double)s->n_prompt);
    pthread_mutex_lock(&r->mu);
    r->n_embd_rows = pool == EMBER_POOLING_NONE ? s->n_prompt : 1;
    pthread_mutex_unlock(&r->mu);
    slot_release(e, s, ENGINE_FINISH_STOP, NULL);
}

int32_t slot_after_decode(engine *e, slot *s)
{
    engine_req *r = s->req;
    if (r && r->p.embd) {
        slot_embd_after_decode(e, s);
        return 0;
    }
    int32_t n_past0 = s->n_past;
    s->n_past += s->n_batch_entries;
    s->n_batch_entries = 0;
    int32_t n_draft = s->n_draft;
    s->n_draft = 0;
    if (s->i_logits < 0) {                           /* prefill continues next step */
        block_checkpoint(e, s, n_past0, false);
        return 0;
    }
    if (s->state == SLOT_PREFILL && s->n_predict <= 0) {   /* n_predict 0 (llama-server): the prompt is in the cache */
        s->i_logits = -1;
        block_checkpoint(e, s, n_past0, true);
        slot_release(e, s, ENGINE_FINISH_LENGTH, NULL);
        return 0;
    }
    const bool prompt_end = s->state == SLOT_PREFILL;
    s->state = SLOT_GENERATE;
    int32_t i0 = s->i_logits;
    s->i_logits = -1;

    /* Verify: draw from the target at entry i0 + j with the slot's own
     * sampler; draft token j is accepted iff the draw equals it (the
     * rejection rule for a deterministic draft, spec.h). The draw at the
     * first mismatch, or after the last draft, is the step's extra token. */
    int32_t n_sampled = 0, n_acc = 0;
    if (n_draft > 0) {
        pthread_mutex_lock(&r->mu);
        r->n_draft += n_draft;
        pthread_mutex_unlock(&r->mu);
    }
    const bool has_head = s->has_head;
    s->has_head = false;
    /* --spec-force-accept (benchmarks): the first `forced` drafts are taken as
     * they are and the draw after them never matches (no grammar or forced
     * tokens of the request's own: those keep the real rule) */
    const int32_t forced = n_draft > 0 && !s->grammar && s->n_force == 0
                               ? spec_engine_forced_accept(e->cfg.spec, s->id, n_draft) : -1;
    for (int32_t j = 0; j <= n_draft; j++) {
        /* the row's head when it decides the draw (no grammar, nothing
         * forced), else the full row */
        const ember_logits_top *head = has_head ? &e->heads[s->head0 + j] : NULL;
        const float *logits = NULL;
        ember_token t = -1;
        if (forced >= 0 && j < forced) {   /* accepted by force: the draft token, the row only for logprobs */
            t = s->draft[j];
            if (!head && !(logits = e->rt.get_logits(e->rt.ctx, i0 + j))) {
                slot_release(e, s, ENGINE_FINISH_ERROR, "no logits for the slot's last entry");
                break;
            }
        } else {
            if (head && (s->grammar || s->n_force > 0 ||
                         e->rt.sampler_sample_top(e->rt.ctx, s->smpl, head, &t) != EMBER_OK))
                head = NULL;
            if (!head && e->rows_gone) {   /* a step queued ahead has taken the rows (pipeline.c) */
                slot_release(e, s, ENGINE_FINISH_ERROR, "the row's head was lost");
                break;
            }
            if (!head) {
                logits = e->rt.get_logits(e->rt.ctx, i0 + j);
                if (!logits) { slot_release(e, s, ENGINE_FINISH_ERROR, "no logits for the slot's last entry"); break; }
                t = slot_draw(e, s, logits);   /* grammar / forced tokens; -1: released */
            }
        }
        if (t < 0) break;
        bool hit = j < n_draft && (forced >= 0 ? j < forced : t == s->draft[j]);
        n_sampled++;
        if (hit) {   /* counted before emit_token, which may finish the request and drop r */
            n_acc++;
            pthread_mutex_lock(&r->mu);
            r->n_draft_accepted++;
            pthread_mutex_unlock(&r->mu);
        }
        if (!emit_token(e, s, t, logits, head) || !hit) break;
    }
    if (s->req) keep_hidden(e, s, i0, 1 + n_acc);   /* the last token and the accepted drafts */
    if (n_draft > 0) {
        /* roll back the K/V of rejected drafts: keep the last token + accepted ones */
        int32_t keep = n_past0 + 1 + n_acc;
        if (keep < s->n_past) {
            if (e->rt.seq_truncate(e->rt.ctx, s->id, keep) == EMBER_OK) {
                s->n_past = keep;
            } else {
                if (s->req) slot_release(e, s, ENGINE_FINISH_ERROR, "speculation: KV rollback (seq_truncate) failed");
                e->rt.seq_remove(e->rt.ctx, s->id);
                s->n_past = 0;
                s->n_tokens = 0;
            }
        }
        spec_engine_result(e->cfg.spec, s->id, n_draft, n_acc);
    }
    block_checkpoint(e, s, n_past0, prompt_end);
    return n_sampled;
}
