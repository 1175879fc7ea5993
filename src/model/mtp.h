/*
 * mtp.h — internal: a Gemma 4 multi-token-prediction draft (architecture
 * `gemma4-assistant`, Google's "-assistant" checkpoints) as loaded from the
 * GGUF llama.cpp's converter writes (docs/mtp.md has the facts and their
 * sources in llama.cpp 0.3.36).
 *
 * The draft has no K/V of its own: each of its layers attends to the K/V of
 * a target layer (sliding layers: the one target layer n_layer - 2 reads,
 * full layers: the one target layer n_layer - 1 reads), reads the target's
 * post-final-norm hidden state and the target's token embedding. So
 * ember_model_load binds it (ember_arch.draft_only) and ember_context_new
 * refuses it; the speculative proposer runs it through ember_mtp_ctx, which
 * keeps a copy of those target K/V per sequence, computed from the target's
 * hidden states with the target's own weights (gemma4.h).
 */
#ifndef EMBER_MODEL_MTP_H
#define EMBER_MODEL_MTP_H

#include "model/model.h"

typedef struct ember_mtp_layer {
    bool swa;                  /* attention.sliding_window_pattern[i] */
    int32_t head_dim;          /* key_length_swa or key_length (== value lengths) */
    int32_t n_rot;             /* rope.dimension_count_swa or rope.dimension_count */
    int32_t n_ff;              /* feed_forward_length (scalar or per layer) */
    float rope_base;           /* rope.freq_base_swa or rope.freq_base */
    const float *rope_freqs;   /* full layers: rope_freqs.weight [head_dim / 2], NULL: plain NEOX */
    float out_scale;           /* blk.i.layer_output_scale.weight[0] */
} ember_mtp_layer;

typedef struct ember_mtp {
    int32_t n_embd_backbone;   /* gemma4-assistant.embedding_length_out: the target's n_embd */
    int32_t n_layer_nextn;     /* gemma4-assistant.nextn_predict_layers (= block_count as converted) */
    ember_weight pre_proj;     /* nextn.pre_projection.weight: [2 * n_embd_backbone] -> n_embd */
    ember_weight post_proj;    /* nextn.post_projection.weight: [n_embd] -> n_embd_backbone */
    ember_mtp_layer *layers;   /* [n_layer] */
} ember_mtp;

/* The MTP part of a loaded model, or NULL when m is not a gemma4-assistant draft. */
const ember_mtp *ember_model_mtp(const ember_model *m);

/* Check that draft d can run on target t: t is gemma4 with at least 2
 * layers; the draft's sliding layers match (head_dim) the K/V owner of
 * target layer n_layer - 2 and its full layers that of n_layer - 1 (the
 * owners of the right type, a sliding and a full one); n_embd_backbone ==
 * t's n_embd; the same vocabulary size; the K/V owners are not layer 0
 * (their input would be the embedding, which ember does not capture).
 * Errors: EMBER_ERR_INVALID_ARG naming the mismatch, EMBER_ERR_UNSUPPORTED. */
ember_status ember_mtp_check_target(const ember_model *draft, const ember_model *target);

/* The draft's forward over copies of the target's K/V, all in backend ops
 * (attention included), on the backend the draft model's placement picks
 * (ember_model_params.n_gpu_layers != 0 and a GPU: CUDA, F16 K/V copies,
 * scratch in device memory; else the CPU, F32: model/draft_kv.h); the
 * gathered target states and h come from the host, logits and h_next go
 * to host rows. Sources: llama.cpp
 * src/models/gemma4-assistant.cpp:84-198 (the graph),
 * src/llama-model.cpp:2809-2836 (the shared K/V), docs/mtp.md. */
typedef struct ember_mtp_ctx ember_mtp_ctx;
/* n_seq sequences of up to n_ctx positions. Errors: those of
 * ember_mtp_check_target, EMBER_ERR_INVALID_ARG, EMBER_ERR_NOMEM (the K/V:
 * n_seq * n_ctx (rounded up to 32) * 2 * (sum over the K/V owners of
 * n_head_kv * head_dim) elements), EMBER_ERR_UNSUPPORTED (a sliding window
 * under 2), those of the backend's creation. draft and target must outlive it. */
ember_status ember_mtp_ctx_new(const ember_model *draft, const ember_model *target, int32_t n_seq, int32_t n_ctx,
                               int32_t n_threads, ember_mtp_ctx **out);
void ember_mtp_ctx_free(ember_mtp_ctx *c);
/* The name of the backend it runs on ("cpu", "cuda") and its K/V bytes. */
const char *ember_mtp_ctx_backend(const ember_mtp_ctx *c);
uint64_t ember_mtp_ctx_kv_bytes(const ember_mtp_ctx *c);
/* The target's hidden states the context needs for each position: the
 * residual stream after each of layers[0, n) (0-based target layers, as
 * ember_set_hidden_layers takes them): first the inputs of the K/V owners
 * (one each, their layer - 1), then layer n_layer - 1 (the final state, whose
 * norm is the draft's h). Returns n (at most 3). */
int32_t ember_mtp_hidden_layers(const ember_mtp_ctx *c, int32_t *layers);
/* Positions of seq whose K/V are held (0 .. n_pos - 1). */
int32_t ember_mtp_n_pos(const ember_mtp_ctx *c, int32_t seq);
/* Make dst hold src's first n positions; when src holds fewer, dst holds none. */
void ember_mtp_fork(ember_mtp_ctx *c, int32_t src, int32_t dst, int32_t n);
/* Forget positions >= n_pos (no-op when n_pos >= the current count). */
void ember_mtp_truncate(ember_mtp_ctx *c, int32_t seq, int32_t n_pos);
/* Append n positions at n_pos .. n_pos + n - 1: in [n][n_src][n_embd_target]
 * holds, per position, the inputs of the K/V owner layers (the first n_src
 * of ember_mtp_hidden_layers); their K/V are computed as the target does
 * (gemma4.h). Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_RANGE (past n_ctx). */
ember_status ember_mtp_inject(ember_mtp_ctx *c, int32_t seq, int32_t n, const float *in);
/* h [n_embd_target] = RMSNorm(x) * the target's output_norm: the target's
 * post-final-norm state (llama.cpp h_nextn, src/models/gemma4.cpp:405-415)
 * from x, its residual stream after the last layer. h may equal x. */
void ember_mtp_final_norm(ember_mtp_ctx *c, const float *x, float *h);
/* One draft step (gemma4-assistant.cpp:84-198): token at position pos with
 * h [n_embd_target] attends to the held K/V of positions [0, pos) (sliding
 * layers: those with pos - p < sliding_window); logits [n_vocab] of the
 * draft's tied LM head (no softcap); h_next [n_embd_target] =
 * post_projection of the final norm (the next step's h); h_next may equal h.
 * Errors: EMBER_ERR_INVALID_ARG (seq, token), EMBER_ERR_RANGE (pos < 1 or
 * positions before pos not held). */
ember_status ember_mtp_step(ember_mtp_ctx *c, int32_t seq, ember_token token, int32_t pos, const float *h, float *logits,
                            float *h_next);

#endif
