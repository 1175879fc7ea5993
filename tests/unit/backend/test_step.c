/* A recorded step (src/backend/step.h): node-by-node equality, the thing a
 * backend checks before it replays a captured step. Equal recordings are
 * equal; a change in any op, flag, pointer, shape or float parameter, in the
 * kind of an operand, or one node more or less makes them unequal; growth
 * past the first capacity keeps every word; a broken step equals none.
 * ember_backend_run_step against a scripted backend: the forward pass runs
 * 0, 1 or 2 times as step_begin/step_end answer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "backend/step.h"

static float buf_x[64], buf_y[64], buf_w[64], buf_k[64];

/* A small decode-like step: norm -> matmul(q8, fused) -> rope -> attention
 * -> add, with the variation `what` applied at node `at` (what 0: none). */
static void record(ember_step *s, int what, int at)
{
    ember_step_begin(s);
    for (int i = 0; i < 5; i++) {
        const bool here = what && i == at;
        switch (i) {
        case 0:
            ember_step_node_add(s, here && what == 1 ? EMBER_STEP_SCALE : EMBER_STEP_RMS_NORM, 0);
            ember_step_i64(s, 4);                              /* rows */
            ember_step_i64(s, here && what == 3 ? 2048 : 1024);   /* n */
            ember_step_f32(s, here && what == 4 ? 1e-5f : 1e-6f); /* eps */
            ember_step_ptr(s, buf_w);
            ember_step_ptr(s, here && what == 2 ? buf_y : buf_x);
            break;
        case 1:
            ember_step_node_add(s, EMBER_STEP_MATMUL_Q8, here && what == 5 ? 3u : 1u);
            ember_step_i64(s, 4);
            ember_step_i64(s, 3);
            ember_step_ptr(s, buf_x);
            ember_step_ptr(s, buf_w);
            ember_step_ptr(s, here && what == 6 ? EMBER_STEP_HOST_OUT : (const void *)buf_y);
            break;
        case 2:
            ember_step_node_add(s, EMBER_STEP_ROPE, 0);
            ember_step_i64(s, 4);
            ember_step_f32(s, 10000.f);
            /* the same word as a value instead of a pointer */
            if (here && what == 7) ember_step_i64(s, (int64_t)(uintptr_t)buf_y);
            else ember_step_ptr(s, buf_y);
            break;
        case 3:
            ember_step_node_add(s, EMBER_STEP_ATTENTION, 0);
            ember_step_i64(s, 4);
            ember_step_ptr(s, buf_k);
            ember_step_ptr(s, buf_y);
            ember_step_ptr(s, buf_x);
            if (here && what == 8) ember_step_i64(s, 1);   /* one operand more */
            break;
        case 4:
            if (here && what == 9) break;   /* one node less */
            ember_step_node_add(s, EMBER_STEP_ADD, 0);
            ember_step_i64(s, 4096);
            ember_step_ptr(s, buf_y);
            ember_step_ptr(s, buf_x);
            if (here && what == 10) ember_step_node_add(s, EMBER_STEP_COPY, 0);   /* one node more */
            break;
        }
    }
    ember_step_end(s);
}

static void test_equal_steps(void **state)
{
    (void)state;
    ember_step a, b;
    ember_step_init(&a);
    ember_step_init(&b);
    record(&a, 0, 0);
    record(&b, 0, 0);
    assert_int_equal(a.n, 5);
    assert_int_equal(a.n_args, 5 + 5 + 3 + 4 + 3);
    assert_true(ember_step_equal(&a, &b));
    assert_true(ember_step_equal(&b, &a));
    assert_int_equal(ember_step_first_diff(&a, &b), -1);
    /* what was recorded, word by word */
    bool is_ptr = false;
    assert_int_equal(a.node[0].op, EMBER_STEP_RMS_NORM);
    assert_int_equal(ember_step_arg(&a, 0, 1, &is_ptr), 1024);
    assert_false(is_ptr);
    const float eps = 1e-6f;
    uint32_t bits;
    memcpy(&bits, &eps, sizeof bits);
    assert_int_equal(ember_step_arg(&a, 0, 2, &is_ptr), bits);
    assert_int_equal(ember_step_arg(&a, 0, 4, &is_ptr), (uint64_t)(uintptr_t)buf_x);
    assert_true(is_ptr);
    assert_int_equal(a.node[0].ptr_mask, 0x18);
    assert_int_equal(a.node[1].flags, 1);
    assert_int_equal(a.node[1].at, 5);
    assert_int_equal(ember_step_arg(&a, 4, 0, NULL), 4096);
    /* re-recording into the same step gives the same step again */
    record(&a, 0, 0);
    assert_true(ember_step_equal(&a, &b));
    ember_step_free(&a);
    ember_step_free(&b);
    assert_null(a.node);
    assert_int_equal(a.n, 0);
}

