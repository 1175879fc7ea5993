/*
 * grammar.c — GBNF parser, pushdown matcher with a lazily built DFA, token
 * masks over a byte trie of the vocabulary.
 *
 * Owns: everything declared in grammar.h. Must not: tokenize, sample, or
 * know about the server. Syntax facts: llama.cpp grammars/README.md (our own
 * implementation; no code taken from llama.cpp).
 */
#include "sample/grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

/* ---------------------------------------------------------------- vectors */

#define VEC(T) struct { T *a; size_t n, cap; }
#define VEC_PUSH(v, x) (vec_grow((void **)&(v).a, &(v).cap, (v).n + 1, sizeof(*(v).a)) ? ((v).a[(v).n++] = (x), 1) : 0)

static bool vec_grow(void **a, size_t *cap, size_t need, size_t elt)
{
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*a, nc * elt);
    if (!p) return false;
    *a = p;
    *cap = nc;
    return true;
}

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* ---------------------------------------------------------------- grammar */

enum { G_END = 0, G_REF = 1, G_CHARS = 2, G_TOKEN = 3 };

/* <[id]>, <text> or !<...>: one whole token (text resolved against the vocab) */
typedef struct tokref { int32_t id; char *text; uint32_t text_len; bool negate; } tokref;

typedef struct gelem { uint32_t type, v; } gelem;
typedef struct crange { uint32_t lo, hi; } crange;
typedef struct charset { uint32_t off, n; } charset;   /* sorted disjoint ranges */

struct ember_grammar {
    gelem *elems; size_t n_elems;
    uint32_t *alt_start; size_t n_alts;           /* element index of each alternative */
    uint32_t *rule_alt_off, *rule_alt_n; size_t n_rules;
    crange *ranges; size_t n_ranges;
    charset *sets; size_t n_sets;
    tokref *toks; size_t n_toks;
    uint32_t root;
};

#define MAX_CP 0x10FFFFu

/* ----------------------------------------------------------------- parser */

typedef VEC(gelem) elemvec;
typedef struct prule {
    char *name; size_t name_len;
    bool defined;
    uint32_t ref_line, ref_col;   /* first reference, for "undefined rule" */
    VEC(elemvec) alts;
} prule;

typedef struct parser {
    const char *s; size_t len, pos;
    VEC(prule) rules;
    VEC(crange) ranges;
    VEC(charset) sets;
    VEC(tokref) toks;
    ember_status err;
    int depth;
} parser;

static void line_col(const parser *p, size_t pos, uint32_t *line, uint32_t *col)
{
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->s[i] == '\n') { l++; c = 1; }
        else if (((unsigned char)p->s[i] & 0xC0) != 0x80) c++;
    }
    *line = l; *col = c;
}

#define PFAIL(p, at, code, ...) do { \
    if ((p)->err == EMBER_OK) { uint32_t l_, c_; line_col((p), (at), &l_, &c_); \
        char m_[512]; snprintf(m_, sizeof m_, __VA_ARGS__); \
        (p)->err = ember_error((code), "grammar: line %u:%u: %s", l_, c_, m_); } \
    return false; } while (0)
#define NOMEM(p) do { if ((p)->err == EMBER_OK) (p)->err = ember_error(EMBER_ERR_NOMEM, "grammar: out of memory"); return false; } while (0)

static int peekc(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static bool is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skip blanks and comments; newlines too when `nl`. */
static void skip_space(parser *p, bool nl)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t') p->pos++;
        else if (c == '#') { while (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r') p->pos++; }
        else if (nl && (c == '\n' || c == '\r')) p->pos++;
        else break;
    }
}

/* Decode one UTF-8 code point at p->pos. */
static bool decode_utf8(parser *p, uint32_t *cp)
{
    size_t at = p->pos;
    unsigned char c = (unsigned char)p->s[at];
    int n; uint32_t v;
    if (c < 0x80) { *cp = c; p->pos++; return true; }
    if (c >= 0xC2 && c <= 0xDF) { n = 1; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; v = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; v = c & 0x07; }
    else PFAIL(p, at, EMBER_ERR_FORMAT, "invalid UTF-8 byte 0x%02X", c);
    for (int i = 1; i <= n; i++) {
        if (at + i >= p->len || ((unsigned char)p->s[at + i] & 0xC0) != 0x80)
            PFAIL(p, at, EMBER_ERR_FORMAT, "truncated UTF-8 sequence");
        v = (v << 6) | ((unsigned char)p->s[at + i] & 0x3F);
    }
    if ((n == 2 && v < 0x800) || (n == 3 && (v < 0x10000 || v > MAX_CP)) || (v >= 0xD800 && v <= 0xDFFF))
        PFAIL(p, at, EMBER_ERR_FORMAT, "invalid UTF-8 sequence");
    *cp = v;
    p->pos += (size_t)n + 1;
    return true;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class, with escapes. */
static bool parse_char(parser *p, uint32_t *cp)
{
    size_t at = p->pos;
    if (p->pos >= p->len) PFAIL(p, at, EMBER_ERR_FORMAT, "unexpected end of input");
    if (p->s[p->pos] != '\\') return decode_utf8(p, cp);
    p->pos++;
    int c = peekc(p);
    if (c < 0) PFAIL(p, at, EMBER_ERR_FORMAT, "unexpected end of input after '\\'");
    p->pos++;
    int nhex = 0;
    switch (c) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': case '.':
        *cp = (uint32_t)c; return true;
    case 'x': nhex = 2; break;
    case 'u': nhex = 4; break;
    case 'U': nhex = 8; break;
    default: PFAIL(p, at, EMBER_ERR_FORMAT, "unknown escape '\\%c'", c > 32 && c < 127 ? c : '?');
    }
    uint32_t v = 0;
    for (int i = 0; i < nhex; i++) {
        int h = p->pos < p->len ? hexval((unsigned char)p->s[p->pos]) : -1;
        if (h < 0) PFAIL(p, at, EMBER_ERR_FORMAT, "escape needs %d hex digits", nhex);
        v = v * 16 + (uint32_t)h;
        p->pos++;
    }
    if (v > MAX_CP) PFAIL(p, at, EMBER_ERR_FORMAT, "code point U+%X out of range", v);
    *cp = v;
    return true;
}

static int find_rule(parser *p, const char *name, size_t n)
{
    for (size_t i = 0; i < p->rules.n; i++)
        if (p->rules.a[i].name_len == n && memcmp(p->rules.a[i].name, name, n) == 0) return (int)i;
    return -1;
}

static int add_rule(parser *p, const char *name, size_t n)
{
    prule r;
    memset(&r, 0, sizeof r);
    r.name = malloc(n + 1);
    if (!r.name) return -1;
    memcpy(r.name, name, n);
    r.name[n] = 0;
    r.name_len = n;
    if (!VEC_PUSH(p->rules, r)) { free(r.name); return -1; }
    return (int)p->rules.n - 1;
}

static int new_anon_rule(parser *p)
{
    char buf[32];
    int k = snprintf(buf, sizeof buf, " _g%zu", p->rules.n);   /* space: no clash with user names */
    int r = add_rule(p, buf, (size_t)k);
    if (r >= 0) p->rules.a[r].defined = true;
    return r;
}

static bool rule_add_alt(parser *p, int r, elemvec alt)
{
    if (!VEC_PUSH(p->rules.a[r].alts, alt)) { free(alt.a); NOMEM(p); }
    return true;
}

static bool add_charset(parser *p, const crange *rs, size_t n, bool negate, uint32_t *id)
{
    /* sort + merge, then complement if negated */
    crange *tmp = malloc((n + 1) * sizeof *tmp);
    if (!tmp) NOMEM(p);
    if (n) memcpy(tmp, rs, n * sizeof *tmp);
    for (size_t i = 1; i < n; i++) {   /* insertion sort: classes are short */
        crange x = tmp[i]; size_t j = i;
        while (j > 0 && tmp[j - 1].lo > x.lo) { tmp[j] = tmp[j - 1]; j--; }
        tmp[j] = x;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && tmp[i].lo <= tmp[m - 1].hi + 1) { if (tmp[i].hi > tmp[m - 1].hi) tmp[m - 1].hi = tmp[i].hi; }
        else tmp[m++] = tmp[i];
    }
    charset cs = { (uint32_t)p->ranges.n, 0 };
    if (!negate) {
        for (size_t i = 0; i < m; i++) if (!VEC_PUSH(p->ranges, tmp[i])) { free(tmp); NOMEM(p); }
    } else {
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (tmp[i].lo > next) { crange c = { next, tmp[i].lo - 1 }; if (!VEC_PUSH(p->ranges, c)) { free(tmp); NOMEM(p); } }
            next = tmp[i].hi + 1;
        }
        if (next <= MAX_CP) { crange c = { next, MAX_CP }; if (!VEC_PUSH(p->ranges, c)) { free(tmp); NOMEM(p); } }
    }
    free(tmp);
    cs.n = (uint32_t)(p->ranges.n - cs.off);
    if (!VEC_PUSH(p->sets, cs)) NOMEM(p);
    *id = (uint32_t)p->sets.n - 1;
    return true;
}

static bool parse_alternates(parser *p, int rule, bool nested);

/* Wrap a multi-element item into a rule so that it repeats as one. */
static bool item_to_elem(parser *p, elemvec *item, gelem *out)
{
    if (item->n == 1) { *out = item->a[0]; free(item->a); item->a = NULL; return true; }
    int r = new_anon_rule(p);
    if (r < 0) { free(item->a); NOMEM(p); }
    if (!rule_add_alt(p, r, *item)) return false;
    item->a = NULL;
    out->type = G_REF; out->v = (uint32_t)r;
    return true;
}

