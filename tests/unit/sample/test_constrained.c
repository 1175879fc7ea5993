/* ember_sample_constrained (src/sample/constrained.c) on a small vocabulary.
 *
 * Oracles are the definitions, computed here independently of the sampler
 * and the matcher: the allowed set of each state is written by hand from the
 * grammar, the target distribution is softmax over the allowed tokens'
 * logits (no truncation) or the top-k candidates restricted to the allowed
 * set (top-k), greedy is the argmax over the allowed set. Draws are compared
 * with those distributions by a chi-square bound (alpha ~ 1e-4). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "sample/constrained.h"
#include "sample/grammar.h"
#include "sample/sampler.h"

/* tokens 0..25 "a".."z", 26..35 "0".."9", 36 "{", 37 "}", 38 ",", 39 EOS */
#define NV 40
static const char *piece(int i, char *buf)
{
    if (i < 26) buf[0] = (char)('a' + i);
    else if (i < 36) buf[0] = (char)('0' + i - 26);
    else buf[0] = "{},"[i - 36];
    buf[1] = 0;
    return buf;
}

typedef struct fix { ember_grammar *g; ember_grammar_vocab *tv; ember_grammar_state *st; } fix;

static void fix_new(fix *f, const char *gbnf)
{
    static char bufs[NV][2];
    const char *pieces[NV];
    size_t lens[NV];
    bool eog[NV] = {0};
    for (int i = 0; i < NV - 1; i++) { pieces[i] = piece(i, bufs[i]); lens[i] = 1; }
    pieces[NV - 1] = "";
    lens[NV - 1] = 0;
    eog[NV - 1] = true;
    assert_int_equal(ember_grammar_vocab_new(pieces, lens, NULL, NULL, NV, eog, &f->tv), EMBER_OK);
    assert_int_equal(ember_grammar_parse(gbnf, strlen(gbnf), NULL, &f->g), EMBER_OK);
    assert_int_equal(ember_grammar_state_new(f->g, f->tv, &f->st), EMBER_OK);
}

static void fix_free(fix *f)
{
    ember_grammar_state_free(f->st);
    ember_grammar_free(f->g);
    ember_grammar_vocab_free(f->tv);
}

static ember_sampler *sampler(float temp, int32_t top_k, uint64_t seed)
{
    ember_sampler_params p = ember_sampler_default_params();
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    ember_sampler *s;
    assert_int_equal(ember_sampler_new(&p, NV, &s), EMBER_OK);
    return s;
}

static void logits_fill(float *l, unsigned seed)
{
    for (int i = 0; i < NV; i++) {
        seed = seed * 1103515245u + 12345u;
        l[i] = (float)((seed >> 8) % 1000) / 250.0f - 2.0f;   /* [-2, 2) */
    }
}

/* chi-square of counts against probabilities (cells with p > 0); fails on
 * a draw outside the support */
static void check_draws(const int *count, const double *p, int n_draws)
{
    double chi = 0.0;
    int df = -1;
    for (int i = 0; i < NV; i++) {
        if (p[i] == 0.0) {
            if (count[i]) fail_msg("token %d drawn %d times, probability 0", i, count[i]);
            continue;
        }
        double e = p[i] * n_draws;
        chi += (count[i] - e) * (count[i] - e) / e;
        df++;
    }
    /* Wilson-Hilferty: the 1 - 1e-4 quantile of chi-square(df) */
    double z = 3.719, k = df > 0 ? df : 1;
    double q = k * pow(1.0 - 2.0 / (9.0 * k) + z * sqrt(2.0 / (9.0 * k)), 3.0);
    if (chi > q) fail_msg("chi-square %.1f over %.1f (df %d)", chi, q, df);
}

/* allowed at the start of "root ::= [a-e] [a-z]* | [0-9]+": a..e and digits */
static bool allowed_start(int i) { return i < 5 || (i >= 26 && i < 36); }

static void test_distribution_no_truncation(void **unused)
{
    (void)unused;
    fix f;
    fix_new(&f, "root ::= [a-e] [a-z]* | [0-9]+");
    float l[NV], scratch[NV];
    logits_fill(l, 7);
    l[20] = 6.0f;   /* the unconstrained favourite "u" is not allowed */
    double p[NV] = {0}, z = 0.0;
    for (int i = 0; i < NV; i++) if (allowed_start(i)) z += exp(l[i]);
    for (int i = 0; i < NV; i++) p[i] = allowed_start(i) ? exp(l[i]) / z : 0.0;
    ember_sampler *s = sampler(1.0f, 0, 11);
    int count[NV] = {0}, n = 20000;
    for (int k = 0; k < n; k++) {
        ember_token t;
        assert_int_equal(ember_sample_constrained(s, f.st, l, NV, scratch, &t), EMBER_OK);
        count[t]++;
    }
    check_draws(count, p, n);
    ember_sampler_free(s);
    fix_free(&f);
}

