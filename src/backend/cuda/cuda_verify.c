/*
 * cuda_verify.c — the CUDA backend's verify decorator (EMBER_CUDA_VERIFY=1):
 * the op table cb_cuda_ops_verify runs each op with the kernels
 * (cb_cuda_ops) and on the CPU backend, compares, and keeps the CPU's
 * result.
 *
 * Owns: the comparison, the worst difference per op and its report.
 * Must not: change what the plain op table does (it calls it), or run
 * graphs (its steps never replay).
 */
#include "backend/cuda/cuda_internal.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- verify mode --------------------------------------------------------- *
 * With EMBER_CUDA_VERIFY=1 each op runs on the CPU backend too, on copies of
 * its inputs; the largest difference relative to the CPU's largest output is
 * recorded per op (printed when the backend is freed, and at once when it
 * exceeds 1e-2), and the CPU's result is kept so errors do not compound.
 * A debugging aid for the kernels inside the real forward pass; it keeps
 * activations in host memory and runs no graphs. */
enum { V_GET_ROWS, V_RMS_NORM, V_MATMUL, V_ROPE, V_GEGLU, V_SWIGLU, V_ADD, V_SCALE, V_ATTN, V_N };
static const char *const v_names[V_N] = {"get_rows", "rms_norm", "matmul", "rope", "geglu", "swiglu", "add",
                                         "scale", "attention"};

static float *clone(const float *x, size_t n)
{
    float *c = malloc(n * sizeof(float) + 1);
    if (!c) abort();
    memcpy(c, x, n * sizeof(float));
    return c;
}

static void verify(cuda_backend *b, int op, float *got, const float *ref, size_t n)
{
    double md = 0, mr = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        if (d > md || d != d) {
            md = d;
            at = i;
        }
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    const double rel = mr > 0 ? md / mr : md;
    if (rel > b->worst[op] || rel != rel) b->worst[op] = rel;
    if (rel > 1e-2 || rel != rel)
        fprintf(stderr, "ember: CUDA verify: %s call %ld: max|diff| %.4g at [%zu] (cuda %.6g, cpu %.6g), max|cpu| %.4g\n",
                v_names[op], b->calls[op], md, at, got[at], ref[at], mr);
    b->calls[op]++;
    memcpy(got, ref, n * sizeof(float));
}

/* ---- op table entries: CUDA, checked against the CPU in verify mode ------ */

static void op_get_rows(ember_backend *be, const ember_weight *w, const ember_token *ids, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_cuda_ops.get_rows(be, w, ids, n, out);
    if (!b->cpu) return;
    const size_t len = (size_t)n * w->n_in;
    float *ref = malloc(len * sizeof(float) + 1);
    if (!ref) abort();
    b->cpu->ops->get_rows(b->cpu, w, ids, n, ref);
    verify(b, V_GET_ROWS, out, ref, len);
    free(ref);
}

static void op_rms_norm(ember_backend *be, float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                        float eps)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!b->cpu) {
        cb_cuda_ops.rms_norm(be, y, x, w, n_rows, n, eps);
        return;
    }
    const size_t len = (size_t)(n_rows * n);
    float *xin = clone(x, len), *ref = clone(x, len);
    b->cpu->ops->rms_norm(b->cpu, ref, xin, w, n_rows, n, eps);
    cb_cuda_ops.rms_norm(be, y, xin, w, n_rows, n, eps);
    verify(b, V_RMS_NORM, y, ref, len);
    free(xin);
    free(ref);
}

