/*
 * jinja_value.c — the arena, byte buffers, and the Python-like value model
 * behind the Jinja interpreter: truthiness, equality, str()/repr() and
 * json.dumps() exactly as CPython writes them (float repr, quote choice,
 * separators), and conversion from jansson JSON.
 *
 * Owns: memory of parse and render (arena with a byte cap), value semantics.
 * Must not: know about templates or the AST.
 */
#include "chat/jinja/jinja_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* ---- arena ---------------------------------------------------------------- */

void *jx_alloc(jx_ctx *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jx_chunk *h = c->chunks;
    if (!h || h->size - h->used < n) {
        size_t sz = n > 65536 ? n : 65536;
        if (c->cap && c->total + sz > c->cap)
            jx_fail(c, EMBER_ERR_RANGE, 0, 0, "template used more than %zu bytes of working memory", c->cap);
        jx_chunk *nc = malloc(sizeof *nc + sz);
        if (!nc) jx_fail(c, EMBER_ERR_NOMEM, 0, 0, "out of memory");
        nc->size = sz;
        nc->used = 0;
        nc->next = c->chunks;
        c->chunks = nc;
        c->total += sz;
        h = nc;
    }
    void *p = h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

char *jx_strndup(jx_ctx *c, const char *s, size_t n)
{
    char *p = jx_alloc(c, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jx_arena_free(jx_ctx *c)
{
    jx_chunk *h = c->chunks;
    while (h) {
        jx_chunk *nx = h->next;
        free(h);
        h = nx;
    }
    c->chunks = NULL;
    c->total = 0;
}

void jx_fail(jx_ctx *c, ember_status st, int line, int col, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = st;
    c->err.line = line;
    c->err.column = col;
    if (line > 0)
        snprintf(c->err.message, sizeof c->err.message, "line %d, column %d: %s", line, col, msg);
    else
        snprintf(c->err.message, sizeof c->err.message, "%s", msg);
    longjmp(c->jb, 1);
}

/* ---- buffers --------------------------------------------------------------- */

void jx_buf_put(jx_ctx *c, jx_buf *b, const char *s, size_t n)
{
    if (b->limit && b->n + n > b->limit)
        jx_fail(c, EMBER_ERR_RANGE, 0, 0, "template output exceeds %zu bytes", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = jx_alloc(c, nc);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jx_buf_puts(jx_ctx *c, jx_buf *b, const char *s) { jx_buf_put(c, b, s, strlen(s)); }
void jx_buf_putc(jx_ctx *c, jx_buf *b, char ch) { jx_buf_put(c, b, &ch, 1); }

void jx_buf_printf(jx_ctx *c, jx_buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    jx_buf_put(c, b, tmp, (size_t)n);
}

/* ---- UTF-8 -------------------------------------------------------------- */

size_t jx_utf8_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

size_t jx_utf8_offset(const char *s, size_t n, size_t cp)
{
    size_t k = 0, i = 0;
    for (; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (k == cp) return i;
            k++;
        }
    }
    return n;
}

/* decode one code point at s[*i], advancing *i; invalid bytes map to themselves */
static uint32_t utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c0 = u[*i];
    int len = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 1;
    if (*i + (size_t)len > n) len = 1;
    uint32_t cp = len == 1 ? c0 : len == 2 ? c0 & 0x1F : len == 3 ? c0 & 0x0F : c0 & 0x07;
    for (int k = 1; k < len; k++) cp = (cp << 6) | (u[*i + k] & 0x3F);
    *i += (size_t)len;
    return cp;
}

/* ---- constructors ------------------------------------------------------- */

jv jv_str(jx_ctx *c, const char *s, size_t n)
{
    jx_str *p = jx_alloc(c, sizeof *p + n + 1);
    p->len = n;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    jv v = {.k = JV_STR};
    v.u.s = p;
    return v;
}

jv jv_cstr(jx_ctx *c, const char *s) { return jv_str(c, s, strlen(s)); }

jv jv_list_new(jx_ctx *c, jv_kind k, size_t cap)
{
    jv v = {.k = k};
    v.u.l = jx_alloc(c, sizeof *v.u.l);
    if (cap) {
        v.u.l->v = jx_alloc(c, cap * sizeof(jv));
        v.u.l->cap = cap;
    }
    return v;
}

jv jv_iter_from(jx_ctx *c, jv list, const char *tname, bool view)
{
    jv v = {.k = JV_ITER};
    v.u.l = jx_alloc(c, sizeof *v.u.l);
    *v.u.l = *list.u.l;
    v.u.l->pos = 0;
    v.u.l->view = view;
    v.u.l->tname = tname;
    return v;
}

void jv_list_push(jx_ctx *c, jv *list, jv item)
{
    jx_list *l = list->u.l;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jv *nv = jx_alloc(c, nc * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = item;
}

jv jv_dict_new(jx_ctx *c, jv_kind k)
{
    jv v = {.k = k};
    v.u.d = jx_alloc(c, sizeof *v.u.d);
    return v;
}

static bool key_eq(jv a, jv b)
{
    if (a.k == JV_STR && b.k == JV_STR)
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    return jv_equal(a, b);
}

static void dict_append(jx_ctx *c, jx_dict *d, jv key, jv val);

void jv_dict_set(jx_ctx *c, jx_dict *d, jv key, jv val)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->key[i], key)) { d->val[i] = val; return; }
    dict_append(c, d, key, val);
}

static void dict_append(jx_ctx *c, jx_dict *d, jv key, jv val)
{
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jv *nk = jx_alloc(c, nc * sizeof(jv)), *nv = jx_alloc(c, nc * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->key, d->n * sizeof(jv));
            memcpy(nv, d->val, d->n * sizeof(jv));
        }
        d->key = nk;
        d->val = nv;
        d->cap = nc;
    }
    d->key[d->n] = key;
    d->val[d->n] = val;
    d->n++;
}

