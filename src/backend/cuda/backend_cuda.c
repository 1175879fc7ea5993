/*
 * backend_cuda.c — the op table (backend/backend.h) filled with CUDA kernels:
 * the op entry points, creation and free.
 *
 * Each op finds its operands on the device (cuda_mem.c: device copies of
 * weights, norm vectors and the KV cache by host address; activation
 * memory handed out by act_alloc; host memory staged around the op),
 * decides whether it waits to be fused with the next op (cuda_fuse.c
 * launches what waits), records its node of the step (step.h) and
 * launches its kernels unless the step replays a graph (cuda_graph.c).
 * Verify mode wraps these entry points (cuda_verify.c); the memory report
 * is cuda_report.c.
 * Must not: synchronise with the host inside a step except to return host
 * outputs, or allocate during a capture.
 *
 * Numerics differ from the CPU backend in summation order, and where the
 * kernels document it. Decode-sized matmuls (and, with EMBER_CUDA_EXACT=1,
 * all) whose weights have an integer kernel (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/
 * Q4_K/Q6_K) quantize the activations to Q8 as the CPU does and repeat its
 * integer dots and float steps (cuda_q8.cu): bit-identical outputs.
 * EMBER_CUDA_Q8=0 (and other types) use the older kernels: activations
 * rounded to each weight's vec_dot_type (ember_cuda_round_act), F32 sums
 * in another order; EMBER_CUDA_F32_ACT=1 keeps them F32.
 * EMBER_CUDA_GRAPHS=0 turns graphs off.
 */
#include "backend/cuda/cuda_internal.h"
#include "backend/logits_top.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ops have no error return: a failure here is a broken invariant or a device
 * fault, so it stops the process with the message (never input data). */
void cb_die(const char *op)
{
    fprintf(stderr, "ember: CUDA backend: %s: %s\n", op, ember_last_error());
    abort();
}

/* ---- host inputs (cu_upload) ------------------------------------------------
 * dst (activation memory) = src (host memory), n floats. Eagerly a plain
 * upload (a pageable copy is staged before cudaMemcpyAsync returns). In a
 * capture the graph gets a memcpy from up_pin, our pinned buffer, which the
 * op refills from src whenever the step runs again (replays keep their
 * forward pass: graph_entry.host_in). up_pin grows in eager steps small
 * enough to be captured, never during a capture; upload_done waits for a
 * launched graph so that the next step may refill up_pin. */
static void cu_upload(ember_backend *be, float *dst, const float *src, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_UPLOAD, 0);
    cb_rec_i64(b, n);
    cb_rec_ptr(b, src);
    const size_t bytes = (size_t)n * sizeof(float);
    if (!cb_is_act(b, dst)) {   /* host scratch (an arch that reads it on the host) */
        cb_rec_ptr(b, EMBER_STEP_HOST_OUT);
        if (b->mode != M_EAGER) b->failed = true;
        else if (dst != src) memmove(dst, src, bytes);
        return;
    }
    cb_rec_ptr(b, dst);
    if (b->in_step) b->host_in = true;
    if (b->mode == M_EAGER) {
        if (b->in_step && b->s_n <= GRAPH_MAX_N && b->up_off + bytes > b->up_pin_bytes) {
            /* a step that may be captured next time: room in up_pin for it */
            CK("upload (pinned staging)", ember_cuda_synchronize(b->cu));
            ember_cuda_host_free(b->cu, b->up_pin, b->up_pin_bytes);
            b->up_pin = NULL;
            b->up_pin_bytes = 0;
            b->gen++;   /* graphs holding the old address are stale */
            const size_t want = 2 * (b->up_off + bytes) + 4096;
            CK("upload (pinned staging)", ember_cuda_host_alloc(b->cu, want, &b->up_pin));
            b->up_pin_bytes = want;
        }
        if (b->in_step) b->up_off += bytes;
        CK("upload", ember_cuda_upload(b->cu, dst, src, bytes));
        return;
    }
    if (b->failed) return;
    if (b->up_off + bytes > b->up_pin_bytes) {
        b->failed = true;
        return;
    }
    char *pin = (char *)b->up_pin + b->up_off;
    b->up_off += bytes;
    memcpy(pin, src, bytes);   /* the stream is idle here: upload_done after the last launch */
    if (b->mode == M_CAPTURE) CK("upload", ember_cuda_upload(b->cu, dst, pin, bytes));
}

/* Rows of a host matrix: a prompt's move in their block format to the
 * device, expanded there (ember_cuda_dequant_rows); a step that may be
 * captured (or is replayed), host activations, or a type without kernels
 * expand on the host and go through upload (its pinned staging). */
static void cu_dequant_host_rows(ember_backend *be, uint32_t type, const void *rows, int64_t n_rows, int64_t n_in,
                                 float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    const size_t n = (size_t)n_rows * (size_t)n_in;
    uint64_t rb = 0;
    if (!ember_type_row_bytes(type, (uint64_t)n_in, &rb)) {
        ember_error(EMBER_ERR_INVALID_ARG, "cuda: dequant_host_rows: %s rows of %lld", ember_type_name(type),
                    (long long)n_in);
        cb_die("dequant_host_rows");
    }
    if (b->mode != M_EAGER || (b->in_step && b->s_n <= GRAPH_MAX_N) || !cb_is_act(b, out) ||
        !ember_cuda_type_supported(type)) {
        if (n > b->host_rows_n) {
            free(b->host_rows);
            b->host_rows_n = n + n / 2;
            b->host_rows = malloc(b->host_rows_n * sizeof(float));
            if (!b->host_rows) {
                ember_error(EMBER_ERR_NOMEM, "cannot allocate %zu floats of host rows", b->host_rows_n);
                cb_die("dequant_host_rows");
            }
        }
        const ember_quant_traits *tr = ember_quant_traits_get(type);
        for (int64_t r = 0; r < n_rows; r++) {
            const uint8_t *row = (const uint8_t *)rows + (size_t)r * rb;
            float *dst = b->host_rows + (size_t)r * (size_t)n_in;
            if (type == EMBER_TYPE_F32) memcpy(dst, row, (size_t)n_in * sizeof(float));
            else tr->to_float(row, dst, n_in);
        }
        cu_upload(be, out, b->host_rows, (int64_t)n);
        return;
    }
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_UPLOAD, 1u);
    cb_rec_i64(b, (int64_t)n);
    cb_rec_ptr(b, rows);
    cb_rec_ptr(b, out);
    if (b->in_step) b->host_in = true;
    void *d = cb_stage(b, SLOT_ROUND, (size_t)(rb * (uint64_t)n_rows));
    if (cb_skip(b)) return;
    /* pageable: staged before the call returns, so the caller may reuse rows */
    CK("dequant_host_rows (upload)", ember_cuda_upload(b->cu, d, rows, (size_t)(rb * (uint64_t)n_rows)));
    CK("dequant_host_rows", ember_cuda_dequant_rows(b->cu, type, d, n_in, n_rows, out));
}

/* ---- device timers (the speculation policy's step costs) -------------------- */

static void op_timer_mark(ember_backend *be, int32_t timer, bool end)
{
    cuda_backend *b = (cuda_backend *)be;
    if (b->in_step) return;   /* never inside a step (a capture would record the event) */
    cb_flush(b);              /* ops held for fusion belong before the mark */
    (void)ember_cuda_timer_mark(b->cu, timer, end);
}

static double op_timer_seconds(ember_backend *be, int32_t timer)
{
    cuda_backend *b = (cuda_backend *)be;
    double s = -1.0;
    return ember_cuda_timer_seconds(b->cu, timer, &s) == EMBER_OK ? s : -1.0;
}

/* ---- logits left on the device ------------------------------------------- */

