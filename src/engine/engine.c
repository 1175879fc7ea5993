/*
 * engine.c — the engine's lifetime: creation (slots, batch, queue), the step
 * thread, shutdown, and the counters behind /slots and /metrics.
 *
 * Owns: the step thread. Must not: schedule (scheduler.c) or sample (slot.c).
 */
#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static ember_status engine_batch_init(int32_t n_max, ember_batch *b);
static void engine_batch_free(ember_batch *b);

ember_status engine_new(const engine_config *cfg, const engine_runtime *rt, const engine_vocab *vocab, engine **out)
{
    *out = NULL;
    if (cfg->n_slots < 1) return ember_error(EMBER_ERR_INVALID_ARG, "engine: n_slots (--parallel) must be >= 1, got %d", cfg->n_slots);
    if (cfg->n_ctx < 2) return ember_error(EMBER_ERR_INVALID_ARG, "engine: n_ctx (-c) must be >= 2, got %d", cfg->n_ctx);
    if (cfg->n_batch < 1) return ember_error(EMBER_ERR_INVALID_ARG, "engine: n_batch must be >= 1, got %d", cfg->n_batch);
    if (rt->n_vocab < 1) return ember_error(EMBER_ERR_INVALID_ARG, "engine: n_vocab must be >= 1");
    engine *e = calloc(1, sizeof *e);
    if (!e) return ember_error(EMBER_ERR_NOMEM, "engine");
    e->cfg = *cfg;
    if (e->cfg.n_queue_max < 0) e->cfg.n_queue_max = 0;
    e->rt = *rt;
    e->vocab = *vocab;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->op_cv, NULL);
    e->q_cap = e->cfg.n_queue_max + e->cfg.n_slots;
    e->queue = calloc((size_t)e->q_cap, sizeof *e->queue);
    e->slots = calloc((size_t)cfg->n_slots, sizeof *e->slots);
    e->slot_info = calloc((size_t)cfg->n_slots, sizeof *e->slot_info);
    if (!e->queue || !e->slots || !e->slot_info) goto nomem;
    for (int32_t i = 0; i < cfg->n_slots; i++) {
        e->slots[i].id = i;
        e->slots[i].i_logits = -1;
        e->slots[i].tokens = malloc(sizeof(ember_token) * ((size_t)cfg->n_ctx + 1));
        if (!e->slots[i].tokens) goto nomem;
    }
    if (engine_batch_init(cfg->n_batch, &e->batch) != EMBER_OK) goto nomem;
    if (rt->decode_fed) {   /* the step queued ahead (pipeline.c) */
        if (engine_batch_init(cfg->n_batch, &e->batch_next) != EMBER_OK) goto nomem;
        if (!(e->top_row = malloc(sizeof *e->top_row * (size_t)cfg->n_batch))) goto nomem;
    }
    if (cfg->spec && cfg->spec->prop.n_hidden_layers > 0) {
        /* the proposer reads the target's hidden states (spec_input) */
        const spec_proposer *pr = &cfg->spec->prop;
        ember_status st;
        if (!rt->set_hidden_layers || !rt->get_hidden || rt->n_embd < 1) {
            engine_free(e);
            return ember_error(EMBER_ERR_UNSUPPORTED, "engine: proposer %s reads hidden states; the runtime exports none",
                               pr->name);
        }
        if ((st = rt->set_hidden_layers(rt->ctx, pr->n_hidden_layers, pr->hidden_layers)) != EMBER_OK) {
            engine_free(e);
            return st;
        }
        size_t n = (size_t)(SPEC_MAX_DRAFT + 1) * (size_t)pr->n_hidden_layers * (size_t)rt->n_embd;
        for (int32_t i = 0; i < cfg->n_slots; i++)
            if (!(e->slots[i].hidden = malloc(n * sizeof(float)))) goto nomem;
    }
    e->st.n_slots = cfg->n_slots;
    e->st.n_ctx = cfg->n_ctx;
    e->st.n_batch = cfg->n_batch;
    engine_publish_slots(e);
    *out = e;
    return EMBER_OK;
nomem:
    engine_free(e);
    return ember_error(EMBER_ERR_NOMEM, "engine: %d slots of %d tokens", cfg->n_slots, cfg->n_ctx);
}

static void cancel_all(engine *e)
{
    e->inflight = false;   /* a step queued ahead is dropped with its slots */
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->req) {
            slot_release(e, s, ENGINE_FINISH_CANCELLED, "the server is shutting down");
            pthread_mutex_lock(&e->mu);
            e->st.n_busy--;
            pthread_mutex_unlock(&e->mu);
        }
    }
    pthread_mutex_lock(&e->mu);
    engine_req *r;
    while ((r = engine_queue_pop(e))) {
        pthread_mutex_unlock(&e->mu);
        engine_req_finish(r, ENGINE_FINISH_CANCELLED, "the server is shutting down");
        engine_req_release(r);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    engine_publish_slots(e);
}

