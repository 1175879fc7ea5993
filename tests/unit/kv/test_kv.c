/* Paged KV cache block logic: allocation, fork (shared prefix, reference
 * counts), copy on write of a shared partial block, truncate (rollback),
 * remove, pool exhaustion (all-or-nothing append) and argument errors; per-
 * layer widths and the sliding-window group (blocks released behind the
 * window, positions in the window never aliased, cut-backs refused once their
 * window is gone). Expected values follow from the block arithmetic
 * (block_tokens = 4). */
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

/* Per-layer widths and the sliding-window group. Layers: 0 full (32 f32
 * per row), 1 sliding (16), 2 none (a KV-shared layer). block_tokens 4,
 * window 6, step 4, margin one block: a sequence holds at most
 * (6 + 4 + 4 + 4 - 2) / 4 + 2 = 6 sliding blocks, so 2 sequences get 12. */
static ember_kv *make_swa(int32_t n_blocks)
{
    static const int64_t ek[3] = {32, 16, 0}, ev[3] = {32, 16, 0};
    static const bool swa[3] = {false, true, false};
    ember_kv_params p = {.n_layer = 3, .layer_n_embd_k = ek, .layer_n_embd_v = ev, .layer_swa = swa, .n_swa = 6,
                         .n_swa_step = 4, .type_k = EMBER_TYPE_F32, .type_v = EMBER_TYPE_F32,
                         .block_tokens = 4, .n_blocks = n_blocks, .n_seq_max = 2, .n_ctx = 64};
    ember_kv *kv = NULL;
    assert_int_equal(ember_kv_new(&p, &kv), EMBER_OK);
    return kv;
}

/* Append and advance seq by n (<= 4) positions, writing marker pos + 1000 *
 * (seq + 1) into the first K element of each new row of both stored layers. */
static void step(ember_kv *kv, ember_seq_id seq, int32_t n)
{
    const int32_t len = ember_kv_seq_len(kv, seq);
    assert_int_equal(append1(kv, seq, n), EMBER_OK);
    assert_int_equal(ember_kv_swa_advance(kv, &seq, &n, 1), EMBER_OK);
    for (int32_t pos = len; pos < len + n; pos++)
        for (int32_t il = 0; il < 2; il++) {
            const ember_kv_layer_view v = ember_kv_layer(kv, il);
            const int64_t row = ember_kv_group_row(kv, ember_kv_layer_group(kv, il), seq, pos);
            assert_true(row >= 0 && row < v.n_rows);
            ((float *)((char *)v.k + (size_t)row * v.k_row_bytes))[0] = (float)(pos + 1000 * (seq + 1));
        }
}

/* Every position a query at `len` can see (the window of 6) still reads its own marker. */
static void check_window(ember_kv *kv, ember_seq_id seq, int32_t marker_seq)
{
    const int32_t len = ember_kv_seq_len(kv, seq);
    const ember_kv_layer_view v = ember_kv_layer(kv, 1);
    for (int32_t pos = len > 6 ? len - 6 : 0; pos < len; pos++) {
        const int64_t row = ember_kv_group_row(kv, EMBER_KV_GROUP_SWA, seq, pos);
        assert_true(row >= 0);
        assert_true(((float *)((char *)v.k + (size_t)row * v.k_row_bytes))[0] == (float)(pos + 1000 * (marker_seq + 1)));
    }
}

