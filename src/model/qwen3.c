/*
 * qwen3.c — Qwen3 dense decoders (general.architecture = "qwen3").
 *
 * Owns: qwen3 tensors and the forward pass as the math over backend ops.
 * Must not: touch KV blocks or batches beyond the ember_ubatch it is given.
 * (The MoE variant is architecture "qwen3moe", not handled here.)
 *
 * Sources: Qwen3 technical report (2025); transformers modeling_qwen3.py;
 * llama.cpp src/models/qwen3.cpp for the GGUF layout (Q/K rows are NOT
 * permuted by the converter, so RoPE rotates half-split pairs: NEOX).
 *   x = embed(token)
 *   per layer: h = x + wo(attn(q, k, v)),  n = rms(x) * attn_norm
 *                q = rope(rms_head(wq n) * attn_q_norm)   (QK-norm per head)
 *                k = rope(rms_head(wk n) * attn_k_norm),  v = wv n
 *              x = h + down(silu(gate(m)) * up(m)),  m = rms(h) * ffn_norm
 *   attention with grouped K/V heads (GQA), scale 1/sqrt(key_length).
 *   logits = norm(x) W_out^T (token_embd when output.weight is absent).
 */
#include "model/model.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>

static ember_status qwen3_load(ember_model *m)
{
    ember_hparams *hp = &m->hp;
    if (hp->n_rot != hp->head_dim_k)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: qwen3.rope.dimension_count %d != key_length %d (partial RoPE) is not supported",
                           m->path, hp->n_rot, hp->head_dim_k);
    return ember_model_bind_decoder_layers(m, true);
}

static void qwen3_forward(const ember_run *r, const ember_ubatch *ub)
{
    const ember_model *m = r->m;
    const ember_hparams *hp = &m->hp;
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    ember_scratch *s = r->s;
    const int32_t n = ub->n;
    const int64_t n_embd = hp->n_embd;
    const float eps = hp->norm_eps;

    op->get_rows(be, &m->tok_embd, ub->token, n, s->x);

    for (int32_t il = 0; il < r->n_layer; il++) {
        const ember_layer *L = &m->layers[il];

        /* attention */
        op->rms_norm(be, s->xb, s->x, L->attn_norm, n, n_embd, eps);
        ember_project(r, s->xb, n, &L->wq, s->q, &L->wk, s->k, &L->wv, s->v);
        op->rms_norm(be, s->q, s->q, L->attn_q_norm, (int64_t)n * hp->n_head, hp->head_dim_k, eps);
        op->rms_norm(be, s->k, s->k, L->attn_k_norm, (int64_t)n * hp->n_head_kv, hp->head_dim_k, eps);
        op->rope(be, s->q, n, hp->n_head, hp->head_dim_k, hp->n_rot, ub->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NEOX);
        op->rope(be, s->k, n, hp->n_head_kv, hp->head_dim_k, hp->n_rot, ub->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NEOX);
        ember_attend(r, ub, il, s->q, s->k, s->v, hp->attn_scale, 0, s->att);
        ember_project(r, s->att, n, &L->wo, s->xb, NULL, NULL, NULL, NULL);
        op->add(be, s->x, s->xb, n * n_embd);

        /* feed-forward */
        op->rms_norm(be, s->xb, s->x, L->ffn_norm, n, n_embd, eps);
        ember_project(r, s->xb, n, &L->ffn_gate, s->hb, &L->ffn_up, s->hb2, NULL, NULL);
        op->swiglu(be, s->hb, s->hb2, (int64_t)n * hp->n_ff);
        ember_project(r, s->hb, n, &L->ffn_down, s->xb, NULL, NULL, NULL, NULL);
        op->add(be, s->x, s->xb, n * n_embd);
        ember_layer_end(r, ub, il, s->x);
    }
    ember_output(r, ub, s->x);
}

const ember_arch ember_arch_qwen3 = {
    .name = "qwen3",
    .load = qwen3_load,
    .forward = qwen3_forward,
    .device_scratch = true,
    .partial = true,
};
