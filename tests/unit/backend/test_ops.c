/* CPU backend ops against direct double-precision evaluation of each op's
 * textbook formula (written here independently of src/backend):
 * RMSNorm (Zhang & Sennrich 2019), RoPE in both pair layouts (Su et al.
 * 2021), GELU-tanh / SiLU gating, matmul with weights and activations chosen
 * to be exact in Q8_0 / F32, and softmax attention over a paged cache
 * (scattered blocks, GQA, sliding window), plus the thread pool. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "base/threadpool.h"
#include "quant/quant.h"
#include "backend/cpu/cpu.h"
#include "../../common/cpu_backend.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void)   /* xorshift64, uniform in [-1, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static ember_backend *new_be_lim(int nth, int32_t max_tokens, int32_t max_n_in)
{
    ember_backend_limits lim = {.max_tokens = max_tokens, .max_n_in = max_n_in, .max_kv_tokens = 64, .max_head_dim = 64};
    ember_backend *be = NULL;
    assert_int_equal(test_cpu_backend_new(nth, &lim, &be), EMBER_OK);
    return be;
}

static ember_backend *new_be(int nth)
{
    ember_backend_limits lim = {.max_tokens = 16, .max_n_in = 256, .max_kv_tokens = 64, .max_head_dim = 64};
    ember_backend *be = NULL;
    assert_int_equal(test_cpu_backend_new(nth, &lim, &be), EMBER_OK);
    return be;
}

static void test_threadpool_runs_every_index(void **st)
{
    (void)st;
    ember_threadpool *tp;
    assert_int_equal(ember_threadpool_new(3, &tp), EMBER_OK);
    static _Atomic int hits[3];
    for (int rep = 0; rep < 200; rep++) {
        void fn(void *arg, int ith, int nth);
        ember_threadpool_run(tp, fn, hits);
    }
    for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&hits[i]), 200);
    ember_threadpool_free(tp);
    assert_int_equal(ember_threadpool_new(0, &tp), EMBER_ERR_INVALID_ARG);
}
void fn(void *arg, int ith, int nth)
{
    _Atomic int *h = arg;
    assert_int_equal(nth, 3);
    atomic_fetch_add(&h[ith], 1);
}

static void test_rms_norm(void **st)
{
    (void)st;
    ember_backend *be = new_be(2);
    enum { R = 5, N = 96 };
    float x[R * N], w[N], y[R * N];
    for (int i = 0; i < R * N; i++) x[i] = frand() * 3.0f;
    for (int i = 0; i < N; i++) w[i] = 1.0f + frand();
    be->ops->rms_norm(be, y, x, w, R, N, 1e-6f);
    for (int r = 0; r < R; r++) {
        double ss = 0;
        for (int i = 0; i < N; i++) ss += (double)x[r * N + i] * x[r * N + i];
        double inv = 1.0 / sqrt(ss / N + 1e-6);
        for (int i = 0; i < N; i++) assert_float_equal(y[r * N + i], x[r * N + i] * inv * w[i], 1e-5);
    }
    be->ops->free(be);
}

static void check_rope(ember_backend *be, ember_rope_mode mode)
{
    enum { T = 3, H = 2, D = 16, ROT = 12 };
    float x[T * H * D], y[T * H * D];
    for (int i = 0; i < T * H * D; i++) x[i] = y[i] = frand();
    const ember_pos pos[T] = {0, 7, 300};
    const double base = 10000.0, fs = 0.5;
    be->ops->rope(be, y, T, H, D, ROT, pos, (float)base, (float)fs, mode);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *a = x + (t * H + h) * D;
            const float *b = y + (t * H + h) * D;
            for (int i = 0; i < ROT / 2; i++) {
                double th = fs * pos[t] * pow(base, -2.0 * i / ROT);
                int i0 = mode == EMBER_ROPE_NEOX ? i : 2 * i, i1 = mode == EMBER_ROPE_NEOX ? i + ROT / 2 : 2 * i + 1;
                assert_float_equal(b[i0], a[i0] * cos(th) - a[i1] * sin(th), 2e-4);
                assert_float_equal(b[i1], a[i0] * sin(th) + a[i1] * cos(th), 2e-4);
            }
            for (int i = ROT; i < D; i++) assert_true(b[i] == a[i]);   /* past n_rot: untouched */
        }
}