static void test_distribution_top_k(void **unused)
{
    (void)unused;
    fix f;
    fix_new(&f, "root ::= [a-e] [a-z]* | [0-9]+");
    float l[NV], scratch[NV];
    logits_fill(l, 3);
    /* top 4: "u" (not allowed), "b", "7", "x" (not allowed) */
    l[20] = 8.0f; l[1] = 7.0f; l[33] = 6.5f; l[23] = 6.0f;
    double p[NV] = {0};
    double z = exp(7.0) + exp(6.5);
    p[1] = exp(7.0) / z;
    p[33] = exp(6.5) / z;
    ember_sampler *s = sampler(1.0f, 4, 5);
    int count[NV] = {0}, n = 20000;
    for (int k = 0; k < n; k++) {
        ember_token t;
        assert_int_equal(ember_sample_constrained(s, f.st, l, NV, scratch, &t), EMBER_OK);
        count[t]++;
    }
    check_draws(count, p, n);
    /* none of the top 4 allowed: the chain over the allowed tokens (top 4 of them) */
    l[1] = -5.0f; l[33] = -5.0f;
    l[22] = 7.5f; l[24] = 7.2f;   /* "w", "y": top 4 is u w y x, all rejected */
    int idx[NV], m = 0;
    for (int i = 0; i < NV; i++) if (allowed_start(i)) idx[m++] = i;
    for (int a = 0; a < m; a++)   /* sort allowed by logit, descending */
        for (int b = a + 1; b < m; b++)
            if (l[idx[b]] > l[idx[a]]) { int t = idx[a]; idx[a] = idx[b]; idx[b] = t; }
    memset(p, 0, sizeof p);
    z = 0.0;
    for (int a = 0; a < 4; a++) z += exp(l[idx[a]]);
    for (int a = 0; a < 4; a++) p[idx[a]] = exp(l[idx[a]]) / z;
    memset(count, 0, sizeof count);
    for (int k = 0; k < n; k++) {
        ember_token t;
        assert_int_equal(ember_sample_constrained(s, f.st, l, NV, scratch, &t), EMBER_OK);
        count[t]++;
    }
    check_draws(count, p, n);
    ember_sampler_free(s);
    fix_free(&f);
}

static void test_greedy_and_same_as_unconstrained(void **unused)
{
    (void)unused;
    fix f;
    fix_new(&f, "root ::= [a-e] [a-z]* | [0-9]+");
    float l[NV], scratch[NV];
    for (unsigned seed = 1; seed < 200; seed++) {
        logits_fill(l, seed);
        int best = -1;
        for (int i = 0; i < NV; i++) if (allowed_start(i) && (best < 0 || l[i] > l[best])) best = i;
        ember_sampler *s = sampler(0.0f, 40, 1);
        ember_token t;
        assert_int_equal(ember_sample_constrained(s, f.st, l, NV, scratch, &t), EMBER_OK);
        assert_int_equal(t, best);
        ember_sampler_free(s);
    }
    ember_grammar_state_free(f.st);
    ember_grammar_free(f.g);
    /* a grammar that allows every letter: the same draws as the sampler alone */
    assert_int_equal(ember_grammar_parse("root ::= [a-z]*", 15, NULL, &f.g), EMBER_OK);
    assert_int_equal(ember_grammar_state_new(f.g, f.tv, &f.st), EMBER_OK);
    for (int i = 0; i < NV; i++) l[i] = i < 26 ? (float)(i % 7) * 0.3f : -INFINITY;
    ember_sampler *a = sampler(0.9f, 10, 77), *b = sampler(0.9f, 10, 77);
    for (int k = 0; k < 500; k++) {
        ember_token t;
        assert_int_equal(ember_sample_constrained(a, f.st, l, NV, scratch, &t), EMBER_OK);
        assert_int_equal(t, ember_sampler_sample(b, l));
    }
    ember_sampler_free(a);
    ember_sampler_free(b);
    fix_free(&f);
}

static void test_sparse_state_and_errors(void **unused)
{
    (void)unused;
    fix f;
    fix_new(&f, "root ::= \"{\" [0-9] \"}\"");
    float l[NV], scratch[NV];
    logits_fill(l, 9);
    l[36] = -30.0f;   /* "{" far below everything: found by the masked draw */
    ember_sampler *s = sampler(0.0f, 40, 1);
    ember_token t;
    assert_int_equal(ember_sample_constrained(s, f.st, l, NV, scratch, &t), EMBER_OK);
    assert_int_equal(t, 36);
    assert_int_equal(ember_grammar_accept(f.st, t), EMBER_OK);
    ember_sampler *r = sampler(1.0f, 3, 2);
    assert_int_equal(ember_sample_constrained(r, f.st, l, NV, scratch, &t), EMBER_OK);
    assert_true(t >= 26 && t < 36);
    assert_int_equal(ember_grammar_accept(f.st, t), EMBER_OK);
    assert_int_equal(ember_grammar_accept(f.st, 37), EMBER_OK);
    /* only EOS is left; then nothing */
    assert_int_equal(ember_sample_constrained(r, f.st, l, NV, scratch, &t), EMBER_OK);
    assert_int_equal(t, NV - 1);
    assert_int_equal(ember_grammar_accept(f.st, t), EMBER_OK);
    assert_int_equal(ember_sample_constrained(r, f.st, l, NV, scratch, &t), EMBER_ERR_NOT_FOUND);
    assert_int_equal(t, -1);
    assert_int_equal(ember_sample_constrained(NULL, f.st, l, NV, scratch, &t), EMBER_ERR_INVALID_ARG);
    ember_sampler_free(s);
    ember_sampler_free(r);
    fix_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distribution_no_truncation),
        cmocka_unit_test(test_distribution_top_k),
        cmocka_unit_test(test_greedy_and_same_as_unconstrained),
        cmocka_unit_test(test_sparse_state_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