static void op_logits_sync(ember_backend *be, float *host, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!b->lg_pending) return;
    const char *h = (const char *)host, *lh = (const char *)b->lg_host;
    if (h + bytes <= lh || h >= lh + b->lg_bytes) return;
    b->lg_pending = false;
    CK("logits download", ember_cuda_download(b->cu, b->lg_host, b->lg_dev, b->lg_bytes));
}


/* Room for the heads of n_rows rows on the device (*base: the device block
 * they lie in, b->top_off their offsets in floats): rows of the block the
 * last step left on the device (logits_defer), or rows in activation memory
 * (act_alloc: an output a caller kept on the device, e.g. a draft's
 * logits). False when they are not all in one of those or memory is short. */
static bool top_prepare(cuda_backend *b, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                        const float **base)
{
    bool on_device = b->lg_pending && n_rows > 0;
    const float *lh = b->lg_host;
    for (int32_t r = 0; on_device && r < n_rows; r++)
        on_device = rows[r] >= lh && (size_t)(rows[r] + n_vocab - lh) * sizeof(float) <= b->lg_bytes;
    *base = b->lg_dev;
    if (!on_device && n_rows > 0 && n_vocab > 0) {
        /* activation memory: device addresses, offsets from the lowest row */
        on_device = true;
        lh = rows[0];
        for (int32_t r = 0; on_device && r < n_rows; r++) {
            on_device = cb_is_act(b, rows[r]) && cb_is_act(b, rows[r] + n_vocab - 1);
            if (rows[r] < lh) lh = rows[r];
        }
        *base = lh;
    }
    if (on_device && n_rows > b->top_off_n) {
        int64_t *o = realloc(b->top_off, sizeof *o * (size_t)n_rows);
        if (o) {
            b->top_off = o;
            b->top_off_n = n_rows;
        } else {
            on_device = false;
        }
    }
    if (!on_device) return false;
    for (int32_t r = 0; r < n_rows; r++) b->top_off[r] = rows[r] - lh;
    const size_t rb = ember_cuda_logits_top_result_bytes(n_rows, k);
    return cb_grow_dev(b, &b->top_work, &b->top_work_bytes, ember_cuda_logits_top_work_bytes(n_rows, n_vocab, k),
                       false) == EMBER_OK &&
           cb_grow_dev(b, &b->top_res_dev, &b->top_res_bytes, rb, false) == EMBER_OK &&
           cb_grow_dev(b, &b->top_res_host, &b->top_res_host_bytes, rb, true) == EMBER_OK;
}

/* The heads of rows on the device when they all lie in the block the last
 * step left there or in activation memory; else (or when the device path
 * cannot run: no memory, a vocabulary past its sort) the host pass over the
 * downloaded rows. */
static void op_logits_top(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                          ember_logits_top *out)
{
    cuda_backend *b = (cuda_backend *)be;
    b->top_n = 0;
    const float *base = NULL;
    if (!b->in_step) cb_flush(b);   /* the rows' producer may still be held back (fusion) */
    if (top_prepare(b, rows, n_rows, n_vocab, k, &base) &&
        ember_cuda_logits_top(b->cu, base, b->top_off, n_rows, n_vocab, k, b->top_work, b->top_work_bytes,
                              b->top_res_dev, b->top_res_host, out) == EMBER_OK)
        return;
    /* rows on the host (or some of them), or the device path failed */
    for (int32_t r = 0; r < n_rows; r++)
        if (cb_is_act(b, rows[r])) cb_die("logits_top (rows in activation memory, device pass failed)");
    if (b->lg_pending) op_logits_sync(be, b->lg_host, b->lg_bytes);
    ember_logits_top_host(rows, n_rows, n_vocab, k, out);
}

/* op_logits_top's device path, queued: false (nothing queued) where
 * op_logits_top would take the host pass. */
static bool op_logits_top_start(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k)
{
    cuda_backend *b = (cuda_backend *)be;
    b->top_n = 0;
    const float *base = NULL;
    if (!b->in_step) cb_flush(b);
    if (!top_prepare(b, rows, n_rows, n_vocab, k, &base) ||
        ember_cuda_logits_top_start(b->cu, base, b->top_off, n_rows, n_vocab, k, b->top_work, b->top_work_bytes,
                                    b->top_res_dev, b->top_res_host) != EMBER_OK)
        return false;
    b->top_n = n_rows;
    b->top_k = k;
    return true;
}

static void op_logits_top_finish(ember_backend *be, ember_logits_top *out)
{
    cuda_backend *b = (cuda_backend *)be;
    if (b->top_n == 0) cb_die("logits_top_finish without a start");
    CK("logits_top_finish", ember_cuda_logits_top_finish(b->cu, b->top_res_host, b->top_n, b->top_k, out));
}

/* ---- ops ----------------------------------------------------------------- */

static void op_free(ember_backend *be)
{
    cuda_backend *b = (cuda_backend *)be;
    if (b->cpu) {
        cb_verify_report(b);
        ember_backend_free(b->cpu);
    }
    for (int32_t i = 0; i < b->n_graphs; i++) {
        ember_cuda_graph_free(b->graphs[i].g);
        ember_step_free(&b->graphs[i].step);
    }
    ember_step_free(&b->rec);
    for (size_t i = 0; i < b->n_copies; i++) {
        dev_copy *c = &b->copies[i];
        if (c->arena) continue;
        if (c->t.type || c->t.ne0) ember_cuda_tensor_release(b->cu, &c->t);
        else ember_cuda_mfree(b->cu, c->t.data, c->bytes);
    }
    cb_rs_free_all(b);
    for (int32_t i = 0; i < b->n_chunks; i++) ember_cuda_mfree(b->cu, b->chunks[i].base, b->chunks[i].size);
    for (int32_t i = 0; i < b->n_rtab; i++) ember_cuda_mfree(b->cu, b->rtab[i].dev, b->rtab[i].bytes);
    for (int i = 0; i < STAGE_SLOTS; i++) ember_cuda_mfree(b->cu, b->stage[i], b->stage_bytes[i]);
    for (int i = 0; i < MAX_ACT; i++) ember_cuda_mfree(b->cu, b->act[i], b->act_bytes[i]);
    for (int i = 0; i < MAX_ACT; i++) ember_cuda_host_free(b->cu, b->pinned[i], b->pinned_bytes[i]);
    ember_cuda_mfree(b->cu, b->d_step, b->d_step_n * sizeof(int32_t));
    ember_cuda_host_free(b->cu, b->up_pin, b->up_pin_bytes);
    ember_cuda_mfree(b->cu, b->top_work, b->top_work_bytes);
    ember_cuda_mfree(b->cu, b->top_res_dev, b->top_res_bytes);
    ember_cuda_host_free(b->cu, b->top_res_host, b->top_res_host_bytes);
    free(b->top_off);
    ember_cuda_free(b->cu);
    free(b->copies);
    free(b->index);
    free(b->host_i32);
    free(b->host_rows);
    free(b);
}


static void *op_act_alloc(ember_backend *be, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    for (int i = 0; i < MAX_ACT; i++) {
        if (b->act[i]) continue;
        void *p = NULL;
        if (ember_cuda_malloc(b->cu, bytes ? bytes : 4, &p) != EMBER_OK) return NULL;
        if (ember_cuda_memzero(b->cu, p, bytes ? bytes : 4) != EMBER_OK) {
            ember_cuda_mfree(b->cu, p, bytes ? bytes : 4);
            return NULL;
        }
        b->act[i] = p;
        b->act_bytes[i] = bytes ? bytes : 4;
        return p;
    }
    ember_error(EMBER_ERR_NOMEM, "CUDA backend: more than %d activation buffers", MAX_ACT);
    return NULL;
}

static void op_act_free(ember_backend *be, void *p)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!p) return;
    for (int i = 0; i < MAX_ACT; i++)
        if (b->act[i] == p) {
            ember_cuda_synchronize(b->cu);
            ember_cuda_mfree(b->cu, p, b->act_bytes[i]);
            b->act[i] = NULL;
            b->act_bytes[i] = 0;
        }
}

