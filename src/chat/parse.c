/*
 * parse.c — the incremental output parser (see parse.h for the contract):
 * reasoning blocks, content, and the hand-off of tool-call regions to the
 * per-format scanners in src/chat/formats/.
 *
 * Owns: the mode machine START -> REASONING -> CONTENT <-> TOOL, holding
 * back undecided bytes (a possible tag prefix, a partial UTF-8 sequence,
 * trailing whitespace), OpenAI-style tool-call ids, format detection from a
 * template's text, and the reasoning-budget rule.
 * Must not: emit anything that later text could change — every event is
 * final, which is what makes streamed and whole parses agree.
 */
#include "chat/parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "chat/formats/formats.h"

/* M_WRAP: inside the JSON string of a content wrapper (fmt_ops.wrap_header,
 * generic's {"response": "..."}), decoded into content as it streams;
 * M_WRAP_END: after its closing quote, where the object's '}' is dropped */
enum mode { M_START, M_REASONING, M_CONTENT, M_TOOL, M_WRAP, M_WRAP_END };

typedef struct parsed_call {
    char id[32];
    char *name;
    char *arguments;
} parsed_call;

struct ember_chat_parser {
    ember_chat_parser_config cfg;
    const fmt_ops *fmt;            /* NULL: no tool calls */
    const char *r_open, *r_close;  /* NULL: no reasoning syntax */
    enum mode mode;
    bool r_open_checked;           /* a repeated open tag at the start of a forced-open thought was looked for */
    bool finished;
    bool cut;                      /* finished by ember_chat_parser_finish_cut */
    bool oom;
    fmt_buf in;                    /* bytes fed and not yet decided */
    fmt_buf ws_content, ws_reasoning;  /* whitespace held until text follows */
    fmt_buf content, reasoning;    /* final texts */
    parsed_call *calls;
    size_t n_calls, cap_calls;
    fmt_calls scratch;
    size_t tool_scanned;           /* region bytes at the last undecided scan (0: none yet) */
    size_t tool_checked;           /* region bytes already looked at for a reason to scan again */
    bool tool_trigger;             /* a trigger byte arrived since the last undecided scan */
    /* stream_arguments: the call announced from the current region */
    bool ann;                      /* a call was announced and is not finished */
    size_t ann_index;              /* its index in calls[] */
    fmt_buf ann_args;              /* arguments text sent so far */
    fmt_jtrack jt;                 /* JSON checker over the produced arguments text */
    size_t region_calls;           /* calls announced from the current region (fmt_ops.partial_next) */
    size_t ann_raw_at;             /* region offset of the announced call's arguments (raw formats) */
    size_t partial_at;             /* region bytes at the last look for progress (0: none) */
    uint64_t rng;
};

/* ---------------------------------------------------------------- names */

static const char *const tool_names[EMBER_TOOL_FORMAT_COUNT] = {
    "none", "hermes", "qwen3_coder", "gemma4", "llama3", "mistral", "generic"};
static const char *const reasoning_names[EMBER_REASONING_COUNT] = {"none", "think", "gemma4", "mistral"};

const char *ember_tool_format_name(ember_tool_format f)
{
    return (unsigned)f < EMBER_TOOL_FORMAT_COUNT ? tool_names[f] : "?";
}

const char *ember_reasoning_syntax_name(ember_reasoning_syntax r)
{
    return (unsigned)r < EMBER_REASONING_COUNT ? reasoning_names[r] : "?";
}

bool ember_tool_format_from_name(const char *name, ember_tool_format *out)
{
    for (int i = 0; name && i < EMBER_TOOL_FORMAT_COUNT; i++)
        if (!strcmp(name, tool_names[i])) { *out = (ember_tool_format)i; return true; }
    return false;
}

bool ember_reasoning_syntax_from_name(const char *name, ember_reasoning_syntax *out)
{
    for (int i = 0; name && i < EMBER_REASONING_COUNT; i++)
        if (!strcmp(name, reasoning_names[i])) { *out = (ember_reasoning_syntax)i; return true; }
    return false;
}

static const fmt_ops *format_ops(ember_tool_format f)
{
    switch (f) {
    case EMBER_TOOL_FORMAT_HERMES: return &fmt_hermes;
    case EMBER_TOOL_FORMAT_QWEN3_CODER: return &fmt_qwen3_coder;
    case EMBER_TOOL_FORMAT_GEMMA4: return &fmt_gemma4;
    case EMBER_TOOL_FORMAT_LLAMA3: return &fmt_llama3;
    case EMBER_TOOL_FORMAT_MISTRAL: return &fmt_mistral;
    case EMBER_TOOL_FORMAT_GENERIC: return &fmt_generic;
    default: return NULL;
    }
}

