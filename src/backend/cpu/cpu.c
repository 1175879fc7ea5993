/*
 * cpu.c — the CPU backend: fills the op table with thread-pooled kernels.
 *
 * Owns: splitting each op across the pool (matmul by tiles of output rows x
 * tokens, attention by query x head, row ops by rows), quantizing matmul
 * activations once per call into the vec_dot_type of the weights, and the
 * scratch all of that needs, sized at creation. Must not: allocate in an op,
 * know about models or sequences.
 *
 * Numerics are those of llama.cpp's CPU backend as its x86 AVX-512 build
 * (-march=native, GCC's default FMA contraction) computes a single-token
 * ubatch, operation for operation, so that hidden states agree to the bit and
 * greedy runs token for token (tests/e2e/test_fidelity.py). Activation
 * quantization is a Q8 rounding of every matmul input: one ulp anywhere moves
 * some of those roundings, and the differences then grow layer by layer to
 * the size of the Q8 noise (~1% per matmul, 0.1-0.8 nats in the logits), so
 * "close" is not enough. Hence: activations quantized as ggml's x86
 * quantize_row_q8_0/q8_1/q8_K; the int32 lanes and float accumulation of its
 * vec_dot/tinyBLAS/repacked gemv; RMSNorm sums in double; RoPE theta by
 * repeated multiplication in f32, rotation with the first product fused;
 * flash attention with an f16 query, ggml's f16 dot order and its f16
 * accumulator rounded as AVX-512-FP16 does; SwiGLU with ggml's polynomial
 * exp; GELU from an f16 table. (Every variant — scalar aside for the quant
 * dots — gives the same bits; the helpers say which ggml code they follow.)
 */
#include "backend/logits_top.h"
#include "backend/cpu/cpu.h"
#include "base/status.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

float ember_cpu_f16_table[65536];
int ember_cpu_prefetch_bytes = 4096;
static float gelu_f16_table[65536];   /* f16(gelu(f16 x)) as f32, by f16 bits of x */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static float (*dot_f16)(int64_t, const uint16_t *, const uint16_t *) = ember_cpu_dot_f16;
static void (*axpy_f16)(int64_t, float, const uint16_t *, float *) = ember_cpu_axpy_f16;
static float (*dot_f32)(int64_t, const float *, const float *) = ember_cpu_dot_f32;
static void (*to_f16_row)(int64_t, const float *, uint16_t *) = ember_cpu_f32_to_f16_row;
static void (*mad_f16)(int64_t, uint16_t *, const uint16_t *, float) = ember_cpu_mad_f16;
static void (*scale_f16)(int64_t, uint16_t *, float) = ember_cpu_scale_f16;
static void (*swiglu_row)(int64_t, float *, const float *) = ember_cpu_swiglu;
static float (*dot_f32_f16)(int64_t, const float *, const uint16_t *) = ember_cpu_dot_f32_f16;
static void (*dot_f32_f16_multi)(int64_t, int, const float *const *, const uint16_t *, float *) = ember_cpu_dot_f32_f16_multi;
static void (*axpy_f16_multi)(int64_t, int, const float *, const uint16_t *, float *const *) = ember_cpu_axpy_f16_multi;
/* what this CPU runs (set once with the tables); a backend uses a kernel
 * when the CPU has it and its options do not turn it off (cpu_backend) */
static bool cpu_gemm;        /* AVX2 tiles for the 32-element formats */
static bool cpu_avx512;      /* AVX-512 VNNI tiles, small-batch kernel, multi-query attention */
/* the options of the first backend created (init_tables reads them once) */
static ember_backend_options first_opt;

static void init_tables(void)
{
    for (uint32_t i = 0; i < 65536; i++) ember_cpu_f16_table[i] = ember_fp16_to_fp32((uint16_t)i);
    /* GELU-tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks &
     * Gimpel 2016), tabulated over f16 inputs with f16 outputs like ggml. */
    for (uint32_t i = 0; i < 65536; i++) {
        float x = ember_cpu_f16_table[i];
        /* as ggml_gelu_f32 compiled with FMA contraction (its table is made
         * by the -march=native build): 1 + a*x*x is one fused step */
        float g = 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * fmaf(0.044715f * x, x, 1.0f)));
        gelu_f16_table[i] = ember_fp16_to_fp32(ember_fp32_to_fp16(g));
    }
    ember_cpu_prefetch_bytes = first_opt.cpu_prefetch_bytes;   /* tuning knob for bench/matvec */
    if (ember_cpu_variant_active() >= EMBER_CPU_AVX2) {
        dot_f16 = ember_cpu_dot_f16_avx2;
        axpy_f16 = ember_cpu_axpy_f16_avx2;
        dot_f32 = ember_cpu_dot_f32_avx2;
        to_f16_row = ember_cpu_f32_to_f16_row_avx2;
        mad_f16 = ember_cpu_mad_f16_avx2;
        scale_f16 = ember_cpu_scale_f16_avx2;
        swiglu_row = ember_cpu_swiglu_avx2;
        dot_f32_f16 = ember_cpu_dot_f32_f16_avx2;
        dot_f32_f16_multi = ember_cpu_dot_f32_f16_multi_avx2;
        axpy_f16_multi = ember_cpu_axpy_f16_multi_avx2;
        cpu_gemm = true;
        cpu_avx512 = ember_cpu_variant_active() >= EMBER_CPU_AVX512;
        if (cpu_avx512 && !first_opt.cpu_no_attn_multi && !first_opt.cpu_no_expf_vec) ember_cpu_expf_vec_check();
    }
}

/* ---- scalar references for the small SIMD helpers ------------------------ */

float ember_cpu_dot_f16(int64_t n, const uint16_t *a, const uint16_t *b)
{
    float acc[4][16] = {{0}};
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                acc[j][l] = fmaf(cpu_f16_to_f32(a[i + 16 * j + l]), cpu_f16_to_f32(b[i + 16 * j + l]), acc[j][l]);
    float t[16], u[8], v[4];
    for (int l = 0; l < 16; l++) t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    for (int l = 0; l < 8; l++) u[l] = t[l + 8] + t[l];
    for (int l = 0; l < 4; l++) v[l] = u[l + 4] + u[l];
    double s = (double)((v[0] + v[2]) + (v[1] + v[3]));
    for (int64_t i = np; i < n; i++) s += (double)(cpu_f16_to_f32(a[i]) * cpu_f16_to_f32(b[i]));
    return (float)s;
}

void ember_cpu_axpy_f16(int64_t n, float a, const uint16_t *x, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] += a * cpu_f16_to_f32(x[i]);
}

float ember_cpu_dot_f32(int64_t n, const float *a, const float *b)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* f16(y + p) with one rounding, for p = x * h exact in f32 (see cpu.h). */
static inline uint16_t f16_sum_exact(float y, float p)
{
    const float s = y + p, bb = s - y, err = (y - (s - bb)) + (p - bb);
    if (err == 0.0f) return ember_fp32_to_fp16(s);
    uint32_t u;
    memcpy(&u, &s, 4);
    if ((u >> 31) != (signbit(err) ? 1u : 0u)) u -= 1;   /* s was rounded away from zero */
    u |= 1;
    float o;
    memcpy(&o, &u, 4);
    return ember_fp32_to_fp16(o);
}

void ember_cpu_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float a)
{
    const int64_t np = n & ~(int64_t)(EMBER_GGML_F16_STEP - 1);
    const float ah = cpu_f16_to_f32(ember_fp32_to_fp16(a));
    for (int64_t i = 0; i < np; i++) y[i] = f16_sum_exact(cpu_f16_to_f32(y[i]), cpu_f16_to_f32(x[i]) * ah);
    for (int64_t i = np; i < n; i++) y[i] = ember_fp32_to_fp16(fmaf(cpu_f16_to_f32(x[i]), a, cpu_f16_to_f32(y[i])));
}

