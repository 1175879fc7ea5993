/* The CUDA integer mat-vec (cuda_q8.cu) against the CPU backend, whose
 * matmul is bit-identical to llama.cpp's x86 CPU build (tests/e2e/
 * test_fidelity.py): the activation blocks must be the CPU quantizer's bytes
 * (src/quant from_float of the active CPU variant), and every matmul output
 * the CPU backend's float, bit for bit (the kernels repeat its integer dots
 * and float steps; cuda_q8.cu). Weights: gguf-py's random blocks
 * (tests/data/cuda/blocks_*.bin). Without EMBER_CUDA or a GPU every test
 * skips and says why.
 *
 * Every case prints: outputs identical, max |diff|, max |diff| / max |cpu|
 * of the column, and the first mismatch, so one GPU run says what is off.
 * Asserted: relative difference <= 1e-5 of the column's largest output
 * (what a summation-order slip would give), then bit-identity (the goal). */
#include "cuda_test.h"
#include "backend/backend.h"
#include "base/types.h"
#include "quant/quant.h"
#include "../../common/cpu_backend.h"

#ifdef EMBER_CUDA

/* Activation rows with per-block magnitudes over 2^-8 .. 2^5, one all-zero
 * block, and a block whose x * 127/amax lands on exact halves (ties). */
static void make_x(float *x, int64_t n, int64_t n_cols)
{
    for (int64_t c = 0; c < n_cols; c++)
        for (int64_t b = 0; b < n / 32; b++) {
            float *xb = x + c * n + b * 32;
            const float sc = ldexpf(1.0f, (int)(test_rand_u32() % 14) - 8);
            for (int i = 0; i < 32; i++) xb[i] = test_randf(-1.f, 1.f) * sc;
            if (b == 3 && c == 0) memset(xb, 0, 32 * sizeof(float));
            if (b == 5) {   /* amax 127: id = 1, so 2.5 -> 2, -3.5 -> -4, 0.5 -> 0 (round half to even) */
                xb[0] = 127.f;
                xb[1] = 2.5f;
                xb[2] = -3.5f;
                xb[3] = 0.5f;
                xb[4] = -126.5f;
            }
        }
}

/* Blocks of the GPU buffer g (ember_cuda_q8_bytes layout) that differ from
 * the CPU quantizer's blocks of x [n_cols, n]; prints the first few. */
static int compare_q8(const char *what, uint32_t at, const float *x, const uint8_t *g, int64_t n, int64_t n_cols)
{
    const ember_quant_traits *qt = ember_quant_traits_get(at);
    assert_non_null(qt);
    const int64_t bs = at == EMBER_TYPE_Q8_K ? 256 : 32, nbc = n / bs;
    const size_t dof = ((size_t)(n * n_cols) + 15) & ~(size_t)15;
    const int8_t *gqs = (const int8_t *)g;
    const float *gd = (const float *)(g + dof), *gs = gd + n_cols * nbc;
    uint8_t *cpu = malloc((size_t)nbc * qt->block_bytes);
    assert_non_null(cpu);
    int bad = 0;
    for (int64_t c = 0; c < n_cols; c++) {
        qt->from_float(x + c * n, cpu, n);
        for (int64_t b = 0; b < nbc; b++) {
            const uint8_t *blk = cpu + b * qt->block_bytes;
            const int8_t *qs;
            float d_cpu, s_cpu = 0.f;
            if (at == EMBER_TYPE_Q8_K) {
                memcpy(&d_cpu, blk, 4);
                qs = (const int8_t *)(blk + 4);
            } else {
                uint16_t h;
                memcpy(&h, blk, 2);
                d_cpu = ember_fp16_to_fp32(h);
                if (at == EMBER_TYPE_Q8_1) {
                    memcpy(&h, blk + 2, 2);
                    s_cpu = ember_fp16_to_fp32(h);
                }
                qs = (const int8_t *)(blk + (at == EMBER_TYPE_Q8_1 ? 4 : 2));
            }
            const int64_t gb = c * nbc + b;
            int first = -1;
            for (int i = 0; i < bs && first < 0; i++)
                if (qs[i] != gqs[gb * bs + i]) first = i;
            const bool d_ok = memcmp(&d_cpu, &gd[gb], 4) == 0;
            const bool s_ok = at != EMBER_TYPE_Q8_1 || memcmp(&s_cpu, &gs[gb], 4) == 0;
            if ((first >= 0 || !d_ok || !s_ok) && bad++ < 5) {
                print_error("%s %s col %lld block %lld: d cpu %.9g gpu %.9g; s cpu %.9g gpu %.9g", what, qt->name,
                            (long long)c, (long long)b, d_cpu, gd[gb], s_cpu, at == EMBER_TYPE_Q8_1 ? gs[gb] : 0.f);
                if (first >= 0)
                    print_error("; first q mismatch at %d: x %.9g cpu %d gpu %d", first, x[c * n + b * bs + first],
                                qs[first], gqs[gb * bs + first]);
                print_error("\n");
            }
        }
    }
    print_message("%s %s (CPU variant %s): %d of %lld blocks differ\n", what, qt->name,
                  ember_cpu_variant_name(ember_cpu_variant_active()), bad, (long long)(nbc * n_cols));
    free(cpu);
    return bad;
}

