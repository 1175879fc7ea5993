/* OpenAI Responses requests rewritten as the common request
 * (src/server/responses.c), then parsed by oai_parse as the server does.
 * Expected mappings are those the Responses API reference gives the fields
 * (platform.openai.com/docs/api-reference/responses/create and the
 * `openai` client's types/responses/: input as a string or input items,
 * EasyInputMessage {role, content}, input_text / output_text parts,
 * function_call {call_id, name, arguments}, function_call_output {call_id,
 * output}, reasoning {summary, content: [reasoning_text]}, function tools
 * {type, name, description, parameters, strict}, tool_choice strings or
 * {type: function, name}, text.format, reasoning.effort,
 * max_output_tokens) onto the chat fields llama-server maps them to
 * (tools/server/server-chat.cpp, server_chat_convert_responses_to_chatcmpl). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "server/responses.h"

/* body text -> resp_to_oai -> oai_parse; false when either refuses */
static bool convert(const char *text, bool count, oai_req *r, oai_error *err)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("bad test JSON: %s: %s", je.text, text);
    memset(r, 0, sizeof *r);
    json_t *o = resp_to_oai(j, count, err);
    json_decref(j);
    if (!o) return false;
    bool ok = oai_parse(o, OAI_CHAT, 1000, r, err);
    json_decref(o);
    if (!ok) resp_rename_param(err);
    return ok;
}

static void expect_bad(const char *text, const char *param, const char *word)
{
    oai_req r;
    oai_error err;
    if (convert(text, false, &r, &err)) fail_msg("accepted: %s", text);
    assert_int_equal(err.http_status, 400);
    assert_string_equal(err.type, "invalid_request_error");
    if (strcmp(err.param, param) != 0) fail_msg("%s: param '%s', want '%s' (%s)", text, err.param, param, err.message);
    if (word && !strstr(err.message, word)) fail_msg("%s: message '%s' lacks '%s'", text, err.message, word);
    oai_req_free(&r);
}

static const char *msg_str(const oai_req *r, size_t i, const char *key)
{
    return json_string_value(json_object_get(json_array_get(r->messages, i), key));
}

static void test_string_input_and_fields(void **state)
{
    (void)state;
    oai_req r;
    oai_error err;
    assert_true(convert("{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":\"Hi\",\"max_output_tokens\":7,"
                        "\"temperature\":0.5,\"top_p\":0.9,\"stream\":true,\"store\":false,\"top_k\":3,"
                        "\"metadata\":{\"a\":\"b\"},\"truncation\":\"disabled\",\"user\":\"u\"}", false, &r, &err));
    assert_int_equal(json_array_size(r.messages), 2);
    assert_string_equal(msg_str(&r, 0, "role"), "system");
    assert_string_equal(msg_str(&r, 0, "content"), "Be brief.");
    assert_string_equal(msg_str(&r, 1, "role"), "user");
    assert_string_equal(msg_str(&r, 1, "content"), "Hi");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.stream);
    assert_true(r.sampling.temp == 0.5f);
    assert_true(r.sampling.top_p == 0.9f);
    assert_int_equal(r.sampling.top_k, 3);
    assert_int_equal(r.tool_choice, OAI_TOOL_CHOICE_NONE);
    assert_null(r.gbnf);
    oai_req_free(&r);
    /* no max_output_tokens: until the end of the turn (or the context) */
    assert_true(convert("{\"input\":\"Hi\",\"stream\":true}", true, &r, &err));
    assert_int_equal(r.max_tokens, -1);
    assert_false(r.stream);   /* input_tokens counts; it never streams */
    oai_req_free(&r);
}