void ember_cpu_scale_f16(int64_t n, uint16_t *y, float a)
{
    const int64_t np = n & ~(int64_t)(EMBER_GGML_F16_STEP - 1);
    const float ah = cpu_f16_to_f32(ember_fp32_to_fp16(a));
    for (int64_t i = 0; i < np; i++) y[i] = ember_fp32_to_fp16(cpu_f16_to_f32(y[i]) * ah);
    for (int64_t i = np; i < n; i++) y[i] = ember_fp32_to_fp16(cpu_f16_to_f32(y[i]) * a);
}

float ember_cpu_dot_f32_f16(int64_t n, const float *a, const uint16_t *b)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * cpu_f16_to_f32(b[i]);
    return s;
}

void ember_cpu_dot_f32_f16_multi(int64_t n, int nq, const float *const *a, const uint16_t *b, float *out)
{
    for (int q = 0; q < nq; q++) out[q] = ember_cpu_dot_f32_f16(n, a[q], b);
}

void ember_cpu_axpy_f16_multi(int64_t n, int nq, const float *w, const uint16_t *x, float *const *y)
{
    for (int q = 0; q < nq; q++) ember_cpu_axpy_f16(n, w[q], x, y[q]);
}

/* exp(x) as ggml_v_expf (AVX-512): n = round(x/ln2), b = x - n ln2 in two
 * parts, a degree-5 polynomial, times 2^n; |n| > 192 gives 0 or inf. */
static float ggml_expf(float x)
{
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

void ember_cpu_swiglu(int64_t n, float *y, const float *x)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = y[i];
        y[i] = (g / (1.0f + ggml_expf(0.0f - g))) * x[i];
    }
}

void ember_cpu_f32_to_f16_row(int64_t n, const float *x, uint16_t *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = ember_fp32_to_fp16(x[i]);
}

/* ---- helpers ----------------------------------------------------------------- */

static inline cpu_backend *CPU(ember_backend *be) { return (cpu_backend *)be; }

