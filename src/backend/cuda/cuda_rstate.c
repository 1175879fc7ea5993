/*
 * cuda_rstate.c — the CUDA backend's recurrent state memory and the entry
 * points of the recurrent (linear-attention) ops (backend.h: state_alloc,
 * state_free, state_copy, conv1d_silu, gated_delta_rule, sigmoid_mul,
 * copy_strided; kernels in cuda_recurrent.cu).
 *
 * Design of the state on the device: kv/rstate.c asks the backend for its
 * cells (one block of n_seq_max cells, cell c = sequence c's) and for each
 * snapshot cell, so the states are device memory from the start and
 * rstate's pointers are device addresses it never dereferences; resets,
 * fork copies, snapshot saves and restores are state_copy calls, queued on
 * the stream in call order with the steps (device-to-device copies and
 * memsets: no host round trip). An op's state[t] pointers are turned into
 * (block, offset in the cell, cell index per entry); inside a step whose
 * entries' cells are their sequence ids (rstate's layout, checked here on
 * the host) the cell indices are the step's sid array, uploaded by
 * step_begin, so a captured decode step replays for whatever sequences the
 * next step of its shape holds; otherwise they are uploaded (eager only: a
 * capture or replay then fails and the step runs op by op).
 *
 * Owns: the table of state blocks, the translation of state pointers, the
 * recorded operands of these ops (step.h).
 * Must not: allocate or copy state memory inside a step (rstate calls come
 * between forward passes), or know models or sequences beyond the step's
 * sid array.
 */
#include "backend/cuda/cuda_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- state memory ---------------------------------------------------------- */

/* The block holding [p, p + bytes), or NULL (host memory). */
static cb_rs_block *rs_find(cuda_backend *b, const void *p, size_t bytes)
{
    const char *c = p;
    for (int32_t k = 0; k < b->n_rs; k++) {
        const int32_t i = (b->rs_hit + k) % b->n_rs;
        cb_rs_block *r = &b->rs[i];
        const size_t size = (size_t)r->n_cells * r->cell_bytes;
        if (c < r->dev || c >= r->dev + size) continue;
        if (bytes > (size_t)(r->dev + size - c)) {
            ember_error(EMBER_ERR_INVALID_ARG, "cuda: %zu bytes at %p run past their state block (%zu bytes at %p)", bytes,
                        p, size, (void *)r->dev);
            cb_die("state memory");
        }
        b->rs_hit = i;
        return r;
    }
    return NULL;
}

void *cb_state_alloc(ember_backend *be, int64_t n_cells, size_t cell_bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    if (n_cells < 1 || cell_bytes == 0 || (uint64_t)n_cells > SIZE_MAX / 2 / cell_bytes) {
        ember_error(EMBER_ERR_INVALID_ARG, "cuda: state memory of %lld cells of %zu bytes", (long long)n_cells, cell_bytes);
        return NULL;
    }
    if (b->in_step) {
        ember_error(EMBER_ERR_INTERNAL, "cuda: state memory asked for inside a step");
        return NULL;
    }
    if (b->n_rs == b->cap_rs) {
        const int32_t cap = b->cap_rs ? 2 * b->cap_rs : 16;
        cb_rs_block *r = realloc(b->rs, (size_t)cap * sizeof *r);
        if (!r) {
            ember_error(EMBER_ERR_NOMEM, "cuda: cannot grow the state block table");
            return NULL;
        }
        b->rs = r;
        b->cap_rs = cap;
    }
    const size_t bytes = (size_t)n_cells * cell_bytes;
    void *d = NULL;
    if (ember_cuda_malloc(b->cu, bytes, &d) != EMBER_OK) return NULL;   /* the message names the bytes */
    if (ember_cuda_memzero(b->cu, d, bytes) != EMBER_OK) {
        ember_cuda_mfree(b->cu, d, bytes);
        return NULL;
    }
    b->rs[b->n_rs++] = (cb_rs_block){.dev = d, .n_cells = n_cells, .cell_bytes = cell_bytes};
    b->rs_bytes += bytes;
    return d;
}

void cb_state_free(ember_backend *be, void *p)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!p) return;
    for (int32_t i = 0; i < b->n_rs; i++) {
        if (b->rs[i].dev != p) continue;
        const size_t bytes = (size_t)b->rs[i].n_cells * b->rs[i].cell_bytes;
        CK("state memory", ember_cuda_synchronize(b->cu));
        ember_cuda_mfree(b->cu, p, bytes);
        b->rs_bytes -= bytes;
        b->rs[i] = b->rs[--b->n_rs];
        b->rs_hit = 0;
        return;
    }
    ember_error(EMBER_ERR_INVALID_ARG, "cuda: %p is not state memory", p);
    cb_die("state_free");
}

