/*
 * json_schema.c — JSON Schema (jansson) to GBNF text; request fields.
 *
 * Owns: what json_schema.h declares. Must not: parse GBNF or touch the
 * matcher. Every sub-schema becomes a named rule; $ref targets are memoised
 * by pointer so recursive schemas terminate.
 */
#include "sample/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

typedef struct sb { char *a; size_t n, cap; bool oom; } sb;

static void sb_putn(sb *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = realloc(b->a, nc);
        if (!p) { b->oom = true; return; }
        b->a = p; b->cap = nc;
    }
    memcpy(b->a + b->n, s, n);
    b->n += n;
    b->a[b->n] = 0;
}
static void sb_put(sb *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = true; return; }
    if ((size_t)k < sizeof tmp) { sb_putn(b, tmp, (size_t)k); return; }
    char *big = malloc((size_t)k + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    sb_putn(b, big, (size_t)k);
    free(big);
}

typedef struct refmemo { char *ref; char *rule; } refmemo;

typedef struct jsc {
    const json_t *root;
    ember_schema_syntax syn;   /* EMBER_SCHEMA_JSON or _GEMMA4 for values (XML_PARAMS: root only) */
    sb rules;
    refmemo *memo; size_t n_memo, cap_memo;
    unsigned counter;
    ember_status err;
    int depth;
} jsc;

#define FAIL(c, code, ...) do { if ((c)->err == EMBER_OK) (c)->err = ember_error((code), "json_schema: " __VA_ARGS__); return false; } while (0)

/* Primitive rules, always emitted (unused ones are harmless). */
static const char PRIMITIVES[] =
    "ws ::= ( \" \" | \"\\n\"{1,2} [ \\t]{0,20} )?\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" string-tail\n"
    "string-tail ::= char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n"
    "number ::= integer ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "nothing ::= [^\\x00-\\U0010FFFF]\n"
    "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )\n"
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) ( \".\" [0-9]+ )? "
    "( [Zz] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "date-time ::= date [Tt] time\n"
    "hex ::= [0-9a-fA-F]\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "email-part ::= [^\"\\\\@\\x00-\\x20]+\n"
    "email ::= email-part \"@\" email-part\n"
    "dec-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]\n"
    "ipv4 ::= dec-octet \".\" dec-octet \".\" dec-octet \".\" dec-octet\n";

/* The Gemma 4 argument syntax (gemma4.c): bare keys, strings between <|"|>
 * tokens with no escapes (no '<' inside, so the closing <|"|> cannot start
 * early), no whitespace; numbers and literals as in JSON. The rule names are
 * those of PRIMITIVES so that the generators can share them. */
static const char PRIMITIVES_GEMMA4[] =
    "ws ::= \"\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ( key \":\" value ( \",\" key \":\" value )* )? \"}\"\n"
    "key ::= [A-Za-z0-9_.-]+ | string\n"
    "array ::= \"[\" ( value ( \",\" value )* )? \"]\"\n"
    "string ::= \"<|\\\"|>\" string-tail\n"
    "string-tail ::= char* \"<|\\\"|>\"\n"
    "char ::= [^<]\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n"
    "number ::= integer ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "nothing ::= [^\\x00-\\U0010FFFF]\n"
    "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )\n"
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) ( \".\" [0-9]+ )? "
    "( [Zz] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "date-time ::= date [Tt] time\n"
    "hex ::= [0-9a-fA-F]\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "email-part ::= [^<\"\\\\@\\x00-\\x20]+\n"
    "email ::= email-part \"@\" email-part\n"
    "dec-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]\n"
    "ipv4 ::= dec-octet \".\" dec-octet \".\" dec-octet \".\" dec-octet\n";

/* raw text of a Qwen3-Coder string parameter */
static const char XML_CHAR[] = "xchar ::= [^<]\n";

/* A fresh rule name from a hint: [a-z0-9-] only. */
static char *rule_name(jsc *c, const char *hint)
{
    char buf[80];
    size_t k = 0;
    for (const char *p = hint; *p && k < 40; p++) {
        char ch = *p;
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) buf[k++] = ch;
        else if (ch >= 'A' && ch <= 'Z') buf[k++] = (char)(ch - 'A' + 'a');
        else if (k && buf[k - 1] != '-') buf[k++] = '-';
    }
    while (k && buf[k - 1] == '-') k--;
    snprintf(buf + k, sizeof buf - k, "%sx%u", k ? "-" : "", c->counter++);
    return strdup(buf);
}

static void define_rule(jsc *c, const char *name, const sb *body)
{
    sb_put(&c->rules, name);
    sb_put(&c->rules, " ::= ");
    /* an empty body is written "" (llama.cpp's parser reads past a newline after ::=) */
    if (body->n) sb_putn(&c->rules, body->a, body->n);
    else sb_put(&c->rules, "\"\"");
    sb_put(&c->rules, "\n");
    if (body->oom) c->rules.oom = true;
}

/* A GBNF literal for raw bytes (UTF-8 passes through). */
static void put_gbnf_literal(sb *b, const char *s, size_t n)
{
    sb_put(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') sb_put(b, "\\\"");
        else if (ch == '\\') sb_put(b, "\\\\");
        else if (ch == '\n') sb_put(b, "\\n");
        else if (ch == '\r') sb_put(b, "\\r");
        else if (ch == '\t') sb_put(b, "\\t");
        else if (ch < 0x20 || ch == 0x7F) sb_printf(b, "\\x%02X", ch);
        else sb_putn(b, (const char *)&ch, 1);
    }
    sb_put(b, "\"");
}

#define GEMMA_QUOTE "<|\"|>"

static void put_json_string(const jsc *c, sb *b, const char *s, size_t n);

/* A Gemma 4 bare key: what the template writes unquoted and gemma4.c reads
 * back (no , { } [ ] < > " : and no whitespace). */
static bool gemma_bare_key(const char *k)
{
    if (!*k) return false;
    for (const char *p = k; *p; p++)
        if (strchr(",{}[]<>\":| \t\r\n", *p)) return false;
    return true;
}

/* Grammar for an object key: JSON string; Gemma 4 bare word (or quoted). */
static void put_key(const jsc *c, sb *b, const char *k)
{
    if (c->syn == EMBER_SCHEMA_GEMMA4 && gemma_bare_key(k)) put_gbnf_literal(b, k, strlen(k));
    else put_json_string(c, b, k, strlen(k));
}

/* Grammar for the JSON encoding of string s: the quotes, and for each
 * character its shortest JSON form (the form of json.dumps / jansson); in
 * the Gemma 4 syntax the raw text between <|"|> tokens. */
static void put_json_string(const jsc *c, sb *b, const char *s, size_t n)
{
    if (c->syn == EMBER_SCHEMA_GEMMA4) {   /* <|"|>raw text<|"|> */
        sb g = {0};
        sb_put(&g, GEMMA_QUOTE);
        sb_putn(&g, s, n);
        sb_put(&g, GEMMA_QUOTE);
        if (g.oom) b->oom = true;
        else put_gbnf_literal(b, g.a, g.n);
        free(g.a);
        return;
    }
    sb json = {0};
    sb_put(&json, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': sb_put(&json, "\\\""); break;
        case '\\': sb_put(&json, "\\\\"); break;
        case '\n': sb_put(&json, "\\n"); break;
        case '\r': sb_put(&json, "\\r"); break;
        case '\t': sb_put(&json, "\\t"); break;
        case '\b': sb_put(&json, "\\b"); break;
        case '\f': sb_put(&json, "\\f"); break;
        default:
            if (ch < 0x20) sb_printf(&json, "\\u%04x", ch);
            else sb_putn(&json, (const char *)&ch, 1);
        }
    }
    sb_put(&json, "\"");
    if (json.oom) b->oom = true;
    else put_gbnf_literal(b, json.a, json.n);
    free(json.a);
}

/* Grammar for one fixed JSON value (const / enum), whitespace allowed
 * between tokens. */
static bool put_json_value(jsc *c, sb *b, const json_t *v)
{
    if (++c->depth > 64) FAIL(c, EMBER_ERR_INVALID_ARG, "const/enum value nested deeper than 64");
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        sb_put(b, "\"{\" ws");
        const char *k; json_t *x; bool first = true;
        json_object_foreach((json_t *)v, k, x) {
            if (!first) sb_put(b, " \",\" ws");
            first = false;
            sb_put(b, " ");
            put_key(c, b, k);
            sb_put(b, " ws \":\" ws ");
            if (!put_json_value(c, b, x)) return false;
            sb_put(b, " ws");
        }
        sb_put(b, " \"}\"");
        break;
    }
    case JSON_ARRAY: {
        sb_put(b, "\"[\" ws");
        size_t i; json_t *x;
        json_array_foreach(v, i, x) {
            if (i) sb_put(b, " \",\" ws");
            sb_put(b, " ");
            if (!put_json_value(c, b, x)) return false;
            sb_put(b, " ws");
        }
        sb_put(b, " \"]\"");
        break;
    }
    case JSON_STRING: put_json_string(c, b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: sb_printf(b, "\"%lld\"", (long long)json_integer_value(v)); break;
    case JSON_REAL: {
        char *t = json_dumps(v, JSON_ENCODE_ANY);
        if (!t) FAIL(c, EMBER_ERR_NOMEM, "out of memory");
        sb_printf(b, "\"%s\"", t);
        free(t);
        break;
    }
    case JSON_TRUE: sb_put(b, "\"true\""); break;
    case JSON_FALSE: sb_put(b, "\"false\""); break;
    case JSON_NULL: sb_put(b, "\"null\""); break;
    }
    c->depth--;
    return true;
}

