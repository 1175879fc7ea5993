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
 * Checkpoints: one snapshot cell per sequence (allocated on first use) holds
 * a copy of the live cell taken at a position (ember_rs_snap_save); the
 * context rolls a sequence back to any position p at or after it by restoring
 * the snapshot (ember_rs_snap_restore) and decoding the tokens in between
 * again (recompute from a checkpoint, e.g. after a speculative verify step).
 * Later: several snapshots per sequence at prefix-cache block boundaries, or
 * one per drafted position written by the ops themselves, in the same pool.
 */
#ifndef EMBER_KV_RSTATE_H
#define EMBER_KV_RSTATE_H

#include "ember.h"

typedef struct ember_rs ember_rs;

typedef struct ember_rs_params {
    int32_t n_layer;
    const int64_t *n_conv;   /* [n_layer] conv-state floats per sequence; 0 = not a recurrent layer */
    const int64_t *n_ssm;    /* [n_layer] delta-rule state floats per sequence */
    int32_t n_seq_max;       /* sequence ids [0, n_seq_max) */
    int32_t n_ubatch;        /* most entries of one forward pass (sizes the pointer arrays) */
} ember_rs_params;

/* Allocate zeroed cells. Errors: EMBER_ERR_INVALID_ARG (non-positive sizes,
 * no recurrent layer), EMBER_ERR_NOMEM (names the bytes). Memory:
 * n_seq_max * sum(n_conv + n_ssm) floats. */
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

/* Snapshot seq's live state as standing for positions [0, pos) (replacing
 * its previous snapshot). The snapshot cells (n_seq_max * cell floats) are
 * allocated on the first call. Errors: EMBER_ERR_NOMEM. */
ember_status ember_rs_snap_save(ember_rs *rs, ember_seq_id seq, ember_pos pos);
/* Position of seq's snapshot, or -1 when it has none. */
ember_pos ember_rs_snap_pos(const ember_rs *rs, ember_seq_id seq);
/* Live state of dst = snapshot of src (src == dst: roll back); dst's own
 * snapshot is dropped unless dst == src. Requires a snapshot (pos >= 0). */
void ember_rs_snap_restore(ember_rs *rs, ember_seq_id src, ember_seq_id dst);
/* Forget seq's snapshot (its sequence was cut below it, or removed). */
void ember_rs_snap_drop(ember_rs *rs, ember_seq_id seq);
/* Bytes of snapshot cells allocated so far. */
uint64_t ember_rs_snap_bytes(const ember_rs *rs);

#endif
