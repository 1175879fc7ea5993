/*
 * context.c — the runtime API: contexts, batches, ember_decode, logits and
 * sequence edits.
 *
 * Owns: validating a batch (tokens, sequence ids, consecutive positions),
 * reserving its KV rows (all or nothing), cutting it into micro-batches of
 * n_ubatch entries and running the architecture's forward over each, and the
 * logits of the last decode. The KV cache is sized per layer from the
 * model's n_embd_k_gqa / n_embd_v_gqa (nothing for KV-shared layers);
 * sliding-window layers get the kv module's windowed group, whose rows are
 * taken one micro-batch at a time (ember_kv_swa_advance). Models with recurrent layers (hp.n_embd_r /
 * n_embd_s) also get one recurrent-state cell per sequence (kv/rstate.h): it
 * is zeroed when a sequence starts at position 0 and when it is removed, copied
 * by a fork at the source's full length, and, having absorbed every position,
 * cannot be cut back directly: truncate / fork to a middle position p restore
 * the sequence's checkpoint (ember_seq_checkpoint, one per sequence) when it
 * was taken at or before p and decode the tokens in between again (the
 * context keeps each such sequence's tokens); without one they fail with
 * EMBER_ERR_RANGE and change nothing (the engine's prefix cache then
 * recomputes). All memory (KV pool, scratch, index arrays) is
 * allocated by ember_context_new; the logits buffer grows only when a batch
 * asks for more logits rows than any before it. The backend comes from
 * ember_backend_new; what it can do is read from its caps.
 * Must not: know an architecture's math (model files), KV block internals
 * (kv/), which backend it holds (no backend headers besides backend.h and
 * step.h), or how a backend replays steps (ember_backend_run_step).
 */
#include "model/model.h"
#include "backend/step.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

#define KV_BLOCK_TOKENS 32

struct ember_context {
    ember_model *m;
    ember_context_params p;
    ember_backend *be;
    ember_kv *kv;
    ember_rs *rs;              /* recurrent state per sequence, NULL without recurrent layers */
    ember_token *hist;         /* with rs: [n_seq_max][n_ctx] each sequence's tokens (replays after a rollback) */
    int32_t top_queued;        /* rows of the heads ember_get_logits_top_start queued, until their finish (0: none) */
    ember_batch replay;        /* with rs: [n_batch] entries for those replays */
    int32_t *out_map_save;     /* with rs: [n_batch] the last decode's out_map, kept across a replay */
    ember_scratch s;
    void *scratch_mem;
    float *aux_host;           /* s.aux_host: host memory always */
    bool scratch_on_backend;   /* scratch_mem from be->ops->act_alloc (else calloc: the arch reads it on the host) */
    uint64_t scratch_bytes;
    /* per-decode index arrays, [n_batch] each */
    int64_t *kv_row;
    ember_attn_query *query;
    int64_t *kv_row_swa;          /* sliding-window group, [n_batch] each */
    ember_attn_query *query_swa;
    int32_t *out_map;     /* entry -> logits row, or -1 */
    int32_t *out_idx;     /* ubatch-local indices of entries that want logits */
    int32_t n_last;       /* entries of the last decode */
    int32_t n_out_last;
    /* per-sequence, [n_seq_max] */
    int32_t *seq_next;
    int32_t *seq_count;
    ember_seq_id *seq_list;
    float *logits;
    int64_t logits_rows;  /* capacity in rows of n_vocab */
    bool logits_pending;  /* the backend may still hold the last decode's logits (logits_sync) */
    /* layer-skip drafts and draft heads (ember_set_layer_limit / _hidden_layers) */
    int32_t n_layer_run;  /* layers the next decodes run (hp.n_layer unless limited) */
    int32_t n_layer_last; /* layers the last decode ran */
    int32_t n_capture;
    int32_t capture_layer[EMBER_MAX_HIDDEN_LAYERS];
    float *hidden;        /* [n_capture][hidden_rows][n_embd], host memory, n_batch rows (allocated with the capture) */
    int64_t hidden_rows;
    /* embeddings (ember_batch.embd): the rows of the last decode */
    float *embd;          /* [embd_rows][n_embd], host memory */
    int64_t embd_rows;
    int32_t *embd_map;    /* [n_batch] entry -> embedding row, or -1 */
    int32_t *embd_idx;    /* [n_batch] ubatch-local indices of entries that want embeddings */
    int32_t *embd_map_save; /* with rs: [n_batch] the last decode's embd_map, kept across a replay */
};

/* The logits buffer: host memory the backend writes fastest (pinned for a
 * GPU: one fast copy per step). */
static float *logits_alloc(ember_context *c, size_t bytes) { return c->be->ops->host_alloc(c->be, bytes); }

static void logits_free(ember_context *c, float *p)
{
    if (p) c->be->ops->host_free(c->be, p);
}

/* Mirror a copy-on-write block copy into a backend that keeps its own copy
 * of the cache. */
static void kv_copy_to_backend(void *ud, const ember_kv *kv, int32_t il, int32_t dst, int32_t src)
{
    ember_context *c = ud;
    const int64_t bt = ember_kv_block_tokens(kv);
    const ember_kv_layer_view view = ember_kv_layer(kv, il);
    c->be->ops->kv_copy(c->be, &view, dst * bt, src * bt, bt);
}

ember_context_params ember_context_default_params(void)
{
    ember_context_params p = {
        .n_ctx = 4096, .n_kv_tokens = 0, .n_seq_max = 1,
        .n_batch = 2048, .n_ubatch = 512, .n_threads = 0,
        .type_k = EMBER_KV_F16, .type_v = EMBER_KV_F16, .n_ctx_checkpoints = 8,
    };
    return p;
}

static bool kv_type(ember_kv_type t, uint32_t *out)
{
    switch (t) {
    case EMBER_KV_F16: *out = EMBER_TYPE_F16; return true;
    case EMBER_KV_Q8_0: *out = EMBER_TYPE_Q8_0; return true;
    case EMBER_KV_F32: *out = EMBER_TYPE_F32; return true;
    }
    return false;
}