static inline void split_range(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith;
    *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

/* Threads worth using for `work` elements of cheap per-element math. */
static inline int threads_for(const cpu_backend *cb, int64_t work)
{
    int n = (int)(work / 16384);
    if (n < 1) n = 1;
    return n < cb->n_threads ? n : cb->n_threads;
}

/* Quantize one activation row of n floats into `dst` of type `t`. */
static void quantize_row(uint32_t t, const float *x, void *dst, int64_t n)
{
    if (t == EMBER_TYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
    } else if (t == EMBER_TYPE_F16) {
        to_f16_row(n, x, dst);
    } else {
        const ember_quant_traits *tr = ember_quant_traits_get(t);
        (tr->from_float ? tr->from_float : tr->from_float_ref)(x, dst, n);
    }
}

static size_t row_size(uint32_t t, int64_t n)
{
    return (size_t)n / ember_type_block_size(t) * ember_type_block_bytes(t);
}

/* ---- get_rows ------------------------------------------------------------------ */

/* dst [n] = to_float of one row in block format `type` (get_rows' arithmetic:
 * F32 copied, F16 through the table, the rest by the type's to_float). */
static void expand_row(uint32_t type, const ember_quant_traits *tr, const uint8_t *row, float *dst, int64_t n)
{
    if (type == EMBER_TYPE_F32) memcpy(dst, row, (size_t)n * sizeof(float));
    else if (type == EMBER_TYPE_F16) for (int64_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(((const uint16_t *)row)[i]);
    else tr->to_float(row, dst, n);
}

static void op_get_rows(ember_backend *be, const ember_weight *w, const ember_token *ids, int32_t n, float *out)
{
    (void)be;
    const ember_quant_traits *tr = ember_quant_traits_get(w->type);
    for (int32_t t = 0; t < n; t++)
        expand_row(w->type, tr, (const uint8_t *)w->data + (size_t)ids[t] * w->row_bytes, out + (size_t)t * (size_t)w->n_in,
                   w->n_in);
}

static void op_dequant_host_rows(ember_backend *be, uint32_t type, const void *rows, int64_t n_rows, int64_t n_in,
                                 float *out)
{
    (void)be;
    const ember_quant_traits *tr = ember_quant_traits_get(type);
    if (!tr || n_in <= 0 || n_in % (int64_t)ember_type_block_size(type) != 0) {   /* the model's own shapes: a bug */
        fprintf(stderr, "ember: cpu: dequant_host_rows: %s rows of %lld\n", ember_type_name(type), (long long)n_in);
        abort();
    }
    const size_t rb = row_size(type, n_in);
    for (int64_t r = 0; r < n_rows; r++)
        expand_row(type, tr, (const uint8_t *)rows + (size_t)r * rb, out + (size_t)r * (size_t)n_in, n_in);
}

/* ---- rms_norm -------------------------------------------------------------------- */

typedef struct norm_task { float *y; const float *x; const float *w; int64_t n_rows, n; float eps; } norm_task;

static void norm_rows(void *arg, int ith, int nth)
{
    norm_task *a = arg;
    int64_t lo, hi;
    split_range(a->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *x = a->x + r * a->n;
        float *y = a->y + r * a->n;
        double sum = 0.0;
        for (int64_t i = 0; i < a->n; i++) sum += (double)(x[i] * x[i]);
        const float mean = (float)(sum / (double)a->n);
        const float scale = 1.0f / sqrtf(mean + a->eps);
        if (a->w) for (int64_t i = 0; i < a->n; i++) y[i] = (x[i] * scale) * a->w[i];
        else for (int64_t i = 0; i < a->n; i++) y[i] = x[i] * scale;
    }
}

static void op_rms_norm(ember_backend *be, float *y, const float *x, const float *w, int64_t n_rows, int64_t n, float eps)
{
    norm_task a = {y, x, w, n_rows, n, eps};
    ember_threadpool_run_n(CPU(be)->tp, threads_for(CPU(be), n_rows * n), norm_rows, &a);
}

/* ---- matmul ------------------------------------------------------------------------ */

#define MM_ROW_TILE 16
#define MM_TOK_TILE 16
_Static_assert(MM_TOK_TILE == EMBER_CPU_SMALL_MAX, "a token tile is one packed group of gemm_small_avx512");
_Static_assert(MM_ROW_TILE <= EMBER_CPU_KQ_ROWS, "a prefill row tile fits a thread's decoded Q4_K rows");
#define MM_KQ_TOK_TILE 32   /* Q8_K activations on AVX-512 VNNI (ember_cpu_gemm_kq_avx512; no packed groups) */

typedef struct mm_task {
    const float *x;
    int64_t n_tokens, n_in;
    uint32_t vdt;                 /* activation format */
    void *xq;
    size_t xq_row;
    int32_t *asum;                /* block sums for the VNNI tiles, or NULL */
    void *pk;                     /* activations packed for gemm_small_avx512 by groups of
                                   * EMBER_CPU_SMALL_MAX tokens (pk_group bytes apart), or NULL */
    size_t pk_group;
    int32_t n_w;
    const ember_weight *const *ws;
    float *const *ys;
    int64_t n_row_tiles_total;    /* sum over weights of row tiles */
    int64_t row_tile;             /* rows per tile */
    int64_t n_tok_tiles;
    uint8_t *xg;                  /* Q8_0 prefill on AVX-512: the rows interleaved (cpu.h EMBER_XG_*), or NULL */
    bool gemm, vnni, dot_pf;      /* the backend's kernel choices (cpu_backend) */
    const cpu_backend *cb;        /* per-thread scratch (ts[ith].kq) */
    uint64_t gen;                 /* this op's number (cb->mm_gen): the key of the threads' decoded rows */
    int64_t tok_tile;             /* tokens per work item: MM_TOK_TILE or MM_KQ_TOK_TILE */
    _Atomic int64_t next;
} mm_task;

static void mm_quantize(void *arg, int ith, int nth)
{
    mm_task *a = arg;
    for (int64_t t = ith; t < a->n_tokens; t += nth) {
        uint8_t *row = (uint8_t *)a->xq + (size_t)t * a->xq_row;
        quantize_row(a->vdt, a->x + t * a->n_in, row, a->n_in);
        if (a->xg) ember_cpu_q8_0_interleave_avx512(a->n_in, row, a->xg + (size_t)(t / 8) * (size_t)(a->n_in / 32) * EMBER_XG_BLOCK, (int)(t % 8));
        if (a->asum) {   /* Q8_0 or Q8_1: 32 int8 values at the end of each block (after d, or d and s) */
            const size_t bs = ember_type_block_bytes(a->vdt), off = bs - 32;
            const int64_t nb = a->n_in / 32;
            for (int64_t b = 0; b < nb; b++) {
                const int8_t *q = (const int8_t *)(row + (size_t)b * bs + off);
                int32_t s = 0;
                for (int k = 0; k < 32; k++) s += q[k];
                a->asum[t * nb + b] = s;
            }
        }
        if (a->pk) {
            const int64_t g = t / EMBER_CPU_SMALL_MAX, g0 = g * EMBER_CPU_SMALL_MAX;
            const int64_t ng = a->n_tokens - g0 < EMBER_CPU_SMALL_MAX ? a->n_tokens - g0 : EMBER_CPU_SMALL_MAX;
            ember_cpu_small_pack(a->vdt, a->n_in, ng, t - g0, row, (uint8_t *)a->pk + (size_t)g * a->pk_group);
        }
    }
}

static void mm_dot(void *arg, int ith, int nth)
{
    (void)nth;
    mm_task *a = arg;
    const int64_t n_items = a->n_row_tiles_total * a->n_tok_tiles;
    for (;;) {
        int64_t item = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (item >= n_items) break;
        int64_t rt = item / a->n_tok_tiles;   /* token tiles inner: weight rows stay hot */
        int64_t tt = item % a->n_tok_tiles;
        /* find the weight this row tile belongs to */
        int32_t k = 0;
        int64_t r0 = rt * a->row_tile;
        for (; k < a->n_w; k++) {
            int64_t tiles_k = (a->ws[k]->n_out + a->row_tile - 1) / a->row_tile;
            if (r0 < tiles_k * a->row_tile) break;
            r0 -= tiles_k * a->row_tile;
        }
        const ember_weight *w = a->ws[k];
        const ember_quant_traits *tr = ember_quant_traits_get(w->type);
        const ember_vec_dot_fn vd = tr->vec_dot;
        int64_t r1 = r0 + a->row_tile;
        if (r1 > w->n_out) r1 = w->n_out;
        int64_t t0 = tt * a->tok_tile, t1 = t0 + a->tok_tile;
        if (t1 > a->n_tokens) t1 = a->n_tokens;
        float *y = a->ys[k];
        const int64_t n_out = w->n_out;
        /* prefill (> 16 tokens): 4 x 8 tiles, outputs bit-identical to the vec_dot */
        if (a->xg && (w->type == EMBER_TYPE_Q4_0 || w->type == EMBER_TYPE_Q5_0 || w->type == EMBER_TYPE_Q8_0)) {
            ember_cpu_gemm_q32x_avx512(w->type, a->n_in, w->data, w->row_bytes, a->xq, a->xq_row, a->xg, y, n_out, r0, r1, t0, t1);
            continue;
        }
        /* the path depends on the weight type and the CPU only, never on the
         * batch's token count, so a token's logits do not depend on what it is
         * batched with (decode alone = decode beside other slots = prefill) */
        /* 2..16 tokens: every output bit-identical to the mat-vec below */
        /* above 16 tokens (big verification batches of many slots, prefill)
         * too, by token groups of 16, except Q5_0 whose prefill tile is
         * tuned on its own (branch pp5) */
        if (a->pk && ember_cpu_gemm_supported(w->type) && (a->n_tokens <= EMBER_CPU_SMALL_MAX || w->type != EMBER_TYPE_Q5_0)) {
            ember_cpu_gemm_small_avx512(w->type, a->n_in, w->data, w->row_bytes,
                                        (const uint8_t *)a->pk + (size_t)(t0 / EMBER_CPU_SMALL_MAX) * a->pk_group, t1 - t0,
                                        y + t0 * n_out, n_out, r0, r1);
            continue;
        }
        if (a->asum && ember_cpu_gemm_supported(w->type)) {
            ember_cpu_gemm_q32_avx512(w->type, a->n_in, w->data, w->row_bytes, a->xq, a->xq_row, a->asum, y, n_out, r0, r1, t0, t1);
            continue;
        }
        /* Q4_K/Q6_K prefill: 4 x 4 tiles whose every output is bit-identical
         * to the vec_dot below, so choosing by token count keeps batch invariance */
        if (a->vnni && (w->type == EMBER_TYPE_Q4_K || w->type == EMBER_TYPE_Q6_K) && t1 - t0 >= 4) {
            ember_cpu_gemm_kq_avx512(w->type, a->n_in, w->data, w->row_bytes, a->xq, a->xq_row, y, n_out, r0, r1, t0, t1,
                                     &a->cb->ts[ith].kq, a->gen);
            continue;
        }
        if (a->gemm && ember_cpu_gemm_supported(w->type)) {
            ember_cpu_gemm_q32_avx2(w->type, a->n_in, w->data, w->row_bytes, a->xq, a->xq_row, y, n_out, r0, r1, t0, t1);
            continue;
        }
        /* decode, where the type has one: the vec_dot that prefetches block by
         * block as it reads (same bits; a row's prefetches issued at once
         * stall on the miss buffers) */
        if (t1 - t0 == 1 && a->dot_pf && tr->vec_dot_pf) {
            for (int64_t r = r0; r < r1; r++)
                tr->vec_dot_pf(a->n_in, &y[t0 * n_out + r], (const uint8_t *)w->data + (size_t)r * w->row_bytes,
                               (const uint8_t *)a->xq + (size_t)t0 * a->xq_row, ember_cpu_prefetch_bytes);
            continue;
        }
        for (int64_t r = r0; r < r1; r++) {
            const void *wr = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
            if (t1 - t0 == 1)   /* decode: keep the row stream ahead of the loads */
                for (size_t o = 0; o < w->row_bytes; o += 64)
                    __builtin_prefetch((const uint8_t *)wr + ember_cpu_prefetch_bytes + o);
            for (int64_t t = t0; t < t1; t++) {
                float s;
                vd(a->n_in, &s, wr, (const uint8_t *)a->xq + (size_t)t * a->xq_row);
                y[t * n_out + r] = s;
            }
        }
    }
}

static void op_matmul(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w,
                      const ember_weight *const *ws, float *const *ys)
{
    cpu_backend *cb = CPU(be);
    const int64_t n_in = ws[0]->n_in;
    /* weights are grouped by activation format; each group quantizes x once */
    int32_t done = 0;
    bool used[16] = {0};
    while (done < n_w) {
        uint32_t vdt = 0;
        const ember_weight *grp[16];
        float *gys[16];
        int32_t n_g = 0;
        for (int32_t k = 0; k < n_w; k++) {
            if (used[k]) continue;
            uint32_t kt = ember_quant_traits_get(ws[k]->type)->vec_dot_type;
            if (n_g == 0) vdt = kt;
            if (kt != vdt) continue;
            used[k] = true;
            grp[n_g] = ws[k];
            gys[n_g] = ys[k];
            n_g++;
            done++;
        }
        mm_task a = {0};
        a.x = x;
        a.n_tokens = n_tokens;
        a.n_in = n_in;
        a.vdt = vdt;
        a.xq = cb->act;
        a.xq_row = row_size(vdt, n_in);
        a.asum = cb->vnni && (vdt == EMBER_TYPE_Q8_0 || vdt == EMBER_TYPE_Q8_1) ? cb->asum : NULL;
        a.pk = a.asum && cb->small && n_tokens >= 2 && n_in <= cb->lim.max_n_in ? cb->small_pk : NULL;
        a.pk_group = ember_cpu_small_pack_bytes(n_in, EMBER_CPU_SMALL_MAX);
        a.n_w = n_g;
        a.ws = grp;
        a.ys = gys;
        a.gemm = cb->gemm;
        a.vnni = cb->vnni;
        a.dot_pf = cb->dot_pf;
        a.cb = cb;
        a.gen = ++cb->mm_gen;
        if (vdt == EMBER_TYPE_Q8_0 && n_tokens > 16) a.xg = cb->xg;   /* NULL without VNNI */
        /* K-quant prefill tiles decode their rows once per token tile: twice
         * as many tokens as the other paths (pp256 0.95x CPU time; 64 no better) */
        a.tok_tile = vdt == EMBER_TYPE_Q8_K && cb->vnni ? MM_KQ_TOK_TILE : MM_TOK_TILE;
        a.n_tok_tiles = (n_tokens + a.tok_tile - 1) / a.tok_tile;
        int64_t total_rows = 0;
        for (int32_t k = 0; k < n_g; k++) total_rows += grp[k]->n_out;
        /* decode: enough row tiles that every thread gets several */
        a.row_tile = n_tokens >= 4 ? MM_ROW_TILE : total_rows / ((int64_t)cb->n_threads * 8);
        if (a.row_tile < MM_ROW_TILE) a.row_tile = MM_ROW_TILE;
        a.row_tile = (a.row_tile + 7) & ~(int64_t)7;   /* whole passes of the small-batch kernel (8 rows) */
        a.n_row_tiles_total = 0;
        for (int32_t k = 0; k < n_g; k++) a.n_row_tiles_total += (grp[k]->n_out + a.row_tile - 1) / a.row_tile;
        atomic_store(&a.next, 0);
        if (n_tokens == 1) mm_quantize(&a, 0, 1);
        else ember_threadpool_run(cb->tp, mm_quantize, &a);
        ember_threadpool_run(cb->tp, mm_dot, &a);
    }
}

/* ---- rope -------------------------------------------------------------------------------- */

typedef struct rope_task {
    float *x; int64_t n_tokens; int32_t n_head, head_dim, n_rot; const ember_pos *pos;
    float base, freq_scale; ember_rope_mode mode;
    const float *freq_factors;   /* NULL: all 1 */
} rope_task;

static void rope_rows(void *arg, int ith, int nth)
{
    rope_task *a = arg;
    int64_t lo, hi;
    split_range(a->n_tokens, ith, nth, &lo, &hi);
    const float theta_scale = powf(a->base, -2.0f / (float)a->n_rot);
    float cs[512], sn[512];   /* n_rot/2 <= 512 checked at model load */
    const int32_t half = a->n_rot / 2;
    for (int64_t t = lo; t < hi; t++) {
        float theta = (float)a->pos[t];
        for (int32_t i = 0; i < half; i++) {
            const float th = a->freq_scale * (a->freq_factors ? theta / a->freq_factors[i] : theta);
            cs[i] = cosf(th);
            sn[i] = sinf(th);
            theta *= theta_scale;
        }
        for (int32_t h = 0; h < a->n_head; h++) {
            float *v = a->x + (t * a->n_head + h) * a->head_dim;
            /* ggml's x0*cos - x1*sin and x0*sin + x1*cos as its -march
             * build compiles them: the first product fused (FMA) */
            if (a->mode == EMBER_ROPE_NEOX) {
                for (int32_t i = 0; i < half; i++) {
                    const float x0 = v[i], x1 = v[i + half];
                    v[i] = fmaf(x0, cs[i], -(x1 * sn[i]));
                    v[i + half] = fmaf(x0, sn[i], x1 * cs[i]);
                }
            } else {
                for (int32_t i = 0; i < half; i++) {
                    const float x0 = v[2 * i], x1 = v[2 * i + 1];
                    v[2 * i] = fmaf(x0, cs[i], -(x1 * sn[i]));
                    v[2 * i + 1] = fmaf(x0, sn[i], x1 * cs[i]);
                }
            }
        }
    }
}

static void op_rope(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                    int32_t n_rot, const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode)
{
    rope_task a = {x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, NULL};
    ember_threadpool_run_n(CPU(be)->tp, threads_for(CPU(be), n_tokens * n_head * head_dim), rope_rows, &a);
}

static void op_rope_ext(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                        int32_t n_rot, const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode,
                        const float *freq_factors)
{
    rope_task a = {x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, freq_factors};
    ember_threadpool_run_n(CPU(be)->tp, threads_for(CPU(be), n_tokens * n_head * head_dim), rope_rows, &a);
}

/* ---- activations, add, scale ------------------------------------------------------------ */

typedef struct ew_task { float *y; const float *x; float s; int64_t n; int kind; } ew_task;

static void ew_run(void *arg, int ith, int nth)
{
    ew_task *a = arg;
    int64_t lo, hi;
    split_range(a->n, ith, nth, &lo, &hi);
    float *y = a->y;
    const float *x = a->x;
    switch (a->kind) {
    case 0: /* geglu: y = gelu(y) * x, GELU looked up by the f16 bits of y */
        for (int64_t i0 = lo; i0 < hi; i0 += 256) {
            uint16_t h[256];
            const int64_t n = hi - i0 < 256 ? hi - i0 : 256;
            to_f16_row(n, y + i0, h);
            for (int64_t k = 0; k < n; k++) {
                const int64_t i = i0 + k;
                const float g = y[i];
                if (g <= -10.0f) y[i] = 0.0f;
                else if (g >= 10.0f) y[i] = g * x[i];
                else y[i] = gelu_f16_table[h[k]] * x[i];
            }
        }
        break;
    case 1: /* swiglu: y = silu(y) * x */
        swiglu_row(hi - lo, y + lo, x + lo);
        break;
    case 2:
        for (int64_t i = lo; i < hi; i++) y[i] += x[i];
        break;
    case 3:
        for (int64_t i = lo; i < hi; i++) y[i] *= a->s;
        break;
    }
}

static void ew(ember_backend *be, int kind, float *y, const float *x, float s, int64_t n)
{
    ew_task a = {y, x, s, n, kind};
    ember_threadpool_run_n(CPU(be)->tp, threads_for(CPU(be), kind <= 1 ? n * 4 : n), ew_run, &a);
}

static void op_geglu(ember_backend *be, float *g, const float *u, int64_t n) { ew(be, 0, g, u, 0, n); }
static void op_swiglu(ember_backend *be, float *g, const float *u, int64_t n) { ew(be, 1, g, u, 0, n); }
static void op_add(ember_backend *be, float *y, const float *x, int64_t n) { ew(be, 2, y, x, 0, n); }
static void op_scale(ember_backend *be, float *x, float s, int64_t n) { ew(be, 3, x, NULL, s, n); }

/* ---- KV store ------------------------------------------------------------------------------ */

static int64_t type_elems(uint32_t t, size_t bytes)
{
    return (int64_t)(bytes / ember_type_block_bytes(t) * ember_type_block_size(t));
}

static void op_kv_store(ember_backend *be, const ember_kv_layer_view *kv, const float *k, const float *v,
                        const int64_t *rows, int32_t n)
{
    (void)be;
    const int64_t nk = type_elems(kv->type_k, kv->k_row_bytes);
    const int64_t nv = type_elems(kv->type_v, kv->v_row_bytes);
    for (int32_t t = 0; t < n; t++) {
        quantize_row(kv->type_k, k + t * nk, (uint8_t *)kv->k + (size_t)rows[t] * kv->k_row_bytes, nk);
        quantize_row(kv->type_v, v + t * nv, (uint8_t *)kv->v + (size_t)rows[t] * kv->v_row_bytes, nv);
    }
}

/* ---- attention -------------------------------------------------------------------------------- */

/* ggml's CPU flash attention (llama.cpp's default) switches to a tiled all-f32
 * kernel at this many query rows per call (GGML_FA_TILE_Q); below it, it
 * works row by row with an f16 output accumulator. F16 caches follow the
 * same split so results track llama.cpp's. */
#define FA_TILE_Q 64

typedef struct attn_task {
    cpu_backend *cb;
    const ember_kv_layer_view *kv;
    const ember_attn_params *p;
    const float *q;
    const ember_attn_query *queries;
    int32_t n;
    float *out;
    _Atomic int64_t next;
} attn_task;

static void attn_run(void *arg, int ith, int nth)
{
    (void)nth;
    attn_task *a = arg;
    const ember_attn_params *p = a->p;
    const ember_kv_layer_view *kv = a->kv;
    cpu_thread_scratch *ts = &a->cb->ts[ith];
    const int32_t hk = p->head_dim_k, hv = p->head_dim_v;
    const int32_t n_rep = p->n_head / p->n_head_kv;
    const int32_t bt = kv->block_tokens;
    const int64_t n_items = (int64_t)a->n * p->n_head;
    const size_t k_head_bytes = row_size(kv->type_k, hk);
    const size_t v_head_bytes = row_size(kv->type_v, hv);
    const ember_quant_traits *kq = kv->type_k == EMBER_TYPE_Q8_0 ? ember_quant_traits_get(EMBER_TYPE_Q8_0) : NULL;
    const ember_quant_traits *vq = kv->type_v == EMBER_TYPE_Q8_0 ? ember_quant_traits_get(EMBER_TYPE_Q8_0) : NULL;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (item >= n_items) break;
        const int64_t t = item / p->n_head;
        const int32_t h = (int32_t)(item % p->n_head);
        const int32_t g = h / n_rep;
        const ember_attn_query *qq = &a->queries[t];
        const float *qh = a->q + (t * p->n_head + h) * hk;
        int32_t lo = 0;
        if (p->n_swa > 0 && qq->pos - p->n_swa + 1 > 0) lo = qq->pos - p->n_swa + 1;
        const int32_t hi = qq->pos;   /* inclusive */
        float *acc = ts->acc;
        if (kv->type_k == EMBER_TYPE_F16 && kv->type_v == EMBER_TYPE_F16) {
            if (a->n < FA_TILE_Q) {
                /* ggml flash attention, one query row at a time: q rounded
                 * to f16, online softmax in f32, V accumulated in f16 */
                to_f16_row(hk, qh, ts->qconv);
                uint16_t *vkq = ts->vkq16;
                memset(vkq, 0, (size_t)hv * sizeof(uint16_t));
                float M = -INFINITY, S = 0.0f;
                for (int32_t j = lo; j <= hi; j++) {
                    const int64_t row = (int64_t)qq->blocks[j / bt] * bt + j % bt;
                    const uint16_t *kr = (const uint16_t *)((const uint8_t *)kv->k + (size_t)row * kv->k_row_bytes + (size_t)g * k_head_bytes);
                    const uint16_t *vr = (const uint16_t *)((const uint8_t *)kv->v + (size_t)row * kv->v_row_bytes + (size_t)g * v_head_bytes);
                    const float s = dot_f16(hk, ts->qconv, kr) * p->kq_scale;
                    float ms = 1.0f, vs = 1.0f;
                    if (s > M) {
                        const float m_old = M;
                        M = s;
                        ms = expf(m_old - M);
                        scale_f16(hv, vkq, ms);
                    } else {
                        vs = expf(s - M);
                    }
                    mad_f16(hv, vkq, vr, vs);
                    S = fmaf(S, ms, vs);   /* ggml's S*ms + vs, contracted to an FMA */
                }
                const float inv = S == 0.0f ? 0.0f : 1.0f / S;
                for (int32_t d = 0; d < hv; d++) acc[d] = cpu_f16_to_f32(vkq[d]) * inv;
            } else {
                /* ggml's tiled flash attention for >= 64 queries: all f32 */
                float *sc = ts->scores;
                float mx = -INFINITY;
                for (int32_t j = lo; j <= hi; j++) {
                    const int64_t row = (int64_t)qq->blocks[j / bt] * bt + j % bt;
                    const uint16_t *kr = (const uint16_t *)((const uint8_t *)kv->k + (size_t)row * kv->k_row_bytes + (size_t)g * k_head_bytes);
                    const float s = dot_f32_f16(hk, qh, kr) * p->kq_scale;
                    sc[j - lo] = s;
                    if (s > mx) mx = s;
                }
                float sum = 0.0f;
                for (int32_t j = 0; j <= hi - lo; j++) { sc[j] = expf(sc[j] - mx); sum += sc[j]; }
                const float inv = 1.0f / sum;
                memset(acc, 0, (size_t)hv * sizeof(float));
                for (int32_t j = lo; j <= hi; j++) {
                    const int64_t row = (int64_t)qq->blocks[j / bt] * bt + j % bt;
                    axpy_f16(hv, sc[j - lo], (const uint16_t *)((const uint8_t *)kv->v + (size_t)row * kv->v_row_bytes + (size_t)g * v_head_bytes), acc);
                }
                for (int32_t d = 0; d < hv; d++) acc[d] *= inv;
            }
            memcpy(a->out + (t * p->n_head + h) * hv, acc, (size_t)hv * sizeof(float));
            continue;
        }
        quantize_row(kv->type_k == EMBER_TYPE_F32 ? EMBER_TYPE_F32 : kv->type_k == EMBER_TYPE_F16 ? EMBER_TYPE_F16 : EMBER_TYPE_Q8_0,
                     qh, ts->qconv, hk);
        float *sc = ts->scores;
        float mx = -INFINITY;
        for (int32_t j = lo; j <= hi; j++) {
            const int64_t row = (int64_t)qq->blocks[j / bt] * bt + j % bt;
            const uint8_t *kr = (const uint8_t *)kv->k + (size_t)row * kv->k_row_bytes + (size_t)g * k_head_bytes;
            float s;
            if (kv->type_k == EMBER_TYPE_F16) s = dot_f16(hk, ts->qconv, (const uint16_t *)kr);
            else if (kv->type_k == EMBER_TYPE_F32) s = dot_f32(hk, ts->qconv, (const float *)kr);
            else kq->vec_dot(hk, &s, kr, ts->qconv);
            s *= p->kq_scale;
            sc[j - lo] = s;
            if (s > mx) mx = s;
        }
        double sum = 0.0;
        for (int32_t j = 0; j <= hi - lo; j++) {
            const float e = expf(sc[j] - mx);
            sc[j] = e;
            sum += (double)e;
        }
        const float inv = (float)(1.0 / sum);
        memset(acc, 0, (size_t)hv * sizeof(float));
        for (int32_t j = lo; j <= hi; j++) {
            const int64_t row = (int64_t)qq->blocks[j / bt] * bt + j % bt;
            const uint8_t *vr = (const uint8_t *)kv->v + (size_t)row * kv->v_row_bytes + (size_t)g * v_head_bytes;
            const float w = sc[j - lo] * inv;
            if (kv->type_v == EMBER_TYPE_F16) axpy_f16(hv, w, (const uint16_t *)vr, acc);
            else if (kv->type_v == EMBER_TYPE_F32) for (int32_t d = 0; d < hv; d++) acc[d] += w * ((const float *)vr)[d];
            else {
                vq->to_float(vr, ts->vrow, hv);
                for (int32_t d = 0; d < hv; d++) acc[d] += w * ts->vrow[d];
            }
        }
        memcpy(a->out + (t * p->n_head + h) * hv, acc, (size_t)hv * sizeof(float));
    }
}

/* F16 cache, >= FA_TILE_Q queries: ggml's all-f32 tiled numerics, with the
 * query heads that share a KV head (GQA) taken together so each K/V row is
 * converted from f16 once for up to ATTN_GROUP heads. Per head the
 * operations and their order are those of the one-head loop in attn_run. */
static void attn_run_grouped(void *arg, int ith, int nth)
{
    (void)nth;
    attn_task *a = arg;
    const ember_attn_params *p = a->p;
    const ember_kv_layer_view *kv = a->kv;
    cpu_thread_scratch *ts = &a->cb->ts[ith];
    const int32_t hk = p->head_dim_k, hv = p->head_dim_v;
    const int32_t n_rep = p->n_head / p->n_head_kv;
    const int32_t n_grp = (n_rep + ATTN_GROUP - 1) / ATTN_GROUP;   /* chunks per KV head */
    const int32_t bt = kv->block_tokens;
    const int64_t n_items = (int64_t)a->n * p->n_head_kv * n_grp;
    const size_t k_head_bytes = row_size(kv->type_k, hk);
    const size_t v_head_bytes = row_size(kv->type_v, hv);
    const int64_t kv_max = a->cb->lim.max_kv_tokens;
    /* attn_prefill_avx512.c: the same per-output operations, 4 K rows at a time */
    const bool attn512 = ember_cpu_variant_active() >= EMBER_CPU_AVX512 && hk % 16 == 0 && hv % 16 == 0;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (item >= n_items) break;
        const int64_t t = item / ((int64_t)p->n_head_kv * n_grp);
        const int32_t rem = (int32_t)(item % ((int64_t)p->n_head_kv * n_grp));
        const int32_t g = rem / n_grp, h0 = g * n_rep + (rem % n_grp) * ATTN_GROUP;
        const int nq = n_rep - (h0 - g * n_rep) < ATTN_GROUP ? n_rep - (h0 - g * n_rep) : ATTN_GROUP;
        const ember_attn_query *qq = &a->queries[t];
        int32_t lo = 0;
        if (p->n_swa > 0 && qq->pos - p->n_swa + 1 > 0) lo = qq->pos - p->n_swa + 1;
        const int32_t hi = qq->pos;   /* inclusive */
        const float *qh[ATTN_GROUP];
        float *acc[ATTN_GROUP], s[ATTN_GROUP], mx[ATTN_GROUP], w[ATTN_GROUP];
        for (int q = 0; q < nq; q++) {
            qh[q] = a->q + (t * p->n_head + h0 + q) * hk;
            acc[q] = ts->acc + (size_t)q * (size_t)a->cb->lim.max_head_dim;
            mx[q] = -INFINITY;
        }
        for (int32_t j = lo; j <= hi;) {
            if (attn512 && hi - j >= 3) {   /* 4 K rows at a time, same per-output order */
                const uint16_t *kr4[4];
                for (int r = 0; r < 4; r++) {
                    const int64_t row = (int64_t)qq->blocks[(j + r) / bt] * bt + (j + r) % bt;
                    kr4[r] = (const uint16_t *)((const uint8_t *)kv->k + (size_t)row * kv->k_row_bytes + (size_t)g * k_head_bytes);
                }
                float s4[4 * 8];
                ember_cpu_attn_qk_avx512(hk, nq, qh, 4, kr4, s4);
                for (int r = 0; r < 4; r++, j++)
                    for (int q = 0; q < nq; q++) {
                        const float sq = s4[r * 8 + q] * p->kq_scale;
                        ts->scores[(size_t)q * (size_t)kv_max + (size_t)(j - lo)] = sq;
                        if (sq > mx[q]) mx[q] = sq;
                    }
                continue;
            }
            const int64_t row = (int64_t)qq->blocks[j / bt] * bt + j % bt;
            const uint16_t *kr = (const uint16_t *)((const uint8_t *)kv->k + (size_t)row * kv->k_row_bytes + (size_t)g * k_head_bytes);
            dot_f32_f16_multi(hk, nq, qh, kr, s);
            for (int q = 0; q < nq; q++) {
                const float sq = s[q] * p->kq_scale;
                ts->scores[(size_t)q * (size_t)kv_max + (size_t)(j - lo)] = sq;
                if (sq > mx[q]) mx[q] = sq;
            }
            j++;
        }
        float inv[ATTN_GROUP];
        for (int q = 0; q < nq; q++) {
            float *sc = ts->scores + (size_t)q * (size_t)kv_max;
            float sum = 0.0f;
            for (int32_t j = 0; j <= hi - lo; j++) { sc[j] = expf(sc[j] - mx[q]); sum += sc[j]; }
            inv[q] = 1.0f / sum;
            memset(acc[q], 0, (size_t)hv * sizeof(float));
        }
        if (attn512)
            ember_cpu_attn_pv_avx512(hv, nq, lo, hi, ts->scores, (size_t)kv_max, (const uint8_t *)kv->v + (size_t)g * v_head_bytes,
                                     kv->v_row_bytes, qq->blocks, bt, acc);
        else for (int32_t j = lo; j <= hi; j++) {
            const int64_t row = (int64_t)qq->blocks[j / bt] * bt + j % bt;
            for (int q = 0; q < nq; q++) w[q] = ts->scores[(size_t)q * (size_t)kv_max + (size_t)(j - lo)];
            axpy_f16_multi(hv, nq, w, (const uint16_t *)((const uint8_t *)kv->v + (size_t)row * kv->v_row_bytes + (size_t)g * v_head_bytes), acc);
        }
        for (int q = 0; q < nq; q++) {
            for (int32_t d = 0; d < hv; d++) acc[q][d] *= inv[q];
            memcpy(a->out + (t * p->n_head + h0 + q) * hv, acc[q], (size_t)hv * sizeof(float));
        }
    }
}