static void test_rope(void **st)
{
    (void)st;
    ember_backend *be = new_be(2);
    check_rope(be, EMBER_ROPE_NEOX);
    check_rope(be, EMBER_ROPE_NORM);
    be->ops->free(be);
}

static void test_gated_activations(void **st)
{
    (void)st;
    ember_backend *be = new_be(1);
    enum { N = 200 };
    float g[N], u[N], y[N];
    for (int i = 0; i < N; i++) { g[i] = frand() * 12.0f; u[i] = frand(); }
    memcpy(y, g, sizeof y);
    be->ops->geglu(be, y, u, N);
    for (int i = 0; i < N; i++) {
        double x = g[i];
        double gelu = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        /* f16 rounding of input and output: relative 2^-10 each */
        assert_float_equal(y[i], gelu * u[i], 3e-3 * (fabs(gelu * u[i]) + fabs(x)) + 1e-6);
    }
    memcpy(y, g, sizeof y);
    be->ops->swiglu(be, y, u, N);
    for (int i = 0; i < N; i++) {
        double x = g[i];
        assert_float_equal(y[i], x / (1.0 + exp(-x)) * u[i], 1e-5 * (1 + fabs(x)));
    }
    be->ops->free(be);
}

/* The AVX-512 prefill attention loops (attn_prefill_avx512.c) against the AVX2
 * one-row helpers they stand for: scores and V sums must match bit for bit
 * (head sizes 16..272, 1..8 query heads, rows spread over paged blocks). */
static void test_attn_avx512_matches_avx2(void **st)
{
    (void)st;
    if (ember_cpu_variant_active() < EMBER_CPU_AVX512) skip();
    enum { BT = 4, NB = 5, ROWS = NB * BT, DMAX = 272 };
    const int32_t blocks[NB] = {3, 0, 4, 1, 2};
    static uint16_t kv[ROWS][DMAX];
    static float q[8][DMAX], w[8][ROWS], y[8][DMAX], yref[DMAX];
    for (int r = 0; r < ROWS; r++)
        for (int d = 0; d < DMAX; d++) kv[r][d] = ember_fp32_to_fp16(frand() * 2.0f - 1.0f);
    for (int h = 0; h < 8; h++) {
        for (int d = 0; d < DMAX; d++) q[h][d] = frand() * 3.0f - 1.5f;
        for (int j = 0; j < ROWS; j++) w[h][j] = frand();
    }
    const int dims[] = {16, 32, 48, 64, 80, 256, 272};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int nq = 1; nq <= 8; nq++) {
            const int D = dims[di];
            const float *qa[8];
            float *ya[8];
            for (int h = 0; h < nq; h++) { qa[h] = q[h]; ya[h] = y[h]; }
            const uint16_t *kr[4] = {kv[2], kv[7], kv[11], kv[19]};
            float out[4 * 8];
            for (int nr = 1; nr <= 4; nr += 3) {
                ember_cpu_attn_qk_avx512(D, nq, qa, nr, kr, out);
                for (int r = 0; r < nr; r++)
                    for (int h = 0; h < nq; h++)
                        if (ember_cpu_dot_f32_f16_avx2(D, q[h], kr[r]) != out[r * 8 + h])
                            fail_msg("qk: D %d, %d heads, %d rows: row %d head %d differs", D, nq, nr, r, h);
            }
            const int lo = 1, hi = ROWS - 2;   /* positions 1..18: starts and ends inside a block */
            ember_cpu_attn_pv_avx512(D, nq, lo, hi, w[0], ROWS, (const uint8_t *)kv, sizeof kv[0], blocks, BT, ya);
            for (int h = 0; h < nq; h++) {
                memset(yref, 0, sizeof yref);
                for (int j = lo; j <= hi; j++)
                    ember_cpu_axpy_f16_avx2(D, w[h][j - lo], kv[blocks[j / BT] * BT + j % BT], yref);
                if (memcmp(yref, y[h], (size_t)D * sizeof(float)) != 0) fail_msg("pv: D %d, %d heads: head %d differs", D, nq, h);
            }
        }
}

