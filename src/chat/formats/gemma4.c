/*
 * gemma4.c — Gemma 4 native tool calls:
 *   <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1,flag:true,obj:{a:1},list:[1,2]}<tool_call|>
 * Keys are bare (a model may also quote them with <|"|> or "..."), strings
 * are wrapped in the <|"|> token, numbers/true/false/null are bare, objects
 * and arrays nest; several calls come back to back. Source: the Gemma 4 chat
 * template (tests/data/templates/google-gemma-4-31B-it.jinja, macros
 * format_argument and the assistant tool_calls loop, which write exactly this
 * from OpenAI-shaped arguments) and ../shared/docs/formats.md.
 *
 * Owns: converting one call's argument syntax to standard JSON text. Numbers
 * and literals are copied verbatim, strings are JSON-escaped; a bare word
 * that is no JSON literal becomes a string (models drop the <|"|> at times).
 * Must not: keep state (see formats.h).
 */
#include "chat/formats/formats.h"

#include <string.h>

static const char *const markers[] = {"<|tool_call>"};

static const char close_tag[] = "<tool_call|>";
static const char quote[] = "<|\"|>";
#define QLEN (sizeof quote - 1)
#define MAX_DEPTH 64

/* 1 ok (*i past the value), 0 text ran out, -1 not this syntax */
static int value(const char *s, size_t n, size_t *i, fmt_buf *o, int depth, bool part);

/* A <|"|>-quoted string. With `part` (streaming a call that is not
 * complete yet), an unclosed string writes its opening quote and the text
 * that cannot be the start of the closing <|"|> — final bytes, since
 * escaping is per character. */
static int quoted(const char *s, size_t n, size_t *i, fmt_buf *o, bool part)
{
    size_t e = fmt_find(s, n, *i + QLEN, quote);
    if (e == (size_t)-1) {
        if (part) {
            size_t b = *i + QLEN, hold = 0;
            for (size_t k = QLEN - 1; k > 0 && !hold; k--)
                if (n >= b + k && !memcmp(s + n - k, quote, k)) hold = k;
            fmt_buf_putc(o, '"');
            if (n > b + hold) fmt_json_put_string_body(o, s + b, n - hold - b);
        }
        return 0;
    }
    fmt_json_put_string(o, s + *i + QLEN, e - *i - QLEN);
    *i = e + QLEN;
    return 1;
}

static int key(const char *s, size_t n, size_t *i, fmt_buf *o)
{
    *i = fmt_skip_ws(s, n, *i);
    if (*i >= n) return 0;
    int t = fmt_starts(s, n, *i, quote);
    if (t == 1) return quoted(s, n, i, o, false);
    if (s[*i] == '"') {
        size_t e;
        int r = fmt_json_span(s, n, *i, &e);
        if (r <= 0) return r;
        if (!fmt_json_valid(s + *i, e - *i, false)) return -1;
        fmt_buf_put(o, s + *i, e - *i);
        *i = e;
        return 1;
    }
    size_t j = *i;
    while (j < n && s[j] != ':') {
        if (strchr(",{}[]<>\"", s[j])) return -1;
        j++;
    }
    if (j >= n) return 0;
    size_t e = j;
    while (e > *i && fmt_is_ws(s[e - 1])) e--;
    if (e == *i) return -1;
    fmt_json_put_string(o, s + *i, e - *i);
    *i = j;
    return 1;
}

static int literal(const char *s, size_t n, size_t *i, fmt_buf *o)
{
    size_t j = *i;
    while (j < n && !strchr(",}]<", s[j])) j++;
    if (j >= n) return 0;
    size_t e = j;
    while (e > *i && fmt_is_ws(s[e - 1])) e--;
    if (e == *i) return -1;
    const char *l = s + *i;
    size_t ln = e - *i;
    bool json_lit = (ln == 4 && !memcmp(l, "true", 4)) || (ln == 5 && !memcmp(l, "false", 5)) ||
                    (ln == 4 && !memcmp(l, "null", 4)) ||
                    ((l[0] == '-' || (l[0] >= '0' && l[0] <= '9')) && fmt_json_valid(l, ln, false));
    if (json_lit) fmt_buf_put(o, l, ln);
    else fmt_json_put_string(o, l, ln);
    *i = j;
    return 1;
}