static bool push_elem(parser *p, elemvec *v, gelem e)
{
    if (!VEC_PUSH(*v, e)) NOMEM(p);
    return true;
}

/* x* as R ::= x R | (empty); returns R. */
static int star_rule(parser *p, gelem x)
{
    int r = new_anon_rule(p);
    if (r < 0) return -1;
    elemvec a = {0}, b = {0};
    gelem self = { G_REF, (uint32_t)r };
    if (!VEC_PUSH(a, x) || !VEC_PUSH(a, self)) { free(a.a); return -1; }
    if (!rule_add_alt(p, r, a) || !rule_add_alt(p, r, b)) return -1;
    return r;
}

#define MAX_REPEAT 100000u

static bool parse_uint(parser *p, uint32_t *v)
{
    size_t at = p->pos;
    uint64_t x = 0; int nd = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        x = x * 10 + (uint64_t)(p->s[p->pos] - '0');
        if (x > MAX_REPEAT) PFAIL(p, at, EMBER_ERR_FORMAT, "repetition bound over %u", MAX_REPEAT);
        p->pos++; nd++;
    }
    if (!nd) PFAIL(p, at, EMBER_ERR_FORMAT, "expected a number");
    *v = (uint32_t)x;
    return true;
}

/* Append `item` repeated per the postfix operator at p->pos (if any) to seq. */
static bool apply_postfix(parser *p, elemvec *seq, elemvec *item)
{
    int c = peekc(p);
    uint32_t lo, hi; bool unbounded = false;
    size_t at = p->pos;
    if (c == '*') { lo = 0; unbounded = true; hi = 0; p->pos++; }
    else if (c == '+') { lo = 1; unbounded = true; hi = 0; p->pos++; }
    else if (c == '?') { lo = 0; hi = 1; p->pos++; }
    else if (c == '{') {
        p->pos++;
        skip_space(p, false);
        if (!parse_uint(p, &lo)) { free(item->a); return false; }
        skip_space(p, false);
        if (peekc(p) == ',') {
            p->pos++; skip_space(p, false);
            if (peekc(p) == '}') { unbounded = true; hi = 0; }
            else if (!parse_uint(p, &hi)) { free(item->a); return false; }
            skip_space(p, false);
        } else hi = lo;
        if (peekc(p) != '}') { free(item->a); PFAIL(p, p->pos, EMBER_ERR_FORMAT, "expected '}'"); }
        p->pos++;
        if (!unbounded && hi < lo) { free(item->a); PFAIL(p, at, EMBER_ERR_FORMAT, "repetition {%u,%u}: max < min", lo, hi); }
    } else {
        for (size_t i = 0; i < item->n; i++) if (!push_elem(p, seq, item->a[i])) { free(item->a); return false; }
        free(item->a);
        return true;
    }
    gelem x;
    if (!item_to_elem(p, item, &x)) return false;
    for (uint32_t i = 0; i < lo; i++) if (!push_elem(p, seq, x)) return false;
    if (unbounded) {
        int r = star_rule(p, x);
        if (r < 0) NOMEM(p);
        gelem e = { G_REF, (uint32_t)r };
        return push_elem(p, seq, e);
    }
    if (hi > lo) {
        /* (x (x (x)?)?)? nested from the inside out */
        int inner = -1;
        for (uint32_t k = 0; k < hi - lo; k++) {
            int r = new_anon_rule(p);
            if (r < 0) NOMEM(p);
            elemvec a = {0}, b = {0};
            if (!VEC_PUSH(a, x)) NOMEM(p);
            if (inner >= 0) { gelem e = { G_REF, (uint32_t)inner }; if (!VEC_PUSH(a, e)) { free(a.a); NOMEM(p); } }
            if (!rule_add_alt(p, r, a) || !rule_add_alt(p, r, b)) return false;
            inner = r;
        }
        gelem e = { G_REF, (uint32_t)inner };
        return push_elem(p, seq, e);
    }
    return true;
}

static bool parse_sequence(parser *p, elemvec *seq, bool nested)
{
    for (;;) {
        skip_space(p, nested);
        int c = peekc(p);
        size_t at = p->pos;
        elemvec item = {0};
        if (c == '"') {
            p->pos++;
            for (;;) {
                if (p->pos >= p->len || p->s[p->pos] == '\n' || p->s[p->pos] == '\r') {
                    free(item.a); PFAIL(p, at, EMBER_ERR_FORMAT, "unterminated string literal"); }
                if (p->s[p->pos] == '"') { p->pos++; break; }
                uint32_t cp;
                if (!parse_char(p, &cp)) { free(item.a); return false; }
                crange r = { cp, cp }; uint32_t id;
                if (!add_charset(p, &r, 1, false, &id)) { free(item.a); return false; }
                gelem e = { G_CHARS, id };
                if (!VEC_PUSH(item, e)) NOMEM(p);
            }
            if (item.n == 0) continue;       /* "" matches the empty string */
        } else if (c == '[') {
            p->pos++;
            bool neg = false;
            if (peekc(p) == '^') { neg = true; p->pos++; }
            VEC(crange) rs = {0};
            for (;;) {
                if (p->pos >= p->len) { free(rs.a); PFAIL(p, at, EMBER_ERR_FORMAT, "unterminated character class"); }
                if (p->s[p->pos] == ']') { p->pos++; break; }
                uint32_t lo, hi;
                if (!parse_char(p, &lo)) { free(rs.a); return false; }
                hi = lo;
                if (p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
                    p->pos++;
                    size_t at2 = p->pos;
                    if (!parse_char(p, &hi)) { free(rs.a); return false; }
                    if (hi < lo) { free(rs.a); PFAIL(p, at2, EMBER_ERR_FORMAT, "range end below its start"); }
                }
                crange r = { lo, hi };
                if (!VEC_PUSH(rs, r)) { free(rs.a); NOMEM(p); }
            }
            uint32_t id;
            bool ok = add_charset(p, rs.a, rs.n, neg, &id);
            free(rs.a);
            if (!ok) return false;
            gelem e = { G_CHARS, id };
            if (!VEC_PUSH(item, e)) NOMEM(p);
        } else if (c == '.') {
            p->pos++;
            crange r = { 0, MAX_CP }; uint32_t id;
            if (!add_charset(p, &r, 1, false, &id)) return false;
            gelem e = { G_CHARS, id };
            if (!VEC_PUSH(item, e)) NOMEM(p);
        } else if (c == '(') {
            p->pos++;
            if (++p->depth > 200) PFAIL(p, at, EMBER_ERR_FORMAT, "groups nested too deeply");
            int r = new_anon_rule(p);
            if (r < 0) NOMEM(p);
            if (!parse_alternates(p, r, true)) return false;
            skip_space(p, true);
            if (peekc(p) != ')') PFAIL(p, p->pos, EMBER_ERR_FORMAT, "expected ')' to close the group opened at byte %zu", at);
            p->pos++;
            p->depth--;
            gelem e = { G_REF, (uint32_t)r };
            if (!VEC_PUSH(item, e)) NOMEM(p);
        } else if (c >= 0 && is_name_char(c)) {
            size_t s0 = p->pos;
            while (p->pos < p->len && is_name_char((unsigned char)p->s[p->pos])) p->pos++;
            size_t n = p->pos - s0;
            /* a name followed by ::= starts the next rule (lenient: on the same line) */
            size_t save = p->pos;
            skip_space(p, false);
            if (p->len - p->pos >= 3 && memcmp(p->s + p->pos, "::=", 3) == 0) {
                p->pos = s0;
                return true;
            }
            p->pos = save;
            int r = find_rule(p, p->s + s0, n);
            if (r < 0) {
                r = add_rule(p, p->s + s0, n);
                if (r < 0) NOMEM(p);
                line_col(p, s0, &p->rules.a[r].ref_line, &p->rules.a[r].ref_col);
            }
            gelem e = { G_REF, (uint32_t)r };
            if (!VEC_PUSH(item, e)) NOMEM(p);
        } else if (c == '<' || c == '!') {
            tokref tr = { -1, NULL, 0, c == '!' };
            if (c == '!') {
                p->pos++;
                if (peekc(p) != '<') PFAIL(p, p->pos, EMBER_ERR_FORMAT, "expected '<' after '!'");
            }
            size_t t0 = p->pos;
            p->pos++;
            if (peekc(p) == '[') {
                p->pos++;
                uint32_t id;
                if (!parse_uint(p, &id)) return false;
                if (peekc(p) != ']' || p->pos + 1 >= p->len || p->s[p->pos + 1] != '>')
                    PFAIL(p, p->pos, EMBER_ERR_FORMAT, "expected ']>' after a token id");
                p->pos += 2;
                tr.id = (int32_t)id;
            } else {
                while (p->pos < p->len && p->s[p->pos] != '>' && p->s[p->pos] != '\n' && p->s[p->pos] != '\r') p->pos++;
                if (p->pos >= p->len || p->s[p->pos] != '>') PFAIL(p, t0, EMBER_ERR_FORMAT, "unterminated token reference");
                p->pos++;
                tr.text_len = (uint32_t)(p->pos - t0);
                tr.text = malloc(tr.text_len + 1);
                if (!tr.text) NOMEM(p);
                memcpy(tr.text, p->s + t0, tr.text_len);
                tr.text[tr.text_len] = 0;
            }
            if (!VEC_PUSH(p->toks, tr)) { free(tr.text); NOMEM(p); }
            gelem e = { G_TOKEN, (uint32_t)p->toks.n - 1 };
            if (!VEC_PUSH(item, e)) NOMEM(p);
        } else {
            return true;
        }
        if (!apply_postfix(p, seq, &item)) return false;
    }
}

