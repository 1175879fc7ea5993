/* tool_choice grammars of src/server/chat_tools.c and the request fields of
 * openai.c that feed them. Expected call texts are written from the formats'
 * public descriptions: Qwen 2.5's chat template (tests/data/templates/
 * Qwen-Qwen2.5-7B-Instruct.jinja: "<tool_call>\n{"name": <function-name>,
 * "arguments": <args-json-object>}\n</tool_call>") and Llama 3.1's model card
 * ({"name": ..., "parameters": ...}). The grammar is checked byte-wise with
 * grammar.h (no vocabulary needed). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "sample/grammar.h"
#include "server/chat_tools.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";

static bool parse_req(const char *extra, oai_req *r, oai_error *err)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":%s%s}", TOOLS, extra);
    json_t *j = json_loads(body, 0, NULL);
    assert_non_null(j);
    bool ok = oai_parse(j, OAI_CHAT, 1000, r, err);
    json_decref(j);
    return ok;
}

/* Whether `text` is a complete sentence of the grammar. */
static bool accepts(const char *gbnf, const char *text)
{
    ember_grammar *g = NULL;
    ember_grammar_state *st = NULL;
    assert_int_equal(ember_grammar_parse(gbnf, strlen(gbnf), NULL, &g), EMBER_OK);
    assert_int_equal(ember_grammar_state_new(g, NULL, &st), EMBER_OK);
    bool ok = ember_grammar_accept_bytes(st, text, strlen(text)) == EMBER_OK && ember_grammar_can_end(st);
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    return ok;
}

static char *gbnf_for(const char *extra, ember_tool_format f)
{
    oai_req r;
    oai_error err;
    assert_true(parse_req(extra, &r, &err));
    char *g = NULL;
    const char *param = NULL;
    assert_int_equal(chat_tools_choice_gbnf(&r, f, &g, &param), EMBER_OK);
    oai_req_free(&r);
    return g;
}

static const char *CALL_W = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>";
static const char *CALL_N = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

static void test_required_hermes(void **state)
{
    (void)state;
    char *g = gbnf_for(",\"tool_choice\":\"required\",\"parallel_tool_calls\":false", EMBER_TOOL_FORMAT_HERMES);
    assert_non_null(g);
    assert_true(accepts(g, CALL_W));
    assert_true(accepts(g, CALL_N));
    assert_false(accepts(g, "Sure! " ));
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"k\"}}\n</tool_call>"));
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
    /* extra arguments are not allowed in a call */
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"c\", \"x\": 1}}\n</tool_call>"));
    char two[512];
    snprintf(two, sizeof two, "%s\n%s", CALL_W, CALL_N);
    assert_false(accepts(g, two));                 /* parallel_tool_calls false: one call */
    free(g);
    g = gbnf_for(",\"tool_choice\":\"required\"", EMBER_TOOL_FORMAT_HERMES);
    assert_true(accepts(g, two));
    free(g);
}

static void test_named_and_llama3(void **state)
{
    (void)state;
    char *g = gbnf_for(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}}", EMBER_TOOL_FORMAT_HERMES);
    assert_true(accepts(g, CALL_N));
    assert_false(accepts(g, CALL_W));
    free(g);
    g = gbnf_for(",\"tool_choice\":\"required\"", EMBER_TOOL_FORMAT_LLAMA3);
    assert_true(accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"unit\": \"f\"}}"));
    assert_false(accepts(g, CALL_W));
    free(g);
    /* auto and none need no grammar */
    assert_null(gbnf_for("", EMBER_TOOL_FORMAT_HERMES));
    assert_null(gbnf_for(",\"tool_choice\":\"none\"", EMBER_TOOL_FORMAT_HERMES));
}

static char *gbnf_tmpl(const char *extra, ember_tool_format f, const char *tmpl)
{
    oai_req r;
    oai_error err;
    assert_true(parse_req(extra, &r, &err));
    char *g = NULL;
    const char *param = NULL;
    assert_int_equal(chat_tools_choice_gbnf_tmpl(&r, f, tmpl, &g, &param), EMBER_OK);
    oai_req_free(&r);
    assert_non_null(g);
    return g;
}

/* Gemma 4 (google-gemma-4-31B-it.jinja: '<|tool_call>call:' + name + '{' +
 * key:format_argument(value) + '}<tool_call|>', strings in <|"|>). */