ember_status ember_context_new(ember_model *m, const ember_context_params *params, ember_context **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_context_new: out is NULL");
    *out = NULL;
    if (!m) return ember_error(EMBER_ERR_INVALID_ARG, "ember_context_new: model is NULL");
    if (m->arch->draft_only)
        return ember_error(EMBER_ERR_UNSUPPORTED, "ember_context_new: %s is a %s draft head, not a model of its own (it runs as a speculative draft of its target)",
                           m->path, m->arch->name);
    ember_context_params p = params ? *params : ember_context_default_params();
    if (p.n_kv_tokens == 0) p.n_kv_tokens = p.n_ctx;
    if (p.n_ubatch == 0 || p.n_ubatch > p.n_batch) p.n_ubatch = p.n_batch;
    if (p.n_ctx < 1 || p.n_ctx > (1u << 24) || p.n_seq_max < 1 || p.n_seq_max > 4096 || p.n_batch < 1 ||
        p.n_batch > (1u << 20) || p.n_kv_tokens > (1u << 28) || p.n_ctx_checkpoints > EMBER_RS_MAX_CKPT)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_context_new: n_ctx %u, n_seq_max %u, n_batch %u, n_kv_tokens %u out of range",
                           p.n_ctx, p.n_seq_max, p.n_batch, p.n_kv_tokens);
    uint32_t tk, tv;
    if (!kv_type(p.type_k, &tk) || !kv_type(p.type_v, &tv))
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_context_new: unknown KV cache type %d/%d", (int)p.type_k, (int)p.type_v);
    const ember_hparams *hp = &m->hp;
    for (int32_t il = 0; il < hp->n_layer; il++)
        if ((tk == EMBER_TYPE_Q8_0 && hp->n_embd_k_gqa[il] % 32 != 0) || (tv == EMBER_TYPE_Q8_0 && hp->n_embd_v_gqa[il] % 32 != 0))
            return ember_error(EMBER_ERR_INVALID_ARG, "ember_context_new: a q8_0 KV cache needs K/V rows in multiples of 32 (layer %d: %lld/%lld)",
                               il, (long long)hp->n_embd_k_gqa[il], (long long)hp->n_embd_v_gqa[il]);

    ember_context *c = calloc(1, sizeof *c);
    if (!c) return ember_error(EMBER_ERR_NOMEM, "ember_context_new: out of memory");
    c->m = m;
    c->p = p;
    c->n_layer_run = hp->n_layer;
    ember_status st;

    const int64_t ub = p.n_ubatch;
    const int64_t n_q = (int64_t)hp->n_head * hp->head_dim_k, n_k = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t n_v = (int64_t)hp->n_head_kv * hp->head_dim_v, n_att = (int64_t)hp->n_head * hp->head_dim_v;
    int64_t max_in = hp->n_embd;
    if (hp->n_ff > max_in) max_in = hp->n_ff;
    if (n_att > max_in) max_in = n_att;
    ember_backend_limits lim = {
        .max_tokens = ub, .max_n_in = max_in, .max_kv_tokens = p.n_ctx,
        .max_head_dim = hp->head_dim_k > hp->head_dim_v ? hp->head_dim_k : hp->head_dim_v,
    };
    ember_backend_options bo = ember_backend_options_default();
    bo.n_gpu_layers = m->n_gpu_layers;
    bo.device = m->device;
    bo.n_threads = p.n_threads;
    if ((st = ember_backend_options_env(&bo))) goto fail;
    if ((st = ember_backend_new(&bo, &lim, &c->be))) goto fail;
    if (!(c->be->caps.kv_types & (1u << tk)) || !(c->be->caps.kv_types & (1u << tv))) {
        /* refused here rather than at the first KV store */
        st = ember_error(EMBER_ERR_UNSUPPORTED, "ember_context_new: the %s backend cannot keep a %s/%s KV cache%s",
                         c->be->ops->name, ember_type_name(tk), ember_type_name(tv),
                         c->be->caps.kv_types == (1u << EMBER_TYPE_F16) ? " (F16 only; use -ngl 0 for the CPU)" : "");
        goto fail;
    }

    bool layer_swa[EMBER_MAX_LAYERS];
    for (int32_t il = 0; il < hp->n_layer; il++) layer_swa[il] = hp->n_swa > 0 && hp->is_swa[il];
    ember_kv_params kp = {
        .n_layer = hp->n_layer, .n_embd_k = n_k, .n_embd_v = n_v, .type_k = tk, .type_v = tv,
        .layer_n_embd_k = hp->n_embd_k_gqa, .layer_n_embd_v = hp->n_embd_v_gqa,
        .layer_swa = hp->n_swa > 0 ? layer_swa : NULL, .n_swa = hp->n_swa, .n_swa_step = (int32_t)p.n_ubatch,
        .block_tokens = KV_BLOCK_TOKENS,
        .n_blocks = (int32_t)((p.n_kv_tokens + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS),
        .n_seq_max = (int32_t)p.n_seq_max, .n_ctx = (int32_t)p.n_ctx,
    };
    if ((st = ember_kv_new(&kp, &c->kv))) goto fail;
    bool recurrent = false;
    for (int32_t il = 0; il < hp->n_layer; il++) recurrent |= hp->n_embd_r[il] > 0 || hp->n_embd_s[il] > 0;
    if (recurrent) {
        const ember_backend_ops *o = c->be->ops;
        if (!o->conv1d_silu || !o->gated_delta_rule || !o->sigmoid_mul || !o->copy_strided || !o->state_alloc ||
            !o->state_free || !o->state_copy) {
            st = ember_error(EMBER_ERR_UNSUPPORTED, "ember_context_new: architecture %s has recurrent (linear-attention) layers, "
                             "whose ops backend %s does not have yet (use -ngl 0 for the CPU)", m->arch_name,
                             o->name ? o->name : "?");
            goto fail;
        }
        const ember_rs_params rp = {.n_layer = hp->n_layer, .n_conv = hp->n_embd_r, .n_ssm = hp->n_embd_s,
                                    .n_seq_max = (int32_t)p.n_seq_max, .n_ubatch = (int32_t)p.n_ubatch,
                                    .n_ckpt = (int32_t)p.n_ctx_checkpoints, .be = c->be};
        if ((st = ember_rs_new(&rp, &c->rs))) goto fail;
        c->hist = calloc((size_t)p.n_seq_max * (size_t)p.n_ctx, sizeof *c->hist);
        if (!c->hist) {
            st = ember_error(EMBER_ERR_NOMEM, "ember_context_new: cannot allocate the token history of %u sequences", p.n_seq_max);
            goto fail;
        }
        if ((st = ember_batch_init((int32_t)p.n_batch, &c->replay))) goto fail;
        if (!(c->out_map_save = malloc(p.n_batch * sizeof *c->out_map_save)) ||
            !(c->embd_map_save = malloc(p.n_batch * sizeof *c->embd_map_save))) {
            st = ember_error(EMBER_ERR_NOMEM, "ember_context_new: out of memory");
            goto fail;
        }
    }
    ember_kv_set_copy_hook(c->kv, kv_copy_to_backend, c);

    const int64_t sizes[9] = {ub * hp->n_embd, ub * hp->n_embd, ub * n_q, ub * n_k, ub * n_v, ub * n_att, ub * hp->n_ff, ub * hp->n_ff, ub * hp->n_aux};
    int64_t total = 0;
    for (int i = 0; i < 9; i++) total += (sizes[i] + 15) & ~(int64_t)15;
    /* the backend's activation memory (device memory for a GPU) holds the
     * scratch when the architecture never reads scratch on the host */
    c->scratch_on_backend = m->arch->device_scratch && !m->host_scratch;
    c->scratch_mem = c->scratch_on_backend ? c->be->ops->act_alloc(c->be, (size_t)total * sizeof(float))
                                           : calloc((size_t)total, sizeof(float));
    c->scratch_bytes = (uint64_t)total * sizeof(float);
    if (hp->n_aux_host > 0) {
        c->aux_host = calloc((size_t)(ub * hp->n_aux_host), sizeof(float));
        if (!c->aux_host) {
            st = ember_error(EMBER_ERR_NOMEM, "ember_context_new: cannot allocate %lld floats of host scratch",
                             (long long)(ub * hp->n_aux_host));
            goto fail;
        }
        c->s.aux_host = c->aux_host;
        c->scratch_bytes += (uint64_t)(ub * hp->n_aux_host) * sizeof(float);
    }
    const size_t nb = p.n_batch, ns = p.n_seq_max;
    c->kv_row = malloc(nb * sizeof *c->kv_row);
    c->query = malloc(nb * sizeof *c->query);
    c->kv_row_swa = malloc(nb * sizeof *c->kv_row_swa);
    c->query_swa = malloc(nb * sizeof *c->query_swa);
    c->out_map = malloc(nb * sizeof *c->out_map);
    c->out_idx = malloc(nb * sizeof *c->out_idx);
    c->embd_map = malloc(nb * sizeof *c->embd_map);
    c->embd_idx = malloc(nb * sizeof *c->embd_idx);
    c->seq_next = malloc(ns * sizeof *c->seq_next);
    c->seq_count = calloc(ns, sizeof *c->seq_count);
    c->seq_list = malloc(ns * sizeof *c->seq_list);
    c->logits_rows = p.n_seq_max < p.n_batch ? p.n_seq_max : p.n_batch;
    c->logits = logits_alloc(c, (size_t)c->logits_rows * (size_t)hp->n_vocab * sizeof(float));
    if (!c->scratch_mem || !c->kv_row || !c->query || !c->kv_row_swa || !c->query_swa || !c->out_map || !c->out_idx || !c->seq_next ||
        !c->embd_map || !c->embd_idx ||
        !c->seq_count || !c->seq_list || !c->logits) {
        st = ember_error(EMBER_ERR_NOMEM, "ember_context_new: cannot allocate %llu bytes of scratch", (unsigned long long)c->scratch_bytes);
        goto fail;
    }
    float *f = c->scratch_mem;
    float **dst[9] = {&c->s.x, &c->s.xb, &c->s.q, &c->s.k, &c->s.v, &c->s.att, &c->s.hb, &c->s.hb2, &c->s.aux};
    for (int i = 0; i < 9; i++) { *dst[i] = sizes[i] ? f : NULL; f += (sizes[i] + 15) & ~(int64_t)15; }
    c->scratch_bytes += c->be->ops->scratch_bytes(c->be);
    *out = c;
    return EMBER_OK;
fail:
    ember_context_free(c);
    return st;
}