bool jv_dict_get(const jx_dict *d, jv key, jv *out)
{
    for (size_t i = d->n; i-- > 0;)
        if (key_eq(d->key[i], key)) { *out = d->val[i]; return true; }
    return false;
}

bool jv_dict_gets(const jx_dict *d, const char *key, jv *out)
{
    size_t n = strlen(key);
    for (size_t i = d->n; i-- > 0;) {
        jv k = d->key[i];
        if (k.k == JV_STR && k.u.s->len == n && memcmp(k.u.s->s, key, n) == 0) {
            *out = d->val[i];
            return true;
        }
    }
    return false;
}

/* ---- semantics ------------------------------------------------------------ */

bool jv_truthy(jv v)
{
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: case JV_TUPLE: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    case JV_ITER: return v.u.l->view ? v.u.l->n != 0 : true;
    default: return true;
    }
}

bool jv_is_number(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }

double jv_as_double(jv v)
{
    return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : v.k == JV_BOOL ? (double)v.u.b : 0.0;
}

static bool equal_d(jv a, jv b, int depth);

bool jv_equal(jv a, jv b) { return equal_d(a, b, 0); }

/* Python ==; containers nested deeper than 200 compare unequal rather than
 * recursing without bound. */
static bool equal_d(jv a, jv b, int depth)
{
    if (depth > 200) return false;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            int64_t x = a.k == JV_BOOL ? a.u.b : a.u.i, y = b.k == JV_BOOL ? b.u.b : b.u.i;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.k != b.k) return false;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return key_eq(a, b);
    case JV_LIST: case JV_TUPLE:
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_d(a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv o;
            if (!jv_dict_get(b.u.d, a.u.d->key[i], &o) || !equal_d(a.u.d->val[i], o, depth + 1)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_ITER: return a.u.l == b.u.l;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_BUILTIN: return a.u.builtin == b.u.builtin;
    default: return false;
    }
}

const char *jv_type_name(jv v)
{
    static const char *names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                                  "tuple", "dict", "Namespace", "Macro", "function", "method", "LoopContext",
                                  "generator"};
    if (v.k == JV_ITER && v.u.l->tname) return v.u.l->tname;
    return names[v.k];
}

/* ---- str() / repr() ------------------------------------------------------ */

