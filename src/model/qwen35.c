/*
 * qwen35.c — Qwen3.5 decoders (general.architecture = "qwen35", and
 * "qwen35moe" for the mixture-of-experts models): layers of Gated DeltaNet
 * linear attention (recurrent) and of gated full attention, each followed by
 * a SwiGLU MLP (qwen35) or a mixture of SwiGLU experts plus a gated shared
 * expert (qwen35moe).
 *
 * Owns: qwen35 hyperparameters and tensors as llama.cpp's converter writes
 * them, and the forward pass as the math over backend ops. Must not: touch KV
 * blocks or recurrent-state cells beyond the views and pointers it is given
 * (ember_kv_layer, ember_rs_*_ptrs), or read scratch on the host (so a GPU
 * backend with the recurrent ops can keep it on the device; qwen35moe files
 * route experts on the host and set ember_model.host_scratch). The MTP head
 * (nextn layers) is not handled here.
 *
 * Sources: transformers models/qwen3_5/modeling_qwen3_5.py (the math);
 * llama.cpp conversion/qwen.py (Qwen3_5TextModel: keys, tensors, the +1 on
 * zero-centred norm weights, ssm_a = -exp(A_log), V heads reordered from
 * grouped to tiled) and src/models/qwen35.cpp + delta-net-base.cpp (the same
 * graph over GGUF names). Gated DeltaNet: Yang, Kautz & Hatamizadeh, ICLR 2025.
 * block_count counts the MTP blocks (nextn_predict_layers) after the trunk;
 * only the trunk's block_count - nextn_predict_layers layers are run.
 *   x = embed(token)
 *   per layer: n = rms(x) * attn_norm            (weights already 1 + w)
 *     recurrent (attention.recurrent_layers[l], else (l + 1) % full_attention_interval != 0):
 *       u = conv_silu(attn_qkv n)               [q | k | v], causal conv of width ssm.conv_kernel
 *       o = gated_delta_rule(q, k, v; alpha = ssm_alpha n, b = ssm_beta n, ssm_a, ssm_dt.bias)
 *           (backend.h: L2-normed q/k, q / sqrt(d_k), decay exp(A softplus(alpha + dt)),
 *            beta = sigmoid(b); value head h uses key head h % ssm.group_count)
 *       a = ssm_out (rms_head(o) * ssm_norm * silu(attn_gate n))
 *     full attention:
 *       [q_h | g_h] = (attn_q n) per head;  q = rope(rms_head(q) * q_norm), k = rope(rms_head(wk n) * k_norm)
 *       a = attn_output (softmax(q k^T / sqrt(d)) v * sigmoid(g))
 *     h = x + a;  x = h + down(silu(gate m) * up m),  m = rms(h) * post_attention_norm
 *     qwen35moe (transformers Qwen3_5MoeSparseMoeBlock; llama.cpp qwen35moe.cpp), m as above:
 *       p = softmax(ffn_gate_inp m); the top expert_used_count experts by p (ties: lower id),
 *       weights w_e = p_e / sum of the chosen p (times expert_weights_scale when set)
 *       x = h + sum_e w_e down_e(silu(gate_e m) * up_e m)
 *             + sigmoid(ffn_gate_inp_shexp . m) * down_shexp(silu(gate_shexp m) * up_shexp m)
 *       experts as ffn_gate_exps / ffn_up_exps [n_expert][n_ff_exp][n_embd] or fused
 *       ffn_gate_up_exps (gate rows first), ffn_down_exps [n_expert][n_embd][n_ff_exp]
 *   logits = rms(x) * output_norm  W_out^T (token_embd when output.weight is absent)
 * RoPE: llama.cpp runs interleaved multi-section RoPE (rope.dimension_sections);
 * text tokens carry the same position in every section, which makes it plain
 * NEOX RoPE over the first rope.dimension_count dims (transformers builds the
 * same cos/sin from three equal position rows).
 *
 * Recurrent state (the design issue 17 item 2 builds on): the context keeps,
 * beside the paged KV cache of the full-attention layers, one state cell per
 * sequence (kv/rstate.h) with every recurrent layer's conv state
 * [conv_kernel - 1][conv_dim] and delta-rule state [n_v_heads][d_v][d_k]
 * (hp.n_embd_r / n_embd_s below). The forward gets per-entry pointers into
 * the cells (ub->seq) and the ops update them in place, entry by entry, so a
 * micro-batch may mix sequences and hold many tokens of one: a prefill and a
 * decode step run the same code. A cell is zeroed when its sequence starts at
 * position 0. Since a state cannot be cut back, the context refuses truncate /
 * fork to a middle position for now (EMBER_ERR_RANGE; the prefix cache then
 * recomputes, speculation fails the request). Checkpoints are extra cells
 * copied at chosen positions (rstate.h); rollback copies one back.
 *
 * Prefill uses the recurrent form over every token (O(n d_k d_v) per head,
 * exact); the chunked (WY / UT-transform) form is a speed-up for later that
 * must give the same values.
 */