void ember_context_free(ember_context *c)
{
    if (!c) return;
    if (c->be) logits_free(c, c->logits);
    if (c->scratch_on_backend) c->be->ops->act_free(c->be, c->scratch_mem);
    else free(c->scratch_mem);
    free(c->aux_host);
    ember_rs_free(c->rs);   /* its cells are the backend's state memory */
    ember_backend_free(c->be);
    ember_kv_free(c->kv);
    free(c->hist);
    ember_batch_free(&c->replay);
    free(c->out_map_save);
    free(c->embd_map_save);
    free(c->embd_map);
    free(c->embd_idx);
    free(c->embd);
    free(c->kv_row);
    free(c->query);
    free(c->kv_row_swa);
    free(c->query_swa);
    free(c->out_map);
    free(c->out_idx);
    free(c->seq_next);
    free(c->seq_count);
    free(c->seq_list);
    free(c->hidden);
    free(c);
}

uint64_t ember_context_kv_bytes(const ember_context *c)
{
    return ember_kv_bytes(c->kv) + ember_rs_bytes(c->rs) + ember_rs_snap_bytes(c->rs);
}

ember_status ember_context_warmup(ember_context *c, bool *ran)
{
    if (ran) *ran = false;
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_context_warmup: context is NULL");
    if (!c->be->caps.lazy_placement) return EMBER_OK;
    if (ember_kv_seq_len(c->kv, 0) != 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_context_warmup: sequence 0 holds %d positions (must be empty)",
                           ember_kv_seq_len(c->kv, 0));
    ember_batch wb = {0};
    ember_status st = ember_batch_init(1, &wb);
    if (st != EMBER_OK) return st;
    wb.n_tokens = 1;
    wb.token[0] = 0;
    wb.pos[0] = 0;
    wb.seq_id[0] = 0;
    wb.logits[0] = 1;
    st = ember_decode(c, &wb);
    ember_batch_free(&wb);
    if (st == EMBER_OK) st = ember_seq_remove(c, 0);
    if (ran) *ran = st == EMBER_OK;
    return st;
}

