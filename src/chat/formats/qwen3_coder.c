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
 * anything else is a string.
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

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    size_t before = out->n;
    size_t i = sizeof "<tool_call>" - 1;
    fmt_result res;
    for (;;) {
        i = fmt_skip_ws(s, n, i);
        if (i >= n) goto incomplete;
        int t = fmt_starts(s, n, i, close_tag);
        if (t == 0) goto incomplete;
        if (t == 1 && out->n > before) {
            *consumed = i + sizeof close_tag - 1;
            return FMT_OK;
        }
        t = fmt_starts(s, n, i, "<function=");
        if (t == 0) goto incomplete;
        if (t < 0) goto malformed;
        size_t nb = i + sizeof "<function=" - 1, ne = nb;
        while (ne < n && s[ne] != '>' && ne - nb <= 256) ne++;
        if (ne - nb > 256) goto malformed;
        if (ne >= n) goto incomplete;
        if (!fmt_valid_name(s + nb, ne - nb)) goto malformed;
        char *name = fmt_strndup(s + nb, ne - nb);
        if (!name) goto malformed;
        fmt_buf args = {0};
        fmt_buf_putc(&args, '{');
        i = ne + 1;
        for (;;) {
            i = fmt_skip_ws(s, n, i);
            if (i >= n) goto incomplete_fn;
            t = fmt_starts(s, n, i, "</function>");
            if (t == 0) goto incomplete_fn;
            if (t == 1) {
                i += sizeof "</function>" - 1;
                break;
            }
            t = fmt_starts(s, n, i, "<parameter=");
            if (t == 0) goto incomplete_fn;
            if (t < 0) goto malformed_fn;
            size_t kb = i + sizeof "<parameter=" - 1, ke = kb;
            while (ke < n && s[ke] != '>' && ke - kb <= 256) ke++;
            if (ke - kb > 256) goto malformed_fn;
            if (ke >= n) goto incomplete_fn;
            if (ke == kb || memchr(s + kb, '<', ke - kb)) goto malformed_fn;
            size_t vb = ke + 1;
            /* the value ends at the first </parameter>; a </tool_call> before
             * it means the parameter was never closed (decided on the first
             * occurrences, so later text cannot change the outcome) */
            size_t ve = fmt_find(s, n, vb, "</parameter>");
            size_t vc = fmt_find(s, n, vb, close_tag);
            if (vc < ve) goto malformed_fn;
            if (ve == (size_t)-1) goto incomplete_fn;
            i = ve + sizeof "</parameter>" - 1;
            if (vb < ve && s[vb] == '\n') vb++;
            if (ve > vb && s[ve - 1] == '\n') ve--;
            if (args.len > 1) fmt_buf_putc(&args, ',');
            fmt_json_put_string(&args, s + kb, ke - kb);
            fmt_buf_putc(&args, ':');
            const char *type = tools ? param_type(tools, name, s + kb, ke - kb) : NULL;
            size_t tb = fmt_skip_ws(s, ve, vb), te = ve;
            while (te > tb && fmt_is_ws(s[te - 1])) te--;
            if ((!type || strcmp(type, "string")) && te > tb && fmt_json_valid(s + tb, te - tb, false))
                fmt_buf_put(&args, s + tb, te - tb);
            else
                fmt_json_put_string(&args, s + vb, ve - vb);
        }
        fmt_buf_putc(&args, '}');
        if (args.oom || !fmt_json_valid(args.p, args.len, true)) {
            fmt_buf_free(&args);
            free(name);
            goto malformed;
        }
        fmt_calls_push(out, name, args.p);
        continue;
    incomplete_fn:
        fmt_buf_free(&args);
        free(name);
        goto incomplete;
    malformed_fn:
        fmt_buf_free(&args);
        free(name);
        goto malformed;
    }
incomplete:
    fmt_calls_truncate(out, before);
    return fmt_incomplete(n, at_eof, consumed);
malformed:
    fmt_calls_truncate(out, before);
    res = fmt_malformed_until(s, n, at_eof, sizeof "<tool_call>" - 1, close_tag, consumed);
    return res;
}

const fmt_ops fmt_qwen3_coder = {markers, 1, false, scan, close_tag, NULL};
