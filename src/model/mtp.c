/*
 * mtp.c — the `gemma4-assistant` architecture: Gemma 4's multi-token-
 * prediction draft (Google's "-assistant" checkpoints; transformers
 * Gemma4AssistantForCausalLM), bound from the GGUF llama.cpp 0.3.36 writes
 * (conversion/gemma.py Gemma4AssistantModel) and run as llama.cpp does
 * (src/models/gemma4-assistant.cpp; docs/mtp.md).
 *
 * Owns: the draft's hyperparameters (per-layer type, head dims, RoPE, FFN
 * widths, output scales, embedding_length_out, nextn_predict_layers), its
 * tensors (nextn.pre_projection / post_projection, Q-only attention layers,
 * GELU FFN, tied LM head) and ember_mtp_ctx: per sequence, copies of the
 * target K/V the draft attends to. Must not: touch the target's context or
 * run as a model of its own (ember_arch.draft_only).
 *
 * The forward, one row (token t at position p, h = the target's final state
 * or the previous step's h_next, [n_bb]):
 *   u = W_pre [E_target[t] * sqrt(n_bb); h]
 *   per layer: a = rms(u) * attn_norm; q = rope(rms_head(W_q a) * q_norm, p)
 *     o = W_o softmax(q K^T) V over the target's K/V (scale 1; K/V of the
 *         target layer target n_layer - 2 (sliding) / n_layer - 1 (full)
 *         attends to, positions < p, sliding: p - key < sliding_window)
 *     u1 = u + rms(o) * post_attention_norm
 *     u = (u1 + rms(W_down (gelu_tanh(W_gate m) * W_up m)) * post_ffw_norm) * out_scale,
 *         m = rms(u1) * ffn_norm
 *   y = rms(u) * output_norm; logits = E_draft y; h_next = W_post y
 */
#include "model/mtp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/options.h"
#include "base/status.h"
#include "model/draft_kv.h"
#include "model/gemma4.h"

#define MTP_ROWS 32   /* positions per injection pass */

