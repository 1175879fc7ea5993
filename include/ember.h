/*
 * ember.h — the public C API of libember.
 *
 * Owns: status codes, error messages, and (as the runtime lands) opaque
 * handles for models, contexts and batches. Must not expose internal structs.
 *
 * Conventions: every function that can fail returns ember_status; on failure
 * a human-readable message naming the file, field or byte offset at fault is
 * available from ember_last_error() on the same thread.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_VERSION "0.1.0"

typedef enum ember_status {
    EMBER_OK = 0,
    EMBER_ERR_INVALID_ARG,   /* caller passed a bad argument */
    EMBER_ERR_IO,            /* open/read/mmap/write failed */
    EMBER_ERR_FORMAT,        /* malformed input file or data */
    EMBER_ERR_UNSUPPORTED,   /* well-formed but not supported (type, arch, version) */
    EMBER_ERR_NOT_FOUND,     /* key, tensor or item absent */
    EMBER_ERR_NOMEM,         /* allocation failed or would exceed a limit */
    EMBER_ERR_RANGE,         /* value out of range (e.g. prompt longer than context) */
    EMBER_ERR_INTERNAL,      /* broken invariant inside ember */
} ember_status;

/* Short constant name of a status ("EMBER_ERR_FORMAT"). Never NULL. */
const char *ember_status_name(ember_status s);

/* Message of the last error set on this thread ("" if none). The pointer stays
 * valid until the next ember call on this thread that sets an error. */
const char *ember_last_error(void);


/* ===========================================================================
 * Runtime API (implemented by src/model, src/kv, src/backend, src/engine).
 *
 * Shapes use ggml's order where it matters: logits of one position are
 * [n_vocab] floats; positions are token indices within a sequence (0-based).
 * ======================================================================== */

typedef int32_t ember_token;   /* token id, [0, n_vocab) */
typedef int32_t ember_pos;     /* position within a sequence, >= 0 */
typedef int32_t ember_seq_id;  /* sequence id, [0, n_seq_max) */

typedef struct ember_model ember_model;     /* weights + vocab, immutable, shareable */
typedef struct ember_context ember_context; /* KV pool + scratch + backend state */

typedef enum ember_kv_type {
    EMBER_KV_F16 = 0,
    EMBER_KV_Q8_0 = 1,
    EMBER_KV_F32 = 2,
} ember_kv_type;

typedef struct ember_model_params {
    int32_t n_gpu_layers;   /* -ngl; 0 = CPU only; -1 = all layers when a GPU is present */
    int32_t device;         /* --device index for the CUDA backend */
    bool use_mmap;          /* default true */
} ember_model_params;

ember_model_params ember_model_default_params(void);

/* Load a GGUF model: metadata, vocab, weights bound to the mapped tensors.
 * Errors: EMBER_ERR_IO, EMBER_ERR_FORMAT (malformed file), EMBER_ERR_UNSUPPORTED
 * (unknown general.architecture, tensor type without kernels), EMBER_ERR_NOT_FOUND
 * (missing tensor or key; the message names it). */
ember_status ember_model_load(const char *path, const ember_model_params *params, ember_model **out);
void ember_model_free(ember_model *m);
const char *ember_model_arch(const ember_model *m);   /* general.architecture */
int32_t ember_model_n_vocab(const ember_model *m);
int32_t ember_model_n_ctx_train(const ember_model *m);
int32_t ember_model_n_embd(const ember_model *m);
int32_t ember_model_n_layer(const ember_model *m);
/* Bytes of weights the model uses (mapped or uploaded). */
uint64_t ember_model_size_bytes(const ember_model *m);
/* The chat template the GGUF carries (tokenizer.chat_template, Jinja source
 * as llama.cpp's converter writes it), or NULL when it has none. Not
 * NUL-terminated: *len bytes (len may be NULL), owned by the model (the
 * mapped file) and valid while it is loaded. */
const char *ember_model_chat_template(const ember_model *m, size_t *len);
/* The model's vocabulary (tokenizer.ggml.*), owned by the model; use it with
 * src/tokenizer/tokenizer.h. Never NULL for a loaded model. */
