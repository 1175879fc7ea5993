/*
 * rstate.h — per-sequence recurrent state of linear-attention layers (Qwen3.5's
 * Gated DeltaNet): the short convolution's last inputs and the delta rule's
 * matrix state, beside the paged KV cache of the attention layers.
 *
 * Owns: one state *cell* per sequence id, each holding every recurrent
 * layer's conv state (layer il: n_conv[il] floats) and delta-rule state
 * (n_ssm[il] floats), all layers of a cell contiguous, so a whole sequence's
 * state is one block of cell_floats: resetting, copying (fork) and, later,
 * snapshotting it is one memset / memcpy. Must not: know the formulas (the
 * backend ops update the states in place) or the batch API.
 *
 * Unlike a KV cache a recurrent state cannot be cut back: it has absorbed
 * every position of its sequence. The state of sequence s therefore always
 * stands for positions [0, len(s)) of the KV cache; the context resets it
 * when a sequence (re)starts at position 0 and refuses a truncate or fork
 * to any other position (EMBER_ERR_RANGE; the engine then recomputes).
 *
 * Snapshots: per sequence one rollback snapshot (ember_rs_snap_save, taken
 * before a speculative verify step) and up to n_ckpt block checkpoints
 * (ember_rs_ckpt_save, taken by the engine at prefix-cache block boundaries);
 * each holds a copy of the live cell as standing for positions [0, pos).
 * The context rolls a sequence back to any position p by restoring the
 * latest snapshot at or before p (ember_rs_snap_best / _restore) and decoding
 * the tokens in between again (recompute from a checkpoint: the design of
 * llama-server's context checkpoints, PR 15293, placed at block boundaries
 * here). Snapshot cells are allocated on their first save and reused.
 *
 * Memory: with a backend (ember_rs_params.be) the cells and snapshots are
 * the backend's state memory (backend.h state_alloc: device memory on a
 * GPU) and every reset, copy, save and restore goes through its state_copy,
 * ordered with its ops; this module never dereferences them. Without one,
 * plain host memory.
 */
#ifndef EMBER_KV_RSTATE_H
#define EMBER_KV_RSTATE_H

#include "ember.h"

typedef struct ember_rs ember_rs;
struct ember_backend;

typedef struct ember_rs_params {
    int32_t n_layer;
    const int64_t *n_conv;   /* [n_layer] conv-state floats per sequence; 0 = not a recurrent layer */
    const int64_t *n_ssm;    /* [n_layer] delta-rule state floats per sequence */
    int32_t n_seq_max;       /* sequence ids [0, n_seq_max) */
    int32_t n_ubatch;        /* most entries of one forward pass (sizes the pointer arrays) */
    int32_t n_ckpt;          /* block checkpoints kept per sequence, 0..EMBER_RS_MAX_CKPT */
    struct ember_backend *be;   /* state memory and its copies (must outlive rs); NULL: host memory */
} ember_rs_params;

#define EMBER_RS_MAX_CKPT 64

/* Allocate zeroed cells (cell c is sequence c's, one block: the layout
 * backend.h state_alloc lets a backend use). Errors: EMBER_ERR_INVALID_ARG
 * (non-positive sizes, no recurrent layer), EMBER_ERR_NOMEM (names the
 * bytes). Memory: n_seq_max * sum(n_conv + n_ssm) floats. */
ember_status ember_rs_new(const ember_rs_params *p, ember_rs **out);
void ember_rs_free(ember_rs *rs);
uint64_t ember_rs_bytes(const ember_rs *rs);

/* Zero sequence seq's state (a new or removed sequence). */
void ember_rs_seq_reset(ember_rs *rs, ember_seq_id seq);
/* dst's state = src's state (fork at src's full length). */
void ember_rs_seq_copy(ember_rs *rs, ember_seq_id src, ember_seq_id dst);

/* For a forward pass over entries seq[0..n) (n <= n_ubatch): per-entry
 * pointers to layer il's conv state [n_conv[il]] / delta-rule state
 * [n_ssm[il]] of each entry's sequence, in arrays owned by rs that stay valid
 * until the next call of the same function. */
float *const *ember_rs_conv_ptrs(ember_rs *rs, int32_t il, const ember_seq_id *seq, int32_t n);
float *const *ember_rs_ssm_ptrs(ember_rs *rs, int32_t il, const ember_seq_id *seq, int32_t n);

/* Snapshot seq's live state as standing for positions [0, pos): the
 * rollback snapshot (replacing the previous one). Errors: EMBER_ERR_NOMEM,
 * EMBER_ERR_INVALID_ARG (no such sequence). */
ember_status ember_rs_snap_save(ember_rs *rs, ember_seq_id seq, ember_pos pos);
/* A block checkpoint of seq's live state at pos: replaces one at the same
 * pos, else takes a free one of the n_ckpt, else keeps the oldest and drops,
 * among the others, the one whose removal leaves the smallest gap between
 * its neighbours (pos after the newest), so the kept ones spread over the
 * sequence. No-op with n_ckpt = 0. Errors: as ember_rs_snap_save. */
ember_status ember_rs_ckpt_save(ember_rs *rs, ember_seq_id seq, ember_pos pos);
/* Largest position <= max_pos of any snapshot of seq, or -1 when none. */
ember_pos ember_rs_snap_best(const ember_rs *rs, ember_seq_id seq, ember_pos max_pos);
/* Live state of dst = src's snapshot at exactly pos (src == dst: roll
 * back). Errors: EMBER_ERR_RANGE (no snapshot of src at pos). */
ember_status ember_rs_snap_restore(ember_rs *rs, ember_seq_id src, ember_pos pos, ember_seq_id dst);
/* Forget seq's snapshots past pos (its sequence was cut to pos), or all of
 * them (removed). */
void ember_rs_snap_drop_after(ember_rs *rs, ember_seq_id seq, ember_pos pos);
void ember_rs_snap_drop(ember_rs *rs, ember_seq_id seq);
/* dst's block checkpoints = copies of src's at positions <= max_pos (a
 * fork of src's first max_pos positions). Errors: EMBER_ERR_NOMEM. */
ember_status ember_rs_ckpt_copy(ember_rs *rs, ember_seq_id src, ember_seq_id dst, ember_pos max_pos);
/* Block checkpoints seq holds now. */
int32_t ember_rs_ckpt_count(const ember_rs *rs, ember_seq_id seq);
/* Bytes of snapshot cells allocated so far. */
uint64_t ember_rs_snap_bytes(const ember_rs *rs);
#endif
