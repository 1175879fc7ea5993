/* ember's output parser against llama.cpp's (the independent oracle): every
 * fixture in tests/data/tool_outputs/ that llama.cpp's common_chat_parse
 * reads without error, set up from a real chat template of that format
 * (tests/golden/parse/make_goldens.py, llama_cpp.json), must give the same
 * content, reasoning_content (both compared trimmed: ember trims, llama.cpp
 * keeps some newlines) and tool calls (names, arguments as JSON) — except
 * the cases listed below, where the two differ on purpose. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/parse.h"

static const struct {
    const char *key, *why;
} differs[] = {
    {"hermes/string_arguments", "llama.cpp does not decode arguments sent as a JSON string (gives {}); ember does"},
    {"hermes/malformed_unterminated", "llama.cpp returns a call with truncated, non-JSON arguments; ember: content"},
    {"llama3/malformed_unterminated", "llama.cpp returns a call with truncated, non-JSON arguments; ember: content"},
    {"qwen3_coder/malformed_unterminated", "llama.cpp returns a call with truncated, non-JSON arguments; ember: content"},
    {"qwen3_coder/malformed_missing_close", "llama.cpp returns a call with truncated, non-JSON arguments; ember: content"},
    {"gemma4/malformed_unterminated_string", "llama.cpp returns a call with truncated, non-JSON arguments; ember: content"},
    {"gemma4/malformed_syntax", "llama.cpp drops the malformed text; ember keeps it as content"},
    {"mistral/malformed_args", "llama.cpp drops the malformed text; ember keeps it as content"},
    {"mistral/malformed_no_args", "llama.cpp drops the malformed text; ember keeps it as content"},
    {"gemma4/quoted_keys", "llama.cpp keeps the <|\"|> quotes inside object keys; ember unwraps them"},
    {"llama3/python_tag", "llama.cpp leaves <|python_tag|> in content; ember drops it with the call"},
    {"think/repeated_open_tag", "llama.cpp keeps a repeated <think> inside reasoning; ember drops it"},
};

static const char *why_differs(const char *key)
{
    for (size_t i = 0; i < sizeof differs / sizeof differs[0]; i++)
        if (!strcmp(differs[i].key, key)) return differs[i].why;
    return NULL;
}

static char *trimmed(const char *s)
{
    if (!s) s = "";
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    char *r = malloc(n + 1);
    memcpy(r, s, n);
    r[n] = '\0';
    return r;
}

static void test_against_llama_cpp(void **state)
{
    (void)state;
    json_error_t err;
    json_t *gold = json_load_file("tests/golden/parse/llama_cpp.json", 0, &err);
    if (!gold) fail_msg("tests/golden/parse/llama_cpp.json: %s", err.text);
    const char *key;
    json_t *c;
    int agree = 0, skipped_error = 0, differ = 0;
    json_object_foreach(json_object_get(gold, "cases"), key, c) {
        if (json_object_get(c, "error")) {
            print_message("llama.cpp rejects %s: %s\n", key, json_string_value(json_object_get(c, "error")));
            skipped_error++;
            continue;
        }
        if (why_differs(key)) {
            differ++;
            continue;
        }
        char path[512];
        snprintf(path, sizeof path, "tests/data/tool_outputs/%s.json", key);
        json_t *spec = json_load_file(path, 0, &err);
        assert_non_null(spec);
        snprintf(path, sizeof path, "tests/data/tool_outputs/%s.txt", key);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char text[65536];
        size_t n = fread(text, 1, sizeof text, f);
        fclose(f);
        ember_chat_parser_config cfg = {.id_seed = 3};
        assert_true(ember_tool_format_from_name(json_string_value(json_object_get(spec, "tool_format")), &cfg.tool_format));
        assert_true(ember_reasoning_syntax_from_name(json_string_value(json_object_get(spec, "reasoning")), &cfg.reasoning));
        cfg.reasoning_open_at_start = json_is_true(json_object_get(spec, "reasoning_open_at_start"));
        cfg.tools = json_object_get(spec, "tools");
        json_t *m = NULL;
        assert_int_equal(ember_chat_parse_whole(&cfg, text, n, &m), EMBER_OK);
        char *a = trimmed(json_string_value(json_object_get(m, "content")));
        char *b = trimmed(json_string_value(json_object_get(c, "content")));
        if (strcmp(a, b)) fail_msg("%s: content\n  ember     [%s]\n  llama.cpp [%s]", key, a, b);
        free(a);
        free(b);
        a = trimmed(json_string_value(json_object_get(m, "reasoning_content")));
        b = trimmed(json_string_value(json_object_get(c, "reasoning_content")));
        if (strcmp(a, b)) fail_msg("%s: reasoning\n  ember     [%s]\n  llama.cpp [%s]", key, a, b);
        free(a);
        free(b);
        json_t *ours = json_object_get(m, "tool_calls"), *theirs = json_object_get(c, "tool_calls");
        if (json_array_size(ours) != json_array_size(theirs))
            fail_msg("%s: %zu calls, llama.cpp %zu", key, json_array_size(ours), json_array_size(theirs));
        for (size_t i = 0; i < json_array_size(theirs); i++) {
            json_t *fn = json_object_get(json_array_get(ours, i), "function");
            json_t *t = json_array_get(theirs, i);
            assert_string_equal(json_string_value(json_object_get(fn, "name")), json_string_value(json_object_get(t, "name")));
            json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, &err);
            if (!json_equal(args, json_object_get(t, "arguments")))
                fail_msg("%s: call %zu arguments %s, llama.cpp %s", key, i, json_string_value(json_object_get(fn, "arguments")),
                         json_dumps(json_object_get(t, "arguments"), JSON_COMPACT));
            json_decref(args);
        }
        json_decref(m);
        json_decref(spec);
        agree++;
    }
    print_message("%d fixtures agree with llama.cpp, %d differ on purpose, %d rejected by llama.cpp\n", agree, differ,
                  skipped_error);
    json_decref(gold);
    assert_true(agree >= 35);
}

/* Where llama.cpp returns a call cut short (arguments text that is not
 * JSON yet), ember with stream_arguments returns the same call closed: its
 * arguments begin with llama.cpp's text and are valid JSON. */
