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
 * (ember_arch.draft_only: no ember_context); its forward is the
 * ember_dflash_ctx below, which the speculative proposer drives.
 *
 * Supported: the plain DFlash1 draft. Refused with a clear error: DFlash2
 * (selector/convolution tensors), DSpark (Markov head), DeepSeek-V4 stages
 * (hyper-connections), reduced draft vocabularies (d2t), M-RoPE sections,
 * sliding windows, attention sinks, shared K/V (no attn_v), GELU, post
 * norms, value scale, layer output scales, RoPE frequency factors.
 */
#include "model/dflash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "backend/options.h"
#include "backend/step.h"
#include "model/draft_kv.h"

#include <math.h>

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
        (st = refuse_key(m, "attention.sliding_window", "sliding window")) ||
        (st = refuse_key(m, "attention.value_scale", "attention value scale")) ||
        (st = refuse_tensor(m, "blk.0.post_attention_norm.weight", "post-attention norm")) ||
        (st = refuse_tensor(m, "blk.0.post_ffw_norm.weight", "post-FFN norm")) ||
        (st = refuse_tensor(m, "blk.0.layer_output_scale.weight", "layer output scale")) ||
        (st = refuse_tensor(m, "rope_freqs.weight", "RoPE frequency factors")))
        return st;
    /* optional scales (llama.cpp dflash.cpp:9-10, 589, 691-693) */
    if ((st = ember_model_get_f32(m, "embedding_scale", false, &hp->embd_scale))) return st;
    {
        float sc = 0.0f;
        if ((st = ember_model_get_f32(m, "attention.scale", false, &sc))) return st;
        if (sc != 0.0f) hp->attn_scale = sc;
    }
    if (hp->embd_scale == 0.0f) hp->embd_scale = 1.0f;
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


/* ---- the forward (llama.cpp dflash.cpp:571-846, DFlash1) ------------------ */

/* Every step is backend ops: the scratch is the backend's activation memory
 * (device memory on a GPU), the K/V are a draft_kv store written by
 * kv_store and read by the attention op (F32 on the CPU, F16 on a GPU). The
 * only host data are the inputs (features, uploaded; tokens, positions, K/V
 * rows, block tables) and the logits (written to the caller's host rows). */
struct ember_dflash_ctx {
    const ember_model *m, *t;   /* the draft and its target (embedding, LM head) */
    const ember_dflash *d;
    ember_backend *be;
    ember_draft_kv kv;          /* one view per draft layer: [n_seq][n_ctx + n_rows] positions */
    int32_t n_seq, n_ctx, n_rows;   /* n_rows: rows of one pass (block or injection chunk) */
    int64_t n_q, n_k, n_in;     /* n_head * head_dim, n_head_kv * head_dim, n_target_layers * n_embd_target */
    int32_t *n_pos;             /* [n_seq] positions 0 .. n_pos - 1 hold injected K/V */
    void *act;                  /* the backend's activation memory holding the scratch below */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *g, *fin;
    ember_pos *pos;             /* [n_rows] host */
    int64_t *rows;              /* [n_rows] host: K/V rows of a pass */
    ember_attn_query *queries;  /* [n_rows] host */
    ember_token *tok0;          /* [n_rows] zeros: an injection step's tokens (it reads none) */
    bool inj_marked;            /* timer 0 marked: the latest injection, unread by ember_dflash_device_seconds */
    float *lg;                  /* activation memory [lg_n = n_rows][n_vocab]: ember_dflash_block(s)_top's logits (the first call) */
    const float **lg_rows;      /* [lg_n] host: the rows' addresses */
    int32_t lg_n;
};

/* Device timers of the draft's backend (ember_dflash_device_seconds): 0 spans the latest injection (if
 * not yet read), 1 the last block. */
static bool dflash_timed(const ember_dflash_ctx *c)
{
    return c->be->ops->timer_mark && c->be->ops->timer_seconds;
}

