/* ember_chat_render builds the context transformers' apply_chat_template
 * builds; rendering real templates through it must give jinja2's bytes
 * (tests/golden/jinja/expected.json from make_goldens.py). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "chat/template.h"

static ember_jinja_template *load(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "tests/data/templates/%s.jinja", name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *src = malloc(1 << 20);
    size_t n = fread(src, 1, 1 << 20, f);
    fclose(f);
    ember_jinja_template *t = NULL;
    assert_int_equal(ember_jinja_parse(src, n, &t, NULL), EMBER_OK);
    free(src);
    return t;
}

static const char *expected(json_t *exp, const char *tmpl, const char *conv)
{
    json_t *cases = json_object_get(exp, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        if (!strcmp(json_string_value(json_object_get(c, "template")), tmpl) &&
            !strcmp(json_string_value(json_object_get(c, "conversation")), conv))
            return json_string_value(json_object_get(c, "output"));
    }
    return NULL;
}

static void check(json_t *exp, json_t *convs, const char *tmpl, const char *conv)
{
    json_t *c = json_object_get(json_object_get(convs, "conversations"), conv);
    json_t *sp = json_object_get(json_object_get(convs, "special_tokens"), tmpl);
    ember_chat_inputs in = {
        .messages = json_object_get(c, "messages"),
        .tools = json_object_get(c, "tools"),
        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
        .bos_token = json_string_value(json_array_get(sp, 0)),
        .eos_token = json_string_value(json_array_get(sp, 1)),
        .kwargs = json_object_get(c, "kwargs"),
    };
    ember_jinja_template *t = load(tmpl);
    char *out = NULL;
    ember_jinja_error err;
    /* the instant make_goldens.py pins (strftime_now) */
    const ember_jinja_render_opts o = {.use_fixed_now = 1, .fixed_now = 1736942400};
    ember_status st = ember_chat_render(t, &in, &o, &out, NULL, &err);
    const char *want = expected(exp, tmpl, conv);
    if (want) {
        if (st != EMBER_OK) print_message("%s/%s: %s\n", tmpl, conv, err.message);
        assert_int_equal(st, EMBER_OK);
        assert_string_equal(out, want);
    } else {
        assert_int_equal(st, EMBER_ERR_FORMAT);
        assert_null(out);
    }
    free(out);
    ember_jinja_free(t);
}

static void test_render_matches_transformers(void **state)
{
    (void)state;
    json_error_t je;
    json_t *exp = json_load_file("tests/golden/jinja/expected.json", 0, &je);
    json_t *convs = json_load_file("tests/golden/jinja/conversations.json", 0, &je);
    assert_non_null(exp);
    assert_non_null(convs);
    check(exp, convs, "google-gemma-3-it", "multi_turn");
    check(exp, convs, "google-gemma-3-it", "not_alternating");   /* raise_exception */
    check(exp, convs, "SmolLM2-135M-Instruct", "system_user");
    check(exp, convs, "Qwen-Qwen3-0.6B", "thinking_off");
    check(exp, convs, "Qwen-Qwen3-0.6B", "tool_call_and_result");
    check(exp, convs, "meta-llama-Llama-3.2-3B-Instruct", "tools_available");   /* strftime_now */
    check(exp, convs, "google-gemma-4-31B-it", "parallel_tool_calls");
    check(exp, convs, "openai-gpt-oss-120b", "reasoning_field");
    json_decref(exp);
    json_decref(convs);
}

static void test_context_checks(void **state)
{
    (void)state;
    json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", "hi");
    json_t *kw = json_pack("{s:b}", "enable_thinking", 0);
    json_t *bad_kw = json_pack("{s:[]}", "messages");
    json_t *obj = json_object();
    json_t *ctx = NULL;
    ember_chat_inputs in = {.messages = msgs, .kwargs = kw, .bos_token = "<s>"};
    assert_int_equal(ember_chat_build_context(&in, &ctx), EMBER_OK);
    assert_true(json_is_null(json_object_get(ctx, "tools")));
    assert_true(json_is_null(json_object_get(ctx, "documents")));
    assert_true(json_is_false(json_object_get(ctx, "add_generation_prompt")));
    assert_true(json_is_false(json_object_get(ctx, "enable_thinking")));
    assert_string_equal(json_string_value(json_object_get(ctx, "bos_token")), "<s>");
    assert_null(json_object_get(ctx, "eos_token"));
    json_decref(ctx);
    in.kwargs = bad_kw;
    assert_int_equal(ember_chat_build_context(&in, &ctx), EMBER_ERR_INVALID_ARG);
    in.kwargs = NULL;
    in.messages = obj;
    assert_int_equal(ember_chat_build_context(&in, &ctx), EMBER_ERR_INVALID_ARG);
    in.messages = msgs;
    in.tools = obj;
    assert_int_equal(ember_chat_build_context(&in, &ctx), EMBER_ERR_INVALID_ARG);
    json_decref(msgs);
    json_decref(kw);
    json_decref(bad_kw);
    json_decref(obj);
}