static bool parse_alternates(parser *p, int rule, bool nested)
{
    for (;;) {
        elemvec seq = {0};
        if (!parse_sequence(p, &seq, nested)) { free(seq.a); return false; }
        if (!rule_add_alt(p, rule, seq)) return false;
        skip_space(p, nested);
        if (peekc(p) == '|') { p->pos++; skip_space(p, true); continue; }
        if (!nested) {   /* a continuation line starting with '|' */
            size_t save = p->pos;
            skip_space(p, true);
            if (peekc(p) == '|') { p->pos++; skip_space(p, true); continue; }
            p->pos = save;
        }
        return true;
    }
}

static bool parse_all(parser *p)
{
    for (;;) {
        skip_space(p, true);
        if (p->pos >= p->len) return true;
        size_t at = p->pos;
        int c = peekc(p);
        if (!is_name_char(c)) PFAIL(p, at, EMBER_ERR_FORMAT, "expected a rule name");
        while (p->pos < p->len && is_name_char((unsigned char)p->s[p->pos])) p->pos++;
        size_t n = p->pos - at;
        skip_space(p, false);
        if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3) != 0)
            PFAIL(p, p->pos, EMBER_ERR_FORMAT, "expected '::=' after rule name");
        p->pos += 3;
        skip_space(p, true);
        int r = find_rule(p, p->s + at, n);
        if (r >= 0 && p->rules.a[r].defined) PFAIL(p, at, EMBER_ERR_FORMAT, "rule '%.*s' defined twice", (int)(n > 64 ? 64 : n), p->s + at);
        if (r < 0) { r = add_rule(p, p->s + at, n); if (r < 0) NOMEM(p); }
        p->rules.a[r].defined = true;
        if (!parse_alternates(p, r, false)) return false;
        skip_space(p, false);
        c = peekc(p);
        if (c >= 0 && c != '\n' && c != '\r' && !is_name_char(c))
            PFAIL(p, p->pos, EMBER_ERR_FORMAT, "unexpected character '%c'", c > 32 && c < 127 ? c : '?');
    }
}

static void parser_free(parser *p)
{
    for (size_t i = 0; i < p->rules.n; i++) {
        free(p->rules.a[i].name);
        for (size_t j = 0; j < p->rules.a[i].alts.n; j++) free(p->rules.a[i].alts.a[j].a);
        free(p->rules.a[i].alts.a);
    }
    free(p->rules.a); free(p->ranges.a); free(p->sets.a);
    for (size_t i = 0; i < p->toks.n; i++) free(p->toks.a[i].text);
    free(p->toks.a);
}

void ember_grammar_free(ember_grammar *g)
{
    if (!g) return;
    free(g->elems); free(g->alt_start); free(g->rule_alt_off); free(g->rule_alt_n);
    free(g->ranges); free(g->sets);
    for (size_t i = 0; i < g->n_toks; i++) free(g->toks[i].text);
    free(g->toks);
    free(g);
}

int32_t ember_grammar_n_rules(const ember_grammar *g) { return g ? (int32_t)g->n_rules : 0; }

/* Left recursion: rule A reaches itself through elements that can all be
 * empty. nullable() by fixpoint, then a DFS over "first" edges. */
static bool check_left_recursion(parser *p, const ember_grammar *g)
{
    size_t R = g->n_rules;
    bool *nullable = calloc(R ? R : 1, 1);
    uint8_t *color = calloc(R ? R : 1, 1);
    uint32_t *stack = malloc((R ? R : 1) * 2 * sizeof *stack);
    if (!nullable || !color || !stack) { free(nullable); free(color); free(stack); NOMEM(p); }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < R; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = 0; a < g->rule_alt_n[r]; a++) {
                const gelem *e = g->elems + g->alt_start[g->rule_alt_off[r] + a];
                while (e->type == G_REF && nullable[e->v]) e++;
                if (e->type == G_END) { nullable[r] = true; changed = true; break; }
            }
        }
    }
    bool ok = true;
    /* iterative DFS: stack holds (rule, next alt-element cursor) */
    for (size_t s = 0; s < R && ok; s++) {
        if (color[s]) continue;
        size_t sp = 0;
        stack[sp++] = (uint32_t)s; stack[sp++] = 0;
        color[s] = 1;
        while (sp && ok) {
            uint32_t r = stack[sp - 2], cur = stack[sp - 1];
            /* enumerate "first" refs of r: cur encodes (alt << 16 | offset) */
            uint32_t a = cur >> 16, off = cur & 0xFFFF;
            bool pushed = false;
            while (a < g->rule_alt_n[r]) {
                const gelem *e = g->elems + g->alt_start[g->rule_alt_off[r] + a] + off;
                if (e->type != G_REF) { a++; off = 0; continue; }
                uint32_t t = e->v;
                if (nullable[t] && off < 0xFFFE) off++; else { a++; off = 0; }
                stack[sp - 1] = (a << 16) | off;
                if (color[t] == 1) {
                    const char *nm = p->rules.a[t].name;
                    p->err = ember_error(EMBER_ERR_FORMAT, "grammar: left recursion through rule '%s'", nm[0] == ' ' ? "(group)" : nm);
                    ok = false; break;
                }
                if (color[t] == 0) {
                    color[t] = 1;
                    stack[sp++] = t; stack[sp++] = 0;
                    pushed = true;
                    break;
                }
            }
            if (!ok) break;
            if (!pushed) { color[r] = 2; sp -= 2; }
        }
    }
    free(nullable); free(color); free(stack);
    return ok;
}

ember_status ember_grammar_parse(const char *text, size_t len, const char *root, ember_grammar **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "grammar: out is NULL");
    *out = NULL;
    if (!text && len) return ember_error(EMBER_ERR_INVALID_ARG, "grammar: text is NULL");
    if (!root) root = "root";
    if (len > 64u << 20) return ember_error(EMBER_ERR_INVALID_ARG, "grammar: text over 64 MiB");
    parser p;
    memset(&p, 0, sizeof p);
    p.s = text ? text : ""; p.len = len;
    ember_grammar *g = NULL;
    if (!parse_all(&p)) goto fail;
    for (size_t i = 0; i < p.rules.n; i++) {
        if (!p.rules.a[i].defined) {
            p.err = ember_error(EMBER_ERR_FORMAT, "grammar: line %u:%u: undefined rule '%s'",
                                p.rules.a[i].ref_line, p.rules.a[i].ref_col, p.rules.a[i].name);
            goto fail;
        }
    }
    int r = find_rule(&p, root, strlen(root));
    if (r < 0) { p.err = ember_error(EMBER_ERR_FORMAT, "grammar: line 1:1: no rule named '%s'", root); goto fail; }
    g = calloc(1, sizeof *g);
    if (!g) goto nomem;
    g->root = (uint32_t)r;
    g->n_rules = p.rules.n;
    size_t n_alts = 0, n_el = 0;
    for (size_t i = 0; i < p.rules.n; i++) {
        n_alts += p.rules.a[i].alts.n;
        for (size_t j = 0; j < p.rules.a[i].alts.n; j++) n_el += p.rules.a[i].alts.a[j].n + 1;
    }
    g->elems = malloc((n_el + 1) * sizeof *g->elems);
    g->alt_start = malloc((n_alts + 1) * sizeof *g->alt_start);
    g->rule_alt_off = malloc((p.rules.n + 1) * sizeof(uint32_t));
    g->rule_alt_n = malloc((p.rules.n + 1) * sizeof(uint32_t));
    if (!g->elems || !g->alt_start || !g->rule_alt_off || !g->rule_alt_n) goto nomem;
    size_t ea = 0, aa = 0;
    for (size_t i = 0; i < p.rules.n; i++) {
        g->rule_alt_off[i] = (uint32_t)aa;
        g->rule_alt_n[i] = (uint32_t)p.rules.a[i].alts.n;
        for (size_t j = 0; j < p.rules.a[i].alts.n; j++) {
            g->alt_start[aa++] = (uint32_t)ea;
            elemvec *v = &p.rules.a[i].alts.a[j];
            if (v->n) memcpy(g->elems + ea, v->a, v->n * sizeof *v->a);
            ea += v->n;
            g->elems[ea].type = G_END; g->elems[ea].v = 0;
            ea++;
        }
    }
    g->n_elems = ea; g->n_alts = aa;
    g->ranges = p.ranges.a; g->n_ranges = p.ranges.n; p.ranges.a = NULL;
    g->sets = p.sets.a; g->n_sets = p.sets.n; p.sets.a = NULL;
    g->toks = p.toks.a; g->n_toks = p.toks.n; p.toks.a = NULL; p.toks.n = 0;
    if (!check_left_recursion(&p, g)) goto fail;
    parser_free(&p);
    *out = g;
    return EMBER_OK;
nomem:
    p.err = ember_error(EMBER_ERR_NOMEM, "grammar: out of memory");
fail:
    parser_free(&p);
    ember_grammar_free(g);
    return p.err ? p.err : ember_error(EMBER_ERR_INTERNAL, "grammar: parse failed");
}

