/*
 * model.c — loading a GGUF model: architecture registry, common
 * hyperparameters, binding weights in place, and the public accessors.
 *
 * Owns: ember_model_load/free and the ember_model_* getters, the helpers that
 * model files use to bind tensors and read "<arch>.*" keys, and the shared
 * transformer pieces (project, attend, output). Must not: hold per-context
 * state or copy weights (they stay in the mapping, in their block format).
 *
 * Key names: llama.cpp src/llama-arch.cpp (LLM_KV_*), gguf-py constants.py.
 */
#include "model/model.h"
#include "base/status.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ember_arch *const registry[] = {
    &ember_arch_dflash,
    &ember_arch_gemma3,
    &ember_arch_gemma4,
    &ember_arch_gemma4_assistant,
    &ember_arch_llama,
    &ember_arch_qwen3,
    &ember_arch_qwen35,
    &ember_arch_qwen35moe,
};

ember_model_params ember_model_default_params(void)
{
    ember_model_params p = {.n_gpu_layers = 0, .device = 0, .use_mmap = true};
    return p;
}

/* ---- metadata helpers ---------------------------------------------------- */

ember_status ember_model_get_u32(const ember_model *m, const char *suffix, bool required, int32_t *out)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    uint32_t v;
    ember_status st = ember_gguf_get_u32(m->gguf, key, &v);
    if (st == EMBER_ERR_NOT_FOUND && !required) return EMBER_OK;
    if (st == EMBER_ERR_NOT_FOUND) return ember_error(st, "%s: missing metadata key '%s'", m->path, key);
    if (st != EMBER_OK) return ember_error(st, "%s: metadata key '%s' is not an unsigned 32-bit integer", m->path, key);
    if (v > INT32_MAX) return ember_error(EMBER_ERR_FORMAT, "%s: metadata key '%s' = %u is too large", m->path, key, v);
    *out = (int32_t)v;
    return EMBER_OK;
}

ember_status ember_model_get_f32(const ember_model *m, const char *suffix, bool required, float *out)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    float v;
    ember_status st = ember_gguf_get_f32(m->gguf, key, &v);
    if (st == EMBER_ERR_NOT_FOUND && !required) return EMBER_OK;
    if (st == EMBER_ERR_NOT_FOUND) return ember_error(st, "%s: missing metadata key '%s'", m->path, key);
    if (st != EMBER_OK) return ember_error(st, "%s: metadata key '%s' is not a number", m->path, key);
    if (!isfinite(v)) return ember_error(EMBER_ERR_FORMAT, "%s: metadata key '%s' is not finite", m->path, key);
    *out = v;
    return EMBER_OK;
}

ember_status ember_model_get_u32_per_layer(const ember_model *m, const char *suffix, bool required,
                                           int32_t n_layer, int32_t *out)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    const int64_t i = ember_gguf_find_key(m->gguf, key);
    if (i < 0) {
        if (!required) return EMBER_OK;
        return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing metadata key '%s'", m->path, key);
    }
    if (ember_gguf_kv_type(m->gguf, i) != EMBER_GGUF_ARRAY) {
        int32_t v = 0;
        ember_status st = ember_model_get_u32(m, suffix, true, &v);
        if (st) return st;
        for (int32_t il = 0; il < n_layer; il++) out[il] = v;
        return EMBER_OK;
    }
    ember_gguf_arr a;
    ember_status st = ember_gguf_kv_arr(m->gguf, i, &a);
    if (st) return st;
    const bool is_int = a.type == EMBER_GGUF_U8 || a.type == EMBER_GGUF_I8 || a.type == EMBER_GGUF_U16 ||
                        a.type == EMBER_GGUF_I16 || a.type == EMBER_GGUF_U32 || a.type == EMBER_GGUF_I32 ||
                        a.type == EMBER_GGUF_U64 || a.type == EMBER_GGUF_I64;
    if (!is_int || a.n != (uint64_t)n_layer)
        return ember_error(EMBER_ERR_FORMAT, "%s: metadata key '%s' must be an integer or an array of %d integers (has %llu elements of type %s)",
                           m->path, key, n_layer, (unsigned long long)a.n, ember_gguf_vtype_name(a.type));
    const bool is_signed = a.type == EMBER_GGUF_I8 || a.type == EMBER_GGUF_I16 || a.type == EMBER_GGUF_I32 || a.type == EMBER_GGUF_I64;
    for (int32_t il = 0; il < n_layer; il++) {
        const ember_gguf_scalar v = ember_gguf_arr_scalar(&a, (uint64_t)il);
        if (is_signed ? (v.i < 0 || v.i > INT32_MAX) : v.u > INT32_MAX)
            return ember_error(EMBER_ERR_FORMAT, "%s: metadata key '%s'[%d] is out of range", m->path, key, il);
        out[il] = is_signed ? (int32_t)v.i : (int32_t)v.u;
    }
    return EMBER_OK;
}