static void test_items(void **state)
{
    (void)state;
    oai_req r;
    oai_error err;
    /* a turn as a client sends it back: its output items (reasoning, message,
     * function_call) then the tool's output and the user's next message */
    assert_true(convert(
        "{\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather\",\"strict\":true,"
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
        "\"input\":[{\"role\":\"developer\",\"content\":\"Use tools.\"},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Weather \"},"
        "{\"type\":\"input_text\",\"text\":\"in Paris?\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"Call it.\"}]},"
        "{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"assistant\",\"status\":\"completed\",\"content\":"
        "[{\"type\":\"output_text\",\"text\":\"Checking.\",\"annotations\":[]}]},"
        "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"Sunny\"},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}]}", false, &r, &err));
    assert_int_equal(json_array_size(r.messages), 5);
    assert_string_equal(msg_str(&r, 0, "role"), "system");   /* developer is the system's */
    assert_string_equal(msg_str(&r, 0, "content"), "Use tools.");
    assert_string_equal(msg_str(&r, 1, "role"), "user");
    assert_string_equal(msg_str(&r, 1, "content"), "Weather in Paris?");
    /* reasoning, message and function_call are one assistant message */
    json_t *a = json_array_get(r.messages, 2);
    assert_string_equal(msg_str(&r, 2, "role"), "assistant");
    assert_string_equal(msg_str(&r, 2, "content"), "Checking.");
    assert_string_equal(msg_str(&r, 2, "reasoning_content"), "Call it.");
    json_t *call = json_array_get(json_object_get(a, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(call, "id")), "call_1");
    json_t *fn = json_object_get(call, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(json_object_get(fn, "arguments"), "city")), "Paris");
    assert_string_equal(msg_str(&r, 3, "role"), "tool");
    assert_string_equal(msg_str(&r, 3, "tool_call_id"), "call_1");
    assert_string_equal(msg_str(&r, 3, "content"), "Sunny");
    assert_string_equal(msg_str(&r, 4, "content"), "Thanks");
    /* tools: the chat shape */
    json_t *f = json_object_get(json_array_get(r.tools, 0), "function");
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.tools, 0), "type")), "function");
    assert_string_equal(json_string_value(json_object_get(f, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(f, "description")), "Weather");
    assert_true(json_is_true(json_object_get(f, "strict")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(f, "parameters"), "type")), "object");
    assert_int_equal(r.tool_choice, OAI_TOOL_CHOICE_AUTO);
    oai_req_free(&r);

    /* a call with no text before it: null content; output as input_text parts;
     * a reasoning item with only a summary gives the summary's text */
    assert_true(convert("{\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"input\":[{\"role\":\"user\",\"content\":\"go\"},"
                        "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"S\"}]},"
                        "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},"
                        "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":\"input_text\","
                        "\"text\":\"a\"},{\"type\":\"input_text\",\"text\":\"b\"}]}]}", false, &r, &err));
    assert_int_equal(json_array_size(r.messages), 3);
    assert_true(json_is_null(json_object_get(json_array_get(r.messages, 1), "content")));
    assert_string_equal(msg_str(&r, 1, "reasoning_content"), "S");
    assert_string_equal(msg_str(&r, 2, "content"), "ab");
    /* a tool with no parameters takes an empty object schema */
    json_t *p = json_object_get(json_object_get(json_array_get(r.tools, 0), "function"), "parameters");
    assert_string_equal(json_string_value(json_object_get(p, "type")), "object");
    oai_req_free(&r);
}

static void test_choice_format_reasoning(void **state)
{
    (void)state;
    const char *pre = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}],";
    struct { const char *tc; oai_tool_choice want; bool parallel; } cases[] = {
        {"\"tool_choice\":\"auto\"}", OAI_TOOL_CHOICE_AUTO, true},
        {"\"tool_choice\":\"required\"}", OAI_TOOL_CHOICE_REQUIRED, true},
        {"\"tool_choice\":\"none\"}", OAI_TOOL_CHOICE_NONE, true},
        {"\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},\"parallel_tool_calls\":false}", OAI_TOOL_CHOICE_NAMED,
         false},
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
    /* text.format json_schema / json_object: held by grammar; text: none */
    assert_true(convert("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\",\"strict\":true,"
                        "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}}", false, &r, &err));
    assert_non_null(r.gbnf);
    oai_req_free(&r);
    assert_true(convert("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}", false, &r, &err));
    assert_non_null(r.gbnf);
    oai_req_free(&r);
    assert_true(convert("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"},\"verbosity\":\"low\"}}", false, &r, &err));
    assert_null(r.gbnf);
    oai_req_free(&r);
    /* reasoning.effort: none -> thinking off, any other -> on; chat_template_kwargs wins */
    assert_true(convert("{\"input\":\"x\",\"reasoning\":{\"effort\":\"none\"}}", false, &r, &err));
    assert_true(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    oai_req_free(&r);
    assert_true(convert("{\"input\":\"x\",\"reasoning\":{\"effort\":\"high\",\"summary\":\"auto\"}}", false, &r, &err));
    assert_true(json_is_true(json_object_get(r.template_kwargs, "enable_thinking")));
    oai_req_free(&r);
    assert_true(convert("{\"input\":\"x\",\"reasoning\":{\"effort\":\"none\"},\"chat_template_kwargs\":"
                        "{\"enable_thinking\":true}}", false, &r, &err));
    assert_true(json_is_true(json_object_get(r.template_kwargs, "enable_thinking")));
    oai_req_free(&r);
    assert_true(convert("{\"input\":\"x\",\"reasoning\":{}}", false, &r, &err));
    assert_null(json_object_get(r.template_kwargs, "enable_thinking"));
    oai_req_free(&r);
}

