/*
 * template.c — the context transformers' apply_chat_template gives a chat
 * template, and rendering with it (see template.h).
 *
 * Owns: variable names and their defaults (tools=None, documents=None).
 * Must not: change message contents.
 */
#include "chat/template.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

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
    static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt"};
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

ember_status ember_chat_render(const ember_jinja_template *t, const ember_chat_inputs *in,
                               const ember_jinja_render_opts *opts, char **out, size_t *out_len,
                               ember_jinja_error *err)
{
    if (out) *out = NULL;
    json_t *ctx = NULL;
    ember_status st = ember_chat_build_context(in, &ctx);
    if (st != EMBER_OK) return st;
    st = ember_jinja_render(t, ctx, opts, out, out_len, err);
    json_decref(ctx);
    return st;
}
