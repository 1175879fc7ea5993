/*
 * backend_cuda.c — the op table (backend/backend.h) filled with CUDA kernels.
 *
 * Owns: the device copies of weights and norm vectors (uploaded on first
 * use, found again by host address), the device KV cache (one F16 copy per
 * layer view, found by the view's host address), and device staging buffers
 * that activations pass through around each op.
 * Must not: change the op table's contract: every op returns with its
 * results in host memory, like the CPU backend's.
 *
 * This is the correctness stage of the backend (see backend_cuda.h): the
 * copies around each op cost far more than the kernels. Numerics differ from
 * the CPU backend in summation order, and where the kernels document it:
 * RMSNorm sums in F32 (the CPU in double). matmul rounds the activations to
 * each weight's vec_dot_type first (ember_cuda_round_act), as the CPU
 * quantizes them; EMBER_CUDA_F32_ACT=1 keeps them F32 (closer to exact math:
 * on SmolLM2 the CPU's int8 activations move some outputs by 1-3%).
 */
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_backend.h"
#include "base/status.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dev_copy {
    const void *host;        /* key */
    size_t bytes;
    ember_cuda_tensor t;     /* matrices: type/shape; vectors and KV: data only */
} dev_copy;

enum { STAGE_SLOTS = 8 };

typedef struct cuda_backend {
    ember_backend base;
    ember_cuda *cu;
    ember_backend_limits lim;
    dev_copy *copies;
    size_t n_copies, cap_copies;
    void *stage[STAGE_SLOTS];
    size_t stage_bytes[STAGE_SLOTS];
    int32_t *host_i32;       /* host staging for index arrays */
    size_t host_i32_n;
    ember_backend *cpu;      /* EMBER_CUDA_VERIFY=1: every op also runs here */
    bool f32_act;            /* EMBER_CUDA_F32_ACT=1: matmul on unrounded activations */
    double worst[16];        /* verify: worst max|diff| / max|ref| per op */
    long calls[16];
} cuda_backend;

/* ---- verify mode --------------------------------------------------------- *
 * With EMBER_CUDA_VERIFY=1 each op runs on the CPU backend too, on copies of
 * its inputs; the largest difference relative to the CPU's largest output is
 * recorded per op (printed when the backend is freed, and at once when it
 * exceeds 1e-2), and the CPU's result is kept so errors do not compound.
 * A debugging aid for the kernels inside the real forward pass. */
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

/* compare got (CUDA) with ref (CPU), record, then overwrite got with ref */


/* Ops have no error return: a failure here is a broken invariant or a device
 * fault, so it stops the process with the message (never input data). */
static void die(const char *op)
{
    fprintf(stderr, "ember: CUDA backend: %s: %s\n", op, ember_last_error());
    abort();
}

#define CK(op, x) \
    do { if ((x) != EMBER_OK) die(op); } while (0)

static void *stage(cuda_backend *b, int slot, size_t bytes)
{
    if (bytes == 0) bytes = 4;
    if (bytes > b->stage_bytes[slot]) {
        if (b->stage[slot]) ember_cuda_mfree(b->cu, b->stage[slot], b->stage_bytes[slot]);
        b->stage[slot] = NULL;
        b->stage_bytes[slot] = 0;
        size_t want = bytes + bytes / 2;
        CK("staging", ember_cuda_malloc(b->cu, want, &b->stage[slot]));
        b->stage_bytes[slot] = want;
    }
    return b->stage[slot];
}

static int32_t *host_i32(cuda_backend *b, size_t n)
{
    if (n > b->host_i32_n) {
        free(b->host_i32);
        b->host_i32_n = n + n / 2 + 64;
        b->host_i32 = malloc(b->host_i32_n * sizeof(int32_t));
        if (!b->host_i32) {
            ember_error(EMBER_ERR_NOMEM, "cannot allocate %zu index entries", b->host_i32_n);
            die("index staging");
        }
    }
    return b->host_i32;
}

static dev_copy *find_copy(cuda_backend *b, const void *host)
{
    for (size_t i = 0; i < b->n_copies; i++)
        if (b->copies[i].host == host) return &b->copies[i];
    return NULL;
}

