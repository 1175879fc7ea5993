/*
 * responses.c — OpenAI Responses over the completion pipeline (see
 * responses.h): the request rewritten as an OpenAI chat body, the answer
 * written as a Response or as its stream of events.
 *
 * Must not: touch sockets, the engine or the tokenizer.
 */
#include "server/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------- request ---------- */

/* A 400 invalid_request_error naming param (oai_bad), in functions that
 * return a JSON value. */
static json_t *no_json(bool failed)
{
    (void)failed;
    return NULL;
}
#define fail(err, ...) no_json(oai_bad((err), __VA_ARGS__))

static bool is_str(json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

/* The last message of `out` when it is the assistant's (items of one
 * assistant turn: reasoning, message, function_call, are merged into it). */
static json_t *last_assistant(json_t *out)
{
    size_t n = json_array_size(out);
    json_t *m = n ? json_array_get(out, n - 1) : NULL;
    return m && is_str(json_object_get(m, "role"), "assistant") ? m : NULL;
}

static json_t *assistant(json_t *out)
{
    json_t *m = last_assistant(out);
    if (m) return m;
    m = json_pack("{s:s, s:[]}", "role", "assistant", "content");
    json_array_append_new(out, m);
    return m;
}

/* A text content part {"type": "text", "text": S}. */
static json_t *text_part(json_t *text) { return json_pack("{s:s, s:O}", "type", "text", "text", text); }

/* content of a message item: a string or an array of parts -> an array of
 * chat text parts. Input roles take input_text; the assistant's
 * output_text (or input_text, as a string content becomes) and refusal. */
static json_t *convert_content(json_t *content, bool is_assistant, const char *param, oai_error *err)
{
    if (json_is_string(content)) return json_pack("[o]", text_part(content));
    if (!json_is_array(content))
        return fail(err, param, "%s '%s': expected a string or an array of content parts.",
                    content ? "Invalid type for" : "Missing required parameter:", param);
    json_t *parts = json_array();
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *p = json_array_get(content, k), *type = json_object_get(p, "type");
        char pp[112];
        snprintf(pp, sizeof pp, "%s[%zu]", param, k);
        if (!json_is_object(p) || !json_is_string(type)) {
            json_decref(parts);
            return fail(err, pp, "Invalid '%s': expected an object with a 'type'.", pp);
        }
        const char *t = json_string_value(type);
        const char *key = NULL;
        if (!strcmp(t, "input_text") || (is_assistant && !strcmp(t, "output_text"))) key = "text";
        else if (is_assistant && !strcmp(t, "refusal")) key = "refusal";
        if (!key) {
            json_decref(parts);
            return fail(err, pp, "Invalid value for '%s.type': '%s' is not supported here (supported: %s).", pp, t,
                        is_assistant ? "'output_text', 'refusal'" : "'input_text'; this server reads no images, files "
                                                                    "or audio");
        }
        json_t *text = json_object_get(p, key);
        if (!json_is_string(text)) {
            json_decref(parts);
            return fail(err, pp, "Invalid '%s.%s': expected a string.", pp, key);
        }
        json_array_append_new(parts, text_part(text));
    }
    return parts;
}

/* A message item (EasyInputMessage, input message or output message):
 * role user / system / developer / assistant. */
static bool convert_message(json_t *item, const char *param, json_t *out, oai_error *err)
{
    json_t *role = json_object_get(item, "role");
    char rp[96], cp[96];
    snprintf(rp, sizeof rp, "%s.role", param);
    snprintf(cp, sizeof cp, "%s.content", param);
    const char *r = json_string_value(role);
    if (!r || (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant")))
        return oai_bad(err, rp, "Invalid value for '%s': expected one of 'user', 'system', 'developer', 'assistant'.",
                       rp);
    bool is_assistant = !strcmp(r, "assistant");
    json_t *parts = convert_content(json_object_get(item, "content"), is_assistant, cp, err);
    if (!parts) return false;
    if (is_assistant) {
        json_t *m = assistant(out);
        json_array_extend(json_object_get(m, "content"), parts);
        json_decref(parts);
    } else {
        /* developer messages are the system's (chat templates know no "developer") */
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", !strcmp(r, "developer") ? "system" : r, "content",
                                             parts));
    }
    return true;
}