void jx_float_repr(char *out, size_t cap, double f)
{
    if (isnan(f)) { snprintf(out, cap, "nan"); return; }
    if (isinf(f)) { snprintf(out, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0.0) { snprintf(out, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    /* shortest digits that round-trip, as CPython's repr (dtoa mode 0) */
    char sci[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, f);
        if (strtod(sci, NULL) == f) break;
    }
    /* sci = [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0;
    const char *p = sci;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char body[64];
    int k = 0;
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) body[k++] = i < nd ? digits[i] : '0';
            body[k++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) body[k++] = digits[i];
            else
                body[k++] = '0';
        } else {
            body[k++] = '0';
            body[k++] = '.';
            for (int i = 0; i < -exp - 1; i++) body[k++] = '0';
            for (int i = 0; i < nd; i++) body[k++] = digits[i];
        }
        body[k] = 0;
    } else {
        body[k++] = digits[0];
        if (nd > 1) {
            body[k++] = '.';
            for (int i = 1; i < nd; i++) body[k++] = digits[i];
        }
        body[k] = 0;
        snprintf(body + k, sizeof body - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(out, cap, "%s%s", neg ? "-" : "", body);
}

static bool py_printable(uint32_t cp)
{
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp >= 0x80 && cp <= 0xa0) return false;
    if (cp == 0xad) return false;
    if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x206f))
        return false;
    if (cp == 0x3000 || cp == 0xfeff || cp == 0x1680 || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if (cp >= 0xe000 && cp <= 0xf8ff) return false;
    return true;
}

static void repr_str(jx_ctx *c, jx_buf *b, const jx_str *s)
{
    bool has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jx_buf_putc(c, b, q);
    size_t i = 0;
    while (i < s->len) {
        size_t st = i;
        uint32_t cp = utf8_next(s->s, s->len, &i);
        if (cp == (uint32_t)q || cp == '\\') { jx_buf_putc(c, b, '\\'); jx_buf_putc(c, b, (char)cp); }
        else if (cp == '\n') jx_buf_puts(c, b, "\\n");
        else if (cp == '\r') jx_buf_puts(c, b, "\\r");
        else if (cp == '\t') jx_buf_puts(c, b, "\\t");
        else if (!py_printable(cp)) {
            if (cp < 0x100) jx_buf_printf(c, b, "\\x%02x", cp);
            else if (cp < 0x10000) jx_buf_printf(c, b, "\\u%04x", cp);
            else jx_buf_printf(c, b, "\\U%08x", cp);
        } else jx_buf_put(c, b, s->s + st, i - st);
    }
    jx_buf_putc(c, b, q);
}

static void repr_depth(jx_ctx *c, jx_buf *b, jv v, bool top, int depth);

static void str_depth(jx_ctx *c, jx_buf *b, jv v, int depth)
{
    char tmp[64];
    switch (v.k) {
    case JV_UNDEF: return;
    case JV_NONE: jx_buf_puts(c, b, "None"); return;
    case JV_BOOL: jx_buf_puts(c, b, v.u.b ? "True" : "False"); return;
    case JV_INT: jx_buf_printf(c, b, "%lld", (long long)v.u.i); return;
    case JV_FLOAT: jx_float_repr(tmp, sizeof tmp, v.u.f); jx_buf_puts(c, b, tmp); return;
    case JV_STR: jx_buf_put(c, b, v.u.s->s, v.u.s->len); return;
    default: repr_depth(c, b, v, true, depth); return;
    }
}

static void repr_depth(jx_ctx *c, jx_buf *b, jv v, bool top, int depth)
{
    if (depth > 200) jx_fail(c, EMBER_ERR_RANGE, 0, 0, "value nested too deeply to print");
    switch (v.k) {
    case JV_STR:
        if (v.u.s->markup) {   /* markupsafe: Markup('...') */
            jx_buf_puts(c, b, "Markup(");
            repr_str(c, b, v.u.s);
            jx_buf_putc(c, b, ')');
        } else repr_str(c, b, v.u.s);
        return;
    case JV_UNDEF: if (!top) jx_buf_puts(c, b, "Undefined"); return;
    case JV_LIST: case JV_TUPLE:
        jx_buf_putc(c, b, v.k == JV_LIST ? '[' : '(');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jx_buf_puts(c, b, ", ");
            repr_depth(c, b, v.u.l->v[i], false, depth + 1);
        }
        if (v.k == JV_TUPLE && v.u.l->n == 1) jx_buf_putc(c, b, ',');
        jx_buf_putc(c, b, v.k == JV_LIST ? ']' : ')');
        return;
    case JV_DICT: case JV_NS:
        jx_buf_puts(c, b, v.k == JV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jx_buf_puts(c, b, ", ");
            repr_depth(c, b, v.u.d->key[i], false, depth + 1);
            jx_buf_puts(c, b, ": ");
            repr_depth(c, b, v.u.d->val[i], false, depth + 1);
        }
        jx_buf_puts(c, b, v.k == JV_NS ? "}>" : "}");
        return;
    case JV_MACRO: jx_buf_puts(c, b, "<Macro>"); return;
    case JV_BUILTIN: case JV_METHOD: jx_buf_puts(c, b, "<built-in function>"); return;
    case JV_LOOP: jx_buf_puts(c, b, "<LoopContext>"); return;
    case JV_ITER:
        if (v.u.l->view) {   /* dict_items([('a', 1)]) */
            jx_buf_puts(c, b, v.u.l->tname);
            jx_buf_puts(c, b, "([");
            for (size_t i = 0; i < v.u.l->n; i++) {
                if (i) jx_buf_puts(c, b, ", ");
                repr_depth(c, b, v.u.l->v[i], false, depth + 1);
            }
            jx_buf_puts(c, b, "])");
        } else
            jx_buf_printf(c, b, "<%s object>", v.u.l->tname ? v.u.l->tname : "generator");
        return;
    default: str_depth(c, b, v, depth); return;
    }
}

