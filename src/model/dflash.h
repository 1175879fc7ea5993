/*
 * dflash.h — internal: a DFlash draft (architecture `dflash`) as loaded from
 * the GGUF llama.cpp's converter writes (docs/dflash.md has the facts and
 * their sources in llama.cpp 0.3.36).
 *
 * A DFlash draft is not a model of its own: it reads the target's hidden
 * states and borrows the target's token embedding and LM head, so
 * ember_model_load binds it (architecture `dflash`, ember_arch.draft_only)
 * and ember_context_new refuses it; the speculative proposer runs it through
 * ember_dflash_ctx.
 */
#ifndef EMBER_MODEL_DFLASH_H
#define EMBER_MODEL_DFLASH_H

#include "model/model.h"

#define EMBER_DFLASH_MAX_TARGET_LAYERS 16

typedef struct ember_dflash {
    /* dflash.target_layers: the target layers whose INPUT (the residual
     * stream after target layer target_layers[k] - 1) the draft reads; the
     * converter writes HF's target_layer_ids + 1 (conversion/qwen.py:735-738) */
    int32_t n_target_layers;
    int32_t target_layers[EMBER_DFLASH_MAX_TARGET_LAYERS];
    int32_t block_size;      /* dflash.block_size (default 16): at most block_size - 1 drafts a block */
    ember_token mask_token;  /* tokenizer.ggml.mask_token_id */
    bool causal;             /* dflash.attention.causal (default false: the block attends both ways) */
    int32_t n_embd_target;   /* fc input = n_target_layers * n_embd_target */
    ember_weight fc;         /* fc.weight [n_target_layers * n_embd_target] -> n_embd */
    const float *enc_norm;   /* enc.output_norm.weight [n_embd]: RMSNorm after fc */
} ember_dflash;

/* The DFlash part of a loaded model, or NULL when m is not a `dflash` draft. */
const ember_dflash *ember_model_dflash(const ember_model *m);

/* Check that draft d can run on target t: target_layers in [1, t's n_layer)
 * (the input of layer 0 is the embedding, which llama.cpp does not export
 * either), fc's input width n_target_layers * t's n_embd, the draft's
 * n_embd equal to t's (it uses t's embedding and LM head when it has none),
 * the same vocabulary size, the mask token inside it. Errors:
 * EMBER_ERR_INVALID_ARG naming the mismatch. */
ember_status ember_dflash_check_target(const ember_model *draft, const ember_model *target);

/* The draft's forward over its own K/V (one sequence per slot), all in
 * backend ops (attention included), on the backend the draft model's
 * placement picks (ember_model_params.n_gpu_layers != 0 and a GPU: CUDA,
 * F16 K/V, scratch in device memory; else the CPU, F32 K/V: model/draft_kv.h).
 * Features come from the host (uploaded), logits go to host rows. Shapes: n_embd, n_head, ... of
 * the draft; features rows are [n_target_layers * n_embd_target] floats,
 * layer k's state at [k * n_embd_target]. Source: llama.cpp
 * src/models/dflash.cpp:571-846 (docs/dflash.md). */
typedef struct ember_dflash_ctx ember_dflash_ctx;
/* n_seq sequences of up to n_ctx injected positions. Errors: those of
 * ember_dflash_check_target, EMBER_ERR_INVALID_ARG, EMBER_ERR_UNSUPPORTED,
 * EMBER_ERR_NOMEM (the K/V: n_seq * n_layer * 2 * (n_ctx + 32, rounded up to
 * 32) * n_head_kv * head_dim elements), those of the backend's creation.
 * draft and target must outlive it. */
ember_status ember_dflash_ctx_new(const ember_model *draft, const ember_model *target, int32_t n_seq, int32_t n_ctx,
                                  int32_t n_threads, ember_dflash_ctx **out);
void ember_dflash_ctx_free(ember_dflash_ctx *c);
/* The name of the backend it runs on ("cpu", "cuda") and its K/V bytes. */
const char *ember_dflash_ctx_backend(const ember_dflash_ctx *c);
uint64_t ember_dflash_ctx_kv_bytes(const ember_dflash_ctx *c);
/* Positions of seq whose K/V are injected (0 .. n_pos - 1). */
int32_t ember_dflash_n_pos(const ember_dflash_ctx *c, int32_t seq);
/* Make dst hold src's first n positions (a copy of their K/V); when src
 * holds fewer, dst holds none. */
