/*
 * cuda_fuse.c — the fusion state of the CUDA backend: ops whose kernels
 * wait for the next op (cuda_backend.pn/ps/pg/ph/pa, see cuda_internal.h)
 * and the flush that launches them when the next op cannot take them.
 *
 * Owns: the named fusion patterns (when an op waits, and which waiting op
 * the next op takes into its kernel), launching what waits (cb_flush and
 * its pieces) in the order the ops came, and the bookkeeping of the head
 * preparation (per-head norms, RoPE and K/V store of a layer, one
 * ember_cuda_head_prep launch).
 * Must not: launch an op's own kernels (the op entry points in
 * backend_cuda.c do, with what they took), or touch the device during a
 * replay (cb_skip).
 */
#include "backend/cuda/cuda_internal.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* Launch what fusion held back (see cuda_backend.fuse_on). */
void cb_flush_attn(cuda_backend *b)
{
    if (!b->pt.on) return;
    b->pt.on = false;
    if (cb_skip(b)) return;
    CK("attention", ember_cuda_attn(b->cu, &b->pt.ap, b->pt.dq, b->pt.n, b->pt.dpos, b->pt.dseq, b->pt.dtab, b->pt.dk,
                                    b->pt.dv, b->pt.dout));
}

void cb_flush_pa(cuda_backend *b)
{
    cb_flush_attn(b);
    if (!b->pa.on) return;
    b->pa.on = false;
    if (cb_skip(b)) return;
    if (b->pa.plain) {
        CK("add", ember_cuda_add(b->cu, b->pa.res, b->pa.x, b->pa.res, b->pa.n * b->pa.n_rows));
        return;
    }
    CK("rms_norm_add", ember_cuda_rms_norm_add_out(b->cu, b->pa.x, b->pa.w, b->pa.y, b->pa.res, b->pa.n,
                                                   b->pa.n_rows, b->pa.eps));
}

void cb_flush_norm(cuda_backend *b)
{
    cb_flush_pa(b);   /* it comes first: the norm may read its residual */
    if (!b->pn.on) return;
    b->pn.on = false;
    if (cb_skip(b)) return;
    CK("rms_norm", ember_cuda_rms_norm(b->cu, b->pn.x, b->pn.w, b->pn.y, b->pn.n, b->pn.n_rows, b->pn.eps));
}

void cb_flush_scale(cuda_backend *b)
{
    cb_flush_attn(b);
    if (!b->ps.on) return;
    b->ps.on = false;
    if (cb_skip(b)) return;
    CK("scale", ember_cuda_scale(b->cu, b->ps.x, b->ps.s, b->ps.n));
}

void cb_flush_glu(cuda_backend *b)
{
    cb_flush_attn(b);
    if (!b->pg.on) return;
    b->pg.on = false;
    if (cb_skip(b)) return;
    CK("glu", ember_cuda_glu(b->cu, b->pg.act, b->pg.gate, b->pg.up, b->pg.gate, b->pg.n));
}

void cb_flush_head(cuda_backend *b)
{
    cb_flush_attn(b);
    if (!b->ph.n_parts) return;
    ember_cuda_head_args a = {.n_tokens = b->s_n, .head_dim = b->ph.head_dim, .n_parts = b->ph.n_parts,
                              .pos = cb_step_pos(b), .cells = b->ph.cells};
    memcpy(a.part, b->ph.part, sizeof a.part);
    b->ph.n_parts = 0;
    b->ph.store = false;
    b->ph.cells = NULL;
    if (cb_skip(b)) return;
    CK("head_prep", ember_cuda_head_prep(b->cu, &a));
    b->fused.head_prep++;
}

void cb_flush(cuda_backend *b)
{
    cb_flush_attn(b);
    cb_flush_head(b);
    cb_flush_pa(b);
    cb_flush_norm(b);
    cb_flush_scale(b);
    cb_flush_glu(b);
}

/* ---- head preparation (cuda_backend.ph) ---------------------------------- */

