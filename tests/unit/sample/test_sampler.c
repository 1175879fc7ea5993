/* The sampler chain against an independent numpy implementation of
 * llama.cpp's formulas (tests/golden/sample/make_sampler_goldens.py ->
 * sampler_cases.json): same surviving candidates, same probabilities (1e-5),
 * and draws that follow them (chi-square at alpha = 1e-3). Plus seeds,
 * reset, bad parameters and NaN logits. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "sample/sampler.h"
#include "../../common/logits_top_ref.h"

#define GOLDEN "tests/golden/sample/sampler_cases.json"

typedef struct {
    const char *name;
    int32_t n_vocab;
    float *logits;
    ember_token *history;
    int32_t n_history;
    ember_sampler_params p;
    ember_logit_bias *bias;
    int32_t n_exp;
    ember_token *exp_ids;
    double *exp_p;
    int draws;
} gcase;

static json_t *load_golden(void)
{
    json_error_t err;
    json_t *root = json_load_file(GOLDEN, 0, &err);
    if (!root)
        fail_msg("%s:%d: %s", GOLDEN, err.line, err.text);
    return root;
}

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_non_null(v);
    return json_number_value(v);
}

static void case_load(json_t *c, gcase *g)
{
    memset(g, 0, sizeof *g);
    g->name = json_string_value(json_object_get(c, "name"));
    json_t *lg = json_object_get(c, "logits"), *h = json_object_get(c, "history"), *pr = json_object_get(c, "params");
    g->n_vocab = (int32_t)json_array_size(lg);
    g->logits = malloc(sizeof(float) * (size_t)g->n_vocab);
    for (int32_t i = 0; i < g->n_vocab; i++)
        g->logits[i] = (float)json_number_value(json_array_get(lg, (size_t)i));
    g->n_history = (int32_t)json_array_size(h);
    g->history = malloc(sizeof(ember_token) * (size_t)(g->n_history + 1));
    for (int32_t i = 0; i < g->n_history; i++)
        g->history[i] = (ember_token)json_integer_value(json_array_get(h, (size_t)i));
    g->p = ember_sampler_default_params();
    g->p.temp = (float)num(pr, "temp");
    g->p.top_k = (int32_t)num(pr, "top_k");
    g->p.top_p = (float)num(pr, "top_p");
    g->p.min_p = (float)num(pr, "min_p");
    g->p.repeat_penalty = (float)num(pr, "repeat");
    g->p.presence_penalty = (float)num(pr, "presence");
    g->p.frequency_penalty = (float)num(pr, "frequency");
    g->p.penalty_last_n = (int32_t)num(pr, "last_n");
    g->p.seed = 1234;
    json_t *b = json_object_get(pr, "bias");
    g->p.n_logit_bias = (int32_t)json_array_size(b);
    g->bias = malloc(sizeof(ember_logit_bias) * (size_t)(g->p.n_logit_bias + 1));
    for (int32_t i = 0; i < g->p.n_logit_bias; i++) {
        json_t *e = json_array_get(b, (size_t)i);
        g->bias[i].token = (ember_token)json_integer_value(json_array_get(e, 0));
        json_t *bv = json_array_get(e, 1);
        g->bias[i].bias = json_is_string(bv) ? -INFINITY : (float)json_number_value(bv);
    }
    g->p.logit_bias = g->bias;
    json_t *ids = json_object_get(c, "ids"), *probs = json_object_get(c, "probs");
    g->n_exp = (int32_t)json_array_size(ids);
    g->exp_ids = malloc(sizeof(ember_token) * (size_t)g->n_exp);
    g->exp_p = malloc(sizeof(double) * (size_t)g->n_exp);
    for (int32_t i = 0; i < g->n_exp; i++) {
        g->exp_ids[i] = (ember_token)json_integer_value(json_array_get(ids, (size_t)i));
        g->exp_p[i] = json_number_value(json_array_get(probs, (size_t)i));
    }
    g->draws = (int)json_integer_value(json_object_get(c, "draws"));
}

static void case_free(gcase *g)
{
    free(g->logits);
    free(g->history);
    free(g->bias);
    free(g->exp_ids);
    free(g->exp_p);
}

static ember_sampler *case_sampler(const gcase *g)
{
    ember_sampler *s = NULL;
    assert_int_equal(ember_sampler_new(&g->p, g->n_vocab, &s), EMBER_OK);
    for (int32_t i = 0; i < g->n_history; i++)
        ember_sampler_accept(s, g->history[i]);
    return s;
}

/* probability of token t in the expected list (0 if absent) */
static double exp_prob(const gcase *g, ember_token t)
{
    for (int32_t i = 0; i < g->n_exp; i++)
        if (g->exp_ids[i] == t) return g->exp_p[i];
    return 0.0;
}