static bool convert_function_call(json_t *item, const char *param, json_t *out, oai_error *err)
{
    json_t *call_id = json_object_get(item, "call_id"), *name = json_object_get(item, "name");
    json_t *args = json_object_get(item, "arguments");
    if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args))
        return oai_bad(err, param, "Invalid '%s': a function_call item needs 'call_id', 'name' and 'arguments' "
                       "(strings).", param);
    json_t *m = assistant(out);
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) {
        calls = json_array();
        json_object_set_new(m, "tool_calls", calls);
    }
    json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", call_id, "type", "function", "function",
                                           "name", name, "arguments", args));
    return true;
}

static bool convert_function_output(json_t *item, const char *param, json_t *out, oai_error *err)
{
    json_t *call_id = json_object_get(item, "call_id"), *output = json_object_get(item, "output");
    char op[96];
    if (!json_is_string(call_id)) {
        snprintf(op, sizeof op, "%s.call_id", param);
        return oai_bad(err, op, "Invalid '%s': a function_call_output item needs a string 'call_id'.", op);
    }
    snprintf(op, sizeof op, "%s.output", param);
    json_t *content = convert_content(output, false, op, err);
    if (!content) return false;
    json_array_append_new(out, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", call_id, "content", content));
    return true;
}

/* The texts of a reasoning item's content (reasoning_text parts), or of its
 * summary (summary_text) when it has no content, joined. */
static bool convert_reasoning(json_t *item, const char *param, json_t *out, oai_error *err)
{
    json_t *content = oai_opt(item, "content"), *summary = json_object_get(item, "summary");
    if (!json_is_array(summary))
        return oai_bad(err, param, "Invalid '%s.summary': a reasoning item needs a 'summary' array.", param);
    if (content && !json_is_array(content))
        return oai_bad(err, param, "Invalid type for '%s.content': expected an array.", param);
    json_t *src = json_array_size(content) ? content : summary;
    const char *want = src == content ? "reasoning_text" : "summary_text";
    size_t len = 0;
    for (size_t k = 0; k < json_array_size(src); k++) {
        json_t *p = json_array_get(src, k);
        if (!json_is_object(p) || !is_str(json_object_get(p, "type"), want) || !json_is_string(json_object_get(p, "text")))
            return oai_bad(err, param, "Invalid '%s.%s[%zu]': expected {\"type\": \"%s\", \"text\": ...}.", param,
                           src == content ? "content" : "summary", k, want);
        len += json_string_length(json_object_get(p, "text")) + 1;
    }
    if (!len) return true;   /* encrypted thoughts only: nothing this model can read */
    char *text = malloc(len);
    if (!text) return oai_bad(err, param, "out of memory");
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(src); k++) {
        json_t *t = json_object_get(json_array_get(src, k), "text");
        if (n) text[n++] = '\n';
        memcpy(text + n, json_string_value(t), json_string_length(t));
        n += json_string_length(t);
    }
    json_t *m = assistant(out);
    json_t *prev = json_object_get(m, "reasoning_content");
    json_t *rc;
    if (json_is_string(prev)) {   /* interleaved thoughts of one turn */
        char *j = malloc(json_string_length(prev) + 1 + n);
        if (!j) { free(text); return oai_bad(err, param, "out of memory"); }
        memcpy(j, json_string_value(prev), json_string_length(prev));
        j[json_string_length(prev)] = '\n';
        memcpy(j + json_string_length(prev) + 1, text, n);
        rc = json_stringn(j, json_string_length(prev) + 1 + n);
        free(j);
    } else {
        rc = json_stringn(text, n);
    }
    free(text);
    json_object_set_new(m, "reasoning_content", rc);
    return true;
}

