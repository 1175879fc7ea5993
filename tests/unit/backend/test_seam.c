/* The backend seam: the options table (backend/options.c), the factory
 * (backend/registry.c) and the ops every backend now fills, on the CPU
 * backend. Oracles, written here independently of src/backend: the
 * documented defaults and parse rules of options.h; memcpy semantics for
 * copy/upload; double-precision cap * tanh(x / cap) for softcap (Gemma 2's
 * final logit soft-capping); RoPE with per-pair frequency divisors from its
 * textbook formula (RoFormer, Su et al. 2021; ggml_rope_ext's freq_factors)
 * evaluated in double. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/options.h"
#include "../../common/test_blocks.h"
#include "base/status.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)   /* xorshift64, uniform in [-1, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* every row the table has; the test fails when one is added without a test */
static const char *const switches[] = {
    "EMBER_CPU_VARIANT", "EMBER_PREFETCH", "EMBER_NO_GEMM", "EMBER_NO_VNNI", "EMBER_NO_SMALL_GEMM",
    "EMBER_NO_DOT_PF", "EMBER_NO_KQ_DEC", "EMBER_NO_ATTN_MULTI", "EMBER_NO_EXPF_VEC", "EMBER_CUDA_VERIFY", "EMBER_CUDA_GRAPH_LOG", "EMBER_CUDA_GRAPHS", "EMBER_CUDA_FUSE",
    "EMBER_CUDA_FUSE_HEAD", "EMBER_CUDA_FUSE_ADD", "EMBER_CUDA_FUSE_ATTN", "EMBER_CUDA_Q8", "EMBER_CUDA_MMVQ", "EMBER_CUDA_F32_ACT", "EMBER_CUDA_EXACT", "EMBER_CUDA_ROPE_TABLE",
    "EMBER_CUDA_TF32",
    "EMBER_CUDA_GEMM_F16", "EMBER_CUDA_PREFILL_F16", "EMBER_CUDA_ATTN_TC", "EMBER_CUDA_GDR_CHUNK", "EMBER_CUDA_FEEDBACK", "EMBER_CUDA_PDL", "EMBER_CUDA_CUBLAS_WS_MIB", "EMBER_CUDA_ATTN_MIN_KEYS", "EMBER_CUDA_MMVQ_ROWS", "EMBER_CUDA_MMVQ_SMEM", "EMBER_CUDA_MMVQ_MR", "EMBER_CUDA_MMVQ_TC", "EMBER_CUDA_STACK",
};
enum { N_SWITCHES = sizeof switches / sizeof switches[0] };

static void clear_env(void)
{
    for (int i = 0; i < N_SWITCHES; i++) unsetenv(switches[i]);
}

static void test_options_table_rows(void **st)
{
    (void)st;
    assert_int_equal(ember_backend_options_count(), N_SWITCHES);
    for (int i = 0; i < N_SWITCHES; i++) {
        int found = 0;
        for (int j = 0; j < ember_backend_options_count(); j++) found += !strcmp(ember_backend_options_name(j), switches[i]);
        if (found != 1) fail_msg("%s: %d rows", switches[i], found);
    }
    assert_null(ember_backend_options_name(-1));
    assert_null(ember_backend_options_name(N_SWITCHES));
}

static void test_options_defaults(void **st)
{
    (void)st;
    clear_env();
    ember_backend_options o = ember_backend_options_default();
    /* the defaults options.h and README document */
    assert_int_equal(o.n_gpu_layers, -1);
    assert_int_equal(o.device, 0);
    assert_int_equal(o.n_threads, 0);
    assert_int_equal(o.cpu_prefetch_bytes, 4096);
    assert_false(o.cpu_no_gemm || o.cpu_no_vnni || o.cpu_no_small_gemm || o.cpu_no_attn_multi || o.cpu_no_expf_vec);
    assert_false(o.cuda_verify || o.cuda_f32_act || o.cuda_exact || o.cuda_graph_log);
    assert_true(o.cuda_mmvq);
    assert_true(o.cuda_graphs && o.cuda_fuse && o.cuda_fuse_head && o.cuda_fuse_add && o.cuda_fuse_attn && o.cuda_q8 && o.cuda_rope_table && o.cuda_tf32 && o.cuda_pdl && o.cuda_feedback);
    assert_true(o.cuda_gemm_f16 && o.cuda_attn_tc);
    assert_true(o.cuda_prefill_f16);   /* on since its GPU test passed (H200, 2026-12-07) */
    assert_int_equal(o.cuda_cublas_ws_mib, 4);
    assert_int_equal(o.cuda_stack_bytes, 128);
    assert_int_equal(o.cuda_mmvq_rows, 0);
    assert_false(o.cuda_mmvq_smem);
    assert_int_equal(o.cuda_mmvq_tc, 0);   /* off until a GPU run measures it */
    /* an empty environment changes nothing */
    ember_backend_options e = o;
    assert_int_equal(ember_backend_options_env(&e), EMBER_OK);
    assert_memory_equal(&e, &o, sizeof o);
}