double ember_dflash_device_seconds(ember_dflash_ctx *c)
{
    if (!c || !dflash_timed(c)) return -1.0;
    double s = c->be->ops->timer_seconds(c->be, 1);
    if (s < 0) return -1.0;
    if (c->inj_marked) {
        const double si = c->be->ops->timer_seconds(c->be, 0);
        if (si > 0) s += si;
        c->inj_marked = false;
    }
    return s;
}

void ember_dflash_ctx_free(ember_dflash_ctx *c)
{
    if (!c) return;
    if (c->be && c->act) c->be->ops->act_free(c->be, c->act);
    if (c->be && c->lg) c->be->ops->act_free(c->be, c->lg);
    free(c->lg_rows);
    ember_draft_kv_free(&c->kv);
    ember_backend_free(c->be);
    free(c->n_pos);
    free(c->pos);
    free(c->rows);
    free(c->queries);
    free(c->tok0);
    free(c);
}

ember_status ember_dflash_ctx_new(const ember_model *draft, const ember_model *target, int32_t n_seq, int32_t n_ctx,
                                  int32_t n_threads, ember_dflash_ctx **out)
{
    *out = NULL;
    ember_status st = ember_dflash_check_target(draft, target);
    if (st) return st;
    if (n_seq < 1 || n_ctx < 1 || n_ctx > (1 << 24))
        return ember_error(EMBER_ERR_INVALID_ARG, "DFlash: %d sequences of %d positions out of range", n_seq, n_ctx);
    const ember_hparams *hp = &draft->hp;
    if (hp->head_dim_k != hp->head_dim_v)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: DFlash key_length %d != value_length %d", draft->path, hp->head_dim_k,
                           hp->head_dim_v);
    ember_dflash_ctx *c = calloc(1, sizeof *c);
    if (!c) return ember_error(EMBER_ERR_NOMEM, "DFlash context");
    c->m = draft;
    c->t = target;
    c->d = ember_model_dflash(draft);
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    c->n_rows = c->d->block_size > 32 ? c->d->block_size : 32;
    c->n_q = (int64_t)hp->n_head * hp->head_dim_k;
    c->n_k = (int64_t)hp->n_head_kv * hp->head_dim_k;
    c->n_in = (int64_t)c->d->n_target_layers * c->d->n_embd_target;
    const int64_t R = c->n_rows;
    int64_t max_in = c->n_in > hp->n_ff ? c->n_in : hp->n_ff;
    if (c->n_q > max_in) max_in = c->n_q;
    if (hp->n_embd > max_in) max_in = hp->n_embd;
    const ember_backend_limits lim = {.max_tokens = R, .max_n_in = max_in, .max_kv_tokens = n_ctx + R,
                                      .max_head_dim = hp->head_dim_k};
    if ((st = ember_draft_backend_new(draft, n_threads, &lim, &c->be))) { ember_dflash_ctx_free(c); return st; }
    int64_t row_k[EMBER_MAX_LAYERS];
    for (int32_t il = 0; il < hp->n_layer; il++) row_k[il] = c->n_k;
    if ((st = ember_draft_kv_init(&c->kv, c->be, n_seq, n_ctx + c->n_rows, hp->n_layer, row_k))) {
        ember_dflash_ctx_free(c);
        return st;
    }
    const int64_t E = hp->n_embd;
    const int64_t sizes[10] = {R * E, R * E, R * c->n_q, R * c->n_k, R * c->n_k, R * c->n_q, R * hp->n_ff, R * hp->n_ff,
                               R * E, R * c->n_in};
    int64_t total = 0;
    for (int i = 0; i < 10; i++) total += (sizes[i] + 15) & ~(int64_t)15;
    c->act = c->be->ops->act_alloc(c->be, (size_t)total * sizeof(float));
    c->n_pos = calloc((size_t)n_seq, sizeof *c->n_pos);
    c->pos = malloc((size_t)R * sizeof *c->pos);
    c->rows = malloc((size_t)R * sizeof *c->rows);
    c->queries = malloc((size_t)R * sizeof *c->queries);
    c->tok0 = calloc((size_t)R, sizeof *c->tok0);
    if (!c->act || !c->n_pos || !c->pos || !c->rows || !c->queries || !c->tok0) {
        ember_dflash_ctx_free(c);
        return ember_error(EMBER_ERR_NOMEM, "DFlash: scratch of %lld floats", (long long)total);
    }
    float *f = c->act;
    float **dst[10] = {&c->x, &c->xb, &c->q, &c->k, &c->v, &c->att, &c->hb, &c->hb2, &c->g, &c->fin};
    for (int i = 0; i < 10; i++) { *dst[i] = f; f += (sizes[i] + 15) & ~(int64_t)15; }
    *out = c;
    return EMBER_OK;
}

