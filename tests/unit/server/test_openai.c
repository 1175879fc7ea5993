/* Request validation of src/server/openai.c. Expected defaults, ranges and
 * field names are those of the OpenAI API reference
 * (platform.openai.com/docs/api-reference/chat/create, .../completions/create):
 * max_tokens >= 1, temperature in [0, 2], top_p in [0, 1], penalties in
 * [-2, 2], at most 4 stop strings, logit_bias values in [-100, 100],
 * top_logprobs in [0, 20] and only with logprobs, completions' max_tokens
 * defaulting to 16. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "server/openai.h"

static bool parse(const char *text, oai_kind kind, oai_req *r, oai_error *err)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    bool ok = oai_parse(j, kind, 1000, r, err);
    json_decref(j);
    return ok;
}

static void expect_bad(const char *text, oai_kind kind, const char *param)
{
    oai_req r;
    oai_error err;
    bool ok = parse(text, kind, &r, &err);
    if (ok) fail_msg("accepted: %s", text);
    assert_int_equal(err.http_status, 400);
    assert_string_equal(err.param, param);
    assert_true(strlen(err.message) > 10);
    oai_req_free(&r);
}

static void test_chat_defaults(void **state)
{
    oai_req r;
    oai_error err;
    assert_true(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", OAI_CHAT, &r, &err));
    assert_int_equal(r.max_tokens, -1);
    assert_false(r.stream);
    /* absent sampling fields: llama-server's defaults (common/common.h) */
    assert_float_equal(r.sampling.temp, 0.8, 1e-6);
    assert_float_equal(r.sampling.top_p, 0.95, 1e-6);
    assert_int_equal(r.sampling.top_k, 40);
    assert_float_equal(r.sampling.min_p, 0.05, 1e-6);
    assert_int_equal(r.n_stop, 0);
    assert_int_equal(json_array_size(r.messages), 1);
    oai_req_free(&r);
}

static void test_chat_fields(void **state)
{
    oai_req r;
    oai_error err;
    assert_true(parse("{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                      "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,"
                      "\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                      "{\"role\":\"tool\",\"content\":\"1\",\"tool_call_id\":\"x\"}],"
                      "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0,\"top_p\":0.5,\"top_k\":3,"
                      "\"min_p\":0.1,\"presence_penalty\":1,\"frequency_penalty\":-1,\"seed\":42,\"stop\":\"x\","
                      "\"logit_bias\":{\"5\":-100,\"7\":2.5},\"logprobs\":true,\"top_logprobs\":2,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true},\"chat_template_kwargs\":{\"enable_thinking\":false},"
                      "\"unknown\":[1,2]}", OAI_CHAT, &r, &err));
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.messages, 0), "content")), "ab");
    assert_int_equal(r.max_tokens, 7);   /* max_completion_tokens wins */
    assert_float_equal(r.sampling.temp, 0, 0);
    assert_float_equal(r.sampling.top_p, 0.5, 1e-6);
    assert_int_equal(r.sampling.top_k, 3);
    assert_float_equal(r.sampling.presence_penalty, 1, 0);
    assert_float_equal(r.sampling.frequency_penalty, -1, 0);
    assert_int_equal(r.sampling.seed, 42);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "x");
    assert_int_equal(r.sampling.n_logit_bias, 2);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    assert_true(r.stream && r.include_usage);
    assert_non_null(r.template_kwargs);
    oai_req_free(&r);
}

static void test_chat_rejections(void **state)
{
    expect_bad("{}", OAI_CHAT, "messages");
    expect_bad("{\"messages\":{}}", OAI_CHAT, "messages");
    expect_bad("{\"messages\":[]}", OAI_CHAT, "messages");
    expect_bad("{\"messages\":[1]}", OAI_CHAT, "messages[0]");
    expect_bad("{\"messages\":[{\"content\":\"x\"}]}", OAI_CHAT, "messages[0].role");
    expect_bad("{\"messages\":[{\"role\":\"user\"}]}", OAI_CHAT, "messages[0].content");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", OAI_CHAT,
               "messages[0].content");
    const char *m = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    char buf[256];
    static const struct { const char *field, *param; } cases[] = {
        {"\"max_tokens\":0}", "max_tokens"},          {"\"max_tokens\":1.5}", "max_tokens"},
        {"\"max_tokens\":\"1\"}", "max_tokens"},      {"\"temperature\":2.5}", "temperature"},
        {"\"temperature\":-0.1}", "temperature"},     {"\"top_p\":true}", "top_p"},
        {"\"presence_penalty\":3}", "presence_penalty"}, {"\"frequency_penalty\":-3}", "frequency_penalty"},
        {"\"stop\":[1]}", "stop"},                    {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop"},
        {"\"logit_bias\":{\"1000\":1}}", "logit_bias"}, {"\"logit_bias\":{\"1\":\"x\"}}", "logit_bias"},
        {"\"logit_bias\":[1]}", "logit_bias"},        {"\"top_logprobs\":2}", "top_logprobs"},
        {"\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs"}, {"\"n\":129}", "n"}, {"\"n\":0}", "n"},
        {"\"stream\":1}", "stream"},                  {"\"stream_options\":{\"include_usage\":true}}", "stream_options"},
        {"\"stream\":true,\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage"},
        {"\"seed\":\"1\"}", "seed"},                  {"\"model\":5}", "model"},
        {"\"response_format\":{\"type\":\"json_schema\"}}", "response_format"},
        {"\"tools\":{}}", "tools"},                   {"\"chat_template_kwargs\":\"x\"}", "chat_template_kwargs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s", m, cases[i].field);
        expect_bad(buf, OAI_CHAT, cases[i].param);
    }
}

