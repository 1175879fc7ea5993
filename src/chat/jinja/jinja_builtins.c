/*
 * jinja_builtins.c — the filters, tests, global functions and Python methods
 * (str, dict, list) that chat templates call, with the semantics of jinja2
 * 3.1 (jinja2/filters.py, jinja2/tests.py, jinja2/defaults.py) and CPython;
 * tojson is transformers' override (json.dumps with ensure_ascii=False,
 * indent, separators, sort_keys; transformers/utils/chat_template_utils.py),
 * and raise_exception / strftime_now are transformers' globals.
 *
 * Owns: every name a template can call.
 * Must not: mutate values other than namespaces (jinja2's
 * ImmutableSandboxedEnvironment forbids list/dict mutation).
 */
#include "chat/jinja/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ---- helpers --------------------------------------------------------------- */

static jx_ctx *C(jx_render *r) { return &r->c; }

static jv need_str(jx_render *r, const jx_node *at, jv v, const char *what)
{
    if (v.k == JV_UNDEF) jx_fail_undefined(r, at, v);
    if (v.k != JV_STR) jx_rfail(r, at, "%s expects a string, got '%s'", what, jv_type_name(v));
    return v;
}

static int64_t need_int(jx_render *r, const jx_node *at, jv v, const char *what)
{
    if (v.k == JV_INT) return v.u.i;
    if (v.k == JV_BOOL) return v.u.b;
    if (v.k == JV_UNDEF) jx_fail_undefined(r, at, v);
    jx_rfail(r, at, "%s expects an integer, got '%s'", what, jv_type_name(v));
}