/* Batch invariance of the gated activations: a token's row gives the same
 * bits alone (1 thread) as inside a ubatch of 2..8 rows at any row index and
 * buffer offset, split over 1..4 threads (so rows straddle thread ranges and
 * the AVX2 body / scalar tail boundary falls anywhere in them). Speculative
 * verification (k+1 rows) must reproduce 1-row decoding bit for bit. */
static void test_activations_batch_invariant(void **st)
{
    (void)st;
    enum { N = 2051, T = 8, OFF = 5 };   /* 8 rows: 4 threads at most (threads_for) */
    static float g[T * N], u[T * N], y[T * N + OFF], alone[2][T * N];
    for (int i = 0; i < T * N; i++) { g[i] = frand() * (i % 11 == 0 ? 120.0f : 12.0f); u[i] = frand(); }
    ember_backend *be1 = new_be(1);
    for (int op = 0; op < 2; op++)
        for (int t = 0; t < T; t++) {
            memcpy(alone[op] + t * N, g + t * N, N * sizeof(float));
            if (op == 0) be1->ops->geglu(be1, alone[op] + t * N, u + t * N, N);
            else be1->ops->swiglu(be1, alone[op] + t * N, u + t * N, N);
        }
    be1->ops->free(be1);
    for (int nth = 1; nth <= 4; nth++) {
        ember_backend *be = new_be(nth);
        for (int op = 0; op < 2; op++)
            for (int n_tok = 2; n_tok <= T; n_tok++)
                for (int off = 0; off <= OFF; off += OFF) {
                    memcpy(y + off, g, (size_t)n_tok * N * sizeof(float));
                    if (op == 0) be->ops->geglu(be, y + off, u, (int64_t)n_tok * N);
                    else be->ops->swiglu(be, y + off, u, (int64_t)n_tok * N);
                    if (memcmp(y + off, alone[op], (size_t)n_tok * N * sizeof(float)) != 0)
                        fail_msg("%s, %d threads, %d rows, offset %d: differs from rows alone",
                                 op ? "swiglu" : "geglu", nth, n_tok, off);
                }
        be->ops->free(be);
    }
}

/* Q8_0 block: f16 scale d then 32 int8 values; value = d * q. */
static void pack_q8_0(const int8_t *q, float d, uint8_t *blk)
{
    uint16_t h = ember_fp32_to_fp16(d);
    memcpy(blk, &h, 2);
    memcpy(blk + 2, q, 32);
}

static void test_matmul_q8_0_exact(void **st)
{
    (void)st;
    ember_backend *be = new_be(2);
    enum { NIN = 64, NOUT = 40, T = 5 };
    /* weights: integer codes times power-of-two scales, exact in Q8_0 */
    static uint8_t wdata[NOUT * (NIN / 32) * 34];
    static double wref[NOUT][NIN];
    for (int r = 0; r < NOUT; r++)
        for (int b = 0; b < NIN / 32; b++) {
            int8_t q[32];
            float d = ldexpf(1.0f, -(r + b) % 5 - 3);
            for (int i = 0; i < 32; i++) { q[i] = (int8_t)((int)(frand() * 127)); wref[r][b * 32 + i] = d * q[i]; }
            pack_q8_0(q, d, wdata + (r * (NIN / 32) + b) * 34);
        }
    /* activations: each 32-block has max |x| = 127 * 2^-6 so Q8_0 quantization is exact */
    float x[T * NIN];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < NIN; i++) {
            int k = (i % 32 == 0) ? 127 : (int)(frand() * 126);
            x[t * NIN + i] = ldexpf((float)k, -6);
        }
    ember_weight w = {.type = EMBER_TYPE_Q8_0, .n_in = NIN, .n_out = NOUT, .row_bytes = (NIN / 32) * 34, .data = wdata, .name = "w"};
    float y[T * NOUT];
    const ember_weight *ws[1] = {&w};
    float *ys[1] = {y};
    be->ops->matmul(be, x, T, 1, ws, ys);
    for (int t = 0; t < T; t++)
        for (int r = 0; r < NOUT; r++) {
            double s = 0;
            for (int i = 0; i < NIN; i++) s += wref[r][i] * x[t * NIN + i];
            assert_float_equal(y[t * NOUT + r], s, 1e-3 * (1 + fabs(s)));
        }
    /* two weights of different formats in one call, single token */
    float wf[NOUT * NIN];
    for (int i = 0; i < NOUT * NIN; i++) wf[i] = frand();
    ember_weight w2 = {.type = EMBER_TYPE_F32, .n_in = NIN, .n_out = NOUT, .row_bytes = NIN * 4, .data = wf, .name = "wf"};
    float y1[NOUT], y2[NOUT];
    const ember_weight *ws2[2] = {&w, &w2};
    float *ys2[2] = {y1, y2};
    be->ops->matmul(be, x, 1, 2, ws2, ys2);
    for (int r = 0; r < NOUT; r++) {
        double s1 = 0, s2 = 0;
        for (int i = 0; i < NIN; i++) { s1 += wref[r][i] * x[i]; s2 += (double)wf[r * NIN + i] * x[i]; }
        assert_float_equal(y1[r], s1, 1e-3 * (1 + fabs(s1)));
        assert_float_equal(y2[r], s2, 1e-4 * (1 + fabs(s2)));
    }
    be->ops->free(be);
}

