/* CUDA mat-vec / small-batch matmul and row lookup for every supported block
 * type, against gguf-py's dequantization (tests/data/cuda/blocks_*.bin, made
 * by tests/golden/cuda/make_blocks.py) and a double-precision dot product.
 * Without EMBER_CUDA or without a GPU every test skips and says why.
 *
 * Tolerances: matmul |y - ref| <= 1e-5 * sum|w*x| + 1e-6 (F32 accumulation
 * in another order); get_rows |w - ref| <= 2e-6 * max(1, |ref|) (the kernel
 * may contract d*q - m into one FMA; gguf-py rounds twice). */
#include "cuda_test.h"
#include "base/types.h"
#include "quant/quant.h"

#ifdef EMBER_CUDA

static const char *const k_types[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K",
                                      "Q5_K", "Q6_K", "F16",  "BF16", "F32"};

/* Row lengths of the real models (gemma-3-270m: 640, 1024, 2048; SmolLM2:
 * 576, 1536) where the block size allows. */
static int64_t pick_ne0(const test_blocks *b, int which)
{
    if (b->block_size == 256) return which ? 2048 : 1024;
    return which ? 576 : 640;
}

static float x_amp = 2.f;   /* activations uniform in [-x_amp, x_amp) */

/* Outputs y [n_cols, n_rows] of W x off the double-precision dot of gguf-py's
 * dequantized rows ref [n_rows, ne0] with x [n_cols, ne0]; prints the first few. */
static int count_bad(const char *tname, const float *ref, const float *x, const float *y, int64_t ne0, int64_t n_rows,
                     int64_t n_cols)
{
    int bad = 0;
    /* wide batches run f16 tensor-core GEMMs by default (quantized weights;
     * TF32 with EMBER_CUDA_GEMM_F16=0 or F32 weights): operands keep 10
     * mantissa bits, so each product is within 2^-10 of exact (sum|wx|
     * bounds the total); EMBER_CUDA_TF32=0 with EMBER_CUDA_GEMM_F16=0 gives
     * exact F32 products, as the mat-vec kernels are */
    const char *tf32 = getenv("EMBER_CUDA_TF32"), *f16 = getenv("EMBER_CUDA_GEMM_F16");
    const bool exact_gemm = tf32 && !strcmp(tf32, "0") && f16 && !strcmp(f16, "0");
    const double rel = n_cols > 32 && !exact_gemm ? 2e-3 : 1e-5;
    for (int64_t c = 0; c < n_cols; c++)
        for (int64_t r = 0; r < n_rows; r++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < ne0; k++) {
                const double p = (double)ref[r * ne0 + k] * x[c * ne0 + k];
                s += p;
                sa += fabs(p);
            }
            const double got = y[c * n_rows + r];
            if (fabs(got - s) > rel * sa + 1e-6 && bad++ < 5)
                print_error("%s ne0=%lld rows=%lld cols=%lld: y[%lld][%lld] = %.8g, want %.8g (sum|wx| %.4g)\n",
                            tname, (long long)ne0, (long long)n_rows, (long long)n_cols, (long long)c,
                            (long long)r, got, s, sa);
        }
    return bad;
}

static void check_matmul(const char *tname, int64_t ne0, int64_t n_rows, int64_t n_cols, bool in_host)
{
    test_blocks b;
    test_blocks_load(tname, &b);
    uint8_t *raw;
    float *ref;
    test_blocks_matrix(&b, ne0, n_rows, &raw, &ref);
    ember_cuda_tensor w;
    CU_OK(ember_cuda_tensor_upload(test_cu, b.type, ne0, n_rows, raw, in_host, &w));
    assert_int_equal(w.in_host, in_host);

    float *x = malloc(sizeof(float) * ne0 * n_cols), *y = malloc(sizeof(float) * n_rows * n_cols);
    assert_non_null(x);
    assert_non_null(y);
    for (int64_t i = 0; i < ne0 * n_cols; i++) x[i] = test_randf(-x_amp, x_amp);
    float *dx = dev_new(x, sizeof(float) * ne0 * n_cols);
    float *dy = dev_new(NULL, sizeof(float) * n_rows * n_cols);
    CU_OK(ember_cuda_matmul(test_cu, &w, dx, n_cols, dy));
    dev_get(y, dy, sizeof(float) * n_rows * n_cols);

    assert_int_equal(count_bad(tname, ref, x, y, ne0, n_rows, n_cols), 0);

    dev_free(dx, sizeof(float) * ne0 * n_cols);
    dev_free(dy, sizeof(float) * n_rows * n_cols);
    ember_cuda_tensor_release(test_cu, &w);
    assert_null(w.data);
    free(x);
    free(y);
    free(raw);
    free(ref);
    test_blocks_free(&b);
}

