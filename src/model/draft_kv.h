/*
 * draft_kv.h — what the draft heads (dflash.c, mtp.c) share to run on any
 * backend: the backend a draft runs on (its placement from the draft
 * model's ember_model_params, as ember_context_new does for a model) and a
 * small paged K/V store of its own, one run of blocks per sequence,
 * written with the backend's kv_store and read with its attention op.
 *
 * Owns: the K/V views' host memory (the data on the CPU; on a GPU the key
 * of the backend's device copy, never touched), the block tables. Must not:
 * know a draft's math, or which backend it holds (it asks the caps: the KV
 * type is F32 where the backend keeps it, else F16).
 */
#ifndef EMBER_MODEL_DRAFT_KV_H
#define EMBER_MODEL_DRAFT_KV_H

#include "model/model.h"

#define EMBER_DRAFT_KV_MAX_VIEWS EMBER_MAX_LAYERS

/* The backend for a draft head `draft`: CUDA on draft->device when the draft
 * was loaded with n_gpu_layers != 0, the build has CUDA and a device exists,
 * else the CPU with n_threads; the EMBER_* environment switches apply as to a
 * context. Errors: those of ember_backend_new, ember_backend_options_env. */
ember_status ember_draft_backend_new(const ember_model *draft, int32_t n_threads, const ember_backend_limits *lim,
                                     ember_backend **out);

typedef struct ember_draft_kv {
    ember_backend *be;
    int32_t n_seq, n_pos;      /* sequences, positions each (a multiple of block_tokens) */
    int32_t block_tokens, n_blk;   /* blocks per sequence: n_pos / block_tokens */
    uint32_t type;             /* EMBER_TYPE_F32 or EMBER_TYPE_F16 */
    int32_t n_view;
    ember_kv_layer_view view[EMBER_DRAFT_KV_MAX_VIEWS];
    int32_t *tables;           /* [n_seq][n_blk]: sequence s owns blocks s * n_blk .. */
} ember_draft_kv;

/* n_view views (a draft layer or a K/V source each) of n_seq sequences of
 * at least n_pos positions; view v's K and V rows hold row_elems[v] floats.
 * Errors: EMBER_ERR_INVALID_ARG (sizes), EMBER_ERR_UNSUPPORTED (the backend
 * keeps neither F32 nor F16), EMBER_ERR_NOMEM. *kv zeroed first;
 * ember_draft_kv_free releases it (also after a failure). */
ember_status ember_draft_kv_init(ember_draft_kv *kv, ember_backend *be, int32_t n_seq, int32_t n_pos, int32_t n_view,
                                 const int64_t *row_elems);
void ember_draft_kv_free(ember_draft_kv *kv);
/* The row of position p of sequence seq in every view (kv_store's rows). */
static inline int64_t ember_draft_kv_row(const ember_draft_kv *kv, int32_t seq, int32_t p)
{
    return (int64_t)seq * kv->n_pos + p;
}
/* Sequence seq's block table (ember_attn_query.blocks). */
static inline const int32_t *ember_draft_kv_blocks(const ember_draft_kv *kv, int32_t seq)
{
    return kv->tables + (size_t)seq * (size_t)kv->n_blk;
}
/* Positions [0, n) of sequence src copied to dst in every view (host view
 * and the backend's copy: ops.kv_copy). */
void ember_draft_kv_fork(ember_draft_kv *kv, int32_t src, int32_t dst, int32_t n);
/* Bytes of K/V the views hold (in the backend's type). */
uint64_t ember_draft_kv_bytes(const ember_draft_kv *kv);

#endif