/* Matmul of every 32-block weight format over several tokens (the tiled
 * prefill path) and one token (mat-vec), against the double-precision sum
 * of dequantized weights times dequantized activations: the quantized
 * product is exact in integers, so only float rounding may differ. */
static void check_matmul_format_n(uint32_t wt, int64_t n_tokens, int NIN)
{
    ember_backend *be = new_be_lim(2, 48, NIN > 256 ? NIN : 256);
    enum { NOUT = 37 };
    const ember_quant_traits *tw = ember_quant_traits_get(wt);
    const ember_quant_traits *ta = ember_quant_traits_get(tw->vec_dot_type);
    const size_t rb = NIN / tw->block_size * tw->block_bytes, ab = NIN / ta->block_size * ta->block_bytes;
    uint8_t *w = malloc(NOUT * rb), *aq = malloc(ab);
    float *wf = malloc(sizeof(float) * NOUT * NIN), *x = malloc(sizeof(float) * 48 * NIN), *xd = malloc(sizeof(float) * NIN);
    float *y = malloc(sizeof(float) * 48 * NOUT);
    for (int i = 0; i < NOUT * NIN; i++) wf[i] = frand() + 0.3f;
    for (int r = 0; r < NOUT; r++) tw->from_float_ref(wf + r * NIN, w + r * rb, NIN);
    for (int r = 0; r < NOUT; r++) tw->to_float(w + r * rb, wf + r * NIN, NIN);
    for (int i = 0; i < n_tokens * NIN; i++) x[i] = frand() * 4.0f + 0.5f;
    ember_weight wd = {.type = wt, .n_in = NIN, .n_out = NOUT, .row_bytes = rb, .data = w, .name = "w"};
    const ember_weight *ws[1] = {&wd};
    float *ys[1] = {y};
    be->ops->matmul(be, x, n_tokens, 1, ws, ys);
    for (int64_t t = 0; t < n_tokens; t++) {
        /* the backend's activation quantizer: the SIMD Q8_0 one scales by
         * 127 / amax as ggml's AVX code does and may round a value one step
         * away from the reference's x * (1 / d), which at 640 x 27 values
         * exceeded this check's float tolerance */
        (ta->from_float ? ta->from_float : ta->from_float_ref)(x + t * NIN, aq, NIN);
        ta->to_float(aq, xd, NIN);
        for (int r = 0; r < NOUT; r++) {
            double s = 0, sa = 0;
            for (int i = 0; i < NIN; i++) { s += (double)wf[r * NIN + i] * xd[i]; sa += fabs((double)wf[r * NIN + i] * xd[i]); }
            /* Q8_1 keeps s = d * sum(q) in f16 (ggml's layout): 2^-11 relative */
            const double tol = (tw->vec_dot_type == EMBER_TYPE_Q8_1 ? 3e-4 : 1e-5) * (1 + sa);
            if (fabs(y[t * NOUT + r] - s) > tol)
                fail_msg("%s, %lld tokens: y[%lld][%d] = %f, expected %f", tw->name, (long long)n_tokens, (long long)t, r, y[t * NOUT + r], s);
        }
    }
    /* batch invariance: each token alone (the decode mat-vec) gives the same
     * bits as inside the batch (small-batch kernel for 2..16 tokens, prefill
     * tiles above) */
    float y1[NOUT];
    float *ys1[1] = {y1};
    for (int64_t t = 0; t < n_tokens; t++) {
        be->ops->matmul(be, x + t * NIN, 1, 1, ws, ys1);
        if (memcmp(y1, y + t * NOUT, sizeof y1) != 0)
            fail_msg("%s, %lld tokens: token %lld alone differs from the batch", tw->name, (long long)n_tokens, (long long)t);
    }
    free(w); free(aq); free(wf); free(x); free(xd); free(y);
    be->ops->free(be);
}