/* one compiled template rendered from several threads at once gives the
 * same bytes everywhere (the server renders concurrently) */
typedef struct { ember_jinja_template *t; const ember_chat_inputs *in; const char *want; int ok; } thr_arg;

static void *render_many(void *p)
{
    thr_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        ember_jinja_render_opts o = {.use_fixed_now = 1, .fixed_now = 1736942400};
        if (ember_chat_render(a->t, a->in, &o, &out, NULL, NULL) != EMBER_OK || strcmp(out, a->want) != 0) a->ok = 0;
        free(out);
    }
    return NULL;
}

static void test_concurrent_renders(void **state)
{
    (void)state;
    json_error_t je;
    json_t *exp = json_load_file("tests/golden/jinja/expected.json", 0, &je);
    json_t *convs = json_load_file("tests/golden/jinja/conversations.json", 0, &je);
    const char *tmpl = "meta-llama-Llama-3.2-3B-Instruct", *conv = "tools_available";
    json_t *c = json_object_get(json_object_get(convs, "conversations"), conv);
    json_t *sp = json_object_get(json_object_get(convs, "special_tokens"), tmpl);
    ember_chat_inputs in = {
        .messages = json_object_get(c, "messages"), .tools = json_object_get(c, "tools"),
        .add_generation_prompt = true, .bos_token = json_string_value(json_array_get(sp, 0)),
        .eos_token = json_string_value(json_array_get(sp, 1)),
    };
    ember_jinja_template *t = load(tmpl);
    thr_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){t, &in, expected(exp, tmpl, conv), 0};
        assert_non_null(args[i].want);
        assert_int_equal(pthread_create(&th[i], NULL, render_many, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(args[i].ok);
    }
    ember_jinja_free(t);
    json_decref(exp);
    json_decref(convs);
}

/* Which templates read enable_thinking as if it were always given (the
 * rule behind --reasoning auto): the expected list is from reading each
 * template's source (tests/data/templates), where the only uses are plain
 * truth tests such as `if not enable_thinking`. */
static void test_assumes_enable_thinking(void **state)
{
    (void)state;
    assert_true(ember_chat_template_assumes_enable_thinking("{% if not enable_thinking %}<think>\n\n</think>{% endif %}"));
    assert_true(ember_chat_template_assumes_enable_thinking("{%- if enable_thinking %}x{% endif %}"));
    assert_false(ember_chat_template_assumes_enable_thinking("{% if enable_thinking is defined and enable_thinking is false %}"));
    assert_false(ember_chat_template_assumes_enable_thinking("{% set t = enable_thinking | default(true) %}{% if t %}{% endif %}"));
    assert_false(ember_chat_template_assumes_enable_thinking("{% if enable_thinking is not defined %}{% set enable_thinking = true %}{% endif %}{% if enable_thinking %}{% endif %}"));
    assert_false(ember_chat_template_assumes_enable_thinking("{% set ns = namespace(enable_thinking=true) %}{% if ns.enable_thinking %}{% endif %}"));
    assert_false(ember_chat_template_assumes_enable_thinking("{{ messages }}"));
    assert_false(ember_chat_template_assumes_enable_thinking(NULL));
    static const char *const want[] = {"Bielik-11B-v3.0-Instruct", "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
                                       "Qwen-QwQ-32B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"};
    DIR *d = opendir("tests/data/templates");
    assert_non_null(d);
    struct dirent *e;
    size_t n_yes = 0, n_files = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".jinja")) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/data/templates/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        char *src = calloc((size_t)n + 1, 1);
        assert_int_equal(fread(src, 1, (size_t)n, f), (size_t)n);
        fclose(f);
        bool expect = false;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            if (len - 6 == strlen(want[i]) && !strncmp(e->d_name, want[i], len - 6)) expect = true;
        if (ember_chat_template_assumes_enable_thinking(src) != expect) print_message("MISMATCH %s\n", e->d_name);
        assert_int_equal(ember_chat_template_assumes_enable_thinking(src), expect);
        n_yes += expect;
        n_files++;
        free(src);
    }
    closedir(d);
    assert_int_equal(n_yes, 4);
    assert_true(n_files >= 60);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_matches_transformers),
        cmocka_unit_test(test_context_checks),
        cmocka_unit_test(test_concurrent_renders),
        cmocka_unit_test(test_assumes_enable_thinking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