static dev_copy *new_copy(cuda_backend *b, const void *host, size_t bytes)
{
    if (b->n_copies == b->cap_copies) {
        size_t cap = b->cap_copies ? 2 * b->cap_copies : 256;
        dev_copy *c = realloc(b->copies, cap * sizeof *c);
        if (!c) {
            ember_error(EMBER_ERR_NOMEM, "cannot grow the device-copy table");
            die("weights");
        }
        b->copies = c;
        b->cap_copies = cap;
    }
    dev_copy *c = &b->copies[b->n_copies++];
    memset(c, 0, sizeof *c);
    c->host = host;
    c->bytes = bytes;
    return c;
}

/* Device copy of weight matrix w (uploaded on first use). */
static const ember_cuda_tensor *weight(cuda_backend *b, const ember_weight *w)
{
    dev_copy *c = find_copy(b, w->data);
    if (c) return &c->t;
    c = new_copy(b, w->data, w->row_bytes * (size_t)w->n_out);
    if (ember_cuda_tensor_upload(b->cu, w->type, w->n_in, w->n_out, w->data, false, &c->t) != EMBER_OK) {
        b->n_copies--;
        die(w->name ? w->name : "weight upload");
    }
    return &c->t;
}

/* Device copy of an F32 vector of n elements (norm weights). */
static const float *vec(cuda_backend *b, const float *h, int64_t n)
{
    if (!h) return NULL;
    dev_copy *c = find_copy(b, h);
    if (c) return c->t.data;
    c = new_copy(b, h, (size_t)n * sizeof(float));
    CK("vector upload", ember_cuda_malloc(b->cu, c->bytes, &c->t.data));
    CK("vector upload", ember_cuda_upload(b->cu, c->t.data, h, c->bytes));
    return c->t.data;
}

/* Device F16 KV memory standing for host KV memory `h` of `bytes`. */
static void *kv_dev(cuda_backend *b, void *h, size_t bytes)
{
    dev_copy *c = find_copy(b, h);
    if (c) return c->t.data;
    c = new_copy(b, h, bytes);
    CK("kv cache", ember_cuda_malloc(b->cu, bytes, &c->t.data));
    CK("kv cache", ember_cuda_memzero(b->cu, c->t.data, bytes));
    return c->t.data;
}

static float *up(cuda_backend *b, int slot, const float *h, size_t n)
{
    float *d = stage(b, slot, n * sizeof(float));
    CK("upload", ember_cuda_upload(b->cu, d, h, n * sizeof(float)));
    return d;
}

static void down(cuda_backend *b, float *h, const float *d, size_t n)
{
    CK("download", ember_cuda_download(b->cu, h, d, n * sizeof(float)));
}

