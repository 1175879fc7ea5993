/*
 * openai.c — OpenAI request validation and response objects (see openai.h).
 *
 * Owns: the mapping between OpenAI JSON and engine_req_params. Must not:
 * touch sockets, the engine or the tokenizer. Every rejection names the field
 * ("param") and says what was expected, like OpenAI's own 400s.
 */
#include "server/openai.h"

#include "base/status.h"
#include "chat/template.h"
#include "sample/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void oai_error_set(oai_error *err, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...)
{
    err->http_status = status;
    err->type = type;
    err->code = code;
    err->n_prompt_tokens = err->n_ctx = 0;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

json_t *oai_json_string(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    /* invalid UTF-8: copy valid sequences, U+FFFD for each bad byte */
    char *o = malloc(n * 3 + 1);
    if (!o) return json_string("");
    size_t k = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n && c != 0;
        for (size_t j = 1; ok && j < len; j++) ok = (u[i + j] & 0xC0) == 0x80;
        if (ok && len == 2) ok = c >= 0xC2;
        if (ok && len == 3) {
            unsigned cp = ((c & 0xF) << 12) | ((u[i + 1] & 0x3F) << 6) | (u[i + 2] & 0x3F);
            ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
        }
        if (ok && len == 4) {
            unsigned cp = ((c & 7) << 18) | ((u[i + 1] & 0x3F) << 12) | ((u[i + 2] & 0x3F) << 6) | (u[i + 3] & 0x3F);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (ok) {
            memcpy(o + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    j = json_stringn(o, k);
    free(o);
    return j ? j : json_string("");
}

json_t *oai_error_json(const oai_error *err)
{
    json_t *j = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message, "type",
                          err->type ? err->type : "invalid_request_error", "param",
                          err->param[0] ? json_string(err->param) : json_null(), "code",
                          err->code ? json_string(err->code) : json_null());
    if (j && err->type && !strcmp(err->type, OAI_ERR_EXCEED_CONTEXT)) {
        json_t *e = json_object_get(j, "error");
        json_object_set_new(e, "n_prompt_tokens", json_integer(err->n_prompt_tokens));
        json_object_set_new(e, "n_ctx", json_integer(err->n_ctx));
    }
    return j;
}

bool oai_bad(oai_error *err, const char *param, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    oai_error_set(err, 400, "invalid_request_error", param, NULL, "%s", msg);
    return false;
}

json_t *oai_opt(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static bool get_number(json_t *o, const char *key, double lo, double hi, double *out, oai_error *err)
{
    json_t *v = oai_opt(o, key);
    if (!v) return true;
    if (!json_is_number(v)) return oai_bad(err, key, "Invalid type for '%s': expected a number.", key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return oai_bad(err, key, "Invalid '%s': %g is out of range; expected a value in [%g, %g].", key, d, lo, hi);
    *out = d;
    return true;
}

static bool get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, oai_error *err)
{
    json_t *v = oai_opt(o, key);
    if (!v) return true;
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        x = (int64_t)json_real_value(v);
    } else {
        return oai_bad(err, key, "Invalid type for '%s': expected an integer.", key);
    }
    if (x < lo || x > hi)
        return oai_bad(err, key, "Invalid '%s': %lld is out of range; expected a value in [%lld, %lld].", key, (long long)x,
                   (long long)lo, (long long)hi);
    *out = x;
    return true;
}

static bool get_bool(json_t *o, const char *key, bool *out, oai_error *err)
{
    json_t *v = oai_opt(o, key);
    if (!v) return true;
    if (!json_is_boolean(v)) return oai_bad(err, key, "Invalid type for '%s': expected a boolean.", key);
    *out = json_is_true(v);
    return true;
}

/* Chat content: a string, or an array of {"type": "text", "text": ...} parts
 * (joined with no separator). NULL content is allowed for assistant messages
 * that carry tool_calls. */
static bool normalize_content(json_t *msg, size_t i, const char *role, oai_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c)) {
        if (!strcmp(role, "assistant")) return true;
        return oai_bad(err, param, "Invalid '%s': a %s message needs content.", param, role);
    }
    if (json_is_string(c)) return true;
    if (!json_is_array(c))
        return oai_bad(err, param, "Invalid type for '%s': expected a string or an array of content parts.", param);
    size_t len = 0, cap = 64;
    char *joined = malloc(cap);
    if (!joined) return oai_bad(err, param, "out of memory");
    joined[0] = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        json_t *type = json_object_get(part, "type");
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            free(joined);
            return oai_bad(err, param, "Invalid '%s[%zu]': expected an object with a 'type'.", param, k);
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            free(joined);
            return oai_bad(err, param, "Invalid '%s[%zu]': content part type '%s' is not supported (only 'text').", param, k,
                       json_string_value(type));
        }
        if (!json_is_string(text)) {
            free(joined);
            return oai_bad(err, param, "Invalid type for '%s[%zu].text': expected a string.", param, k);
        }
        size_t n = json_string_length(text);
        if (len + n + 1 > cap) {
            while (len + n + 1 > cap) cap *= 2;
            char *nj = realloc(joined, cap);
            if (!nj) { free(joined); return oai_bad(err, param, "out of memory"); }
            joined = nj;
        }
        memcpy(joined + len, json_string_value(text), n);
        len += n;
        joined[len] = 0;
    }
    json_object_set_new(msg, "content", json_stringn(joined, len));
    free(joined);
    return true;
}