#include "model/model.h"
#include "base/status.h"
#include "quant/quant.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct q35_layer {
    bool recurrent;
    ember_weight wqkv, wgate, walpha, wbeta, wout;   /* recurrent: attn_qkv, attn_gate, ssm_alpha, ssm_beta, ssm_out */
    const float *conv_w;     /* [conv_dim][d_conv] */
    const float *A;          /* [H_v] ssm_a = -exp(A_log) */
    const float *dt_bias;    /* [H_v] */
    const float *ssm_norm;   /* [d_v] */
    /* qwen35moe */
    ember_weight router;     /* ffn_gate_inp [n_expert, n_embd] */
    ember_weight sh_gate_inp;   /* ffn_gate_inp_shexp [1, n_embd] */
    ember_weight sh_gate, sh_up, sh_down;   /* shared expert */
    ember_weight *exp_gate, *exp_up, *exp_down;   /* [n_expert] each */
} q35_layer;

typedef struct q35_model {
    int32_t d_conv, d_k, d_v, n_k_heads, n_v_heads;
    int64_t conv_dim, value_dim;
    /* aux scratch blocks, each [n, width] at aux + n * offset */
    int64_t off_qkv, off_conv, off_z, off_alpha, off_beta, off_o;   /* recurrent layers */
    int64_t off_qg, off_gate;                                       /* attention layers */
    /* qwen35moe (n_expert == 0: dense) */
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    float expert_weights_scale;   /* 0 = none */
    int64_t off_moe;              /* aux: [n, n_embd] x 3 (gather, expert out, sum), [n, n_expert], [n, K] x 2, [n] */
    q35_layer *layers;
} q35_model;

static void qwen35_free(ember_model *m)
{
    q35_model *q = m->arch_priv;
    if (q && q->layers)
        for (int32_t il = 0; il < m->hp.n_layer; il++) {
            free(q->layers[il].exp_gate);
            free(q->layers[il].exp_up);
            free(q->layers[il].exp_down);
        }
    if (q) free(q->layers);
    free(q);
    m->arch_priv = NULL;
}

/* Layer types of the trunk's n_layer layers; the array may also cover the
 * n_nextn MTP blocks after them. */
static ember_status get_recurrent_layers(ember_model *m, int32_t n_nextn, bool *out)
{
    const int32_t n_layer = m->hp.n_layer;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch_name);
    ember_gguf_arr a;
    ember_status st = ember_gguf_get_arr(m->gguf, key, &a);
    if (st == EMBER_OK) {
        if (a.type != EMBER_GGUF_BOOL || a.n != (uint64_t)(n_layer + n_nextn))
            return ember_error(EMBER_ERR_FORMAT, "%s: metadata key '%s' must be %d bools (has %llu of type %s)", m->path, key,
                               n_layer + n_nextn, (unsigned long long)a.n, ember_gguf_vtype_name(a.type));
        for (int32_t il = 0; il < n_layer; il++) out[il] = ember_gguf_arr_scalar(&a, (uint64_t)il).b;
        return EMBER_OK;
    }
    if (st != EMBER_ERR_NOT_FOUND) return ember_error(st, "%s: metadata key '%s' is not an array", m->path, key);
    /* llama.cpp's fallback: every full_attention_interval-th layer is full */
    int32_t interval = 4;
    if ((st = ember_model_get_u32(m, "full_attention_interval", false, &interval))) return st;
    if (interval < 1) return ember_error(EMBER_ERR_FORMAT, "%s: %s.full_attention_interval %d < 1", m->path, m->arch_name, interval);
    for (int32_t il = 0; il < n_layer; il++) out[il] = (il + 1) % interval != 0;
    return EMBER_OK;
}