static const int32_t *up_i32(cuda_backend *b, int slot, const int32_t *h, size_t n)
{
    void *d = stage(b, slot, n * sizeof(int32_t));
    CK("upload", ember_cuda_upload(b->cu, d, h, n * sizeof(int32_t)));
    return d;
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

/* ---- ops ----------------------------------------------------------------- */

static void op_free(ember_backend *be)
{
    cuda_backend *b = (cuda_backend *)be;
    if (b->cpu) {
        fprintf(stderr, "ember: CUDA verify: worst max|diff| / max|cpu| per op:");
        for (int i = 0; i < V_N; i++)
            if (b->calls[i]) fprintf(stderr, " %s %.2e (%ld calls)", v_names[i], b->worst[i], b->calls[i]);
        fprintf(stderr, "\n");
        ember_backend_free(b->cpu);
    }
    for (size_t i = 0; i < b->n_copies; i++) {
        dev_copy *c = &b->copies[i];
        if (c->t.type || c->t.ne0) ember_cuda_tensor_release(b->cu, &c->t);
        else ember_cuda_mfree(b->cu, c->t.data, c->bytes);
    }
    for (int i = 0; i < STAGE_SLOTS; i++) ember_cuda_mfree(b->cu, b->stage[i], b->stage_bytes[i]);
    ember_cuda_free(b->cu);
    free(b->copies);
    free(b->host_i32);
    free(b);
}

static void cu_get_rows(ember_backend *be, const ember_weight *w, const ember_token *ids, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    const ember_cuda_tensor *t = weight(b, w);
    const int32_t *d_ids = up_i32(b, 0, ids, (size_t)n);
    float *d_out = stage(b, 1, (size_t)n * w->n_in * sizeof(float));
    CK("get_rows", ember_cuda_get_rows(b->cu, t, d_ids, n, d_out));
    down(b, out, d_out, (size_t)n * w->n_in);
}

static void cu_rms_norm(ember_backend *be, float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                        float eps)
{
    cuda_backend *b = (cuda_backend *)be;
    float *d = up(b, 0, x, (size_t)(n_rows * n));
    CK("rms_norm", ember_cuda_rms_norm(b->cu, d, vec(b, w, n), d, n, n_rows, eps));
    down(b, y, d, (size_t)(n_rows * n));
}

static void cu_matmul(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                      float *const *ys)
{
    cuda_backend *b = (cuda_backend *)be;
    const int64_t n = n_tokens * ws[0]->n_in;
    float *dx = up(b, 0, x, (size_t)n);
    /* activations rounded to each weight's vec_dot_type, once per format
     * (as the CPU backend quantizes them), unless EMBER_CUDA_F32_ACT */
    uint32_t fmt[3];
    const float *xin[3];
    for (int32_t k = 0; k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        fmt[k] = b->f32_act || !qt ? EMBER_TYPE_F32 : qt->vec_dot_type;
        xin[k] = dx;
        if (fmt[k] == EMBER_TYPE_F32) continue;
        int32_t j = 0;
        while (j < k && fmt[j] != fmt[k]) j++;
        if (j < k) {
            xin[k] = xin[j];
            continue;
        }
        float *r = stage(b, 4 + k, (size_t)n * sizeof(float));
        CK("matmul (activation rounding)", ember_cuda_round_act(b->cu, fmt[k], dx, r, n));
        xin[k] = r;
    }
    for (int32_t k = 0; k < n_w; k++) {
        const ember_cuda_tensor *t = weight(b, ws[k]);
        float *dy = stage(b, 1 + k, (size_t)(n_tokens * ws[k]->n_out) * sizeof(float));
        CK("matmul", ember_cuda_matmul(b->cu, t, xin[k], n_tokens, dy));
    }
    for (int32_t k = 0; k < n_w; k++) down(b, ys[k], b->stage[1 + k], (size_t)(n_tokens * ws[k]->n_out));
}

static void cu_rope(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
                    const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode)
{
    cuda_backend *b = (cuda_backend *)be;
    const size_t n = (size_t)n_tokens * n_head * head_dim;
    float *d = up(b, 0, x, n);
    const int32_t *dpos = up_i32(b, 1, pos, (size_t)n_tokens);
    CK("rope", ember_cuda_rope(b->cu, d, dpos, n_tokens, n_head, head_dim, n_rot,
                               mode == EMBER_ROPE_NEOX ? EMBER_CUDA_ROPE_NEOX : EMBER_CUDA_ROPE_NORMAL, base,
                               freq_scale, NULL));
    down(b, x, d, n);
}

static void glu(ember_backend *be, ember_cuda_act act, float *gate, const float *up_h, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *dg = up(b, 0, gate, (size_t)n), *du = up(b, 1, up_h, (size_t)n);
    CK("glu", ember_cuda_glu(b->cu, act, dg, du, dg, n));
    down(b, gate, dg, (size_t)n);
}

/* GELU through f16 as the CPU backend's table does (backend.h contract) */
static void cu_geglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    glu(be, EMBER_CUDA_ACT_GELU_TANH_F16, gate, u, n);
}

static void cu_swiglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    glu(be, EMBER_CUDA_ACT_SILU, gate, u, n);
}

static void cu_add(ember_backend *be, float *y, const float *x, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *dy = up(b, 0, y, (size_t)n), *dx = up(b, 1, x, (size_t)n);
    CK("add", ember_cuda_add(b->cu, dy, dx, dy, n));
    down(b, y, dy, (size_t)n);
}

static void cu_scale(ember_backend *be, float *x, float s, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *d = up(b, 0, x, (size_t)n);
    CK("scale", ember_cuda_scale(b->cu, d, s, n));
    down(b, x, d, (size_t)n);
}

static void check_kv(const ember_kv_layer_view *kv)
{
    if (kv->type_k != EMBER_TYPE_F16 || kv->type_v != EMBER_TYPE_F16) {
        ember_error(EMBER_ERR_UNSUPPORTED, "KV cache types %s/%s: only F16 runs on the GPU so far",
                    ember_type_name(kv->type_k), ember_type_name(kv->type_v));
        die("kv cache");
    }
}