static bool gen(jsc *c, const json_t *s, const char *hint, const char *ptr, sb *out);

/* A rule for sub-schema s; its name goes to out. */
static bool gen_rule(jsc *c, const json_t *s, const char *hint, const char *ptr, sb *out)
{
    char *name = rule_name(c, hint);
    if (!name) FAIL(c, EMBER_ERR_NOMEM, "out of memory");
    sb body = {0};
    bool ok = gen(c, s, hint, ptr, &body);
    if (ok) { define_rule(c, name, &body); sb_put(out, name); }
    free(body.a);
    free(name);
    return ok;
}

/* Resolve a local JSON pointer "#/a/b~1c" in the root document. */
static const json_t *resolve_ref(jsc *c, const char *ref)
{
    if (ref[0] != '#') return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p == 0) return cur;
    if (*p != '/') return NULL;
    char tok[256];
    while (*p == '/') {
        p++;
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '1') { tok[k++] = '/'; p += 2; }
            else if (p[0] == '~' && p[1] == '0') { tok[k++] = '~'; p += 2; }
            else if (p[0] == '%' && p[1] && p[2]) {   /* URI percent-encoding */
                unsigned v; if (sscanf(p + 1, "%2x", &v) != 1) return NULL;
                tok[k++] = (char)v; p += 3;
            } else tok[k++] = *p++;
        }
        tok[k] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, tok);
        else if (json_is_array(cur)) { char *e; long i = strtol(tok, &e, 10); cur = (*e || i < 0) ? NULL : json_array_get(cur, (size_t)i); }
        else return NULL;
        if (!cur) return NULL;
    }
    return *p ? NULL : cur;
}

static bool gen_ref(jsc *c, const char *ref, sb *out)
{
    for (size_t i = 0; i < c->n_memo; i++)
        if (strcmp(c->memo[i].ref, ref) == 0) { sb_put(out, c->memo[i].rule); return true; }
    if (ref[0] != '#') FAIL(c, EMBER_ERR_UNSUPPORTED, "$ref '%.200s': only local references (#...) are supported", ref);
    const json_t *t = resolve_ref(c, ref);
    if (!t) FAIL(c, EMBER_ERR_NOT_FOUND, "$ref '%.200s' resolves to nothing", ref);
    if (c->n_memo == c->cap_memo) {
        size_t nc = c->cap_memo ? c->cap_memo * 2 : 8;
        refmemo *m = realloc(c->memo, nc * sizeof *m);
        if (!m) FAIL(c, EMBER_ERR_NOMEM, "out of memory");
        c->memo = m; c->cap_memo = nc;
    }
    const char *slash = strrchr(ref, '/');
    char *name = rule_name(c, slash ? slash + 1 : "ref");
    char *rcopy = strdup(ref);
    if (!name || !rcopy) { free(name); free(rcopy); FAIL(c, EMBER_ERR_NOMEM, "out of memory"); }
    c->memo[c->n_memo].ref = rcopy; c->memo[c->n_memo].rule = name;
    c->n_memo++;
    sb body = {0};
    bool ok = gen(c, t, slash ? slash + 1 : "ref", ref, &body);
    if (ok) { define_rule(c, name, &body); sb_put(out, name); }
    free(body.a);
    return ok;
}

static bool get_uint(jsc *c, const json_t *s, const char *key, const char *ptr, long long *v)
{
    const json_t *x = json_object_get(s, key);
    if (!x) return true;
    if (json_is_integer(x) && json_integer_value(x) >= 0) { *v = json_integer_value(x); return true; }
    if (json_is_real(x) && json_real_value(x) >= 0 && json_real_value(x) == (double)(long long)json_real_value(x)) { *v = (long long)json_real_value(x); return true; }
    FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/%s must be a non-negative integer", ptr, key);
}

#define MAX_BOUND 10000

/* ---- numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) ----
 * Integers: exact, as alternatives over digit strings of each length (no
 * leading zeros, no "-0"). Numbers: exact for integral bounds, in plain
 * decimal form (an exponent is not produced under bounds); a bound that is
 * not an integer is reported as unsupported. */

#define MAX_NUM_BOUND 1e15   /* bounds beyond are reported unsupported (double precision) */

