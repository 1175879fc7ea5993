/*
 * kv.h — the paged KV cache: pools of fixed-size blocks shared by sequences.
 *
 * Owns: K/V memory of every layer that keeps its own cache, the free lists,
 * per-block reference counts, and per-sequence block tables and lengths.
 * Sequences that share a prefix (fork) share its blocks; a block is copied
 * only when a sequence writes into one that another sequence still
 * references (copy on write). Rolling back (truncate) moves the length and
 * releases whole blocks past it. Must not: compute attention, know the batch
 * API or model architectures.
 *
 * Layers come in up to two groups, each with its own block pool and tables:
 * - EMBER_KV_GROUP_FULL: every position of a sequence is kept; this group's
 *   tables define the sequence lengths and pool admission (ember_kv_append).
 * - EMBER_KV_GROUP_SWA: sliding-window layers (params.layer_swa). A sequence
 *   keeps only the blocks holding its last n_swa positions (plus one block of
 *   margin for rollback); older ones go back to the pool. Positions enter this
 *   group one micro-batch at a time (ember_kv_swa_advance), so a sequence holds
 *   at most ceil((n_swa + margin + n_swa_step) / block_tokens) + 1 blocks and
 *   the pool is sized for every sequence at once: it never runs out. The group
 *   exists only when that pool is smaller than the full one; otherwise the
 *   sliding layers live in the full group (attention still masks the window).
 *   Cost of the design: a sequence cannot be cut back (truncate, fork) to a
 *   length whose window was released; those calls then fail with
 *   EMBER_ERR_RANGE and change nothing, and the caller recomputes (llama.cpp's
 *   SWA cache behaves the same way unless it keeps the full history).
 * Each layer's rows have their own width (n_head_kv * head_dim of that layer);
 * a layer with no K/V of its own (Gemma 4 KV-shared layers) takes no memory.
 *
 * Invariants (per group): refcount[b] = number of sequence tables that list
 * block b; a block is on the free list iff its refcount is 0; in the full group
 * seq s lists exactly ceil(len[s] / block_tokens) blocks; in the sliding group
 * it lists blocks [lo[s], ceil(len_swa[s] / block_tokens)) and -1 below lo[s].
 */
#ifndef EMBER_KV_H
#define EMBER_KV_H

#include "ember.h"
#include "backend/backend.h"

typedef struct ember_kv ember_kv;

enum { EMBER_KV_GROUP_FULL = 0, EMBER_KV_GROUP_SWA = 1 };

typedef struct ember_kv_params {
    int32_t n_layer;
    int64_t n_embd_k;        /* K elements per token per layer (n_head_kv * head_dim_k) */
    int64_t n_embd_v;
    /* Optional per-layer widths, [n_layer] each (NULL: every layer uses
     * n_embd_k / n_embd_v). 0 in both: the layer keeps no K/V (it reads
     * another layer's view); its view has k = v = NULL and n_rows = 0. */
    const int64_t *layer_n_embd_k;
    const int64_t *layer_n_embd_v;
    /* Optional sliding-window layers, [n_layer] (NULL: none). */
    const bool *layer_swa;
    int32_t n_swa;           /* window in positions (> 0 when layer_swa is given) */
    int32_t n_swa_step;      /* most positions one sequence gains per ember_kv_swa_advance (n_ubatch) */
    uint32_t type_k, type_v; /* EMBER_TYPE_F32, F16 or Q8_0 */
    int32_t block_tokens;    /* tokens per block (> 0) */
    int32_t n_blocks;        /* blocks in the full group's pool */
    int32_t n_seq_max;       /* sequence ids [0, n_seq_max) */
    int32_t n_ctx;           /* most positions one sequence holds */
} ember_kv_params;

/* Allocate the pools. Errors: EMBER_ERR_INVALID_ARG (non-positive sizes, a
 * K/V row not a whole number of blocks of its type, unsupported type, no layer
 * with K/V, layer_swa without n_swa / n_swa_step), EMBER_ERR_NOMEM. Memory per
 * layer: pool blocks of its group * block_tokens * its row bytes, K and V. */
ember_status ember_kv_new(const ember_kv_params *p, ember_kv **out);
void ember_kv_free(ember_kv *kv);

/* Layer il's memory; k = v = NULL for a layer without K/V. */
ember_kv_layer_view ember_kv_layer(const ember_kv *kv, int32_t il);
/* EMBER_KV_GROUP_FULL or EMBER_KV_GROUP_SWA: which rows (ember_kv_group_row)
 * and block table (ember_kv_group_blocks) layer il uses. */
