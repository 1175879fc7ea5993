/*
 * anthropic.c — Anthropic Messages over the completion pipeline (see
 * anthropic.h): the request rewritten as an OpenAI chat body, the answer
 * written as a Message or as its stream of events.
 *
 * Must not: touch sockets, the engine or the tokenizer.
 */
#include "server/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- request ---------- */

/* A 400 invalid_request_error naming param (oai_bad), in functions that
 * return a JSON value. */
static json_t *no_json(bool failed)
{
    (void)failed;
    return NULL;
}
#define fail(err, ...) no_json(oai_bad((err), __VA_ARGS__))

/* A text block {"type": "text", "text": S} as an OpenAI content part. */
static json_t *text_part(json_t *text) { return json_pack("{s:s, s:O}", "type", "text", "text", text); }

/* The text of a tool_result's content: a string, or text blocks joined. */
static json_t *tool_result_text(json_t *content, const char *param, oai_error *err)
{
    if (!content) return json_string("");
    if (json_is_string(content)) return json_incref(content);
    if (!json_is_array(content))
        return fail(err, param, "Invalid type for '%s': expected a string or an array of text blocks.", param);
    json_t *parts = json_array();
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *b = json_array_get(content, k);
        json_t *type = json_object_get(b, "type"), *text = json_object_get(b, "text");
        if (!json_is_object(b) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text)) {
            json_decref(parts);
            return fail(err, param, "Invalid '%s[%zu]': only text blocks are supported in a tool_result.", param, k);
        }
        json_array_append_new(parts, text_part(text));
    }
    return parts;
}

/* One Anthropic message -> OpenAI messages appended to `out`: a user's
 * tool_result blocks become "tool" messages (before the user's own text, as
 * they answer the assistant's calls just before), an assistant's tool_use
 * blocks its tool_calls, thinking its reasoning_content. */