/* L-digit decimal strings from x to y (both L digits, x <= y). */
static void digits_range(sb *out, const char *x, const char *y, size_t L)
{
    if (L == 1) {
        if (x[0] == y[0]) sb_printf(out, "\"%c\"", x[0]);
        else sb_printf(out, "[%c-%c]", x[0], y[0]);
        return;
    }
    bool x0 = true, y9 = true;
    for (size_t i = 1; i < L; i++) { if (x[i] != '0') x0 = false; if (y[i] != '9') y9 = false; }
    if (x[0] == y[0]) {
        sb_printf(out, "\"%c\" ", x[0]);
        digits_range(out, x + 1, y + 1, L - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', L - 1); nines[L - 1] = 0;
    memset(zeros, '0', L - 1); zeros[L - 1] = 0;
    int lo = x0 ? x[0] : x[0] + 1, hi = y9 ? y[0] : y[0] - 1;
    bool any = false;
    sb_put(out, "( ");
    if (!x0) { sb_printf(out, "\"%c\" ( ", x[0]); digits_range(out, x + 1, nines, L - 1); sb_put(out, " )"); any = true; }
    if (lo <= hi) {
        if (any) sb_put(out, " | ");
        if (lo == hi) sb_printf(out, "\"%c\" [0-9]{%zu}", lo, L - 1);
        else sb_printf(out, "[%c-%c] [0-9]{%zu}", lo, hi, L - 1);
        any = true;
    }
    if (!y9) { if (any) sb_put(out, " | "); sb_printf(out, "\"%c\" ( ", y[0]); digits_range(out, zeros, y + 1, L - 1); sb_put(out, " )"); }
    sb_put(out, " )");
}

/* Naturals a..b (b < 0: unbounded), a >= 0, written without leading zeros. */
static void nat_range(sb *out, long long a, long long b)
{
    char sa[24], sb_[24];
    int la = snprintf(sa, sizeof sa, "%lld", a);
    int lb = b >= 0 ? snprintf(sb_, sizeof sb_, "%lld", b) : la;
    sb_put(out, "( ");
    bool any = false;
    for (int L = la; L <= lb; L++) {
        char x[24], y[24];
        if (L == la) memcpy(x, sa, (size_t)la + 1);
        else { x[0] = '1'; memset(x + 1, '0', (size_t)L - 1); x[L] = 0; }
        if (b >= 0 && L == lb) memcpy(y, sb_, (size_t)lb + 1);
        else { memset(y, '9', (size_t)L); y[L] = 0; }
        if (any) sb_put(out, " | ");
        digits_range(out, x, y, (size_t)L);
        any = true;
    }
    if (b < 0) sb_printf(out, " | [1-9] [0-9]{%d,}", la);
    sb_put(out, " )");
}

typedef struct nbound { bool has; double v; bool open; } nbound;

static bool read_bounds(jsc *c, const json_t *s, const char *ptr, nbound *lo, nbound *hi)
{
    static const char *const keys[4] = { "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum" };
    *lo = *hi = (nbound){0};
    for (int k = 0; k < 4; k++) {
        const json_t *x = json_object_get(s, keys[k]);
        if (!x) continue;
        if (!json_is_number(x)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/%s must be a number", ptr, keys[k]);
        double v = json_number_value(x);
        if (v > MAX_NUM_BOUND || v < -MAX_NUM_BOUND)
            FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s/%s: bounds beyond 1e15 are not supported", ptr, keys[k]);
        nbound *b = k < 2 ? lo : hi;
        bool open = k & 1;
        /* the tighter of minimum and exclusiveMinimum (maximum likewise) */
        bool tighter = !b->has || (k < 2 ? (v > b->v || (v == b->v && open)) : (v < b->v || (v == b->v && open)));
        if (tighter) *b = (nbound){true, v, open};
    }
    return true;
}

static bool has_bounds(const json_t *s)
{
    return json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") ||
           json_object_get(s, "exclusiveMaximum");
}

static bool gen_int_bounded(jsc *c, const json_t *s, const char *ptr, sb *out)
{
    nbound lb, hb;
    if (!read_bounds(c, s, ptr, &lb, &hb)) return false;
    long long lo = 0, hi = 0;
    if (lb.has) lo = lb.open ? (long long)floor(lb.v) + 1 : (long long)ceil(lb.v);
    if (hb.has) hi = hb.open ? (long long)ceil(hb.v) - 1 : (long long)floor(hb.v);
    if (lb.has && hb.has && lo > hi) { sb_put(out, "nothing"); return true; }
    bool any = false;
    sb_put(out, "( ");
    if (!hb.has || hi >= 0) {                       /* 0 and up */
        nat_range(out, lb.has && lo > 0 ? lo : 0, hb.has ? hi : -1);
        any = true;
    }
    if (!lb.has || lo < 0) {                        /* below 0: "-" and a magnitude */
        long long mlo = hb.has && hi < 0 ? -hi : 1, mhi = lb.has ? -lo : -1;
        if (any) sb_put(out, " | ");
        sb_put(out, "\"-\" ");
        nat_range(out, mlo, mhi);
        any = true;
    }
    if ((!lb.has || lo <= 0) && (!hb.has || hi >= 0)) sb_put(out, " | \"-0\"");   /* -0 is 0 */
    sb_put(out, " )");
    return true;
}

/* Magnitudes m (plain decimal, no sign) with a <= m <= b (open ends
 * exclusive; b < 0 unbounded), a and b integers >= 0. */
static void mag_range(sb *out, long long a, bool a_open, long long b, bool b_open)
{
    static const char frac[] = "( \".\" [0-9]+ )?", zfrac[] = "( \".\" \"0\"+ )?",
                      nzfrac[] = "\".\" [0-9]* [1-9] [0-9]*";
    if (b >= 0 && (a > b || (a == b && (a_open || b_open)))) { sb_put(out, "nothing"); return; }
    if (b >= 0 && a == b) { sb_printf(out, "\"%lld\" %s", a, zfrac); return; }
    sb_put(out, "( ");
    if (a_open) sb_printf(out, "\"%lld\" %s", a, nzfrac);
    else sb_printf(out, "\"%lld\" %s", a, frac);
    if (b < 0 || a + 1 <= b - 1) {
        sb_put(out, " | ");
        nat_range(out, a + 1, b < 0 ? -1 : b - 1);
        sb_printf(out, " %s", frac);
    }
    if (b >= 0 && !b_open) sb_printf(out, " | \"%lld\" %s", b, zfrac);
    sb_put(out, " )");
}

static bool gen_number_bounded(jsc *c, const json_t *s, const char *ptr, sb *out)
{
    nbound lb, hb;
    if (!read_bounds(c, s, ptr, &lb, &hb)) return false;
    if ((lb.has && lb.v != floor(lb.v)) || (hb.has && hb.v != floor(hb.v)))
        FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s: bounds of a number must be integers (minimum/maximum %g/%g)", ptr,
             lb.has ? lb.v : 0.0, hb.has ? hb.v : 0.0);
    long long lo = (long long)lb.v, hi = (long long)hb.v;
    bool any = false;
    sb_put(out, "( ");
    /* values >= 0 */
    if (!hb.has || hi > 0 || (hi == 0 && !hb.open)) {
        bool from_lo = lb.has && lo >= 0;
        mag_range(out, from_lo ? lo : 0, from_lo && lb.open, hb.has ? hi : -1, hb.open);
        any = true;
    }
    /* values < 0: "-" and a magnitude > 0 */
    if (!lb.has || lo < 0) {
        bool to_hi = hb.has && hi < 0;
        if (any) sb_put(out, " | ");
        sb_put(out, "\"-\" ");
        mag_range(out, to_hi ? -hi : 0, to_hi ? hb.open : true, lb.has ? -lo : -1, lb.open);
        any = true;
    }
    /* -0 (and -0.0...) is 0 */
    if (any && (!lb.has || lo < 0 || (lo == 0 && !lb.open)) && (!hb.has || hi > 0 || (hi == 0 && !hb.open)))
        sb_put(out, " | \"-0\" ( \".\" \"0\"+ )?");
    sb_put(out, " )");
    return true;
}

/* ---- pattern: an ECMA-262 regex subset to GBNF over the string's encoding ----
 * Supported: literals, escapes (\d \D \w \W \s \S \t \n \r \f \v \0 \xHH
 * \uHHHH and escaped punctuation), [classes] with ranges, negation and
 * \d \w \s inside, '.', groups ( ) and (?: ), '|', quantifiers * + ? {n}
 * {n,} {n,m} (lazy '?' ignored: same language), '^' at the start and '$'
 * at the end. Unanchored ends match anything (JSON Schema's search
 * semantics). Unsupported (reported): back-references, lookaround, \b, \B,
 * anchors elsewhere, \D \W \S inside a class. In JSON text a character is
 * matched raw, or by its short escape (\" \\ \b \f \n \r \t) or \u00XX for
 * other control characters; a non-ASCII character written as a \u escape is
 * not recognised. In the raw syntaxes (Gemma 4, Qwen3-Coder) '<' never
 * matches (see ember_schema_syntax). */

typedef struct cprange { uint32_t lo, hi; } cprange;
typedef struct cpset { cprange r[64]; int n; bool neg; } cpset;

typedef struct rx {
    jsc *c;
    const char *ptr;
    const char *s;
    size_t i, n;
    bool raw;       /* Gemma 4 / XML raw text, else JSON text */
    bool top_alt;   /* a '|' outside any group */
} rx;

#define RXFAIL(x, fmt, ...) do { if ((x)->c->err == EMBER_OK) (x)->c->err = ember_error(EMBER_ERR_UNSUPPORTED, "json_schema: %.200s/pattern at offset %zu: " fmt, (x)->ptr, (x)->i, ##__VA_ARGS__); return false; } while (0)

static bool set_add(rx *x, cpset *st, uint32_t lo, uint32_t hi)
{
    if (st->n == 64) RXFAIL(x, "class with more than 64 ranges");
    st->r[st->n++] = (cprange){lo, hi};
    return true;
}

static bool set_contains(const cpset *st, uint32_t cp)
{
    bool in = false;
    for (int i = 0; i < st->n; i++) if (cp >= st->r[i].lo && cp <= st->r[i].hi) in = true;
    return in != st->neg;
}

/* one UTF-8 code point at x->s[x->i] */
static bool rx_cp(rx *x, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)x->s + x->i;
    size_t left = x->n - x->i;
    unsigned char b = p[0];
    size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (!len || len > left) RXFAIL(x, "invalid UTF-8");
    uint32_t v = len == 1 ? b : len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t k = 1; k < len; k++) v = (v << 6) | (p[k] & 0x3Fu);
    *cp = v;
    x->i += len;
    return true;
}