struct ember_vocab;
const struct ember_vocab *ember_model_vocab(const ember_model *m);

typedef struct ember_context_params {
    uint32_t n_ctx;        /* -c: the most tokens one sequence may hold (default 4096) */
    uint32_t n_kv_tokens;  /* KV pool size in tokens shared by all sequences; 0 = n_ctx.
                            * Allocated in blocks of 32 tokens; a sequence takes whole
                            * blocks, so size it as sum over live sequences of
                            * ceil(len / 32) * 32 (plus one block per fork that
                            * writes into a shared partial block) */
    uint32_t n_seq_max;    /* sequences that may exist at once (slots, drafts); default 1 */
    uint32_t n_batch;      /* most entries one ember_decode call accepts (default 2048) */
    uint32_t n_ubatch;     /* entries per internal micro-batch (default 512; 0 or > n_batch
                            * = n_batch): scratch is sized for this many tokens */
    int32_t n_threads;     /* -t; <= 0 = number of cores. Workers persist for the
                            * context's life */
    ember_kv_type type_k;  /* -ctk (default f16; q8_0 needs key_length % 32 == 0) */
    ember_kv_type type_v;  /* -ctv (default f16) */
    uint32_t n_ctx_checkpoints; /* --ctx-checkpoints: models with recurrent layers keep up to
                            * this many block checkpoints of each sequence's state
                            * (ember_seq_ctx_checkpoint; default 8, 0..64, 0 = none) */
} ember_context_params;

ember_context_params ember_context_default_params(void);

/* A context: KV pool, scratch and a backend for one model; use from one
 * thread at a time (several contexts may share a model). The backend is the
 * GPU one when the build has it, the model's n_gpu_layers != 0 and a device
 * exists, else the CPU (a thread pool); its environment switches are read
 * here (ember_print_env_switches). All memory is allocated here;
 * ember_decode allocates only to grow its logits buffer when a batch asks
 * for more logits rows than any batch before (it starts with
 * min(n_seq_max, n_batch) rows). Errors: EMBER_ERR_INVALID_ARG (sizes out of
 * range, unknown KV type, q8_0 with a head size not a multiple of 32, an
 * environment switch that does not parse), EMBER_ERR_UNSUPPORTED (a KV type
 * the backend cannot keep: the GPU keeps F16 only), EMBER_ERR_NOMEM (pool or
 * scratch does not fit). */
ember_status ember_context_new(ember_model *m, const ember_context_params *params, ember_context **out);
void ember_context_free(ember_context *ctx);
/* Bytes of KV cache the context allocated, plus the per-sequence recurrent
 * state of a model with linear-attention layers (qwen35). */
uint64_t ember_context_kv_bytes(const ember_context *ctx);
uint64_t ember_context_scratch_bytes(const ember_context *ctx);
/* Place what a backend places lazily (a GPU uploads weights and allocates
 * its KV cache on first use): one decode of token 0 at position 0 of
 * sequence 0, then that sequence removed, so the first request does not pay
 * for the upload and ember_context_print_memory shows where memory goes.
 * Nothing for a backend that places everything up front (CPU). *ran (may
 * be NULL) says whether the decode ran. Sequence 0 must be empty. Errors:
 * EMBER_ERR_INVALID_ARG (sequence 0 holds tokens), those of ember_decode. */
ember_status ember_context_warmup(ember_context *ctx, bool *ran);
/* Print the backend's device memory by category (weights, KV cache,
 * scratch, ...), in MiB, a few lines starting "ember: "; nothing for the CPU
 * backend. Call after ember_context_warmup or a decode. */
void ember_context_print_memory(const ember_context *ctx, FILE *f);

/* GPU devices usable by this build (0 when it has no GPU backend or the
 * machine no device). Never fails. */
int32_t ember_gpu_count(void);
/* Free and total bytes of GPU `device` as the driver reports them (all
 * processes count). Errors: EMBER_ERR_UNSUPPORTED (no GPU in this build or
 * machine), EMBER_ERR_INVALID_ARG (no such device), EMBER_ERR_INTERNAL. */