static void reasoning_tags(ember_reasoning_syntax r, const char **open, const char **close)
{
    switch (r) {
    case EMBER_REASONING_THINK: *open = "<think>"; *close = "</think>"; break;
    case EMBER_REASONING_GEMMA4: *open = "<|channel>thought"; *close = "<channel|>"; break;
    case EMBER_REASONING_MISTRAL: *open = "[THINK]"; *close = "[/THINK]"; break;
    default: *open = *close = NULL;
    }
}

/* ------------------------------------------------------------ detection */

void ember_chat_detect_format(const char *t, ember_tool_format *tool, ember_reasoning_syntax *reasoning)
{
    ember_tool_format f = EMBER_TOOL_FORMAT_NONE;
    ember_reasoning_syntax r = EMBER_REASONING_NONE;
    if (t) {
        bool tc = strstr(t, "<tool_call>") != NULL;
        if (strstr(t, "<|tool_call>"))
            f = EMBER_TOOL_FORMAT_GEMMA4;
        else if (tc && strstr(t, "<function=") && strstr(t, "<parameter="))
            f = EMBER_TOOL_FORMAT_QWEN3_CODER;
        else if (strstr(t, "[TOOL_CALLS]"))
            f = EMBER_TOOL_FORMAT_MISTRAL;
        else if (tc && (strstr(t, "{\"name\"") || strstr(t, "{\\\"name\\\"")) && !strstr(t, "<arg_key>") &&
                 !strstr(t, "<tool_calls>"))
            f = EMBER_TOOL_FORMAT_HERMES;
        else if (strstr(t, "<|python_tag|>") || (strstr(t, "ipython") && strstr(t, "<|start_header_id|>")))
            f = EMBER_TOOL_FORMAT_LLAMA3;

        if (strstr(t, "<|channel>"))
            r = EMBER_REASONING_GEMMA4;
        else if (strstr(t, "<think>"))
            r = EMBER_REASONING_THINK;
        else if (strstr(t, "[THINK]"))
            r = EMBER_REASONING_MISTRAL;
    }
    if (tool) *tool = f;
    if (reasoning) *reasoning = r;
}

static size_t rfind(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (n < m) return (size_t)-1;
    for (size_t i = n - m + 1; i-- > 0;)
        if (s[i] == lit[0] && !memcmp(s + i, lit, m)) return i;
    return (size_t)-1;
}

bool ember_chat_prompt_opens_reasoning(const char *prompt, size_t len, ember_reasoning_syntax r)
{
    const char *open, *close;
    reasoning_tags(r, &open, &close);
    if (!open || !prompt) return false;
    size_t o = rfind(prompt, len, open);
    if (o == (size_t)-1) return false;
    size_t c = rfind(prompt, len, close);
    if (c != (size_t)-1 && c > o) return false;
    return fmt_skip_ws(prompt, len, o + strlen(open)) == len;
}

/* ------------------------------------------------------------------ ids */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* "call_" + 24 characters of [A-Za-z0-9], as OpenAI's ids look */
static void make_id(ember_chat_parser *p, char out[32])
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) out[5 + i] = alnum[splitmix64(&p->rng) % 62];
    out[29] = '\0';
}

/* ----------------------------------------------------------- emission */

static void mark_oom(ember_chat_parser *p, const fmt_buf *b)
{
    if (b->oom) p->oom = true;
}

/* Length of a prefix of s[0..n) that ends on a UTF-8 character boundary
 * (a trailing lead byte whose continuation bytes have not arrived is cut). */
static size_t utf8_cut(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        if (c < 0xC0) return n;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        return need > k ? n - k : n;
    }
    return n;
}

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid (RFC 3629:
 * no overlongs, no surrogates, at most U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* Append s[0..n) to `to` with invalid bytes replaced by U+FFFD, deliver it
 * as one event of `kind`. */
static void deliver(ember_chat_parser *p, ember_chat_event_kind kind, fmt_buf *to, const char *s, size_t n)
{
    if (n == 0) return;
    size_t start = to->len;
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (l) { i += l; run += l; continue; }
        fmt_buf_put(to, s + i - run, run);
        fmt_buf_put(to, "\xEF\xBF\xBD", 3);
        run = 0;
        i++;
    }
    fmt_buf_put(to, s + n - run, run);
    mark_oom(p, to);
    if (p->oom || !p->cfg.on_event) return;
    ember_chat_event ev = {.kind = kind, .text = to->p + start, .len = to->len - start, .tool_index = -1};
    p->cfg.on_event(p->cfg.user, &ev);
}