void ember_context_print_memory(const ember_context *c, FILE *f)
{
    if (c && f) c->be->ops->print_memory(c->be, f);
}
uint64_t ember_context_scratch_bytes(const ember_context *c)
{
    return c->scratch_bytes + (uint64_t)c->logits_rows * (uint64_t)c->m->hp.n_vocab * sizeof(float) +
           (uint64_t)c->hidden_rows * (uint64_t)c->n_capture * (uint64_t)c->m->hp.n_embd * sizeof(float);
}

ember_status ember_set_layer_limit(ember_context *c, int32_t n_layer)
{
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_set_layer_limit: context is NULL");
    const int32_t nl = c->m->hp.n_layer;
    if (n_layer < 0 || n_layer > nl)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_set_layer_limit: %d layers not in [0, n_layer %d]", n_layer, nl);
    if (n_layer != 0 && n_layer != nl && !c->m->arch->partial)
        return ember_error(EMBER_ERR_UNSUPPORTED, "ember_set_layer_limit: architecture %s always runs all %d layers",
                           c->m->arch->name, nl);
    /* A GPU backend replays whole decode steps from CUDA graphs keyed on the
     * batch shape, not on the layer count: a partial step would share a full
     * step's graph. Refused there until the key carries it. */
    if (n_layer != 0 && n_layer != nl && !c->be->caps.layer_skip)
        return ember_error(EMBER_ERR_UNSUPPORTED, "ember_set_layer_limit: backend %s runs whole graphed steps (layer-skip is CPU-only)",
                           c->be->ops->name ? c->be->ops->name : "?");
    c->n_layer_run = n_layer == 0 ? nl : n_layer;
    return EMBER_OK;
}

ember_status ember_set_hidden_layers(ember_context *c, int32_t n, const int32_t *layers)
{
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_set_hidden_layers: context is NULL");
    const ember_hparams *hp = &c->m->hp;
    if (n < 0 || n > EMBER_MAX_HIDDEN_LAYERS || (n > 0 && !layers))
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_set_hidden_layers: %d layers not in [0, %d]", n,
                           EMBER_MAX_HIDDEN_LAYERS);
    if (n > 0 && !c->m->arch->partial && !c->m->arch->hidden)
        return ember_error(EMBER_ERR_UNSUPPORTED, "ember_set_hidden_layers: architecture %s does not export hidden states",
                           c->m->arch->name);
    for (int32_t j = 0; j < n; j++)
        if (layers[j] < 0 || layers[j] >= hp->n_layer)
            return ember_error(EMBER_ERR_INVALID_ARG, "ember_set_hidden_layers: layers[%d] = %d not in [0, n_layer %d)", j,
                               layers[j], hp->n_layer);
    /* one row per batch entry and layer, allocated once: ember_layer_end's
     * copies write there (from device memory on a GPU, where a replayed step
     * writes to the addresses its forward pass gave) */
    free(c->hidden);
    c->hidden = NULL;
    c->hidden_rows = 0;
    c->n_capture = 0;
    if (n > 0) {
        c->hidden = malloc((size_t)c->p.n_batch * (size_t)n * (size_t)hp->n_embd * sizeof(float));
        if (!c->hidden)
            return ember_error(EMBER_ERR_NOMEM, "ember_set_hidden_layers: %d layers x %u rows of %d floats", n, c->p.n_batch,
                               hp->n_embd);
        c->hidden_rows = c->p.n_batch;
    }
    c->n_capture = n;
    for (int32_t j = 0; j < n; j++) c->capture_layer[j] = layers[j];
    c->n_last = 0;
    c->n_out_last = 0;
    return EMBER_OK;
}

const float *ember_get_hidden(ember_context *c, int32_t i, int32_t j)
{
    if (!c || j < 0 || j >= c->n_capture || c->capture_layer[j] >= c->n_layer_last) return NULL;
    if (i < 0) {   /* the last entry with logits */
        if (c->n_out_last == 0) return NULL;
        for (i = c->n_last - 1; i >= 0 && c->out_map[i] < 0; i--) {}
        if (i < 0) return NULL;
    } else if (i >= c->n_last) {
        return NULL;
    }
    return c->hidden + ((size_t)j * (size_t)c->hidden_rows + (size_t)i) * (size_t)c->m->hp.n_embd;
}

ember_status ember_batch_init(int32_t n_max, ember_batch *out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_batch_init: out is NULL");
    memset(out, 0, sizeof *out);
    if (n_max < 1) return ember_error(EMBER_ERR_INVALID_ARG, "ember_batch_init: n_max %d < 1", n_max);
    out->token = calloc((size_t)n_max, sizeof *out->token);
    out->pos = calloc((size_t)n_max, sizeof *out->pos);
    out->seq_id = calloc((size_t)n_max, sizeof *out->seq_id);
    out->logits = calloc((size_t)n_max, sizeof *out->logits);
    out->embd = calloc((size_t)n_max, sizeof *out->embd);
    if (!out->token || !out->pos || !out->seq_id || !out->logits || !out->embd) {
        ember_batch_free(out);
        return ember_error(EMBER_ERR_NOMEM, "ember_batch_init: cannot allocate %d entries", n_max);
    }
    return EMBER_OK;
}

void ember_batch_free(ember_batch *b)
{
    if (!b) return;
    free(b->token);
    free(b->pos);
    free(b->seq_id);
    free(b->logits);
    free(b->embd);
    memset(b, 0, sizeof *b);
}

bool ember_context_embeddings_supported(const ember_context *c)
{
    /* rows are copied on the host from the scratch (ember_output) */
    return c && !(c->be->caps.device_activations && c->m->arch->device_scratch);
}

const float *ember_get_embeddings_ith(ember_context *c, int32_t i)
{
    if (!c || i < 0 || i >= c->n_last || c->embd_map[i] < 0) return NULL;
    return c->embd + (size_t)c->embd_map[i] * (size_t)c->m->hp.n_embd;
}

