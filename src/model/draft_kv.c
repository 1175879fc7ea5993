/*
 * draft_kv.c — a draft head's backend and its own paged K/V (draft_kv.h).
 */
#include "model/draft_kv.h"

#include <stdlib.h>
#include <string.h>

#include "backend/options.h"
#include "base/status.h"

#define DRAFT_KV_BLOCK 32

ember_status ember_draft_backend_new(const ember_model *draft, int32_t n_threads, const ember_backend_limits *lim,
                                     ember_backend **out)
{
    ember_backend_options bo = ember_backend_options_default();
    bo.n_gpu_layers = draft->n_gpu_layers;
    bo.device = draft->device;
    bo.n_threads = n_threads;
    ember_status st = ember_backend_options_env(&bo);
    if (st) return st;
    return ember_backend_new(&bo, lim, out);
}

ember_status ember_draft_kv_init(ember_draft_kv *kv, ember_backend *be, int32_t n_seq, int32_t n_pos, int32_t n_view,
                                 const int64_t *row_elems)
{
    memset(kv, 0, sizeof *kv);
    kv->be = be;
    if (n_seq < 1 || n_pos < 1 || n_pos > (1 << 25) || n_view < 1 || n_view > EMBER_DRAFT_KV_MAX_VIEWS)
        return ember_error(EMBER_ERR_INVALID_ARG, "draft K/V: %d sequences x %d positions x %d views out of range", n_seq, n_pos,
                           n_view);
    if (be->caps.kv_types & (1u << EMBER_TYPE_F32)) kv->type = EMBER_TYPE_F32;   /* the CPU: the floats as computed */
    else if (be->caps.kv_types & (1u << EMBER_TYPE_F16)) kv->type = EMBER_TYPE_F16;
    else return ember_error(EMBER_ERR_UNSUPPORTED, "draft K/V: backend %s keeps neither F32 nor F16 K/V", be->ops->name);
    const size_t el = kv->type == EMBER_TYPE_F32 ? 4 : 2;
    kv->block_tokens = DRAFT_KV_BLOCK;
    kv->n_blk = (n_pos + DRAFT_KV_BLOCK - 1) / DRAFT_KV_BLOCK;
    kv->n_pos = kv->n_blk * DRAFT_KV_BLOCK;
    kv->n_seq = n_seq;
    kv->tables = malloc(sizeof *kv->tables * (size_t)n_seq * (size_t)kv->n_blk);
    if (!kv->tables) return ember_error(EMBER_ERR_NOMEM, "draft K/V: block tables");
    for (int32_t s = 0; s < n_seq; s++)
        for (int32_t j = 0; j < kv->n_blk; j++) kv->tables[(size_t)s * kv->n_blk + j] = s * kv->n_blk + j;
    const int64_t rows = (int64_t)n_seq * kv->n_pos;
    for (int32_t v = 0; v < n_view; v++) {
        if (row_elems[v] < 1) return ember_error(EMBER_ERR_INVALID_ARG, "draft K/V: view %d rows of %lld", v, (long long)row_elems[v]);
        ember_kv_layer_view *w = &kv->view[v];
        *w = (ember_kv_layer_view){.type_k = kv->type, .type_v = kv->type, .k_row_bytes = el * (size_t)row_elems[v],
                                   .v_row_bytes = el * (size_t)row_elems[v], .block_tokens = DRAFT_KV_BLOCK, .n_rows = rows};
        /* calloc: fresh zero pages, never touched where the backend keeps its own copy */
        w->k = calloc((size_t)rows, w->k_row_bytes);
        w->v = calloc((size_t)rows, w->v_row_bytes);
        kv->n_view = v + 1;
        if (!w->k || !w->v)
            return ember_error(EMBER_ERR_NOMEM, "draft K/V: %d sequences x %d positions x %lld floats", n_seq, kv->n_pos,
                               (long long)row_elems[v]);
    }
    return EMBER_OK;
}

void ember_draft_kv_free(ember_draft_kv *kv)
{
    if (!kv) return;
    for (int32_t v = 0; v < kv->n_view; v++) {
        free(kv->view[v].k);
        free(kv->view[v].v);
    }
    free(kv->tables);
    memset(kv, 0, sizeof *kv);
}

void ember_draft_kv_fork(ember_draft_kv *kv, int32_t src, int32_t dst, int32_t n)
{
    if (src < 0 || src >= kv->n_seq || dst < 0 || dst >= kv->n_seq || src == dst || n <= 0 || n > kv->n_pos) return;
    const int64_t rs = ember_draft_kv_row(kv, src, 0), rd = ember_draft_kv_row(kv, dst, 0);
    for (int32_t v = 0; v < kv->n_view; v++) {
        ember_kv_layer_view *w = &kv->view[v];
        /* as the kv module's copy on write: the host rows, then the backend's copy */
        memcpy((char *)w->k + (size_t)rd * w->k_row_bytes, (const char *)w->k + (size_t)rs * w->k_row_bytes,
               (size_t)n * w->k_row_bytes);
        memcpy((char *)w->v + (size_t)rd * w->v_row_bytes, (const char *)w->v + (size_t)rs * w->v_row_bytes,
               (size_t)n * w->v_row_bytes);
        kv->be->ops->kv_copy(kv->be, w, rd, rs, n);
    }
}

uint64_t ember_draft_kv_bytes(const ember_draft_kv *kv)
{
    uint64_t b = 0;
    for (int32_t v = 0; v < kv->n_view; v++)
        b += (uint64_t)kv->view[v].n_rows * (kv->view[v].k_row_bytes + kv->view[v].v_row_bytes);
    return b;
}