/* pinned host blocks handed out by host_alloc, with their sizes */
static void *op_host_alloc(ember_backend *be, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    for (int i = 0; i < MAX_ACT; i++) {
        if (b->pinned[i]) continue;
        void *p = NULL;
        if (ember_cuda_host_alloc(b->cu, bytes, &p) != EMBER_OK) return NULL;
        b->pinned[i] = p;
        b->pinned_bytes[i] = bytes;
        return p;
    }
    ember_error(EMBER_ERR_NOMEM, "CUDA backend: more than %d pinned host buffers", MAX_ACT);
    return NULL;
}

static void op_host_free(ember_backend *be, void *p)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!p) return;
    for (int i = 0; i < MAX_ACT; i++)
        if (b->pinned[i] == p) {
            ember_cuda_synchronize(b->cu);
            ember_cuda_host_free(b->cu, p, b->pinned_bytes[i]);
            b->pinned[i] = NULL;
            b->pinned_bytes[i] = 0;
        }
}

static void cu_copy(ember_backend *be, float *dst, const float *src, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_COPY, 0);
    cb_rec_i64(b, n);
    const float *s = cb_in_f(b, 0, src, (size_t)n);
    float *d = cb_out_f(b, SLOT_OUT, dst, (size_t)n);
    if (cb_skip(b)) return;
    CK("copy", ember_cuda_copy(b->cu, d, s, (size_t)n * sizeof(float)));
    cb_out_done(b, dst, d, (size_t)n);
}

static void cu_softcap(ember_backend *be, float *x, float cap, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_SOFTCAP, 0);
    cb_rec_i64(b, n);
    cb_rec_f32(b, cap);
    float *d = cb_io_f(b, 0, x, (size_t)n);
    if (cb_skip(b)) return;
    CK("softcap", ember_cuda_softcap(b->cu, d, cap, n));
    cb_out_done(b, x, d, (size_t)n);
}

static void cu_get_rows(ember_backend *be, const ember_weight *w, const ember_token *ids, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_GET_ROWS, 0);
    cb_rec_i64(b, n);
    cb_rec_ptr(b, w->data);
    const ember_cuda_tensor *t = cb_weight(b, w);
    const bool step_ids = b->in_step && ids == b->s_tok && n <= b->s_n;
    cb_rec_i64(b, step_ids);   /* the step's tokens, or an upload (never replayed) */
    const int32_t *d_ids = step_ids ? cb_step_tok(b) : cb_up_i32(b, 0, ids, (size_t)n);
    float *d_out = cb_out_f(b, 1, out, (size_t)n * w->n_in);
    if (cb_skip(b)) return;
    CK("get_rows", ember_cuda_get_rows(b->cu, t, d_ids, n, d_out));
    cb_out_done(b, out, d_out, (size_t)n * w->n_in);
}

static void cu_rms_norm(ember_backend *be, float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                        float eps)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_rec_op(b, EMBER_STEP_RMS_NORM, 0);
    cb_rec_i64(b, n_rows);
    cb_rec_i64(b, n);
    cb_rec_f32(b, eps);
    cb_rec_ptr(b, w);
    const size_t len = (size_t)(n_rows * n);
    const bool head_like = cb_pat_head_norm(b, y, x, n_rows);
    const bool after_add = cb_pat_add_norm(b, y, x, n_rows, n);
    if (!after_add && !(head_like && cb_ph_take_norm(b))) cb_flush(b);
    const float *dx = cb_in_f(b, 0, x, len);
    float *dy = y == x ? (float *)dx : cb_out_f(b, 1, y, len);
    const float *dw = cb_vec(b, w, n);
    if (cb_norm_waits(b, y, x)) {
        b->pn.on = true;   /* launched by the next op, or fused into an add */
        b->pn.x = dx;
        b->pn.w = dw;
        b->pn.y = dy;
        b->pn.n = n;
        b->pn.n_rows = n_rows;
        b->pn.eps = eps;
        return;
    }
    if (cb_skip(b)) return;
    CK("rms_norm", ember_cuda_rms_norm(b->cu, dx, dw, dy, n, n_rows, eps));
    cb_out_done(b, y, dy, len);
}

/* The integer path (cuda_q8.cu: bit-identical to the CPU backend's matmul)
 * takes decode-sized batches (<= 32 tokens) whose weights all have an
 * integer kernel; with EMBER_CUDA_EXACT=1 also prefill batches (instead of
 * the TF32 GEMM). EMBER_CUDA_Q8=0 restores the rounded-F32 kernels. */
static bool q8_path(const cuda_backend *b, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws)
{
    if (!b->q8_on || b->f32_act || (n_tokens > 32 && !b->exact_attn)) return false;
    for (int32_t k = 0; k < n_w; k++)
        if (ember_cuda_q8_act_type(ws[k]->type) == EMBER_TYPE_F32) return false;
    return true;
}

/* A matmul node's weights and outputs (up to 4): each weight recorded and
 * found on the device (t[k]), each output's device slot (dy[k], [n_tokens,
 * n_out] floats). */
static void mm_operands(cuda_backend *b, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws, float *const *ys,
                        const ember_cuda_tensor **t, float **dy)
{
    for (int32_t k = 0; k < n_w; k++) {
        cb_rec_ptr(b, ws[k]->data);
        t[k] = cb_weight(b, ws[k]);
        dy[k] = cb_out_f(b, SLOT_OUT + k, ys[k], (size_t)(n_tokens * ws[k]->n_out));
    }
}

