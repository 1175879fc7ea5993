/* CUDA RMSNorm, RoPE (normal and NEOX), gated activations, add, scale and
 * F16 KV stores against plain double-precision math written from the
 * papers' formulas (RMSNorm: Zhang & Sennrich 2019; RoPE: Su et al. 2021 as
 * ggml applies it: theta = freq_scale * (pos * ts^i) / ff[i] in f32 steps,
 * ts = powf(base, -2/n_rot), then cos/sin in double;
 * GELU-tanh: Hendrycks & Gimpel 2016) and C's _Float16 conversion.
 * Without EMBER_CUDA or without a GPU every test skips and says why.
 * Tolerance: relative 2e-6 (norms, add), absolute 2e-5 on O(1) values
 * (RoPE angles, GELU/SiLU through expf/tanhf). */
#include "cuda_test.h"
#include "base/types.h"
#include "quant/quant.h"

#ifdef EMBER_CUDA

static void fill(float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = test_randf(lo, hi);
}

static void expect_close(const float *got, const double *want, int64_t n, double rel, double abs_tol,
                         const char *what)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > rel * fabs(want[i]) + abs_tol && bad++ < 5)
            print_error("%s[%lld] = %.8g, want %.8g\n", what, (long long)i, got[i], want[i]);
    assert_int_equal(bad, 0);
}

static void test_rms_norm(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const int64_t n = 640, rows = 5;
    const float eps = 1e-6f;
    float x[640 * 5], w[640], r0[640 * 5], out[640 * 5];
    double want[640 * 5];
    fill(x, n * rows, -3.f, 3.f);
    fill(w, n, 0.5f, 1.5f);
    fill(r0, n * rows, -10.f, 10.f);
    float *dx = dev_new(x, sizeof x), *dw = dev_new(w, sizeof w), *dy = dev_new(NULL, sizeof x);
    float *dr = dev_new(r0, sizeof r0);

    for (int weighted = 0; weighted < 2; weighted++) {
        CU_OK(ember_cuda_rms_norm(test_cu, dx, weighted ? dw : NULL, dy, n, rows, eps));
        dev_get(out, dy, sizeof out);
        for (int64_t r = 0; r < rows; r++) {
            double ss = 0;
            for (int64_t i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
            const double inv = 1.0 / sqrt(ss / n + eps);
            for (int64_t i = 0; i < n; i++) want[r * n + i] = x[r * n + i] * inv * (weighted ? w[i] : 1.0);
        }
        expect_close(out, want, n * rows, 2e-6, 1e-7, weighted ? "rms_norm(w)" : "rms_norm");
    }
    /* fused post-norm + residual: r += norm(x) * w (want holds norm(x)*w) */
    CU_OK(ember_cuda_rms_norm_add(test_cu, dx, dw, dr, n, rows, eps));
    dev_get(out, dr, sizeof out);
    for (int64_t i = 0; i < n * rows; i++) want[i] += r0[i];
    expect_close(out, want, n * rows, 2e-6, 2e-6, "rms_norm_add");
    /* in place, one row of a head-sized norm (per-head Q/K norm) */
    CU_OK(ember_cuda_rms_norm(test_cu, dx, dw, dx, 64, 1, eps));
    dev_get(out, dx, 64 * sizeof(float));
    double ss = 0;
    for (int i = 0; i < 64; i++) ss += (double)x[i] * x[i];
    for (int i = 0; i < 64; i++) want[i] = x[i] / sqrt(ss / 64 + eps) * w[i];
    expect_close(out, want, 64, 2e-6, 1e-7, "rms_norm(in place)");

    dev_free(dx, sizeof x);
    dev_free(dw, sizeof w);
    dev_free(dy, sizeof x);
    dev_free(dr, sizeof r0);
}

static void check_rope(ember_cuda_rope_mode mode, int n_head, int head_dim, int n_rot, float base, float fscale,
                       bool with_ff)
{
    const int n_tokens = 4;
    const int32_t pos[4] = {0, 1, 517, 4095};
    const int64_t n = (int64_t)n_tokens * n_head * head_dim;
    float *x = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n);
    float ff[128];
    assert_true(x && out && want);
    fill(x, n, -1.f, 1.f);
    for (int i = 0; i < n_rot / 2; i++) ff[i] = with_ff ? test_randf(1.f, 8.f) : 1.f;
    float *dx = dev_new(x, sizeof(float) * n);
    int32_t *dpos = dev_new(pos, sizeof pos);
    float *dff = with_ff ? dev_new(ff, sizeof(float) * (n_rot / 2)) : NULL;
    CU_OK(ember_cuda_rope(test_cu, dx, dpos, n_tokens, n_head, head_dim, n_rot, mode, base, fscale, dff));
    dev_get(out, dx, sizeof(float) * n);
    for (int t = 0; t < n_tokens; t++)
        for (int h = 0; h < n_head; h++) {
            const float *xh = x + ((int64_t)t * n_head + h) * head_dim;
            double *wh = want + ((int64_t)t * n_head + h) * head_dim;
            for (int i = 0; i < head_dim; i++) wh[i] = xh[i];
            for (int i = 0; i < n_rot / 2; i++) {
                /* ggml_rope's f32 steps (the documented contract) */
                const float ts = powf(base, -2.0f / (float)n_rot);
                float tb = (float)pos[t];
                for (int k = 0; k < i; k++) tb *= ts;
                const double theta = (float)(fscale * (tb / ff[i]));
                const int i0 = mode == EMBER_CUDA_ROPE_NEOX ? i : 2 * i;
                const int i1 = mode == EMBER_CUDA_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
                wh[i0] = xh[i0] * cos(theta) - xh[i1] * sin(theta);
                wh[i1] = xh[i0] * sin(theta) + xh[i1] * cos(theta);
            }
        }
    expect_close(out, want, n, 0, 2e-6, mode == EMBER_CUDA_ROPE_NEOX ? "rope(neox)" : "rope(normal)");
    dev_free(dx, sizeof(float) * n);
    dev_free(dpos, sizeof pos);
    if (dff) dev_free(dff, sizeof(float) * (n_rot / 2));
    free(x);
    free(out);
    free(want);
}