static void test_any_change_is_unequal(void **state)
{
    (void)state;
    ember_step ref, s;
    ember_step_init(&ref);
    ember_step_init(&s);
    record(&ref, 0, 0);
    /* {variation, the node it changes, the first differing node} */
    static const int cases[][3] = {
        {1, 0, 0},   /* op */
        {2, 0, 0},   /* a pointer */
        {3, 0, 0},   /* a shape */
        {4, 0, 0},   /* a float parameter */
        {5, 1, 1},   /* flags (another fusion) */
        {6, 1, 1},   /* activation memory vs host memory */
        {7, 2, 2},   /* a pointer vs the same word as a value */
        {8, 3, 3},   /* one operand more */
        {9, 4, 4},   /* a node less (ref longer) */
        {10, 4, 5},  /* a node more (ref a prefix) */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        record(&s, cases[c][0], cases[c][1]);
        assert_false(ember_step_equal(&ref, &s));
        assert_false(ember_step_equal(&s, &ref));
        assert_int_equal(ember_step_first_diff(&ref, &s), cases[c][2]);
    }
    /* and back to the same step */
    record(&s, 0, 0);
    assert_true(ember_step_equal(&ref, &s));
    ember_step_free(&ref);
    ember_step_free(&s);
}

static void test_float_bits(void **state)
{
    (void)state;
    ember_step a, b;
    ember_step_init(&a);
    ember_step_init(&b);
    ember_step_begin(&a);
    ember_step_node_add(&a, EMBER_STEP_SCALE, 0);
    ember_step_f32(&a, 0.f);
    ember_step_end(&a);
    ember_step_begin(&b);
    ember_step_node_add(&b, EMBER_STEP_SCALE, 0);
    ember_step_f32(&b, -0.f);
    ember_step_end(&b);
    assert_false(ember_step_equal(&a, &b));
    ember_step_free(&a);
    ember_step_free(&b);
}

/* Steps far past the first capacity (256 nodes, 1024 operands): every node
 * and word survives the growth, and a change in the last word is seen. */
static void test_growth(void **state)
{
    (void)state;
    enum { N = 5000 };
    ember_step a, b;
    ember_step_init(&a);
    ember_step_init(&b);
    for (int pass = 0; pass < 2; pass++) {
        ember_step *s = pass ? &b : &a;
        ember_step_begin(s);
        for (int i = 0; i < N; i++) {
            ember_step_node_add(s, (ember_step_op)(1 + i % (EMBER_STEP_OP_N - 1)), (uint32_t)(i & 3));
            for (int k = 0; k < i % 5; k++) ember_step_i64(s, (int64_t)i * 10 + k);
            ember_step_ptr(s, buf_x + i % 64);
        }
        ember_step_end(s);
    }
    assert_false(a.broken);
    assert_int_equal(a.n, N);
    assert_true(a.cap >= N);
    uint32_t want_args = 0;
    for (int i = 0; i < N; i++) want_args += (uint32_t)(i % 5 + 1);
    assert_int_equal(a.n_args, want_args);
    assert_int_equal(a.node[N - 1].op, 1 + (N - 1) % (EMBER_STEP_OP_N - 1));
    assert_int_equal(ember_step_arg(&a, 4999, 3, NULL), 49993);
    assert_int_equal(ember_step_arg(&a, 4999, 4, NULL), (uint64_t)(uintptr_t)(buf_x + 4999 % 64));
    assert_true(ember_step_equal(&a, &b));
    b.arg[b.n_args - 1] ^= 8;
    assert_false(ember_step_equal(&a, &b));
    assert_int_equal(ember_step_first_diff(&a, &b), N - 1);
    /* a copy is equal and independent of its source */
    ember_step c;
    ember_step_init(&c);
    assert_int_equal(ember_step_copy(&c, &a), EMBER_OK);
    assert_true(ember_step_equal(&c, &a));
    assert_false(c.open);
    a.arg[0] ^= 1;
    assert_false(ember_step_equal(&c, &a));
    ember_step_free(&a);
    ember_step_free(&b);
    ember_step_free(&c);
}

