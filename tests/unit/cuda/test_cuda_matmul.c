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
