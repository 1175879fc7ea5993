/* Paged KV cache block logic: allocation, fork (shared prefix, reference
 * counts), copy on write of a shared partial block, truncate (rollback),
 * remove, pool exhaustion (all-or-nothing append) and argument errors.
 * Expected values follow from the block arithmetic (block_tokens = 4). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "kv/kv.h"
#include "base/status.h"

static ember_kv *make(int32_t n_blocks, int32_t n_seq)
{
    ember_kv_params p = {.n_layer = 2, .n_embd_k = 32, .n_embd_v = 32, .type_k = EMBER_TYPE_F32, .type_v = EMBER_TYPE_F32,
                         .block_tokens = 4, .n_blocks = n_blocks, .n_seq_max = n_seq, .n_ctx = 64};
    ember_kv *kv = NULL;
    assert_int_equal(ember_kv_new(&p, &kv), EMBER_OK);
    return kv;
}

static ember_status append1(ember_kv *kv, ember_seq_id s, int32_t n) { return ember_kv_append(kv, &s, &n, 1); }

static void test_append_takes_whole_blocks(void **st)
{
    (void)st;
    ember_kv *kv = make(8, 2);
    assert_int_equal(ember_kv_free_blocks(kv), 8);
    assert_int_equal(append1(kv, 0, 5), EMBER_OK);            /* 5 tokens -> 2 blocks */
    assert_int_equal(ember_kv_seq_len(kv, 0), 5);
    assert_int_equal(ember_kv_free_blocks(kv), 6);
    assert_int_equal(append1(kv, 0, 3), EMBER_OK);            /* fills block 2 exactly */
    assert_int_equal(ember_kv_free_blocks(kv), 6);
    assert_int_equal(append1(kv, 0, 1), EMBER_OK);
    assert_int_equal(ember_kv_free_blocks(kv), 5);
    const int32_t *bl = ember_kv_seq_blocks(kv, 0);
    assert_non_null(bl);
    /* rows of positions follow the block table */
    assert_int_equal(ember_kv_row(kv, 0, 6), (int64_t)bl[1] * 4 + 2);
    assert_int_equal(ember_kv_row(kv, 0, 8), (int64_t)bl[2] * 4 + 0);
    ember_kv_free(kv);
}

static void test_fork_shares_and_cow_copies(void **st)
{
    (void)st;
    ember_kv *kv = make(8, 3);
    assert_int_equal(append1(kv, 0, 6), EMBER_OK);            /* blocks A(full) B(2 used) */
    const int32_t *b0 = ember_kv_seq_blocks(kv, 0);
    int32_t A = b0[0], B = b0[1];
    /* mark contents of block B in layer 1 so the copy can be checked */
    ember_kv_layer_view v = ember_kv_layer(kv, 1);
    float *krow = (float *)((char *)v.k + (size_t)(B * 4 + 1) * v.k_row_bytes);
    krow[0] = 42.0f;
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 6), EMBER_OK);
    assert_int_equal(ember_kv_seq_len(kv, 1), 6);
    assert_int_equal(ember_kv_block_refs(kv, A), 2);
    assert_int_equal(ember_kv_block_refs(kv, B), 2);
    assert_int_equal(ember_kv_free_blocks(kv), 6);
    /* writing into the shared partial block B copies it first */
    assert_int_equal(ember_kv_blocks_needed(kv, 1, 1), 1);
    assert_int_equal(append1(kv, 1, 1), EMBER_OK);
    const int32_t *b1 = ember_kv_seq_blocks(kv, 1);
    assert_int_equal(b1[0], A);
    assert_int_not_equal(b1[1], B);
    assert_int_equal(ember_kv_block_refs(kv, B), 1);
    assert_int_equal(ember_kv_block_refs(kv, b1[1]), 1);
    float *copied = (float *)((char *)v.k + (size_t)(b1[1] * 4 + 1) * v.k_row_bytes);
    assert_true(copied[0] == 42.0f);
    assert_int_equal(ember_kv_free_blocks(kv), 5);
    /* a fork at a block boundary shares only full blocks: no copy needed */
    assert_int_equal(ember_kv_seq_fork(kv, 0, 2, 4), EMBER_OK);
    assert_int_equal(ember_kv_block_refs(kv, A), 3);
    assert_int_equal(ember_kv_blocks_needed(kv, 2, 1), 1);    /* one new block */
    /* removing releases references; blocks return only at refcount 0 */
    assert_int_equal(ember_kv_seq_remove(kv, 0), EMBER_OK);
    assert_int_equal(ember_kv_block_refs(kv, A), 2);
    assert_int_equal(ember_kv_block_refs(kv, B), 0);
    assert_int_equal(ember_kv_free_blocks(kv), 6);
    assert_int_equal(ember_kv_seq_remove(kv, 1), EMBER_OK);
    assert_int_equal(ember_kv_seq_remove(kv, 2), EMBER_OK);
    assert_int_equal(ember_kv_free_blocks(kv), 8);
    ember_kv_free(kv);
}

