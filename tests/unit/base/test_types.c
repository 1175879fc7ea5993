/* Block geometry per ggml type id. Expected values: gguf-py
 * constants.py GGML_QUANT_SIZES (elements per block, bytes per block). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "base/types.h"
#include "base/status.h"

static void test_geometry_matches_gguf_py(void **state)
{
    (void)state;
    static const struct { uint32_t id; size_t blck, bytes; const char *name; } want[] = {
        {0, 1, 4, "F32"}, {1, 1, 2, "F16"}, {2, 32, 18, "Q4_0"}, {3, 32, 20, "Q4_1"},
        {6, 32, 22, "Q5_0"}, {7, 32, 24, "Q5_1"}, {8, 32, 34, "Q8_0"}, {9, 32, 36, "Q8_1"},
        {10, 256, 84, "Q2_K"}, {11, 256, 110, "Q3_K"}, {12, 256, 144, "Q4_K"},
        {13, 256, 176, "Q5_K"}, {14, 256, 210, "Q6_K"}, {15, 256, 292, "Q8_K"},
        {20, 32, 18, "IQ4_NL"}, {23, 256, 136, "IQ4_XS"}, {30, 1, 2, "BF16"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(ember_type_block_size(want[i].id), want[i].blck);
        assert_int_equal(ember_type_block_bytes(want[i].id), want[i].bytes);
        assert_string_equal(ember_type_name(want[i].id), want[i].name);
    }
    assert_false(ember_type_known(4)); /* Q4_2, removed from ggml */
    assert_false(ember_type_known(1000));
}

static void test_row_bytes_checks_block_multiple(void **state)
{
    (void)state;
    uint64_t b = 0;
    assert_true(ember_type_row_bytes(12, 640, &b) == false); /* 640 % 256 != 0 */
    assert_true(ember_type_row_bytes(12, 512, &b));
    assert_int_equal(b, 288);
    assert_false(ember_type_row_bytes(0, UINT64_MAX, &b)); /* overflow */
}

static void test_error_message(void **state)
{
    (void)state;
    assert_int_equal(ember_error(EMBER_ERR_FORMAT, "bad %s at %d", "x", 7), EMBER_ERR_FORMAT);
    assert_string_equal(ember_last_error(), "bad x at 7");
    assert_string_equal(ember_status_name(EMBER_ERR_RANGE), "EMBER_ERR_RANGE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry_matches_gguf_py),
        cmocka_unit_test(test_row_bytes_checks_block_multiple),
        cmocka_unit_test(test_error_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