static inline bool cs_match(const ember_grammar *g, uint32_t cs, uint32_t cp)
{
    const charset *s = &g->sets[cs];
    const crange *r = g->ranges + s->off;
    for (uint32_t i = 0; i < s->n; i++) {
        if (cp < r[i].lo) return false;
        if (cp <= r[i].hi) return true;
    }
    return false;
}

static inline bool cs_intersects(const ember_grammar *g, uint32_t cs, uint32_t lo, uint32_t hi)
{
    const charset *s = &g->sets[cs];
    const crange *r = g->ranges + s->off;
    for (uint32_t i = 0; i < s->n; i++)
        if (r[i].lo <= hi && lo <= r[i].hi) return true;
    return false;
}

/* ------------------------------------------------------------------ vocab */

struct ember_grammar_vocab {
    int32_t n_vocab;
    char *bytes; uint64_t *piece_off; uint32_t *piece_len;
    uint32_t *eog_bits;         /* end-of-generation tokens */
    ember_token *eog_list; size_t n_eog;
    /* trie in pre-order: node i has byte[i], depth[i] (1-based), skip[i]
     * (first node after its subtree), tok[i] (first token ending here or -1);
     * tok_next[t] chains tokens with identical pieces (such a node stores
     * -2 - first id) */
    size_t n_nodes;
    uint8_t *byte; uint16_t *depth; uint32_t *skip; int32_t *tok;
    int32_t *tok_next;
    uint32_t max_depth;
    /* token texts for <text> references (special tokens as text); NULL if not given */
    char *tbytes; uint64_t *text_off; uint32_t *text_len;
};

void ember_grammar_vocab_free(ember_grammar_vocab *tv)
{
    if (!tv) return;
    free(tv->bytes); free(tv->piece_off); free(tv->piece_len); free(tv->eog_bits); free(tv->eog_list);
    free(tv->byte); free(tv->depth); free(tv->skip); free(tv->tok); free(tv->tok_next);
    free(tv->tbytes); free(tv->text_off); free(tv->text_len);
    free(tv);
}

int32_t ember_grammar_vocab_n_tokens(const ember_grammar_vocab *tv) { return tv ? tv->n_vocab : 0; }

static const ember_grammar_vocab *g_sort_tv;   /* qsort has no context argument in C17 */

static int cmp_piece(const void *a, const void *b)
{
    const ember_grammar_vocab *tv = g_sort_tv;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = tv->piece_len[x], ly = tv->piece_len[y];
    int c = memcmp(tv->bytes + tv->piece_off[x], tv->bytes + tv->piece_off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : 1;
}

#define MAX_PIECE 65535u

ember_status ember_grammar_vocab_new(const char *const *pieces, const size_t *lens,
                                     const char *const *texts, const size_t *text_lens, int32_t n_vocab,
                                     const bool *is_eog, ember_grammar_vocab **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "grammar vocab: out is NULL");
    *out = NULL;
    if (n_vocab <= 0 || !pieces || !lens) return ember_error(EMBER_ERR_INVALID_ARG, "grammar vocab: n_vocab %d or arrays NULL", n_vocab);
    ember_grammar_vocab *tv = calloc(1, sizeof *tv);
    if (!tv) return ember_error(EMBER_ERR_NOMEM, "grammar vocab: out of memory");
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (lens[i] && !pieces[i]) { ember_grammar_vocab_free(tv); return ember_error(EMBER_ERR_INVALID_ARG, "grammar vocab: piece %d is NULL", i); }
        if (lens[i] > MAX_PIECE) { ember_grammar_vocab_free(tv); return ember_error(EMBER_ERR_INVALID_ARG, "grammar vocab: piece %d longer than %u bytes", i, MAX_PIECE); }
        total += lens[i];
    }
    size_t nw = ((size_t)n_vocab + 31) / 32;
    tv->n_vocab = n_vocab;
    tv->bytes = malloc(total + 1);
    tv->piece_off = malloc((size_t)n_vocab * sizeof *tv->piece_off);
    tv->piece_len = malloc((size_t)n_vocab * sizeof *tv->piece_len);
    tv->eog_bits = calloc(nw, sizeof *tv->eog_bits);
    tv->eog_list = malloc((size_t)n_vocab * sizeof *tv->eog_list);
    tv->tok_next = malloc((size_t)n_vocab * sizeof *tv->tok_next);
    int32_t *order = malloc((size_t)n_vocab * sizeof *order);
    /* upper bound on trie nodes: total bytes */
    tv->byte = malloc(total + 1);
    tv->depth = malloc((total + 1) * sizeof *tv->depth);
    tv->skip = malloc((total + 1) * sizeof *tv->skip);
    tv->tok = malloc((total + 1) * sizeof *tv->tok);
    if (!tv->bytes || !tv->piece_off || !tv->piece_len || !tv->eog_bits || !tv->eog_list || !tv->tok_next ||
        !order || !tv->byte || !tv->depth || !tv->skip || !tv->tok) {
        free(order); ember_grammar_vocab_free(tv);
        return ember_error(EMBER_ERR_NOMEM, "grammar vocab: out of memory");
    }
    size_t off = 0, n_order = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        tv->piece_off[i] = off; tv->piece_len[i] = (uint32_t)lens[i];
        if (lens[i]) memcpy(tv->bytes + off, pieces[i], lens[i]);
        off += lens[i];
        tv->tok_next[i] = -1;
        if (is_eog && is_eog[i]) {
            tv->eog_bits[i >> 5] |= 1u << (i & 31);
            tv->eog_list[tv->n_eog++] = i;
        } else if (lens[i]) {
            order[n_order++] = i;
        }
    }
    g_sort_tv = tv;
    qsort(order, n_order, sizeof *order, cmp_piece);
    g_sort_tv = NULL;
    /* pre-order trie from sorted pieces */
    uint32_t *pth = malloc((MAX_PIECE + 2) * sizeof *pth);
    if (!pth) { free(order); ember_grammar_vocab_free(tv); return ember_error(EMBER_ERR_NOMEM, "grammar vocab: out of memory"); }
    size_t nn = 0, plen = 0;   /* plen: depth of the current path */
    const uint8_t *prev = NULL;
    for (size_t k = 0; k < n_order; k++) {
        int32_t t = order[k];
        const uint8_t *s = (const uint8_t *)tv->bytes + tv->piece_off[t];
        size_t L = tv->piece_len[t], lcp = 0;
        if (prev) { while (lcp < L && lcp < plen && prev[lcp] == s[lcp]) lcp++; }
        while (plen > lcp) { tv->skip[pth[plen - 1]] = (uint32_t)nn; plen--; }
        for (size_t d = lcp; d < L; d++) {
            tv->byte[nn] = s[d]; tv->depth[nn] = (uint16_t)(d + 1); tv->tok[nn] = -1;
            pth[plen++] = (uint32_t)nn;
            nn++;
        }
        uint32_t node = pth[L - 1];
        if (tv->tok[node] < 0) tv->tok[node] = t;
        else {   /* same bytes as an earlier token: chain it */
            int32_t u = tv->tok[node];
            while (tv->tok_next[u] >= 0) u = tv->tok_next[u];
            tv->tok_next[u] = t;
        }
        if (L > tv->max_depth) tv->max_depth = (uint32_t)L;
        prev = s;
    }
    while (plen > 0) { tv->skip[pth[plen - 1]] = (uint32_t)nn; plen--; }
    /* nodes ending several tokens: tok = -2 - first id (the walk then follows
     * tok_next; the common single-token node costs no extra load) */
    for (size_t i = 0; i < nn; i++)
        if (tv->tok[i] >= 0 && tv->tok_next[tv->tok[i]] >= 0) tv->tok[i] = -2 - tv->tok[i];
    free(pth);
    free(order);
    tv->n_nodes = nn;
    if (texts && text_lens) {
        size_t tt = 0;
        for (int32_t i = 0; i < n_vocab; i++) tt += texts[i] ? text_lens[i] : 0;
        tv->tbytes = malloc(tt + 1);
        tv->text_off = malloc((size_t)n_vocab * sizeof *tv->text_off);
        tv->text_len = malloc((size_t)n_vocab * sizeof *tv->text_len);
        if (!tv->tbytes || !tv->text_off || !tv->text_len) { ember_grammar_vocab_free(tv); return ember_error(EMBER_ERR_NOMEM, "grammar vocab: out of memory"); }
        size_t o = 0;
        for (int32_t i = 0; i < n_vocab; i++) {
            size_t L = texts[i] ? text_lens[i] : 0;
            tv->text_off[i] = o; tv->text_len[i] = (uint32_t)(L > UINT32_MAX ? 0 : L);
            if (L) memcpy(tv->tbytes + o, texts[i], L);
            o += L;
        }
    }
    *out = tv;
    return EMBER_OK;
}