static void test_truncate_rolls_back(void **st)
{
    (void)st;
    ember_kv *kv = make(8, 2);
    assert_int_equal(append1(kv, 0, 10), EMBER_OK);           /* 3 blocks */
    assert_int_equal(ember_kv_free_blocks(kv), 5);
    assert_int_equal(ember_kv_seq_truncate(kv, 0, 5), EMBER_OK); /* keeps 2 blocks */
    assert_int_equal(ember_kv_seq_len(kv, 0), 5);
    assert_int_equal(ember_kv_free_blocks(kv), 6);
    assert_int_equal(ember_kv_seq_truncate(kv, 0, 5), EMBER_OK); /* no-op */
    assert_int_equal(ember_kv_seq_truncate(kv, 0, 6), EMBER_ERR_RANGE);
    assert_int_equal(ember_kv_seq_truncate(kv, 0, -1), EMBER_ERR_RANGE);
    /* truncating inside a block shared with a fork: next write copies it */
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 5), EMBER_OK);
    assert_int_equal(ember_kv_seq_truncate(kv, 0, 4), EMBER_OK);
    assert_int_equal(ember_kv_blocks_needed(kv, 0, 1), 1);    /* new block, shared one untouched */
    assert_int_equal(ember_kv_seq_truncate(kv, 1, 2), EMBER_OK);
    assert_int_equal(ember_kv_blocks_needed(kv, 1, 1), 1);    /* block 0 shared with seq 0: copy */
    assert_int_equal(ember_kv_seq_truncate(kv, 0, 0), EMBER_OK);
    assert_int_equal(ember_kv_blocks_needed(kv, 1, 1), 0);    /* now exclusive: write in place */
    ember_kv_free(kv);
}

static void test_pool_exhaustion_is_all_or_nothing(void **st)
{
    (void)st;
    ember_kv *kv = make(4, 3);
    assert_int_equal(append1(kv, 0, 8), EMBER_OK);            /* 2 blocks */
    ember_seq_id ids[2] = {1, 2};
    int32_t n[2] = {4, 5};                                    /* 1 + 2 blocks > 2 free */
    assert_int_equal(ember_kv_append(kv, ids, n, 2), EMBER_ERR_RANGE);
    assert_non_null(strstr(ember_last_error(), "pool full"));
    assert_int_equal(ember_kv_seq_len(kv, 1), 0);
    assert_int_equal(ember_kv_seq_len(kv, 2), 0);
    assert_int_equal(ember_kv_free_blocks(kv), 2);
    n[1] = 4;
    assert_int_equal(ember_kv_append(kv, ids, n, 2), EMBER_OK);
    assert_int_equal(ember_kv_free_blocks(kv), 0);
    /* a shared partial block needs a free block to copy into */
    assert_int_equal(ember_kv_seq_truncate(kv, 2, 3), EMBER_OK);
    assert_int_equal(ember_kv_free_blocks(kv), 0);
    ember_kv_free(kv);
}

static int32_t hook_calls, hook_dst, hook_src;
static void hook(void *ud, const ember_kv *kv, int32_t il, int32_t dst, int32_t src)
{
    (void)kv;
    assert_int_equal(*(int *)ud, 7);
    if (il != 0) return;   /* once per layer (2 layers): count layer 0 */
    hook_calls++;
    hook_dst = dst;
    hook_src = src;
}

static void test_copy_hook_sees_cow(void **st)
{
    (void)st;
    ember_kv *kv = make(8, 2);
    int ud = 7;
    ember_kv_set_copy_hook(kv, hook, &ud);
    assert_int_equal(append1(kv, 0, 6), EMBER_OK);
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 6), EMBER_OK);
    assert_int_equal(hook_calls, 0);
    int32_t shared = ember_kv_seq_blocks(kv, 1)[1];
    assert_int_equal(append1(kv, 1, 1), EMBER_OK);
    assert_int_equal(hook_calls, 1);
    assert_int_equal(hook_src, shared);
    assert_int_equal(hook_dst, ember_kv_seq_blocks(kv, 1)[1]);
    assert_int_equal(append1(kv, 0, 1), EMBER_OK);   /* now exclusive: no copy */
    assert_int_equal(hook_calls, 1);
    ember_kv_free(kv);
}

static void test_errors(void **st)
{
    (void)st;
    ember_kv *kv = make(4, 2);
    assert_int_equal(append1(kv, 2, 1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(append1(kv, -1, 1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(append1(kv, 0, 65), EMBER_ERR_RANGE);     /* n_ctx 64 */
    assert_non_null(strstr(ember_last_error(), "n_ctx"));
    ember_seq_id dup[2] = {0, 0};
    int32_t n[2] = {1, 1};
    assert_int_equal(ember_kv_append(kv, dup, n, 2), EMBER_ERR_INVALID_ARG);
    assert_int_equal(append1(kv, 0, 3), EMBER_OK);
    assert_int_equal(ember_kv_seq_fork(kv, 0, 0, 1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 4), EMBER_ERR_RANGE);
    assert_int_equal(ember_kv_seq_fork(kv, 0, 5, 1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 3), EMBER_OK);
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 3), EMBER_ERR_INVALID_ARG); /* dst not empty */
    assert_int_equal(ember_kv_seq_remove(kv, 9), EMBER_ERR_INVALID_ARG);
    ember_kv_params bad = {.n_layer = 1, .n_embd_k = 33, .n_embd_v = 32, .type_k = EMBER_TYPE_Q8_0, .type_v = EMBER_TYPE_F16,
                           .block_tokens = 4, .n_blocks = 1, .n_seq_max = 1, .n_ctx = 4};
    ember_kv *k2 = NULL;
    assert_int_equal(ember_kv_new(&bad, &k2), EMBER_ERR_INVALID_ARG);   /* 33 not whole q8_0 blocks */
    assert_null(k2);
    ember_kv_free(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_takes_whole_blocks),
        cmocka_unit_test(test_fork_shares_and_cow_copies),
        cmocka_unit_test(test_truncate_rolls_back),
        cmocka_unit_test(test_pool_exhaustion_is_all_or_nothing),
        cmocka_unit_test(test_copy_hook_sees_cow),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