/* Levels of arrays and objects in v (a scalar: 0); counting stops past `limit`. */
static int nesting(const json_t *v, int limit)
{
    if (!json_is_array(v) && !json_is_object(v)) return 0;
    if (limit <= 0) return 1;
    int d = 0;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && d < limit; i++) {
            int x = nesting(json_array_get(v, i), limit - 1);
            if (x > d) d = x;
        }
    } else {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int n = nesting(x, limit - 1);
            if (n > d) d = n;
            if (d >= limit) break;
        }
    }
    return d + 1;
}

/* A field the chat template reads must fit the renderer's nesting limit
 * (chat/jinja: 200 levels from the render context). */
static bool check_nesting(const json_t *v, const char *param, oai_error *err)
{
    if (nesting(v, OAI_MAX_NESTING) <= OAI_MAX_NESTING) return true;
    return oai_bad(err, param, "Invalid '%s': nested deeper than %d levels of arrays and objects.", param,
               OAI_MAX_NESTING);
}

static const char *msg_role(json_t *msgs, size_t i)
{
    return json_string_value(json_object_get(json_array_get(msgs, i), "role"));
}

/* add_generation_prompt, continue_final_message and the assistant prefill
 * (see oai_parse_messages). */
static bool parse_continuation(json_t *body, oai_req *out, oai_error *err)
{
    out->add_generation_prompt = true;
    if (!get_bool(body, "add_generation_prompt", &out->add_generation_prompt, err)) return false;
    json_t *cfm = oai_opt(body, "continue_final_message");
    if (cfm && !json_is_boolean(cfm))
        return oai_bad(err, "continue_final_message", "Invalid type for 'continue_final_message': expected a boolean.");
    json_t *msgs = out->messages;
    size_t n = json_array_size(msgs);
    bool cont = json_is_true(cfm);
    json_t *last = json_array_get(msgs, n - 1);
    bool calls = json_array_size(json_object_get(last, "tool_calls")) > 0;
    if (!cfm && !calls && !strcmp(msg_role(msgs, n - 1), "assistant")) {
        if (n >= 2 && !strcmp(msg_role(msgs, n - 2), "assistant"))
            return oai_bad(err, "messages", "Cannot have 2 or more assistant messages at the end of the list.");
        cont = true;
        out->add_generation_prompt = false;
    }
    if (!cont) return true;
    if (out->add_generation_prompt)
        return oai_bad(err, "continue_final_message",
                   "Cannot set both add_generation_prompt and continue_final_message to true.");
    if (calls)
        return oai_bad(err, "messages", "Cannot continue an assistant message that contains tool calls.");
    json_t *c = json_object_get(last, "content");
    if (json_is_string(c) && json_string_length(c) == 0 && n >= 2) {
        json_array_remove(msgs, n - 1);   /* nothing to continue: the reply starts afresh */
        out->add_generation_prompt = true;
        return true;
    }
    out->continue_final = true;
    return true;
}