static int hexv(char ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* shorthand classes */
static bool add_shorthand(rx *x, cpset *st, char k)
{
    switch (k) {
    case 'd': return set_add(x, st, '0', '9');
    case 'w': return set_add(x, st, 'a', 'z') && set_add(x, st, 'A', 'Z') && set_add(x, st, '0', '9') && set_add(x, st, '_', '_');
    case 's':
        return set_add(x, st, 0x09, 0x0D) && set_add(x, st, ' ', ' ') && set_add(x, st, 0xA0, 0xA0) &&
               set_add(x, st, 0x1680, 0x1680) && set_add(x, st, 0x2000, 0x200A) && set_add(x, st, 0x2028, 0x2029) &&
               set_add(x, st, 0x202F, 0x202F) && set_add(x, st, 0x205F, 0x205F) && set_add(x, st, 0x3000, 0x3000) &&
               set_add(x, st, 0xFEFF, 0xFEFF);
    }
    return false;
}

/* After a '\': a single code point (*cp) or a shorthand (*sh = 'd', 'D', ...). */
static bool rx_escape(rx *x, uint32_t *cp, char *sh)
{
    *sh = 0;
    if (x->i >= x->n) RXFAIL(x, "trailing backslash");
    char k = x->s[x->i++];
    switch (k) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': *sh = k; return true;
    case 't': *cp = '\t'; return true;
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = '\v'; return true;
    case '0': *cp = 0; return true;
    case 'x': case 'u': {
        int nd = k == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int d = 0; d < nd; d++) {
            int h = x->i < x->n ? hexv(x->s[x->i]) : -1;
            if (h < 0) RXFAIL(x, "bad \\%c escape", k);
            v = v * 16 + (uint32_t)h;
            x->i++;
        }
        *cp = v;
        return true;
    }
    default:
        if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z') || (k >= '0' && k <= '9'))
            RXFAIL(x, "\\%c is not supported", k);
        x->i--;
        return rx_cp(x, cp);   /* escaped punctuation or any other character */
    }
}

/* GBNF for a code point inside a [class] */
static void class_cp(sb *out, uint32_t cp)
{
    if (cp == ']' || cp == '\\' || cp == '-' || cp == '^') sb_printf(out, "\\%c", (char)cp);
    else if (cp < 0x20 || cp == 0x7F) sb_printf(out, "\\x%02X", cp);
    else if (cp < 0x80) sb_putn(out, (const char *)&(char){(char)cp}, 1);
    else sb_printf(out, "\\U%08X", cp);
}

/* GBNF for "one character of set st, as encoded in the string" */
static void emit_set(rx *x, sb *out, const cpset *st)
{
    /* code points never matched raw: JSON " \ and controls; raw text '<' */
    static const cprange json_special[] = { {0x00, 0x1F}, {'"', '"'}, {'\\', '\\'} };
    static const cprange raw_special[] = { {'<', '<'} };
    const cprange *sp = x->raw ? raw_special : json_special;
    int nsp = x->raw ? 1 : 3;
    sb_put(out, "( ");
    bool any = false;
    if (st->neg) {
        sb_put(out, "[^");
        for (int i = 0; i < st->n; i++) {
            class_cp(out, st->r[i].lo);
            if (st->r[i].hi > st->r[i].lo) { sb_put(out, "-"); class_cp(out, st->r[i].hi); }
        }
        for (int i = 0; i < nsp; i++) {
            class_cp(out, sp[i].lo);
            if (sp[i].hi > sp[i].lo) { sb_put(out, "-"); class_cp(out, sp[i].hi); }
        }
        sb_put(out, "]");
        any = true;
    } else {
        /* each range minus the special code points */
        sb cls = {0};
        for (int i = 0; i < st->n; i++) {
            uint32_t lo = st->r[i].lo, hi = st->r[i].hi;
            while (lo <= hi) {
                /* skip special code points at lo */
                bool skipped = false;
                for (int k = 0; k < nsp; k++) if (lo >= sp[k].lo && lo <= sp[k].hi) { lo = sp[k].hi + 1; skipped = true; }
                if (skipped) continue;
                uint32_t end = hi;
                for (int k = 0; k < nsp; k++) if (sp[k].lo > lo && sp[k].lo - 1 < end) end = sp[k].lo - 1;
                class_cp(&cls, lo);
                if (end > lo) { sb_put(&cls, "-"); class_cp(&cls, end); }
                if (end == UINT32_MAX) break;
                lo = end + 1;
            }
        }
        if (cls.n) { sb_printf(out, "[%s]", cls.a); any = true; }
        if (cls.oom) out->oom = true;
        free(cls.a);
    }
    if (!x->raw) {
        static const uint32_t specials[] = { '"', '\\', '\b', '\f', '\n', '\r', '\t', 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
                                             0x06, 0x07, 0x0B, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
                                             0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F };
        for (size_t k = 0; k < sizeof specials / sizeof *specials; k++) {
            uint32_t cp = specials[k];
            if (!set_contains(st, cp)) continue;
            if (any) sb_put(out, " | ");
            any = true;
            switch (cp) {
            case '"': sb_put(out, "\"\\\\\\\"\""); break;
            case '\\': sb_put(out, "\"\\\\\\\\\""); break;
            case '\b': sb_put(out, "\"\\\\b\""); break;
            case '\f': sb_put(out, "\"\\\\f\""); break;
            case '\n': sb_put(out, "\"\\\\n\""); break;
            case '\r': sb_put(out, "\"\\\\r\""); break;
            case '\t': sb_put(out, "\"\\\\t\""); break;
            default: sb_printf(out, "\"\\\\u%04x\"", cp);
            }
        }
    }
    if (!any) sb_put(out, "nothing");
    sb_put(out, " )");
}

static bool rx_alt(rx *x, sb *out, int depth);

/* one atom (no quantifier) */
static bool rx_atom(rx *x, sb *out, int depth)
{
    char ch = x->s[x->i];
    cpset st = {0};
    if (ch == '(') {
        x->i++;
        if (x->i + 1 < x->n && x->s[x->i] == '?') {
            if (x->s[x->i + 1] != ':') RXFAIL(x, "lookaround and named groups are not supported");
            x->i += 2;
        }
        sb_put(out, "( ");
        if (!rx_alt(x, out, depth + 1)) return false;
        if (x->i >= x->n || x->s[x->i] != ')') RXFAIL(x, "missing ')'");
        x->i++;
        sb_put(out, " )");
        return true;
    }
    if (ch == '[') {
        x->i++;
        if (x->i < x->n && x->s[x->i] == '^') { st.neg = true; x->i++; }
        while (x->i < x->n && x->s[x->i] != ']') {
            uint32_t lo;
            char sh = 0;
            if (x->s[x->i] == '\\') {
                x->i++;
                if (!rx_escape(x, &lo, &sh)) return false;
                if (sh) {
                    if (sh == 'D' || sh == 'W' || sh == 'S') RXFAIL(x, "\\%c inside a class is not supported", sh);
                    if (!add_shorthand(x, &st, sh)) return false;
                    continue;
                }
            } else if (!rx_cp(x, &lo)) return false;
            uint32_t hi = lo;
            if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
                x->i++;
                if (x->s[x->i] == '\\') {
                    x->i++;
                    if (!rx_escape(x, &hi, &sh)) return false;
                    if (sh) RXFAIL(x, "a class shorthand cannot end a range");
                } else if (!rx_cp(x, &hi)) return false;
                if (hi < lo) RXFAIL(x, "range out of order");
            }
            if (!set_add(x, &st, lo, hi)) return false;
        }
        if (x->i >= x->n) RXFAIL(x, "missing ']'");
        x->i++;
        emit_set(x, out, &st);
        return true;
    }
    if (ch == '.') {
        x->i++;
        st.neg = true;
        set_add(x, &st, '\n', '\n'); set_add(x, &st, '\r', '\r'); set_add(x, &st, 0x2028, 0x2029);
        emit_set(x, out, &st);
        return true;
    }
    if (ch == '\\') {
        x->i++;
        uint32_t cp;
        char sh;
        if (!rx_escape(x, &cp, &sh)) return false;
        if (sh) {
            char lower = (char)(sh | 0x20);
            if (!add_shorthand(x, &st, lower)) return false;
            st.neg = sh != lower;
        } else {
            set_add(x, &st, cp, cp);
        }
        emit_set(x, out, &st);
        return true;
    }
    if (ch == '^' || ch == '$') RXFAIL(x, "'%c' is only supported at the pattern's ends", ch);
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') RXFAIL(x, "nothing to repeat");
    uint32_t cp;
    if (!rx_cp(x, &cp)) return false;
    set_add(x, &st, cp, cp);
    emit_set(x, out, &st);
    return true;
}