static void test_truncated_calls_stream_arguments(void **state)
{
    (void)state;
    static const char *const keys[] = {"hermes/malformed_unterminated", "llama3/malformed_unterminated",
                                       "qwen3_coder/malformed_unterminated", "gemma4/malformed_unterminated_string"};
    json_error_t err;
    json_t *gold = json_load_file("tests/golden/parse/llama_cpp.json", 0, &err);
    assert_non_null(gold);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *c = json_object_get(json_object_get(gold, "cases"), keys[k]);
        const char *theirs = json_string_value(json_object_get(json_array_get(json_object_get(c, "tool_calls"), 0), "arguments"));
        assert_non_null(theirs);
        char path[512];
        snprintf(path, sizeof path, "tests/data/tool_outputs/%s.json", keys[k]);
        json_t *spec = json_load_file(path, 0, &err);
        snprintf(path, sizeof path, "tests/data/tool_outputs/%s.txt", keys[k]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char text[65536];
        size_t n = fread(text, 1, sizeof text, f);
        fclose(f);
        ember_chat_parser_config cfg = {.id_seed = 3, .stream_arguments = true};
        assert_true(ember_tool_format_from_name(json_string_value(json_object_get(spec, "tool_format")), &cfg.tool_format));
        cfg.tools = json_object_get(spec, "tools");
        json_t *m = NULL;
        assert_int_equal(ember_chat_parse_whole(&cfg, text, n, &m), EMBER_OK);
        const char *ours = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "function"), "arguments"));
        assert_non_null(ours);
        if (strncmp(ours, theirs, strlen(theirs))) fail_msg("%s: ember %s, llama.cpp %s", keys[k], ours, theirs);
        json_t *v = json_loads(ours, 0, &err);
        assert_true(json_is_object(v));
        json_decref(v);
        json_decref(m);
        json_decref(spec);
    }
    json_decref(gold);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_llama_cpp),
        cmocka_unit_test(test_truncated_calls_stream_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
