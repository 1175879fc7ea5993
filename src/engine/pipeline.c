/*
 * pipeline.c — greedy decode steps queued one ahead (issue 15, item 1: the
 * host work of step N overlaps the device work of step N + 1).
 *
 * A decode step of generating slots ends on the host: the heads of its rows
 * come down (one small download), each slot samples, emits and checks its
 * stop conditions, and only then is the next step built and queued; the
 * device idles for all of that. When every slot in the step draws greedily
 * from a one-entry head (no grammar, bias, penalties, logprobs, drafts) its
 * next token is the device's argmax, so the runtime can queue step N + 1
 * with that token before the host has seen it (ember_decode_fed): the host
 * then waits for step N's heads only, handles them while N + 1 runs, and
 * adopts N + 1 as the step in flight (for steps of at most
 * engine_config.pipe_max_slots generating slots: one by default). A slot
 * that stopped at step N (end of generation, a stop string) leaves its
 * entry of N + 1 void: the K/V written for it is cut off (seq_truncate) and
 * its row is never read. Nothing is queued ahead of a step where a slot
 * reaches its length, while a request waits (queued or preempted) or a
 * prompt is prefilled; a cancel is seen one step later than without the
 * pipeline. vLLM calls this async scheduling; llama-server waits.
 *
 * Owns: the decision to queue ahead, the second batch, adoption.
 * Must not: sample (slot.c) or admit (scheduler.c).
 */
#include "engine/engine_internal.h"

#include <stdio.h>

#include "base/status.h"

/* Whether step e->batch (just queued, generating slots only) may have its
 * successor queued before its heads are read; *m: its slots. */
static bool pipe_eligible(engine *e, int32_t n_prefill, int32_t *m)
{
    *m = 0;
    /* batch_next and top_row exist with decode_fed (engine_new) */
    if (n_prefill != 0 || !e->rt.decode_fed || !e->rt.logits_top_start || !e->rt.logits_top_finish || e->cfg.spec)
        return false;
    pthread_mutex_lock(&e->mu);
    const bool quiet = e->q_len == 0 && !e->stopping && !e->op;   /* nothing to admit or run between steps */
    pthread_mutex_unlock(&e->mu);
    if (!quiet) return false;
    int32_t n = 0;
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        /* a prompt to prefill, or a preempted request to resume first (scheduler.c) */
        if (s->state == SLOT_PREFILL || s->state == SLOT_WAIT) return false;
        if (s->state != SLOT_GENERATE) continue;
        if (s->n_batch_entries != 1 || s->i_logits < 0 || s->n_draft > 0 || !s->req) return false;
        const engine_req *r = s->req;
        if (atomic_load(&r->cancel) || r->p.embd || r->p.logprobs || s->n_force > 0 || s->grammar) return false;
        if (slot_head_k(e, s) != 1) return false;                     /* greedy from the argmax alone */
        if (s->n_generated + 1 >= s->n_predict || s->n_past + 2 >= e->cfg.n_ctx) return false;   /* it ends here */
        n++;
    }
    int32_t cap = e->cfg.pipe_max_slots > 0 ? e->cfg.pipe_max_slots : 1;
    if (cap > EMBER_DECODE_FED_MAX) cap = EMBER_DECODE_FED_MAX;
    if (n == 0 || n > cap || e->rt.kv_free_tokens(e->rt.ctx) < (uint32_t)n) return false;
    *m = n;
    return true;
}

engine_pipe engine_pipe_queue(engine *e, int32_t n_prefill)
{
    int32_t m;
    if (!pipe_eligible(e, n_prefill, &m) || !slot_heads_room(e, m)) return ENGINE_PIPE_NONE;
    /* heads of this step's rows, queued; slot order is row order */
    int32_t j = 0;
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        s->pipe_req = NULL;
        s->has_head = false;
        if (s->state != SLOT_GENERATE || s->n_batch_entries == 0) continue;
        s->head0 = j;
        e->head_rows[j++] = s->i_logits;
    }
    bool queued = false;
    if (e->rt.logits_top_start(e->rt.ctx, m, e->head_rows, 1, &queued) != EMBER_OK || !queued) return ENGINE_PIPE_NONE;

    /* the next step: each slot's argmax token, one position on (head rows
     * and entries in slot order) */
    ember_batch *b = &e->batch_next;
    b->n_tokens = 0;
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != SLOT_GENERATE || s->n_batch_entries == 0) continue;
        s->has_head = true;
        e->top_row[b->n_tokens] = s->head0;
        engine_batch_add(b, 0, s->n_past + 1, s->id, true, false);
    }
    e->t_queued = engine_now();
    const ember_status st = e->rt.decode_fed(e->rt.ctx, b, e->top_row);
    if (st != EMBER_OK) {   /* this step's rows and heads stand; the next step decodes as usual */
        if (st != EMBER_ERR_RANGE)   /* a full pool is no news: step() evicts or preempts */
            fprintf(stderr, "ember engine: the step queued ahead failed (%s: %s); decoding it as usual\n",
                    ember_status_name(st), ember_last_error());
        return ENGINE_PIPE_HEADS;
    }
    for (int32_t i = 0, k = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        if (!s->has_head) continue;
        s->pipe_req = s->req;
        s->pipe_entry = k++;
    }
    return ENGINE_PIPE_NEXT;
}

void engine_pipe_heads(engine *e)
{
    if (e->rt.logits_top_finish(e->rt.ctx, e->heads) == EMBER_OK) return;
    /* cannot happen for a start that queued; the rows are gone if a step
     * followed, so slot_after_decode ends such slots with an error */
    for (int32_t i = 0; i < e->cfg.n_slots; i++) e->slots[i].has_head = false;
}

void engine_pipe_adopt(engine *e)
{
    bool any = false;
    for (int32_t i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        if (!s->pipe_req) continue;
        const int32_t j = s->pipe_entry;
        /* the step queued ahead fed this slot the argmax of its head: valid
         * when the slot went on generating that very token */
        const bool ok = s->req == s->pipe_req && s->state == SLOT_GENERATE && s->n_tokens == s->n_past + 1 &&
                        s->tokens[s->n_past] == e->heads[s->head0].id[0] && e->batch_next.pos[j] == s->n_past;
        s->pipe_req = NULL;
        if (ok) {
            s->n_batch_entries = 1;
            s->i_batch0 = j;
            s->i_logits = j;
            s->n_draft = 0;
            s->last_used = e->step_no;
            any = true;
        } else {
            /* stopped here: its queued entry is void; cut off the K/V it writes */
            s->n_batch_entries = 0;
            s->i_logits = -1;
            const ember_seq_id q = e->batch_next.seq_id[j];
            if (e->rt.seq_truncate && (!e->rt.seq_len || e->rt.seq_len(e->rt.ctx, q) > s->n_past) &&
                e->rt.seq_truncate(e->rt.ctx, q, s->n_past) != EMBER_OK) {
                /* cannot happen for a cut of one position; if it did, the slot's cache goes */
                e->rt.seq_remove(e->rt.ctx, q);
                if (s->state == SLOT_IDLE) s->n_past = s->n_tokens = 0;
                else slot_release(e, s, ENGINE_FINISH_ERROR, "the K/V of a step queued ahead could not be cut off");
            }
        }
    }
    /* e->batch is the step in flight from now on */
    ember_batch t = e->batch;
    e->batch = e->batch_next;
    e->batch_next = t;
    e->inflight = any;
}