static void test_matvec_all_types(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        test_blocks b;
        test_blocks_load(k_types[i], &b);
        const int64_t ne0a = pick_ne0(&b, 0), ne0b = pick_ne0(&b, 1);
        test_blocks_free(&b);
        check_matmul(k_types[i], ne0a, 37, 1, false);  /* rows not a multiple of the CTA's 4 */
        check_matmul(k_types[i], ne0b, 300, 1, false);
    }
}

/* Wide batches (prefill) take the dequantize + SGEMM path. */
static void test_prefill_gemm_path(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    check_matmul("Q5_0", 640, 300, 40, false);
    check_matmul("Q4_K", 2048, 70, 100, false);
    check_matmul("Q6_K", 1024, 33, 33, false);
    check_matmul("F16", 640, 64, 512, false);
    /* activations past f16's range (65504): the f16 GEMM scales them by a
     * power of two and the output back */
    x_amp = 3e6f;
    check_matmul("Q4_K", 2560, 64, 40, false);
    check_matmul("Q6_K", 1024, 33, 64, false);
    x_amp = 2.f;
}

/* Prompt matmuls of several weights in one call (ember_cuda_matmul_multi:
 * Q/K/V, gate/up): weights that read the same x share its f16 copy; a
 * weight on another x of the same shape (here 1e5 times larger, which moves
 * the f16 scale) must not reuse it. Every output against gguf-py's
 * dequantization. */
static void test_prefill_gemm_multi(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    static const char *const tn[4] = {"Q4_K", "Q6_K", "Q4_K", "Q6_K"};
    static const int64_t rows[4] = {70, 33, 300, 129};
    const int64_t ne0 = 2048, n_cols = 100;
    test_blocks b[4];
    uint8_t *raw[4];
    float *ref[4], *y[4], *dy[4];
    ember_cuda_tensor w[4];
    const ember_cuda_tensor *wp[4];
    float *x1 = malloc(sizeof(float) * ne0 * n_cols), *x2 = malloc(sizeof(float) * ne0 * n_cols);
    assert_non_null(x1);
    assert_non_null(x2);
    for (int64_t i = 0; i < ne0 * n_cols; i++) {
        x1[i] = test_randf(-2.f, 2.f);
        x2[i] = test_randf(-2e5f, 2e5f);
    }
    float *dx1 = dev_new(x1, sizeof(float) * ne0 * n_cols), *dx2 = dev_new(x2, sizeof(float) * ne0 * n_cols);
    const float *xs[4] = {dx1, dx1, dx2, dx1};   /* x1, x1 again, x2, back to x1 */
    const float *hx[4] = {x1, x1, x2, x1};
    for (int k = 0; k < 4; k++) {
        test_blocks_load(tn[k], &b[k]);
        test_blocks_matrix(&b[k], ne0, rows[k], &raw[k], &ref[k]);
        CU_OK(ember_cuda_tensor_upload(test_cu, b[k].type, ne0, rows[k], raw[k], false, &w[k]));
        wp[k] = &w[k];
        y[k] = malloc(sizeof(float) * rows[k] * n_cols);
        assert_non_null(y[k]);
        dy[k] = dev_new(NULL, sizeof(float) * rows[k] * n_cols);
    }
    CU_OK(ember_cuda_matmul_multi(test_cu, 4, wp, xs, n_cols, dy));
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        dev_get(y[k], dy[k], sizeof(float) * rows[k] * n_cols);
        bad += count_bad(tn[k], ref[k], hx[k], y[k], ne0, rows[k], n_cols);
        dev_free(dy[k], sizeof(float) * rows[k] * n_cols);
        ember_cuda_tensor_release(test_cu, &w[k]);
        free(y[k]);
        free(raw[k]);
        free(ref[k]);
        test_blocks_free(&b[k]);
    }
    dev_free(dx1, sizeof(float) * ne0 * n_cols);
    dev_free(dx2, sizeof(float) * ne0 * n_cols);
    free(x1);
    free(x2);
    assert_int_equal(bad, 0);
}