bool cb_ph_on(const cuda_backend *b) { return b->fuse_head && !b->exact_attn && b->in_step && b->s_n > 0; }

ember_cuda_head_part *cb_ph_find(cuda_backend *b, const float *x)
{
    for (int32_t i = 0; i < b->ph.n_parts; i++)
        if (b->ph.part[i].x == x) return &b->ph.part[i];
    return NULL;
}

/* A new part for x ([s_n, n_head, head_dim]), or NULL when none fits. */
ember_cuda_head_part *cb_ph_add(cuda_backend *b, float *x, int64_t n_head, int64_t head_dim)
{
    if (b->ph.n_parts == 3 || b->ph.store || n_head <= 0 || n_head > 4096 || head_dim > 1024 || head_dim % 2 ||
        (b->ph.n_parts && b->ph.head_dim != head_dim))
        return NULL;
    ember_cuda_head_part *P = &b->ph.part[b->ph.n_parts++];
    memset(P, 0, sizeof *P);
    P->x = x;
    P->n_head = (int32_t)n_head;
    b->ph.head_dim = (int32_t)head_dim;
    return P;
}

/* The waiting RMSNorm joins the head preparation when it is a per-head norm
 * in place (rows a multiple of the step's tokens) of a tensor not there
 * yet; true when nothing waits any more (none, or it joined) and no scale
 * or GLU waits. */
bool cb_ph_take_norm(cuda_backend *b)
{
    if (!cb_ph_on(b) || b->ps.on || b->pg.on || b->pa.on) return false;
    if (!b->pn.on) return true;
    if (b->pn.x != b->pn.y || b->pn.n_rows % b->s_n || cb_ph_find(b, b->pn.y)) return false;
    ember_cuda_head_part *P = cb_ph_add(b, b->pn.y, b->pn.n_rows / b->s_n, b->pn.n);
    if (!P) return false;
    P->norm = true;
    P->norm_w = b->pn.w;
    P->eps = b->pn.eps;
    b->pn.on = false;
    return true;
}

/* ---- named patterns: when an op waits, and what the next op takes ---------- */

bool cb_norm_waits(const cuda_backend *b, const float *y, const float *x)
{
    return b->fuse_on && b->in_step && cb_is_act(b, x) && cb_is_act(b, y);
}

bool cb_glu_waits(const cuda_backend *b, const float *gate, const float *up, int64_t n)
{
    return b->fuse_on && b->in_step && cb_is_act(b, gate) && cb_is_act(b, up) && n % 256 == 0;
}

static bool pow2(float s)
{
    int e;
    return s > 0.f && frexpf(s, &e) == 0.5f;
}

bool cb_scale_waits(const cuda_backend *b, const float *x, float s)
{
    return b->fuse_on && !b->exact_attn && b->in_step && cb_is_act(b, x) && pow2(s);
}

bool cb_pat_head_norm(const cuda_backend *b, const float *y, const float *x, int64_t n_rows)
{
    return x == y && cb_is_act(b, x) && cb_ph_on(b) && n_rows % b->s_n == 0;
}

bool cb_add_waits(const cuda_backend *b, const float *y, const float *x)
{
    return b->fuse_add && b->in_step && !b->f32_act && cb_is_act(b, x) && cb_is_act(b, y) && x != y;
}

/* The waiting add's rows are [n_rows, n]: a plain add's only by its total. */
static bool pa_shape(const cuda_backend *b, int64_t n, int64_t n_rows)
{
    return b->pa.plain ? b->pa.n * b->pa.n_rows == n * n_rows : n == b->pa.n && n_rows == b->pa.n_rows;
}

bool cb_pat_add_norm(const cuda_backend *b, const float *y, const float *x, int64_t n_rows, int64_t n)
{
    return b->pa.on && x == b->pa.res && y != x && pa_shape(b, n, n_rows) && cb_is_act(b, y) && !b->pn.on &&
           !b->ps.on && !b->pg.on && !b->ph.n_parts;
}