static void test_rope(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    check_rope(EMBER_CUDA_ROPE_NEOX, 4, 256, 256, 1e6f, 1.f, false);   /* gemma-3 global layer */
    check_rope(EMBER_CUDA_ROPE_NEOX, 1, 256, 256, 1e4f, 0.125f, false); /* linear scaling */
    check_rope(EMBER_CUDA_ROPE_NORMAL, 9, 64, 64, 1e5f, 1.f, false);   /* SmolLM2 */
    check_rope(EMBER_CUDA_ROPE_NORMAL, 3, 128, 96, 1e4f, 1.f, true);   /* partial, freq factors */
    check_rope(EMBER_CUDA_ROPE_NEOX, 2, 128, 64, 1e4f, 1.f, true);
}

static void test_glu_add_scale(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    enum { N = 5000 };
    static float g[N], u[N], out[N];
    static double want[N];
    fill(g, N, -8.f, 8.f);
    fill(u, N, -2.f, 2.f);
    float *dg = dev_new(g, sizeof g), *du = dev_new(u, sizeof u), *dy = dev_new(NULL, sizeof g);

    CU_OK(ember_cuda_glu(test_cu, EMBER_CUDA_ACT_SILU, dg, du, dy, N));
    dev_get(out, dy, sizeof out);
    for (int i = 0; i < N; i++) want[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    expect_close(out, want, N, 1e-5, 2e-6, "silu");

    CU_OK(ember_cuda_glu(test_cu, EMBER_CUDA_ACT_GELU_TANH, dg, du, dy, N));
    dev_get(out, dy, sizeof out);
    for (int i = 0; i < N; i++) {
        const double x = g[i];
        want[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
    }
    expect_close(out, want, N, 1e-5, 2e-6, "gelu_tanh");

    /* ggml CPU's table form: f16 in, f16 out, cut at +-10 (g spans [-12, 12]) */
    static float g2[N];
    for (int i = 0; i < N; i++) g2[i] = g[i] * 1.5f;
    float *dg2 = dev_new(g2, sizeof g2);
    CU_OK(ember_cuda_glu(test_cu, EMBER_CUDA_ACT_GELU_TANH_F16, dg2, du, dy, N));
    dev_get(out, dy, sizeof out);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const double x = (double)(_Float16)g2[i];
        double a = (_Float16)(0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))));
        if (g2[i] <= -10.f) a = 0;
        if (g2[i] >= 10.f) a = g2[i];
        /* the f16 rounding of gelu may land one f16 ulp apart (float vs double
         * tanh near a rounding boundary): allow 1e-3 relative on the act */
        if (fabs(out[i] - a * u[i]) > 1e-3 * fabs(a * u[i]) + 1e-6 && bad++ < 5)
            print_error("gelu_tanh_f16(%g) * %g = %.8g, want %.8g\n", g2[i], u[i], out[i], a * u[i]);
    }
    assert_int_equal(bad, 0);
    dev_free(dg2, sizeof g2);

    CU_OK(ember_cuda_add(test_cu, dg, du, dy, N));
    dev_get(out, dy, sizeof out);
    for (int i = 0; i < N; i++) want[i] = (double)g[i] + u[i];
    expect_close(out, want, N, 1e-7, 0, "add");

    CU_OK(ember_cuda_scale(test_cu, dy, 25.298221f, N)); /* sqrt(640): gemma's embedding scale */
    dev_get(out, dy, sizeof out);
    for (int i = 0; i < N; i++) want[i] = (float)((double)g[i] + u[i]) * 25.298221;
    expect_close(out, want, N, 2e-7, 0, "scale");

    assert_int_equal(ember_cuda_glu(test_cu, (ember_cuda_act)7, dg, du, dy, N), EMBER_ERR_INVALID_ARG);
    dev_free(dg, sizeof g);
    dev_free(du, sizeof u);
    dev_free(dy, sizeof g);
}

