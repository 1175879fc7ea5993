/*
 * kv.h — the paged KV cache: a pool of fixed-size blocks shared by sequences.
 *
 * Owns: K/V memory for every layer (n_blocks * block_tokens rows each), the
 * free list, per-block reference counts, and per-sequence block tables and
 * lengths. Sequences that share a prefix (fork) share its blocks; a block is
 * copied only when a sequence writes into one that another sequence still
 * references (copy on write). Rolling back (truncate) moves the length and
 * releases whole blocks past it. Must not: compute attention, know the batch
 * API or model architectures.
 *
 * Invariants: refcount[b] = number of sequence tables that list block b; a
 * block is on the free list iff its refcount is 0; seq s lists exactly
 * ceil(len[s] / block_tokens) blocks.
 */
#ifndef EMBER_KV_H
#define EMBER_KV_H

#include "ember.h"
#include "backend/backend.h"

typedef struct ember_kv ember_kv;

typedef struct ember_kv_params {
    int32_t n_layer;
    int64_t n_embd_k;        /* K elements per token per layer (n_head_kv * head_dim_k) */
    int64_t n_embd_v;
    uint32_t type_k, type_v; /* EMBER_TYPE_F32, F16 or Q8_0 */
    int32_t block_tokens;    /* tokens per block (> 0) */
    int32_t n_blocks;        /* blocks in the pool */
    int32_t n_seq_max;       /* sequence ids [0, n_seq_max) */
    int32_t n_ctx;           /* most positions one sequence holds */
} ember_kv_params;

/* Allocate the pool. Errors: EMBER_ERR_INVALID_ARG (non-positive sizes, a K/V
 * row not a whole number of blocks of its type, unsupported type),
 * EMBER_ERR_NOMEM. Memory per layer: n_blocks * block_tokens * row bytes for
 * K and for V. */
ember_status ember_kv_new(const ember_kv_params *p, ember_kv **out);
void ember_kv_free(ember_kv *kv);

ember_kv_layer_view ember_kv_layer(const ember_kv *kv, int32_t il);
/* Called once per copied block (copy on write), after the host copy, with
 * the destination and source block ids. */
typedef void (*ember_kv_copy_hook)(void *ud, const ember_kv *kv, int32_t dst_block, int32_t src_block);
void ember_kv_set_copy_hook(ember_kv *kv, ember_kv_copy_hook hook, void *ud);
uint64_t ember_kv_bytes(const ember_kv *kv);
int32_t ember_kv_block_tokens(const ember_kv *kv);
/* Blocks on the free list; tokens = blocks * block_tokens. */
int32_t ember_kv_free_blocks(const ember_kv *kv);
/* Reference count of block b (tests, metrics). */
int32_t ember_kv_block_refs(const ember_kv *kv, int32_t b);

/* Positions seq holds; 0 for an empty or out-of-range id. */
ember_pos ember_kv_seq_len(const ember_kv *kv, ember_seq_id seq);
/* seq's block table (ceil(len / block_tokens) entries); NULL if empty. */
const int32_t *ember_kv_seq_blocks(const ember_kv *kv, ember_seq_id seq);
/* Row of position `pos` of seq in the layer views; pos < len. */
int64_t ember_kv_row(const ember_kv *kv, ember_seq_id seq, ember_pos pos);

/* Blocks that appending n_new positions to seq would take from the pool
 * (new blocks plus one copy if its partly filled last block is shared). */
int32_t ember_kv_blocks_needed(const ember_kv *kv, ember_seq_id seq, int32_t n_new);
/* Append n_new positions to each seqs[i] (all or nothing): take blocks,
 * copy shared partial blocks, and advance the lengths. Errors:
 * EMBER_ERR_INVALID_ARG (bad id), EMBER_ERR_RANGE (a sequence would pass
 * n_ctx, or the pool lacks blocks; nothing is changed then). */
ember_status ember_kv_append(ember_kv *kv, const ember_seq_id *seqs, const int32_t *n_new, int32_t n);

/* Sequence edits; see ember_seq_* in ember.h. Errors: EMBER_ERR_INVALID_ARG
 * (id out of range, dst not empty, src == dst, negative n),
 * EMBER_ERR_RANGE (n past the sequence's length). */
ember_status ember_kv_seq_remove(ember_kv *kv, ember_seq_id seq);
ember_status ember_kv_seq_truncate(ember_kv *kv, ember_seq_id seq, ember_pos n_keep);
ember_status ember_kv_seq_fork(ember_kv *kv, ember_seq_id src, ember_seq_id dst, ember_pos n);

#endif
