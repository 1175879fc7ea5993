/*
 * scheduler.c — one step of the engine: drop cancelled requests, admit queued
 * ones into free slots (reusing the longest cached prefix), build one batch of
 * every generating slot's decode token plus prefill chunks within n_batch,
 * make room in the KV pool, decode, then let each slot sample.
 *
 * Owns: slot choice, prefix-cache reuse (seq_truncate / seq_fork), KV-pool
 * pressure (evict idle caches, defer prefill, preempt the newest request).
 *
 * A full pool (the slots share one pool, -c tokens in all, and any slot may
 * grow to n_ctx): idle prefix caches are evicted first (least recently used),
 * then the newest prefill waits a step, then the newest request that holds
 * K/V is preempted: its K/V is dropped and it waits (SLOT_WAIT) with its
 * tokens, sampler and grammar kept, to be prefilled again when the pool has
 * room. Waiting slots resume oldest first, before any queued request is
 * admitted, so the oldest request always runs and nothing running is lost; a
 * request stops for the pool only when it is the one request holding K/V
 * (then it has all of the pool). A prompt that can never fit (n_prompt >=
 * n_ctx) is refused by engine_submit. This is vLLM's recompute preemption
 * (Kwon et al. 2023, "Efficient Memory Management for LLM Serving with
 * PagedAttention", section 4.5); llama-server answers a full unified cache
 * with an error for the batch instead.
 * Must not: sample or detokenize (slot.c), or block on HTTP.
 *
 * Fairness: decode tokens of all generating slots go first, so a long prompt
 * only takes what is left of n_batch and never stalls running streams.
 */
#include "engine/engine_internal.h"