static ember_status mtp_load(ember_model *m)
{
    ember_hparams *hp = &m->hp;
    const int32_t n_layer = hp->n_layer;
    ember_status st;
    ember_mtp *d = calloc(1, sizeof *d);
    if (!d) return ember_error(EMBER_ERR_NOMEM, "%s: MTP draft", m->path);
    m->arch_priv = d;
    d->layers = calloc((size_t)n_layer, sizeof *d->layers);
    if (!d->layers) return ember_error(EMBER_ERR_NOMEM, "%s: MTP draft", m->path);

    /* hyperparameters (gemma4-assistant.cpp:3-19) */
    char key[160];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch_name);
    ember_gguf_arr a;
    st = ember_gguf_get_arr(m->gguf, key, &a);
    if (st == EMBER_ERR_NOT_FOUND) return ember_error(st, "%s: missing metadata key '%s'", m->path, key);
    if (st) return ember_error(st, "%s: metadata key '%s' is not an array", m->path, key);
    if (a.type != EMBER_GGUF_BOOL || a.n != (uint64_t)n_layer)
        return ember_error(EMBER_ERR_FORMAT, "%s: metadata key '%s' must be %d bools (has %llu of type %s)", m->path, key,
                           n_layer, (unsigned long long)a.n, ember_gguf_vtype_name(a.type));
    for (int32_t il = 0; il < n_layer; il++) hp->is_swa[il] = ember_gguf_arr_scalar(&a, (uint64_t)il).b;
    if ((st = ember_model_get_u32(m, "attention.sliding_window", true, &hp->n_swa))) return st;
    int32_t hd_full = hp->head_dim_k, hd_swa = 0, v_swa = 0, n_rot_full = hp->n_rot, n_rot_swa;
    if ((st = ember_model_get_u32(m, "attention.key_length_swa", true, &hd_swa))) return st;
    if ((st = ember_model_get_u32(m, "attention.value_length_swa", true, &v_swa))) return st;
    if (hd_full != hp->head_dim_v || hd_swa != v_swa)   /* gemma4-assistant.cpp:24-29 */
        return ember_error(EMBER_ERR_FORMAT, "%s: Gemma 4 assistant needs value_length == key_length (full %d/%d, sliding %d/%d)",
                           m->path, hd_full, hp->head_dim_v, hd_swa, v_swa);
    n_rot_swa = hd_swa;
    if ((st = ember_model_get_u32(m, "rope.dimension_count_swa", false, &n_rot_swa))) return st;
    if ((st = ember_model_get_u32(m, "embedding_length_out", false, &d->n_embd_backbone))) return st;
    d->n_layer_nextn = 0;
    if ((st = ember_model_get_u32(m, "nextn_predict_layers", false, &d->n_layer_nextn))) return st;
    if (d->n_embd_backbone == 0 || d->n_embd_backbone == hp->n_embd)   /* gemma4-assistant.cpp:30-32 */
        return ember_error(EMBER_ERR_FORMAT, "%s: Gemma 4 assistant requires %s.embedding_length_out to carry the target hidden size (has %d, embedding_length %d)",
                           m->path, m->arch_name, d->n_embd_backbone, hp->n_embd);
    if (d->n_embd_backbone < 1 || d->n_embd_backbone > (1 << 20) || d->n_layer_nextn < 1 || d->n_layer_nextn > n_layer ||
        hd_swa < 2 || hd_swa > 1024 || n_rot_swa < 2 || n_rot_swa > hd_swa || n_rot_swa % 2 || hp->n_swa < 1)
        return ember_error(EMBER_ERR_FORMAT, "%s: Gemma 4 assistant shapes out of range (embedding_length_out %d, nextn_predict_layers %d of %d, key_length_swa %d, rope.dimension_count_swa %d, sliding_window %d)",
                           m->path, d->n_embd_backbone, d->n_layer_nextn, n_layer, hd_swa, n_rot_swa, hp->n_swa);
    int32_t n_ff[EMBER_MAX_LAYERS];
    for (int32_t il = 0; il < n_layer; il++) n_ff[il] = hp->n_ff;
    if ((st = ember_model_get_u32_per_layer(m, "feed_forward_length", true, n_layer, n_ff))) return st;
    hp->attn_scale = 1.0f;   /* gemma4-assistant.cpp:12 */
    hp->embd_scale = 1.0f;
    hp->final_softcap = 0.0f;   /* written by the converter, not applied (gemma4-assistant.cpp:186-192) */

    /* tensors (gemma4-assistant.cpp:21-78); token_embd is the LM head (tied) */
    if (!m->tok_embd.data)
        return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor 'token_embd.weight' (the Gemma 4 assistant's LM head)", m->path);
    const int64_t E = hp->n_embd, B = d->n_embd_backbone;
    if ((st = ember_model_bind_matrix(m, "nextn.pre_projection.weight", 2 * B, E, true, &d->pre_proj))) return st;
    if ((st = ember_model_bind_matrix(m, "nextn.post_projection.weight", E, B, true, &d->post_proj))) return st;
    const float *rope_freqs = NULL;
    if (ember_gguf_get_tensor(m->gguf, "rope_freqs.weight"))
        if ((st = ember_model_bind_vector(m, "rope_freqs.weight", hd_full / 2, &rope_freqs))) return st;
    for (int32_t il = 0; il < d->n_layer_nextn; il++) {
        ember_layer *L = &m->layers[il];
        ember_mtp_layer *D = &d->layers[il];
        D->swa = hp->is_swa[il];
        D->head_dim = D->swa ? hd_swa : hd_full;
        D->n_rot = D->swa ? n_rot_swa : n_rot_full;
        D->rope_base = D->swa ? hp->rope_base_swa : hp->rope_base;
        D->n_ff = n_ff[il];
        if (D->n_ff < 1) return ember_error(EMBER_ERR_FORMAT, "%s: layer %d: feed_forward_length %d", m->path, il, D->n_ff);
        if (!D->swa) {
            if (!rope_freqs) return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor 'rope_freqs.weight' (full layer %d)", m->path, il);
            D->rope_freqs = rope_freqs;
        }
        const int64_t n_q = (int64_t)hp->n_head * D->head_dim;
        if ((st = ember_model_bind_layer_vector(m, il, "attn_norm", E, &L->attn_norm)) ||
            (st = ember_model_bind_layer_matrix(m, il, "attn_q", E, n_q, true, &L->wq)) ||
            (st = ember_model_bind_layer_vector(m, il, "attn_q_norm", D->head_dim, &L->attn_q_norm)) ||
            (st = ember_model_bind_layer_matrix(m, il, "attn_output", n_q, E, true, &L->wo)) ||
            (st = ember_model_bind_layer_vector(m, il, "post_attention_norm", E, &L->post_attn_norm)) ||
            (st = ember_model_bind_layer_vector(m, il, "ffn_norm", E, &L->ffn_norm)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ffn_gate", E, D->n_ff, true, &L->ffn_gate)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ffn_up", E, D->n_ff, true, &L->ffn_up)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ffn_down", D->n_ff, E, true, &L->ffn_down)) ||
            (st = ember_model_bind_layer_vector(m, il, "post_ffw_norm", E, &L->post_ffw_norm)))
            return st;
        const float *sc;
        if ((st = ember_model_bind_layer_vector(m, il, "layer_output_scale", 1, &sc))) return st;
        D->out_scale = sc[0];
    }
    /* the largest layer, for anything sized by the common fields */
    hp->head_dim_k = hp->head_dim_v = hd_full > hd_swa ? hd_full : hd_swa;
    for (int32_t il = 0; il < n_layer; il++)
        if (n_ff[il] > hp->n_ff) hp->n_ff = n_ff[il];
    return EMBER_OK;
}