static void test_required_gemma4(void **state)
{
    (void)state;
    char *g = gbnf_tmpl(",\"tool_choice\":\"required\",\"parallel_tool_calls\":false", EMBER_TOOL_FORMAT_GEMMA4, NULL);
    const char *w = "<|tool_call>call:get_weather{city:<|\"|>Paris, France<|\"|>,unit:<|\"|>c<|\"|>}<tool_call|>";
    const char *n = "<|tool_call>call:now{}<tool_call|>";
    assert_true(accepts(g, w));
    assert_true(accepts(g, n));
    assert_false(accepts(g, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>k<|\"|>}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:get_weather{\"city\": \"Paris\", \"unit\": \"c\"}<tool_call|>"));
    char two[512];
    snprintf(two, sizeof two, "%s%s", w, n);
    assert_false(accepts(g, two));
    free(g);
    g = gbnf_tmpl(",\"tool_choice\":\"required\"", EMBER_TOOL_FORMAT_GEMMA4, NULL);
    assert_true(accepts(g, two));                  /* parallel: back to back */
    free(g);
}

/* Qwen3-Coder (Qwen3-Coder.jinja: '<tool_call>\n<function=' + name + '>\n',
 * per argument '<parameter=' + key + '>\n' + value + '\n</parameter>\n', then
 * '</function>\n</tool_call>'; string parameters raw, others JSON). */
static void test_required_qwen3_coder(void **state)
{
    (void)state;
    char *g = gbnf_tmpl(",\"tool_choice\":\"required\"", EMBER_TOOL_FORMAT_QWEN3_CODER, NULL);
    const char *w = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis \"centre\"\n</parameter>\n"
                    "<parameter=unit>\n\"f\"\n</parameter>\n</function>\n</tool_call>";
    const char *n = "<tool_call>\n<function=now>\n</function>\n</tool_call>";
    assert_true(accepts(g, w));
    assert_true(accepts(g, n));
    char two[512];
    snprintf(two, sizeof two, "%s\n%s", w, n);
    assert_true(accepts(g, two));
    assert_false(accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"));
    assert_false(accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                            "<parameter=unit>\n\"x\"\n</parameter>\n</function>\n</tool_call>"));
    free(g);
    g = gbnf_tmpl(",\"tool_choice\":\"required\",\"parallel_tool_calls\":false", EMBER_TOOL_FORMAT_QWEN3_CODER, NULL);
    assert_false(accepts(g, two));
    free(g);
}

/* Mistral: Devstral / Small 3.2 / Ministral 3 ('[TOOL_CALLS]' + name +
 * '[ARGS]' + arguments|tojson) and Mistral Nemo ('[TOOL_CALLS][' + calls as
 * {"name": .., "arguments": ..} + ']'). */
static void test_required_mistral(void **state)
{
    (void)state;
    char *g = gbnf_tmpl(",\"tool_choice\":\"required\"", EMBER_TOOL_FORMAT_MISTRAL, "{{ name + '[ARGS]' }}");
    const char *w = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"c\"}";
    assert_true(accepts(g, w));
    char two[512];
    snprintf(two, sizeof two, "%s[TOOL_CALLS]now[ARGS]{}", w);
    assert_true(accepts(g, two));
    assert_false(accepts(g, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"));
    free(g);
    g = gbnf_tmpl(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}}", EMBER_TOOL_FORMAT_MISTRAL,
                  "{{- \"[TOOL_CALLS][\" }}");
    assert_true(accepts(g, "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]"));
    /* a named function is called once (OpenAI), even with parallel_tool_calls (its default) */
    assert_false(accepts(g, "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]"));
    assert_false(accepts(g, "[TOOL_CALLS]now[ARGS]{}"));
    assert_false(accepts(g, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"c\"}}]"));
    free(g);
}