static void test_candidates_match_reference(void **state)
{
    (void)state;
    json_t *root = load_golden();
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 10);
    for (size_t k = 0; k < json_array_size(cases); k++) {
        gcase g;
        case_load(json_array_get(cases, k), &g);
        ember_sampler *s = case_sampler(&g);
        const ember_candidate *c;
        int32_t n = ember_sampler_candidates(s, g.logits, &c);
        /* every candidate with nonzero probability is expected, and vice versa */
        int32_t n_nonzero_exp = 0, n_nonzero = 0;
        for (int32_t i = 0; i < g.n_exp; i++)
            n_nonzero_exp += g.exp_p[i] > 0.0;
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            sum += c[i].p;
            if (c[i].p <= 0.0f) continue;
            n_nonzero++;
            double want = exp_prob(&g, c[i].id);
            if (fabs(c[i].p - want) > 1e-5)
                fail_msg("%s: token %d p=%.7f, reference %.7f", g.name, c[i].id, (double)c[i].p, want);
        }
        if (n_nonzero != n_nonzero_exp)
            fail_msg("%s: %d candidates, reference %d", g.name, n_nonzero, n_nonzero_exp);
        assert_true(fabs(sum - 1.0) < 1e-4);
        ember_sampler_free(s);
        case_free(&g);
    }
    json_decref(root);
}