static void *step_thread(void *arg)
{
    engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->q_len == 0 && e->st.n_busy == 0 && !e->op) pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stopping, work = e->q_len > 0 || e->st.n_busy > 0;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        engine_slot_op_run(e);
        if (work) engine_step(e);
    }
    cancel_all(e);
    pthread_mutex_lock(&e->mu);
    if (e->op) {   /* a slot op that came too late */
        e->op->st = ember_error(EMBER_ERR_IO, "the server is shutting down");
        e->op->done = true;
        e->op = NULL;
    }
    pthread_cond_broadcast(&e->op_cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Hand `op` to the engine thread and wait until it ran (the slot idle). */
static ember_status slot_op(engine *e, engine_slot_op *op)
{
    if (op->slot < 0 || op->slot >= e->cfg.n_slots)
        return ember_error(EMBER_ERR_INVALID_ARG, "no slot %d (this server has %d)", op->slot, e->cfg.n_slots);
    pthread_mutex_lock(&e->mu);
    while (e->op && !e->stopping) pthread_cond_wait(&e->op_cv, &e->mu);   /* one op at a time */
    if (e->stopping || !e->thread_started) {
        pthread_mutex_unlock(&e->mu);
        return ember_error(EMBER_ERR_IO, "the server is shutting down");
    }
    e->op = op;
    pthread_cond_broadcast(&e->cv);
    while (!op->done) pthread_cond_wait(&e->op_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    if (op->st == EMBER_ERR_NOMEM) return ember_error(EMBER_ERR_NOMEM, "slot %d: out of memory", op->slot);
    return op->st;
}

ember_status engine_slot_tokens(engine *e, int32_t slot, ember_token **toks, int32_t *n)
{
    engine_slot_op op = {.slot = slot};
    *toks = NULL;
    *n = 0;
    ember_status st = slot_op(e, &op);
    if (st != EMBER_OK) { free(op.toks); return st; }
    *toks = op.toks;
    *n = op.toks ? op.n : 0;
    return EMBER_OK;
}

ember_status engine_slot_erase(engine *e, int32_t slot, int32_t *n_erased)
{
    engine_slot_op op = {.slot = slot, .erase = true};
    ember_status st = slot_op(e, &op);
    *n_erased = st == EMBER_OK ? op.n : 0;
    return st;
}

ember_status engine_start(engine *e)
{
    if (e->thread_started) return EMBER_OK;
    if (pthread_create(&e->thread, NULL, step_thread, e) != 0)
        return ember_error(EMBER_ERR_INTERNAL, "engine: cannot start the step thread");
    e->thread_started = true;
    return EMBER_OK;
}

void engine_stop(engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_broadcast(&e->cv);
    pthread_cond_broadcast(&e->op_cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) {
        pthread_join(e->thread, NULL);
        e->thread_started = false;
    } else {
        cancel_all(e);
    }
}

void engine_free(engine *e)
{
    if (!e) return;
    engine_stop(e);
    if (e->slots) {
        for (int32_t i = 0; i < e->cfg.n_slots; i++) {
            free(e->slots[i].tokens);
            free(e->slots[i].pending);
            free(e->slots[i].hidden);
            free(e->slots[i].embd_sum);
        }
    }
    free(e->slots);
    free(e->heads);
    free(e->head_rows);
    free(e->slot_info);
    free(e->queue);
    engine_batch_free(&e->batch);
    engine_batch_free(&e->batch_next);
    free(e->top_row);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->op_cv);
    free(e);
}

void engine_get_stats(engine *e, engine_stats *st, engine_slot_info *slots)
{
    pthread_mutex_lock(&e->mu);
    *st = e->st;
    if (slots) memcpy(slots, e->slot_info, sizeof *slots * (size_t)e->cfg.n_slots);
    pthread_mutex_unlock(&e->mu);
}

void engine_publish_slots(engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        const slot *s = &e->slots[i];
        e->slot_info[i] = (engine_slot_info){.id = i, .busy = s->state != SLOT_IDLE,
                                             .req_id = s->req ? s->req->id : 0, .n_past = s->n_past,
                                             .n_prompt = s->n_prompt, .n_generated = s->n_generated};
    }
    pthread_mutex_unlock(&e->mu);
    uint32_t kv_free = e->rt.kv_free_tokens(e->rt.ctx);
    pthread_mutex_lock(&e->mu);
    e->st.kv_free_tokens = kv_free;
    if (e->cfg.spec) {   /* speculation counters are written by this (the engine) thread only */
        e->st.spec_on = true;
        e->st.spec_type = (int)e->cfg.spec->p.type;
        e->st.spec = e->cfg.spec->st;
    }
    pthread_mutex_unlock(&e->mu);
}

/* The batch arrays; ember_batch_init lives in the runtime, which the engine
 * does not need for its own storage. */
static ember_status engine_batch_init(int32_t n_max, ember_batch *b)
{
    memset(b, 0, sizeof *b);
    b->token = calloc((size_t)n_max, sizeof *b->token);
    b->pos = calloc((size_t)n_max, sizeof *b->pos);
    b->seq_id = calloc((size_t)n_max, sizeof *b->seq_id);
    b->logits = calloc((size_t)n_max, sizeof *b->logits);
    b->embd = calloc((size_t)n_max, sizeof *b->embd);
    if (!b->token || !b->pos || !b->seq_id || !b->logits || !b->embd) {
        engine_batch_free(b);
        return ember_error(EMBER_ERR_NOMEM, "engine: batch of %d", n_max);
    }
    return EMBER_OK;
}

static void engine_batch_free(ember_batch *b)
{
    free(b->token);
    free(b->pos);
    free(b->seq_id);
    free(b->logits);
    free(b->embd);
    memset(b, 0, sizeof *b);
}
