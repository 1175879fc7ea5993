/*
 * text_ember.c — tokenizer and chat template behind server_text/engine_vocab.
 *
 * Rendering: src/chat/template.c builds the context transformers'
 * apply_chat_template passes (messages, tools, add_generation_prompt,
 * bos_token, eos_token, chat_template_kwargs at top level).
 * Must not: sample, decode or know about HTTP.
 */
#include "server/text_ember.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "chat/jinja/jinja.h"
#include "chat/template.h"
#include "gguf/gguf.h"

struct text_ember {
    const ember_vocab *vocab;
    char *src;
    ember_jinja_template *tmpl;
    char *bos_text, *eos_text;
    bool fallback;
};

/* used when a GGUF has no tokenizer.chat_template: ChatML, as llama-server
 * falls back to (llama.cpp src/llama-chat.cpp, LLM_CHAT_TEMPLATE_CHATML) */
static const char fallback_template[] =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

static char *token_text(const ember_vocab *v, ember_token t)
{
    size_t len = 0;
    const char *p = t >= 0 ? ember_token_to_piece(v, t, true, &len) : NULL;
    char *s = malloc(len + 1);
    if (!s) return NULL;
    if (p) memcpy(s, p, len);
    s[len] = 0;
    return s;
}

ember_status text_ember_new(const char *gguf_path, const ember_vocab *vocab, const char *template_src,
                            text_ember **out)
{
    *out = NULL;
    text_ember *t = calloc(1, sizeof *t);
    if (!t) return ember_error(EMBER_ERR_NOMEM, "text_ember");
    t->vocab = vocab;
    if (template_src) {
        t->src = strdup(template_src);
    } else {
        ember_gguf *g = NULL;
        ember_status st = ember_gguf_open(gguf_path, &g);
        if (st != EMBER_OK) { free(t); return st; }
        const char *s = NULL;
        size_t len = 0;
        if (ember_gguf_get_str(g, "tokenizer.chat_template", &s, &len) == EMBER_OK && s) {
            t->src = malloc(len + 1);
            if (t->src) { memcpy(t->src, s, len); t->src[len] = 0; }
        } else {
            t->src = strdup(fallback_template);
            t->fallback = true;
        }
        ember_gguf_close(g);
    }
    t->bos_text = token_text(vocab, ember_vocab_bos(vocab));
    t->eos_text = token_text(vocab, ember_vocab_eos(vocab));
    if (!t->src || !t->bos_text || !t->eos_text) { text_ember_free(t); return ember_error(EMBER_ERR_NOMEM, "template"); }
    ember_jinja_error err;
    ember_status st = ember_jinja_parse(t->src, strlen(t->src), &t->tmpl, &err);
    if (st != EMBER_OK) {
        text_ember_free(t);
        return ember_error(st, "chat template: %s", err.message);
    }
    *out = t;
    return EMBER_OK;
}

void text_ember_free(text_ember *t)
{
    if (!t) return;
    ember_jinja_free(t->tmpl);
    free(t->src);
    free(t->bos_text);
    free(t->eos_text);
    free(t);
}

bool text_ember_is_fallback(const text_ember *t) { return t->fallback; }

static ember_status te_tokenize(void *ud, const char *text, size_t len, bool add_special, bool parse_special,
                                ember_token **out, int32_t *n_out)
{
    text_ember *t = ud;
    size_t n = 0;
    ember_status st = ember_tokenize(t->vocab, text, len, add_special, parse_special, out, &n);
    if (st != EMBER_OK) return st;
    if (n > INT32_MAX) { free(*out); *out = NULL; return ember_error(EMBER_ERR_RANGE, "text too long"); }
    *n_out = (int32_t)n;
    return EMBER_OK;
}

static int32_t te_piece(void *ud, ember_token id, char *buf, int32_t cap)
{
    text_ember *t = ud;
    size_t len = 0;
    const char *p = ember_token_to_piece(t->vocab, id, false, &len);
    if (!p) return id >= 0 && id < ember_vocab_n_tokens(t->vocab) ? 0 : -1;
    if ((size_t)cap >= len) memcpy(buf, p, len);
    return (int32_t)len;
}

static bool te_is_eog(void *ud, ember_token id)
{
    text_ember *t = ud;
    return ember_vocab_is_eog(t->vocab, id);
}

static ember_status te_template(void *ud, json_t *messages, json_t *tools, json_t *kwargs, bool add_gen, char **out)
{
    text_ember *t = ud;
    ember_chat_inputs in = {.messages = messages, .tools = tools, .add_generation_prompt = add_gen,
                            .bos_token = t->bos_text, .eos_token = t->eos_text,
                            .kwargs = kwargs && json_object_size(kwargs) ? kwargs : NULL};
    ember_jinja_error err;
    size_t len;
    ember_status st = ember_chat_render(t->tmpl, &in, NULL, out, &len, &err);
    if (st != EMBER_OK) return ember_error(st, "%s", err.message[0] ? err.message : ember_last_error());
    return EMBER_OK;
}

server_text text_ember_server(text_ember *t)
{
    return (server_text){.ud = t, .n_vocab = ember_vocab_n_tokens(t->vocab), .tokenize = te_tokenize,
                         .token_piece = te_piece, .apply_template = te_template, .bos = ember_vocab_bos(t->vocab),
                         .chat_template = t->src};
}

engine_vocab text_ember_vocab(text_ember *t)
{
    return (engine_vocab){.ud = t, .token_piece = te_piece, .is_eog = te_is_eog};
}