static void test_quantize_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const uint32_t types[3] = {EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_1, EMBER_TYPE_Q8_K};
    const int64_t n = 2048, n_cols = 3;
    float *x = malloc(sizeof(float) * n * n_cols);
    assert_non_null(x);
    make_x(x, n, n_cols);
    float *dx = dev_new(x, sizeof(float) * n * n_cols);
    int bad = 0;
    for (int ti = 0; ti < 3; ti++) {
        const size_t qb = ember_cuda_q8_bytes(types[ti], n, n_cols);
        void *dq = dev_new(NULL, qb);
        uint8_t *g = malloc(qb);
        assert_non_null(g);
        CU_OK(ember_cuda_quantize_q8(test_cu, types[ti], dx, n, n_cols, dq));
        dev_get(g, dq, qb);
        bad += compare_q8("quantize_q8", types[ti], x, g, n, n_cols);
        free(g);
        dev_free(dq, qb);
    }
    dev_free(dx, sizeof(float) * n * n_cols);
    free(x);
    assert_int_equal(bad, 0);
}

/* The fused producers (RMSNorm + Q8_0/Q8_1/Q8_K, GELU-GLU + Q8_K): their q8
 * blocks must be the CPU quantizer's blocks of the CPU op's output. */
static void test_fused_quantize_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const ember_backend_limits lim = {.max_tokens = 16, .max_n_in = 2048, .max_kv_tokens = 16, .max_head_dim = 256};
    ember_backend *cpu = NULL;
    assert_int_equal(test_cpu_backend_new(2, &lim, &cpu), EMBER_OK);
    const int64_t n = 2048, rows = 3;
    float *x = malloc(sizeof(float) * n * rows), *w = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n * rows),
          *ref = malloc(sizeof(float) * n * rows);
    assert_non_null(x);
    assert_non_null(w);
    assert_non_null(u);
    assert_non_null(ref);
    make_x(x, n, rows);
    for (int64_t i = 0; i < n; i++) w[i] = test_randf(0.5f, 2.f);
    for (int64_t i = 0; i < n * rows; i++) u[i] = test_randf(-2.f, 2.f);
    float *dx = dev_new(x, sizeof(float) * n * rows), *dw = dev_new(w, sizeof(float) * n),
          *du = dev_new(u, sizeof(float) * n * rows), *dy = dev_new(NULL, sizeof(float) * n * rows);
    int bad = 0;
    for (int k = 0; k < 4; k++) {   /* norm + Q8_0, Q8_1, Q8_K; GLU + Q8_K */
        const uint32_t at = k == 0 ? EMBER_TYPE_Q8_0 : k == 1 ? EMBER_TYPE_Q8_1 : EMBER_TYPE_Q8_K;
        const size_t qb = ember_cuda_q8_bytes(at, n, rows);
        void *dq = dev_new(NULL, qb);
        uint8_t *g = malloc(qb);
        assert_non_null(g);
        if (k < 3) {
            CU_OK(ember_cuda_rms_norm_quant_q8(test_cu, at, dx, dw, dy, dq, n, rows, 1e-6f));
            cpu->ops->rms_norm(cpu, ref, x, w, rows, n, 1e-6f);
        } else {
            CU_OK(ember_cuda_glu_quant_q8K(test_cu, EMBER_CUDA_ACT_GELU_TANH_F16, dx, du, dy, dq, n * rows));
            memcpy(ref, x, sizeof(float) * n * rows);
            cpu->ops->geglu(cpu, ref, u, n * rows);
        }
        dev_get(g, dq, qb);
        bad += compare_q8(k < 3 ? "rms_norm_quant_q8" : "glu_quant_q8K", at, ref, g, n, rows);
        float *y = malloc(sizeof(float) * n * rows);
        assert_non_null(y);
        dev_get(y, dy, sizeof(float) * n * rows);
        int ybad = 0;
        for (int64_t i = 0; i < n * rows; i++)
            if (memcmp(&y[i], &ref[i], 4) != 0 && ybad++ < 3)
                print_error("  its F32 output [%lld]: cpu %.9g gpu %.9g\n", (long long)i, ref[i], y[i]);
        bad += ybad;
        free(y);
        free(g);
        dev_free(dq, qb);
    }
    dev_free(dx, sizeof(float) * n * rows);
    dev_free(dw, sizeof(float) * n);
    dev_free(du, sizeof(float) * n * rows);
    dev_free(dy, sizeof(float) * n * rows);
    free(x);
    free(w);
    free(u);
    free(ref);
    ember_backend_free(cpu);
    assert_int_equal(bad, 0);
}