/* Bind F32 tensor `name` of GGUF shape {ne0, ne1}. */
static ember_status bind_f32_2d(ember_model *m, const char *name, int64_t ne0, int64_t ne1, const float **out)
{
    const ember_gguf_tensor *t = ember_gguf_get_tensor(m->gguf, name);
    if (!t) return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor '%s' (architecture %s)", m->path, name, m->arch_name);
    if (t->type != EMBER_TYPE_F32)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, expected F32", m->path, name, ember_type_name(t->type));
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ember_error(EMBER_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", m->path, name,
                           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
                           (long long)ne1);
    if (((uintptr_t)t->data & 3) != 0)
        return ember_error(EMBER_ERR_FORMAT, "%s: tensor '%s' data is not 4-byte aligned", m->path, name);
    *out = t->data;
    return EMBER_OK;
}

/* qwen35moe: expert hyperparameters (sets hp.n_ff to the widest expert so
 * that hb / hb2 and the matmul scratch fit them) and the layer's tensors. */
static ember_status load_moe_hparams(ember_model *m, q35_model *q)
{
    ember_hparams *hp = &m->hp;
    ember_status st;
    if ((st = ember_model_get_u32(m, "expert_count", true, &q->n_expert))) return st;
    if ((st = ember_model_get_u32(m, "expert_used_count", true, &q->n_expert_used))) return st;
    if ((st = ember_model_get_u32(m, "expert_feed_forward_length", true, &q->n_ff_exp))) return st;
    q->n_ff_shexp = hp->n_ff;   /* llama.cpp: n_ff when the key is absent */
    if ((st = ember_model_get_u32(m, "expert_shared_feed_forward_length", false, &q->n_ff_shexp))) return st;
    if ((st = ember_model_get_f32(m, "expert_weights_scale", false, &q->expert_weights_scale))) return st;
    if (q->n_expert < 1 || q->n_expert > 1024 || q->n_expert_used < 1 || q->n_expert_used > q->n_expert ||
        q->n_ff_exp < 1 || q->n_ff_shexp < 1)
        return ember_error(EMBER_ERR_FORMAT, "%s: qwen35moe expert_count %d, expert_used_count %d, expert_feed_forward_length %d, "
                           "expert_shared_feed_forward_length %d out of range",
                           m->path, q->n_expert, q->n_expert_used, q->n_ff_exp, q->n_ff_shexp);
    hp->n_ff = q->n_ff_exp > q->n_ff_shexp ? q->n_ff_exp : q->n_ff_shexp;
    return EMBER_OK;
}

static ember_status load_moe_layer(ember_model *m, q35_model *q, int32_t il)
{
    q35_layer *Q = &q->layers[il];
    const int64_t n_embd = m->hp.n_embd;
    const int32_t E = q->n_expert;
    ember_status st;
    char name[96];
    if ((st = ember_model_bind_layer_matrix(m, il, "ffn_gate_inp", n_embd, E, true, &Q->router)) ||
        (st = ember_model_bind_layer_matrix(m, il, "ffn_gate_inp_shexp", n_embd, 1, true, &Q->sh_gate_inp)) ||
        (st = ember_model_bind_layer_matrix(m, il, "ffn_gate_shexp", n_embd, q->n_ff_shexp, true, &Q->sh_gate)) ||
        (st = ember_model_bind_layer_matrix(m, il, "ffn_up_shexp", n_embd, q->n_ff_shexp, true, &Q->sh_up)) ||
        (st = ember_model_bind_layer_matrix(m, il, "ffn_down_shexp", q->n_ff_shexp, n_embd, true, &Q->sh_down)))
        return st;
    ember_weight *gu[2] = {NULL, NULL};
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
    if (ember_gguf_get_tensor(m->gguf, name)) {
        if ((st = ember_model_bind_experts(m, name, n_embd, q->n_ff_exp, 2, E, gu))) { free(gu[0]); return st; }
    } else {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", il);
        if ((st = ember_model_bind_experts(m, name, n_embd, q->n_ff_exp, 1, E, &gu[0]))) return st;
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
        if ((st = ember_model_bind_experts(m, name, n_embd, q->n_ff_exp, 1, E, &gu[1]))) { free(gu[0]); return st; }
    }
    Q->exp_gate = gu[0];
    Q->exp_up = gu[1];
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", il);
    return ember_model_bind_experts(m, name, q->n_ff_exp, n_embd, 1, E, &Q->exp_down);
}

