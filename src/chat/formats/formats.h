/*
 * formats.h — internal interface between the output parser (parse.c) and the
 * per-format tool-call scanners (one file per syntax in this folder), plus the
 * small text/JSON helpers they share (common.c).
 *
 * Owns: the scanner contract below.
 * Must not: emit events or keep state between calls — a scanner is a pure
 * function of the bytes it is shown, so the result cannot depend on how the
 * output was chunked.
 */
#ifndef EMBER_CHAT_FORMATS_H
#define EMBER_CHAT_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* growable byte string */
typedef struct fmt_buf {
    char *p;
    size_t len, cap;
    bool oom;                 /* an append failed; contents are incomplete */
} fmt_buf;

void fmt_buf_put(fmt_buf *b, const char *s, size_t n);
void fmt_buf_putc(fmt_buf *b, char c);
void fmt_buf_puts(fmt_buf *b, const char *s);
void fmt_buf_free(fmt_buf *b);

typedef struct fmt_call {
    char *name;               /* malloc'd, NUL-terminated */
    char *arguments;          /* malloc'd JSON text of an object */
} fmt_call;

typedef struct fmt_calls {
    fmt_call *v;
    size_t n, cap;
    bool oom;
} fmt_calls;

/* takes ownership of name/arguments (frees them on failure) */
void fmt_calls_push(fmt_calls *c, char *name, char *arguments);
void fmt_calls_clear(fmt_calls *c);
/* drop (and free) the calls after the first n */
void fmt_calls_truncate(fmt_calls *c, size_t n);

typedef enum fmt_result {
    FMT_NEED_MORE,            /* not decided; show more bytes (never returned when at_eof) */
    FMT_OK,                   /* calls appended; *consumed bytes were the call(s) */
    FMT_MALFORMED,            /* not a valid call; the first *consumed bytes (>= 1) are content */
} fmt_result;

/* A scanner is shown the text from a start marker (or, for bare-JSON
 * formats, from the '{') to the end of what has arrived. */
typedef fmt_result (*fmt_scan_fn)(const char *s, size_t n, bool at_eof, const json_t *tools,
                                  size_t *consumed, fmt_calls *out);

typedef struct fmt_ops {
    const char *const *markers;   /* strings that open a call region */
    size_t n_markers;
    bool bare_json;               /* a '{' opening the (so far empty) content also opens a region */
    fmt_scan_fn scan;
    /* When to scan again after FMT_NEED_MORE (so a long call costs linear,
     * not quadratic, time): `close` — every decision short of the end of
     * output needs an occurrence of this string, so scan only when a new one
     * arrives; else `triggers` — scan only when a new byte (or the last old
     * one) is one of these. The parser also scans whenever the region has
     * doubled, and always at the end of output. Skipping a scan may delay a
     * decision but cannot change it: decisions depend on first occurrences
     * only, so they are stable as text is appended. */
    const char *close;
    const char *triggers;
    /* Streaming of arguments (ember_chat_parser_config.stream_arguments):
     * for the region s[0..n) so far (undecided or malformed), true when the
     * first call's header is decided — its name is known and valid and its
     * arguments object has begun. Then *name is set (malloc'd) and the
     * arguments text produced so far is appended to `args` (or, for raw
     * JSON formats, *raw_at is set to where it starts in s): always a prefix
     * of what the complete call's arguments string would be (for raw JSON
     * formats it may run past the object; the JSON checker stops at its end).
     * Pure function of the bytes, decided on first occurrences like scan. */
    bool (*partial)(const char *s, size_t n, const json_t *tools, char **name, fmt_buf *args, size_t *raw_at);
    /* the arguments are raw JSON text of the output (partial copies a slice
     * and costs little), so progress can be looked for on every feed */
    bool raw_arguments;
    /* Optional (raw_arguments formats whose region holds several calls,
     * generic's list): the header of the call after the one whose arguments
     * object ends at s[at] (one past its '}'), decided as `partial` decides
     * the first: *name malloc'd, *raw_at where its arguments object starts.
     * False while undecided or when no call follows. NULL: only a region's
     * first call streams, the others arrive whole. */
    bool (*partial_next)(const char *s, size_t n, size_t at, char **name, size_t *raw_at);
    /* Optional: plain content wrapped in JSON at the start of the region
     * (generic's {"response": "TEXT"}). 1: s[0..n) opens such a wrapper, and
     * its JSON string body starts at *body_at; -1: it does not; 0: not yet
     * decided (more bytes could go either way). The parser then decodes the
     * string as content as it streams (parse.c). */
    int (*wrap_header)(const char *s, size_t n, size_t *body_at);
    /* A marker inside an open thought ends the thought there (the call
     * follows, no close tag needed): Qwen3.5 may call straight from its
     * thinking, and llama.cpp's Qwen3-Coder/Qwen3.5 parser ends reasoning at
     * "</think>" or "<tool_call>" (common/parsers/qwen3-coder.cpp,
     * thinking_end_tags; tests/test-chat.cpp, the Qwen3.5 rows). */
    bool markers_end_reasoning;
} fmt_ops;

