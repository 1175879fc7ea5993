/*
 * dflash.c — the `dflash` architecture: binding a DFlash draft's weights and
 * metadata (block-diffusion drafting, Chen et al. 2025, "DFlash: Block
 * Diffusion for Flash Speculative Decoding"; file layout as llama.cpp
 * 0.3.36 writes and reads it: conversion/qwen.py DFlashModel,
 * src/models/dflash.cpp load_arch_hparams / load_arch_tensors; docs/dflash.md).
 *
 * Owns: the draft's hyperparameters beyond the common ones (target_layers,
 * block_size, mask token, causal flag) and its tensors: fc, enc.output_norm,
 * output_norm and Qwen3-shaped layers (attn_norm, attn_q/k/v/output with
 * q/k norms, ffn_norm, SwiGLU ffn). Must not: run as a model of its own
 * (ember_arch.draft_only: it has no forward here; the proposer runs it).
 *
 * Supported: the plain DFlash1 draft. Refused with a clear error: DFlash2
 * (selector/convolution tensors), DSpark (Markov head), DeepSeek-V4 stages
 * (hyper-connections), reduced draft vocabularies (d2t), M-RoPE sections,
 * sliding windows, attention sinks, shared K/V (no attn_v), GELU.
 */
#include "model/dflash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static ember_status refuse_tensor(ember_model *m, const char *name, const char *what)
{
    if (!ember_gguf_get_tensor(m->gguf, name)) return EMBER_OK;
    return ember_error(EMBER_ERR_UNSUPPORTED, "%s: DFlash draft has tensor '%s' (%s), which is not supported", m->path,
                       name, what);
}

static ember_status refuse_key(ember_model *m, const char *suffix, const char *what)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (ember_gguf_find_key(m->gguf, key) < 0) return EMBER_OK;
    return ember_error(EMBER_ERR_UNSUPPORTED, "%s: DFlash draft has metadata key '%s' (%s), which is not supported",
                       m->path, key, what);
}

static ember_status dflash_load(ember_model *m)
{
    ember_hparams *hp = &m->hp;
    ember_status st;
    if ((st = refuse_tensor(m, "selector_hidden.weight", "DFlash2 selector")) ||
        (st = refuse_tensor(m, "markov_w1.weight", "DSpark Markov head")) ||
        (st = refuse_tensor(m, "d2t", "reduced draft vocabulary")) ||
        (st = refuse_tensor(m, "blk.0.attn_sinks.weight", "attention sinks")) ||
        (st = refuse_key(m, "hyper_connection_count", "DeepSeek-V4 stages")) ||
        (st = refuse_key(m, "rope.dimension_sections", "M-RoPE target")) ||
        (st = refuse_key(m, "attention.sliding_window", "sliding window")))
        return st;
    {
        char key[160];
        const char *act = NULL;
        snprintf(key, sizeof key, "%s.hidden_act", m->arch_name);
        if (ember_gguf_get_str(m->gguf, key, &act, NULL) == EMBER_OK && strcmp(act, "silu") != 0)
            return ember_error(EMBER_ERR_UNSUPPORTED, "%s: %s = '%s' is not supported (silu)", m->path, key, act);
    }
    ember_dflash *d = calloc(1, sizeof *d);
    if (!d) return ember_error(EMBER_ERR_NOMEM, "%s: DFlash draft", m->path);
    m->arch_priv = d;

    /* dflash.target_layers: required (llama.cpp dflash.cpp:37-39) */
    char key[160];
    snprintf(key, sizeof key, "%s.target_layers", m->arch_name);
    ember_gguf_arr a;
    st = ember_gguf_get_arr(m->gguf, key, &a);
    if (st == EMBER_ERR_NOT_FOUND) return ember_error(st, "%s: DFlash draft requires metadata key '%s'", m->path, key);
    if (st) return ember_error(st, "%s: metadata key '%s' is not an array", m->path, key);
    const bool is_int = a.type == EMBER_GGUF_I32 || a.type == EMBER_GGUF_U32 || a.type == EMBER_GGUF_I64 ||
                        a.type == EMBER_GGUF_U64 || a.type == EMBER_GGUF_I16 || a.type == EMBER_GGUF_U16 ||
                        a.type == EMBER_GGUF_I8 || a.type == EMBER_GGUF_U8;
    if (!is_int || a.n < 1 || a.n > EMBER_DFLASH_MAX_TARGET_LAYERS)
        return ember_error(EMBER_ERR_FORMAT, "%s: '%s' must hold 1 to %d integers (has %llu of type %s)", m->path, key,
                           EMBER_DFLASH_MAX_TARGET_LAYERS, (unsigned long long)a.n, ember_gguf_vtype_name(a.type));
    const bool is_signed = a.type == EMBER_GGUF_I8 || a.type == EMBER_GGUF_I16 || a.type == EMBER_GGUF_I32 || a.type == EMBER_GGUF_I64;
    d->n_target_layers = (int32_t)a.n;
    for (int32_t k = 0; k < d->n_target_layers; k++) {
        const ember_gguf_scalar v = ember_gguf_arr_scalar(&a, (uint64_t)k);
        if (is_signed ? (v.i < 1 || v.i > EMBER_MAX_LAYERS) : (v.u < 1 || v.u > EMBER_MAX_LAYERS))
            return ember_error(EMBER_ERR_FORMAT, "%s: '%s'[%d] is not in [1, %d]", m->path, key, k, EMBER_MAX_LAYERS);
        d->target_layers[k] = is_signed ? (int32_t)v.i : (int32_t)v.u;
    }
    d->block_size = 16;   /* common/speculative.cpp:981 */
    if ((st = ember_model_get_u32(m, "block_size", false, &d->block_size))) return st;
    if (d->block_size < 2 || d->block_size > 1024)
        return ember_error(EMBER_ERR_FORMAT, "%s: %s.block_size %d not in [2, 1024]", m->path, m->arch_name, d->block_size);
    uint32_t mask;
    st = ember_gguf_get_u32(m->gguf, "tokenizer.ggml.mask_token_id", &mask);
    if (st == EMBER_ERR_NOT_FOUND)
        return ember_error(st, "%s: DFlash draft requires metadata key 'tokenizer.ggml.mask_token_id'", m->path);
    if (st || mask > INT32_MAX)
        return ember_error(EMBER_ERR_FORMAT, "%s: 'tokenizer.ggml.mask_token_id' is not a token id", m->path);
    d->mask_token = (ember_token)mask;
    snprintf(key, sizeof key, "%s.attention.causal", m->arch_name);
    d->causal = false;
    st = ember_gguf_get_bool(m->gguf, key, &d->causal);
    if (st && st != EMBER_ERR_NOT_FOUND) return ember_error(EMBER_ERR_FORMAT, "%s: '%s' is not a boolean", m->path, key);

    /* fc [n_target_layers * n_embd_target] -> n_embd: the target's width from its shape */
    const ember_gguf_tensor *fc = ember_gguf_get_tensor(m->gguf, "fc.weight");
    if (!fc) return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor 'fc.weight' (architecture dflash)", m->path);
    if (fc->ne[0] < 1 || fc->ne[0] % d->n_target_layers != 0)
        return ember_error(EMBER_ERR_FORMAT, "%s: fc.weight input width %lld is not a multiple of %d target layers",
                           m->path, (long long)fc->ne[0], d->n_target_layers);
    d->n_embd_target = (int32_t)(fc->ne[0] / d->n_target_layers);
    if ((st = ember_model_bind_matrix(m, "fc.weight", fc->ne[0], hp->n_embd, true, &d->fc))) return st;
    if ((st = ember_model_bind_vector(m, "enc.output_norm.weight", hp->n_embd, &d->enc_norm))) return st;
    if (!ember_gguf_get_tensor(m->gguf, "blk.0.attn_v.weight"))
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: DFlash draft without blk.0.attn_v.weight (K/V shared), which is not supported",
                           m->path);
    return ember_model_bind_decoder_layers(m, true);
}

