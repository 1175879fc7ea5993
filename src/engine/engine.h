/*
 * engine.h — the serving engine: a request queue, --parallel slots sharing one
 * paged KV pool, and a step loop on its own thread (continuous batching,
 * chunked prefill, prefix cache, cancellation).
 *
 * Owns: requests from submission to their last token, slots, the scheduler,
 * detokenized output with stop strings applied, per-request timings.
 * Must not: know about HTTP or JSON, render templates, or tokenize text (the
 * caller hands it token ids). Only the engine thread touches the model.
 *
 * The model is reached through `engine_runtime` (a table of functions that
 * mirrors include/ember.h: ember_decode, ember_seq_*, ember_sampler_*), so the
 * scheduler is tested against a deterministic toy model (tests/common/) and
 * bound to the real runtime in runtime_ember.c.
 */
#ifndef EMBER_ENGINE_ENGINE_H
#define EMBER_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember.h"
#include "engine/spec/spec.h"

struct ember_grammar_state;
struct engine_tok;

/* The model side, as include/ember.h defines it. `ctx` is passed back to
 * every call. Semantics are those of the ember_* function of the same name. */
typedef struct engine_runtime {
    void *ctx;
    int32_t n_vocab;
    ember_status (*decode)(void *ctx, const ember_batch *batch);
    const float *(*get_logits)(void *ctx, int32_t i);
    ember_status (*seq_remove)(void *ctx, ember_seq_id seq);
    ember_status (*seq_truncate)(void *ctx, ember_seq_id seq, ember_pos n_keep);
    ember_status (*seq_fork)(void *ctx, ember_seq_id src, ember_seq_id dst, ember_pos n);
    /* optional (NULL: none): ember_seq_checkpoint, called before a step that
     * verifies drafts so that their rollback works for models with recurrent
     * layers (a no-op for the others) */
    ember_status (*seq_checkpoint)(void *ctx, ember_seq_id seq);
    /* optional (NULL: none): ember_seq_ctx_checkpoint, the prefix cache's block
     * checkpoints; set only when the runtime wants them (recurrent state) */
    ember_status (*seq_ctx_checkpoint)(void *ctx, ember_seq_id seq);
    ember_pos (*seq_len)(void *ctx, ember_seq_id seq);
    uint32_t (*kv_free_tokens)(void *ctx);
    ember_status (*sampler_new)(void *ctx, const ember_sampler_params *p, int32_t n_vocab, ember_sampler **out);
    void (*sampler_free)(void *ctx, ember_sampler *s);
    ember_token (*sampler_sample)(void *ctx, ember_sampler *s, const float *logits);
    void (*sampler_accept)(void *ctx, ember_sampler *s, ember_token t);
    /* optional: ember_sample_constrained (src/sample/constrained.h); NULL:
     * the engine draws, checks, and masks all logits on a rejection */
    ember_status (*sampler_sample_grammar)(void *ctx, ember_sampler *s, struct ember_grammar_state *g,
                                           const float *logits, int32_t n_vocab, float *scratch, ember_token *out);
    /* Hidden states for proposers that read them (spec_input); optional
     * (NULL: a proposer asking for them is refused by engine_new). n_embd:
     * row length of get_hidden. */
    int32_t n_embd;
    ember_status (*set_hidden_layers)(void *ctx, int32_t n, const int32_t *layers);
    const float *(*get_hidden)(void *ctx, int32_t i, int32_t j);
    /* Optional (NULL: embedding requests are refused by engine_submit):
     * ember_get_embeddings_ith, rows of n_embd floats for the entries whose
     * batch.embd was set. */
    const float *(*get_embeddings)(void *ctx, int32_t i);
    /* Optional, all three or none (NULL: every row is read in full with
     * get_logits): sampling from the heads of the rows (ember_get_logits_top,
     * ember_sampler_top_k, ember_sampler_sample_top), so a GPU runtime's
     * logits never come to the host when the sampler does not need them. */
    ember_status (*logits_top)(void *ctx, int32_t n, const int32_t *entries, int32_t k, ember_logits_top *out);
    int32_t (*sampler_top_k)(void *ctx, const ember_sampler *s);
    ember_status (*sampler_sample_top)(void *ctx, ember_sampler *s, const ember_logits_top *top, ember_token *out);
    /* Optional, all three or none (NULL: each step waits for its tokens
     * before the next is queued): the pipeline of greedy decode steps
     * (ember_get_logits_top_start / _finish, ember_decode_fed). The engine
     * queues step N + 1 with the argmax tokens of step N before the host
     * reads them, then handles step N while N + 1 runs. */
    ember_status (*logits_top_start)(void *ctx, int32_t n, const int32_t *entries, int32_t k, bool *queued);
    ember_status (*logits_top_finish)(void *ctx, ember_logits_top *out);
    ember_status (*decode_fed)(void *ctx, const ember_batch *batch, const int32_t *top_row);
    /* Optional (NULL: post_sampling_probs requests are refused): the chain's
     * candidates for `logits` before `chosen` is accepted, as a record: log p
     * of `chosen` among them (-inf when not one) and the k most probable with
     * p > 0, log p descending (ember_sampler_candidates). */
    void (*sampler_post_probs)(void *ctx, ember_sampler *s, const float *logits, ember_token chosen, int32_t k,
                               struct engine_tok *rec);
    /* Optional (NULL, or < 0 returned: none): ember_decode_device_seconds,
     * the device time of the last decode (waits for it). The speculation
     * policy's step costs use it instead of the host's CPU time. */
    double (*decode_device_seconds)(void *ctx);
} engine_runtime;