static void cu_matmul_q8(cuda_backend *b, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                         float *const *ys)
{
    const int64_t n = n_tokens * ws[0]->n_in, n_in = ws[0]->n_in;
    uint32_t fmt[4];
    bool same = true;
    for (int32_t k = 0; k < n_w; k++) {
        fmt[k] = ember_cuda_q8_act_type(ws[k]->type);
        same = same && fmt[k] == fmt[0];
    }
    /* a waiting RMSNorm or GLU that produces x quantizes it in its own
     * kernel (the same bytes as ember_cuda_quantize_q8), a waiting post-norm
     * add with it (cuda_fuse.c's patterns) */
    const bool fuse_norm = same && cb_pat_norm_quant(b, x, n_in, n_tokens, fmt[0]);
    const bool fuse_glu = same && !fuse_norm && cb_pat_glu_quant(b, x, n, fmt[0]);
    const bool fuse_add = same && !fuse_glu && cb_pat_add_quant(b, x, n_in, n_tokens, fmt[0], fuse_norm);
    const bool fuse_attn = same && !fuse_norm && !fuse_glu && !fuse_add && cb_pat_attn_quant(b, x, n_in, n_tokens, fmt[0]);
    const float *nx = b->pn.x, *nw = b->pn.w, *gup = b->pg.up;
    const float neps = b->pn.eps;
    const ember_cuda_act gact = b->pg.act;
    const struct { const float *x, *w; float *y, *res; float eps; } pa = {b->pa.x, b->pa.w, b->pa.y, b->pa.res, b->pa.eps};
    if (fuse_norm) b->pn.on = false;
    if (fuse_glu) b->pg.on = false;
    if (fuse_add) b->pa.on = false;
    ember_cuda_attn_params tap = b->pt.ap;
    if (fuse_attn) b->pt.on = false;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_MATMUL_Q8, (fuse_norm ? CB_FUSED_NORM : 0u) | (fuse_glu ? CB_FUSED_GLU : 0u) |
                                           (fuse_add ? CB_FUSED_ADD : 0u) | (fuse_attn ? CB_FUSED_ATTN : 0u));
    cb_rec_i64(b, n_tokens);
    cb_rec_i64(b, n_w);
    const float *dx = cb_in_f(b, 0, x, (size_t)n);
    const void *q[4];
    const ember_cuda_tensor *t[4];
    float *dy[4];
    mm_operands(b, n_tokens, n_w, ws, ys, t, dy);
    if (cb_skip(b)) return;
    int32_t n_fmt = 0;   /* activation formats quantized so far (at most 3: Q8_0, Q8_1, Q8_K) */
    for (int32_t k = 0; k < n_w; k++) {   /* x quantized once per activation format */
        int32_t j = 0;
        while (j < k && fmt[j] != fmt[k]) j++;
        if (j < k) {
            q[k] = q[j];
            continue;
        }
        void *r = cb_stage(b, SLOT_ROUND + n_fmt++, ember_cuda_q8_bytes(fmt[k], n_in, n_tokens));
        if (cb_skip(b)) return;
        if (k == 0 && fuse_add) {
            CK("matmul (post-norm add + norm + quantize)",
               ember_cuda_add_norm_quant_q8(b->cu, fmt[0], pa.x, pa.w, pa.y, pa.res, pa.eps, nw, (float *)dx, r, n_in,
                                            n_tokens, neps, fuse_norm));
            b->fused.add_norm++;
        } else if (k == 0 && fuse_norm)
            CK("matmul (norm + quantize)",
               ember_cuda_rms_norm_quant_q8(b->cu, fmt[0], nx, nw, (float *)dx, r, n_in, n_tokens, neps));
        else if (k == 0 && fuse_glu)
            CK("matmul (glu + quantize)", ember_cuda_glu_quant_q8K(b->cu, gact, (float *)dx, gup, (float *)dx, r, n));
        else if (k == 0 && fuse_attn) {
            tap.q8_type = fmt[0];
            tap.q8_buf = r;
            CK("matmul (attention + quantize)", ember_cuda_attn(b->cu, &tap, b->pt.dq, b->pt.n, b->pt.dpos, b->pt.dseq,
                                                                b->pt.dtab, b->pt.dk, b->pt.dv, b->pt.dout));
            b->fused.attn_quant++;
        }
        else
            CK("matmul (quantize activations)", ember_cuda_quantize_q8(b->cu, fmt[k], dx, n_in, n_tokens, r));
        q[k] = r;
    }
    /* weights of one type on the same activations (Q/K/V, gate/up; Qwen3.5's
     * z, alpha and beta beside a QKV of another type) in one launch, up to 3 */
    bool done[4] = {false, false, false, false};
    for (int32_t k = 0; k < n_w; k++) {
        if (done[k]) continue;
        const ember_cuda_tensor *gt[3] = {t[k]};
        float *gy[3] = {dy[k]};
        int32_t g = 1;
        for (int32_t j = k + 1; j < n_w && g < 3; j++)
            if (!done[j] && t[j]->type == t[k]->type && t[j]->row_bytes == t[k]->row_bytes && q[j] == q[k]) {
                gt[g] = t[j];
                gy[g++] = dy[j];
                done[j] = true;
            }
        CK("matmul", ember_cuda_matmul_q8_multi(b->cu, g, gt, q[k], n_tokens, gy));
    }
    for (int32_t k = 0; k < n_w; k++) cb_out_done(b, ys[k], dy[k], (size_t)(n_tokens * ws[k]->n_out));
}

/* A prompt's matmul on f16 activations written by the kernel that makes
 * them (EMBER_CUDA_PREFILL_F16; cuda_backend.h ember_cuda_rows_f16): a
 * waiting RMSNorm or GLU whose output is x writes them with its own output,
 * else one kernel converts x; either rounds x to the weights' vec_dot_type
 * on the way (as the rounded form below does: the activations the CPU's
 * vec_dot sees), and every weight's f16 GEMMs then read that one copy. Only
 * where the weights share one vec_dot_type, a Q8 format or F32 (F16/BF16
 * weights, or any with EMBER_CUDA_F32_ACT: not rounded, as below), and rows
 * are whole blocks of it; *round gets it. */
static bool f16_path(const cuda_backend *b, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws, uint32_t *round)
{
    if (!b->prefill_f16 || n_tokens <= EMBER_CUDA_GEMM_MIN_COLS) return false;
    uint32_t fmt = EMBER_TYPE_F32;
    for (int32_t k = 0; k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        if (!qt || ws[k]->type == EMBER_TYPE_F32 || ws[k]->n_in != ws[0]->n_in) return false;
        const uint32_t f = b->f32_act ? EMBER_TYPE_F32 : qt->vec_dot_type;
        if (f != EMBER_TYPE_F32 && f != EMBER_TYPE_Q8_0 && f != EMBER_TYPE_Q8_1 && f != EMBER_TYPE_Q8_K) return false;
        if (k > 0 && f != fmt) return false;
        fmt = f;
    }
    if (ws[0]->n_in % (fmt == EMBER_TYPE_Q8_K ? 256 : 32) != 0) return false;
    *round = fmt;
    return true;
}

static void cu_matmul_f16(cuda_backend *b, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                          float *const *ys, uint32_t round)
{
    const int64_t n_in = ws[0]->n_in, n = n_tokens * n_in;
    const bool fuse_norm = cb_pat_norm_f16(b, x, n_in, n_tokens);
    const bool fuse_glu = !fuse_norm && cb_pat_glu_f16(b, x, n);
    const float *nx = b->pn.x, *nw = b->pn.w, *gup = b->pg.up;
    const float neps = b->pn.eps;
    const ember_cuda_act gact = b->pg.act;
    if (fuse_norm) b->pn.on = false;
    if (fuse_glu) b->pg.on = false;
    cb_flush(b);   /* what else waits runs first (a post-norm add may write the norm's input) */
    cb_rec_op(b, EMBER_STEP_MATMUL, CB_FUSED_F16 | (fuse_norm ? CB_FUSED_NORM : 0u) | (fuse_glu ? CB_FUSED_GLU : 0u));
    cb_rec_i64(b, n_tokens);
    cb_rec_i64(b, n_w);
    const float *dx = cb_in_f(b, 0, x, (size_t)n);
    const ember_cuda_tensor *t[3];
    float *dy[3];
    mm_operands(b, n_tokens, n_w, ws, ys, t, dy);
    if (cb_skip(b)) return;
    /* [f16 rows][row scales][max, alpha, beta] */
    const size_t b_h = ((size_t)n * 2 + 255) & ~(size_t)255, b_s = ((size_t)n_tokens * sizeof(float) + 255) & ~(size_t)255;
    char *r = cb_stage(b, SLOT_ROUND, b_h + b_s + 256);
    if (cb_skip(b)) return;
    float *srow = (float *)(r + b_h);
    unsigned *smax = (unsigned *)(r + b_h + b_s);
    float *ab = (float *)(smax + 4);
    if (fuse_norm)
        CK("matmul (norm -> f16)", ember_cuda_rows_f16(b->cu, EMBER_CUDA_ROW_NORM, gact, round, nx, nw, (float *)dx, n_in, n_tokens,
                                                      neps, r, srow, smax, ab));
    else if (fuse_glu)
        CK("matmul (glu -> f16)", ember_cuda_rows_f16(b->cu, EMBER_CUDA_ROW_GLU, gact, round, dx, gup, (float *)dx, n_in, n_tokens,
                                                     0.f, r, srow, smax, ab));
    else
        CK("matmul (f16 activations)", ember_cuda_rows_f16(b->cu, EMBER_CUDA_ROW_COPY, gact, round, dx, NULL, NULL, n_in, n_tokens,
                                                          0.f, r, srow, smax, ab));
    CK("matmul", ember_cuda_matmul_multi_f16(b->cu, n_w, t, r, ab, n_tokens, dy));
    for (int32_t k = 0; k < n_w; k++) cb_out_done(b, ys[k], dy[k], (size_t)(n_tokens * ws[k]->n_out));
}

