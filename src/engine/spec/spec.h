/*
 * spec.h — speculative decoding for the engine: a proposer interface, the
 * per-slot draft-length policy, the verifier, and the counters.
 *
 * Owns: what a proposer is (n-gram / prompt lookup, draft model, layer-skip,
 * DFlash and MTP heads), the draft limits (--spec-draft-n-max/-n-min/-p-min,
 * adaptive length), the acceptance rule, speculation statistics.
 * Must not: build batches, call the target's decode, or touch slots (the
 * engine does that at its seam, src/engine/slot.c: per slot and step
 * "propose draft tokens -> add them to the same target batch -> verify ->
 * accept / roll back the KV with seq_truncate").
 *
 * Lossless rule (Leviathan et al. 2023, "Fast Inference from Transformers via
 * Speculative Decoding", Alg. 1; Chen et al. 2023, "Accelerating LLM Decoding
 * with Speculative Sampling", Alg. 2): draft token x ~ q is accepted with
 * probability min(1, p(x)/q(x)); on rejection the next token is drawn from
 * norm(max(0, p - q)); if all k drafts pass, one more token is drawn from p
 * at position k. The proposers here draft deterministically (q = one-hot at
 * x), for which the rule is exactly "draw y ~ p with the slot's own sampler;
 * accept iff y == x; else emit y": P(emit x) = p(x), P(emit y != x) = p(y).
 * The engine does that, so greedy output is token-identical to
 * non-speculative decoding and sampled output keeps p. spec_verify_token is
 * the general rule for proposers that report q (tested in isolation).
 */
#ifndef EMBER_ENGINE_SPEC_SPEC_H
#define EMBER_ENGINE_SPEC_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember.h"

#define SPEC_MAX_DRAFT 32   /* upper bound of --spec-draft-n-max */
#define SPEC_LONG_MATCH 8   /* a context match of this many tokens is a copied span (spec_proposer.match_len) */

typedef enum spec_type {
    SPEC_NONE = 0,
    SPEC_NGRAM,      /* prompt lookup over the slot's tokens so far */
    SPEC_DRAFT,      /* a smaller model with the same vocabulary (-md) */
    SPEC_LAYERSKIP,  /* the target's first k layers + its LM head (self-speculative, layerskip.c) */
    SPEC_DFLASH,     /* a DFlash block-diffusion draft over the target's hidden states (dflash.c) */
    SPEC_MTP,        /* a Gemma 4 MTP (assistant) draft over the target's K/V and final state (mtp.c) */
} spec_type;

/* What a proposer sees for one slot at one step. tokens[0, n_tokens) are the
 * prompt followed by the generated tokens; the last one has been sampled but
 * is not yet in the target's KV (the draft continues after it).
 *
 * Hidden-state hook (DFlash / MTP / EAGLE-style heads): a proposer that sets
 * spec_proposer.n_hidden_layers / hidden_layers gets the target's hidden
 * states (the residual stream after those layers, 0-based, before the final
 * norm: ember_get_hidden) of the positions the target verified in its last
 * decode of this slot and that are now part of the sequence: the slot's
 * last token and every accepted draft token (after a prefill: the last
 * prompt token). Row r is position hidden_pos + r (its input token is
 * tokens[hidden_pos + r]; it is the state that predicted token
 * hidden_pos + r + 1); hidden[(r * n_hidden + j) * n_embd ...] is its state
 * after layer hidden_layer[j]. n_hidden_rows is 0 when there is none (first
 * step of a request, or no proposer asked). Rows before hidden_pos were
 * handed over in earlier steps; a proposer that keeps history stores them. */
typedef struct spec_input {
    int32_t slot;                 /* engine slot id (also the target's seq id) */
    const ember_token *tokens;
    int32_t n_tokens;
    int32_t n_prompt;             /* tokens[0, n_prompt) came from the request */
    int32_t n_hidden;             /* layers per row (= the proposer's n_hidden_layers) */
    const int32_t *hidden_layer;  /* [n_hidden] layer indices */
    int32_t n_hidden_rows;        /* verified positions handed over (0..SPEC_MAX_DRAFT + 1) */
    int32_t hidden_pos;           /* position of row 0 */
    const float *hidden;          /* [n_hidden_rows][n_hidden][n_embd] */
    int32_t n_embd;
} spec_input;

