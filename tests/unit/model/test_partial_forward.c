/* Partial forward passes (include/ember.h: ember_set_hidden_layers,
 * ember_get_hidden, ember_set_layer_limit) against the independent float64
 * gemma3 implementation of tests/golden/runtime/make_tiny_gemma3.py, which
 * writes tiny_gemma3_partial.txt: per position the residual stream after
 * layers 1 and 2, and the logits of the model cut after its first 3 layers
 * (final norm + tied head, LayerSkip's early exit).
 * - hidden states of every row (logits or not), in one prefill batch of two
 *   micro-batches and token by token, match the oracle's;
 * - a layer-limited decode gives the oracle's early-exit logits;
 * - the layer-skip KV protocol (draft rows written by a limited decode, then
 *   truncated and decoded again in full) gives the full model's logits;
 * - argument errors, and architectures that cannot stop early (gemma4,
 *   which still exports hidden states). */
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
#define E 32
#define T 12
#define TOL 2e-2f   /* as test_tiny_gemma3 (ember rounds GELU through f16 as ggml does) */

static ember_token tokens[T];
static float h1[T][E], h2[T][E], early[T][V], full[T][V];

static void load(void)
{
    FILE *f = fopen("tests/golden/runtime/tiny_gemma3_partial.txt", "r");
    assert_non_null(f);
    char line[256];
    assert_non_null(fgets(line, sizeof line, f));
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < E; j++) assert_int_equal(fscanf(f, "%f", &h1[t][j]), 1);
        for (int j = 0; j < E; j++) assert_int_equal(fscanf(f, "%f", &h2[t][j]), 1);
        for (int j = 0; j < V; j++) assert_int_equal(fscanf(f, "%f", &early[t][j]), 1);
    }
    fclose(f);
    f = fopen("tests/golden/runtime/tiny_gemma3_logits.txt", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "# tokens"), 0);
    for (int i = 0; i < T; i++) assert_int_equal(fscanf(f, "%d", &tokens[i]), 1);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < V; j++) assert_int_equal(fscanf(f, "%f", &full[i][j]), 1);
    fclose(f);
}

static void check(const float *got, const float *want, int n, const char *what, int pos)
{
    assert_non_null(got);
    for (int j = 0; j < n; j++)
        if (fabsf(got[j] - want[j]) > TOL) fail_msg("%s, position %d, element %d: %f, expected %f", what, pos, j, got[j], want[j]);
}

static ember_model *model;
static ember_batch b;

static int setup(void **st)
{
    (void)st;
    load();
    if (ember_model_load("tests/golden/runtime/tiny_gemma3.gguf", NULL, &model) != EMBER_OK) return -1;
    return ember_batch_init(32, &b) == EMBER_OK ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    ember_batch_free(&b);
    ember_model_free(model);
    return 0;
}

static ember_context *new_ctx(void)
{
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 64;
    p.n_seq_max = 2;
    p.n_batch = 32;
    p.n_ubatch = 8;   /* the 12-token prefill spans two micro-batches */
    p.n_threads = 2;
    p.type_k = p.type_v = EMBER_KV_F32;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(model, &p, &c), EMBER_OK);
    return c;
}

static void add(int i, ember_token t, ember_pos pos, ember_seq_id s, int lg)
{
    b.token[i] = t; b.pos[i] = pos; b.seq_id[i] = s; b.logits[i] = (int8_t)lg;
}