/* The largest per-layer value of "<arch>.<suffix>" (scalar or per-layer array). */
static ember_status get_u32_max(const ember_model *m, const char *suffix, bool required, int32_t n_layer, int32_t *out)
{
    int32_t v[EMBER_MAX_LAYERS];
    for (int32_t il = 0; il < n_layer; il++) v[il] = *out;
    ember_status st = ember_model_get_u32_per_layer(m, suffix, required, n_layer, v);
    if (st) return st;
    for (int32_t il = 0; il < n_layer; il++) if (il == 0 || v[il] > *out) *out = v[il];
    return EMBER_OK;
}

/* ---- tensor binding ------------------------------------------------------ */

ember_status ember_model_bind_matrix(ember_model *m, const char *name, int64_t n_in, int64_t n_out,
                                     bool required, ember_weight *w)
{
    memset(w, 0, sizeof *w);
    const ember_gguf_tensor *t = ember_gguf_get_tensor(m->gguf, name);
    if (!t) {
        if (!required) return EMBER_OK;
        return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor '%s' (architecture %s)", m->path, name, m->arch_name);
    }
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
        return ember_error(EMBER_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                           m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)t->ne[3], (long long)n_in, (long long)n_out);
    const ember_quant_traits *tr = ember_quant_traits_get(t->type);
    if (!tr || !tr->vec_dot || !tr->to_float)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which has no CPU kernels",
                           m->path, name, ember_type_name(t->type));
    const ember_quant_traits *at = ember_quant_traits_get(tr->vec_dot_type);
    if (tr->vec_dot_type != EMBER_TYPE_F32 && tr->vec_dot_type != EMBER_TYPE_F16 && (!at || !at->from_float_ref))
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: tensor '%s' (%s) needs activations in %s, which cannot be quantized",
                           m->path, name, ember_type_name(t->type), ember_type_name(tr->vec_dot_type));
    uint64_t rb;
    if (!ember_type_row_bytes(t->type, (uint64_t)n_in, &rb) || rb * (uint64_t)n_out != t->nbytes)
        return ember_error(EMBER_ERR_FORMAT, "%s: tensor '%s' (%s) rows of %lld elements are not whole blocks",
                           m->path, name, ember_type_name(t->type), (long long)n_in);
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = (size_t)rb;
    w->data = t->data;
    w->name = t->name;
    return EMBER_OK;
}

ember_status ember_model_bind_vector(ember_model *m, const char *name, int64_t n, const float **out)
{
    const ember_gguf_tensor *t = ember_gguf_get_tensor(m->gguf, name);
    if (!t) return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor '%s' (architecture %s)", m->path, name, m->arch_name);
    if (t->type != EMBER_TYPE_F32)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, expected F32", m->path, name, ember_type_name(t->type));
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ember_error(EMBER_ERR_FORMAT, "%s: tensor '%s' has %lld x %lld elements, expected %lld",
                           m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)n);
    if (((uintptr_t)t->data & 3) != 0)
        return ember_error(EMBER_ERR_FORMAT, "%s: tensor '%s' data is not 4-byte aligned", m->path, name);
    *out = t->data;
    return EMBER_OK;
}

ember_status ember_model_bind_layer_matrix(ember_model *m, int32_t il, const char *suffix, int64_t n_in, int64_t n_out,
                                           bool required, ember_weight *w)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", (int)il, suffix);
    return ember_model_bind_matrix(m, name, n_in, n_out, required, w);
}

ember_status ember_model_bind_layer_vector(ember_model *m, int32_t il, const char *suffix, int64_t n, const float **out)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", (int)il, suffix);
    return ember_model_bind_vector(m, name, n, out);
}