bool oai_parse_messages(json_t *body, oai_req *out, oai_error *err)
{
    json_t *msgs = json_object_get(body, "messages");
    if (!msgs) return oai_bad(err, "messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs)) return oai_bad(err, "messages", "Invalid type for 'messages': expected an array.");
    if (json_array_size(msgs) == 0)
        return oai_bad(err, "messages", "Invalid 'messages': empty array. Expected an array with minimum length 1.");
    if (json_array_size(msgs) > OAI_MAX_MESSAGES)
        return oai_bad(err, "messages",
                   "Invalid 'messages': array too long. Expected an array with maximum length %d, but got an array "
                   "with length %zu instead.", OAI_MAX_MESSAGES, json_array_size(msgs));
    json_t *copy = json_deep_copy(msgs);
    if (!copy) return oai_bad(err, "messages", "out of memory");
    out->messages = copy;
    for (size_t i = 0; i < json_array_size(copy); i++) {
        json_t *m = json_array_get(copy, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return oai_bad(err, param, "Invalid type for '%s': expected an object.", param);
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!role) return oai_bad(err, param, "Missing required parameter: '%s'.", param);
        if (!json_is_string(role)) return oai_bad(err, param, "Invalid type for '%s': expected a string.", param);
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool") &&
            strcmp(r, "developer"))
            return oai_bad(err, param,
                       "Invalid value for '%s': '%s'. Supported values are: 'system', 'developer', 'user', "
                       "'assistant' and 'tool'.", param, r);
        if (!normalize_content(m, i, r, err)) return false;
        json_t *tc = oai_opt(m, "tool_calls");
        snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
        if (tc && !json_is_array(tc)) return oai_bad(err, param, "Invalid type for '%s': expected an array.", param);
        for (size_t k = 0; tc && k < json_array_size(tc); k++) {
            /* OpenAI sends arguments as a JSON string; templates expect the object
             * (Hugging Face's message shape), as llama-server converts too */
            json_t *fn = json_object_get(json_array_get(tc, k), "function");
            json_t *args = json_object_get(fn, "arguments");
            if (json_is_string(args)) {
                json_t *obj = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
                if (json_is_object(obj)) json_object_set_new(fn, "arguments", obj);
                else json_decref(obj);
            }
        }
        if (!strcmp(r, "assistant") && json_is_null(json_object_get(m, "content")) && !tc)
            json_object_set_new(m, "content", json_string(""));
        json_t *name = oai_opt(m, "name");
        snprintf(param, sizeof param, "messages[%zu].name", i);
        if (name && !json_is_string(name)) return oai_bad(err, param, "Invalid type for '%s': expected a string.", param);
        json_t *tcid = oai_opt(m, "tool_call_id");
        snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
        if (tcid && !json_is_string(tcid)) return oai_bad(err, param, "Invalid type for '%s': expected a string.", param);
    }
    if (!check_nesting(copy, "messages", err)) return false;   /* after tool_calls arguments became objects */
    json_t *tools = oai_opt(body, "tools");
    if (tools) {
        if (!json_is_array(tools)) return oai_bad(err, "tools", "Invalid type for 'tools': expected an array.");
        if (!check_nesting(tools, "tools", err)) return false;
        for (size_t i = 0; i < json_array_size(tools); i++)
            if (!json_is_object(json_array_get(tools, i)))
                return oai_bad(err, "tools", "Invalid type for 'tools[%zu]': expected an object.", i);
        if (json_array_size(tools) > 0) out->tools = json_incref(tools);
    }
    json_t *kw = oai_opt(body, "chat_template_kwargs");
    if (kw) {
        if (!json_is_object(kw))
            return oai_bad(err, "chat_template_kwargs", "Invalid type for 'chat_template_kwargs': expected an object.");
        if (!check_nesting(kw, "chat_template_kwargs", err)) return false;
        const char *k;
        json_t *v;
        json_object_foreach(kw, k, v)
            if (ember_chat_kwarg_reserved(k))
                return oai_bad(err, "chat_template_kwargs", "Invalid 'chat_template_kwargs': it may not set '%s'.", k);
        out->template_kwargs = json_incref(kw);
    }
    return parse_continuation(body, out, err);
}

static bool parse_stop(json_t *body, oai_req *out, oai_error *err)
{
    json_t *stop = oai_opt(body, "stop");
    if (!stop) return true;
    if (json_is_string(stop)) {
        out->stop[out->n_stop++] = strdup(json_string_value(stop));
        return true;
    }
    if (!json_is_array(stop)) return oai_bad(err, "stop", "Invalid type for 'stop': expected a string or an array of strings.");
    if (json_array_size(stop) > 4)
        return oai_bad(err, "stop", "Invalid 'stop': array too long. Expected an array with maximum length 4, but got an "
                                "array with length %zu instead.", json_array_size(stop));
    for (size_t i = 0; i < json_array_size(stop); i++) {
        json_t *s = json_array_get(stop, i);
        if (!json_is_string(s)) return oai_bad(err, "stop", "Invalid type for 'stop[%zu]': expected a string.", i);
        out->stop[out->n_stop++] = strdup(json_string_value(s));
    }
    return true;
}