static void test_hidden_states(void **st)
{
    (void)st;
    ember_context *c = new_ctx();
    const int32_t layers[2] = {2, 1};   /* any order: j indexes this list */
    assert_int_equal(ember_set_hidden_layers(c, 2, layers), EMBER_OK);
    /* prefill: every other row asks for logits; every row keeps its hidden state */
    b.n_tokens = T;
    for (int i = 0; i < T; i++) add(i, tokens[i], i, 0, i % 2 == 1 || i == T - 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    for (int i = 0; i < T; i++) {
        check(ember_get_hidden(c, i, 0), h2[i], E, "prefill hidden after layer 2", i);
        check(ember_get_hidden(c, i, 1), h1[i], E, "prefill hidden after layer 1", i);
        if (b.logits[i]) check(ember_get_logits(c, i), full[i], V, "prefill logits with capture on", i);
    }
    check(ember_get_hidden(c, -1, 0), h2[T - 1], E, "hidden of entry -1", T - 1);
    assert_null(ember_get_hidden(c, 0, 2));
    assert_null(ember_get_hidden(c, T, 0));
    /* token by token on sequence 1 */
    for (int i = 0; i < T; i++) {
        b.n_tokens = 1;
        add(0, tokens[i], i, 1, 1);
        assert_int_equal(ember_decode(c, &b), EMBER_OK);
        check(ember_get_hidden(c, 0, 1), h1[i], E, "decode hidden after layer 1", i);
        check(ember_get_hidden(c, 0, 0), h2[i], E, "decode hidden after layer 2", i);
    }
    /* off again */
    assert_int_equal(ember_set_hidden_layers(c, 0, NULL), EMBER_OK);
    assert_null(ember_get_hidden(c, 0, 0));
    ember_context_free(c);
}

static void test_layer_limit(void **st)
{
    (void)st;
    ember_context *c = new_ctx();
    const int32_t layers[2] = {1, 4};
    assert_int_equal(ember_set_hidden_layers(c, 2, layers), EMBER_OK);
    assert_int_equal(ember_set_layer_limit(c, 3), EMBER_OK);
    b.n_tokens = T;
    for (int i = 0; i < T; i++) add(i, tokens[i], i, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    for (int i = 0; i < T; i++) {
        check(ember_get_logits(c, i), early[i], V, "first-3-layer logits", i);
        check(ember_get_hidden(c, i, 0), h1[i], E, "hidden after layer 1 under the limit", i);
        assert_null(ember_get_hidden(c, i, 1));   /* layer 4 did not run */
    }
    ember_context_free(c);
}

/* The layer-skip proposer's protocol (src/engine/spec/layerskip.c): draft
 * rows decoded through 3 layers only, truncated, then the same positions
 * decoded through all layers: the result is the full model's. */
static void test_draft_rows_rolled_back(void **st)
{
    (void)st;
    ember_context *c = new_ctx();
    const int P = 7;
    b.n_tokens = P;
    for (int i = 0; i < P; i++) add(i, tokens[i], i, 0, 0);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    assert_int_equal(ember_set_layer_limit(c, 3), EMBER_OK);
    for (int i = P; i < P + 4; i++) {   /* draft steps, one token each, with "wrong" tokens */
        b.n_tokens = 1;
        add(0, (tokens[i] + 5) % V, i, 0, 1);
        assert_int_equal(ember_decode(c, &b), EMBER_OK);
    }
    assert_int_equal(ember_seq_len(c, 0), P + 4);
    assert_int_equal(ember_seq_truncate(c, 0, P), EMBER_OK);
    assert_int_equal(ember_set_layer_limit(c, 0), EMBER_OK);
    b.n_tokens = T - P;
    for (int i = P; i < T; i++) add(i - P, tokens[i], i, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    for (int i = P; i < T; i++) check(ember_get_logits(c, i - P), full[i], V, "full logits after a rolled-back draft", i);
    ember_context_free(c);
}

static void test_errors(void **st)
{
    (void)st;
    ember_context *c = new_ctx();
    const int32_t bad[1] = {6}, many[9] = {0, 1, 2, 3, 4, 5, 0, 1, 2};
    assert_int_equal(ember_set_layer_limit(c, -1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_set_layer_limit(c, 7), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_set_layer_limit(c, 6), EMBER_OK);
    assert_int_equal(ember_set_hidden_layers(c, 1, bad), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_set_hidden_layers(c, 9, many), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_set_hidden_layers(c, 1, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_set_layer_limit(NULL, 1), EMBER_ERR_INVALID_ARG);
    assert_null(ember_get_hidden(NULL, 0, 0));
    ember_context_free(c);

    ember_model *g4 = NULL;
    assert_int_equal(ember_model_load("tests/golden/gemma4/tiny-gemma4-e.gguf", NULL, &g4), EMBER_OK);
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 32;
    p.n_batch = 8;
    ember_context *c4 = NULL;
    assert_int_equal(ember_context_new(g4, &p, &c4), EMBER_OK);
    const int32_t l0[1] = {0};
    assert_int_equal(ember_set_layer_limit(c4, 1), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_set_hidden_layers(c4, 1, l0), EMBER_OK);   /* gemma4 exports them (DFlash targets) */
    assert_int_equal(ember_set_layer_limit(c4, 0), EMBER_OK);
    ember_context_free(c4);
    ember_model_free(g4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_states),
        cmocka_unit_test(test_layer_limit),
        cmocka_unit_test(test_draft_rows_rolled_back),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
