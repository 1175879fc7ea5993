/*
 * parse.h — splitting a model's output text into content, reasoning and tool
 * calls, incrementally as it streams and in one go.
 *
 * Owns: the per-format state machine (tool-call syntaxes in
 * src/chat/formats/), reasoning blocks (<think>...</think>, Gemma 4's
 * <|channel>thought ... <channel|>, Mistral's [THINK]...[/THINK]), OpenAI-style
 * tool-call ids, choosing a format from a chat template's text, and the
 * reasoning-budget rule (when to force the thinking block closed).
 * Must not: know about HTTP/SSE, tokens or sampling; it sees text only.
 *
 * Stream contract (what the server's streaming path relies on):
 *  - Feed the detokenized output in chunks of any size, cut anywhere (inside
 *    a UTF-8 sequence, inside a tag). Events come out through the callback in
 *    output order; text that could still turn out to be the start of a tag or
 *    of a tool call is held back until it is decided.
 *  - Content and reasoning deltas are whole UTF-8 (an invalid byte becomes
 *    U+FFFD); their concatenations are the final content / reasoning_content.
 *  - By default a tool call is announced when it is complete and valid: TOOL_START
 *    (index, id, name), TOOL_ARGS (the arguments JSON text; all TOOL_ARGS of
 *    one call concatenate to exactly its final arguments string), TOOL_END.
 *    So no argument byte is lost or repeated (llama.cpp issue 22722), and a
 *    call that turns out malformed (bad JSON, unterminated at the end of the
 *    output) is never half-announced: its raw text becomes content.
 *  - Whatever the chunking, the events' concatenated content, reasoning and
 *    calls equal the result of parsing the whole text at once
 *    (ember_chat_parse_whole); tests/unit/chat/test_parse*.c check it.
 *  - Streamed arguments (config.stream_arguments): a call is announced as
 *    soon as its name is known and its arguments object has begun, and
 *    TOOL_ARGS deltas follow at every point where the text so far can be
 *    closed into valid JSON (inside a string value, after a complete value;
 *    Gemma 4 strings stream too; Qwen3-Coder parameters stream when the
 *    tool schema types them "string", else arrive whole). A call that
 *    then breaks (bad syntax, end of output) is closed, not turned into
 *    content: its arguments are the longest such prefix before the first
 *    error, closed ("}" / "\"}" ...), and its remaining raw text is dropped.
 *    Stream and whole parses still agree. Without the flag, calls are
 *    announced whole and malformed ones become content (as above). Where
 *    one region holds several calls (the generic format's list), each call
 *    is announced once the previous one's arguments are complete and its
 *    own header is decided; elsewhere a region's later calls arrive whole.
 *  - The generic format's {"response": "TEXT"}: TEXT (the JSON string,
 *    decoded; a lone surrogate escape becomes U+FFFD) streams as content as
 *    it arrives; the JSON around it is dropped; a reply cut inside the
 *    string keeps what was written.
 *  - Qwen3-Coder XML format (Qwen3.5): a <tool_call> inside an open thought
 *    ends the thought there, with or without </think> (as llama.cpp's
 *    parser for these templates reads it), so a call made while thinking is
 *    a call, not reasoning text.
 *  - Content and reasoning are trimmed of leading and trailing whitespace;
 *    whitespace just before a tool call is dropped.
 *
 * Use from the server, per request:
 *    ember_chat_detect_format(template_text, &tf, &rs);        once per model
 *    cfg.tool_format = has_tools && tool_choice != "none" ? tf : NONE;
 *    cfg.reasoning = reasoning_format_none ? NONE : rs;
 *    cfg.reasoning_open_at_start = ember_chat_prompt_opens_reasoning(prompt, n, rs);
 *    cfg.on_event = fn;   fn: ember_chat_event_delta(ev, &delta) -> SSE chunk
 *    ember_chat_parser_new(&cfg, &p);
 *    per detokenized piece: ember_chat_parser_feed(p, piece, len);
 *    at the end: ember_chat_parser_finish(p); ember_chat_parser_message(p, &msg)
 *    (finish_reason "tool_calls" when msg has tool_calls).
 */
#ifndef EMBER_CHAT_PARSE_H
#define EMBER_CHAT_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "ember.h"

/* How a model writes tool calls. Sources: the chat templates in
 * tests/data/templates/ and the model cards they come from. */
