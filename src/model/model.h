/*
 * model.h — internal: the loaded model, the context, and the architecture
 * registry that model files (gemma3.c, llama.c, ...) plug into.
 *
 * Owns: hyperparameters read from GGUF metadata, weights bound in place to
 * the mapped tensors, the per-step view of a micro-batch (ember_ubatch) and
 * the scratch a forward pass writes into. Must not: parse GGUF bytes (gguf/),
 * run kernels (backend/), or manage KV blocks (kv/).
 */
#ifndef EMBER_MODEL_H
#define EMBER_MODEL_H

#include "ember.h"
#include "backend/backend.h"
#include "gguf/gguf.h"
#include "kv/kv.h"
#include "kv/rstate.h"

#define EMBER_MAX_LAYERS 256

typedef struct ember_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim_k;       /* attention.key_length, else n_embd / n_head */
    int32_t head_dim_v;
    int32_t n_ff;
    int32_t n_rot;            /* rope.dimension_count, else head_dim_k */
    float norm_eps;           /* attention.layer_norm_rms_epsilon */
    float rope_base;          /* rope.freq_base (global layers) */
    float rope_scale;         /* 1 / rope.scaling.factor for linear scaling, else 1 */
    float rope_base_swa;      /* rope.freq_base_swa, default 10000 */
    int32_t n_swa;            /* attention.sliding_window; 0 = none */
    bool is_swa[EMBER_MAX_LAYERS];
    float attn_scale;         /* multiplies q.k */
    float embd_scale;         /* multiplies token embeddings */
    float final_softcap;      /* 0 = none */
    int64_t n_aux;            /* extra per-token scratch floats the arch asks for (ember_scratch.aux); 0 = none */
    int64_t n_aux_host;       /* per-token floats of host scratch (ember_scratch.aux_host); 0 = none */
    /* K and V elements per token each layer keeps in the KV cache (llama.cpp's
     * n_embd_k_gqa / n_embd_v_gqa); 0 = the layer keeps none (it attends to
     * another layer's cache). Left all 0 by an architecture: n_head_kv *
     * head_dim_k / head_dim_v for every layer (model.c). */
    int64_t n_embd_k_gqa[EMBER_MAX_LAYERS];
    int64_t n_embd_v_gqa[EMBER_MAX_LAYERS];
    /* Recurrent (linear-attention) layers: floats of per-sequence state
     * each layer keeps beside the KV cache (llama.cpp's n_embd_r: the short
     * convolution's last inputs; n_embd_s: the delta rule's matrix state).
     * 0 in both: not a recurrent layer. Any non-zero entry makes the context
     * allocate kv/rstate.h cells and need the backend's recurrent ops. */
    int64_t n_embd_r[EMBER_MAX_LAYERS];
    int64_t n_embd_s[EMBER_MAX_LAYERS];
} ember_hparams;

typedef struct ember_layer {
    const float *attn_norm, *attn_q_norm, *attn_k_norm, *post_attn_norm;
    const float *ffn_norm, *post_ffw_norm;
    ember_weight wq, wk, wv, wo;
    ember_weight ffn_gate, ffn_up, ffn_down;
} ember_layer;

struct ember_vocab;
typedef struct ember_arch ember_arch;

struct ember_model {
    char path[512];
    ember_gguf *gguf;
    const ember_arch *arch;
    char arch_name[64];
    ember_hparams hp;
    ember_layer *layers;
    ember_weight tok_embd;
    ember_weight output;      /* token_embd when tied */
    const float *output_norm;
    struct ember_vocab *vocab;
    uint64_t size_bytes;
    int32_t n_gpu_layers;     /* from ember_model_params: != 0 runs on the GPU (CUDA builds) */
    int32_t device;
    void *arch_priv;          /* architecture-private data (per-layer shapes, extra weights); freed by arch->free */
    bool host_scratch;        /* set by arch->load: this file's forward reads scratch on the host (e.g. gemma4
                               * MoE routing), so the context keeps it in host memory even when the arch is
                               * device_scratch */
};

/* One micro-batch as a forward pass sees it: n entries with their token,
 * position, KV row (where this entry's K/V go) and attention query (its
 * sequence's block table and position), once per KV group: kv_row / query for
 * layers of the full group, kv_row_swa / query_swa for the sliding-window
 * group (the same arrays when the cache has no such group); pick them with
 * ember_ubatch_rows / ember_ubatch_query. Rows out_idx[0..n_out) ask for
 * logits, written to logits[i * n_vocab]. */
