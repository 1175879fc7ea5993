/* Chat templates of real model families rendered by ember's Jinja
 * interpreter must equal, byte for byte, what Python jinja2 renders with
 * transformers' environment (tests/golden/jinja/make_goldens.py wrote
 * expected.json from the templates in tests/data/templates). Where jinja2 raised
 * (raise_exception, type errors), ember must fail too, without crashing,
 * unless the case renders under ember's one named difference
 * ("lenient_output": a string + undefined/None is the string, as llama.cpp's
 * Jinja does). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja/jinja.h"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[len] = 0; *n = (size_t)len; }
    return b;
}

static json_t *build_context(json_t *convs, const char *tmpl, const char *conv)
{
    json_t *c = json_object_get(json_object_get(convs, "conversations"), conv);
    json_t *sp = json_object_get(json_object_get(convs, "special_tokens"), tmpl);
    json_t *ctx = json_object();
    json_object_set(ctx, "messages", json_object_get(c, "messages"));
    json_t *tools = json_object_get(c, "tools");
    json_object_set_new(ctx, "tools", tools ? json_incref(tools) : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set(ctx, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
    json_object_set(ctx, "bos_token", json_array_get(sp, 0));
    json_object_set(ctx, "eos_token", json_array_get(sp, 1));
    json_object_update(ctx, json_object_get(c, "kwargs"));
    return ctx;
}

static void test_goldens(void **state)
{
    (void)state;
    json_error_t je;
    json_t *exp = json_load_file("tests/golden/jinja/expected.json", 0, &je);
    json_t *convs = json_load_file("tests/golden/jinja/conversations.json", 0, &je);
    assert_non_null(exp);
    assert_non_null(convs);
    json_int_t now = json_integer_value(json_object_get(exp, "fixed_now"));
    const char *only = getenv("JINJA_ONLY");
    json_t *cases = json_object_get(exp, "cases");
    size_t n_ok = 0, n_err = 0, n_fail = 0, n_templates = 0;
    const char *last_t = "";
    ember_jinja_template *t = NULL;
    bool parse_failed = false;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *cs = json_array_get(cases, i);
        const char *tn = json_string_value(json_object_get(cs, "template"));
        const char *cn = json_string_value(json_object_get(cs, "conversation"));
        if (only && !strstr(tn, only)) continue;
        if (strcmp(tn, last_t) != 0) {
            ember_jinja_free(t);
            t = NULL;
            char path[512];
            snprintf(path, sizeof path, "tests/data/templates/%s.jinja", tn);
            size_t len = 0;
            char *src = slurp(path, &len);
            assert_non_null(src);
            ember_jinja_error err;
            parse_failed = ember_jinja_parse(src, len, &t, &err) != EMBER_OK;
            if (parse_failed) print_message("PARSE %s: %s\n", tn, err.message);
            free(src);
            last_t = tn;
            n_templates++;
        }
        json_t *ctx = build_context(convs, tn, cn);
        /* jinja2's output, or where jinja2 raised, the output under ember's one
         * named difference (string + undefined/None is the string, as llama.cpp) */
        json_t *want = json_object_get(cs, "output");
        if (!want) want = json_object_get(cs, "lenient_output");
        char *out = NULL;
        size_t out_len = 0;
        ember_jinja_error err = {0};
        ember_status st = EMBER_ERR_FORMAT;
        if (!parse_failed) {
            ember_jinja_render_opts o = {.use_fixed_now = 1, .fixed_now = now};
            st = ember_jinja_render(t, ctx, &o, &out, &out_len, &err);
        }
        if (want) {
            const char *w = json_string_value(want);
            size_t wl = json_string_length(want);
            if (st != EMBER_OK) {
                print_message("FAIL %s / %s: error %s\n", tn, cn, err.message);
                n_fail++;
            } else if (out_len != wl || memcmp(out, w, wl) != 0) {
                size_t k = 0;
                while (k < wl && k < out_len && w[k] == out[k]) k++;
                print_message("FAIL %s / %s: differs at byte %zu (len %zu vs %zu)\n  want: %.80s\n  got:  %.80s\n", tn, cn,
                              k, wl, out_len, w + (k > 20 ? k - 20 : 0), out + (k > 20 ? k - 20 : 0));
                n_fail++;
            } else n_ok++;
        } else {
            if (st == EMBER_OK) {
                print_message("FAIL %s / %s: jinja2 raised (%s) but ember rendered\n", tn, cn,
                              json_string_value(json_object_get(cs, "error")));
                n_fail++;
            } else {
                assert_true(err.message[0] != 0);
                n_err++;
            }
        }
        free(out);
        json_decref(ctx);
    }
    ember_jinja_free(t);
    print_message("%zu templates: %zu outputs identical, %zu errors matched, %zu failures\n", n_templates, n_ok, n_err, n_fail);
    assert_int_equal(n_fail, 0);
    if (!only) {
        assert_true(n_templates >= 15);
        assert_true(n_ok >= 15 * 10);
    }
    json_decref(exp);
    json_decref(convs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