/* Text for content or reasoning: trimmed at both ends of the whole text,
 * so leading whitespace is dropped while nothing was emitted yet and
 * trailing whitespace waits in `ws` until more text follows. */
static void emit_text(ember_chat_parser *p, ember_chat_event_kind kind, fmt_buf *to, fmt_buf *ws,
                      const char *s, size_t n)
{
    size_t first = 0, last = n;
    while (first < n && fmt_is_ws(s[first])) first++;
    if (first == n) {
        if (to->len) fmt_buf_put(ws, s, n);
        mark_oom(p, ws);
        return;
    }
    while (last > first && fmt_is_ws(s[last - 1])) last--;
    if (to->len) {
        fmt_buf_put(ws, s, last);
        mark_oom(p, ws);
        if (!p->oom) deliver(p, kind, to, ws->p, ws->len);
    } else {
        deliver(p, kind, to, s + first, last - first);
    }
    ws->len = 0;
    fmt_buf_put(ws, s + last, n - last);
    mark_oom(p, ws);
}

static void emit_content(ember_chat_parser *p, const char *s, size_t n)
{
    emit_text(p, EMBER_CHAT_EV_CONTENT, &p->content, &p->ws_content, s, n);
}

static void emit_reasoning(ember_chat_parser *p, const char *s, size_t n)
{
    emit_text(p, EMBER_CHAT_EV_REASONING, &p->reasoning, &p->ws_reasoning, s, n);
}

static void send(ember_chat_parser *p, ember_chat_event_kind kind, size_t idx, const char *text, size_t len)
{
    if (p->oom || !p->cfg.on_event) return;
    parsed_call *c = &p->calls[idx];
    ember_chat_event ev = {.kind = kind, .tool_index = (int)idx, .text = text, .len = len};
    if (kind == EMBER_CHAT_EV_TOOL_START) {
        ev.id = c->id;
        ev.name = c->name;
    }
    p->cfg.on_event(p->cfg.user, &ev);
}

/* append a call (taking name, and arguments which may be NULL while it
 * streams); returns its index or -1 */
static long add_call(ember_chat_parser *p, char *name, char *arguments)
{
    if (p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? p->cap_calls * 2 : 4;
        parsed_call *v = realloc(p->calls, cap * sizeof *v);
        if (!v) {
            p->oom = true;
            free(name);
            free(arguments);
            return -1;
        }
        p->calls = v;
        p->cap_calls = cap;
    }
    parsed_call *c = &p->calls[p->n_calls];
    make_id(p, c->id);
    c->name = name;
    c->arguments = arguments;
    return (long)p->n_calls++;
}

/* the calls a scan found; the first completes an announced call */
static void emit_calls(ember_chat_parser *p)
{
    /* calls of this region that streaming already finished (partial_next) */
    size_t done = p->region_calls - (p->ann ? 1 : 0);
    for (size_t i = 0; i < p->scratch.n && !p->oom; i++) {
        char *name = p->scratch.v[i].name, *args = p->scratch.v[i].arguments;
        p->scratch.v[i].name = p->scratch.v[i].arguments = NULL;
        if (i < done) {   /* sent in full: its arguments are the same raw slice */
            free(name);
            free(args);
            continue;
        }
        if (i == done && p->ann) {
            parsed_call *c = &p->calls[p->ann_index];
            size_t al = strlen(args);
            free(name);
            c->arguments = args;
            /* the sent text is a prefix of the final arguments by construction */
            size_t sent = p->ann_args.len <= al && !memcmp(args, p->ann_args.p, p->ann_args.len) ? p->ann_args.len : al;
            if (al > sent) send(p, EMBER_CHAT_EV_TOOL_ARGS, p->ann_index, args + sent, al - sent);
            send(p, EMBER_CHAT_EV_TOOL_END, p->ann_index, NULL, 0);
            p->ann = false;
            continue;
        }
        long idx = add_call(p, name, args);
        if (idx < 0) break;
        send(p, EMBER_CHAT_EV_TOOL_START, (size_t)idx, NULL, 0);
        send(p, EMBER_CHAT_EV_TOOL_ARGS, (size_t)idx, args, strlen(args));
        send(p, EMBER_CHAT_EV_TOOL_END, (size_t)idx, NULL, 0);
    }
    fmt_calls_truncate(&p->scratch, 0);
}