/* The pre-norm models' residual add followed by the next matmul's input
 * (ember_cuda_add_norm_quant_q8 with y1 NULL): the CPU ops one after
 * another, residual += x, y = rms_norm(residual) * w (or the residual
 * itself), then the CPU quantizer: every F32 output and every block
 * identical. Widths 2560 (the register kernel) and 8192 (the other one);
 * y written over x as Qwen3.5 and Llama do (add(x, xb); rms_norm(xb, x)). */
static void test_plain_add_norm_quantize_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const ember_backend_limits lim = {.max_tokens = 16, .max_n_in = 8192, .max_kv_tokens = 16, .max_head_dim = 256};
    ember_backend *cpu = NULL;
    assert_int_equal(test_cpu_backend_new(2, &lim, &cpu), EMBER_OK);
    int bad = 0;
    for (int wi = 0; wi < 2; wi++) {
        const int64_t n = wi == 0 ? 2560 : 8192, rows = 3;
        const size_t nb = sizeof(float) * n * rows;
        float *x = malloc(nb), *res0 = malloc(nb), *w = malloc(sizeof(float) * n), *res = malloc(nb), *y = malloc(nb),
              *got = malloc(nb);
        assert_true(x && res0 && w && res && y && got);
        make_x(x, n, rows);
        for (int64_t i = 0; i < n * rows; i++) res0[i] = test_randf(-30.f, 30.f);
        for (int64_t i = 0; i < n; i++) w[i] = test_randf(0.5f, 2.f);
        memcpy(res, res0, nb);
        cpu->ops->add(cpu, res, x, n * rows);
        cpu->ops->rms_norm(cpu, y, res, w, rows, n, 1e-6f);
        float *dx = dev_new(NULL, nb), *dw = dev_new(w, sizeof(float) * n), *dres = dev_new(NULL, nb);
        for (int k = 0; k < 4; k++) {   /* with the pre-norm: Q8_0, Q8_1, Q8_K; without: Q8_K */
            const uint32_t at = k == 0 ? EMBER_TYPE_Q8_0 : k == 1 ? EMBER_TYPE_Q8_1 : EMBER_TYPE_Q8_K;
            const bool norm2 = k < 3;
            const size_t qb = ember_cuda_q8_bytes(at, n, rows);
            void *dq = dev_new(NULL, qb);
            uint8_t *g = malloc(qb);
            assert_non_null(g);
            CU_OK(ember_cuda_upload(test_cu, dres, res0, nb));
            CU_OK(ember_cuda_upload(test_cu, dx, x, nb));
            CU_OK(ember_cuda_add_norm_quant_q8(test_cu, at, dx, NULL, NULL, dres, 0.f, norm2 ? dw : NULL,
                                               norm2 ? dx : NULL, dq, n, rows, 1e-6f, norm2));
            dev_get(g, dq, qb);
            bad += compare_q8(norm2 ? "plain add_norm_quant_q8" : "plain add_norm_quant_q8 (residual)", at,
                              norm2 ? y : res, g, n, rows);
            const float *want[2] = {res, y};
            float *have[2] = {dres, dx};
            for (int o = 0; o < (norm2 ? 2 : 1); o++) {
                dev_get(got, have[o], nb);
                int obad = 0;
                for (int64_t i = 0; i < n * rows; i++)
                    if (memcmp(&got[i], &want[o][i], 4) != 0 && obad++ < 3)
                        print_error("  plain add_norm_quant_q8 n %lld output %d [%lld]: cpu %.9g gpu %.9g\n",
                                    (long long)n, o, (long long)i, want[o][i], got[i]);
                bad += obad;
            }
            free(g);
            dev_free(dq, qb);
        }
        dev_free(dx, nb);
        dev_free(dw, sizeof(float) * n);
        dev_free(dres, nb);
        free(x);
        free(res0);
        free(w);
        free(res);
        free(y);
        free(got);
    }
    ember_backend_free(cpu);
    assert_int_equal(bad, 0);
}

/* Gemma's post-norm + residual add followed by the next matmul's input
 * (ember_cuda_add_norm_quant_q8): the CPU ops one after another, y1 =
 * rms_norm(x) * w1, residual += y1, y = rms_norm(residual) * w (or the
 * residual itself), then the CPU quantizer of y: every F32 output and every
 * block identical. */