static bool convert_item(json_t *item, size_t i, json_t *out, oai_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(item)) return oai_bad(err, param, "Invalid type for '%s': expected an object.", param);
    json_t *type = oai_opt(item, "type");
    if (type && !json_is_string(type)) return oai_bad(err, param, "Invalid type for '%s.type': expected a string.", param);
    const char *t = type ? json_string_value(type) : "message";
    if (!strcmp(t, "message")) return convert_message(item, param, out, err);
    if (!strcmp(t, "function_call")) return convert_function_call(item, param, out, err);
    if (!strcmp(t, "function_call_output")) return convert_function_output(item, param, out, err);
    if (!strcmp(t, "reasoning")) return convert_reasoning(item, param, out, err);
    if (!strcmp(t, "item_reference"))
        return oai_bad(err, param, "Invalid '%s': item_reference is not supported: this server is stateless and stores "
                       "no items; send the items themselves.", param);
    return oai_bad(err, param, "Invalid value for '%s.type': '%s' is not supported (supported: 'message', "
                   "'function_call', 'function_call_output', 'reasoning').", param, t);
}

/* Empty content of an assistant message: null beside tool calls, else "". */
static void finish_messages(json_t *out)
{
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *m = json_array_get(out, i);
        if (!is_str(json_object_get(m, "role"), "assistant") || json_array_size(json_object_get(m, "content"))) continue;
        json_object_set_new(m, "content", json_object_get(m, "tool_calls") ? json_null() : json_string(""));
    }
}

static json_t *convert_tools(json_t *tools, oai_error *err)
{
    if (!json_is_array(tools)) return fail(err, "tools", "Invalid type for 'tools': expected an array.");
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
        json_t *params = oai_opt(t, "parameters"), *desc = oai_opt(t, "description"), *strict = oai_opt(t, "strict");
        const char *bad = NULL;
        if (!json_is_object(t) || !json_is_string(type)) bad = "expected an object with a 'type'";
        else if (!is_str(type, "function")) bad = "only function tools are supported (hosted tools such as web_search "
                                                  "run on OpenAI's servers)";
        else if (!json_is_string(name)) bad = "a function tool needs a 'name' (a string)";
        else if (params && !json_is_object(params)) bad = "'parameters' must be a JSON schema object";
        else if (desc && !json_is_string(desc)) bad = "'description' must be a string";
        else if (strict && !json_is_boolean(strict)) bad = "'strict' must be a boolean";
        if (bad) {
            json_decref(out);
            return fail(err, p, "Invalid '%s': %s.", p, bad);
        }
        json_t *fn = json_pack("{s:O}", "name", name);
        if (desc) json_object_set(fn, "description", desc);
        json_object_set_new(fn, "parameters", params ? json_incref(params) : json_pack("{s:s, s:{}}", "type", "object",
                                                                                       "properties"));
        if (strict) json_object_set(fn, "strict", strict);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return out;
}