ember_status ember_model_bind_decoder_layers(ember_model *m, bool qk_norm)
{
    const ember_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff;
    const int64_t n_q = (int64_t)hp->n_head * hp->head_dim_k, n_o = (int64_t)hp->n_head * hp->head_dim_v;
    const int64_t n_k = (int64_t)hp->n_head_kv * hp->head_dim_k, n_v = (int64_t)hp->n_head_kv * hp->head_dim_v;
    ember_status st = EMBER_OK;
    for (int32_t il = 0; il < hp->n_layer && st == EMBER_OK; il++) {
        ember_layer *L = &m->layers[il];
        if ((st = ember_model_bind_layer_vector(m, il, "attn_norm", n_embd, &L->attn_norm)) ||
            (st = ember_model_bind_layer_matrix(m, il, "attn_q", n_embd, n_q, true, &L->wq)) ||
            (st = ember_model_bind_layer_matrix(m, il, "attn_k", n_embd, n_k, true, &L->wk)) ||
            (st = ember_model_bind_layer_matrix(m, il, "attn_v", n_embd, n_v, true, &L->wv)) ||
            (st = ember_model_bind_layer_matrix(m, il, "attn_output", n_o, n_embd, true, &L->wo)) ||
            (st = ember_model_bind_layer_vector(m, il, "ffn_norm", n_embd, &L->ffn_norm)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ffn_gate", n_embd, n_ff, true, &L->ffn_gate)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ffn_up", n_embd, n_ff, true, &L->ffn_up)) ||
            (st = ember_model_bind_layer_matrix(m, il, "ffn_down", n_ff, n_embd, true, &L->ffn_down)))
            break;
        if (qk_norm &&
            ((st = ember_model_bind_layer_vector(m, il, "attn_q_norm", hp->head_dim_k, &L->attn_q_norm)) ||
             (st = ember_model_bind_layer_vector(m, il, "attn_k_norm", hp->head_dim_k, &L->attn_k_norm))))
            break;
    }
    return st;
}

/* ---- common hyperparameters --------------------------------------------- */

