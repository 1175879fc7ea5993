/*
 * gemma4.c — Gemma 4 text models (general.architecture = "gemma4"): the
 * E2B/E4B per-layer-embedding variants (the base of Nemotron 3.5 Bolt E4B)
 * and the dense larger ones.
 *
 * Owns: gemma4 hyperparameters (per-layer head dims, KV head counts, FFN
 * widths, RoPE of sliding and full layers, KV sharing), its tensors, and its
 * forward pass written as the math over backend ops. Must not: touch KV
 * blocks or batches beyond the ember_ubatch it is given, or read scratch on
 * the host except in a file that sets ember_model.host_scratch (MoE: the
 * router and expert dispatch run on the host). Everything else runs on
 * device scratch with a GPU backend; the per-layer-embedding table stays in
 * the mapped file (rows looked up on the host, one upload per ubatch).
 *
 * Sources: transformers models/gemma4/modeling_gemma4.py (the math);
 * llama.cpp conversion/gemma.py (Gemma4Model: GGUF keys and tensors) and
 * src/models/gemma4.cpp (the same graph over GGUF names). Norm weights are
 * stored raw (no 1 + w).
 *   x = embed(token) * sqrt(n_embd)
 *   PLE (when embedding_length_per_layer_input P > 0), for all layers at once:
 *     e[l] = per_layer_token_embd[token][l] * sqrt(P)
 *     p[l] = rms(x per_layer_model_proj^T / sqrt(n_embd))[l] * per_layer_proj_norm
 *     ple[l] = (p[l] + e[l]) / sqrt(2)
 *   per layer l (sliding or full, each type with its own head_dim, n_head_kv,
 *   RoPE base and rotary dims):
 *     n = rms(x) * attn_norm
 *     q = rope(rms_head(wq n) * q_norm)
 *     k = rope(rms_head(wk n) * k_norm),  v = rms_head(wv n) (no weight;
 *         attention_k_eq_v: no attn_v, v = rms_head(wk n))
 *     KV-shared layers (the last attention.shared_kv_layers) compute only q
 *     and attend to K/V of the last earlier non-shared layer of their type.
 *     h = x + post_attn_norm(wo softmax(q k^T) v)           (scale 1.0)
 *     x = h + post_ffw_norm(down(gelu_tanh(gate m) * up m)), m = rms(h) * ffn_norm
 *     PLE: x = x + post_norm(proj(gelu_tanh(inp_gate x) * ple[l]))
 *     x = x * layer_output_scale
 *   full layers: "proportional" RoPE — NEOX over the whole head with the
 *   rope_freqs tensor holding 1 for rotated pairs and 1e30 for the rest.
 *   logits = softcap(norm(x) E^T), softcap(z) = c tanh(z / c) when
 *   final_logit_softcapping is set.
 *   MoE layers (26B-A4B: ffn_gate_inp present) add an expert branch to the
 *   dense MLP, both fed by h:
 *     f1 = post_ffw_norm_1(mlp(rms(h) * ffn_norm))
 *     router: z = ffn_gate_inp (rms(h) * ffn_gate_inp.scale / sqrt(n_embd));
 *             p = softmax(z); top expert_used_count by p, renormalized to sum
 *             1, times ffn_down_exps.scale[e]
 *     f2 = post_ffw_norm_2(sum_e w_e down_e(gelu_tanh(gate_e u) * up_e u)),
 *          u = rms(h) * pre_ffw_norm_2
 *     x = h + post_ffw_norm(f1 + f2)
 *   Experts come as ffn_gate_up_exps [n_expert][2 * n_ff_exp][n_embd] (gate
 *   rows first) or as separate ffn_gate_exps / ffn_up_exps.
 */
#include "model/gemma4.h"
#include "base/status.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct g4_layer {
    bool swa;
    bool has_kv;          /* false: KV-shared layer */
    int32_t kv_src;       /* layer whose KV cache this layer attends to */
    int32_t n_head_kv, head_dim, n_rot, n_ff;
    float rope_base;
    const float *rope_freqs;   /* full layers: [head_dim / 2] frequency divisors */
    ember_weight ple_gate;     /* inp_gate: [P, n_embd] */
    ember_weight ple_proj;     /* proj: [n_embd, P] */
    const float *ple_post_norm;
    float out_scale;           /* layer_output_scale, 1 when absent */
    /* MoE block (NULL exp_* when the layer is dense) */
    ember_weight router;       /* ffn_gate_inp: [n_expert, n_embd] */
    const float *router_scale; /* ffn_gate_inp.scale: [n_embd] */
    const float *exp_scale;    /* ffn_down_exps.scale: [n_expert], NULL = 1 */
    const float *pre_norm_2, *post_norm_1, *post_norm_2;
    ember_weight *exp_gate, *exp_up, *exp_down;   /* [n_expert] each */
} g4_layer;