/* announce a call of the current region (its arguments follow) */
static bool announce(ember_chat_parser *p, char *name)
{
    long idx = add_call(p, name, NULL);
    if (idx < 0) return false;
    p->ann = true;
    p->ann_index = (size_t)idx;
    p->ann_args.len = 0;
    memset(&p->jt, 0, sizeof p->jt);
    p->region_calls++;
    send(p, EMBER_CHAT_EV_TOOL_START, (size_t)idx, NULL, 0);
    return true;
}

/* the announced call's arguments text so far is text[0..len): send what
 * the checker says is final */
static void feed_announced(ember_chat_parser *p, const char *text, size_t len)
{
    if (!p->ann || p->oom || len <= p->jt.pos) return;
    size_t sent = p->ann_args.len;
    fmt_jtrack_feed(&p->jt, text + p->jt.pos, len - p->jt.pos);
    if (p->jt.ok_len > sent) {
        fmt_buf_put(&p->ann_args, text + sent, p->jt.ok_len - sent);
        mark_oom(p, &p->ann_args);
        send(p, EMBER_CHAT_EV_TOOL_ARGS, p->ann_index, text + sent, p->jt.ok_len - sent);
    }
}

/* stream_arguments: look at the region s[0..n); announce its call when the
 * header is decided and send what the checker says is final; with
 * partial_next, once a call's arguments object is complete, announce the
 * next call of the region when its header is decided (the finished one is
 * closed then). Returns whether a call of the region was announced. */
static bool stream_progress(ember_chat_parser *p, const char *s, size_t n)
{
    p->partial_at = n;
    if (p->region_calls <= 1) {
        char *name = NULL;
        fmt_buf args = {0};
        size_t raw_at = (size_t)-1;
        bool hdr = p->fmt->partial(s, n, p->cfg.tools, &name, &args, &raw_at);
        if (args.oom) p->oom = true;
        const char *text = args.p;
        size_t len = args.len;
        if (raw_at != (size_t)-1) {
            text = s + raw_at;
            len = n - raw_at;
        }
        if (hdr && !p->oom) {
            if (p->region_calls == 0) {
                announce(p, name);
                name = NULL;
                p->ann_raw_at = raw_at;
            }
            feed_announced(p, text, len);
        }
        free(name);
        fmt_buf_free(&args);
    } else {
        feed_announced(p, s + p->ann_raw_at, n - p->ann_raw_at);
    }
    while (p->ann && !p->oom && p->fmt->partial_next && p->ann_raw_at != (size_t)-1 && fmt_jtrack_done(&p->jt)) {
        char *name = NULL;
        size_t raw_at = 0;
        if (!p->fmt->partial_next(s, n, p->ann_raw_at + p->jt.pos, &name, &raw_at)) break;
        /* the announced call is complete: its arguments are all sent */
        p->calls[p->ann_index].arguments = fmt_strndup(p->ann_args.p ? p->ann_args.p : "", p->ann_args.len);
        if (!p->calls[p->ann_index].arguments) { p->oom = true; free(name); break; }
        send(p, EMBER_CHAT_EV_TOOL_END, p->ann_index, NULL, 0);
        p->ann = false;
        if (!announce(p, name)) break;
        p->ann_raw_at = raw_at;
        feed_announced(p, s + raw_at, n - raw_at);
    }
    return p->region_calls > 0;
}

/* stream_arguments: the announced call's region turned out malformed;
 * close its arguments at the last closable point. */
static void close_broken_call(ember_chat_parser *p, const char *s, size_t n)
{
    stream_progress(p, s, n);
    if (!p->ann || p->oom) return;
    fmt_buf tail = {0};
    fmt_jtrack_closers(&p->jt, &tail);
    fmt_buf_put(&p->ann_args, tail.p, tail.len);
    mark_oom(p, &tail);
    mark_oom(p, &p->ann_args);
    if (!p->oom) {
        if (tail.len) send(p, EMBER_CHAT_EV_TOOL_ARGS, p->ann_index, tail.p, tail.len);
        p->calls[p->ann_index].arguments = fmt_strndup(p->ann_args.p, p->ann_args.len);
        if (!p->calls[p->ann_index].arguments) p->oom = true;
        send(p, EMBER_CHAT_EV_TOOL_END, p->ann_index, NULL, 0);
    }
    fmt_buf_free(&tail);
    p->ann = false;
}

/* ------------------------------------------------------------ machine */

static bool hex4(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return true;
}

static void put_utf8(fmt_buf *b, uint32_t cp)
{
    char u[4];
    size_t k;
    if (cp < 0x80) { u[0] = (char)cp; k = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); k = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | (cp >> 6 & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); k = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); k = 4;
    }
    fmt_buf_put(b, u, k);
}

