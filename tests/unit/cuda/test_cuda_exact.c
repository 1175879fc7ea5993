/* The CUDA row ops that the CPU backend's numbers depend on, against the
 * CPU backend's ops (bit-identical to llama.cpp's x86 CPU build,
 * tests/e2e/test_fidelity.py): GELU-tanh through the f16 table (every f16
 * input), SiLU-GLU (ggml_expf), RMSNorm (double sum), RoPE from a host
 * table of the CPU's angles. For greedy runs to agree token for token the
 * GPU must give the same bits (one ulp moves a Q8 rounding downstream).
 * Each case prints outputs identical, max |diff| / max |cpu| and the first
 * mismatch; asserted: <= 1e-6 relative, then bit-identity.
 * Without EMBER_CUDA or a GPU every test skips and says why. */
#include "cuda_test.h"
#include "backend/backend.h"
#include "quant/quant.h"
#include "../../common/cpu_backend.h"

#ifdef EMBER_CUDA

static ember_backend *cpu_be(void)
{
    const ember_backend_limits lim = {.max_tokens = 16, .max_n_in = 2048, .max_kv_tokens = 4096, .max_head_dim = 256};
    ember_backend *cpu = NULL;
    assert_int_equal(test_cpu_backend_new(2, &lim, &cpu), EMBER_OK);
    return cpu;
}

/* prints the comparison; returns the number of outputs that differ in any bit */
static long compare(const char *what, const float *cpu, const float *gpu, size_t n, double *worst)
{
    long diff = 0;
    double md = 0, mr = 0;
    size_t first = n;
    for (size_t i = 0; i < n; i++) {
        mr = fmax(mr, fabs(cpu[i]));
        if (memcmp(&cpu[i], &gpu[i], 4) == 0 || (cpu[i] != cpu[i] && gpu[i] != gpu[i])) continue;
        diff++;
        if (first == n) first = i;
        const double d = fabs((double)cpu[i] - gpu[i]);
        if (d > md || d != d) md = d;
    }
    const double rel = mr > 0 ? md / mr : md;
    if (rel > *worst || rel != rel) *worst = rel;
    print_message("%-28s %zu/%zu identical, max|diff| %.3g, max|diff|/max|cpu| %.3g", what, n - (size_t)diff, n, md,
                  rel);
    if (first < n) print_message("; first mismatch [%zu] cpu %.9g gpu %.9g", first, cpu[first], gpu[first]);
    print_message("\n");
    return diff;
}

static void test_glu_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    ember_backend *cpu = cpu_be();
    const int64_t n = 65536;
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n),
          *out = malloc(sizeof(float) * n);
    assert_non_null(g);
    assert_non_null(u);
    assert_non_null(ref);
    assert_non_null(out);
    double worst = 0;
    long bad = 0;
    for (int act = 0; act < 2; act++) {
        for (int64_t i = 0; i < n; i++) {
            /* GELU: every f16 value once; SiLU: random over +-20 */
            g[i] = act == 0 ? ember_fp16_to_fp32((uint16_t)i) : test_randf(-20.f, 20.f);
            if (act == 0 && !isfinite(g[i])) g[i] = 0.f;
            u[i] = test_randf(-2.f, 2.f);
        }
        float *dg = dev_new(g, sizeof(float) * n), *du = dev_new(u, sizeof(float) * n);
        CU_OK(ember_cuda_glu(test_cu, act == 0 ? EMBER_CUDA_ACT_GELU_TANH_F16 : EMBER_CUDA_ACT_SILU, dg, du, dg, n));
        dev_get(out, dg, sizeof(float) * n);
        memcpy(ref, g, sizeof(float) * n);
        if (act == 0) cpu->ops->geglu(cpu, ref, u, n);
        else cpu->ops->swiglu(cpu, ref, u, n);
        bad += compare(act == 0 ? "geglu (all f16 inputs)" : "swiglu", ref, out, (size_t)n, &worst);
        if (act == 0) { /* the fused GLU + Q8_K rounding kernel uses the same activation */
            float *dr = dev_new(NULL, sizeof(float) * n);
            CU_OK(ember_cuda_upload(test_cu, dg, g, sizeof(float) * n));
            CU_OK(ember_cuda_glu_round_q8K(test_cu, EMBER_CUDA_ACT_GELU_TANH_F16, dg, du, dg, dr, n));
            dev_get(out, dg, sizeof(float) * n);
            bad += compare("glu_round_q8K (GELU f16)", ref, out, (size_t)n, &worst);
            dev_free(dr, sizeof(float) * n);
        }
        dev_free(dg, sizeof(float) * n);
        dev_free(du, sizeof(float) * n);
    }
    ember_backend_free(cpu);
    free(g);
    free(u);
    free(ref);
    free(out);
    assert_true(worst <= 1e-6);
    assert_int_equal(bad, 0);
}