void cb_rs_free_all(cuda_backend *b)
{
    for (int32_t i = 0; i < b->n_rs; i++)
        ember_cuda_mfree(b->cu, b->rs[i].dev, (size_t)b->rs[i].n_cells * b->rs[i].cell_bytes);
    free(b->rs);
    b->rs = NULL;
    b->n_rs = b->cap_rs = 0;
    b->rs_bytes = 0;
}

void cb_state_copy(ember_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    if (bytes == 0) return;
    if (b->in_step) {
        ember_error(EMBER_ERR_INTERNAL, "cuda: state memory copied inside a step");
        cb_die("state_copy");
    }
    cb_flush(b);
    const bool d_dev = rs_find(b, dst, bytes) != NULL, s_dev = src && rs_find(b, src, bytes) != NULL;
    if (!src) {
        if (d_dev) CK("state_copy (zero)", ember_cuda_memzero(b->cu, dst, bytes));
        else memset(dst, 0, bytes);
    } else if (d_dev && s_dev) {
        CK("state_copy", ember_cuda_copy(b->cu, dst, src, bytes));
    } else if (d_dev) {
        CK("state_copy (upload)", ember_cuda_upload(b->cu, dst, src, bytes));
    } else if (s_dev) {
        CK("state_copy (download)", ember_cuda_download(b->cu, dst, src, bytes));
    } else {
        memmove(dst, src, bytes);
    }
}

/* ---- state pointers of an op ----------------------------------------------- */

/* The device form of an op's n state pointers (ember_cuda_rs_cells): one
 * block, one offset inside the cells (rstate's pointers of one layer), the
 * cell of each entry from the step's sid array when it equals the entries'
 * sequence ids, else uploaded into staging slot `slot` (eager only).
 * Records base, cell size, offset and (runs, sid) as the node's operands.
 * False when the step cannot go on (a capture or replay without the sid
 * array). */
static bool rs_cells(cuda_backend *b, float *const *state, int32_t n, int slot, const char *op, ember_cuda_rs_cells *out)
{
    const cb_rs_block *r = rs_find(b, state[0], sizeof(float));
    if (!r || r->cell_bytes % sizeof(float) != 0) {
        ember_error(EMBER_ERR_INVALID_ARG, "cuda: %s: state[0] %p is not state memory of whole floats (state_alloc)", op,
                    (void *)state[0]);
        cb_die(op);
    }
    const int64_t cf = (int64_t)(r->cell_bytes / sizeof(float));
    const int64_t off = (int64_t)(((const char *)state[0] - r->dev) / (ptrdiff_t)sizeof(float)) % cf;
    int32_t *cells = cb_host_i32(b, (size_t)n);
    bool by_sid = b->in_step && b->s_seq && n <= b->s_n;
    int32_t runs = 1;
    for (int32_t t = 0; t < n; t++) {
        const char *p = (const char *)state[t];
        const size_t size = (size_t)r->n_cells * r->cell_bytes;
        const ptrdiff_t d = p - r->dev;
        if (p < r->dev || (size_t)d >= size || d % (ptrdiff_t)sizeof(float) != 0 || (d / (ptrdiff_t)sizeof(float)) % cf != off) {
            ember_error(EMBER_ERR_INVALID_ARG, "cuda: %s: state[%d] is not in state[0]'s block at the same place in its cell",
                        op, (int)t);
            cb_die(op);
        }
        cells[t] = (int32_t)(d / (ptrdiff_t)sizeof(float) / cf);
        if (t > 0 && state[t] != state[t - 1]) runs++;
        if (by_sid && cells[t] != b->s_seq[t]) by_sid = false;
    }
    cb_rec_ptr(b, r->dev);
    cb_rec_i64(b, cf);
    cb_rec_i64(b, off);
    cb_rec_i64(b, 2 * (int64_t)runs + by_sid);
    *out = (ember_cuda_rs_cells){.base = (float *)(void *)r->dev, .cell_floats = cf, .off = off, .max_groups = runs};
    out->cells = by_sid ? cb_step_sid(b) : cb_up_i32(b, slot, cells, (size_t)n);
    return out->cells != NULL;
}

/* ---- ops ------------------------------------------------------------------- */

void cb_conv1d_silu(ember_backend *be, float *y, const float *x, const float *w, int64_t n_ch, int32_t d_conv,
                    float *const *state, int32_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    if (n <= 0) return;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_CONV1D_SILU, 0);
    cb_rec_i64(b, n);
    cb_rec_i64(b, n_ch);
    cb_rec_i64(b, d_conv);
    cb_rec_ptr(b, w);
    const size_t len = (size_t)n * (size_t)n_ch;
    const float *dx = cb_in_f(b, 0, x, len);
    float *dy = cb_out_f(b, SLOT_OUT, y, len);
    const float *dw = cb_vec(b, w, n_ch * d_conv);
    ember_cuda_rs_cells rc;
    const bool ok = rs_cells(b, state, n, 1, "conv1d_silu", &rc);
    if (!ok || cb_skip(b)) return;
    CK("conv1d_silu", ember_cuda_conv1d_silu(b->cu, dy, dx, dw, n_ch, d_conv, &rc, n));
    cb_out_done(b, y, dy, len);
}