static bool convert_message(json_t *m, size_t i, json_t *out, oai_error *err)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return fail(err, param, "Invalid type for '%s': expected an object.", param), false;
    json_t *role = json_object_get(m, "role");
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!json_is_string(role)) return fail(err, param, "Missing or invalid '%s': expected \"user\" or \"assistant\".", param), false;
    const char *r = json_string_value(role);
    bool user = !strcmp(r, "user");
    if (!user && strcmp(r, "assistant") != 0)
        return fail(err, param, "Invalid value for '%s': '%s'. Supported values are 'user' and 'assistant' (a system "
                    "prompt goes in the top-level 'system' field).", param, r), false;
    json_t *content = json_object_get(m, "content");
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", r, "content", content));
        return true;
    }
    if (!json_is_array(content))
        return fail(err, param, "%s '%s': expected a string or an array of content blocks.",
                    content ? "Invalid type for" : "Missing required field", param), false;
    json_t *parts = json_array(), *reasoning = NULL, *calls = json_array();
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *b = json_array_get(content, k);
        char bp[128];
        snprintf(bp, sizeof bp, "messages[%zu].content[%zu]", i, k);
        json_t *type = json_object_get(b, "type");
        if (!json_is_object(b) || !json_is_string(type)) {
            fail(err, bp, "Invalid '%s': expected an object with a 'type'.", bp);
            goto bad;
        }
        const char *t = json_string_value(type);
        if (!strcmp(t, "text")) {
            json_t *text = json_object_get(b, "text");
            if (!json_is_string(text)) { fail(err, bp, "Invalid '%s.text': expected a string.", bp); goto bad; }
            json_array_append_new(parts, text_part(text));
        } else if (!strcmp(t, "tool_result") && user) {
            json_t *id = json_object_get(b, "tool_use_id");
            if (!json_is_string(id)) { fail(err, bp, "Invalid '%s.tool_use_id': expected a string.", bp); goto bad; }
            char cp[160];
            snprintf(cp, sizeof cp, "%s.content", bp);
            json_t *text = tool_result_text(oai_opt(b, "content"), cp, err);
            if (!text) goto bad;
            json_array_append_new(out, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", text));
        } else if (!strcmp(t, "tool_use") && !user) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input)) {
                fail(err, bp, "Invalid '%s': a tool_use block needs 'id' and 'name' (strings) and 'input' (an object).", bp);
                goto bad;
            }
            char *args = json_dumps(input, JSON_COMPACT);
            if (!args) { fail(err, bp, "out of memory"); goto bad; }
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function",
                                                   "name", name, "arguments", args));
            free(args);
        } else if (!strcmp(t, "thinking") && !user) {
            json_t *th = json_object_get(b, "thinking");
            if (!json_is_string(th)) { fail(err, bp, "Invalid '%s.thinking': expected a string.", bp); goto bad; }
            if (!reasoning) reasoning = json_incref(th);
            else {
                size_t n = json_string_length(reasoning) + json_string_length(th);
                char *j = malloc(n + 1);
                if (!j) { fail(err, bp, "out of memory"); goto bad; }
                memcpy(j, json_string_value(reasoning), json_string_length(reasoning));
                memcpy(j + json_string_length(reasoning), json_string_value(th), json_string_length(th));
                json_decref(reasoning);
                reasoning = json_stringn(j, n);
                free(j);
            }
        } else if (!strcmp(t, "redacted_thinking") && !user) {
            /* encrypted thoughts of another model: nothing this one can read */
        } else {
            fail(err, bp, "Invalid '%s': content block type '%s' is not supported in a%s %s message (supported: text%s).",
                 bp, t, user ? "" : "n", r, user ? ", tool_result" : ", tool_use, thinking, redacted_thinking");
            goto bad;
        }
    }
    if (user) {
        if (json_array_size(parts) > 0 || json_array_size(content) == 0)
            json_array_append_new(out, json_pack("{s:s, s:O}", "role", "user", "content", parts));
    } else {
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        if (json_array_size(parts)) json_object_set(msg, "content", parts);
        else json_object_set_new(msg, "content", json_array_size(calls) ? json_null() : json_string(""));
        if (reasoning) json_object_set(msg, "reasoning_content", reasoning);
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        json_array_append_new(out, msg);
    }
    json_decref(parts);
    json_decref(calls);
    json_decref(reasoning);
    return true;
bad:
    json_decref(parts);
    json_decref(calls);
    json_decref(reasoning);
    return false;
}

/* system: a string or text blocks -> the content of a system message. */
static json_t *system_content(json_t *sys, oai_error *err)
{
    if (json_is_string(sys)) return json_incref(sys);
    if (!json_is_array(sys)) return fail(err, "system", "Invalid type for 'system': expected a string or an array of text blocks.");
    json_t *parts = json_array();
    for (size_t k = 0; k < json_array_size(sys); k++) {
        json_t *b = json_array_get(sys, k);
        json_t *type = json_object_get(b, "type"), *text = json_object_get(b, "text");
        if (!json_is_object(b) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text)) {
            json_decref(parts);
            return fail(err, "system", "Invalid 'system[%zu]': expected a text block {\"type\": \"text\", \"text\": ...}.", k);
        }
        json_array_append_new(parts, text_part(text));
    }
    return parts;
}

static json_t *convert_tools(json_t *tools, oai_error *err)
{
    if (!json_is_array(tools)) return fail(err, "tools", "Invalid type for 'tools': expected an array.");
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
        json_t *desc = oai_opt(t, "description"), *type = oai_opt(t, "type");
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t) || !json_is_string(name)) {
            json_decref(out);
            return fail(err, p, "Invalid '%s': expected an object with a 'name'.", p);
        }
        if (type && (!json_is_string(type) || strcmp(json_string_value(type), "custom") != 0)) {
            json_decref(out);
            return fail(err, p, "Invalid '%s': tool type '%s' is not supported (only client tools with an "
                        "'input_schema').", p, json_is_string(type) ? json_string_value(type) : "?");
        }
        if (!json_is_object(schema)) {
            json_decref(out);
            return fail(err, p, "Invalid '%s.input_schema': expected a JSON schema object.", p);
        }
        if (desc && !json_is_string(desc)) {
            json_decref(out);
            return fail(err, p, "Invalid type for '%s.description': expected a string.", p);
        }
        json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
        if (desc) json_object_set(fn, "description", desc);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return out;
}

