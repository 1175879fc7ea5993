/*
 * qwen3_coder.c — Qwen3-Coder XML tool calls (also Qwen 3.5, Nemotron 3
 * Nano, Step 3.5):
 *   <tool_call>
 *   <function=NAME>
 *   <parameter=KEY>
 *   value
 *   </parameter>
 *   </function>
 *   </tool_call>
 * Source: the system prompt and assistant rendering of
 * tests/data/templates/Qwen3-Coder.jinja ('<parameter=' + name + '>\n' +
 * value + '\n</parameter>\n'), where values that are not strings are written
 * as JSON (tojson).
 *
 * Owns: converting parameters to a JSON object. One '\n' after the opening
 * and one before the closing tag are framing, not value. A parameter typed
 * "string" in the request's tool schema stays a string; otherwise a value
 * that is valid JSON is taken as JSON (numbers, booleans, objects), and
 * anything else is a string; True / False / None (Python's, as jinja2
 * renders Qwen3.5-4B.jinja's '| string') are JSON where the schema types
 * the parameter boolean / null.
 * Must not: keep state (see formats.h).
 */
#include "chat/formats/formats.h"

#include <stdlib.h>
#include <string.h>

static const char *const markers[] = {"<tool_call>"};
static const char close_tag[] = "</tool_call>";

/* the JSON-schema "type" of parameter `key` of function `name` in an
 * OpenAI tools array, or NULL */
static const char *param_type(const json_t *tools, const char *name, const char *key, size_t key_len)
{
    size_t i;
    json_t *tool;
    json_array_foreach((json_t *)tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!fname || strcmp(fname, name)) continue;
        json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
        json_t *p = json_object_getn(props, key, key_len);
        return json_string_value(json_object_get(p, "type"));
    }
    return NULL;
}

/* One <function=NAME>...</function> block at s[*i]. Returns 1 (complete;
 * *i past it), 0 (text ran out), -1 (malformed). Once the name is read,
 * *name is set (the caller frees it) and `args` holds "{" plus every
 * complete parameter so far — a prefix of the final arguments text. */
/* longest suffix of s[0..n) (after `from`) that is a proper prefix of lit */
static size_t tail_prefix(const char *s, size_t n, size_t from, const char *lit)
{
    size_t m = strlen(lit);
    for (size_t k = m - 1; k > 0; k--)
        if (n >= from + k && !memcmp(s + n - k, lit, k)) return k;
    return 0;
}

/* Qwen3.5-4B.jinja writes a scalar argument with '| string', so jinja2
 * (transformers) renders Python's True, False and None: read them as JSON
 * where the schema types the parameter boolean / null. NULL otherwise. */
static const char *python_literal(const char *type, const char *v, size_t n)
{
    if (!strcmp(type, "boolean") && n == 4 && !memcmp(v, "True", 4)) return "true";
    if (!strcmp(type, "boolean") && n == 5 && !memcmp(v, "False", 5)) return "false";
    if (!strcmp(type, "null") && n == 4 && !memcmp(v, "None", 4)) return "null";
    return NULL;
}

