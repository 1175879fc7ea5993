/*
 * queue.c — requests: validation at submission, the FIFO of requests waiting
 * for a slot, reference counting, cancellation and the caller-side wait.
 *
 * Owns: engine_req lifetime. Must not: touch slots or the runtime (the step
 * loop in scheduler.c does), or block while holding engine.mu.
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

double engine_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void req_free(engine_req *r)
{
    if (r->p.hook.free) r->p.hook.free(r->p.hook.ud);
    free((void *)r->p.prompt);
    free((void *)r->p.sampling.logit_bias);
    for (int32_t i = 0; i < r->p.n_stop; i++) free((void *)r->p.stop[i]);
    free(r->text);
    free(r->toks);
    free(r->embd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void engine_req_release(engine_req *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) req_free(r);
}

void engine_req_cancel(engine_req *r)
{
    if (r) atomic_store(&r->cancel, true);
}

void engine_req_lock(engine_req *r) { pthread_mutex_lock(&r->mu); }
void engine_req_unlock(engine_req *r) { pthread_mutex_unlock(&r->mu); }

bool engine_req_wait(engine_req *r, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    return pthread_cond_timedwait(&r->cv, &r->mu, &ts) != ETIMEDOUT;
}

/* Mark a request done (engine side). Takes r->mu. */
void engine_req_finish(engine_req *r, engine_finish f, const char *err)
{
    pthread_mutex_lock(&r->mu);
    if (r->finish == ENGINE_RUNNING) {
        r->finish = f;
        r->t_end = engine_now();
        if (r->t_first_token == 0) r->t_first_token = r->t_end;
        if (r->t_start == 0) r->t_start = r->t_end;
        if (err) snprintf(r->err, sizeof r->err, "%s", err);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static ember_status copy_params(engine_req *r, const engine_req_params *p)
{
    r->p = *p;
    r->p.prompt = NULL;
    r->p.sampling.logit_bias = NULL;
    r->p.n_stop = 0;
    ember_token *prompt = malloc(sizeof *prompt * (size_t)p->n_prompt);
    if (!prompt) return ember_error(EMBER_ERR_NOMEM, "engine: prompt of %d tokens", p->n_prompt);
    memcpy(prompt, p->prompt, sizeof *prompt * (size_t)p->n_prompt);
    r->p.prompt = prompt;
    if (p->sampling.n_logit_bias > 0) {
        ember_logit_bias *lb = malloc(sizeof *lb * (size_t)p->sampling.n_logit_bias);
        if (!lb) return ember_error(EMBER_ERR_NOMEM, "engine: logit_bias");
        memcpy(lb, p->sampling.logit_bias, sizeof *lb * (size_t)p->sampling.n_logit_bias);
        r->p.sampling.logit_bias = lb;
    } else {
        r->p.sampling.n_logit_bias = 0;
    }
    for (int32_t i = 0; i < p->n_stop; i++) {
        if (!p->stop[i] || !p->stop[i][0]) continue;   /* empty stop strings never match */
        char *s = strdup(p->stop[i]);
        if (!s) return ember_error(EMBER_ERR_NOMEM, "engine: stop string");
        r->p.stop[r->p.n_stop++] = s;
    }
    return EMBER_OK;
}

static ember_status submit_checked(engine *e, const engine_req_params *p, engine_req **out, bool *hook_taken);

ember_status engine_submit(engine *e, const engine_req_params *p, engine_req **out)
{
    bool taken = false;
    ember_status st = submit_checked(e, p, out, &taken);
    /* a request that was never created still owns its hook */
    if (!taken && p->hook.free) p->hook.free(p->hook.ud);
    return st;
}

static ember_status submit_checked(engine *e, const engine_req_params *p, engine_req **out, bool *hook_taken)
{
    *out = NULL;
    if (!p->prompt || p->n_prompt < 1)
        return ember_error(EMBER_ERR_INVALID_ARG, "the prompt is empty (it must hold at least one token)");
    if (p->n_prompt >= e->cfg.n_ctx)
        return ember_error(EMBER_ERR_RANGE,
                           "the prompt is %d tokens long, which exceeds the context size of %d tokens per slot (n_ctx); "
                           "shorten the prompt or start the server with a larger -c",
                           p->n_prompt, e->cfg.n_ctx);
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->rt.n_vocab)
            return ember_error(EMBER_ERR_INVALID_ARG, "prompt token %d at index %d is outside the vocabulary [0, %d)",
                               p->prompt[i], i, e->rt.n_vocab);
    for (int32_t i = 0; i < p->sampling.n_logit_bias; i++) {
        ember_token t = p->sampling.logit_bias[i].token;
        if (t < 0 || t >= e->rt.n_vocab)
            return ember_error(EMBER_ERR_INVALID_ARG, "logit_bias token %d is outside the vocabulary [0, %d)", t,
                               e->rt.n_vocab);
    }
    if (p->top_logprobs < 0 || p->top_logprobs > ENGINE_MAX_TOP_LOGPROBS)
        return ember_error(EMBER_ERR_INVALID_ARG, "top_logprobs must be in [0, %d]", ENGINE_MAX_TOP_LOGPROBS);
    if (p->post_sampling_probs && !e->rt.sampler_post_probs)
        return ember_error(EMBER_ERR_UNSUPPORTED, "post_sampling_probs is not supported by this runtime");
    if (p->n_stop < 0 || p->n_stop > ENGINE_MAX_STOP)
        return ember_error(EMBER_ERR_INVALID_ARG, "at most %d stop strings", ENGINE_MAX_STOP);
    if (p->embd && (!e->rt.get_embeddings || e->rt.n_embd < 1))
        return ember_error(EMBER_ERR_UNSUPPORTED, "this runtime computes no embeddings");
    if (p->embd && p->pooling != EMBER_POOLING_NONE && p->pooling != EMBER_POOLING_MEAN &&
        p->pooling != EMBER_POOLING_CLS && p->pooling != EMBER_POOLING_LAST)
        return ember_error(EMBER_ERR_INVALID_ARG, "pooling %d is not one of none, mean, cls, last", (int)p->pooling);

    engine_req *r = calloc(1, sizeof *r);
    if (!r) return ember_error(EMBER_ERR_NOMEM, "engine: request");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    atomic_init(&r->refs, 2);
    atomic_init(&r->cancel, false);
    r->slot = -1;
    r->stop_index = -1;
    r->n_prompt = p->n_prompt;
    r->t_queued = engine_now();
    *hook_taken = true;   /* copy_params copies it first; req_free frees it from here on */
    ember_status st = copy_params(r, p);
    if (st != EMBER_OK) { req_free(r); return st; }

    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return ember_error(EMBER_ERR_IO, "the server is shutting down");
    }
    if (e->q_len >= e->q_cap) {
        int32_t n = e->q_len;
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return ember_error(EMBER_ERR_NOMEM, "the request queue is full (%d waiting); try again later", n);
    }
    r->id = ++e->next_id;
    e->queue[(e->q_head + e->q_len) % e->q_cap] = r;
    e->q_len++;
    e->st.n_queued = e->q_len;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return EMBER_OK;
}

engine_req *engine_queue_take(engine *e, int32_t k)
{
    if (k < 0 || k >= e->q_len) return NULL;
    engine_req *r = e->queue[(e->q_head + k) % e->q_cap];
    for (int32_t i = k; i > 0; i--)   /* the older ones move up one place */
        e->queue[(e->q_head + i) % e->q_cap] = e->queue[(e->q_head + i - 1) % e->q_cap];
    e->q_head = (e->q_head + 1) % e->q_cap;
    e->q_len--;
    e->st.n_queued = e->q_len;
    return r;
}

engine_req *engine_queue_pop(engine *e)
{
    if (e->q_len == 0) return NULL;
    engine_req *r = e->queue[e->q_head];
    e->q_head = (e->q_head + 1) % e->q_cap;
    e->q_len--;
    e->st.n_queued = e->q_len;
    return r;
}