static void test_options_env_values(void **st)
{
    (void)st;
    clear_env();
    setenv("EMBER_CUDA_GRAPHS", "0", 1);
    setenv("EMBER_CUDA_FUSE", "Off", 1);
    setenv("EMBER_CUDA_FUSE_HEAD", "0", 1);
    setenv("EMBER_CUDA_FUSE_ADD", "no", 1);
    setenv("EMBER_CUDA_FUSE_ATTN", "0", 1);
    setenv("EMBER_CUDA_FEEDBACK", "off", 1);
    setenv("EMBER_CUDA_EXACT", "1", 1);
    setenv("EMBER_CUDA_VERIFY", "TRUE", 1);
    setenv("EMBER_NO_GEMM", "yes", 1);
    setenv("EMBER_NO_VNNI", "", 1);           /* empty: the default */
    setenv("EMBER_PREFETCH", "0", 1);
    setenv("EMBER_CUDA_STACK", "-1", 1);
    setenv("EMBER_CUDA_CUBLAS_WS_MIB", "65536", 1);
    ember_backend_options o = ember_backend_options_default();
    o.n_gpu_layers = 7;   /* placement is not the environment's */
    assert_int_equal(ember_backend_options_env(&o), EMBER_OK);
    assert_int_equal(o.n_gpu_layers, 7);
    assert_false(o.cuda_graphs);
    assert_false(o.cuda_fuse);
    assert_false(o.cuda_fuse_head);
    assert_false(o.cuda_fuse_add);
    assert_false(o.cuda_fuse_attn);
    assert_false(o.cuda_feedback);
    assert_true(o.cuda_exact);
    assert_true(o.cuda_verify);
    assert_true(o.cpu_no_gemm);
    assert_false(o.cpu_no_vnni);
    assert_int_equal(o.cpu_prefetch_bytes, 0);
    assert_int_equal(o.cuda_stack_bytes, -1);
    assert_int_equal(o.cuda_cublas_ws_mib, 65536);
    assert_true(o.cuda_q8);   /* unset: default */
    clear_env();
}

static void expect_bad(const char *name, const char *value, const char *want_in_message)
{
    clear_env();
    setenv(name, value, 1);
    ember_backend_options o = ember_backend_options_default();
    assert_int_equal(ember_backend_options_env(&o), EMBER_ERR_INVALID_ARG);
    const char *msg = ember_last_error();
    if (!strstr(msg, name) || !strstr(msg, value) || !strstr(msg, want_in_message))
        fail_msg("%s=%s: message '%s' should name the variable, the value and '%s'", name, value, msg, want_in_message);
    clear_env();
}

static void test_options_env_errors(void **st)
{
    (void)st;
    expect_bad("EMBER_CUDA_GRAPHS", "maybe", "not a boolean");
    expect_bad("EMBER_NO_GEMM", "2", "not a boolean");
    expect_bad("EMBER_PREFETCH", "4k", "[0, 65536]");
    expect_bad("EMBER_PREFETCH", "65537", "[0, 65536]");
    expect_bad("EMBER_PREFETCH", "-1", "[0, 65536]");
    expect_bad("EMBER_CUDA_STACK", "-2", "[-1, 1048576]");
    expect_bad("EMBER_CUDA_CUBLAS_WS_MIB", "99999999999999999999", "[0, 65536]");
    /* EMBER_CPU_VARIANT belongs to quant/: the table prints it, never fails on it */
    clear_env();
    setenv("EMBER_CPU_VARIANT", "nonsense", 1);
    ember_backend_options o = ember_backend_options_default();
    assert_int_equal(ember_backend_options_env(&o), EMBER_OK);
    unsetenv("EMBER_CPU_VARIANT");
}