static void op_matmul(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                      float *const *ys)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_cuda_ops.matmul(be, x, n_tokens, n_w, ws, ys);
    if (!b->cpu) return;
    float *refs[3] = {NULL, NULL, NULL};
    for (int32_t k = 0; k < n_w; k++) {
        refs[k] = malloc((size_t)(n_tokens * ws[k]->n_out) * sizeof(float) + 1);
        if (!refs[k]) abort();
    }
    b->cpu->ops->matmul(b->cpu, x, n_tokens, n_w, ws, refs);
    for (int32_t k = 0; k < n_w; k++) {
        /* at the largest difference, the exact value (weights dequantized by
         * the quant table, f64 sums) says which backend is off */
        const size_t len = (size_t)(n_tokens * ws[k]->n_out);
        double md = 0, mr = 0;
        size_t at = 0;
        for (size_t i = 0; i < len; i++) {
            const double d = fabs((double)ys[k][i] - refs[k][i]);
            if (d > md) { md = d; at = i; }
            if (fabs(refs[k][i]) > mr) mr = fabs(refs[k][i]);
        }
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        if (mr > 0 && md / mr > 1e-2 && qt) {
            const int64_t c = (int64_t)(at / ws[k]->n_out), r = (int64_t)(at % ws[k]->n_out);
            float *row = malloc(sizeof(float) * ws[k]->n_in);
            if (!row) abort();
            qt->to_float((const uint8_t *)ws[k]->data + (size_t)r * ws[k]->row_bytes, row, ws[k]->n_in);
            double e = 0, xmax = 0;
            for (int64_t i = 0; i < ws[k]->n_in; i++) {
                e += (double)row[i] * x[c * ws[k]->n_in + i];
                if (fabs(x[c * ws[k]->n_in + i]) > xmax) xmax = fabs(x[c * ws[k]->n_in + i]);
            }
            fprintf(stderr, "ember: CUDA verify: %s [%lld x %lld] %s tok %lld row %lld: cuda %.6g cpu %.6g exact %.6g "
                    "(max|x| %.3g)\n", ws[k]->name ? ws[k]->name : "?", (long long)ws[k]->n_out,
                    (long long)ws[k]->n_in, ember_type_name(ws[k]->type), (long long)c, (long long)r, ys[k][at],
                    refs[k][at], e, xmax);
            free(row);
        }
        verify(b, V_MATMUL, ys[k], refs[k], len);
        free(refs[k]);
    }
}

static void op_rope(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
                    const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(x, (size_t)n_tokens * n_head * head_dim) : NULL;
    cb_cuda_ops.rope(be, x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode);
    if (!ref) return;
    b->cpu->ops->rope(b->cpu, ref, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode);
    verify(b, V_ROPE, x, ref, (size_t)n_tokens * n_head * head_dim);
    free(ref);
}

static void op_rope_ext(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                        int32_t n_rot, const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode,
                        const float *freq_factors)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(x, (size_t)n_tokens * n_head * head_dim) : NULL;
    cb_cuda_ops.rope_ext(be, x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, freq_factors);
    if (!ref) return;
    b->cpu->ops->rope_ext(b->cpu, ref, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, freq_factors);
    verify(b, V_ROPE, x, ref, (size_t)n_tokens * n_head * head_dim);
    free(ref);
}

static void op_geglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(gate, (size_t)n) : NULL;
    cb_cuda_ops.geglu(be, gate, u, n);
    if (!ref) return;
    b->cpu->ops->geglu(b->cpu, ref, u, n);
    verify(b, V_GEGLU, gate, ref, (size_t)n);
    free(ref);
}

static void op_swiglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(gate, (size_t)n) : NULL;
    cb_cuda_ops.swiglu(be, gate, u, n);
    if (!ref) return;
    b->cpu->ops->swiglu(b->cpu, ref, u, n);
    verify(b, V_SWIGLU, gate, ref, (size_t)n);
    free(ref);
}

static void op_add(ember_backend *be, float *y, const float *x, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(y, (size_t)n) : NULL;
    cb_cuda_ops.add(be, y, x, n);
    if (!ref) return;
    b->cpu->ops->add(b->cpu, ref, x, n);
    verify(b, V_ADD, y, ref, (size_t)n);
    free(ref);
}

static void op_scale(ember_backend *be, float *x, float sc, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(x, (size_t)n) : NULL;
    cb_cuda_ops.scale(be, x, sc, n);
    if (!ref) return;
    b->cpu->ops->scale(b->cpu, ref, sc, n);
    verify(b, V_SCALE, x, ref, (size_t)n);
    free(ref);
}

static void op_kv_store(ember_backend *be, const ember_kv_layer_view *kv, const float *k, const float *v,
                        const int64_t *rows, int32_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_cuda_ops.kv_store(be, kv, k, v, rows, n);
    if (b->cpu) b->cpu->ops->kv_store(b->cpu, kv, k, v, rows, n); /* host copy for the CPU's attention */
}

static void op_attention(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                         const float *q, const ember_attn_query *queries, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_cuda_ops.attention(be, kv, p, q, queries, n, out);
    if (!b->cpu) return;
    const size_t len = (size_t)n * p->n_head * p->head_dim_v;
    float *ref = malloc(len * sizeof(float) + 1);
    if (!ref) abort();
    b->cpu->ops->attention(b->cpu, kv, p, q, queries, n, ref);
    verify(b, V_ATTN, out, ref, len);
    free(ref);
}

