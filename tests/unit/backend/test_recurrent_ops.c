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
 * Entries of two sequences are interleaved in one call and the sequences are
 * split over two calls, so the per-entry state pointers and the state carried
 * between calls are both exercised. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"

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
    assert_int_equal(ember_backend_cpu_new(nth, &lim, &be), EMBER_OK);
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

static void test_gated_delta_rule_matches_recurrence(void **st)
{
    (void)st;
    enum { HK = 2, HV = 4, DK = 24, DV = 20 };   /* DV not a multiple of the 16-row work split */
    const int64_t ld = 2 * HK * DK + HV * DV + 3;   /* rows with slack, as a strided view */
    float *qkv = malloc((size_t)NE * (size_t)ld * sizeof(float));
    float alpha[NE][HV], b[NE][HV], out[NE][HV * DV], A[HV], dt[HV];
    for (int64_t i = 0; i < NE * ld; i++) qkv[i] = frand();
    for (int e = 0; e < NE; e++) for (int h = 0; h < HV; h++) { alpha[e][h] = 2.0f * frand(); b[e][h] = 3.0f * frand(); }
    for (int h = 0; h < HV; h++) { A[h] = -(0.05f + 0.5f * (frand() + 1.0f)); dt[h] = frand(); }
    alpha[5][1] = 30.0f;   /* softplus past its threshold: softplus(x) = x */
    const ember_gdr_params p = {.n_head_k = HK, .n_head_v = HV, .d_k = DK, .d_v = DV, .A = A, .dt_bias = dt, .eps = 1e-6f};
    float *state = calloc(2 * HV * DV * DK, sizeof(float));
    float *ptr[NE];
    for (int e = 0; e < NE; e++) ptr[e] = state + (size_t)(e % 2) * HV * DV * DK;
    /* reference: transformers' orientation S[k][v] */
    double S[2][HV][DK][DV];
    memset(S, 0, sizeof S);
    double ref[NE][HV * DV];
    for (int e = 0; e < NE; e++) {
        const int s = e % 2;
        const float *row = qkv + (int64_t)e * ld;
        for (int h = 0; h < HV; h++) {
            const int kh = h % HK;
            const float *q = row + kh * DK, *k = row + HK * DK + kh * DK, *v = row + 2 * HK * DK + h * DV;
            double qq = 0, kk = 0, qn[DK], kn[DK];
            for (int i = 0; i < DK; i++) { qq += (double)q[i] * q[i]; kk += (double)k[i] * k[i]; }
            for (int i = 0; i < DK; i++) { qn[i] = q[i] / sqrt(qq + 1e-6) / sqrt((double)DK); kn[i] = k[i] / sqrt(kk + 1e-6); }
            const double x = (double)alpha[e][h] + dt[h];
            const double g = A[h] * (x > 20.0 ? x : log1p(exp(x)));
            const double beta = 1.0 / (1.0 + exp(-(double)b[e][h]));
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
                ref[e][h * DV + j] = o;
            }
        }
    }
    for (int nth = 1; nth <= 2; nth++) {
        memset(state, 0, 2 * HV * DV * DK * sizeof(float));
        ember_backend *be = new_be(nth);
        be->ops->gated_delta_rule(be, &p, qkv, ld, &alpha[0][0], &b[0][0], ptr, 7, &out[0][0]);
        be->ops->gated_delta_rule(be, &p, qkv + 7 * ld, ld, &alpha[7][0], &b[7][0], ptr + 7, NE - 7, &out[7][0]);
        double max_err = 0.0, max_ref = 0.0;
        for (int e = 0; e < NE; e++)
            for (int j = 0; j < HV * DV; j++) {
                if (fabs(ref[e][j]) > max_ref) max_ref = fabs(ref[e][j]);
                if (fabs(ref[e][j] - out[e][j]) > max_err) max_err = fabs(ref[e][j] - out[e][j]);
            }
        printf("# gated_delta_rule (%d threads): max|err| %.3g, max|out| %.3g\n", nth, max_err, max_ref);
        assert_true(max_ref > 0.05);
        assert_true(max_err < 1e-5);
        /* the op's state is S transposed: [h][v][k] */
        for (int s = 0; s < 2; s++)
            for (int h = 0; h < HV; h++)
                for (int j = 0; j < DV; j++)
                    for (int i = 0; i < DK; i++)
                        assert_true(fabs(ptr[s][((size_t)h * DV + j) * DK + i] - S[s][h][i][j]) < 1e-5);
        ember_backend_free(be);
    }
    free(state);
    free(qkv);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv1d_silu_matches_causal_conv),
        cmocka_unit_test(test_gated_delta_rule_matches_recurrence),
        cmocka_unit_test(test_sigmoid_mul_and_copy_strided),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