/* The vocabulary side: token -> bytes and end-of-generation tokens. `ud` is
 * passed back. token_piece writes the bytes of `t` as they appear in output
 * text (no leading-space stripping) into buf[cap] and returns their count
 * (> cap: the piece did not fit; < 0: bad token). Must be thread-safe. */
typedef struct engine_vocab {
    void *ud;
    int32_t (*token_piece)(void *ud, ember_token t, char *buf, int32_t cap);
    bool (*is_eog)(void *ud, ember_token t);
} engine_vocab;

typedef struct engine_config {
    int32_t n_slots;      /* --parallel */
    int32_t n_ctx;        /* -c: most tokens (prompt + generated) one slot may hold */
    int32_t n_batch;      /* most batch entries per step (decode tokens + prefill chunks) */
    int32_t n_prefill_chunk; /* most prefill entries per step while some slot generates
                              * (bounds the stall a long prompt causes); <= 0: n_batch */
    int32_t n_queue_max;  /* requests waiting beyond the slots before submit says NOMEM */
    int32_t pipe_max_slots; /* pipeline.c: a step is queued ahead only while at most this many
                             * slots generate (<= 0: 1). One by default: on the H200 (session
                             * 28, bench/results/cuda-h200.md) it gained 1% at one stream and
                             * lost 7-17% of the 8-parallel served aggregate, not yet understood */
    int32_t ckpt_interval; /* --checkpoint-min-step: with a runtime that wants checkpoints
                            * (recurrent state), prefill chunks end at multiples of this
                            * many tokens, and a slot's state is checkpointed there, at
                            * its prompt's end and when decoding crosses a multiple, so a
                            * prefix-cache hit replays less than this many tokens; <= 0: 256 */
    spec_engine *spec;    /* speculative decoding (src/engine/spec); NULL: none. Not owned. */
    bool context_shift;   /* llama-server's --context-shift: a generating slot whose next token would not fit
                           * n_ctx keeps its first n_keep tokens, drops half of the rest after them and
                           * recomputes the others' K/V (so n_predict is not capped by n_ctx) */
} engine_config;

typedef enum engine_finish {
    ENGINE_RUNNING = 0,
    ENGINE_FINISH_STOP,      /* end-of-generation token or a stop string */
    ENGINE_FINISH_LENGTH,    /* max tokens or the slot's n_ctx reached */
    ENGINE_FINISH_CANCELLED, /* engine_req_cancel or shutdown */
    ENGINE_FINISH_ERROR,     /* model failure; message in err */
} engine_finish;

#define ENGINE_MAX_TOP_LOGPROBS 20
#define ENGINE_MAX_STOP 8

/* A request's hook into its own generation, called on the engine thread
 * (src/server uses it for the reasoning budget). on_token (may be NULL):
 * after each generated token that is not end-of-generation, with its output
 * bytes; it may set *force / *n_force to tokens the engine then emits as the
 * next ones instead of sampling (pointer valid until the next call; forced
 * tokens are passed to on_token too). free (may be NULL): called once with ud
 * when the request is freed, also when engine_submit fails. */
typedef struct engine_req_hook {
    void *ud;
    void (*on_token)(void *ud, ember_token t, const char *piece, int32_t n, const ember_token **force,
                     int32_t *n_force);
    void (*free)(void *ud);
} engine_req_hook;