ember_status ember_gpu_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes);
/* Print the table of the backends' environment switches (EMBER_CUDA_*,
 * EMBER_NO_*, ...): name, kind, default, value set in this process, one-line
 * doc. `ember --help-env`. */
void ember_print_env_switches(FILE *f);

/* One step's work: n_tokens entries of (token, position, sequence, wants-logits).
 * Entries of several sequences may be mixed (decode tokens, prefill chunks,
 * drafted tokens awaiting verification). Within a sequence, positions must be
 * consecutive and continue that sequence's current length. Struct of arrays,
 * each of n_tokens elements. */
typedef struct ember_batch {
    int32_t n_tokens;
    ember_token *token;
    ember_pos *pos;
    ember_seq_id *seq_id;
    int8_t *logits;        /* nonzero: compute logits for this entry */
    int8_t *embd;          /* may be NULL (no entry): nonzero: keep this entry's embedding, the final
                            * hidden state after the output norm (ember_get_embeddings_ith) */
} ember_batch;

/* Allocate a batch with room for n_max entries (n_tokens = 0). */
ember_status ember_batch_init(int32_t n_max, ember_batch *out);
void ember_batch_free(ember_batch *b);

/* Run the model over `batch`, writing K/V for every entry and logits for the
 * entries that asked for them. Each entry attends to its own sequence's
 * positions [0, pos] (on sliding-window layers the last n_swa of them),
 * including prefix blocks shared by a fork and earlier entries of the same
 * batch. The batch is processed in micro-batches of n_ubatch entries in
 * order. Results are deterministic for a given batch shape; a token decoded
 * alone and the same token inside a multi-token batch may differ in the last
 * bits (different matmul kernels), as in llama.cpp.
 * Errors (nothing is written, no sequence changes; after an INVALID_ARG or
 * RANGE error the last decode's logits stay readable): EMBER_ERR_INVALID_ARG
 * (n_tokens not in [1, n_batch], NULL arrays, token out of vocab, bad seq id,
 * a position that does not continue its sequence; the message names the
 * entry), EMBER_ERR_RANGE (a sequence would exceed n_ctx, or the KV pool
 * lacks blocks), EMBER_ERR_NOMEM (logits buffer could not grow). */
ember_status ember_decode(ember_context *ctx, const ember_batch *batch);

/* Logits [n_vocab] of batch entry `i` of the last ember_decode; NULL if that
 * entry did not ask for logits. i = -1: the last entry that asked for logits.
 * Valid until the next ember_decode (a failed decode leaves none). */
const float *ember_get_logits(ember_context *ctx, int32_t i);

/* Embedding [n_embd] of batch entry `i` of the last ember_decode: the hidden
 * state after the model's final (output) norm, before the LM head: what
 * llama.cpp's llama_get_embeddings_ith returns (its "result_norm", t_embd)
 * for a context with pooling none. NULL if that entry did not set
 * batch.embd[i] (or i is out of range). An entry may ask for logits,
 * an embedding, or both. Valid until the next ember_decode. Pooling over a
 * sequence's positions (mean, cls, last) is the caller's (src/engine).
 * Embeddings need the activations on the host: ember_decode refuses a batch
 * asking for them with EMBER_ERR_UNSUPPORTED when they live on a GPU
 * (ember_context_embeddings_supported says so beforehand). */
const float *ember_get_embeddings_ith(ember_context *ctx, int32_t i);
bool ember_context_embeddings_supported(const ember_context *ctx);

/* The pooling of a model's sequence embeddings, as the GGUF key
 * `<arch>.pooling_type` stores it (llama.cpp's enum llama_pooling_type:
 * 0 none, 1 mean, 2 cls, 3 last, 4 rank). */
typedef enum ember_pooling {
    EMBER_POOLING_NONE = 0,   /* one embedding per token */
    EMBER_POOLING_MEAN = 1,   /* the mean over the sequence's positions */
    EMBER_POOLING_CLS = 2,    /* the first position's */
    EMBER_POOLING_LAST = 3,   /* the last position's */
    EMBER_POOLING_RANK = 4,   /* a classifier head over the pooled state (reranking; not supported) */
} ember_pooling;
/* `<arch>.pooling_type` of the model; EMBER_POOLING_NONE when absent (llama.cpp's
 * default for decoder models, llama_hparams.pooling_type), -1 for a value
 * outside the enum. */