const char *ember_dflash_ctx_backend(const ember_dflash_ctx *c) { return c->be->ops->name; }

uint64_t ember_dflash_ctx_kv_bytes(const ember_dflash_ctx *c) { return ember_draft_kv_bytes(&c->kv); }

int32_t ember_dflash_n_pos(const ember_dflash_ctx *c, int32_t seq)
{
    return seq >= 0 && seq < c->n_seq ? c->n_pos[seq] : 0;
}

void ember_dflash_fork(ember_dflash_ctx *c, int32_t src, int32_t dst, int32_t n)
{
    if (src < 0 || src >= c->n_seq || dst < 0 || dst >= c->n_seq || src == dst || n < 0) return;
    if (n > c->n_pos[src]) { c->n_pos[dst] = 0; return; }
    ember_draft_kv_fork(&c->kv, src, dst, n);
    c->n_pos[dst] = n;
}

void ember_dflash_truncate(ember_dflash_ctx *c, int32_t seq, int32_t n_pos)
{
    if (seq >= 0 && seq < c->n_seq && n_pos >= 0 && n_pos < c->n_pos[seq]) c->n_pos[seq] = n_pos;
}

/* K = rope(k_norm(Wk x)), V = Wv x of rows x [n, n_embd] at positions c->pos,
 * stored at the K/V rows c->rows (the pass's positions of its sequence), layer il. */
static void store_kv(ember_dflash_ctx *c, int32_t il, const float *x, int32_t n)
{
    const ember_hparams *hp = &c->m->hp;
    const ember_layer *L = &c->m->layers[il];
    const ember_backend_ops *op = c->be->ops;
    const ember_weight *ws[2] = {&L->wk, &L->wv};
    float *ys[2] = {c->k, c->v};
    op->matmul(c->be, x, n, 2, ws, ys);
    op->rms_norm(c->be, c->k, c->k, L->attn_k_norm, (int64_t)n * hp->n_head_kv, hp->head_dim_k, hp->norm_eps);
    op->rope(c->be, c->k, n, hp->n_head_kv, hp->head_dim_k, hp->n_rot, c->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NEOX);
    op->kv_store(c->be, &c->kv.view[il], c->k, c->v, c->rows, n);
}

/* Graph tags of the draft's passes (ember_backend_step.graph_tag): an
 * injection chunk, a block into host rows and a block into activation
 * memory (ember_dflash_block_top) of the same length are different steps. */
enum { TAG_INJECT = 1, TAG_BLOCK = 2, TAG_BLOCK_TOP = 3 };

/* One pass as a backend step (ember_backend_run_step: on a GPU the step
 * arrays go up once and a pass of a shape seen before runs as a CUDA
 * graph): n_seg segments of a->n rows each, segment j of sequence seqs[j] at
 * its positions p0s[j] .. p0s[j] + a->n - 1. Fills c->pos, c->rows and
 * c->queries (query positions those of the rows, or with last_q every row
 * at its segment's last position: a non-causal block) first, then
 * forward(a) issues the ops, which read only those arrays and a->tokens
 * (the step's tokens; c->tok0's zeros for an injection), tagged `tag`. */
typedef struct dflash_pass {
    ember_dflash_ctx *c;
    int32_t n, n_seg;        /* rows a segment, segments */
    const ember_token *tokens;   /* [n_seg][n] */
    const float *features;   /* injection: [n][n_in] host */
    float *logits;           /* block: [n_seg][n - 1][n_vocab] host rows or activation memory */
} dflash_pass;

