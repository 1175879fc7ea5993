/*
 * engine_internal.h — structures shared by the engine's files (queue.c,
 * slot.c, scheduler.c, engine.c). Not for use outside src/engine/.
 *
 * Invariants:
 * - slot i uses sequence id i of the runtime; its KV holds tokens[0, n_past).
 * - an idle slot keeps its KV and tokens as a prefix cache until evicted.
 * - a waiting (preempted) slot holds no KV: n_past == 0.
 * - only the engine thread touches slots and the runtime; the queue and the
 *   counters are guarded by engine.mu.
 */
#ifndef EMBER_ENGINE_INTERNAL_H
#define EMBER_ENGINE_INTERNAL_H

#include "engine/engine.h"

typedef enum slot_state {
    SLOT_IDLE = 0,
    SLOT_PREFILL,   /* tokens [n_past, prefill_end) still to decode */
    SLOT_GENERATE,  /* next entry is the last sampled token */
    SLOT_WAIT,      /* preempted: the KV pool was full and this was the newest
                     * request; its K/V was dropped, everything else (tokens,
                     * sampler, grammar, pending text) is kept, and it is
                     * prefilled again (tokens [0, n_tokens)) once the pool has
                     * room (scheduler.c) */
} slot_state;

typedef struct slot {
    int32_t id;
    slot_state state;
    engine_req *req;
    ember_token *tokens;      /* [n_tokens] prompt + sampled tokens (cap n_ctx + 1) */
    int32_t n_tokens;
    int32_t n_past;           /* tokens whose K/V is in the pool */
    int32_t n_prompt;
    int32_t prefill_end;      /* PREFILL decodes up to here: n_prompt, or n_tokens when a preempted
                               * slot replays its prompt and the tokens it generated */
    int32_t n_generated;
    int32_t n_predict;        /* resolved limit (<= n_ctx - n_prompt) */
    ember_sampler *smpl;
    uint64_t last_used;       /* step counter at last use (LRU eviction) */
    uint64_t admitted;        /* admission order (prefill fairness) */
    /* output text not yet committed to the request (stop-string and UTF-8
     * hold-back), and the batch entry holding this slot's logits this step */
    char *pending;
    size_t pending_len, pending_cap;
    int32_t i_logits;
    int32_t n_batch_entries;  /* entries this slot put in the current batch */
    int32_t i_batch0;         /* the first of them (they are consecutive) */
    /* constraints (slot_constrain_begin at admission, freed by slot_release) */
    struct ember_grammar_state *grammar; /* clone of req->p.grammar, or NULL */
    float *masked;            /* [n_vocab] logits copy for a grammar mask */
    const ember_token *force; /* tokens the request's hook asked to force next */
    int32_t n_force;
    /* speculation: draft tokens following the last sampled one in this step's
     * batch (entries i_logits + 1 .. i_logits + n_draft) */
    ember_token draft[SPEC_MAX_DRAFT];
    int32_t n_draft;
    /* hidden states of the positions verified last step, for the proposer
     * (spec_input): [SPEC_MAX_DRAFT + 1][n_hidden_layers][n_embd], or NULL */
    float *hidden;
    int32_t n_hidden_rows, hidden_pos;
    /* heads of this step's rows (slot_heads): e->heads[head0 + j] for entry
     * i_logits + j, j <= n_draft; has_head false: rows read in full */
    bool has_head;
    int32_t head0;
    /* an embedding request's running sum for mean pooling, [n_embd] (allocated at its first admission) */
    double *embd_sum;
    /* pipeline.c: the request this slot had when the step after this one
     * was queued with its argmax token (NULL: none), and its entry there */
    engine_req *pipe_req;
    int32_t pipe_entry;
} slot;

struct engine {
    engine_config cfg;
    engine_runtime rt;
    engine_vocab vocab;
    slot *slots;
    ember_batch batch;
    float *scratch;           /* [n_vocab] for logprobs */
    ember_logits_top *heads;  /* [heads_cap] this step's row heads (slot_heads) */
    int32_t *head_rows;       /* [heads_cap] their batch entries */
    int32_t heads_cap;
    /* pipeline.c: the step queued ahead, built here and swapped with batch
     * when adopted; top_row [n_batch] its entries' head rows */
    ember_batch batch_next;
    int32_t *top_row;
    bool inflight;            /* batch is queued on the device; its results are the next step's */
    double t_queued;          /* when it was queued */
    bool rows_gone;           /* the step being handled has a successor queued: its full rows are overwritten */