/* One JSON string escape at s[0] == '\\' (RFC 8259 section 7) appended to
 * `out` as UTF-8. Returns 1 and *used, 0 when the text ends before it is
 * decided, -1 when it is no escape. A surrogate that is not half of a pair
 * becomes U+FFFD. */
static int json_escape(const char *s, size_t n, fmt_buf *out, size_t *used)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (n < 2) return 0;
    const char *q = s[1] ? strchr(from, s[1]) : NULL;
    if (q) {
        fmt_buf_putc(out, to[q - from]);
        *used = 2;
        return 1;
    }
    if (s[1] != 'u') return -1;
    if (n < 6) {
        for (size_t i = 2; i < n; i++) if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i]) return -1;
        return 0;
    }
    uint32_t cp, lo;
    if (!hex4(s + 2, &cp)) return -1;
    *used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        /* a high surrogate: a low one may follow as \uDC00..\uDFFF */
        static const char pat[] = "\\u";
        bool may = true;
        for (size_t i = 6; i < n && i < 8 && may; i++) may = s[i] == pat[i - 6];
        for (size_t i = 8; i < n && i < 12 && may; i++) may = s[i] && strchr("0123456789abcdefABCDEF", s[i]);
        if (may && n < 12) return 0;
        if (may && hex4(s + 8, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            *used = 12;
        } else {
            cp = 0xFFFD;
        }
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        cp = 0xFFFD;
    }
    put_utf8(out, cp);
    return 1;
}

/* largest k < strlen(lit) with s[n-k..n) == lit[0..k) */
static size_t partial_suffix(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, lit, k)) return k;
    return 0;
}

/* Whether a call region that was undecided when it had `scanned` bytes,
 * whose bytes up to `*checked` were already looked at, and that now has
 * `n` bytes may have become decidable (see fmt_ops.close / triggers). */
static bool rescan_due(const fmt_ops *f, const char *s, size_t n, size_t scanned, size_t *checked, bool *trigger)
{
    size_t from = *checked;
    *checked = n;
    if (n >= 2 * scanned) return true;
    if (f->close) {
        size_t m = strlen(f->close);
        return fmt_find(s, n, from >= m ? from - m + 1 : 0, f->close) != (size_t)-1;
    }
    if (!f->triggers) return true;
    for (size_t i = from ? from - 1 : 0; i < n && !*trigger; i++)
        if (s[i] && strchr(f->triggers, s[i])) *trigger = true;
    /* Trigger bytes can be common inside an undecided region (brackets in
     * code a model writes after a marker): scanning on each would cost
     * quadratic time (found by fuzz_parse). A pending trigger waits until the
     * region has grown by 1/8 (at least 16 bytes) since the last scan, so
     * scans stay linear overall; the end of output always scans. */
    size_t step = scanned / 8 > 16 ? scanned / 8 : 16;
    return *trigger && n >= scanned + step;
}