static void test_rejections(void **state)
{
    (void)state;
    expect_bad("{}", "input", "input");
    expect_bad("{\"input\":5}", "input", "string");
    expect_bad("{\"input\":[]}", "input", "empty");
    expect_bad("[1]", "", "object");
    expect_bad("{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id", "stateless");
    expect_bad("{\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation", "stateless");
    expect_bad("{\"input\":\"x\",\"background\":true}", "background", NULL);
    expect_bad("{\"input\":\"x\",\"store\":\"yes\"}", "store", NULL);
    expect_bad("{\"input\":\"x\",\"instructions\":[1]}", "instructions", NULL);
    expect_bad("{\"input\":[7]}", "input[0]", NULL);
    expect_bad("{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "input[0].role", NULL);
    expect_bad("{\"input\":[{\"role\":\"user\"}]}", "input[0].content", NULL);
    expect_bad("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"u\"}]}]}",
               "input[0].content[0]", "input_image");
    expect_bad("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"output_text\",\"text\":\"u\"}]}]}",
               "input[0].content[0]", "output_text");
    expect_bad("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":5}]}]}",
               "input[0].content[0]", NULL);
    expect_bad("{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":{}}]}",
               "input[0]", "arguments");
    expect_bad("{\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}", "input[0].call_id", NULL);
    expect_bad("{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", "input[0].output", NULL);
    expect_bad("{\"input\":[{\"type\":\"reasoning\",\"content\":[]}]}", "input[0]", "summary");
    expect_bad("{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", "input[0]", "stateless");
    expect_bad("{\"input\":[{\"type\":\"web_search_call\"}]}", "input[0]", "web_search_call");
    expect_bad("{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", NULL);
    expect_bad("{\"input\":\"x\",\"max_output_tokens\":\"5\"}", "max_output_tokens", NULL);
    expect_bad("{\"input\":\"x\",\"temperature\":3}", "temperature", NULL);
    expect_bad("{\"input\":\"x\",\"top_p\":-1}", "top_p", NULL);
    expect_bad("{\"input\":\"x\",\"tools\":{}}", "tools", NULL);
    expect_bad("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]", "function");
    expect_bad("{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools[0]", "name");
    expect_bad("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":5}]}", "tools[0]", NULL);
    expect_bad("{\"input\":\"x\",\"tool_choice\":\"maybe\"}", "tool_choice", NULL);
    expect_bad("{\"input\":\"x\",\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":[]}}",
               "tool_choice", NULL);
    expect_bad("{\"input\":\"x\",\"tool_choice\":\"required\"}", "tool_choice", "tools");   /* oai_parse's check */
    expect_bad("{\"input\":\"x\",\"text\":5}", "text", NULL);
    expect_bad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format.type", NULL);
    expect_bad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\"}}}", "text.format.schema",
               NULL);
    expect_bad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":"
               "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/nowhere\"}}}}}}", "text.format", NULL);
    expect_bad("{\"input\":\"x\",\"reasoning\":{\"effort\":\"max\"}}", "reasoning.effort", NULL);
    expect_bad("{\"input\":\"x\",\"reasoning\":5}", "reasoning", NULL);
    expect_bad("{\"input\":\"x\",\"model\":5}", "model", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_input_and_fields),
        cmocka_unit_test(test_items),
        cmocka_unit_test(test_choice_format_reasoning),
        cmocka_unit_test(test_rejections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