typedef struct ember_ubatch {
    int32_t n;
    const ember_token *token;
    const ember_pos *pos;
    const int64_t *kv_row;
    const ember_attn_query *query;
    const int64_t *kv_row_swa;
    const ember_attn_query *query_swa;
    int32_t n_out;
    const int32_t *out_idx;
    float *logits;
    float *hidden;       /* host [r->n_capture][hidden_ld / n_embd][n_embd]: captured layer j's row of entry i at
                          * hidden + j * hidden_ld + i * n_embd (every entry), kept by ember_layer_end, or NULL */
    int64_t hidden_ld;   /* floats between two captured layers' rows of hidden */
    int32_t n_embd_out;        /* rows embd_idx[0..n_embd_out) (ubatch-local) ask for embeddings, */
    const int32_t *embd_idx;
    float *embd;               /* written to embd[i * n_embd] (host memory) by ember_output */
    const ember_seq_id *seq;   /* [n] each entry's sequence (recurrent state lookup, ember_run.rs) */
} ember_ubatch;

/* Scratch of one context, each sized for n_ubatch rows. */
typedef struct ember_scratch {
    float *x;      /* residual stream [n, n_embd] */
    float *xb;     /* [n, n_embd] */
    float *q;      /* [n, n_head * head_dim_k] */
    float *k;      /* [n, n_head_kv * head_dim_k] */
    float *v;      /* [n, n_head_kv * head_dim_v] */
    float *att;    /* [n, n_head * head_dim_v] */
    float *hb;     /* [n, n_ff] */
    float *hb2;    /* [n, n_ff] */
    float *aux;    /* [n, hp.n_aux], NULL when n_aux == 0 */
    float *aux_host;   /* [n, hp.n_aux_host] in host memory even when the rest lives on a device
                        * (inputs an arch computes on the host, then moves in with ops->upload); NULL when 0 */
} ember_scratch;

/* What a forward pass runs with. An arch with `partial` set runs layers
 * [0, n_layer) only (n_layer <= hp.n_layer; fewer for a layer-skip draft,
 * ember_set_layer_limit) and calls ember_layer_end after each layer. */
typedef struct ember_run {
    const ember_model *m;
    ember_backend *be;
    ember_kv *kv;
    ember_rs *rs;                  /* per-sequence recurrent state, NULL for a model without recurrent layers */
    ember_scratch *s;
    int32_t n_layer;               /* layers to run before the output head */
    int32_t n_capture;             /* hidden states kept per logits row (ember_set_hidden_layers) */
    const int32_t *capture_layer;  /* [n_capture] layer after which each is taken */
} ember_run;

struct ember_arch {
    const char *name;   /* general.architecture */
    /* Read arch-specific hyperparameters into m->hp (common ones are read
     * before) and bind every tensor. Errors name the key or tensor. */
    ember_status (*load)(ember_model *m);
    /* Run the model over ub: write K/V for every entry and logits for out_idx. */
    void (*forward)(const ember_run *r, const ember_ubatch *ub);
    /* Optional: release m->arch_priv. */
    void (*free)(ember_model *m);
    /* True when forward touches scratch only through backend ops (never
     * dereferences it on the host), so a GPU backend may keep it on the
     * device (ember_backend_ops.act_alloc). */
    bool device_scratch;
    /* forward reads ub->token on the host (beyond get_rows): gemma4's
     * per-layer embeddings. Such a model cannot take its tokens from the
     * device (ember_decode_fed). */
    bool host_tokens;
    /* forward honours r->n_layer and calls ember_layer_end (layer-skip
     * drafts, hidden states for draft heads); false: it always runs every
     * layer and keeps no hidden state. */
    bool partial;
    /* forward calls ember_layer_end after each layer but always runs every
     * layer (hidden states for draft heads without layer-skip: gemma4) */
    bool hidden;
    /* "<arch>.feed_forward_length" may be absent (MoE-only files such as
     * qwen35moe); load then sets hp.n_ff (it sizes hb / hb2 scratch). */
    bool ffn_optional;
    /* A draft head, not a model of its own (dflash: it reads the target's
     * hidden states and may borrow its embedding and LM head): forward is
     * NULL, token_embd / output are optional (n_vocab then comes from the
     * vocabulary) and ember_context_new refuses it; the speculative
     * proposer (src/engine/spec/) runs it over the bound weights. */
    bool draft_only;
};

extern const ember_arch ember_arch_dflash;
extern const ember_arch ember_arch_gemma3;
extern const ember_arch ember_arch_gemma4;
extern const ember_arch ember_arch_gemma4_assistant;
extern const ember_arch ember_arch_llama;
extern const ember_arch ember_arch_qwen3;
extern const ember_arch ember_arch_qwen35;
extern const ember_arch ember_arch_qwen35moe;

/* KV rows and attention queries of ub for layer il's cache (its KV group). */
static inline const int64_t *ember_ubatch_rows(const ember_kv *kv, const ember_ubatch *ub, int32_t il)
{
    return ember_kv_layer_group(kv, il) == EMBER_KV_GROUP_SWA ? ub->kv_row_swa : ub->kv_row;
}
static inline const ember_attn_query *ember_ubatch_query(const ember_kv *kv, const ember_ubatch *ub, int32_t il)
{
    return ember_kv_layer_group(kv, il) == EMBER_KV_GROUP_SWA ? ub->query_swa : ub->query;
}