static bool parse_logit_bias(json_t *body, int32_t n_vocab, oai_req *out, oai_error *err)
{
    json_t *lb = oai_opt(body, "logit_bias");
    if (!lb) return true;
    if (!json_is_object(lb)) return oai_bad(err, "logit_bias", "Invalid type for 'logit_bias': expected an object.");
    size_t n = json_object_size(lb);
    if (n == 0) return true;
    out->logit_bias = calloc(n, sizeof *out->logit_bias);
    if (!out->logit_bias) return oai_bad(err, "logit_bias", "out of memory");
    const char *key;
    json_t *v;
    int32_t k = 0;
    json_object_foreach(lb, key, v) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= n_vocab)
            return oai_bad(err, "logit_bias", "Invalid 'logit_bias': key '%s' is not a token id in [0, %d).", key, n_vocab);
        if (!json_is_number(v))
            return oai_bad(err, "logit_bias", "Invalid type for 'logit_bias[\"%s\"]': expected a number.", key);
        double b = json_number_value(v);
        if (!(b >= -100 && b <= 100))
            return oai_bad(err, "logit_bias", "Invalid 'logit_bias[\"%s\"]': %g is out of range [-100, 100].", key, b);
        out->logit_bias[k].token = (ember_token)id;
        out->logit_bias[k].bias = b <= -100 ? -INFINITY : (float)b;
        k++;
    }
    out->sampling.logit_bias = out->logit_bias;
    out->sampling.n_logit_bias = k;
    return true;
}

static bool parse_prompt(json_t *body, int32_t n_vocab, oai_req *out, oai_error *err)
{
    json_t *p = json_object_get(body, "prompt");
    if (!p) return oai_bad(err, "prompt", "Missing required parameter: 'prompt'.");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);   /* a batch of one */
    if (json_is_string(p)) {
        out->prompt = strdup(json_string_value(p));
        return true;
    }
    if (!json_is_array(p))
        return oai_bad(err, "prompt", "Invalid type for 'prompt': expected a string or an array of token ids.");
    size_t n = json_array_size(p);
    if (n == 0) return oai_bad(err, "prompt", "Invalid 'prompt': empty array.");
    out->prompt_tokens = malloc(sizeof *out->prompt_tokens * n);
    if (!out->prompt_tokens) return oai_bad(err, "prompt", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(p, i);
        if (json_is_string(t))
            return oai_bad(err, "prompt", "Invalid 'prompt': batches of several prompts are not supported.");
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab)
            return oai_bad(err, "prompt", "Invalid 'prompt[%zu]': expected a token id in [0, %d).", i, n_vocab);
        out->prompt_tokens[i] = (ember_token)json_integer_value(t);
    }
    out->n_prompt_tokens = (int32_t)n;
    return true;
}

static bool parse_structured(json_t *body, oai_kind kind, oai_req *out, oai_error *err);