static ember_status load_common_hparams(ember_model *m)
{
    ember_hparams *hp = &m->hp;
    ember_status st;
    if ((st = ember_model_get_u32(m, "context_length", true, &hp->n_ctx_train))) return st;
    if ((st = ember_model_get_u32(m, "embedding_length", true, &hp->n_embd))) return st;
    if ((st = ember_model_get_u32(m, "block_count", true, &hp->n_layer))) return st;
    if ((st = ember_model_get_u32(m, "attention.head_count", true, &hp->n_head))) return st;
    if (hp->n_layer < 1 || hp->n_layer > EMBER_MAX_LAYERS)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: %s.block_count %d not in [1, %d]", m->path, m->arch_name, hp->n_layer, EMBER_MAX_LAYERS);
    /* per-layer arrays (gemma4): the largest value sizes scratch and KV rows */
    if ((st = get_u32_max(m, "feed_forward_length", !m->arch->ffn_optional, hp->n_layer, &hp->n_ff))) return st;
    hp->n_head_kv = hp->n_head;
    if ((st = get_u32_max(m, "attention.head_count_kv", false, hp->n_layer, &hp->n_head_kv))) return st;
    if (hp->n_embd < 1 || hp->n_layer < 1 || (hp->n_ff < 1 && !m->arch->ffn_optional) || hp->n_head < 1 || hp->n_head_kv < 1 ||
        hp->n_ctx_train < 1)
        return ember_error(EMBER_ERR_FORMAT, "%s: hyperparameters must be positive (n_embd %d, n_layer %d, n_ff %d, n_head %d, n_head_kv %d, context_length %d)",
                           m->path, hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv, hp->n_ctx_train);
    if (hp->n_layer > EMBER_MAX_LAYERS)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: %s.block_count %d exceeds %d", m->path, m->arch_name, hp->n_layer, EMBER_MAX_LAYERS);
    if (hp->n_head % hp->n_head_kv != 0)
        return ember_error(EMBER_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", m->path, hp->n_head, hp->n_head_kv);
    hp->head_dim_k = hp->n_embd / hp->n_head;
    if ((st = ember_model_get_u32(m, "attention.key_length", false, &hp->head_dim_k))) return st;
    hp->head_dim_v = hp->head_dim_k;
    if ((st = ember_model_get_u32(m, "attention.value_length", false, &hp->head_dim_v))) return st;
    hp->n_rot = hp->head_dim_k;
    if ((st = ember_model_get_u32(m, "rope.dimension_count", false, &hp->n_rot))) return st;
    if (hp->head_dim_k < 1 || hp->head_dim_v < 1 || hp->head_dim_k > 1024 || hp->head_dim_v > 1024 ||
        hp->n_rot < 2 || hp->n_rot > hp->head_dim_k || hp->n_rot % 2 != 0)
        return ember_error(EMBER_ERR_FORMAT, "%s: head sizes out of range (key_length %d, value_length %d, rope.dimension_count %d)",
                           m->path, hp->head_dim_k, hp->head_dim_v, hp->n_rot);
    if ((st = ember_model_get_f32(m, "attention.layer_norm_rms_epsilon", true, &hp->norm_eps))) return st;
    hp->rope_base = 10000.0f;
    if ((st = ember_model_get_f32(m, "rope.freq_base", false, &hp->rope_base))) return st;
    hp->rope_base_swa = 10000.0f;
    if ((st = ember_model_get_f32(m, "rope.freq_base_swa", false, &hp->rope_base_swa))) return st;
    hp->rope_scale = 1.0f;
    {
        char key[160];
        snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
        const char *type = NULL;
        if (ember_gguf_get_str(m->gguf, key, &type, NULL) == EMBER_OK && strcmp(type, "none") != 0) {
            if (strcmp(type, "linear") != 0)
                return ember_error(EMBER_ERR_UNSUPPORTED, "%s: %s = '%s' is not supported (none, linear)", m->path, key, type);
            float factor = 1.0f;
            if ((st = ember_model_get_f32(m, "rope.scaling.factor", true, &factor))) return st;
            if (factor <= 0.0f) return ember_error(EMBER_ERR_FORMAT, "%s: %s.rope.scaling.factor %g is not positive", m->path, m->arch_name, factor);
            hp->rope_scale = 1.0f / factor;
        }
    }
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    hp->embd_scale = 1.0f;
    if (hp->norm_eps <= 0.0f || hp->rope_base <= 0.0f || hp->rope_base_swa <= 0.0f)
        return ember_error(EMBER_ERR_FORMAT, "%s: layer_norm_rms_epsilon and rope bases must be positive", m->path);
    return EMBER_OK;
}

/* ---- load / free ---------------------------------------------------------- */

static ember_status ember_model_load_vocab(ember_model *m) { return ember_vocab_load(m->gguf, &m->vocab); }
static void ember_model_free_vocab(ember_model *m) { ember_vocab_free(m->vocab); m->vocab = NULL; }
const struct ember_vocab *ember_model_vocab(const ember_model *m) { return m->vocab; }

ember_status ember_model_load(const char *path, const ember_model_params *params, ember_model **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_model_load: out is NULL");
    *out = NULL;
    if (!path) return ember_error(EMBER_ERR_INVALID_ARG, "ember_model_load: path is NULL");
    ember_model_params def = ember_model_default_params();
    if (!params) params = &def;
    ember_model *m = calloc(1, sizeof *m);
    if (!m) return ember_error(EMBER_ERR_NOMEM, "ember_model_load: out of memory");
    /* Any n_gpu_layers != 0 puts the whole model on the GPU when the build has
     * CUDA and a device exists (per-layer split: not yet); else CPU. */
    m->n_gpu_layers = params->n_gpu_layers;
    m->device = params->device;
    snprintf(m->path, sizeof m->path, "%s", path);
    ember_status st = ember_gguf_open(path, &m->gguf);
    if (st != EMBER_OK) { free(m); return st; }

    const char *arch = NULL;
    if (ember_gguf_get_str(m->gguf, "general.architecture", &arch, NULL) != EMBER_OK) {
        st = ember_error(EMBER_ERR_NOT_FOUND, "%s: missing metadata key 'general.architecture'", path);
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%s", arch);
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (!strcmp(registry[i]->name, arch)) m->arch = registry[i];
    if (!m->arch) {
        st = ember_error(EMBER_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: gemma3, gemma4, llama, qwen3, qwen35, qwen35moe; dflash and gemma4-assistant drafts)", path, arch);
        goto fail;
    }
    if ((st = load_common_hparams(m))) goto fail;

    const ember_gguf_tensor *te = ember_gguf_get_tensor(m->gguf, "token_embd.weight");
    /* a draft head may borrow the target's embedding and LM head (dflash) */
    const bool borrow = !te && m->arch->draft_only;
    if (!te && !borrow) { st = ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor 'token_embd.weight'", path); goto fail; }
    if (te && (te->ne[1] < 1 || te->ne[1] > INT32_MAX)) { st = ember_error(EMBER_ERR_FORMAT, "%s: token_embd.weight has %lld rows", path, (long long)te->ne[1]); goto fail; }
    m->hp.n_vocab = te ? (int32_t)te->ne[1] : 0;
    if (te && (st = ember_model_bind_matrix(m, "token_embd.weight", m->hp.n_embd, m->hp.n_vocab, true, &m->tok_embd))) goto fail;
    if ((st = ember_model_bind_vector(m, "output_norm.weight", m->hp.n_embd, &m->output_norm))) goto fail;
    if (te && (st = ember_model_bind_matrix(m, "output.weight", m->hp.n_embd, m->hp.n_vocab, false, &m->output))) goto fail;
    if (te && !m->output.data) m->output = m->tok_embd;   /* tied embeddings */

    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) { st = ember_error(EMBER_ERR_NOMEM, "ember_model_load: out of memory"); goto fail; }
    if ((st = m->arch->load(m))) goto fail;
    bool kv_set = false;
    for (int32_t il = 0; il < m->hp.n_layer; il++) kv_set |= m->hp.n_embd_k_gqa[il] != 0 || m->hp.n_embd_v_gqa[il] != 0;
    for (int32_t il = 0; il < m->hp.n_layer && !kv_set; il++) {
        m->hp.n_embd_k_gqa[il] = (int64_t)m->hp.n_head_kv * m->hp.head_dim_k;
        m->hp.n_embd_v_gqa[il] = (int64_t)m->hp.n_head_kv * m->hp.head_dim_v;
    }

    for (int64_t i = 0; i < ember_gguf_n_tensors(m->gguf); i++) m->size_bytes += ember_gguf_tensor_at(m->gguf, i)->nbytes;
    if ((st = ember_model_load_vocab(m))) goto fail;
    if (borrow) m->hp.n_vocab = ember_vocab_n_tokens(m->vocab);
    *out = m;
    return EMBER_OK;
fail:
    ember_model_free(m);
    return st;
}

void ember_model_free(ember_model *m)
{
    if (!m) return;
    ember_model_free_vocab(m);
    if (m->arch && m->arch->free) m->arch->free(m);
    free(m->layers);
    ember_gguf_close(m->gguf);
    free(m);
}

const char *ember_model_arch(const ember_model *m) { return m->arch_name; }
int32_t ember_model_n_vocab(const ember_model *m) { return m->hp.n_vocab; }
int32_t ember_model_n_ctx_train(const ember_model *m) { return m->hp.n_ctx_train; }
int32_t ember_model_n_embd(const ember_model *m) { return m->hp.n_embd; }
int32_t ember_model_n_layer(const ember_model *m) { return m->hp.n_layer; }
int32_t ember_model_pooling_type(const ember_model *m)
{
    char key[256];
    snprintf(key, sizeof key, "%s.pooling_type", m->arch_name);
    uint32_t v = 0;
    const ember_status st = ember_gguf_get_u32(m->gguf, key, &v);
    if (st == EMBER_ERR_NOT_FOUND) return EMBER_POOLING_NONE;
    return st == EMBER_OK && v <= EMBER_POOLING_RANK ? (int32_t)v : -1;
}
uint64_t ember_model_size_bytes(const ember_model *m) { return m->size_bytes; }

const char *ember_model_chat_template(const ember_model *m, size_t *len)
{
    const char *s = NULL;
    size_t n = 0;
    if (!m->gguf || ember_gguf_get_str(m->gguf, "tokenizer.chat_template", &s, &n) != EMBER_OK || !s) s = NULL, n = 0;
    if (len) *len = n;
    return s;
}

/* ---- shared transformer pieces ---------------------------------------------- */

void ember_project(const ember_run *r, const float *x, int32_t n, const ember_weight *w0, float *y0,
                   const ember_weight *w1, float *y1, const ember_weight *w2, float *y2)
{
    const ember_weight *ws[3] = {w0, w1, w2};
    float *ys[3] = {y0, y1, y2};
    int32_t nw = w2 ? 3 : w1 ? 2 : 1;
    r->be->ops->matmul(r->be, x, n, nw, ws, ys);
}

void ember_attend(const ember_run *r, const ember_ubatch *ub, int32_t il, const float *q,
                  const float *k, const float *v, float kq_scale, int32_t n_swa, float *out)
{
    const ember_hparams *hp = &r->m->hp;
    const ember_kv_layer_view view = ember_kv_layer(r->kv, il);
    r->be->ops->kv_store(r->be, &view, k, v, ember_ubatch_rows(r->kv, ub, il), ub->n);
    const ember_attn_params ap = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
        .head_dim_k = hp->head_dim_k, .head_dim_v = hp->head_dim_v,
        .kq_scale = kq_scale, .n_swa = n_swa,
    };
    r->be->ops->attention(r->be, &view, &ap, q, ember_ubatch_query(r->kv, ub, il), ub->n, out);
}

void ember_layer_end(const ember_run *r, const ember_ubatch *ub, int32_t il, const float *x)
{
    if (!ub->hidden) return;
    const int64_t n_embd = r->m->hp.n_embd;
    /* one copy per captured layer: x may be device memory (a GPU backend
     * downloads the rows, or defers them to step_end inside a graphed step) */
    for (int32_t j = 0; j < r->n_capture; j++)
        if (r->capture_layer[j] == il)
            r->be->ops->copy(r->be, ub->hidden + (size_t)j * (size_t)ub->hidden_ld, x, (int64_t)ub->n * n_embd);
}

/* Rows idx[0..n) of x gathered into g and put through the output norm. */
static void output_norm_rows(const ember_run *r, const float *x, const int32_t *idx, int32_t n, float *g)
{
    const ember_hparams *hp = &r->m->hp;
    const ember_backend_ops *op = r->be->ops;
    for (int32_t i = 0, j; i < n; i = j) {
        /* runs of consecutive rows move in one copy */
        for (j = i + 1; j < n && idx[j] == idx[j - 1] + 1; j++) {}
        float *dst = g + (size_t)i * hp->n_embd;
        const float *src = x + (size_t)idx[i] * hp->n_embd;
        op->copy(r->be, dst, src, (int64_t)(j - i) * hp->n_embd);
    }
    op->rms_norm(r->be, g, g, r->m->output_norm, n, hp->n_embd, hp->norm_eps);
}

void ember_output(const ember_run *r, const ember_ubatch *ub, const float *x)
{
    const ember_hparams *hp = &r->m->hp;
    float *g = r->s->xb;
    if (ub->n_embd_out > 0) {   /* host scratch (ember_decode refuses embeddings otherwise) */
        output_norm_rows(r, x, ub->embd_idx, ub->n_embd_out, g);
        memcpy(ub->embd, g, (size_t)ub->n_embd_out * (size_t)hp->n_embd * sizeof(float));
    }
    if (ub->n_out == 0) return;
    const ember_backend_ops *op = r->be->ops;
    output_norm_rows(r, x, ub->out_idx, ub->n_out, g);
    ember_project(r, g, ub->n_out, &r->m->output, ub->logits, NULL, NULL, NULL, NULL);
    if (hp->final_softcap > 0.0f) op->softcap(r->be, ub->logits, hp->final_softcap, (int64_t)ub->n_out * hp->n_vocab);
}

ember_status ember_model_bind_experts(ember_model *m, const char *name, int64_t n_in, int64_t n_out, int32_t n_split,
                                      int32_t n_expert, ember_weight **outs)
{
    const ember_gguf_tensor *t = ember_gguf_get_tensor(m->gguf, name);
    if (!t) return ember_error(EMBER_ERR_NOT_FOUND, "%s: missing tensor '%s' (architecture %s)", m->path, name, m->arch_name);
    if (t->ne[0] != n_in || t->ne[1] != n_out * n_split || t->ne[2] != n_expert || t->ne[3] != 1)
        return ember_error(EMBER_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %d]", m->path, name,
                           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)n_in,
                           (long long)(n_out * n_split), n_expert);
    const ember_quant_traits *tr = ember_quant_traits_get(t->type);
    uint64_t rb;
    if (!tr || !tr->vec_dot || !ember_type_row_bytes(t->type, (uint64_t)n_in, &rb) ||
        rb * (uint64_t)(n_out * n_split) * (uint64_t)n_expert != t->nbytes)
        return ember_error(EMBER_ERR_UNSUPPORTED, "%s: tensor '%s' (%s) has no CPU kernels or rows of %lld are not whole blocks",
                           m->path, name, ember_type_name(t->type), (long long)n_in);
    for (int32_t k = 0; k < n_split; k++) {
        outs[k] = calloc((size_t)n_expert, sizeof(ember_weight));
        if (!outs[k]) return ember_error(EMBER_ERR_NOMEM, "%s: out of memory for the experts of '%s'", m->arch_name, name);
        for (int32_t e = 0; e < n_expert; e++) {
            ember_weight *w = &outs[k][e];
            w->type = t->type;
            w->n_in = n_in;
            w->n_out = n_out;
            w->row_bytes = (size_t)rb;
            w->data = (const uint8_t *)t->data + ((size_t)e * (size_t)n_split + (size_t)k) * (size_t)n_out * (size_t)rb;
            w->name = t->name;
        }
    }
    return EMBER_OK;
}