static void cu_matmul(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                      float *const *ys)
{
    cuda_backend *b = (cuda_backend *)be;
    if (n_w < 1 || n_w > 16) {   /* backend.h's limit */
        ember_error(EMBER_ERR_INVALID_ARG, "cuda: matmul of %d weights at once (1..16)", (int)n_w);
        cb_die("matmul");
    }
    if (n_w <= 4 && q8_path(b, n_tokens, n_w, ws)) {   /* groups its launches by type, up to 3 weights each */
        cu_matmul_q8(b, x, n_tokens, n_w, ws, ys);
        return;
    }
    if (n_w > 3) {   /* the other paths take up to 3 weights (mm_seg): Qwen3.5's 4 in two calls */
        for (int32_t k0 = 0; k0 < n_w; k0 += 3) cu_matmul(be, x, n_tokens, n_w - k0 < 3 ? n_w - k0 : 3, ws + k0, ys + k0);
        return;
    }
    uint32_t round = EMBER_TYPE_F32;
    if (f16_path(b, n_tokens, n_w, ws, &round)) {
        cu_matmul_f16(b, x, n_tokens, n_w, ws, ys, round);
        return;
    }
    const int64_t n = n_tokens * ws[0]->n_in;
    const bool fuse_round = cb_pat_norm_round(b, x, n, n_w, ws);
    const bool fuse_glu = cb_pat_glu_round(b, x, n, n_w, ws);
    const ember_cuda_act gact = b->pg.act;
    const float *gup = b->pg.up;
    if (fuse_glu) b->pg.on = false;
    const float *nx = b->pn.x, *nw = b->pn.w;
    const int64_t nn = b->pn.n, nrows = b->pn.n_rows;
    const float neps = b->pn.eps;
    if (fuse_round) {
        b->pn.on = false;
        cb_flush_head(b);
        cb_flush_pa(b);
        cb_flush_scale(b);
        cb_flush_glu(b);
    } else {
        cb_flush(b);
    }
    cb_rec_op(b, EMBER_STEP_MATMUL, (fuse_round ? CB_FUSED_NORM : 0u) | (fuse_glu ? CB_FUSED_GLU : 0u));
    cb_rec_i64(b, n_tokens);
    cb_rec_i64(b, n_w);
    const float *dx = cb_in_f(b, 0, x, (size_t)n);
    /* activations rounded to each weight's vec_dot_type, once per format
     * (as the CPU backend quantizes them), unless EMBER_CUDA_F32_ACT */
    uint32_t fmt[3];
    const float *xin[3];
    const ember_cuda_tensor *t[3];
    float *dy[3];
    for (int32_t k = 0; k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        fmt[k] = b->f32_act || !qt ? EMBER_TYPE_F32 : qt->vec_dot_type;
        xin[k] = dx;
    }
    mm_operands(b, n_tokens, n_w, ws, ys, t, dy);
    if (cb_skip(b)) return;
    if (fuse_round) {
        float *r = cb_stage(b, SLOT_ROUND, (size_t)n * sizeof(float));
        if (cb_skip(b)) return;
        CK("matmul (norm + rounding)", ember_cuda_rms_norm_round_q8(b->cu, nx, nw, (float *)dx, r, nn, nrows, neps));
        for (int32_t k = 0; k < n_w; k++) fmt[k] = EMBER_TYPE_F32, xin[k] = r;
    }
    if (fuse_glu) {
        float *r = cb_stage(b, SLOT_ROUND, (size_t)n * sizeof(float));
        if (cb_skip(b)) return;
        CK("matmul (glu + rounding)", ember_cuda_glu_round_q8K(b->cu, gact, (float *)dx, gup, (float *)dx, r, n));
        for (int32_t k = 0; k < n_w; k++) fmt[k] = EMBER_TYPE_F32, xin[k] = r;
    }
    for (int32_t k = 0; k < n_w; k++) {
        if (fmt[k] == EMBER_TYPE_F32) continue;
        int32_t j = 0;
        while (j < k && fmt[j] != fmt[k]) j++;
        if (j < k) {
            xin[k] = xin[j];
            continue;
        }
        float *r = cb_stage(b, SLOT_ROUND + k, (size_t)n * sizeof(float));
        if (cb_skip(b)) return;
        CK("matmul (activation rounding)", ember_cuda_round_act(b->cu, fmt[k], dx, r, n));
        xin[k] = r;
    }
    CK("matmul", ember_cuda_matmul_multi(b->cu, n_w, t, xin, n_tokens, dy));
    for (int32_t k = 0; k < n_w; k++) cb_out_done(b, ys[k], dy[k], (size_t)(n_tokens * ws[k]->n_out));
}

/* cos/sin of every (position < n_ctx, pair) for one RoPE configuration,
 * computed here exactly as the CPU backend's rope_rows does (cpu.c: f32
 * theta steps, libm cosf/sinf) and kept on the device; NULL when tables are
 * off, full, or cannot be made now (inside a capture or replay). Only the
 * leading pairs whose angle reaches 2^-12 at the last position are kept
 * (*n_tab of them): the kernel gives the others glibc's small-angle results
 * (cuda_rope_tab.cu). E4B: 64 of 256 pairs on full layers, 128 of 128 on
 * sliding ones: 1536 B per position instead of 3072. */
static const float *rope_table(cuda_backend *b, float base, float scale, int32_t n_rot, const float *ff,
                               int32_t *n_pos, int32_t *n_tab)
{
    for (int32_t i = 0; i < b->n_rtab; i++) {
        const struct rope_table *r = &b->rtab[i];
        if (r->base == base && r->scale == scale && r->n_rot == n_rot && r->ff == ff) {
            *n_pos = r->n_pos;
            *n_tab = r->n_tab;
            return r->dev;
        }
    }
    if (!b->rope_tab_on || b->mode != M_EAGER || b->n_rtab == (int32_t)(sizeof b->rtab / sizeof b->rtab[0]))
        return NULL;
    int64_t np = b->lim.max_kv_tokens;
    if (np < 1) np = 1;
    if (np > 65536) np = 65536;
    const int32_t half = n_rot / 2;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    /* the angle grows with the position (each f32 step is monotonic): pairs
     * below 2^-12 at the last position are below it everywhere */
    int32_t nt = 1;
    {
        float theta = (float)(np - 1);
        for (int32_t i = 0; i < half; i++) {
            const float th = scale * (ff ? theta / ff[i] : theta);
            if (!(fabsf(th) < 0x1p-12f)) nt = i + 1;
            theta *= theta_scale;
        }
    }
    const size_t bytes = (size_t)np * (size_t)nt * 2 * sizeof(float);
    float *h = malloc(bytes);
    if (!h) return NULL;
    for (int64_t p = 0; p < np; p++) {
        float theta = (float)p;
        for (int32_t i = 0; i < nt; i++) {
            const float th = scale * (ff ? theta / ff[i] : theta);
            h[(p * nt + i) * 2] = cosf(th);
            h[(p * nt + i) * 2 + 1] = sinf(th);
            theta *= theta_scale;
        }
    }
    void *d = NULL;
    if (ember_cuda_malloc(b->cu, bytes, &d) != EMBER_OK) {
        free(h);
        return NULL;
    }
    CK("rope table", ember_cuda_upload(b->cu, d, h, bytes));
    free(h);
    struct rope_table *r = &b->rtab[b->n_rtab++];
    *r = (struct rope_table){base, scale, n_rot, ff, d, (int32_t)np, nt, bytes};
    *n_pos = r->n_pos;
    *n_tab = r->n_tab;
    return r->dev;
}