static bool rx_uint(rx *x, long long *v)
{
    if (x->i >= x->n || x->s[x->i] < '0' || x->s[x->i] > '9') return false;
    long long a = 0;
    while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9') {
        a = a * 10 + (x->s[x->i++] - '0');
        if (a > MAX_BOUND) return false;
    }
    *v = a;
    return true;
}

static bool rx_seq(rx *x, sb *out, int depth)
{
    bool any = false;
    while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        if (x->s[x->i] == '$' && x->i + 1 == x->n && depth == 0) break;   /* end anchor */
        if (any) sb_put(out, " ");
        if (!rx_atom(x, out, depth)) return false;
        any = true;
        if (x->i >= x->n) break;
        char q = x->s[x->i];
        if (q == '*' || q == '+' || q == '?') { sb_putn(out, &q, 1); x->i++; }
        else if (q == '{') {
            long long m = 0, n = -1;
            x->i++;
            if (!rx_uint(x, &m)) RXFAIL(x, "bad {m,n} quantifier (bounds up to %d)", MAX_BOUND);
            if (x->i < x->n && x->s[x->i] == ',') {
                x->i++;
                if (x->i < x->n && x->s[x->i] != '}') { if (!rx_uint(x, &n) || n < m) RXFAIL(x, "bad {m,n} quantifier"); }
                else n = -2;   /* {m,} */
            }
            if (x->i >= x->n || x->s[x->i] != '}') RXFAIL(x, "bad {m,n} quantifier");
            x->i++;
            if (n == -1) sb_printf(out, "{%lld}", m);
            else if (n == -2) sb_printf(out, "{%lld,}", m);
            else sb_printf(out, "{%lld,%lld}", m, n);
        } else continue;
        if (x->i < x->n && x->s[x->i] == '?') x->i++;   /* lazy: same language */
        if (x->i < x->n && strchr("*+?{", x->s[x->i])) RXFAIL(x, "nested quantifier");
    }
    if (!any) sb_put(out, "\"\"");
    return true;
}

static bool rx_alt(rx *x, sb *out, int depth)
{
    if (depth > 32) RXFAIL(x, "groups nested deeper than 32");
    if (!rx_seq(x, out, depth)) return false;
    while (x->i < x->n && x->s[x->i] == '|') {
        if (depth == 0) x->top_alt = true;
        x->i++;
        sb_put(out, " | ");
        if (!rx_seq(x, out, depth)) return false;
    }
    return true;
}

/* The pattern's grammar between the string's quotes q (a GBNF literal, or
 * "" for raw XML text); `anychar` is the rule of one character. */
static bool gen_pattern(jsc *c, const json_t *s, const char *ptr, const char *q, bool raw, const char *anychar, sb *out)
{
    const json_t *p = json_object_get(s, "pattern");
    if (!json_is_string(p)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/pattern must be a string", ptr);
    if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "format"))
        FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s: pattern together with minLength, maxLength or format is not supported", ptr);
    rx x = { c, ptr, json_string_value(p), 0, json_string_length(p), raw, false };
    bool start = x.n > 0 && x.s[0] == '^';
    if (start) x.i = 1;
    bool end = x.n > x.i && x.s[x.n - 1] == '$' && (x.n < 2 || x.s[x.n - 2] != '\\');
    sb body = {0};
    if (!rx_alt(&x, &body, 0)) { free(body.a); return false; }
    if (x.i < x.n && !(end && x.i == x.n - 1)) { free(body.a); RXFAIL(&x, "unbalanced ')'"); }
    if (x.top_alt && (start || end)) { free(body.a); RXFAIL(&x, "anchors around a top-level '|' are not supported (group it: ^(a|b)$)"); }
    if (*q) sb_printf(out, "%s ", q);
    if (!start) sb_printf(out, "%s* ", anychar);
    sb_printf(out, "( %s )", body.a ? body.a : "\"\"");
    if (!end) sb_printf(out, " %s*", anychar);
    if (*q) sb_printf(out, " %s", q);
    if (body.oom) out->oom = true;
    free(body.a);
    return true;
}