void jv_str_into(jx_ctx *c, jx_buf *b, jv v) { str_depth(c, b, v, 0); }
void jv_repr_into(jx_ctx *c, jx_buf *b, jv v) { repr_depth(c, b, v, false, 0); }

jv jv_to_str(jx_ctx *c, jv v)
{
    if (v.k == JV_STR) return v;
    jx_buf b = {0};
    jv_str_into(c, &b, v);
    return jv_str(c, b.p ? b.p : "", b.n);
}

jv jv_html_escape(jx_ctx *c, jv v)
{
    if (v.k == JV_STR && v.u.s->markup) return v;
    jv s = jv_to_str(c, v);
    jx_buf b = {0};
    jx_buf_put(c, &b, "", 0);
    for (size_t i = 0; i < s.u.s->len; i++) {
        char ch = s.u.s->s[i];
        switch (ch) {
        case '&': jx_buf_puts(c, &b, "&amp;"); break;
        case '<': jx_buf_puts(c, &b, "&lt;"); break;
        case '>': jx_buf_puts(c, &b, "&gt;"); break;
        case '"': jx_buf_puts(c, &b, "&#34;"); break;
        case '\'': jx_buf_puts(c, &b, "&#39;"); break;
        default: jx_buf_putc(c, &b, ch);
        }
    }
    jv out = jv_str(c, b.p, b.n);
    ((jx_str *)out.u.s)->markup = true;
    return out;
}

/* ---- json.dumps ------------------------------------------------------------ */

static void json_str(jx_ctx *c, jx_buf *b, const char *s, size_t n, bool ascii)
{
    jx_buf_putc(c, b, '"');
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t cp = utf8_next(s, n, &i);
        switch (cp) {
        case '"': jx_buf_puts(c, b, "\\\""); break;
        case '\\': jx_buf_puts(c, b, "\\\\"); break;
        case '\n': jx_buf_puts(c, b, "\\n"); break;
        case '\r': jx_buf_puts(c, b, "\\r"); break;
        case '\t': jx_buf_puts(c, b, "\\t"); break;
        case '\b': jx_buf_puts(c, b, "\\b"); break;
        case '\f': jx_buf_puts(c, b, "\\f"); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7f)) {
                if (cp >= 0x10000) {
                    uint32_t x = cp - 0x10000;
                    jx_buf_printf(c, b, "\\u%04x\\u%04x", 0xd800 + (x >> 10), 0xdc00 + (x & 0x3ff));
                } else
                    jx_buf_printf(c, b, "\\u%04x", cp);
            } else
                jx_buf_put(c, b, s + st, i - st);
        }
    }
    jx_buf_putc(c, b, '"');
}

static void json_newline(jx_ctx *c, jx_buf *b, const jx_json_opts *o, int level)
{
    jx_buf_putc(c, b, '\n');
    for (int i = 0; i < level; i++) {
        if (o->indent_str) jx_buf_puts(c, b, o->indent_str);
        else for (int k = 0; k < o->indent; k++) jx_buf_putc(c, b, ' ');
    }
}