int32_t ember_model_pooling_type(const ember_model *m);

/* The head of the logits of batch entries, reduced where the logits live
 * (on the device for a GPU backend), so that a sampler needs no full row on
 * the host (the served path: greedy, top-k, top-p, min-p, temperature).
 * For each entries[r], r < n: out[r].id/.logit hold the k largest logits
 * of that entry's row in descending order (ties: the lower id first; NaN
 * counts as -inf), out[r].max the largest logit and out[r].lse the log of
 * the row's partition function, log(sum_i exp(logit_i)), summed in double
 * from per-chunk partial sums. k in [1, EMBER_LOGITS_TOP_MAX]; k = 1 is
 * the argmax. entries[r] = -1: the last entry that asked for logits.
 * Rows stay valid on the backend until the next ember_decode;
 * ember_get_logits may still be called for the full rows afterwards.
 * Errors: EMBER_ERR_INVALID_ARG (NULL, k out of range, an entry without
 * logits), EMBER_ERR_NOMEM. */
#define EMBER_LOGITS_TOP_MAX 128
typedef struct ember_logits_top {
    float max;        /* largest logit of the row */
    float lse;        /* log(sum_i exp(logit_i)) over all n_vocab logits */
    int32_t n;        /* candidates held (k) */
    ember_token id[EMBER_LOGITS_TOP_MAX];
    float logit[EMBER_LOGITS_TOP_MAX];
} ember_logits_top;
ember_status ember_get_logits_top(ember_context *ctx, int32_t n, const int32_t *entries, int32_t k,
                                  ember_logits_top *out);

/* ember_get_logits_top in two halves, so that the next decode is queued
 * before the host waits (the served path's pipeline):
 * ember_get_logits_top_start queues the heads of entries[0, n) of the last
 * decode (arguments as ember_get_logits_top) and sets *queued; *queued
 * false (nothing queued, EMBER_OK): the backend cannot run them
 * asynchronously, call ember_get_logits_top instead.
 * ember_get_logits_top_finish(ctx, out) waits for those heads only and
 * fills out[n]; it must follow a start that queued, once, and may come
 * after a later ember_decode (or ember_decode_fed); between the two,
 * ember_get_logits_top and another start are refused. Errors: as
 * ember_get_logits_top; EMBER_ERR_INVALID_ARG for a finish without a
 * queued start, or a start or ember_get_logits_top before the finish. */
ember_status ember_get_logits_top_start(ember_context *ctx, int32_t n, const int32_t *entries, int32_t k,
                                        bool *queued);
ember_status ember_get_logits_top_finish(ember_context *ctx, ember_logits_top *out);

/* True when ember_decode_fed works on this context: the backend copies
 * tokens from queued heads on the device (a GPU backend), and the model
 * reads its tokens only on the device (not gemma4's per-layer embeddings)
 * and keeps no recurrent state (whose rollback replays host tokens). */
bool ember_context_token_feedback(const ember_context *ctx);

/* ember_decode, where entry i with top_row[i] >= 0 takes as its token the
 * argmax (id[0]) of row top_row[i] of the heads queued by the last
 * ember_get_logits_top_start (batch->token[i] is then ignored; the host
 * learns the token from ember_get_logits_top_finish). top_row[i] = -1:
 * batch->token[i]. Errors: those of ember_decode; EMBER_ERR_UNSUPPORTED
 * without ember_context_token_feedback; EMBER_ERR_INVALID_ARG for a row
 * outside the queued heads or none queued, or more than
 * EMBER_DECODE_FED_MAX entries. */
#define EMBER_DECODE_FED_MAX 64
ember_status ember_decode_fed(ember_context *ctx, const ember_batch *batch, const int32_t *top_row);

/* Device seconds of the last ember_decode / ember_decode_fed, from its first
 * micro-batch's work to its last's on the device's clock (CUDA events on a
 * GPU backend; waits for that work to finish), for costs that must not be
 * host CPU time. < 0 when the backend has no device clock (the CPU) or no
 * decode ran. */
double ember_decode_device_seconds(ember_context *ctx);