static void check_matmul_format(uint32_t wt, int64_t n_tokens) { check_matmul_format_n(wt, n_tokens, 256); }

static void test_matmul_formats(void **st)
{
    (void)st;
    const uint32_t types[] = {EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_1, EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0,
                              EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_matmul_format(types[i], 1);
        check_matmul_format(types[i], 7);
        check_matmul_format(types[i], 16);
        check_matmul_format(types[i], 13);
    }
    /* several super-blocks per row: the K-quant prefill tiles must carry the
     * float accumulation across blocks exactly as the vec_dot does */
    check_matmul_format_n(EMBER_TYPE_Q4_K, 13, 1024);
    check_matmul_format_n(EMBER_TYPE_Q6_K, 13, 1024);
    /* the AVX-512 Q4_0/Q5_0/Q8_0 prefill tiles (above 16 tokens) take 8 or
     * 4 tokens at a time (two rows per zmm): token counts whose 16-token
     * work items leave 8 + 8, 4 + 1 + 1 and 8 + 1 + 1 + 1 pieces, rows not a
     * multiple of 4 (37), 20 blocks per row as in Gemma 3's 640-wide layers */
    const uint32_t q0[] = {EMBER_TYPE_Q4_0, EMBER_TYPE_Q5_0, EMBER_TYPE_Q8_0};
    for (size_t i = 0; i < 3; i++) {
        check_matmul_format_n(q0[i], 22, 640);
        check_matmul_format_n(q0[i], 27, 640);
        check_matmul_format_n(q0[i], 40, 96);
    }
}

/* The Q4_K prefill tile keeps a thread's decoded rows for its next token
 * groups of the same rows within one matmul op (ember_kq_cache): 70 tokens
 * are 3 token groups per row tile on 2 threads; then the same weight
 * buffer is rewritten with other values and multiplied again by the same
 * backend: every token's outputs must be the one-token mat-vec's bits
 * (which never use the cache) for the weights of that call, and within
 * 1e-5 of the double-precision product. 13 rows: one row tile, so each
 * thread's first item of the second op has the rows its cache holds from
 * the first (only the op number tells them apart); on one thread that is
 * certain, on two it depends on which thread takes which item. */