static void test_rms_norm_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    ember_backend *cpu = cpu_be();
    const int64_t rows = 64, shapes[3] = {640, 256, 2048};
    double worst = 0;
    long bad = 0;
    for (int si = 0; si < 3; si++) {
        const int64_t n = shapes[si];
        float *x = malloc(sizeof(float) * rows * n), *w = malloc(sizeof(float) * n),
              *ref = malloc(sizeof(float) * rows * n), *out = malloc(sizeof(float) * rows * n);
        assert_non_null(x);
        assert_non_null(w);
        assert_non_null(ref);
        assert_non_null(out);
        for (int64_t i = 0; i < rows * n; i++) x[i] = test_randf(-3.f, 3.f) * ldexpf(1.f, (int)(i % 7) - 3);
        for (int64_t i = 0; i < n; i++) w[i] = test_randf(0.5f, 2.f);
        float *dx = dev_new(x, sizeof(float) * rows * n), *dw = dev_new(w, sizeof(float) * n);
        CU_OK(ember_cuda_rms_norm(test_cu, dx, dw, dx, n, rows, 1e-6f));
        dev_get(out, dx, sizeof(float) * rows * n);
        cpu->ops->rms_norm(cpu, ref, x, w, rows, n, 1e-6f);
        char what[64];
        snprintf(what, sizeof what, "rms_norm n=%lld", (long long)n);
        bad += compare(what, ref, out, (size_t)(rows * n), &worst);
        /* Gemma's post-norm fused with the residual add: the CPU's norm, then its add */
        float *res = malloc(sizeof(float) * rows * n), *res_ref = malloc(sizeof(float) * rows * n);
        assert_non_null(res);
        assert_non_null(res_ref);
        for (int64_t i = 0; i < rows * n; i++) res[i] = res_ref[i] = test_randf(-8.f, 8.f);
        float *dr = dev_new(res, sizeof(float) * rows * n), *dy = dev_new(NULL, sizeof(float) * rows * n);
        CU_OK(ember_cuda_upload(test_cu, dx, x, sizeof(float) * rows * n));
        CU_OK(ember_cuda_rms_norm_add_out(test_cu, dx, dw, dy, dr, n, rows, 1e-6f));
        cpu->ops->add(cpu, res_ref, ref, rows * n);
        dev_get(res, dr, sizeof(float) * rows * n);
        dev_get(out, dy, sizeof(float) * rows * n);
        snprintf(what, sizeof what, "rms_norm_add_out n=%lld (y)", (long long)n);
        bad += compare(what, ref, out, (size_t)(rows * n), &worst);
        snprintf(what, sizeof what, "rms_norm_add_out n=%lld (res)", (long long)n);
        bad += compare(what, res_ref, res, (size_t)(rows * n), &worst);
        dev_free(dr, sizeof(float) * rows * n);
        dev_free(dy, sizeof(float) * rows * n);
        free(res);
        free(res_ref);
        dev_free(dx, sizeof(float) * rows * n);
        dev_free(dw, sizeof(float) * n);
        free(x);
        free(w);
        free(ref);
        free(out);
    }
    ember_backend_free(cpu);
    assert_true(worst <= 1e-6);
    assert_int_equal(bad, 0);
}

