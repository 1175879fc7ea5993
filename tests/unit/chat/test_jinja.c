/* Focused tests of ember's Jinja interpreter.
 * 1. Language features (whitespace control, loops, scoping, macros, filters,
 *    tests, methods, tojson, Python str()) against the outputs Python jinja2
 *    produced with transformers' environment (tests/golden/jinja/features.json,
 *    written by tests/golden/jinja/make_goldens.py); where jinja2 raised, ember
 *    must fail, and for syntax errors on the same line jinja2 reported.
 * 2. Error reporting: line and column of runtime errors, message text.
 * 3. Hostile templates: step, recursion, output and nesting limits end the
 *    render with an error instead of hanging or overflowing the stack, and
 *    every truncation of the real templates parses or fails cleanly. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja/jinja.h"

static ember_status render_src(const char *src, const json_t *ctx, const ember_jinja_render_opts *o,
                               char **out, ember_jinja_error *err)
{
    ember_jinja_template *t = NULL;
    ember_status st = ember_jinja_parse(src, strlen(src), &t, err);
    if (st != EMBER_OK) return st;
    json_t *empty = json_object();
    st = ember_jinja_render(t, ctx ? ctx : empty, o, out, NULL, err);
    json_decref(empty);
    ember_jinja_free(t);
    return st;
}

static void test_features_match_jinja2(void **state)
{
    (void)state;
    json_error_t je;
    json_t *doc = json_load_file("tests/golden/jinja/features.json", 0, &je);
    assert_non_null(doc);
    ember_jinja_render_opts o = {.use_fixed_now = 1, .fixed_now = json_integer_value(json_object_get(doc, "fixed_now"))};
    json_t *cases = json_object_get(doc, "cases");
    int fails = 0;
    size_t n = json_array_size(cases);
    assert_true(n >= 30);
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *src = json_string_value(json_object_get(c, "template"));
        json_t *want = json_object_get(c, "output");
        char *out = NULL;
        ember_jinja_error err = {0};
        ember_status st = render_src(src, json_object_get(c, "context"), &o, &out, &err);
        if (want) {
            if (st != EMBER_OK) {
                print_message("FAIL %s: %s\n", name, err.message);
                fails++;
            } else if (strcmp(out, json_string_value(want)) != 0) {
                print_message("FAIL %s:\n  want: %s\n  got:  %s\n", name, json_string_value(want), out);
                fails++;
            }
        } else {
            json_t *line = json_object_get(c, "syntax_error_line");
            if (st == EMBER_OK) {
                print_message("FAIL %s: jinja2 raised but ember rendered '%s'\n", name, out);
                fails++;
            } else if (line && err.line != (int)json_integer_value(line)) {
                print_message("FAIL %s: error on line %d, jinja2 says %d (%s)\n", name, err.line,
                              (int)json_integer_value(line), err.message);
                fails++;
            } else if (err.message[0] == 0 || err.line <= 0) {
                print_message("FAIL %s: error without message or position\n", name);
                fails++;
            }
        }
        free(out);
    }
    json_decref(doc);
    assert_int_equal(fails, 0);
}

static void test_error_positions(void **state)
{
    (void)state;
    static const struct { const char *src; int line, col; const char *needle; } cases[] = {
        {"ab\n  {{ x.y.z }}", 2, 7, "'x' is undefined"},
        {"{% for m in ms %}\n{{ m.content + 1 }}{% endfor %}", 2, 14, "unsupported operand"},
        {"line one\n\n   {{ raise_exception('Roles must alternate') }}", 3, 22, "Roles must alternate"},
        {"{% if true %}\n  {{ [1,2] | frob }}\n{% endif %}", 2, 14, "no filter named 'frob'"},
        {"{{ 1 +\n * 2 }}", 2, 2, "unexpected"},
        {"{% for x in y %}\n{% endif %}", 2, 4, "unknown or misplaced tag 'endif'"},
        {"{{ 'abc", 1, 4, "unterminated string"},
        {"x\n{% if a %}\n", 2, 11, "'if' block opened at line 2"},
    };
    json_t *ctx = json_pack("{s:[{s:s}]}", "ms", "content", "hi");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        ember_jinja_error err = {0};
        ember_status st = render_src(cases[i].src, ctx, NULL, &out, &err);
        if (st == EMBER_OK || err.line != cases[i].line || err.column != cases[i].col || !strstr(err.message, cases[i].needle))
            print_message("case %zu: st=%d line=%d col=%d msg=%s\n", i, st, err.line, err.column, err.message);
        assert_int_not_equal(st, EMBER_OK);
        assert_null(out);
        assert_int_equal(err.line, cases[i].line);
        assert_int_equal(err.column, cases[i].col);
        assert_non_null(strstr(err.message, cases[i].needle));
        char prefix[64];
        snprintf(prefix, sizeof prefix, "line %d, column %d: ", cases[i].line, cases[i].col);
        assert_int_equal(strncmp(err.message, prefix, strlen(prefix)), 0);
    }
    json_decref(ctx);
}

static void expect_limit(const char *src, const ember_jinja_render_opts *o, const char *needle)
{
    char *out = NULL;
    ember_jinja_error err = {0};
    ember_status st = render_src(src, NULL, o, &out, &err);
    if (st == EMBER_OK || !strstr(err.message, needle)) print_message("limit case: st=%d msg=%s\n", st, err.message);
    assert_int_not_equal(st, EMBER_OK);
    assert_null(out);
    assert_non_null(strstr(err.message, needle));
}

static void test_hostile_templates_are_bounded(void **state)
{
    (void)state;
    ember_jinja_render_opts small = {.max_steps = 200000, .max_output = 1 << 20};
    /* loops that would run for hours */
    expect_limit("{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}", &small, "steps");
    /* unbounded recursion through a macro */
    expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "nested deeper");
    /* mutual recursion through caller() */
    expect_limit("{% macro g() %}{{ caller() }}{% endmacro %}{% macro h() %}{% call g() %}{{ h() }}{% endcall %}{% endmacro %}{{ h() }}",
                 NULL, "deeper");
    /* output explosion */
    expect_limit("{% for a in range(100000) %}{{ 'abcdefgh' * 1000 }}{% endfor %}", &small, "output exceeds");
    /* memory explosion by repeated doubling */
    ember_jinja_render_opts mem = {.max_memory = 16 << 20};
    expect_limit("{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                 &mem, "memory");
    /* sandbox range limit as jinja2 */
    expect_limit("{{ range(1000000) | length }}", NULL, "MAX_RANGE");
    /* parser nesting: deep parentheses, deep blocks */
    char *deep = malloc(20000);
    size_t k = 0;
    k += (size_t)sprintf(deep + k, "{{ ");
    for (int i = 0; i < 5000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 5000; i++) deep[k++] = ')';
    k += (size_t)sprintf(deep + k, " }}");
    deep[k] = 0;
    expect_limit(deep, NULL, "nested more than");
    k = 0;
    for (int i = 0; i < 1000; i++) k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
    deep[k] = 0;
    expect_limit(deep, NULL, "nested more than");
    k = 0;
    for (int i = 0; i < 3000; i++) k += (size_t)sprintf(deep + k, "not ");
    sprintf(deep + k, "1");
    char *wrapped = malloc(strlen(deep) + 16);
    sprintf(wrapped, "{{ %s }}", deep);
    expect_limit(wrapped, NULL, "nested more than");
    free(wrapped);
    free(deep);
    /* deeply nested value printed */
    expect_limit("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}",
                 NULL, "nested too deeply");
}