int32_t ember_kv_layer_group(const ember_kv *kv, int32_t il);
/* Whether the sliding group exists (else every layer is in the full group). */
bool ember_kv_has_swa_group(const ember_kv *kv);
/* Called once per copied block and layer with K/V in the block's group (copy
 * on write), after the host copy, with the layer and the destination and
 * source block ids of that layer's view. */
typedef void (*ember_kv_copy_hook)(void *ud, const ember_kv *kv, int32_t il, int32_t dst_block, int32_t src_block);
void ember_kv_set_copy_hook(ember_kv *kv, ember_kv_copy_hook hook, void *ud);
/* Bytes of K/V memory of all layers (both groups). */
uint64_t ember_kv_bytes(const ember_kv *kv);
int32_t ember_kv_block_tokens(const ember_kv *kv);
/* Blocks on the full group's free list; tokens = blocks * block_tokens. */
int32_t ember_kv_free_blocks(const ember_kv *kv);
/* Free blocks and pool size of group g (tests, metrics); -1 for a missing group. */
int32_t ember_kv_group_free_blocks(const ember_kv *kv, int32_t g);
int32_t ember_kv_group_n_blocks(const ember_kv *kv, int32_t g);
/* Reference count of block b of the full group (tests, metrics). */
int32_t ember_kv_block_refs(const ember_kv *kv, int32_t b);

/* Positions seq holds; 0 for an empty or out-of-range id. */
ember_pos ember_kv_seq_len(const ember_kv *kv, ember_seq_id seq);
/* seq's full-group block table (ceil(len / block_tokens) entries); NULL if empty. */
const int32_t *ember_kv_seq_blocks(const ember_kv *kv, ember_seq_id seq);
/* Row of position `pos` of seq in the full group's layer views; pos < len. */
int64_t ember_kv_row(const ember_kv *kv, ember_seq_id seq, ember_pos pos);
/* The same for group g: block table (entries below the window are -1; NULL
 * if the sequence holds nothing in g) and row of pos (pos must be held). */
const int32_t *ember_kv_group_blocks(const ember_kv *kv, int32_t g, ember_seq_id seq);
int64_t ember_kv_group_row(const ember_kv *kv, int32_t g, ember_seq_id seq, ember_pos pos);

/* Blocks that appending n_new positions to seq would take from the full pool
 * (new blocks plus one copy if its partly filled last block is shared). */
int32_t ember_kv_blocks_needed(const ember_kv *kv, ember_seq_id seq, int32_t n_new);
/* Append n_new positions to each seqs[i] (all or nothing) in the full group:
 * take blocks, copy shared partial blocks, and advance the lengths. Errors:
 * EMBER_ERR_INVALID_ARG (bad id), EMBER_ERR_RANGE (a sequence would pass
 * n_ctx, or the pool lacks blocks; nothing is changed then). */
ember_status ember_kv_append(ember_kv *kv, const ember_seq_id *seqs, const int32_t *n_new, int32_t n);
/* Sliding group: give the next n_new[i] positions of seqs[i] rows, after
 * they were appended (ember_kv_append), and release the blocks that fell out
 * of the window of the first of them. A no-op without the group. Call it per
 * micro-batch, before the forward pass writes those rows. Errors:
 * EMBER_ERR_INVALID_ARG (bad id, n_new past the appended length or above
 * n_swa_step), EMBER_ERR_INTERNAL (pool exhausted: a broken invariant). */
ember_status ember_kv_swa_advance(ember_kv *kv, const ember_seq_id *seqs, const int32_t *n_new, int32_t n);

/* Sequence edits; see ember_seq_* in ember.h. Errors: EMBER_ERR_INVALID_ARG
 * (id out of range, dst not empty, src == dst, negative n),
 * EMBER_ERR_RANGE (n past the sequence's length, or the sliding window that
 * position n needs was already released). Nothing changes on an error. */
ember_status ember_kv_seq_remove(ember_kv *kv, ember_seq_id seq);
ember_status ember_kv_seq_truncate(ember_kv *kv, ember_seq_id seq, ember_pos n_keep);
ember_status ember_kv_seq_fork(ember_kv *kv, ember_seq_id src, ember_seq_id dst, ember_pos n);

#endif