/* Prompt GEMM inputs written in f16 by their producer (ember_cuda_rows_f16)
 * and read by ember_cuda_matmul_multi_f16, for the three producers (a copy,
 * an RMSNorm, a GELU-tanh or SiLU GLU) and the three roundings (none, Q8_0
 * blocks of 32, Q8_K blocks of 256). Oracles: y against the formulas in
 * double (RMSNorm: x / sqrt(mean x^2 + eps) * w; GELU-tanh: 0.5 g (1 +
 * tanh(sqrt(2/pi) (g + 0.044715 g^3))); SiLU: g / (1 + e^-g)); the rounded
 * values r against the CPU backend's quantizer of that format (src/quant's
 * from_float, what its vec_dot sees) and gguf-py-checked dequantizer
 * applied to y; h against
 * f16(r / S), S the power of two that brings max |r| under 2^14; the GEMM
 * against the double dot of gguf-py's dequantized Q4_K and Q6_K rows with r
 * (f16 operands: 2e-3 of sum|w r|, as count_bad). Every third row is 7.5e5
 * times larger than the rest (past f16's 65504), so rows take different
 * scales and the finishing kernel brings the small ones to the large rows'
 * scale; a second pass has small rows only. The large rows stay under
 * 127 * 65504 = 8.3e6, past which a Q8_0 block's f16 scale is inf (on the
 * CPU as here: the format's range, not the kernel's). */
static double ref_gelu_tanh(double g) { return 0.5 * g * (1.0 + tanh(0.79788456080286535588 * (g + 0.044715 * g * g * g))); }