/* Sliding-window rows for entries [u0, u1) of b: advance each sequence's
 * window by its entries in the micro-batch, then look up rows and tables. */
static ember_status swa_rows(ember_context *c, const ember_batch *b, int32_t u0, int32_t u1)
{
    int32_t n_seqs = 0;
    int32_t *cnt = c->seq_next;   /* free after validation: per-sequence counts */
    for (int32_t i = u0; i < u1; i++) {
        const ember_seq_id s = b->seq_id[i];
        if (c->seq_count[s]++ == 0) c->seq_list[n_seqs++] = s;
    }
    for (int32_t k = 0; k < n_seqs; k++) cnt[k] = c->seq_count[c->seq_list[k]];
    const ember_status st = ember_kv_swa_advance(c->kv, c->seq_list, cnt, n_seqs);
    for (int32_t k = 0; k < n_seqs; k++) c->seq_count[c->seq_list[k]] = 0;
    if (st) return st;
    for (int32_t i = u0; i < u1; i++) {
        c->kv_row_swa[i] = ember_kv_group_row(c->kv, EMBER_KV_GROUP_SWA, b->seq_id[i], b->pos[i]);
        c->query_swa[i].blocks = ember_kv_group_blocks(c->kv, EMBER_KV_GROUP_SWA, b->seq_id[i]);
        c->query_swa[i].pos = b->pos[i];
    }
    return EMBER_OK;
}

/* One forward pass of the arch over a micro-batch: the callback of
 * ember_backend_run_step (backend/step.h), which may run it again when the
 * backend's replay of the step did not match. */
struct forward_args {
    const ember_arch *arch;
    const ember_run *run;
    const ember_ubatch *ub;
};

static void run_forward(void *p)
{
    const struct forward_args *a = p;
    a->arch->forward(a->run, a->ub);
}

static ember_status decode_impl(ember_context *c, const ember_batch *b, const int32_t *top_row);

ember_status ember_decode(ember_context *c, const ember_batch *b) { return decode_impl(c, b, NULL); }

bool ember_context_token_feedback(const ember_context *c)
{
    return c && c->be->caps.token_feedback && !c->hist && !c->m->arch->host_tokens;
}