ember_status ember_grammar_vocab_from_tokenizer(const struct ember_vocab *v, ember_grammar_vocab **out)
{
    if (!v || !out) return ember_error(EMBER_ERR_INVALID_ARG, "grammar vocab: NULL argument");
    int32_t n = ember_vocab_n_tokens(v);
    if (n <= 0) return ember_error(EMBER_ERR_INVALID_ARG, "grammar vocab: empty tokenizer vocabulary");
    const char **pieces = malloc((size_t)n * sizeof *pieces), **texts = malloc((size_t)n * sizeof *texts);
    size_t *lens = malloc((size_t)n * sizeof *lens), *tlens = malloc((size_t)n * sizeof *tlens);
    bool *eog = malloc((size_t)n * sizeof *eog);
    if (!pieces || !lens || !eog || !texts || !tlens) {
        free(pieces); free(lens); free(eog); free(texts); free(tlens);
        return ember_error(EMBER_ERR_NOMEM, "grammar vocab: out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
        pieces[i] = ember_token_to_piece(v, i, false, &lens[i]);
        texts[i] = ember_token_to_piece(v, i, true, &tlens[i]);
        eog[i] = ember_vocab_is_eog(v, i);
    }
    ember_status st = ember_grammar_vocab_new(pieces, lens, texts, tlens, n, eog, out);
    free(pieces); free(lens); free(eog); free(texts); free(tlens);
    return st;
}

/* ----------------------------------------------------------------- engine */

/* Stack node: (pos, parent). Node 0 is the bottom: an empty stack, i.e. the
 * grammar is complete. Nodes are hash-consed so equal stacks share ids. */
typedef struct gnode { uint32_t pos, parent; } gnode;

/* DFA state: a stack set plus a partial UTF-8 code point (need more bytes,
 * bits so far). */
typedef struct dstate { uint32_t set; uint32_t acc; uint8_t need; uint8_t accepting; uint8_t has_tok; } dstate;

typedef struct htab { uint32_t *slot; size_t cap, n; } htab;   /* ids + 1; 0 = empty */

#define DEAD (-1)
#define UNKNOWN (-2)
#define N_MASK_CACHE 64
#define MASK_LIST_MAX 4096
#define MAX_CACHE_BYTES ((size_t)512 << 20)

typedef struct engine {
    int refs;
    const ember_grammar *g;
    const ember_grammar_vocab *tv;
    VEC(gnode) nodes; htab node_h;
    VEC(uint32_t) set_data; VEC(uint64_t) set_off; VEC(uint32_t) set_len; htab set_h;
    VEC(dstate) ds; htab ds_h;
    VEC(int32_t *) rows;
    int32_t start;
    bool oom;
    size_t bytes;
    /* scratch for advancing */
    VEC(uint32_t) out; VEC(uint64_t) work;
    uint64_t *vis; uint32_t vis_cap, vis_n;   /* visited (pos,parent) of one expansion */
    /* mask cache */
    int32_t mask_state[N_MASK_CACHE]; uint32_t *mask_bits[N_MASK_CACHE]; int32_t mask_count[N_MASK_CACHE];
    ember_token *mask_list[N_MASK_CACHE];   /* allowed ids when sparse (count <= MASK_LIST_MAX) */
    uint32_t mask_next;
    size_t mask_hits, mask_misses;
    int32_t *walk;   /* DFS state per depth */
    int32_t **walk_row;
    int32_t *tok_id; /* resolved token references */
} engine;

struct ember_grammar_state {
    engine *e;
    int32_t cur;
    bool done;
};

static bool ht_grow(htab *h, size_t need)
{
    if ((need + 1) * 2 <= h->cap) return true;
    return false;
}

typedef uint64_t (*hash_fn)(const engine *e, uint32_t id);

static bool ht_rehash(engine *e, htab *h, hash_fn hf)
{
    size_t nc = h->cap ? h->cap * 2 : 1024;
    uint32_t *ns = calloc(nc, sizeof *ns);
    if (!ns) return false;
    for (size_t i = 0; i < h->cap; i++) {
        if (!h->slot[i]) continue;
        size_t j = hf(e, h->slot[i] - 1) & (nc - 1);
        while (ns[j]) j = (j + 1) & (nc - 1);
        ns[j] = h->slot[i];
    }
    e->bytes += (nc - h->cap) * sizeof *ns;
    free(h->slot);
    h->slot = ns; h->cap = nc;
    return true;
}

static uint64_t node_hash_kv(uint32_t pos, uint32_t parent) { return mix64(((uint64_t)pos << 32) | parent); }
static uint64_t node_hash(const engine *e, uint32_t id) { return node_hash_kv(e->nodes.a[id].pos, e->nodes.a[id].parent); }

static uint64_t set_hash_kv(const uint32_t *a, uint32_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    for (uint32_t i = 0; i < n; i++) h = mix64(h ^ a[i]) + i;
    return h;
}
static uint64_t set_hash(const engine *e, uint32_t id) { return set_hash_kv(e->set_data.a + e->set_off.a[id], e->set_len.a[id]); }

static uint64_t ds_hash_kv(uint32_t set, uint32_t acc, uint8_t need) { return mix64(((uint64_t)set << 32) ^ ((uint64_t)acc << 3) ^ need); }
static uint64_t ds_hash(const engine *e, uint32_t id) { const dstate *d = &e->ds.a[id]; return ds_hash_kv(d->set, d->acc, d->need); }

static int64_t node_intern(engine *e, uint32_t pos, uint32_t parent)
{
    htab *h = &e->node_h;
    if (!ht_grow(h, h->n + 1) && !ht_rehash(e, h, node_hash)) return -1;
    size_t j = node_hash_kv(pos, parent) & (h->cap - 1);
    while (h->slot[j]) {
        const gnode *n = &e->nodes.a[h->slot[j] - 1];
        if (n->pos == pos && n->parent == parent) return h->slot[j] - 1;
        j = (j + 1) & (h->cap - 1);
    }
    if (e->bytes > MAX_CACHE_BYTES) return -1;
    gnode nn = { pos, parent };
    if (!VEC_PUSH(e->nodes, nn)) return -1;
    e->bytes += sizeof nn;
    h->slot[j] = (uint32_t)e->nodes.n;
    h->n++;
    return (int64_t)e->nodes.n - 1;
}

static int64_t set_intern(engine *e, const uint32_t *a, uint32_t n)
{
    htab *h = &e->set_h;
    if (!ht_grow(h, h->n + 1) && !ht_rehash(e, h, set_hash)) return -1;
    size_t j = set_hash_kv(a, n) & (h->cap - 1);
    while (h->slot[j]) {
        uint32_t id = h->slot[j] - 1;
        if (e->set_len.a[id] == n && memcmp(e->set_data.a + e->set_off.a[id], a, n * sizeof *a) == 0) return id;
        j = (j + 1) & (h->cap - 1);
    }
    if (e->bytes > MAX_CACHE_BYTES) return -1;
    uint64_t off = e->set_data.n;
    if (!vec_grow((void **)&e->set_data.a, &e->set_data.cap, e->set_data.n + n, sizeof(uint32_t))) return -1;
    memcpy(e->set_data.a + off, a, n * sizeof *a);
    e->set_data.n += n;
    if (!VEC_PUSH(e->set_off, off) || !VEC_PUSH(e->set_len, n)) return -1;
    e->bytes += n * 4 + 12;
    h->slot[j] = (uint32_t)e->set_len.n;
    h->n++;
    return (int64_t)e->set_len.n - 1;
}

static int32_t ds_intern(engine *e, uint32_t set, uint32_t acc, uint8_t need)
{
    htab *h = &e->ds_h;
    if (!ht_grow(h, h->n + 1) && !ht_rehash(e, h, ds_hash)) { e->oom = true; return DEAD; }
    size_t j = ds_hash_kv(set, acc, need) & (h->cap - 1);
    while (h->slot[j]) {
        const dstate *d = &e->ds.a[h->slot[j] - 1];
        if (d->set == set && d->acc == acc && d->need == need) return (int32_t)h->slot[j] - 1;
        j = (j + 1) & (h->cap - 1);
    }
    if (e->bytes > MAX_CACHE_BYTES || e->ds.n >= INT32_MAX - 1) { e->oom = true; return DEAD; }
    const uint32_t *sa = e->set_data.a + e->set_off.a[set];
    dstate d = { set, acc, need, (uint8_t)(need == 0 && e->set_len.a[set] > 0 && sa[0] == 0), 0 };
    if (need == 0 && e->g->n_toks)
        for (uint32_t i = 0; i < e->set_len.a[set]; i++)
            if (sa[i] && e->g->elems[e->nodes.a[sa[i]].pos].type == G_TOKEN) { d.has_tok = 1; break; }
    int32_t *row = NULL;
    if (!VEC_PUSH(e->ds, d) || !VEC_PUSH(e->rows, row)) { e->oom = true; return DEAD; }
    e->bytes += sizeof d + sizeof row;
    h->slot[j] = (uint32_t)e->ds.n;
    h->n++;
    return (int32_t)e->ds.n - 1;
}

/* visited set of (pos, parent) pairs for one expansion */
static bool vis_add(engine *e, uint32_t pos, uint32_t parent)
{
    uint64_t key = ((uint64_t)pos << 32) | parent;
    if ((e->vis_n + 1) * 2 > e->vis_cap) {
        uint32_t nc = e->vis_cap ? e->vis_cap * 2 : 256;
        uint64_t *nv = malloc((size_t)nc * sizeof *nv);
        if (!nv) { e->oom = true; return false; }
        memset(nv, 0xFF, (size_t)nc * sizeof *nv);
        for (uint32_t i = 0; i < e->vis_cap; i++) {
            if (e->vis[i] == UINT64_MAX) continue;
            uint32_t j = (uint32_t)mix64(e->vis[i]) & (nc - 1);
            while (nv[j] != UINT64_MAX) j = (j + 1) & (nc - 1);
            nv[j] = e->vis[i];
        }
        free(e->vis); e->vis = nv; e->vis_cap = nc;
    }
    uint32_t j = (uint32_t)mix64(key) & (e->vis_cap - 1);
    while (e->vis[j] != UINT64_MAX) {
        if (e->vis[j] == key) return false;
        j = (j + 1) & (e->vis_cap - 1);
    }
    e->vis[j] = key;
    e->vis_n++;
    return true;
}

static void vis_clear(engine *e)
{
    if (e->vis_n) { memset(e->vis, 0xFF, (size_t)e->vis_cap * sizeof *e->vis); e->vis_n = 0; }
}

static bool work_push(engine *e, uint32_t pos, uint32_t parent)
{
    if (!VEC_PUSH(e->work, ((uint64_t)pos << 32) | parent)) { e->oom = true; return false; }
    return true;
}

/* Expand everything pushed on e->work into stack nodes whose top is a
 * character element (or node 0) appended to e->out. */
static bool expand(engine *e)
{
    const ember_grammar *g = e->g;
    while (e->work.n) {
        uint64_t w = e->work.a[--e->work.n];
        uint32_t pos = (uint32_t)(w >> 32), par = (uint32_t)w;
        if (!vis_add(e, pos, par)) { if (e->oom) return false; continue; }
        const gelem *el = &g->elems[pos];
        if (el->type == G_END) {
            if (par == 0) { if (!VEC_PUSH(e->out, 0u)) { e->oom = true; return false; } }
            else if (!work_push(e, e->nodes.a[par].pos, e->nodes.a[par].parent)) return false;
        } else if (el->type == G_REF) {
            uint32_t ret = par;
            if (g->elems[pos + 1].type != G_END) {
                int64_t r = node_intern(e, pos + 1, par);
                if (r < 0) { e->oom = true; return false; }
                ret = (uint32_t)r;
            }
            uint32_t r = el->v;
            for (uint32_t a = 0; a < g->rule_alt_n[r]; a++)
                if (!work_push(e, g->alt_start[g->rule_alt_off[r] + a], ret)) return false;
        } else {
            int64_t n = node_intern(e, pos, par);
            if (n < 0) { e->oom = true; return false; }
            if (!VEC_PUSH(e->out, (uint32_t)n)) { e->oom = true; return false; }
        }
    }
    return true;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort/dedupe e->out and intern it; -1 for an empty set or on failure. */
static int64_t finish_set(engine *e)
{
    vis_clear(e);
    if (e->oom) return -1;
    if (e->out.n == 0) return -1;
    qsort(e->out.a, e->out.n, sizeof *e->out.a, cmp_u32);
    size_t m = 1;
    for (size_t i = 1; i < e->out.n; i++) if (e->out.a[i] != e->out.a[m - 1]) e->out.a[m++] = e->out.a[i];
    int64_t s = set_intern(e, e->out.a, (uint32_t)m);
    if (s < 0) e->oom = true;
    return s;
}

static int64_t advance_set(engine *e, uint32_t set, uint32_t cp)
{
    const ember_grammar *g = e->g;
    e->out.n = 0; e->work.n = 0;
    uint64_t off = e->set_off.a[set];
    uint32_t n = e->set_len.a[set];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = e->set_data.a[off + i];   /* re-read: set_data may move */
        if (id == 0) continue;
        gnode nd = e->nodes.a[id];
        if (g->elems[nd.pos].type != G_CHARS || !cs_match(g, g->elems[nd.pos].v, cp)) continue;
        if (!work_push(e, nd.pos + 1, nd.parent) || !expand(e)) { vis_clear(e); return -1; }
    }
    return finish_set(e);
}

static bool set_can_take(const engine *e, uint32_t set, uint32_t lo, uint32_t hi)
{
    const uint32_t *a = e->set_data.a + e->set_off.a[set];
    for (uint32_t i = 0; i < e->set_len.a[set]; i++) {
        if (a[i] == 0) continue;
        const gelem *el = &e->g->elems[e->nodes.a[a[i]].pos];
        if (el->type == G_CHARS && cs_intersects(e->g, el->v, lo, hi)) return true;
    }
    return false;
}

/* Whether every stack of `set` treats all of [lo, hi] alike (each class
 * contains the range or misses it), so the code point's remaining bytes
 * cannot change the outcome. */
static bool set_uniform(const engine *e, uint32_t set, uint32_t lo, uint32_t hi)
{
    const ember_grammar *g = e->g;
    const uint32_t *a = e->set_data.a + e->set_off.a[set];
    for (uint32_t i = 0; i < e->set_len.a[set]; i++) {
        if (a[i] == 0 || g->elems[e->nodes.a[a[i]].pos].type != G_CHARS) continue;
        const charset *cs = &g->sets[g->elems[e->nodes.a[a[i]].pos].v];
        const crange *r = g->ranges + cs->off;
        for (uint32_t k = 0; k < cs->n; k++) {
            if (r[k].hi < lo || r[k].lo > hi) continue;          /* disjoint */
            if (r[k].lo <= lo && hi <= r[k].hi) break;          /* contains */
            return false;                                       /* partial */
        }
    }
    return true;
}

#define ACC_UNIFORM 0x80000000u   /* dstate.acc: uniform range, low bits = a code point in it */

static int32_t compute_trans(engine *e, int32_t s, uint8_t b)
{
    dstate d = e->ds.a[s];
    uint32_t acc; uint8_t need;
    if (d.need > 0 && (d.acc & ACC_UNIFORM)) {
        /* all code points of the range behave alike: only count bytes */
        if ((b & 0xC0) != 0x80) return DEAD;
        need = (uint8_t)(d.need - 1);
        if (need > 0) return ds_intern(e, d.set, d.acc, need);
        int64_t ns = advance_set(e, d.set, d.acc & ~ACC_UNIFORM);
        return ns < 0 ? DEAD : ds_intern(e, (uint32_t)ns, 0, 0);
    }
    if (d.need == 0) {
        if (b < 0x80) {
            int64_t ns = advance_set(e, d.set, b);
            return ns < 0 ? DEAD : ds_intern(e, (uint32_t)ns, 0, 0);
        }
        if (b >= 0xC2 && b <= 0xDF) { need = 1; acc = b & 0x1F; }
        else if (b >= 0xE0 && b <= 0xEF) { need = 2; acc = b & 0x0F; }
        else if (b >= 0xF0 && b <= 0xF4) { need = 3; acc = b & 0x07; }
        else return DEAD;
    } else {
        if ((b & 0xC0) != 0x80) return DEAD;
        acc = (d.acc << 6) | (b & 0x3F);
        need = (uint8_t)(d.need - 1);
        /* reject overlong 3/4-byte forms and surrogates as soon as visible */
        if (d.need == 2 && ((d.acc == 0 && acc < 0x20) || (d.acc == 0xD && acc >= 0x360))) return DEAD;
        if (d.need == 3 && ((d.acc == 0 && acc < 0x10) || acc > 0x10F)) return DEAD;
        if (need == 0) {
            int64_t ns = advance_set(e, d.set, acc);
            return ns < 0 ? DEAD : ds_intern(e, (uint32_t)ns, 0, 0);
        }
    }
    uint32_t lo = acc << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (d.need == 0) {   /* just read the lead byte: the sequence length bounds the code point */
        static const uint32_t min_cp[4] = { 0, 0x80, 0x800, 0x10000 };
        if (lo < min_cp[need]) lo = min_cp[need];
    }
    if (hi > MAX_CP) hi = MAX_CP;
    if (lo > hi || !set_can_take(e, d.set, lo, hi)) return DEAD;
    /* Collapse the partial code point to its range when the outcome cannot
     * depend on the rest. Leads whose next byte is restricted (E0 ED F0 F4:
     * overlong forms, surrogates, > U+10FFFF) keep the exact bits. */
    if (d.need == 0 && b != 0xE0 && b != 0xED && b != 0xF0 && b != 0xF4 && set_uniform(e, d.set, lo, hi))
        return ds_intern(e, d.set, ACC_UNIFORM | lo, need);
    return ds_intern(e, d.set, acc, need);
}

static inline int32_t trans(engine *e, int32_t s, uint8_t b)
{
    int32_t *row = e->rows.a[s];
    if (row && row[b] != UNKNOWN) return row[b];
    if (!row) {
        if (e->bytes > MAX_CACHE_BYTES) { e->oom = true; return DEAD; }
        row = malloc(256 * sizeof *row);
        if (!row) { e->oom = true; return DEAD; }
        for (int i = 0; i < 256; i++) row[i] = UNKNOWN;
        e->rows.a[s] = row;
        e->bytes += 256 * sizeof *row;
    }
    int32_t t = compute_trans(e, s, b);
    if (e->oom) return DEAD;   /* do not cache failures */
    row = e->rows.a[s];
    row[b] = t;
    /* in a uniform partial code point every continuation byte leads to the
     * same state: fill them all at once */
    const dstate *d = &e->ds.a[s];
    if (d->need > 0 && (d->acc & ACC_UNIFORM) && (b & 0xC0) == 0x80)
        for (int c = 0x80; c < 0xC0; c++) row[c] = t;
    return t;
}

static void engine_free(engine *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->rows.n; i++) free(e->rows.a[i]);
    free(e->rows.a);
    free(e->nodes.a); free(e->node_h.slot);
    free(e->set_data.a); free(e->set_off.a); free(e->set_len.a); free(e->set_h.slot);
    free(e->ds.a); free(e->ds_h.slot);
    free(e->out.a); free(e->work.a); free(e->vis);
    for (int i = 0; i < N_MASK_CACHE; i++) { free(e->mask_bits[i]); free(e->mask_list[i]); }
    free(e->walk); free(e->walk_row);
    free(e->tok_id);
    free(e);
}