static void test_options_print(void **st)
{
    (void)st;
    clear_env();
    setenv("EMBER_CUDA_GRAPHS", "0", 1);
    FILE *f = tmpfile();
    assert_non_null(f);
    ember_print_env_switches(f);
    const long n = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    for (int i = 0; i < N_SWITCHES; i++)
        if (!strstr(text, switches[i])) fail_msg("--help-env lacks %s", switches[i]);
    assert_non_null(strstr(text, "EMBER_CUDA_GRAPHS          bool   default 1 (set here: 0)"));
    free(text);
    clear_env();
}

static const ember_backend_limits lim = {.max_tokens = 8, .max_n_in = 256, .max_kv_tokens = 64, .max_head_dim = 64};

static void test_registry_picks_cpu(void **st)
{
    (void)st;
    clear_env();
    ember_backend_options o = ember_backend_options_default();
    o.n_gpu_layers = 0;   /* -ngl 0: the CPU whatever the build */
    o.n_threads = 2;
    ember_backend *be = NULL;
    assert_int_equal(ember_backend_new(&o, &lim, &be), EMBER_OK);
    assert_string_equal(be->ops->name, "cpu");
    assert_int_equal(ember_backend_cpu_n_threads(be), 2);
    ember_backend_free(be);
    /* -ngl -1 without a GPU (this build or machine): the CPU too */
    o.n_gpu_layers = -1;
    assert_int_equal(ember_backend_new(&o, &lim, &be), EMBER_OK);
    if (ember_backend_gpu_count() == 0) assert_string_equal(be->ops->name, "cpu");
    ember_backend_free(be);
    assert_int_equal(ember_gpu_count(), ember_backend_gpu_count());
    uint64_t fr = 1, tot = 1;
    if (ember_gpu_count() == 0) {
        assert_int_equal(ember_gpu_memory_info(0, &fr, &tot), EMBER_ERR_UNSUPPORTED);
        assert_true(fr == 0 && tot == 0);
    }
    assert_int_equal(ember_backend_new(&o, &lim, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_backend_new(&o, NULL, &be), EMBER_ERR_INVALID_ARG);
    assert_null(be);
    const ember_backend_limits bad = {.max_tokens = 0, .max_n_in = 1, .max_kv_tokens = 1, .max_head_dim = 1};
    assert_int_equal(ember_backend_new(&o, &bad, &be), EMBER_ERR_INVALID_ARG);
}

static ember_backend *cpu(void)
{
    ember_backend_options o = ember_backend_options_default();
    o.n_gpu_layers = 0;
    o.n_threads = 2;
    ember_backend *be = NULL;
    assert_int_equal(ember_backend_new(&o, &lim, &be), EMBER_OK);
    return be;
}

/* dequant_host_rows on the CPU: rows of golden blocks lying one after
 * another in host memory come out as gguf-py dequantized them (the CPU's
 * to_float is its scalar reference, bit for bit), for a K-quant, Q8_0 and
 * F16; the row offsets follow the type's row bytes. */
static void test_cpu_dequant_host_rows(void **st)
{
    (void)st;
    ember_backend *be = cpu();
    static const char *const types[] = {"Q4_K", "Q6_K", "Q8_0", "F16"};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        test_blocks b;
        test_blocks_load(types[ti], &b);
        const int64_t ne0 = 4 * (int64_t)b.block_size * (b.block_size == 1 ? 16 : 1), n_rows = 7;
        uint8_t *raw;
        float *ref;
        test_blocks_matrix(&b, ne0, n_rows, &raw, &ref);
        float *out = malloc(sizeof(float) * ne0 * n_rows);
        assert_non_null(out);
        be->ops->dequant_host_rows(be, b.type, raw, n_rows, ne0, out);
        for (int64_t i = 0; i < ne0 * n_rows; i++)
            if (memcmp(&out[i], &ref[i], sizeof(float)))
                fail_msg("%s: [%lld] = %.9g, gguf-py %.9g", types[ti], (long long)i, out[i], ref[i]);
        free(out);
        free(raw);
        free(ref);
        test_blocks_free(&b);
    }
    ember_backend_free(be);
}

