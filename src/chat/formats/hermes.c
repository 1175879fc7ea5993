/*
 * hermes.c — Hermes / Qwen tool calls:
 *   <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 * one JSON object per tag pair, several pairs back to back for parallel
 * calls. Source: the Hermes 2 Pro and Qwen 2.5 / Qwen 3 chat templates
 * (tests/data/templates/NousResearch-Hermes-2-Pro-*.jinja,
 * Qwen-Qwen2.5-7B-Instruct.jinja), whose system prompt asks for exactly
 * this shape. "arguments" may also arrive double-encoded as a JSON string;
 * "parameters" is accepted as its synonym.
 *
 * Owns: recognising one <tool_call>...</tool_call> region.
 * Must not: keep state (see formats.h).
 */
#include "chat/formats/formats.h"

#include <stdlib.h>
#include <string.h>

static const char *const markers[] = {"<tool_call>"};
static const char close_tag[] = "</tool_call>";

/* One {"name":..,"arguments":..} object s[b..e) -> call; false if invalid. */
static bool object_call(const char *s, size_t b, size_t e, fmt_calls *out)
{
    if (!fmt_json_valid(s + b, e - b, true)) return false;
    char *name = fmt_json_member_string(s, b, e, "name");
    if (!name || !fmt_valid_name(name, strlen(name))) { free(name); return false; }
    size_t vb, ve;
    char *args;
    if (fmt_json_member2(s, b, e, "arguments", "parameters", &vb, &ve))
        args = fmt_arguments_from_span(s, vb, ve);
    else
        args = fmt_strndup("{}", 2);
    if (!args) { free(name); return false; }
    fmt_calls_push(out, name, args);
    return true;
}

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    size_t i = fmt_skip_ws(s, n, sizeof "<tool_call>" - 1);
    if (i >= n) return fmt_incomplete(n, at_eof, consumed);
    if (s[i] != '{') return fmt_malformed_until(s, n, at_eof, i, close_tag, consumed);
    size_t e;
    int r = fmt_json_span(s, n, i, &e);
    if (r == 0) return fmt_incomplete(n, at_eof, consumed);
    if (r < 0) return fmt_malformed_until(s, n, at_eof, i, close_tag, consumed);
    size_t j = fmt_skip_ws(s, n, e);
    int t = fmt_starts(s, n, j, close_tag);
    if (t == 0) return fmt_incomplete(n, at_eof, consumed);
    if (t < 0) return fmt_malformed_until(s, n, at_eof, j, close_tag, consumed);
    if (!object_call(s, i, e, out)) {
        *consumed = j + sizeof close_tag - 1;
        return FMT_MALFORMED;
    }
    *consumed = j + sizeof close_tag - 1;
    return FMT_OK;
}

static bool partial(const char *s, size_t n, const json_t *tools, char **name, fmt_buf *args, size_t *raw_at)
{
    size_t i = fmt_skip_ws(s, n, sizeof "<tool_call>" - 1), a;
    if (!fmt_partial_json_header(s, n, i, name, &a)) return false;
    *raw_at = a;
    return true;
}

const fmt_ops fmt_hermes = {markers, 1, false, scan, close_tag, NULL, partial, true, NULL, NULL, false};

/* Shared with llama3.c and mistral.c: a JSON call object. */
bool fmt_object_call(const char *s, size_t b, size_t e, fmt_calls *out) { return object_call(s, b, e, out); }
