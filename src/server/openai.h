/*
 * openai.h — the OpenAI-compatible JSON of /v1/chat/completions and
 * /v1/completions: request parsing and validation, and the result, chunk,
 * usage and error objects.
 *
 * Owns: field names, types, ranges and defaults as the OpenAI API reference
 * gives them (platform.openai.com/docs/api-reference/chat/create and
 * .../completions/create), plus llama-server's extensions (top_k, min_p,
 * repeat_penalty, chat_template_kwargs, timings). Unknown fields are ignored,
 * as OpenAI does; a known field of the wrong type or range is a 400 naming it.
 * Must not: touch sockets, the engine or the tokenizer.
 */
#ifndef EMBER_SERVER_OPENAI_H
#define EMBER_SERVER_OPENAI_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "engine/engine.h"

typedef enum oai_kind { OAI_CHAT = 1, OAI_COMPLETION = 2 } oai_kind;

typedef enum oai_tool_choice {
    OAI_TOOL_CHOICE_AUTO = 0, OAI_TOOL_CHOICE_NONE, OAI_TOOL_CHOICE_REQUIRED, OAI_TOOL_CHOICE_NAMED
} oai_tool_choice;

/* A parsed request. Strings and JSON it points to belong to it (oai_req_free). */
typedef struct oai_req {
    oai_kind kind;
    bool stream;
    bool include_usage;          /* stream_options.include_usage */
    json_t *messages;            /* chat: normalized array (content parts joined to strings) */
    json_t *tools;               /* chat: tools array or NULL */
    json_t *template_kwargs;     /* chat_template_kwargs object or NULL */
    bool add_generation_prompt;  /* chat: open the assistant's turn after the messages (default true) */
    bool continue_final;         /* chat: the final message is the start of the reply: continue_final_message,
                                    or (llama-server's prefill) an assistant message last without that field */
    char *prompt;                /* completion: prompt text, or NULL when given as token ids */
    ember_token *prompt_tokens;  /* completion: prompt as token ids */
    int32_t n_prompt_tokens;
    int32_t n_choices;           /* n: completions of the same prompt (choices with index), >= 1 */
    int32_t max_tokens;          /* -1: until EOG or the slot's n_ctx */
    ember_sampler_params sampling;
    ember_logit_bias *logit_bias;
    char *stop[ENGINE_MAX_STOP];
    int32_t n_stop;
    bool logprobs;
    int32_t top_logprobs;
    bool ignore_eos;
    bool pin_slot;               /* native id_slot >= 0: prefer that slot (engine_req_params.pin_slot) */
    int32_t id_slot;
    bool no_prompt_cache;        /* native cache_prompt: false */
    bool post_sampling_probs;    /* native post_sampling_probs: records after the sampler chain */
    int32_t n_keep;              /* llama-server's n_keep: prompt tokens a context shift keeps (-1: all; default 0;
                                    the BOS is kept besides) */
    /* structured output, tools, thinking (chat_tools.h wires them) */
    char *gbnf;                  /* response_format / grammar / json_schema as GBNF, or NULL */
    const char *gbnf_param;      /* the field it came from (for errors) */
    oai_tool_choice tool_choice; /* default auto (none when there are no tools) */
    char *tool_name;             /* NAMED: the function */
    bool parallel_tool_calls;    /* default true */
    int32_t reasoning_budget;    /* per-request reasoning_budget; -2: not given */
} oai_req;

/* A 4xx/5xx answer in OpenAI's shape:
 * {"error": {"message", "type", "param", "code"}}, with llama-server's
 * "n_prompt_tokens" and "n_ctx" beside them when type is
 * "exceed_context_size_error" (tools/server/server-task.cpp,
 * server_task_result_error::to_json). */
typedef struct oai_error {
    int http_status;             /* 400, 401, 404, 500, 503 */
    char message[512];
    const char *type;            /* "invalid_request_error", "server_error", ... */
    char param[64];              /* "" -> null */
    const char *code;            /* NULL -> null */
    int32_t n_prompt_tokens;     /* exceed_context_size_error: the prompt's length, tokens */
    int32_t n_ctx;               /* exceed_context_size_error: the context it did not fit, tokens */
} oai_error;

#define OAI_ERR_EXCEED_CONTEXT "exceed_context_size_error"   /* llama-server's type for a prompt too long */
#define OAI_ERR_AUTH "authentication_error"   /* llama-server's type for a bad key (OpenAI: code invalid_api_key, kept) */