static void mtp_free(ember_model *m)
{
    ember_mtp *d = m->arch_priv;
    if (d) free(d->layers);
    free(d);
    m->arch_priv = NULL;
}

const ember_mtp *ember_model_mtp(const ember_model *m)
{
    return m && m->arch == &ember_arch_gemma4_assistant ? m->arch_priv : NULL;
}

/* The K/V owner the draft's layers of type swa read: the layer target layer
 * n_layer - 2 (sliding) / n_layer - 1 (full) attends to (llama-model.cpp:2812-2820). */
static ember_status target_src(const ember_model *target, bool swa, ember_gemma4_attn *src, int32_t *il_out)
{
    const int32_t n = ember_model_n_layer(target);
    ember_gemma4_attn at;
    ember_status st = ember_gemma4_attn_info(target, swa ? n - 2 : n - 1, &at);
    if (st) return st;
    if (at.swa != swa)
        return ember_error(EMBER_ERR_INVALID_ARG, "MTP draft: target %s layer %d is %s, the draft's %s layers read it",
                           target->path, swa ? n - 2 : n - 1, at.swa ? "sliding" : "full", swa ? "sliding" : "full");
    *il_out = at.kv_src;
    return ember_gemma4_attn_info(target, at.kv_src, src);
}

ember_status ember_mtp_check_target(const ember_model *draft, const ember_model *target)
{
    const ember_mtp *d = ember_model_mtp(draft);
    if (!d) return ember_error(EMBER_ERR_INVALID_ARG, "MTP: %s is not a gemma4-assistant draft", draft ? draft->path : "(null)");
    if (!target || strcmp(ember_model_arch(target), "gemma4") != 0 || ember_model_n_layer(target) < 2)
        return ember_error(EMBER_ERR_INVALID_ARG, "MTP draft %s: the target %s is not a gemma4 model of 2 or more layers",
                           draft->path, target ? target->path : "(null)");
    if (d->n_embd_backbone != target->hp.n_embd)
        return ember_error(EMBER_ERR_INVALID_ARG, "MTP draft %s: embedding_length_out %d, the target %s has n_embd %d", draft->path,
                           d->n_embd_backbone, target->path, target->hp.n_embd);
    if (draft->hp.n_vocab != target->hp.n_vocab)
        return ember_error(EMBER_ERR_INVALID_ARG, "MTP draft %s: vocabulary of %d tokens, the target has %d", draft->path,
                           draft->hp.n_vocab, target->hp.n_vocab);
    for (int32_t il = 0; il < d->n_layer_nextn; il++) {
        ember_gemma4_attn src;
        int32_t sil;
        ember_status st = target_src(target, d->layers[il].swa, &src, &sil);
        if (st) return st;
        if (src.head_dim != d->layers[il].head_dim || draft->hp.n_head % src.n_head_kv != 0)
            return ember_error(EMBER_ERR_INVALID_ARG, "MTP draft %s: layer %d has %d heads of %d, the target's layer %d K/V %d heads of %d",
                               draft->path, il, draft->hp.n_head, d->layers[il].head_dim, sil, src.n_head_kv, src.head_dim);
        if (sil < 1)
            return ember_error(EMBER_ERR_UNSUPPORTED, "MTP draft %s: it reads the K/V of target layer 0, whose input is not captured",
                               draft->path);
    }
    return EMBER_OK;
}