#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* Process CPU time, s. The speculation cost model compares step times; on
 * a shared machine wall time also counts the minutes others held the cores
 * (run D in bench/results/spec-cpu.md: a loaded box measured draft rows far
 * too cheap), CPU time only the work. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t lcp(const ember_token *a, int32_t na, const ember_token *b, int32_t nb)
{
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static void set_busy(engine *e, int32_t delta)
{
    pthread_mutex_lock(&e->mu);
    e->st.n_busy += delta;
    pthread_mutex_unlock(&e->mu);
}

static void slot_drop_cache(engine *e, slot *s)
{
    if (s->n_past > 0) e->rt.seq_remove(e->rt.ctx, s->id);
    s->n_past = 0;
    s->n_tokens = 0;
}

/* Put request r into a free slot. Returns false if no slot is free.
 *
 * The slot: the idle one whose cache shares the longest prefix with the
 * prompt, when that keeps at least half of its cache (this conversation's
 * own slot, continued); otherwise an empty idle slot, else the least
 * recently used idle one (llama-server's LRU choice below its
 * --slot-prompt-similarity), so that a new conversation that shares only a
 * template's first tokens with a cached one does not wipe that cache. Any
 * longer prefix held elsewhere (idle or busy) is shared by forking it. */
static bool admit(engine *e, engine_req *r)
{
    const ember_token *P = r->p.prompt;
    int32_t n = r->p.n_prompt;
    slot *target = NULL, *donor = NULL, *best = NULL, *spare = NULL;
    int32_t k_target = -1, k_donor = 0, k_best = -1;
    for (int32_t i = 0; i < e->cfg.n_slots && r->p.embd; i++) {
        /* an embedding reads every position: no prefix is reused; take the
         * idle slot whose cache is worth least (shortest, then oldest) */
        slot *s = &e->slots[i];
        if (s->state == SLOT_IDLE &&
            (!target || s->n_past < target->n_past || (s->n_past == target->n_past && s->last_used < target->last_used)))
            target = s;
    }
    for (int32_t i = 0; i < e->cfg.n_slots && !r->p.embd; i++) {
        slot *s = &e->slots[i];
        int32_t k = lcp(P, n, s->tokens, s->n_past);
        if (s->state == SLOT_IDLE) {
            if (k > k_best || (k == k_best && s->last_used < best->last_used)) {
                best = s;
                k_best = k;
            }
            if (!spare || (s->n_past == 0) > (spare->n_past == 0) ||
                ((s->n_past == 0) == (spare->n_past == 0) && s->last_used < spare->last_used))
                spare = s;
        }
        if (k > k_donor) { donor = s; k_donor = k; }
    }
    if (r->p.embd) {
        if (!target) return false;
    } else if (!best) {
        return false;
    } else if (best->n_past == 0 || 2 * k_best >= best->n_past) {
        target = best;
        k_target = k_best;
    } else {
        target = spare;
        k_target = lcp(P, n, spare->tokens, spare->n_past);
    }
    if (r->p.pin_slot && r->p.id_slot >= 0 && r->p.id_slot < e->cfg.n_slots &&
        e->slots[r->p.id_slot].state == SLOT_IDLE) {
        target = &e->slots[r->p.id_slot];
        k_target = lcp(P, n, target->tokens, target->n_past);
    }
    if (r->p.no_prompt_cache) {
        donor = NULL;
        k_target = 0;
    }

    int32_t limit = n - 1;   /* the last prompt token is decoded again for its logits */
    int32_t n_keep = 0;
    if (r->p.embd) {
        slot_drop_cache(e, target);
    } else if (donor && donor != target && k_donor > k_target && (k_donor < limit ? k_donor : limit) > k_target) {
        int32_t k = k_donor < limit ? k_donor : limit;
        slot_drop_cache(e, target);
        if (e->rt.seq_fork(e->rt.ctx, donor->id, target->id, k) == EMBER_OK) {
            memcpy(target->tokens, donor->tokens, sizeof *P * (size_t)k);
            n_keep = k;
            if (e->cfg.spec && e->cfg.spec->prop.fork) e->cfg.spec->prop.fork(e->cfg.spec->prop.self, donor->id, target->id, k);
        } else {
            e->rt.seq_remove(e->rt.ctx, target->id);
        }
    } else {
        n_keep = k_target < limit ? k_target : limit;
        if (n_keep <= 0) {
            slot_drop_cache(e, target);
            n_keep = 0;
        } else if (n_keep < target->n_past &&
                   e->rt.seq_truncate(e->rt.ctx, target->id, n_keep) != EMBER_OK) {
            slot_drop_cache(e, target);
            n_keep = 0;
        }
    }
    slot *s = target;
    memcpy(s->tokens, P, sizeof *P * (size_t)n);
    s->n_tokens = n;
    s->n_past = n_keep;
    s->n_prompt = n;
    s->n_generated = 0;
    s->n_predict = e->cfg.context_shift ? INT32_MAX : e->cfg.n_ctx - n;
    if (r->p.n_predict >= 0 && r->p.n_predict < s->n_predict) s->n_predict = r->p.n_predict;
    s->pending_len = 0;
    s->req = r;
    s->state = SLOT_PREFILL;
    s->prefill_end = n;
    s->admitted = ++e->admit_no;
    s->n_draft = 0;
    s->n_hidden_rows = 0;
    if (e->cfg.spec) spec_engine_slot_reset(e->cfg.spec, s->id);
    s->last_used = e->step_no;
    set_busy(e, +1);

    pthread_mutex_lock(&r->mu);
    r->slot = s->id;
    r->n_cached = n_keep;
    r->t_start = engine_now();
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&e->mu);
    e->st.n_prompt_tokens_cached += (uint64_t)n_keep;
    pthread_mutex_unlock(&e->mu);

    ember_status st = EMBER_OK;
    if (r->p.embd) {
        const size_t rows = r->p.pooling == EMBER_POOLING_NONE ? (size_t)n : 1;
        if (!s->embd_sum) s->embd_sum = malloc(sizeof *s->embd_sum * (size_t)e->rt.n_embd);
        pthread_mutex_lock(&r->mu);
        r->n_embd = e->rt.n_embd;
        if (!r->embd) r->embd = calloc(rows * (size_t)e->rt.n_embd, sizeof *r->embd);
        const bool ok = r->embd && s->embd_sum;
        pthread_mutex_unlock(&r->mu);
        if (!ok) st = ember_error(EMBER_ERR_NOMEM, "embeddings of %zu rows", rows);
    } else {
        st = e->rt.sampler_new(e->rt.ctx, &r->p.sampling, e->rt.n_vocab, &s->smpl);
    }
    if (st == EMBER_OK) st = slot_constrain_begin(e, s);
    if (st != EMBER_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "sampler: %s", ember_last_error());
        slot_release(e, s, ENGINE_FINISH_ERROR, msg);
        set_busy(e, -1);
    }   /* n_predict 0: the prompt is still decoded into the cache, then it ends (slot_after_decode) */
    return true;
}