static void rows_cache_case(int nth)
{
    enum { NIN = 512, NOUT = 13, T = 70 };
    ember_backend *be = new_be_lim(nth, T, NIN);
    const ember_quant_traits *tw = ember_quant_traits_get(EMBER_TYPE_Q4_K);
    const ember_quant_traits *ta = ember_quant_traits_get(tw->vec_dot_type);
    const size_t rb = NIN / 256 * tw->block_bytes, ab = NIN / 256 * ta->block_bytes;
    uint8_t *w = malloc(NOUT * rb), *aq = malloc(ab);
    float *wf = malloc(sizeof(float) * NOUT * NIN), *x = malloc(sizeof(float) * T * NIN), *xd = malloc(sizeof(float) * NIN);
    float *y = malloc(sizeof(float) * T * NOUT), y1[NOUT];
    assert_non_null(w); assert_non_null(aq); assert_non_null(wf); assert_non_null(x); assert_non_null(xd); assert_non_null(y);
    for (int i = 0; i < T * NIN; i++) x[i] = frand() * 4.0f - 1.0f;
    ember_weight wd = {.type = EMBER_TYPE_Q4_K, .n_in = NIN, .n_out = NOUT, .row_bytes = rb, .data = w, .name = "w"};
    const ember_weight *ws[1] = {&wd};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NOUT * NIN; i++) wf[i] = round ? 2.0f - frand() * 3.0f : frand() + 0.3f;
        for (int r = 0; r < NOUT; r++) tw->from_float_ref(wf + r * NIN, w + r * rb, NIN);
        for (int r = 0; r < NOUT; r++) tw->to_float(w + r * rb, wf + r * NIN, NIN);
        float *ys[1] = {y}, *ys1[1] = {y1};
        be->ops->matmul(be, x, T, 1, ws, ys);
        for (int t = 0; t < T; t++) {
            be->ops->matmul(be, x + t * NIN, 1, 1, ws, ys1);
            if (memcmp(y1, y + t * NOUT, sizeof y1) != 0)
                fail_msg("round %d: token %d of %d differs from its one-token mat-vec", round, t, T);
            (ta->from_float ? ta->from_float : ta->from_float_ref)(x + t * NIN, aq, NIN);
            ta->to_float(aq, xd, NIN);
            for (int r = 0; r < NOUT; r++) {
                double s = 0, sa = 0;
                for (int i = 0; i < NIN; i++) { s += (double)wf[r * NIN + i] * xd[i]; sa += fabs((double)wf[r * NIN + i] * xd[i]); }
                if (fabs(y[t * NOUT + r] - s) > 1e-5 * (1 + sa))
                    fail_msg("round %d: y[%d][%d] = %f, expected %f", round, t, r, y[t * NOUT + r], s);
            }
        }
    }
    free(w); free(aq); free(wf); free(x); free(xd); free(y);
    be->ops->free(be);
}

static void test_matmul_q4_K_rows_cache(void **st)
{
    (void)st;
    rows_cache_case(1);
    rows_cache_case(2);
}

/* Batches of 2+ tokens (speculative verification, slots, prefill) take
 * their own kernel on AVX-512 VNNI machines (pairs of tokens per register,
 * odd counts padded, groups of 16 tokens; Q5_0 above 16 tokens the prefill
 * tile): every token must get the bits of the one-token mat-vec, over many
 * blocks per row (the float accumulation carried across blocks) and row
 * counts that leave partial row passes (37 rows); 21 and 37 tokens end in
 * partial groups. */
static void test_matmul_small_batches(void **st)
{
    (void)st;
    const uint32_t types[] = {EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_1, EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0};
    const int64_t ns[] = {2, 3, 4, 5, 6, 8, 9, 11, 12, 15, 21, 37};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) check_matmul_format_n(types[i], ns[k], 576);
}

/* Attention over a paged cache with blocks out of order, GQA h -> 2 heads,
 * nq queries (>= 64 takes the CPU backend's prefill path, which handles the
 * heads of one KV head together, in groups of up to 8). */