typedef enum ember_tool_format {
    EMBER_TOOL_FORMAT_NONE = 0,   /* no tool-call parsing: all text is content */
    EMBER_TOOL_FORMAT_HERMES,     /* <tool_call>{"name":..,"arguments":{..}}</tool_call> (Hermes 2 Pro, Qwen 2.5/3) */
    EMBER_TOOL_FORMAT_QWEN3_CODER,/* <tool_call><function=N><parameter=K>v</parameter></function></tool_call> */
    EMBER_TOOL_FORMAT_GEMMA4,     /* <|tool_call>call:N{k:<|"|>v<|"|>,n:1}<tool_call|> */
    EMBER_TOOL_FORMAT_LLAMA3,     /* {"name":..,"parameters":{..}} as the whole reply, optionally after <|python_tag|> */
    EMBER_TOOL_FORMAT_MISTRAL,    /* [TOOL_CALLS][{..},..] or [TOOL_CALLS]N[CALL_ID]id[ARGS]{..} */
    EMBER_TOOL_FORMAT_GENERIC,    /* {"tool_calls":[{"name":..,"arguments":{..}},..]} or {"response":"TEXT"} (TEXT is
                                     content) as the whole reply: ember's own, for templates with none (never
                                     detected; the server picks it) */
    EMBER_TOOL_FORMAT_COUNT
} ember_tool_format;

/* How a model writes its thoughts. NONE keeps them in content as raw text
 * (--reasoning-format none). */
typedef enum ember_reasoning_syntax {
    EMBER_REASONING_NONE = 0,
    EMBER_REASONING_THINK,        /* <think> ... </think> (Qwen3, DeepSeek R1, SmolLM3, ...) */
    EMBER_REASONING_GEMMA4,       /* <|channel>thought\n ... <channel|> (Gemma 4 template) */
    EMBER_REASONING_MISTRAL,      /* [THINK] ... [/THINK] (Magistral / Ministral reasoning) */
    EMBER_REASONING_COUNT
} ember_reasoning_syntax;

/* Lower-case names ("hermes", "qwen3_coder", "gemma4", "llama3", "mistral",
 * "generic", "none"; "think", "gemma4", "mistral", "none"). Never NULL. */
const char *ember_tool_format_name(ember_tool_format f);
const char *ember_reasoning_syntax_name(ember_reasoning_syntax r);
/* Inverse of the above; false if the name is unknown (*out untouched). */
bool ember_tool_format_from_name(const char *name, ember_tool_format *out);
bool ember_reasoning_syntax_from_name(const char *name, ember_reasoning_syntax *out);

/* Choose the formats a chat template's model speaks, from the template's
 * source text (tokenizer.chat_template). Rules, first match wins:
 *   tools: "<|tool_call>" -> GEMMA4; "<tool_call>" with "<function=" and
 *   "<parameter=" -> QWEN3_CODER; "[TOOL_CALLS]" -> MISTRAL; "<tool_call>"
 *   with a JSON call shape ({"name" or {\"name\"), no "<arg_key>" (GLM's
 *   key/value form) and no "<tool_calls>" (Apriel's list form) -> HERMES;
 *   "<|python_tag|>", or "ipython" with Llama 3's "<|start_header_id|>" ->
 *   LLAMA3; else NONE.
 *   reasoning: "<|channel>" -> GEMMA4; "<think>" -> THINK; "[THINK]" ->
 *   MISTRAL; else NONE.
 * NULL template: both NONE. Pointers may be NULL. */
void ember_chat_detect_format(const char *template_text, ember_tool_format *tool,
                              ember_reasoning_syntax *reasoning);

/* True when a rendered prompt leaves a reasoning block open, so the model's
 * output starts inside the thought (DeepSeek R1, Qwen3 "thinking" templates
 * that end the generation prompt with "<think>\n"): the last open tag in
 * `prompt` comes after the last close tag and only whitespace follows it.
 * Pass the result as ember_chat_parser_config.reasoning_open_at_start. */
bool ember_chat_prompt_opens_reasoning(const char *prompt, size_t len, ember_reasoning_syntax r);

typedef enum ember_chat_event_kind {
    EMBER_CHAT_EV_CONTENT,     /* text, len: a content delta */
    EMBER_CHAT_EV_REASONING,   /* text, len: a reasoning_content delta */
    EMBER_CHAT_EV_TOOL_START,  /* tool_index, id, name */
    EMBER_CHAT_EV_TOOL_ARGS,   /* tool_index, text, len: arguments delta (JSON text) */
    EMBER_CHAT_EV_TOOL_END,    /* tool_index */
} ember_chat_event_kind;

/* One event. Pointers are valid only during the callback. */
typedef struct ember_chat_event {
    ember_chat_event_kind kind;
    const char *text;          /* not NUL-terminated; len bytes */
    size_t len;
    int tool_index;            /* 0-based position of the call in this message */
    const char *id;            /* TOOL_START: "call_" + 24 alphanumerics */
    const char *name;          /* TOOL_START: function name */
} ember_chat_event;

typedef void (*ember_chat_event_fn)(void *user, const ember_chat_event *ev);