void engine_slot_op_run(engine *e)
{
    pthread_mutex_lock(&e->mu);
    engine_slot_op *op = e->op;
    pthread_mutex_unlock(&e->mu);
    if (!op || e->slots[op->slot].state != SLOT_IDLE) return;
    slot *s = &e->slots[op->slot];
    op->st = EMBER_OK;
    op->n = s->n_past;
    if (op->erase) {
        slot_drop_cache(e, s);
    } else if (s->n_past > 0) {
        op->toks = malloc(sizeof *op->toks * (size_t)s->n_past);
        if (op->toks) memcpy(op->toks, s->tokens, sizeof *op->toks * (size_t)s->n_past);
        else op->st = EMBER_ERR_NOMEM;
    }
    engine_publish_slots(e);
    pthread_mutex_lock(&e->mu);
    op->done = true;
    e->op = NULL;
    pthread_cond_broadcast(&e->op_cv);
    pthread_mutex_unlock(&e->mu);
}

static void release_busy(engine *e, slot *s, engine_finish f, const char *err)
{
    slot_release(e, s, f, err);
    set_busy(e, -1);
}

/* Build the step's batch from every busy, non-deferred slot. Returns the
 * number of prefill entries. */
/* --context-shift (llama-server's pre_decode): a generating slot whose next
 * token would not fit keeps its first n_keep tokens (at most n_ctx - 4),
 * drops n_left / 2 of the n_left after them and goes back to prefill for
 * the rest, the last sampled token included (its logits give the next one).
 * llama-server moves the kept K/V by a RoPE shift; here they are recomputed
 * at their new positions. */
static void context_shift(engine *e, slot *s)
{
    engine_req *r = s->req;
    int32_t n_keep = r->p.n_keep < e->cfg.n_ctx - 4 ? r->p.n_keep : e->cfg.n_ctx - 4;
    if (n_keep < 0) n_keep = 0;
    int32_t n_left = s->n_past - n_keep, n_discard = n_left / 2;
    if (n_discard > n_left - 1) n_discard = n_left - 1;
    if (n_discard <= 0) return;
    memmove(s->tokens + n_keep, s->tokens + n_keep + n_discard,
            sizeof *s->tokens * (size_t)(s->n_tokens - n_keep - n_discard));
    s->n_tokens -= n_discard;
    if (n_keep == 0 || e->rt.seq_truncate(e->rt.ctx, s->id, n_keep) != EMBER_OK) {
        e->rt.seq_remove(e->rt.ctx, s->id);
        n_keep = 0;
    }
    s->n_past = n_keep;
    s->state = SLOT_PREFILL;
    s->prefill_end = s->n_tokens;
    s->n_hidden_rows = 0;
    if (e->cfg.spec) spec_engine_slot_reset(e->cfg.spec, s->id);
    pthread_mutex_lock(&r->mu);
    r->n_ctx_shifts++;
    pthread_mutex_unlock(&r->mu);
}