/* A few queries (2 <= n < FA_TILE_Q) over an F16 cache: items of up to
 * EMBER_CPU_ATTN_MAXQ queries = one KV head's query heads (or a part of
 * them) x a run of consecutive tokens with the same block table, so each K/V
 * row is read once per item (attn_avx512.c; per query the numerics of
 * attn_run, so a token's result does not depend on its batch). */
typedef struct attn_multi_task {
    cpu_backend *cb;
    const ember_kv_layer_view *kv;
    const ember_attn_params *p;
    const float *q;
    const ember_attn_query *queries;
    float *out;
    int32_t chunk[FA_TILE_Q + 1];   /* token runs [chunk[c], chunk[c + 1]) */
    int32_t n_chunks, hq, n_hparts;
    _Atomic int64_t next;
} attn_multi_task;

static void attn_multi_run(void *arg, int ith, int nth)
{
    (void)nth;
    attn_multi_task *a = arg;
    const ember_attn_params *p = a->p;
    const int32_t n_rep = p->n_head / p->n_head_kv;
    const int64_t n_items = (int64_t)a->n_chunks * p->n_head_kv * a->n_hparts;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (item >= n_items) break;
        const int32_t c = (int32_t)(item / ((int64_t)p->n_head_kv * a->n_hparts));
        const int32_t rem = (int32_t)(item % ((int64_t)p->n_head_kv * a->n_hparts));
        const int32_t g = rem / a->n_hparts, h0 = g * n_rep + (rem % a->n_hparts) * a->hq;
        const int32_t h1 = h0 + a->hq < (g + 1) * n_rep ? h0 + a->hq : (g + 1) * n_rep;
        const float *qh[EMBER_CPU_ATTN_MAXQ];
        const ember_attn_query *qq[EMBER_CPU_ATTN_MAXQ];
        float *out[EMBER_CPU_ATTN_MAXQ];
        int nq = 0;
        for (int32_t t = a->chunk[c]; t < a->chunk[c + 1]; t++)
            for (int32_t h = h0; h < h1; h++) {
                qh[nq] = a->q + ((int64_t)t * p->n_head + h) * p->head_dim_k;
                qq[nq] = &a->queries[t];
                out[nq] = a->out + ((int64_t)t * p->n_head + h) * p->head_dim_v;
                nq++;
            }
        ember_cpu_attn_f16_multi_avx512(a->kv, p, g, nq, qh, qq, out, a->cb->ts[ith].mq);
    }
}

