/*
 * rstate.c — per-sequence recurrent-state cells (rstate.h). Cell c holds
 * sequence c's state: for each layer il, n_conv[il] floats of conv state
 * then n_ssm[il] floats of delta-rule state, layers in order.
 */
#include "kv/rstate.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

struct ember_rs {
    int32_t n_layer, n_seq_max, n_ubatch;
    int64_t cell;            /* floats per cell */
    int64_t *off_conv;       /* [n_layer] offset in a cell */
    int64_t *off_ssm;
    float *mem;              /* [n_seq_max][cell] */
    float **ptr_conv;        /* [n_ubatch] */
    float **ptr_ssm;
    float *snap;             /* [n_seq_max][cell] snapshots, NULL until the first save */
    ember_pos *snap_pos;     /* [n_seq_max], -1 = none */
};

ember_status ember_rs_new(const ember_rs_params *p, ember_rs **out)
{
    *out = NULL;
    if (!p || p->n_layer < 1 || p->n_seq_max < 1 || p->n_ubatch < 1 || !p->n_conv || !p->n_ssm)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_rs_new: sizes must be positive");
    ember_rs *rs = calloc(1, sizeof *rs);
    if (!rs) return ember_error(EMBER_ERR_NOMEM, "ember_rs_new: out of memory");
    rs->n_layer = p->n_layer;
    rs->n_seq_max = p->n_seq_max;
    rs->n_ubatch = p->n_ubatch;
    rs->off_conv = calloc((size_t)p->n_layer, sizeof *rs->off_conv);
    rs->off_ssm = calloc((size_t)p->n_layer, sizeof *rs->off_ssm);
    rs->ptr_conv = calloc((size_t)p->n_ubatch, sizeof *rs->ptr_conv);
    rs->ptr_ssm = calloc((size_t)p->n_ubatch, sizeof *rs->ptr_ssm);
    rs->snap_pos = malloc((size_t)p->n_seq_max * sizeof *rs->snap_pos);
    if (!rs->off_conv || !rs->off_ssm || !rs->ptr_conv || !rs->ptr_ssm || !rs->snap_pos) {
        ember_rs_free(rs);
        return ember_error(EMBER_ERR_NOMEM, "ember_rs_new: out of memory");
    }
    for (int32_t il = 0; il < p->n_layer; il++) {
        if (p->n_conv[il] < 0 || p->n_ssm[il] < 0) {
            ember_rs_free(rs);
            return ember_error(EMBER_ERR_INVALID_ARG, "ember_rs_new: layer %d has negative state sizes", il);
        }
        rs->off_conv[il] = rs->cell;
        rs->cell += p->n_conv[il];
        rs->off_ssm[il] = rs->cell;
        rs->cell += p->n_ssm[il];
    }
    if (rs->cell == 0) {
        ember_rs_free(rs);
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_rs_new: no layer has recurrent state");
    }
    rs->cell = (rs->cell + 15) & ~(int64_t)15;   /* cells start 64-byte apart */
    const size_t bytes = (size_t)rs->cell * (size_t)p->n_seq_max * sizeof(float);
    rs->mem = aligned_alloc(64, bytes);
    if (!rs->mem) {
        ember_rs_free(rs);
        return ember_error(EMBER_ERR_NOMEM, "ember_rs_new: cannot allocate %zu bytes of recurrent state", bytes);
    }
    memset(rs->mem, 0, bytes);
    for (int32_t s = 0; s < p->n_seq_max; s++) rs->snap_pos[s] = -1;
    *out = rs;
    return EMBER_OK;
}

void ember_rs_free(ember_rs *rs)
{
    if (!rs) return;
    free(rs->off_conv);
    free(rs->off_ssm);
    free(rs->ptr_conv);
    free(rs->ptr_ssm);
    free(rs->snap_pos);
    free(rs->snap);
    free(rs->mem);
    free(rs);
}

uint64_t ember_rs_bytes(const ember_rs *rs)
{
    return rs ? (uint64_t)rs->cell * (uint64_t)rs->n_seq_max * sizeof(float) : 0;
}

static float *cell_of(ember_rs *rs, ember_seq_id seq) { return rs->mem + (size_t)seq * (size_t)rs->cell; }

void ember_rs_seq_reset(ember_rs *rs, ember_seq_id seq)
{
    if (!rs || seq < 0 || seq >= rs->n_seq_max) return;
    memset(cell_of(rs, seq), 0, (size_t)rs->cell * sizeof(float));
}

void ember_rs_seq_copy(ember_rs *rs, ember_seq_id src, ember_seq_id dst)
{
    if (!rs || src < 0 || src >= rs->n_seq_max || dst < 0 || dst >= rs->n_seq_max || src == dst) return;
    memcpy(cell_of(rs, dst), cell_of(rs, src), (size_t)rs->cell * sizeof(float));
}

float *const *ember_rs_conv_ptrs(ember_rs *rs, int32_t il, const ember_seq_id *seq, int32_t n)
{
    for (int32_t t = 0; t < n && t < rs->n_ubatch; t++) rs->ptr_conv[t] = cell_of(rs, seq[t]) + rs->off_conv[il];
    return rs->ptr_conv;
}

float *const *ember_rs_ssm_ptrs(ember_rs *rs, int32_t il, const ember_seq_id *seq, int32_t n)
{
    for (int32_t t = 0; t < n && t < rs->n_ubatch; t++) rs->ptr_ssm[t] = cell_of(rs, seq[t]) + rs->off_ssm[il];
    return rs->ptr_ssm;
}

ember_status ember_rs_snap_save(ember_rs *rs, ember_seq_id seq, ember_pos pos)
{
    if (!rs->snap) {
        const size_t bytes = (size_t)rs->cell * (size_t)rs->n_seq_max * sizeof(float);
        rs->snap = aligned_alloc(64, bytes);
        if (!rs->snap) return ember_error(EMBER_ERR_NOMEM, "ember_rs_snap_save: cannot allocate %zu bytes of state snapshots", bytes);
    }
    memcpy(rs->snap + (size_t)seq * (size_t)rs->cell, cell_of(rs, seq), (size_t)rs->cell * sizeof(float));
    rs->snap_pos[seq] = pos;
    return EMBER_OK;
}

ember_pos ember_rs_snap_pos(const ember_rs *rs, ember_seq_id seq)
{
    return rs && seq >= 0 && seq < rs->n_seq_max ? rs->snap_pos[seq] : -1;
}

void ember_rs_snap_restore(ember_rs *rs, ember_seq_id src, ember_seq_id dst)
{
    memcpy(cell_of(rs, dst), rs->snap + (size_t)src * (size_t)rs->cell, (size_t)rs->cell * sizeof(float));
    if (dst != src) rs->snap_pos[dst] = -1;
}

void ember_rs_snap_drop(ember_rs *rs, ember_seq_id seq)
{
    if (rs && seq >= 0 && seq < rs->n_seq_max) rs->snap_pos[seq] = -1;
}

uint64_t ember_rs_snap_bytes(const ember_rs *rs)
{
    return rs && rs->snap ? (uint64_t)rs->cell * (uint64_t)rs->n_seq_max * sizeof(float) : 0;
}
