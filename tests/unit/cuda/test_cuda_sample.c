/* CUDA row heads (cuda_sample.cu, ember_cuda_logits_top, its two halves
 * _start / _finish, and ember_cuda_head_tokens' argmax copy) against
 * tests/common/logits_top_ref.h: a full qsort of (logit, id) and a long
 * double log-partition function. Ids and logits must be equal; the lse
 * within 1e-5 relative (chunk partial sums in float with __expf, combined
 * in double). Vocabularies of Gemma 3 (262,144), SmolLM2 (49,152) and odd
 * sizes; rows with ties, NaN and -inf; k = 1 (argmax), 40, 64, 128.
 * Without EMBER_CUDA or without a GPU every test skips and says why. */
#include "cuda_test.h"

#ifdef EMBER_CUDA
#include "../../common/logits_top_ref.h"   /* inside: unused (static) without CUDA */

static void run_case(int64_t n_vocab, int n_rows, int k, int kind)
{
    const int64_t stride = n_vocab + 7;   /* rows at arbitrary offsets */
    float *x = malloc(sizeof *x * (size_t)(stride * n_rows));
    for (int64_t i = 0; i < stride * n_rows; i++) {
        float v = test_randf(-12.f, 12.f);
        if (kind == 1) v = (float)(int)(v * 0.5f);           /* many ties */
        if (kind == 2 && i % 97 == 0) v = NAN;
        if (kind == 2 && i % 89 == 0) v = -INFINITY;
        x[i] = v;
    }
    if (kind == 2)   /* a row of -inf only */
        for (int64_t i = 0; i < n_vocab; i++) x[i] = -INFINITY;
    float *d = dev_new(x, sizeof *x * (size_t)(stride * n_rows));
    int64_t off[40];
    for (int r = 0; r < n_rows; r++) off[r] = (int64_t)(n_rows - 1 - r) * stride;   /* any order */
    const size_t wb = ember_cuda_logits_top_work_bytes(n_rows, n_vocab, k);
    const size_t rb = ember_cuda_logits_top_result_bytes(n_rows, k);
    void *work = dev_new(NULL, wb), *res = dev_new(NULL, rb), *host = NULL;
    CU_OK(ember_cuda_host_alloc(test_cu, rb, &host));
    ember_logits_top *got = malloc(sizeof *got * (size_t)n_rows);
    CU_OK(ember_cuda_logits_top(test_cu, d, off, n_rows, n_vocab, k, work, wb, res, host, got));
    int ids[EMBER_LOGITS_TOP_MAX];
    float lg[EMBER_LOGITS_TOP_MAX], mx;
    double lse;
    for (int r = 0; r < n_rows; r++) {
        ref_logits_top(x + off[r], (int)n_vocab, k, ids, lg, &mx, &lse);
        assert_int_equal(got[r].n, k);
        for (int i = 0; i < k; i++) {
            if (got[r].id[i] != ids[i] || !(got[r].logit[i] == lg[i]))
                fail_msg("vocab %lld k %d kind %d row %d [%d]: id %d logit %g, want %d %g", (long long)n_vocab, k, kind, r,
                         i, got[r].id[i], (double)got[r].logit[i], ids[i], (double)lg[i]);
        }
        assert_true(got[r].max == mx);
        if (isinf(lse)) assert_true(isinf(got[r].lse) && got[r].lse < 0);
        else if (fabs(got[r].lse - lse) > 1e-5 * fmax(1.0, fabs(lse)))
            fail_msg("vocab %lld row %d: lse %.9g, want %.9g", (long long)n_vocab, r, (double)got[r].lse, lse);
    }
    /* the two halves (ember_cuda_logits_top_start / _finish) with work
     * queued between them: the same heads; and the argmax of each row
     * copied to the device by ember_cuda_head_tokens (the step's tokens of
     * ember_decode_fed), entry 0 left as it was (-1) */
    ember_logits_top *got2 = malloc(sizeof *got2 * (size_t)n_rows);
    const int32_t n_tok = n_rows + 1;
    int32_t rows_of[41], tok_host[41];
    rows_of[0] = -1;
    for (int r = 0; r < n_rows; r++) rows_of[1 + r] = n_rows - 1 - r;
    for (int i = 0; i < n_tok; i++) tok_host[i] = 1000 + i;
    int32_t *tok = dev_new(tok_host, sizeof tok_host);
    CU_OK(ember_cuda_logits_top_start(test_cu, d, off, n_rows, n_vocab, k, work, wb, res, host));
    CU_OK(ember_cuda_head_tokens(test_cu, res, n_rows, k, rows_of, n_tok, tok));
    CU_OK(ember_cuda_logits_top_finish(test_cu, host, n_rows, k, got2));
    for (int r = 0; r < n_rows; r++) {
        assert_int_equal(got2[r].n, k);
        assert_memory_equal(got2[r].id, got[r].id, sizeof(ember_token) * (size_t)k);
        assert_memory_equal(got2[r].logit, got[r].logit, sizeof(float) * (size_t)k);
        assert_true(got2[r].max == got[r].max && got2[r].lse == got[r].lse);
    }
    CU_OK(ember_cuda_synchronize(test_cu));
    CU_OK(ember_cuda_download(test_cu, tok_host, tok, sizeof tok_host));
    assert_int_equal(tok_host[0], 1000);
    for (int r = 0; r < n_rows; r++) {
        ref_logits_top(x + off[n_rows - 1 - r], (int)n_vocab, 1, ids, lg, &mx, &lse);
        assert_int_equal(tok_host[1 + r], ids[0]);
    }
    dev_free(tok, sizeof tok_host);
    free(got2);
    free(got);
    ember_cuda_host_free(test_cu, host, rb);
    dev_free(work, wb);
    dev_free(res, rb);
    dev_free(d, sizeof *x * (size_t)(stride * n_rows));
    free(x);
}