static void run_pass(ember_dflash_ctx *c, const int32_t *seqs, const int32_t *p0s, bool last_q, int32_t tag,
                     void (*forward)(void *), dflash_pass *a)
{
    const int32_t n = a->n;
    for (int32_t j = 0; j < a->n_seg; j++)
        for (int32_t i = 0; i < n; i++) {
            const int32_t r = j * n + i, p = p0s[j] + i;
            c->pos[r] = p;
            c->rows[r] = ember_draft_kv_row(&c->kv, seqs[j], p);
            c->queries[r] = (ember_attn_query){.blocks = ember_draft_kv_blocks(&c->kv, seqs[j]),
                                               .pos = last_q ? p0s[j] + n - 1 : p};
        }
    const ember_backend_step st = {.n = a->n_seg * n, .token = a->tokens ? a->tokens : c->tok0, .pos = c->pos,
                                   .kv_row = c->rows, .query = c->queries, .kv_row_swa = c->rows,
                                   .query_swa = c->queries, .block_tokens = c->kv.block_tokens, .graph_tag = tag};
    ember_backend_run_step(c->be, &st, forward, a);
}

/* g = RMSNorm(fc f) * enc_norm (dflash.cpp:619-621), then every layer's K/V */
static void inject_ops(void *arg)
{
    const dflash_pass *a = arg;
    ember_dflash_ctx *c = a->c;
    const ember_hparams *hp = &c->m->hp;
    /* the features where the activations live (the one host input) */
    c->be->ops->upload(c->be, c->fin, a->features, (int64_t)a->n * c->n_in);
    const ember_weight *w = &c->d->fc;
    float *y = c->g;
    c->be->ops->matmul(c->be, c->fin, a->n, 1, &w, &y);
    c->be->ops->rms_norm(c->be, c->g, c->g, c->d->enc_norm, a->n, hp->n_embd, hp->norm_eps);
    for (int32_t il = 0; il < hp->n_layer; il++) store_kv(c, il, c->g, a->n);
}