/* ---- the forward ---------------------------------------------------------- */

/* Every step is backend ops, as DFlash's (dflash.c): scratch in the
 * backend's activation memory, the K/V copies in a draft_kv store (one view
 * per K/V owner) written by kv_store and read by the attention op; the host
 * gives the gathered target states (uploaded), h, and gets the logits and
 * h_next. */
struct ember_mtp_ctx {
    const ember_model *m, *t;
    const ember_mtp *d;
    ember_backend *be;
    int32_t n_seq, n_ctx;
    int32_t n_src;                /* distinct K/V owners read (1 or 2) */
    int32_t src_layer[2];         /* their target layers */
    ember_gemma4_attn src[2];
    int64_t src_nk[2];            /* K (and V) floats per position of each */
    int32_t *layer_src;           /* [draft n_layer] index into src */
    ember_draft_kv kv;            /* view s: owner s's K/V, [n_seq][n_ctx] positions */
    int32_t *n_pos;               /* [n_seq] */
    void *act;                    /* the backend's activation memory holding the scratch below */
    float *xh, *u, *a, *q, *att, *o, *hb, *hb2, *y, *xin, *kb, *vb;
    float *xin_h;                 /* host [MTP_ROWS][n_bb]: one owner's rows gathered for upload */
    ember_pos *pos;               /* [MTP_ROWS] host */
    int64_t *rows;                /* [MTP_ROWS] host */
};

void ember_mtp_ctx_free(ember_mtp_ctx *c)
{
    if (!c) return;
    if (c->be && c->act) c->be->ops->act_free(c->be, c->act);
    ember_draft_kv_free(&c->kv);
    ember_backend_free(c->be);
    free(c->n_pos);
    free(c->layer_src);
    free(c->xin_h);
    free(c->pos);
    free(c->rows);
    free(c);
}