static void cu_kv_store(ember_backend *be, const ember_kv_layer_view *kv, const float *k, const float *v,
                        const int64_t *rows, int32_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    check_kv(kv);
    int32_t *cells = host_i32(b, (size_t)n);
    for (int32_t i = 0; i < n; i++) cells[i] = (int32_t)rows[i];
    const int32_t *dcells = up_i32(b, 2, cells, (size_t)n);
    const int64_t rk = (int64_t)(kv->k_row_bytes / 2), rv = (int64_t)(kv->v_row_bytes / 2);
    uint16_t *dk = kv_dev(b, kv->k, kv->k_row_bytes * (size_t)kv->n_rows);
    uint16_t *dv = kv_dev(b, kv->v, kv->v_row_bytes * (size_t)kv->n_rows);
    const float *sk = up(b, 0, k, (size_t)(n * rk)), *sv = up(b, 1, v, (size_t)(n * rv));
    CK("kv_store", ember_cuda_kv_store(b->cu, sk, n, rk, dcells, dk));
    CK("kv_store", ember_cuda_kv_store(b->cu, sv, n, rv, dcells, dv));
}

static void cu_attention(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                         const float *q, const ember_attn_query *queries, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    check_kv(kv);
    if (p->head_dim_k != p->head_dim_v) {
        ember_error(EMBER_ERR_UNSUPPORTED, "head_dim_k %d != head_dim_v %d", p->head_dim_k, p->head_dim_v);
        die("attention");
    }
    const int32_t bt = kv->block_tokens;
    int32_t max_ctx = (int32_t)b->lim.max_kv_tokens;
    for (int32_t i = 0; i < n; i++)
        if (queries[i].pos + 1 > max_ctx) max_ctx = queries[i].pos + 1;
    const int32_t max_pages = (max_ctx + bt - 1) / bt;
    /* one block-table row per query (queries of one sequence repeat it) */
    int32_t *h = host_i32(b, (size_t)n * (max_pages + 2));
    int32_t *hpos = h, *hseq = h + n, *htab = h + 2 * n;
    for (int32_t i = 0; i < n; i++) {
        hpos[i] = queries[i].pos;
        hseq[i] = i;
        const int32_t used = queries[i].pos / bt + 1;
        for (int32_t j = 0; j < max_pages; j++) htab[(size_t)i * max_pages + j] = j < used ? queries[i].blocks[j] : 0;
    }
    const int32_t *d = up_i32(b, 3, h, (size_t)n * (max_pages + 2));
    const size_t nq = (size_t)n * p->n_head * p->head_dim_k;
    const float *dq = up(b, 0, q, nq);
    float *dout = stage(b, 1, nq * sizeof(float));
    const ember_cuda_attn_params ap = {
        .n_head = p->n_head, .n_head_kv = p->n_head_kv, .head_dim = p->head_dim_k, .scale = p->kq_scale,
        .softcap = 0.f, .n_swa = p->n_swa, .page_size = bt, .max_pages = max_pages, .max_ctx = max_ctx,
    };
    const uint16_t *dk = kv_dev(b, kv->k, kv->k_row_bytes * (size_t)kv->n_rows);
    const uint16_t *dv = kv_dev(b, kv->v, kv->v_row_bytes * (size_t)kv->n_rows);
    CK("attention", ember_cuda_attn(b->cu, &ap, dq, n, d, d + n, d + 2 * n, dk, dv, dout));
    down(b, out, dout, nq);
}


/* ---- op table entries: CUDA, checked against the CPU in verify mode ------ */

static void op_get_rows(ember_backend *be, const ember_weight *w, const ember_token *ids, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_get_rows(be, w, ids, n, out);
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
        cu_rms_norm(be, y, x, w, n_rows, n, eps);
        return;
    }
    const size_t len = (size_t)(n_rows * n);
    float *xin = clone(x, len), *ref = clone(x, len);
    b->cpu->ops->rms_norm(b->cpu, ref, xin, w, n_rows, n, eps);
    cu_rms_norm(be, y, xin, w, n_rows, n, eps);
    verify(b, V_RMS_NORM, y, ref, len);
    free(xin);
    free(ref);
}

