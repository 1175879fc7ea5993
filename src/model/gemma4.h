/*
 * gemma4.h — internal: what other model code may read of a loaded `gemma4`
 * model's per-layer attention (src/model/gemma4.c owns it). The Gemma 4 MTP
 * draft (src/model/mtp.c) attends to its target's K/V, so it needs the
 * shapes and RoPE of the target layers that own them.
 */
#ifndef EMBER_MODEL_GEMMA4_H
#define EMBER_MODEL_GEMMA4_H

#include "model/model.h"

typedef struct ember_gemma4_attn {
    bool swa;                  /* a sliding-window layer */
    int32_t kv_src;            /* the layer whose K/V this layer attends to (itself unless KV-shared) */
    int32_t n_head_kv, head_dim, n_rot;
    float rope_base;
    const float *rope_freqs;   /* full layers: [head_dim / 2] frequency divisors (NULL: plain NEOX) */
} ember_gemma4_attn;

/* Layer il of gemma4 model m. Errors: EMBER_ERR_INVALID_ARG when m is not a
 * gemma4 model or il is outside [0, n_layer). K and V of a layer that owns
 * them (kv_src == il) are, per token and KV head, as gemma4.c computes
 * them: n = rms(x) * attn_norm; k = rope(rms_head(wk n) * attn_k_norm);
 * v = rms_head(wv n) (no weight), or rms_head(wk n) when the layer has no
 * attn_v (attention_k_eq_v); x is the residual stream entering layer il. */
ember_status ember_gemma4_attn_info(const ember_model *m, int32_t il, ember_gemma4_attn *out);

#endif
