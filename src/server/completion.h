/*
 * completion.h — the one completion pipeline every API of the server adapts:
 * a validated request (oai_req, the common request) -> prompt tokens ->
 * engine parameters (sampling, stop strings, grammar, reasoning budget) ->
 * a submitted engine request; then one reader that serves streams and whole
 * answers alike.
 *
 * An API adapter (the OpenAI JSON in http.c/openai.c, Anthropic Messages in
 * anthropic.c) turns its request JSON into an oai_req, calls
 * completion_prompt + completion_start, and reads with completion_next: a
 * stream formats each update as it comes; a whole answer asks for the update
 * at the end (until_done) and the parsed message (completion_message).
 *
 * The reader waits on the request's condition variable (engine_req.cv, one
 * wait per update, no timeout): the engine broadcasts on every committed
 * piece and at the finish. A client that goes away is noticed by the HTTP
 * layer (http.c's watcher), which cancels the request: the engine then
 * finishes it CANCELLED within one step and the reader wakes.
 *
 * Must not: touch sockets or HTTP, or write an API's JSON (adapters do).
 */
#ifndef EMBER_SERVER_COMPLETION_H
#define EMBER_SERVER_COMPLETION_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "chat/parse.h"
#include "engine/engine.h"
#include "server/chat_tools.h"
#include "server/openai.h"
#include "server/server.h"

/* Server-wide, read-only once the server runs. */
typedef struct completion_ctx {
    engine *e;
    const server_text *text;
    const server_config *cfg;
    chat_tools *ct;
    int thinking_default;     /* enable_thinking when neither request nor --chat-template-kwargs sets it:
                                 -1 none (the template's own default), 0 false, 1 true */
} completion_ctx;

/* Why a generation ended, in terms every API maps to its own words. */
typedef enum completion_stop {
    COMPLETION_RUNNING = 0,
    COMPLETION_STOP_EOG,       /* end-of-generation token (OpenAI "stop", Anthropic "end_turn") */
    COMPLETION_STOP_WORD,      /* a stop string (OpenAI "stop", Anthropic "stop_sequence") */
    COMPLETION_STOP_LENGTH,    /* max tokens or the slot's n_ctx (OpenAI "length", Anthropic "max_tokens") */
    COMPLETION_STOP_TOOL,      /* the reply called tools (OpenAI "tool_calls", Anthropic "tool_use") */
    COMPLETION_CANCELLED,      /* cancelled (client gone, or shutdown: completion.err says which) */
    COMPLETION_ERROR,          /* model failure: completion.err */
} completion_stop;

/* One request in flight. Owns rq (moved in by completion_start). */
typedef struct completion {
    const completion_ctx *ctx;
    oai_req rq;
    engine_req *r;
    char id[64];
    int64_t created;          /* Unix seconds */
    int32_t n_prompt;         /* prompt tokens submitted */
    ember_chat_parser_config pcfg;
    bool use_parser;          /* chat output goes through the chat parser (tools or a reasoning syntax) */
    ember_chat_parser *parser;/* completion_stream_events: the incremental parser */
    ember_chat_event_fn on_event;
    void *on_event_user;
    bool saw_tool_call;
    /* reader cursor */
    size_t text_read;
    int32_t toks_read;
    bool first_read;
    int32_t stop_index;       /* COMPLETION_STOP_WORD: index into rq.stop */
    char err[256];            /* COMPLETION_ERROR / CANCELLED: the engine's message */
    char *delta_buf;          /* the last update's text and records (copies, taken under the lock) */
    engine_tok *toks_buf;
} completion;

/* What the reader saw since its last call. Pointers stay valid until the
 * next completion_next / completion_free. */
typedef struct completion_update {
    const char *delta;        /* new output text (whole UTF-8; stop strings removed) */
    size_t n_delta;
    int32_t tok_from, tok_to; /* new logprob records: res.toks[tok_from, tok_to) */
    oai_result res;           /* counts and times so far (text: all output so far in a whole read) */
    completion_stop stop;     /* COMPLETION_RUNNING while it runs */
    bool first;               /* the first update of this request */
} completion_update;

/* The prompt tokens of `rq` (validated): a chat is rendered with the model's
 * template (the generic tool-call description added when a forced call has
 * no format of its own; --chat-template-kwargs and --reasoning merged in)
 * and tokenized; a completion's prompt is tokenized or taken as ids.
 * *toks is malloc'd. False with *err: 400 (the template failed on these
 * messages), 500 (tokenizer, memory). */
bool completion_prompt(const completion_ctx *ctx, oai_req *rq, ember_token **toks, int32_t *n_toks, oai_error *err);

/* The chat prompt of `rq` as text (for /apply-template): the same render
 * as completion_prompt. *prompt is malloc'd. False with *err (as above). */
bool completion_render_text(const completion_ctx *ctx, const oai_req *rq, char **prompt, oai_error *err);

/* Submit `rq` (moved into c: the caller's copy is zeroed) over the prompt
 * `toks` [n_toks] (not kept): engine parameters from its fields, the grammar
 * (response_format / tool_choice) and reasoning budget, the parser config.
 * id_prefix: "chatcmpl-", "cmpl-", "msg_". False with *err: 400 (prompt
 * longer than the context: type exceed_context_size_error with both numbers;
 * a bad grammar or tool choice), 503 (queue full, shutting down); c is then
 * left empty (completion_free is still safe). */
bool completion_start(const completion_ctx *ctx, oai_req *rq, const ember_token *toks, int32_t n_toks,
                      const char *id_prefix, completion *c, oai_error *err);

/* For a stream: the chat parser's events (content / reasoning / tool-call
 * deltas, chat/parse.h) are passed to fn while completion_next runs. A
 * request that needs no parser gets none (its text is all content).
 * Errors: EMBER_ERR_NOMEM. */
ember_status completion_stream_events(completion *c, ember_chat_event_fn fn, void *user);

/* Wait for news and report it. until_done: wait for the finish and report
 * everything (delta is the whole text). Blocks on the request's condition
 * variable only; returns when text, logprob records or the finish changed
 * (a first call returns at once, so a stream can open). */
void completion_next(completion *c, bool until_done, completion_update *u);

/* The whole output as the chat parser splits it (content, reasoning_content,
 * tool_calls; chat/parse.h ember_chat_parse_whole_cut) for a finished
 * request, or NULL when it needs no parser (then the text is the content).
 * Sets saw_tool_call. New reference. */
json_t *completion_message(completion *c, const completion_update *u);

/* The stop reason of a finished update (tool calls count once seen). */
completion_stop completion_stop_of(const completion *c, const completion_update *u);

/* Cancel if still running, release the engine request, free the parser and
 * the request. Safe on a zeroed or already-freed completion. */
void completion_free(completion *c);

#endif