/* tool_choice "none" | "auto" | "required" | {"type": "function", "name"} */
static bool convert_tool_choice(json_t *tc, json_t *o, oai_error *err)
{
    if (json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (strcmp(v, "none") && strcmp(v, "auto") && strcmp(v, "required"))
            return oai_bad(err, "tool_choice", "Invalid value for 'tool_choice': '%s'. Supported values are 'none', "
                           "'auto', 'required' or {\"type\": \"function\", \"name\": ...}.", v);
        json_object_set(o, "tool_choice", tc);
        return true;
    }
    json_t *type = json_object_get(tc, "type"), *name = json_object_get(tc, "name");
    if (!json_is_object(tc) || !is_str(type, "function") || !json_is_string(name))
        return oai_bad(err, "tool_choice", "Invalid 'tool_choice': expected 'none', 'auto', 'required' or "
                       "{\"type\": \"function\", \"name\": ...} (allowed_tools and hosted tools are not supported).");
    json_object_set_new(o, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    return true;
}

/* text {"format": {"type": "text" | "json_object" | "json_schema", ...}} */
static bool convert_text(json_t *text, json_t *o, oai_error *err)
{
    if (!json_is_object(text)) return oai_bad(err, "text", "Invalid type for 'text': expected an object.");
    json_t *fmt = oai_opt(text, "format");
    if (!fmt) return true;
    json_t *type = json_object_get(fmt, "type");
    if (!json_is_object(fmt) || !json_is_string(type))
        return oai_bad(err, "text.format", "Invalid 'text.format': expected an object with a 'type'.");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text")) return true;
    if (!strcmp(t, "json_object")) {
        json_object_set_new(o, "response_format", json_pack("{s:s}", "type", "json_object"));
        return true;
    }
    if (strcmp(t, "json_schema") != 0)
        return oai_bad(err, "text.format.type", "Invalid value for 'text.format.type': '%s'. Supported values are "
                       "'text', 'json_object' and 'json_schema'.", t);
    json_t *schema = json_object_get(fmt, "schema"), *name = oai_opt(fmt, "name");
    if (!json_is_object(schema))
        return oai_bad(err, "text.format.schema", "Missing or invalid 'text.format.schema': expected a JSON schema "
                       "object.");
    if (name && !json_is_string(name))
        return oai_bad(err, "text.format.name", "Invalid type for 'text.format.name': expected a string.");
    json_t *js = name ? json_pack("{s:O, s:O}", "name", name, "schema", schema)
                      : json_pack("{s:s, s:O}", "name", "output", "schema", schema);
    json_t *strict = oai_opt(fmt, "strict");
    if (strict) json_object_set(js, "strict", strict);
    json_object_set_new(o, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
    return true;
}

/* reasoning {"effort": none|minimal|low|medium|high|xhigh, "summary"}: the
 * template's enable_thinking, unless chat_template_kwargs names it. */
static bool convert_reasoning_cfg(json_t *rz, json_t *o, oai_error *err)
{
    if (!json_is_object(rz)) return oai_bad(err, "reasoning", "Invalid type for 'reasoning': expected an object.");
    json_t *effort = oai_opt(rz, "effort");
    if (!effort) return true;
    static const char *efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    bool known = false;
    for (size_t i = 0; i < sizeof efforts / sizeof efforts[0]; i++) known |= is_str(effort, efforts[i]);
    if (!known)
        return oai_bad(err, "reasoning.effort", "Invalid value for 'reasoning.effort': expected one of 'none', "
                       "'minimal', 'low', 'medium', 'high', 'xhigh'.");
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (!kw) {
        kw = json_object();
        json_object_set_new(o, "chat_template_kwargs", kw);
    }
    if (!json_object_get(kw, "enable_thinking"))
        json_object_set_new(kw, "enable_thinking", json_boolean(!is_str(effort, "none")));
    return true;
}

json_t *resp_to_oai(json_t *body, bool count_only, oai_error *err)
{
    if (!json_is_object(body)) return fail(err, NULL, "The request body must be a JSON object.");
    static const char *stateful[] = {"previous_response_id", "conversation"};
    for (size_t i = 0; i < sizeof stateful / sizeof stateful[0]; i++)
        if (oai_opt(body, stateful[i]))
            return fail(err, stateful[i], "'%s' is not supported: this server is stateless and stores no responses; "
                        "send the whole conversation in 'input'.", stateful[i]);
    json_t *bg = oai_opt(body, "background");
    if (bg && !json_is_false(bg))
        return fail(err, "background", "'background' is not supported: responses are answered while you wait (or "
                    "streamed).");
    json_t *store = oai_opt(body, "store");
    if (store && !json_is_boolean(store)) return fail(err, "store", "Invalid type for 'store': expected a boolean.");
    json_t *model = oai_opt(body, "model");
    if (model && !json_is_string(model)) return fail(err, "model", "Invalid type for 'model': expected a string.");

    json_t *o = json_object(), *out = json_array();
    json_object_set_new(o, "messages", out);
    json_t *ins = oai_opt(body, "instructions");
    if (ins && !json_is_string(ins)) {
        json_decref(o);
        return fail(err, "instructions", "Invalid type for 'instructions': expected a string.");
    }
    if (ins) json_array_append_new(out, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    json_t *input = json_object_get(body, "input");
    if (json_is_string(input)) {
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", "user", "content", input));
    } else if (json_is_array(input)) {
        if (json_array_size(input) > OAI_MAX_MESSAGES) {
            json_decref(o);
            return fail(err, "input", "Invalid 'input': at most %d items.", OAI_MAX_MESSAGES);
        }
        for (size_t i = 0; i < json_array_size(input); i++)
            if (!convert_item(json_array_get(input, i), i, out, err)) { json_decref(o); return NULL; }
        if (!json_array_size(input)) { json_decref(o); return fail(err, "input", "Invalid 'input': empty array."); }
        finish_messages(out);
    } else {
        json_decref(o);
        return fail(err, "input", input ? "Invalid type for 'input': expected a string or an array of input items."
                                        : "Missing required parameter: 'input'.");
    }

    json_t *mt = oai_opt(body, "max_output_tokens");
    if (mt) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > INT32_MAX) {
            json_decref(o);
            return fail(err, "max_output_tokens", "Invalid 'max_output_tokens': expected an integer in [1, 2^31-1].");
        }
        json_object_set(o, "max_tokens", mt);
    }
    /* the same names and meanings in both APIs, and llama-server's extensions */
    static const char *same[] = {"temperature", "top_p", "parallel_tool_calls", "top_k", "min_p", "repeat_penalty",
                                 "presence_penalty", "frequency_penalty", "seed", "stop", "grammar", "logit_bias",
                                 "ignore_eos", "chat_template_kwargs", "reasoning_budget"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = oai_opt(body, same[i]);
        if (v) json_object_set_new(o, same[i], json_is_object(v) ? json_deep_copy(v) : json_incref(v));
    }
    if (!count_only) {
        json_t *st = oai_opt(body, "stream");
        if (st) json_object_set(o, "stream", st);
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
    json_t *text = oai_opt(body, "text");
    if (text && !convert_text(text, o, err)) { json_decref(o); return NULL; }
    json_t *rz = oai_opt(body, "reasoning");
    if (rz && !convert_reasoning_cfg(rz, o, err)) { json_decref(o); return NULL; }
    return o;
}

void resp_rename_param(oai_error *err)
{
    static const char *map[][2] = {{"max_tokens", "max_output_tokens"}, {"response_format", "text.format"},
                                   {"messages", "input"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(err->param, map[i][0])) {
            snprintf(err->param, sizeof err->param, "%s", map[i][1]);
            return;
        }
}

/* ---------- response ---------- */

/* The item ids of a response: PREFIX + the response id's own part + the
 * output index ("msg_", "rs_"; "fc_" takes the call id's part instead). */
static void item_id(const completion *c, const char *prefix, int index, char *out, size_t cap)
{
    const char *tail = strncmp(c->id, "resp_", 5) ? c->id : c->id + 5;
    snprintf(out, cap, "%s%s%d", prefix, tail, index);
}

static void call_item_id(const char *call_id, char *out, size_t cap)
{
    snprintf(out, cap, "fc_%s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
}

static json_t *text_content(json_t *text)
{
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text", text, "annotations", "logprobs");
}

static json_t *message_item(const char *id, const char *status, json_t *text)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "id", id, "type", "message", "status", status, "role", "assistant",
                     "content", text_content(text));
}

static json_t *reasoning_item(const char *id, const char *status, json_t *text)
{
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}], s:s}", "id", id, "type", "reasoning", "summary", "content", "type",
                     "reasoning_text", "text", text, "status", status);
}