bool cb_pat_norm_add(const cuda_backend *b, const float *y, const float *x, int64_t n)
{
    return b->pn.on && b->pn.y == x && b->pn.n * b->pn.n_rows == n && cb_is_act(b, y) && b->pn.x != y;
}

/* Q8 block formats the fused norm / add kernels write (Q8_K: whole 256-blocks). */
static bool q8_blocks(uint32_t fmt, int64_t n_in)
{
    return fmt == EMBER_TYPE_Q8_0 || fmt == EMBER_TYPE_Q8_1 || (fmt == EMBER_TYPE_Q8_K && n_in % 256 == 0);
}

bool cb_pat_norm_quant(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens, uint32_t fmt)
{
    return b->pn.on && b->pn.y == x && b->pn.n == n_in && b->pn.n_rows == n_tokens && q8_blocks(fmt, n_in);
}

bool cb_pat_glu_quant(const cuda_backend *b, const float *x, int64_t n, uint32_t fmt)
{
    return b->pg.on && b->pg.gate == x && b->pg.n == n && fmt == EMBER_TYPE_Q8_K;
}

bool cb_pat_add_quant(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens, uint32_t fmt,
                      bool with_norm)
{
    return q8_blocks(fmt, n_in) && b->pa.on && pa_shape(b, n_in, n_tokens) &&
           (with_norm ? b->pn.x == b->pa.res : !b->pn.on && x == b->pa.res);
}

bool cb_pat_norm_round(const cuda_backend *b, const float *x, int64_t n, int32_t n_w, const ember_weight *const *ws)
{
    bool ok = b->pn.on && b->pn.y == x && b->pn.n % 32 == 0 && b->pn.n * b->pn.n_rows == n && !b->f32_act;
    for (int32_t k = 0; ok && k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        ok = qt && (qt->vec_dot_type == EMBER_TYPE_Q8_0 || qt->vec_dot_type == EMBER_TYPE_Q8_1);
    }
    return ok;
}

bool cb_pat_glu_round(const cuda_backend *b, const float *x, int64_t n, int32_t n_w, const ember_weight *const *ws)
{
    bool ok = b->pg.on && b->pg.gate == x && b->pg.n == n && !b->f32_act;
    for (int32_t k = 0; ok && k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        ok = qt && qt->vec_dot_type == EMBER_TYPE_Q8_K;
    }
    return ok;
}

/* A prompt's f16 GEMM input (cu_matmul_f16) written by the waiting RMSNorm
 * whose output x is, whole rows of n_in, or by the waiting GLU whose gate
 * (and output) x is. */
bool cb_pat_norm_f16(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens)
{
    return b->pn.on && b->pn.y == x && b->pn.n == n_in && b->pn.n_rows == n_tokens;
}

bool cb_pat_glu_f16(const cuda_backend *b, const float *x, int64_t n)
{
    return b->pg.on && b->pg.gate == x && b->pg.n == n;
}

bool cb_pat_scale_attn(const cuda_backend *b, const float *q, int64_t n)
{
    return b->ps.on && b->ps.x == q && b->ps.n == n;
}

bool cb_attn_waits(const cuda_backend *b, const float *q, const float *out, int32_t n)
{
    return b->fuse_attn && !b->exact_attn && b->in_step && n <= GRAPH_MAX_N && b->q8_on && !b->f32_act &&
           cb_is_act(b, q) && cb_is_act(b, out);
}

/* Only while nothing waits after the attention: the matmul launches the
 * attention after its flush, so an op held behind it (a scale or a
 * per-head norm of its output) would run first. */
bool cb_pat_attn_quant(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens, uint32_t fmt)
{
    return b->pt.on && b->pt.out == x && b->pt.n == n_tokens && !b->pn.on && !b->ps.on && !b->pg.on && !b->pa.on &&
           !b->ph.n_parts && (int64_t)b->pt.ap.n_head * b->pt.ap.head_dim == n_in && q8_blocks(fmt, n_in);
}
