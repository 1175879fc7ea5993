/* gemma3 forward pass against an independent float64 implementation of
 * transformers' modeling_gemma3 (tests/golden/runtime/make_tiny_gemma3.py):
 * a tiny random model whose 6 layers include 5 sliding-window layers
 * (window 4, RoPE base 10000) and 1 global layer (base 1e6), with QK-norm,
 * post-attention/post-FFN norms, GELU-tanh gating, embedding scale and tied
 * output. 12 positions, so the window matters. Checked as one prefill batch,
 * token by token, and as two interleaved sequences. Tolerance: ember rounds
 * GELU inputs/outputs to f16 as ggml does (relative 2^-11 each). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ember.h"

#define V 32
#define T 12
static float want[T][V];
static ember_token tokens[T];

static void load_golden(void)
{
    FILE *f = fopen("tests/golden/runtime/tiny_gemma3_logits.txt", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "# tokens"), 0);
    for (int i = 0; i < T; i++) assert_int_equal(fscanf(f, "%d", &tokens[i]), 1);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < V; j++) assert_int_equal(fscanf(f, "%f", &want[i][j]), 1);
    fclose(f);
}

static void check_row(const float *got, int i, float tol)
{
    assert_non_null(got);
    for (int j = 0; j < V; j++)
        if (fabsf(got[j] - want[i][j]) > tol)
            fail_msg("position %d logit %d: %f, expected %f", i, j, got[j], want[i][j]);
}

static ember_context *ctx_for(ember_model *m, ember_kv_type t)
{
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 64;
    p.n_seq_max = 2;
    p.n_batch = 32;
    p.n_ubatch = 8;   /* the 12-token prefill spans two micro-batches */
    p.n_threads = 2;
    p.type_k = p.type_v = t;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(m, &p, &c), EMBER_OK);
    return c;
}

static void run(ember_kv_type kt, float tol)
{
    load_golden();
    ember_model *m = NULL;
    assert_int_equal(ember_model_load("tests/golden/runtime/tiny_gemma3.gguf", NULL, &m), EMBER_OK);
    assert_string_equal(ember_model_arch(m), "gemma3");
    assert_int_equal(ember_model_n_vocab(m), V);
    assert_non_null(ember_model_vocab(m));
    ember_batch b;
    assert_int_equal(ember_batch_init(32, &b), EMBER_OK);

    /* one prefill batch, logits everywhere */
    ember_context *c = ctx_for(m, kt);
    b.n_tokens = T;
    for (int i = 0; i < T; i++) { b.token[i] = tokens[i]; b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = 1; }
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    for (int i = 0; i < T; i++) check_row(ember_get_logits(c, i), i, tol);

    /* token by token on another sequence */
    for (int i = 0; i < T; i++) {
        b.n_tokens = 1;
        b.token[0] = tokens[i]; b.pos[0] = i; b.seq_id[0] = 1; b.logits[0] = 1;
        assert_int_equal(ember_decode(c, &b), EMBER_OK);
        check_row(ember_get_logits(c, 0), i, tol);
    }
    ember_context_free(c);

    /* two sequences interleaved in one batch: seq 1 starts 5 tokens later */
    c = ctx_for(m, kt);
    int n = 0;
    for (int i = 0; i < T; i++) {
        b.token[n] = tokens[i]; b.pos[n] = i; b.seq_id[n] = 0; b.logits[n] = 1; n++;
        if (i < T - 5) { b.token[n] = tokens[i]; b.pos[n] = i; b.seq_id[n] = 1; b.logits[n] = 1; n++; }
    }
    b.n_tokens = n;
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    for (int k = 0; k < n; k++) check_row(ember_get_logits(c, k), b.pos[k], tol);
    ember_context_free(c);
    ember_batch_free(&b);
    ember_model_free(m);
}

static void test_f32_cache(void **st) { (void)st; run(EMBER_KV_F32, 2e-2f); }
static void test_f16_cache(void **st) { (void)st; run(EMBER_KV_F16, 5e-2f); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_cache),
        cmocka_unit_test(test_f16_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