/* the table the CUDA backend makes (backend_cuda.c rope_table), here from
 * the CPU's formula written out again: an input of the kernel, not the
 * expected values (those come from the CPU backend's rope op) */
static float *make_tab(int64_t n_pos, int n_rot, float base, float fscale)
{
    const int half = n_rot / 2;
    float *h = malloc(sizeof(float) * 2 * n_pos * half);
    assert_non_null(h);
    const float ts = powf(base, -2.0f / (float)n_rot);
    for (int64_t p = 0; p < n_pos; p++) {
        float theta = (float)p;
        for (int i = 0; i < half; i++) {
            const float th = fscale * theta;
            h[(p * half + i) * 2] = cosf(th);
            h[(p * half + i) * 2 + 1] = sinf(th);
            theta *= ts;
        }
    }
    return h;
}

static void test_rope_tab_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    ember_backend *cpu = cpu_be();
    struct { ember_cuda_rope_mode mode; int n_head, head_dim, n_rot; float base; } cases[] = {
        {EMBER_CUDA_ROPE_NEOX, 4, 256, 256, 1e6f},  /* gemma-3 global layers */
        {EMBER_CUDA_ROPE_NEOX, 4, 256, 256, 1e4f},  /* gemma-3 sliding layers */
        {EMBER_CUDA_ROPE_NORMAL, 9, 64, 64, 1e5f},  /* SmolLM2 */
    };
    const int64_t n_tok = 48, n_pos = 4096;
    double worst = 0;
    long bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int nh = cases[ci].n_head, hd = cases[ci].head_dim, nr = cases[ci].n_rot;
        const size_t n = (size_t)n_tok * nh * hd;
        float *x = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
        int32_t pos[48];
        assert_non_null(x);
        assert_non_null(ref);
        assert_non_null(out);
        for (size_t i = 0; i < n; i++) x[i] = test_randf(-4.f, 4.f);
        for (int64_t t = 0; t < n_tok; t++) pos[t] = t < 40 ? (int32_t)(test_rand_u32() % n_pos) : (int32_t)(t - 40);
        pos[47] = (int32_t)n_pos + 5; /* past the table: the kernel's own angle (not asserted bit-exact) */
        float *tab = make_tab(n_pos, nr, cases[ci].base, 1.f);
        float *dtab = dev_new(tab, sizeof(float) * 2 * n_pos * (nr / 2));
        float *dx = dev_new(x, sizeof(float) * n);
        int32_t *dpos = dev_new(pos, sizeof pos);
        CU_OK(ember_cuda_rope_tab(test_cu, dx, dpos, n_tok, nh, hd, nr, cases[ci].mode, dtab, (int32_t)n_pos,
                                  cases[ci].base, 1.f, NULL));
        dev_get(out, dx, sizeof(float) * n);
        memcpy(ref, x, sizeof(float) * n);
        cpu->ops->rope(cpu, ref, n_tok, nh, hd, nr, pos, cases[ci].base, 1.f,
                       cases[ci].mode == EMBER_CUDA_ROPE_NEOX ? EMBER_ROPE_NEOX : EMBER_ROPE_NORM);
        char what[64];
        snprintf(what, sizeof what, "rope_tab %s base %g", cases[ci].mode == EMBER_CUDA_ROPE_NEOX ? "neox" : "norm",
                 (double)cases[ci].base);
        const size_t n_tab = (size_t)(n_tok - 1) * nh * hd; /* the tokens inside the table */
        bad += compare(what, ref, out, n_tab, &worst);
        double w2 = 0;
        compare("  (position past the table)", ref + n_tab, out + n_tab, n - n_tab, &w2);
        assert_true(w2 <= 1e-5);
        dev_free(dtab, sizeof(float) * 2 * n_pos * (nr / 2));
        dev_free(dx, sizeof(float) * n);
        dev_free(dpos, sizeof pos);
        free(tab);
        free(x);
        free(ref);
        free(out);
    }
    ember_backend_free(cpu);
    assert_true(worst <= 1e-6);
    assert_int_equal(bad, 0);
}