/* tool_choice {"type": auto|any|tool|none, "name", "disable_parallel_tool_use"} */
static bool convert_tool_choice(json_t *tc, json_t *o, oai_error *err)
{
    json_t *type = json_object_get(tc, "type");
    if (!json_is_object(tc) || !json_is_string(type))
        return fail(err, "tool_choice", "Invalid 'tool_choice': expected an object with a 'type'."), false;
    const char *t = json_string_value(type);
    if (!strcmp(t, "auto")) json_object_set_new(o, "tool_choice", json_string("auto"));
    else if (!strcmp(t, "any")) json_object_set_new(o, "tool_choice", json_string("required"));
    else if (!strcmp(t, "none")) json_object_set_new(o, "tool_choice", json_string("none"));
    else if (!strcmp(t, "tool")) {
        json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name))
            return fail(err, "tool_choice.name", "Invalid 'tool_choice': type 'tool' needs a 'name'."), false;
        json_object_set_new(o, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    } else {
        return fail(err, "tool_choice.type", "Invalid value for 'tool_choice.type': '%s'. Supported values are "
                    "'auto', 'any', 'tool' and 'none'.", t), false;
    }
    json_t *dp = oai_opt(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp))
        return fail(err, "tool_choice.disable_parallel_tool_use",
                    "Invalid type for 'tool_choice.disable_parallel_tool_use': expected a boolean."), false;
    if (json_is_true(dp)) json_object_set_new(o, "parallel_tool_calls", json_false());
    return true;
}

/* thinking {"type": "enabled", "budget_tokens": N} | {"type": "adaptive"} |
 * {"type": "between_tools"} | {"type": "disabled"}: the template's
 * enable_thinking and (enabled) the reasoning budget. */
static bool convert_thinking(json_t *th, json_t *o, oai_error *err)
{
    json_t *type = json_object_get(th, "type");
    if (!json_is_object(th) || !json_is_string(type))
        return fail(err, "thinking", "Invalid 'thinking': expected an object with a 'type'."), false;
    const char *t = json_string_value(type);
    json_t *kw = json_object();
    json_object_set_new(o, "chat_template_kwargs", kw);
    if (!strcmp(t, "disabled")) {
        json_object_set_new(kw, "enable_thinking", json_false());
        return true;
    }
    bool enabled = !strcmp(t, "enabled");
    if (!enabled && strcmp(t, "adaptive") != 0 && strcmp(t, "between_tools") != 0)
        return fail(err, "thinking.type", "Invalid value for 'thinking.type': '%s'. Supported values are 'enabled', "
                    "'adaptive', 'between_tools' and 'disabled'.", t), false;
    json_object_set_new(kw, "enable_thinking", json_true());
    if (!enabled) return true;   /* the model decides how long it thinks: no budget */
    json_t *b = oai_opt(th, "budget_tokens");
    if (b && (!json_is_integer(b) || json_integer_value(b) < 1))
        return fail(err, "thinking.budget_tokens", "Invalid 'thinking.budget_tokens': expected a positive integer."), false;
    if (b) json_object_set(o, "reasoning_budget", b);
    return true;
}