static ember_status qwen35_load(ember_model *m)
{
    ember_hparams *hp = &m->hp;
    ember_status st;
    /* block_count includes the multi-token-prediction blocks published files
     * carry (nextn_predict_layers, stored after the trunk as blk.<n_layer>...):
     * the trunk is the first block_count - nextn layers; the MTP blocks are
     * not loaded (a draft head for later) */
    int32_t n_nextn = 0;
    if ((st = ember_model_get_u32(m, "nextn_predict_layers", false, &n_nextn))) return st;
    if (n_nextn < 0 || n_nextn >= hp->n_layer)
        return ember_error(EMBER_ERR_FORMAT, "%s: %s.nextn_predict_layers %d must be below block_count %d", m->path, m->arch_name,
                           n_nextn, hp->n_layer);
    hp->n_layer -= n_nextn;
    const int32_t n_layer = hp->n_layer;
    q35_model *q = calloc(1, sizeof *q);
    if (!q) return ember_error(EMBER_ERR_NOMEM, "qwen35: out of memory");
    m->arch_priv = q;
    q->layers = calloc((size_t)n_layer, sizeof *q->layers);
    if (!q->layers) return ember_error(EMBER_ERR_NOMEM, "qwen35: out of memory");

    /* --- hyperparameters (llama.cpp qwen35.cpp load_arch_hparams) --- */
    int32_t d_inner = 0;
    if ((st = ember_model_get_u32(m, "ssm.conv_kernel", true, &q->d_conv))) return st;
    if ((st = ember_model_get_u32(m, "ssm.state_size", true, &q->d_k))) return st;
    if ((st = ember_model_get_u32(m, "ssm.group_count", true, &q->n_k_heads))) return st;
    if ((st = ember_model_get_u32(m, "ssm.time_step_rank", true, &q->n_v_heads))) return st;
    if ((st = ember_model_get_u32(m, "ssm.inner_size", true, &d_inner))) return st;
    if (q->d_conv < 1 || q->d_conv > 64 || q->d_k < 1 || q->d_k > 1024 || q->n_k_heads < 1 || q->n_v_heads < 1 ||
        q->n_v_heads % q->n_k_heads != 0 || d_inner < 1 || d_inner % q->n_v_heads != 0)
        return ember_error(EMBER_ERR_FORMAT, "%s: qwen35 linear-attention shapes out of range (ssm.conv_kernel %d, ssm.state_size %d, "
                           "ssm.group_count %d, ssm.time_step_rank %d, ssm.inner_size %d)",
                           m->path, q->d_conv, q->d_k, q->n_k_heads, q->n_v_heads, d_inner);
    q->d_v = d_inner / q->n_v_heads;
    q->value_dim = d_inner;
    q->conv_dim = 2 * (int64_t)q->n_k_heads * q->d_k + q->value_dim;
    if (hp->head_dim_k != hp->head_dim_v)
        return ember_error(EMBER_ERR_FORMAT, "%s: qwen35 needs attention.key_length == value_length (%d, %d)", m->path,
                           hp->head_dim_k, hp->head_dim_v);
    /* rope.dimension_sections (MRoPE) must be present (llama.cpp requires it);
     * for text it does not change the rotation (see the top comment) */
    {
        char key[160];
        snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch_name);
        ember_gguf_arr a;
        if (ember_gguf_get_arr(m->gguf, key, &a) != EMBER_OK)
            return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing metadata array '%s'", m->path, key);
    }
    const bool moe = !strcmp(m->arch_name, "qwen35moe");
    if (moe) {
        if ((st = load_moe_hparams(m, q))) return st;
        m->host_scratch = true;   /* routing reads the router's output on the host */
    }
    bool rec[EMBER_MAX_LAYERS];
    if ((st = get_recurrent_layers(m, n_nextn, rec))) return st;
    /* the context sizes matmul scratch by max(n_embd, n_ff, n_head * head_dim_v);
     * ssm_out reads value_dim */
    int64_t max_in = hp->n_embd;
    if (hp->n_ff > max_in) max_in = hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim_v > max_in) max_in = (int64_t)hp->n_head * hp->head_dim_v;
    if (q->value_dim > max_in)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: qwen35 ssm.inner_size %lld exceeds the widest other matmul input %lld",
                           m->path, (long long)q->value_dim, (long long)max_in);

    const int64_t n_q = (int64_t)hp->n_head * hp->head_dim_k;
    q->off_qkv = 0;
    q->off_conv = q->conv_dim;
    q->off_z = 2 * q->conv_dim;
    q->off_alpha = q->off_z + q->value_dim;
    q->off_beta = q->off_alpha + q->n_v_heads;
    q->off_o = q->off_beta + q->n_v_heads;
    const int64_t aux_rec = q->off_o + q->value_dim;
    q->off_qg = 0;
    q->off_gate = 2 * n_q;
    const int64_t aux_att = 3 * n_q;
    hp->n_aux = aux_rec > aux_att ? aux_rec : aux_att;
    if (moe) {   /* the MoE block runs after the mixer: its scratch follows both */
        q->off_moe = hp->n_aux;
        hp->n_aux += 3 * (int64_t)hp->n_embd + q->n_expert + 2 * (int64_t)q->n_expert_used + 1;
    }

    int32_t n_full = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        q->layers[il].recurrent = rec[il];
        n_full += !rec[il];
        /* recurrent layers keep state cells, full layers a KV cache */
        hp->n_embd_k_gqa[il] = rec[il] ? 0 : (int64_t)hp->n_head_kv * hp->head_dim_k;
        hp->n_embd_v_gqa[il] = rec[il] ? 0 : (int64_t)hp->n_head_kv * hp->head_dim_v;
        hp->n_embd_r[il] = rec[il] ? (int64_t)(q->d_conv - 1) * q->conv_dim : 0;
        hp->n_embd_s[il] = rec[il] ? (int64_t)q->n_v_heads * q->d_v * q->d_k : 0;
    }
    if (n_full == 0)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: qwen35 file with no full-attention layer", m->path);

    /* --- tensors (llama.cpp qwen35.cpp load_arch_tensors) --- */
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff;
    char name[96];
    for (int32_t il = 0; il < n_layer && st == EMBER_OK; il++) {
        ember_layer *L = &m->layers[il];
        q35_layer *Q = &q->layers[il];
        if ((st = ember_model_bind_layer_vector(m, il, "attn_norm", n_embd, &L->attn_norm)) ||
            (st = ember_model_bind_layer_vector(m, il, "post_attention_norm", n_embd, &L->ffn_norm)))
            return st;
        if (moe) {
            if ((st = load_moe_layer(m, q, il))) return st;
        } else if ((st = ember_model_bind_layer_matrix(m, il, "ffn_gate", n_embd, n_ff, true, &L->ffn_gate)) ||
                   (st = ember_model_bind_layer_matrix(m, il, "ffn_up", n_embd, n_ff, true, &L->ffn_up)) ||
                   (st = ember_model_bind_layer_matrix(m, il, "ffn_down", n_ff, n_embd, true, &L->ffn_down))) {
            return st;
        }
        if (!Q->recurrent) {
            const int64_t n_kv = (int64_t)hp->n_head_kv * hp->head_dim_k;
            if ((st = ember_model_bind_layer_matrix(m, il, "attn_q", n_embd, 2 * n_q, true, &L->wq)) ||
                (st = ember_model_bind_layer_matrix(m, il, "attn_k", n_embd, n_kv, true, &L->wk)) ||
                (st = ember_model_bind_layer_matrix(m, il, "attn_v", n_embd, n_kv, true, &L->wv)) ||
                (st = ember_model_bind_layer_matrix(m, il, "attn_output", n_q, n_embd, true, &L->wo)) ||
                (st = ember_model_bind_layer_vector(m, il, "attn_q_norm", hp->head_dim_k, &L->attn_q_norm)) ||
                (st = ember_model_bind_layer_vector(m, il, "attn_k_norm", hp->head_dim_k, &L->attn_k_norm)))
                return st;
            continue;
        }
        if ((st = ember_model_bind_layer_matrix(m, il, "attn_qkv", n_embd, q->conv_dim, true, &Q->wqkv)) ||
            (st = ember_model_bind_layer_matrix(m, il, "attn_gate", n_embd, q->value_dim, true, &Q->wgate)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ssm_alpha", n_embd, q->n_v_heads, true, &Q->walpha)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ssm_beta", n_embd, q->n_v_heads, true, &Q->wbeta)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ssm_out", q->value_dim, n_embd, true, &Q->wout)) ||
            (st = ember_model_bind_layer_vector(m, il, "ssm_norm", q->d_v, &Q->ssm_norm)))
            return st;
        snprintf(name, sizeof name, "blk.%d.ssm_conv1d.weight", il);
        if ((st = bind_f32_2d(m, name, q->d_conv, q->conv_dim, &Q->conv_w))) return st;
        snprintf(name, sizeof name, "blk.%d.ssm_a", il);
        if ((st = ember_model_bind_vector(m, name, q->n_v_heads, &Q->A))) return st;
        snprintf(name, sizeof name, "blk.%d.ssm_dt.bias", il);
        if ((st = ember_model_bind_vector(m, name, q->n_v_heads, &Q->dt_bias))) return st;
    }
    return st;
}