static json_t *call_item(const char *call_id, const char *name, const char *status, json_t *args)
{
    char id[96];
    call_item_id(call_id, id, sizeof id);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "id", id, "type", "function_call", "call_id", call_id, "name",
                     name, "arguments", args, "status", status);
}

static json_t *usage_json(const oai_result *res)
{
    return json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", res->n_prompt, "input_tokens_details",
                     "cached_tokens", res->n_cached, "output_tokens", res->n_generated, "output_tokens_details",
                     "reasoning_tokens", 0, "total_tokens", res->n_prompt + res->n_generated);
}

/* The request's tools back in the Responses shape. */
static json_t *tools_echo(const oai_req *rq)
{
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(rq->tools); i++) {
        json_t *fn = json_object_get(json_array_get(rq->tools, i), "function");
        json_t *t = json_pack("{s:s}", "type", "function");
        const char *keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < 4; k++) {
            json_t *v = json_object_get(fn, keys[k]);
            json_object_set(t, keys[k], v ? v : json_null());
        }
        if (!json_is_boolean(json_object_get(t, "strict"))) json_object_set_new(t, "strict", json_false());
        json_array_append_new(out, t);
    }
    return out;
}

static json_t *tool_choice_echo(const oai_req *rq)
{
    switch (rq->tool_choice) {
    case OAI_TOOL_CHOICE_NONE: return json_string("none");
    case OAI_TOOL_CHOICE_REQUIRED: return json_string("required");
    case OAI_TOOL_CHOICE_NAMED: return json_pack("{s:s, s:s}", "type", "function", "name", rq->tool_name ? rq->tool_name : "");
    default: return json_string("auto");
    }
}

