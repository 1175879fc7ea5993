/*
 * template.h — render a conversation with a model's chat template the way
 * Hugging Face transformers' apply_chat_template does (tokenize=False).
 *
 * Owns: building the template context — messages, tools (None when absent),
 * documents (None), add_generation_prompt, the special tokens, and the
 * request's chat_template_kwargs (e.g. enable_thinking); ember_chat_render
 * adds llama.cpp's date_string ("%d %b %Y") and datetime ("%b %d %Y") of
 * today unless the kwargs set them — and rendering it
 * with the Jinja interpreter (src/chat/jinja/jinja.h).
 * Source of the contract: transformers/utils/chat_template_utils.py,
 * render_jinja_template(): template.render(messages=..., tools=...,
 * documents=..., add_generation_prompt=..., **special_tokens_map, **kwargs).
 * Must not: rewrite messages (OpenAI -> Hugging Face shape conversion, such
 * as parsing tool_call arguments from JSON strings, is the caller's job) or
 * know about HTTP.
 */
#ifndef EMBER_CHAT_TEMPLATE_H
#define EMBER_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <jansson.h>

#include "chat/jinja/jinja.h"

typedef struct ember_chat_inputs {
    const json_t *messages;       /* JSON array of message objects; required */
    const json_t *tools;          /* JSON array of tool schemas, or NULL (template sees None) */
    bool add_generation_prompt;
    /* transformers' continue_final_message: render without a generation
     * prompt and cut the text right after the final message's content
     * (ember_chat_continue_point), so the model goes on with that message.
     * Not with add_generation_prompt. */
    bool continue_final_message;
    const char *bos_token;        /* NULL: not defined in the template (as a tokenizer without one) */
    const char *eos_token;        /* NULL: not defined */
    const json_t *kwargs;         /* JSON object of extra variables (chat_template_kwargs), or NULL */
} ember_chat_inputs;

/* Build the context object a chat template is rendered with. *out is a new
 * reference (json_decref it). kwargs are added last and may override the
 * special tokens but not messages/tools/documents/add_generation_prompt
 * (Python would reject the duplicate keyword).
 * Errors: EMBER_ERR_INVALID_ARG (messages not an array, tools not an array
 * or null, kwargs not an object, kwargs naming a reserved variable),
 * EMBER_ERR_NOMEM. */
ember_status ember_chat_build_context(const ember_chat_inputs *in, json_t **out);

/* Whether a template reads the variable enable_thinking as if it were
 * always given: it uses it (as a top-level name, not ns.enable_thinking)
 * and never asks whether it is defined ("is defined", "is not defined",
 * "is undefined", "| default(...)", "is true", "is false"). Such templates
 * (DeepSeek R1 distills, QwQ, Command R7B as llama.cpp ships them) were
 * written for llama-server, which always passes it (true when the template
 * can think), so undefined would wrongly read as "off"; a template that
 * asks has a default of its own (Qwen3: on, Gemma 4: off). */
bool ember_chat_template_assumes_enable_thinking(const char *src);

/* Whether chat_template_kwargs may not set `name` (messages, tools,
 * documents, add_generation_prompt: the variables the context itself sets). */
bool ember_chat_kwarg_reserved(const char *name);

/* Render `t` for `in`. `opts` may be NULL (the current clock for
 * strftime_now(), date_string and datetime; tests pin it with
 * opts->use_fixed_now).
 * On success *out is a malloc'd UTF-8 string (free() it), *out_len (may be
 * NULL) its length in bytes.
 * Errors: those of ember_chat_build_context and ember_jinja_render (a
 * template error is EMBER_ERR_FORMAT with "line L, column C: ..." in err and
 * in ember_last_error()). */
ember_status ember_chat_render(const ember_jinja_template *t, const ember_chat_inputs *in,
                               const ember_jinja_render_opts *opts, char **out, size_t *out_len,
                               ember_jinja_error *err);

/* Where a render of a conversation ending in `final_msg` (rendered without a
 * generation prompt) is cut for continue_final_message, as transformers does
 * (chat_template_utils.py, render_jinja_template): at the last occurrence of
 * the message's text stripped of whitespace (Python str.strip()), plus its
 * trailing whitespace when the template kept that. The text is the content
 * string, or the last content part's "text".
 * Errors: EMBER_ERR_FORMAT (no text to continue, or the text does not appear
 * in the render: the template changed it). */
ember_status ember_chat_continue_point(const char *rendered, size_t len, const json_t *final_msg, size_t *cut);

#endif
