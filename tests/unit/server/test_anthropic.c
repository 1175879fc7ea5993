/* Anthropic Messages requests rewritten as the common request
 * (src/server/anthropic.c), then parsed by oai_parse as the server does.
 * Expected mappings are those Anthropic's API reference gives the fields
 * (docs.anthropic.com/en/api/messages: system as a string or text blocks,
 * tool_use {id, name, input}, tool_result {tool_use_id, content}, thinking
 * {thinking, signature}, tool_choice auto/any/tool/none,
 * disable_parallel_tool_use, stop_sequences, max_tokens required) onto the
 * OpenAI chat fields llama-server maps them to (tools/server/
 * server-common.cpp, convert_anthropic_to_oai); error types by status from
 * docs.anthropic.com/en/api/errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "server/anthropic.h"

/* body text -> anth_to_oai -> oai_parse; false when either refuses */
static bool convert(const char *text, bool count, oai_req *r, oai_error *err)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("bad test JSON: %s: %s", je.text, text);
    memset(r, 0, sizeof *r);
    json_t *o = anth_to_oai(j, count, err);
    json_decref(j);
    if (!o) return false;
    bool ok = oai_parse(o, OAI_CHAT, 1000, r, err);
    json_decref(o);
    return ok;
}

static void expect_bad(const char *text, const char *param)
{
    oai_req r;
    oai_error err;
    if (convert(text, false, &r, &err)) fail_msg("accepted: %s", text);
    assert_int_equal(err.http_status, 400);
    assert_string_equal(err.param, param);
    assert_true(strlen(err.message) > 10);
    json_t *e = anth_error_json(&err);
    assert_string_equal(json_string_value(json_object_get(e, "type")), "error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "type")), "invalid_request_error");
    json_decref(e);
    oai_req_free(&r);
}

static const char *msg_str(const oai_req *r, size_t i, const char *key)
{
    return json_string_value(json_object_get(json_array_get(r->messages, i), key));
}

static void test_system_and_text(void **state)
{
    (void)state;
    oai_req r;
    oai_error err;
    assert_true(convert("{\"model\":\"m\",\"max_tokens\":7,\"system\":\"Be brief.\",\"temperature\":0.5,\"top_k\":3,"
                        "\"stop_sequences\":[\"END\",\"\\n\\n\"],\"stream\":true,"
                        "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", false, &r, &err));
    assert_int_equal(json_array_size(r.messages), 2);
    assert_string_equal(msg_str(&r, 0, "role"), "system");
    assert_string_equal(msg_str(&r, 0, "content"), "Be brief.");
    assert_string_equal(msg_str(&r, 1, "role"), "user");
    assert_string_equal(msg_str(&r, 1, "content"), "Hi");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.stream);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "END");
    assert_string_equal(r.stop[1], "\n\n");
    assert_int_equal(r.sampling.top_k, 3);
    assert_true(r.sampling.temp == 0.5f);
    oai_req_free(&r);

    /* system and content as text blocks: the same strings (blocks joined) */
    assert_true(convert("{\"max_tokens\":1,\"system\":[{\"type\":\"text\",\"text\":\"A\"},{\"type\":\"text\",\"text\":\"B\"}],"
                        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"
                        "{\"type\":\"text\",\"text\":\"y\"}]}]}", false, &r, &err));
    assert_string_equal(msg_str(&r, 0, "content"), "AB");
    assert_string_equal(msg_str(&r, 1, "content"), "xy");
    oai_req_free(&r);
}