static void check_rows_f16(ember_cuda_row_kind kind, ember_cuda_act act, uint32_t round, bool big_rows, bool alias)
{
    static const char *const tn[2] = {"Q4_K", "Q6_K"};
    static const int64_t rows[2] = {70, 33};
    const int64_t ne0 = 2048, n_cols = 100, n = ne0 * n_cols;
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n),
          *y = malloc(sizeof(float) * n), *rr = malloc(sizeof(float) * n);
    uint16_t *h = malloc(sizeof(uint16_t) * n);
    uint8_t *qbuf = malloc(4 * (size_t)ne0);
    assert_true(x && w && v && y && rr && h && qbuf);
    const float eps = 1e-6f;
    for (int64_t c = 0; c < n_cols; c++) {
        /* GLU rows: the gate stays in [-4, 4) and the up rows carry the size */
        const float amp = big_rows && c % 3 == 0 ? 1.5e6f : 2.f;   /* GLU rows up to ~6e6 */
        for (int64_t k = 0; k < ne0; k++) {
            x[c * ne0 + k] = kind == EMBER_CUDA_ROW_GLU ? test_randf(-4.f, 4.f) : test_randf(-amp, amp);
            w[c * ne0 + k] = kind == EMBER_CUDA_ROW_GLU ? test_randf(-amp, amp) : test_randf(-1.5f, 1.5f);
        }
    }
    double *slack = malloc(sizeof(double) * n);   /* what the f32 operations may lose against double */
    assert_non_null(slack);
    for (int64_t c = 0; c < n_cols; c++) {   /* v: what y must be, in double, rounded once */
        double ss = 0;
        for (int64_t k = 0; k < ne0; k++) ss += (double)x[c * ne0 + k] * x[c * ne0 + k];
        const double inv = 1.0 / sqrt(ss / (double)ne0 + eps);
        for (int64_t k = 0; k < ne0; k++) {
            const double g = x[c * ne0 + k];
            double val;
            if (kind == EMBER_CUDA_ROW_COPY) val = g, slack[c * ne0 + k] = 0;
            else if (kind == EMBER_CUDA_ROW_NORM) val = g * inv * w[k], slack[c * ne0 + k] = 4e-7 * fabs(val);
            else {   /* 1 + tanh cancels for negative g: the error follows |g u|, not the result */
                val = (act == EMBER_CUDA_ACT_SILU ? g / (1.0 + exp(-g)) : ref_gelu_tanh(g)) * w[c * ne0 + k];
                slack[c * ne0 + k] = 1e-6 * fabs(g * w[c * ne0 + k]) + 1e-6 * fabs(val);
            }
            v[c * ne0 + k] = (float)val;
        }
    }
    float *dx = dev_new(x, sizeof(float) * n), *dw = dev_new(w, sizeof(float) * n);
    float *dyv = alias ? dx : dev_new(NULL, sizeof(float) * n);   /* y over x in place, as the backend runs the GLU */
    void *dh = dev_new(NULL, sizeof(uint16_t) * n);
    float *dsrow = dev_new(NULL, sizeof(float) * n_cols), *dab = dev_new(NULL, 2 * sizeof(float));
    unsigned *dsmax = dev_new(NULL, sizeof(unsigned));
    CU_OK(ember_cuda_rows_f16(test_cu, kind, act, round, dx, dw, kind == EMBER_CUDA_ROW_COPY ? NULL : dyv, ne0, n_cols, eps,
                              dh, dsrow, dsmax, dab));
    int bad = 0;
    if (kind != EMBER_CUDA_ROW_COPY) {
        dev_get(y, dyv, sizeof(float) * n);
        for (int64_t i = 0; i < n; i++)
            if (fabs((double)y[i] - v[i]) > slack[i] + 1e-6 && bad++ < 5)
                print_error("rows_f16 kind %d: y[%lld] = %.8g, want %.8g\n", (int)kind, (long long)i, y[i], v[i]);
    } else {
        memcpy(y, x, sizeof(float) * n);
    }
    /* r: y through the CPU's quantizer of the format and back */
    const ember_quant_traits *qt = ember_quant_traits_get(round);
    for (int64_t c = 0; c < n_cols; c++) {
        if (round == EMBER_TYPE_F32) {
            memcpy(rr + c * ne0, y + c * ne0, sizeof(float) * ne0);
            continue;
        }
        qt->from_float(y + c * ne0, qbuf, ne0);
        qt->to_float(qbuf, rr + c * ne0, ne0);
    }
    float ab[2];
    dev_get(ab, dab, sizeof ab);
    double amax = 0;
    for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(rr[i]));
    const double want_s = amax > 16384.0 ? exp2(ceil(log2(amax / 16384.0))) : 1.0;
    if (ab[0] != (float)want_s) {   /* say where: non-finite y or r, the first row scales */
        int64_t nf = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(y[i]) || !isfinite(rr[i])) first = first < 0 ? i : first, nf++;
        float sr[3];
        dev_get(sr, dsrow, sizeof sr);
        print_error("rows_f16 kind %d act %d round %u big %d in place %d: alpha %g, want %g; row scales %g %g %g; %lld "
                    "non-finite y or r (first %lld)\n", (int)kind, (int)act, round, (int)big_rows, (int)alias, ab[0],
                    want_s, sr[0], sr[1], sr[2], (long long)nf, (long long)first);
        if (first >= 0)
            print_error("  at %lld: x %g w %g v %g y %g r %g\n", (long long)first, x[first], w[first], v[first], y[first],
                        rr[first]);
    }
    assert_true(ab[0] == (float)want_s);
    /* a norm's rows are small whatever x's size */
    assert_true(big_rows && kind != EMBER_CUDA_ROW_NORM ? ab[0] >= 128.f : ab[0] == 1.f);
    assert_true(ab[1] == 0.f);
    dev_get(h, dh, sizeof(uint16_t) * n);
    const ember_quant_traits *f16 = ember_quant_traits_get(EMBER_TYPE_F16);
    float *hf = malloc(sizeof(float) * n);
    assert_non_null(hf);
    f16->to_float(h, hf, n);
    for (int64_t i = 0; i < n; i++) {
        /* f16 of it: within 2^-11 relative, or 2^-24 absolute among the
         * subnormals (half a step of 2^-24, and the finishing kernel's second
         * rounding of a row brought to a larger scale) */
        const double want = rr[i] / want_s;
        if (fabs(hf[i] - want) > 0x1p-11 * fabs(want) + 0x1p-24 && bad++ < 5)
            print_error("rows_f16 kind %d round %u: h[%lld] = %.8g, want %.8g\n", (int)kind, round, (long long)i, hf[i],
                        want);
    }
    free(hf);
    test_blocks b[2];
    uint8_t *raw[2];
    float *ref[2], *yo[2], *dy[2];
    ember_cuda_tensor t[2];
    const ember_cuda_tensor *tp[2];
    for (int k = 0; k < 2; k++) {
        test_blocks_load(tn[k], &b[k]);
        test_blocks_matrix(&b[k], ne0, rows[k], &raw[k], &ref[k]);
        CU_OK(ember_cuda_tensor_upload(test_cu, b[k].type, ne0, rows[k], raw[k], false, &t[k]));
        tp[k] = &t[k];
        yo[k] = malloc(sizeof(float) * rows[k] * n_cols);
        assert_non_null(yo[k]);
        dy[k] = dev_new(NULL, sizeof(float) * rows[k] * n_cols);
    }
    CU_OK(ember_cuda_matmul_multi_f16(test_cu, 2, tp, dh, dab, n_cols, dy));
    for (int k = 0; k < 2; k++) {
        dev_get(yo[k], dy[k], sizeof(float) * rows[k] * n_cols);
        bad += count_bad(tn[k], ref[k], rr, yo[k], ne0, rows[k], n_cols);
        dev_free(dy[k], sizeof(float) * rows[k] * n_cols);
        ember_cuda_tensor_release(test_cu, &t[k]);
        free(yo[k]);
        free(raw[k]);
        free(ref[k]);
        test_blocks_free(&b[k]);
    }
    dev_free(dx, sizeof(float) * n);
    dev_free(dw, sizeof(float) * n);
    if (!alias) dev_free(dyv, sizeof(float) * n);
    dev_free(dh, sizeof(uint16_t) * n);
    dev_free(dsrow, sizeof(float) * n_cols);
    dev_free(dab, 2 * sizeof(float));
    dev_free(dsmax, sizeof(unsigned));
    free(x);
    free(w);
    free(v);
    free(y);
    free(rr);
    free(h);
    free(qbuf);
    free(slack);
    assert_int_equal(bad, 0);
}