/* A proposer. propose writes at most n_max draft tokens continuing
 * in->tokens into draft[] and returns how many (0: no draft this step; < 0
 * never). n_max is >= 1, except for a proposer reading hidden states: it is
 * called with n_max = 0 when the engine wants no draft this step but has
 * hidden rows to hand over (every verified position's row reaches it once,
 * in order, except those of the step that ends a request). If `q` is non-NULL the proposer may store the probability it gave
 * each drafted token (q[i] in (0, 1]; 1 for deterministic drafts); p_min is
 * --spec-draft-p-min (a model-based proposer stops drafting when its top
 * probability falls below it). feedback reports how many of the last draft's
 * tokens the target accepted. slot_reset: the slot got a new request.
 * free releases the proposer. describe writes its parameters for the
 * start-up log. */
typedef struct spec_proposer {
    const char *name;
    void *self;
    bool costly;                  /* drafting runs a model (draft, layerskip): the adaptive length
                                   * counts its measured time per draft token (spec_engine_step_time) */
    int32_t n_hidden_layers;      /* hidden states wanted (0: none; at most EMBER_MAX_HIDDEN_LAYERS) */
    const int32_t *hidden_layers; /* [n_hidden_layers] 0-based target layers (see spec_input) */
    int32_t (*propose)(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *draft, float *q);
    /* Optional: the length of the context match behind the last draft (a
     * prompt-lookup proposer: its key plus how far the match reaches back;
     * 0 when the last call drafted nothing). When set, the engine asks for
     * the longest draft allowed, then cuts it to the adaptive length of the
     * match's class (short: < SPEC_LONG_MATCH tokens, or long), whose
     * acceptance it tracks apart per slot. */
    int32_t (*match_len)(void *self);
    void (*feedback)(void *self, int32_t slot, int32_t n_drafted, int32_t n_accepted);
    /* Optional (proposers that keep the target's hidden states of every
     * position, DFlash): after every target decode, once per slot with
     * entries in it, the slot's n consecutive entries (prefill chunk, or the
     * last token and its drafts, rejected ones included) at positions
     * pos0 .. pos0 + n - 1 with input tokens tok[n]; get(ctx, i0 + r, j) is
     * entry r's state after hidden_layers[j] (NULL when missing). Like
     * llama.cpp's common_speculative_process (common/speculative.cpp:1087). */
    void (*absorb)(void *self, int32_t slot, ember_pos pos0, const ember_token *tok, int32_t n,
                   const float *(*get)(void *ctx, int32_t i, int32_t j), void *ctx, int32_t i0);
    /* Optional: the engine gave slot dst the first n positions of slot src
     * (a prefix-cache fork, seq_fork); a proposer keeping per-position state
     * copies its own. */
    void (*fork)(void *self, int32_t src, int32_t dst, int32_t n);
    void (*slot_reset)(void *self, int32_t slot);
    void (*describe)(void *self, char *buf, size_t cap);
    void (*free)(void *self);
    /* Optional (costly proposers whose model may run on a GPU): the device
     * seconds (CUDA events) of the draft pass of the propose call just made
     * and of the absorbs since the one before; < 0 when not measured (a
     * draft on the CPU, or no pass ran), and the engine then counts the
     * call's process CPU time as before. */
    double (*device_seconds)(void *self);
    /* Optional (proposers that draft several slots in one model pass,
     * DFlash): called by the engine before a step's proposals with the
     * inputs of the generating slots that will draft this step (n >= 2;
     * tokens as propose will get them, hidden rows not set). The proposer
     * may draft them all at once and answer the propose calls of this step
     * from it (a propose whose input differs from what was prefetched, or
     * of a slot left out, drafts by itself). device_seconds after a propose
     * so answered: its share of the prefetch's time. */
    void (*prefetch)(void *self, const spec_input *in, int32_t n);
} spec_proposer;

