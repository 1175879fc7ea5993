/*
 * recurrent.c — the CPU backend's recurrent (linear-attention) ops: the short
 * causal convolution, the gated delta rule (Qwen3.5's Gated DeltaNet), the
 * sigmoid output gate and a strided copy (backend.h, the block at the end of
 * ember_backend_ops, documents each formula).
 *
 * Owns: the scalar f32 implementations, split over the thread pool by
 * channel (conv) or by value-head rows (delta rule), which are independent
 * of each other; entries are walked in order inside each split, so states of
 * several sequences and several tokens of one sequence may share a call.
 * Must not: allocate, or know sequences beyond the state pointers it is given.
 *
 * Accuracy: f32 throughout with libm expf/log1pf, as transformers' torch
 * fallbacks compute in f32. The delta rule is the recurrent (token by token)
 * form for every entry; a chunked form for long prefills is future work and
 * must give the same values within rounding.
 */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

static inline void split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    const int64_t per = (n + nth - 1) / nth;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* ---- conv1d_silu ---------------------------------------------------------- */

typedef struct conv_task {
    float *y;
    const float *x, *w;
    int64_t n_ch;
    int32_t d_conv, n;
    float *const *state;
} conv_task;

static void conv_run(void *arg, int ith, int nth)
{
    const conv_task *a = arg;
    int64_t lo, hi;
    split(a->n_ch, ith, nth, &lo, &hi);
    const int32_t K = a->d_conv;
    const int64_t C = a->n_ch;
    for (int32_t t = 0; t < a->n; t++) {
        float *st = a->state[t];   /* [K - 1][C] */
        const float *x = a->x + (int64_t)t * C;
        float *y = a->y + (int64_t)t * C;
        for (int64_t c = lo; c < hi; c++) {
            const float *w = a->w + c * K;
            float acc = 0.0f;
            for (int32_t j = 0; j < K - 1; j++) acc += w[j] * st[(int64_t)j * C + c];
            acc += w[K - 1] * x[c];
            y[c] = silu(acc);
            for (int32_t j = 0; j + 1 < K - 1; j++) st[(int64_t)j * C + c] = st[(int64_t)(j + 1) * C + c];
            if (K > 1) st[(int64_t)(K - 2) * C + c] = x[c];
        }
    }
}

void ember_cpu_conv1d_silu(ember_backend *be, float *y, const float *x, const float *w, int64_t n_ch, int32_t d_conv,
                           float *const *state, int32_t n)
{
    conv_task a = {y, x, w, n_ch, d_conv, n, state};
    int nth = (int)((int64_t)n * n_ch * d_conv / 16384);
    if (nth < 1) nth = 1;
    const cpu_backend *cb = (const cpu_backend *)be;
    if (nth > cb->n_threads) nth = cb->n_threads;
    ember_threadpool_run_n(cb->tp, nth, conv_run, &a);
}

/* ---- gated_delta_rule ----------------------------------------------------- */

#define GDR_ROWS 16   /* value rows of one head per unit of work */

typedef struct gdr_task {
    const ember_gdr_params *p;
    const float *qkv;
    int64_t ld;
    const float *alpha, *b;
    float *const *state;
    int32_t n;
    float *out;
    int64_t n_units;      /* n_head_v * ceil(d_v / GDR_ROWS) */
} gdr_task;

static inline float dot(const float *a, const float *b, int32_t n)
{
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void gdr_run(void *arg, int ith, int nth)
{
    const gdr_task *a = arg;
    const ember_gdr_params *p = a->p;
    const int32_t dk = p->d_k, dv = p->d_v, Hk = p->n_head_k, Hv = p->n_head_v;
    const int64_t per_head = (dv + GDR_ROWS - 1) / GDR_ROWS;
    int64_t lo, hi;
    split(a->n_units, ith, nth, &lo, &hi);
    float qn[1024], kn[1024];
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int64_t u = lo; u < hi; u++) {
        const int32_t h = (int32_t)(u / per_head), kh = h % Hk;
        const int32_t r0 = (int32_t)(u % per_head) * GDR_ROWS;
        const int32_t r1 = r0 + GDR_ROWS < dv ? r0 + GDR_ROWS : dv;
        for (int32_t t = 0; t < a->n; t++) {
            const float *row = a->qkv + (int64_t)t * a->ld;
            const float *q = row + (int64_t)kh * dk;
            const float *k = row + (int64_t)Hk * dk + (int64_t)kh * dk;
            const float *v = row + 2 * (int64_t)Hk * dk + (int64_t)h * dv;
            const float qi = 1.0f / sqrtf(dot(q, q, dk) + p->eps) * qscale;
            const float ki = 1.0f / sqrtf(dot(k, k, dk) + p->eps);
            for (int32_t i = 0; i < dk; i++) { qn[i] = q[i] * qi; kn[i] = k[i] * ki; }
            const float x = a->alpha[(int64_t)t * Hv + h] + p->dt_bias[h];
            const float g = p->A[h] * (x > 20.0f ? x : log1pf(expf(x)));
            const float decay = expf(g);
            const float beta = 1.0f / (1.0f + expf(-a->b[(int64_t)t * Hv + h]));
            float *S = a->state[t] + (int64_t)h * dv * dk;
            float *o = a->out + (int64_t)t * Hv * dv + (int64_t)h * dv;
            for (int32_t i = r0; i < r1; i++) {
                float *Si = S + (int64_t)i * dk;
                for (int32_t j = 0; j < dk; j++) Si[j] *= decay;
                const float d = beta * (v[i] - dot(Si, kn, dk));
                for (int32_t j = 0; j < dk; j++) Si[j] += d * kn[j];
                o[i] = dot(Si, qn, dk);
            }
        }
    }
}

void ember_cpu_gated_delta_rule(ember_backend *be, const ember_gdr_params *p, const float *qkv, int64_t ld,
                                const float *alpha, const float *b, float *const *state, int32_t n, float *out)
{
    gdr_task a = {p, qkv, ld, alpha, b, state, n, out, 0};
    a.n_units = (int64_t)p->n_head_v * ((p->d_v + GDR_ROWS - 1) / GDR_ROWS);
    const cpu_backend *cb = (const cpu_backend *)be;
    int nth = (int)((int64_t)n * p->n_head_v * p->d_v * p->d_k / 8192);
    if (nth < 1) nth = 1;
    if (nth > cb->n_threads) nth = cb->n_threads;
    if (nth > a.n_units) nth = (int)a.n_units;
    ember_threadpool_run_n(cb->tp, nth, gdr_run, &a);
}

/* ---- sigmoid_mul, copy_strided -------------------------------------------- */

void ember_cpu_sigmoid_mul(ember_backend *be, float *x, const float *g, int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

void ember_cpu_copy_strided(ember_backend *be, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                            int64_t n_rows, int64_t n_cols)
{
    (void)be;
    for (int64_t r = 0; r < n_rows; r++)
        memcpy(dst + r * ld_dst, src + r * ld_src, (size_t)n_cols * sizeof(float));
}