/* Gated DeltaNet mixer of layer il: s->xb [n, n_embd] (normed input) ->
 * s->xb (its output, before the residual add). */
static void qwen35_linear_attn(const ember_run *r, const ember_ubatch *ub, int32_t il)
{
    const ember_model *m = r->m;
    const q35_model *q = m->arch_priv;
    const q35_layer *Q = &q->layers[il];
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    ember_scratch *s = r->s;
    const int32_t n = ub->n;
    float *qkv = s->aux + (int64_t)n * q->off_qkv, *u = s->aux + (int64_t)n * q->off_conv;
    float *z = s->aux + (int64_t)n * q->off_z, *alpha = s->aux + (int64_t)n * q->off_alpha;
    float *beta = s->aux + (int64_t)n * q->off_beta, *o = s->aux + (int64_t)n * q->off_o;

    const ember_weight *ws[4] = {&Q->wqkv, &Q->wgate, &Q->walpha, &Q->wbeta};
    float *ys[4] = {qkv, z, alpha, beta};
    op->matmul(be, s->xb, n, 4, ws, ys);
    op->conv1d_silu(be, u, qkv, Q->conv_w, q->conv_dim, q->d_conv, ember_rs_conv_ptrs(r->rs, il, ub->seq, n), n);
    const ember_gdr_params gp = {
        .n_head_k = q->n_k_heads, .n_head_v = q->n_v_heads, .d_k = q->d_k, .d_v = q->d_v,
        .A = Q->A, .dt_bias = Q->dt_bias, .eps = m->hp.norm_eps,
    };
    op->gated_delta_rule(be, &gp, u, q->conv_dim, alpha, beta, ember_rs_ssm_ptrs(r->rs, il, ub->seq, n), n, o);
    /* gated RMSNorm per value head: norm(o) * ssm_norm * silu(z) */
    op->rms_norm(be, o, o, Q->ssm_norm, (int64_t)n * q->n_v_heads, q->d_v, m->hp.norm_eps);
    op->swiglu(be, z, o, (int64_t)n * q->value_dim);
    ember_project(r, z, n, &Q->wout, s->xb, NULL, NULL, NULL, NULL);
}