static void test_prefill_rows_f16(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    static const uint32_t rounds[3] = {EMBER_TYPE_F32, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_K};
    for (int big = 0; big < 2; big++)
        for (int q = 0; q < 3; q++) {
            check_rows_f16(EMBER_CUDA_ROW_COPY, EMBER_CUDA_ACT_SILU, rounds[q], big, false);
            check_rows_f16(EMBER_CUDA_ROW_NORM, EMBER_CUDA_ACT_SILU, rounds[q], big, false);
            check_rows_f16(EMBER_CUDA_ROW_GLU, EMBER_CUDA_ACT_GELU_TANH, rounds[q], big, false);
        }
    check_rows_f16(EMBER_CUDA_ROW_GLU, EMBER_CUDA_ACT_SILU, EMBER_TYPE_Q8_K, true, false);
    /* in place (y = x), as the backend runs a GLU and an in-place norm */
    check_rows_f16(EMBER_CUDA_ROW_GLU, EMBER_CUDA_ACT_GELU_TANH, EMBER_TYPE_Q8_K, true, true);
    check_rows_f16(EMBER_CUDA_ROW_NORM, EMBER_CUDA_ACT_SILU, EMBER_TYPE_Q8_0, false, true);
    float *d = dev_new(NULL, 64 * sizeof(float));
    /* shapes, NULLs, kinds, roundings: refused */
    assert_int_equal(ember_cuda_rows_f16(test_cu, EMBER_CUDA_ROW_NORM, EMBER_CUDA_ACT_SILU, EMBER_TYPE_F32, d, NULL, NULL, 32,
                                         2, 1e-6f, d, d, (unsigned *)d, d), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_rows_f16(test_cu, EMBER_CUDA_ROW_COPY, EMBER_CUDA_ACT_SILU, EMBER_TYPE_F32, d, NULL, NULL, 0,
                                         2, 1e-6f, d, d, (unsigned *)d, d), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_rows_f16(test_cu, EMBER_CUDA_ROW_COPY, EMBER_CUDA_ACT_SILU, EMBER_TYPE_Q8_K, d, NULL, NULL,
                                         32, 2, 1e-6f, d, d, (unsigned *)d, d), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_rows_f16(test_cu, EMBER_CUDA_ROW_COPY, EMBER_CUDA_ACT_SILU, EMBER_TYPE_Q4_K, d, NULL, NULL,
                                         256, 2, 1e-6f, d, d, (unsigned *)d, d), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_cuda_rows_f16(test_cu, (ember_cuda_row_kind)7, EMBER_CUDA_ACT_SILU, EMBER_TYPE_F32, d, d, d, 32,
                                         2, 1e-6f, d, d, (unsigned *)d, d), EMBER_ERR_INVALID_ARG);
    uint8_t buf[64] = {0};
    ember_cuda_tensor w;
    CU_OK(ember_cuda_tensor_upload(test_cu, EMBER_TYPE_F32, 8, 2, buf, false, &w));
    const ember_cuda_tensor *wp = &w;
    float *ys[1] = {d};
    assert_int_equal(ember_cuda_matmul_multi_f16(test_cu, 1, &wp, d, d, 40, ys), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_cuda_matmul_multi_f16(test_cu, 1, &wp, d, d, 32, ys), EMBER_ERR_INVALID_ARG);
    ember_cuda_tensor_release(test_cu, &w);
    dev_free(d, 64 * sizeof(float));
    assert_int_equal(ember_cuda_synchronize(test_cu), EMBER_OK);
}

