/*
 * anthropic.h — Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens) as an adapter over the completion pipeline:
 * request JSON -> the common request (an OpenAI chat body, parsed by
 * oai_parse), the pipeline's output -> a Message object or its stream of
 * events, and Anthropic's error shape.
 *
 * Field names, types and events as docs.anthropic.com gives them
 * (api/messages, api/messages-streaming, api/errors, build-with-claude/
 * extended-thinking, tool-use); the mapping onto OpenAI chat messages as
 * llama-server makes it (tools/server/server-common.cpp,
 * convert_anthropic_to_oai): system -> a system message; text blocks ->
 * content; tool_use -> assistant tool_calls; tool_result -> a "tool"
 * message; thinking -> reasoning_content; tools[].input_schema ->
 * function.parameters; tool_choice auto/any/tool/none -> auto/required/
 * named/none; stop_sequences -> stop.
 * Must not: touch sockets, the engine or the tokenizer.
 */
#ifndef EMBER_SERVER_ANTHROPIC_H
#define EMBER_SERVER_ANTHROPIC_H

#include <stdbool.h>
#include <jansson.h>

#include "chat/parse.h"
#include "server/completion.h"
#include "server/openai.h"

/* The OpenAI chat body for an Anthropic Messages body (new reference), to
 * be parsed by oai_parse(OAI_CHAT). count_tokens: the /count_tokens form
 * (max_tokens not required). NULL with *err (400, param naming the
 * Anthropic field) when a field is missing, of the wrong type or a block
 * type is not supported (image, document, ...). */
json_t *anth_to_oai(json_t *body, bool count_tokens, oai_error *err);

/* Anthropic's error object {"type": "error", "error": {"type", "message"}}
 * for an error of any API (new reference). The type follows the HTTP
 * status as docs.anthropic.com/en/api/errors lists them: 400
 * invalid_request_error, 401 authentication_error, 403 permission_error,
 * 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503/529
 * overloaded_error, other 5xx api_error. */
json_t *anth_error_json(const oai_error *err);

/* Anthropic's stop_reason for a finished request: "end_turn",
 * "stop_sequence", "max_tokens", "tool_use" (NULL while running). */
const char *anth_stop_reason(completion_stop stop);

/* The Message object of a finished request: content blocks (thinking, text,
 * tool_use) from `msg` (the parsed message, completion_message) or from the
 * raw text when msg is NULL; stop_reason, stop_sequence and usage
 * (input_tokens excludes prompt tokens read from the prefix cache, which are
 * cache_read_input_tokens, as Anthropic counts). New reference. */
json_t *anth_message_json(const completion *c, const completion_update *u, const json_t *msg);

/* A stream's state: which content block is open. Events are handed to
 * emit(ud, name, data) (data stolen) as the SSE "event:" name and its data. */
typedef void (*anth_emit_fn)(void *ud, const char *event, json_t *data);
typedef struct anth_stream anth_stream;

anth_stream *anth_stream_new(const completion *c, anth_emit_fn emit, void *ud);
void anth_stream_free(anth_stream *as);
/* A parser event (completion_stream_events' callback): opens / closes
 * blocks and sends their deltas (text_delta, thinking_delta,
 * input_json_delta). message_start goes first, once. */
void anth_stream_event(void *as, const ember_chat_event *ev);
/* An update of the reader: raw text as text deltas when the request has no
 * parser; at the finish the open block is closed and message_delta
 * (stop_reason, stop_sequence, usage) and message_stop are sent; an engine
 * error or a shutdown is an "error" event. */
void anth_stream_update(anth_stream *as, const completion *c, const completion_update *u);

#endif