static void op_attention(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                         const float *q, const ember_attn_query *queries, int32_t n, float *out)
{
    if (CPU(be)->attn_multi && kv->type_k == EMBER_TYPE_F16 && kv->type_v == EMBER_TYPE_F16 && n >= 2 && n < FA_TILE_Q &&
        p->head_dim_k % 64 == 0 && p->head_dim_v % 64 == 0) {
        attn_multi_task m = {.cb = CPU(be), .kv = kv, .p = p, .q = q, .queries = queries, .out = out};
        const int32_t n_rep = p->n_head / p->n_head_kv;
        m.hq = n_rep < EMBER_CPU_ATTN_MAXQ ? n_rep : EMBER_CPU_ATTN_MAXQ;
        m.n_hparts = (n_rep + m.hq - 1) / m.hq;
        const int32_t tc = EMBER_CPU_ATTN_MAXQ / m.hq;   /* tokens per run */
        m.chunk[0] = 0;
        for (int32_t t = 1; t <= n; t++)
            if (t == n || queries[t].blocks != queries[m.chunk[m.n_chunks]].blocks || t - m.chunk[m.n_chunks] == tc)
                m.chunk[++m.n_chunks] = t;
        atomic_store(&m.next, 0);
        const int64_t items = (int64_t)m.n_chunks * p->n_head_kv * m.n_hparts;
        int nth = CPU(be)->n_threads;
        if (items < nth) nth = (int)items;
        ember_threadpool_run_n(CPU(be)->tp, nth, attn_multi_run, &m);
        return;
    }
    attn_task a = {.cb = CPU(be), .kv = kv, .p = p, .q = q, .queries = queries, .n = n, .out = out};
    atomic_store(&a.next, 0);
    const bool grouped = kv->type_k == EMBER_TYPE_F16 && kv->type_v == EMBER_TYPE_F16 && n >= FA_TILE_Q;
    const int32_t n_rep = p->n_head / p->n_head_kv;
    int64_t items = grouped ? (int64_t)n * p->n_head_kv * ((n_rep + ATTN_GROUP - 1) / ATTN_GROUP) : (int64_t)n * p->n_head;
    int nth = CPU(be)->n_threads;
    if (items < nth) nth = (int)items;
    ember_threadpool_run_n(CPU(be)->tp, nth, grouped ? attn_run_grouped : attn_run, &a);
}