/* Gated full attention of layer il: s->xb (normed input) -> s->xb. */
static void qwen35_attn(const ember_run *r, const ember_ubatch *ub, int32_t il)
{
    const ember_model *m = r->m;
    const q35_model *q = m->arch_priv;
    const ember_hparams *hp = &m->hp;
    const ember_layer *L = &m->layers[il];
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    ember_scratch *s = r->s;
    const int32_t n = ub->n, hd = hp->head_dim_k;
    const int64_t n_q = (int64_t)hp->n_head * hd;
    float *qg = s->aux + (int64_t)n * q->off_qg, *gate = s->aux + (int64_t)n * q->off_gate;

    ember_project(r, s->xb, n, &L->wq, qg, &L->wk, s->k, &L->wv, s->v);
    /* attn_q rows come per head as [q (hd) | gate (hd)] */
    op->copy_strided(be, s->q, hd, qg, 2 * hd, (int64_t)n * hp->n_head, hd);
    op->copy_strided(be, gate, hd, qg + hd, 2 * hd, (int64_t)n * hp->n_head, hd);
    op->rms_norm(be, s->q, s->q, L->attn_q_norm, (int64_t)n * hp->n_head, hd, hp->norm_eps);
    op->rms_norm(be, s->k, s->k, L->attn_k_norm, (int64_t)n * hp->n_head_kv, hd, hp->norm_eps);
    op->rope(be, s->q, n, hp->n_head, hd, hp->n_rot, ub->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NEOX);
    op->rope(be, s->k, n, hp->n_head_kv, hd, hp->n_rot, ub->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NEOX);
    ember_attend(r, ub, il, s->q, s->k, s->v, hp->attn_scale, 0, s->att);
    op->sigmoid_mul(be, s->att, gate, (int64_t)n * n_q);
    ember_project(r, s->att, n, &L->wo, s->xb, NULL, NULL, NULL, NULL);
}

