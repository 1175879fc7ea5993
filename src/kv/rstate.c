/*
 * rstate.c — per-sequence recurrent-state cells (rstate.h). Cell c holds
 * sequence c's state: for each layer il, n_conv[il] floats of conv state
 * then n_ssm[il] floats of delta-rule state, layers in order. The cells and
 * snapshots are only ever touched through cells_alloc / cells_free /
 * cells_copy (the backend's state memory, or host memory without one).
 */
#include "kv/rstate.h"
#include "backend/backend.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

struct ember_rs {
    ember_backend *be;       /* state memory's owner, or NULL (host memory) */
    int32_t n_layer, n_seq_max, n_ubatch;
    int64_t cell;            /* floats per cell */
    int64_t *off_conv;       /* [n_layer] offset in a cell */
    int64_t *off_ssm;
    float *mem;              /* [n_seq_max][cell] */
    float **ptr_conv;        /* [n_ubatch] */
    float **ptr_ssm;
    int32_t n_snap;          /* snapshots per sequence: 1 rollback + n_ckpt block checkpoints */
    float **snap;            /* [n_seq_max * n_snap] cells, each allocated on its first save */
    ember_pos *snap_pos;     /* [n_seq_max * n_snap], -1 = none */
    uint64_t snap_cells;     /* cells allocated so far */
};