static void test_swa_group_keeps_only_the_window(void **st)
{
    (void)st;
    ember_kv *kv = make_swa(32);
    assert_true(ember_kv_has_swa_group(kv));
    assert_int_equal(ember_kv_layer_group(kv, 0), EMBER_KV_GROUP_FULL);
    assert_int_equal(ember_kv_layer_group(kv, 1), EMBER_KV_GROUP_SWA);
    assert_int_equal(ember_kv_group_n_blocks(kv, EMBER_KV_GROUP_SWA), 12);
    const ember_kv_layer_view v2 = ember_kv_layer(kv, 2);
    assert_null(v2.k);
    assert_int_equal(v2.n_rows, 0);
    assert_int_equal(ember_kv_layer(kv, 1).n_rows, 48);
    assert_int_equal(ember_kv_layer(kv, 1).k_row_bytes, 64);
    /* 32 blocks x 4 rows x (128 + 128) bytes + 12 x 4 x (64 + 64) */
    assert_int_equal(ember_kv_bytes(kv), 32 * 4 * 256 + 12 * 4 * 128);
    for (int32_t i = 0; i < 10; i++) {
        step(kv, 0, 4);
        check_window(kv, 0, 0);
        const int32_t len = ember_kv_seq_len(kv, 0);
        /* the last advance started at a = len - 4 and kept blocks from (a - 6 + 1 - 4) / 4 */
        const int32_t a = len - 4, lo = a - 9 > 0 ? (a - 9) / 4 : 0;
        const int32_t *tab = ember_kv_group_blocks(kv, EMBER_KV_GROUP_SWA, 0);
        for (int32_t j = 0; j < lo; j++) assert_int_equal(tab[j], -1);
        assert_int_equal(ember_kv_group_free_blocks(kv, EMBER_KV_GROUP_SWA), 12 - (len / 4 - lo));
        assert_true(len / 4 - lo <= 6);
        assert_int_equal(ember_kv_free_blocks(kv), 32 - len / 4);   /* the full group keeps everything */
    }
    /* 40 positions, sliding blocks 6..9 held (positions 24..39) */
    assert_int_equal(ember_kv_seq_truncate(kv, 0, 30), EMBER_OK);   /* window of 30 starts at 25: held */
    check_window(kv, 0, 0);
    assert_int_equal(ember_kv_seq_truncate(kv, 0, 28), EMBER_ERR_RANGE);   /* needs 23: released */
    assert_non_null(strstr(ember_last_error(), "sliding-window"));
    assert_int_equal(ember_kv_seq_len(kv, 0), 30);
    /* forks: only where the window is held */
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 20), EMBER_ERR_RANGE);
    assert_int_equal(ember_kv_seq_len(kv, 1), 0);
    assert_int_equal(ember_kv_seq_fork(kv, 0, 1, 30), EMBER_OK);
    check_window(kv, 1, 0);
    /* both write into the shared partial block 7 (positions 28..31): copies */
    step(kv, 1, 2);
    step(kv, 0, 1);
    check_window(kv, 0, 0);
    {
        const ember_kv_layer_view v = ember_kv_layer(kv, 1);
        const int64_t r1 = ember_kv_group_row(kv, EMBER_KV_GROUP_SWA, 1, 30), r0 = ember_kv_group_row(kv, EMBER_KV_GROUP_SWA, 0, 30);
        assert_true(r1 != r0);
        assert_true(((float *)((char *)v.k + (size_t)r1 * v.k_row_bytes))[0] == 30 + 2000.0f);
        assert_true(((float *)((char *)v.k + (size_t)r0 * v.k_row_bytes))[0] == 30 + 1000.0f);
        /* seq 1's window: 26..29 inherited from seq 0 (28, 29 through the copied block) */
        for (int32_t pos = 26; pos < 30; pos++) {
            const int64_t q1 = ember_kv_group_row(kv, EMBER_KV_GROUP_SWA, 1, pos);
            assert_true(((float *)((char *)v.k + (size_t)q1 * v.k_row_bytes))[0] == pos + 1000.0f);
        }
    }
    /* removing both returns every block */
    assert_int_equal(ember_kv_seq_remove(kv, 0), EMBER_OK);
    assert_int_equal(ember_kv_seq_remove(kv, 1), EMBER_OK);
    assert_int_equal(ember_kv_group_free_blocks(kv, EMBER_KV_GROUP_SWA), 12);
    assert_int_equal(ember_kv_free_blocks(kv), 32);
    /* a fresh start after removal reuses the sequence from position 0 */
    step(kv, 0, 3);
    check_window(kv, 0, 0);
    ember_kv_free(kv);
}

static void test_swa_errors_and_fallback(void **st)
{
    (void)st;
    ember_kv *kv = make_swa(32);
    ember_seq_id s = 0;
    int32_t n = 5;
    assert_int_equal(append1(kv, 0, 8), EMBER_OK);
    assert_int_equal(ember_kv_swa_advance(kv, &s, &n, 1), EMBER_ERR_INVALID_ARG);   /* above the step */
    n = 4;
    assert_int_equal(ember_kv_swa_advance(kv, &s, &n, 1), EMBER_OK);
    assert_int_equal(ember_kv_swa_advance(kv, &s, &n, 1), EMBER_OK);
    n = 1;
    assert_int_equal(ember_kv_swa_advance(kv, &s, &n, 1), EMBER_ERR_INVALID_ARG);   /* past the appended 8 */
    ember_kv_free(kv);
    /* a pool no bigger than the sliding one: no group, sliding layers stay full */
    kv = make_swa(12);
    assert_false(ember_kv_has_swa_group(kv));
    assert_int_equal(ember_kv_layer_group(kv, 1), EMBER_KV_GROUP_FULL);
    assert_int_equal(ember_kv_group_n_blocks(kv, EMBER_KV_GROUP_SWA), -1);
    assert_int_equal(ember_kv_swa_advance(kv, &s, &n, 1), EMBER_OK);   /* no-op */
    ember_kv_free(kv);
    /* mismatched per-layer widths */
    static const int64_t ek[2] = {32, 0}, ev[2] = {32, 16};
    ember_kv_params p = {.n_layer = 2, .layer_n_embd_k = ek, .layer_n_embd_v = ev, .type_k = EMBER_TYPE_F32,
                         .type_v = EMBER_TYPE_F32, .block_tokens = 4, .n_blocks = 4, .n_seq_max = 1, .n_ctx = 16};
    assert_int_equal(ember_kv_new(&p, &kv), EMBER_ERR_INVALID_ARG);
    assert_null(kv);
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
        cmocka_unit_test(test_swa_group_keeps_only_the_window),
        cmocka_unit_test(test_swa_errors_and_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
