/* Format selection from chat templates: the 68 real templates in
 * tests/data/templates/ against formats written down by hand from reading
 * each template's assistant/tool-call rendering (not from ember's output);
 * whether a rendered prompt (ember_chat_render) leaves the thought open;
 * the reasoning-budget rule driven through a parser. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/parse.h"
#include "chat/template.h"

#define T_NONE EMBER_TOOL_FORMAT_NONE
#define HERMES EMBER_TOOL_FORMAT_HERMES
#define QCODER EMBER_TOOL_FORMAT_QWEN3_CODER
#define GEMMA4 EMBER_TOOL_FORMAT_GEMMA4
#define LLAMA3 EMBER_TOOL_FORMAT_LLAMA3
#define MISTRAL EMBER_TOOL_FORMAT_MISTRAL
#define R_NONE EMBER_REASONING_NONE
#define THINK EMBER_REASONING_THINK
#define R_GEMMA4 EMBER_REASONING_GEMMA4
#define R_MISTRAL EMBER_REASONING_MISTRAL

/* What each template's model writes. NONE where the syntax is one ember
 * does not parse (noted), so its output stays content. */
static const struct {
    const char *file;
    ember_tool_format tool;
    ember_reasoning_syntax reasoning;
} expected[] = {
    {"Apertus-8B-Instruct", T_NONE, R_NONE},                  /* <|tools_prefix|>[..] */
    {"Apriel-1.6-15b-Thinker-fixed", T_NONE, R_NONE},         /* <tool_calls>[..]</tool_calls> */
    {"Bielik-11B-v3.0-Instruct", HERMES, THINK},
    {"ByteDance-Seed-OSS", T_NONE, R_NONE},                   /* <seed:tool_call>, <seed:think> */
    {"Cohere2MoE", T_NONE, R_NONE},                           /* <|START_ACTION|> */
    {"CohereForAI-c4ai-command-r-plus-tool_use", T_NONE, R_NONE},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", T_NONE, R_NONE},
    {"GLM-4.6", T_NONE, THINK},                               /* <tool_call>NAME<arg_key>.. */
    {"GLM-4.7-Flash", T_NONE, THINK},
    {"GigaChat3-10B-A1.8B", T_NONE, R_NONE},
    {"GigaChat3.1-10B-A1.8B", T_NONE, R_NONE},
    {"HuggingFaceTB-SmolLM3-3B", T_NONE, THINK},
    {"Kimi-K2-Instruct", T_NONE, R_NONE},                     /* <|tool_calls_section_begin|> */
    {"Kimi-K2-Thinking", T_NONE, THINK},
    {"Kimi-K3", T_NONE, R_NONE},                              /* tags built by a macro */
    {"LFM2-8B-A1B", T_NONE, R_NONE},                          /* <|tool_call_start|>[f(..)] */
    {"LFM2.5-8B-A1B", T_NONE, THINK},
    {"LFM2.5-Instruct", T_NONE, R_NONE},
    {"MiMo-VL", HERMES, R_NONE},
    {"MiniMax-M1", T_NONE, R_NONE},                           /* <tool_calls> JSON lines */
    {"MiniMax-M2", T_NONE, THINK},                            /* <minimax:tool_call><invoke> */
    {"MiniMax-M3", T_NONE, R_NONE},                           /* namespaced <tool_call>, <mm:think> */
    {"Mistral-Small-3.2-24B-Instruct-2506", MISTRAL, R_NONE},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", QCODER, THINK},
    {"NVIDIA-Nemotron-Nano-v2", T_NONE, THINK},               /* <TOOLCALL>[..]</TOOLCALL> */
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", HERMES, R_NONE},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", HERMES, R_NONE},
    {"Qwen-QwQ-32B", HERMES, THINK},
    {"Qwen-Qwen2.5-7B-Instruct", HERMES, R_NONE},
    {"Qwen-Qwen3-0.6B", HERMES, THINK},
    {"Qwen3-Coder", QCODER, R_NONE},
    {"Qwen3.5-4B", QCODER, THINK},
    {"Reka-Edge", HERMES, THINK},
    {"SmolLM2-135M-Instruct", T_NONE, R_NONE},
    {"Spark2.5", T_NONE, THINK},                              /* <tool_call>NAME<arg_key>.. */
    {"StepFun3.5-Flash", QCODER, THINK},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", T_NONE, THINK},   /* <｜tool▁calls▁begin｜> */
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", T_NONE, THINK},
    {"deepseek-ai-DeepSeek-V3.1", T_NONE, THINK},
    {"deepseek-ai-DeepSeek-V3.2", T_NONE, THINK},
    {"deepseek-ai-DeepSeek-V4-Flash-0731", T_NONE, THINK},
    {"deepseek-ai-DeepSeek-V4", T_NONE, THINK},
    {"google-gemma-2-2b-it", T_NONE, R_NONE},
    {"google-gemma-3-it", T_NONE, R_NONE},
    {"google-gemma-4-31B-it-interleaved", GEMMA4, R_GEMMA4},
    {"google-gemma-4-31B-it", GEMMA4, R_GEMMA4},
    {"ibm-granite-granite-3.3-2B-Instruct", T_NONE, THINK},   /* <|tool_call|>[..] */
    {"ibm-granite-granite-4.0", HERMES, R_NONE},
    {"ibm-granite-granite-4.1", HERMES, R_NONE},
    {"inclusionai-ling-3.0-flash", T_NONE, THINK},            /* <arg_key> form */
    {"meetkai-functionary-medium-v3.1", LLAMA3, R_NONE},      /* Llama 3.1 base: <|python_tag|>, <function=N>{..}</function> */
    {"meetkai-functionary-medium-v3.2", T_NONE, R_NONE},      /* >>>NAME\n{..} */
    {"meta-llama-Llama-3.1-8B-Instruct", LLAMA3, R_NONE},
    {"meta-llama-Llama-3.2-3B-Instruct", LLAMA3, R_NONE},
    {"meta-llama-Llama-3.3-70B-Instruct", LLAMA3, R_NONE},
    {"microsoft-Phi-3.5-mini-instruct", T_NONE, R_NONE},
    {"mistralai-Ministral-3-14B-Reasoning-2512", MISTRAL, R_MISTRAL},
    {"mistralai-Mistral-Nemo-Instruct-2407", MISTRAL, R_NONE},
    {"moonshotai-Kimi-K2", T_NONE, R_NONE},
    {"openai-gpt-oss-120b", T_NONE, R_NONE},                  /* harmony channels */
    {"openbmb-MiniCPM5-1B", T_NONE, THINK},                   /* <function name=..><param ..> */
    {"poolside-Laguna-S-2.1", T_NONE, THINK},                 /* <tool_call>NAME<arg_key>.. */
    {"poolside-Laguna-XS-2.1", T_NONE, THINK},
    {"poolside-Laguna-XS.2", T_NONE, THINK},
    {"tencent-Hy3", T_NONE, R_NONE},                          /* tags built with format() */
    {"unsloth-Apriel-1.5", T_NONE, R_NONE},                   /* <tool_calls>[..] */
    {"unsloth-mistral-Devstral-Small-2507", MISTRAL, R_NONE},
    {"upstage-Solar-Open-100B", T_NONE, R_NONE},              /* <|tool_call:begin|> */
    {"fireworks-ai-llama-3-firefunction-v2", T_NONE, R_NONE}, /* functools[...] */
    {"llama-cpp-deepseek-r1", T_NONE, THINK},                 /* <｜tool▁calls▁begin｜> */
    {"llama-cpp-rwkv-world", T_NONE, THINK},
    {"muse-glimmer", T_NONE, R_NONE},
};
#define N_EXPECTED (sizeof expected / sizeof expected[0])