static void test_add_norm_quantize_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const ember_backend_limits lim = {.max_tokens = 16, .max_n_in = 2560, .max_kv_tokens = 16, .max_head_dim = 256};
    ember_backend *cpu = NULL;
    assert_int_equal(test_cpu_backend_new(2, &lim, &cpu), EMBER_OK);
    const int64_t n = 2560, rows = 3;   /* E4B's width: 10 Q8_K blocks, 80 of 32 */
    const size_t nb = sizeof(float) * n * rows;
    float *x = malloc(nb), *res0 = malloc(nb), *w1 = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n),
          *y1 = malloc(nb), *res = malloc(nb), *y = malloc(nb), *got = malloc(nb);
    assert_true(x && res0 && w1 && w && y1 && res && y && got);
    make_x(x, n, rows);
    for (int64_t i = 0; i < n * rows; i++) res0[i] = test_randf(-30.f, 30.f);
    for (int64_t i = 0; i < n; i++) {
        w1[i] = test_randf(0.5f, 2.f);
        w[i] = test_randf(0.5f, 2.f);
    }
    /* the CPU backend's ops in order */
    cpu->ops->rms_norm(cpu, y1, x, w1, rows, n, 1e-6f);
    memcpy(res, res0, nb);
    cpu->ops->add(cpu, res, y1, n * rows);
    cpu->ops->rms_norm(cpu, y, res, w, rows, n, 1e-6f);
    float *dx = dev_new(x, nb), *dw1 = dev_new(w1, sizeof(float) * n), *dw = dev_new(w, sizeof(float) * n),
          *dy1 = dev_new(NULL, nb), *dres = dev_new(NULL, nb), *dy = dev_new(NULL, nb);
    int bad = 0;
    for (int k = 0; k < 4; k++) {   /* with the pre-norm: Q8_0, Q8_1, Q8_K; without: Q8_K */
        const uint32_t at = k == 0 ? EMBER_TYPE_Q8_0 : k == 1 ? EMBER_TYPE_Q8_1 : EMBER_TYPE_Q8_K;
        const bool norm2 = k < 3;
        const size_t qb = ember_cuda_q8_bytes(at, n, rows);
        void *dq = dev_new(NULL, qb);
        uint8_t *g = malloc(qb);
        assert_non_null(g);
        CU_OK(ember_cuda_upload(test_cu, dres, res0, nb));
        memset(got, 0xFF, nb);   /* NaN: an output left unwritten fails */
        CU_OK(ember_cuda_upload(test_cu, dy1, got, nb));
        CU_OK(ember_cuda_upload(test_cu, dy, got, nb));
        CU_OK(ember_cuda_add_norm_quant_q8(test_cu, at, dx, dw1, dy1, dres, 1e-6f, dw, dy, dq, n, rows, 1e-6f, norm2));
        dev_get(g, dq, qb);
        bad += compare_q8(norm2 ? "add_norm_quant_q8" : "add_norm_quant_q8 (residual)", at, norm2 ? y : res, g, n, rows);
        const float *want[3] = {y1, res, y};
        float *have[3] = {dy1, dres, dy};
        for (int o = 0; o < (norm2 ? 3 : 2); o++) {
            dev_get(got, have[o], nb);
            int obad = 0;
            for (int64_t i = 0; i < n * rows; i++)
                if (memcmp(&got[i], &want[o][i], 4) != 0 && obad++ < 3)
                    print_error("  add_norm_quant_q8 output %d [%lld]: cpu %.9g gpu %.9g\n", o, (long long)i,
                                want[o][i], got[i]);
            bad += obad;
        }
        free(g);
        dev_free(dq, qb);
    }
    dev_free(dx, nb);
    dev_free(dw1, sizeof(float) * n);
    dev_free(dw, sizeof(float) * n);
    dev_free(dy1, nb);
    dev_free(dres, nb);
    dev_free(dy, nb);
    free(x);
    free(res0);
    free(w1);
    free(w);
    free(y1);
    free(res);
    free(y);
    free(got);
    ember_backend_free(cpu);
    assert_int_equal(bad, 0);
}

typedef struct case_result {
    long identical, total;
    double max_abs, max_rel;
} case_result;