typedef struct g4_model {
    int32_t n_pl;              /* embedding_length_per_layer_input (P), 0 = no PLE */
    ember_weight ple_tok_embd; /* per_layer_token_embd: [n_vocab, n_layer * P] */
    ember_weight ple_model_proj; /* per_layer_model_proj: [n_layer * P, n_embd] */
    ember_weight *ple_proj_l;    /* [n_layer]: its rows [l * P, (l + 1) * P), layer l's projection */
    const float *ple_proj_norm;  /* [P] */
    int32_t n_expert, n_expert_used, n_ff_exp;
    int64_t aux_moe;           /* offset (floats per token) of the MoE scratch in aux */
    g4_layer *layers;
} g4_model;

static void gemma4_free(ember_model *m)
{
    g4_model *g = m->arch_priv;
    if (g && g->layers)
        for (int32_t il = 0; il < m->hp.n_layer; il++) {
            free(g->layers[il].exp_gate);
            free(g->layers[il].exp_up);
            free(g->layers[il].exp_down);
        }
    if (g) {
        free(g->layers);
        free(g->ple_proj_l);
    }
    free(g);
    m->arch_priv = NULL;
}

static ember_status get_bool_per_layer(ember_model *m, const char *suffix, bool *out)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    ember_gguf_arr a;
    ember_status st = ember_gguf_get_arr(m->gguf, key, &a);
    if (st == EMBER_ERR_NOT_FOUND) return ember_error(st, "%s: missing metadata key '%s'", m->path, key);
    if (st) return ember_error(st, "%s: metadata key '%s' is not an array", m->path, key);
    if (a.type != EMBER_GGUF_BOOL || a.n != (uint64_t)m->hp.n_layer)
        return ember_error(EMBER_ERR_FORMAT, "%s: metadata key '%s' must be %d bools (has %llu of type %s)", m->path, key,
                           m->hp.n_layer, (unsigned long long)a.n, ember_gguf_vtype_name(a.type));
    for (int32_t il = 0; il < m->hp.n_layer; il++) out[il] = ember_gguf_arr_scalar(&a, (uint64_t)il).b;
    return EMBER_OK;
}