void ember_dflash_fork(ember_dflash_ctx *c, int32_t src, int32_t dst, int32_t n);
/* Forget positions >= n_pos (no-op when n_pos >= the current count). */
void ember_dflash_truncate(ember_dflash_ctx *c, int32_t seq, int32_t n_pos);
/* Inject n target positions at n_pos .. n_pos + n - 1 (dflash.cpp:607-674):
 * g = RMSNorm(fc f) * enc_norm, then per layer K = rope(k_norm(Wk g)),
 * V = Wv g. features [n][n_target_layers * n_embd_target]. Errors:
 * EMBER_ERR_INVALID_ARG, EMBER_ERR_RANGE (past n_ctx). */
ember_status ember_dflash_inject(ember_dflash_ctx *c, int32_t seq, int32_t n, const float *features);
/* The noise block (dflash.cpp:676-846): tokens [n] (the anchor, then mask
 * tokens; 2 <= n <= block_size) at positions n_pos .. n_pos + n - 1, through
 * the draft's layers attending to every injected position and the whole
 * block (non-causal unless dflash.attention.causal), then the final norm
 * and the target's LM head: logits [n - 1][n_vocab] of rows 1 .. n - 1 (no
 * softcap, as llama.cpp's DFlash1). The block's K/V are not kept. Errors:
 * EMBER_ERR_INVALID_ARG (sizes, tokens), EMBER_ERR_RANGE. */
ember_status ember_dflash_block(ember_dflash_ctx *c, int32_t seq, const ember_token *tokens, int32_t n, float *logits);
/* ember_dflash_block reduced to the heads of its rows: out[i] (i < n - 1)
 * = the k largest logits of block row i + 1 with their ids, ordered by
 * logit descending then id ascending, plus the row's maximum and
 * log-partition function (ember_logits_top, the backend's logits_top op).
 * The logits stay in the draft backend's activation memory: on a GPU
 * (ember_dflash_device_heads) they are reduced there and only the heads
 * come down; on the CPU the op runs over the same host rows. k in
 * [1, EMBER_LOGITS_TOP_MAX]. The first call allocates the rows of a pass
 * (max(32, block_size) * n_vocab floats of activation memory). Errors: those
 * of ember_dflash_block, EMBER_ERR_INVALID_ARG (k), EMBER_ERR_NOMEM. */
ember_status ember_dflash_block_top(ember_dflash_ctx *c, int32_t seq, const ember_token *tokens, int32_t n, int32_t k,
                                    ember_logits_top *out);
/* ember_dflash_block_top for n_seg distinct sequences seqs[n_seg] in one
 * pass (the draft's weights read once for all of them): tokens
 * [n_seg][n], out [n_seg][n - 1] (block j's rows at out + j * (n - 1)); each
 * block attends to its own sequence only, so its heads are those of its
 * own ember_dflash_block_top up to the matmul's rounding for another row
 * count. n_seg * n <= the rows of a pass (ember_dflash_max_blocks), n_seg
 * <= 32. Errors: those of ember_dflash_block_top, EMBER_ERR_INVALID_ARG (a
 * sequence twice, too many rows). */
ember_status ember_dflash_blocks_top(ember_dflash_ctx *c, int32_t n_seg, const int32_t *seqs, const ember_token *tokens,
                                     int32_t n, int32_t k, ember_logits_top *out);
/* ember_dflash_block for n_seg distinct sequences in one pass, as
 * ember_dflash_blocks_top: tokens [n_seg][n], logits [n_seg][n - 1][n_vocab]
 * host rows. Errors: those of ember_dflash_blocks_top but k's. */
ember_status ember_dflash_blocks(ember_dflash_ctx *c, int32_t n_seg, const int32_t *seqs, const ember_token *tokens,
                                 int32_t n, float *logits);
/* How many blocks of n tokens one pass of ember_dflash_blocks(_top) takes
 * (the draft's rows a pass / n; 0 for n < 2). */
int32_t ember_dflash_max_blocks(const ember_dflash_ctx *c, int32_t n);
/* True when the draft's backend keeps activations in device memory, where
 * ember_dflash_block_top saves the logits' download (a proposer that needs
 * only the heads prefers it there; on the CPU a host pass over
 * ember_dflash_block's rows that skips the log-partition is cheaper). */
bool ember_dflash_device_heads(const ember_dflash_ctx *c);
/* Device seconds of the last block plus the latest injection if no earlier
 * call counted it (CUDA events on a GPU backend; waits for them): one
 * step's draft work, not the time since the last call, for the speculation
 * policy's draft cost; < 0 on a backend without a device clock (the CPU)
 * or before the first block. */
double ember_dflash_device_seconds(ember_dflash_ctx *c);

#endif
