/* The CPU backend's recurrent (linear-attention) ops against direct
 * double-precision evaluation of their textbook formulas, written here
 * independently of src/backend:
 * - conv1d_silu: a causal depthwise convolution over each sequence's whole
 *   history with zero padding (Mamba's short conv), then SiLU;
 * - gated_delta_rule: the gated delta rule (Yang, Kautz & Hatamizadeh, ICLR
 *   2025) in transformers' orientation, state S [d_k][d_v] per head,
 *   S = e^g S + k (beta (v - S^T k))^T, o = S^T q, with L2-normed q / k,
 *   q / sqrt(d_k), g = A softplus(alpha + dt_bias), beta = sigmoid(b), value
 *   head h reading key head h % n_head_k;
 * - sigmoid_mul and copy_strided.
 * Entries of two sequences are interleaved in one call (the recurrent form)
 * or come in long runs (the chunked form), and are split over two calls, so
 * the per-entry state pointers, both forms and the state carried between
 * calls are exercised, with the SIMD kernels this CPU picks and with the
 * scalar ones. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/options.h"
#include "quant/quant.h"

#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)   /* xorshift64, uniform in [-1, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static ember_backend *new_be(int nth)
{
    ember_backend_limits lim = {.max_tokens = 64, .max_n_in = 256, .max_kv_tokens = 64, .max_head_dim = 64};
    ember_backend *be = NULL;
    ember_backend_options o = ember_backend_options_default();
    o.n_threads = nth;
    assert_int_equal(ember_backend_options_env(&o), EMBER_OK);   /* EMBER_CPU_VARIANT=scalar reruns */
    assert_int_equal(ember_backend_cpu_new(&o, &lim, &be), EMBER_OK);
    return be;
}

/* entries: T tokens of sequence 0 and T of sequence 1, alternating */
#define T 23
#define NE (2 * T)

static void test_conv1d_silu_matches_causal_conv(void **st)
{
    (void)st;
    enum { C = 37, K = 4 };
    float x[NE][C], w[C][K], y[NE][C];
    for (int e = 0; e < NE; e++) for (int c = 0; c < C; c++) x[e][c] = frand();
    for (int c = 0; c < C; c++) for (int j = 0; j < K; j++) w[c][j] = frand();
    float state[2][K - 1][C];
    memset(state, 0, sizeof state);
    float *ptr[NE];
    for (int e = 0; e < NE; e++) ptr[e] = &state[e % 2][0][0];
    for (int nth = 1; nth <= 2; nth++) {
        memset(state, 0, sizeof state);
        ember_backend *be = new_be(nth);
        /* two calls: entries [0, 10) then [10, NE) */
        be->ops->conv1d_silu(be, &y[0][0], &x[0][0], &w[0][0], C, K, ptr, 10);
        be->ops->conv1d_silu(be, &y[10][0], &x[10][0], &w[0][0], C, K, ptr + 10, NE - 10);
        double max_err = 0.0;
        for (int e = 0; e < NE; e++) {
            const int s = e % 2, t = e / 2;   /* token t of sequence s */
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int j = 0; j < K; j++) {
                    const int tt = t - (K - 1) + j;   /* input time of tap j */
                    if (tt >= 0) acc += (double)w[c][j] * x[2 * tt + s][c];
                }
                const double ref = acc / (1.0 + exp(-acc));
                const double err = fabs(ref - y[e][c]);
                if (err > max_err) max_err = err;
            }
        }
        assert_true(max_err < 1e-5);
        /* the state keeps the last K - 1 inputs, oldest first */
        for (int s = 0; s < 2; s++)
            for (int j = 0; j < K - 1; j++)
                for (int c = 0; c < C; c++) assert_true(state[s][j][c] == x[2 * (T - (K - 1) + j) + s][c]);
        ember_backend_free(be);
    }
}

/* Run the op over entries [0, ne) whose sequences are seq_of[e] (0 or 1), in
 * two calls split at entry `cut`, and compare outputs and final states with
 * the double-precision recurrence. */
