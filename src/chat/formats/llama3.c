/*
 * llama3.c — Llama 3.1 / 3.2 / 3.3 JSON tool calls: the whole reply is
 *   {"name": "NAME", "parameters": {...}}
 * optionally preceded by <|python_tag|>; Llama 3.2 may write several
 * objects separated by ";". Source: Meta's Llama 3.1 model card ("JSON based
 * tool calling") and the templates meta-llama-Llama-3.*.jinja in
 * tests/data/templates/ (they render calls as {"name": .., "parameters": ..}).
 * <|python_tag|> followed by code (the built-in code interpreter / brave
 * search calls) is not a JSON call and stays content.
 * Also the custom-tool form of the Llama 3.1 prompt guide, which functionary
 * v3.1's template renders for its calls
 * (tests/data/templates/meetkai-functionary-medium-v3.1.jinja:
 * '<function=' + name + '>' + arguments|tojson + '</function>'):
 *   <function=NAME>{"key": "value"}</function>
 *
 * Owns: recognising one call object (and a following ";") or one
 * <function=NAME>{...}</function>.
 * Must not: keep state (see formats.h).
 */
#include "chat/formats/formats.h"

static const char *const markers[] = {"<|python_tag|>", "<function="};
static const char fn_close[] = "</function>";

/* <function=NAME>{...}</function>; header_only: stop after the '{' (for
 * partial), *args_at set */
static fmt_result scan_function(const char *s, size_t n, bool at_eof, size_t *consumed, fmt_calls *out,
                                char **name_out, size_t *args_at)
{
    size_t nb = sizeof "<function=" - 1, ne = nb;
    while (ne < n && s[ne] != '>' && ne - nb <= 256) ne++;
    if (ne - nb > 256) return fmt_malformed_until(s, n, at_eof, nb, fn_close, consumed);
    if (ne >= n) return fmt_incomplete(n, at_eof, consumed);
    if (!fmt_valid_name(s + nb, ne - nb)) return fmt_malformed_until(s, n, at_eof, nb, fn_close, consumed);
    size_t a = fmt_skip_ws(s, n, ne + 1);
    if (a >= n) return fmt_incomplete(n, at_eof, consumed);
    if (s[a] != '{') return fmt_malformed_until(s, n, at_eof, a, fn_close, consumed);
    if (name_out) {
        *name_out = fmt_strndup(s + nb, ne - nb);
        *args_at = a;
        return FMT_NEED_MORE;
    }
    size_t e;
    int r = fmt_json_span(s, n, a, &e);
    if (r == 0) return fmt_incomplete(n, at_eof, consumed);
    if (r < 0) return fmt_malformed_until(s, n, at_eof, a, fn_close, consumed);
    size_t j = fmt_skip_ws(s, n, e);
    int t = fmt_starts(s, n, j, fn_close);
    if (t == 0) return fmt_incomplete(n, at_eof, consumed);
    if (t < 0) return fmt_malformed_until(s, n, at_eof, j, fn_close, consumed);
    *consumed = j + sizeof fn_close - 1;
    char *args = fmt_arguments_from_span(s, a, e);
    if (!args) return FMT_MALFORMED;
    fmt_calls_push(out, fmt_strndup(s + nb, ne - nb), args);
    return FMT_OK;
}

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    if (fmt_starts(s, n, 0, markers[1]) == 1) return scan_function(s, n, at_eof, consumed, out, NULL, NULL);
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
    if (fmt_starts(s, n, 0, markers[1]) == 1) {
        size_t consumed;
        scan_function(s, n, false, &consumed, NULL, name, &a);
        if (!*name) return false;
        *raw_at = a;
        return true;
    }
    if (fmt_starts(s, n, 0, markers[0]) == 1) i = fmt_skip_ws(s, n, sizeof "<|python_tag|>" - 1);
    if (!fmt_partial_json_header(s, n, i, name, &a)) return false;
    *raw_at = a;
    return true;
}

const fmt_ops fmt_llama3 = {markers, 2, true, scan, NULL, "}]>", partial, true, NULL, NULL, false};