/* A large upload used at once: the first matmul must see every byte (a
 * pageable copy on another stream once raced the first use). */
static void test_upload_then_use_at_once(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    check_matmul("Q8_0", 4096, 4096, 5, false);
    check_matmul("Q4_1", 1536, 8192, 1, false);
}

static void test_small_batch_all_types(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    static const int64_t cols[] = {2, 5, 8, 13};  /* 13: two passes (8 + 5) */
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        test_blocks b;
        test_blocks_load(k_types[i], &b);
        const int64_t ne0 = pick_ne0(&b, 0);
        test_blocks_free(&b);
        for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) check_matmul(k_types[i], ne0, 19, cols[c], false);
    }
}

static void test_matmul_host_resident(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    check_matmul("Q8_0", 640, 33, 3, true);
    check_matmul("Q4_K", 1024, 9, 1, true);
    assert_int_equal(ember_cuda_host_bytes(test_cu), 0);
}

static void check_get_rows(const char *tname, bool in_host)
{
    test_blocks b;
    test_blocks_load(tname, &b);
    const int64_t ne0 = pick_ne0(&b, 0), n_rows = 50;
    uint8_t *raw;
    float *ref;
    test_blocks_matrix(&b, ne0, n_rows, &raw, &ref);
    ember_cuda_tensor w;
    CU_OK(ember_cuda_tensor_upload(test_cu, b.type, ne0, n_rows, raw, in_host, &w));
    const int32_t ids[] = {0, 49, 7, 7, -1, 50, 23}; /* -1 and 50: out of range -> zero rows */
    const int64_t n_ids = sizeof ids / sizeof ids[0];
    int32_t *dids = dev_new(ids, sizeof ids);
    float *dout = dev_new(NULL, sizeof(float) * ne0 * n_ids);
    CU_OK(ember_cuda_get_rows(test_cu, &w, dids, n_ids, dout));
    float *out = malloc(sizeof(float) * ne0 * n_ids);
    assert_non_null(out);
    dev_get(out, dout, sizeof(float) * ne0 * n_ids);
    int bad = 0;
    for (int64_t i = 0; i < n_ids; i++)
        for (int64_t k = 0; k < ne0; k++) {
            const float want = (ids[i] >= 0 && ids[i] < n_rows) ? ref[ids[i] * ne0 + k] : 0.f;
            const float got = out[i * ne0 + k];
            if (fabsf(got - want) > 2e-6f * fmaxf(1.f, fabsf(want)) && bad++ < 5)
                print_error("%s get_rows id %d [%lld] = %.8g, want %.8g\n", tname, ids[i], (long long)k, got, want);
        }
    assert_int_equal(bad, 0);
    dev_free(dids, sizeof ids);
    dev_free(dout, sizeof(float) * ne0 * n_ids);
    ember_cuda_tensor_release(test_cu, &w);
    free(out);
    free(raw);
    free(ref);
    test_blocks_free(&b);
}