/* verify mode keeps activations in host memory and runs no graphs */
static void *op_verify_act_alloc(ember_backend *be, size_t bytes)
{
    (void)be;
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) ember_error(EMBER_ERR_NOMEM, "CUDA backend (verify): cannot allocate %zu bytes of host activations", bytes);
    return p;
}

static void op_verify_act_free(ember_backend *be, void *p)
{
    (void)be;
    free(p);
}

static bool op_verify_step_begin(ember_backend *be, const ember_backend_step *st)
{
    (void)be; (void)st;
    return false;
}

static bool op_verify_step_end(ember_backend *be)
{
    (void)be;
    return true;
}

/* What verify mode does as the plain table does (cb_cuda_ops). */
static void v_free(ember_backend *be) { cb_cuda_ops.free(be); }

static void v_kv_copy(ember_backend *be, const ember_kv_layer_view *kv, int64_t dst_row, int64_t src_row,
                      int64_t n_rows)
{
    cb_cuda_ops.kv_copy(be, kv, dst_row, src_row, n_rows);
}

static void *v_host_alloc(ember_backend *be, size_t bytes) { return cb_cuda_ops.host_alloc(be, bytes); }
static void v_host_free(ember_backend *be, void *p) { cb_cuda_ops.host_free(be, p); }
static void v_copy(ember_backend *be, float *dst, const float *src, int64_t n) { cb_cuda_ops.copy(be, dst, src, n); }

static void v_upload(ember_backend *be, float *dst, const float *src, int64_t n)
{
    cb_cuda_ops.upload(be, dst, src, n);
}

static void v_softcap(ember_backend *be, float *x, float cap, int64_t n) { cb_cuda_ops.softcap(be, x, cap, n); }
static uint64_t v_scratch_bytes(const ember_backend *be) { return cb_cuda_ops.scratch_bytes(be); }
static void v_print_memory(const ember_backend *be, FILE *f) { cb_cuda_ops.print_memory(be, f); }

static void v_logits_top(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                         ember_logits_top *out)
{
    cb_cuda_ops.logits_top(be, rows, n_rows, n_vocab, k, out);
}

static void v_dequant_host_rows(ember_backend *be, uint32_t type, const void *rows, int64_t n_rows, int64_t n_in,
                                float *out)
{
    cb_cuda_ops.dequant_host_rows(be, type, rows, n_rows, n_in, out);
}

static void v_logits_sync(ember_backend *be, float *host, size_t bytes) { cb_cuda_ops.logits_sync(be, host, bytes); }

/* Verified steps compare on the host: heads are never queued. */
static bool v_logits_top_start(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k)
{
    (void)be, (void)rows, (void)n_rows, (void)n_vocab, (void)k;
    return false;
}

static void v_logits_top_finish(ember_backend *be, ember_logits_top *out) { (void)be, (void)out; }

const ember_backend_ops cb_cuda_ops_verify = {
    .name = "cuda",
    .free = v_free,
    .get_rows = op_get_rows,
    .rms_norm = op_rms_norm,
    .matmul = op_matmul,
    .rope = op_rope,
    .geglu = op_geglu,
    .swiglu = op_swiglu,
    .add = op_add,
    .scale = op_scale,
    .rope_ext = op_rope_ext,
    .kv_store = op_kv_store,
    .attention = op_attention,
    .kv_copy = v_kv_copy,
    .act_alloc = op_verify_act_alloc,
    .act_free = op_verify_act_free,
    .host_alloc = v_host_alloc,
    .host_free = v_host_free,
    .copy = v_copy,
    .upload = v_upload,
    .dequant_host_rows = v_dequant_host_rows,
    .softcap = v_softcap,
    .step_begin = op_verify_step_begin,
    .step_end = op_verify_step_end,
    .scratch_bytes = v_scratch_bytes,
    .print_memory = v_print_memory,
    .logits_top = v_logits_top,
    .logits_sync = v_logits_sync,
    .logits_top_start = v_logits_top_start,
    .logits_top_finish = v_logits_top_finish,
};

void cb_verify_report(const cuda_backend *b)
{
    fprintf(stderr, "ember: CUDA verify: worst max|diff| / max|cpu| per op:");
    for (int i = 0; i < V_N; i++)
        if (b->calls[i]) fprintf(stderr, " %s %.2e (%ld calls)", v_names[i], b->worst[i], b->calls[i]);
    fprintf(stderr, "\n");
}
