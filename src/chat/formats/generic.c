/*
 * generic.c — ember's own tool-call format for models whose chat template
 * has none (SmolLM2's, Gemma 3's, ...): the whole reply is one JSON object
 *   {"tool_calls": [{"name": "NAME", "arguments": {...}}, ...]}
 * which the server describes in a system message and enforces by grammar
 * when tool_choice is "required" or names a function (server/chat_tools.c).
 * The shape is OpenAI's tool_calls with the function object flattened, as
 * llama.cpp's former generic format wrote it.
 *
 * Owns: recognising that object at the start of the reply.
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

const fmt_ops fmt_generic = {markers, 1, true, scan, NULL, "}]", NULL, false};