static void gdr_case(const int *seq_of, int ne, int cut, int nth)
{
    /* DV not a multiple of the 16-row work split; DK not a multiple of 8 and above 64 (the AVX2
     * kernels' scalar tails and the chunked form's 64-float register passes) */
    enum { HK = 2, HV = 4, DK = 68, DV = 20 };
    const int64_t ld = 2 * HK * DK + HV * DV + 3;   /* rows with slack, as a strided view */
    float *qkv = malloc((size_t)ne * (size_t)ld * sizeof(float));
    float *alpha = malloc((size_t)ne * HV * sizeof(float)), *b = malloc((size_t)ne * HV * sizeof(float));
    float *out = malloc((size_t)ne * HV * DV * sizeof(float));
    double *ref = malloc((size_t)ne * HV * DV * sizeof(double));
    float A[HV], dt[HV];
    for (int64_t i = 0; i < ne * ld; i++) qkv[i] = frand();
    for (int i = 0; i < ne * HV; i++) { alpha[i] = 2.0f * frand(); b[i] = 3.0f * frand(); }
    for (int h = 0; h < HV; h++) { A[h] = -(0.02f + 0.3f * (frand() + 1.0f)); dt[h] = frand(); }
    alpha[5 * HV + 1] = 30.0f;   /* softplus past its threshold: softplus(x) = x */
    const ember_gdr_params p = {.n_head_k = HK, .n_head_v = HV, .d_k = DK, .d_v = DV, .A = A, .dt_bias = dt, .eps = 1e-6f};
    float *state = calloc(2 * HV * DV * DK, sizeof(float));
    float **ptr = malloc((size_t)ne * sizeof *ptr);
    for (int e = 0; e < ne; e++) ptr[e] = state + (size_t)seq_of[e] * HV * DV * DK;
    /* reference: transformers' orientation S[k][v] */
    static double S[2][HV][DK][DV];
    memset(S, 0, sizeof S);
    for (int e = 0; e < ne; e++) {
        const int s = seq_of[e];
        const float *row = qkv + (int64_t)e * ld;
        for (int h = 0; h < HV; h++) {
            const int kh = h % HK;
            const float *q = row + kh * DK, *k = row + HK * DK + kh * DK, *v = row + 2 * HK * DK + h * DV;
            double qq = 0, kk = 0, qn[DK], kn[DK];
            for (int i = 0; i < DK; i++) { qq += (double)q[i] * q[i]; kk += (double)k[i] * k[i]; }
            for (int i = 0; i < DK; i++) { qn[i] = q[i] / sqrt(qq + 1e-6) / sqrt((double)DK); kn[i] = k[i] / sqrt(kk + 1e-6); }
            const double x = (double)alpha[e * HV + h] + dt[h];
            const double g = A[h] * (x > 20.0 ? x : log1p(exp(x)));
            const double beta = 1.0 / (1.0 + exp(-(double)b[e * HV + h]));
            for (int i = 0; i < DK; i++) for (int j = 0; j < DV; j++) S[s][h][i][j] *= exp(g);
            for (int j = 0; j < DV; j++) {
                double kv = 0;
                for (int i = 0; i < DK; i++) kv += S[s][h][i][j] * kn[i];
                const double d = beta * (v[j] - kv);
                for (int i = 0; i < DK; i++) S[s][h][i][j] += kn[i] * d;
            }
            for (int j = 0; j < DV; j++) {
                double o = 0;
                for (int i = 0; i < DK; i++) o += S[s][h][i][j] * qn[i];
                ref[(size_t)e * HV * DV + (size_t)(h * DV + j)] = o;
            }
        }
    }
    ember_backend *be = new_be(nth);
    be->ops->gated_delta_rule(be, &p, qkv, ld, alpha, b, ptr, cut, out);
    be->ops->gated_delta_rule(be, &p, qkv + cut * ld, ld, alpha + cut * HV, b + cut * HV, ptr + cut, ne - cut,
                              out + (size_t)cut * HV * DV);
    double max_err = 0.0, max_ref = 0.0, max_serr = 0.0;
    for (size_t i = 0; i < (size_t)ne * HV * DV; i++) {
        if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
        if (fabs(ref[i] - out[i]) > max_err) max_err = fabs(ref[i] - out[i]);
    }
    /* the op's state is S transposed: [h][v][k] */
    for (int s = 0; s < 2; s++)
        for (int h = 0; h < HV; h++)
            for (int j = 0; j < DV; j++)
                for (int i = 0; i < DK; i++) {
                    const double d = fabs(state[(((size_t)s * HV + h) * DV + j) * DK + i] - S[s][h][i][j]);
                    if (d > max_serr) max_serr = d;
                }
    printf("# gated_delta_rule (%d entries, cut %d, %d threads): max|err| %.3g (max|out| %.3g), state max|err| %.3g\n",
           ne, cut, nth, max_err, max_ref, max_serr);
    assert_true(max_ref > 0.02);   /* outputs of this size (q / sqrt(DK)): not a vacuous comparison */
    assert_true(max_err < 1e-5 * (1.0 + max_ref));
    assert_true(max_serr < 1e-5);
    ember_backend_free(be);
    free(ptr);
    free(state);
    free(ref);
    free(out);
    free(b);
    free(alpha);
    free(qkv);
}

/* Decode-like batches: the two sequences alternate entry by entry (runs of
 * one: the recurrent form). */