/* Mixture-of-experts block of layer il (qwen35moe): s->xb [n, n_embd]
 * (normed input) -> s->xb. Routing runs on the host (host scratch); tokens
 * are grouped by expert so each expert's weights are read once per ubatch. */
static void qwen35_moe(const ember_run *r, int32_t il, int32_t n)
{
    const ember_model *m = r->m;
    const q35_model *q = m->arch_priv;
    const q35_layer *Q = &q->layers[il];
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    ember_scratch *s = r->s;
    const int64_t n_embd = m->hp.n_embd;
    const int32_t E = q->n_expert, K = q->n_expert_used;
    float *gat = s->aux + (int64_t)n * q->off_moe;   /* [n, n_embd] gathered rows */
    float *eo = gat + (int64_t)n * n_embd;           /* [n, n_embd] expert outputs */
    float *acc = eo + (int64_t)n * n_embd;           /* [n, n_embd] the block's output */
    float *prob = acc + (int64_t)n * n_embd;         /* [n, E] */
    float *sel = prob + (int64_t)n * E;              /* [n, K] chosen experts (as floats) */
    float *wsel = sel + (int64_t)n * K;              /* [n, K] their weights */
    float *shg = wsel + (int64_t)n * K;              /* [n] shared-expert gate */

    /* shared expert, gated */
    ember_project(r, s->xb, n, &Q->router, prob, &Q->sh_gate_inp, shg, NULL, NULL);
    ember_project(r, s->xb, n, &Q->sh_gate, s->hb, &Q->sh_up, s->hb2, NULL, NULL);
    op->swiglu(be, s->hb, s->hb2, (int64_t)n * q->n_ff_shexp);
    ember_project(r, s->hb, n, &Q->sh_down, acc, NULL, NULL, NULL, NULL);
    for (int32_t t = 0; t < n; t++) {
        const float g = 1.0f / (1.0f + expf(-shg[t]));
        for (int64_t i = 0; i < n_embd; i++) acc[(int64_t)t * n_embd + i] *= g;
    }
    /* router: softmax, top K, renormalized */
    for (int32_t t = 0; t < n; t++) {
        float *p = prob + (int64_t)t * E;
        float mx = p[0], sum = 0.0f;
        for (int32_t e = 1; e < E; e++) if (p[e] > mx) mx = p[e];
        for (int32_t e = 0; e < E; e++) { p[e] = expf(p[e] - mx); sum += p[e]; }
        for (int32_t e = 0; e < E; e++) p[e] /= sum;
        float wsum = 0.0f;
        for (int32_t k = 0; k < K; k++) {
            int32_t best = -1;
            for (int32_t e = 0; e < E; e++) {
                bool taken = false;
                for (int32_t j = 0; j < k; j++) taken |= (int32_t)sel[(int64_t)t * K + j] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[(int64_t)t * K + k] = (float)best;
            wsel[(int64_t)t * K + k] = p[best];
            wsum += p[best];
        }
        const float sc = q->expert_weights_scale != 0.0f ? q->expert_weights_scale : 1.0f;
        for (int32_t k = 0; k < K; k++) wsel[(int64_t)t * K + k] = wsel[(int64_t)t * K + k] / wsum * sc;
    }
    /* routed experts */
    for (int32_t e = 0; e < E; e++) {
        int32_t rows = 0;
        for (int32_t t = 0; t < n; t++)
            for (int32_t k = 0; k < K; k++)
                if ((int32_t)sel[(int64_t)t * K + k] == e)
                    memcpy(gat + (int64_t)rows++ * n_embd, s->xb + (int64_t)t * n_embd, (size_t)n_embd * sizeof(float));
        if (rows == 0) continue;
        ember_project(r, gat, rows, &Q->exp_gate[e], s->hb, &Q->exp_up[e], s->hb2, NULL, NULL);
        op->swiglu(be, s->hb, s->hb2, (int64_t)rows * q->n_ff_exp);
        ember_project(r, s->hb, rows, &Q->exp_down[e], eo, NULL, NULL, NULL, NULL);
        int32_t row = 0;
        for (int32_t t = 0; t < n; t++)
            for (int32_t k = 0; k < K; k++)
                if ((int32_t)sel[(int64_t)t * K + k] == e) {
                    const float w = wsel[(int64_t)t * K + k];
                    const float *src = eo + (int64_t)row++ * n_embd;
                    float *dst = acc + (int64_t)t * n_embd;
                    for (int64_t i = 0; i < n_embd; i++) dst[i] += w * src[i];
                }
    }
    memcpy(s->xb, acc, (size_t)n * (size_t)n_embd * sizeof(float));
}

static void qwen35_forward(const ember_run *r, const ember_ubatch *ub)
{
    const ember_model *m = r->m;
    const q35_model *q = m->arch_priv;
    const ember_hparams *hp = &m->hp;
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    ember_scratch *s = r->s;
    const int32_t n = ub->n;
    const int64_t n_embd = hp->n_embd;
    const float eps = hp->norm_eps;

    op->get_rows(be, &m->tok_embd, ub->token, n, s->x);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const ember_layer *L = &m->layers[il];
        op->rms_norm(be, s->xb, s->x, L->attn_norm, n, n_embd, eps);
        if (q->layers[il].recurrent) qwen35_linear_attn(r, ub, il);
        else qwen35_attn(r, ub, il);
        op->add(be, s->x, s->xb, n * n_embd);

        op->rms_norm(be, s->xb, s->x, L->ffn_norm, n, n_embd, eps);   /* post_attention_norm */
        if (q->n_expert > 0) {
            qwen35_moe(r, il, n);
        } else {
            ember_project(r, s->xb, n, &L->ffn_gate, s->hb, &L->ffn_up, s->hb2, NULL, NULL);
            op->swiglu(be, s->hb, s->hb2, (int64_t)n * hp->n_ff);
            ember_project(r, s->hb, n, &L->ffn_down, s->xb, NULL, NULL, NULL, NULL);
        }
        op->add(be, s->x, s->xb, n * n_embd);
    }
    ember_output(r, ub, s->x);
}

const ember_arch ember_arch_qwen35 = {
    .name = "qwen35",
    .load = qwen35_load,
    .forward = qwen35_forward,
    .free = qwen35_free,
    .device_scratch = true,
    /* no layer-skip / hidden-state export: a partial pass would advance the
     * recurrent state of some layers only */
    .partial = false,
};

/* qwen35moe: the same file, MoE blocks instead of dense MLPs (load reads
 * general.architecture). No feed_forward_length in these files. */
const ember_arch ember_arch_qwen35moe = {
    .name = "qwen35moe",
    .load = qwen35_load,
    .forward = qwen35_forward,
    .free = qwen35_free,
    .device_scratch = true,   /* host_scratch is set by load: routing reads scratch on the host */
    .partial = false,
    .ffn_optional = true,
};