bool oai_parse(json_t *body, oai_kind kind, int32_t n_vocab, oai_req *out, oai_error *err)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->max_tokens = kind == OAI_COMPLETION ? 16 : -1;   /* OpenAI's defaults */
    /* sampling fields a request leaves out take llama-server's defaults
     * (common/common.h: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, last_n 64) */
    out->sampling = (ember_sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                           .repeat_penalty = 1.0f, .penalty_last_n = 64, .seed = 0};
    if (!json_is_object(body)) return oai_bad(err, NULL, "The request body must be a JSON object.");
    if (kind == OAI_CHAT) {
        if (!oai_parse_messages(body, out, err)) return false;
    } else {
        if (!parse_prompt(body, n_vocab, out, err)) return false;
        json_t *suffix = oai_opt(body, "suffix");
        if (suffix) return oai_bad(err, "suffix", "'suffix' is not supported.");
        bool echo = false;
        if (!get_bool(body, "echo", &echo, err)) return false;
        if (echo) return oai_bad(err, "echo", "'echo' is not supported.");
    }
    json_t *model = oai_opt(body, "model");
    if (model && !json_is_string(model)) return oai_bad(err, "model", "Invalid type for 'model': expected a string.");

    if (!get_bool(body, "stream", &out->stream, err)) return false;
    json_t *so = oai_opt(body, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return oai_bad(err, "stream_options", "Invalid type for 'stream_options': expected an object.");
        if (!out->stream)
            return oai_bad(err, "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
        json_t *iu = oai_opt(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return oai_bad(err, "stream_options.include_usage",
                       "Invalid type for 'stream_options.include_usage': expected a boolean.");
        out->include_usage = iu && json_is_true(iu);
    }
    int64_t n = 1;
    if (!get_int(body, "n", 1, OAI_MAX_CHOICES, &n, err)) return false;
    out->n_choices = (int32_t)n;

    int64_t mt = -1;
    if (!get_int(body, "max_tokens", 1, INT32_MAX, &mt, err)) return false;
    if (mt > 0) out->max_tokens = (int32_t)mt;
    mt = -1;
    if (kind == OAI_CHAT && !get_int(body, "max_completion_tokens", 1, INT32_MAX, &mt, err)) return false;
    if (mt > 0) out->max_tokens = (int32_t)mt;
    mt = 0;
    if (!get_int(body, "n_predict", -1, INT32_MAX, &mt, err)) return false;   /* llama-server's name */
    if (oai_opt(body, "n_predict")) out->max_tokens = (int32_t)mt;

    double d;
    d = out->sampling.temp;
    if (!get_number(body, "temperature", 0, 2, &d, err)) return false;
    out->sampling.temp = (float)d;
    d = out->sampling.top_p;
    if (!get_number(body, "top_p", 0, 1, &d, err)) return false;
    out->sampling.top_p = (float)d;
    d = out->sampling.min_p;
    if (!get_number(body, "min_p", 0, 1, &d, err)) return false;
    out->sampling.min_p = (float)d;
    d = 0;
    if (!get_number(body, "presence_penalty", -2, 2, &d, err)) return false;
    out->sampling.presence_penalty = (float)d;
    d = 0;
    if (!get_number(body, "frequency_penalty", -2, 2, &d, err)) return false;
    out->sampling.frequency_penalty = (float)d;
    d = 1;
    if (!get_number(body, "repeat_penalty", 0, 10, &d, err)) return false;
    if (!(d > 0))   /* logits are divided by it (sample/sampler.c) */
        return oai_bad(err, "repeat_penalty", "Invalid 'repeat_penalty': %g is out of range; expected a value in (0, 10].", d);
    out->sampling.repeat_penalty = (float)d;
    int64_t k = out->sampling.top_k;
    if (!get_int(body, "top_k", 0, INT32_MAX, &k, err)) return false;
    out->sampling.top_k = (int32_t)k;
    int64_t seed = -1;
    if (!get_int(body, "seed", INT64_MIN, INT64_MAX, &seed, err)) return false;
    if (oai_opt(body, "seed")) {
        out->sampling.seed = (uint64_t)seed;
    } else {
        static _Atomic uint64_t counter;
        out->sampling.seed = 0x5eed0000ull + (uint64_t)time(NULL) * 1000003ull + counter++;
    }
    if (!get_bool(body, "ignore_eos", &out->ignore_eos, err)) return false;
    int64_t nk = 0;
    if (!get_int(body, "n_keep", -1, INT32_MAX, &nk, err)) return false;
    out->n_keep = (int32_t)nk;
    if (!parse_stop(body, out, err)) return false;
    if (!parse_logit_bias(body, n_vocab, out, err)) return false;

    if (kind == OAI_CHAT) {
        if (!get_bool(body, "logprobs", &out->logprobs, err)) return false;
        int64_t tl = 0;
        if (!get_int(body, "top_logprobs", 0, ENGINE_MAX_TOP_LOGPROBS, &tl, err)) return false;
        if (oai_opt(body, "top_logprobs") && !out->logprobs)
            return oai_bad(err, "top_logprobs", "Invalid 'top_logprobs': 'logprobs' must be true to use 'top_logprobs'.");
        out->top_logprobs = (int32_t)tl;
    } else {
        int64_t lp = -1;
        if (!get_int(body, "logprobs", 0, ENGINE_MAX_TOP_LOGPROBS, &lp, err)) return false;
        if (lp >= 0) {
            out->logprobs = true;
            out->top_logprobs = (int32_t)lp;
        }
    }
    return parse_structured(body, kind, out, err);
}

/* response_format / grammar / json_schema (json_schema.h), tool_choice,
 * parallel_tool_calls, reasoning_effort, reasoning_budget. */
static bool parse_structured(json_t *body, oai_kind kind, oai_req *out, oai_error *err)
{
    out->parallel_tool_calls = true;
    out->reasoning_budget = -2;
    json_t *rf = oai_opt(body, "response_format");
    if (rf && !json_is_object(rf))
        return oai_bad(err, "response_format", "Invalid type for 'response_format': expected an object.");
    ember_status st = ember_grammar_from_request(body, &out->gbnf);
    out->gbnf_param = oai_opt(body, "grammar") ? "grammar" : oai_opt(body, "json_schema") ? "json_schema" : "response_format";
    if (st != EMBER_OK) return oai_bad(err, out->gbnf_param, "Invalid '%s': %s", out->gbnf_param, ember_last_error());
    if (kind != OAI_CHAT) return true;
    if (!get_bool(body, "parallel_tool_calls", &out->parallel_tool_calls, err)) return false;
    json_t *tc = oai_opt(body, "tool_choice");
    out->tool_choice = out->tools ? OAI_TOOL_CHOICE_AUTO : OAI_TOOL_CHOICE_NONE;
    if (tc && json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (!strcmp(v, "auto")) out->tool_choice = out->tools ? OAI_TOOL_CHOICE_AUTO : OAI_TOOL_CHOICE_NONE;
        else if (!strcmp(v, "none")) out->tool_choice = OAI_TOOL_CHOICE_NONE;
        else if (!strcmp(v, "required")) out->tool_choice = OAI_TOOL_CHOICE_REQUIRED;
        else return oai_bad(err, "tool_choice", "Invalid value for 'tool_choice': '%s'. Supported values are: 'none', "
                                            "'auto', 'required' or an object naming a function.", v);
    } else if (tc) {
        json_t *name = json_object_get(json_object_get(tc, "function"), "name");
        if (!json_is_object(tc) || !json_is_string(name))
            return oai_bad(err, "tool_choice", "Invalid 'tool_choice': expected a string or "
                                           "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
        out->tool_choice = OAI_TOOL_CHOICE_NAMED;
        out->tool_name = strdup(json_string_value(name));
    }
    if ((out->tool_choice == OAI_TOOL_CHOICE_REQUIRED || out->tool_choice == OAI_TOOL_CHOICE_NAMED) && !out->tools)
        return oai_bad(err, "tool_choice", "Invalid 'tool_choice': 'tools' must be given to require a tool call.");
    if (out->gbnf && (out->tool_choice == OAI_TOOL_CHOICE_REQUIRED || out->tool_choice == OAI_TOOL_CHOICE_NAMED))
        return oai_bad(err, "tool_choice", "A required tool call cannot be combined with 'response_format' or 'grammar'.");
    int64_t rb = -2;
    if (!get_int(body, "reasoning_budget", -1, INT32_MAX, &rb, err)) return false;
    out->reasoning_budget = (int32_t)rb;
    json_t *re = oai_opt(body, "reasoning_effort");
    if (re && !json_is_string(re))
        return oai_bad(err, "reasoning_effort", "Invalid type for 'reasoning_effort': expected a string.");
    if (re && !strcmp(json_string_value(re), "none") &&
        !json_object_get(out->template_kwargs, "enable_thinking")) {
        /* thinking off unless chat_template_kwargs says otherwise */
        json_t *kw = out->template_kwargs ? json_copy(out->template_kwargs) : json_object();
        json_decref(out->template_kwargs);
        out->template_kwargs = kw;
        if (kw) json_object_set_new(kw, "enable_thinking", json_false());
    }
    return true;
}

void oai_req_free(oai_req *r)
{
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->template_kwargs);
    free(r->prompt);
    free(r->prompt_tokens);
    free(r->logit_bias);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->gbnf);
    free(r->tool_name);
    memset(r, 0, sizeof *r);
}