static int32_t build_batch(engine *e, const bool *deferred)
{
    e->batch.n_tokens = 0;
    int32_t budget = e->cfg.n_batch, n_prefill = 0;
    bool generating = false;
    for (int32_t i = 0; e->cfg.context_shift && i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state == SLOT_GENERATE && s->req && s->n_past + 1 >= e->cfg.n_ctx) context_shift(e, s);
    }
    slots_spec_prefetch(e, deferred);   /* the slots' drafts in passes of several (DFlash) */
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        s->n_batch_entries = 0;
        s->i_logits = -1;
        if (s->state == SLOT_GENERATE && !deferred[i]) {
            budget -= slot_propose(e, s, budget);
            generating = true;
        }
    }
    if (generating && e->cfg.n_prefill_chunk > 0 && budget > e->cfg.n_prefill_chunk) budget = e->cfg.n_prefill_chunk;
    for (;;) {   /* prefill in admission order */
        slot *next = NULL;
        for (int32_t i = 0; i < e->cfg.n_slots; i++) {
            slot *s = &e->slots[i];
            if (s->state == SLOT_PREFILL && !deferred[i] && s->n_batch_entries == 0 &&
                (!next || s->admitted < next->admitted))
                next = s;
        }
        if (!next || budget <= 0) break;
        int32_t n = slot_propose(e, next, budget);
        if (n == 0) break;
        budget -= n;
        n_prefill += n;
    }
    return n_prefill;
}

/* Free the pool of the least recently used idle cache. Returns false if none. */
static bool evict_one_idle(engine *e)
{
    slot *lru = NULL;
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state == SLOT_IDLE && s->n_past > 0 && (!lru || s->last_used < lru->last_used)) lru = s;
    }
    if (!lru) return false;
    slot_drop_cache(e, lru);
    return true;
}

static bool slot_runs(const slot *s) { return s->state == SLOT_PREFILL || s->state == SLOT_GENERATE; }

/* The pool is full and s is the newest request holding K/V: drop its K/V and
 * let it wait (see the top of the file). */
static void preempt(engine *e, slot *s)
{
    if (s->n_past > 0) e->rt.seq_remove(e->rt.ctx, s->id);
    s->n_past = 0;
    s->n_batch_entries = 0;
    s->i_logits = -1;
    s->n_draft = 0;
    s->n_hidden_rows = 0;
    s->state = SLOT_WAIT;
    pthread_mutex_lock(&e->mu);
    e->st.n_preemptions++;
    pthread_mutex_unlock(&e->mu);
}

/* Put waiting slots back into prefill, oldest first, while the pool (idle
 * caches evicted as needed) holds all of a slot's tokens plus some room to
 * grow (n_batch tokens, at most n_ctx / 4) when other requests run, or just
 * its tokens when none does. Returns whether a slot still waits. */
static bool resume_waiting(engine *e)
{
    for (;;) {
        slot *w = NULL;
        bool others = false;
        for (int32_t i = 0; i < e->cfg.n_slots; i++) {
            slot *s = &e->slots[i];
            if (s->state == SLOT_WAIT && (!w || s->admitted < w->admitted)) w = s;
            others |= slot_runs(s);
        }
        if (!w) return false;
        int32_t room = e->cfg.n_batch < e->cfg.n_ctx / 4 ? e->cfg.n_batch : e->cfg.n_ctx / 4;
        uint32_t need = (uint32_t)w->n_tokens + (others ? (uint32_t)room : 0);
        while (e->rt.kv_free_tokens(e->rt.ctx) < need && evict_one_idle(e)) {}
        if (e->rt.kv_free_tokens(e->rt.ctx) < need) {
            if (others) return true;
            /* alone and still no room (cannot happen while n_ctx <= the pool): do not spin */
            release_busy(e, w, ENGINE_FINISH_LENGTH, NULL);
            continue;
        }
        w->state = SLOT_PREFILL;
        w->prefill_end = w->n_tokens;   /* prompt + generated; the last one's logits give the next token */
        w->n_past = 0;
        if (e->cfg.spec) spec_engine_slot_reset(e->cfg.spec, w->id);
    }
}

static int32_t step_results(engine *e, int32_t n_prefill, double dt);