jv jx_iter_list(jx_render *r, const jx_node *at, jv v)
{
    switch (v.k) {
    case JV_LIST: case JV_TUPLE: return v;
    case JV_UNDEF: return jv_list_new(C(r), JV_LIST, 0);
    case JV_ITER: {   /* one-shot iterators yield what is left, once */
        jv l = jv_list_new(C(r), JV_LIST, v.u.l->n - v.u.l->pos);
        for (size_t i = v.u.l->pos; i < v.u.l->n; i++) jv_list_push(C(r), &l, v.u.l->v[i]);
        if (!v.u.l->view) v.u.l->pos = v.u.l->n;
        return l;
    }
    case JV_DICT: case JV_NS: {
        jv l = jv_list_new(C(r), JV_LIST, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(C(r), &l, v.u.d->key[i]);
        return l;
    }
    case JV_STR: {
        jv l = jv_list_new(C(r), JV_LIST, v.u.s->len);
        const char *s = v.u.s->s;
        size_t n = v.u.s->len, i = 0;
        while (i < n) {
            size_t st = i++;
            while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
            jv_list_push(C(r), &l, jv_str(C(r), s + st, i - st));
        }
        return l;
    }
    default: jx_rfail(r, at, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0; an int
 * attribute (dictsort's by-value index) is a plain item. */
static jv attr_path(jx_render *r, const jx_node *at, jv item, jv attr)
{
    if (attr.k != JV_STR) return jx_getitem(r, at, item, attr);
    const char *p = attr.u.s->s, *end = p + attr.u.s->len;
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        const char *e = dot ? dot : end;
        bool digits = e > p;
        for (const char *q = p; q < e; q++) if (*q < '0' || *q > '9') digits = false;
        jv key = digits ? jv_int(strtoll(p, NULL, 10)) : jv_str(C(r), p, (size_t)(e - p));
        item = jx_getitem(r, at, item, key);
        if (!dot) return item;
        p = dot + 1;
    }
}

static size_t py_len(jx_render *r, const jx_node *at, jv v)
{
    switch (v.k) {
    case JV_STR: return jx_utf8_len(v.u.s->s, v.u.s->len);
    case JV_LIST: case JV_TUPLE: return v.u.l->n;
    case JV_DICT: case JV_NS: return v.u.d->n;
    case JV_UNDEF: return 0;
    case JV_ITER: if (v.u.l->view) return v.u.l->n; /* fall through */
    default: jx_rfail(r, at, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static uint32_t next_cp(const char *s, size_t n, size_t *i)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0) { cp = (unsigned char)s[*i]; k = 1; }
    *i += (size_t)k;
    return (uint32_t)cp;
}

static void put_cp(jx_render *r, jx_buf *b, uint32_t cp)
{
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, u);
    jx_buf_put(C(r), b, (const char *)u, (size_t)k);
}

static bool py_isspace(uint32_t cp)
{
    return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

enum { CASE_LOWER, CASE_UPPER, CASE_CAPITALIZE, CASE_TITLE_JINJA, CASE_TITLE_PY };

static bool is_cased_letter(uint32_t cp)
{
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

static jv change_case(jx_render *r, jv s, int mode)
{
    jx_buf b = {0};
    jx_buf_put(C(r), &b, "", 0);
    size_t i = 0, n = s.u.s->len;
    bool first = true, prev_cased = false, word_start = true;
    while (i < n) {
        uint32_t cp = next_cp(s.u.s->s, n, &i), o;
        switch (mode) {
        case CASE_LOWER: o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
        case CASE_UPPER: o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); break;
        case CASE_CAPITALIZE:
            o = first ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            break;
        case CASE_TITLE_JINJA: /* word boundaries are runs of [-\s({\[<] */
            o = word_start ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            word_start = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            break;
        default: /* str.title(): upper after an uncased char */
            o = prev_cased ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp);
            prev_cased = is_cased_letter(cp);
            break;
        }
        first = false;
        put_cp(r, &b, o);
    }
    return jv_str(C(r), b.p, b.n);
}

/* str.strip / lstrip / rstrip with optional chars (None: whitespace) */
static jv strip(jx_render *r, jv s, jv chars, bool left, bool right)
{
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, a = 0, b = n;
    bool ws = chars.k != JV_STR;
    while (a < b) {
        size_t i = a;
        uint32_t cp = next_cp(p, n, &i);
        bool hit = ws ? py_isspace(cp) : memmem(chars.u.s->s, chars.u.s->len, p + a, i - a) != NULL;
        if (!left || !hit) break;
        a = i;
    }
    while (b > a && right) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
        size_t i = st;
        uint32_t cp = next_cp(p, n, &i);
        bool hit = ws ? py_isspace(cp) : memmem(chars.u.s->s, chars.u.s->len, p + st, b - st) != NULL;
        if (!hit) break;
        b = st;
    }
    return jv_str(C(r), p + a, b - a);
}

static jv split(jx_render *r, const jx_node *at, jv s, jv sep, int64_t maxsplit)
{
    jv out = jv_list_new(C(r), JV_LIST, 0);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    if (sep.k == JV_STR) {
        size_t sl = sep.u.s->len;
        if (sl == 0) jx_rfail(r, at, "empty separator");
        while (maxsplit != 0) {
            const char *hit = memmem(p + i, n - i, sep.u.s->s, sl);
            if (!hit) break;
            jv_list_push(C(r), &out, jv_str(C(r), p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + sl;
            if (maxsplit > 0) maxsplit--;
        }
        jv_list_push(C(r), &out, jv_str(C(r), p + i, n - i));
        return out;
    }
    for (;;) {
        while (i < n) { size_t k = i; if (!py_isspace(next_cp(p, n, &k))) break; i = k; }
        if (i >= n) break;
        if (maxsplit == 0) {
            size_t e = n;
            while (e > i) { size_t st = e - 1; while (st > i && ((unsigned char)p[st] & 0xC0) == 0x80) st--; size_t k = st; if (!py_isspace(next_cp(p, n, &k))) break; e = st; }
            jv_list_push(C(r), &out, jv_str(C(r), p + i, e - i));
            break;
        }
        size_t st = i;
        while (i < n) { size_t k = i; if (py_isspace(next_cp(p, n, &k))) break; i = k; }
        jv_list_push(C(r), &out, jv_str(C(r), p + st, i - st));
        if (maxsplit > 0) maxsplit--;
    }
    return out;
}

static jv replace(jx_render *r, jv s, jv old, jv new_, int64_t count)
{
    jx_buf b = {0};
    jx_buf_put(C(r), &b, "", 0);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0, ol = old.u.s->len;
    if (ol == 0) {   /* Python inserts `new` between every character */
        size_t k = 0;
        while (true) {
            if (count < 0 || (int64_t)k < count) jx_buf_put(C(r), &b, new_.u.s->s, new_.u.s->len);
            k++;
            if (i >= n) break;
            size_t st = i;
            next_cp(p, n, &i);
            jx_buf_put(C(r), &b, p + st, i - st);
        }
        return jv_str(C(r), b.p, b.n);
    }
    while (count != 0) {
        const char *hit = memmem(p + i, n - i, old.u.s->s, ol);
        if (!hit) break;
        jx_buf_put(C(r), &b, p + i, (size_t)(hit - (p + i)));
        jx_buf_put(C(r), &b, new_.u.s->s, new_.u.s->len);
        i = (size_t)(hit - p) + ol;
        if (count > 0) count--;
    }
    jx_buf_put(C(r), &b, p + i, n - i);
    return jv_str(C(r), b.p, b.n);
}

static bool affix(jv s, jv a, bool start)
{
    if (a.u.s->len > s.u.s->len) return false;
    const char *p = start ? s.u.s->s : s.u.s->s + s.u.s->len - a.u.s->len;
    return memcmp(p, a.u.s->s, a.u.s->len) == 0;
}

static bool starts_or_ends(jx_render *r, const jx_node *at, jv s, jv a, bool start)
{
    if (a.k == JV_TUPLE || a.k == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n; i++)
            if (affix(s, need_str(r, at, a.u.l->v[i], start ? "startswith" : "endswith"), start)) return true;
        return false;
    }
    return affix(s, need_str(r, at, a, start ? "startswith" : "endswith"), start);
}

static jv join(jx_render *r, const jx_node *at, jv seq, jv sep, jv attr)
{
    jv items = jx_iter_list(r, at, seq);
    jx_buf b = {0};
    jx_buf_put(C(r), &b, "", 0);
    for (size_t i = 0; i < items.u.l->n; i++) {
        if (i && sep.k == JV_STR) jx_buf_put(C(r), &b, sep.u.s->s, sep.u.s->len);
        jv x = items.u.l->v[i];
        if (attr.k == JV_STR) x = attr_path(r, at, x, attr);
        jv_str_into(C(r), &b, x);
    }
    return jv_str(C(r), b.p, b.n);
}

static jv to_json(jx_render *r, const jx_node *at, jv v, const jx_args *a, int first)
{
    jx_json_opts o = {.ensure_ascii = false, .indent = -1, .item_sep = ", ", .key_sep = ": "};
    jv ea = jx_arg(a, first, "ensure_ascii", jv_bool(false));
    jv ind = jx_arg(a, first + 1, "indent", jv_none());
    jv sepv = jx_arg(a, first + 2, "separators", jv_none());
    jv sk = jx_arg(a, first + 3, "sort_keys", jv_bool(false));
    o.ensure_ascii = jv_truthy(ea);
    o.sort_keys = jv_truthy(sk);
    if (ind.k == JV_INT) { o.indent = ind.u.i < 0 ? 0 : (int)(ind.u.i > 64 ? 64 : ind.u.i); o.item_sep = ","; }
    else if (ind.k == JV_STR) { o.indent_str = ind.u.s->s; o.indent = 0; o.item_sep = ","; }
    else if (ind.k != JV_NONE && ind.k != JV_UNDEF) jx_rfail(r, at, "tojson: indent must be an int, str or None");
    if (sepv.k == JV_LIST || sepv.k == JV_TUPLE) {
        if (sepv.u.l->n != 2) jx_rfail(r, at, "tojson: separators must be a pair");
        o.item_sep = need_str(r, at, sepv.u.l->v[0], "tojson separators").u.s->s;
        o.key_sep = need_str(r, at, sepv.u.l->v[1], "tojson separators").u.s->s;
    }
    jx_buf b = {0};
    jx_buf_put(C(r), &b, "", 0);
    const char *bad = NULL;
    if (!jv_to_json(C(r), &b, v, &o, 0, &bad)) {
        if (v.k == JV_UNDEF) jx_fail_undefined(r, at, v);
        jx_rfail(r, at, "Object of type %s is not JSON serializable", bad ? bad : "?");
    }
    return jv_str(C(r), b.p, b.n);
}

/* Python's stable sort with a comparison that may fail (merge sort; the
 * arena holds the scratch so a failure leaks nothing). */
typedef struct { jx_render *r; const jx_node *at; jv attr; bool fold; bool reverse; } sort_ctx;

static jv sort_key(sort_ctx *s, jv v)
{
    if (s->attr.k == JV_STR) v = attr_path(s->r, s->at, v, s->attr);
    if (s->fold && v.k == JV_STR) v = change_case(s->r, v, CASE_LOWER);
    return v;
}

static void merge_sort(sort_ctx *s, jv *v, jv *k, jv *tv, jv *tk, size_t n)
{
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(s, v, k, tv, tk, h);
    merge_sort(s, v + h, k + h, tv, tk, n - h);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        int c = jx_compare(s->r, s->at, k[j], k[i]);
        bool take_right = s->reverse ? c > 0 : c < 0;
        if (take_right) { tv[o] = v[j]; tk[o++] = k[j++]; }
        else { tv[o] = v[i]; tk[o++] = k[i++]; }
    }
    while (i < h) { tv[o] = v[i]; tk[o++] = k[i++]; }
    while (j < n) { tv[o] = v[j]; tk[o++] = k[j++]; }
    memcpy(v, tv, n * sizeof *v);
    memcpy(k, tk, n * sizeof *k);
}

static jv sorted(jx_render *r, const jx_node *at, jv seq, bool reverse, bool case_sensitive, jv attr)
{
    jv items = jx_iter_list(r, at, seq);
    size_t n = items.u.l->n;
    jv out = jv_list_new(C(r), JV_LIST, n);
    sort_ctx s = {r, at, attr, !case_sensitive, reverse};
    jv *k = jx_alloc(C(r), (n + 1) * sizeof *k), *tv = jx_alloc(C(r), (n + 1) * sizeof *tv), *tk = jx_alloc(C(r), (n + 1) * sizeof *tk);
    for (size_t i = 0; i < n; i++) { out.u.l->v[i] = items.u.l->v[i]; k[i] = sort_key(&s, items.u.l->v[i]); }
    out.u.l->n = n;
    merge_sort(&s, out.u.l->v, k, tv, tk, n);
    return out;
}

/* select/reject/selectattr/rejectattr/map share argument shapes */
static bool run_test_on(jx_render *r, const jx_node *at, jv item, const jx_args *a, int test_at)
{
    if (a->n <= test_at) return jv_truthy(item);
    jv tn = need_str(r, at, a->v[test_at], "select/reject test name");
    jx_args rest = {a->v + test_at + 1, a->n - test_at - 1, a->kn, a->kv, a->nk};
    return jx_apply_test(r, at, tn.u.s->s, item, &rest);
}

static jv select_filter(jx_render *r, const jx_node *at, jv seq, const jx_args *a, bool attr, bool want)
{
    if (!jv_truthy(seq)) return jv_iter_from(C(r), jv_list_new(C(r), JV_LIST, 0), "generator", false);   /* jinja2: "if value:" */
    jv items = jx_iter_list(r, at, seq);
    jv out = jv_list_new(C(r), JV_LIST, 0);
    for (size_t i = 0; i < items.u.l->n; i++) {
        jv it = items.u.l->v[i], probe = it;
        if (attr) {
            if (a->n < 1) jx_rfail(r, at, "selectattr/rejectattr need an attribute name");
            jv an = need_str(r, at, a->v[0], "attribute name");
            probe = attr_path(r, at, it, an);
        }
        if (run_test_on(r, at, probe, a, attr ? 1 : 0) == want) jv_list_push(C(r), &out, it);
    }
    return jv_iter_from(C(r), out, "generator", false);
}

static jv map_filter(jx_render *r, const jx_node *at, jv seq, const jx_args *a)
{
    if (!jv_truthy(seq)) return jv_iter_from(C(r), jv_list_new(C(r), JV_LIST, 0), "generator", false);   /* jinja2: "if value:" */
    jv items = jx_iter_list(r, at, seq);
    jv out = jv_list_new(C(r), JV_LIST, items.u.l->n);
    jv attr = jx_arg(a, -1, "attribute", jv_undef());
    jv dflt = jx_arg(a, -1, "default", jv_undef());
    for (size_t i = 0; i < items.u.l->n; i++) {
        jv it = items.u.l->v[i];
        if (attr.k == JV_STR) {
            jv v = attr_path(r, at, it, attr);
            if (v.k == JV_UNDEF && dflt.k != JV_UNDEF) v = dflt;
            jv_list_push(C(r), &out, v);
        } else if (attr.k == JV_UNDEF && a->n >= 1) {
            jv fn = need_str(r, at, a->v[0], "map filter name");
            jx_args rest = {a->v + 1, a->n - 1, a->kn, a->kv, a->nk};
            jv_list_push(C(r), &out, jx_apply_filter(r, at, fn.u.s->s, it, &rest));
        } else jv_list_push(C(r), &out, it);
    }
    return jv_iter_from(C(r), out, "generator", false);
}

static jv to_int(jx_render *r, jv v, jv dflt, int64_t base)
{
    if (v.k == JV_INT) return v;
    if (v.k == JV_BOOL) return jv_int(v.u.b);
    if (v.k == JV_FLOAT) return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? jv_int((int64_t)v.u.f) : dflt;
    if (v.k == JV_STR) {
        const char *s = v.u.s->s;
        char *end;
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        long long x = strtoll(s, &end, (int)base);
        if (end != s) {
            while (*end == ' ' || *end == '\t' || *end == '\n') end++;
            if (*end == 0) return jv_int(x);
        }
        double d = strtod(s, &end);
        if (end != s) {
            while (*end == ' ' || *end == '\t' || *end == '\n') end++;
            if (*end == 0 && isfinite(d)) return jv_int((int64_t)d);
        }
    }
    (void)r;
    return dflt;
}

static jv to_float(jx_render *r, jv v, jv dflt)
{
    if (v.k == JV_FLOAT) return v;
    if (v.k == JV_INT || v.k == JV_BOOL) return jv_float(jv_as_double(v));
    if (v.k == JV_STR) {
        char *end;
        double d = strtod(v.u.s->s, &end);
        if (end != v.u.s->s) {
            while (*end == ' ' || *end == '\t' || *end == '\n') end++;
            if (*end == 0) return jv_float(d);
        }
    }
    (void)r;
    return dflt;
}

static jv items_of(jx_render *r, const jx_node *at, jv d)
{
    if (d.k == JV_UNDEF) return jv_list_new(C(r), JV_LIST, 0);
    if (d.k != JV_DICT && d.k != JV_NS) jx_rfail(r, at, "items: expected a mapping, got '%s'", jv_type_name(d));
    jv out = jv_list_new(C(r), JV_LIST, d.u.d->n);
    for (size_t i = 0; i < d.u.d->n; i++) {
        jv t = jv_list_new(C(r), JV_TUPLE, 2);
        jv_list_push(C(r), &t, d.u.d->key[i]);
        jv_list_push(C(r), &t, d.u.d->val[i]);
        jv_list_push(C(r), &out, t);
    }
    return out;
}

static jv indent(jx_render *r, jv s, jv width, bool first, bool blank)
{
    jx_buf pad = {0};
    jx_buf_put(C(r), &pad, "", 0);
    if (width.k == JV_STR) jx_buf_put(C(r), &pad, width.u.s->s, width.u.s->len);
    else for (int64_t i = 0; i < (width.k == JV_INT ? width.u.i : 4) && i < 256; i++) jx_buf_putc(C(r), &pad, ' ');
    jx_buf b = {0};
    jx_buf_put(C(r), &b, "", 0);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    bool line_no = 0;
    while (i <= n) {
        size_t e = i;
        while (e < n && p[e] != '\n') e++;
        bool is_blank = true;
        for (size_t k = i; k < e; k++) if (!py_isspace((unsigned char)p[k])) { is_blank = false; break; }
        bool do_pad = line_no ? (blank || !is_blank) : first;
        if (line_no && e == n && i == n) do_pad = false;   /* trailing newline adds no padded empty line */
        if (do_pad && !(line_no == 0 && e == i && !blank && !first)) jx_buf_put(C(r), &b, pad.p, pad.n);
        jx_buf_put(C(r), &b, p + i, e - i);
        if (e < n) jx_buf_putc(C(r), &b, '\n');
        line_no = 1;
        if (e >= n) break;
        i = e + 1;
    }
    return jv_str(C(r), b.p, b.n);
}

/* ---- filters -------------------------------------------------------------- */

jv jx_apply_filter(jx_render *r, const jx_node *at, const char *name, jv in, const jx_args *a)
{
#define IS(x) (strcmp(name, x) == 0)
    jx_step(r, at);
    if (IS("default") || IS("d")) {
        jv dv = jx_arg(a, 0, "default_value", jv_str(C(r), "", 0));
        bool boolean = jv_truthy(jx_arg(a, 1, "boolean", jv_bool(false)));
        if (in.k == JV_UNDEF || (boolean && !jv_truthy(in))) return dv;
        return in;
    }
    if (IS("tojson")) return to_json(r, at, in, a, 0);
    if (IS("safe")) {
        if (in.k == JV_STR && in.u.s->markup) return in;
        jv m = jv_to_str(C(r), in);
        m = jv_str(C(r), m.u.s->s, m.u.s->len);
        ((jx_str *)m.u.s)->markup = true;
        return m;
    }
    if (IS("string")) return jv_to_str(C(r), in);
    if (IS("length") || IS("count")) return jv_int((int64_t)py_len(r, at, in));
    if (IS("list")) {
        jv l = jx_iter_list(r, at, in);
        jv out = jv_list_new(C(r), JV_LIST, l.u.l->n);
        for (size_t i = 0; i < l.u.l->n; i++) jv_list_push(C(r), &out, l.u.l->v[i]);
        return out;
    }
    if (IS("items")) {
        if (in.k != JV_UNDEF && in.k != JV_DICT && in.k != JV_NS) jx_rfail(r, at, "Can only get item pairs from a mapping.");
        return jv_iter_from(C(r), items_of(r, at, in), "generator", false);
    }
    if (IS("batch")) {
        int64_t size = need_int(r, at, jx_arg(a, 0, "linecount", jv_undef()), "batch");
        jv fill = jx_arg(a, 1, "fill_with", jv_undef());
        if (size <= 0) jx_rfail(r, at, "batch size must be positive");
        jv l = jx_iter_list(r, at, in), out = jv_list_new(C(r), JV_LIST, 0), cur = jv_undef();
        for (size_t i = 0; i < l.u.l->n; i++) {
            if (cur.k == JV_UNDEF) cur = jv_list_new(C(r), JV_LIST, (size_t)size);
            jv_list_push(C(r), &cur, l.u.l->v[i]);
            if ((int64_t)cur.u.l->n == size) { jv_list_push(C(r), &out, cur); cur = jv_undef(); }
        }
        if (cur.k != JV_UNDEF) {
            if (fill.k != JV_UNDEF) while ((int64_t)cur.u.l->n < size) jv_list_push(C(r), &cur, fill);
            jv_list_push(C(r), &out, cur);
        }
        return jv_iter_from(C(r), out, "generator", false);
    }
    if (IS("first") && in.k == JV_ITER && !in.u.l->view) {   /* next(iter(value)) */
        if (in.u.l->pos < in.u.l->n) return in.u.l->v[in.u.l->pos++];
        jv u = jv_undef();
        u.u.s = jv_cstr(C(r), "No first item, sequence was empty.").u.s;
        return u;
    }
    if (IS("last") && in.k == JV_ITER && !in.u.l->view) jx_rfail(r, at, "'%s' object is not reversible", jv_type_name(in));
    if (IS("first") || IS("last")) {
        jv l = jx_iter_list(r, at, in);
        if (l.u.l->n == 0) {
            jv u = jv_undef();
            u.u.s = jv_cstr(C(r), "No first item, sequence was empty.").u.s;
            return u;
        }
        return IS("first") ? l.u.l->v[0] : l.u.l->v[l.u.l->n - 1];
    }
    if (IS("join")) return join(r, at, in, jx_arg(a, 0, "d", jv_str(C(r), "", 0)), jx_arg(a, 1, "attribute", jv_none()));
    if (IS("map")) return map_filter(r, at, in, a);
    if (IS("select")) return select_filter(r, at, in, a, false, true);
    if (IS("reject")) return select_filter(r, at, in, a, false, false);
    if (IS("selectattr")) return select_filter(r, at, in, a, true, true);
    if (IS("rejectattr")) return select_filter(r, at, in, a, true, false);
    if (in.k == JV_UNDEF && (IS("int") || IS("float") || IS("indent") || IS("dictsort")))
        jx_fail_undefined(r, at, in);   /* these read the value; the rest treat Undefined as empty */
    if (IS("int")) return to_int(r, in, jx_arg(a, 0, "default", jv_int(0)), need_int(r, at, jx_arg(a, 1, "base", jv_int(10)), "int base"));
    if (IS("float")) return to_float(r, in, jx_arg(a, 0, "default", jv_float(0.0)));
    if (IS("abs")) {
        if (in.k == JV_FLOAT) return jv_float(fabs(in.u.f));
        int64_t v = need_int(r, at, in, "abs");
        return jv_int(v < 0 ? -v : v);
    }
    if (IS("reverse")) {
        if (in.k == JV_STR) {
            jv l = jx_iter_list(r, at, in);
            jx_buf b = {0};
            jx_buf_put(C(r), &b, "", 0);
            for (size_t i = l.u.l->n; i-- > 0;) jx_buf_put(C(r), &b, l.u.l->v[i].u.s->s, l.u.l->v[i].u.s->len);
            return jv_str(C(r), b.p, b.n);
        }
        bool was_seq = in.k == JV_LIST || in.k == JV_TUPLE;
        jv l = jx_iter_list(r, at, in);
        jv out = jv_list_new(C(r), JV_LIST, l.u.l->n);
        for (size_t i = l.u.l->n; i-- > 0;) jv_list_push(C(r), &out, l.u.l->v[i]);
        return was_seq ? jv_iter_from(C(r), out, "list_reverseiterator", false) : out;
    }
    if (IS("sort"))
        return sorted(r, at, in, jv_truthy(jx_arg(a, 0, "reverse", jv_bool(false))),
                      jv_truthy(jx_arg(a, 1, "case_sensitive", jv_bool(false))), jx_arg(a, 2, "attribute", jv_none()));
    if (IS("unique")) {
        jv l = jx_iter_list(r, at, in);
        bool cs = jv_truthy(jx_arg(a, 0, "case_sensitive", jv_bool(false)));
        jv attr = jx_arg(a, 1, "attribute", jv_none());
        jv out = jv_list_new(C(r), JV_LIST, 0), seen = jv_list_new(C(r), JV_LIST, 0);
        for (size_t i = 0; i < l.u.l->n; i++) {
            jv k = l.u.l->v[i];
            if (attr.k == JV_STR) k = attr_path(r, at, k, attr);
            if (!cs && k.k == JV_STR) k = change_case(r, k, CASE_LOWER);
            bool dup = false;
            for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jv_equal(seen.u.l->v[j], k);
            if (!dup) { jv_list_push(C(r), &seen, k); jv_list_push(C(r), &out, l.u.l->v[i]); }
        }
        return jv_iter_from(C(r), out, "generator", false);
    }
    if (IS("min") || IS("max")) {
        jv l = jx_iter_list(r, at, in);
        if (l.u.l->n == 0) return jv_undef();
        jv best = l.u.l->v[0];
        for (size_t i = 1; i < l.u.l->n; i++) {
            int c = jx_compare(r, at, l.u.l->v[i], best);
            if (IS("min") ? c < 0 : c > 0) best = l.u.l->v[i];
        }
        return best;
    }
    if (IS("sum")) {
        jv l = jx_iter_list(r, at, in);
        jv attr = jx_arg(a, 0, "attribute", jv_none());
        jv acc = jx_arg(a, 1, "start", jv_int(0));
        for (size_t i = 0; i < l.u.l->n; i++) {
            jv x = l.u.l->v[i];
            if (attr.k == JV_STR) x = attr_path(r, at, x, attr);
            if (!jv_is_number(acc) || !jv_is_number(x)) jx_rfail(r, at, "sum: unsupported operand types");
            if (acc.k == JV_FLOAT || x.k == JV_FLOAT) acc = jv_float(jv_as_double(acc) + jv_as_double(x));
            else acc = jv_int((acc.k == JV_INT ? acc.u.i : acc.u.b) + (x.k == JV_INT ? x.u.i : x.u.b));
        }
        return acc;
    }
    if (IS("round")) {
        int64_t prec = need_int(r, at, jx_arg(a, 0, "precision", jv_int(0)), "round precision");
        jv m = jx_arg(a, 1, "method", jv_undef());
        double x = jv_as_double(in), f = pow(10.0, (double)prec), y;
        if (!jv_is_number(in)) jx_rfail(r, at, "round expects a number");
        bool common = !(m.k == JV_STR && (!strcmp(m.u.s->s, "floor") || !strcmp(m.u.s->s, "ceil")));
        if (common && in.k != JV_FLOAT && prec >= 0) return jv_int(in.k == JV_INT ? in.u.i : in.u.b);   /* round(int, n) is an int */
        if (m.k == JV_STR && !strcmp(m.u.s->s, "floor")) y = floor(x * f) / f;
        else if (m.k == JV_STR && !strcmp(m.u.s->s, "ceil")) y = ceil(x * f) / f;
        else y = nearbyint(x * f) / f;   /* Python's round(): half to even */
        return jv_float(y);
    }
    if (IS("attr")) return jx_getattr(r, at, in, need_str(r, at, jx_arg(a, 0, "name", jv_undef()), "attr").u.s->s,
                                       need_str(r, at, jx_arg(a, 0, "name", jv_undef()), "attr").u.s->len);
    if (IS("escape") || IS("e") || IS("forceescape")) return jv_html_escape(C(r), in);
    if (IS("dictsort")) {
        jv l = items_of(r, at, in);
        jv by = jx_arg(a, 1, "by", jv_cstr(C(r), "key"));
        jv idx = jv_int(by.k == JV_STR && !strcmp(by.u.s->s, "value") ? 1 : 0);
        return sorted(r, at, l, jv_truthy(jx_arg(a, 2, "reverse", jv_bool(false))),
                      jv_truthy(jx_arg(a, 0, "case_sensitive", jv_bool(false))), idx.u.i ? jv_cstr(C(r), "1") : jv_none());
    }
    /* string filters: the input is converted with str() first */
    jv s = (in.k == JV_UNDEF) ? jv_str(C(r), "", 0) : jv_to_str(C(r), in);
    if (IS("trim")) return strip(r, s, jx_arg(a, 0, "chars", jv_none()), true, true);
    if (IS("lower")) return change_case(r, s, CASE_LOWER);
    if (IS("upper")) return change_case(r, s, CASE_UPPER);
    if (IS("capitalize")) return change_case(r, s, CASE_CAPITALIZE);
    if (IS("title")) return change_case(r, s, CASE_TITLE_JINJA);
    if (IS("replace")) {
        jv old = jv_to_str(C(r), jx_arg(a, 0, "old", jv_undef()));
        jv nw = jv_to_str(C(r), jx_arg(a, 1, "new", jv_undef()));
        jv cnt = jx_arg(a, 2, "count", jv_none());
        return replace(r, s, old, nw, cnt.k == JV_INT ? cnt.u.i : -1);
    }
    if (IS("wordcount")) {   /* len(re.findall(r"\w+", s)) */
        int64_t words = 0;
        bool in_word = false;
        size_t i = 0;
        while (i < s.u.s->len) {
            uint32_t cp = next_cp(s.u.s->s, s.u.s->len, &i);
            utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
            bool w = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                     (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO) || c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC;
            if (w && !in_word) words++;
            in_word = w;
        }
        return jv_int(words);
    }
    if (IS("indent"))
        return indent(r, s, jx_arg(a, 0, "width", jv_int(4)), jv_truthy(jx_arg(a, 1, "first", jv_bool(false))),
                      jv_truthy(jx_arg(a, 2, "blank", jv_bool(false))));
    if (IS("format")) {
        jv t = jv_list_new(C(r), JV_TUPLE, (size_t)a->n);
        for (int i = 0; i < a->n; i++) jv_list_push(C(r), &t, a->v[i]);
        return jx_percent_format(r, at, s, t);
    }
    jx_rfail(r, at, "no filter named '%s'", name);
#undef IS
}

static bool all_cp(jv s, int kind);

/* ---- tests ------------------------------------------------------------------ */

bool jx_apply_test(jx_render *r, const jx_node *at, const char *name, jv v, const jx_args *a)
{
#define IS(x) (strcmp(name, x) == 0)
    jv x = jx_arg(a, 0, NULL, jv_undef());
    if (IS("defined")) return v.k != JV_UNDEF;
    if (IS("undefined")) return v.k == JV_UNDEF;
    if (IS("none")) return v.k == JV_NONE;
    if (IS("boolean")) return v.k == JV_BOOL;
    if (IS("true")) return v.k == JV_BOOL && v.u.b;
    if (IS("false")) return v.k == JV_BOOL && !v.u.b;
    if (IS("integer")) return v.k == JV_INT;
    if (IS("float")) return v.k == JV_FLOAT;
    if (IS("number")) return jv_is_number(v);
    if (IS("string")) return v.k == JV_STR;
    if (IS("mapping")) return v.k == JV_DICT;
    if (IS("sequence")) return v.k == JV_STR || v.k == JV_LIST || v.k == JV_TUPLE || v.k == JV_DICT;
    if (IS("iterable")) return v.k == JV_STR || v.k == JV_LIST || v.k == JV_TUPLE || v.k == JV_DICT || v.k == JV_UNDEF || v.k == JV_ITER;
    if (IS("callable")) return v.k == JV_MACRO || v.k == JV_BUILTIN || v.k == JV_METHOD;
    if (IS("sameas")) {
        if (v.k != x.k) return false;
        if (v.k == JV_NONE || v.k == JV_UNDEF) return true;
        if (v.k == JV_BOOL) return v.u.b == x.u.b;
        return jv_equal(v, x) && (v.k == JV_INT || v.k == JV_STR);
    }
    if (IS("eq") || IS("equalto") || IS("==")) return jv_equal(v, x);
    if (IS("ne") || IS("!=")) return !jv_equal(v, x);
    if (IS("lt") || IS("lessthan") || IS("<")) return jx_compare(r, at, v, x) < 0;
    if (IS("le") || IS("<=")) return jx_compare(r, at, v, x) <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return jx_compare(r, at, v, x) > 0;
    if (IS("ge") || IS(">=")) return jx_compare(r, at, v, x) >= 0;
    if (IS("in")) {
        jx_args one = {&v, 1, NULL, NULL, 0};
        (void)one;
        if (x.k == JV_STR) return v.k == JV_STR && memmem(x.u.s->s, x.u.s->len, v.u.s->s, v.u.s->len) != NULL;
        if (x.k == JV_LIST || x.k == JV_TUPLE) { for (size_t i = 0; i < x.u.l->n; i++) if (jv_equal(x.u.l->v[i], v)) return true; return false; }
        if (x.k == JV_DICT) { jv o; return jv_dict_get(x.u.d, v, &o); }
        if (x.k == JV_ITER) { jv l = jx_iter_list(r, at, x); for (size_t i = 0; i < l.u.l->n; i++) if (jv_equal(l.u.l->v[i], v)) return true; return false; }
        jx_rfail(r, at, "argument of type '%s' is not iterable", jv_type_name(x));
    }
    if (IS("odd") || IS("even") || IS("divisibleby")) {   /* value % 2 == 1, value % 2 == 0, value % num == 0 */
        jv d = IS("divisibleby") ? x : jv_int(2);
        if (v.k == JV_UNDEF) jx_fail_undefined(r, at, v);
        if (!jv_is_number(v) || !jv_is_number(d)) jx_rfail(r, at, "test '%s' needs numbers, got '%s'", name, jv_type_name(v));
        double m;
        if (v.k != JV_FLOAT && d.k != JV_FLOAT) {
            int64_t a = v.k == JV_INT ? v.u.i : v.u.b, b = d.k == JV_INT ? d.u.i : d.u.b;
            if (b == 0) jx_rfail(r, at, "integer division or modulo by zero");
            int64_t q = a % b;
            if (q != 0 && ((q < 0) != (b < 0))) q += b;
            m = (double)q;
        } else {
            double a = jv_as_double(v), b = jv_as_double(d);
            if (b == 0) jx_rfail(r, at, "float modulo");
            m = fmod(a, b);
            if (m != 0 && ((m < 0) != (b < 0))) m += b;
        }
        return IS("odd") ? m == 1 : m == 0;
    }
    if (IS("lower") || IS("upper")) {   /* jinja2: str(value).islower() */
        v = jv_to_str(C(r), v);
        return all_cp(v, IS("lower") ? 4 : 5);
    }
    if (IS("escaped")) return false;
    jx_rfail(r, at, "no test named '%s'", name);
#undef IS
}

/* ---- methods ------------------------------------------------------------------ */

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
    "lower", "upper", "title", "capitalize", "replace", "find", "rfind", "index", "count", "join", "isdigit",
    "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", "format", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *const LIST_METHODS[] = {"index", "count", NULL};

static bool in_set(const char *const *set, const char *name)
{
    for (int i = 0; set[i]; i++) if (!strcmp(set[i], name)) return true;
    return false;
}

bool jx_has_method(jv self, const char *name)
{
    switch (self.k) {
    case JV_STR: return in_set(STR_METHODS, name);
    case JV_DICT: return in_set(DICT_METHODS, name);
    case JV_LIST: case JV_TUPLE: return in_set(LIST_METHODS, name);
    default: return false;
    }
}

static int64_t find_cp(jv s, jv sub, bool last)
{
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, m = sub.u.s->len;
    const char *hit = NULL;
    if (!last) hit = memmem(p, n, sub.u.s->s, m);
    else
        for (size_t i = n + 1; i-- > 0;)
            if (i + m <= n && memcmp(p + i, sub.u.s->s, m) == 0) { hit = p + i; break; }
    if (!hit) return -1;
    return (int64_t)jx_utf8_len(p, (size_t)(hit - p));
}

static bool all_cp(jv s, int kind)
{
    if (s.u.s->len == 0) return false;
    size_t i = 0, n = s.u.s->len;
    bool any_cased = false;
    while (i < n) {
        uint32_t cp = next_cp(s.u.s->s, n, &i);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        bool letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        bool digit = c == UTF8PROC_CATEGORY_ND;
        switch (kind) {
        case 0: if (!digit) return false; break;
        case 1: if (!letter) return false; break;
        case 2: if (!letter && !digit && c != UTF8PROC_CATEGORY_NL && c != UTF8PROC_CATEGORY_NO) return false; break;
        case 3: if (!py_isspace(cp)) return false; break;
        case 4: if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) return false; if (c == UTF8PROC_CATEGORY_LL) any_cased = true; break;
        case 5: if (c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) return false; if (c == UTF8PROC_CATEGORY_LU) any_cased = true; break;
        }
    }
    return kind >= 4 ? any_cased : true;
}

/* str.format with {}, {0}, {name}, optional !r/!s; format specs other than
 * empty are refused rather than guessed. */
static jv str_format(jx_render *r, const jx_node *at, jv fmt, const jx_args *a)
{
    jx_buf b = {0};
    jx_buf_put(C(r), &b, "", 0);
    const char *p = fmt.u.s->s;
    size_t n = fmt.u.s->len, auto_i = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch == '}' ) {
            if (i + 1 < n && p[i + 1] == '}') i++;
            else jx_rfail(r, at, "Single '}' encountered in format string");
            jx_buf_putc(C(r), &b, '}');
            continue;
        }
        if (ch != '{') { jx_buf_putc(C(r), &b, ch); continue; }
        if (i + 1 < n && p[i + 1] == '{') { jx_buf_putc(C(r), &b, '{'); i++; continue; }
        size_t e = i + 1;
        while (e < n && p[e] != '}') e++;
        if (e >= n) jx_rfail(r, at, "Single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fl = e - i - 1, nl = 0;
        while (nl < fl && f[nl] != '!' && f[nl] != ':') nl++;
        if (nl < fl && f[nl] == ':' && nl + 1 < fl) jx_rfail(r, at, "format specs are not supported in str.format");
        bool as_repr = nl + 1 < fl && f[nl] == '!' && f[nl + 1] == 'r';
        jv v;
        if (nl == 0) {
            if (auto_i >= (size_t)a->n) jx_rfail(r, at, "Replacement index %zu out of range for positional args tuple", auto_i);
            v = a->v[auto_i++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t k = (size_t)strtoul(f, NULL, 10);
            if (k >= (size_t)a->n) jx_rfail(r, at, "Replacement index %zu out of range for positional args tuple", k);
            v = a->v[k];
        } else {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(nl < 127 ? nl : 127), f);
            v = jx_arg(a, -1, name, jv_undef());
            if (v.k == JV_UNDEF) jx_rfail(r, at, "KeyError: '%s'", name);
        }
        if (as_repr) jv_repr_into(C(r), &b, v);
        else jv_str_into(C(r), &b, v);
        i = e;
    }
    return jv_str(C(r), b.p, b.n);
}

jv jx_call_method(jx_render *r, const jx_node *at, jv self, const char *name, const jx_args *a)
{
#define IS(x) (strcmp(name, x) == 0)
    jx_step(r, at);
    if (self.k == JV_STR) {
        if (IS("strip") || IS("lstrip") || IS("rstrip"))
            return strip(r, self, jx_arg(a, 0, "chars", jv_none()), !IS("rstrip"), !IS("lstrip"));
        if (IS("split") || IS("rsplit")) {
            jv sep = jx_arg(a, 0, "sep", jv_none());
            if (sep.k != JV_NONE) need_str(r, at, sep, "split");
            int64_t mx = need_int(r, at, jx_arg(a, 1, "maxsplit", jv_int(-1)), "split maxsplit");
            if (IS("rsplit") && mx >= 0) {
                /* rsplit with a limit: split fully, then rejoin the head */
                jv all = split(r, at, self, sep, -1);
                size_t n = all.u.l->n;
                if ((int64_t)n - 1 <= mx || sep.k != JV_STR) return all;
                size_t keep = n - (size_t)mx;
                jv head = jv_list_new(C(r), JV_LIST, keep);
                for (size_t i = 0; i < keep; i++) jv_list_push(C(r), &head, all.u.l->v[i]);
                jv out = jv_list_new(C(r), JV_LIST, (size_t)mx + 1);
                jv_list_push(C(r), &out, join(r, at, head, sep, jv_none()));
                for (size_t i = keep; i < n; i++) jv_list_push(C(r), &out, all.u.l->v[i]);
                return out;
            }
            return split(r, at, self, sep, mx);
        }
        if (IS("startswith") || IS("endswith")) return jv_bool(starts_or_ends(r, at, self, jx_arg(a, 0, "prefix", jv_undef()), IS("startswith")));
        if (IS("lower")) return change_case(r, self, CASE_LOWER);
        if (IS("upper")) return change_case(r, self, CASE_UPPER);
        if (IS("title")) return change_case(r, self, CASE_TITLE_PY);
        if (IS("capitalize")) return change_case(r, self, CASE_CAPITALIZE);
        if (IS("replace")) {
            jv o = need_str(r, at, jx_arg(a, 0, "old", jv_undef()), "replace");
            jv n = need_str(r, at, jx_arg(a, 1, "new", jv_undef()), "replace");
            return replace(r, self, o, n, need_int(r, at, jx_arg(a, 2, "count", jv_int(-1)), "replace count"));
        }
        if (IS("find") || IS("rfind") || IS("index")) {
            int64_t i = find_cp(self, need_str(r, at, jx_arg(a, 0, "sub", jv_undef()), name), IS("rfind"));
            if (i < 0 && IS("index")) jx_rfail(r, at, "substring not found");
            return jv_int(i);
        }
        if (IS("count")) {
            jv sub = need_str(r, at, jx_arg(a, 0, "sub", jv_undef()), "count");
            if (sub.u.s->len == 0) return jv_int((int64_t)jx_utf8_len(self.u.s->s, self.u.s->len) + 1);
            int64_t k = 0;
            const char *p = self.u.s->s, *e = p + self.u.s->len;
            while ((p = memmem(p, (size_t)(e - p), sub.u.s->s, sub.u.s->len))) { k++; p += sub.u.s->len; }
            return jv_int(k);
        }
        if (IS("join")) {
            jv items = jx_iter_list(r, at, jx_arg(a, 0, "iterable", jv_undef()));
            for (size_t i = 0; i < items.u.l->n; i++) need_str(r, at, items.u.l->v[i], "str.join");
            return join(r, at, items, self, jv_none());
        }
        if (IS("format")) return str_format(r, at, self, a);
        if (IS("isdigit")) return jv_bool(all_cp(self, 0));
        if (IS("isalpha")) return jv_bool(all_cp(self, 1));
        if (IS("isalnum")) return jv_bool(all_cp(self, 2));
        if (IS("isspace")) return jv_bool(all_cp(self, 3));
        if (IS("islower")) return jv_bool(all_cp(self, 4));
        if (IS("isupper")) return jv_bool(all_cp(self, 5));
        if (IS("splitlines")) {
            jv out = jv_list_new(C(r), JV_LIST, 0);
            const char *p = self.u.s->s;
            size_t n = self.u.s->len, i = 0;
            while (i < n) {
                size_t e = i;
                while (e < n && p[e] != '\n' && p[e] != '\r') e++;
                jv_list_push(C(r), &out, jv_str(C(r), p + i, e - i));
                if (e < n && p[e] == '\r' && e + 1 < n && p[e + 1] == '\n') e++;
                i = e + 1;
            }
            return out;
        }
    } else if (self.k == JV_DICT) {
        if (IS("items")) return jv_iter_from(C(r), items_of(r, at, self), "dict_items", true);
        if (IS("keys")) return jv_iter_from(C(r), jx_iter_list(r, at, self), "dict_keys", true);
        if (IS("values")) {
            jv out = jv_list_new(C(r), JV_LIST, self.u.d->n);
            for (size_t i = 0; i < self.u.d->n; i++) jv_list_push(C(r), &out, self.u.d->val[i]);
            return jv_iter_from(C(r), out, "dict_values", true);
        }
        if (IS("get")) {
            jv v;
            if (jv_dict_get(self.u.d, jx_arg(a, 0, "key", jv_undef()), &v)) return v;
            return jx_arg(a, 1, "default", jv_none());
        }
    } else if (self.k == JV_LIST || self.k == JV_TUPLE) {
        jv x = jx_arg(a, 0, NULL, jv_undef());
        if (IS("count")) {
            int64_t k = 0;
            for (size_t i = 0; i < self.u.l->n; i++) k += jv_equal(self.u.l->v[i], x);
            return jv_int(k);
        }
        if (IS("index")) {
            for (size_t i = 0; i < self.u.l->n; i++) if (jv_equal(self.u.l->v[i], x)) return jv_int((int64_t)i);
            jx_rfail(r, at, "value is not in list");
        }
    }
    jx_rfail(r, at, "'%s' object has no method '%s'", jv_type_name(self), name);
#undef IS
}

/* ---- printf-style formatting ------------------------------------------------- */

jv jx_percent_format(jx_render *r, const jx_node *at, jv fmt, jv args)
{
    const jx_list *al = args.k == JV_TUPLE ? args.u.l : NULL;
    size_t ai = 0;
    bool used_single = false;
    jx_buf b = {0};
    jx_buf_put(C(r), &b, "", 0);
    const char *s = fmt.u.s->s;
    size_t n = fmt.u.s->len;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') { jx_buf_putc(C(r), &b, s[i]); continue; }
        size_t st = i++;
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        while (i < n && strchr("-+ #0", s[i]) && k < 8) spec[k++] = s[i++];
        while (i < n && s[i] >= '0' && s[i] <= '9' && k < 16) spec[k++] = s[i++];
        if (i < n && s[i] == '.') { spec[k++] = s[i++]; while (i < n && s[i] >= '0' && s[i] <= '9' && k < 24) spec[k++] = s[i++]; }
        if (i >= n) jx_rfail(r, at, "incomplete format");
        char conv = s[i];
        if (conv == '%' && i == st + 1) { jx_buf_putc(C(r), &b, '%'); continue; }
        jv a;
        if (al) {
            if (ai >= al->n) jx_rfail(r, at, "not enough arguments for format string");
            a = al->v[ai++];
        } else {
            if (used_single) jx_rfail(r, at, "not enough arguments for format string");
            used_single = true;
            a = args;
        }
        char out[512];
        switch (conv) {
        case 's': case 'r': {
            jx_buf t = {0};
            jx_buf_put(C(r), &t, "", 0);
            if (conv == 's') jv_str_into(C(r), &t, a); else jv_repr_into(C(r), &t, a);
            spec[k++] = 's';
            spec[k] = 0;
            if (k == 2) jx_buf_put(C(r), &b, t.p, t.n);
            else {
                int m = snprintf(out, sizeof out, spec, t.p);
                if (m < 0 || (size_t)m >= sizeof out) jx_buf_put(C(r), &b, t.p, t.n);
                else jx_buf_put(C(r), &b, out, (size_t)m);
            }
            continue;
        }
        case 'd': case 'i': case 'x': case 'X': case 'o': {
            if (!jv_is_number(a)) jx_rfail(r, at, "%%%c format: a real number is required, not %s", conv, jv_type_name(a));
            long long v = a.k == JV_FLOAT ? (long long)a.u.f : (long long)(a.k == JV_INT ? a.u.i : a.u.b);
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'i' ? 'd' : conv;
            spec[k] = 0;
            int m = snprintf(out, sizeof out, spec, v);
            if (m < 0 || (size_t)m >= sizeof out) jx_rfail(r, at, "format width or precision too large");
            break;
        }
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
            if (!jv_is_number(a)) jx_rfail(r, at, "%%%c format: a real number is required, not %s", conv, jv_type_name(a));
            spec[k++] = conv;
            spec[k] = 0;
            int m = snprintf(out, sizeof out, spec, jv_as_double(a));
            if (m < 0 || (size_t)m >= sizeof out) jx_rfail(r, at, "format width or precision too large");
            break;
        }
        case 'c': {
            jv_str_into(C(r), &b, a);
            continue;
        }
        default: jx_rfail(r, at, "unsupported format character '%c'", conv);
        }
        jx_buf_puts(C(r), &b, out);
    }
    if ((al && ai < al->n) || (!al && !used_single && args.k != JV_DICT))
        jx_rfail(r, at, "not all arguments converted during string formatting");
    return jv_str(C(r), b.p, b.n);
}