/* A float as the shortest decimal that reads back as it (0.8f -> 0.8, not
 * 0.800000011920929), as the client sent it. */
static double short_real(float f)
{
    char b[32] = "0";
    for (int p = 1; p <= 9; p++) {
        snprintf(b, sizeof b, "%.*g", p, (double)f);
        if ((float)strtod(b, NULL) == f) break;
    }
    return strtod(b, NULL);
}

/* A Response object: status "in_progress" / "completed" / "incomplete" /
 * "failed"; output stolen; res NULL: no usage yet. */
static json_t *response_obj(const completion *c, const char *status, json_t *output, const oai_result *res,
                            const char *error_message)
{
    const oai_req *rq = &c->rq;
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:n, s:o, s:s, s:o, s:b, s:n, s:n, s:b, s:f, "
                          "s:o, s:o, s:f, s:s, s:n, s:{}}",
                          "id", c->id, "object", "response", "created_at", (json_int_t)c->created, "status", status,
                          "error", "incomplete_details", "instructions", "max_output_tokens",
                          rq->max_tokens > 0 ? json_integer(rq->max_tokens) : json_null(), "model",
                          c->ctx->cfg->alias, "output", output, "parallel_tool_calls", rq->parallel_tool_calls,
                          "previous_response_id", "reasoning", "store", 0, "temperature", short_real(rq->sampling.temp),
                          "tool_choice", tool_choice_echo(rq), "tools",
                          tools_echo(rq), "top_p", short_real(rq->sampling.top_p), "truncation", "disabled", "usage",
                          "metadata");
    if (!r) return NULL;
    /* text.format: "text" is known to be true only without a grammar (a
     * json_schema, json_object or grammar leaves it out) */
    if (!rq->gbnf) json_object_set_new(r, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    if (res) json_object_set_new(r, "usage", usage_json(res));
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    if (!strcmp(status, "completed")) json_object_set_new(r, "completed_at", json_integer((json_int_t)time(NULL)));
    if (error_message)
        json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", error_message));
    return r;
}

static const char *final_status(completion_stop stop) { return stop == COMPLETION_STOP_LENGTH ? "incomplete" : "completed"; }

json_t *resp_response_json(const completion *c, const completion_update *u, const json_t *msg)
{
    json_t *output = json_array();
    char id[96];
    if (msg) {
        json_t *rc = json_object_get(msg, "reasoning_content");
        if (json_is_string(rc) && json_string_length(rc)) {
            item_id(c, "rs_", (int)json_array_size(output), id, sizeof id);
            json_array_append_new(output, reasoning_item(id, "completed", json_incref(rc)));
        }
        json_t *ct = json_object_get(msg, "content");
        if (json_is_string(ct) && json_string_length(ct)) {
            item_id(c, "msg_", (int)json_array_size(output), id, sizeof id);
            json_array_append_new(output, message_item(id, "completed", json_incref(ct)));
        }
        json_t *calls = json_object_get(msg, "tool_calls");
        for (size_t i = 0; i < json_array_size(calls); i++) {
            json_t *call = json_array_get(calls, i), *fn = json_object_get(call, "function");
            json_t *args = json_object_get(fn, "arguments");
            const char *cid = json_string_value(json_object_get(call, "id"));
            const char *name = json_string_value(json_object_get(fn, "name"));
            json_array_append_new(output, call_item(cid ? cid : "call_", name ? name : "", "completed",
                                                    json_is_string(args) ? json_incref(args) : json_string("{}")));
        }
    } else if (u->res.text_len) {
        item_id(c, "msg_", 0, id, sizeof id);
        json_array_append_new(output, message_item(id, "completed", oai_json_string(u->res.text, u->res.text_len)));
    }
    completion_stop stop = completion_stop_of(c, u);
    const char *status = final_status(stop);
    size_t n = json_array_size(output);
    if (n && !strcmp(status, "incomplete"))   /* the item the limit cut */
        json_object_set_new(json_array_get(output, n - 1), "status", json_string("incomplete"));
    return response_obj(c, status, output, &u->res, NULL);
}