typedef struct ember_chat_parser_config {
    ember_tool_format tool_format;     /* NONE when the request has no tools or tool_choice "none" */
    ember_reasoning_syntax reasoning;  /* NONE: keep thoughts raw in content */
    bool reasoning_open_at_start;      /* the prompt opened the thought (see ember_chat_prompt_opens_reasoning) */
    const json_t *tools;               /* OpenAI tools array or NULL; used by QWEN3_CODER to type parameter
                                          values (a "string" parameter stays a string). Borrowed for the
                                          parser's lifetime. */
    uint64_t id_seed;                  /* seed of tool-call ids; 0: seeded from the clock and address */
    bool stream_arguments;             /* announce a call once its name is known and stream its arguments
                                          (see "Streamed arguments" above) */
    ember_chat_event_fn on_event;      /* may be NULL (only the final result is wanted) */
    void *user;
} ember_chat_parser_config;

typedef struct ember_chat_parser ember_chat_parser;

/* Errors: EMBER_ERR_INVALID_ARG (cfg/out NULL, format out of range),
 * EMBER_ERR_NOMEM. */
ember_status ember_chat_parser_new(const ember_chat_parser_config *cfg, ember_chat_parser **out);
void ember_chat_parser_free(ember_chat_parser *p);

/* Feed `len` bytes of output (any cut). Events for what is decided are
 * delivered before it returns. Errors: EMBER_ERR_INVALID_ARG (NULL, or fed
 * after finish), EMBER_ERR_NOMEM. */
ember_status ember_chat_parser_feed(ember_chat_parser *p, const char *text, size_t len);

/* End of output: decide everything held back (an unterminated call becomes
 * content, a dangling partial UTF-8 sequence becomes U+FFFD). */
ember_status ember_chat_parser_finish(ember_chat_parser *p);
/* The same for output that was cut short (max_tokens, the context's end):
 * a call still open at the end is not content. An announced call is closed
 * as usual (stream_arguments); an unannounced one, and a partial call
 * marker at the very end, are dropped, so no raw call markup ("<tool_call>\n
 * {\"name\":") reaches content. */
ember_status ember_chat_parser_finish_cut(ember_chat_parser *p);

/* True while the parser is inside a reasoning block (the engine's reasoning
 * budget counts these tokens). */
bool ember_chat_parser_in_reasoning(const ember_chat_parser *p);

/* The message so far (complete after finish), OpenAI shape:
 *   {"role":"assistant","content":STRING|null,"reasoning_content":STRING?,
 *    "tool_calls":[{"id","type":"function","function":{"name","arguments":STRING}}]?}
 * content is null when empty and there are tool calls, "" when empty
 * otherwise; reasoning_content and tool_calls are absent when empty.
 * *out is a new reference. Errors: EMBER_ERR_NOMEM. */
ember_status ember_chat_parser_message(const ember_chat_parser *p, json_t **out);

/* The "delta" object of an OpenAI chat.completion.chunk for one event
 * (OpenAI API reference, streaming chat completions; tool-call deltas carry
 * "index", and only the first one of a call carries id, type and name):
 *   CONTENT    -> {"content": TEXT}
 *   REASONING  -> {"reasoning_content": TEXT}   (llama.cpp / DeepSeek field)
 *   TOOL_START -> {"tool_calls":[{"index":I,"id":ID,"type":"function",
 *                                 "function":{"name":NAME,"arguments":""}}]}
 *   TOOL_ARGS  -> {"tool_calls":[{"index":I,"function":{"arguments":TEXT}}]}
 *   TOOL_END   -> *out = NULL (nothing to send)
 * *out is a new reference. Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_NOMEM. */
ember_status ember_chat_event_delta(const ember_chat_event *ev, json_t **out);

/* Parse a whole output at once: new + feed + finish + message. cfg->on_event
 * is honoured. Same errors as those. */
ember_status ember_chat_parse_whole(const ember_chat_parser_config *cfg, const char *text, size_t len,
                                    json_t **out);
/* The same, finished with ember_chat_parser_finish_cut when `cut`. */
ember_status ember_chat_parse_whole_cut(const ember_chat_parser_config *cfg, const char *text, size_t len, bool cut,
                                        json_t **out);

/* Reasoning budget (--reasoning-budget N and the per-request field): after
 * N tokens inside a reasoning block the engine forces the block closed by
 * injecting the close text, so the answer follows.
 * Use: ember_reasoning_budget_init(&b, N, syntax) per request; before
 * sampling each token call ember_reasoning_budget_next(&b, parser): NULL
 * means sample as usual (the token is counted if the parser is inside a
 * thought); a string is the text to tokenize and force as the next tokens
 * (and to feed to the parser like any output). It is returned once. N < 0:
 * unlimited; N == 0: close as soon as a thought opens. */
typedef struct ember_reasoning_budget {
    int32_t budget;                    /* tokens; < 0 unlimited */
    int32_t n_used;                    /* reasoning tokens sampled so far */
    bool closed;                       /* the close text has been handed out */
    ember_reasoning_syntax syntax;
} ember_reasoning_budget;

void ember_reasoning_budget_init(ember_reasoning_budget *b, int32_t n_tokens, ember_reasoning_syntax syntax);
const char *ember_reasoning_budget_next(ember_reasoning_budget *b, const ember_chat_parser *p);

#endif