/* chi-square critical value at alpha = 1e-3 (Wilson-Hilferty) */
static double chi2_crit(int df)
{
    const double z = 3.090232; /* standard normal quantile of 1 - 1e-3 */
    double a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Draw counts cnt[n_vocab] of g.draws draws follow the reference: nothing
 * outside its support, and chi-square at alpha = 1e-3. */
static void check_counts(const gcase *gp, const int *cnt)
{
    const gcase g = *gp;
    /* tokens outside the reference's support are never drawn */
    for (int32_t t = 0; t < g.n_vocab; t++)
        if (exp_prob(&g, t) == 0.0 && cnt[t] != 0)
            fail_msg("%s: drew token %d (%d times), which the reference excludes", g.name, t, cnt[t]);
    /* chi-square over bins with expected count >= 5, the rest pooled */
    double chi = 0.0, pool_e = 0.0, pool_o = 0.0;
    int bins = 0;
    for (int32_t i = 0; i < g.n_exp; i++) {
        double e = g.exp_p[i] * g.draws;
        double o = cnt[g.exp_ids[i]];
        if (e < 5.0) {
            pool_e += e;
            pool_o += o;
            continue;
        }
        chi += (o - e) * (o - e) / e;
        bins++;
    }
    if (pool_e >= 5.0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    if (bins >= 2 && chi > chi2_crit(bins - 1))
        fail_msg("%s: chi-square %.1f over %d bins > %.1f", g.name, chi, bins, chi2_crit(bins - 1));
    if (bins == 1) { /* a single outcome: all draws are it */
        assert_int_equal(g.n_exp == 1 ? cnt[g.exp_ids[0]] : g.draws, g.draws);
    }
}

static void test_draws_follow_reference(void **state)
{
    (void)state;
    json_t *root = load_golden();
    json_t *cases = json_object_get(root, "cases");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        gcase g;
        case_load(json_array_get(cases, k), &g);
        ember_sampler *s = case_sampler(&g);
        int *cnt = calloc((size_t)g.n_vocab, sizeof *cnt);
        for (int d = 0; d < g.draws; d++) {
            ember_token t = ember_sampler_sample(s, g.logits);
            assert_true(t >= 0 && t < g.n_vocab);
            cnt[t]++;
        }
        check_counts(&g, cnt);
        free(cnt);
        ember_sampler_free(s);
        case_free(&g);
    }
    json_decref(root);
}


/* The head of the golden row (tests/common/logits_top_ref.h: a full sort),
 * k as the sampler asks for it. */
static void case_head(const gcase *g, int32_t k, ember_logits_top *h)
{
    int ids[EMBER_LOGITS_TOP_MAX];
    double lse;
    ref_logits_top(g->logits, g->n_vocab, k, ids, h->logit, &h->max, &lse);
    h->lse = (float)lse;
    h->n = k;
    for (int32_t i = 0; i < k; i++) h->id[i] = ids[i];
}

/* ember_sampler_sample_top: draws from a row's head follow the same
 * numpy reference as draws from the full row; a head too short to decide
 * is refused (EMBER_ERR_RANGE), never guessed. */
static void test_head_draws_follow_reference(void **state)
{
    (void)state;
    json_t *root = load_golden();
    json_t *cases = json_object_get(root, "cases");
    int n_head = 0, n_range = 0, n_full = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        gcase g;
        case_load(json_array_get(cases, c), &g);
        ember_sampler *s = case_sampler(&g);
        const int32_t k = ember_sampler_top_k(s);
        const bool needs_row = g.p.n_logit_bias > 0 || (g.p.penalty_last_n != 0 && (g.p.repeat_penalty != 1.0f ||
                               g.p.presence_penalty != 0.0f || g.p.frequency_penalty != 0.0f)) ||
                               (g.p.temp > 0 && g.p.top_k <= 0 && g.p.top_p >= 1.0f && g.p.min_p <= 0.0f);
        assert_true(needs_row == (k == 0));
        if (k == 0) {
            n_full++;
        } else {
            assert_true(k <= g.n_vocab && k <= EMBER_LOGITS_TOP_MAX);
            ember_logits_top h;
            case_head(&g, k, &h);
            int *cnt = calloc((size_t)g.n_vocab, sizeof *cnt);
            ember_token t = -1;
            ember_status st = ember_sampler_sample_top(s, &h, &t);
            if (st == EMBER_ERR_RANGE) {
                /* only when the reference's survivors reach past the head */
                assert_true(g.n_exp > k);
                n_range++;
            } else {
                assert_int_equal(st, EMBER_OK);
                cnt[t]++;
                for (int d = 1; d < g.draws; d++) {
                    assert_int_equal(ember_sampler_sample_top(s, &h, &t), EMBER_OK);
                    assert_true(t >= 0 && t < g.n_vocab);
                    cnt[t]++;
                }
                check_counts(&g, cnt);
                n_head++;
            }
            free(cnt);
        }
        ember_sampler_free(s);
        case_free(&g);
    }
    json_decref(root);
    /* the goldens exercise all three outcomes */
    assert_true(n_head >= 6);
    assert_true(n_range >= 1);
    assert_true(n_full >= 3);
}

/* With top-k on, the head holds exactly the chain's survivors in the
 * chain's order; with min-p alone they are drawn in id order on both
 * paths: the same seed draws the same tokens as the full row. */
static void same_tokens(const gcase *g, int draws)
{
    ember_sampler *a = case_sampler(g), *b = case_sampler(g);
    ember_logits_top h;
    case_head(g, ember_sampler_top_k(b), &h);
    for (int d = 0; d < draws; d++) {
        ember_token tb = -1;
        assert_int_equal(ember_sampler_sample_top(b, &h, &tb), EMBER_OK);
        const ember_token ta = ember_sampler_sample(a, g->logits);
        if (ta != tb) fail_msg("%s: draw %d: full row %d, head %d", g->name, d, ta, tb);
    }
    ember_sampler_free(a);
    ember_sampler_free(b);
}