/* ---------- stream ---------- */

typedef enum item_kind { ITEM_NONE = 0, ITEM_TEXT, ITEM_REASONING, ITEM_CALL } item_kind;

struct resp_stream {
    resp_emit_fn emit;
    void *ud;
    const completion *c;
    bool started;
    int64_t seq;        /* the next sequence_number */
    item_kind open;
    char id[96];        /* the open item's id */
    char call_id[64];   /* ITEM_CALL */
    char *name;         /* ITEM_CALL */
    int tool_index;     /* ITEM_CALL: the parser's index of the call */
    char *buf;          /* the open item's text (or arguments) so far */
    size_t len, cap;
    json_t *output;     /* the items done */
};

resp_stream *resp_stream_new(const completion *c, resp_emit_fn emit, void *ud)
{
    resp_stream *rs = calloc(1, sizeof *rs);
    if (!rs) return NULL;
    rs->output = json_array();
    if (!rs->output) { free(rs); return NULL; }
    rs->emit = emit;
    rs->ud = ud;
    rs->c = c;
    rs->tool_index = -1;
    return rs;
}

void resp_stream_free(resp_stream *rs)
{
    if (!rs) return;
    json_decref(rs->output);
    free(rs->buf);
    free(rs->name);
    free(rs);
}

/* One event: "type" and "sequence_number" added to data (stolen). */
static void emit_ev(resp_stream *rs, const char *type, json_t *data)
{
    if (!data) return;
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "sequence_number", json_integer(rs->seq++));
    rs->emit(rs->ud, type, data);
}

static void start(resp_stream *rs)
{
    if (rs->started) return;
    rs->started = true;
    emit_ev(rs, "response.created", json_pack("{s:o}", "response", response_obj(rs->c, "in_progress", json_array(), NULL, NULL)));
    emit_ev(rs, "response.in_progress", json_pack("{s:o}", "response", response_obj(rs->c, "in_progress", json_array(), NULL, NULL)));
}

static int out_index(const resp_stream *rs) { return (int)json_array_size(rs->output); }

static void buf_add(resp_stream *rs, const char *p, size_t n)
{
    if (rs->len + n > rs->cap) {
        size_t cap = rs->cap ? rs->cap : 256;
        while (cap < rs->len + n) cap *= 2;
        char *b = realloc(rs->buf, cap);
        if (!b) return;
        rs->buf = b;
        rs->cap = cap;
    }
    memcpy(rs->buf + rs->len, p, n);
    rs->len += n;
}

static json_t *buf_json(const resp_stream *rs) { return oai_json_string(rs->buf ? rs->buf : "", rs->len); }

/* Close the open item: its .done events, then output_item.done. */
static void close_item(resp_stream *rs, const char *status)
{
    if (rs->open == ITEM_NONE) return;
    int oi = out_index(rs);
    json_t *item = NULL;
    if (rs->open == ITEM_TEXT || rs->open == ITEM_REASONING) {
        bool text = rs->open == ITEM_TEXT;
        json_t *done = json_pack("{s:s, s:i, s:i, s:o}", "item_id", rs->id, "output_index", oi, "content_index", 0,
                                 "text", buf_json(rs));
        if (text) json_object_set_new(done, "logprobs", json_array());
        emit_ev(rs, text ? "response.output_text.done" : "response.reasoning_text.done", done);
        json_t *part = text ? text_content(buf_json(rs)) : json_pack("{s:s, s:o}", "type", "reasoning_text", "text", buf_json(rs));
        emit_ev(rs, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:o}", "item_id", rs->id, "output_index", oi,
                                                         "content_index", 0, "part", part));
        item = text ? message_item(rs->id, status, buf_json(rs)) : reasoning_item(rs->id, status, buf_json(rs));
    } else {
        emit_ev(rs, "response.function_call_arguments.done", json_pack("{s:s, s:i, s:s, s:o}", "item_id", rs->id,
                                                                    "output_index", oi, "name", rs->name ? rs->name : "",
                                                                    "arguments", buf_json(rs)));
        item = call_item(rs->call_id, rs->name ? rs->name : "", status, buf_json(rs));
    }
    emit_ev(rs, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", oi, "item", item));
    json_array_append_new(rs->output, item);
    rs->open = ITEM_NONE;
    rs->len = 0;
    rs->tool_index = -1;
}