/* Gemma 4 E4B's full-attention RoPE: head_dim 512, 256 pairs of which the
 * first 64 turn (frequency divisor 1) and the rest have divisor 1e30; the
 * table holds only the 64 (backend_cuda.c rope_table), the kernel gives the
 * others glibc's small-angle cos/sin. Against the CPU backend's rope_ext,
 * bit for bit, inside and past the table. */
static void test_rope_tab_pairs_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    ember_backend *cpu = cpu_be();
    enum { NH = 2, HD = 512, NR = 512, HALF = NR / 2, NT = 64, N_TOK = 24 };
    const int64_t n_pos = 2048;
    const float base = 1e6f;
    float ff[HALF];
    for (int i = 0; i < HALF; i++) ff[i] = i < NT ? 1.0f : 1e30f;
    const size_t n = (size_t)N_TOK * NH * HD;
    float *x = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
    float *tab = malloc(sizeof(float) * 2 * n_pos * NT);
    assert_non_null(x);
    assert_non_null(ref);
    assert_non_null(out);
    assert_non_null(tab);
    const float ts = powf(base, -2.0f / (float)NR);
    for (int64_t p = 0; p < n_pos; p++) {
        float theta = (float)p;
        for (int i = 0; i < NT; i++) {
            const float th = theta / ff[i];
            tab[(p * NT + i) * 2] = cosf(th);
            tab[(p * NT + i) * 2 + 1] = sinf(th);
            theta *= ts;
        }
    }
    int32_t pos[N_TOK];
    for (size_t i = 0; i < n; i++) x[i] = test_randf(-4.f, 4.f);
    for (int t = 0; t < N_TOK; t++) pos[t] = t < 16 ? (int32_t)(test_rand_u32() % n_pos) : (int32_t)(t - 16);
    pos[N_TOK - 1] = (int32_t)n_pos + 100; /* past the table */
    float *dtab = dev_new(tab, sizeof(float) * 2 * n_pos * NT);
    float *dff = dev_new(ff, sizeof ff);
    float *dx = dev_new(x, sizeof(float) * n);
    int32_t *dpos = dev_new(pos, sizeof pos);
    CU_OK(ember_cuda_rope_tab_pairs(test_cu, dx, dpos, N_TOK, NH, HD, NR, EMBER_CUDA_ROPE_NEOX, dtab, (int32_t)n_pos,
                                    NT, base, 1.f, dff));
    dev_get(out, dx, sizeof(float) * n);
    memcpy(ref, x, sizeof(float) * n);
    cpu->ops->rope_ext(cpu, ref, N_TOK, NH, HD, NR, pos, base, 1.f, EMBER_ROPE_NEOX, ff);
    double worst = 0;
    const size_t n_in = (size_t)(N_TOK - 1) * NH * HD;
    long bad = compare("rope_tab 64 of 256 pairs", ref, out, n_in, &worst);
    double w2 = 0;
    compare("  (position past the table)", ref + n_in, out + n_in, n - n_in, &w2);
    assert_true(w2 <= 1e-5);
    dev_free(dtab, sizeof(float) * 2 * n_pos * NT);
    dev_free(dff, sizeof ff);
    dev_free(dx, sizeof(float) * n);
    dev_free(dpos, sizeof pos);
    free(tab);
    free(x);
    free(ref);
    free(out);
    ember_backend_free(cpu);
    assert_true(worst <= 1e-6);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glu_matches_cpu),
        cmocka_unit_test(test_rms_norm_matches_cpu),
        cmocka_unit_test(test_rope_tab_matches_cpu),
        cmocka_unit_test(test_rope_tab_pairs_matches_cpu),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else /* !EMBER_CUDA */

static void test_cuda_not_built(void **state)
{
    (void)state;
    print_message("built without -DEMBER_CUDA=ON: CUDA exactness tests skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