ember_status ember_dflash_inject(ember_dflash_ctx *c, int32_t seq, int32_t n, const float *features)
{
    if (seq < 0 || seq >= c->n_seq || n < 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_inject: sequence %d / %d rows out of range", seq, n);
    if (c->n_pos[seq] + n > c->n_ctx)
        return ember_error(EMBER_ERR_RANGE, "ember_dflash_inject: %d + %d positions exceed the draft context of %d",
                           c->n_pos[seq], n, c->n_ctx);
    /* timer 0 spans this injection only (a later one marks it again): the
     * draft is charged the injection of the step it drafts for, not the
     * wall time since the last read, which would take in idle steps where
     * nothing was drafted (and the target's work between them) */
    if (dflash_timed(c)) {
        c->be->ops->timer_mark(c->be, 0, false);
        c->inj_marked = true;
    }
    for (int32_t r0 = 0; r0 < n; r0 += c->n_rows) {
        const int32_t k = n - r0 < c->n_rows ? n - r0 : c->n_rows;
        const int32_t p0 = c->n_pos[seq];
        dflash_pass a = {.c = c, .n = k, .n_seg = 1, .features = features + (size_t)r0 * (size_t)c->n_in};
        run_pass(c, &seq, &p0, false, TAG_INJECT, inject_ops, &a);
        c->n_pos[seq] = p0 + k;
    }
    if (c->inj_marked) c->be->ops->timer_mark(c->be, 0, true);
    return EMBER_OK;
}

/* The noise block's ops (dflash.cpp:676-846): the embedding rows, the
 * draft's layers, the final norm and the LM head of rows 1 .. n - 1. */
static void block_ops(void *arg)
{
    const dflash_pass *a = arg;
    ember_dflash_ctx *c = a->c;
    const ember_hparams *hp = &c->m->hp;
    const ember_backend_ops *op = c->be->ops;
    ember_backend *be = c->be;
    const int32_t n = a->n * a->n_seg;   /* every segment's rows: the layers work row by row */
    const int64_t E = hp->n_embd;
    const ember_attn_params ap = {.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim_k = hp->head_dim_k,
                                  .head_dim_v = hp->head_dim_v, .kq_scale = hp->attn_scale, .n_swa = 0};
    /* the embedding rows, raw (times embedding_scale when set) */
    const ember_model *io = c->m->tok_embd.data ? c->m : c->t;   /* the draft's own when it has them */
    op->get_rows(be, &io->tok_embd, a->tokens, n, c->x);
    if (hp->embd_scale != 1.0f) op->scale(be, c->x, hp->embd_scale, n * E);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const ember_layer *L = &c->m->layers[il];
        op->rms_norm(be, c->xb, c->x, L->attn_norm, n, E, hp->norm_eps);
        const ember_weight *wq = &L->wq;
        float *yq = c->q;
        op->matmul(be, c->xb, n, 1, &wq, &yq);
        op->rms_norm(be, c->q, c->q, L->attn_q_norm, (int64_t)n * hp->n_head, hp->head_dim_k, hp->norm_eps);
        op->rope(be, c->q, n, hp->n_head, hp->head_dim_k, hp->n_rot, c->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NEOX);
        /* the block's own K/V sit after the injected positions (scratch: never counted in n_pos) */
        store_kv(c, il, c->xb, n);
        op->attention(be, &c->kv.view[il], &ap, c->q, c->queries, n, c->att);
        const ember_weight *wo = &L->wo;
        float *yo = c->xb;
        op->matmul(be, c->att, n, 1, &wo, &yo);
        op->add(be, c->x, c->xb, n * E);
        op->rms_norm(be, c->xb, c->x, L->ffn_norm, n, E, hp->norm_eps);
        const ember_weight *wf[2] = {&L->ffn_gate, &L->ffn_up};
        float *yf[2] = {c->hb, c->hb2};
        op->matmul(be, c->xb, n, 2, wf, yf);
        op->swiglu(be, c->hb, c->hb2, (int64_t)n * hp->n_ff);
        const ember_weight *wd = &L->ffn_down;
        float *yd = c->xb;
        op->matmul(be, c->hb, n, 1, &wd, &yd);
        op->add(be, c->x, c->xb, n * E);
    }
    /* rows 1 .. n - 1 of each segment predict its masked tokens: final norm
     * (gathered segment after segment), the target's LM head */
    const int32_t m = a->n - 1;
    for (int32_t j = 0; j < a->n_seg; j++)
        op->rms_norm(be, c->xb + (size_t)j * (size_t)m * (size_t)E, c->x + ((size_t)j * (size_t)a->n + 1) * (size_t)E,
                     c->m->output_norm, m, E, hp->norm_eps);
    const ember_weight *wout = &io->output;
    float *logits = a->logits;
    op->matmul(be, c->xb, (int64_t)a->n_seg * m, 1, &wout, &logits);   /* logits: host rows or activation memory */
}

/* The noise block's forward (ember_dflash_block), logits [n - 1][n_vocab]
 * into `logits` (host rows or activation memory) as a step tagged `tag`. */
static ember_status block_forward(ember_dflash_ctx *c, int32_t n_seg, const int32_t *seqs, const ember_token *tokens,
                                  int32_t n, float *logits, int32_t tag);

ember_status ember_dflash_block(ember_dflash_ctx *c, int32_t seq, const ember_token *tokens, int32_t n, float *logits)
{
    return block_forward(c, 1, &seq, tokens, n, logits, TAG_BLOCK);
}

ember_status ember_dflash_blocks(ember_dflash_ctx *c, int32_t n_seg, const int32_t *seqs, const ember_token *tokens,
                                 int32_t n, float *logits)
{
    return block_forward(c, n_seg, seqs, tokens, n, logits, TAG_BLOCK);
}

bool ember_dflash_device_heads(const ember_dflash_ctx *c) { return c && c->be->caps.device_activations; }

int32_t ember_dflash_max_blocks(const ember_dflash_ctx *c, int32_t n)
{
    return c && n >= 2 ? c->n_rows / n : 0;
}

ember_status ember_dflash_block_top(ember_dflash_ctx *c, int32_t seq, const ember_token *tokens, int32_t n, int32_t k,
                                    ember_logits_top *out)
{
    return ember_dflash_blocks_top(c, 1, &seq, tokens, n, k, out);
}

