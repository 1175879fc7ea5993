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
    return fmt_json_member2(s, b, e, key, NULL, vb, ve);
}

bool fmt_json_member2(const char *s, size_t b, size_t e, const char *key, const char *key2, size_t *vb, size_t *ve)
{
    if (b >= e || s[b] != '{') return false;
    size_t klen = strlen(key), k2len = key2 ? strlen(key2) : 0;
    size_t i = b + 1;
    for (;;) {
        i = fmt_skip_ws(s, e, i);
        if (i >= e || s[i] != '"') return false;
        size_t kend;
        if (fmt_json_span(s, e, i, &kend) != 1) return false;
        bool match = (kend - i - 2 == klen && memcmp(s + i + 1, key, klen) == 0) ||
                     (key2 && kend - i - 2 == k2len && memcmp(s + i + 1, key2, k2len) == 0);
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
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &err);
    if (!v) return false;
    bool ok = !object_only || json_is_object(v);
    json_decref(v);
    return ok;
}

void fmt_json_put_string(fmt_buf *b, const char *s, size_t n)
{
    fmt_buf_putc(b, '"');
    fmt_json_put_string_body(b, s, n);
    fmt_buf_putc(b, '"');
}

void fmt_json_put_string_body(fmt_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
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

/* ------------------------------------------------ strict incremental JSON */

enum {
    J_START, J_OBJ_FIRST, J_OBJ_KEY, J_COLON, J_VALUE, J_ARR_FIRST, J_AFTER, J_STRING, J_ESC, J_UHEX,
    J_NUM, J_LIT, J_DONE
};
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static bool jt_error(fmt_jtrack *t)
{
    t->error = true;
    return false;
}

static void jt_closable(fmt_jtrack *t, size_t len)
{
    t->ok_len = len;
    t->ok_depth = t->depth;
    t->ok_in_string = t->st == J_STRING;
}

static bool jt_begin_value(fmt_jtrack *t, char c)
{
    switch (c) {
    case '{':
    case '[':
        if (t->depth == sizeof t->stack) return jt_error(t);
        t->stack[t->depth++] = c == '{' ? '}' : ']';
        t->st = c == '{' ? J_OBJ_FIRST : J_ARR_FIRST;
        return true;
    case '"':
        t->st = J_STRING;
        t->is_key = false;
        return true;
    case 't': t->lit = "true"; break;
    case 'f': t->lit = "false"; break;
    case 'n': t->lit = "null"; break;
    case '-': t->st = J_NUM; t->num = N_MINUS; return true;
    default:
        if (c >= '0' && c <= '9') {
            t->st = J_NUM;
            t->num = c == '0' ? N_ZERO : N_INT;
            return true;
        }
        return jt_error(t);
    }
    t->st = J_LIT;
    t->lit_i = 1;
    return true;
}

/* a value just ended */
static void jt_value_done(fmt_jtrack *t)
{
    t->st = t->depth == 0 ? J_DONE : J_AFTER;
}

static bool jt_step(fmt_jtrack *t, char c)
{
    unsigned char u = (unsigned char)c;
    switch (t->st) {
    case J_START:
        if (fmt_is_ws(c)) return true;
        if (c != '{') return jt_error(t);
        return jt_begin_value(t, c);
    case J_OBJ_FIRST:
    case J_OBJ_KEY:
        if (fmt_is_ws(c)) return true;
        if (c == '}' && t->st == J_OBJ_FIRST) {
            t->depth--;
            jt_value_done(t);
            return true;
        }
        if (c != '"') return jt_error(t);
        t->st = J_STRING;
        t->is_key = true;
        return true;
    case J_COLON:
        if (fmt_is_ws(c)) return true;
        if (c != ':') return jt_error(t);
        t->st = J_VALUE;
        return true;
    case J_ARR_FIRST:
        if (fmt_is_ws(c)) return true;
        if (c == ']') {
            t->depth--;
            jt_value_done(t);
            return true;
        }
        return jt_begin_value(t, c);
    case J_VALUE:
        if (fmt_is_ws(c)) return true;
        return jt_begin_value(t, c);
    case J_AFTER:
        if (fmt_is_ws(c)) return true;
        if (c == ',') {
            t->st = t->stack[t->depth - 1] == '}' ? J_OBJ_KEY : J_VALUE;
            return true;
        }
        if (c != t->stack[t->depth - 1]) return jt_error(t);
        t->depth--;
        jt_value_done(t);
        return true;
    case J_STRING:
        if (t->utf8_left) {
            if ((u & 0xC0) != 0x80) return jt_error(t);
            t->cp = (t->cp << 6) | (u & 0x3F);
            if (--t->utf8_left == 0) {
                bool bad = (t->utf8_len == 3 && (t->cp < 0x800 || (t->cp >= 0xD800 && t->cp <= 0xDFFF))) ||
                           (t->utf8_len == 4 && (t->cp < 0x10000 || t->cp > 0x10FFFF));
                if (bad) return jt_error(t);
            }
            return true;
        }
        if (t->want_low && c != '\\') return jt_error(t);
        if (c == '"') {
            if (t->is_key) t->st = J_COLON;
            else jt_value_done(t);
            return true;
        }
        if (c == '\\') { t->st = J_ESC; return true; }
        if (u < 0x20) return jt_error(t);
        if (u >= 0x80) {
            if (u >= 0xC2 && u <= 0xDF) { t->utf8_len = 2; t->cp = u & 0x1F; }
            else if (u >= 0xE0 && u <= 0xEF) { t->utf8_len = 3; t->cp = u & 0x0F; }
            else if (u >= 0xF0 && u <= 0xF4) { t->utf8_len = 4; t->cp = u & 0x07; }
            else return jt_error(t);
            t->utf8_left = (uint8_t)(t->utf8_len - 1);
        }
        return true;
    case J_ESC:
        if (t->want_low && c != 'u') return jt_error(t);
        if (c == 'u') {
            t->st = J_UHEX;
            t->hex_left = 4;
            t->u = 0;
            return true;
        }
        if (!strchr("\"\\/bfnrt", c) || !c) return jt_error(t);
        t->st = J_STRING;
        return true;
    case J_UHEX: {
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return jt_error(t);
        t->u = (t->u << 4) | (uint32_t)d;
        if (--t->hex_left) return true;
        if (t->want_low) {
            if (t->u < 0xDC00 || t->u > 0xDFFF) return jt_error(t);
            t->want_low = false;
        } else if (t->u >= 0xDC00 && t->u <= 0xDFFF) {
            return jt_error(t);
        } else if (t->u >= 0xD800 && t->u <= 0xDBFF) {
            t->want_low = true;
        }
        t->st = J_STRING;
        return true;
    }
    case J_NUM: {
        bool digit = c >= '0' && c <= '9';
        switch (t->num) {
        case N_MINUS:
            if (!digit) return jt_error(t);
            t->num = c == '0' ? N_ZERO : N_INT;
            return true;
        case N_ZERO:
        case N_INT:
            if (digit && t->num == N_INT) return true;
            if (c == '.') { t->num = N_DOT; return true; }
            if (c == 'e' || c == 'E') { t->num = N_E; return true; }
            break;
        case N_DOT:
            if (!digit) return jt_error(t);
            t->num = N_FRAC;
            return true;
        case N_FRAC:
            if (digit) return true;
            if (c == 'e' || c == 'E') { t->num = N_E; return true; }
            break;
        case N_E:
            if (c == '+' || c == '-') { t->num = N_ESIGN; return true; }
            if (!digit) return jt_error(t);
            t->num = N_EXP;
            return true;
        case N_ESIGN:
            if (!digit) return jt_error(t);
            t->num = N_EXP;
            return true;
        case N_EXP:
            if (digit) return true;
            break;
        }
        /* the number ended; c belongs to what follows */
        jt_value_done(t);
        if (t->st == J_DONE) return jt_error(t);
        return jt_step(t, c);
    }
    case J_LIT:
        if (c != t->lit[t->lit_i]) return jt_error(t);
        if (!t->lit[++t->lit_i]) jt_value_done(t);
        return true;
    }
    return jt_error(t);
}

void fmt_jtrack_feed(fmt_jtrack *t, const char *s, size_t n)
{
    for (size_t i = 0; i < n && !t->error && t->st != J_DONE; i++) {
        if (!jt_step(t, s[i])) break;
        t->pos++;
        bool closable = t->st == J_OBJ_FIRST || t->st == J_ARR_FIRST || t->st == J_AFTER || t->st == J_DONE ||
                        (t->st == J_STRING && !t->is_key && !t->utf8_left && !t->want_low) ||
                        (t->st == J_NUM && (t->num == N_ZERO || t->num == N_INT || t->num == N_FRAC || t->num == N_EXP));
        if (closable) jt_closable(t, t->pos);
    }
}

bool fmt_jtrack_done(const fmt_jtrack *t) { return t->st == J_DONE; }

void fmt_jtrack_closers(const fmt_jtrack *t, fmt_buf *out)
{
    if (t->ok_in_string) fmt_buf_putc(out, '"');
    for (size_t i = t->ok_depth; i-- > 0;) fmt_buf_putc(out, t->stack[i]);
}

/* a complete JSON string at s[*i] equal to one of the keys (NULL-terminated list) */
static bool key_is(const char *s, size_t n, size_t *i, const char *const *keys)
{
    size_t e;
    if (*i >= n || s[*i] != '"' || fmt_json_span(s, n, *i, &e) != 1) return false;
    bool hit = false;
    for (size_t k = 0; keys[k] && !hit; k++)
        hit = e - *i - 2 == strlen(keys[k]) && !memcmp(s + *i + 1, keys[k], e - *i - 2);
    *i = e;
    return hit;
}

bool fmt_partial_json_header(const char *s, size_t n, size_t i, char **name, size_t *args_at)
{
    static const char *const name_key[] = {"name", NULL};
    static const char *const args_key[] = {"arguments", "parameters", NULL};
    if (i >= n || s[i] != '{') return false;
    i = fmt_skip_ws(s, n, i + 1);
    if (!key_is(s, n, &i, name_key)) return false;
    i = fmt_skip_ws(s, n, i);
    if (i >= n || s[i] != ':') return false;
    i = fmt_skip_ws(s, n, i + 1);
    size_t e;
    if (i >= n || s[i] != '"' || fmt_json_span(s, n, i, &e) != 1) return false;
    size_t nb = i, ne = e;
    i = fmt_skip_ws(s, n, e);
    if (i >= n || s[i] != ',') return false;
    i = fmt_skip_ws(s, n, i + 1);
    if (!key_is(s, n, &i, args_key)) return false;
    i = fmt_skip_ws(s, n, i);
    if (i >= n || s[i] != ':') return false;
    i = fmt_skip_ws(s, n, i + 1);
    if (i >= n || s[i] != '{') return false;
    json_error_t err;
    json_t *v = json_loadb(s + nb, ne - nb, JSON_DECODE_ANY, &err);
    bool ok = json_is_string(v) && fmt_valid_name(json_string_value(v), json_string_length(v));
    if (ok) *name = fmt_strndup(json_string_value(v), json_string_length(v));
    json_decref(v);
    if (!ok || !*name) return false;
    *args_at = i;
    return true;
}