/* Decide as much of the pending input as can be decided. */
static void run(ember_chat_parser *p, bool eof)
{
    size_t pos = 0;
    if (!p->in.p) fmt_buf_put(&p->in, "", 0);   /* finish without any feed */
    mark_oom(p, &p->in);
    while (!p->oom) {
        const char *s = p->in.p + pos;
        size_t n = p->in.len - pos;
        if (p->mode == M_START) {
            size_t i = fmt_skip_ws(s, n, 0);
            pos += i;
            int t = i < n ? fmt_starts(s, n, i, p->r_open) : 0;
            if (t == 0 && !eof) break;
            if (t == 1) {
                pos += strlen(p->r_open);
                p->mode = M_REASONING;
                p->r_open_checked = true;
            } else {
                p->mode = M_CONTENT;
            }
        } else if (p->mode == M_REASONING) {
            if (!p->r_open_checked) {
                /* the prompt opened the thought; a model may still repeat the tag */
                size_t i = fmt_skip_ws(s, n, 0);
                pos += i;
                int t = i < n ? fmt_starts(s, n, i, p->r_open) : 0;
                if (t == 0 && !eof) break;
                if (t == 1) pos += strlen(p->r_open);
                p->r_open_checked = true;
                continue;
            }
            size_t f = fmt_find(s, n, 0, p->r_close), hold = partial_suffix(s, n, p->r_close);
            bool at_call = false;   /* the thought ends where a call begins (fmt_ops.markers_end_reasoning) */
            for (size_t m = 0; p->fmt && p->fmt->markers_end_reasoning && m < p->fmt->n_markers; m++) {
                size_t g = fmt_find(s, n, 0, p->fmt->markers[m]), h = partial_suffix(s, n, p->fmt->markers[m]);
                if (g < f) { f = g; at_call = true; }
                if (h > hold) hold = h;
            }
            if (f != (size_t)-1) {
                emit_reasoning(p, s, f);
                p->ws_reasoning.len = 0;
                pos += f + (at_call ? 0 : strlen(p->r_close));
                p->mode = M_CONTENT;
                continue;
            }
            size_t k = eof ? n : utf8_cut(s, n - hold);
            emit_reasoning(p, s, k);
            pos += k;
            break;
        } else if (p->mode == M_CONTENT) {
            size_t best = (size_t)-1, hold = 0;
            if (p->fmt) {
                if (p->fmt->bare_json && p->content.len == 0) {
                    size_t i = fmt_skip_ws(s, n, 0);
                    if (i < n && s[i] == '{') best = i;
                }
                for (size_t m = 0; m < p->fmt->n_markers; m++) {
                    size_t f = fmt_find(s, n, 0, p->fmt->markers[m]);
                    if (f < best) best = f;
                    size_t h = partial_suffix(s, n, p->fmt->markers[m]);
                    if (h > hold) hold = h;
                }
            }
            if (best != (size_t)-1) {
                emit_content(p, s, best);
                pos += best;
                p->mode = M_TOOL;
                continue;
            }
            /* cut output: a partial call marker at the very end is markup, not content */
            size_t k = eof ? n - (p->cut ? hold : 0) : utf8_cut(s, n - hold);
            emit_content(p, s, k);
            pos += eof ? n : k;
            break;
        } else if (p->mode == M_WRAP) {
            /* the wrapper's string, decoded: escapes whole, UTF-8 whole */
            fmt_buf out = {0};
            size_t i = 0;
            int r = 1;
            while (i < n && s[i] != '"') {
                if (s[i] != '\\') {
                    fmt_buf_putc(&out, s[i++]);
                    continue;
                }
                size_t used = 0;
                if ((r = json_escape(s + i, n - i, &out, &used)) <= 0) break;
                i += used;
            }
            bool closed = i < n && s[i] == '"';
            if (!closed && r >= 0 && !eof) {   /* hold back a character still arriving (raw bytes at the tail) */
                size_t k = utf8_cut(out.p, out.len);
                i -= out.len - k;
                out.len = k;
            }
            mark_oom(p, &out);
            if (out.len && !p->oom) emit_content(p, out.p, out.len);
            fmt_buf_free(&out);
            pos += i;
            if (closed) {
                pos++;
                p->mode = M_WRAP_END;
                continue;
            }
            if (r < 0) {                        /* not JSON any more: the rest is content */
                p->mode = M_CONTENT;
                continue;
            }
            if (eof) {                          /* cut inside the string: what was decoded is the reply */
                pos += n - i;
                p->mode = M_CONTENT;
                continue;
            }
            break;
        } else if (p->mode == M_WRAP_END) {
            size_t i = fmt_skip_ws(s, n, 0);
            if (i >= n && !eof) break;
            pos += i < n && s[i] == '}' ? i + 1 : i;
            p->mode = M_CONTENT;
        } else { /* M_TOOL */
            if (p->fmt->wrap_header && p->region_calls == 0) {
                size_t body = 0;
                int w = p->fmt->wrap_header(s, n, &body);
                if (w == 0 && !eof) break;
                if (w == 1) {
                    p->ws_content.len = 0;
                    pos += body;
                    p->mode = M_WRAP;
                    continue;
                }
            }
            bool stream = p->cfg.stream_arguments && p->fmt->partial;
            if (!eof && p->tool_scanned && !rescan_due(p->fmt, s, n, p->tool_scanned, &p->tool_checked, &p->tool_trigger)) {
                /* no decision yet; maybe progress: on every feed for raw JSON
                 * arguments, else when the region grew by 1/8 (at least 16
                 * bytes), which keeps re-conversion linear overall */
                size_t step = p->fmt->raw_arguments ? 1 : p->partial_at / 8 > 16 ? p->partial_at / 8 : 16;
                if (stream && n >= p->partial_at + step) stream_progress(p, s, n);
                break;
            }
            /* the header is looked at before any decision, so whether the
             * region is a call never depends on how the text was cut */
            bool hdr = stream && stream_progress(p, s, n);
            size_t consumed = 0;
            fmt_result r = p->fmt->scan(s, n, eof, p->cfg.tools, &consumed, &p->scratch);
            if (p->scratch.oom) { p->oom = true; break; }
            if (r == FMT_NEED_MORE) {
                if (!eof) {
                    p->tool_scanned = p->tool_checked = n;
                    p->tool_trigger = false;
                    break;
                }
                r = FMT_MALFORMED;          /* scanners do not do this; be safe */
                consumed = n;
            }
            if (consumed == 0 || consumed > n) consumed = n ? 1 : 0;   /* guard our own invariant */
            if (r == FMT_OK) {
                p->ws_content.len = 0;
                emit_calls(p);
            } else if (hdr) {
                fmt_calls_truncate(&p->scratch, 0);
                p->ws_content.len = 0;
                close_broken_call(p, s, n);
            } else {
                fmt_calls_truncate(&p->scratch, 0);
                /* cut output: a call that runs to the end was cut, its markup is no content */
                if (!(eof && p->cut && consumed == n)) emit_content(p, s, consumed);
                else p->ws_content.len = 0;
            }
            pos += consumed;
            p->mode = M_CONTENT;
            p->tool_scanned = 0;
            p->tool_trigger = false;
            p->partial_at = 0;
            p->region_calls = 0;
            if (n == 0) break;
        }
    }
    if (pos) {
        memmove(p->in.p, p->in.p + pos, p->in.len - pos);
        p->in.len -= pos;
    }
}