static void test_errors(void **state)
{
    (void)state;
    oai_req r;
    oai_error err;
    char *g = NULL;
    const char *param = NULL;
    assert_true(parse_req(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}", &r, &err));
    assert_int_equal(chat_tools_choice_gbnf(&r, EMBER_TOOL_FORMAT_HERMES, &g, &param), EMBER_ERR_NOT_FOUND);
    assert_int_equal(chat_tools_choice_gbnf(&r, EMBER_TOOL_FORMAT_NONE, &g, &param), EMBER_ERR_UNSUPPORTED);
    assert_null(g);
    oai_req_free(&r);
    assert_false(parse_req(",\"tool_choice\":\"always\"", &r, &err));
    assert_string_equal(err.param, "tool_choice");
    oai_req_free(&r);
    assert_false(parse_req(",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}", &r, &err));
    oai_req_free(&r);
    assert_false(parse_req(",\"reasoning_budget\":\"x\"", &r, &err));
    assert_string_equal(err.param, "reasoning_budget");
    oai_req_free(&r);
}

static void test_request_fields(void **state)
{
    (void)state;
    oai_req r;
    oai_error err;
    assert_true(parse_req(",\"reasoning_effort\":\"none\",\"reasoning_budget\":7,\"response_format\":{\"type\":\"json_object\"}",
                          &r, &err));
    assert_true(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    assert_int_equal(r.reasoning_budget, 7);
    assert_non_null(r.gbnf);
    assert_true(accepts(r.gbnf, "{\"a\": [1, true, null]}"));
    assert_false(accepts(r.gbnf, "[1]"));
    oai_req_free(&r);
    /* an explicit enable_thinking wins over reasoning_effort */
    assert_true(parse_req(",\"reasoning_effort\":\"none\",\"chat_template_kwargs\":{\"enable_thinking\":true}", &r, &err));
    assert_true(json_is_true(json_object_get(r.template_kwargs, "enable_thinking")));
    assert_int_equal(r.reasoning_budget, -2);
    assert_null(r.gbnf);
    oai_req_free(&r);
}

/* ember's generic format (chat/formats/generic.c): {"tool_calls": [...]}
 * under required / named, and under auto also {"response": STRING}, the
 * shapes of llama.cpp's former generic format; ", " between parallel calls. */
static void test_generic(void **state)
{
    (void)state;
    static const char *w = "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}]}";
    static const char *two = "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}, "
                             "{\"name\": \"now\", \"arguments\": {}}]}";
    static const char *answer = "{\"response\": \"Hello! \\\"Hi\\\" \\u00e9\"}";
    char *g = gbnf_for(",\"tool_choice\":\"required\"", EMBER_TOOL_FORMAT_GENERIC);
    assert_true(accepts(g, w));
    assert_true(accepts(g, two));
    assert_false(accepts(g, answer));              /* required: a call, not an answer */
    assert_false(accepts(g, "{\"tool_calls\": []}"));
    assert_false(accepts(g, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}"));
    free(g);
    g = gbnf_for(",\"tool_choice\":\"required\",\"parallel_tool_calls\":false", EMBER_TOOL_FORMAT_GENERIC);
    assert_true(accepts(g, w));
    assert_false(accepts(g, two));
    free(g);
    g = gbnf_for(",\"tool_choice\":\"auto\"", EMBER_TOOL_FORMAT_GENERIC);
    assert_true(accepts(g, w));
    assert_true(accepts(g, two));
    assert_true(accepts(g, answer));
    assert_false(accepts(g, "Hello!"));
    assert_false(accepts(g, "{\"response\": 42}"));
    free(g);
    g = gbnf_for("", EMBER_TOOL_FORMAT_GENERIC);   /* auto is the default with tools */
    assert_true(accepts(g, answer));
    free(g);
    oai_req r;
    oai_error err;
    assert_true(parse_req(",\"tool_choice\":\"none\"", &r, &err));
    const char *param = NULL;
    assert_int_equal(chat_tools_choice_gbnf(&r, EMBER_TOOL_FORMAT_GENERIC, &g, &param), EMBER_OK);
    assert_null(g);                                /* none: a plain reply */
    oai_req_free(&r);
    /* auto leaves a native format free (its calls are parsed, not forced) */
    assert_true(parse_req(",\"tool_choice\":\"auto\"", &r, &err));
    assert_int_equal(chat_tools_choice_gbnf(&r, EMBER_TOOL_FORMAT_HERMES, &g, &param), EMBER_OK);
    assert_null(g);
    oai_req_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_required_hermes),
        cmocka_unit_test(test_named_and_llama3),
        cmocka_unit_test(test_required_gemma4),
        cmocka_unit_test(test_required_qwen3_coder),
        cmocka_unit_test(test_required_mistral),
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_request_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