static char *load_template(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "tests/data/templates/%s.jinja", name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return s;
}

static void test_detect_templates(void **state)
{
    (void)state;
    assert_int_equal(N_EXPECTED, 72);
    int bad = 0;
    for (size_t i = 0; i < N_EXPECTED; i++) {
        char *t = load_template(expected[i].file, NULL);
        if (!t) fail_msg("missing template %s", expected[i].file);
        ember_tool_format f;
        ember_reasoning_syntax r;
        ember_chat_detect_format(t, &f, &r);
        if (f != expected[i].tool || r != expected[i].reasoning) {
            print_error("%s: detected %s/%s, want %s/%s\n", expected[i].file, ember_tool_format_name(f),
                        ember_reasoning_syntax_name(r), ember_tool_format_name(expected[i].tool),
                        ember_reasoning_syntax_name(expected[i].reasoning));
            bad++;
        }
        free(t);
    }
    /* every template in the folder is in the table */
    DIR *d = opendir("tests/data/templates");
    assert_non_null(d);
    struct dirent *e;
    int n_files = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".jinja")) continue;
        n_files++;
        bool found = false;
        for (size_t i = 0; i < N_EXPECTED && !found; i++)
            found = strlen(expected[i].file) == l - 6 && !strncmp(expected[i].file, e->d_name, l - 6);
        if (!found) {
            print_error("template %s has no expected format\n", e->d_name);
            bad++;
        }
    }
    closedir(d);
    assert_int_equal(n_files, (int)N_EXPECTED);
    assert_int_equal(bad, 0);
    ember_tool_format f = HERMES;
    ember_reasoning_syntax r = THINK;
    ember_chat_detect_format(NULL, &f, &r);
    assert_int_equal(f, T_NONE);
    assert_int_equal(r, R_NONE);
}

