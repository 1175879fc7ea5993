/*
 * gemma3.c — Gemma 3 text models (general.architecture = "gemma3").
 *
 * Owns: gemma3 hyperparameters (sliding-window pattern, attention scale),
 * its tensors, and its forward pass written as the math over backend ops.
 * Must not: touch KV blocks or batches beyond the ember_ubatch it is given.
 *
 * Sources: Gemma 3 technical report (2025); transformers
 * modeling_gemma3.py; llama.cpp src/models/gemma3.cpp for the GGUF layout
 * (norm weights stored as 1 + w, so RMSNorm is x * w here).
 *   x = embed(token) * sqrt(n_embd)
 *   per layer: h = x + post_attn_norm(attn(attn_norm(x)))
 *              x = h + post_ffw_norm(down(gelu_tanh(gate(ffn_norm(h))) * up(ffn_norm(h))))
 *   attn: q, k per-head RMSNorm (QK-norm), RoPE NEOX; local layers use
 *   base rope.freq_base_swa (10000) over a window of attention.sliding_window,
 *   global layers (every 6th: layer % 6 == 5) use rope.freq_base and its
 *   scaling; q scaled by 1/sqrt(key_length) (query_pre_attn_scalar).
 *   logits = norm(x) E^T (tied unless output.weight exists).
 */
#include "model/model.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>

static ember_status gemma3_load(ember_model *m)
{
    ember_hparams *hp = &m->hp;
    ember_status st;
    hp->n_swa = 0;
    if ((st = ember_model_get_u32(m, "attention.sliding_window", false, &hp->n_swa))) return st;
    int32_t pattern = 6;
    if ((st = ember_model_get_u32(m, "attention.sliding_window_pattern", false, &pattern))) return st;
    for (int32_t il = 0; il < hp->n_layer; il++)
        hp->is_swa[il] = hp->n_swa > 0 && (pattern == 0 || il % pattern < pattern - 1);
    hp->embd_scale = sqrtf((float)hp->n_embd);
    /* gemma_pytorch config: 27B scales by n_embd / n_head, others by head_dim */
    hp->attn_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                       : 1.0f / sqrtf((float)hp->head_dim_k);
    hp->final_softcap = 0.0f;
    if ((st = ember_model_get_f32(m, "final_logit_softcapping", false, &hp->final_softcap))) return st;

    if ((st = ember_model_bind_decoder_layers(m, true))) return st;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        ember_layer *L = &m->layers[il];
        if ((st = ember_model_bind_layer_vector(m, il, "post_attention_norm", hp->n_embd, &L->post_attn_norm)) ||
            (st = ember_model_bind_layer_vector(m, il, "post_ffw_norm", hp->n_embd, &L->post_ffw_norm)))
            return st;
    }
    return EMBER_OK;
}

static void gemma3_forward(const ember_run *r, const ember_ubatch *ub)
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
    op->scale(be, s->x, hp->embd_scale, n * n_embd);

    for (int32_t il = 0; il < r->n_layer; il++) {
        const ember_layer *L = &m->layers[il];
        const bool swa = hp->is_swa[il];
        const float rope_base = swa ? hp->rope_base_swa : hp->rope_base;
        const float rope_scale = swa ? 1.0f : hp->rope_scale;

        /* attention */
        op->rms_norm(be, s->xb, s->x, L->attn_norm, n, n_embd, eps);
        ember_project(r, s->xb, n, &L->wq, s->q, &L->wk, s->k, &L->wv, s->v);
        op->rms_norm(be, s->q, s->q, L->attn_q_norm, (int64_t)n * hp->n_head, hp->head_dim_k, eps);
        op->rms_norm(be, s->k, s->k, L->attn_k_norm, (int64_t)n * hp->n_head_kv, hp->head_dim_k, eps);
        op->rope(be, s->q, n, hp->n_head, hp->head_dim_k, hp->n_rot, ub->pos, rope_base, rope_scale, EMBER_ROPE_NEOX);
        op->rope(be, s->k, n, hp->n_head_kv, hp->head_dim_k, hp->n_rot, ub->pos, rope_base, rope_scale, EMBER_ROPE_NEOX);
        op->scale(be, s->q, hp->attn_scale, (int64_t)n * hp->n_head * hp->head_dim_k);
        ember_attend(r, ub, il, s->q, s->k, s->v, 1.0f, swa ? hp->n_swa : 0, s->att);
        ember_project(r, s->att, n, &L->wo, s->xb, NULL, NULL, NULL, NULL);
        op->rms_norm(be, s->xb, s->xb, L->post_attn_norm, n, n_embd, eps);
        op->add(be, s->x, s->xb, n * n_embd);

        /* feed-forward */
        op->rms_norm(be, s->xb, s->x, L->ffn_norm, n, n_embd, eps);
        ember_project(r, s->xb, n, &L->ffn_gate, s->hb, &L->ffn_up, s->hb2, NULL, NULL);
        op->geglu(be, s->hb, s->hb2, (int64_t)n * hp->n_ff);
        ember_project(r, s->hb, n, &L->ffn_down, s->xb, NULL, NULL, NULL, NULL);
        op->rms_norm(be, s->xb, s->xb, L->post_ffw_norm, n, n_embd, eps);
        op->add(be, s->x, s->xb, n * n_embd);
        ember_layer_end(r, ub, il, s->x);
    }
    ember_output(r, ub, s->x);
}

const ember_arch ember_arch_gemma3 = {
    .name = "gemma3",
    .load = gemma3_load,
    .forward = gemma3_forward,
    .device_scratch = true,
    .partial = true,
};
