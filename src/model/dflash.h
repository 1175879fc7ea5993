/*
 * dflash.h — internal: a DFlash draft (architecture `dflash`) as loaded from
 * the GGUF llama.cpp's converter writes (docs/dflash.md has the facts and
 * their sources in llama.cpp 0.3.36).
 *
 * A DFlash draft is not a model of its own: it reads the target's hidden
 * states and borrows the target's token embedding and LM head, so
 * ember_model_load binds it (architecture `dflash`, ember_arch.draft_only)
 * and ember_context_new refuses it; the speculative proposer runs it.
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

#endif