/* ---- global functions ---------------------------------------------------------- */

enum { B_RANGE, B_NAMESPACE, B_DICT, B_RAISE, B_STRFTIME, B_COUNT };
static const char *const BUILTINS[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

int jx_builtin_lookup(const char *name)
{
    for (int i = 0; i < B_COUNT; i++) if (!strcmp(BUILTINS[i], name)) return i;
    return -1;
}

jv jx_call_builtin(jx_render *r, const jx_node *at, int id, const jx_args *a)
{
    switch (id) {
    case B_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->n == 1) stop = need_int(r, at, a->v[0], "range");
        else if (a->n == 2 || a->n == 3) {
            start = need_int(r, at, a->v[0], "range");
            stop = need_int(r, at, a->v[1], "range");
            if (a->n == 3) step = need_int(r, at, a->v[2], "range");
        } else jx_rfail(r, at, "range expected 1 to 3 arguments, got %d", a->n);
        if (step == 0) jx_rfail(r, at, "range() arg 3 must not be zero");
        jv out = jv_list_new(C(r), JV_LIST, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (out.u.l->n >= 100000)   /* jinja2.sandbox.MAX_RANGE */
                jx_rfail(r, at, "range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            jv_list_push(C(r), &out, jv_int(i));
        }
        return out;
    }
    case B_NAMESPACE: case B_DICT: {
        jv d = jv_dict_new(C(r), id == B_NAMESPACE ? JV_NS : JV_DICT);
        for (int i = 0; i < a->n; i++) {
            if (a->v[i].k != JV_DICT) jx_rfail(r, at, "%s() positional argument must be a dict", BUILTINS[id]);
            for (size_t k = 0; k < a->v[i].u.d->n; k++) jv_dict_set(C(r), d.u.d, a->v[i].u.d->key[k], a->v[i].u.d->val[k]);
        }
        for (int i = 0; i < a->nk; i++) jv_dict_set(C(r), d.u.d, jv_cstr(C(r), a->kn[i]->s), a->kv[i]);
        return d;
    }
    case B_RAISE: {
        jv m = jx_arg(a, 0, "message", jv_cstr(C(r), "raise_exception called"));
        jv s = jv_to_str(C(r), m);
        jx_rfail(r, at, "%s", s.u.s->s);
    }
    case B_STRFTIME: {
        jv f = need_str(r, at, jx_arg(a, 0, "format", jv_undef()), "strftime_now");
        time_t now;
        struct tm tmv;
        if (r->use_fixed_now) { now = (time_t)r->fixed_now; gmtime_r(&now, &tmv); }
        else { now = time(NULL); localtime_r(&now, &tmv); }
        char buf[512];
        size_t n = f.u.s->len ? strftime(buf, sizeof buf, f.u.s->s, &tmv) : 0;
        return jv_str(C(r), buf, n);
    }
    }
    jx_rfail(r, at, "internal: unknown builtin %d", id);
}