void cb_gated_delta_rule(ember_backend *be, const ember_gdr_params *p, const float *qkv, int64_t ld, const float *alpha,
                         const float *bt, float *const *state, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    if (n <= 0) return;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_GATED_DELTA_RULE, 0);
    cb_rec_i64(b, n);
    cb_rec_i64(b, ld);
    cb_rec_i64(b, (int64_t)p->n_head_k << 32 | (uint32_t)p->n_head_v);
    cb_rec_i64(b, (int64_t)p->d_k << 32 | (uint32_t)p->d_v);
    cb_rec_f32(b, p->eps);
    cb_rec_ptr(b, p->A);
    cb_rec_ptr(b, p->dt_bias);
    const int64_t Hv = p->n_head_v, row = 2 * (int64_t)p->n_head_k * p->d_k + Hv * p->d_v;
    const size_t n_qkv = (size_t)((int64_t)(n - 1) * ld + row), n_out = (size_t)n * (size_t)(Hv * p->d_v);
    const float *dqkv = cb_in_f(b, 0, qkv, n_qkv);
    const float *dal = cb_in_f(b, 1, alpha, (size_t)n * (size_t)Hv);
    const float *dbt = cb_in_f(b, 2, bt, (size_t)n * (size_t)Hv);
    float *dout = cb_out_f(b, SLOT_OUT, out, n_out);
    /* the chunked form for prefills: eager steps only (a captured step keeps the
     * recurrent form, so its replays never depend on run lengths), and only
     * when some sequence has a run of EMBER_CUDA_GDR_RUN_MIN entries (else the
     * chunked kernel would only find no work) */
    int32_t chunk_min = 0;
    if (b->gdr_chunk && b->mode == M_EAGER)
        for (int32_t t = 1, run = 1; t < n && !chunk_min; t++) {
            run = state[t] == state[t - 1] ? run + 1 : 1;
            if (run >= EMBER_CUDA_GDR_RUN_MIN) chunk_min = EMBER_CUDA_GDR_RUN_MIN;
        }
    const ember_cuda_gdr_params cp = {.n_head_k = p->n_head_k, .n_head_v = p->n_head_v, .d_k = p->d_k, .d_v = p->d_v,
                                      .A = cb_vec(b, p->A, Hv), .dt_bias = cb_vec(b, p->dt_bias, Hv), .eps = p->eps,
                                      .chunk_min = chunk_min};
    ember_cuda_rs_cells rc;
    const bool ok = rs_cells(b, state, n, 3, "gated_delta_rule", &rc);
    if (!ok || cb_skip(b)) return;
    CK("gated_delta_rule", ember_cuda_gated_delta_rule(b->cu, &cp, dqkv, ld, dal, dbt, &rc, n, dout));
    cb_out_done(b, out, dout, n_out);
}

void cb_sigmoid_mul(ember_backend *be, float *x, const float *g, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    if (n <= 0) return;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_SIGMOID_MUL, 0);
    cb_rec_i64(b, n);
    float *dx = cb_io_f(b, 0, x, (size_t)n);
    const float *dg = cb_in_f(b, 1, g, (size_t)n);
    if (cb_skip(b)) return;
    CK("sigmoid_mul", ember_cuda_sigmoid_mul(b->cu, dx, dg, n));
    cb_out_done(b, x, dx, (size_t)n);
}

void cb_copy_strided(ember_backend *be, float *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t n_rows,
                     int64_t n_cols)
{
    cuda_backend *b = (cuda_backend *)be;
    if (n_rows <= 0 || n_cols <= 0) return;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_COPY_STRIDED, 0);
    cb_rec_i64(b, n_rows);
    cb_rec_i64(b, n_cols);
    cb_rec_i64(b, ld_dst);
    cb_rec_i64(b, ld_src);
    const size_t n_src = (size_t)((n_rows - 1) * ld_src + n_cols), n_dst = (size_t)((n_rows - 1) * ld_dst + n_cols);
    const float *ds = cb_in_f(b, 0, src, n_src);
    float *dd = cb_io_f(b, 1, dst, n_dst);   /* in and out: host memory between the columns stays */
    if (cb_skip(b)) return;
    CK("copy_strided", ember_cuda_copy_strided(b->cu, dd, ld_dst, ds, ld_src, n_rows, n_cols));
    cb_out_done(b, dst, dd, n_dst);
}