/* Sequences. A sequence exists once it holds a token; these edit it:
 * - remove: drop all of its positions and free its KV blocks;
 * - truncate: keep positions [0, n_keep), drop the rest (KV rollback, no copy;
 *   whole blocks past n_keep return to the pool);
 * - fork: make dst share src's positions [0, n) (prefix sharing; blocks are
 *   reference-counted; a shared partly filled block is copied when either
 *   sequence first writes into it). dst must be empty.
 * Models with recurrent (linear-attention) layers (qwen35) keep a state per
 * sequence that has absorbed all of its positions and cannot be cut back
 * directly: truncate to 0 < n_keep < length, or fork at 0 < n < src's
 * length, need a checkpoint of that sequence (ember_seq_checkpoint) taken at
 * or before the position: the context restores it and decodes the tokens
 * from there to the position again (a forward pass inside the call; the
 * last decode's logits stay readable). Without one they are EMBER_ERR_RANGE
 * and change nothing (the caller recomputes from position 0). A fork at src's
 * length copies src's state.
 * Errors: EMBER_ERR_INVALID_ARG (seq id not in [0, n_seq_max), src == dst,
 * dst not empty), EMBER_ERR_RANGE (n_keep or n past the sequence's length;
 * a middle position of a model with recurrent layers). */
ember_status ember_seq_remove(ember_context *ctx, ember_seq_id seq);
ember_status ember_seq_truncate(ember_context *ctx, ember_seq_id seq, ember_pos n_keep);
ember_status ember_seq_fork(ember_context *ctx, ember_seq_id src, ember_seq_id dst, ember_pos n);
/* Models with recurrent layers: keep a copy of sequence seq's recurrent state
 * at its current length, so that a later truncate or fork to any position at
 * or after it can roll back to it (see above); replaces seq's previous
 * rollback checkpoint (one per sequence; truncating below it or removing
 * the sequence drops it). Costs one copy of the sequence's state (allocated
 * on first use, counted in ember_context_kv_bytes). OK and nothing done for
 * other models. Errors: EMBER_ERR_INVALID_ARG (seq not in [0, n_seq_max)),
 * EMBER_ERR_NOMEM. */
ember_status ember_seq_checkpoint(ember_context *ctx, ember_seq_id seq);
/* The same, as one of the sequence's n_ctx_checkpoints block checkpoints
 * (the prefix cache's: taken at block boundaries, kept beside the rollback
 * one; when all are taken the oldest stays and, of the others, the one
 * whose removal leaves the smallest gap goes).
 * A truncate or fork uses the latest checkpoint at or before its position.
 * No-op with n_ctx_checkpoints = 0 or without recurrent layers. Errors: as
 * ember_seq_checkpoint. */
ember_status ember_seq_ctx_checkpoint(ember_context *ctx, ember_seq_id seq);
/* Whether the model keeps recurrent state (truncate and fork then need
 * checkpoints) and block checkpoints are on: the engine then ends prefill
 * chunks at block boundaries and calls ember_seq_ctx_checkpoint there. */
bool ember_context_wants_checkpoints(const ember_context *ctx);
/* The most bytes the recurrent-state snapshots (the rollback one and the
 * n_ctx_checkpoints block checkpoints of every sequence) can take once all
 * are allocated (they are, on first use, and then counted in
 * ember_context_kv_bytes); 0 without recurrent layers. */
uint64_t ember_context_checkpoint_bytes_max(const ember_context *ctx);
/* Number of positions sequence `seq` holds (its next position). */
ember_pos ember_seq_len(const ember_context *ctx, ember_seq_id seq);
/* Free KV tokens left in the pool (free blocks x 32). */
uint32_t ember_kv_free_tokens(const ember_context *ctx);

