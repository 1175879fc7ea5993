/*
 * llama.c — Llama-family decoders (general.architecture = "llama"), e.g.
 * SmolLM2.
 *
 * Owns: llama tensors and the forward pass as the math over backend ops.
 * Must not: touch KV blocks or batches beyond the ember_ubatch it is given.
 *
 * Sources: LLaMA (Touvron et al. 2023); llama.cpp src/models/llama.cpp for
 * the GGUF layout (Q/K rows permuted by the converter so RoPE rotates
 * adjacent pairs: EMBER_ROPE_NORM).
 *   x = embed(token)
 *   per layer: h = x + wo(attn(rope(wq n), rope(wk n), wv n)), n = rms(x) * attn_norm
 *              x = h + down(silu(gate(m)) * up(m)),           m = rms(h) * ffn_norm
 *   attention with grouped K/V heads (GQA), scale 1/sqrt(head_dim).
 *   logits = norm(x) W_out^T (token_embd when output.weight is absent).
 */
#include "model/model.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>

static ember_status llama_load(ember_model *m)
{
    if (ember_gguf_get_tensor(m->gguf, "rope_freqs.weight"))
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: tensor 'rope_freqs.weight' (Llama 3 frequency scaling) is not supported yet", m->path);
    return ember_model_bind_decoder_layers(m, false);
}

static void llama_forward(const ember_run *r, const ember_ubatch *ub)
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
        op->rope(be, s->q, n, hp->n_head, hp->head_dim_k, hp->n_rot, ub->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NORM);
        op->rope(be, s->k, n, hp->n_head_kv, hp->head_dim_k, hp->n_rot, ub->pos, hp->rope_base, hp->rope_scale, EMBER_ROPE_NORM);
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

const ember_arch ember_arch_llama = {
    .name = "llama",
    .load = llama_load,
    .forward = llama_forward,
    .device_scratch = true,
    .partial = true,
};