static int container(const char *s, size_t n, size_t *i, fmt_buf *o, int depth, bool is_obj, bool part)
{
    char close = is_obj ? '}' : ']';
    fmt_buf_putc(o, is_obj ? '{' : '[');
    (*i)++;
    *i = fmt_skip_ws(s, n, *i);
    if (*i >= n) return 0;
    if (s[*i] == close) {
        fmt_buf_putc(o, close);
        (*i)++;
        return 1;
    }
    for (;;) {
        int r;
        if (is_obj) {
            if ((r = key(s, n, i, o)) <= 0) return r;
            *i = fmt_skip_ws(s, n, *i);
            if (*i >= n) return 0;
            if (s[*i] != ':') return -1;
            fmt_buf_putc(o, ':');
            (*i)++;
        }
        if ((r = value(s, n, i, o, depth + 1, part)) <= 0) return r;
        *i = fmt_skip_ws(s, n, *i);
        if (*i >= n) return 0;
        if (s[*i] == ',') {
            fmt_buf_putc(o, ',');
            (*i)++;
            continue;
        }
        if (s[*i] != close) return -1;
        fmt_buf_putc(o, close);
        (*i)++;
        return 1;
    }
}

static int value(const char *s, size_t n, size_t *i, fmt_buf *o, int depth, bool part)
{
    if (depth > MAX_DEPTH) return -1;
    *i = fmt_skip_ws(s, n, *i);
    if (*i >= n) return 0;
    char c = s[*i];
    if (c == '<') {
        int t = fmt_starts(s, n, *i, quote);
        if (t <= 0) return t;
        return quoted(s, n, i, o, part);
    }
    if (c == '{' || c == '[') return container(s, n, i, o, depth, c == '{', part);
    if (c == '"') {
        size_t e;
        int r = fmt_json_span(s, n, *i, &e);
        if (r <= 0) return r;
        if (!fmt_json_valid(s + *i, e - *i, false)) return -1;
        fmt_buf_put(o, s + *i, e - *i);
        *i = e;
        return 1;
    }
    if (c == ',' || c == '}' || c == ']' || c == ':') return -1;
    return literal(s, n, i, o);
}

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    size_t i = sizeof "<|tool_call>" - 1;
    int t = fmt_starts(s, n, i, "call:");
    if (t == 0) return fmt_incomplete(n, at_eof, consumed);
    if (t < 0) return fmt_malformed_until(s, n, at_eof, i, close_tag, consumed);
    i += 5;
    size_t j = i;
    while (j < n && s[j] != '{' && j - i <= 256) j++;
    if (j - i > 256) return fmt_malformed_until(s, n, at_eof, i, close_tag, consumed);
    if (j >= n) return fmt_incomplete(n, at_eof, consumed);
    size_t name_e = j;
    while (name_e > i && fmt_is_ws(s[name_e - 1])) name_e--;
    if (!fmt_valid_name(s + i, name_e - i)) return fmt_malformed_until(s, n, at_eof, i, close_tag, consumed);
    fmt_buf args = {0};
    size_t k = j;
    int r = value(s, n, &k, &args, 0, false);
    if (r == 0) {
        fmt_buf_free(&args);
        return fmt_incomplete(n, at_eof, consumed);
    }
    if (r < 0 || args.oom || !fmt_json_valid(args.p, args.len, true)) {
        fmt_buf_free(&args);
        return fmt_malformed_until(s, n, at_eof, j, close_tag, consumed);
    }
    k = fmt_skip_ws(s, n, k);
    t = fmt_starts(s, n, k, close_tag);
    if (t != 1) {
        fmt_buf_free(&args);
        if (t == 0) return fmt_incomplete(n, at_eof, consumed);
        return fmt_malformed_until(s, n, at_eof, k, close_tag, consumed);
    }
    fmt_calls_push(out, fmt_strndup(s + i, name_e - i), args.p);
    *consumed = k + sizeof close_tag - 1;
    return FMT_OK;
}

static bool partial(const char *s, size_t n, const json_t *tools, char **name, fmt_buf *args, size_t *raw_at)
{
    size_t i = sizeof "<|tool_call>" - 1;
    if (fmt_starts(s, n, i, "call:") != 1) return false;
    i += 5;
    size_t j = i;
    while (j < n && s[j] != '{' && j - i <= 256) j++;
    if (j >= n || j - i > 256) return false;
    size_t name_e = j;
    while (name_e > i && fmt_is_ws(s[name_e - 1])) name_e--;
    if (!fmt_valid_name(s + i, name_e - i)) return false;
    *name = fmt_strndup(s + i, name_e - i);
    if (!*name) return false;
    /* what the converter has written before running out or failing is final */
    size_t k = j;
    value(s, n, &k, args, 0, true);
    return true;
}

const fmt_ops fmt_gemma4 = {markers, 1, false, scan, close_tag, NULL, partial, false, NULL, NULL, false};