/* ---------------------------------------------------------------- API */

ember_status ember_chat_parser_new(const ember_chat_parser_config *cfg, ember_chat_parser **out)
{
    if (!cfg || !out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_parser_new: NULL argument");
    *out = NULL;
    if ((unsigned)cfg->tool_format >= EMBER_TOOL_FORMAT_COUNT)
        return ember_error(EMBER_ERR_INVALID_ARG, "chat parser: tool_format %d out of range", (int)cfg->tool_format);
    if ((unsigned)cfg->reasoning >= EMBER_REASONING_COUNT)
        return ember_error(EMBER_ERR_INVALID_ARG, "chat parser: reasoning %d out of range", (int)cfg->reasoning);
    ember_chat_parser *p = calloc(1, sizeof *p);
    if (!p) return ember_error(EMBER_ERR_NOMEM, "chat parser: out of memory");
    p->cfg = *cfg;
    p->fmt = format_ops(cfg->tool_format);
    reasoning_tags(cfg->reasoning, &p->r_open, &p->r_close);
    if (!p->r_open) p->mode = M_CONTENT;
    else p->mode = cfg->reasoning_open_at_start ? M_REASONING : M_START;
    p->rng = cfg->id_seed ? cfg->id_seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)p ^ (uint64_t)clock();
    *out = p;
    return EMBER_OK;
}

void ember_chat_parser_free(ember_chat_parser *p)
{
    if (!p) return;
    fmt_buf_free(&p->in);
    fmt_buf_free(&p->ws_content);
    fmt_buf_free(&p->ws_reasoning);
    fmt_buf_free(&p->content);
    fmt_buf_free(&p->reasoning);
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    fmt_calls_clear(&p->scratch);
    fmt_buf_free(&p->ann_args);
    free(p);
}

ember_status ember_chat_parser_feed(ember_chat_parser *p, const char *text, size_t len)
{
    if (!p || (!text && len)) return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_parser_feed: NULL argument");
    if (p->finished) return ember_error(EMBER_ERR_INVALID_ARG, "chat parser: fed after finish");
    if (p->oom) return ember_error(EMBER_ERR_NOMEM, "chat parser: out of memory");
    fmt_buf_put(&p->in, text, len);
    mark_oom(p, &p->in);
    if (!p->oom) run(p, false);
    if (p->oom) return ember_error(EMBER_ERR_NOMEM, "chat parser: out of memory");
    return EMBER_OK;
}

ember_status ember_chat_parser_finish(ember_chat_parser *p)
{
    if (!p) return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_parser_finish: NULL argument");
    if (p->finished) return EMBER_OK;
    p->finished = true;
    if (!p->oom) run(p, true);
    if (p->oom) return ember_error(EMBER_ERR_NOMEM, "chat parser: out of memory");
    return EMBER_OK;
}

ember_status ember_chat_parser_finish_cut(ember_chat_parser *p)
{
    if (p && !p->finished) p->cut = true;
    return ember_chat_parser_finish(p);
}

bool ember_chat_parser_in_reasoning(const ember_chat_parser *p)
{
    return p && p->mode == M_REASONING && !p->finished;
}