static void cu_rope_ext(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                        int32_t n_rot, const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode,
                        const float *freq_factors)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_rec_op(b, EMBER_STEP_ROPE, 0);
    cb_rec_i64(b, n_tokens);
    cb_rec_i64(b, n_head);
    cb_rec_i64(b, head_dim);
    cb_rec_i64(b, n_rot);
    cb_rec_i64(b, (int64_t)mode);
    cb_rec_f32(b, base);
    cb_rec_f32(b, freq_scale);
    cb_rec_ptr(b, freq_factors);
    const size_t n = (size_t)n_tokens * n_head * head_dim;
    float *d = cb_io_f(b, 0, x, n);
    const bool step_pos = b->in_step && pos == b->s_pos && n_tokens <= b->s_n;
    const int32_t *dpos = step_pos ? cb_step_pos(b) : cb_up_i32(b, 1, pos, (size_t)n_tokens);
    const float *dff = freq_factors ? cb_vec(b, freq_factors, n_rot / 2) : NULL;
    int32_t n_pos = 0, n_tab = 0;
    const float *tab = rope_table(b, base, freq_scale, n_rot, freq_factors, &n_pos, &n_tab);
    cb_rec_ptr(b, tab);
    cb_rec_i64(b, step_pos);   /* the step's positions, or an upload (never replayed) */
    if (tab && cb_is_act(b, x) && !b->ph.store && n_tokens == b->s_n && dpos == cb_step_pos(b) && cb_ph_take_norm(b)) {
        /* joins the head preparation, after the norm of x if that waits there */
        ember_cuda_head_part *P = cb_ph_find(b, d);
        if (P && (P->rope || P->n_head != n_head || b->ph.head_dim != head_dim)) P = NULL;
        else if (!P) P = cb_ph_add(b, d, n_head, head_dim);
        if (P) {
            P->rope = true;
            P->neox = mode == EMBER_ROPE_NEOX;
            P->n_rot = n_rot;
            P->n_pos = n_pos;
            P->n_tab = n_tab;
            P->tab = tab;
            P->theta_scale = powf(base, -2.0f / (float)n_rot);
            P->freq_scale = freq_scale;
            P->ff = dff;
            return;
        }
    }
    cb_flush(b);
    if (cb_skip(b)) return;
    if (tab) {
        CK("rope", ember_cuda_rope_tab_pairs(b->cu, d, dpos, n_tokens, n_head, head_dim, n_rot,
                                             mode == EMBER_ROPE_NEOX ? EMBER_CUDA_ROPE_NEOX : EMBER_CUDA_ROPE_NORMAL,
                                             tab, n_pos, n_tab, base, freq_scale, dff));
        cb_out_done(b, x, d, n);
        return;
    }
    CK("rope", ember_cuda_rope(b->cu, d, dpos, n_tokens, n_head, head_dim, n_rot,
                               mode == EMBER_ROPE_NEOX ? EMBER_CUDA_ROPE_NEOX : EMBER_CUDA_ROPE_NORMAL, base,
                               freq_scale, dff));
    cb_out_done(b, x, d, n);
}

static void cu_rope(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
                    const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode)
{
    cu_rope_ext(be, x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, NULL);
}

static void glu(ember_backend *be, ember_cuda_act act, float *gate, const float *up_h, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_flush(b);
    cb_rec_op(b, EMBER_STEP_GLU, 0);
    cb_rec_i64(b, (int64_t)act);
    cb_rec_i64(b, n);
    float *dg = cb_io_f(b, 0, gate, (size_t)n);
    const float *du = cb_in_f(b, 1, up_h, (size_t)n);
    if (cb_glu_waits(b, gate, up_h, n)) {
        b->pg.on = true;   /* launched by the next op, or with the next matmul's Q8_K rounding */
        b->pg.act = act;
        b->pg.gate = dg;
        b->pg.up = du;
        b->pg.n = n;
        return;
    }
    if (cb_skip(b)) return;
    CK("glu", ember_cuda_glu(b->cu, act, dg, du, dg, n));
    cb_out_done(b, gate, dg, (size_t)n);
}

/* GELU in f32 (backend.h contract): the f16 table of the CPU backend is a
 * dependent global load per element, on the serial path of a decode step's
 * few-CTA GLU kernel; EMBER_CUDA_EXACT=1 keeps it (the CPU's bits). */
static void cu_geglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    glu(be, b->exact_attn ? EMBER_CUDA_ACT_GELU_TANH_F16 : EMBER_CUDA_ACT_GELU_TANH, gate, u, n);
}

static void cu_swiglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    glu(be, EMBER_CUDA_ACT_SILU, gate, u, n);
}

static void cu_add(ember_backend *be, float *y, const float *x, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    const bool with_norm = cb_pat_norm_add(b, y, x, n);
    cb_rec_op(b, EMBER_STEP_ADD, with_norm ? CB_FUSED_NORM : 0u);
    cb_rec_i64(b, n);
    if (with_norm) {
        b->pn.on = false;   /* y += rms_norm(..) in one kernel (it still writes the norm's output) */
        cb_flush_head(b);
        cb_flush_pa(b);
        cb_flush_scale(b);
        cb_rec_ptr(b, y);
        if (b->fuse_add && b->in_step && !b->f32_act) {   /* held back for the next block's pre-norm and matmul */
            b->pa = (struct cb_pending_add){.on = true, .x = b->pn.x, .w = b->pn.w, .y = b->pn.y, .res = y,
                                            .n = b->pn.n, .n_rows = b->pn.n_rows, .eps = b->pn.eps};
            return;
        }
        if (cb_skip(b)) return;
        CK("rms_norm_add", ember_cuda_rms_norm_add_out(b->cu, b->pn.x, b->pn.w, b->pn.y, y, b->pn.n, b->pn.n_rows,
                                                       b->pn.eps));
        return;
    }
    cb_flush(b);
    float *dy = cb_io_f(b, 0, y, (size_t)n);
    const float *dx = cb_in_f(b, 1, x, (size_t)n);
    if (cb_add_waits(b, y, x)) {   /* held back for the next block's pre-norm and matmul, as Gemma's above */
        b->pa = (struct cb_pending_add){.on = true, .plain = true, .x = dx, .res = dy, .n = n, .n_rows = 1};
        return;
    }
    if (cb_skip(b)) return;
    CK("add", ember_cuda_add(b->cu, dy, dx, dy, n));
    cb_out_done(b, y, dy, (size_t)n);
}

static void cu_scale(ember_backend *be, float *x, float s, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_rec_op(b, EMBER_STEP_SCALE, 0);
    cb_rec_i64(b, n);
    cb_rec_f32(b, s);
    const bool defer = cb_scale_waits(b, x, s);
    /* a waiting head preparation stays: it comes before this scale; a
     * waiting post-norm add goes first (a matmul may fuse it alone later,
     * after the scale was launched) */
    if (!defer || b->pn.on || b->pg.on || b->ps.on || b->pa.on) cb_flush(b);
    float *d = cb_io_f(b, 0, x, (size_t)n);
    if (defer) {
        b->ps.on = true;   /* folded into the attention that reads x, or launched by the next op */
        b->ps.x = d;
        b->ps.s = s;
        b->ps.n = n;
        return;
    }
    if (cb_skip(b)) return;
    CK("scale", ember_cuda_scale(b->cu, d, s, n));
    cb_out_done(b, x, d, (size_t)n);
}

static void check_kv(const ember_kv_layer_view *kv)
{
    if (kv->type_k != EMBER_TYPE_F16 || kv->type_v != EMBER_TYPE_F16) {
        ember_error(EMBER_ERR_UNSUPPORTED, "KV cache types %s/%s: only F16 runs on the GPU so far",
                    ember_type_name(kv->type_k), ember_type_name(kv->type_v));
        cb_die("kv cache");
    }
}

