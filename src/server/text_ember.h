/*
 * text_ember.h — the server's text side (server.h: server_text) over the
 * real tokenizer (src/tokenizer) and chat template (src/chat/jinja).
 */
#ifndef EMBER_SERVER_TEXT_EMBER_H
#define EMBER_SERVER_TEXT_EMBER_H

#include "engine/engine.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

typedef struct text_ember text_ember;

/* Bind `vocab` (must outlive the result) and a chat template: `template_src`
 * (e.g. from --chat-template-file, NUL-terminated) or else the loaded
 * model's own, `model_template` [model_template_len] bytes
 * (ember_model_chat_template; NULL: the model has none). A model without a
 * template gets ChatML, as llama-server does (the log says so).
 * Errors: EMBER_ERR_FORMAT (the template does not parse: message with line
 * and column), EMBER_ERR_NOMEM. */
ember_status text_ember_new(const char *model_template, size_t model_template_len, const ember_vocab *vocab,
                            const char *template_src, text_ember **out);
void text_ember_free(text_ember *t);
/* The server_text and engine_vocab tables for it. */
server_text text_ember_server(text_ember *t);
engine_vocab text_ember_vocab(text_ember *t);
/* Whether the template came from the fallback. */
bool text_ember_is_fallback(const text_ember *t);

#endif