/* ---- memory, copies, soft-capping, steps: activations are host memory ---------------------- */

static void op_kv_copy(ember_backend *be, const ember_kv_layer_view *kv, int64_t dst_row, int64_t src_row, int64_t n_rows)
{
    (void)be; (void)kv; (void)dst_row; (void)src_row; (void)n_rows;   /* the layer views are the only copy */
}

static void *op_act_alloc(ember_backend *be, size_t bytes)
{
    (void)be;
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) ember_error(EMBER_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of activations", bytes);
    return p;
}

/* state memory: host memory, 64-byte aligned cells (backend.h state_alloc) */
static void *op_state_alloc(ember_backend *be, int64_t n_cells, size_t cell_bytes)
{
    (void)be;
    if (n_cells < 1 || cell_bytes == 0 || (uint64_t)n_cells > SIZE_MAX / 2 / cell_bytes) {
        ember_error(EMBER_ERR_INVALID_ARG, "cpu backend: state memory of %lld cells of %zu bytes", (long long)n_cells,
                    cell_bytes);
        return NULL;
    }
    const size_t bytes = ((size_t)n_cells * cell_bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes);
    if (!p) {
        ember_error(EMBER_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of recurrent state", bytes);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void op_state_copy(ember_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (src) memcpy(dst, src, bytes);
    else memset(dst, 0, bytes);
}

static void *op_host_alloc(ember_backend *be, size_t bytes)
{
    (void)be;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) ember_error(EMBER_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of host output", bytes);
    return p;
}

static void op_mem_free(ember_backend *be, void *p)
{
    (void)be;
    free(p);
}

static void op_copy(ember_backend *be, float *dst, const float *src, int64_t n)
{
    (void)be;
    if (dst != src) memmove(dst, src, (size_t)n * sizeof(float));
}

typedef struct softcap_task { float *x; float cap; int64_t n; } softcap_task;

static void softcap_run(void *arg, int ith, int nth)
{
    softcap_task *a = arg;
    int64_t lo, hi;
    split_range(a->n, ith, nth, &lo, &hi);
    const float c = a->cap;
    for (int64_t i = lo; i < hi; i++) a->x[i] = c * tanhf(a->x[i] / c);
}

static void op_softcap(ember_backend *be, float *x, float cap, int64_t n)
{
    softcap_task a = {x, cap, n};
    ember_threadpool_run_n(CPU(be)->tp, threads_for(CPU(be), n * 8), softcap_run, &a);
}

static bool op_step_begin(ember_backend *be, const ember_backend_step *st)
{
    (void)be; (void)st;
    return false;   /* no graphs: the caller runs the forward pass */
}

static bool op_step_end(ember_backend *be)
{
    (void)be;
    return true;
}

static uint64_t op_scratch_bytes(const ember_backend *be)
{
    const cpu_backend *cb = be->impl;
    return cb->scratch_bytes + cb->xg_bytes;
}

static void op_print_memory(const ember_backend *be, FILE *f)
{
    (void)be; (void)f;   /* no device memory */
}

/* ---- lifecycle ---------------------------------------------------------------------------------- */

static void op_free(ember_backend *be)
{
    cpu_backend *cb = CPU(be);
    if (!cb) return;
    free(cb->xg);
    ember_threadpool_free(cb->tp);
    if (cb->ts) {
        for (int32_t i = 0; i < cb->n_threads; i++) {
            free(cb->ts[i].scores);
            free(cb->ts[i].vrow);
            free(cb->ts[i].acc);
            free(cb->ts[i].qconv);
            free(cb->ts[i].vkq16);
            free(cb->ts[i].mq);
            free(cb->ts[i].kq.dec);
        }
        free(cb->ts);
    }
    free(cb->act);
    free(cb->asum);
    free(cb->small_pk);
    free(cb);
}

/* Logits are host memory here: the head is a host pass, sync is nothing. */
static void op_logits_top(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                          ember_logits_top *out)
{
    ember_logits_top_host(rows, n_rows, n_vocab, k, out);
}

static void op_logits_sync(ember_backend *be, float *host, size_t bytes) {}

/* Nothing runs asynchronously here: the caller takes logits_top. */
static bool op_logits_top_start(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k)
{
    return false;
}

static void op_logits_top_finish(ember_backend *be, ember_logits_top *out) {}

static const ember_backend_ops cpu_ops = {
    .name = "cpu",
    .free = op_free,
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
    .kv_copy = op_kv_copy,
    .act_alloc = op_act_alloc,
    .act_free = op_mem_free,
    .host_alloc = op_host_alloc,
    .host_free = op_mem_free,
    .copy = op_copy,
    .upload = op_copy,
    .dequant_host_rows = op_dequant_host_rows,
    .softcap = op_softcap,
    .step_begin = op_step_begin,
    .step_end = op_step_end,
    .scratch_bytes = op_scratch_bytes,
    .print_memory = op_print_memory,
    .logits_top = op_logits_top,
    .logits_sync = op_logits_sync,
    .logits_top_start = op_logits_top_start,
    .logits_top_finish = op_logits_top_finish,
    /* recurrent (linear-attention) ops: recurrent.c */
    .conv1d_silu = ember_cpu_conv1d_silu,
    .gated_delta_rule = ember_cpu_gated_delta_rule,
    .sigmoid_mul = ember_cpu_sigmoid_mul,
    .copy_strided = ember_cpu_copy_strided,
    .state_alloc = op_state_alloc,
    .state_free = op_mem_free,
    .state_copy = op_state_copy,
};

static pthread_mutex_t first_opt_lock = PTHREAD_MUTEX_INITIALIZER;
static bool first_opt_set;

ember_status ember_backend_cpu_new(const ember_backend_options *opt, const ember_backend_limits *lim, ember_backend **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "cpu backend: out is NULL");
    *out = NULL;
    if (!lim || lim->max_tokens < 1 || lim->max_n_in < 1 || lim->max_kv_tokens < 1 || lim->max_head_dim < 1)
        return ember_error(EMBER_ERR_INVALID_ARG, "cpu backend: limits must be positive");
    const ember_backend_options o = opt ? *opt : ember_backend_options_default();
    pthread_mutex_lock(&first_opt_lock);
    if (!first_opt_set) {
        first_opt = o;
        first_opt_set = true;
    }
    pthread_mutex_unlock(&first_opt_lock);
    pthread_once(&tables_once, init_tables);
    int32_t n_threads = o.n_threads;
    if (n_threads <= 0) n_threads = ember_n_cores();
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return ember_error(EMBER_ERR_NOMEM, "cpu backend: out of memory");
    cb->base.ops = &cpu_ops;
    cb->base.caps = (ember_backend_caps){
        .device_activations = false, .graphed_steps = false, .layer_skip = true, .lazy_placement = false,
        .kv_types = (1u << EMBER_TYPE_F32) | (1u << EMBER_TYPE_F16) | (1u << EMBER_TYPE_Q8_0),
    };
    cb->base.impl = cb;
    cb->n_threads = n_threads;
    cb->lim = *lim;
    cb->gemm = cpu_gemm && !o.cpu_no_gemm;
    cb->vnni = cb->gemm && cpu_avx512 && !o.cpu_no_vnni;
    cb->small = cb->vnni && !o.cpu_no_small_gemm;   /* A/B knob for bench/spec_cost */
    cb->dot_pf = !o.cpu_no_dot_pf;
    cb->attn_multi = cpu_avx512 && !o.cpu_no_attn_multi;
    ember_status st = ember_threadpool_new(n_threads, &cb->tp);
    if (st != EMBER_OK) { free(cb); return st; }
    /* interleaved Q8_0 activations for the AVX-512 prefill tiles (cpu.h EMBER_XG_*) */
    const size_t xg_bytes = cb->vnni ? (size_t)(lim->max_tokens + 7) / 8 * (size_t)(lim->max_n_in / 32) * EMBER_XG_BLOCK : 0;
    cb->xg_bytes = xg_bytes;
    if (xg_bytes && !(cb->xg = aligned_alloc(64, (xg_bytes + 63) & ~(size_t)63))) {
        op_free(&cb->base);
        return ember_error(EMBER_ERR_NOMEM, "cpu backend: %zu bytes of interleaved activations", xg_bytes);
    }
    /* 4 bytes per element covers every activation format (F32 is the widest) */
    cb->act_bytes = (size_t)lim->max_tokens * (size_t)lim->max_n_in * 4;
    cb->act = malloc(cb->act_bytes);
    cb->asum = malloc((size_t)lim->max_tokens * (size_t)(lim->max_n_in / 32 + 1) * sizeof(int32_t));
    cb->ts = calloc((size_t)n_threads, sizeof *cb->ts);
    const size_t pk_bytes = ember_cpu_small_pack_bytes(lim->max_n_in, EMBER_CPU_SMALL_MAX) *
                            (size_t)((lim->max_tokens + EMBER_CPU_SMALL_MAX - 1) / EMBER_CPU_SMALL_MAX);
    cb->small_pk = aligned_alloc(64, (pk_bytes + 63) & ~(size_t)63);
    if (!cb->act || !cb->asum || !cb->ts || !cb->small_pk) { op_free(&cb->base); return ember_error(EMBER_ERR_NOMEM, "cpu backend: %zu bytes of activation scratch", cb->act_bytes); }
    cb->scratch_bytes = cb->act_bytes + pk_bytes;
    for (int32_t i = 0; i < n_threads; i++) {
        cb->ts[i].scores = malloc((size_t)lim->max_kv_tokens * ATTN_GROUP * sizeof(float));
        cb->ts[i].vrow = malloc((size_t)lim->max_head_dim * sizeof(float));
        cb->ts[i].acc = malloc((size_t)lim->max_head_dim * ATTN_GROUP * sizeof(float));
        cb->ts[i].qconv = malloc((size_t)lim->max_head_dim * 4 + 64);
        cb->ts[i].vkq16 = malloc((size_t)lim->max_head_dim * sizeof(uint16_t));
        cb->ts[i].mq = malloc((size_t)lim->max_head_dim * 2 * EMBER_CPU_ATTN_MAXQ * sizeof(float));
        const size_t kq_bytes = cb->vnni && !o.cpu_no_kq_dec ? (ember_cpu_gemm_kq_scratch_bytes(lim->max_n_in) + 63) & ~(size_t)63 : 0;
        if (kq_bytes) cb->ts[i].kq.dec = aligned_alloc(64, kq_bytes);
        cb->scratch_bytes += kq_bytes;
        if (!cb->ts[i].scores || !cb->ts[i].vrow || !cb->ts[i].acc || !cb->ts[i].qconv || !cb->ts[i].vkq16 || !cb->ts[i].mq ||
            (kq_bytes && !cb->ts[i].kq.dec)) {
            op_free(&cb->base);
            return ember_error(EMBER_ERR_NOMEM, "cpu backend: attention scratch for %lld keys", (long long)lim->max_kv_tokens);
        }
        cb->scratch_bytes += (size_t)lim->max_kv_tokens * ATTN_GROUP * sizeof(float) + (size_t)lim->max_head_dim * (8 + 4 * ATTN_GROUP) + 64 +
                             (size_t)lim->max_head_dim * 2 * EMBER_CPU_ATTN_MAXQ * sizeof(float);
    }
    *out = &cb->base;
    return EMBER_OK;
}

int32_t ember_backend_cpu_n_threads(const ember_backend *be) { return ((const cpu_backend *)be)->n_threads; }