static void test_truncated_and_corrupted_templates_never_crash(void **state)
{
    (void)state;
    static const char *files[] = {"tests/data/templates/google-gemma-3-it.jinja",
                                  "tests/data/templates/Qwen-Qwen3-0.6B.jinja",
                                  "tests/data/templates/openai-gpt-oss-120b.jinja"};
    json_error_t je;
    json_t *convs = json_load_file("tests/golden/jinja/conversations.json", 0, &je);
    assert_non_null(convs);
    json_t *conv = json_object_get(json_object_get(convs, "conversations"), "parallel_tool_calls");
    json_t *ctx = json_pack("{s:O,s:O,s:b,s:s,s:s}", "messages", json_object_get(conv, "messages"), "tools",
                            json_object_get(conv, "tools"), "add_generation_prompt", 1, "bos_token", "<s>", "eos_token", "</s>");
    ember_jinja_render_opts o = {.max_steps = 100000};
    size_t parsed = 0, failed = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        FILE *fp = fopen(files[f], "rb");
        assert_non_null(fp);
        char *src = malloc(1 << 20);
        size_t n = fread(src, 1, (1 << 20) - 1, fp);
        fclose(fp);
        src[n] = 0;
        size_t step = n / 150 + 1;
        for (size_t cut = 0; cut <= n; cut += step) {
            for (int mode = 0; mode < 3; mode++) {
                char *m = malloc(n + 1);
                memcpy(m, src, n + 1);
                size_t len = cut;
                if (mode == 1 && cut < n) { len = n; m[cut] = "{}%#-'\"(|"[cut % 9]; }
                if (mode == 2 && cut < n) { len = n; memmove(m + cut, m + cut + 1, n - cut); len = n - 1; }
                ember_jinja_template *t = NULL;
                ember_jinja_error err;
                if (ember_jinja_parse(m, len, &t, &err) == EMBER_OK) {
                    char *out = NULL;
                    if (ember_jinja_render(t, ctx, &o, &out, NULL, &err) == EMBER_OK) parsed++;
                    else { assert_true(err.message[0] != 0); failed++; }
                    free(out);
                    ember_jinja_free(t);
                } else {
                    assert_null(t);
                    assert_true(err.line >= 1);
                    failed++;
                }
                free(m);
            }
        }
        free(src);
    }
    assert_true(parsed > 0);
    assert_true(failed > 0);
    json_decref(ctx);
    json_decref(convs);
}

static void test_api_arguments(void **state)
{
    (void)state;
    ember_jinja_template *t = NULL;
    assert_int_equal(ember_jinja_parse(NULL, 3, &t, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_jinja_parse("", 0, &t, NULL), EMBER_OK);
    char *out = NULL;
    json_t *arr = json_array();
    assert_int_equal(ember_jinja_render(t, arr, NULL, &out, NULL, NULL), EMBER_ERR_INVALID_ARG);
    size_t len = 99;
    assert_int_equal(ember_jinja_render(t, NULL, NULL, &out, &len, NULL), EMBER_OK);
    assert_string_equal(out, "");
    assert_int_equal(len, 0);
    free(out);
    json_decref(arr);
    ember_jinja_free(t);
    ember_jinja_free(NULL);
    /* NUL bytes inside the source and the context survive */
    assert_int_equal(ember_jinja_parse("a\0b{{ s }}", 10, &t, NULL), EMBER_OK);
    json_t *ctx = json_pack("{s:s#}", "s", "x\0y", (size_t)3);
    assert_int_equal(ember_jinja_render(t, ctx, NULL, &out, &len, NULL), EMBER_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(out, "a\0bx\0y", 6);
    free(out);
    json_decref(ctx);
    ember_jinja_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_features_match_jinja2),
        cmocka_unit_test(test_error_positions),
        cmocka_unit_test(test_hostile_templates_are_bounded),
        cmocka_unit_test(test_truncated_and_corrupted_templates_never_crash),
        cmocka_unit_test(test_api_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