static void test_tool_blocks(void **state)
{
    (void)state;
    oai_req r;
    oai_error err;
    assert_true(convert(
        "{\"max_tokens\":9,\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":"
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Use the tool.\",\"signature\":\"s\"},"
        "{\"type\":\"text\",\"text\":\"Checking.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"Sunny\"},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"content\":[{\"type\":\"text\",\"text\":\"Rain\"}]},"
        "{\"type\":\"text\",\"text\":\"Thanks\"}]}]}", false, &r, &err));
    assert_int_equal(json_array_size(r.messages), 5);
    json_t *a = json_array_get(r.messages, 1);
    assert_string_equal(msg_str(&r, 1, "role"), "assistant");
    assert_string_equal(msg_str(&r, 1, "content"), "Checking.");
    assert_string_equal(msg_str(&r, 1, "reasoning_content"), "Use the tool.");
    json_t *call = json_array_get(json_object_get(a, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(call, "id")), "toolu_1");
    json_t *fn = json_object_get(call, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
    /* arguments reach the template as the object (oai_parse_messages) */
    assert_string_equal(json_string_value(json_object_get(json_object_get(fn, "arguments"), "city")), "Paris");
    /* tool results first, in order, then the user's own text */
    assert_string_equal(msg_str(&r, 2, "role"), "tool");
    assert_string_equal(msg_str(&r, 2, "tool_call_id"), "toolu_1");
    assert_string_equal(msg_str(&r, 2, "content"), "Sunny");
    assert_string_equal(msg_str(&r, 3, "tool_call_id"), "toolu_2");
    assert_string_equal(msg_str(&r, 3, "content"), "Rain");
    assert_string_equal(msg_str(&r, 4, "role"), "user");
    assert_string_equal(msg_str(&r, 4, "content"), "Thanks");
    /* tools: input_schema is the function's parameters */
    json_t *f = json_object_get(json_array_get(r.tools, 0), "function");
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.tools, 0), "type")), "function");
    assert_string_equal(json_string_value(json_object_get(f, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(f, "description")), "Weather");
    assert_string_equal(json_string_value(json_object_get(json_object_get(f, "parameters"), "type")), "object");
    assert_int_equal(r.tool_choice, OAI_TOOL_CHOICE_AUTO);
    oai_req_free(&r);

    /* an assistant turn of tool calls only has null content */
    assert_true(convert("{\"max_tokens\":1,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
                        "\"messages\":[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\",\"content\":"
                        "[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}]},{\"role\":\"user\",\"content\":"
                        "[{\"type\":\"tool_result\",\"tool_use_id\":\"t\"}]}]}", false, &r, &err));
    assert_true(json_is_null(json_object_get(json_array_get(r.messages, 1), "content")));
    assert_string_equal(msg_str(&r, 2, "content"), "");
    oai_req_free(&r);
}

static void test_tool_choice_and_thinking(void **state)
{
    (void)state;
    const char *pre = "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                      "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],";
    struct { const char *tc; oai_tool_choice want; bool parallel; } cases[] = {
        {"\"tool_choice\":{\"type\":\"auto\"}}", OAI_TOOL_CHOICE_AUTO, true},
        {"\"tool_choice\":{\"type\":\"any\"}}", OAI_TOOL_CHOICE_REQUIRED, true},
        {"\"tool_choice\":{\"type\":\"none\"}}", OAI_TOOL_CHOICE_NONE, true},
        {"\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\",\"disable_parallel_tool_use\":true}}", OAI_TOOL_CHOICE_NAMED,
         false},
        {"\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true}}", OAI_TOOL_CHOICE_REQUIRED, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "%s%s", pre, cases[i].tc);
        oai_req r;
        oai_error err;
        if (!convert(body, false, &r, &err)) fail_msg("%s: %s", body, err.message);
        assert_int_equal(r.tool_choice, cases[i].want);
        assert_int_equal(r.parallel_tool_calls, cases[i].parallel);
        if (cases[i].want == OAI_TOOL_CHOICE_NAMED) assert_string_equal(r.tool_name, "f");
        oai_req_free(&r);
    }
    oai_req r;
    oai_error err;
    assert_true(convert("{\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}", false, &r, &err));
    assert_true(json_is_true(json_object_get(r.template_kwargs, "enable_thinking")));
    assert_int_equal(r.reasoning_budget, 1024);
    oai_req_free(&r);
    assert_true(convert("{\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                        "\"thinking\":{\"type\":\"disabled\"}}", false, &r, &err));
    assert_true(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    assert_int_equal(r.reasoning_budget, -2);
    oai_req_free(&r);
    assert_true(convert("{\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                        "\"thinking\":{\"type\":\"adaptive\"}}", false, &r, &err));
    assert_true(json_is_true(json_object_get(r.template_kwargs, "enable_thinking")));
    assert_int_equal(r.reasoning_budget, -2);
    oai_req_free(&r);
    /* structured output: the schema held by grammar */
    assert_true(convert("{\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"output_config\":"
                        "{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}}}", false, &r, &err));
    assert_non_null(r.gbnf);
    oai_req_free(&r);
    /* count_tokens needs no max_tokens */
    assert_true(convert("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", true, &r, &err));
    oai_req_free(&r);
}