ember_status ember_decode_fed(ember_context *c, const ember_batch *b, const int32_t *top_row)
{
    if (!c || !b || !top_row) return ember_error(EMBER_ERR_INVALID_ARG, "ember_decode_fed: context, batch or top_row is NULL");
    if (!ember_context_token_feedback(c))
        return ember_error(EMBER_ERR_UNSUPPORTED, "ember_decode_fed: this backend and model take tokens from the host only");
    if (c->top_queued <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_decode_fed: no heads queued (ember_get_logits_top_start)");
    if (b->n_tokens > EMBER_DECODE_FED_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_decode_fed: %d entries (at most %d)", b->n_tokens,
                           EMBER_DECODE_FED_MAX);
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (top_row[i] < -1 || top_row[i] >= c->top_queued)
            return ember_error(EMBER_ERR_INVALID_ARG, "ember_decode_fed: entry %d: head row %d not in [-1, %d)", i,
                               top_row[i], c->top_queued);
    return decode_impl(c, b, top_row);
}

static ember_status decode_impl(ember_context *c, const ember_batch *b, const int32_t *top_row)
{
    if (!c || !b) return ember_error(EMBER_ERR_INVALID_ARG, "ember_decode: context or batch is NULL");
    const int32_t n = b->n_tokens;
    const ember_hparams *hp = &c->m->hp;
    if (n < 1 || (uint32_t)n > c->p.n_batch)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_decode: n_tokens %d not in [1, n_batch %u]", n, c->p.n_batch);
    if (!b->token || !b->pos || !b->seq_id || !b->logits)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_decode: batch arrays must not be NULL");

    int32_t n_embd_out = 0;
    for (int32_t i = 0; b->embd && i < n; i++) n_embd_out += b->embd[i] != 0;
    if (n_embd_out > 0 && !ember_context_embeddings_supported(c))
        return ember_error(EMBER_ERR_UNSUPPORTED, "ember_decode: embeddings need the activations on the host "
                           "(they live on the GPU here; use -ngl 0 for the CPU)");

    /* validate: ids, tokens, consecutive positions per sequence */
    int32_t n_seqs = 0, n_out = 0;
    ember_status st = EMBER_OK;
    for (int32_t i = 0; i < n; i++) {
        const ember_seq_id s = b->seq_id[i];
        if (s < 0 || (uint32_t)s >= c->p.n_seq_max) {
            st = ember_error(EMBER_ERR_INVALID_ARG, "ember_decode: entry %d: seq_id %d not in [0, n_seq_max %u)", i, s, c->p.n_seq_max);
            break;
        }
        if ((!top_row || top_row[i] < 0) && (b->token[i] < 0 || b->token[i] >= hp->n_vocab)) {
            st = ember_error(EMBER_ERR_INVALID_ARG, "ember_decode: entry %d: token %d not in [0, n_vocab %d)", i, b->token[i], hp->n_vocab);
            break;
        }
        if (c->seq_count[s] == 0) {
            c->seq_list[n_seqs++] = s;
            c->seq_next[s] = ember_kv_seq_len(c->kv, s);
        }
        if (b->pos[i] != c->seq_next[s]) {
            st = ember_error(EMBER_ERR_INVALID_ARG, "ember_decode: entry %d: position %d of sequence %d, expected %d (positions must continue the sequence)",
                             i, b->pos[i], s, c->seq_next[s]);
            break;
        }
        c->seq_next[s]++;
        c->seq_count[s]++;
        if (b->logits[i]) n_out++;
    }
    if (st == EMBER_OK) {
        ember_seq_id *ids = c->seq_list;
        int32_t *cnt = (int32_t *)c->out_idx;   /* reused as scratch: n_seqs <= n_batch */
        for (int32_t k = 0; k < n_seqs; k++) cnt[k] = c->seq_count[ids[k]];
        st = ember_kv_append(c->kv, ids, cnt, n_seqs);
        /* a sequence that starts over (position 0) starts from a zero state */
        for (int32_t k = 0; st == EMBER_OK && c->rs && k < n_seqs; k++)
            if (c->seq_next[ids[k]] == cnt[k]) ember_rs_seq_reset(c->rs, ids[k]);
    }
    for (int32_t k = 0; k < n_seqs; k++) c->seq_count[c->seq_list[k]] = 0;
    if (st != EMBER_OK) return st;   /* nothing reserved: the last decode's rows stand */
    c->n_last = 0;
    c->n_out_last = 0;
    c->logits_pending = false;
    if (c->hist)
        for (int32_t i = 0; i < n; i++) c->hist[(size_t)b->seq_id[i] * c->p.n_ctx + (size_t)b->pos[i]] = b->token[i];

    /* grow the logits buffer if this batch wants more rows than ever before */
    if (n_out > c->logits_rows) {
        float *nl = logits_alloc(c, (size_t)n_out * (size_t)hp->n_vocab * sizeof(float));
        if (nl) logits_free(c, c->logits);   /* nothing in it is read again */
        if (!nl) {
            /* roll back the reservation so nothing is written */
            for (int32_t i = n - 1; i >= 0; i--) ember_kv_seq_truncate(c->kv, b->seq_id[i], b->pos[i]);
            return ember_error(EMBER_ERR_NOMEM, "ember_decode: cannot allocate logits for %d rows", n_out);
        }
        c->logits = nl;
        c->logits_rows = n_out;
    }
    if (n_embd_out > c->embd_rows) {
        float *ne = malloc((size_t)n_embd_out * (size_t)hp->n_embd * sizeof(float));
        if (!ne) {
            for (int32_t i = n - 1; i >= 0; i--) ember_kv_seq_truncate(c->kv, b->seq_id[i], b->pos[i]);
            return ember_error(EMBER_ERR_NOMEM, "ember_decode: cannot allocate embeddings for %d rows", n_embd_out);
        }
        free(c->embd);   /* nothing in it is read again */
        c->embd = ne;
        c->embd_rows = n_embd_out;
    }

    int32_t o = 0, oe = 0;
    for (int32_t i = 0; i < n; i++) {
        c->embd_map[i] = b->embd && b->embd[i] ? oe++ : -1;
        c->kv_row[i] = ember_kv_row(c->kv, b->seq_id[i], b->pos[i]);
        c->query[i].blocks = ember_kv_seq_blocks(c->kv, b->seq_id[i]);
        c->query[i].pos = b->pos[i];
        c->out_map[i] = b->logits[i] ? o++ : -1;
    }

    ember_run run = {.m = c->m, .be = c->be, .kv = c->kv, .rs = c->rs, .s = &c->s, .n_layer = c->n_layer_run,
                     .n_capture = c->n_capture, .capture_layer = c->capture_layer};
    const bool swa = ember_kv_has_swa_group(c->kv);
    /* the decode's device time (ember_decode_device_seconds): timer 0 around its micro-batches */
    const bool timed = c->be->ops->timer_mark && c->be->ops->timer_seconds;
    if (timed) c->be->ops->timer_mark(c->be, 0, false);
    for (int32_t u0 = 0; u0 < n; u0 += (int32_t)c->p.n_ubatch) {
        int32_t u1 = u0 + (int32_t)c->p.n_ubatch;
        if (u1 > n) u1 = n;
        if (swa && (st = swa_rows(c, b, u0, u1)) != EMBER_OK) {
            /* cannot happen while the kv module's pool bound holds; drop the
             * batch's sequences rather than leave positions without K/V */
            for (int32_t i = 0; i < n; i++) ember_kv_seq_remove(c->kv, b->seq_id[i]);
            c->n_last = c->n_out_last = 0;
            return st;
        }
        int32_t first_out = -1, n_uo = 0;
        for (int32_t i = u0; i < u1; i++) {
            if (c->out_map[i] < 0) continue;
            if (first_out < 0) first_out = c->out_map[i];
            c->out_idx[n_uo++] = i - u0;
        }
        int32_t first_embd = -1, n_ue = 0;
        for (int32_t i = u0; i < u1; i++) {
            if (c->embd_map[i] < 0) continue;
            if (first_embd < 0) first_embd = c->embd_map[i];
            c->embd_idx[n_ue++] = i - u0;
        }
        ember_ubatch ubatch = {
            .n = u1 - u0, .token = b->token + u0, .pos = b->pos + u0, .kv_row = c->kv_row + u0,
            .query = c->query + u0, .kv_row_swa = (swa ? c->kv_row_swa : c->kv_row) + u0,
            .query_swa = (swa ? c->query_swa : c->query) + u0, .n_out = n_uo, .out_idx = c->out_idx,
            .logits = c->logits + (size_t)(first_out < 0 ? 0 : first_out) * (size_t)hp->n_vocab,
            .hidden = c->n_capture == 0 ? NULL : c->hidden + (size_t)u0 * (size_t)hp->n_embd,
            .hidden_ld = c->hidden_rows * hp->n_embd,
            .seq = b->seq_id + u0,
            .n_embd_out = n_ue, .embd_idx = c->embd_idx,
            .embd = n_ue == 0 ? NULL : c->embd + (size_t)first_embd * (size_t)hp->n_embd,
        };
        const ember_backend_step bs = {
            .n = ubatch.n, .token = ubatch.token, .pos = ubatch.pos, .kv_row = ubatch.kv_row,
            .query = ubatch.query, .kv_row_swa = ubatch.kv_row_swa, .query_swa = ubatch.query_swa, .n_out = n_uo, .out_idx = c->out_idx,
            .block_tokens = (int32_t)ember_kv_block_tokens(c->kv), .logits = ubatch.logits,
            /* only the last micro-batch: its rows stay in the backend's output buffer */
            .logits_defer = u1 == n && n_uo > 0,
            .token_top = top_row ? top_row + u0 : NULL,
            .seq_id = ubatch.seq,
        };
        if (bs.logits_defer) c->logits_pending = true;
        struct forward_args fa = {c->m->arch, &run, &ubatch};
        ember_backend_run_step(c->be, &bs, run_forward, &fa);
    }
    if (timed) c->be->ops->timer_mark(c->be, 0, true);
    c->n_last = n;
    c->n_out_last = n_out;
    c->n_layer_last = c->n_layer_run;
    return EMBER_OK;
}

double ember_decode_device_seconds(ember_context *c)
{
    if (!c || !c->be->ops->timer_mark || !c->be->ops->timer_seconds) return -1.0;
    return c->be->ops->timer_seconds(c->be, 0);
}

/* The host rows of the last decode, completing a deferred download. */
static void logits_sync(ember_context *c)
{
    if (!c->logits_pending) return;
    c->logits_pending = false;
    c->be->ops->logits_sync(c->be, c->logits, (size_t)c->n_out_last * (size_t)c->m->hp.n_vocab * sizeof(float));
}

/* Logits row of entry i (ember_get_logits's indexing), without syncing. */
static const float *logits_row(const ember_context *c, int32_t i)
{
    if (i < 0) {
        if (c->n_out_last == 0) return NULL;
        return c->logits + (size_t)(c->n_out_last - 1) * (size_t)c->m->hp.n_vocab;
    }
    if (i >= c->n_last || c->out_map[i] < 0) return NULL;
    return c->logits + (size_t)c->out_map[i] * (size_t)c->m->hp.n_vocab;
}

/* The checks of a head call (k in range, no heads queued) and the host
 * addresses of entries[0, n)'s logits rows (ember_get_logits_top's
 * indexing) into *rows: small (16) or malloc'd (freed by the caller when it
 * is not small; NULL on an early error). Errors name `fn`:
 * EMBER_ERR_INVALID_ARG (k, queued heads, an entry without logits),
 * EMBER_ERR_NOMEM. */
static ember_status top_rows(const ember_context *c, const char *fn, int32_t n, const int32_t *entries, int32_t k,
                             const float **small, const float ***rows)
{
    *rows = NULL;
    if (k < 1 || k > EMBER_LOGITS_TOP_MAX || k > c->m->hp.n_vocab)
        return ember_error(EMBER_ERR_INVALID_ARG, "%s: k %d not in [1, %d]", fn, k,
                           EMBER_LOGITS_TOP_MAX < c->m->hp.n_vocab ? EMBER_LOGITS_TOP_MAX : c->m->hp.n_vocab);
    if (c->top_queued > 0)   /* the backend's one head buffer holds them */
        return ember_error(EMBER_ERR_INVALID_ARG, "%s: heads are queued (finish them first)", fn);
    if (n == 0) return EMBER_OK;
    *rows = n <= 16 ? small : malloc(sizeof **rows * (size_t)n);
    if (!*rows) return ember_error(EMBER_ERR_NOMEM, "%s: %d rows", fn, n);
    for (int32_t r = 0; r < n; r++)
        if (!((*rows)[r] = logits_row(c, entries[r])))
            return ember_error(EMBER_ERR_INVALID_ARG, "%s: entry %d of the last decode has no logits", fn, entries[r]);
    return EMBER_OK;
}

ember_status ember_get_logits_top(ember_context *c, int32_t n, const int32_t *entries, int32_t k,
                                  ember_logits_top *out)
{
    if (!c || (n > 0 && (!entries || !out)) || n < 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_get_logits_top: NULL context, entries or out (n %d)", n);
    const float *rows_small[16], **rows = NULL;
    const ember_status st = top_rows(c, "ember_get_logits_top", n, entries, k, rows_small, &rows);
    if (st == EMBER_OK && n > 0) c->be->ops->logits_top(c->be, rows, n, c->m->hp.n_vocab, k, out);
    if (rows != rows_small) free(rows);
    return st;
}

ember_status ember_get_logits_top_start(ember_context *c, int32_t n, const int32_t *entries, int32_t k, bool *queued)
{
    if (queued) *queued = false;
    if (!c || n < 1 || !entries || !queued)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_get_logits_top_start: NULL context, entries or queued (n %d)", n);
    const float *rows_small[16], **rows = NULL;
    const ember_status st = top_rows(c, "ember_get_logits_top_start", n, entries, k, rows_small, &rows);
    if (st == EMBER_OK && c->be->ops->logits_top_start(c->be, rows, n, c->m->hp.n_vocab, k)) {
        c->top_queued = n;
        *queued = true;
    }
    if (rows != rows_small) free(rows);
    return st;
}

ember_status ember_get_logits_top_finish(ember_context *c, ember_logits_top *out)
{
    if (!c || !out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_get_logits_top_finish: NULL context or out");
    if (c->top_queued <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_get_logits_top_finish: no heads queued");
    c->be->ops->logits_top_finish(c->be, out);
    c->top_queued = 0;
    return EMBER_OK;
}

const float *ember_get_logits(ember_context *c, int32_t i)
{
    if (!c) return NULL;
    logits_sync(c);
    return logits_row(c, i);
}

ember_status ember_seq_remove(ember_context *c, ember_seq_id seq)
{
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_seq_remove: context is NULL");
    const ember_status st = ember_kv_seq_remove(c->kv, seq);
    if (st == EMBER_OK) {
        ember_rs_seq_reset(c->rs, seq);
        ember_rs_snap_drop(c->rs, seq);
    }
    return st;
}

ember_status ember_seq_checkpoint(ember_context *c, ember_seq_id seq)
{
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_seq_checkpoint: context is NULL");
    if (seq < 0 || (uint32_t)seq >= c->p.n_seq_max)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_seq_checkpoint: seq_id %d not in [0, n_seq_max %u)", seq, c->p.n_seq_max);
    if (!c->rs) return EMBER_OK;
    return ember_rs_snap_save(c->rs, seq, ember_kv_seq_len(c->kv, seq));
}

ember_status ember_seq_ctx_checkpoint(ember_context *c, ember_seq_id seq)
{
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_seq_ctx_checkpoint: context is NULL");
    if (seq < 0 || (uint32_t)seq >= c->p.n_seq_max)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_seq_ctx_checkpoint: seq_id %d not in [0, n_seq_max %u)", seq,
                           c->p.n_seq_max);
    if (!c->rs) return EMBER_OK;
    const ember_pos len = ember_kv_seq_len(c->kv, seq);
    return len > 0 ? ember_rs_ckpt_save(c->rs, seq, len) : EMBER_OK;
}

bool ember_context_wants_checkpoints(const ember_context *c) { return c && c->rs && c->p.n_ctx_checkpoints > 0; }

uint64_t ember_context_checkpoint_bytes_max(const ember_context *c)
{
    return c && c->rs ? ember_rs_bytes(c->rs) * (1u + c->p.n_ctx_checkpoints) : 0;
}

/* Decode seq's recorded tokens [from, to) again (no logits), after its KV
 * cache was cut to `from` and its state set to stand for [0, from). The
 * last decode's logits (and hidden states) stay readable: they are brought
 * to the host first (a deferring backend reuses its output buffers in the
 * replay's steps), the replay asks for no rows, and its bookkeeping is put back
 * (an engine rolls back one slot's drafts before it reads the next slot's
 * logits of the same step). */
static ember_status replay(ember_context *c, ember_seq_id seq, ember_pos from, ember_pos to)
{
    const int32_t n_last = c->n_last, n_out_last = c->n_out_last, n_layer_last = c->n_layer_last;
    const int32_t n_capture = c->n_capture;   /* the replay keeps no hidden rows (they would overwrite the last decode's) */
    c->n_capture = 0;
    /* the replay's steps reuse the backend's output buffers: bring the
     * last decode's logits to the host first, so they stay readable */
    logits_sync(c);
    memcpy(c->out_map_save, c->out_map, (size_t)n_last * sizeof *c->out_map);
    memcpy(c->embd_map_save, c->embd_map, (size_t)n_last * sizeof *c->embd_map);
    ember_status st = EMBER_OK;
    ember_batch *b = &c->replay;
    for (ember_pos p0 = from; p0 < to; p0 += (ember_pos)c->p.n_batch) {
        const int32_t k = to - p0 < (ember_pos)c->p.n_batch ? to - p0 : (int32_t)c->p.n_batch;
        b->n_tokens = k;
        for (int32_t i = 0; i < k; i++) {
            b->token[i] = c->hist[(size_t)seq * c->p.n_ctx + (size_t)(p0 + i)];
            b->pos[i] = p0 + i;
            b->seq_id[i] = seq;
            b->logits[i] = 0;
        }
        if ((st = ember_decode(c, b)) != EMBER_OK) break;
    }
    memcpy(c->out_map, c->out_map_save, (size_t)n_last * sizeof *c->out_map);
    memcpy(c->embd_map, c->embd_map_save, (size_t)n_last * sizeof *c->embd_map);
    c->n_last = n_last;
    c->n_out_last = n_out_last;
    c->n_layer_last = n_layer_last;
    c->n_capture = n_capture;
    c->logits_pending = false;
    return st;
}

ember_status ember_seq_truncate(ember_context *c, ember_seq_id seq, ember_pos n_keep)
{
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_seq_truncate: context is NULL");
    const ember_pos len = ember_kv_seq_len(c->kv, seq);
    if (c->rs && n_keep > 0 && n_keep < len) {
        const ember_pos ck = ember_rs_snap_best(c->rs, seq, n_keep);
        if (ck < 0)
            return ember_error(EMBER_ERR_RANGE, "ember_seq_truncate: sequence %d of a model with recurrent layers cannot be cut back "
                               "from %d to %d positions (its state has absorbed them, and no checkpoint is at or before %d)",
                               seq, len, n_keep, n_keep);
        ember_status st = ember_kv_seq_truncate(c->kv, seq, ck);
        if (st == EMBER_OK) st = ember_rs_snap_restore(c->rs, seq, ck, seq);
        if (st != EMBER_OK) return st;
        ember_rs_snap_drop_after(c->rs, seq, n_keep);   /* [ck, n_keep) replays the same tokens: the rest stay valid */
        return replay(c, seq, ck, n_keep);
    }
    const ember_status st = ember_kv_seq_truncate(c->kv, seq, n_keep);
    if (st == EMBER_OK && n_keep == 0) ember_rs_seq_reset(c->rs, seq);
    if (st == EMBER_OK) ember_rs_snap_drop_after(c->rs, seq, n_keep);
    return st;
}

ember_status ember_seq_fork(ember_context *c, ember_seq_id src, ember_seq_id dst, ember_pos n)
{
    if (!c) return ember_error(EMBER_ERR_INVALID_ARG, "ember_seq_fork: context is NULL");
    const ember_pos len = ember_kv_seq_len(c->kv, src);
    ember_pos at = n;   /* where the KV fork happens; a replay on dst covers [at, n) */
    if (c->rs && n > 0 && n != len) {
        at = n > len ? -1 : ember_rs_snap_best(c->rs, src, n);
        if (at < 0)
            return ember_error(EMBER_ERR_RANGE, "ember_seq_fork: sequence %d of a model with recurrent layers can be forked at its "
                               "length %d, or at or after one of its checkpoints, not at %d", src, len, n);
    }
    ember_status st = ember_kv_seq_fork(c->kv, src, dst, at);
    if (st != EMBER_OK || !c->rs) return st;
    memcpy(c->hist + (size_t)dst * c->p.n_ctx, c->hist + (size_t)src * c->p.n_ctx, (size_t)n * sizeof *c->hist);
    ember_rs_snap_drop(c->rs, dst);
    if (n == 0) {
        ember_rs_seq_reset(c->rs, dst);
    } else if (n == len) {
        ember_rs_seq_copy(c->rs, src, dst);   /* the live state stands for [0, len) */
    } else {   /* from the checkpoint at `at` (maybe n itself: nothing to replay) */
        st = ember_rs_snap_restore(c->rs, src, at, dst);
        if (st == EMBER_OK) st = replay(c, dst, at, n);
    }
    if (st == EMBER_OK) st = ember_rs_ckpt_copy(c->rs, src, dst, n);   /* dst shares src's first n positions */
    return st;
}

ember_pos ember_seq_len(const ember_context *c, ember_seq_id seq) { return c ? ember_kv_seq_len(c->kv, seq) : 0; }

uint32_t ember_kv_free_tokens(const ember_context *c)
{
    return c ? (uint32_t)ember_kv_free_blocks(c->kv) * (uint32_t)ember_kv_block_tokens(c->kv) : 0;
}