static void test_null_means_absent(void **state)
{
    oai_req r;
    oai_error err;
    assert_true(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":null,\"stop\":null,"
                      "\"temperature\":null,\"seed\":null,\"tools\":null}", OAI_CHAT, &r, &err));
    assert_int_equal(r.max_tokens, -1);
    oai_req_free(&r);
}

static void test_completion_prompt_forms(void **state)
{
    oai_req r;
    oai_error err;
    assert_true(parse("{\"prompt\":\"abc\"}", OAI_COMPLETION, &r, &err));
    assert_string_equal(r.prompt, "abc");
    assert_int_equal(r.max_tokens, 16);
    oai_req_free(&r);
    assert_true(parse("{\"prompt\":[\"abc\"],\"logprobs\":3}", OAI_COMPLETION, &r, &err));
    assert_string_equal(r.prompt, "abc");
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    oai_req_free(&r);
    assert_true(parse("{\"prompt\":[1,2,3]}", OAI_COMPLETION, &r, &err));
    assert_int_equal(r.n_prompt_tokens, 3);
    assert_int_equal(r.prompt_tokens[2], 3);
    oai_req_free(&r);
    expect_bad("{\"prompt\":[1,5000]}", OAI_COMPLETION, "prompt");
    expect_bad("{\"prompt\":[\"a\",\"b\"]}", OAI_COMPLETION, "prompt");
    expect_bad("{\"prompt\":5}", OAI_COMPLETION, "prompt");
    expect_bad("{}", OAI_COMPLETION, "prompt");
    expect_bad("{\"prompt\":\"x\",\"echo\":true}", OAI_COMPLETION, "echo");
}

static void test_invalid_utf8_becomes_replacement(void **state)
{
    json_t *s = oai_json_string("a\xff" "b\xe2\x82", 5);
    assert_string_equal(json_string_value(s), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(s);
    s = oai_json_string("\xe2\x82\xac", 3);   /* a whole euro sign stays */
    assert_string_equal(json_string_value(s), "\xe2\x82\xac");
    json_decref(s);
}

static void test_error_shape(void **state)
{
    oai_error err;
    oai_error_set(&err, 401, "invalid_request_error", NULL, "invalid_api_key", "no key");
    json_t *j = oai_error_json(&err);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "no key");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "invalid_api_key");
    assert_true(json_is_null(json_object_get(e, "param")));
    json_decref(j);
}

/* n > 1: the clone is a request of its own (ASan checks that freeing both
 * frees each once); its strings and bias are copies, not shared. */
static void test_clone_and_choices(void **state)
{
    (void)state;
    oai_req r, c;
    oai_error err;
    assert_true(parse("{\"prompt\":\"hi\",\"n\":3,\"stop\":[\"a\",\"b\"],\"logit_bias\":{\"5\":-100,\"7\":2},"
                      "\"seed\":9}", OAI_COMPLETION, &r, &err));
    assert_int_equal(r.n_choices, 3);
    assert_true(oai_req_clone(&r, &c));
    assert_ptr_not_equal(c.prompt, r.prompt);
    assert_string_equal(c.prompt, "hi");
    assert_ptr_not_equal(c.stop[1], r.stop[1]);
    assert_string_equal(c.stop[1], "b");
    assert_ptr_equal(c.sampling.logit_bias, c.logit_bias);
    assert_ptr_not_equal(c.logit_bias, r.logit_bias);
    assert_int_equal(c.sampling.n_logit_bias, 2);
    assert_int_equal(c.logit_bias[1].token, 7);
    assert_true(c.sampling.seed == 9);
    oai_req_free(&r);
    oai_req_free(&c);
}

/* Server defaults fill only what a body leaves out (null counts as out);
 * -n does not override max_tokens (llama-server's -n is n_predict's default). */
static void test_apply_defaults(void **state)
{
    (void)state;
    json_t *d = json_pack("{s:f, s:i, s:i}", "temperature", 0.0, "seed", 11, "n_predict", 5);
    json_t *b = json_pack("{s:s, s:n, s:i}", "prompt", "x", "temperature", "max_tokens", 3);
    oai_apply_defaults(b, d);
    assert_true(json_real_value(json_object_get(b, "temperature")) == 0.0);
    assert_int_equal(json_integer_value(json_object_get(b, "seed")), 11);
    assert_null(json_object_get(b, "n_predict"));
    json_t *b2 = json_pack("{s:s, s:i}", "prompt", "x", "seed", 4);
    oai_apply_defaults(b2, d);
    assert_int_equal(json_integer_value(json_object_get(b2, "seed")), 4);
    assert_int_equal(json_integer_value(json_object_get(b2, "n_predict")), 5);
    json_t *p = oai_default_settings_json(d);
    assert_int_equal(json_integer_value(json_object_get(p, "max_tokens")), 5);
    assert_int_equal(json_integer_value(json_object_get(p, "top_k")), 40);
    json_decref(p);
    p = oai_default_settings_json(NULL);
    assert_int_equal(json_integer_value(json_object_get(p, "seed")), 4294967295LL);
    json_decref(p);
    json_decref(b);
    json_decref(b2);
    json_decref(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_defaults),
        cmocka_unit_test(test_chat_fields),
        cmocka_unit_test(test_chat_rejections),
        cmocka_unit_test(test_null_means_absent),
        cmocka_unit_test(test_completion_prompt_forms),
        cmocka_unit_test(test_invalid_utf8_becomes_replacement),
        cmocka_unit_test(test_error_shape),
        cmocka_unit_test(test_clone_and_choices),
        cmocka_unit_test(test_apply_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