static void check_attention_n(uint32_t type, int32_t n_swa, double tol, int nq, int h_total)
{
    ember_backend *be = new_be(2);
    enum { BT = 4, NB = 6, HK = 2, D = 32, NPOS = 11 };
    const int H = h_total, NQ = nq;
    const size_t row_elems = HK * D;
    const size_t rb = type == EMBER_TYPE_F32 ? row_elems * 4 : type == EMBER_TYPE_F16 ? row_elems * 2 : row_elems / 32 * 34;
    uint8_t *k = calloc(NB * BT, rb), *v = calloc(NB * BT, rb);
    static float kf[NPOS][HK * D], vf[NPOS][HK * D];
    const int32_t blocks[3] = {4, 1, 3};   /* positions 0-3 in block 4, 4-7 in 1, 8-10 in 3 */
    ember_kv_layer_view view = {.type_k = type, .type_v = type, .k = k, .v = v, .k_row_bytes = rb, .v_row_bytes = rb,
                                .block_tokens = BT, .n_rows = NB * BT};
    for (int p = 0; p < NPOS; p++) {
        for (size_t i = 0; i < row_elems; i++) { kf[p][i] = frand(); vf[p][i] = frand(); }
    }
    int64_t rows[NPOS];
    for (int p = 0; p < NPOS; p++) rows[p] = (int64_t)blocks[p / BT] * BT + p % BT;
    be->ops->kv_store(be, &view, &kf[0][0], &vf[0][0], rows, NPOS);
    /* reference values: what the cache holds, read back through to_float */
    static float kr[NPOS][HK * D], vr[NPOS][HK * D];
    const ember_quant_traits *tr = ember_quant_traits_get(type);
    for (int p = 0; p < NPOS; p++) {
        tr->to_float(k + rows[p] * rb, kr[p], (int64_t)row_elems);
        tr->to_float(v + rows[p] * rb, vr[p], (int64_t)row_elems);
    }
    ember_pos *qpos = malloc(sizeof(ember_pos) * (size_t)NQ);
    ember_attn_query *qs = malloc(sizeof(ember_attn_query) * (size_t)NQ);
    float *q = malloc(sizeof(float) * (size_t)(NQ * H * D)), *out = malloc(sizeof(float) * (size_t)(NQ * H * D));
    for (int i = 0; i < NQ; i++) {
        qpos[i] = NQ == 3 ? (ember_pos[]){0, 6, 10}[i] : (ember_pos)((i * 7) % NPOS);
        qs[i].blocks = blocks;
        qs[i].pos = qpos[i];
    }
    for (int i = 0; i < NQ * H * D; i++) q[i] = frand();
    ember_attn_params ap = {.n_head = H, .n_head_kv = HK, .head_dim_k = D, .head_dim_v = D, .kq_scale = 0.3f, .n_swa = n_swa};
    be->ops->attention(be, &view, &ap, q, qs, NQ, out);
    for (int i = 0; i < NQ; i++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / HK);
            int lo = n_swa > 0 ? qpos[i] - n_swa + 1 : 0;
            if (lo < 0) lo = 0;
            double sc[NPOS], mx = -1e300, sum = 0;
            for (int j = lo; j <= qpos[i]; j++) {
                double s = 0;
                for (int d = 0; d < D; d++) s += (double)q[(i * H + h) * D + d] * kr[j][g * D + d];
                sc[j] = 0.3 * s;
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = lo; j <= qpos[i]; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
            for (int d = 0; d < D; d++) {
                double o = 0;
                for (int j = lo; j <= qpos[i]; j++) o += sc[j] / sum * vr[j][g * D + d];
                assert_float_equal(out[(i * H + h) * D + d], o, tol);
            }
        }
    free(k);
    free(v);
    free(qpos);
    free(qs);
    free(q);
    free(out);
    be->ops->free(be);
}

/* F16 cache, 2..63 queries (speculative verification, a few slots): the
 * backend may read each K/V row once for several queries (AVX-512), but
 * every query's output must have the bits of that query alone (the one-row
 * path that follows ggml's flash attention), for head dims below 128 (f32
 * accumulator steps) and of 256 (ggml's f16 vector loop), GQA, a sliding
 * window, queries at several positions of one sequence and of two. */