void oai_apply_defaults(json_t *body, const json_t *defaults)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)defaults, k, v) {
        if (oai_opt(body, k)) continue;
        if (!strcmp(k, "n_predict") && (oai_opt(body, "max_tokens") || oai_opt(body, "max_completion_tokens")))
            continue;
        json_object_set(body, k, v);
    }
}

json_t *oai_default_settings_json(const json_t *defaults)
{
    /* the defaults oai_parse gives (llama-server's common/common.h) */
    json_t *p = json_pack("{s:I, s:f, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:i, s:i, s:i, s:b, s:b}", "seed",
                          (json_int_t)4294967295LL, "temperature", 0.8, "top_k", 40, "top_p", 0.95, "min_p", 0.05,
                          "repeat_last_n", 64, "repeat_penalty", 1.0, "presence_penalty", 0.0, "frequency_penalty",
                          0.0, "n_predict", -1, "max_tokens", -1, "n_probs", 0, "ignore_eos", 0, "stream", 0);
    if (p && defaults) json_object_update(p, (json_t *)defaults);
    if (p && json_object_get(p, "n_predict")) json_object_set(p, "max_tokens", json_object_get(p, "n_predict"));
    return p;
}

static bool dup_str(const char *s, char **out)
{
    *out = s ? strdup(s) : NULL;
    return !s || *out;
}

bool oai_req_clone(const oai_req *r, oai_req *out)
{
    *out = *r;
    out->messages = json_incref(r->messages);   /* read only from here on */
    out->tools = json_incref(r->tools);
    out->template_kwargs = json_incref(r->template_kwargs);
    out->prompt = out->gbnf = out->tool_name = NULL;
    out->prompt_tokens = NULL;
    out->logit_bias = NULL;
    for (int32_t i = 0; i < r->n_stop; i++) out->stop[i] = NULL;
    bool ok = dup_str(r->prompt, &out->prompt) && dup_str(r->gbnf, &out->gbnf) && dup_str(r->tool_name, &out->tool_name);
    for (int32_t i = 0; ok && i < r->n_stop; i++) ok = dup_str(r->stop[i], &out->stop[i]);
    if (ok && r->prompt_tokens) {
        out->prompt_tokens = malloc(sizeof *out->prompt_tokens * (size_t)r->n_prompt_tokens);
        ok = out->prompt_tokens != NULL;
        if (ok) memcpy(out->prompt_tokens, r->prompt_tokens, sizeof *out->prompt_tokens * (size_t)r->n_prompt_tokens);
    }
    if (ok && r->logit_bias) {
        size_t n = (size_t)r->sampling.n_logit_bias;
        out->logit_bias = malloc(sizeof *out->logit_bias * (n ? n : 1));
        ok = out->logit_bias != NULL;
        if (ok) memcpy(out->logit_bias, r->logit_bias, sizeof *out->logit_bias * n);
    }
    out->sampling.logit_bias = out->logit_bias;
    if (!ok) oai_req_free(out);
    return ok;
}