static void test_gated_delta_rule_matches_recurrence(void **st)
{
    (void)st;
    int seq_of[NE];
    for (int e = 0; e < NE; e++) seq_of[e] = e % 2;
    for (int nth = 1; nth <= 2; nth++) gdr_case(seq_of, NE, 7, nth);
}

/* Prefill-like batches: runs of 75 and 40 entries of one sequence (the
 * chunked form: whole chunks and a partial last chunk), a run shorter than
 * the chunking threshold, and single entries; the second call continues the
 * runs from the state the first call left. */
static void test_gated_delta_rule_chunked_matches_recurrence(void **st)
{
    (void)st;
    enum { N = 160 };
    int seq_of[N], e = 0;
    for (int i = 0; i < 75; i++) seq_of[e++] = 0;
    for (int i = 0; i < 40; i++) seq_of[e++] = 1;
    for (int i = 0; i < 5; i++) seq_of[e++] = 0;
    for (int i = 0; i < 6; i++) seq_of[e++] = i % 2;
    while (e < N) seq_of[e++] = 1;
    for (int nth = 1; nth <= 2; nth++) {
        gdr_case(seq_of, N, N, nth);
        gdr_case(seq_of, N, 50, nth);   /* a call boundary inside the first run */
    }
}

static void test_sigmoid_mul_and_copy_strided(void **st)
{
    (void)st;
    ember_backend *be = new_be(2);
    float x[50], g[50], x0[50];
    for (int i = 0; i < 50; i++) { x0[i] = x[i] = frand(); g[i] = 8.0f * frand(); }
    be->ops->sigmoid_mul(be, x, g, 50);
    for (int i = 0; i < 50; i++) assert_true(fabs(x[i] - x0[i] / (1.0 + exp(-(double)g[i]))) < 1e-6);
    float src[6][10], dst[6][4];
    for (int r = 0; r < 6; r++) for (int c = 0; c < 10; c++) src[r][c] = (float)(r * 100 + c);
    be->ops->copy_strided(be, &dst[0][0], 4, &src[0][3], 10, 6, 4);
    for (int r = 0; r < 6; r++) for (int c = 0; c < 4; c++) assert_true(dst[r][c] == (float)(r * 100 + c + 3));
    ember_backend_free(be);
}

/* State memory (state_alloc / state_copy; host memory on the CPU): cells
 * start zeroed, copy between blocks and from / to plain host memory, and
 * a NULL source zeroes. */
static void test_state_memory(void **st)
{
    (void)st;
    ember_backend *be = new_be(1);
    float *a = be->ops->state_alloc(be, 3, 40 * sizeof(float)), *b = be->ops->state_alloc(be, 1, 40 * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_null(be->ops->state_alloc(be, 0, 64));
    float h[120], back[40];
    be->ops->state_copy(be, h, a, sizeof h);
    for (int i = 0; i < 120; i++) assert_true(h[i] == 0.0f);
    for (int i = 0; i < 120; i++) h[i] = (float)i;
    be->ops->state_copy(be, a, h, sizeof h);               /* host -> state */
    be->ops->state_copy(be, b, a + 40, 40 * sizeof(float));   /* cell 1 -> another block */
    be->ops->state_copy(be, a + 40, NULL, 40 * sizeof(float));   /* zero cell 1 */
    be->ops->state_copy(be, back, b, sizeof back);          /* state -> host */
    for (int i = 0; i < 40; i++) assert_true(back[i] == (float)(40 + i));
    be->ops->state_copy(be, h, a, sizeof h);
    for (int i = 0; i < 120; i++) assert_true(h[i] == (i >= 40 && i < 80 ? 0.0f : (float)i));
    be->ops->state_free(be, a);
    be->ops->state_free(be, b);
    be->ops->state_free(be, NULL);
    ember_backend_free(be);
}

/* Runs the tests with the kernels this CPU picks (AVX2 / AVX-512 machines:
 * recurrent_avx2.c), then once more in a child with EMBER_CPU_VARIANT=scalar
 * so the scalar code is checked too. */
int main(int argc, char **argv)
{
    (void)argc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv1d_silu_matches_causal_conv),
        cmocka_unit_test(test_gated_delta_rule_matches_recurrence),
        cmocka_unit_test(test_gated_delta_rule_chunked_matches_recurrence),
        cmocka_unit_test(test_sigmoid_mul_and_copy_strided),
        cmocka_unit_test(test_state_memory),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (getenv("EMBER_CPU_VARIANT") || ember_cpu_variant_active() == EMBER_CPU_SCALAR) return rc;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        setenv("EMBER_CPU_VARIANT", "scalar", 1);
        printf("# again with EMBER_CPU_VARIANT=scalar\n");
        fflush(stdout);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    return rc;
}