/* Open a message or reasoning item (with its one content part). */
static void open_text(resp_stream *rs, item_kind k)
{
    close_item(rs, "completed");
    rs->open = k;
    int oi = out_index(rs);
    bool text = k == ITEM_TEXT;
    item_id(rs->c, text ? "msg_" : "rs_", oi, rs->id, sizeof rs->id);
    json_t *item = text ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", rs->id, "type", "message", "status", "in_progress",
                                    "role", "assistant", "content")
                        : json_pack("{s:s, s:s, s:[], s:[], s:s}", "id", rs->id, "type", "reasoning", "summary", "content",
                                    "status", "in_progress");
    emit_ev(rs, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", oi, "item", item));
    json_t *part = text ? text_content(json_string("")) : json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "");
    emit_ev(rs, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:o}", "item_id", rs->id, "output_index", oi,
                                                      "content_index", 0, "part", part));
}

static void text_delta(resp_stream *rs, item_kind k, const char *p, size_t n)
{
    if (!n) return;
    if (rs->open != k) open_text(rs, k);
    buf_add(rs, p, n);
    json_t *d = json_pack("{s:s, s:i, s:i, s:o}", "item_id", rs->id, "output_index", out_index(rs), "content_index", 0,
                          "delta", oai_json_string(p, n));
    if (k == ITEM_TEXT) json_object_set_new(d, "logprobs", json_array());
    emit_ev(rs, k == ITEM_TEXT ? "response.output_text.delta" : "response.reasoning_text.delta", d);
}

void resp_stream_event(void *user, const ember_chat_event *ev)
{
    resp_stream *rs = user;
    start(rs);
    switch (ev->kind) {
    case EMBER_CHAT_EV_CONTENT: text_delta(rs, ITEM_TEXT, ev->text, ev->len); break;
    case EMBER_CHAT_EV_REASONING: text_delta(rs, ITEM_REASONING, ev->text, ev->len); break;
    case EMBER_CHAT_EV_TOOL_START: {
        close_item(rs, "completed");
        rs->open = ITEM_CALL;
        rs->tool_index = ev->tool_index;
        snprintf(rs->call_id, sizeof rs->call_id, "%s", ev->id ? ev->id : "call_");
        call_item_id(rs->call_id, rs->id, sizeof rs->id);
        free(rs->name);
        rs->name = strdup(ev->name ? ev->name : "");
        emit_ev(rs, "response.output_item.added",
             json_pack("{s:i, s:o}", "output_index", out_index(rs), "item",
                       call_item(rs->call_id, rs->name ? rs->name : "", "in_progress", json_string(""))));
        break;
    }
    case EMBER_CHAT_EV_TOOL_ARGS:
        if (rs->open == ITEM_CALL && ev->tool_index == rs->tool_index && ev->len) {
            buf_add(rs, ev->text, ev->len);
            emit_ev(rs, "response.function_call_arguments.delta",
                 json_pack("{s:s, s:i, s:o}", "item_id", rs->id, "output_index", out_index(rs), "delta",
                           oai_json_string(ev->text, ev->len)));
        }
        break;
    case EMBER_CHAT_EV_TOOL_END:
        if (rs->open == ITEM_CALL) close_item(rs, "completed");
        break;
    }
}

void resp_stream_update(resp_stream *rs, const completion *c, const completion_update *u)
{
    start(rs);
    if (u->stop == COMPLETION_ERROR || u->stop == COMPLETION_CANCELLED) {
        close_item(rs, "incomplete");
        emit_ev(rs, "response.failed", json_pack("{s:o}", "response", response_obj(c, "failed", json_incref(rs->output),
                                                                                 &u->res, c->err[0] ? c->err : "failed")));
        return;
    }
    if (!c->parser) text_delta(rs, ITEM_TEXT, u->delta, u->n_delta);
    if (u->stop == COMPLETION_RUNNING) return;
    const char *status = final_status(u->stop);
    close_item(rs, status);
    emit_ev(rs, !strcmp(status, "completed") ? "response.completed" : "response.incomplete",
         json_pack("{s:o}", "response", response_obj(c, status, json_incref(rs->output), &u->res, NULL)));
}
