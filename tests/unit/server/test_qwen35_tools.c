/* Qwen3.5's tool calls under tool_choice required / named (issue 17.4): the
 * grammar of src/server/chat_tools.c for the Qwen3-Coder XML format, alone
 * and after the thought Qwen3.5's generation prompt opens ("<think>\n" with
 * enable_thinking), and the output parser on what it admits. Independent
 * values: the call text is cut from what jinja2 renders for an assistant
 * message with tool_calls in Qwen3.5-4B.jinja (tests/golden/jinja/
 * expected.json, conversation q35_content_then_calls), and the calls it must
 * parse to are that conversation's own (conversations.json). Last, the
 * reasoning budget's forced close (parse.h: "\n</think>\n\n") when the
 * slot's grammar refuses it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "chat/parse.h"
#include "sample/grammar.h"
#include "server/chat_tools.h"

static json_t *golden_conv(const char *conv, json_t **context)
{
    json_error_t je;
    json_t *exp = json_load_file("tests/golden/jinja/expected.json", 0, &je);
    json_t *convs = json_load_file("tests/golden/jinja/conversations.json", 0, &je);
    assert_non_null(exp);
    assert_non_null(convs);
    json_t *out = NULL, *cs;
    size_t i;
    json_array_foreach(json_object_get(exp, "cases"), i, cs) {
        if (!strcmp(json_string_value(json_object_get(cs, "template")), "Qwen3.5-4B") &&
            !strcmp(json_string_value(json_object_get(cs, "conversation")), conv))
            out = json_incref(json_object_get(cs, "output"));
    }
    *context = json_incref(json_object_get(json_object_get(convs, "conversations"), conv));
    json_decref(exp);
    json_decref(convs);
    assert_non_null(out);
    assert_non_null(*context);
    return out;
}

/* The calls of the rendered assistant turn: from its first "<tool_call>" to
 * its last "</tool_call>", as the model writes them after its thought. */
static char *rendered_calls(const char *prompt)
{
    const char *a = strstr(prompt, "<|im_start|>assistant\n");
    assert_non_null(a);
    const char *b = strstr(a, "<tool_call>"), *end = strstr(a, "<|im_end|>");
    assert_non_null(b);
    const char *e = NULL;
    for (const char *p = b; (p = strstr(p, "</tool_call>")) && p < end; p++) e = p;
    assert_non_null(e);
    size_t n = (size_t)(e + strlen("</tool_call>") - b);
    char *s = malloc(n + 1);
    memcpy(s, b, n);
    s[n] = 0;
    return s;
}

static oai_req request(const json_t *ctx, const char *choice)
{
    json_t *body = json_pack("{s:[{s:s,s:s}], s:O}", "messages", "role", "user", "content", "hi", "tools",
                             json_object_get(ctx, "tools"));
    json_object_set_new(body, "tool_choice", json_loads(choice, JSON_DECODE_ANY, NULL));
    oai_req r;
    oai_error err;
    assert_true(oai_parse(body, OAI_CHAT, 1000, &r, &err));
    json_decref(body);
    return r;
}

static bool accepts(const char *gbnf, const char *text)
{
    ember_grammar *g = NULL;
    ember_grammar_state *st = NULL;
    if (ember_grammar_parse(gbnf, strlen(gbnf), NULL, &g) != EMBER_OK) fail_msg("%s\n%s", ember_last_error(), gbnf);
    assert_int_equal(ember_grammar_state_new(g, NULL, &st), EMBER_OK);
    bool ok = ember_grammar_accept_bytes(st, text, strlen(text)) == EMBER_OK && ember_grammar_can_end(st);
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    return ok;
}

static char *choice_gbnf(const json_t *ctx, const char *choice, bool thought)
{
    oai_req r = request(ctx, choice);
    char *g = NULL;
    const char *param = NULL;
    assert_int_equal(chat_tools_choice_gbnf(&r, EMBER_TOOL_FORMAT_QWEN3_CODER, &g, &param), EMBER_OK);
    oai_req_free(&r);
    assert_non_null(g);
    if (!thought) return g;
    char *t = NULL;
    assert_int_equal(chat_tools_after_thought(g, EMBER_REASONING_THINK, EMBER_TOOL_FORMAT_QWEN3_CODER, &t), EMBER_OK);
    free(g);
    return t;
}