static ember_status gemma4_load(ember_model *m)
{
    ember_hparams *hp = &m->hp;
    const int32_t n_layer = hp->n_layer;
    ember_status st;
    g4_model *g = calloc(1, sizeof *g);
    if (!g) return ember_error(EMBER_ERR_NOMEM, "gemma4: out of memory");
    m->arch_priv = g;
    g->layers = calloc((size_t)n_layer, sizeof *g->layers);
    if (!g->layers) return ember_error(EMBER_ERR_NOMEM, "gemma4: out of memory");

    /* --- hyperparameters --- */
    if ((st = get_bool_per_layer(m, "attention.sliding_window_pattern", hp->is_swa))) return st;
    if ((st = ember_model_get_u32(m, "attention.sliding_window", true, &hp->n_swa))) return st;
    int32_t head_dim_full = 0, head_dim_swa = 0, v_full = 0, v_swa = 0, n_rot_full = 0, n_rot_swa = 0, n_shared = 0;
    if ((st = ember_model_get_u32(m, "attention.key_length", true, &head_dim_full))) return st;
    if ((st = ember_model_get_u32(m, "attention.value_length", true, &v_full))) return st;
    if ((st = ember_model_get_u32(m, "attention.key_length_swa", true, &head_dim_swa))) return st;
    if ((st = ember_model_get_u32(m, "attention.value_length_swa", true, &v_swa))) return st;
    if (v_full != head_dim_full || v_swa != head_dim_swa)
        return ember_error(EMBER_ERR_FORMAT, "%s: gemma4 needs value_length == key_length (full %d/%d, sliding %d/%d)",
                           m->path, head_dim_full, v_full, head_dim_swa, v_swa);
    n_rot_full = head_dim_full;
    n_rot_swa = head_dim_swa;
    if ((st = ember_model_get_u32(m, "rope.dimension_count", false, &n_rot_full))) return st;
    if ((st = ember_model_get_u32(m, "rope.dimension_count_swa", false, &n_rot_swa))) return st;
    if ((st = ember_model_get_u32(m, "attention.shared_kv_layers", false, &n_shared))) return st;
    if ((st = ember_model_get_u32(m, "embedding_length_per_layer_input", false, &g->n_pl))) return st;
    if ((st = ember_model_get_u32(m, "expert_count", false, &g->n_expert))) return st;
    if ((st = ember_model_get_u32(m, "expert_used_count", false, &g->n_expert_used))) return st;
    if ((st = ember_model_get_u32(m, "expert_feed_forward_length", false, &g->n_ff_exp))) return st;
    if (g->n_expert > 0 && (g->n_expert > 1024 || g->n_expert_used < 1 || g->n_expert_used > g->n_expert || g->n_ff_exp < 1))
        return ember_error(EMBER_ERR_FORMAT, "%s: gemma4 expert_count %d, expert_used_count %d, expert_feed_forward_length %d out of range",
                           m->path, g->n_expert, g->n_expert_used, g->n_ff_exp);
    if (head_dim_full < 2 || head_dim_swa < 2 || head_dim_full > 1024 || head_dim_swa > 1024 ||
        n_rot_full < 2 || n_rot_full > head_dim_full || n_rot_full % 2 || n_rot_swa < 2 || n_rot_swa > head_dim_swa ||
        n_rot_swa % 2 || n_shared < 0 || n_shared >= n_layer || g->n_pl < 0 || g->n_pl > 65536 || hp->n_swa < 0)
        return ember_error(EMBER_ERR_FORMAT, "%s: gemma4 shapes out of range (key_length %d, key_length_swa %d, rope dims %d/%d, shared_kv_layers %d, embedding_length_per_layer_input %d)",
                           m->path, head_dim_full, head_dim_swa, n_rot_full, n_rot_swa, n_shared, g->n_pl);
    int32_t n_ff[EMBER_MAX_LAYERS], n_kv[EMBER_MAX_LAYERS];
    for (int32_t il = 0; il < n_layer; il++) { n_ff[il] = hp->n_ff; n_kv[il] = hp->n_head_kv; }
    if ((st = ember_model_get_u32_per_layer(m, "feed_forward_length", true, n_layer, n_ff))) return st;
    if ((st = ember_model_get_u32_per_layer(m, "attention.head_count_kv", false, n_layer, n_kv))) return st;

    hp->attn_scale = 1.0f;   /* QK-norm instead of 1/sqrt(d) */
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->final_softcap = 0.0f;
    if ((st = ember_model_get_f32(m, "final_logit_softcapping", false, &hp->final_softcap))) return st;
    /* the context sizes scratch by the largest layer, the KV cache per layer
     * (n_embd_k_gqa below) */
    hp->head_dim_k = hp->head_dim_v = head_dim_full > head_dim_swa ? head_dim_full : head_dim_swa;
    hp->n_rot = n_rot_full;

    const int32_t first_shared = n_layer - n_shared;
    for (int32_t il = 0; il < n_layer; il++) {
        g4_layer *G = &g->layers[il];
        G->swa = hp->is_swa[il];
        G->head_dim = G->swa ? head_dim_swa : head_dim_full;
        G->n_rot = G->swa ? n_rot_swa : n_rot_full;
        G->rope_base = G->swa ? hp->rope_base_swa : hp->rope_base;
        G->n_head_kv = n_kv[il];
        G->n_ff = n_ff[il];
        G->out_scale = 1.0f;
        if (G->n_head_kv < 1 || hp->n_head % G->n_head_kv != 0 || G->n_ff < 1)
            return ember_error(EMBER_ERR_FORMAT, "%s: layer %d: head_count_kv %d must divide head_count %d; feed_forward_length %d",
                               m->path, il, G->n_head_kv, hp->n_head, G->n_ff);
        G->has_kv = il < first_shared;
        G->kv_src = il;
        if (!G->has_kv) {
            G->kv_src = -1;
            for (int32_t j = first_shared - 1; j >= 0; j--)
                if (hp->is_swa[j] == G->swa) { G->kv_src = j; break; }
            if (G->kv_src < 0)
                return ember_error(EMBER_ERR_FORMAT, "%s: KV-shared layer %d has no earlier %s layer to share with",
                                   m->path, il, G->swa ? "sliding" : "full");
            const g4_layer *S = &g->layers[G->kv_src];
            if (S->n_head_kv != G->n_head_kv || S->head_dim != G->head_dim)
                return ember_error(EMBER_ERR_FORMAT, "%s: KV-shared layer %d and its source %d differ in KV shape", m->path, il, G->kv_src);
        }
        /* the KV cache keeps exactly this layer's heads; a KV-shared layer none */
        hp->n_embd_k_gqa[il] = hp->n_embd_v_gqa[il] = G->has_kv ? (int64_t)G->n_head_kv * G->head_dim : 0;
    }

    /* --- tensors --- */
    const int64_t n_embd = hp->n_embd, P = g->n_pl;
    char name[96];
    if (P > 0) {
        if ((st = ember_model_bind_matrix(m, "per_layer_token_embd.weight", (int64_t)n_layer * P, hp->n_vocab, true, &g->ple_tok_embd))) return st;
        if ((st = ember_model_bind_matrix(m, "per_layer_model_proj.weight", n_embd, (int64_t)n_layer * P, true, &g->ple_model_proj))) return st;
        if ((st = ember_model_bind_vector(m, "per_layer_proj_norm.weight", P, &g->ple_proj_norm))) return st;
        /* aux scratch per token: the PLE inputs of every layer (the token
         * part, then the projected part, both layer-major [L, n, P]) and one
         * layer's gate; host scratch: the looked-up rows, layer-major, and
         * one dequantized row */
        hp->n_aux = 2 * (int64_t)n_layer * P + P;
        hp->n_aux_host = 2 * (int64_t)n_layer * P;
        /* the projection per layer: each gives a layer-major [n, P] block
         * directly (no transpose, which a device could not do in place) */
        g->ple_proj_l = calloc((size_t)n_layer, sizeof *g->ple_proj_l);
        if (!g->ple_proj_l) return ember_error(EMBER_ERR_NOMEM, "gemma4: out of memory");
        for (int32_t l = 0; l < n_layer; l++) {
            g->ple_proj_l[l] = g->ple_model_proj;
            g->ple_proj_l[l].n_out = P;
            g->ple_proj_l[l].data = (const uint8_t *)g->ple_model_proj.data + (size_t)l * (size_t)P * g->ple_model_proj.row_bytes;
        }
    }
    /* the MoE router and expert dispatch run on the host over the scratch */
    m->host_scratch = g->n_expert > 0;
    g->aux_moe = hp->n_aux;
    if (g->n_expert > 0) {
        /* per token: expert input, gather, expert output, sum (n_embd each),
         * router probabilities [n_expert], chosen experts and weights [used each] */
        hp->n_aux += 4 * n_embd + g->n_expert + 2 * (int64_t)g->n_expert_used;
        if (g->n_ff_exp > hp->n_ff) hp->n_ff = g->n_ff_exp;   /* expert hidden rows live in hb/hb2 */
    }
    const float *rope_freqs = NULL;
    if (ember_gguf_get_tensor(m->gguf, "rope_freqs.weight"))
        if ((st = ember_model_bind_vector(m, "rope_freqs.weight", head_dim_full / 2, &rope_freqs))) return st;
#define MAT(field, suffix, nin, nout) \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il); \
    if ((st = ember_model_bind_matrix(m, name, nin, nout, true, &field))) return st;
#define VEC(field, suffix, n) \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il); \
    if ((st = ember_model_bind_vector(m, name, n, &field))) return st;
    for (int32_t il = 0; il < n_layer; il++) {
        ember_layer *L = &m->layers[il];
        g4_layer *G = &g->layers[il];
        const int64_t hd = G->head_dim, n_q = (int64_t)hp->n_head * hd, n_k = (int64_t)G->n_head_kv * hd;
        snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
        if (ember_gguf_get_tensor(m->gguf, name))
            return ember_error(EMBER_ERR_UNSUPPORTED, "%s: fused '%s' is not supported", m->path, name);
        VEC(L->attn_norm, "attn_norm", n_embd);
        MAT(L->wq, "attn_q", n_embd, n_q);
        VEC(L->attn_q_norm, "attn_q_norm", hd);
        if (G->has_kv) {
            MAT(L->wk, "attn_k", n_embd, n_k);
            VEC(L->attn_k_norm, "attn_k_norm", hd);
            snprintf(name, sizeof name, "blk.%d.attn_v.weight", il);   /* absent: attention_k_eq_v */
            if ((st = ember_model_bind_matrix(m, name, n_embd, n_k, false, &L->wv))) return st;
        }
        MAT(L->wo, "attn_output", n_q, n_embd);
        VEC(L->post_attn_norm, "post_attention_norm", n_embd);
        VEC(L->ffn_norm, "ffn_norm", n_embd);
        MAT(L->ffn_gate, "ffn_gate", n_embd, G->n_ff);
        MAT(L->ffn_up, "ffn_up", n_embd, G->n_ff);
        MAT(L->ffn_down, "ffn_down", G->n_ff, n_embd);
        VEC(L->post_ffw_norm, "post_ffw_norm", n_embd);
        if (P > 0) {
            MAT(G->ple_gate, "inp_gate", n_embd, P);
            MAT(G->ple_proj, "proj", P, n_embd);
            VEC(G->ple_post_norm, "post_norm", n_embd);
        }
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
        if (ember_gguf_get_tensor(m->gguf, name)) {
            if (g->n_expert < 1)
                return ember_error(EMBER_ERR_NOT_FOUND, "%s: layer %d has '%s' but no gemma4.expert_count", m->path, il, name);
            const int32_t E = g->n_expert;
            const int64_t I = g->n_ff_exp;
            MAT(G->router, "ffn_gate_inp", n_embd, E);
            snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.scale", il);
            if ((st = ember_model_bind_vector(m, name, n_embd, &G->router_scale))) return st;
            snprintf(name, sizeof name, "blk.%d.ffn_down_exps.scale", il);
            if (ember_gguf_get_tensor(m->gguf, name) && (st = ember_model_bind_vector(m, name, E, &G->exp_scale))) return st;
            VEC(G->pre_norm_2, "pre_ffw_norm_2", n_embd);
            VEC(G->post_norm_1, "post_ffw_norm_1", n_embd);
            VEC(G->post_norm_2, "post_ffw_norm_2", n_embd);
            ember_weight *gu[2] = {NULL, NULL};
            snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
            if (ember_gguf_get_tensor(m->gguf, name)) {
                if ((st = ember_model_bind_experts(m, name, n_embd, I, 2, E, gu))) { free(gu[0]); return st; }
            } else {
                snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", il);
                if ((st = ember_model_bind_experts(m, name, n_embd, I, 1, E, &gu[0]))) return st;
                snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
                if ((st = ember_model_bind_experts(m, name, n_embd, I, 1, E, &gu[1]))) { free(gu[0]); return st; }
            }
            G->exp_gate = gu[0];
            G->exp_up = gu[1];
            snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", il);
            if ((st = ember_model_bind_experts(m, name, I, n_embd, 1, E, &G->exp_down))) return st;
        }
        snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", il);
        if (ember_gguf_get_tensor(m->gguf, name)) {
            const float *sc;
            if ((st = ember_model_bind_vector(m, name, 1, &sc))) return st;
            G->out_scale = sc[0];
        }
        if (!G->swa) {
            if (!rope_freqs && G->n_rot != G->head_dim)
                return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor 'rope_freqs.weight' (proportional RoPE of full layers)", m->path);
            G->rope_freqs = rope_freqs;
            if (rope_freqs) {
                /* the converter writes 1 for rotated pairs, then 1e30 */
                int32_t k = 0;
                while (k < head_dim_full / 2 && rope_freqs[k] == 1.0f) k++;
                for (int32_t i = k; i < head_dim_full / 2; i++)
                    if (!(rope_freqs[i] >= 1e20f))
                        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: rope_freqs.weight[%d] = %g: only 1 (rotated) then >= 1e20 (unrotated) is supported",
                                           m->path, i, rope_freqs[i]);
                if (k == 0 || G->n_rot != G->head_dim)
                    return ember_error(EMBER_ERR_FORMAT, "%s: rope_freqs.weight rotates no pair, or rope.dimension_count %d != key_length %d",
                                       m->path, G->n_rot, G->head_dim);
            }
        }
    }