static void test_head_min_p_same_tokens(void **state)
{
    (void)state;
    /* 1000 tokens, ~5 of them within min_p of the top: the head of 128
     * decides, and the draw must follow the full row's id order */
    gcase g;
    memset(&g, 0, sizeof g);
    g.name = "min_p_0.3_vocab_1000";
    g.n_vocab = 1000;
    g.logits = malloc(sizeof(float) * 1000);
    uint64_t x = 12345;
    for (int i = 0; i < 1000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        g.logits[i] = (float)((x >> 40) % 1000) / 100.f - 5.f;
    }
    g.logits[900] = 6.0f;
    g.logits[17] = 5.5f;
    g.logits[500] = 5.2f;
    g.logits[3] = 5.9f;
    g.logits[777] = 5.0f;
    g.p = ember_sampler_default_params();
    g.p.temp = 1.0f;
    g.p.top_k = 0;
    g.p.top_p = 1.0f;
    g.p.min_p = 0.3f;
    g.p.seed = 42;
    same_tokens(&g, 2000);
    free(g.logits);
}

static void test_head_same_tokens_as_full_row(void **state)
{
    (void)state;
    json_t *root = load_golden();
    json_t *cases = json_object_get(root, "cases");
    int n = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        gcase g;
        case_load(json_array_get(cases, c), &g);
        const bool plain = g.p.n_logit_bias == 0 && g.p.repeat_penalty == 1.0f && g.p.presence_penalty == 0.0f &&
                           g.p.frequency_penalty == 0.0f;
        const bool min_p_only = g.p.temp > 0 && g.p.top_k <= 0 && g.p.top_p >= 1.0f && g.p.min_p > 0.0f;
        if (plain && min_p_only) {
            same_tokens(&g, 2000);
            n++;
        } else if (g.p.top_k > 0 && plain) {
            ember_sampler *a = case_sampler(&g), *b = case_sampler(&g);
            ember_logits_top h;
            case_head(&g, ember_sampler_top_k(b), &h);
            for (int d = 0; d < 2000; d++) {
                ember_token tb = -1;
                assert_int_equal(ember_sampler_sample_top(b, &h, &tb), EMBER_OK);
                assert_int_equal(ember_sampler_sample(a, g.logits), tb);
            }
            ember_sampler_free(a);
            ember_sampler_free(b);
            n++;
        }
        case_free(&g);
    }
    json_decref(root);
    assert_true(n >= 5);
}

static void draw_seq(uint64_t seed, ember_token *out, int n, const float *logits, int32_t n_vocab)
{
    ember_sampler_params p = ember_sampler_default_params();
    p.seed = seed;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temp = 1.0f;
    ember_sampler *s = NULL;
    assert_int_equal(ember_sampler_new(&p, n_vocab, &s), EMBER_OK);
    for (int i = 0; i < n; i++)
        out[i] = ember_sampler_sample(s, logits);
    /* reset restores the seed's stream */
    ember_sampler_reset(s);
    assert_int_equal(ember_sampler_sample(s, logits), out[0]);
    ember_sampler_free(s);
}

static void test_same_seed_same_draws(void **state)
{
    (void)state;
    float logits[64];
    for (int i = 0; i < 64; i++)
        logits[i] = (float)((i * 37) % 11) * 0.3f;
    ember_token a[500], b[500], c[500];
    draw_seq(42, a, 500, logits, 64);
    draw_seq(42, b, 500, logits, 64);
    draw_seq(43, c, 500, logits, 64);
    assert_memory_equal(a, b, sizeof a);
    int differ = 0;
    for (int i = 0; i < 500; i++)
        differ += a[i] != c[i];
    assert_true(differ > 100);
}