ember_status ember_grammar_state_new(const ember_grammar *g, const ember_grammar_vocab *tv, ember_grammar_state **out)
{
    if (!g || !out) return ember_error(EMBER_ERR_INVALID_ARG, "grammar state: NULL argument");
    *out = NULL;
    engine *e = calloc(1, sizeof *e);
    ember_grammar_state *st = calloc(1, sizeof *st);
    if (!e || !st) { free(e); free(st); return ember_error(EMBER_ERR_NOMEM, "grammar state: out of memory"); }
    e->refs = 1; e->g = g; e->tv = tv;
    for (int i = 0; i < N_MASK_CACHE; i++) e->mask_state[i] = -1;
    gnode bottom = { UINT32_MAX, 0 };
    if (!VEC_PUSH(e->nodes, bottom)) goto nomem;
    if (tv) {
        e->walk = malloc(((size_t)tv->max_depth + 2) * sizeof *e->walk);
        e->walk_row = malloc(((size_t)tv->max_depth + 2) * sizeof *e->walk_row);
        if (!e->walk || !e->walk_row) goto nomem;
    }
    if (g->n_toks) {
        e->tok_id = malloc(g->n_toks * sizeof *e->tok_id);
        if (!e->tok_id) goto nomem;
        for (size_t k = 0; k < g->n_toks; k++) {
            const tokref *tr = &g->toks[k];
            e->tok_id[k] = -1;
            if (!tv) continue;   /* byte level only: token elements never match */
            if (tr->text) {
                for (int32_t i = 0; tv->tbytes && i < tv->n_vocab; i++)
                    if (tv->text_len[i] == tr->text_len && memcmp(tv->tbytes + tv->text_off[i], tr->text, tr->text_len) == 0) { e->tok_id[k] = i; break; }
                if (e->tok_id[k] < 0) {
                    engine_free(e); free(st);
                    return ember_error(EMBER_ERR_NOT_FOUND, "grammar state: token %.200s is not one token of the vocabulary", tr->text);
                }
            } else {
                if (tr->id >= tv->n_vocab) {
                    engine_free(e); free(st);
                    return ember_error(EMBER_ERR_NOT_FOUND, "grammar state: token id %d out of the vocabulary (%d)", tr->id, tv->n_vocab);
                }
                e->tok_id[k] = tr->id;
            }
        }
    }
    e->out.n = 0; e->work.n = 0;
    for (uint32_t a = 0; a < g->rule_alt_n[g->root]; a++)
        if (!work_push(e, g->alt_start[g->rule_alt_off[g->root] + a], 0)) goto nomem;
    if (!expand(e)) goto nomem;
    int64_t s = finish_set(e);   /* never empty: an empty root yields node 0 */
    if (s < 0) goto nomem;
    e->start = ds_intern(e, (uint32_t)s, 0, 0);
    if (e->start < 0) goto nomem;
    st->e = e; st->cur = e->start; st->done = false;
    *out = st;
    return EMBER_OK;
nomem:
    engine_free(e); free(st);
    return ember_error(EMBER_ERR_NOMEM, "grammar state: out of memory");
}