typedef struct spec_params {
    spec_type type;
    int32_t n_max;     /* --spec-draft-n-max: most draft tokens per slot and step (1..SPEC_MAX_DRAFT) */
    int32_t n_min;     /* --spec-draft-n-min: drafts shorter than this are dropped (0: keep all) */
    float p_min;       /* --spec-draft-p-min: model proposers stop below this probability */
    bool adaptive;     /* --spec-adaptive on|off: per-slot draft length from measured acceptance */
    float row_cost;    /* cost of one more verified batch row relative to a 1-token step (adaptive model) */
    bool row_cost_auto; /* measure row_cost from the engine's step times (row_cost is the prior);
                         * ember serve sets it unless --spec-row-cost is given */
    int32_t ngram_min, ngram_max; /* n-gram: lookup key lengths tried, longest first */
    int32_t n_layer_draft;        /* layerskip: --spec-layers k (0: half the target's layers) */
    float force_accept;           /* --spec-force-accept X (benchmarks only; < 0: off): every verification
                                   * step accepts X drafted tokens on average (floor and ceil dithered),
                                   * whatever the target draws, so the cost of speculation at a chosen
                                   * acceptance can be timed on random-weight files; the output is then
                                   * NOT the target's */
} spec_params;

spec_params spec_default_params(void);
/* "none", "ngram", "draft", "layerskip", "draft-dflash", "draft-mtp" -> type; false if unknown. */
bool spec_parse_type(const char *s, spec_type *out);
const char *spec_type_name(spec_type t);

/* Counters (monotonic; read under the engine's lock). accepted_at[i]: drafts
 * whose token i (0-based) was accepted; drafted_at[i]: drafts that had a
 * token i. Acceptance at position i = accepted_at[i] / drafted_at[i]. */
typedef struct spec_stats {
    uint64_t n_drafts, n_drafted, n_accepted;
    uint64_t drafted_at[SPEC_MAX_DRAFT], accepted_at[SPEC_MAX_DRAFT];
} spec_stats;

/* The engine's speculation state: the proposer plus per-slot draft lengths. */
typedef struct spec_engine {
    spec_params p;
    spec_proposer prop;
    int32_t n_slots;
    double *acc_a, *acc_r; /* [n_slots] decayed counts of accepted / rejected draft tokens */
    double *lacc_a, *lacc_r; /* [n_slots] the same for drafts behind a long context match (match_len) */
    uint8_t *last_long;      /* [n_slots] the slot's last draft was behind a long match */
    int32_t *idle;     /* [n_slots] steps since the slot last drafted (probing) */
    double t_draft;    /* costly proposers: decayed mean seconds per drafted token (0: not measured yet) */
    double t_step;     /* decayed mean seconds of a 1-row target step, from spec_engine_step_time */
    double *t_base;    /* [n_slots + 1] decayed mean seconds of a step of i rows and no draft */
    double *rc_est;    /* [n_slots + 1] measured row cost for steps of i slot rows (row_cost_auto) */
    int32_t *n_rc;     /* [n_slots + 1] samples behind rc_est[i] */
    int32_t base;      /* slot rows (no drafts) of the last decode-only step */
    double *force_frac; /* [n_slots] --spec-force-accept: the fraction carried to the next step */
    spec_stats st;
} spec_engine;

/* Create over a proposer (taken over: freed by spec_engine_free, also on
 * error). Errors: EMBER_ERR_INVALID_ARG (n_max outside [1, SPEC_MAX_DRAFT],
 * n_min > n_max, p_min outside [0, 1], n_slots < 1), EMBER_ERR_NOMEM. */
ember_status spec_engine_new(const spec_params *p, spec_proposer prop, int32_t n_slots, spec_engine **out);
void spec_engine_free(spec_engine *s);
/* One start-up log line: proposer and parameters. */
void spec_engine_describe(const spec_engine *s, char *buf, size_t cap);