ember_status ember_mtp_ctx_new(const ember_model *draft, const ember_model *target, int32_t n_seq, int32_t n_ctx,
                               int32_t n_threads, ember_mtp_ctx **out)
{
    *out = NULL;
    ember_status st = ember_mtp_check_target(draft, target);
    if (st) return st;
    if (n_seq < 1 || n_ctx < 1 || n_ctx > (1 << 24))
        return ember_error(EMBER_ERR_INVALID_ARG, "MTP: %d sequences of %d positions out of range", n_seq, n_ctx);
    ember_mtp_ctx *c = calloc(1, sizeof *c);
    if (!c) return ember_error(EMBER_ERR_NOMEM, "MTP context");
    c->m = draft;
    c->t = target;
    c->d = ember_model_mtp(draft);
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    const ember_hparams *hp = &draft->hp;
    c->layer_src = calloc((size_t)hp->n_layer, sizeof *c->layer_src);
    if (!c->layer_src) { ember_mtp_ctx_free(c); return ember_error(EMBER_ERR_NOMEM, "MTP context"); }
    int64_t max_q = 0, max_ff = 0, max_k = 0;
    bool any_swa = false;
    for (int32_t il = 0; il < c->d->n_layer_nextn; il++) {
        ember_gemma4_attn src;
        int32_t sil, k = 0;
        target_src(target, c->d->layers[il].swa, &src, &sil);   /* checked above */
        any_swa |= c->d->layers[il].swa;
        while (k < c->n_src && c->src_layer[k] != sil) k++;
        if (k == c->n_src) {
            c->src_layer[k] = sil;
            c->src[k] = src;
            c->src_nk[k] = (int64_t)src.n_head_kv * src.head_dim;
            if (c->src_nk[k] > max_k) max_k = c->src_nk[k];
            c->n_src++;
        }
        c->layer_src[il] = k;
        const int64_t nq = (int64_t)hp->n_head * c->d->layers[il].head_dim;
        if (nq > max_q) max_q = nq;
        if (c->d->layers[il].n_ff > max_ff) max_ff = c->d->layers[il].n_ff;
    }
    if (any_swa && hp->n_swa < 2) {   /* a window of 1 leaves a step no key before its position */
        ember_mtp_ctx_free(c);
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: MTP sliding_window %d (at least 2)", draft->path, hp->n_swa);
    }
    const int64_t E = hp->n_embd, B = c->d->n_embd_backbone, R = MTP_ROWS;
    int64_t max_in = 2 * B;
    if (max_q > max_in) max_in = max_q;
    if (max_ff > max_in) max_in = max_ff;
    if (E > max_in) max_in = E;
    const ember_backend_limits lim = {.max_tokens = R, .max_n_in = max_in, .max_kv_tokens = n_ctx,
                                      .max_head_dim = hp->head_dim_k};
    if ((st = ember_draft_backend_new(draft, n_threads, &lim, &c->be))) { ember_mtp_ctx_free(c); return st; }
    if ((st = ember_draft_kv_init(&c->kv, c->be, n_seq, n_ctx, c->n_src, c->src_nk))) { ember_mtp_ctx_free(c); return st; }
    const int64_t sizes[12] = {2 * B, E, E, max_q, max_q, E, max_ff, max_ff, E, R * B, R * max_k, R * max_k};
    int64_t total = 0;
    for (int i = 0; i < 12; i++) total += (sizes[i] + 15) & ~(int64_t)15;
    c->act = c->be->ops->act_alloc(c->be, (size_t)total * sizeof(float));
    c->n_pos = calloc((size_t)n_seq, sizeof *c->n_pos);
    c->xin_h = malloc((size_t)(R * B) * sizeof(float));
    c->pos = malloc((size_t)R * sizeof *c->pos);
    c->rows = malloc((size_t)R * sizeof *c->rows);
    if (!c->act || !c->n_pos || !c->xin_h || !c->pos || !c->rows) {
        ember_mtp_ctx_free(c);
        return ember_error(EMBER_ERR_NOMEM, "MTP: scratch of %lld floats", (long long)total);
    }
    float *f = c->act;
    float **dst[12] = {&c->xh, &c->u, &c->a, &c->q, &c->att, &c->o, &c->hb, &c->hb2, &c->y, &c->xin, &c->kb, &c->vb};
    for (int i = 0; i < 12; i++) { *dst[i] = f; f += (sizes[i] + 15) & ~(int64_t)15; }
    *out = c;
    return EMBER_OK;
}

const char *ember_mtp_ctx_backend(const ember_mtp_ctx *c) { return c->be->ops->name; }

uint64_t ember_mtp_ctx_kv_bytes(const ember_mtp_ctx *c) { return ember_draft_kv_bytes(&c->kv); }

int32_t ember_mtp_hidden_layers(const ember_mtp_ctx *c, int32_t *layers)
{
    for (int32_t k = 0; k < c->n_src; k++) layers[k] = c->src_layer[k] - 1;
    layers[c->n_src] = ember_model_n_layer(c->t) - 1;
    return c->n_src + 1;
}

int32_t ember_mtp_n_pos(const ember_mtp_ctx *c, int32_t seq)
{
    return seq >= 0 && seq < c->n_seq ? c->n_pos[seq] : 0;
}

void ember_mtp_fork(ember_mtp_ctx *c, int32_t src, int32_t dst, int32_t n)
{
    if (src < 0 || src >= c->n_seq || dst < 0 || dst >= c->n_seq || src == dst || n < 0) return;
    if (n > c->n_pos[src]) { c->n_pos[dst] = 0; return; }
    ember_draft_kv_fork(&c->kv, src, dst, n);
    c->n_pos[dst] = n;
}

void ember_mtp_truncate(ember_mtp_ctx *c, int32_t seq, int32_t n_pos)
{
    if (seq >= 0 && seq < c->n_seq && n_pos >= 0 && n_pos < c->n_pos[seq]) c->n_pos[seq] = n_pos;
}

static void rope_src(ember_mtp_ctx *c, const ember_gemma4_attn *S, float *x, int32_t n, int32_t n_head)
{
    const ember_backend_ops *op = c->be->ops;
    if (S->rope_freqs)
        op->rope_ext(c->be, x, n, n_head, S->head_dim, S->n_rot, c->pos, S->rope_base, 1.0f, EMBER_ROPE_NEOX, S->rope_freqs);
    else
        op->rope(c->be, x, n, n_head, S->head_dim, S->n_rot, c->pos, S->rope_base, 1.0f, EMBER_ROPE_NEOX);
}