struct ember_grammar_state;

/* What one request asks for. Copied by engine_submit (the caller keeps its
 * arrays). */
typedef struct engine_req_params {
    const ember_token *prompt;   /* [n_prompt] token ids, n_prompt >= 1 */
    int32_t n_prompt;
    int32_t n_predict;           /* most tokens to generate; < 0: until n_ctx */
    ember_sampler_params sampling; /* logit_bias array copied too */
    const char *stop[ENGINE_MAX_STOP]; /* stop strings (not included in output) */
    int32_t n_stop;
    bool logprobs;               /* record the chosen token's log-probability */
    int32_t top_logprobs;        /* [0, ENGINE_MAX_TOP_LOGPROBS] alternatives per token */
    bool ignore_eos;
    /* llama-server's id_slot and cache_prompt: pin_slot runs the request in
     * slot id_slot (it waits in the queue while that slot is busy, younger
     * requests for other slots going first, as llama-server defers it);
     * no_prompt_cache decodes the whole prompt (no prefix-cache reuse;
     * n_cached is 0). */
    bool pin_slot;
    int32_t id_slot;
    bool no_prompt_cache;
    int32_t n_keep;              /* context shift: tokens at the start always kept */
    bool post_sampling_probs;    /* with logprobs: records hold log p after the sampler chain (llama-server's
                                    post_sampling_probs) instead of the raw logits' log-softmax */
    /* grammar constraint (src/sample/grammar.h) or NULL: a state at the
     * grammar's start that outlives the request (e.g. kept warm in a cache,
     * or freed by hook.free). The engine clones it on its own thread at
     * admission, masks each sampled step with the clone and frees the clone;
     * the template itself is never advanced. */
    const struct ember_grammar_state *grammar;
    engine_req_hook hook;        /* owned from engine_submit on (hook.free) */
    /* An embedding request (llama-server's SERVER_TASK_TYPE_EMBEDDING): the
     * prompt is decoded (never from the prefix cache: every position's state
     * is read), nothing is generated, and the request finishes STOP with
     * engine_req.embd holding the final hidden states after the output norm
     * (ember_get_embeddings_ith), pooled over the prompt's positions as
     * `pooling` says (llama.cpp's llama_context pooling: MEAN the mean of
     * all positions, CLS position 0, LAST the last position, NONE every
     * position, one row each). Not normalized. Sampling fields are ignored. */
    bool embd;
    ember_pooling pooling;
} engine_req_params;

/* One generated token as recorded for logprobs. */
typedef struct engine_tok engine_tok;
struct engine_tok {
    ember_token token;
    float logprob;                      /* log softmax of the raw logits */
    int32_t n_top;
    ember_token top[ENGINE_MAX_TOP_LOGPROBS];
    float top_logprob[ENGINE_MAX_TOP_LOGPROBS];
};

/* A submitted request. Fields below `mu` are shared with the engine thread:
 * read them only between engine_req_lock and engine_req_unlock. */
typedef struct engine_req {
    engine_req_params p;          /* owned copies of prompt, logit_bias, stop */
    uint64_t id;
    atomic_int refs;              /* caller + engine */
    atomic_bool cancel;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;                   /* committed output text (stop strings removed) */
    size_t text_len, text_cap;
    engine_tok *toks;             /* generated tokens (when logprobs was asked) */
    int32_t n_toks, toks_cap;
    engine_finish finish;         /* ENGINE_RUNNING until done */
    int32_t stop_index;           /* FINISH_STOP by a stop string: its index in p.stop (llama-server's
                                     stopping_word, Anthropic's stop_sequence); -1 otherwise */
    char err[256];
    int32_t slot;                 /* slot id once admitted, -1 while queued */
    int32_t n_prompt;             /* prompt tokens */
    int32_t n_cached;             /* prompt tokens taken from the prefix cache */
    int32_t n_generated;          /* tokens sampled (including a final EOG) */
    int32_t n_draft, n_draft_accepted; /* speculation: tokens drafted / accepted for this request */
    int32_t n_ctx_shifts;         /* context shifts (engine_config.context_shift) */
    double t_queued, t_start, t_first_token, t_end; /* seconds, CLOCK_MONOTONIC */
    /* p.embd, once finished STOP: [n_embd_rows][n_embd] (n_embd_rows: 1, or
     * n_prompt with pooling NONE); NULL before (and on any other finish) */
    float *embd;
    int32_t n_embd_rows, n_embd;
} engine_req;

typedef struct engine engine;