static void test_kv_store_f16(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const int64_t row = 256, n_tokens = 3, n_cells = 8;
    float src[256 * 3];
    fill(src, row * n_tokens, -70000.f, 70000.f); /* some overflow f16 to inf */
    src[0] = 1.0f + 1.0f / 4096;                  /* a tie: rounds to even (1.0) */
    src[1] = 3e-8f;                               /* subnormal */
    const int32_t cells[3] = {5, -1, 0};          /* -1: skipped */
    uint16_t cache[8 * 256];
    memset(cache, 0xAB, sizeof cache);
    float *dsrc = dev_new(src, sizeof src);
    int32_t *dcells = dev_new(cells, sizeof cells);
    uint16_t *dcache = dev_new(cache, sizeof cache);
    CU_OK(ember_cuda_kv_store(test_cu, dsrc, n_tokens, row, dcells, dcache));
    dev_get(cache, dcache, sizeof cache);
    for (int64_t c = 0; c < n_cells; c++)
        for (int64_t i = 0; i < row; i++) {
            uint16_t want = 0xABAB;
            if (c == 5 || c == 0) {
                const _Float16 h = (_Float16)src[(c == 5 ? 0 : 2) * row + i];
                memcpy(&want, &h, 2);
            }
            if (cache[c * row + i] != want)
                fail_msg("cell %lld [%lld]: 0x%04x, want 0x%04x", (long long)c, (long long)i, cache[c * row + i],
                         want);
        }
    dev_free(dsrc, sizeof src);
    dev_free(dcells, sizeof cells);
    dev_free(dcache, sizeof cache);
}

/* round_act must give exactly the values the CPU's vec_dot sees: src/quant's
 * activation quantizer (from_float: ggml's CPU quantize_row_q8_*), dequantized
 * (q * d). */