ember_status ember_grammar_state_clone(const ember_grammar_state *st, ember_grammar_state **out)
{
    if (!st || !out) return ember_error(EMBER_ERR_INVALID_ARG, "grammar state: NULL argument");
    ember_grammar_state *c = malloc(sizeof *c);
    if (!c) return ember_error(EMBER_ERR_NOMEM, "grammar state: out of memory");
    *c = *st;
    c->e->refs++;
    *out = c;
    return EMBER_OK;
}

void ember_grammar_state_reset(ember_grammar_state *st)
{
    if (!st) return;
    st->cur = st->e->start;
    st->done = false;
}

void ember_grammar_state_free(ember_grammar_state *st)
{
    if (!st) return;
    if (--st->e->refs == 0) engine_free(st->e);
    free(st);
}

bool ember_grammar_can_end(const ember_grammar_state *st)
{
    return st && !st->done && st->e->ds.a[st->cur].accepting;
}

bool ember_grammar_is_done(const ember_grammar_state *st) { return st && st->done; }

ember_status ember_grammar_accept_bytes(ember_grammar_state *st, const char *bytes, size_t len)
{
    if (!st || (!bytes && len)) return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: NULL argument");
    if (st->done && len) return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: generation already ended");
    engine *e = st->e;
    int32_t s = st->cur;
    for (size_t i = 0; i < len; i++) {
        s = trans(e, s, (uint8_t)bytes[i]);
        if (e->oom) { e->oom = false; return ember_error(EMBER_ERR_NOMEM, "grammar: cache limit (%zu MiB) reached", MAX_CACHE_BYTES >> 20); }
        if (s == DEAD) return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: byte %zu (0x%02X) not allowed", i, (unsigned char)bytes[i]);
    }
    st->cur = s;
    return EMBER_OK;
}

static inline bool is_eog(const ember_grammar_vocab *tv, ember_token id)
{
    return (tv->eog_bits[id >> 5] >> (id & 31)) & 1;
}

/* Whether token element k takes token id (a negated one takes any token but
 * its own and the end-of-generation tokens). */
static inline bool tok_elem_takes(const engine *e, uint32_t k, ember_token id)
{
    int32_t x = e->tok_id[k];
    if (x < 0) return false;
    if (e->g->toks[k].negate) return id != x && !is_eog(e->tv, id);
    return id == x;
}

static bool set_takes_token(const engine *e, uint32_t set, ember_token id)
{
    const uint32_t *a = e->set_data.a + e->set_off.a[set];
    for (uint32_t i = 0; i < e->set_len.a[set]; i++) {
        if (!a[i]) continue;
        const gelem *el = &e->g->elems[e->nodes.a[a[i]].pos];
        if (el->type == G_TOKEN && tok_elem_takes(e, el->v, id)) return true;
    }
    return false;
}

/* The set after token id through token elements; -1 if none takes it. */
static int64_t advance_set_token(engine *e, uint32_t set, ember_token id)
{
    e->out.n = 0; e->work.n = 0;
    uint64_t off = e->set_off.a[set];
    uint32_t n = e->set_len.a[set];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nid = e->set_data.a[off + i];
        if (!nid) continue;
        gnode nd = e->nodes.a[nid];
        const gelem *el = &e->g->elems[nd.pos];
        if (el->type != G_TOKEN || !tok_elem_takes(e, el->v, id)) continue;
        if (!work_push(e, nd.pos + 1, nd.parent) || !expand(e)) { vis_clear(e); return -1; }
    }
    return finish_set(e);
}

/* Walk token bytes from state s; DEAD when refused. */
static int32_t walk_piece(engine *e, int32_t s, ember_token id)
{
    const ember_grammar_vocab *tv = e->tv;
    uint32_t L = tv->piece_len[id];
    if (!L) return DEAD;
    const uint8_t *p = (const uint8_t *)tv->bytes + tv->piece_off[id];
    for (uint32_t i = 0; i < L && s >= 0; i++) s = trans(e, s, p[i]);
    return s;
}

bool ember_grammar_token_allowed(ember_grammar_state *st, ember_token id)
{
    if (!st || st->done) return false;
    const ember_grammar_vocab *tv = st->e->tv;
    if (!tv || id < 0 || id >= tv->n_vocab) return false;
    engine *e = st->e;
    const dstate *d = &e->ds.a[st->cur];
    if (is_eog(tv, id)) { if (d->accepting) return true; }
    else {
        int32_t s = walk_piece(e, st->cur, id);
        if (e->oom) { e->oom = false; return false; }
        if (s >= 0) return true;
        d = &e->ds.a[st->cur];
    }
    return d->has_tok && set_takes_token(e, d->set, id);
}

ember_status ember_grammar_accept(ember_grammar_state *st, ember_token id)
{
    if (!st || !st->e->tv) return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: no state or no vocabulary");
    const ember_grammar_vocab *tv = st->e->tv;
    if (id < 0 || id >= tv->n_vocab) return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: token %d out of range [0, %d)", id, tv->n_vocab);
    if (st->done) return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: token %d after the end of generation", id);
    engine *e = st->e;
    bool eog = is_eog(tv, id);
    if (eog && e->ds.a[st->cur].accepting) { st->done = true; return EMBER_OK; }
    int32_t sb = eog ? DEAD : walk_piece(e, st->cur, id);
    int64_t stok = -1;
    dstate d = e->ds.a[st->cur];
    if (!e->oom && d.has_tok && set_takes_token(e, d.set, id)) stok = advance_set_token(e, d.set, id);
    if (e->oom) { e->oom = false; return ember_error(EMBER_ERR_NOMEM, "grammar: cache limit (%zu MiB) reached", MAX_CACHE_BYTES >> 20); }
    if (sb < 0 && stok < 0) {
        if (eog) return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: end-of-generation token %d before the grammar is complete", id);
        return ember_error(EMBER_ERR_INVALID_ARG, "grammar accept: token %d not allowed here", id);
    }
    int32_t next = sb;
    if (stok >= 0) {
        if (sb < 0) next = ds_intern(e, (uint32_t)stok, 0, 0);
        else if (e->ds.a[sb].need == 0) {
            /* both readings live: the union of the two stack sets */
            uint32_t s1 = e->ds.a[sb].set, s2 = (uint32_t)stok;
            e->out.n = 0;
            for (int k = 0; k < 2; k++) {
                uint32_t set = k ? s2 : s1;
                for (uint32_t i = 0; i < e->set_len.a[set]; i++)
                    if (!VEC_PUSH(e->out, e->set_data.a[e->set_off.a[set] + i])) { e->oom = true; break; }
            }
            int64_t u = finish_set(e);
            next = u < 0 ? DEAD : ds_intern(e, (uint32_t)u, 0, 0);
        }   /* else: the byte reading ends inside a code point; it wins */
        if (next < 0) { e->oom = false; return ember_error(EMBER_ERR_NOMEM, "grammar: cache limit (%zu MiB) reached", MAX_CACHE_BYTES >> 20); }
    }
    st->cur = next;
    return EMBER_OK;
}