static void cu_kv_store(ember_backend *be, const ember_kv_layer_view *kv, const float *k, const float *v,
                        const int64_t *rows, int32_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    check_kv(kv);
    cb_rec_op(b, EMBER_STEP_KV_STORE, 0);
    cb_rec_i64(b, n);
    cb_rec_ptr(b, kv->k);
    cb_rec_ptr(b, kv->v);
    const int32_t *dcells;
    bool step_rows = true;
    if (b->in_step && rows == b->s_kv_row && n <= b->s_n) {
        dcells = cb_step_cells(b);
        cb_rec_i64(b, 1);
    } else if (b->in_step && b->s_kv_row_swa && rows == b->s_kv_row_swa && n <= b->s_n) {
        dcells = cb_step_cells_swa(b);
        cb_rec_i64(b, 2);
    } else {
        step_rows = false;
        cb_rec_i64(b, 0);   /* uploaded rows (never replayed) */
        int32_t *cells = cb_host_i32(b, (size_t)n);
        for (int32_t i = 0; i < n; i++) cells[i] = (int32_t)rows[i];
        dcells = cb_up_i32(b, 2, cells, (size_t)n);
    }
    const int64_t rk = (int64_t)(kv->k_row_bytes / 2), rv = (int64_t)(kv->v_row_bytes / 2);
    uint16_t *dk = cb_kv_dev(b, kv->k, kv->k_row_bytes * (size_t)kv->n_rows);
    uint16_t *dv = cb_kv_dev(b, kv->v, kv->v_row_bytes * (size_t)kv->n_rows);
    const float *sk = cb_in_f(b, 0, k, (size_t)(n * rk)), *sv = cb_in_f(b, 1, v, (size_t)(n * rv));
    const int64_t D = b->ph.head_dim;
    if (cb_ph_on(b) && b->ph.n_parts > 0 && !b->ph.store && step_rows && n == b->s_n && !b->pn.on && !b->pg.on &&
        !b->pa.on &&
        !(b->ps.on && (b->ps.x == sk || b->ps.x == sv)) && cb_is_act(b, k) && cb_is_act(b, v) && sk != sv &&
        rk % D == 0 && rv % D == 0) {
        /* the store joins the head preparation: K and V rows go to the
         * cache from the kernel that normalises and turns them */
        ember_cuda_head_part *pk = cb_ph_find(b, sk), *pv = cb_ph_find(b, sv);
        if (!pk) pk = cb_ph_add(b, (float *)sk, rk / D, D);
        if (pk && !pv) pv = cb_ph_add(b, (float *)sv, rv / D, D);
        if (pk && pv && !pk->cache && !pv->cache && pk->n_head == rk / D && pv->n_head == rv / D) {
            pk->cache = dk;
            pv->cache = dv;
            b->ph.cells = dcells;
            b->ph.store = true;
            return;
        }
    }
    cb_flush_head(b);
    cb_flush_norm(b);
    cb_flush_glu(b);
    if (b->ps.on && (b->ps.x == k || b->ps.x == v)) cb_flush_scale(b);
    if (cb_skip(b)) return;
    CK("kv_store", ember_cuda_kv_store2(b->cu, sk, rk, sv, rv, n, dcells, dk, dv));
}

static void cu_kv_copy(ember_backend *be, const ember_kv_layer_view *kv, int64_t dst_row, int64_t src_row,
                       int64_t n_rows)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_flush(b);
    dev_copy *ck = cb_find_copy(b, kv->k), *cv = cb_find_copy(b, kv->v);
    if (!ck || !cv) return;   /* nothing stored on the device yet */
    CK("kv_copy", ember_cuda_copy(b->cu, (char *)ck->t.data + (size_t)dst_row * kv->k_row_bytes,
                                  (const char *)ck->t.data + (size_t)src_row * kv->k_row_bytes,
                                  (size_t)n_rows * kv->k_row_bytes));
    CK("kv_copy", ember_cuda_copy(b->cu, (char *)cv->t.data + (size_t)dst_row * kv->v_row_bytes,
                                  (const char *)cv->t.data + (size_t)src_row * kv->v_row_bytes,
                                  (size_t)n_rows * kv->v_row_bytes));
}

static void cu_attention(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                         const float *q, const ember_attn_query *queries, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    check_kv(kv);
    if (p->head_dim_k != p->head_dim_v) {
        ember_error(EMBER_ERR_UNSUPPORTED, "head_dim_k %d != head_dim_v %d", p->head_dim_k, p->head_dim_v);
        cb_die("attention");
    }
    float q_scale = 1.f;
    if (cb_pat_scale_attn(b, q, (int64_t)n * p->n_head * p->head_dim_k)) {
        b->ps.on = false;   /* q * 2^k rounds to f16 exactly as q does */
        q_scale = b->ps.s;
    }
    cb_flush(b);   /* the head preparation first: it writes q and the K/V rows */
    cb_rec_op(b, EMBER_STEP_ATTENTION, 0);
    cb_rec_i64(b, n);
    cb_rec_ptr(b, kv->k);
    cb_rec_ptr(b, kv->v);
    cb_rec_i64(b, p->n_head);
    cb_rec_i64(b, p->n_head_kv);
    cb_rec_i64(b, p->head_dim_k);
    cb_rec_i64(b, p->n_swa);
    cb_rec_f32(b, p->kq_scale);
    cb_rec_f32(b, q_scale);
    const int32_t bt = kv->block_tokens;
    const int32_t *dpos, *dseq, *dtab;
    int32_t max_ctx, max_pages;
    const bool full_q = queries == b->s_query, swa_q = b->s_query_swa && queries == b->s_query_swa;
    if (b->in_step && (full_q || swa_q) && n == b->s_n) {
        dpos = cb_step_qpos(b);
        dseq = cb_step_seq(b);
        dtab = b->d_step + (swa_q ? b->s_tab_swa : b->s_tab);
        max_ctx = b->s_max_ctx;
        max_pages = b->s_max_pages;
        cb_rec_i64(b, swa_q ? 2 : 1);
    } else {
        max_ctx = (int32_t)b->lim.max_kv_tokens;
        for (int32_t i = 0; i < n; i++)
            if (queries[i].pos + 1 > max_ctx) max_ctx = queries[i].pos + 1;
        max_pages = (max_ctx + bt - 1) / bt;
        cb_rec_i64(b, 0);   /* uploaded queries (never replayed) */
        /* one block-table row per query (queries of one sequence repeat it) */
        int32_t *h = cb_host_i32(b, (size_t)n * (max_pages + 2));
        int32_t *hpos = h, *hseq = h + n, *htab = h + 2 * n;
        for (int32_t i = 0; i < n; i++) {
            hpos[i] = queries[i].pos;
            hseq[i] = i;
            const int32_t used = queries[i].pos / bt + 1;
            for (int32_t j = 0; j < max_pages; j++) {   /* -1: a block the sliding group released */
                const int32_t blk = j < used ? queries[i].blocks[j] : 0;
                htab[(size_t)i * max_pages + j] = blk < 0 ? 0 : blk;
            }
        }
        const int32_t *d = cb_up_i32(b, 3, h, (size_t)n * (max_pages + 2));
        dpos = d;
        dseq = d ? d + n : NULL;
        dtab = d ? d + 2 * n : NULL;
    }
    cb_rec_i64(b, max_pages);
    const size_t nq = (size_t)n * p->n_head * p->head_dim_k;
    const float *dq = cb_in_f(b, 0, q, nq);
    float *dout = cb_out_f(b, 1, out, nq);
    const uint16_t *dk = cb_kv_dev(b, kv->k, kv->k_row_bytes * (size_t)kv->n_rows);
    const uint16_t *dv = cb_kv_dev(b, kv->v, kv->v_row_bytes * (size_t)kv->n_rows);
    const ember_cuda_attn_params ap = {
        .n_head = p->n_head, .n_head_kv = p->n_head_kv, .head_dim = p->head_dim_k, .scale = p->kq_scale * q_scale,
        .softcap = 0.f, .n_swa = p->n_swa, .page_size = bt, .max_pages = max_pages, .max_ctx = max_ctx,
        .exact = b->exact_attn, .exact_tiled = n >= 64,   /* the CPU's split (FA_TILE_Q) */
    };
    if (cb_attn_waits(b, q, out, n)) {   /* the next matmul may take it (attention + quantize) */
        b->pt = (cb_held_attn){.on = true, .ap = ap, .n = n, .out = out, .dq = dq, .dpos = dpos, .dseq = dseq,
                               .dtab = dtab, .dk = dk, .dv = dv, .dout = dout};
        return;
    }
    if (cb_skip(b)) return;
    if (b->attn_tc && !b->exact_attn && b->mode == M_EAGER && n >= ATTN_TC_MIN_RUN && p->head_dim_k % 8 == 0) {
        /* prompt runs on the tensor cores (cuda_attn_prefill.cu): a run is
         * consecutive entries of one sequence at consecutive positions;
         * short runs (decode tokens batched with a prompt) keep the kernel */
        const size_t row = (size_t)p->n_head * p->head_dim_k;
        for (int32_t i0 = 0; i0 < n;) {
            int32_t i1 = i0 + 1;
            while (i1 < n && queries[i1].blocks == queries[i0].blocks && queries[i1].pos == queries[i1 - 1].pos + 1) i1++;
            if (i1 - i0 >= ATTN_TC_MIN_RUN)
                CK("attention (prompt run)", ember_cuda_attn_prefill(b->cu, &ap, dq + (size_t)i0 * row, i1 - i0, queries[i0].pos,
                                                                     queries[i0].blocks, dk, dv, dout + (size_t)i0 * row));
            else
                CK("attention", ember_cuda_attn(b->cu, &ap, dq + (size_t)i0 * row, i1 - i0, dpos + i0, dseq + i0, dtab, dk, dv,
                                                dout + (size_t)i0 * row));
            i0 = i1;
        }
        cb_out_done(b, out, dout, nq);
        return;
    }
    CK("attention", ember_cuda_attn(b->cu, &ap, dq, n, dpos, dseq, dtab, dk, dv, dout));
    cb_out_done(b, out, dout, nq);
}