static char *cat(const char *a, const char *b)
{
    char *s = malloc(strlen(a) + strlen(b) + 1);
    strcpy(s, a);
    strcat(s, b);
    return s;
}

/* the message the parser makes of `text` (thought opened by the prompt or not) */
static json_t *parse(const char *text, const json_t *tools, bool open)
{
    ember_chat_parser_config cfg = {.tool_format = EMBER_TOOL_FORMAT_QWEN3_CODER, .reasoning = EMBER_REASONING_THINK,
                                    .reasoning_open_at_start = open, .tools = tools, .id_seed = 1};
    ember_chat_parser *p = NULL;
    assert_int_equal(ember_chat_parser_new(&cfg, &p), EMBER_OK);
    assert_int_equal(ember_chat_parser_feed(p, text, strlen(text)), EMBER_OK);
    assert_int_equal(ember_chat_parser_finish(p), EMBER_OK);
    json_t *m = NULL;
    assert_int_equal(ember_chat_parser_message(p, &m), EMBER_OK);
    ember_chat_parser_free(p);
    return m;
}

/* the parsed calls equal the conversation's assistant tool_calls (names, arguments as JSON) */
static void assert_calls(const json_t *msg, const json_t *ctx)
{
    json_t *want = NULL, *m;
    size_t i;
    json_array_foreach(json_object_get(ctx, "messages"), i, m)
        if (json_object_get(m, "tool_calls")) want = json_object_get(m, "tool_calls");
    json_t *got = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(got), json_array_size(want));
    for (i = 0; i < json_array_size(want); i++) {
        json_t *wf = json_object_get(json_array_get(want, i), "function");
        json_t *gf = json_object_get(json_array_get(got, i), "function");
        assert_string_equal(json_string_value(json_object_get(gf, "name")), json_string_value(json_object_get(wf, "name")));
        json_t *ga = json_loads(json_string_value(json_object_get(gf, "arguments")), 0, NULL);
        assert_true(json_equal(ga, json_object_get(wf, "arguments")));
        json_decref(ga);
    }
}

static void test_template_calls_fit_grammar_and_parse(void **state)
{
    (void)state;
    json_t *ctx = NULL, *out = golden_conv("q35_content_then_calls", &ctx);
    char *calls = rendered_calls(json_string_value(out));
    const json_t *tools = json_object_get(ctx, "tools");
    char *g = choice_gbnf(ctx, "\"required\"", false);
    assert_true(accepts(g, calls));                         /* both calls, as the template writes them */
    assert_false(accepts(g, "Let me check both."));         /* no call */
    assert_false(accepts(g, ""));
    /* the unit is an enum: another value is refused */
    assert_false(accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                            "<parameter=unit>\nkelvin\n</parameter>\n</function>\n</tool_call>"));
    json_t *m = parse(calls, tools, false);
    assert_calls(m, ctx);
    json_decref(m);
    free(g);

    /* thinking on: the prompt opened the thought; it ends with </think> or at the call */
    g = choice_gbnf(ctx, "\"required\"", true);
    const char *thoughts[] = {"I will check the weather and the directory.\n</think>\n\n", "Two calls.\n", "",
                              "\n</think>\n\n" /* the reasoning budget's forced close */, "a < b, </thin> is no tag\n</think>"};
    for (size_t i = 0; i < sizeof thoughts / sizeof *thoughts; i++) {
        char *t = cat(thoughts[i], calls);
        if (!accepts(g, t)) fail_msg("refused: %s", t);
        json_t *pm = parse(t, tools, true);
        assert_calls(pm, ctx);
        assert_true(json_is_null(json_object_get(pm, "content")));
        json_decref(pm);
        free(t);
    }
    json_t *pm = parse("Two calls.\n</think>\n\n", tools, true);
    assert_string_equal(json_string_value(json_object_get(pm, "reasoning_content")), "Two calls.");
    json_decref(pm);
    assert_false(accepts(g, "thinking\n</think>\n\nSure, here you go."));   /* an answer, no call */
    assert_false(accepts(g, "thinking"));                                    /* the thought never ends */
    char *t = cat("one</think>two</think>", calls);                         /* content after the thought */
    assert_false(accepts(g, t));
    free(t);
    t = cat("about <tool_call> syntax\n</think>", calls);                   /* a call marker is no thought */
    assert_false(accepts(g, t));
    free(t);
    free(g);

    /* named: only that function */
    g = choice_gbnf(ctx, "{\"type\":\"function\",\"function\":{\"name\":\"run_in_terminal\"}}", true);
    const char *run = strstr(calls, "<tool_call>\n<function=run_in_terminal>");
    assert_non_null(run);
    assert_true(accepts(g, run));
    assert_false(accepts(g, calls));    /* get_weather first, and two calls */
    char *r = cat("Need pwd.\n</think>\n\n", run);
    assert_true(accepts(g, r));
    free(r);
    free(g);
    free(calls);
    json_decref(out);
    json_decref(ctx);
}