static bool json_key(jx_ctx *c, jx_buf *b, jv k, const jx_json_opts *o, const char **bad)
{
    char tmp[64];
    switch (k.k) {
    case JV_STR: json_str(c, b, k.u.s->s, k.u.s->len, o->ensure_ascii); return true;
    case JV_INT: jx_buf_printf(c, b, "\"%lld\"", (long long)k.u.i); return true;
    case JV_FLOAT: jx_float_repr(tmp, sizeof tmp, k.u.f); jx_buf_printf(c, b, "\"%s\"", tmp); return true;
    case JV_BOOL: jx_buf_puts(c, b, k.u.b ? "\"true\"" : "\"false\""); return true;
    case JV_NONE: jx_buf_puts(c, b, "\"null\""); return true;
    default: *bad = jv_type_name(k); return false;
    }
}

static int cmp_keys(const void *x, const void *y)
{
    const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
    if (a->k != JV_STR || b->k != JV_STR) return 0;
    size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
    int r = memcmp(a->u.s->s, b->u.s->s, n);
    return r ? r : (a->u.s->len < b->u.s->len ? -1 : a->u.s->len > b->u.s->len);
}

bool jv_to_json(jx_ctx *c, jx_buf *b, jv v, const jx_json_opts *o, int depth, const char **bad)
{
    char tmp[64];
    if (depth > 200) { *bad = "value nested too deeply"; return false; }
    bool ind = o->indent >= 0 || o->indent_str;
    switch (v.k) {
    case JV_NONE: jx_buf_puts(c, b, "null"); return true;
    case JV_BOOL: jx_buf_puts(c, b, v.u.b ? "true" : "false"); return true;
    case JV_INT: jx_buf_printf(c, b, "%lld", (long long)v.u.i); return true;
    case JV_FLOAT:
        if (isnan(v.u.f)) jx_buf_puts(c, b, "NaN");
        else if (isinf(v.u.f)) jx_buf_puts(c, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else { jx_float_repr(tmp, sizeof tmp, v.u.f); jx_buf_puts(c, b, tmp); }
        return true;
    case JV_STR: json_str(c, b, v.u.s->s, v.u.s->len, o->ensure_ascii); return true;
    case JV_LIST: case JV_TUPLE:
        if (v.u.l->n == 0) { jx_buf_puts(c, b, "[]"); return true; }
        jx_buf_putc(c, b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jx_buf_puts(c, b, o->item_sep);
            if (ind) json_newline(c, b, o, depth + 1);
            if (!jv_to_json(c, b, v.u.l->v[i], o, depth + 1, bad)) return false;
        }
        if (ind) json_newline(c, b, o, depth);
        jx_buf_putc(c, b, ']');
        return true;
    case JV_DICT: {
        if (v.u.d->n == 0) { jx_buf_puts(c, b, "{}"); return true; }
        size_t n = v.u.d->n;
        const jv **order = jx_alloc(c, n * sizeof *order);
        for (size_t i = 0; i < n; i++) order[i] = &v.u.d->key[i];
        if (o->sort_keys) qsort(order, n, sizeof *order, cmp_keys);
        jx_buf_putc(c, b, '{');
        for (size_t i = 0; i < n; i++) {
            size_t at = (size_t)(order[i] - v.u.d->key);
            if (i) jx_buf_puts(c, b, o->item_sep);
            if (ind) json_newline(c, b, o, depth + 1);
            if (!json_key(c, b, v.u.d->key[at], o, bad)) return false;
            jx_buf_puts(c, b, o->key_sep);
            if (!jv_to_json(c, b, v.u.d->val[at], o, depth + 1, bad)) return false;
        }
        if (ind) json_newline(c, b, o, depth);
        jx_buf_putc(c, b, '}');
        return true;
    }
    default: *bad = jv_type_name(v); return false;
    }
}

/* ---- from jansson ---------------------------------------------------------- */

jv jv_from_json(jx_ctx *c, const json_t *j, int depth)
{
    if (depth > 200) jx_fail(c, EMBER_ERR_RANGE, 0, 0, "context JSON nested deeper than 200");
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_str(c, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv l = jv_list_new(c, JV_LIST, n);
        for (size_t i = 0; i < n; i++) jv_list_push(c, &l, jv_from_json(c, json_array_get(j, i), depth + 1));
        return l;
    }
    case JSON_OBJECT: {
        jv d = jv_dict_new(c, JV_DICT);
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)j, k, val)   /* JSON object keys are unique */
            dict_append(c, d.u.d, jv_cstr(c, k), jv_from_json(c, val, depth + 1));
        return d;
    }
    }
    return jv_none();
}
