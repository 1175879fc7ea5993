/*
 * llama3.c — Llama 3.1 / 3.2 / 3.3 JSON tool calls: the whole reply is
 *   {"name": "NAME", "parameters": {...}}
 * optionally preceded by <|python_tag|>; Llama 3.2 may write several
 * objects separated by ";". Source: Meta's Llama 3.1 model card ("JSON based
 * tool calling") and the templates meta-llama-Llama-3.*.jinja in
 * tests/data/templates/ (they render calls as {"name": .., "parameters": ..}).
 * <|python_tag|> followed by code (the built-in code interpreter / brave
 * search calls) is not a JSON call and stays content.
 *
 * Owns: recognising one call object (and a following ";").
 * Must not: keep state (see formats.h).
 */
#include "chat/formats/formats.h"

static const char *const markers[] = {"<|python_tag|>"};

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    size_t i = 0, tag = 0;
    int t = fmt_starts(s, n, 0, markers[0]);
    if (t == 1) {
        tag = sizeof "<|python_tag|>" - 1;
        i = fmt_skip_ws(s, n, tag);
        if (i >= n) return fmt_incomplete(n, at_eof, consumed);
    }
    if (s[i] != '{') {
        *consumed = tag ? tag : 1;
        return FMT_MALFORMED;
    }
    size_t e;
    int r = fmt_json_span(s, n, i, &e);
    if (r == 0) return fmt_incomplete(n, at_eof, consumed);
    if (r < 0) {
        *consumed = i + 1;
        return FMT_MALFORMED;
    }
    if (!fmt_object_call(s, i, e, out)) {
        *consumed = e;
        return FMT_MALFORMED;
    }
    size_t j = fmt_skip_ws(s, n, e);
    if (j >= n && !at_eof) {
        fmt_calls_truncate(out, out->n - 1);
        return FMT_NEED_MORE;
    }
    *consumed = (j < n && s[j] == ';') ? j + 1 : e;
    return FMT_OK;
}

static bool partial(const char *s, size_t n, const json_t *tools, char **name, fmt_buf *args, size_t *raw_at)
{
    size_t i = 0, a;
    if (fmt_starts(s, n, 0, markers[0]) == 1) i = fmt_skip_ws(s, n, sizeof "<|python_tag|>" - 1);
    if (!fmt_partial_json_header(s, n, i, name, &a)) return false;
    *raw_at = a;
    return true;
}

const fmt_ops fmt_llama3 = {markers, 1, true, scan, NULL, "}]", partial, true};