#undef MAT
#undef VEC
    return EMBER_OK;
}

/* Per-layer embeddings for the ubatch, layer-major: returns ple (scratch
 * aux) with ple[(l * n + t) * P + i].
 * The rows of per_layer_token_embd, by far the largest tensor (1.48 GiB of
 * E4B's 4.2), never leave the mapped file as a whole: a GPU backend never
 * sees, so never uploads, the table (llama.cpp likewise keeps it on the CPU
 * as an input-layer tensor). When a layer's P values are whole blocks of
 * the table's format (E4B: P = 256, one Q4_K block), the host gathers the
 * ubatch's blocks straight from the file, already layer-major, into host
 * scratch (aux_host), and dequant_host_rows expands them where the
 * activations live (a GPU gets 6 KB a token instead of 43 KB of floats, and
 * the host copies instead of dequantizing: bench/results/cuda-h200.md,
 * session 29); else the host dequantizes each row and uploads the floats.
 * Same values as get_rows (ggml_get_rows: to_float of the row), times
 * sqrt(P) in f32. The model projection runs per layer (ple_proj_l) so that
 * each layer's block comes out contiguous. */
static float *gemma4_ple_inputs(const ember_run *r, const ember_ubatch *ub, const float *x)
{
    const ember_model *m = r->m;
    const g4_model *g = m->arch_priv;
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    const int32_t n = ub->n, n_layer = m->hp.n_layer;
    const int64_t P = g->n_pl, LP = (int64_t)n_layer * P;
    float *e = r->s->aux;               /* [L, n, P] */
    float *p = e + (int64_t)n * LP;     /* [L, n, P] */
    float *eh = r->s->aux_host;         /* host [L, n, P] */
    float *row = eh + (int64_t)n * LP;  /* host [L * P] */

    const ember_weight *w = &g->ple_tok_embd;
    const ember_quant_traits *tr = ember_quant_traits_get(w->type);
    const float sp = sqrtf((float)P);
    const int64_t bs = (int64_t)ember_type_block_size(w->type);
    if (P % bs == 0) {   /* [L][n] pieces of P values, each a run of whole blocks */
        const size_t pb = (size_t)(P / bs) * ember_type_block_bytes(w->type);
        uint8_t *raw = (uint8_t *)eh;
        for (int32_t t = 0; t < n; t++) {
            const uint8_t *src = (const uint8_t *)w->data + (size_t)ub->token[t] * w->row_bytes;
            for (int32_t l = 0; l < n_layer; l++) memcpy(raw + ((size_t)l * n + t) * pb, src + (size_t)l * pb, pb);
        }
        op->dequant_host_rows(be, w->type, raw, (int64_t)n_layer * n, P, e);
        op->scale(be, e, sp, n * LP);
    } else {
        for (int32_t t = 0; t < n; t++) {
            tr->to_float((const uint8_t *)w->data + (size_t)ub->token[t] * w->row_bytes, row, w->n_in);
            for (int32_t l = 0; l < n_layer; l++) {
                float *dst = eh + ((int64_t)l * n + t) * P;
                for (int64_t i = 0; i < P; i++) dst[i] = row[(int64_t)l * P + i] * sp;
            }
        }
        op->upload(be, e, eh, n * LP);
    }
    for (int32_t l = 0; l < n_layer; l += 3) {
        const ember_weight *w1 = l + 1 < n_layer ? &g->ple_proj_l[l + 1] : NULL;
        const ember_weight *w2 = l + 2 < n_layer ? &g->ple_proj_l[l + 2] : NULL;
        ember_project(r, x, n, &g->ple_proj_l[l], p + (int64_t)l * n * P, w1, w1 ? p + (int64_t)(l + 1) * n * P : NULL,
                      w2, w2 ? p + (int64_t)(l + 2) * n * P : NULL);
    }
    op->scale(be, p, 1.0f / sqrtf((float)m->hp.n_embd), n * LP);
    op->rms_norm(be, p, p, g->ple_proj_norm, (int64_t)n * n_layer, P, m->hp.norm_eps);
    op->add(be, e, p, n * LP);
    op->scale(be, e, 1.0f / sqrtf(2.0f), n * LP);
    return e;
}