    pthread_mutex_t mu;       /* queue, counters, stopping */
    pthread_cond_t cv;        /* new work or stop */
    engine_req **queue;       /* FIFO ring of n_queue_max + n_slots */
    int32_t q_head, q_len, q_cap;
    bool stopping;
    bool thread_started;
    pthread_t thread;
    uint64_t next_id;
    uint64_t step_no, admit_no;
    engine_stats st;          /* counters (under mu) */
    engine_slot_info *slot_info; /* [n_slots] snapshot published after each step (under mu) */
    struct engine_slot_op *op;   /* a slot save / erase waiting for its slot to be idle (under mu) */
    pthread_cond_t op_cv;        /* an op done */
};

/* A slot operation (engine_slot_tokens / engine_slot_erase), run on the
 * engine thread between steps once the slot is idle. */
typedef struct engine_slot_op {
    int32_t slot;
    bool erase;               /* else: copy the tokens */
    ember_token *toks;        /* copy: malloc'd [n] */
    int32_t n;
    ember_status st;
    bool done;
} engine_slot_op;

/* engine.c */
void engine_publish_slots(engine *e);   /* engine thread: copy slot state for readers */

/* queue.c */
engine_req *engine_queue_pop(engine *e);           /* mu held */
engine_req *engine_queue_take(engine *e, int32_t k); /* mu held: the k-th waiting (0: the oldest) */

/* scheduler.c */
void engine_slot_op_run(engine *e);                /* engine thread, mu not held: the pending op if its slot is idle */
void engine_req_finish(engine_req *r, engine_finish f, const char *err);

/* pipeline.c: greedy steps queued one ahead. engine_pipe_queue, after
 * e->batch was queued: queue its heads and, when every slot draws the
 * argmax, the next step fed with them (NONE: nothing queued, take
 * slot_heads; HEADS: heads queued only; NEXT: both). engine_pipe_heads:
 * wait for those heads (into e->heads, has_head). engine_pipe_adopt, after
 * the slots handled e->batch (NEXT only): the queued step becomes e->batch
 * and e->inflight; entries of slots that stopped are cut off. */
typedef enum { ENGINE_PIPE_NONE, ENGINE_PIPE_HEADS, ENGINE_PIPE_NEXT } engine_pipe;
engine_pipe engine_pipe_queue(engine *e, int32_t n_prefill);
void engine_pipe_heads(engine *e);
void engine_pipe_adopt(engine *e);

/* slot.c: the per-slot seam "propose / sample / accept". */
void engine_batch_add(ember_batch *b, ember_token t, ember_pos pos, ember_seq_id seq, bool logits, bool embd);
int32_t slot_head_k(engine *e, slot *s);                   /* head size of the slot's rows this step; 0: full rows */
/* tokens between the prefix cache's block checkpoints (engine_config.ckpt_interval) */
static inline int32_t slot_ckpt_interval(const engine *e) { return e->cfg.ckpt_interval > 0 ? e->cfg.ckpt_interval : 256; }
int32_t slot_propose(engine *e, slot *s, int32_t budget);  /* adds entries to e->batch */
/* Before the generating slots' slot_propose calls of a step: the
 * speculative engine's prefetch (spec_engine_prefetch) for those of them
 * not deferred[] that may draft (room in n_ctx and n_predict). */
void slots_spec_prefetch(engine *e, const bool *deferred);
void slot_heads(engine *e);                                /* after decode: reduce the rows slots sample from */
bool slot_heads_room(engine *e, int32_t n);                /* heads / head_rows for n rows; false: no memory */
int32_t slot_after_decode(engine *e, slot *s);             /* verify, sample, accept, emit; returns tokens sampled */
void slot_release(engine *e, slot *s, engine_finish f, const char *err);
ember_status slot_constrain_begin(engine *e, slot *s);     /* admission: clone the grammar */
void slot_emit_text(engine *e, slot *s, const char *piece, int32_t n, bool final);
size_t stop_holdback(const char *text, size_t len, const char *const *stop, int32_t n_stop);

#endif