static case_result run_case(ember_backend *cpu, const char *tname, int64_t ne0, int64_t n_rows, int64_t n_cols, bool exact)
{
    test_blocks bl;
    test_blocks_load(tname, &bl);
    uint8_t *raw;
    float *deq;
    test_blocks_matrix(&bl, ne0, n_rows, &raw, &deq);
    float *x = malloc(sizeof(float) * ne0 * n_cols), *yc = malloc(sizeof(float) * n_rows * n_cols),
          *yg = malloc(sizeof(float) * n_rows * n_cols);
    assert_non_null(x);
    assert_non_null(yc);
    assert_non_null(yg);
    make_x(x, ne0, n_cols);

    const ember_weight w = {.type = bl.type, .n_in = ne0, .n_out = n_rows,
                            .row_bytes = (size_t)(ne0 / bl.block_size) * bl.block_bytes, .data = raw, .name = tname};
    const ember_weight *wp = &w;
    float *yp = yc;
    cpu->ops->matmul(cpu, x, n_cols, 1, &wp, &yp);

    ember_cuda_tensor t;
    CU_OK(ember_cuda_tensor_upload(test_cu, bl.type, ne0, n_rows, raw, false, &t));
    const uint32_t at = ember_cuda_q8_act_type(bl.type);
    const size_t qb = ember_cuda_q8_bytes(at, ne0, n_cols);
    float *dx = dev_new(x, sizeof(float) * ne0 * n_cols), *dy = dev_new(NULL, sizeof(float) * n_rows * n_cols);
    void *dq = dev_new(NULL, qb);
    CU_OK(ember_cuda_quantize_q8(test_cu, at, dx, ne0, n_cols, dq));
    ember_cuda_set_exact_matvec(test_cu, exact);
    CU_OK(ember_cuda_matmul_q8(test_cu, &t, dq, n_cols, dy));
    dev_get(yg, dy, sizeof(float) * n_rows * n_cols);

    case_result r = {0, 0, 0, 0};
    long first_c = -1, first_r = -1;
    for (int64_t c = 0; c < n_cols; c++) {
        double mc = 0;
        for (int64_t i = 0; i < n_rows; i++) mc = fmax(mc, fabs(yc[c * n_rows + i]));
        for (int64_t i = 0; i < n_rows; i++) {
            const float a = yc[c * n_rows + i], g = yg[c * n_rows + i];
            r.total++;
            if (memcmp(&a, &g, 4) == 0) {
                r.identical++;
                continue;
            }
            if (first_c < 0) first_c = (long)c, first_r = (long)i;
            const double d = fabs((double)a - g);
            if (d > r.max_abs || d != d) r.max_abs = d;
            const double rel = mc > 0 ? d / mc : d;
            if (rel > r.max_rel || rel != rel) r.max_rel = rel;
        }
    }
    print_message("%s%-5s ne0 %5lld rows %4lld cols %2lld: %ld/%ld identical, max|diff| %.3g, max|diff|/max|cpu| %.3g",
                  exact ? "[exact] " : "", tname, (long long)ne0, (long long)n_rows, (long long)n_cols, r.identical, r.total, r.max_abs,
                  r.max_rel);
    if (first_c >= 0)
        print_message("; first mismatch y[%ld][%ld] cpu %.9g gpu %.9g", first_c, first_r,
                      yc[first_c * n_rows + first_r], yg[first_c * n_rows + first_r]);
    print_message("\n");

    dev_free(dq, qb);
    dev_free(dx, sizeof(float) * ne0 * n_cols);
    dev_free(dy, sizeof(float) * n_rows * n_cols);
    ember_cuda_tensor_release(test_cu, &t);
    free(x);
    free(yc);
    free(yg);
    free(raw);
    free(deq);
    test_blocks_free(&bl);
    return r;
}

/* Every type, 1..11 columns, rows of 2..10 (super-)blocks. exact: the
 * CPU-order kernels (the default), every output bit-identical; else
 * the EMBER_CUDA_MMVQ kernels (free float order over the same exact integer
 * block dots): within 1e-5 of max |y| of the CPU backend's column. */
static void matmul_q8_vs_cpu(bool exact)
{
    TEST_NEED_GPU();
    const ember_backend_limits lim = {.max_tokens = 16, .max_n_in = 10240, .max_kv_tokens = 16, .max_head_dim = 256};
    ember_backend *cpu = NULL;
    assert_int_equal(test_cpu_backend_new(2, &lim, &cpu), EMBER_OK);
    print_message("CPU variant %s\n", ember_cpu_variant_name(ember_cpu_variant_active()));
    static const char *const types[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K"};
    static const int64_t cols[] = {1, 3, 8, 11};
    double worst = 0;
    long identical = 0, total = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const bool k = types[ti][3] == 'K';
        /* K types: 4, 8 and 10 super-blocks (2560: E4B's width, a tail of 2 for the 4-block step),
         * and 40 (10240: E4B's down projection, many passes a lane) */
        const int64_t shapes[4] = {k ? 1024 : 640, k ? 2048 : 576, k ? 2560 : 1088, k ? 10240 : 2048};
        for (int si = 0; si < 4; si++)
            for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++) {
                /* 301 rows: not a multiple of the 4 rows of a CTA */
                const case_result r = run_case(cpu, types[ti], shapes[si], 301, cols[ci], exact);
                worst = fmax(worst, r.max_rel);
                identical += r.identical;
                total += r.total;
            }
        /* a tall weight (an LM head: 32,845 rows, past the 32,768 from which one column
         * takes k_mmvq_rows' 4 rows a warp; not a multiple of a CTA's 16) */
        const case_result r = run_case(cpu, types[ti], shapes[0], 32845, 1, exact);
        worst = fmax(worst, r.max_rel);
        identical += r.identical;
        total += r.total;
    }
    ember_backend_free(cpu);
    print_message("all cases%s: %ld of %ld outputs bit-identical, worst max|diff|/max|cpu| %.3g\n",
                  exact ? " [exact]" : "", identical, total, worst);
    assert_true(worst <= 1e-5);
    if (exact) assert_int_equal(identical, total);
}

