/*
 * template.c — the context transformers' apply_chat_template gives a chat
 * template, and rendering with it (see template.h).
 *
 * Owns: variable names and their defaults (tools=None, documents=None).
 * Must not: change message contents.
 */
#include "chat/template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

bool ember_chat_template_assumes_enable_thinking(const char *src)
{
    static const char name[] = "enable_thinking";
    static const char *const guards[] = {"is defined", "is not defined", "is undefined", "default", "is true",
                                         "is false"};
    const size_t n = sizeof name - 1;
    bool reads = false;
    for (const char *p = src ? strstr(src, name) : NULL; p; p = strstr(p + n, name)) {
        char before = p > src ? p[-1] : ' ', after = p[n];
        bool ident = !(before == '.' || before == '_' || (before >= '0' && before <= '9') ||
                       (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z')) &&
                     !(after == '_' || (after >= '0' && after <= '9') || (after >= 'a' && after <= 'z') ||
                       (after >= 'A' && after <= 'Z'));
        if (!ident) continue;
        const char *q = p + n;
        while (*q == ' ' || *q == '\t') q++;
        if (q[0] == '=' && q[1] != '=') continue;   /* set enable_thinking = ..., namespace(enable_thinking=...) */
        reads = true;
        if (*q == '|') {   /* enable_thinking | default(...) */
            q++;
            while (*q == ' ') q++;
        }
        for (size_t g = 0; g < sizeof guards / sizeof guards[0]; g++)
            if (!strncmp(q, guards[g], strlen(guards[g]))) return false;
    }
    return reads;
}

static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt"};

bool ember_chat_kwarg_reserved(const char *name)
{
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (!strcmp(name, reserved[i])) return true;
    return false;
}

ember_status ember_chat_build_context(const ember_chat_inputs *in, json_t **out)
{
    if (!in || !out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_build_context: NULL argument");
    *out = NULL;
    if (!json_is_array(in->messages))
        return ember_error(EMBER_ERR_INVALID_ARG, "chat template: messages must be a JSON array");
    if (in->tools && !json_is_array(in->tools) && !json_is_null(in->tools))
        return ember_error(EMBER_ERR_INVALID_ARG, "chat template: tools must be a JSON array or null");
    if (in->kwargs && !json_is_object(in->kwargs))
        return ember_error(EMBER_ERR_INVALID_ARG, "chat template: chat_template_kwargs must be a JSON object");
    for (size_t i = 0; in->kwargs && i < sizeof reserved / sizeof reserved[0]; i++)
        if (json_object_get(in->kwargs, reserved[i]))
            return ember_error(EMBER_ERR_INVALID_ARG, "chat template: chat_template_kwargs may not set '%s'", reserved[i]);
    json_t *ctx = json_object();
    if (!ctx) return ember_error(EMBER_ERR_NOMEM, "chat template: out of memory");
    int bad = 0;
    bad |= json_object_set(ctx, "messages", (json_t *)in->messages);
    bad |= json_object_set_new(ctx, "tools", in->tools ? json_incref((json_t *)in->tools) : json_null());
    bad |= json_object_set_new(ctx, "documents", json_null());
    bad |= json_object_set_new(ctx, "add_generation_prompt", json_boolean(in->add_generation_prompt));
    if (in->bos_token) bad |= json_object_set_new(ctx, "bos_token", json_string(in->bos_token));
    if (in->eos_token) bad |= json_object_set_new(ctx, "eos_token", json_string(in->eos_token));
    if (in->kwargs) bad |= json_object_update(ctx, (json_t *)in->kwargs);
    if (bad) {
        json_decref(ctx);
        return ember_error(EMBER_ERR_INVALID_ARG, "chat template: could not build the context (token not UTF-8?)");
    }
    *out = ctx;
    return EMBER_OK;
}

/* Bytes of Python whitespace (str.isspace) that start s[0, n): ASCII
 * \t\n\v\f\r, \x1c-\x1f and space, and the Unicode White_Space /
 * bidi-whitespace code points U+0085, U+00A0, U+1680, U+2000-U+200A,
 * U+2028, U+2029, U+202F, U+205F, U+3000. */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] <= 0x8a || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3;
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3;
    return 0;
}

/* The same, for whitespace that ends s[0, n). */
static size_t space_before(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (space_at(s + n - k, k) == k) return k;
    return 0;
}

ember_status ember_chat_continue_point(const char *rendered, size_t len, const json_t *final_msg, size_t *cut)
{
    const json_t *c = json_object_get(final_msg, "content");
    if (json_is_array(c)) {
        const json_t *text = NULL;
        for (size_t i = json_array_size(c); i-- > 0 && !text;)
            if (json_is_string(json_object_get(json_array_get(c, i), "text")))
                text = json_object_get(json_array_get(c, i), "text");
        c = text;
    }
    if (!json_is_string(c))
        return ember_error(EMBER_ERR_FORMAT, "continue_final_message: the final message has no text to continue");
    const unsigned char *m = (const unsigned char *)json_string_value(c);
    size_t n = json_string_length(c), a = 0, b = n, k;
    while (a < b && (k = space_at(m + a, b - a)) > 0) a += k;          /* lstrip */
    while (b > a && (k = space_before(m + a, b - a)) > 0) b -= k;      /* rstrip */
    /* rindex of the stripped text */
    size_t w = b - a;
    const char *stripped = (const char *)m + a;
    size_t at = SIZE_MAX;
    for (size_t i = len >= w ? len - w + 1 : 0; i-- > 0;)
        if (!memcmp(rendered + i, stripped, w)) { at = i; break; }
    if (at == SIZE_MAX)
        return ember_error(EMBER_ERR_FORMAT,
                           "continue_final_message: the final message does not appear in the chat after applying "
                           "the chat template (the template changes it)");
    /* the template kept the message's trailing whitespace: keep it too */
    size_t n_l = n - a;
    if (at + n_l <= len && n_l == n && !memcmp(rendered + at, m, n)) *cut = at + n_l;
    else *cut = at + w;
    return EMBER_OK;
}

ember_status ember_chat_render(const ember_jinja_template *t, const ember_chat_inputs *in,
                               const ember_jinja_render_opts *opts, char **out, size_t *out_len,
                               ember_jinja_error *err)
{
    if (out) *out = NULL;
    if (in && in->continue_final_message && in->add_generation_prompt)
        return ember_error(EMBER_ERR_INVALID_ARG, "chat template: continue_final_message and add_generation_prompt "
                                                  "cannot both be set");
    json_t *ctx = NULL;
    ember_status st = ember_chat_build_context(in, &ctx);
    if (st != EMBER_OK) return st;
    ember_jinja_render_opts o = {0};
    if (opts) o = *opts;
    /* llama.cpp's extra context (common/chat.cpp, common_chat_extra_context):
     * today as "%d %b %Y" (date_string, read by the Llama 3.x templates) and
     * "%b %d %Y" (datetime), at the clock strftime_now uses; kwargs win */
    time_t now = o.use_fixed_now ? (time_t)o.fixed_now : time(NULL);
    struct tm tmv;
    bool have = o.use_fixed_now ? gmtime_r(&now, &tmv) != NULL : localtime_r(&now, &tmv) != NULL;
    char day[64];
    if (have && !json_object_get(ctx, "date_string") && strftime(day, sizeof day, "%d %b %Y", &tmv))
        json_object_set_new(ctx, "date_string", json_string(day));
    if (have && !json_object_get(ctx, "datetime") && strftime(day, sizeof day, "%b %d %Y", &tmv))
        json_object_set_new(ctx, "datetime", json_string(day));
    size_t len = 0;
    st = ember_jinja_render(t, ctx, &o, out, &len, err);
    json_decref(ctx);
    if (st == EMBER_OK && in->continue_final_message) {
        size_t n = json_array_size(in->messages);
        size_t cut = len;
        st = n ? ember_chat_continue_point(*out, len, json_array_get(in->messages, n - 1), &cut)
               : ember_error(EMBER_ERR_FORMAT, "continue_final_message: there is no message to continue");
        if (st != EMBER_OK) {
            if (err) {
                err->line = err->column = 0;
                snprintf(err->message, sizeof err->message, "%s", ember_last_error());
            }
            free(*out);
            *out = NULL;
            return st;
        }
        len = cut;
        (*out)[len] = 0;
    }
    if (st == EMBER_OK && out_len) *out_len = len;
    return st;
}
