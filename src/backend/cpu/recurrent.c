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
 * fallbacks compute in f32. The delta rule has a recurrent form (decode) and
 * a chunked form (prefill runs); see gated_delta_rule below.
 */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdbool.h>
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

/* Two forms, the same values within f32 rounding:
 * - recurrent: entry by entry, S_i = e^g S_i, then the delta update, then o_i;
 *   used for decode steps (runs of one entry per sequence) and split over
 *   (head, block of GDR_ROWS value rows) work units;
 * - chunked: for a run of >= GDR_RUN_MIN consecutive entries of one
 *   sequence (a prefill), chunks of m <= GDR_CHUNK tokens in the WY /
 *   UT-transform form of the delta rule (Yang et al., "Parallelizing Linear
 *   Transformers with the Delta Rule over Sequence Length", NeurIPS 2024;
 *   with gates as in Gated DeltaNet). With G_j = sum_{s <= j} g_s inside the
 *   chunk and S the state before it:
 *     u_j = beta_j (v_j - e^{G_j} S k_j) - sum_{s < j} beta_j e^{G_j - G_s} (k_j . k_s) u_s
 *     o_j = e^{G_j} S q_j + sum_{s <= j} e^{G_j - G_s} (q_j . k_s) u_s
 *     S'  = e^{G_m-1} S + sum_s e^{G_m-1 - G_s} u_s k_s^T
 *   (S_t = e^{G_t} S + sum_{s <= t} e^{G_t - G_s} u_s k_s^T unrolls the
 *   recurrence; u_t = beta_t (v_t - e^{g_t} S_{t-1} k_t) is the update it
 *   adds). Products with S become matrix-matrix work over the chunk; work
 *   units are whole heads. Used when d_k, d_v <= GDR_CHUNK_DMAX (the chunk's
 *   buffers live on the stack). */
#define GDR_ROWS 16          /* value rows of one head per unit of work (recurrent form) */
#define GDR_RUN_MIN 8        /* consecutive entries of one sequence that take the chunked form */
#define GDR_CHUNK 32
#define GDR_CHUNK_DMAX 256

typedef struct gdr_task {
    const ember_gdr_params *p;
    const float *qkv;
    int64_t ld;
    const float *alpha, *b;
    float *const *state;
    int32_t n;
    float *out;
    int32_t rows;         /* value rows per unit: GDR_ROWS, or d_v when chunking */
    bool chunked;
    bool avx2;            /* AVX2 + FMA kernels (recurrent_avx2.c) */
    int64_t n_units;      /* n_head_v * ceil(d_v / rows) */
} gdr_task;