static void test_bad_params_are_errors(void **state)
{
    (void)state;
    ember_sampler *s = (ember_sampler *)0x1;
    ember_sampler_params p = ember_sampler_default_params();
    assert_int_equal(ember_sampler_new(&p, 0, &s), EMBER_ERR_INVALID_ARG);
    assert_null(s);
    p.temp = NAN;
    assert_int_equal(ember_sampler_new(&p, 10, &s), EMBER_ERR_INVALID_ARG);
    p = ember_sampler_default_params();
    p.penalty_last_n = -2;
    assert_int_equal(ember_sampler_new(&p, 10, &s), EMBER_ERR_INVALID_ARG);
    p = ember_sampler_default_params();
    p.repeat_penalty = 0.0f;
    assert_int_equal(ember_sampler_new(&p, 10, &s), EMBER_ERR_INVALID_ARG);
    p = ember_sampler_default_params();
    ember_logit_bias lb = {10, 1.0f};
    p.logit_bias = &lb;
    p.n_logit_bias = 1;
    assert_int_equal(ember_sampler_new(&p, 10, &s), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_last_error(), "logit_bias[0].token 10"));
    p.n_logit_bias = 3;
    p.logit_bias = NULL;
    assert_int_equal(ember_sampler_new(&p, 10, &s), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_sampler_new(NULL, 10, &s), EMBER_ERR_INVALID_ARG);
    /* accept of an out-of-range token is ignored; free(NULL) is fine */
    p = ember_sampler_default_params();
    assert_int_equal(ember_sampler_new(&p, 10, &s), EMBER_OK);
    ember_sampler_accept(s, -1);
    ember_sampler_accept(s, 10);
    ember_sampler_free(s);
    ember_sampler_free(NULL);
}

static void test_nan_and_all_masked_logits(void **state)
{
    (void)state;
    float logits[8] = {NAN, 1.0f, NAN, 0.5f, NAN, NAN, NAN, NAN};
    ember_sampler_params p = ember_sampler_default_params();
    p.top_k = 0;
    ember_sampler *s = NULL;
    assert_int_equal(ember_sampler_new(&p, 8, &s), EMBER_OK);
    for (int i = 0; i < 200; i++) {
        ember_token t = ember_sampler_sample(s, logits);
        assert_true(t == 1 || t == 3);
    }
    ember_sampler_free(s);
    /* every token biased away: still a valid token, no crash */
    ember_logit_bias lb[2] = {{0, -INFINITY}, {1, -INFINITY}};
    float two[2] = {0.0f, 1.0f};
    p.logit_bias = lb;
    p.n_logit_bias = 2;
    assert_int_equal(ember_sampler_new(&p, 2, &s), EMBER_OK);
    ember_token t = ember_sampler_sample(s, two);
    assert_true(t == 0 || t == 1);
    ember_sampler_free(s);
    p.temp = 0.0f;
    assert_int_equal(ember_sampler_new(&p, 2, &s), EMBER_OK);
    t = ember_sampler_sample(s, two);
    assert_true(t == 0 || t == 1);
    ember_sampler_free(s);
}

/* greedy over a large vocabulary picks the argmax, lower id on ties */
static void test_greedy_large_vocab(void **state)
{
    (void)state;
    const int32_t n = 262144;
    float *l = malloc(sizeof(float) * (size_t)n);
    for (int32_t i = 0; i < n; i++)
        l[i] = (float)((i * 7919) % 1000) * 0.01f;
    l[200000] = 50.0f;
    l[100] = 50.0f;
    ember_sampler_params p = ember_sampler_default_params();
    p.temp = 0.0f;
    ember_sampler *s = NULL;
    assert_int_equal(ember_sampler_new(&p, n, &s), EMBER_OK);
    assert_int_equal(ember_sampler_sample(s, l), 100);
    ember_sampler_free(s);
    /* default chain over the same vocabulary: only the two tied tops survive min-p */
    p = ember_sampler_default_params();
    assert_int_equal(ember_sampler_new(&p, n, &s), EMBER_OK);
    for (int i = 0; i < 50; i++) {
        ember_token t = ember_sampler_sample(s, l);
        assert_true(t == 100 || t == 200000);
    }
    ember_sampler_free(s);
    free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_candidates_match_reference),
        cmocka_unit_test(test_draws_follow_reference),
        cmocka_unit_test(test_head_draws_follow_reference),
        cmocka_unit_test(test_head_same_tokens_as_full_row),
        cmocka_unit_test(test_head_min_p_same_tokens),
        cmocka_unit_test(test_same_seed_same_draws),
        cmocka_unit_test(test_bad_params_are_errors),
        cmocka_unit_test(test_nan_and_all_masked_logits),
        cmocka_unit_test(test_greedy_large_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
