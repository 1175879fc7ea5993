/* continue_final_message (assistant prefill): ember_chat_render with
 * .continue_final_message must give, byte for byte, the prompt transformers'
 * apply_chat_template(continue_final_message=True) gives with Python jinja2
 * (tests/golden/chat/make_continue_goldens.py wrote continue.json from the
 * templates in tests/data/templates). Where the template raised, ember must
 * fail too. Plus the cut rule on its own (ember_chat_continue_point). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "chat/template.h"

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

static void test_goldens(void **state)
{
    (void)state;
    json_error_t je;
    json_t *g = json_load_file("tests/golden/chat/continue.json", 0, &je);
    assert_non_null(g);
    json_int_t now = json_integer_value(json_object_get(g, "fixed_now"));
    json_t *convs = json_object_get(g, "conversations"), *cases = json_object_get(g, "cases");
    size_t n_ok = 0, n_err = 0, n_fail = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *cs = json_array_get(cases, i);
        const char *tn = json_string_value(json_object_get(cs, "template"));
        const char *cn = json_string_value(json_object_get(cs, "conversation"));
        char path[512];
        snprintf(path, sizeof path, "tests/data/templates/%s.jinja", tn);
        size_t len = 0;
        char *src = slurp(path, &len);
        assert_non_null(src);
        ember_jinja_template *t = NULL;
        ember_jinja_error err = {0};
        ember_status st = ember_jinja_parse(src, len, &t, &err);
        free(src);
        json_t *conv = json_object_get(convs, cn);
        json_t *sp = json_object_get(json_object_get(g, "special_tokens"), tn);
        ember_chat_inputs in = {.messages = json_object_get(conv, "messages"), .continue_final_message = true,
                                .bos_token = json_string_value(json_array_get(sp, 0)),
                                .eos_token = json_string_value(json_array_get(sp, 1)),
                                .kwargs = json_object_get(conv, "kwargs")};
        char *out = NULL;
        size_t out_len = 0;
        if (st == EMBER_OK) {
            ember_jinja_render_opts o = {.use_fixed_now = 1, .fixed_now = now};
            st = ember_chat_render(t, &in, &o, &out, &out_len, &err);
        }
        json_t *want = json_object_get(cs, "prompt");
        if (want) {
            const char *w = json_string_value(want);
            size_t wl = json_string_length(want);
            if (st != EMBER_OK) {
                print_message("FAIL %s / %s: error %s\n", tn, cn, err.message);
                n_fail++;
            } else if (out_len != wl || memcmp(out, w, wl) != 0) {
                size_t k = 0;
                while (k < wl && k < out_len && w[k] == out[k]) k++;
                print_message("FAIL %s / %s: differs at byte %zu (len %zu vs %zu)\n  want: %.80s\n  got:  %.80s\n", tn,
                              cn, k, wl, out_len, w + (k > 20 ? k - 20 : 0), out + (k > 20 ? k - 20 : 0));
                n_fail++;
            } else {
                n_ok++;
            }
        } else if (st == EMBER_OK) {
            print_message("FAIL %s / %s: transformers raised (%s) but ember rendered\n", tn, cn,
                          json_string_value(json_object_get(cs, "error")));
            n_fail++;
        } else {
            n_err++;
        }
        free(out);
        ember_jinja_free(t);
    }
    print_message("%zu prompts identical, %zu errors matched, %zu failures\n", n_ok, n_err, n_fail);
    assert_int_equal(n_fail, 0);
    assert_true(n_ok >= 300);
    json_decref(g);
}

static size_t cut_of(const char *rendered, const char *content)
{
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", content);
    size_t cut = (size_t)-1;
    ember_status st = ember_chat_continue_point(rendered, strlen(rendered), m, &cut);
    json_decref(m);
    return st == EMBER_OK ? cut : (size_t)-1;
}

/* transformers' rule on hand-made renders (Python: rendered.rindex(text.strip()), then
 * the trailing whitespace kept when the template kept it) */
static void test_cut_rule(void **state)
{
    (void)state;
    assert_int_equal(cut_of("<u>hi</u><a>1, 2,</a>", "1, 2,"), strlen("<u>hi</u><a>1, 2,"));
    /* the last occurrence wins */
    assert_int_equal(cut_of("<a>ok</a><a>ok</a>", "ok"), strlen("<a>ok</a><a>ok"));
    /* trailing space kept by the template: kept */
    assert_int_equal(cut_of("<a>is </a>", "is "), strlen("<a>is "));
    /* trimmed by the template: cut after the stripped text */
    assert_int_equal(cut_of("<a>is</a>", "is "), strlen("<a>is"));
    /* leading whitespace: never equal to the whole message, so the stripped length */
    assert_int_equal(cut_of("<a>\nx \n</a>", "\nx \n"), strlen("<a>\nx"));
    /* U+3000 is Python whitespace */
    assert_int_equal(cut_of("<a>moon\xe3\x80\x80</a>", "moon\xe3\x80\x80"), strlen("<a>moon\xe3\x80\x80"));
    assert_int_equal(cut_of("<a>moon</a>", "moon\xe3\x80\x80"), strlen("<a>moon"));
    /* the template changed the text: an error */
    assert_int_equal(cut_of("<a>HELLO</a>", "hello"), (size_t)-1);
    json_t *m = json_pack("{s:s, s:n}", "role", "assistant", "content");
    size_t cut;
    assert_int_equal(ember_chat_continue_point("x", 1, m, &cut), EMBER_ERR_FORMAT);
    json_decref(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_rule),
        cmocka_unit_test(test_goldens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