static void check_attention_multi(int32_t D, int32_t n_swa, int nq)
{
    enum { BT = 8, NB = 8, HK = 2, H = 6, NPOS = 50 };
    ember_backend_limits lim = {.max_tokens = 64, .max_n_in = 256, .max_kv_tokens = 64, .max_head_dim = 256};
    ember_backend *be = NULL;
    assert_int_equal(test_cpu_backend_new(2, &lim, &be), EMBER_OK);
    const size_t rb = (size_t)HK * D * 2;
    uint8_t *k = calloc(NB * BT, rb), *v = calloc(NB * BT, rb);
    float *kf = malloc(sizeof(float) * NPOS * HK * D), *vf = malloc(sizeof(float) * NPOS * HK * D);
    for (int i = 0; i < NPOS * HK * D; i++) { kf[i] = frand() * 2.0f; vf[i] = frand(); }
    const int32_t blocks_a[7] = {5, 0, 3, 6, 1, 7, 2}, blocks_b[7] = {2, 7, 1, 6, 3, 0, 5};
    int64_t rows[NPOS];
    for (int p = 0; p < NPOS; p++) rows[p] = (int64_t)blocks_a[p / BT] * BT + p % BT;
    ember_kv_layer_view view = {.type_k = EMBER_TYPE_F16, .type_v = EMBER_TYPE_F16, .k = k, .v = v, .k_row_bytes = rb,
                                .v_row_bytes = rb, .block_tokens = BT, .n_rows = NB * BT};
    be->ops->kv_store(be, &view, kf, vf, rows, NPOS);
    ember_attn_query *qs = malloc(sizeof(ember_attn_query) * (size_t)nq);
    float *q = malloc(sizeof(float) * (size_t)(nq * H * D)), *out = malloc(sizeof(float) * (size_t)(nq * H * D));
    float *one = malloc(sizeof(float) * (size_t)(H * D));
    for (int i = 0; i < nq; i++) {
        /* the last third reads the same rows through the other table order */
        qs[i].blocks = i >= 2 * nq / 3 ? blocks_b : blocks_a;
        qs[i].pos = (ember_pos)(NPOS - nq + i);
    }
    for (int i = 0; i < nq * H * D; i++) q[i] = frand() * 3.0f;
    ember_attn_params ap = {.n_head = H, .n_head_kv = HK, .head_dim_k = D, .head_dim_v = D, .kq_scale = 0.125f, .n_swa = n_swa};
    be->ops->attention(be, &view, &ap, q, qs, nq, out);
    for (int i = 0; i < nq; i++) {
        be->ops->attention(be, &view, &ap, q + i * H * D, &qs[i], 1, one);
        if (memcmp(one, out + i * H * D, sizeof(float) * (size_t)(H * D)) != 0)
            fail_msg("D %d, swa %d, %d queries: query %d alone differs from the batch", D, n_swa, nq, i);
    }
    free(k); free(v); free(kf); free(vf); free(qs); free(q); free(out); free(one);
    be->ops->free(be);
}

static void test_attention_f16_multi_query(void **st)
{
    (void)st;
    check_attention_multi(64, 0, 2);
    check_attention_multi(64, 0, 9);
    check_attention_multi(64, 20, 7);
    check_attention_multi(256, 0, 5);
    check_attention_multi(128, 0, 16);
}

static void check_attention(uint32_t type, int32_t n_swa, double tol) { check_attention_n(type, n_swa, tol, 3, 4); }

static void test_attention_f32(void **st) { (void)st; check_attention(EMBER_TYPE_F32, 0, 1e-5); }
static void test_attention_f16(void **st) { (void)st; check_attention(EMBER_TYPE_F16, 0, 3e-3); }
static void test_attention_q8_0(void **st) { (void)st; check_attention(EMBER_TYPE_Q8_0, 0, 2e-2); }
static void test_attention_sliding_window(void **st) { (void)st; check_attention(EMBER_TYPE_F32, 3, 1e-5); }
static void test_attention_f16_prefill(void **st)
{
    (void)st;
    check_attention_n(EMBER_TYPE_F16, 0, 3e-3, 70, 4);    /* 2 heads per KV head */
    check_attention_n(EMBER_TYPE_F16, 3, 3e-3, 70, 20);   /* 10 per KV head: groups of 8 and 2 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threadpool_runs_every_index),
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_gated_activations),
        cmocka_unit_test(test_activations_batch_invariant),
        cmocka_unit_test(test_matmul_q4_K_rows_cache),
        cmocka_unit_test(test_attn_avx512_matches_avx2),
        cmocka_unit_test(test_matmul_q8_0_exact),
        cmocka_unit_test(test_matmul_formats),
        cmocka_unit_test(test_matmul_small_batches),
        cmocka_unit_test(test_attention_f32),
        cmocka_unit_test(test_attention_f16),
        cmocka_unit_test(test_attention_q8_0),
        cmocka_unit_test(test_attention_sliding_window),
        cmocka_unit_test(test_attention_f16_prefill),
        cmocka_unit_test(test_attention_f16_multi_query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