static void dflash_free(ember_model *m)
{
    free(m->arch_priv);
    m->arch_priv = NULL;
}

const ember_dflash *ember_model_dflash(const ember_model *m)
{
    return m && m->arch == &ember_arch_dflash ? m->arch_priv : NULL;
}

ember_status ember_dflash_check_target(const ember_model *draft, const ember_model *target)
{
    const ember_dflash *d = ember_model_dflash(draft);
    if (!d) return ember_error(EMBER_ERR_INVALID_ARG, "DFlash: %s is not a dflash draft", draft ? draft->path : "(null)");
    const ember_hparams *th = &target->hp;
    for (int32_t k = 0; k < d->n_target_layers; k++)
        if (d->target_layers[k] >= th->n_layer)
            return ember_error(EMBER_ERR_INVALID_ARG, "DFlash draft %s: target_layers[%d] = %d, the target %s has %d layers (the input of layers 1..%d can be read)",
                               draft->path, k, d->target_layers[k], target->path, th->n_layer, th->n_layer - 1);
    if (d->n_embd_target != th->n_embd)
        return ember_error(EMBER_ERR_INVALID_ARG, "DFlash draft %s: fc reads %d target layers of %d floats, the target %s has n_embd %d",
                           draft->path, d->n_target_layers, d->n_embd_target, target->path, th->n_embd);
    if (!draft->tok_embd.data && draft->hp.n_embd != th->n_embd)
        return ember_error(EMBER_ERR_INVALID_ARG, "DFlash draft %s: n_embd %d differs from the target's %d, whose embedding and LM head it uses",
                           draft->path, draft->hp.n_embd, th->n_embd);
    if (draft->hp.n_vocab != th->n_vocab)
        return ember_error(EMBER_ERR_INVALID_ARG, "DFlash draft %s: vocabulary of %d tokens, the target has %d", draft->path,
                           draft->hp.n_vocab, th->n_vocab);
    if (d->mask_token < 0 || d->mask_token >= th->n_vocab)
        return ember_error(EMBER_ERR_INVALID_ARG, "DFlash draft %s: mask token %d outside the vocabulary of %d", draft->path,
                           d->mask_token, th->n_vocab);
    return EMBER_OK;
}

const ember_arch ember_arch_dflash = {
    .name = "dflash",
    .load = dflash_load,
    .forward = NULL,
    .free = dflash_free,
    .draft_only = true,
};