static void test_broken_and_closed(void **state)
{
    (void)state;
    ember_step a, b;
    ember_step_init(&a);
    ember_step_init(&b);
    /* outside begin/end nothing is recorded */
    ember_step_node_add(&a, EMBER_STEP_ADD, 0);
    ember_step_i64(&a, 1);
    assert_int_equal(a.n, 0);
    assert_false(a.broken);
    /* an operand before any node breaks the step */
    ember_step_begin(&a);
    ember_step_i64(&a, 1);
    assert_true(a.broken);
    ember_step_end(&a);
    ember_step_begin(&b);
    ember_step_end(&b);
    assert_false(ember_step_equal(&a, &b));   /* broken equals nothing, */
    assert_false(ember_step_equal(&a, &a));   /* not even itself */
    assert_int_equal(ember_step_first_diff(&a, &b), 0);
    /* two empty steps are equal */
    ember_step_begin(&a);
    ember_step_end(&a);
    assert_false(a.broken);
    assert_true(ember_step_equal(&a, &b));
    /* one operand past EMBER_STEP_MAX_ARGS breaks it */
    ember_step_begin(&a);
    ember_step_node_add(&a, EMBER_STEP_MATMUL, 0);
    for (int i = 0; i < EMBER_STEP_MAX_ARGS; i++) ember_step_i64(&a, i);
    assert_false(a.broken);
    ember_step_i64(&a, 99);
    assert_true(a.broken);
    ember_step_end(&a);
    /* a broken step copies as broken */
    assert_int_equal(ember_step_copy(&b, &a), EMBER_OK);
    assert_true(b.broken);
    assert_false(ember_step_equal(&b, &b));
    assert_string_equal(ember_step_op_name(EMBER_STEP_MATMUL_Q8), "matmul_q8");
    assert_string_equal(ember_step_op_name(EMBER_STEP_KV_STORE), "kv_store");
    assert_string_equal(ember_step_op_name(EMBER_STEP_OP_N), "?");
    ember_step_free(&a);
    ember_step_free(&b);
}

/* A backend whose step_begin/step_end answer from a script, and log calls. */
static struct {
    bool begin_ret, end_ret[2];
    int n_begin, n_end, n_forward;
    char log[16];
    int n_log;
} fake;

static bool fake_step_begin(ember_backend *be, const ember_backend_step *st)
{
    (void)be;
    assert_int_equal(st->n, 3);
    fake.n_begin++;
    fake.log[fake.n_log++] = 'b';
    return fake.begin_ret;
}

static bool fake_step_end(ember_backend *be)
{
    (void)be;
    fake.log[fake.n_log++] = 'e';
    return fake.end_ret[fake.n_end++ > 0];
}

static void fake_forward(void *arg)
{
    assert_int_equal(*(int *)arg, 42);
    fake.n_forward++;
    fake.log[fake.n_log++] = 'f';
}

static void test_run_step(void **state)
{
    (void)state;
    static const ember_backend_ops ops = {.name = "fake", .step_begin = fake_step_begin, .step_end = fake_step_end};
    ember_backend be = {.ops = &ops};
    const ember_backend_step st = {.n = 3};
    int arg = 42;
    /* {step_begin, first step_end, second step_end, forward runs, call order} */
    static const struct { bool b, e0, e1; int runs; const char *log; } cases[] = {
        {false, true, true, 1, "bfe"},       /* eager, or a matching replay */
        {true, true, true, 0, "be"},         /* the backend replays the whole step */
        {false, false, true, 2, "bfefe"},    /* a replay that did not match: again, op by op */
        {true, false, true, 1, "befe"},      /* a whole replay refused at the end */
        {false, false, false, 2, "bfefe"},   /* the second step_end's answer is not asked twice */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(&fake, 0, sizeof fake);
        fake.begin_ret = cases[c].b;
        fake.end_ret[0] = cases[c].e0;
        fake.end_ret[1] = cases[c].e1;
        assert_int_equal(ember_backend_run_step(&be, &st, fake_forward, &arg), cases[c].runs);
        assert_int_equal(fake.n_forward, cases[c].runs);
        assert_int_equal(fake.n_begin, 1);
        fake.log[fake.n_log] = 0;
        assert_string_equal(fake.log, cases[c].log);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_steps),
        cmocka_unit_test(test_any_change_is_unequal),
        cmocka_unit_test(test_float_bits),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_broken_and_closed),
        cmocka_unit_test(test_run_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