static bool gen_string(jsc *c, const json_t *s, const char *ptr, sb *out)
{
    /* the string's quotes as a GBNF literal */
    const char *q = c->syn == EMBER_SCHEMA_GEMMA4 ? "\"<|\\\"|>\"" : "\"\\\"\"";
    if (json_object_get(s, "pattern")) return gen_pattern(c, s, ptr, q, c->syn == EMBER_SCHEMA_GEMMA4, "char", out);
    const json_t *fmt = json_object_get(s, "format");
    if (fmt) {
        if (!json_is_string(fmt)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/format must be a string", ptr);
        const char *f = json_string_value(fmt);
        static const char *const known[] = { "date", "time", "date-time", "uuid", "email", "ipv4" };
        for (size_t i = 0; i < sizeof known / sizeof *known; i++)
            if (strcmp(f, known[i]) == 0) { sb_printf(out, "%s %s %s", q, f, q); return true; }
        FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s/format '%.100s' is not supported", ptr, f);
    }
    long long lo = 0, hi = -1;
    if (!get_uint(c, s, "minLength", ptr, &lo) || !get_uint(c, s, "maxLength", ptr, &hi)) return false;
    if (lo == 0 && hi < 0) { sb_put(out, "string"); return true; }
    if (lo > MAX_BOUND || hi > MAX_BOUND) FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s: string length bound over %d", ptr, MAX_BOUND);
    if (hi >= 0 && hi < lo) { sb_put(out, "nothing"); return true; }
    if (hi < 0) sb_printf(out, "%s char{%lld,} %s", q, lo, q);
    else sb_printf(out, "%s char{%lld,%lld} %s", q, lo, hi, q);
    return true;
}

static bool gen_array(jsc *c, const json_t *s, const char *hint, const char *ptr, sb *out)
{
    long long lo = 0, hi = -1;
    if (!get_uint(c, s, "minItems", ptr, &lo) || !get_uint(c, s, "maxItems", ptr, &hi)) return false;
    if (lo > MAX_BOUND || hi > MAX_BOUND) FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s: item count bound over %d", ptr, MAX_BOUND);
    if (hi >= 0 && hi < lo) { sb_put(out, "nothing"); return true; }
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *items = json_object_get(s, "items");
    if (json_is_array(items) && !prefix) { prefix = items; items = json_object_get(s, "additionalItems"); }  /* draft-07 tuples */
    char sub[300];
    /* the element list: prefix[0..np) then `items` repeated */
    size_t np = prefix ? json_array_size(prefix) : 0;
    if (prefix && !json_is_array(prefix)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/prefixItems must be an array", ptr);
    if (json_is_false(items) && lo > (long long)np) { sb_put(out, "nothing"); return true; }
    char **pnames = np ? calloc(np, sizeof *pnames) : NULL;
    if (np && !pnames) FAIL(c, EMBER_ERR_NOMEM, "out of memory");
    bool ok = true;
    for (size_t i = 0; i < np && ok; i++) {
        sb e = {0};
        snprintf(sub, sizeof sub, "%.200s/prefixItems/%zu", ptr, i);
        char h[64]; snprintf(h, sizeof h, "%.40s-%zu", hint, i);
        ok = gen_rule(c, json_array_get(prefix, i), h, sub, &e);
        pnames[i] = e.a;
    }
    sb item = {0};
    bool more = true;   /* whether items after the prefix are allowed */
    if (ok) {
        if (json_is_false(items)) more = false;
        else if (items) { snprintf(sub, sizeof sub, "%.200s/items", ptr); char h[64]; snprintf(h, sizeof h, "%.40s-item", hint); ok = gen_rule(c, items, h, sub, &item); }
        else sb_put(&item, "value");
    }
    if (ok) {
        /* counts: total n in [lo, hi]; prefix consumes the first np */
        if (!more) { if (hi < 0 || hi > (long long)np) hi = (long long)np; }
        sb_put(out, "\"[\" ws ");
        /* build nested optional structure: element k is required iff k < lo */
        size_t n_fixed = np;
        long long total_hi = hi;   /* -1: unbounded */
        /* emit elements 0..np-1 (prefix), each after the first preceded by "," */
        size_t opened = 0;
        for (size_t k = 0; k < n_fixed; k++) {
            bool req = (long long)k < lo;
            if (total_hi >= 0 && (long long)k >= total_hi) break;
            if (!req) { sb_put(out, "( "); opened++; }
            if (k) sb_put(out, "\",\" ws ");
            sb_put(out, pnames[k]);
            sb_put(out, " ws ");
        }
        if (more && (total_hi < 0 || total_hi > (long long)n_fixed)) {
            long long rlo = lo > (long long)n_fixed ? lo - (long long)n_fixed : 0;
            long long rhi = total_hi < 0 ? -1 : total_hi - (long long)n_fixed;
            if (n_fixed == 0) {
                /* item ( "," ws item ){rlo-1, rhi-1}, optional when rlo == 0 */
                if (rlo == 0) sb_put(out, "( ");
                sb_printf(out, "%s ws ", item.a);
                long long a = rlo > 0 ? rlo - 1 : 0;
                if (rhi < 0) sb_printf(out, "( \",\" ws %s ws ){%lld,}", item.a, a);
                else if (rhi - 1 > 0 || a > 0) sb_printf(out, "( \",\" ws %s ws ){%lld,%lld}", item.a, a, rhi - 1);
                if (rlo == 0) sb_put(out, " )?");
            } else {
                if (rhi < 0) sb_printf(out, "( \",\" ws %s ws ){%lld,}", item.a, rlo);
                else sb_printf(out, "( \",\" ws %s ws ){%lld,%lld}", item.a, rlo, rhi);
            }
            sb_put(out, " ");
        }
        for (size_t k = 0; k < opened; k++) sb_put(out, ")? ");
        sb_put(out, "\"]\"");
    }
    for (size_t i = 0; i < np; i++) free(pnames[i]);
    free(pnames);
    free(item.a);
    return ok;
}

/* Keys other than the declared ones, for additional properties: a rule over
 * a trie of the keys' JSON-encoded units (a character or an escape). A key
 * written with a different escape of the same character (\u0061 for a) is
 * not recognised as declared. */
typedef struct ukey { char (*u)[8]; size_t n; } ukey;

static bool key_units(const char *k, ukey *out)
{
    size_t L = strlen(k);
    out->u = malloc((L + 1) * sizeof *out->u);
    out->n = 0;
    if (!out->u) return false;
    for (size_t i = 0; i < L;) {
        unsigned char ch = (unsigned char)k[i];
        char *d = out->u[out->n++];
        switch (ch) {
        case '"': strcpy(d, "\\\""); i++; continue;
        case '\\': strcpy(d, "\\\\"); i++; continue;
        case '\n': strcpy(d, "\\n"); i++; continue;
        case '\r': strcpy(d, "\\r"); i++; continue;
        case '\t': strcpy(d, "\\t"); i++; continue;
        case '\b': strcpy(d, "\\b"); i++; continue;
        case '\f': strcpy(d, "\\f"); i++; continue;
        default: break;
        }
        if (ch < 0x20) { snprintf(d, 8, "\\u%04x", ch); i++; continue; }
        size_t n = ch < 0x80 ? 1 : ch < 0xE0 ? 2 : ch < 0xF0 ? 3 : 4;
        if (i + n > L) n = L - i;
        memcpy(d, k + i, n);
        d[n] = 0;
        i += n;
    }
    return true;
}

static bool gen_notkey(jsc *c, const ukey *keys, const size_t *idx, size_t nidx, size_t depth, char **name_out)
{
    char *name = rule_name(c, "other-key");
    if (!name) FAIL(c, EMBER_ERR_NOMEM, "out of memory");
    sb body = {0}, plain = {0}, escl = {0};
    bool terminal = false, ok = true;
    size_t *sub = malloc((nidx + 1) * sizeof *sub);
    bool *done = calloc(nidx + 1, sizeof *done);
    if (!sub || !done) { free(sub); free(done); free(name); FAIL(c, EMBER_ERR_NOMEM, "out of memory"); }
    for (size_t a = 0; a < nidx && ok; a++) {
        const ukey *ka = &keys[idx[a]];
        if (ka->n == depth) { terminal = true; continue; }
        if (done[a]) continue;
        const char *u = ka->u[depth];
        size_t ns = 0;
        for (size_t b = a; b < nidx; b++) {
            const ukey *kb = &keys[idx[b]];
            if (kb->n > depth && !done[b] && strcmp(kb->u[depth], u) == 0) { sub[ns++] = idx[b]; done[b] = true; }
        }
        char *child = NULL;
        if (!(ok = gen_notkey(c, keys, sub, ns, depth + 1, &child))) break;
        if (body.n) sb_put(&body, " | ");
        put_gbnf_literal(&body, u, strlen(u));
        sb_put(&body, " ");
        sb_put(&body, child);
        free(child);
        if (u[0] == '\\') { if (u[1] != 'u') sb_putn(&escl, u + 1, 1); }
        else if (strchr("]-^\\", u[0])) { sb_put(&plain, "\\"); sb_put(&plain, u); }
        else sb_put(&plain, u);
    }
    free(sub); free(done);
    if (!ok) { free(body.a); free(plain.a); free(escl.a); free(name); return false; }
    if (body.n) sb_put(&body, " | ");
    sb_printf(&body, "[^\"\\\\\\x00-\\x1F%s] string-tail", plain.a ? plain.a : "");
    /* escapes other than those that continue a declared key */
    sb esc = {0};
    const char *all = "\"\\/bfnrt";
    for (const char *e = all; *e; e++) {
        if (escl.a && memchr(escl.a, *e, escl.n)) continue;
        if (*e == '"' || *e == '\\') sb_putn(&esc, "\\", 1);
        sb_putn(&esc, e, 1);
    }
    sb_put(&body, " | \"\\\\\" ( ");
    if (esc.n) sb_printf(&body, "[%s] | ", esc.a);
    sb_put(&body, "\"u\" hex{4} ) string-tail");
    if (!terminal) sb_put(&body, " | \"\\\"\"");
    define_rule(c, name, &body);
    free(body.a); free(plain.a); free(escl.a); free(esc.a);
    *name_out = name;
    return true;
}

static bool gen_other_key(jsc *c, const json_t *props, sb *out)
{
    size_t n = json_object_size(props);
    if (n == 0) { sb_put(out, "string"); return true; }
    ukey *keys = calloc(n, sizeof *keys);
    size_t *idx = calloc(n, sizeof *idx);
    bool ok = keys && idx;
    size_t i = 0;
    const char *k; json_t *v;
    if (ok) json_object_foreach((json_t *)props, k, v) { if (!key_units(k, &keys[i])) { ok = false; break; } idx[i] = i; i++; }
    char *root = NULL;
    if (!ok) c->err = ember_error(EMBER_ERR_NOMEM, "json_schema: out of memory");
    else ok = gen_notkey(c, keys, idx, n, 0, &root);
    if (ok) { sb_put(out, "\"\\\"\" "); sb_put(out, root); }
    free(root);
    for (size_t j = 0; keys && j < n; j++) free(keys[j].u);
    free(keys); free(idx);
    return ok;
}

/* A Qwen3-Coder parameter value (qwen3_coder.c): a property typed "string"
 * is raw text (no '<' under this grammar, so no closing tag can start
 * inside it); any other value is JSON text. */
static bool gen_xml_value(jsc *c, const json_t *s, const char *hint, const char *ptr, sb *out)
{
    const json_t *t = json_is_object(s) ? json_object_get(s, "type") : NULL;
    if (!json_is_string(t) || strcmp(json_string_value(t), "string") != 0) return gen_rule(c, s, hint, ptr, out);
    const json_t *x;
    if ((x = json_object_get(s, "const")) || (x = json_object_get(s, "enum"))) {
        const json_t *one = json_is_array(x) ? NULL : x;
        size_t n = one ? 1 : json_array_size(x);
        if (n == 0) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/enum must be a non-empty array", ptr);
        sb_put(out, "( ");
        for (size_t i = 0; i < n; i++) {
            const json_t *v = one ? one : json_array_get(x, i);
            if (i) sb_put(out, " | ");
            if (json_is_string(v)) put_gbnf_literal(out, json_string_value(v), json_string_length(v));
            else sb_put(out, "nothing");   /* a non-string under type string matches nothing */
        }
        sb_put(out, " )");
        return true;
    }
    if (json_object_get(s, "pattern")) return gen_pattern(c, s, ptr, "", true, "xchar", out);
    const json_t *fmt = json_object_get(s, "format");
    if (json_is_string(fmt)) {
        static const char *const known[] = { "date", "time", "date-time", "uuid", "email", "ipv4" };
        for (size_t i = 0; i < sizeof known / sizeof *known; i++)
            if (strcmp(json_string_value(fmt), known[i]) == 0) { sb_put(out, known[i]); return true; }
        FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s/format '%.100s' is not supported", ptr, json_string_value(fmt));
    }
    long long lo = 0, hi = -1;
    if (!get_uint(c, s, "minLength", ptr, &lo) || !get_uint(c, s, "maxLength", ptr, &hi)) return false;
    if (lo > MAX_BOUND || hi > MAX_BOUND) FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s: string length bound over %d", ptr, MAX_BOUND);
    if (hi >= 0 && hi < lo) sb_put(out, "nothing");
    else if (hi < 0) sb_printf(out, "xchar{%lld,}", lo);
    else sb_printf(out, "xchar{%lld,%lld}", lo, hi);
    return true;
}

/* An object. xml: the root of a Qwen3-Coder call, whose properties are
 * written <parameter=KEY>\nVALUE\n</parameter>\n with no braces or commas. */
static bool gen_object_syn(jsc *c, const json_t *s, const char *hint, const char *ptr, bool xml, sb *out)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/properties must be an object", ptr);
    if (req && !json_is_array(req)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/required must be an array", ptr);
    size_t n = props ? json_object_size(props) : 0;
    char **kv = n ? calloc(n, sizeof *kv) : NULL;
    bool *isreq = n ? calloc(n, sizeof *isreq) : NULL;
    if (n && (!kv || !isreq)) { free(kv); free(isreq); FAIL(c, EMBER_ERR_NOMEM, "out of memory"); }
    bool ok = true;
    size_t i = 0;
    const char *key; json_t *sub;
    if (props) json_object_foreach((json_t *)props, key, sub) {
        if (!ok) break;
        sb e = {0};
        char p2[300]; snprintf(p2, sizeof p2, "%.200s/properties/%.80s", ptr, key);
        if (xml) {
            sb open = {0};
            sb_put(&open, "<parameter=");
            sb_put(&open, key);
            sb_put(&open, ">\n");
            if (open.oom) ok = false;
            else put_gbnf_literal(&e, open.a, open.n);
            free(open.a);
            sb_put(&e, " ");
            ok = ok && gen_xml_value(c, sub, key, p2, &e);
            sb_put(&e, " \"\\n</parameter>\\n\"");
        } else {
            put_key(c, &e, key);
            sb_put(&e, " ws \":\" ws ");
            ok = gen_rule(c, sub, key, p2, &e);
            sb_put(&e, " ws");
        }
        kv[i] = e.a;
        size_t j; json_t *r;
        if (req) json_array_foreach(req, j, r) if (json_is_string(r) && strcmp(json_string_value(r), key) == 0) isreq[i] = true;
        i++;
    }
    /* required names that are not in properties: any value under that key */
    /* (rare; they are allowed through additional properties if permitted) */
    sb akv = {0};
    bool more = true;
    if (ok) {
        /* Gemma 4 / Qwen3-Coder calls: the declared arguments only (stricter
         * than a schema that allows more) */
        if (json_is_false(addl) || xml || c->syn == EMBER_SCHEMA_GEMMA4) more = false;
        else if (addl && !json_is_true(addl)) {
            ok = gen_other_key(c, props, &akv);
            sb_put(&akv, " ws \":\" ws ");
            char p2[300]; snprintf(p2, sizeof p2, "%.200s/additionalProperties", ptr);
            char h[64]; snprintf(h, sizeof h, "%.40s-additional", hint);
            ok = ok && gen_rule(c, addl, h, p2, &akv);
            sb_put(&akv, " ws");
        } else {
            ok = gen_other_key(c, props, &akv);
            sb_put(&akv, " ws \":\" ws value ws");
        }
    }
    if (ok) {
        /* REST(k): items k..n-1 each preceded by ","; FIRST(k): no item yet.
         * REST(k) = [","kv_k] REST(k+1) ; REST(n) = ("," akv)*
         * FIRST(k) = kv_k REST(k+1) | FIRST(k+1) (optional k) ; kv_k REST(k+1) (required)
         * FIRST(n) = (akv ("," akv)*)? */
        const char *sep = xml ? "" : "\",\" ws ";
        char **rest = calloc(n + 1, sizeof *rest), **first = calloc(n + 1, sizeof *first);
        if (!rest || !first) { free(rest); free(first); ok = false; c->err = ember_error(EMBER_ERR_NOMEM, "json_schema: out of memory"); }
        for (size_t k = n + 1; ok && k-- > 0;) {
            char h[64]; snprintf(h, sizeof h, "%.40s-rest", hint);
            rest[k] = rule_name(c, h);
            snprintf(h, sizeof h, "%.40s-first", hint);
            first[k] = rule_name(c, h);
            if (!rest[k] || !first[k]) { ok = false; c->err = ember_error(EMBER_ERR_NOMEM, "json_schema: out of memory"); break; }
            sb rb = {0}, fb = {0};
            if (k == n) {
                if (more) { sb_printf(&rb, "( \",\" ws %s )*", akv.a); sb_printf(&fb, "( %s ( \",\" ws %s )* )?", akv.a, akv.a); }
            } else {
                if (isreq[k]) sb_printf(&rb, "%s%s %s", sep, kv[k], rest[k + 1]);
                else sb_printf(&rb, "( %s%s )? %s", sep, kv[k], rest[k + 1]);
                if (isreq[k]) sb_printf(&fb, "%s %s", kv[k], rest[k + 1]);
                else sb_printf(&fb, "%s %s | %s", kv[k], rest[k + 1], first[k + 1]);
            }
            define_rule(c, rest[k], &rb);
            define_rule(c, first[k], &fb);
            free(rb.a); free(fb.a);
        }
        if (ok && xml) sb_put(out, first[0]);
        else if (ok) sb_printf(out, "\"{\" ws %s \"}\"", first[0]);
        for (size_t k = 0; k <= n; k++) { if (rest) free(rest[k]); if (first) free(first[k]); }
        free(rest); free(first);
    }
    for (size_t k = 0; k < n; k++) free(kv[k]);
    free(kv); free(isreq); free(akv.a);
    return ok;
}

static bool gen_object(jsc *c, const json_t *s, const char *hint, const char *ptr, sb *out)
{
    return gen_object_syn(c, s, hint, ptr, false, out);
}

static bool gen_type(jsc *c, const json_t *s, const char *t, const char *hint, const char *ptr, sb *out)
{
    if (!strcmp(t, "string")) return gen_string(c, s, ptr, out);
    if (!strcmp(t, "integer")) { if (has_bounds(s)) return gen_int_bounded(c, s, ptr, out); sb_put(out, "integer"); return true; }
    if (!strcmp(t, "number")) { if (has_bounds(s)) return gen_number_bounded(c, s, ptr, out); sb_put(out, "number"); return true; }
    if (!strcmp(t, "boolean")) { sb_put(out, "boolean"); return true; }
    if (!strcmp(t, "null")) { sb_put(out, "null"); return true; }
    if (!strcmp(t, "object")) return gen_object(c, s, hint, ptr, out);
    if (!strcmp(t, "array")) return gen_array(c, s, hint, ptr, out);
    FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s/type '%.40s' is unknown", ptr, t);
}

static bool gen(jsc *c, const json_t *s, const char *hint, const char *ptr, sb *out)
{
    if (json_is_true(s)) { sb_put(out, "value"); return true; }
    if (json_is_false(s)) { sb_put(out, "nothing"); return true; }
    if (!json_is_object(s)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s: a schema must be an object or a boolean", ptr[0] ? ptr : "#");
    if (++c->depth > 200) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s: schema nested deeper than 200", ptr);
    bool ok = true;
    const json_t *x;
    if (json_object_get(s, "allOf")) FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s/allOf is not supported", ptr);
    if (json_object_get(s, "not")) FAIL(c, EMBER_ERR_UNSUPPORTED, "%.200s/not is not supported", ptr);
    if ((x = json_object_get(s, "$ref"))) {
        if (!json_is_string(x)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/$ref must be a string", ptr);
        ok = gen_ref(c, json_string_value(x), out);
    } else if ((x = json_object_get(s, "const"))) {
        ok = put_json_value(c, out, x);
    } else if ((x = json_object_get(s, "enum"))) {
        if (!json_is_array(x) || json_array_size(x) == 0) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/enum must be a non-empty array", ptr);
        size_t i; json_t *v;
        sb_put(out, "( ");
        json_array_foreach(x, i, v) {
            if (i) sb_put(out, " | ");
            if (!(ok = put_json_value(c, out, v))) break;
        }
        sb_put(out, " )");
    } else if ((x = json_object_get(s, "anyOf")) || (x = json_object_get(s, "oneOf"))) {
        const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
        if (!json_is_array(x) || json_array_size(x) == 0) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/%s must be a non-empty array", ptr, kw);
        size_t i; json_t *v;
        sb_put(out, "( ");
        json_array_foreach(x, i, v) {
            if (i) sb_put(out, " | ");
            char p2[300]; snprintf(p2, sizeof p2, "%.200s/%s/%zu", ptr, kw, i);
            char h[64]; snprintf(h, sizeof h, "%.40s-%zu", hint, i);
            /* sibling keywords (e.g. "type" next to anyOf) are ignored */
            if (!(ok = gen_rule(c, v, h, p2, out))) break;
        }
        sb_put(out, " )");
    } else if ((x = json_object_get(s, "type"))) {
        if (json_is_string(x)) ok = gen_type(c, s, json_string_value(x), hint, ptr, out);
        else if (json_is_array(x) && json_array_size(x) > 0) {
            size_t i; json_t *v;
            sb_put(out, "( ");
            json_array_foreach(x, i, v) {
                if (!json_is_string(v)) FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/type/%zu must be a string", ptr, i);
                if (i) sb_put(out, " | ");
                if (!(ok = gen_type(c, s, json_string_value(v), hint, ptr, out))) break;
            }
            sb_put(out, " )");
        } else FAIL(c, EMBER_ERR_INVALID_ARG, "%.200s/type must be a string or a non-empty array", ptr);
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") || json_object_get(s, "required")) {
        ok = gen_object(c, s, hint, ptr, out);
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems") || json_object_get(s, "minItems") || json_object_get(s, "maxItems")) {
        ok = gen_array(c, s, hint, ptr, out);
    } else if (json_object_get(s, "format") || json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
               json_object_get(s, "pattern")) {
        ok = gen_string(c, s, ptr, out);
    } else {
        sb_put(out, "value");
    }
    c->depth--;
    if (out->oom) FAIL(c, EMBER_ERR_NOMEM, "out of memory");
    return ok;
}

ember_status ember_json_schema_to_gbnf(const json_t *schema, char **out)
{
    return ember_json_schema_to_gbnf_syntax(schema, EMBER_SCHEMA_JSON, out);
}

ember_status ember_json_schema_to_gbnf_syntax(const json_t *schema, ember_schema_syntax syn, char **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "json_schema: out is NULL");
    *out = NULL;
    if (!schema) return ember_error(EMBER_ERR_INVALID_ARG, "json_schema: schema is NULL");
    if (syn != EMBER_SCHEMA_JSON && syn != EMBER_SCHEMA_GEMMA4 && syn != EMBER_SCHEMA_XML_PARAMS)
        return ember_error(EMBER_ERR_INVALID_ARG, "json_schema: unknown syntax %d", (int)syn);
    jsc c;
    memset(&c, 0, sizeof c);
    c.root = schema;
    c.syn = syn == EMBER_SCHEMA_GEMMA4 ? EMBER_SCHEMA_GEMMA4 : EMBER_SCHEMA_JSON;
    sb rootb = {0};
    bool ok;
    if (syn == EMBER_SCHEMA_XML_PARAMS) {
        /* the parameters of a call: an object schema ({} or true: no parameters) */
        if (json_is_object(schema) && !json_object_get(schema, "$ref") && !json_object_get(schema, "anyOf") &&
            !json_object_get(schema, "oneOf") && !json_object_get(schema, "allOf"))
            ok = gen_object_syn(&c, schema, "root", "#", true, &rootb);
        else if (json_is_true(schema))
            ok = (sb_put(&rootb, "\"\""), true);
        else
            ok = false, c.err = ember_error(EMBER_ERR_UNSUPPORTED,
                                            "json_schema: the parameters of a Qwen3-Coder call must be a plain object schema");
    } else {
        ok = gen(&c, schema, "root", "#", &rootb);
    }
    ember_status st = EMBER_OK;
    if (ok) {
        sb all = {0};
        sb_put(&all, "root ::= ");
        sb_putn(&all, rootb.a ? rootb.a : "", rootb.n);
        sb_put(&all, "\n");
        sb_putn(&all, c.rules.a ? c.rules.a : "", c.rules.n);
        sb_put(&all, syn == EMBER_SCHEMA_GEMMA4 ? PRIMITIVES_GEMMA4 : PRIMITIVES);
        if (syn == EMBER_SCHEMA_XML_PARAMS) sb_put(&all, XML_CHAR);
        if (all.oom || c.rules.oom || rootb.oom) { free(all.a); st = ember_error(EMBER_ERR_NOMEM, "json_schema: out of memory"); }
        else *out = all.a;
    } else st = c.err ? c.err : ember_error(EMBER_ERR_INTERNAL, "json_schema: failed");
    free(rootb.a); free(c.rules.a);
    for (size_t i = 0; i < c.n_memo; i++) { free(c.memo[i].ref); free(c.memo[i].rule); }
    free(c.memo);
    return st;
}

ember_status ember_json_object_gbnf(char **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "json_schema: out is NULL");
    sb all = {0};
    sb_put(&all, "root ::= object\n");
    sb_put(&all, PRIMITIVES);
    if (all.oom) { free(all.a); return ember_error(EMBER_ERR_NOMEM, "json_schema: out of memory"); }
    *out = all.a;
    return EMBER_OK;
}

ember_status ember_grammar_from_request(const json_t *body, char **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "request: out is NULL");
    *out = NULL;
    if (!json_is_object(body)) return ember_error(EMBER_ERR_INVALID_ARG, "request: body must be an object");
    const json_t *grammar = json_object_get(body, "grammar");
    const json_t *schema = json_object_get(body, "json_schema");
    const json_t *rf = json_object_get(body, "response_format");
    if (json_is_null(grammar)) grammar = NULL;
    if (json_is_null(schema)) schema = NULL;
    if (json_is_null(rf)) rf = NULL;
    const json_t *use_schema = NULL;
    bool json_object = false;
    if (rf) {
        if (!json_is_object(rf)) return ember_error(EMBER_ERR_INVALID_ARG, "request: response_format must be an object");
        const json_t *t = json_object_get(rf, "type");
        if (!json_is_string(t)) return ember_error(EMBER_ERR_INVALID_ARG, "request: response_format.type must be a string");
        const char *ts = json_string_value(t);
        if (!strcmp(ts, "text")) { /* no grammar */ }
        else if (!strcmp(ts, "json_object")) {
            use_schema = json_object_get(rf, "schema");
            if (!use_schema) json_object = true;
        } else if (!strcmp(ts, "json_schema")) {
            const json_t *js = json_object_get(rf, "json_schema");
            if (!json_is_object(js)) return ember_error(EMBER_ERR_INVALID_ARG, "request: response_format.json_schema must be an object");
            use_schema = json_object_get(js, "schema");
            if (!use_schema) return ember_error(EMBER_ERR_INVALID_ARG, "request: response_format.json_schema.schema is missing");
        } else return ember_error(EMBER_ERR_INVALID_ARG, "request: response_format.type '%.60s' is not one of text, json_object, json_schema", ts);
    }
    int n_src = (grammar != NULL) + (schema != NULL) + (use_schema != NULL || json_object);
    if (n_src > 1) return ember_error(EMBER_ERR_INVALID_ARG, "request: give only one of grammar, json_schema and a JSON response_format");
    if (grammar) {
        if (!json_is_string(grammar)) return ember_error(EMBER_ERR_INVALID_ARG, "request: grammar must be a string");
        *out = strndup(json_string_value(grammar), json_string_length(grammar));
        return *out ? EMBER_OK : ember_error(EMBER_ERR_NOMEM, "request: out of memory");
    }
    if (schema) use_schema = schema;
    if (use_schema) return ember_json_schema_to_gbnf(use_schema, out);
    if (json_object) return ember_json_object_gbnf(out);
    return EMBER_OK;
}