static int32_t step(engine *e)
{
    e->step_no++;
    /* a step queued ahead (pipeline.c): its results are this step's */
    if (e->inflight) return step_results(e, 0, engine_now() - e->t_queued);
    int32_t n_slots = e->cfg.n_slots;

    for (int32_t i = 0; i < n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->req && atomic_load(&s->req->cancel)) release_busy(e, s, ENGINE_FINISH_CANCELLED, NULL);
    }

    /* requests cancelled while waiting leave the queue now, not when a slot frees */
    engine_req *dropped[e->q_cap];
    int32_t n_dropped = 0;
    pthread_mutex_lock(&e->mu);
    int32_t kept = 0;
    for (int32_t i = 0; i < e->q_len; i++) {
        engine_req *r = e->queue[(e->q_head + i) % e->q_cap];
        if (atomic_load(&r->cancel)) dropped[n_dropped++] = r;
        else e->queue[(e->q_head + kept++) % e->q_cap] = r;
    }
    e->q_len = kept;
    e->st.n_queued = kept;
    pthread_mutex_unlock(&e->mu);
    for (int32_t i = 0; i < n_dropped; i++) {
        engine_req_finish(dropped[i], ENGINE_FINISH_CANCELLED, NULL);
        engine_req_release(dropped[i]);
    }

    /* preempted requests come back before new ones are admitted */
    bool waiting = resume_waiting(e);
    pthread_mutex_lock(&e->mu);
    while (e->q_len > 0 && !e->stopping && !waiting) {
        bool any_free = false;
        for (int32_t i = 0; i < n_slots; i++) any_free |= e->slots[i].state == SLOT_IDLE;
        if (!any_free) break;
        /* the oldest request that can start: one pinned to a slot (id_slot) waits for that slot,
         * as llama-server defers it; a cancelled one is taken at once (and finished below) */
        int32_t k = 0;
        for (; k < e->q_len; k++) {
            const engine_req *q = e->queue[(e->q_head + k) % e->q_cap];
            if (!q->p.pin_slot || atomic_load(&q->cancel) || q->p.id_slot < 0 || q->p.id_slot >= n_slots ||
                e->slots[q->p.id_slot].state == SLOT_IDLE)
                break;
        }
        if (k == e->q_len) break;
        engine_req *r = engine_queue_take(e, k);
        pthread_mutex_unlock(&e->mu);
        if (atomic_load(&r->cancel)) {
            engine_req_finish(r, ENGINE_FINISH_CANCELLED, NULL);
            engine_req_release(r);
        } else {
            admit(e, r);
        }
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);

    bool deferred[n_slots];
    memset(deferred, 0, sizeof deferred);
    int32_t n_prefill = build_batch(e, deferred);
    if (e->batch.n_tokens == 0) return 0;

    while (e->rt.kv_free_tokens(e->rt.ctx) < (uint32_t)e->batch.n_tokens && evict_one_idle(e)) {}

    double t0 = engine_now(), c0 = cpu_now();
    ember_status st;
    while ((st = e->rt.decode(e->rt.ctx, &e->batch)) == EMBER_ERR_RANGE) {
        /* the pool is full: evict caches, then defer the newest prefill, then
         * preempt the newest request holding K/V (see the top of the file) */
        if (!evict_one_idle(e)) {
            slot *victim = NULL;
            for (int32_t i = 0; i < n_slots; i++) {
                slot *s = &e->slots[i];
                if (s->state == SLOT_PREFILL && !deferred[i] && (!victim || s->admitted > victim->admitted))
                    victim = s;
            }
            int32_t others = e->batch.n_tokens - (victim ? victim->n_batch_entries : 0);
            if (victim && others > 0) {
                deferred[victim->id] = true;
            } else {
                victim = NULL;
                int32_t n_holding = 0;
                for (int32_t i = 0; i < n_slots; i++) {
                    slot *s = &e->slots[i];
                    if (!slot_runs(s) || (s->n_past == 0 && s->n_batch_entries == 0)) continue;
                    n_holding++;
                    if (!victim || s->admitted > victim->admitted) victim = s;
                }
                if (!victim) break;
                if (n_holding > 1)
                    preempt(e, victim);
                else   /* alone, it has the whole pool: a generating request has reached the end of it */
                    release_busy(e, victim, victim->state == SLOT_GENERATE ? ENGINE_FINISH_LENGTH : ENGINE_FINISH_ERROR,
                                 "the KV cache pool is full; start the server with a larger -c");
            }
        }
        n_prefill = build_batch(e, deferred);
        if (e->batch.n_tokens == 0) return 0;
    }
    if (st != EMBER_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "decode failed: %s: %s", ember_status_name(st), ember_last_error());
        fprintf(stderr, "ember engine: %s\n", msg);
        for (int32_t i = 0; i < n_slots; i++)
            if (e->slots[i].n_batch_entries > 0) release_busy(e, &e->slots[i], ENGINE_FINISH_ERROR, msg);
        return 0;
    }
    double dt = engine_now() - t0;
    (void)dt;
    const double dt_cpu = cpu_now() - c0;
    int32_t n_total = e->batch.n_tokens;
    if (e->cfg.spec && n_prefill == 0) {
        int32_t n_draft_rows = 0;
        for (int32_t i = 0; i < n_slots; i++) n_draft_rows += e->slots[i].n_draft;
        /* a GPU runtime's step cost is its device time (CUDA events): the host's CPU time
         * around a decode whose logits stay on the device counts the launches, not the
         * step. Waiting for it here costs nothing: with speculation on no step is queued
         * ahead (pipeline.c), so the heads read next wait for it anyway */
        const double dt_dev = e->rt.decode_device_seconds ? e->rt.decode_device_seconds(e->rt.ctx) : -1.0;
        spec_engine_step_time(e->cfg.spec, dt_dev > 0 ? dt_dev : dt_cpu, n_total, n_draft_rows);
    }

    /* proposers that keep every position's hidden state (DFlash) */
    const spec_proposer *pr = e->cfg.spec ? &e->cfg.spec->prop : NULL;
    if (pr && pr->absorb && e->rt.get_hidden)
        for (int32_t i = 0; i < n_slots; i++) {
            const slot *s = &e->slots[i];
            if (s->n_batch_entries == 0) continue;
            pr->absorb(pr->self, s->id, e->batch.pos[s->i_batch0], e->batch.token + s->i_batch0, s->n_batch_entries,
                       e->rt.get_hidden, e->rt.ctx, s->i_batch0);
        }

    return step_results(e, n_prefill, dt);
}