/* host scratch: the CPU backend of verify mode (device memory: print_memory) */
static uint64_t op_scratch_bytes(const ember_backend *be)
{
    const cuda_backend *b = (const cuda_backend *)be;
    return b->cpu ? b->cpu->ops->scratch_bytes(b->cpu) : 0;
}


const ember_backend_ops cb_cuda_ops = {
    .name = "cuda",
    .free = op_free,
    .get_rows = cu_get_rows,
    .dequant_host_rows = cu_dequant_host_rows,
    .rms_norm = cu_rms_norm,
    .matmul = cu_matmul,
    .rope = cu_rope,
    .rope_ext = cu_rope_ext,
    .geglu = cu_geglu,
    .swiglu = cu_swiglu,
    .add = cu_add,
    .scale = cu_scale,
    .kv_store = cu_kv_store,
    .attention = cu_attention,
    .kv_copy = cu_kv_copy,
    .act_alloc = op_act_alloc,
    .act_free = op_act_free,
    .host_alloc = op_host_alloc,
    .host_free = op_host_free,
    .copy = cu_copy,
    .upload = cu_upload,
    .softcap = cu_softcap,
    .step_begin = cb_step_begin,
    .step_end = cb_step_end,
    .scratch_bytes = op_scratch_bytes,
    .print_memory = cb_print_memory,
    .logits_top = op_logits_top,
    .logits_top_start = op_logits_top_start,
    .logits_top_finish = op_logits_top_finish,
    .logits_sync = op_logits_sync,
    .timer_mark = op_timer_mark,
    .timer_seconds = op_timer_seconds,
    /* recurrent (linear-attention) ops and their state memory: cuda_rstate.c */
    .conv1d_silu = cb_conv1d_silu,
    .gated_delta_rule = cb_gated_delta_rule,
    .sigmoid_mul = cb_sigmoid_mul,
    .copy_strided = cb_copy_strided,
    .state_alloc = cb_state_alloc,
    .state_free = cb_state_free,
    .state_copy = cb_state_copy,
};

ember_status ember_backend_cuda_new(const ember_backend_options *opt, const ember_backend_limits *lim,
                                    ember_backend **out)
{
    if (!out || !lim) return ember_error(EMBER_ERR_INVALID_ARG, "ember_backend_cuda_new: NULL argument");
    *out = NULL;
    const ember_backend_options o = opt ? *opt : ember_backend_options_default();
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return ember_error(EMBER_ERR_NOMEM, "ember_backend_cuda_new: out of memory");
    ember_status st = ember_cuda_new(o.device, &o, &b->cu);
    if (st != EMBER_OK) {
        free(b);
        return st;
    }
    b->base.ops = &cb_cuda_ops;
    b->base.impl = b;
    b->lim = *lim;
    b->f32_act = o.cuda_f32_act;
    b->q8_on = o.cuda_q8;
    b->rope_tab_on = o.cuda_rope_table;
    b->graphs_on = o.cuda_graphs;
    b->graph_log = o.cuda_graph_log;
    b->fuse_on = o.cuda_fuse;
    b->fuse_head = o.cuda_fuse && o.cuda_fuse_head;
    b->fuse_add = o.cuda_fuse && o.cuda_fuse_add;
    b->fuse_attn = o.cuda_fuse && o.cuda_fuse_attn;
    b->exact_attn = o.cuda_exact;
    b->attn_tc = o.cuda_attn_tc;
    b->gdr_chunk = o.cuda_gdr_chunk;
    b->prefill_f16 = o.cuda_prefill_f16 && o.cuda_gemm_f16 && !o.cuda_exact;
    /* F16 KV only; activations on the device; graphs key on the batch
     * shape, not the layer count, so no layer-skip */
    b->base.caps = (ember_backend_caps){
        .device_activations = true, .graphed_steps = b->graphs_on, .layer_skip = false, .lazy_placement = true,
        .kv_types = 1u << EMBER_TYPE_F16, .token_feedback = o.cuda_feedback,
    };
    if (o.cuda_verify) {
        b->base.ops = &cb_cuda_ops_verify;
        b->base.caps.device_activations = false;
        b->base.caps.graphed_steps = false;
        b->base.caps.token_feedback = false;   /* the CPU reference reads the tokens on the host */
        ember_backend_options co = o;
        co.n_threads = 0;
        st = ember_backend_cpu_new(&co, lim, &b->cpu);
        if (st != EMBER_OK) {
            ember_cuda_free(b->cu);
            free(b);
            return st;
        }
    }
    /* rounded activations of the widest matmul, allocated once (graphs
     * captured later keep these addresses). Only the first slot: the others
     * serve a matmul whose weights want different activation formats (rare:
     * E4B's never do), grown by cb_stage() in the first eager step that needs
     * them (20 MiB each for E4B at n_ubatch 512). */
    const size_t round_bytes = (size_t)(lim->max_tokens > 0 ? lim->max_tokens : 1) *
                               (size_t)(lim->max_n_in > 0 ? lim->max_n_in : 1) * sizeof(float);
    for (int k = 0; k < 1; k++) {
        b->stage_bytes[SLOT_ROUND + k] = round_bytes;
        st = ember_cuda_malloc(b->cu, round_bytes, &b->stage[SLOT_ROUND + k]);
        if (st != EMBER_OK) {
            b->stage_bytes[SLOT_ROUND + k] = 0;
            op_free(&b->base);
            return st;
        }
    }
    *out = &b->base;
    return EMBER_OK;
}

void ember_backend_cuda_fusion_counts(const ember_backend *be, ember_cuda_fusion_counts *out)
{
    *out = ((const cuda_backend *)be)->fused;
}