json_t *anth_to_oai(json_t *body, bool count_tokens, oai_error *err)
{
    json_t *o = json_object();
    json_t *model = oai_opt(body, "model");
    if (model && !json_is_string(model)) { json_decref(o); return fail(err, "model", "Invalid type for 'model': expected a string."); }
    if (!count_tokens) {
        json_t *mt = json_object_get(body, "max_tokens");
        if (!mt) { json_decref(o); return fail(err, "max_tokens", "max_tokens: Field required"); }
        if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
            json_decref(o);
            return fail(err, "max_tokens", "Invalid 'max_tokens': expected an integer >= 1.");
        }
        json_object_set(o, "max_tokens", mt);
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!msgs) { json_decref(o); return fail(err, "messages", "messages: Field required"); }
    if (!json_is_array(msgs)) { json_decref(o); return fail(err, "messages", "Invalid type for 'messages': expected an array."); }
    if (json_array_size(msgs) > OAI_MAX_MESSAGES) {
        json_decref(o);
        return fail(err, "messages", "Invalid 'messages': at most %d messages.", OAI_MAX_MESSAGES);
    }
    json_t *out = json_array();
    json_object_set_new(o, "messages", out);
    json_t *sys = oai_opt(body, "system");
    if (sys) {
        json_t *c = system_content(sys, err);
        if (!c) { json_decref(o); return NULL; }
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", "system", "content", c));
    }
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (!convert_message(json_array_get(msgs, i), i, out, err)) { json_decref(o); return NULL; }
    if (json_array_size(msgs) == 0) { json_decref(o); return fail(err, "messages", "messages: at least one message is required"); }

    /* the same names and meanings in both APIs */
    static const char *same[] = {"stream", "temperature", "top_p", "top_k"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = oai_opt(body, same[i]);
        if (v) json_object_set(o, same[i], v);
    }
    json_t *ss = oai_opt(body, "stop_sequences");
    if (ss) {
        if (!json_is_array(ss)) { json_decref(o); return fail(err, "stop_sequences", "Invalid type for 'stop_sequences': expected an array of strings."); }
        if (json_array_size(ss) > 4) {   /* oai_parse's limit, named here in this API's terms */
            json_decref(o);
            return fail(err, "stop_sequences", "Invalid 'stop_sequences': at most 4, got %zu.", json_array_size(ss));
        }
        for (size_t i = 0; i < json_array_size(ss); i++)
            if (!json_is_string(json_array_get(ss, i))) {
                json_decref(o);
                return fail(err, "stop_sequences", "Invalid type for 'stop_sequences[%zu]': expected a string.", i);
            }
        json_object_set(o, "stop", ss);
    }
    json_t *tools = oai_opt(body, "tools");
    if (tools) {
        json_t *t = convert_tools(tools, err);
        if (!t) { json_decref(o); return NULL; }
        if (json_array_size(t)) json_object_set_new(o, "tools", t);
        else json_decref(t);
    }
    json_t *tc = oai_opt(body, "tool_choice");
    if (tc && !convert_tool_choice(tc, o, err)) { json_decref(o); return NULL; }
    json_t *oc = oai_opt(body, "output_config");
    if (oc && !json_is_object(oc)) { json_decref(o); return fail(err, "output_config", "Invalid type for 'output_config': expected an object."); }
    json_t *fmt = oai_opt(oc, "format");
    if (fmt) {
        /* structured output {"type": "json_schema", "schema": S} -> response_format json_schema */
        json_t *ft = json_object_get(fmt, "type"), *schema = json_object_get(fmt, "schema");
        if (!json_is_object(fmt) || !json_is_string(ft) || strcmp(json_string_value(ft), "json_schema") != 0 ||
            !json_is_object(schema)) {
            json_decref(o);
            return fail(err, "output_config.format", "Invalid 'output_config.format': expected {\"type\": "
                        "\"json_schema\", \"schema\": {...}}.");
        }
        json_object_set_new(o, "response_format", json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema",
                                                            "json_schema", "name", "output", "schema", schema));
    }
    json_t *th = oai_opt(body, "thinking");
    if (th && !convert_thinking(th, o, err)) { json_decref(o); return NULL; }
    return o;
}