static void test_heads_gemma_vocab(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const int ks[] = {1, 40, 64, 128};
    for (int i = 0; i < 4; i++) run_case(262144, 3, ks[i], 0);
    run_case(262144, 2, 1, 1);
    run_case(262144, 2, 128, 1);
    run_case(262144, 3, 1, 2);
    run_case(262144, 3, 64, 2);
}

static void test_heads_other_vocabs(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    run_case(49152, 1, 1, 0);
    run_case(49152, 33, 40, 0);   /* more rows than one launch takes */
    run_case(49152, 8, 128, 1);
    run_case(1000, 2, 128, 0);
    run_case(4097, 2, 64, 2);
    run_case(128, 1, 128, 0);
}

static void test_bad_args(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    int64_t off = 0;
    ember_logits_top t;
    float *d = dev_new(NULL, 64);
    assert_int_equal(ember_cuda_logits_top(test_cu, d, &off, 1, 16, 0, d, 64, d, &t, &t), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_logits_top(test_cu, d, &off, 1, 16, 129, d, 64, d, &t, &t), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_logits_top(test_cu, d, &off, 1, 16, 1, d, 0, d, &t, &t), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_logits_top_start(test_cu, d, &off, 1, 16, 0, d, 64, d, &t), EMBER_ERR_INVALID_ARG);
    const int32_t bad_row[1] = {3}, rows65[65] = {0};
    assert_int_equal(ember_cuda_head_tokens(test_cu, d, 2, 1, bad_row, 1, (int32_t *)d), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_cuda_head_tokens(test_cu, d, 2, 1, rows65, 65, (int32_t *)d), EMBER_ERR_INVALID_ARG);
    dev_free(d, 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heads_gemma_vocab),
        cmocka_unit_test(test_heads_other_vocabs),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else /* !EMBER_CUDA */

static void test_cuda_not_built(void **state)
{
    (void)state;
    print_message("built without -DEMBER_CUDA=ON: CUDA sampling tests skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