const char *oai_finish_reason(engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_STOP: return "stop";
    case ENGINE_FINISH_LENGTH: return "length";
    case ENGINE_FINISH_CANCELLED: return "stop";
    case ENGINE_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

json_t *oai_usage_json(const oai_result *res)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", res->n_prompt, "completion_tokens", res->n_generated,
                     "total_tokens", res->n_prompt + res->n_generated, "prompt_tokens_details", "cached_tokens",
                     res->n_cached);
}

json_t *oai_timings_json(const oai_result *res)
{
    double prompt_ms = (res->t_first_token - res->t_start) * 1e3;
    double pred_ms = (res->t_end - res->t_first_token) * 1e3;
    if (prompt_ms < 0) prompt_ms = 0;
    if (pred_ms < 0) pred_ms = 0;
    int32_t prompt_n = res->n_prompt - res->n_cached;
    int32_t pred_n = res->n_generated > 1 ? res->n_generated - 1 : 0;   /* tokens after the first */
    json_t *t = json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "cache_n", res->n_cached, "prompt_n", prompt_n,
                     "prompt_ms", prompt_ms, "prompt_per_token_ms", prompt_n ? prompt_ms / prompt_n : 0.0,
                     "prompt_per_second", prompt_ms > 0 ? prompt_n * 1e3 / prompt_ms : 0.0, "predicted_n",
                     res->n_generated, "predicted_ms", pred_ms, "predicted_per_token_ms",
                     pred_n ? pred_ms / pred_n : 0.0, "predicted_per_second",
                     pred_ms > 0 ? pred_n * 1e3 / pred_ms : 0.0);
    if (t && res->draft_n > 0) {   /* as llama-server: only when speculation drafted */
        json_object_set_new(t, "draft_n", json_integer(res->draft_n));
        json_object_set_new(t, "draft_n_accepted", json_integer(res->draft_n_accepted));
    }
    return t;
}

static json_t *bytes_array(const char *b, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]} */
static json_t *chat_logprobs(const engine_tok *toks, int32_t from, int32_t to, oai_piece_fn piece, void *ud)
{
    json_t *content = json_array();
    char buf[256];
    for (int32_t i = from; i < to; i++) {
        const engine_tok *t = &toks[i];
        int32_t n = piece(ud, t->token, buf, sizeof buf);
        if (n < 0 || n > (int32_t)sizeof buf) n = 0;
        json_t *top = json_array();
        for (int32_t k = 0; k < t->n_top; k++) {
            char b2[256];
            int32_t m = piece(ud, t->top[k], b2, sizeof b2);
            if (m < 0 || m > (int32_t)sizeof b2) m = 0;
            json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", oai_json_string(b2, (size_t)m), "logprob",
                                                 (double)t->top_logprob[k], "bytes", bytes_array(b2, m)));
        }
        json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", oai_json_string(buf, (size_t)n),
                                                 "logprob", (double)t->logprob, "bytes", bytes_array(buf, n),
                                                 "top_logprobs", top));
    }
    return json_pack("{s:o}", "content", content);
}