static void test_rejections(void **state)
{
    (void)state;
    const char *hi = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[512];
    snprintf(b, sizeof b, "{%s}", hi);
    expect_bad(b, "max_tokens");
    snprintf(b, sizeof b, "{\"max_tokens\":0,%s}", hi);
    expect_bad(b, "max_tokens");
    snprintf(b, sizeof b, "{\"max_tokens\":\"5\",%s}", hi);
    expect_bad(b, "max_tokens");
    expect_bad("{\"max_tokens\":5}", "messages");
    expect_bad("{\"max_tokens\":5,\"messages\":[]}", "messages");
    expect_bad("{\"max_tokens\":5,\"messages\":{}}", "messages");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    expect_bad("{\"max_tokens\":5,\"messages\":[7]}", "messages[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\"}]}", "messages[0].content");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
               "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[\"text\"]}]}", "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
               "messages[0].content[0]");
    /* tool_use belongs to the assistant, tool_result to the user */
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\","
               "\"name\":\"f\",\"input\":{}}]}]}", "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_result\","
               "\"tool_use_id\":\"a\"}]}]}", "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\","
               "\"name\":\"f\",\"input\":\"{}\"}]}]}", "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
               "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
               "\"tool_use_id\":\"a\",\"content\":[{\"type\":\"image\"}]}]}]}", "messages[0].content[0].content");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"system\":5,%s}", hi);
    expect_bad(b, "system");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],%s}", hi);
    expect_bad(b, "system");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"tools\":[{\"name\":\"f\"}],%s}", hi);
    expect_bad(b, "tools[0]");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],%s}", hi);
    expect_bad(b, "tools[0]");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"tools\":{},%s}", hi);
    expect_bad(b, "tools");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"tool_choice\":{\"type\":\"maybe\"},%s}", hi);
    expect_bad(b, "tool_choice.type");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"tool_choice\":\"auto\",%s}", hi);
    expect_bad(b, "tool_choice");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\"},%s}", hi);
    expect_bad(b, "tool_choice.name");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"thinking\":{\"type\":\"sometimes\"},%s}", hi);
    expect_bad(b, "thinking.type");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":-1},%s}", hi);
    expect_bad(b, "thinking.budget_tokens");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"stop_sequences\":\"x\",%s}", hi);
    expect_bad(b, "stop_sequences");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"stop_sequences\":[\"a\",\"b\",\"c\",\"d\",\"e\"],%s}", hi);
    expect_bad(b, "stop_sequences");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"stop_sequences\":[\"a\",1],%s}", hi);
    expect_bad(b, "stop_sequences");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"output_config\":{\"format\":{\"type\":\"xml\"}},%s}", hi);
    expect_bad(b, "output_config.format");
    snprintf(b, sizeof b, "{\"max_tokens\":5,\"model\":5,%s}", hi);
    expect_bad(b, "model");
}

static void test_errors_and_stop_reasons(void **state)
{
    (void)state;
    struct { int status; const char *type; } cases[] = {
        {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
        {404, "not_found_error"}, {413, "request_too_large"}, {429, "rate_limit_error"},
        {500, "api_error"}, {503, "overloaded_error"}, {529, "overloaded_error"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oai_error err;
        oai_error_set(&err, cases[i].status, "whatever", NULL, NULL, "m%d", cases[i].status);
        json_t *j = anth_error_json(&err);
        assert_int_equal(json_object_size(j), 2);
        assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
        json_t *e = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(e, "type")), cases[i].type);
        char m[16];
        snprintf(m, sizeof m, "m%d", cases[i].status);
        assert_string_equal(json_string_value(json_object_get(e, "message")), m);
        json_decref(j);
    }
    assert_string_equal(anth_stop_reason(COMPLETION_STOP_EOG), "end_turn");
    assert_string_equal(anth_stop_reason(COMPLETION_STOP_WORD), "stop_sequence");
    assert_string_equal(anth_stop_reason(COMPLETION_STOP_LENGTH), "max_tokens");
    assert_string_equal(anth_stop_reason(COMPLETION_STOP_TOOL), "tool_use");
    assert_null(anth_stop_reason(COMPLETION_RUNNING));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_system_and_text),
        cmocka_unit_test(test_tool_blocks),
        cmocka_unit_test(test_tool_choice_and_thinking),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_errors_and_stop_reasons),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