/* Partial forward passes, for speculative decoding (src/engine/spec).
 * - set_layer_limit: later decodes run layers [0, n_layer) only, then the
 *   final norm and LM head (self-speculative / layer-skip drafting: Zhang et
 *   al. 2024, "Draft & Verify"; Elhoushi et al. 2024, "LayerSkip"). 0 (or the
 *   model's n_layer): every layer. Such a decode writes K/V for the layers it
 *   runs only, yet its positions count in the sequence: the caller truncates
 *   them before a full decode attends to them. Errors: EMBER_ERR_INVALID_ARG
 *   (n_layer outside [0, model n_layer]), EMBER_ERR_UNSUPPORTED (the
 *   architecture always runs every layer: gemma4).
 * - set_hidden_layers: later decodes keep, for every batch entry (logits
 *   or not: a DFlash draft reads every prompt position), the hidden state
 *   (the residual stream, [n_embd] floats, before any final norm) after
 *   each of layers[0, n) (0-based; draft heads such as EAGLE, MTP or DFlash
 *   read them; llama.cpp's "input of layer l + 1"). n = 0 turns it off.
 *   Errors: EMBER_ERR_INVALID_ARG (n outside [0, EMBER_MAX_HIDDEN_LAYERS], a
 *   layer outside [0, n_layer)), EMBER_ERR_UNSUPPORTED (architecture), NOMEM.
 * - get_hidden: that state for batch entry i (-1: the last entry with
 *   logits) and requested layer j of the last decode; NULL when i or j is
 *   out of range or the decode stopped before that layer. Valid until the
 *   next ember_decode. */
#define EMBER_MAX_HIDDEN_LAYERS 8
ember_status ember_set_layer_limit(ember_context *ctx, int32_t n_layer);
ember_status ember_set_hidden_layers(ember_context *ctx, int32_t n, const int32_t *layers);
const float *ember_get_hidden(ember_context *ctx, int32_t i, int32_t j);

/* ===========================================================================
 * Sampling (src/sample). Order as llama.cpp's default chain: logit bias,
 * penalties, top-k, top-p, min-p, temperature, then a draw (greedy when
 * temp <= 0).
 * ======================================================================== */

typedef struct ember_logit_bias { ember_token token; float bias; } ember_logit_bias;

typedef struct ember_sampler_params {
    float temp;             /* <= 0: greedy */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repeat_penalty;   /* 1: off */
    float presence_penalty; /* 0: off */
    float frequency_penalty;/* 0: off */
    int32_t penalty_last_n; /* tokens looked back for penalties; -1 = all */
    uint64_t seed;          /* same seed, same draws */
    const ember_logit_bias *logit_bias;
    int32_t n_logit_bias;
} ember_sampler_params;

typedef struct ember_sampler ember_sampler;

ember_sampler_params ember_sampler_default_params(void);
ember_status ember_sampler_new(const ember_sampler_params *p, int32_t n_vocab, ember_sampler **out);
void ember_sampler_free(ember_sampler *s);
/* Pick a token from logits [n_vocab] (not modified). */
ember_token ember_sampler_sample(ember_sampler *s, const float *logits);
/* Sampling from a row's head (ember_get_logits_top) instead of its full
 * logits, so the row never comes to the host:
 * - ember_sampler_top_k: the k this sampler needs from ember_get_logits_top
 *   (1 when greedy; top_k when top-k is on; EMBER_LOGITS_TOP_MAX for top-p
 *   or min-p without top-k), or 0 when no head can stand for the row:
 *   logit bias or penalties on, top_k > EMBER_LOGITS_TOP_MAX, or a draw
 *   over the whole vocabulary (temperature alone).
 * - ember_sampler_sample_top: the token ember_sampler_sample would draw
 *   from the full row, computed from the head: the same chain over the
 *   same survivors (top-k, then top-p with probabilities exp(l - lse) of
 *   the whole row, min-p, temperature) and one uniform draw. Errors:
 *   EMBER_ERR_RANGE when the head is too short to decide (the top-p mass or
 *   the min-p survivors reach past it; the generator is then not advanced,
 *   so the caller may draw from the full row instead), EMBER_ERR_INVALID_ARG. */
int32_t ember_sampler_top_k(const ember_sampler *s);
ember_status ember_sampler_sample_top(ember_sampler *s, const ember_logits_top *top, ember_token *out);
/* Record a token into the penalty history (prompt tokens and generated ones). */
void ember_sampler_accept(ember_sampler *s, ember_token t);
void ember_sampler_reset(ember_sampler *s);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_H */