static void test_round_act_matches_cpu_quantizers(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    enum { N = 4096 };
    static float x[N], got[N];
    static uint8_t blocks[N / 256 * 292 + N / 32 * 36];
    fill(x, N, -3.f, 3.f);
    x[5] = 400.f;       /* a "massive activation" in one block */
    x[300] = -1e-3f;
    for (int i = 512; i < 768; i++) x[i] = 0.f; /* an all-zero Q8_K block */
    float *dx = dev_new(x, sizeof x), *dy = dev_new(NULL, sizeof x);
    static const uint32_t types[3] = {EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_1, EMBER_TYPE_Q8_K};
    for (int t = 0; t < 3; t++) {
        CU_OK(ember_cuda_round_act(test_cu, types[t], dx, dy, N));
        dev_get(got, dy, sizeof got);
        const ember_quant_traits *qt = ember_quant_traits_get(types[t]);
        assert_non_null(qt);
        assert_non_null(qt->from_float);
        qt->from_float(x, blocks, N);
        for (int i = 0; i < N; i++) {
            float want;
            if (types[t] == EMBER_TYPE_Q8_K) {
                const uint8_t *b = blocks + (size_t)(i / 256) * 292;
                float d;
                memcpy(&d, b, 4);
                want = (float)(int8_t)b[4 + i % 256] * d;
            } else {
                const size_t bb = types[t] == EMBER_TYPE_Q8_0 ? 34 : 36;
                const uint8_t *b = blocks + (size_t)(i / 32) * bb;
                uint16_t h;
                memcpy(&h, b, 2);
                want = (float)(int8_t)b[bb - 32 + i % 32] * ember_fp16_to_fp32(h);
            }
            if (got[i] != want)
                fail_msg("round_act %s x[%d] = %.8g: %.8g, want %.8g", ember_type_name(types[t]), i, x[i], got[i],
                         want);
        }
    }
    CU_OK(ember_cuda_round_act(test_cu, EMBER_TYPE_F32, dx, dy, N));
    dev_get(got, dy, sizeof got);
    assert_memory_equal(got, x, sizeof x);
    assert_int_equal(ember_cuda_round_act(test_cu, EMBER_TYPE_Q4_0, dx, dy, N), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_cuda_round_act(test_cu, EMBER_TYPE_Q8_K, dx, dy, 100), EMBER_ERR_INVALID_ARG);
    dev_free(dx, sizeof x);
    dev_free(dy, sizeof x);
}

/* Device timers (CUDA events): seconds between a start and an end mark,
 * -1 without either; a new start clears the end. */
static void test_timer(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    enum { N = 1 << 20 };
    double s = 0;
    CU_OK(ember_cuda_timer_seconds(test_cu, 2, &s));
    assert_true(s < 0);   /* never marked */
    float *dx = dev_new(NULL, sizeof(float) * N);
    CU_OK(ember_cuda_memzero(test_cu, dx, sizeof(float) * N));
    CU_OK(ember_cuda_timer_mark(test_cu, 2, false));
    for (int i = 0; i < 50; i++) CU_OK(ember_cuda_scale(test_cu, dx, 1.0f, N));
    CU_OK(ember_cuda_timer_seconds(test_cu, 2, &s));
    assert_true(s < 0);   /* no end mark yet */
    CU_OK(ember_cuda_timer_mark(test_cu, 2, true));
    CU_OK(ember_cuda_timer_seconds(test_cu, 2, &s));
    if (!(s > 0 && s < 1.0)) fail_msg("50 scales of 4 MB took %g s on the device clock", s);
    CU_OK(ember_cuda_timer_mark(test_cu, 2, false));
    CU_OK(ember_cuda_timer_seconds(test_cu, 2, &s));
    assert_true(s < 0);   /* a new start clears the end */
    assert_int_equal(ember_cuda_timer_mark(test_cu, EMBER_CUDA_TIMERS, false), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_timer_seconds(test_cu, -1, &s), EMBER_ERR_INVALID_ARG);
    dev_free(dx, sizeof(float) * N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer),
        cmocka_unit_test(test_round_act_matches_cpu_quantizers),
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_glu_add_scale),
        cmocka_unit_test(test_kv_store_f16),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else /* !EMBER_CUDA */

static void test_cuda_not_built(void **state)
{
    (void)state;
    print_message("built without -DEMBER_CUDA=ON: CUDA op tests skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