/* Create an engine over a runtime and vocabulary (both must outlive it).
 * Errors: EMBER_ERR_INVALID_ARG (n_slots < 1, n_ctx < 2, n_batch < 1),
 * EMBER_ERR_NOMEM, EMBER_ERR_UNSUPPORTED (cfg->spec's proposer reads hidden
 * states the runtime does not export). The step thread is not started. */
ember_status engine_new(const engine_config *cfg, const engine_runtime *rt,
                        const engine_vocab *vocab, engine **out);
/* Start the step loop on its own thread. */
ember_status engine_start(engine *e);
/* Stop: refuse new requests, cancel queued and running ones (their finish
 * becomes CANCELLED), join the thread. Idempotent. */
void engine_stop(engine *e);
void engine_free(engine *e);

/* Queue a request. On success *out holds a reference the caller must drop
 * with engine_req_release. Errors: EMBER_ERR_INVALID_ARG (empty prompt, token
 * outside [0, n_vocab), bad top_logprobs, a pooling other than none, mean,
 * cls, last), EMBER_ERR_UNSUPPORTED (an embedding request and a runtime
 * without get_embeddings), EMBER_ERR_RANGE (n_prompt >= n_ctx:
 * the message says both numbers), EMBER_ERR_NOMEM (queue full), EMBER_ERR_IO
 * (engine stopping). */
ember_status engine_submit(engine *e, const engine_req_params *p, engine_req **out);
/* Ask the engine to stop a request; its slot is freed within one step. */
void engine_req_cancel(engine_req *r);
void engine_req_release(engine_req *r);
void engine_req_lock(engine_req *r);
void engine_req_unlock(engine_req *r);
/* With the lock held: wait until the output changes or `timeout_ms` passes.
 * Returns false on timeout. */
bool engine_req_wait(engine_req *r, int timeout_ms);

/* Run one scheduling step on the calling thread (tests; the step thread does
 * this in a loop). Returns the number of batch entries decoded (0: idle). */
int32_t engine_step(engine *e);

/* A snapshot for /slots, /metrics and /props. */
typedef struct engine_slot_info {
    int32_t id;
    bool busy;
    uint64_t req_id;
    int32_t n_past;        /* tokens in this slot's KV (cache included) */
    int32_t n_prompt, n_generated;
} engine_slot_info;

typedef struct engine_stats {
    int32_t n_slots, n_ctx, n_batch;
    int32_t n_busy, n_queued;
    uint64_t n_prompt_tokens, n_prompt_tokens_cached, n_gen_tokens;
    double t_prompt_s, t_gen_s;      /* step time spent on prefill / decode entries */
    uint64_t n_steps, n_requests_done, n_requests_cancelled;
    uint64_t n_steps_pipelined;      /* steps whose successor was queued before their tokens were read (pipeline.c) */
    uint64_t n_preemptions;          /* requests that waited for a full KV pool (scheduler.c) */
    uint32_t kv_free_tokens;
    int32_t max_batch_seen;
    uint64_t n_busy_slot_steps;      /* sum over steps of the slots that had entries in the step */
    int32_t n_tokens_max;            /* most tokens (prompt + generated) one request has held */
    bool spec_on;                    /* speculation configured; counters below */
    int spec_type;                   /* its spec_type (spec.h; spec_type_name) */                    /* speculation configured; counters below */
    spec_stats spec;
} engine_stats;

/* Copy the counters; `slots` (may be NULL) gets n_slots entries. */
void engine_get_stats(engine *e, engine_stats *st, engine_slot_info *slots);

/* llama-server's slot save / erase (POST /slots/{id}?action=...): run on
 * the engine thread once slot `slot` is idle (the caller waits, as
 * llama-server defers the task while the slot is processing).
 * engine_slot_tokens: a malloc'd copy of the tokens whose KV the slot holds
 * (*n of them; NULL and 0 for an empty slot). engine_slot_erase: drop them;
 * *n_erased how many. A restore is a request pinned to the slot
 * (engine_req_params.pin_slot) over the saved tokens. Errors:
 * EMBER_ERR_INVALID_ARG (no such slot), EMBER_ERR_IO (engine stopping or
 * not started), EMBER_ERR_NOMEM. */
ember_status engine_slot_tokens(engine *e, int32_t slot, ember_token **toks, int32_t *n);
ember_status engine_slot_erase(engine *e, int32_t slot, int32_t *n_erased);

double engine_now(void);   /* CLOCK_MONOTONIC seconds */

#endif
