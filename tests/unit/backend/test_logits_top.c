/* The host row heads (src/backend/logits_top.c, the CPU backend's
 * logits_top op) against tests/common/logits_top_ref.h: a full qsort and a
 * long double log-partition function. Rows hold ties, NaN, -inf and a row
 * of -inf only; k from 1 (the argmax) to EMBER_LOGITS_TOP_MAX. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/logits_top.h"
#include "../../common/logits_top_ref.h"

static uint64_t rng = 88172645463325252ull;
static float randf(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * 0x1.0p-53) * 20.f - 10.f;
}

static void check_rows(const float *x, int n_rows, int n, int k)
{
    const float **rows = calloc((size_t)n_rows, sizeof *rows);
    ember_logits_top *got = calloc((size_t)n_rows, sizeof *got);
    assert_true(rows && got && n_rows > 0);
    for (int r = 0; r < n_rows; r++) rows[r] = x + (size_t)r * n;
    ember_logits_top_host(rows, n_rows, n, k, got);
    int ids[EMBER_LOGITS_TOP_MAX];
    float lg[EMBER_LOGITS_TOP_MAX], mx;
    double lse;
    for (int r = 0; r < n_rows; r++) {
        ref_logits_top(rows[r], n, k, ids, lg, &mx, &lse);
        assert_int_equal(got[r].n, k);
        for (int i = 0; i < k; i++) {
            assert_int_equal(got[r].id[i], ids[i]);
            assert_true(got[r].logit[i] == lg[i]);
        }
        assert_true(got[r].max == mx);
        if (isinf(lse)) assert_true(isinf(got[r].lse) && got[r].lse < 0);
        else assert_true(fabs(got[r].lse - lse) <= 1e-6 * fmax(1.0, fabs(lse)));
    }
    free(rows);
    free(got);
}

static void test_random_rows(void **state)
{
    (void)state;
    const int n = 5000, n_rows = 4;
    float *x = malloc(sizeof *x * n * n_rows);
    for (int i = 0; i < n * n_rows; i++) x[i] = randf();
    const int ks[] = {1, 2, 40, 64, 127, EMBER_LOGITS_TOP_MAX};
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) check_rows(x, n_rows, n, ks[j]);
    free(x);
}

static void test_ties_nan_inf(void **state)
{
    (void)state;
    const int n = 3000, n_rows = 3;
    float *x = malloc(sizeof *x * n * n_rows);
    for (int i = 0; i < n; i++) x[i] = (float)((int)(randf() * 2.f)) * 0.5f;   /* many equal values */
    for (int i = 0; i < n; i++) {
        const float v = randf();
        x[n + i] = i % 7 == 0 ? NAN : (i % 5 == 0 ? -INFINITY : v);
    }
    for (int i = 0; i < n; i++) x[2 * n + i] = -INFINITY;
    check_rows(x, n_rows, n, 1);
    check_rows(x, n_rows, n, 100);
    free(x);
}

static void test_short_row(void **state)
{
    (void)state;
    const float x[5] = {1.f, 3.f, 3.f, -2.f, 0.5f};
    check_rows(x, 1, 5, 5);
    check_rows(x, 1, 5, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_rows),
        cmocka_unit_test(test_ties_nan_inf),
        cmocka_unit_test(test_short_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