void oai_error_set(oai_error *err, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* oai_error_set(err, 400, "invalid_request_error", param, NULL, fmt, ...)
 * (the message cut at 400 bytes); returns false, for `return oai_bad(..)`
 * in validators. */
bool oai_bad(oai_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* json_object_get(o, key), or NULL when the field is absent or JSON null. */
json_t *oai_opt(json_t *o, const char *key);
/* {"error": {...}} (new reference). */
json_t *oai_error_json(const oai_error *err);

/* Most levels of arrays and objects in messages, tools and
 * chat_template_kwargs (each counted from the field itself): the chat
 * template renderer takes 200 from its context, and no real conversation or
 * tool schema comes near 64. Deeper is a 400 naming the field. */
#define OAI_MAX_NESTING 64

/* Most choices (n) of one request; the server allows at most --parallel. */
#define OAI_MAX_CHOICES 128

/* Most messages in one chat request (a longer array is a 400 naming
 * messages, before it is copied or rendered). */
#define OAI_MAX_MESSAGES 4096

/* Parse a request body (already a JSON value) for `kind`. n_vocab bounds
 * logit_bias keys and prompt token ids. Returns false with *err filled (400)
 * when a field is missing, of the wrong type or out of range. */
bool oai_parse(json_t *body, oai_kind kind, int32_t n_vocab, oai_req *out, oai_error *err);
void oai_req_free(oai_req *r);
/* The server's defaults (--temp, --seed, -n, ...: an object of request
 * fields, or NULL) put into a body (a JSON object) for each field the body
 * leaves out or sets to null; n_predict only when none of n_predict,
 * max_tokens and max_completion_tokens is given (llama-server's -n). */
void oai_apply_defaults(json_t *body, const json_t *defaults);
/* default_generation_settings.params of /props (llama-server's
 * task_params::to_json(true) subset): ember's request defaults with the
 * server's own over them; seed 4294967295 (llama-server's LLAMA_DEFAULT_SEED)
 * when each request gets a new one. New reference. */
json_t *oai_default_settings_json(const json_t *defaults);
/* A deep copy of a parsed request (for the extra choices of n > 1: each is
 * a request of its own). False when out of memory (*out is then freed). */
bool oai_req_clone(const oai_req *r, oai_req *out);
/* Parse only messages/tools/chat_template_kwargs/add_generation_prompt/
 * continue_final_message (for /apply-template). As llama-server
 * (tools/server/server-common.cpp, oaicompat_chat_params_parse): a final
 * assistant message with no continue_final_message given is continued (and
 * add_generation_prompt is off); two assistant messages at the end, both
 * flags true, or continue_final_message on a message with tool_calls are
 * 400s. Unlike llama-server (which refuses it), a final assistant message
 * with tool_calls and no continue_final_message is closed, not continued.
 * An empty final assistant message is dropped and the assistant's turn
 * opened instead (what continuing it would mean). */
bool oai_parse_messages(json_t *body, oai_req *out, oai_error *err);

/* A JSON string of n bytes that may hold invalid UTF-8: each invalid byte
 * becomes U+FFFD (jansson accepts only valid UTF-8). */
json_t *oai_json_string(const char *s, size_t n);

/* What the engine reported for a finished or running request. */
typedef struct oai_result {
    const char *id;              /* "chatcmpl-..." / "cmpl-..." */
    const char *model;
    int64_t created;             /* Unix seconds */
    const char *text;
    size_t text_len;
    engine_finish finish;
    int32_t n_prompt, n_cached, n_generated;
    int32_t draft_n, draft_n_accepted;   /* speculation (timings.draft_n*; absent when draft_n is 0) */
    double t_start, t_first_token, t_end;
    const engine_tok *toks;      /* logprobs records or NULL */
    int32_t n_toks;
    json_t *message;             /* chat: the parsed message (chat/parse.h) to send instead of text, or NULL */
} oai_result;

/* "stop" / "length" / NULL (running) for a finish state. */
const char *oai_finish_reason(engine_finish f);

/* Token text for logprobs; `piece` gets the bytes of a token. */
typedef int32_t (*oai_piece_fn)(void *ud, ember_token t, char *buf, int32_t cap);

/* One chat.completion.chunk with `delta` (stolen) and finish_reason `fr`
 * (NULL: null); logprobs for toks[tok_from, tok_to) as oai_chunk_json. */
json_t *oai_chat_delta_chunk(const oai_req *req, const oai_result *res, json_t *delta, const char *fr,
                             int32_t tok_from, int32_t tok_to, oai_piece_fn piece, void *piece_ud);

/* The full non-stream response object for `kind` (new reference). */
json_t *oai_result_json(oai_kind kind, const oai_req *req, const oai_result *res, oai_piece_fn piece,
                        void *piece_ud);
/* One stream chunk carrying text[delta] and toks[tok_from, tok_to) (new
 * reference). finish_reason is added when `final`. A chat delta gets
 * "content" only when delta_len > 0 (no empty content delta is sent).
 *
 * A stream's chunks, as llama-server sends them (tools/server/server-task.cpp,
 * to_json_oaicompat_chat_stream): a chat stream opens with
 * oai_chat_role_chunk; "timings" ride on the stream's last chunk only, the
 * finish chunk or, with stream_options.include_usage, oai_usage_chunk. */
json_t *oai_chunk_json(oai_kind kind, const oai_req *req, const oai_result *res, const char *delta, size_t delta_len,
                       int32_t tok_from, int32_t tok_to, bool final, oai_piece_fn piece, void *piece_ud);
/* The first chunk of a chat stream: delta {"role": "assistant", "content": null}. */
json_t *oai_chat_role_chunk(const oai_req *req, const oai_result *res);
/* The usage chunk that ends a stream with include_usage: "choices": [],
 * usage and timings. */
json_t *oai_usage_chunk(const oai_req *req, const oai_result *res);
/* The usage object (and timings as llama-server reports them). */
json_t *oai_usage_json(const oai_result *res);
json_t *oai_timings_json(const oai_result *res);

#endif