/* One pre-order pass over the trie: a node whose transition is dead skips
 * its subtree; every token ending at a live node is allowed. */
static int32_t compute_mask(engine *e, int32_t s, uint32_t *bits)
{
    const ember_grammar_vocab *tv = e->tv;
    size_t nw = ((size_t)tv->n_vocab + 31) / 32;
    memset(bits, 0, nw * sizeof *bits);
    int32_t count = 0;
    int32_t *walk = e->walk;
    int32_t **wrow = e->walk_row;   /* transition row of walk[d], NULL until known */
    walk[0] = s;
    wrow[0] = e->rows.a[s];
    const uint8_t *byte = tv->byte; const uint16_t *depth = tv->depth;
    const uint32_t *skip = tv->skip; const int32_t *tok = tv->tok;
    size_t i = 0;
    const size_t n = tv->n_nodes;
    int32_t **rows = e->rows.a;   /* refreshed after trans(), which may grow the array */
    while (i < n) {
        const uint32_t d = depth[i];
        const uint8_t b = byte[i];
        const int32_t *row = wrow[d - 1];
        int32_t t = row ? row[b] : UNKNOWN;
        if (t == UNKNOWN) {
            t = trans(e, walk[d - 1], b);
            rows = e->rows.a;
            wrow[d - 1] = rows[walk[d - 1]];
        }
        if (t < 0) {
            if (e->oom) return -1;
            i = skip[i];
            continue;
        }
        walk[d] = t;
        wrow[d] = rows[t];
        int32_t k = tok[i];
        if (k >= 0) { bits[k >> 5] |= 1u << (k & 31); count++; }
        else if (k <= -2)
            for (k = -2 - k; k >= 0; k = tv->tok_next[k]) { bits[k >> 5] |= 1u << (k & 31); count++; }
        i++;
    }
    if (e->ds.a[s].accepting) {
        for (size_t k = 0; k < tv->n_eog; k++) { ember_token id = tv->eog_list[k]; bits[id >> 5] |= 1u << (id & 31); count++; }
    }
    if (e->ds.a[s].has_tok) {
        dstate d = e->ds.a[s];
        const uint32_t *a = e->set_data.a + e->set_off.a[d.set];
        for (uint32_t i = 0; i < e->set_len.a[d.set]; i++) {
            if (!a[i]) continue;
            const gelem *el = &e->g->elems[e->nodes.a[a[i]].pos];
            if (el->type != G_TOKEN || e->tok_id[el->v] < 0) continue;
            int32_t x = e->tok_id[el->v];
            if (!e->g->toks[el->v].negate) { bits[x >> 5] |= 1u << (x & 31); continue; }
            for (int32_t id = 0; id < tv->n_vocab; id++)
                if (id != x && !is_eog(tv, id)) bits[id >> 5] |= 1u << (id & 31);
        }
        count = 0;
        for (size_t w = 0; w < nw; w++) count += __builtin_popcount(bits[w]);
    }
    return count;
}

static ember_status mask_slot(ember_grammar_state *st, int *slot_out);

ember_status ember_grammar_mask(ember_grammar_state *st, const uint32_t **mask, int32_t *n_allowed)
{
    if (!mask) return ember_error(EMBER_ERR_INVALID_ARG, "grammar mask: mask is NULL");
    int slot;
    ember_status s = mask_slot(st, &slot);
    if (s) return s;
    *mask = st->e->mask_bits[slot];
    if (n_allowed) *n_allowed = st->e->mask_count[slot];
    return EMBER_OK;
}

ember_status ember_grammar_allowed_list(ember_grammar_state *st, int32_t max_list, const ember_token **ids, int32_t *n)
{
    if (!ids || !n) return ember_error(EMBER_ERR_INVALID_ARG, "grammar allowed_list: NULL argument");
    int slot;
    ember_status s = mask_slot(st, &slot);
    if (s) return s;
    *n = st->e->mask_count[slot];
    *ids = (*n <= max_list && *n <= MASK_LIST_MAX) ? st->e->mask_list[slot] : NULL;
    return EMBER_OK;
}

/* Cache slot holding the current state's mask (computed on a miss). */
static ember_status mask_slot(ember_grammar_state *st, int *slot_out)
{
    if (!st || !st->e->tv) return ember_error(EMBER_ERR_INVALID_ARG, "grammar mask: no state or no vocabulary");
    engine *e = st->e;
    const ember_grammar_vocab *tv = e->tv;
    size_t nw = ((size_t)tv->n_vocab + 31) / 32;
    if (!st->done) {
        for (int i = 0; i < N_MASK_CACHE; i++) {
            if (e->mask_state[i] == st->cur) { e->mask_hits++; *slot_out = i; return EMBER_OK; }
        }
        e->mask_misses++;
    }
    int slot = (int)(e->mask_next++ % N_MASK_CACHE);
    e->mask_state[slot] = -1;
    if (!e->mask_bits[slot] && !(e->mask_bits[slot] = malloc(nw * sizeof(uint32_t))))
        return ember_error(EMBER_ERR_NOMEM, "grammar mask: out of memory");
    if (!e->mask_list[slot] && !(e->mask_list[slot] = malloc(MASK_LIST_MAX * sizeof(ember_token))))
        return ember_error(EMBER_ERR_NOMEM, "grammar mask: out of memory");
    int32_t c = 0;
    if (st->done) memset(e->mask_bits[slot], 0, nw * sizeof(uint32_t));   /* nothing after the end */
    else {
        c = compute_mask(e, st->cur, e->mask_bits[slot]);
        if (c < 0) { e->oom = false; return ember_error(EMBER_ERR_NOMEM, "grammar: cache limit (%zu MiB) reached", MAX_CACHE_BYTES >> 20); }
    }
    if (c <= MASK_LIST_MAX) {
        int32_t k = 0;
        const uint32_t *bits = e->mask_bits[slot];
        for (size_t w = 0; w < nw; w++) {
            uint32_t x = bits[w];
            while (x) { e->mask_list[slot][k++] = (ember_token)(w * 32 + (size_t)__builtin_ctz(x)); x &= x - 1; }
        }
    }
    if (!st->done) e->mask_state[slot] = st->cur;
    e->mask_count[slot] = c;
    *slot_out = slot;
    return EMBER_OK;
}

ember_status ember_grammar_apply(ember_grammar_state *st, float *logits, int32_t n_vocab)
{
    if (!st || !logits || !st->e->tv || n_vocab != st->e->tv->n_vocab)
        return ember_error(EMBER_ERR_INVALID_ARG, "grammar apply: n_vocab %d does not match the grammar vocabulary", n_vocab);
    const uint32_t *m;
    ember_status s = ember_grammar_mask(st, &m, NULL);
    if (s) return s;
    int32_t nw = n_vocab / 32;
    for (int32_t w = 0; w < nw; w++) {
        uint32_t bits = m[w];
        if (bits == UINT32_MAX) continue;
        float *l = logits + (size_t)w * 32;
        if (bits == 0) { for (int b = 0; b < 32; b++) l[b] = -INFINITY; continue; }
        for (int b = 0; b < 32; b++) if (!((bits >> b) & 1)) l[b] = -INFINITY;
    }
    for (int32_t i = nw * 32; i < n_vocab; i++) if (!((m[i >> 5] >> (i & 31)) & 1)) logits[i] = -INFINITY;
    return EMBER_OK;
}

ember_status ember_grammar_apply_candidates(ember_grammar_state *st, const ember_token *ids, float *logits, size_t n)
{
    if (!st || (!ids && n) || (!logits && n) || !st->e->tv) return ember_error(EMBER_ERR_INVALID_ARG, "grammar apply: NULL argument");
    const ember_grammar_vocab *tv = st->e->tv;
    if (n <= 4096) {
        for (size_t k = 0; k < n; k++) {
            if (!ember_grammar_token_allowed(st, ids[k])) logits[k] = -INFINITY;
            if (st->e->oom) { st->e->oom = false; return ember_error(EMBER_ERR_NOMEM, "grammar: cache limit reached"); }
        }
        return EMBER_OK;
    }
    const uint32_t *m;
    ember_status s = ember_grammar_mask(st, &m, NULL);
    if (s) return s;
    for (size_t k = 0; k < n; k++) {
        ember_token id = ids[k];
        if (id < 0 || id >= tv->n_vocab || !((m[id >> 5] >> (id & 31)) & 1)) logits[k] = -INFINITY;
    }
    return EMBER_OK;
}

void ember_grammar_get_stats(const ember_grammar_state *st, ember_grammar_stats *o)
{
    memset(o, 0, sizeof *o);
    if (!st) return;
    const engine *e = st->e;
    o->n_stack_nodes = e->nodes.n; o->n_sets = e->set_len.n; o->n_states = e->ds.n;
    for (size_t i = 0; i < e->rows.n; i++) o->n_rows += e->rows.a[i] != NULL;
    o->bytes = e->bytes; o->mask_hits = e->mask_hits; o->mask_misses = e->mask_misses;
    o->n_trie_nodes = e->tv ? e->tv->n_nodes : 0;
}