/* --- helpers for model files (model.c) --- */

/* Bind matrix `name` of shape [n_out, n_in] (GGUF ne = {n_in, n_out}); its
 * type must have a vec_dot kernel. Errors: EMBER_ERR_NOT_FOUND (names the
 * tensor), EMBER_ERR_FORMAT (shape), EMBER_ERR_UNSUPPORTED (type). With
 * required == false a missing tensor leaves w->data NULL and returns OK. */
ember_status ember_model_bind_matrix(ember_model *m, const char *name, int64_t n_in, int64_t n_out,
                                     bool required, ember_weight *w);
/* Bind F32 vector `name` of n elements. */
ember_status ember_model_bind_vector(ember_model *m, const char *name, int64_t n, const float **out);
/* Layer il's tensor "blk.<il>.<suffix>.weight": the two binds above with the
 * name llama.cpp's converter writes (gguf-py constants.py MODEL_TENSOR names).
 * Same shapes, errors and optional-ness as ember_model_bind_matrix/_vector. */
ember_status ember_model_bind_layer_matrix(ember_model *m, int32_t il, const char *suffix, int64_t n_in, int64_t n_out,
                                           bool required, ember_weight *w);
ember_status ember_model_bind_layer_vector(ember_model *m, int32_t il, const char *suffix, int64_t n, const float **out);
/* The tensors every uniform pre-norm decoder layer here has (llama, qwen3,
 * gemma3): attn_norm, attn_q/k/v/output ([n_embd] -> n_head*head_dim_k,
 * n_head_kv*head_dim_k, n_head_kv*head_dim_v; n_head*head_dim_v -> n_embd),
 * ffn_norm, ffn_gate/up ([n_embd] -> n_ff), ffn_down ([n_ff] -> n_embd), for
 * every layer, shapes from m->hp; with qk_norm also attn_q_norm/attn_k_norm
 * ([head_dim_k] each, per-head RMSNorm weights). Errors as the binds above. */
ember_status ember_model_bind_decoder_layers(ember_model *m, bool qk_norm);
/* Bind the stacked expert tensor `name` (GGUF ne = {n_in, n_out * n_split,
 * n_expert}) as n_split weights per expert: outs[k][e] holds rows
 * [k * n_out, (k + 1) * n_out) of expert e. Errors name the tensor:
 * EMBER_ERR_NOT_FOUND, EMBER_ERR_FORMAT (shape), EMBER_ERR_UNSUPPORTED (a type
 * without CPU kernels or rows of partial blocks), EMBER_ERR_NOMEM; outs[k]
 * are calloc'd arrays of n_expert the caller frees (MoE of gemma4, qwen35moe). */
ember_status ember_model_bind_experts(ember_model *m, const char *name, int64_t n_in, int64_t n_out, int32_t n_split,
                                      int32_t n_expert, ember_weight **outs);
/* "<arch>.<suffix>" metadata getters; required ones report the full key. */
ember_status ember_model_get_u32(const ember_model *m, const char *suffix, bool required, int32_t *out);
ember_status ember_model_get_f32(const ember_model *m, const char *suffix, bool required, float *out);
/* "<arch>.<suffix>" as one u32 per layer: a scalar applies to every layer, an
 * array must hold n_layer non-negative integers (gemma4 writes per-layer
 * head_count_kv and feed_forward_length this way). A missing key leaves out[]
 * untouched unless required. Errors name the key (type, length, range). */
ember_status ember_model_get_u32_per_layer(const ember_model *m, const char *suffix, bool required,
                                           int32_t n_layer, int32_t *out);

/* Common transformer pieces over backend ops. */
/* y [n_tokens, w->n_out] = x W^T for up to 3 weights sharing the input. */
void ember_project(const ember_run *r, const float *x, int32_t n, const ember_weight *w0, float *y0,
                   const ember_weight *w1, float *y1, const ember_weight *w2, float *y2);
/* Store K/V of ub and attend; q [n, n_head*hd] -> out [n, n_head*hd_v]. */
void ember_attend(const ember_run *r, const ember_ubatch *ub, int32_t il, const float *q,
                  const float *k, const float *v, float kq_scale, int32_t n_swa, float *out);
/* After layer il: copy every row of the residual stream x [n, n_embd] into
 * ub->hidden for each r->capture_layer equal to il. */
void ember_layer_end(const ember_run *r, const ember_ubatch *ub, int32_t il, const float *x);
/* Final norm + LM head over the rows in ub->out_idx; the final norm alone over
 * the rows in ub->embd_idx (embeddings, copied to ub->embd). Uses s->xb as
 * gather space. */
void ember_output(const ember_run *r, const ember_ubatch *ub, const float *x);

#endif