extern const fmt_ops fmt_hermes, fmt_qwen3_coder, fmt_gemma4, fmt_llama3, fmt_mistral, fmt_generic;

/* ---- helpers (common.c) ---- */

static inline bool fmt_is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
size_t fmt_skip_ws(const char *s, size_t n, size_t i);
/* 1 if s[i..n) starts with lit, 0 if it is a proper prefix of lit (more
 * bytes could still match), -1 if it cannot match. */
int fmt_starts(const char *s, size_t n, size_t i, const char *lit);
/* first occurrence of lit in s[i..n), or (size_t)-1 */
size_t fmt_find(const char *s, size_t n, size_t i, const char *lit);

/* Span of the JSON value starting at s[i] (after no whitespace).
 * Returns 1 and *end (one past the value) when it is complete, 0 when the
 * text ends first, -1 on a syntax error seen by this lexical scan (unbalanced
 * brackets, bad token start). Scalars at the very end of the text count as
 * incomplete (a number may go on). Depth is limited to 256. The full grammar
 * is checked afterwards with jansson. */
int fmt_json_span(const char *s, size_t n, size_t i, size_t *end);

/* Within the complete JSON object s[b..e), the value span of member `key`
 * (first occurrence). Returns true and [*vb, *ve) if present. */
bool fmt_json_member(const char *s, size_t b, size_t e, const char *key, size_t *vb, size_t *ve);
/* the same for the first member named key or key2 */
bool fmt_json_member2(const char *s, size_t b, size_t e, const char *key, const char *key2, size_t *vb, size_t *ve);

/* true if s[0..n) is one valid JSON text (any value) */
bool fmt_json_valid(const char *s, size_t n, bool object_only);

/* append s[0..n) as a JSON string literal (with quotes) */
void fmt_json_put_string(fmt_buf *b, const char *s, size_t n);
/* the same without the quotes (per-character escaping: the body of a prefix
 * is a prefix of the body) */
void fmt_json_put_string_body(fmt_buf *b, const char *s, size_t n);

/* malloc'd copy of s[0..n) */
char *fmt_strndup(const char *s, size_t n);

/* A function name: 1..256 bytes of [A-Za-z0-9_.-/] (OpenAI allows
 * [A-Za-z0-9_-]; '.' and '/' appear in namespaced tool names). */
bool fmt_valid_name(const char *s, size_t n);

/* Build arguments text for a call from a JSON value span that is an object,
 * or a string holding an object (double-encoded). NULL if neither. */
char *fmt_arguments_from_span(const char *s, size_t b, size_t e);

/* Decoded string value of member `key` of the complete object s[b..e), or
 * NULL (absent, not a string). malloc'd. */
char *fmt_json_member_string(const char *s, size_t b, size_t e, const char *key);

/* The region is malformed: it is content up to and including the next
 * `close` at or after `from`; without one, all of it at the end of output,
 * else undecided (FMT_NEED_MORE). */
fmt_result fmt_malformed_until(const char *s, size_t n, bool at_eof, size_t from, const char *close,
                               size_t *consumed);

/* A JSON call object s[b..e) ({"name": STRING, "arguments"|"parameters":
 * OBJECT or STRING holding an object; absent -> {}}) appended to out; false
 * (nothing appended) if it is not one. (hermes.c) */
bool fmt_object_call(const char *s, size_t b, size_t e, fmt_calls *out);

/* Strict incremental JSON checker for one object, fed in pieces (RFC 8259
 * grammar, UTF-8 checked, surrogate escapes paired). It records the last
 * "closable" point: a prefix length ok_len such that the prefix plus
 * fmt_jtrack_closers() is valid JSON (after '{' or '[', after a complete
 * value, inside a value string, after a digit of a valid number). Feeding
 * stops at the first error or when the object closes. Zero-initialise. */
typedef struct fmt_jtrack {
    char stack[256];
    size_t depth;
    size_t pos;                 /* bytes consumed */
    size_t ok_len, ok_depth;    /* last closable point */
    bool ok_in_string;
    bool error, is_key, want_low;
    uint8_t st, num, lit_i, hex_left, utf8_left, utf8_len;
    uint32_t u, cp;
    const char *lit;
} fmt_jtrack;

void fmt_jtrack_feed(fmt_jtrack *t, const char *s, size_t n);
bool fmt_jtrack_done(const fmt_jtrack *t);
void fmt_jtrack_closers(const fmt_jtrack *t, fmt_buf *out);

/* Header of a JSON call object at s[i] == '{': {"name": STRING, then
 * "arguments" or "parameters" whose value starts with '{' (at *args_at).
 * Only this member order streams; anything else waits for the whole call. */
bool fmt_partial_json_header(const char *s, size_t n, size_t i, char **name, size_t *args_at);

/* shorthand: text ran out before the region was decided */
static inline fmt_result fmt_incomplete(size_t n, bool at_eof, size_t *consumed)
{
    if (!at_eof) return FMT_NEED_MORE;
    *consumed = n;
    return FMT_MALFORMED;
}

#endif