/* k_mmvq_rows at 4 rows a warp (a lone weight of >= 32,768 rows, one column) against k_mmvq on
 * the same rows: a copy of the first 32,767 rows (one row below the
 * threshold) takes the one-row-a-warp kernel; the two must agree bit for
 * bit (the same lane program and warp sum per row). Every type. */
static void test_matmul_q8_tall_equals_rowwise(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    static const char *const types[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K"};
    const int64_t tall = 32845, low = 32767;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        test_blocks bl;
        test_blocks_load(types[ti], &bl);
        const int64_t ne0 = types[ti][3] == 'K' ? 1024 : 640;
        uint8_t *raw;
        float *deq;
        test_blocks_matrix(&bl, ne0, tall, &raw, &deq);
        float *x = malloc(sizeof(float) * ne0), *yt = malloc(sizeof(float) * tall), *yl = malloc(sizeof(float) * low);
        assert_non_null(x);
        assert_non_null(yt);
        assert_non_null(yl);
        make_x(x, ne0, 1);
        ember_cuda_tensor tt, tl;
        CU_OK(ember_cuda_tensor_upload(test_cu, bl.type, ne0, tall, raw, false, &tt));
        CU_OK(ember_cuda_tensor_upload(test_cu, bl.type, ne0, low, raw, false, &tl));   /* the first rows */
        const uint32_t at = ember_cuda_q8_act_type(bl.type);
        const size_t qb = ember_cuda_q8_bytes(at, ne0, 1);
        float *dx = dev_new(x, sizeof(float) * ne0), *dyt = dev_new(NULL, sizeof(float) * tall),
              *dyl = dev_new(NULL, sizeof(float) * low);
        void *dq = dev_new(NULL, qb);
        CU_OK(ember_cuda_quantize_q8(test_cu, at, dx, ne0, 1, dq));
        ember_cuda_set_exact_matvec(test_cu, false);
        CU_OK(ember_cuda_matmul_q8(test_cu, &tt, dq, 1, dyt));
        CU_OK(ember_cuda_matmul_q8(test_cu, &tl, dq, 1, dyl));
        dev_get(yt, dyt, sizeof(float) * tall);
        dev_get(yl, dyl, sizeof(float) * low);
        long diff = 0;
        for (int64_t i = 0; i < low; i++) diff += memcmp(&yt[i], &yl[i], sizeof(float)) != 0;
        if (diff) fail_msg("%s: %ld of %lld rows differ between the tall and the row-a-warp kernels", types[ti], diff, (long long)low);
        dev_free(dq, qb);
        dev_free(dx, sizeof(float) * ne0);
        dev_free(dyt, sizeof(float) * tall);
        dev_free(dyl, sizeof(float) * low);
        ember_cuda_tensor_release(test_cu, &tt);
        ember_cuda_tensor_release(test_cu, &tl);
        free(x);
        free(yt);
        free(yl);
        free(raw);
        free(deq);
        test_blocks_free(&bl);
    }
}

static void test_matmul_q8_matches_cpu(void **state)
{
    (void)state;
    matmul_q8_vs_cpu(false);
}

static void test_matmul_q8_exact_bits(void **state)
{
    (void)state;
    matmul_q8_vs_cpu(true);
}

/* Q/K/V-like weights of one type and row length in one launch
 * (ember_cuda_matmul_q8_multi), against the CPU backend's matmul of the
 * same three weights: with the exact kernels every output bit-identical,
 * with the free-order ones within 1e-5 of max |y|, and with 1, 2 or 4 rows
 * a warp (ember_cuda_set_mmvq_rows), rows staged in shared memory or not
 * (ember_cuda_set_mmvq_smem), or several columns on 2 or 4 rows a warp
 * (ember_cuda_set_mmvq_mr), the free-order outputs bit for bit; with Q4_K's
 * and Q6_K's several-column launches on the tensor cores
 * (ember_cuda_set_mmvq_tc) within 1e-5 of max |y| again (another float
 * order). */