ember_status ember_mtp_inject(ember_mtp_ctx *c, int32_t seq, int32_t n, const float *in)
{
    if (seq < 0 || seq >= c->n_seq || n < 0 || (n > 0 && !in))
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_mtp_inject: sequence %d / %d rows out of range", seq, n);
    if (c->n_pos[seq] + n > c->n_ctx)
        return ember_error(EMBER_ERR_RANGE, "ember_mtp_inject: %d + %d positions exceed the draft context of %d", c->n_pos[seq],
                           n, c->n_ctx);
    const ember_backend_ops *op = c->be->ops;
    ember_backend *be = c->be;
    const int64_t B = c->d->n_embd_backbone;
    const float eps = c->t->hp.norm_eps;
    for (int32_t r0 = 0; r0 < n; r0 += MTP_ROWS) {
        const int32_t k = n - r0 < MTP_ROWS ? n - r0 : MTP_ROWS;
        const int32_t p0 = c->n_pos[seq];
        for (int32_t i = 0; i < k; i++) {
            c->pos[i] = p0 + i;
            c->rows[i] = ember_draft_kv_row(&c->kv, seq, p0 + i);
        }
        for (int32_t s = 0; s < c->n_src; s++) {
            const ember_gemma4_attn *S = &c->src[s];
            const ember_layer *L = &c->t->layers[c->src_layer[s]];
            for (int32_t i = 0; i < k; i++)
                memcpy(c->xin_h + (size_t)i * (size_t)B, in + ((size_t)(r0 + i) * (size_t)c->n_src + (size_t)s) * (size_t)B,
                       sizeof(float) * (size_t)B);
            op->upload(be, c->xin, c->xin_h, (int64_t)k * B);
            /* the target's K/V of layer src_layer[s] (gemma4.c forward) */
            op->rms_norm(be, c->xin, c->xin, L->attn_norm, k, B, eps);
            if (L->wv.data) {
                const ember_weight *ws[2] = {&L->wk, &L->wv};
                float *ys[2] = {c->kb, c->vb};
                op->matmul(be, c->xin, k, 2, ws, ys);
            } else {   /* attention_k_eq_v: V is K before its norm */
                const ember_weight *ws = &L->wk;
                float *ys = c->kb;
                op->matmul(be, c->xin, k, 1, &ws, &ys);
                op->copy(be, c->vb, c->kb, (int64_t)k * c->src_nk[s]);
            }
            op->rms_norm(be, c->kb, c->kb, L->attn_k_norm, (int64_t)k * S->n_head_kv, S->head_dim, eps);
            op->rms_norm(be, c->vb, c->vb, NULL, (int64_t)k * S->n_head_kv, S->head_dim, eps);
            rope_src(c, S, c->kb, k, S->n_head_kv);
            op->kv_store(be, &c->kv.view[s], c->kb, c->vb, c->rows, k);
        }
        c->n_pos[seq] = p0 + k;
    }
    return EMBER_OK;
}

void ember_mtp_final_norm(ember_mtp_ctx *c, const float *x, float *h)
{
    c->be->ops->rms_norm(c->be, h, x, c->t->output_norm, 1, c->d->n_embd_backbone, c->t->hp.norm_eps);
}