static void test_cpu_fills_every_op(void **st)
{
    (void)st;
    ember_backend *be = cpu();
    const ember_backend_ops *op = be->ops;
    const void *const fns[] = {
        (const void *)op->free, (const void *)op->get_rows, (const void *)op->rms_norm, (const void *)op->matmul,
        (const void *)op->rope, (const void *)op->rope_ext, (const void *)op->geglu, (const void *)op->swiglu,
        (const void *)op->add, (const void *)op->scale, (const void *)op->kv_store, (const void *)op->attention,
        (const void *)op->kv_copy, (const void *)op->act_alloc, (const void *)op->act_free,
        (const void *)op->host_alloc, (const void *)op->host_free, (const void *)op->copy, (const void *)op->upload,
        (const void *)op->dequant_host_rows,
        (const void *)op->softcap, (const void *)op->step_begin, (const void *)op->step_end,
        (const void *)op->scratch_bytes, (const void *)op->print_memory, (const void *)op->logits_top,
        (const void *)op->logits_sync, (const void *)op->logits_top_start, (const void *)op->logits_top_finish,
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!fns[i]) fail_msg("op %zu is NULL", i);
    /* caps of a host backend: host activations, no graphs, every KV type */
    assert_false(be->caps.device_activations);
    assert_false(be->caps.graphed_steps);
    assert_false(be->caps.lazy_placement);
    assert_true(be->caps.layer_skip);
    assert_false(be->caps.token_feedback);
    assert_int_equal(be->caps.kv_types, (1u << EMBER_TYPE_F32) | (1u << EMBER_TYPE_F16) | (1u << EMBER_TYPE_Q8_0));
    /* activation memory: zeroed host memory */
    float *a = op->act_alloc(be, 1000 * sizeof(float));
    assert_non_null(a);
    for (int i = 0; i < 1000; i++) assert_true(a[i] == 0.0f);
    float *h = op->host_alloc(be, 1000 * sizeof(float));
    assert_non_null(h);
    h[999] = 1.0f;
    op->act_free(be, a);
    op->host_free(be, h);
    op->act_free(be, NULL);
    op->host_free(be, NULL);
    /* steps: never replayed, always ran */
    const ember_backend_step s = {.n = 0};
    assert_false(op->step_begin(be, &s));
    assert_true(op->step_end(be));
    /* scratch: the quantized activations alone are max_tokens * max_n_in * 4 bytes */
    assert_true(op->scratch_bytes(be) >= (uint64_t)lim.max_tokens * (uint64_t)lim.max_n_in * 4);
    /* no device memory to report */
    FILE *f = tmpfile();
    assert_non_null(f);
    op->print_memory(be, f);
    assert_int_equal(ftell(f), 0);
    fclose(f);
    /* kv_copy: the host view is the only copy, so nothing changes */
    uint16_t kbuf[4 * 64] = {0}, vbuf[4 * 64] = {0};
    for (int i = 0; i < 4 * 64; i++) kbuf[i] = (uint16_t)i, vbuf[i] = (uint16_t)(3 * i);
    uint16_t k0[4 * 64], v0[4 * 64];
    memcpy(k0, kbuf, sizeof kbuf);
    memcpy(v0, vbuf, sizeof vbuf);
    const ember_kv_layer_view view = {.type_k = EMBER_TYPE_F16, .type_v = EMBER_TYPE_F16, .k = kbuf, .v = vbuf,
                                      .k_row_bytes = 128, .v_row_bytes = 128, .block_tokens = 2, .n_rows = 4};
    op->kv_copy(be, &view, 2, 0, 2);
    assert_memory_equal(kbuf, k0, sizeof kbuf);
    assert_memory_equal(vbuf, v0, sizeof vbuf);
    ember_backend_free(be);
}

static void test_cpu_copy_upload(void **st)
{
    (void)st;
    ember_backend *be = cpu();
    enum { N = 1237 };
    float src[N], dst[N], want[N];
    for (int i = 0; i < N; i++) src[i] = frand(), dst[i] = 7.0f;
    memcpy(want, src, sizeof src);
    be->ops->copy(be, dst, src, N);
    assert_memory_equal(dst, want, sizeof want);
    for (int i = 0; i < N; i++) dst[i] = -3.0f;
    be->ops->upload(be, dst, src, N);
    assert_memory_equal(dst, want, sizeof want);
    /* in place, and overlapping (memmove semantics) */
    be->ops->copy(be, dst, dst, N);
    assert_memory_equal(dst, want, sizeof want);
    be->ops->copy(be, dst + 1, dst, N - 1);
    assert_memory_equal(dst + 1, want, sizeof(float) * (N - 1));
    assert_true(dst[0] == want[0]);
    ember_backend_free(be);
}