/* Sample, emit and count the results of e->batch (decoded, or queued
 * ahead), queueing its successor first when pipeline.c allows. */
static int32_t step_results(engine *e, int32_t n_prefill, double dt)
{
    const int32_t n_slots = e->cfg.n_slots;
    const int32_t n_total = e->batch.n_tokens;
    e->inflight = false;
    const engine_pipe pipe = engine_pipe_queue(e, n_prefill);
    if (pipe == ENGINE_PIPE_NONE) slot_heads(e);
    else engine_pipe_heads(e);
    e->rows_gone = pipe == ENGINE_PIPE_NEXT;
    int32_t n_sampled = 0, n_slot_rows = 0, n_tok_max = 0;
    for (int32_t i = 0; i < n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->n_batch_entries == 0) continue;
        n_slot_rows++;
        if (s->n_tokens > n_tok_max) n_tok_max = s->n_tokens;
        s->last_used = e->step_no;
        n_sampled += slot_after_decode(e, s);
        if (s->state == SLOT_IDLE) set_busy(e, -1);
    }

    pthread_mutex_lock(&e->mu);
    e->st.n_steps++;
    e->st.n_prompt_tokens += (uint64_t)n_prefill;
    e->st.n_gen_tokens += (uint64_t)n_sampled;
    e->st.t_prompt_s += dt * n_prefill / n_total;
    e->st.t_gen_s += dt * (n_total - n_prefill) / n_total;
    if (n_total > e->st.max_batch_seen) e->st.max_batch_seen = n_total;
    e->st.n_busy_slot_steps += (uint64_t)n_slot_rows;
    if (n_tok_max > e->st.n_tokens_max) e->st.n_tokens_max = n_tok_max;
    e->st.n_steps_pipelined += pipe == ENGINE_PIPE_NEXT;
    pthread_mutex_unlock(&e->mu);
    e->rows_gone = false;
    if (pipe == ENGINE_PIPE_NEXT) engine_pipe_adopt(e);
    return n_total;
}

int32_t engine_step(engine *e)
{
    int32_t n = step(e);
    engine_publish_slots(e);
    return n;
}