ember_status ember_dflash_blocks_top(ember_dflash_ctx *c, int32_t n_seg, const int32_t *seqs, const ember_token *tokens,
                                     int32_t n, int32_t k, ember_logits_top *out)
{
    if (k < 1 || k > EMBER_LOGITS_TOP_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_block_top: k %d not in [1, %d]", k, EMBER_LOGITS_TOP_MAX);
    if (n_seg < 1 || n < 2 || n > c->d->block_size || (int64_t)n_seg * n > c->n_rows)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_block_top: %d blocks of %d tokens (2 .. block_size %d, "
                           "%d rows a pass)", n_seg, n, c->d->block_size, c->n_rows);
    const int64_t V = c->t->hp.n_vocab;
    const int32_t nr = n_seg * (n - 1);
    if (!c->lg) {
        /* room for a pass's rows (at most n_rows), once: a captured pass
         * writes to this address, so it never moves */
        c->lg = c->be->ops->act_alloc(c->be, sizeof(float) * (size_t)c->n_rows * (size_t)V);
        c->lg_rows = malloc(sizeof *c->lg_rows * (size_t)c->n_rows);
        if (!c->lg || !c->lg_rows)
            return ember_error(EMBER_ERR_NOMEM, "ember_dflash_block_top: logits of %d rows of %lld", c->n_rows, (long long)V);
        c->lg_n = c->n_rows;
        for (int32_t i = 0; i < c->n_rows; i++) c->lg_rows[i] = c->lg + (size_t)i * (size_t)V;
    }
    ember_status st = block_forward(c, n_seg, seqs, tokens, n, c->lg, TAG_BLOCK_TOP);
    if (st) return st;
    c->be->ops->logits_top(c->be, c->lg_rows, nr, V, k, out);
    return EMBER_OK;
}

static ember_status block_forward(ember_dflash_ctx *c, int32_t n_seg, const int32_t *seqs, const ember_token *tokens,
                                  int32_t n, float *logits, int32_t tag)
{
    if (n_seg < 1 || n < 2 || n > c->d->block_size || (int64_t)n_seg * n > c->n_rows)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_block: %d blocks of %d tokens (2 .. block_size %d)", n_seg, n,
                           c->d->block_size);
    int32_t p0s[32];
    if (n_seg > 32) return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_block: %d blocks in one pass", n_seg);
    for (int32_t j = 0; j < n_seg; j++) {
        const int32_t seq = seqs[j];
        if (seq < 0 || seq >= c->n_seq)
            return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_block: sequence %d not in [0, %d)", seq, c->n_seq);
        for (int32_t i = 0; i < j; i++)
            if (seqs[i] == seq)
                return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_block: sequence %d twice in one pass", seq);
        p0s[j] = c->n_pos[seq];
        if (p0s[j] + n > c->n_ctx + c->n_rows)
            return ember_error(EMBER_ERR_RANGE, "ember_dflash_block: position %d + %d past the draft context", p0s[j], n);
    }
    for (int32_t i = 0; i < n_seg * n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->t->hp.n_vocab)
            return ember_error(EMBER_ERR_INVALID_ARG, "ember_dflash_block: token %d not in [0, %d)", tokens[i], c->t->hp.n_vocab);
    if (dflash_timed(c)) c->be->ops->timer_mark(c->be, 1, false);
    /* every row sees the injected positions and the whole block (non-causal,
     * the mask by sequence only) or the block up to itself (causal) */
    dflash_pass a = {.c = c, .n = n, .n_seg = n_seg, .tokens = tokens, .logits = logits};
    run_pass(c, seqs, p0s, !c->d->causal, tag, block_ops, &a);
    if (dflash_timed(c)) c->be->ops->timer_mark(c->be, 1, true);
    return EMBER_OK;
}

const ember_arch ember_arch_dflash = {
    .name = "dflash",
    .load = dflash_load,
    .forward = NULL,
    .free = dflash_free,
    .draft_only = true,
};
