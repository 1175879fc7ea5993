/*
 * common.c — byte-string, lexical JSON and call-list helpers shared by the
 * tool-call scanners (see formats.h).
 *
 * Owns: a lexical JSON value scanner (finds where a value ends in a stream
 * that may still be growing); validation is left to jansson.
 * Must not: keep state or know about any one model's syntax.
 */
#include "chat/formats/formats.h"

#include <stdlib.h>
#include <string.h>

void fmt_buf_put(fmt_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void fmt_buf_putc(fmt_buf *b, char c) { fmt_buf_put(b, &c, 1); }
void fmt_buf_puts(fmt_buf *b, const char *s) { fmt_buf_put(b, s, strlen(s)); }

void fmt_buf_free(fmt_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void fmt_calls_push(fmt_calls *c, char *name, char *arguments)
{
    if (!name || !arguments || c->oom) goto fail;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        fmt_call *v = realloc(c->v, cap * sizeof *v);
        if (!v) goto fail;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n].name = name;
    c->v[c->n].arguments = arguments;
    c->n++;
    return;
fail:
    c->oom = true;
    free(name);
    free(arguments);
}

void fmt_calls_truncate(fmt_calls *c, size_t n)
{
    for (size_t i = n; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].arguments);
    }
    if (n < c->n) c->n = n;
}

void fmt_calls_clear(fmt_calls *c)
{
    fmt_calls_truncate(c, 0);
    free(c->v);
    c->v = NULL;
    c->cap = 0;
    c->oom = false;
}

size_t fmt_skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && fmt_is_ws(s[i])) i++;
    return i;
}

int fmt_starts(const char *s, size_t n, size_t i, const char *lit)
{
    size_t k = 0;
    for (; lit[k]; k++) {
        if (i + k >= n) return 0;
        if (s[i + k] != lit[k]) return -1;
    }
    return 1;
}

size_t fmt_find(const char *s, size_t n, size_t i, const char *lit)
{
    size_t m = strlen(lit);
    if (m == 0 || n < m) return (size_t)-1;
    for (; i + m <= n; i++)
        if (s[i] == lit[0] && memcmp(s + i, lit, m) == 0) return i;
    return (size_t)-1;
}

static int string_span(const char *s, size_t n, size_t i, size_t *end)
{
    for (size_t j = i + 1; j < n; j++) {
        if (s[j] == '\\') { j++; continue; }
        if (s[j] == '"') { *end = j + 1; return 1; }
    }
    return 0;
}

int fmt_json_span(const char *s, size_t n, size_t i, size_t *end)
{
    if (i >= n) return 0;
    char c = s[i];
    if (c == '"') return string_span(s, n, i, end);
    if (c == '{' || c == '[') {
        char stack[256];
        size_t depth = 0;
        for (size_t j = i; j < n; j++) {
            char d = s[j];
            if (d == '"') {
                size_t e;
                if (!string_span(s, n, j, &e)) return 0;
                j = e - 1;
            } else if (d == '{' || d == '[') {
                if (depth == sizeof stack) return -1;
                stack[depth++] = d == '{' ? '}' : ']';
            } else if (d == '}' || d == ']') {
                if (depth == 0 || stack[depth - 1] != d) return -1;
                if (--depth == 0) { *end = j + 1; return 1; }
            }
        }
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) {
        size_t j = i;
        while (j < n && (s[j] == '-' || s[j] == '+' || s[j] == '.' || (s[j] >= '0' && s[j] <= '9') ||
                         (s[j] >= 'a' && s[j] <= 'z') || s[j] == 'E'))
            j++;
        if (j == n) return 0;
        *end = j;
        return 1;
    }
    return -1;
}

bool fmt_json_member(const char *s, size_t b, size_t e, const char *key, size_t *vb, size_t *ve)
{
    if (b >= e || s[b] != '{') return false;
    size_t klen = strlen(key);
    size_t i = b + 1;
    for (;;) {
        i = fmt_skip_ws(s, e, i);
        if (i >= e || s[i] != '"') return false;
        size_t kend;
        if (fmt_json_span(s, e, i, &kend) != 1) return false;
        bool match = kend - i - 2 == klen && memcmp(s + i + 1, key, klen) == 0;
        i = fmt_skip_ws(s, e, kend);
        if (i >= e || s[i] != ':') return false;
        i = fmt_skip_ws(s, e, i + 1);
        size_t vend;
        if (fmt_json_span(s, e, i, &vend) != 1) return false;
        if (match) { *vb = i; *ve = vend; return true; }
        i = fmt_skip_ws(s, e, vend);
        if (i >= e || s[i] != ',') return false;
        i++;
    }
}

bool fmt_json_valid(const char *s, size_t n, bool object_only)
{
    json_error_t err;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!v) return false;
    bool ok = !object_only || json_is_object(v);
    json_decref(v);
    return ok;
}

void fmt_json_put_string(fmt_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    fmt_buf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0';
                u[4] = hex[c >> 4]; u[5] = hex[c & 15]; u[6] = '\0';
                esc = u;
            }
        }
        if (esc) {
            fmt_buf_put(b, s + i - run, run);
            run = 0;
            fmt_buf_puts(b, esc);
        } else {
            run++;
        }
    }
    fmt_buf_put(b, s + n - run, run);
    fmt_buf_putc(b, '"');
}

char *fmt_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

bool fmt_valid_name(const char *s, size_t n)
{
    if (n == 0 || n > 256) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '-' || c == '.' || c == '/';
        if (!ok) return false;
    }
    return true;
}

char *fmt_arguments_from_span(const char *s, size_t b, size_t e)
{
    if (b >= e) return NULL;
    if (s[b] == '{')
        return fmt_json_valid(s + b, e - b, true) ? fmt_strndup(s + b, e - b) : NULL;
    if (s[b] != '"') return NULL;
    json_error_t err;
    json_t *v = json_loadb(s + b, e - b, JSON_DECODE_ANY, &err);
    if (!json_is_string(v)) { json_decref(v); return NULL; }
    const char *t = json_string_value(v);
    size_t tn = json_string_length(v);
    size_t tb = fmt_skip_ws(t, tn, 0);
    char *out = NULL;
    if (tb == tn) out = fmt_strndup("{}", 2);
    else if (fmt_json_valid(t, tn, true)) out = fmt_strndup(t, tn);
    json_decref(v);
    return out;
}

char *fmt_json_member_string(const char *s, size_t b, size_t e, const char *key)
{
    size_t vb, ve;
    if (!fmt_json_member(s, b, e, key, &vb, &ve) || s[vb] != '"') return NULL;
    json_error_t err;
    json_t *v = json_loadb(s + vb, ve - vb, JSON_DECODE_ANY, &err);
    char *out = NULL;
    if (json_is_string(v)) out = fmt_strndup(json_string_value(v), json_string_length(v));
    json_decref(v);
    return out;
}

fmt_result fmt_malformed_until(const char *s, size_t n, bool at_eof, size_t from, const char *close,
                               size_t *consumed)
{
    size_t f = fmt_find(s, n, from, close);
    if (f != (size_t)-1) {
        *consumed = f + strlen(close);
        return FMT_MALFORMED;
    }
    if (at_eof) {
        *consumed = n;
        return FMT_MALFORMED;
    }
    return FMT_NEED_MORE;
}