static void test_after_thought_errors(void **state)
{
    (void)state;
    char *g = NULL;
    assert_int_equal(chat_tools_after_thought(NULL, EMBER_REASONING_THINK, EMBER_TOOL_FORMAT_QWEN3_CODER, &g),
                     EMBER_ERR_INVALID_ARG);
    assert_int_equal(chat_tools_after_thought("root ::= \"x\"", EMBER_REASONING_NONE, EMBER_TOOL_FORMAT_QWEN3_CODER, &g),
                     EMBER_ERR_INVALID_ARG);
    assert_null(g);
    /* Hermes: the thought must close with </think> before the call */
    assert_int_equal(chat_tools_after_thought("root ::= \"<tool_call>x</tool_call>\"", EMBER_REASONING_THINK,
                                              EMBER_TOOL_FORMAT_HERMES, &g), EMBER_OK);
    assert_true(accepts(g, "hm\n</think>\n\n<tool_call>x</tool_call>"));
    assert_false(accepts(g, "hm\n<tool_call>x</tool_call>"));
    free(g);
}

/* ---- the reasoning budget's forced close, when the slot drops it ---- */

static ember_status byte_tokenize(void *ud, const char *text, size_t len, bool add_special, bool parse_special,
                                  ember_token **out, int32_t *n_out)
{
    (void)ud, (void)add_special, (void)parse_special;
    *out = malloc(sizeof **out * (len ? len : 1));
    for (size_t i = 0; i < len; i++) (*out)[i] = (unsigned char)text[i];
    *n_out = (int32_t)len;
    return EMBER_OK;
}

static int32_t byte_piece(void *ud, ember_token t, char *buf, int32_t cap)
{
    (void)ud;
    if (cap < 1) return -1;
    buf[0] = (char)t;
    return 1;
}

/* One token as the engine hands it to the hook (slot.c): the force it gets back, if any. */
static int32_t step(engine_req_hook *h, char c, const ember_token **force)
{
    int32_t n = 0;
    *force = NULL;
    h->on_token(h->ud, (unsigned char)c, &c, 1, force, &n);
    return *force ? n : 0;
}

static void test_budget_close_offered_again(void **state)
{
    (void)state;
    server_text text = {.tokenize = byte_tokenize, .token_piece = byte_piece, .bos = -1,
                        .chat_template = "{{ '<|im_start|>assistant\n<think>\n' }}"};
    chat_tools *ct = NULL;
    assert_int_equal(chat_tools_new(&text, NULL, &ct), EMBER_OK);
    assert_int_equal(chat_tools_reasoning(ct), EMBER_REASONING_THINK);
    engine_req_params p = {0};
    assert_int_equal(chat_tools_prepare(ct, NULL, 2, true, &p), EMBER_OK);
    const ember_token *f;
    assert_int_equal(step(&p.hook, 'a', &f), 0);
    const char *close = "\n</think>\n\n";
    int32_t n = step(&p.hook, 'b', &f);               /* 2 tokens thought: the close is forced */
    assert_int_equal(n, (int32_t)strlen(close));
    assert_int_equal(f[0], '\n');
    /* the slot's grammar refused it (it draws 'x' instead): offered again at once */
    n = step(&p.hook, 'x', &f);
    assert_int_equal(n, (int32_t)strlen(close));
    /* taken this time: no new force while the slot still holds this one */
    for (int32_t i = 0; i < n; i++) {
        const ember_token *g;
        assert_int_equal(step(&p.hook, close[i], &g), 0);
    }
    assert_int_equal(step(&p.hook, 'y', &f), 0);       /* the thought is closed: answer freely */
    p.hook.free(p.hook.ud);
    chat_tools_free(ct);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_calls_fit_grammar_and_parse),
        cmocka_unit_test(test_after_thought_errors),
        cmocka_unit_test(test_budget_close_offered_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