static inline float dot_scalar(const float *a, const float *b, int32_t n)
{
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline float dot(const gdr_task *a, const float *x, const float *y, int32_t n)
{
    return a->avx2 ? ember_cpu_dot_f32_avx2(n, x, y) : dot_scalar(x, y, n);
}

static inline void axpy_scalar(int32_t n, float c, const float *x, float *y)
{
    for (int32_t i = 0; i < n; i++) y[i] += c * x[i];
}

/* Normalized q (times 1/sqrt(d_k)) and k of entry t, value head h; its
 * log-decay g and beta. */
static void gdr_inputs(const gdr_task *a, int32_t t, int32_t h, float *qn, float *kn, float *g, float *beta)
{
    const ember_gdr_params *p = a->p;
    const int32_t dk = p->d_k, Hk = p->n_head_k, Hv = p->n_head_v, kh = h % Hk;
    const float *row = a->qkv + (int64_t)t * a->ld;
    const float *q = row + (int64_t)kh * dk;
    const float *k = row + (int64_t)Hk * dk + (int64_t)kh * dk;
    const float qi = 1.0f / sqrtf(dot(a, q, q, dk) + p->eps) / sqrtf((float)dk);
    const float ki = 1.0f / sqrtf(dot(a, k, k, dk) + p->eps);
    for (int32_t i = 0; i < dk; i++) { qn[i] = q[i] * qi; kn[i] = k[i] * ki; }
    const float x = a->alpha[(int64_t)t * Hv + h] + p->dt_bias[h];
    *g = p->A[h] * (x > 20.0f ? x : log1pf(expf(x)));
    *beta = 1.0f / (1.0f + expf(-a->b[(int64_t)t * Hv + h]));
}

static inline const float *gdr_v(const gdr_task *a, int32_t t, int32_t h)
{
    const ember_gdr_params *p = a->p;
    return a->qkv + (int64_t)t * a->ld + 2 * (int64_t)p->n_head_k * p->d_k + (int64_t)h * p->d_v;
}

/* Recurrent form: entry t, head h, value rows [r0, r1). */
static void gdr_step(const gdr_task *a, int32_t t, int32_t h, int32_t r0, int32_t r1)
{
    const ember_gdr_params *p = a->p;
    const int32_t dk = p->d_k, dv = p->d_v;
    float qn[1024], kn[1024], g, beta;
    gdr_inputs(a, t, h, qn, kn, &g, &beta);
    const float decay = expf(g);
    const float *v = gdr_v(a, t, h);
    float *S = a->state[t] + (int64_t)h * dv * dk;
    float *o = a->out + (int64_t)t * p->n_head_v * dv + (int64_t)h * dv;
    if (a->avx2) {
        for (int32_t i = r0; i < r1; i++) o[i] = ember_cpu_gdr_row_avx2(dk, S + (int64_t)i * dk, kn, qn, decay, beta, v[i]);
        return;
    }
    for (int32_t i = r0; i < r1; i++) {
        float *Si = S + (int64_t)i * dk;
        for (int32_t j = 0; j < dk; j++) Si[j] *= decay;
        const float d = beta * (v[i] - dot_scalar(Si, kn, dk));
        for (int32_t j = 0; j < dk; j++) Si[j] += d * kn[j];
        o[i] = dot_scalar(Si, qn, dk);
    }
}

/* gdr_chunk's steps after the inputs, on AVX2: S k_j and S q_j as batches
 * of dots (ember_cpu_dots2_f32_avx2), and each sum of axpys into one
 * register-held pass (ember_cpu_axpy_n_f32_avx2: the scalar steps' axpys in
 * the same order, each fused). The formulas are the scalar steps' below. */
static void gdr_chunk_avx2(const gdr_task *a, int32_t t0, int32_t m, int32_t h, float *S,
                           float (*qn)[GDR_CHUNK_DMAX], float (*kn)[GDR_CHUNK_DMAX], float (*u)[GDR_CHUNK_DMAX],
                           float (*sq)[GDR_CHUNK_DMAX], const float *G, const float *beta)
{
    const ember_gdr_params *p = a->p;
    const int32_t dk = p->d_k, dv = p->d_v;
    /* S k_j and S q_j with the state before the chunk: row i of S against k_j, q_j */
    for (int32_t j = 0; j < m; j++) ember_cpu_dots2_f32_avx2(dk, kn[j], qn[j], S, dk, dv, u[j], sq[j]);
    for (int32_t j = 0; j < m; j++) {
        float kk[GDR_CHUNK], qk[GDR_CHUNK], c[GDR_CHUNK];
        ember_cpu_dots2_f32_avx2(dk, kn[j], qn[j], kn[0], GDR_CHUNK_DMAX, j + 1, kk, qk);   /* k_j.k_s, q_j.k_s */
        const float *v = gdr_v(a, t0 + j, h);
        const float eg = expf(G[j]);
        float *uj = u[j];
        for (int32_t i = 0; i < dv; i++) uj[i] = beta[j] * (v[i] - eg * uj[i]);
        for (int32_t s = 0; s < j; s++) c[s] = -(beta[j] * expf(G[j] - G[s]) * kk[s]);
        ember_cpu_axpy_n_f32_avx2(dv, 1.0f, c, u[0], GDR_CHUNK_DMAX, j, uj);
        float *o = a->out + (int64_t)(t0 + j) * p->n_head_v * dv + (int64_t)h * dv;
        for (int32_t i = 0; i < dv; i++) o[i] = eg * sq[j][i];
        for (int32_t s = 0; s <= j; s++) c[s] = expf(G[j] - G[s]) * qk[s];
        ember_cpu_axpy_n_f32_avx2(dv, 1.0f, c, u[0], GDR_CHUNK_DMAX, j + 1, o);
    }
    const float el = expf(G[m - 1]);
    float w[GDR_CHUNK], c[GDR_CHUNK];
    for (int32_t s = 0; s < m; s++) w[s] = expf(G[m - 1] - G[s]);
    for (int32_t i = 0; i < dv; i++) {
        for (int32_t s = 0; s < m; s++) c[s] = w[s] * u[s][i];
        ember_cpu_axpy_n_f32_avx2(dk, el, c, kn[0], GDR_CHUNK_DMAX, m, S + (int64_t)i * dk);
    }
}

/* Chunked form: entries [t0, t0 + m) of one sequence (m <= GDR_CHUNK), head h. */
static void gdr_chunk(const gdr_task *a, int32_t t0, int32_t m, int32_t h)
{
    const ember_gdr_params *p = a->p;
    const int32_t dk = p->d_k, dv = p->d_v;
    float qn[GDR_CHUNK][GDR_CHUNK_DMAX], kn[GDR_CHUNK][GDR_CHUNK_DMAX];
    float u[GDR_CHUNK][GDR_CHUNK_DMAX], sq[GDR_CHUNK][GDR_CHUNK_DMAX];
    float G[GDR_CHUNK], beta[GDR_CHUNK];
    float cum = 0.0f;
    for (int32_t j = 0; j < m; j++) {
        float g;
        gdr_inputs(a, t0 + j, h, qn[j], kn[j], &g, &beta[j]);
        cum += g;
        G[j] = cum;
    }
    float *S = a->state[t0] + (int64_t)h * dv * dk;
    if (a->avx2) {   /* the same steps by batches (recurrent_avx2.c) */
        gdr_chunk_avx2(a, t0, m, h, S, qn, kn, u, sq, G, beta);
        return;
    }
    /* scalar (no AVX2) */
    /* S k_j and S q_j with the state before the chunk */
    for (int32_t i = 0; i < dv; i++) {
        const float *Si = S + (int64_t)i * dk;
        for (int32_t j = 0; j < m; j++) {
            u[j][i] = dot_scalar(Si, kn[j], dk);
            sq[j][i] = dot_scalar(Si, qn[j], dk);
        }
    }
    for (int32_t j = 0; j < m; j++) {
        const float *v = gdr_v(a, t0 + j, h);
        const float eg = expf(G[j]);
        float *uj = u[j];
        for (int32_t i = 0; i < dv; i++) uj[i] = beta[j] * (v[i] - eg * uj[i]);
        for (int32_t s = 0; s < j; s++) {
            const float c = beta[j] * expf(G[j] - G[s]) * dot_scalar(kn[j], kn[s], dk);
            axpy_scalar(dv, -c, u[s], uj);
        }
        float *o = a->out + (int64_t)(t0 + j) * p->n_head_v * dv + (int64_t)h * dv;
        for (int32_t i = 0; i < dv; i++) o[i] = eg * sq[j][i];
        for (int32_t s = 0; s <= j; s++) {
            const float c = expf(G[j] - G[s]) * dot_scalar(qn[j], kn[s], dk);
            axpy_scalar(dv, c, u[s], o);
        }
    }
    const float el = expf(G[m - 1]);
    float w[GDR_CHUNK];
    for (int32_t s = 0; s < m; s++) w[s] = expf(G[m - 1] - G[s]);
    for (int32_t i = 0; i < dv; i++) {
        float *Si = S + (int64_t)i * dk;
        for (int32_t j = 0; j < dk; j++) Si[j] *= el;
        for (int32_t s = 0; s < m; s++) axpy_scalar(dk, w[s] * u[s][i], kn[s], Si);
    }
}

static void gdr_run(void *arg, int ith, int nth)
{
    const gdr_task *a = arg;
    const int32_t dv = a->p->d_v;
    const int64_t per_head = (dv + a->rows - 1) / a->rows;
    int64_t lo, hi;
    split(a->n_units, ith, nth, &lo, &hi);
    for (int64_t unit = lo; unit < hi; unit++) {
        const int32_t h = (int32_t)(unit / per_head);
        const int32_t r0 = (int32_t)(unit % per_head) * a->rows;
        const int32_t r1 = r0 + a->rows < dv ? r0 + a->rows : dv;
        for (int32_t t = 0; t < a->n;) {
            int32_t run = 1;
            if (a->chunked)
                while (t + run < a->n && a->state[t + run] == a->state[t]) run++;
            if (run < GDR_RUN_MIN) {
                for (int32_t k = 0; k < run; k++) gdr_step(a, t + k, h, r0, r1);
            } else {
                for (int32_t c = 0; c < run; c += GDR_CHUNK)
                    gdr_chunk(a, t + c, run - c < GDR_CHUNK ? run - c : GDR_CHUNK, h);
            }
            t += run;
        }
    }
}

void ember_cpu_gated_delta_rule(ember_backend *be, const ember_gdr_params *p, const float *qkv, int64_t ld,
                                const float *alpha, const float *b, float *const *state, int32_t n, float *out)
{
    gdr_task a = {p, qkv, ld, alpha, b, state, n, out, GDR_ROWS, false, ember_cpu_variant_active() >= EMBER_CPU_AVX2, 0};
    /* chunk when some sequence has a run of GDR_RUN_MIN entries and the
     * chunk buffers fit */
    if (p->d_k <= GDR_CHUNK_DMAX && p->d_v <= GDR_CHUNK_DMAX)
        for (int32_t t = 0, run = 1; t + 1 < n && !a.chunked; t++) {
            run = state[t + 1] == state[t] ? run + 1 : 1;
            a.chunked = run >= GDR_RUN_MIN;
        }
    if (a.chunked) a.rows = p->d_v;
    a.n_units = (int64_t)p->n_head_v * ((p->d_v + a.rows - 1) / a.rows);
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