static void test_matmul_q8_multi_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const ember_backend_limits lim = {.max_tokens = 16, .max_n_in = 2560, .max_kv_tokens = 16, .max_head_dim = 256};
    ember_backend *cpu = NULL;
    assert_int_equal(test_cpu_backend_new(2, &lim, &cpu), EMBER_OK);
    static const char *const types[] = {"Q5_0", "Q8_0", "Q4_K", "Q6_K"};
    const int64_t rows[3] = {301, 64, 129}, n_cols_set[2] = {1, 11};   /* 11: two column passes (8 + 3) */
    long bad = 0, total = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        test_blocks bl;
        test_blocks_load(types[ti], &bl);
        const int64_t ne0 = types[ti][3] == 'K' ? 2560 : 640;
        for (int ci = 0; ci < 2; ci++) {
            const int64_t n_cols = n_cols_set[ci];
            uint8_t *raw[3];
            float *deq[3], *yc[3], *yg[3], *dy[3];
            ember_weight w[3];
            const ember_weight *wp[3];
            ember_cuda_tensor t[3];
            const ember_cuda_tensor *tp[3];
            for (int k = 0; k < 3; k++) {
                test_blocks_matrix(&bl, ne0, rows[k], &raw[k], &deq[k]);
                w[k] = (ember_weight){.type = bl.type, .n_in = ne0, .n_out = rows[k],
                                      .row_bytes = (size_t)(ne0 / bl.block_size) * bl.block_bytes, .data = raw[k], .name = types[ti]};
                wp[k] = &w[k];
                yc[k] = malloc(sizeof(float) * rows[k] * n_cols);
                yg[k] = malloc(sizeof(float) * rows[k] * n_cols);
                CU_OK(ember_cuda_tensor_upload(test_cu, bl.type, ne0, rows[k], raw[k], false, &t[k]));
                tp[k] = &t[k];
                dy[k] = dev_new(NULL, sizeof(float) * rows[k] * n_cols);
            }
            float *x = malloc(sizeof(float) * ne0 * n_cols);
            make_x(x, ne0, n_cols);
            cpu->ops->matmul(cpu, x, n_cols, 3, wp, yc);
            const uint32_t at = ember_cuda_q8_act_type(bl.type);
            const size_t qb = ember_cuda_q8_bytes(at, ne0, n_cols);
            float *dx = dev_new(x, sizeof(float) * ne0 * n_cols);
            void *dq = dev_new(NULL, qb);
            CU_OK(ember_cuda_quantize_q8(test_cu, at, dx, ne0, n_cols, dq));
            /* mode 0: exact (bit-identical to the CPU); 1: free order (EMBER_CUDA_MMVQ) by shape;
             * 2..4: free order with 1, 2, 4 rows a warp (EMBER_CUDA_MMVQ_ROWS; one column only),
             * which must give mode 1's bits (the same lane program and warp sum per row) */
            float *yf[3];
            for (int k = 0; k < 3; k++) yf[k] = malloc(sizeof(float) * rows[k] * n_cols);
            /* 5..7: the same with the rows staged in shared memory (EMBER_CUDA_MMVQ_SMEM);
             * 8, 9: 2 and 4 rows a warp sharing the activation loads (EMBER_CUDA_MMVQ_MR; the
             * 11-column passes of 8 and 3 of Q4_K / Q6_K), mode 1's bits too;
             * 10, 11: Q4_K and Q6_K launches of >= 2 / >= 4 columns on the tensor cores
             * (EMBER_CUDA_MMVQ_TC; with 4 the 3-column pass stays on dp4a), within 1e-5 of max |y|
             * as mode 1 (16-row tiles: 301 and 129 rows end in a partial tile, 64 does not; Q6_K's
             * 2560-wide rows of 2,100 bytes put blocks at 2-byte offsets, staged in shared memory) */
            static const int rows_per_warp[12] = {0, 0, 1, 2, 4, 1, 2, 4, 0, 0, 0, 0};
            for (int mode = 0; mode < 12; mode++) {
                /* NaN in every output first: a row no kernel writes keeps it and fails */
                for (int k = 0; k < 3; k++) {
                    memset(yg[k], 0xFF, sizeof(float) * rows[k] * n_cols);
                    CU_OK(ember_cuda_upload(test_cu, dy[k], yg[k], sizeof(float) * rows[k] * n_cols));
                }
                ember_cuda_set_exact_matvec(test_cu, mode == 0);
                ember_cuda_set_mmvq_rows(test_cu, rows_per_warp[mode]);
                ember_cuda_set_mmvq_smem(test_cu, mode >= 5 && mode <= 7);
                ember_cuda_set_mmvq_mr(test_cu, mode == 8 ? 2 : (mode == 9 ? 4 : 1));
                ember_cuda_set_mmvq_tc(test_cu, mode == 10 ? 2 : (mode == 11 ? 4 : 0));
                CU_OK(ember_cuda_matmul_q8_multi(test_cu, 3, tp, dq, n_cols, dy));
                for (int k = 0; k < 3; k++) {
                    dev_get(yg[k], dy[k], sizeof(float) * rows[k] * n_cols);
                    if (mode == 1) memcpy(yf[k], yg[k], sizeof(float) * rows[k] * n_cols);
                    double mc = 0;
                    for (int64_t i = 0; i < rows[k] * n_cols; i++) mc = fmax(mc, fabs(yc[k][i]));
                    for (int64_t i = 0; i < rows[k] * n_cols; i++, total++) {
                        const bool off = mode == 0 ? memcmp(&yc[k][i], &yg[k][i], 4) != 0
                                       : mode == 1 || mode >= 10 ? !(fabs((double)yc[k][i] - yg[k][i]) <= 1e-5 * mc)
                                                   : memcmp(&yf[k][i], &yg[k][i], 4) != 0;
                        if (off && bad++ < 5)
                            print_error("mode %d %s weight %d y[%lld]: cpu %.9g gpu %.9g (free order %.9g)\n", mode,
                                        types[ti], k, (long long)i, yc[k][i], yg[k][i], yf[k][i]);
                    }
                }
            }
            ember_cuda_set_mmvq_rows(test_cu, 0);
            ember_cuda_set_mmvq_smem(test_cu, false);
            ember_cuda_set_mmvq_mr(test_cu, 2);   /* the default (EMBER_CUDA_MMVQ_MR) */
            ember_cuda_set_mmvq_tc(test_cu, 0);   /* the default (EMBER_CUDA_MMVQ_TC) */
            for (int k = 0; k < 3; k++) free(yf[k]);
            for (int k = 0; k < 3; k++) {
                dev_free(dy[k], sizeof(float) * rows[k] * n_cols);
                ember_cuda_tensor_release(test_cu, &t[k]);
                free(yc[k]);
                free(yg[k]);
                free(raw[k]);
                free(deq[k]);
            }
            dev_free(dq, qb);
            dev_free(dx, sizeof(float) * ne0 * n_cols);
            free(x);
        }
        test_blocks_free(&bl);
    }
    ember_backend_free(cpu);
    print_message("multi-weight launches: %ld of %ld outputs off (exact: any bit; free order: > 1e-5 of max |y|)\n", bad, total);
    assert_int_equal(bad, 0);
    /* weights of different types cannot share a launch */
    test_blocks b5, b4;
    test_blocks_load("Q5_0", &b5);
    test_blocks_load("Q4_K", &b4);
    uint8_t *r5, *r4;
    float *d5, *d4;
    test_blocks_matrix(&b5, 1024, 8, &r5, &d5);
    test_blocks_matrix(&b4, 1024, 8, &r4, &d4);
    ember_cuda_tensor t5, t4;
    CU_OK(ember_cuda_tensor_upload(test_cu, b5.type, 1024, 8, r5, false, &t5));
    CU_OK(ember_cuda_tensor_upload(test_cu, b4.type, 1024, 8, r4, false, &t4));
    const ember_cuda_tensor *mixed[2] = {&t5, &t4};
    float *d = dev_new(NULL, 4096 * 4);
    float *ys[2] = {d, d};
    assert_int_equal(ember_cuda_matmul_q8_multi(test_cu, 2, mixed, d, 1, ys), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_matmul_q8_multi(test_cu, 4, mixed, d, 1, ys), EMBER_ERR_INVALID_ARG);
    dev_free(d, 4096 * 4);
    ember_cuda_tensor_release(test_cu, &t5);
    ember_cuda_tensor_release(test_cu, &t4);
    free(r5);
    free(r4);
    free(d5);
    free(d4);
    test_blocks_free(&b5);
    test_blocks_free(&b4);
}