/* render `name` for one user turn with a generation prompt and optional
 * kwargs JSON; ask whether the thought is left open */
static bool renders_open(const char *name, const char *kwargs_json)
{
    size_t n;
    char *src = load_template(name, &n);
    assert_non_null(src);
    ember_jinja_template *t = NULL;
    assert_int_equal(ember_jinja_parse(src, n, &t, NULL), EMBER_OK);
    free(src);
    json_error_t err;
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"What is 2+2?\"}]", 0, &err);
    json_t *kw = kwargs_json ? json_loads(kwargs_json, 0, &err) : NULL;
    ember_chat_inputs in = {.messages = msgs, .add_generation_prompt = true, .bos_token = "<s>",
                            .eos_token = "</s>", .kwargs = kw};
    char *out = NULL;
    size_t out_len = 0;
    assert_int_equal(ember_chat_render(t, &in, NULL, &out, &out_len, NULL), EMBER_OK);
    ember_reasoning_syntax r;
    ember_chat_detect_format(NULL, NULL, NULL);
    char *tsrc = load_template(name, NULL);
    ember_chat_detect_format(tsrc, NULL, &r);
    free(tsrc);
    bool open = ember_chat_prompt_opens_reasoning(out, out_len, r);
    free(out);
    json_decref(msgs);
    json_decref(kw);
    ember_jinja_free(t);
    return open;
}