/* The expert branch of a MoE layer: out [n, n_embd] = f2 (before its
 * post norm) for residual h [n, n_embd]. Tokens are grouped by expert so each
 * expert's weights are read once per ubatch. */
static void gemma4_moe(const ember_run *r, const g4_layer *G, int32_t n, const float *h, float *out)
{
    const ember_model *m = r->m;
    const g4_model *g = m->arch_priv;
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    ember_scratch *s = r->s;
    const int64_t n_embd = m->hp.n_embd;
    const int32_t E = g->n_expert, K = g->n_expert_used;
    float *u = r->s->aux + (int64_t)n * g->aux_moe;   /* [n, n_embd] expert input */
    float *gat = u + (int64_t)n * n_embd;             /* [n, n_embd] gathered rows */
    float *eo = gat + (int64_t)n * n_embd;            /* [n, n_embd] expert outputs */
    float *prob = eo + (int64_t)n * n_embd;           /* [n, E] */
    float *sel = prob + (int64_t)n * E;               /* [n, K] chosen experts (as floats) */
    float *wsel = sel + (int64_t)n * K;               /* [n, K] their weights; out follows */

    /* router */
    op->rms_norm(be, gat, h, G->router_scale, n, n_embd, m->hp.norm_eps);
    op->scale(be, gat, 1.0f / sqrtf((float)n_embd), n * n_embd);
    ember_project(r, gat, n, &G->router, prob, NULL, NULL, NULL, NULL);
    for (int32_t t = 0; t < n; t++) {
        float *p = prob + (int64_t)t * E;
        float mx = p[0], sum = 0.0f;
        for (int32_t e = 1; e < E; e++) if (p[e] > mx) mx = p[e];
        for (int32_t e = 0; e < E; e++) { p[e] = expf(p[e] - mx); sum += p[e]; }
        for (int32_t e = 0; e < E; e++) p[e] /= sum;
        float wsum = 0.0f;
        for (int32_t k = 0; k < K; k++) {   /* top K, ties to the lower id */
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
        for (int32_t k = 0; k < K; k++) {
            const int32_t e = (int32_t)sel[(int64_t)t * K + k];
            wsel[(int64_t)t * K + k] = wsel[(int64_t)t * K + k] / wsum * (G->exp_scale ? G->exp_scale[e] : 1.0f);
        }
    }

    /* experts */
    op->rms_norm(be, u, h, G->pre_norm_2, n, n_embd, m->hp.norm_eps);
    memset(out, 0, (size_t)n * n_embd * sizeof(float));
    for (int32_t e = 0; e < E; e++) {
        int32_t rows = 0;
        for (int32_t t = 0; t < n; t++)
            for (int32_t k = 0; k < K; k++)
                if ((int32_t)sel[(int64_t)t * K + k] == e)
                    memcpy(gat + (int64_t)rows++ * n_embd, u + (int64_t)t * n_embd, (size_t)n_embd * sizeof(float));
        if (rows == 0) continue;
        ember_project(r, gat, rows, &G->exp_gate[e], s->hb, &G->exp_up[e], s->hb2, NULL, NULL);
        op->geglu(be, s->hb, s->hb2, (int64_t)rows * g->n_ff_exp);
        ember_project(r, s->hb, rows, &G->exp_down[e], eo, NULL, NULL, NULL, NULL);
        int32_t row = 0;
        for (int32_t t = 0; t < n; t++)
            for (int32_t k = 0; k < K; k++)
                if ((int32_t)sel[(int64_t)t * K + k] == e) {
                    const float w = wsel[(int64_t)t * K + k];
                    const float *src = eo + (int64_t)row++ * n_embd;
                    float *dst = out + (int64_t)t * n_embd;
                    for (int64_t i = 0; i < n_embd; i++) dst[i] += w * src[i];
                }
    }
}

/* RoPE (NEOX) of x [n, n_head, head_dim] for layer G. Full layers with
 * rope_freqs use rope_ext (the freq factors leave the pairs past
 * partial_rotary_factor unrotated). */
static void gemma4_rope(const ember_run *r, const g4_layer *G, float *x, int32_t n, int32_t n_head,
                        const ember_pos *pos)
{
    const ember_backend_ops *op = r->be->ops;
    const int32_t hd = G->head_dim;
    if (!G->rope_freqs) {
        op->rope(r->be, x, n, n_head, hd, G->n_rot, pos, G->rope_base, 1.0f, EMBER_ROPE_NEOX);
        return;
    }
    op->rope_ext(r->be, x, n, n_head, hd, G->n_rot, pos, G->rope_base, 1.0f, EMBER_ROPE_NEOX, G->rope_freqs);
}

static void gemma4_forward(const ember_run *r, const ember_ubatch *ub)
{
    const ember_model *m = r->m;
    const g4_model *g = m->arch_priv;
    const ember_hparams *hp = &m->hp;
    const ember_backend_ops *op = r->be->ops;
    ember_backend *be = r->be;
    ember_scratch *s = r->s;
    const int32_t n = ub->n;
    const int64_t n_embd = hp->n_embd, P = g->n_pl;
    const float eps = hp->norm_eps;

    op->get_rows(be, &m->tok_embd, ub->token, n, s->x);
    op->scale(be, s->x, hp->embd_scale, n * n_embd);
    const float *ple = P > 0 ? gemma4_ple_inputs(r, ub, s->x) : NULL;

    for (int32_t il = 0; il < hp->n_layer; il++) {
        const ember_layer *L = &m->layers[il];
        const g4_layer *G = &g->layers[il];
        const int32_t hd = G->head_dim, n_kv = G->n_head_kv;

        /* attention */
        op->rms_norm(be, s->xb, s->x, L->attn_norm, n, n_embd, eps);
        if (!G->has_kv) {
            ember_project(r, s->xb, n, &L->wq, s->q, NULL, NULL, NULL, NULL);
        } else if (L->wv.data) {
            ember_project(r, s->xb, n, &L->wq, s->q, &L->wk, s->k, &L->wv, s->v);
        } else {   /* attention_k_eq_v: V is K before its norm */
            ember_project(r, s->xb, n, &L->wq, s->q, &L->wk, s->k, NULL, NULL);
            op->copy(be, s->v, s->k, (int64_t)n * n_kv * hd);
        }
        op->rms_norm(be, s->q, s->q, L->attn_q_norm, (int64_t)n * hp->n_head, hd, eps);
        gemma4_rope(r, G, s->q, n, hp->n_head, ub->pos);
        const ember_kv_layer_view view = ember_kv_layer(r->kv, G->kv_src);
        if (G->has_kv) {
            op->rms_norm(be, s->k, s->k, L->attn_k_norm, (int64_t)n * n_kv, hd, eps);
            op->rms_norm(be, s->v, s->v, NULL, (int64_t)n * n_kv, hd, eps);
            gemma4_rope(r, G, s->k, n, n_kv, ub->pos);
            op->kv_store(be, &view, s->k, s->v, ember_ubatch_rows(r->kv, ub, il), n);
        }
        const ember_attn_params ap = {
            .n_head = hp->n_head, .n_head_kv = n_kv, .head_dim_k = hd, .head_dim_v = hd,
            .kq_scale = hp->attn_scale, .n_swa = G->swa ? hp->n_swa : 0,
        };
        op->attention(be, &view, &ap, s->q, ember_ubatch_query(r->kv, ub, G->kv_src), n, s->att);
        ember_project(r, s->att, n, &L->wo, s->xb, NULL, NULL, NULL, NULL);
        op->rms_norm(be, s->xb, s->xb, L->post_attn_norm, n, n_embd, eps);
        op->add(be, s->x, s->xb, n * n_embd);

        /* feed-forward (double-wide on KV-shared layers when the file says so) */
        op->rms_norm(be, s->xb, s->x, L->ffn_norm, n, n_embd, eps);
        ember_project(r, s->xb, n, &L->ffn_gate, s->hb, &L->ffn_up, s->hb2, NULL, NULL);
        op->geglu(be, s->hb, s->hb2, (int64_t)n * G->n_ff);
        ember_project(r, s->hb, n, &L->ffn_down, s->xb, NULL, NULL, NULL, NULL);
        if (G->exp_gate) {
            /* the last slot of the MoE scratch (see gemma4_moe) */
            float *f2 = s->aux + (int64_t)n * (g->aux_moe + 3 * n_embd + g->n_expert + 2 * (int64_t)g->n_expert_used);
            op->rms_norm(be, s->xb, s->xb, G->post_norm_1, n, n_embd, eps);
            gemma4_moe(r, G, n, s->x, f2);
            op->rms_norm(be, f2, f2, G->post_norm_2, n, n_embd, eps);
            op->add(be, s->xb, f2, n * n_embd);
        }
        op->rms_norm(be, s->xb, s->xb, L->post_ffw_norm, n, n_embd, eps);
        op->add(be, s->x, s->xb, n * n_embd);

        /* per-layer embedding */
        if (ple) {
            float *gate = s->aux + 2 * (int64_t)n * hp->n_layer * P;   /* [n, P] */
            ember_project(r, s->x, n, &G->ple_gate, gate, NULL, NULL, NULL, NULL);
            op->geglu(be, gate, ple + (int64_t)il * n * P, (int64_t)n * P);
            ember_project(r, gate, n, &G->ple_proj, s->xb, NULL, NULL, NULL, NULL);
            op->rms_norm(be, s->xb, s->xb, G->ple_post_norm, n, n_embd, eps);
            op->add(be, s->x, s->xb, n * n_embd);
        }
        if (G->out_scale != 1.0f) op->scale(be, s->x, G->out_scale, n * n_embd);
        /* the residual stream after layer il = llama.cpp's input of layer il + 1
         * (t_layer_inp, src/models/gemma4.cpp:196), which DFlash drafts read */
        ember_layer_end(r, ub, il, s->x);
    }
    ember_output(r, ub, s->x);
}

const ember_arch ember_arch_gemma4 = {
    .name = "gemma4",
    .load = gemma4_load,
    .forward = gemma4_forward,
    .free = gemma4_free,
    /* scratch is read on the host only by MoE files, which set
     * ember_model.host_scratch */
    .device_scratch = true,
    .host_tokens = true,   /* the per-layer embeddings gather rows by token on the host */
    .hidden = true,
};

ember_status ember_gemma4_attn_info(const ember_model *m, int32_t il, ember_gemma4_attn *out)
{
    if (!m || m->arch != &ember_arch_gemma4 || !m->arch_priv || il < 0 || il >= m->hp.n_layer)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_gemma4_attn_info: %s is not a gemma4 model with layer %d",
                           m ? m->path : "(null)", il);
    const g4_layer *G = &((const g4_model *)m->arch_priv)->layers[il];
    *out = (ember_gemma4_attn){.swa = G->swa, .kv_src = G->kv_src, .n_head_kv = G->n_head_kv, .head_dim = G->head_dim,
                               .n_rot = G->n_rot, .rope_base = G->rope_base, .rope_freqs = G->rope_freqs};
    return EMBER_OK;
}