static void test_matmul_q8_rejects(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    float buf[64];
    assert_int_equal(ember_cuda_q8_act_type(EMBER_TYPE_F16), EMBER_TYPE_F32);
    assert_int_equal(ember_cuda_q8_act_type(EMBER_TYPE_Q5_K), EMBER_TYPE_F32);
    float *d = dev_new(NULL, sizeof buf);
    assert_int_equal(ember_cuda_quantize_q8(test_cu, EMBER_TYPE_Q8_K, d, 32, 1, d), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_quantize_q8(test_cu, EMBER_TYPE_F16, d, 32, 1, d), EMBER_ERR_UNSUPPORTED);
    ember_cuda_tensor t = {.type = EMBER_TYPE_F16, .ne0 = 32, .ne1 = 1, .row_bytes = 64, .data = d};
    assert_int_equal(ember_cuda_matmul_q8(test_cu, &t, d, 1, d), EMBER_ERR_UNSUPPORTED);
    dev_free(d, sizeof buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize_matches_cpu),
        cmocka_unit_test(test_fused_quantize_matches_cpu),
        cmocka_unit_test(test_add_norm_quantize_matches_cpu),
        cmocka_unit_test(test_plain_add_norm_quantize_matches_cpu),
        cmocka_unit_test(test_matmul_q8_matches_cpu),
        cmocka_unit_test(test_matmul_q8_tall_equals_rowwise),
        cmocka_unit_test(test_matmul_q8_exact_bits),
        cmocka_unit_test(test_matmul_q8_multi_matches_cpu),
        cmocka_unit_test(test_matmul_q8_rejects),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else /* !EMBER_CUDA */

static void test_cuda_not_built(void **state)
{
    (void)state;
    print_message("built without -DEMBER_CUDA=ON: CUDA q8 matmul tests skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