static int function_block(const char *s, size_t n, size_t *pi, const json_t *tools, char **name, fmt_buf *args,
                          bool part)
{
    size_t i = *pi;
    int t = fmt_starts(s, n, i, "<function=");
    if (t <= 0) return t;
    size_t nb = i + sizeof "<function=" - 1, ne = nb;
    while (ne < n && s[ne] != '>' && ne - nb <= 256) ne++;
    if (ne - nb > 256) return -1;
    if (ne >= n) return 0;
    if (!fmt_valid_name(s + nb, ne - nb)) return -1;
    *name = fmt_strndup(s + nb, ne - nb);
    if (!*name) return -1;
    fmt_buf_putc(args, '{');
    i = ne + 1;
    for (;;) {
        i = fmt_skip_ws(s, n, i);
        if (i >= n) return 0;
        t = fmt_starts(s, n, i, "</function>");
        if (t == 0) return 0;
        if (t == 1) {
            i += sizeof "</function>" - 1;
            break;
        }
        t = fmt_starts(s, n, i, "<parameter=");
        if (t <= 0) return t;
        size_t kb = i + sizeof "<parameter=" - 1, ke = kb;
        while (ke < n && s[ke] != '>' && ke - kb <= 256) ke++;
        if (ke - kb > 256) return -1;
        if (ke >= n) return 0;
        if (ke == kb || memchr(s + kb, '<', ke - kb)) return -1;
        size_t vb = ke + 1;
        /* the value ends at the first </parameter>; a </tool_call> before
         * it means the parameter was never closed (decided on the first
         * occurrences, so later text cannot change the outcome) */
        size_t ve = fmt_find(s, n, vb, "</parameter>");
        size_t vc = fmt_find(s, n, vb, close_tag);
        const char *type = tools ? param_type(tools, *name, s + kb, ke - kb) : NULL;
        if (vc < ve || ve == (size_t)-1) {
            /* Streaming: a parameter the schema types as string is final
             * text as it arrives, short of what could still be framing (a
             * last '\n', the start of a closing tag). A call that breaks
             * here keeps the text up to the stray </tool_call>. */
            if (part && type && !strcmp(type, "string") && vb < n) {
                size_t b = vb + (s[vb] == '\n'), e = vc < ve ? vc : n;
                if (vc >= ve) {
                    size_t h1 = tail_prefix(s, n, b, "</parameter>"), h2 = tail_prefix(s, n, b, close_tag);
                    e -= h1 > h2 ? h1 : h2;
                }
                if (e > b && s[e - 1] == '\n') e--;
                if (args->len > 1) fmt_buf_putc(args, ',');
                fmt_json_put_string(args, s + kb, ke - kb);
                fmt_buf_putc(args, ':');
                fmt_buf_putc(args, '"');
                if (e > b) fmt_json_put_string_body(args, s + b, e - b);
            }
            return vc < ve ? -1 : 0;
        }
        i = ve + sizeof "</parameter>" - 1;
        if (vb < ve && s[vb] == '\n') vb++;
        if (ve > vb && s[ve - 1] == '\n') ve--;
        fmt_buf item = {0};
        if (args->len > 1) fmt_buf_putc(&item, ',');
        fmt_json_put_string(&item, s + kb, ke - kb);
        fmt_buf_putc(&item, ':');
        size_t tb = fmt_skip_ws(s, ve, vb), te = ve;
        while (te > tb && fmt_is_ws(s[te - 1])) te--;
        const char *lit = type ? python_literal(type, s + tb, te - tb) : NULL;
        if (lit)
            fmt_buf_puts(&item, lit);
        else if ((!type || strcmp(type, "string")) && te > tb && fmt_json_valid(s + tb, te - tb, false))
            fmt_buf_put(&item, s + tb, te - tb);
        else
            fmt_json_put_string(&item, s + vb, ve - vb);
        /* a parameter joins the arguments only whole and valid (UTF-8) */
        fmt_buf probe = {0};
        fmt_buf_putc(&probe, '{');
        fmt_buf_put(&probe, item.p + (args->len > 1), item.len - (args->len > 1));
        fmt_buf_putc(&probe, '}');
        bool ok = !item.oom && !probe.oom && fmt_json_valid(probe.p, probe.len, true);
        /* written even when invalid: a streamed call that breaks here is
         * closed where the JSON checker stops, as it was streamed */
        if (ok || part) fmt_buf_put(args, item.p, item.len);
        fmt_buf_free(&item);
        fmt_buf_free(&probe);
        if (!ok) return -1;
    }
    fmt_buf_putc(args, '}');
    if (args->oom) return -1;
    *pi = i;
    return 1;
}

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    size_t before = out->n;
    size_t i = sizeof "<tool_call>" - 1;
    for (;;) {
        i = fmt_skip_ws(s, n, i);
        if (i >= n) goto incomplete;
        int t = fmt_starts(s, n, i, close_tag);
        if (t == 0) goto incomplete;
        if (t == 1 && out->n > before) {
            *consumed = i + sizeof close_tag - 1;
            return FMT_OK;
        }
        char *name = NULL;
        fmt_buf args = {0};
        int r = function_block(s, n, &i, tools, &name, &args, false);
        if (r == 1) {
            fmt_calls_push(out, name, args.p);
            continue;
        }
        free(name);
        fmt_buf_free(&args);
        if (r == 0) goto incomplete;
        goto malformed;
    }
incomplete:
    fmt_calls_truncate(out, before);
    return fmt_incomplete(n, at_eof, consumed);
malformed:
    fmt_calls_truncate(out, before);
    return fmt_malformed_until(s, n, at_eof, sizeof "<tool_call>" - 1, close_tag, consumed);
}

static bool partial(const char *s, size_t n, const json_t *tools, char **name, fmt_buf *args, size_t *raw_at)
{
    size_t i = fmt_skip_ws(s, n, sizeof "<tool_call>" - 1);
    *name = NULL;
    function_block(s, n, &i, tools, name, args, true);
    return *name != NULL;
}

const fmt_ops fmt_qwen3_coder = {markers, 1, false, scan, close_tag, NULL, partial, false, NULL, NULL, true};
