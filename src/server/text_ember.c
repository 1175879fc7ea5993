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
#include <time.h>

#include "base/status.h"
#include "chat/jinja/jinja.h"
#include "chat/template.h"

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

ember_status text_ember_new(const char *model_template, size_t model_template_len, const ember_vocab *vocab,
                            const char *template_src, text_ember **out)
{
    *out = NULL;
    text_ember *t = calloc(1, sizeof *t);
    if (!t) return ember_error(EMBER_ERR_NOMEM, "text_ember");
    t->vocab = vocab;
    if (template_src) {
        t->src = strdup(template_src);
    } else if (model_template) {
        t->src = malloc(model_template_len + 1);
        if (t->src) { memcpy(t->src, model_template, model_template_len); t->src[model_template_len] = 0; }
    } else {
        t->src = strdup(fallback_template);
        t->fallback = true;
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

static ember_status te_template(void *ud, json_t *messages, json_t *tools, json_t *kwargs, bool add_gen, bool cont,
                               char **out)
{
    text_ember *t = ud;
    ember_chat_inputs in = {.messages = messages, .tools = tools, .add_generation_prompt = add_gen,
                            .continue_final_message = cont, .bos_token = t->bos_text, .eos_token = t->eos_text,
                            .kwargs = kwargs && json_object_size(kwargs) ? kwargs : NULL};
    ember_jinja_error err;
    size_t len;
    ember_status st = ember_chat_render(t->tmpl, &in, NULL, out, &len, &err);
    if (st != EMBER_OK) return ember_error(st, "%s", err.message[0] ? err.message : ember_last_error());
    return EMBER_OK;
}

/* Render twice: plainly, and with every message's string content wrapped in
 * per-request random markers. Removing the markers from the second render
 * gives the untrusted-byte mask of ember_tokenize_ex (tokenizer.h). If the
 * template changed content (e.g. `| trim` with edge whitespace) the two texts
 * differ, and the plain render is tokenized with parse_special as
 * llama-server does. continue_final: both are rendered whole and cut where
 * the plain one ends its final message (ember_chat_continue_point). */
static ember_status te_render_tokens(void *ud, json_t *messages, json_t *tools, json_t *kwargs, bool add_gen,
                                     bool cont, ember_token **out, int32_t *n_out)
{
    text_ember *t = ud;
    char *plain = NULL, *marked = NULL, *text = NULL;
    uint8_t *mask = NULL;
    if (cont && add_gen)
        return ember_error(EMBER_ERR_INVALID_ARG, "continue_final_message and add_generation_prompt cannot both be set");
    ember_status st = te_template(ud, messages, tools, kwargs, add_gen, false, &plain);
    if (st != EMBER_OK) return st;
    size_t cut = strlen(plain);
    if (cont && json_array_size(messages) > 0) {
        st = ember_chat_continue_point(plain, cut, json_array_get(messages, json_array_size(messages) - 1), &cut);
        if (st != EMBER_OK) { free(plain); return st; }
    }

    static _Atomic uint64_t counter;
    uint64_t nonce = ((uint64_t)(uintptr_t)&nonce * 0x9E3779B97F4A7C15ull) ^ (uint64_t)time(NULL) ^
                     (++counter * 0xD1B54A32D192ED03ull);
    char open[40], close[40];
    snprintf(open, sizeof open, "\x1d<u%016llx>\x1d", (unsigned long long)nonce);
    snprintf(close, sizeof close, "\x1d</u%016llx>\x1d", (unsigned long long)nonce);
    size_t lo = strlen(open), lc = strlen(close);
    json_t *msgs = json_deep_copy(messages);
    for (size_t i = 0; msgs && i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        json_t *c = json_object_get(m, "content");
        if (!json_is_string(c)) continue;
        size_t n = json_string_length(c);
        char *w = malloc(lo + n + lc);
        if (!w) continue;
        memcpy(w, open, lo);
        memcpy(w + lo, json_string_value(c), n);
        memcpy(w + lo + n, close, lc);
        json_object_set_new(m, "content", json_stringn(w, lo + n + lc));
        free(w);
    }
    bool use_mask = false;
    size_t len = 0;
    if (msgs && te_template(ud, msgs, tools, kwargs, add_gen, false, &marked) == EMBER_OK) {
        size_t n = strlen(marked);
        text = malloc(n + 1);
        mask = malloc(n + 1);
        if (text && mask) {
            int depth = 0;
            for (size_t i = 0; i < n;) {
                if (!strncmp(marked + i, open, lo)) { depth++; i += lo; continue; }
                if (!strncmp(marked + i, close, lc)) { depth -= depth > 0; i += lc; continue; }
                mask[len] = depth > 0;
                text[len++] = marked[i++];
            }
            text[len] = 0;
            use_mask = !strcmp(text, plain);
        }
    }
    json_decref(msgs);
    plain[cut] = 0;
    if (use_mask) text[len = cut] = 0;
    size_t n_ids = 0;
    if (use_mask) st = ember_tokenize_ex(t->vocab, text, len, true, true, mask, out, &n_ids);
    else st = ember_tokenize(t->vocab, plain, strlen(plain), true, true, out, &n_ids);
    free(plain);
    free(marked);
    free(text);
    free(mask);
    if (st != EMBER_OK) return st;
    if (n_ids > INT32_MAX) { free(*out); *out = NULL; return ember_error(EMBER_ERR_RANGE, "prompt too long"); }
    *n_out = (int32_t)n_ids;
    return EMBER_OK;
}

server_text text_ember_server(text_ember *t)
{
    return (server_text){.ud = t, .n_vocab = ember_vocab_n_tokens(t->vocab), .tokenize = te_tokenize,
                         .token_piece = te_piece, .apply_template = te_template, .render_tokens = te_render_tokens,
                         .vocab = t->vocab,
                         .bos = ember_vocab_bos(t->vocab),
                         .chat_template = t->src};
}

engine_vocab text_ember_vocab(text_ember *t)
{
    return (engine_vocab){.ud = t, .token_piece = te_piece, .is_eog = te_is_eog};
}