/* ---------- errors ---------- */

static const char *error_type(int status)
{
    switch (status) {
    case 400: case 405: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *anth_error_json(const oai_error *err)
{
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", error_type(err->http_status), "message",
                     err->message);
}

/* ---------- response ---------- */

const char *anth_stop_reason(completion_stop stop)
{
    switch (stop) {
    case COMPLETION_STOP_EOG: return "end_turn";
    case COMPLETION_STOP_WORD: return "stop_sequence";
    case COMPLETION_STOP_LENGTH: return "max_tokens";
    case COMPLETION_STOP_TOOL: return "tool_use";
    default: return NULL;
    }
}

static json_t *stop_sequence(const completion *c, completion_stop stop)
{
    if (stop == COMPLETION_STOP_WORD && c->stop_index >= 0 && c->stop_index < c->rq.n_stop)
        return json_string(c->rq.stop[c->stop_index]);
    return json_null();
}

/* usage: Anthropic counts prompt tokens read from a cache apart */
static json_t *usage_json(const oai_result *res)
{
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", res->n_prompt - res->n_cached, "output_tokens",
                     res->n_generated, "cache_creation_input_tokens", 0, "cache_read_input_tokens", res->n_cached);
}

/* a tool call's arguments text as the tool_use input object ({} when it is not one) */
static json_t *input_object(json_t *args)
{
    if (json_is_object(args)) return json_incref(args);
    json_t *v = json_is_string(args) ? json_loads(json_string_value(args), JSON_DECODE_ANY, NULL) : NULL;
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}

json_t *anth_message_json(const completion *c, const completion_update *u, const json_t *msg)
{
    json_t *blocks = json_array();
    if (msg) {
        json_t *rc = json_object_get(msg, "reasoning_content");
        if (json_is_string(rc) && json_string_length(rc))
            json_array_append_new(blocks, json_pack("{s:s, s:O, s:s}", "type", "thinking", "thinking", rc, "signature", ""));
        json_t *ct = json_object_get(msg, "content");
        if (json_is_string(ct) && json_string_length(ct))
            json_array_append_new(blocks, json_pack("{s:s, s:O}", "type", "text", "text", ct));
        json_t *calls = json_object_get(msg, "tool_calls");
        for (size_t i = 0; i < json_array_size(calls); i++) {
            json_t *call = json_array_get(calls, i), *fn = json_object_get(call, "function");
            json_t *id = json_object_get(call, "id"), *name = json_object_get(fn, "name");
            json_array_append_new(blocks, json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                                                    id ? id : json_string(""), "name", name ? name : json_string(""),
                                                    "input", input_object(json_object_get(fn, "arguments"))));
        }
    } else if (u->res.text_len) {
        json_array_append_new(blocks, json_pack("{s:s, s:o}", "type", "text", "text",
                                                oai_json_string(u->res.text, u->res.text_len)));
    }
    completion_stop stop = completion_stop_of(c, u);
    const char *sr = anth_stop_reason(stop);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", c->id, "type", "message", "role", "assistant",
                     "model", u->res.model, "content", blocks, "stop_reason", sr ? sr : "end_turn", "stop_sequence",
                     stop_sequence(c, stop), "usage", usage_json(&u->res));
}

/* ---------- stream ---------- */

typedef enum block_kind { BLOCK_NONE = 0, BLOCK_TEXT, BLOCK_THINKING, BLOCK_TOOL } block_kind;

struct anth_stream {
    anth_emit_fn emit;
    void *ud;
    const completion *c;
    bool started;
    block_kind open;
    int index;          /* the open block's index; blocks so far - 1 */
    int tool_index;     /* the parser's index of the open tool call */
};