static void op_matmul(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                      float *const *ys)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_matmul(be, x, n_tokens, n_w, ws, ys);
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
    cu_rope(be, x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode);
    if (!ref) return;
    b->cpu->ops->rope(b->cpu, ref, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode);
    verify(b, V_ROPE, x, ref, (size_t)n_tokens * n_head * head_dim);
    free(ref);
}

static void op_geglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(gate, (size_t)n) : NULL;
    cu_geglu(be, gate, u, n);
    if (!ref) return;
    b->cpu->ops->geglu(b->cpu, ref, u, n);
    verify(b, V_GEGLU, gate, ref, (size_t)n);
    free(ref);
}

static void op_swiglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(gate, (size_t)n) : NULL;
    cu_swiglu(be, gate, u, n);
    if (!ref) return;
    b->cpu->ops->swiglu(b->cpu, ref, u, n);
    verify(b, V_SWIGLU, gate, ref, (size_t)n);
    free(ref);
}

static void op_add(ember_backend *be, float *y, const float *x, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(y, (size_t)n) : NULL;
    cu_add(be, y, x, n);
    if (!ref) return;
    b->cpu->ops->add(b->cpu, ref, x, n);
    verify(b, V_ADD, y, ref, (size_t)n);
    free(ref);
}

static void op_scale(ember_backend *be, float *x, float sc, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(x, (size_t)n) : NULL;
    cu_scale(be, x, sc, n);
    if (!ref) return;
    b->cpu->ops->scale(b->cpu, ref, sc, n);
    verify(b, V_SCALE, x, ref, (size_t)n);
    free(ref);
}

static void op_kv_store(ember_backend *be, const ember_kv_layer_view *kv, const float *k, const float *v,
                        const int64_t *rows, int32_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_kv_store(be, kv, k, v, rows, n);
    if (b->cpu) b->cpu->ops->kv_store(b->cpu, kv, k, v, rows, n); /* host copy for the CPU's attention */
}

static void op_attention(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                         const float *q, const ember_attn_query *queries, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_attention(be, kv, p, q, queries, n, out);
    if (!b->cpu) return;
    const size_t len = (size_t)n * p->n_head * p->head_dim_v;
    float *ref = malloc(len * sizeof(float) + 1);
    if (!ref) abort();
    b->cpu->ops->attention(b->cpu, kv, p, q, queries, n, ref);
    verify(b, V_ATTN, out, ref, len);
    free(ref);
}

static const ember_backend_ops cuda_ops = {
    .name = "cuda",
    .free = op_free,
    .get_rows = op_get_rows,
    .rms_norm = op_rms_norm,
    .matmul = op_matmul,
    .rope = op_rope,
    .geglu = op_geglu,
    .swiglu = op_swiglu,
    .add = op_add,
    .scale = op_scale,
    .kv_store = op_kv_store,
    .attention = op_attention,
};

ember_status ember_backend_cuda_new(int32_t device, const ember_backend_limits *lim, ember_backend **out)
{
    if (!out || !lim) return ember_error(EMBER_ERR_INVALID_ARG, "ember_backend_cuda_new: NULL argument");
    *out = NULL;
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return ember_error(EMBER_ERR_NOMEM, "ember_backend_cuda_new: out of memory");
    ember_status st = ember_cuda_new(device, &b->cu);
    if (st != EMBER_OK) {
        free(b);
        return st;
    }
    b->base.ops = &cuda_ops;
    b->base.impl = b;
    b->lim = *lim;
    const char *f32a = getenv("EMBER_CUDA_F32_ACT");
    b->f32_act = f32a && *f32a && strcmp(f32a, "0") != 0;
    const char *vfy = getenv("EMBER_CUDA_VERIFY");
    if (vfy && *vfy && strcmp(vfy, "0") != 0) {
        st = ember_backend_cpu_new(0, lim, &b->cpu);
        if (st != EMBER_OK) {
            ember_cuda_free(b->cu);
            free(b);
            return st;
        }
    }
    *out = &b->base;
    return EMBER_OK;
}

uint64_t ember_backend_cuda_device_bytes(const ember_backend *be)
{
    return be && be->ops == &cuda_ops ? ember_cuda_device_bytes(((const cuda_backend *)be)->cu) : 0;
}

bool ember_backend_is_cuda(const ember_backend *be)
{
    return be && be->ops == &cuda_ops;
}
