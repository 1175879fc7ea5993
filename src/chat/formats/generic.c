/*
 * generic.c — ember's own tool-call format for models whose chat template
 * has none (SmolLM2's, Gemma 3's, ...): the whole reply is one JSON object
 *   {"tool_calls": [{"name": "NAME", "arguments": {...}}, ...]}
 * or, where the model may answer instead (tool_choice "auto"),
 *   {"response": "TEXT"}
 * which the server describes in a system message and enforces by grammar
 * (server/chat_tools.c). The shape is OpenAI's tool_calls with the function
 * object flattened, as llama.cpp's former generic format
 * (common_chat_params_init_generic) wrote it, which also had "response".
 *
 * Owns: recognising that object at the start of the reply; streaming each
 * call of the list (partial, partial_next) and the response's text
 * (wrap_header; parse.c decodes the string).
 * Must not: keep state (see formats.h).
 */
#include "chat/formats/formats.h"

static const char *const markers[] = {"{\"tool_calls\""};

static fmt_result scan(const char *s, size_t n, bool at_eof, const json_t *tools, size_t *consumed,
                       fmt_calls *out)
{
    (void)tools;
    size_t e;
    int r = fmt_json_span(s, n, 0, &e);
    if (r == 0) return fmt_incomplete(n, at_eof, consumed);
    if (r < 0 || !fmt_json_valid(s, e, true)) {
        *consumed = r < 0 ? 1 : e;
        return FMT_MALFORMED;
    }
    size_t vb, ve, before = out->n;
    if (!fmt_json_member(s, 0, e, "tool_calls", &vb, &ve) || s[vb] != '[') goto fail;
    size_t j = fmt_skip_ws(s, ve, vb + 1);
    if (s[j] == ']') goto fail;                 /* an empty list calls nothing */
    for (;;) {
        size_t ee;
        if (fmt_json_span(s, ve, j, &ee) != 1 || s[j] != '{' || !fmt_object_call(s, j, ee, out)) goto fail;
        j = fmt_skip_ws(s, ve, ee);
        if (s[j] == ',') { j = fmt_skip_ws(s, ve, j + 1); continue; }
        break;
    }
    *consumed = e;
    return FMT_OK;
fail:
    fmt_calls_truncate(out, before);
    *consumed = e;
    return FMT_MALFORMED;
}

/* {"tool_calls": [ ws, the first call's header */
static bool partial(const char *s, size_t n, const json_t *tools, char **name, fmt_buf *args, size_t *raw_at)
{
    (void)tools;
    (void)args;
    size_t i = fmt_skip_ws(s, n, 1);
    if (n == 0 || s[0] != '{' || fmt_starts(s, n, i, "\"tool_calls\"") != 1) return false;
    i = fmt_skip_ws(s, n, i + sizeof "\"tool_calls\"" - 1);
    if (i >= n || s[i] != ':') return false;
    i = fmt_skip_ws(s, n, i + 1);
    if (i >= n || s[i] != '[') return false;
    return fmt_partial_json_header(s, n, fmt_skip_ws(s, n, i + 1), name, raw_at);
}

/* after a call's arguments: ws "}" ws "," ws, then the next call's header */
static bool partial_next(const char *s, size_t n, size_t at, char **name, size_t *raw_at)
{
    size_t i = fmt_skip_ws(s, n, at);
    if (i >= n || s[i] != '}') return false;
    i = fmt_skip_ws(s, n, i + 1);
    if (i >= n || s[i] != ',') return false;
    return fmt_partial_json_header(s, n, fmt_skip_ws(s, n, i + 1), name, raw_at);
}

/* {"response": " */
static int wrap_header(const char *s, size_t n, size_t *body_at)
{
    if (n == 0) return 0;
    if (s[0] != '{') return -1;
    size_t i = fmt_skip_ws(s, n, 1);
    if (i >= n) return 0;
    int t = fmt_starts(s, n, i, "\"response\"");
    if (t <= 0) return t;
    i = fmt_skip_ws(s, n, i + sizeof "\"response\"" - 1);
    if (i >= n) return 0;
    if (s[i] != ':') return -1;
    i = fmt_skip_ws(s, n, i + 1);
    if (i >= n) return 0;
    if (s[i] != '"') return -1;
    *body_at = i + 1;
    return 1;
}

const fmt_ops fmt_generic = {markers, 1, true, scan, NULL, "}]", partial, true, partial_next, wrap_header, false};
