/*
 * chat_tools.h — the server's glue for structured output, tool calls and
 * thinking: which grammar a chat request decodes under, the reasoning-budget
 * hook the engine calls per token, and the output parser's configuration.
 *
 * Owns: a cache of compiled grammars (one warm template state per distinct
 * GBNF text, cloned per request by the engine; grammar.h's seam), the grammar
 * that enforces tool_choice "required" / a named function in the model's
 * call format, and the per-request engine hook for --reasoning-budget.
 * Must not: touch sockets or JSON of responses (http.c / openai.c do), or the
 * model (the engine does). The modules it wires: src/sample/grammar.h,
 * src/sample/json_schema.h, src/chat/parse.h.
 */
#ifndef EMBER_SERVER_CHAT_TOOLS_H
#define EMBER_SERVER_CHAT_TOOLS_H

#include <stdbool.h>
#include <jansson.h>

#include "chat/parse.h"
#include "engine/engine.h"
#include "server/openai.h"
#include "server/server.h"

typedef struct chat_tools chat_tools;

/* Per server: detects the template's formats (ember_chat_detect_format).
 * `text` must outlive it; text->vocab may be NULL (then grammars are refused
 * with 400). Errors: EMBER_ERR_NOMEM. */
ember_status chat_tools_new(const server_text *text, const server_config *cfg, chat_tools **out);
void chat_tools_free(chat_tools *ct);
ember_tool_format chat_tools_tool_format(const chat_tools *ct);
ember_reasoning_syntax chat_tools_reasoning(const chat_tools *ct);

/* GBNF text that forces `rq`'s tool_choice (required or named) in the call
 * syntax `f`, each as the format's chat template writes a call:
 *   Hermes/Qwen   <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>
 *                 (several separated by "\n" when parallel_tool_calls and
 *                 tool_choice is "required"; a named function is called once)
 *   Llama 3       {"name": "N", "parameters": ARGS} (one call)
 *   Gemma 4       <|tool_call>call:N{key:<|"|>v<|"|>,...}<tool_call|> (back to back)
 *   Qwen3-Coder   <tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n...
 *                 </function>\n</tool_call> (separated by "\n")
 *   Mistral       [TOOL_CALLS]N[ARGS]ARGS (back to back), or for a template
 *                 of the Mistral Nemo kind ([TOOL_CALLS][ and no [ARGS]):
 *                 [TOOL_CALLS][{"name": "N", "arguments": ARGS}, ...]
 * ARGS follows the tool's parameters schema (ember_json_schema_to_gbnf_syntax,
 * in the format's argument syntax). Markers are literal text: they match a
 * special token whose piece is that text or the text spelt out in pieces.
 * *out NULL when the request needs none. `chat_template` (may be NULL)
 * picks Mistral's variant. Errors (the client's, 400, with *param set):
 * EMBER_ERR_NOT_FOUND (named tool not among tools), EMBER_ERR_UNSUPPORTED
 * (no tool-call format), and those of ember_json_schema_to_gbnf_syntax. */
ember_status chat_tools_choice_gbnf_tmpl(const oai_req *rq, ember_tool_format f, const char *chat_template,
                                         char **out, const char **param);
/* Whether `rq` has tools (tool_choice auto, required or named; auto only
 * without a response_format / grammar of the client's) while the chat
 * template has no tool-call format: then the reply is written in ember's
 * generic format (EMBER_TOOL_FORMAT_GENERIC, chat/formats/generic.c),
 * described to the model by chat_tools_generic_messages and held by the
 * grammar chat_tools_choice_gbnf_tmpl gives for it:
 *   {"tool_calls": [{"name": "N", "arguments": ARGS}, ...]}   (", " between
 *   calls when parallel_tool_calls and the function is not named; one call
 *   otherwise), or under "auto" also {"response": STRING}, whose text the
 *   parser streams as content (llama.cpp's former generic format's shape).
 * So tool_choice and parallel_tool_calls work with any model. */
bool chat_tools_uses_generic(const chat_tools *ct, const oai_req *rq);
/* rq's messages with the tools and the generic reply shapes described in
 * the system message (appended to a leading system message, else a new
 * first one), and the history's assistant tool_calls rewritten as the
 * generic JSON content that would have produced them. New reference; NULL
 * when out of memory. */
json_t *chat_tools_generic_messages(const oai_req *rq);

/* A tool_choice grammar (`gbnf`, start rule root, from the function above)
 * for a prompt that opened a thought (Qwen3.5 with enable_thinking: the
 * generation prompt ends "<think>\n"): the model first finishes its thought
 * (text without the close tag, which then ends it, then up to 4 spaces or
 * newlines), then makes the call; in the Qwen3-Coder format (Qwen3.5) the
 * thought may also end at the call's "<tool_call>" (parse.h), so its text
 * holds neither. The thought is as long as the model makes it:
 * reasoning_budget bounds it (its forced close fits this grammar), so a
 * call then always follows. (llama.cpp's grammar for these templates also
 * lets the thought run before a required call: common/parsers/qwen3-coder.cpp.)
 * Thought text that ends in a proper prefix of a tag just before the tag
 * ("a <</think>") is refused, which the model simply avoids. *out malloc'd.
 * Errors: EMBER_ERR_INVALID_ARG (no grammar, r NONE), EMBER_ERR_NOMEM. */
ember_status chat_tools_after_thought(const char *gbnf, ember_reasoning_syntax r, ember_tool_format f, char **out);

/* The same with chat_template NULL. */
ember_status chat_tools_choice_gbnf(const oai_req *rq, ember_tool_format f, char **out, const char **param);

/* What a request decodes under: p->grammar and p->hook are set (the hook
 * owns per-request state: reasoning parser and budget, an uncached grammar).
 * gbnf may be NULL. budget < 0: no reasoning budget. open_at_start: the
 * prompt opened a thought. Errors: EMBER_ERR_FORMAT (GBNF does not parse:
 * the client's), EMBER_ERR_UNSUPPORTED (no vocabulary), EMBER_ERR_NOMEM. */
ember_status chat_tools_prepare(chat_tools *ct, const char *gbnf, int32_t budget, bool open_at_start,
                                engine_req_params *p);

/* Whether the last tokens of a prompt leave a reasoning block open (the
 * text of its last 16 tokens; ember_chat_prompt_opens_reasoning). */
bool chat_tools_prompt_opens(const chat_tools *ct, const ember_token *toks, int32_t n);

#endif