static void test_cpu_softcap(void **st)
{
    (void)st;
    ember_backend *be = cpu();
    enum { N = 100003 };   /* enough for several threads */
    float *x = malloc(sizeof(float) * N), *x0 = malloc(sizeof(float) * N);
    assert_true(x && x0);
    for (int i = 0; i < N; i++) x0[i] = x[i] = 60.0f * frand();
    x0[0] = x[0] = 0.0f;
    x0[1] = x[1] = 1e6f;     /* saturates at +cap */
    x0[2] = x[2] = -1e6f;
    const double cap = 30.0;
    be->ops->softcap(be, x, (float)cap, N);
    for (int i = 0; i < N; i++) {
        const double want = cap * tanh((double)x0[i] / cap);
        /* f32 tanhf of an f32 quotient: a few ulp of cap */
        if (fabs((double)x[i] - want) > 4e-6 * cap) fail_msg("softcap(%g) = %.9g, want %.9g", x0[i], x[i], want);
        assert_true(fabsf(x[i]) <= (float)cap);
    }
    assert_true(x[0] == 0.0f);
    assert_true(x[1] == 30.0f && x[2] == -30.0f);
    free(x);
    free(x0);
    ember_backend_free(be);
}

/* rope_ext: pair i of a head turns by pos * freq_scale * base^(-2i/n_rot) /
 * freq_factors[i]; NEOX pairs (x[i], x[i + n_rot/2]), NORM pairs (x[2i],
 * x[2i+1]); dims past n_rot stay. A factor of 1e30 leaves a pair unrotated
 * (Gemma 4's proportional RoPE). NULL factors: plain rope. */
static void check_rope_ext(ember_backend *be, ember_rope_mode mode, bool with_ff)
{
    enum { T = 3, H = 2, D = 32, ROT = 24 };
    float x[T * H * D], y[T * H * D], ff[ROT / 2];
    for (int i = 0; i < T * H * D; i++) x[i] = y[i] = frand();
    for (int i = 0; i < ROT / 2; i++) ff[i] = i < 4 ? 1.0f : i < 8 ? 1.0f + 0.5f * (float)i : 1e30f;
    const ember_pos pos[T] = {0, 5, 1000};
    const double base = 1e6, fs = 1.0;
    be->ops->rope_ext(be, y, T, H, D, ROT, pos, (float)base, (float)fs, mode, with_ff ? ff : NULL);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *a = x + (t * H + h) * D, *b = y + (t * H + h) * D;
            for (int i = 0; i < ROT / 2; i++) {
                const double th = fs * pos[t] * pow(base, -2.0 * i / ROT) / (with_ff ? (double)ff[i] : 1.0);
                const int i0 = mode == EMBER_ROPE_NEOX ? i : 2 * i, i1 = mode == EMBER_ROPE_NEOX ? i + ROT / 2 : 2 * i + 1;
                /* f32 theta by repeated multiplication: the angle's error grows with pos (1000 here) */
                assert_float_equal(b[i0], a[i0] * cos(th) - a[i1] * sin(th), 5e-4);
                assert_float_equal(b[i1], a[i0] * sin(th) + a[i1] * cos(th), 5e-4);
                if (with_ff && ff[i] >= 1e20f) assert_true(b[i0] == a[i0] && b[i1] == a[i1]);
            }
            for (int i = ROT; i < D; i++) assert_true(b[i] == a[i]);
        }
}

static void test_cpu_rope_ext(void **st)
{
    (void)st;
    ember_backend *be = cpu();
    check_rope_ext(be, EMBER_ROPE_NEOX, true);
    check_rope_ext(be, EMBER_ROPE_NORM, true);
    check_rope_ext(be, EMBER_ROPE_NEOX, false);
    ember_backend_free(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_table_rows),
        cmocka_unit_test(test_options_defaults),
        cmocka_unit_test(test_options_env_values),
        cmocka_unit_test(test_options_env_errors),
        cmocka_unit_test(test_options_print),
        cmocka_unit_test(test_registry_picks_cpu),
        cmocka_unit_test(test_cpu_fills_every_op),
        cmocka_unit_test(test_cpu_dequant_host_rows),
        cmocka_unit_test(test_cpu_copy_upload),
        cmocka_unit_test(test_cpu_softcap),
        cmocka_unit_test(test_cpu_rope_ext),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