ember_status ember_mtp_step(ember_mtp_ctx *c, int32_t seq, ember_token token, int32_t pos, const float *h, float *logits,
                            float *h_next)
{
    if (seq < 0 || seq >= c->n_seq || !h || !logits || !h_next)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_mtp_step: sequence %d out of range", seq);
    if (token < 0 || token >= c->t->hp.n_vocab)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_mtp_step: token %d not in [0, %d)", token, c->t->hp.n_vocab);
    if (pos < 1 || pos > c->n_pos[seq])
        return ember_error(EMBER_ERR_RANGE, "ember_mtp_step: position %d needs the K/V of positions [0, %d), %d are held", pos,
                           pos, c->n_pos[seq]);
    const ember_hparams *hp = &c->m->hp;
    const ember_backend_ops *op = c->be->ops;
    ember_backend *be = c->be;
    const int64_t E = hp->n_embd, B = c->d->n_embd_backbone;
    const float eps = hp->norm_eps;
    /* u = W_pre [E_target[t] * sqrt(B); h] (gemma4-assistant.cpp:108-118) */
    /* the target's embedding row, expanded from the mapped file where the
     * activations live (not get_rows: a GPU draft would upload the target's
     * whole table for one row a step) */
    const ember_weight *te = &c->t->tok_embd;
    op->dequant_host_rows(be, te->type, (const char *)te->data + (size_t)token * te->row_bytes, 1, te->n_in, c->xh);
    op->scale(be, c->xh, sqrtf((float)B), B);
    op->upload(be, c->xh + B, h, B);   /* h is read now: h_next may be the same host row */
    {
        const ember_weight *w = &c->d->pre_proj;
        float *y = c->u;
        op->matmul(be, c->xh, 1, 1, &w, &y);
    }
    c->pos[0] = pos;
    /* the step's query sees the owner's keys [p_lo, pos): the attention op's
     * query at pos - 1, whose window of n_swa - 1 keys starts at
     * pos - n_swa + 1 (llama.cpp's standard window: key p is masked when
     * pos - p >= n_swa, llama-hparams.h:482-486) */
    const ember_attn_query qy = {.blocks = ember_draft_kv_blocks(&c->kv, seq), .pos = pos - 1};
    for (int32_t il = 0; il < c->d->n_layer_nextn; il++) {
        const ember_layer *L = &c->m->layers[il];
        const ember_mtp_layer *D = &c->d->layers[il];
        const int32_t hd = D->head_dim, s = c->layer_src[il];
        op->rms_norm(be, c->a, c->u, L->attn_norm, 1, E, eps);
        const ember_weight *wq = &L->wq;
        float *yq = c->q;
        op->matmul(be, c->a, 1, 1, &wq, &yq);
        op->rms_norm(be, c->q, c->q, L->attn_q_norm, hp->n_head, hd, eps);
        if (D->rope_freqs)
            op->rope_ext(be, c->q, 1, hp->n_head, hd, D->n_rot, c->pos, D->rope_base, 1.0f, EMBER_ROPE_NEOX, D->rope_freqs);
        else
            op->rope(be, c->q, 1, hp->n_head, hd, D->n_rot, c->pos, D->rope_base, 1.0f, EMBER_ROPE_NEOX);
        const ember_attn_params ap = {.n_head = hp->n_head, .n_head_kv = c->src[s].n_head_kv, .head_dim_k = hd,
                                      .head_dim_v = hd, .kq_scale = 1.0f, .n_swa = D->swa ? hp->n_swa - 1 : 0};
        op->attention(be, &c->kv.view[s], &ap, c->q, &qy, 1, c->att);
        const ember_weight *wo = &L->wo;
        float *yo = c->o;
        op->matmul(be, c->att, 1, 1, &wo, &yo);
        op->rms_norm(be, c->o, c->o, L->post_attn_norm, 1, E, eps);
        op->add(be, c->u, c->o, E);                         /* u1 */
        op->rms_norm(be, c->a, c->u, L->ffn_norm, 1, E, eps);
        const ember_weight *wf[2] = {&L->ffn_gate, &L->ffn_up};
        float *yf[2] = {c->hb, c->hb2};
        op->matmul(be, c->a, 1, 2, wf, yf);
        op->geglu(be, c->hb, c->hb2, D->n_ff);
        const ember_weight *wd = &L->ffn_down;
        float *yd = c->o;
        op->matmul(be, c->hb, 1, 1, &wd, &yd);
        op->rms_norm(be, c->o, c->o, L->post_ffw_norm, 1, E, eps);
        op->add(be, c->u, c->o, E);
        if (D->out_scale != 1.0f) op->scale(be, c->u, D->out_scale, E);
    }
    op->rms_norm(be, c->y, c->u, c->m->output_norm, 1, E, eps);
    const ember_weight *wout = &c->m->output, *wpost = &c->d->post_proj;
    op->matmul(be, c->y, 1, 1, &wout, &logits);    /* host rows */
    op->matmul(be, c->y, 1, 1, &wpost, &h_next);
    return EMBER_OK;
}

const ember_arch ember_arch_gemma4_assistant = {
    .name = "gemma4-assistant",
    .load = mtp_load,
    .forward = NULL,
    .free = mtp_free,
    .draft_only = true,
};