/* The draft length the adaptive model picks for a slot whose per-token
 * acceptance is `alpha` (0 <= alpha < 1): the k in [0, n_max] maximizing
 * expected tokens per step (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al.
 * 2023, Eq. 1) over the step's relative cost 1 + row_cost * k. */
int32_t spec_best_length(double alpha, float row_cost, int32_t n_max);

/* Draft for a slot: at most `limit` tokens; with adaptive on, at most the
 * length spec_best_length picks from the slot's measured acceptance, with a
 * draft token's cost = row_cost + (for a costly proposer) its measured
 * drafting time over a target step's (when it picks 0, a 1-token probe
 * every 8th step, less often for a costly proposer, keeps the estimate
 * current). Returns the draft length (0 when none or shorter than n_min). */
int32_t spec_engine_propose(spec_engine *s, const spec_input *in, int32_t limit, ember_token *draft);
/* Before a step's proposals: in[n] the inputs of the step's generating
 * slots; hands those that will draft (adaptive off, or an adaptive length
 * > 0 that is not a probe) to the proposer's prefetch when it has one and
 * at least two of them draft. */
void spec_engine_prefetch(spec_engine *s, const spec_input *in, int32_t n);
/* After verification: n_accepted of n_drafted were accepted. Updates the
 * counters and the slot's acceptance estimate (counts decay by 0.8 a draft). */
void spec_engine_result(spec_engine *s, int32_t slot, int32_t n_drafted, int32_t n_accepted);
/* --spec-force-accept: how many of this step's n_draft drafted tokens the
 * slot accepts by force (k = floor(f + X) with f the slot's carried
 * fraction, then f = f + X - k; at most n_draft), or -1 when forcing is off. */
int32_t spec_engine_forced_accept(spec_engine *s, int32_t slot, int32_t n_draft);
void spec_engine_slot_reset(spec_engine *s, int32_t slot);
/* The engine's step timing: a target decode of n_rows batch entries (no
 * prefill), n_draft_rows of them draft tokens, took dt seconds (the
 * runtime's device time where it has a device clock, CUDA events on a GPU:
 * engine_runtime.decode_device_seconds; else process CPU time, as a loaded
 * machine stretches wall time by others' work). Keeps t(b),
 * the time of steps of b slot rows without drafts; a step of b slot rows
 * plus drafts then gives a sample of the row cost as a slot sees it: the
 * extra time per draft row over the slot's share of the step,
 * (dt - t(b)) / n_draft_rows / (t(b) / b). Its decayed mean for the current
 * b replaces row_cost after 8 samples when row_cost_auto is set: a loaded
 * CPU (small verification batches cost more than on a quiet one), many
 * streams (a full batch is compute-bound: a draft row costs about a slot's
 * whole share) and a GPU (rows nearly free) each get their own. Until then
 * the prior for b slots is row_cost * b, at most 1.5. Also gives the 1-row
 * step time that a costly proposer's time is compared to. */
void spec_engine_step_time(spec_engine *s, double dt, int32_t n_rows, int32_t n_draft_rows);
/* The row cost the adaptive length uses now (configured or measured). */
double spec_engine_row_cost(const spec_engine *s);

/* The general acceptance rule for one draft token x drawn from q.
 * p, q: [n] probabilities over the same candidate ids (sum 1 each; q[x] > 0).
 * u: uniform [0, 1). Returns x when u < p[x]/q[x] (accepted, *accepted =
 * true); otherwise the index drawn from norm(max(0, p - q)) with the uniform
 * u2 (*accepted = false). If p - q has no positive mass (p == q) the residual
 * is p itself. Source: Leviathan et al. 2023, Alg. 1 / Chen et al. 2023, Alg. 2. */
int32_t spec_verify_token(const float *p, const float *q, int32_t n, int32_t x, double u, double u2, bool *accepted);