/* n zeroed cells of cell_bytes (64-byte aligned); NULL with the error set */
static float *cells_alloc(ember_rs *rs, int64_t n, size_t cell_bytes)
{
    if (rs->be) return rs->be->ops->state_alloc(rs->be, n, cell_bytes);
    const size_t bytes = (size_t)n * cell_bytes;
    float *p = aligned_alloc(64, bytes);
    if (!p) {
        ember_error(EMBER_ERR_NOMEM, "ember_rs: cannot allocate %zu bytes of recurrent state", bytes);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cells_free(ember_rs *rs, float *p)
{
    if (rs->be) rs->be->ops->state_free(rs->be, p);
    else free(p);
}

/* dst = src, or zeros when src is NULL */
static void cells_copy(ember_rs *rs, float *dst, const float *src, size_t bytes)
{
    if (rs->be) rs->be->ops->state_copy(rs->be, dst, src, bytes);
    else if (src) memcpy(dst, src, bytes);
    else memset(dst, 0, bytes);
}

ember_status ember_rs_new(const ember_rs_params *p, ember_rs **out)
{
    *out = NULL;
    if (!p || p->n_layer < 1 || p->n_seq_max < 1 || p->n_ubatch < 1 || !p->n_conv || !p->n_ssm)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_rs_new: sizes must be positive");
    ember_rs *rs = calloc(1, sizeof *rs);
    if (!rs) return ember_error(EMBER_ERR_NOMEM, "ember_rs_new: out of memory");
    rs->be = p->be;
    rs->n_layer = p->n_layer;
    rs->n_seq_max = p->n_seq_max;
    rs->n_ubatch = p->n_ubatch;
    rs->off_conv = calloc((size_t)p->n_layer, sizeof *rs->off_conv);
    rs->off_ssm = calloc((size_t)p->n_layer, sizeof *rs->off_ssm);
    rs->ptr_conv = calloc((size_t)p->n_ubatch, sizeof *rs->ptr_conv);
    rs->ptr_ssm = calloc((size_t)p->n_ubatch, sizeof *rs->ptr_ssm);
    if (p->n_ckpt < 0 || p->n_ckpt > EMBER_RS_MAX_CKPT) {
        ember_rs_free(rs);
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_rs_new: %d checkpoints per sequence (0..%d)", p->n_ckpt,
                           EMBER_RS_MAX_CKPT);
    }
    rs->n_snap = 1 + p->n_ckpt;
    rs->snap = calloc((size_t)p->n_seq_max * (size_t)rs->n_snap, sizeof *rs->snap);
    rs->snap_pos = malloc((size_t)p->n_seq_max * (size_t)rs->n_snap * sizeof *rs->snap_pos);
    if (!rs->off_conv || !rs->off_ssm || !rs->ptr_conv || !rs->ptr_ssm || !rs->snap || !rs->snap_pos) {
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
    rs->mem = cells_alloc(rs, p->n_seq_max, (size_t)rs->cell * sizeof(float));
    if (!rs->mem) {   /* the message is cells_alloc's (or the backend's) */
        ember_rs_free(rs);
        return EMBER_ERR_NOMEM;
    }
    for (int32_t i = 0; i < p->n_seq_max * rs->n_snap; i++) rs->snap_pos[i] = -1;
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
    if (rs->snap)
        for (int32_t i = 0; i < rs->n_seq_max * rs->n_snap; i++) cells_free(rs, rs->snap[i]);
    free(rs->snap_pos);
    free(rs->snap);
    cells_free(rs, rs->mem);
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
    cells_copy(rs, cell_of(rs, seq), NULL, (size_t)rs->cell * sizeof(float));
}

void ember_rs_seq_copy(ember_rs *rs, ember_seq_id src, ember_seq_id dst)
{
    if (!rs || src < 0 || src >= rs->n_seq_max || dst < 0 || dst >= rs->n_seq_max || src == dst) return;
    cells_copy(rs, cell_of(rs, dst), cell_of(rs, src), (size_t)rs->cell * sizeof(float));
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

/* snapshot j (0: rollback, 1..n_ckpt: checkpoints) of seq */
static size_t snap_ix(const ember_rs *rs, ember_seq_id seq, int32_t j) { return (size_t)seq * (size_t)rs->n_snap + (size_t)j; }

static bool seq_ok(const ember_rs *rs, ember_seq_id seq) { return rs && seq >= 0 && seq < rs->n_seq_max; }

/* copy `from` into snapshot j of seq as standing for [0, pos) */
static ember_status snap_put(ember_rs *rs, ember_seq_id seq, int32_t j, const float *from, ember_pos pos)
{
    const size_t ix = snap_ix(rs, seq, j), bytes = (size_t)rs->cell * sizeof(float);
    if (!rs->snap[ix]) {
        rs->snap[ix] = cells_alloc(rs, 1, bytes);
        if (!rs->snap[ix]) return EMBER_ERR_NOMEM;   /* the message is cells_alloc's */
        rs->snap_cells++;
    }
    cells_copy(rs, rs->snap[ix], from, bytes);
    rs->snap_pos[ix] = pos;
    return EMBER_OK;
}

ember_status ember_rs_snap_save(ember_rs *rs, ember_seq_id seq, ember_pos pos)
{
    if (!seq_ok(rs, seq)) return ember_error(EMBER_ERR_INVALID_ARG, "ember_rs_snap_save: no sequence %d", seq);
    return snap_put(rs, seq, 0, cell_of(rs, seq), pos);
}

ember_status ember_rs_ckpt_save(ember_rs *rs, ember_seq_id seq, ember_pos pos)
{
    if (!seq_ok(rs, seq)) return ember_error(EMBER_ERR_INVALID_ARG, "ember_rs_ckpt_save: no sequence %d", seq);
    if (rs->n_snap < 2) return EMBER_OK;
    const ember_pos *sp = rs->snap_pos + snap_ix(rs, seq, 0);
    int32_t slot = -1;
    for (int32_t j = 1; j < rs->n_snap && slot < 0; j++)
        if (sp[j] == pos) slot = j;   /* the same position again: replace */
    for (int32_t j = 1; j < rs->n_snap && slot < 0; j++)
        if (sp[j] < 0) slot = j;
    if (slot < 0) {
        /* full: keep the oldest (prefixes shared from the start) and drop,
         * among the others, the one whose removal leaves the smallest gap
         * between its neighbours (the new checkpoint after the newest), so
         * the kept ones spread over the sequence, denser near its end */
        int32_t oldest = 1;
        for (int32_t j = 2; j < rs->n_snap; j++)
            if (sp[j] < sp[oldest]) oldest = j;
        ember_pos best_gap = 0;
        for (int32_t j = 1; j < rs->n_snap; j++) {
            if (j == oldest && rs->n_snap > 2) continue;
            ember_pos prev = 0, next = pos;
            for (int32_t i = 1; i < rs->n_snap; i++) {
                if (sp[i] < sp[j] && sp[i] > prev) prev = sp[i];
                if (sp[i] > sp[j] && sp[i] < next) next = sp[i];
            }
            if (slot < 0 || next - prev < best_gap) {
                slot = j;
                best_gap = next - prev;
            }
        }
    }
    return snap_put(rs, seq, slot, cell_of(rs, seq), pos);
}

/* the snapshot of seq with the largest position <= max_pos, or -1 */
static int32_t snap_best(const ember_rs *rs, ember_seq_id seq, ember_pos max_pos)
{
    if (!seq_ok(rs, seq)) return -1;
    const ember_pos *sp = rs->snap_pos + snap_ix(rs, seq, 0);
    int32_t best = -1;
    for (int32_t j = 0; j < rs->n_snap; j++)
        if (sp[j] >= 0 && sp[j] <= max_pos && (best < 0 || sp[j] > sp[best])) best = j;
    return best;
}

ember_pos ember_rs_snap_best(const ember_rs *rs, ember_seq_id seq, ember_pos max_pos)
{
    const int32_t j = snap_best(rs, seq, max_pos);
    return j < 0 ? -1 : rs->snap_pos[snap_ix(rs, seq, j)];
}

ember_status ember_rs_snap_restore(ember_rs *rs, ember_seq_id src, ember_pos pos, ember_seq_id dst)
{
    const int32_t j = snap_best(rs, src, pos);
    if (!seq_ok(rs, dst) || j < 0 || rs->snap_pos[snap_ix(rs, src, j)] != pos)
        return ember_error(EMBER_ERR_RANGE, "ember_rs_snap_restore: sequence %d has no snapshot at %d", src, pos);
    cells_copy(rs, cell_of(rs, dst), rs->snap[snap_ix(rs, src, j)], (size_t)rs->cell * sizeof(float));
    return EMBER_OK;
}

void ember_rs_snap_drop_after(ember_rs *rs, ember_seq_id seq, ember_pos pos)
{
    if (!seq_ok(rs, seq)) return;
    for (int32_t j = 0; j < rs->n_snap; j++)
        if (rs->snap_pos[snap_ix(rs, seq, j)] > pos) rs->snap_pos[snap_ix(rs, seq, j)] = -1;
}

void ember_rs_snap_drop(ember_rs *rs, ember_seq_id seq) { ember_rs_snap_drop_after(rs, seq, -1); }

ember_status ember_rs_ckpt_copy(ember_rs *rs, ember_seq_id src, ember_seq_id dst, ember_pos max_pos)
{
    if (!seq_ok(rs, src) || !seq_ok(rs, dst) || src == dst) return EMBER_OK;
    ember_status st = EMBER_OK;
    for (int32_t j = 1; j < rs->n_snap && st == EMBER_OK; j++) {
        const ember_pos p = rs->snap_pos[snap_ix(rs, src, j)];
        if (p >= 0 && p <= max_pos) st = snap_put(rs, dst, j, rs->snap[snap_ix(rs, src, j)], p);
        else rs->snap_pos[snap_ix(rs, dst, j)] = -1;
    }
    return st;
}

int32_t ember_rs_ckpt_count(const ember_rs *rs, ember_seq_id seq)
{
    int32_t n = 0;
    for (int32_t j = 1; seq_ok(rs, seq) && j < rs->n_snap; j++) n += rs->snap_pos[snap_ix(rs, seq, j)] >= 0;
    return n;
}

uint64_t ember_rs_snap_bytes(const ember_rs *rs)
{
    return rs ? rs->snap_cells * (uint64_t)rs->cell * sizeof(float) : 0;
}