static void test_prompt_opens_reasoning(void **state)
{
    (void)state;
    /* DeepSeek R1 distill: '<｜Assistant｜><think>\n' and, unless
     * enable_thinking, an immediate '</think>' */
    assert_true(renders_open("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "{\"enable_thinking\": true}"));
    assert_false(renders_open("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", NULL));
    /* Qwen3: the model opens <think> itself; thinking off renders an empty thought */
    assert_false(renders_open("Qwen-Qwen3-0.6B", NULL));
    assert_false(renders_open("Qwen-Qwen3-0.6B", "{\"enable_thinking\": false}"));
    /* Gemma 4: thinking off ends the prompt with an empty, closed channel */
    assert_false(renders_open("google-gemma-4-31B-it", NULL));
    assert_false(renders_open("google-gemma-4-31B-it", "{\"enable_thinking\": true}"));
    /* direct cases */
    const char *p1 = "<|im_start|>assistant\n<think>\n";
    assert_true(ember_chat_prompt_opens_reasoning(p1, strlen(p1), THINK));
    assert_false(ember_chat_prompt_opens_reasoning(p1, strlen(p1), R_NONE));
    const char *p2 = "<think>\n</think>\n\n";
    assert_false(ember_chat_prompt_opens_reasoning(p2, strlen(p2), THINK));
    const char *p3 = "<think>\nabc";
    assert_false(ember_chat_prompt_opens_reasoning(p3, strlen(p3), THINK));
    const char *p4 = "<|turn>model\n<|channel>thought\n";
    assert_true(ember_chat_prompt_opens_reasoning(p4, strlen(p4), R_GEMMA4));
}

typedef struct {
    char content[256];
    char reasoning[256];
} texts;

static void on_ev(void *user, const ember_chat_event *ev)
{
    texts *t = user;
    char *dst = ev->kind == EMBER_CHAT_EV_CONTENT ? t->content : ev->kind == EMBER_CHAT_EV_REASONING ? t->reasoning : NULL;
    if (dst) strncat(dst, ev->text, ev->len);
}

static void test_reasoning_budget(void **state)
{
    (void)state;
    static const struct {
        ember_reasoning_syntax r;
        const char *open;
    } cases[] = {{THINK, "<think>\n"}, {R_GEMMA4, "<|channel>thought\n"}, {R_MISTRAL, "[THINK]"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        texts tx = {{0}, {0}};
        ember_chat_parser_config cfg = {.reasoning = cases[c].r, .on_event = on_ev, .user = &tx};
        ember_chat_parser *p = NULL;
        assert_int_equal(ember_chat_parser_new(&cfg, &p), EMBER_OK);
        ember_reasoning_budget b;
        ember_reasoning_budget_init(&b, 3, cases[c].r);
        /* the engine's loop: ask before each token, then feed the token */
        const char *tokens[] = {cases[c].open, "one", " two", " three", " four", " five", NULL};
        const char *answer[] = {"The", " answer", NULL};
        int sampled = 0, forced = 0;
        for (int i = 0; tokens[i]; i++) {
            const char *inj = ember_reasoning_budget_next(&b, p);
            if (inj) {
                forced++;
                assert_int_equal(ember_chat_parser_feed(p, inj, strlen(inj)), EMBER_OK);
                break;
            }
            assert_int_equal(ember_chat_parser_feed(p, tokens[i], strlen(tokens[i])), EMBER_OK);
            sampled++;
        }
        assert_int_equal(forced, 1);
        assert_int_equal(sampled, 4);   /* the open tag (not yet inside) + 3 reasoning tokens */
        assert_false(ember_chat_parser_in_reasoning(p));
        for (int i = 0; answer[i]; i++) {
            assert_null(ember_reasoning_budget_next(&b, p));
            assert_int_equal(ember_chat_parser_feed(p, answer[i], strlen(answer[i])), EMBER_OK);
        }
        assert_int_equal(ember_chat_parser_finish(p), EMBER_OK);
        assert_string_equal(tx.reasoning, "one two three");
        assert_string_equal(tx.content, "The answer");
        ember_chat_parser_free(p);
    }
    /* budget 0 with a thought opened by the prompt: close before any token */
    ember_chat_parser_config cfg = {.reasoning = THINK, .reasoning_open_at_start = true};
    ember_chat_parser *p = NULL;
    assert_int_equal(ember_chat_parser_new(&cfg, &p), EMBER_OK);
    ember_reasoning_budget b;
    ember_reasoning_budget_init(&b, 0, THINK);
    const char *inj = ember_reasoning_budget_next(&b, p);
    assert_non_null(inj);
    assert_non_null(strstr(inj, "</think>"));
    assert_null(ember_reasoning_budget_next(&b, p));
    ember_chat_parser_free(p);
    /* unlimited */
    ember_reasoning_budget_init(&b, -1, THINK);
    assert_int_equal(ember_chat_parser_new(&cfg, &p), EMBER_OK);
    for (int i = 0; i < 1000; i++) assert_null(ember_reasoning_budget_next(&b, p));
    ember_chat_parser_free(p);
}

static void test_names(void **state)
{
    (void)state;
    for (int i = 0; i < EMBER_TOOL_FORMAT_COUNT; i++) {
        ember_tool_format f;
        assert_true(ember_tool_format_from_name(ember_tool_format_name((ember_tool_format)i), &f));
        assert_int_equal(f, i);
    }
    for (int i = 0; i < EMBER_REASONING_COUNT; i++) {
        ember_reasoning_syntax r;
        assert_true(ember_reasoning_syntax_from_name(ember_reasoning_syntax_name((ember_reasoning_syntax)i), &r));
        assert_int_equal(r, i);
    }
    ember_tool_format f;
    assert_false(ember_tool_format_from_name("xml", &f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_templates),
        cmocka_unit_test(test_prompt_opens_reasoning),
        cmocka_unit_test(test_reasoning_budget),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