static void test_get_rows_all_types(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) check_get_rows(k_types[i], false);
    check_get_rows("Q8_0", true);
}

static void test_rejects_bad_input(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    uint8_t buf[512] = {0};
    ember_cuda_tensor w;
    /* Q2_K has no kernel */
    assert_int_equal(ember_cuda_tensor_upload(test_cu, EMBER_TYPE_Q2_K, 256, 1, buf, false, &w),
                     EMBER_ERR_UNSUPPORTED);
    assert_non_null(strstr(ember_last_error(), "Q2_K"));
    /* 640 is not a multiple of 256 */
    assert_int_equal(ember_cuda_tensor_upload(test_cu, EMBER_TYPE_Q4_K, 640, 1, buf, false, &w),
                     EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_tensor_upload(test_cu, EMBER_TYPE_Q8_0, 0, 1, buf, false, &w), EMBER_ERR_INVALID_ARG);
    /* F16 rows must be a multiple of 8 for the kernels */
    CU_OK(ember_cuda_tensor_upload(test_cu, EMBER_TYPE_F16, 12, 2, buf, false, &w));
    float *d = dev_new(NULL, 64 * sizeof(float));
    assert_int_equal(ember_cuda_matmul(test_cu, &w, d, 1, d + 32), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_cuda_matmul(test_cu, &w, d, 0, d + 32), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_matmul(test_cu, &w, NULL, 1, d + 32), EMBER_ERR_INVALID_ARG);
    ember_cuda_tensor_release(test_cu, &w);
    dev_free(d, 64 * sizeof(float));
    assert_int_equal(ember_cuda_synchronize(test_cu), EMBER_OK);
    assert_int_equal(ember_cuda_device_bytes(test_cu), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matvec_all_types),
        cmocka_unit_test(test_small_batch_all_types),
        cmocka_unit_test(test_upload_then_use_at_once),
        cmocka_unit_test(test_prefill_gemm_path),
        cmocka_unit_test(test_prefill_gemm_multi),
        cmocka_unit_test(test_prefill_rows_f16),
        cmocka_unit_test(test_matmul_host_resident),
        cmocka_unit_test(test_get_rows_all_types),
        cmocka_unit_test(test_rejects_bad_input),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else /* !EMBER_CUDA */

static void test_cuda_not_built(void **state)
{
    (void)state;
    print_message("built without -DEMBER_CUDA=ON: CUDA matmul tests skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