ember_status ember_chat_parser_message(const ember_chat_parser *p, json_t **out)
{
    if (!p || !out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_parser_message: NULL argument");
    *out = NULL;
    json_t *m = json_object();
    int bad = !m;
    if (m) {
        bad |= json_object_set_new(m, "role", json_string("assistant"));
        if (p->content.len || !p->n_calls)
            bad |= json_object_set_new(m, "content", json_stringn(p->content.p ? p->content.p : "", p->content.len));
        else
            bad |= json_object_set_new(m, "content", json_null());
        if (p->reasoning.len)
            bad |= json_object_set_new(m, "reasoning_content", json_stringn(p->reasoning.p, p->reasoning.len));
        if (p->n_calls) {
            json_t *a = json_array();
            bad |= json_object_set_new(m, "tool_calls", a);
            for (size_t i = 0; i < p->n_calls && a; i++) {
                const char *args = p->calls[i].arguments;
                if (!args) args = p->ann_args.p ? p->ann_args.p : "";   /* still streaming */
                json_t *fn = json_pack("{s:s, s:s}", "name", p->calls[i].name, "arguments", args);
                json_t *c = fn ? json_pack("{s:s, s:s, s:o}", "id", p->calls[i].id, "type", "function", "function", fn)
                               : NULL;
                bad |= json_array_append_new(a, c);
            }
        }
    }
    if (bad) {
        json_decref(m);
        return ember_error(EMBER_ERR_NOMEM, "chat parser: out of memory building the message");
    }
    *out = m;
    return EMBER_OK;
}

ember_status ember_chat_event_delta(const ember_chat_event *ev, json_t **out)
{
    if (!ev || !out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_event_delta: NULL argument");
    *out = NULL;
    json_t *d = NULL;
    switch (ev->kind) {
    case EMBER_CHAT_EV_CONTENT:
    case EMBER_CHAT_EV_REASONING:
        d = json_object();
        if (d && json_object_set_new(d, ev->kind == EMBER_CHAT_EV_CONTENT ? "content" : "reasoning_content",
                                     json_stringn(ev->text ? ev->text : "", ev->len))) {
            json_decref(d);
            d = NULL;
        }
        break;
    case EMBER_CHAT_EV_TOOL_START:
        if (!ev->id || !ev->name) return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_event_delta: TOOL_START without id/name");
        d = json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", ev->tool_index, "id", ev->id,
                      "type", "function", "function", "name", ev->name, "arguments", "");
        break;
    case EMBER_CHAT_EV_TOOL_ARGS:
        d = json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", ev->tool_index, "function", "arguments",
                      ev->text ? ev->text : "", ev->text ? ev->len : (size_t)0);
        break;
    case EMBER_CHAT_EV_TOOL_END:
        return EMBER_OK;
    default:
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_chat_event_delta: unknown event kind %d", (int)ev->kind);
    }
    if (!d) return ember_error(EMBER_ERR_NOMEM, "ember_chat_event_delta: out of memory (or text not UTF-8)");
    *out = d;
    return EMBER_OK;
}

ember_status ember_chat_parse_whole(const ember_chat_parser_config *cfg, const char *text, size_t len, json_t **out)
{
    return ember_chat_parse_whole_cut(cfg, text, len, false, out);
}

ember_status ember_chat_parse_whole_cut(const ember_chat_parser_config *cfg, const char *text, size_t len, bool cut,
                                        json_t **out)
{
    ember_chat_parser *p;
    ember_status st = ember_chat_parser_new(cfg, &p);
    if (st != EMBER_OK) return st;
    st = ember_chat_parser_feed(p, text, len);
    if (st == EMBER_OK) st = cut ? ember_chat_parser_finish_cut(p) : ember_chat_parser_finish(p);
    if (st == EMBER_OK) st = ember_chat_parser_message(p, out);
    ember_chat_parser_free(p);
    return st;
}

/* ------------------------------------------------------------- budget */

void ember_reasoning_budget_init(ember_reasoning_budget *b, int32_t n_tokens, ember_reasoning_syntax syntax)
{
    b->budget = n_tokens;
    b->n_used = 0;
    b->closed = false;
    b->syntax = syntax;
}

const char *ember_reasoning_budget_next(ember_reasoning_budget *b, const ember_chat_parser *p)
{
    if (!b || b->closed || b->budget < 0 || !ember_chat_parser_in_reasoning(p)) return NULL;
    if (b->n_used < b->budget) {
        b->n_used++;
        return NULL;
    }
    b->closed = true;
    switch (b->syntax) {
    case EMBER_REASONING_THINK: return "\n</think>\n\n";
    case EMBER_REASONING_GEMMA4: return "\n<channel|>";
    case EMBER_REASONING_MISTRAL: return "[/THINK]";
    default: b->closed = false; return NULL;
    }
}
