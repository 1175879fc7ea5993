/*
 * mistral.c — Mistral tool calls, two generations:
 *   [TOOL_CALLS][{"name": "N", "arguments": {...}}, ...]      (Mistral Nemo, Small 3.1)
 *   [TOOL_CALLS]N[ARGS]{...}  and  [TOOL_CALLS]N[CALL_ID]id[ARGS]{...}
 *                                                   (Devstral, Small 3.2, Ministral 3)
 * Source: the templates mistralai-Mistral-Nemo-Instruct-2407.jinja,
 * unsloth-mistral-Devstral-Small-2507.jinja,
 * Mistral-Small-3.2-24B-Instruct-2506.jinja and
 * mistralai-Ministral-3-14B-Reasoning-2512.jinja in tests/data/templates/,
 * which render assistant calls in exactly these shapes. The model's [CALL_ID]
 * is not kept: ids are ours (OpenAI style), for every format alike.
 *
 * Owns: recognising the region after one [TOOL_CALLS].
 * Must not: keep state (see formats.h).
 */
#include "chat/formats/formats.h"

static const char *const markers[] = {"[TOOL_CALLS]"};
#define MARK_LEN (sizeof "[TOOL_CALLS]" - 1)

static fmt_result bad(size_t *consumed)
{
    *consumed = MARK_LEN;
    return FMT_MALFORMED;
}

static fmt_result scan_array(const char *s, size_t n, bool at_eof, size_t i, size_t *consumed, fmt_calls *out)
{
    size_t e;
    int r = fmt_json_span(s, n, i, &e);
    if (r == 0) return fmt_incomplete(n, at_eof, consumed);
    if (r < 0) return bad(consumed);
    size_t before = out->n;
    if (!fmt_json_valid(s + i, e - i, false)) goto fail;
    size_t j = fmt_skip_ws(s, e, i + 1);
    if (s[j] == ']') goto fail;                 /* an empty list calls nothing */
    for (;;) {
        size_t ee;
        if (fmt_json_span(s, e, j, &ee) != 1 || s[j] != '{' || !fmt_object_call(s, j, ee, out)) goto fail;
        j = fmt_skip_ws(s, e, ee);
        if (s[j] == ',') { j = fmt_skip_ws(s, e, j + 1); continue; }
        break;                                   /* ']' (validated above) */
    }
    *consumed = e;
    return FMT_OK;
fail:
    fmt_calls_truncate(out, before);
    *consumed = e;
    return FMT_MALFORMED;
}

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    size_t i = fmt_skip_ws(s, n, MARK_LEN);
    if (i >= n) return fmt_incomplete(n, at_eof, consumed);
    if (s[i] == '[') return scan_array(s, n, at_eof, i, consumed, out);
    size_t j = i;
    while (j < n && s[j] != '[' && j - i <= 256) j++;
    if (j - i > 256) return bad(consumed);
    if (j >= n) return fmt_incomplete(n, at_eof, consumed);
    size_t name_b = i, name_e = j;
    if (!fmt_valid_name(s + name_b, name_e - name_b)) return bad(consumed);
    int t = fmt_starts(s, n, j, "[CALL_ID]");
    if (t == 0) return fmt_incomplete(n, at_eof, consumed);
    if (t == 1) {
        size_t k = j + sizeof "[CALL_ID]" - 1, k0 = k;
        while (k < n && s[k] != '[' && k - k0 <= 128) k++;
        if (k - k0 > 128) return bad(consumed);
        if (k >= n) return fmt_incomplete(n, at_eof, consumed);
        j = k;
    }
    t = fmt_starts(s, n, j, "[ARGS]");
    if (t == 0) return fmt_incomplete(n, at_eof, consumed);
    if (t < 0) return bad(consumed);
    size_t a = fmt_skip_ws(s, n, j + sizeof "[ARGS]" - 1);
    if (a >= n) return fmt_incomplete(n, at_eof, consumed);
    size_t e;
    int r = fmt_json_span(s, n, a, &e);
    if (r == 0) return fmt_incomplete(n, at_eof, consumed);
    if (r < 0) return bad(consumed);
    char *args = fmt_arguments_from_span(s, a, e);
    if (!args) {
        *consumed = e;
        return FMT_MALFORMED;
    }
    fmt_calls_push(out, fmt_strndup(s + name_b, name_e - name_b), args);
    *consumed = e;
    return FMT_OK;
}

static bool partial(const char *s, size_t n, const json_t *tools, char **name, fmt_buf *args, size_t *raw_at)
{
    size_t i = fmt_skip_ws(s, n, MARK_LEN), a;
    if (i >= n) return false;
    if (s[i] == '[') {
        if (!fmt_partial_json_header(s, n, fmt_skip_ws(s, n, i + 1), name, &a)) return false;
    } else {
        size_t j = i;
        while (j < n && s[j] != '[' && j - i <= 256) j++;
        if (j >= n || j - i > 256 || !fmt_valid_name(s + i, j - i)) return false;
        size_t name_b = i, name_e = j;
        if (fmt_starts(s, n, j, "[CALL_ID]") == 1) {
            size_t k = j + sizeof "[CALL_ID]" - 1, k0 = k;
            while (k < n && s[k] != '[' && k - k0 <= 128) k++;
            if (k >= n || k - k0 > 128) return false;
            j = k;
        }
        if (fmt_starts(s, n, j, "[ARGS]") != 1) return false;
        a = fmt_skip_ws(s, n, j + sizeof "[ARGS]" - 1);
        if (a >= n || s[a] != '{') return false;
        *name = fmt_strndup(s + name_b, name_e - name_b);
        if (!*name) return false;
    }
    *raw_at = a;
    return true;
}

const fmt_ops fmt_mistral = {markers, 1, false, scan, NULL, "[]}", partial, true, NULL, NULL, false};