anth_stream *anth_stream_new(const completion *c, anth_emit_fn emit, void *ud)
{
    anth_stream *as = calloc(1, sizeof *as);
    if (!as) return NULL;
    as->emit = emit;
    as->ud = ud;
    as->c = c;
    as->index = -1;
    as->tool_index = -1;
    return as;
}

void anth_stream_free(anth_stream *as) { free(as); }

static void start(anth_stream *as)
{
    if (as->started) return;
    as->started = true;
    const completion *c = as->c;
    int32_t n_prompt = c->n_prompt;   /* cached tokens are known at the end (message_delta) */
    as->emit(as->ud, "message_start",
             json_pack("{s:s, s:{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:{s:i, s:i}}}", "type", "message_start",
                       "message", "id", c->id, "type", "message", "role", "assistant", "content", "model",
                       c->ctx->cfg->alias, "stop_reason", "stop_sequence", "usage", "input_tokens", n_prompt,
                       "output_tokens", 0));
    as->emit(as->ud, "ping", json_pack("{s:s}", "type", "ping"));
}

static void close_block(anth_stream *as)
{
    if (as->open == BLOCK_NONE) return;
    as->emit(as->ud, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", as->index));
    as->open = BLOCK_NONE;
    as->tool_index = -1;
}

static void open_block(anth_stream *as, block_kind k, json_t *block)
{
    close_block(as);
    as->open = k;
    as->index++;
    as->emit(as->ud, "content_block_start",
             json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", as->index, "content_block", block));
}

static void delta(anth_stream *as, json_t *d)
{
    as->emit(as->ud, "content_block_delta",
             json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", as->index, "delta", d));
}

static void text_delta(anth_stream *as, const char *text, size_t len)
{
    if (!len) return;
    if (as->open != BLOCK_TEXT) open_block(as, BLOCK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""));
    delta(as, json_pack("{s:s, s:o}", "type", "text_delta", "text", oai_json_string(text, len)));
}

void anth_stream_event(void *user, const ember_chat_event *ev)
{
    anth_stream *as = user;
    start(as);
    switch (ev->kind) {
    case EMBER_CHAT_EV_CONTENT: text_delta(as, ev->text, ev->len); break;
    case EMBER_CHAT_EV_REASONING:
        if (!ev->len) break;
        if (as->open != BLOCK_THINKING)
            open_block(as, BLOCK_THINKING, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""));
        delta(as, json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", oai_json_string(ev->text, ev->len)));
        break;
    case EMBER_CHAT_EV_TOOL_START:
        open_block(as, BLOCK_TOOL, json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", ev->id ? ev->id : "",
                                             "name", ev->name ? ev->name : "", "input"));
        as->tool_index = ev->tool_index;
        break;
    case EMBER_CHAT_EV_TOOL_ARGS:
        if (as->open == BLOCK_TOOL && ev->tool_index == as->tool_index && ev->len)
            delta(as, json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json",
                                oai_json_string(ev->text, ev->len)));
        break;
    case EMBER_CHAT_EV_TOOL_END:
        if (as->open == BLOCK_TOOL) close_block(as);
        break;
    }
}

void anth_stream_update(anth_stream *as, const completion *c, const completion_update *u)
{
    if (u->stop == COMPLETION_ERROR || u->stop == COMPLETION_CANCELLED) {
        oai_error err;
        oai_error_set(&err, u->stop == COMPLETION_ERROR ? 500 : 503, "server_error", NULL, NULL, "%s", c->err);
        as->emit(as->ud, "error", anth_error_json(&err));
        return;
    }
    start(as);
    if (!c->parser) text_delta(as, u->delta, u->n_delta);
    if (u->stop == COMPLETION_RUNNING) return;
    close_block(as);
    json_t *usage = usage_json(&u->res);
    as->emit(as->ud, "message_delta",
             json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
                       anth_stop_reason(u->stop), "stop_sequence", stop_sequence(c, u->stop), "usage", usage));
    as->emit(as->ud, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}