/* completions: {tokens, token_logprobs, top_logprobs: [{tok: lp}], text_offset} */
static json_t *completion_logprobs(const engine_tok *toks, int32_t from, int32_t to, oai_piece_fn piece, void *ud)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    char buf[256];
    size_t off = 0;
    for (int32_t i = from; i < to; i++) {
        const engine_tok *t = &toks[i];
        int32_t n = piece(ud, t->token, buf, sizeof buf);
        if (n < 0 || n > (int32_t)sizeof buf) n = 0;
        json_array_append_new(tokens, oai_json_string(buf, (size_t)n));
        json_array_append_new(lps, json_real(t->logprob));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += (size_t)n;
        json_t *top = json_object();
        for (int32_t k = 0; k < t->n_top; k++) {
            char b2[256];
            int32_t m = piece(ud, t->top[k], b2, sizeof b2);
            if (m < 0 || m > (int32_t)sizeof b2) m = 0;
            json_t *key = oai_json_string(b2, (size_t)m);
            json_object_set_new(top, json_string_value(key), json_real(t->top_logprob[k]));
            json_decref(key);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

json_t *oai_result_json(oai_kind kind, const oai_req *req, const oai_result *res, oai_piece_fn piece, void *ud)
{
    json_t *choice;
    json_t *lp = json_null();
    if (req->logprobs && res->toks)
        lp = kind == OAI_CHAT ? chat_logprobs(res->toks, 0, res->n_toks, piece, ud)
                              : completion_logprobs(res->toks, 0, res->n_toks, piece, ud);
    const char *fr = oai_finish_reason(res->finish);
    if (kind == OAI_CHAT && res->message) {
        /* calls cut by max_tokens keep "length" (OpenAI: the arguments may be incomplete) */
        if (json_array_size(json_object_get(res->message, "tool_calls")) > 0 && res->finish != ENGINE_FINISH_LENGTH)
            fr = "tool_calls";
        choice = json_pack("{s:i, s:O, s:o, s:s}", "index", 0, "message", res->message, "logprobs", lp,
                           "finish_reason", fr ? fr : "stop");
    } else if (kind == OAI_CHAT) {
        choice = json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", 0, "message", "role", "assistant", "content",
                           oai_json_string(res->text, res->text_len), "logprobs", lp, "finish_reason", fr ? fr : "stop");
    } else {
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", oai_json_string(res->text, res->text_len),
                           "logprobs", lp, "finish_reason", fr ? fr : "stop");
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o, s:o}", "id", res->id, "object",
                     kind == OAI_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)res->created,
                     "model", res->model, "system_fingerprint", "ember-" EMBER_VERSION, "choices", choice, "usage",
                     oai_usage_json(res), "timings", oai_timings_json(res));
}

json_t *oai_chunk_json(oai_kind kind, const oai_req *req, const oai_result *res, const char *delta, size_t delta_len,
                       int32_t tok_from, int32_t tok_to, bool final, oai_piece_fn piece, void *ud)
{
    json_t *lp = json_null();
    if (req->logprobs && res->toks && tok_to > tok_from)
        lp = kind == OAI_CHAT ? chat_logprobs(res->toks, tok_from, tok_to, piece, ud)
                              : completion_logprobs(res->toks, tok_from, tok_to, piece, ud);
    const char *fr = final ? oai_finish_reason(res->finish) : NULL;
    json_t *choice;
    if (kind == OAI_CHAT) {
        json_t *d = json_object();
        if (delta_len > 0) json_object_set_new(d, "content", oai_json_string(delta, delta_len));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", d, "logprobs", lp, "finish_reason",
                           fr ? json_string(fr) : json_null());
    } else {
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "text", oai_json_string(delta, delta_len), "logprobs",
                           lp, "finish_reason", fr ? json_string(fr) : json_null());
    }
    json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", res->id, "object",
                              kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)res->created, "model", res->model, "system_fingerprint",
                              "ember-" EMBER_VERSION, "choices", choice);
    if (final && !req->include_usage) json_object_set_new(chunk, "timings", oai_timings_json(res));
    if (req->include_usage) json_object_set_new(chunk, "usage", json_null());
    return chunk;
}

json_t *oai_chat_delta_chunk(const oai_req *req, const oai_result *res, json_t *delta, const char *fr,
                             int32_t tok_from, int32_t tok_to, oai_piece_fn piece, void *ud)
{
    json_t *lp = json_null();
    if (req->logprobs && res->toks && tok_to > tok_from) lp = chat_logprobs(res->toks, tok_from, tok_to, piece, ud);
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta ? delta : json_object(), "logprobs",
                               lp, "finish_reason", fr ? json_string(fr) : json_null());
    json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", res->id, "object", "chat.completion.chunk",
                              "created", (json_int_t)res->created, "model", res->model, "system_fingerprint",
                              "ember-" EMBER_VERSION, "choices", choice);
    if (fr && !req->include_usage) json_object_set_new(chunk, "timings", oai_timings_json(res));
    if (req->include_usage) json_object_set_new(chunk, "usage", json_null());
    return chunk;
}

json_t *oai_chat_role_chunk(const oai_req *req, const oai_result *res)
{
    return oai_chat_delta_chunk(req, res, json_pack("{s:s, s:n}", "role", "assistant", "content"), NULL, 0, 0, NULL,
                                NULL);
}

json_t *oai_usage_chunk(const oai_req *req, const oai_result *res)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o, s:o}", "id", res->id, "object",
                     req->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)res->created, "model", res->model, "system_fingerprint", "ember-" EMBER_VERSION,
                     "choices", "usage", oai_usage_json(res), "timings", oai_timings_json(res));
}
