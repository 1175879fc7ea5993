/*
 * responses.h — OpenAI's Responses API (POST /v1/responses, stateless, and
 * POST /v1/responses/input_tokens) as an adapter over the completion
 * pipeline: request JSON -> the common request (an OpenAI chat body, parsed
 * by oai_parse), the pipeline's output -> a Response object or its stream of
 * events. Errors keep OpenAI's own shape (oai_error_json).
 *
 * Field names, types and events as the official `openai` Python client
 * types them (openai/types/responses/: response.py, response_create_params.py,
 * response_stream_event.py and the event classes) and as
 * platform.openai.com/docs/api-reference/responses gives them; the mapping
 * onto chat messages as llama-server makes it (tools/server/server-chat.cpp,
 * server_chat_convert_responses_to_chatcmpl): instructions -> a system
 * message; message items -> messages (developer as system); function_call
 * items -> the assistant's tool_calls; function_call_output -> a "tool"
 * message; reasoning items -> reasoning_content; tools {type: function,
 * name, ...} -> {type: function, function: {...}}; max_output_tokens ->
 * max_tokens. Unlike llama-server, a hosted tool (web_search, ...), an image
 * or file part and item_reference are 400s naming the field, not skipped.
 * Stateless: previous_response_id, conversation and background are 400s;
 * store is accepted and nothing is stored.
 * Must not: touch sockets, the engine or the tokenizer.
 */
#ifndef EMBER_SERVER_RESPONSES_H
#define EMBER_SERVER_RESPONSES_H

#include <stdbool.h>
#include <jansson.h>

#include "chat/parse.h"
#include "server/completion.h"
#include "server/openai.h"

/* The OpenAI chat body for a Responses create body (new reference), to be
 * parsed by oai_parse(OAI_CHAT). count_only: the /input_tokens form (stream
 * is dropped). NULL with *err (400, param naming the Responses field, e.g.
 * "input[2].content[0].type") when a field is missing, of the wrong type or
 * not supported. Also passed through: llama-server's sampling extensions
 * (top_k, min_p, repeat_penalty, presence/frequency_penalty, seed, stop,
 * grammar, logit_bias, ignore_eos, chat_template_kwargs, reasoning_budget).
 * reasoning.effort "none" sets enable_thinking false, any other effort true
 * (unless chat_template_kwargs sets it); text.format json_schema /
 * json_object -> response_format. */
json_t *resp_to_oai(json_t *body, bool count_only, oai_error *err);

/* An error of oai_parse on resp_to_oai's body, renamed to the Responses
 * field it came from (max_tokens -> max_output_tokens, response_format ->
 * text.format, messages -> input). */
void resp_rename_param(oai_error *err);

/* The Response object of a finished request (new reference): output items
 * (reasoning, message with one output_text part, function_call) from `msg`
 * (completion_message) or from the raw text when msg is NULL; status
 * "completed", or "incomplete" with incomplete_details.reason
 * "max_output_tokens" when the token limit (or the slot's context) ended it;
 * usage {input_tokens (all prompt tokens, cached included),
 * input_tokens_details.cached_tokens, output_tokens,
 * output_tokens_details.reasoning_tokens (0: not counted apart),
 * total_tokens}; the request's tools, tool_choice, parallel_tool_calls,
 * temperature, top_p and max_output_tokens echoed. */
json_t *resp_response_json(const completion *c, const completion_update *u, const json_t *msg);

/* A stream's state: the open output item and the items done. Events are
 * handed to emit(ud, name, data) (data stolen) as the SSE "event:" name and
 * its data; every data carries "type" (= name) and "sequence_number"
 * (0, 1, 2, ... in order). */
typedef void (*resp_emit_fn)(void *ud, const char *event, json_t *data);
typedef struct resp_stream resp_stream;

resp_stream *resp_stream_new(const completion *c, resp_emit_fn emit, void *ud);
void resp_stream_free(resp_stream *rs);
/* A parser event (completion_stream_events' callback): response.created and
 * response.in_progress go first, once; content opens a message item
 * (output_item.added, content_part.added, output_text.delta...), reasoning a
 * reasoning item (reasoning_text.delta), a tool call a function_call item
 * (function_call_arguments.delta); an item is closed (its .done events,
 * output_item.done) when another opens or at the finish. */
void resp_stream_event(void *rs, const ember_chat_event *ev);
/* An update of the reader: raw text as output_text deltas when the request
 * has no parser; at the finish the open item is closed and response.completed
 * (or response.incomplete) carries the whole Response; an engine error or a
 * shutdown is response.failed with error {code "server_error", message}. */
void resp_stream_update(resp_stream *rs, const completion *c, const completion_update *u);

#endif