/* Proposers. The three that run a draft model (draft, draft-dflash,
 * draft-mtp) load it with `mp` (NULL: ember_model_default_params(), the
 * CPU): mp->n_gpu_layers != 0 (--spec-draft-ngl) puts the draft's weights,
 * K/V and scratch on the GPU backend (mp->device) when the build has CUDA
 * and a device exists, else the draft runs on the CPU. */
/* n-gram / prompt lookup: the longest suffix of length in [ngram_min,
 * ngram_max] that occurred earlier in the slot's tokens; the draft is what
 * followed its latest earlier occurrence. No state, no model. */
ember_status spec_ngram_new(int32_t ngram_min, int32_t ngram_max, spec_proposer *out);
/* Draft model: its own ember_context (sequence i = slot i), greedy drafts,
 * stops when its top probability < p_min. Errors: EMBER_ERR_INVALID_ARG when
 * its vocabulary differs from the target's (size, or any of the first
 * tokens' text: the message names the first differing id). */
ember_status spec_draft_new(const char *path, ember_model *target, int32_t n_slots, int32_t n_ctx, int32_t n_threads,
                            const ember_model_params *mp, spec_proposer *out);
/* Layer-skip (self-speculative): the target context's own first n_layer
 * layers + final norm + LM head draft greedily on the slot's own sequence
 * (layerskip.c says how its K/V writes are undone). target must be the
 * engine's context (sequence i = slot i) and outlive the proposer.
 * Errors: EMBER_ERR_INVALID_ARG (n_layer not in [1, model n_layer)),
 * EMBER_ERR_UNSUPPORTED (the architecture cannot stop early), NOMEM. */
ember_status spec_layerskip_new(ember_context *target, const ember_model *m, int32_t n_layer, spec_proposer *out);
/* DFlash (--spec-type draft-dflash, --spec-draft-model FILE): a `dflash`
 * draft (src/model/dflash.h) with its own K/V per slot, fed by absorb with
 * the target's hidden states of every decoded position (the inputs of the
 * draft's target_layers: ember layers target_layers[k] - 1); propose runs
 * one noise block [last token, mask x n], n = min(n_max, block_size - 1)
 * (--spec-draft-n-max, clamped as llama.cpp does, speculative.cpp:1014-1021;
 * the same n every step, as the block's rows see each other) and drafts the
 * argmax of each masked row, at most the step's n_max, stopping where its probability
 * within the top 10 falls below p_min (common/speculative.cpp:1027-1034,
 * 1251-1272). A prefix forked from another slot comes with its features
 * (fork); a slot missing some positions' features drafts nothing for that
 * request. Errors: those of loading the draft,
 * ember_dflash_check_target, EMBER_ERR_NOMEM. target must outlive it. */
ember_status spec_dflash_new(const char *path, const ember_model *target, int32_t n_slots, int32_t n_ctx, int32_t n_threads,
                             int32_t n_max, const ember_model_params *mp, spec_proposer *out);

/* Gemma 4 MTP (--spec-type draft-mtp, --spec-draft-model FILE): a
 * `gemma4-assistant` draft (src/model/mtp.h) with, per slot, copies of the
 * target K/V its layers read, fed by absorb with the target's hidden states
 * of every decoded position (the inputs of those K/V owner layers and the
 * final state); propose chains up to n_max single-row steps from the slot's
 * last token, all at that token's position, each continuing from the
 * previous step's argmax and h_next, stopping where the argmax's
 * probability within the top 10 falls below p_min (llama.cpp
 * common/speculative.cpp:1587-1730). A slot whose held positions do not
 * match its committed tokens drafts nothing. Errors: those of loading the
 * draft, ember_mtp_check_target (target must be gemma4), EMBER_ERR_NOMEM.
 * target must outlive it. */
ember_status spec_mtp_new(const char *path, const ember_model *target, int32_t n_slots, int32_t n_ctx, int32_t n_threads,
                          const ember_model_params *mp, spec_proposer *out);

#endif
