/*
 * jinja_parse.c — lexer and parser for Jinja2 templates, producing the AST of
 * jinja_internal.h.
 *
 * Lexing follows jinja2 3.x (jinja2/lexer.py) with the settings transformers
 * uses for chat templates: trim_blocks (the first newline after a block or
 * comment tag is dropped), lstrip_blocks (spaces/tabs before a block or
 * comment tag on its own line are dropped), '-'/'+' whitespace control,
 * newlines normalised to \n, one trailing newline of the source dropped
 * (keep_trailing_newline=False), raw blocks. Operator precedence follows
 * jinja2/parser.py.
 * Owns: syntax errors, reported with line and column.
 * Must not: evaluate anything or allocate outside the template's arena.
 */
#include "chat/jinja/jinja_internal.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define MAX_NEST 200

typedef enum { T_EOF, T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP } ttype;

typedef struct {
    ttype t;
    int line, col;
    const char *p;   /* NAME/OP: the characters */
    size_t n;
    jv val;          /* TEXT/STRING/INT/FLOAT */
} token;

typedef struct {
    jx_ctx *c;
    const char *src;
    size_t len;
    /* position cursor for line/column */
    size_t cur_off;
    int cur_line, cur_col;
    token *tok;
    size_t ntok, captok;
    size_t i;        /* parser position */
    int depth;
} P;

static void linecol(P *p, size_t off, int *line, int *col)
{
    if (off < p->cur_off) { p->cur_off = 0; p->cur_line = 1; p->cur_col = 1; }
    while (p->cur_off < off && p->cur_off < p->len) {
        if (p->src[p->cur_off] == '\n') { p->cur_line++; p->cur_col = 1; }
        else p->cur_col++;
        p->cur_off++;
    }
    *line = p->cur_line;
    *col = p->cur_col;
}

static _Noreturn void lex_fail(P *p, size_t off, const char *msg)
{
    int l, c;
    linecol(p, off, &l, &c);
    jx_fail(p->c, EMBER_ERR_FORMAT, l, c, "%s", msg);
}

static token *emit(P *p, ttype t, size_t off)
{
    if (p->ntok == p->captok) {
        size_t nc = p->captok ? p->captok * 2 : 256;
        token *nt = jx_alloc(p->c, nc * sizeof *nt);
        if (p->ntok) memcpy(nt, p->tok, p->ntok * sizeof *nt);
        p->tok = nt;
        p->captok = nc;
    }
    token *k = &p->tok[p->ntok++];
    memset(k, 0, sizeof *k);
    k->t = t;
    linecol(p, off, &k->line, &k->col);
    return k;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static bool is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* Emit the text src[a, b) after applying the whitespace control of the tag
 * that follows it ('-': strip all; lstrip: strip a whitespace-only last line). */
static void emit_text(P *p, size_t a, size_t b, char ctrl, bool lstrip_ok, bool line_starting)
{
    if (ctrl == '-') {
        while (b > a && is_ws(p->src[b - 1])) b--;
    } else if (ctrl != '+' && lstrip_ok) {
        size_t l = b;
        while (l > a && p->src[l - 1] != '\n') l--;
        if (l > a || line_starting) {
            bool all = l < b;
            for (size_t k = l; k < b; k++) if (!is_ws(p->src[k])) { all = false; break; }
            if (all) b = l;
        }
    }
    if (b > a) {
        token *t = emit(p, T_TEXT, a);
        t->val = jv_str(p->c, p->src + a, b - a);
    }
}

/* Python's unicode-escape decoding of a string literal body. */
static jv unescape(P *p, const char *s, size_t n, size_t off)
{
    jx_buf b = {0};
    jx_buf_put(p->c, &b, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { jx_buf_putc(p->c, &b, s[i]); continue; }
        char e = s[++i];
        uint32_t cp = 0;
        int hex = 0;
        switch (e) {
        case '\n': break;
        case '\\': jx_buf_putc(p->c, &b, '\\'); break;
        case '\'': jx_buf_putc(p->c, &b, '\''); break;
        case '"': jx_buf_putc(p->c, &b, '"'); break;
        case 'a': jx_buf_putc(p->c, &b, '\a'); break;
        case 'b': jx_buf_putc(p->c, &b, '\b'); break;
        case 'f': jx_buf_putc(p->c, &b, '\f'); break;
        case 'n': jx_buf_putc(p->c, &b, '\n'); break;
        case 'r': jx_buf_putc(p->c, &b, '\r'); break;
        case 't': jx_buf_putc(p->c, &b, '\t'); break;
        case 'v': jx_buf_putc(p->c, &b, '\v'); break;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') { cp = cp * 8 + (uint32_t)(s[i] - '0'); i++; k++; }
                i--;
                hex = -1;
            } else {
                jx_buf_putc(p->c, &b, '\\');
                jx_buf_putc(p->c, &b, e);
            }
        }
        if (hex > 0) {
            for (int k = 0; k < hex; k++) {
                char h = (i + 1 < n) ? s[i + 1] : 0;
                int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                if (d < 0) lex_fail(p, off, "truncated \\x/\\u escape in string literal");
                cp = cp * 16 + (uint32_t)d;
                i++;
            }
        }
        if (hex != 0) {
            char u[4];
            int k;
            if (cp > 0x10FFFF) lex_fail(p, off, "illegal Unicode character in string literal");
            if (cp < 0x80) { u[0] = (char)cp; k = 1; }
            else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); k = 2; }
            else if (cp < 0x10000) { u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); k = 3; }
            else { u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); k = 4; }
            jx_buf_put(p->c, &b, u, (size_t)k);
        }
    }
    return jv_str(p->c, b.p, b.n);
}

static const char *OPS3[] = {NULL};
static const char *OPS2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char OPS1[] = "+-*/%~<>=()[]{}.,:|;";

/* Lex the inside of a {{ }} or {% %} tag starting at *pos; stops after the
 * end tag. Returns the position after the end tag (with trimming applied). */
static size_t lex_tag(P *p, size_t pos, bool block, size_t tag_off)
{
    int bal = 0;
    const char *s = p->src;
    size_t n = p->len;
    (void)OPS3;
    for (;;) {
        while (pos < n && is_ws(s[pos])) pos++;
        if (pos >= n) lex_fail(p, tag_off, block ? "unexpected end of template: missing '%}'" : "unexpected end of template: missing '}}'");
        if (bal == 0) {
            if (block) {
                if (s[pos] == '-' && pos + 2 < n + 0 && s[pos + 1] == '%' && s[pos + 2] == '}') {
                    emit(p, T_BEND, pos);
                    pos += 3;
                    while (pos < n && is_ws(s[pos])) pos++;
                    return pos;
                }
                if (s[pos] == '+' && pos + 2 < n && s[pos + 1] == '%' && s[pos + 2] == '}') {
                    emit(p, T_BEND, pos);
                    return pos + 3;
                }
                if (s[pos] == '%' && pos + 1 < n && s[pos + 1] == '}') {
                    emit(p, T_BEND, pos);
                    pos += 2;
                    if (pos < n && s[pos] == '\n') pos++;   /* trim_blocks */
                    return pos;
                }
            } else {
                if (s[pos] == '-' && pos + 2 < n && s[pos + 1] == '}' && s[pos + 2] == '}') {
                    emit(p, T_VEND, pos);
                    pos += 3;
                    while (pos < n && is_ws(s[pos])) pos++;
                    return pos;
                }
                if (s[pos] == '}' && pos + 1 < n && s[pos + 1] == '}') {
                    emit(p, T_VEND, pos);
                    return pos + 2;
                }
            }
        }
        char ch = s[pos];
        if (is_alpha(ch)) {
            size_t st = pos;
            while (pos < n && (is_alpha(s[pos]) || is_digit(s[pos]))) pos++;
            token *t = emit(p, T_NAME, st);
            t->p = s + st;
            t->n = pos - st;
            continue;
        }
        if (is_digit(ch)) {
            size_t st = pos;
            bool flt = false;
            while (pos < n && (is_digit(s[pos]) || (s[pos] == '_' && pos + 1 < n && is_digit(s[pos + 1])))) pos++;
            if (pos + 1 < n && s[pos] == '.' && is_digit(s[pos + 1])) {
                flt = true;
                pos++;
                while (pos < n && (is_digit(s[pos]) || (s[pos] == '_' && pos + 1 < n && is_digit(s[pos + 1])))) pos++;
            }
            if (pos < n && (s[pos] == 'e' || s[pos] == 'E')) {
                size_t q = pos + 1;
                if (q < n && (s[q] == '+' || s[q] == '-')) q++;
                if (q < n && is_digit(s[q])) {
                    flt = true;
                    pos = q;
                    while (pos < n && is_digit(s[pos])) pos++;
                }
            }
            char tmp[64];
            size_t k = 0;
            for (size_t q = st; q < pos && k < sizeof tmp - 1; q++) if (s[q] != '_') tmp[k++] = s[q];
            tmp[k] = 0;
            token *t = emit(p, flt ? T_FLOAT : T_INT, st);
            if (flt) t->val = jv_float(strtod(tmp, NULL));
            else {
                char *end;
                long long v = strtoll(tmp, &end, 10);
                t->val = jv_int(v);
            }
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t st = pos++;
            while (pos < n && s[pos] != ch) {
                if (s[pos] == '\\' && pos + 1 < n) pos++;
                pos++;
            }
            if (pos >= n) lex_fail(p, st, "unterminated string literal");
            token *t = emit(p, T_STRING, st);
            t->val = unescape(p, s + st + 1, pos - st - 1, st);
            pos++;
            continue;
        }
        size_t oplen = 0;
        for (int k = 0; OPS2[k]; k++)
            if (pos + 1 < n && s[pos] == OPS2[k][0] && s[pos + 1] == OPS2[k][1]) { oplen = 2; break; }
        if (!oplen && strchr(OPS1, ch) && ch) oplen = 1;
        if (!oplen) lex_fail(p, pos, "unexpected character in tag");
        token *t = emit(p, T_OP, pos);
        t->p = s + pos;
        t->n = oplen;
        if (oplen == 1) {
            if (ch == '(' || ch == '[' || ch == '{') bal++;
            else if (ch == ')' || ch == ']' || ch == '}') {
                if (bal == 0) lex_fail(p, pos, "unexpected closing bracket");
                bal--;
            }
        }
        pos += oplen;
    }
}

/* Does a "{% [-+] raw [-]%}" tag start at pos? Sets *end past it and *strip. */
static bool match_word_tag(P *p, size_t pos, const char *word, size_t *end, char *ctrl_open, char *ctrl_close)
{
    const char *s = p->src;
    size_t n = p->len, q = pos + 2;
    if (q > n || s[pos] != '{' || s[pos + 1] != '%') return false;
    *ctrl_open = 0;
    if (q < n && (s[q] == '-' || s[q] == '+')) *ctrl_open = s[q++];
    while (q < n && is_ws(s[q])) q++;
    size_t wl = strlen(word);
    if (q + wl > n || memcmp(s + q, word, wl) != 0) return false;
    q += wl;
    while (q < n && is_ws(s[q])) q++;
    *ctrl_close = 0;
    /* jinja2's raw_begin accepts "%}" and "-%}" only; endraw also "+%}" */
    if (q < n && (s[q] == '-' || (s[q] == '+' && strcmp(word, "endraw") == 0))) *ctrl_close = s[q++];
    if (q + 1 >= n + 0 || s[q] != '%' || s[q + 1] != '}') return false;
    *end = q + 2;
    return true;
}

static void lex(P *p)
{
    const char *s = p->src;
    size_t n = p->len, pos = 0;
    bool line_starting = true;
    while (pos < n) {
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) {
            emit_text(p, pos, n, 0, false, line_starting);
            break;
        }
        char kind = s[q + 1];
        char ctrl = (q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+')) ? s[q + 2] : 0;
        emit_text(p, pos, q, ctrl, kind != '{', line_starting);
        size_t end;
        char co, cc;
        if (kind == '#') {
            size_t r = q + 2;
            while (r + 1 < n && !(s[r] == '#' && s[r + 1] == '}')) r++;
            if (r + 1 >= n) lex_fail(p, q, "missing end of comment tag");
            end = r + 2;
            if (r > q + 2 && s[r - 1] == '-') { while (end < n && is_ws(s[end])) end++; }
            else if (!(r > q + 2 && s[r - 1] == '+') && end < n && s[end] == '\n') end++;
            line_starting = s[end - 1] == '\n';
            pos = end;
            continue;
        }
        if (kind == '%' && match_word_tag(p, q, "raw", &end, &co, &cc)) {
            size_t body = end;
            if (cc == '-') while (body < n && is_ws(s[body])) body++;
            size_t r = body;
            size_t rend = 0;
            while (r + 1 < n) {
                if (s[r] == '{' && s[r + 1] == '%' && match_word_tag(p, r, "endraw", &rend, &co, &cc)) break;
                r++;
            }
            if (r + 1 >= n) lex_fail(p, q, "missing endraw tag for raw block");
            emit_text(p, body, r, co, true, false);
            if (cc == '-') while (rend < n && is_ws(s[rend])) rend++;
            else if (cc != '+' && rend < n && s[rend] == '\n') rend++;
            line_starting = s[rend - 1] == '\n';
            pos = rend;
            continue;
        }
        emit(p, kind == '%' ? T_BBEGIN : T_VBEGIN, q);
        end = lex_tag(p, q + 2 + (ctrl ? 1 : 0), kind == '%', q);
        line_starting = s[end - 1] == '\n';
        pos = end;
    }
    emit(p, T_EOF, n);
}

/* ---- parser ------------------------------------------------------------- */

static token *cur(P *p) { return &p->tok[p->i]; }
static token *peek(P *p, size_t k) { return p->i + k < p->ntok ? &p->tok[p->i + k] : &p->tok[p->ntok - 1]; }

static _Noreturn void perr(P *p, token *t, const char *fmt, const char *arg)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    jx_fail(p->c, EMBER_ERR_FORMAT, t->line, t->col, "%s", msg);
}

static bool is_op(token *t, const char *op) { return t->t == T_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0; }
static bool is_name(token *t, const char *nm) { return t->t == T_NAME && t->n == strlen(nm) && memcmp(t->p, nm, t->n) == 0; }

static const char *tok_desc(P *p, token *t)
{
    switch (t->t) {
    case T_EOF: return "end of template";
    case T_TEXT: return "template data";
    case T_VBEGIN: return "'{{'";
    case T_VEND: return "'}}'";
    case T_BBEGIN: return "'{%'";
    case T_BEND: return "'%}'";
    case T_STRING: return "string";
    case T_INT: case T_FLOAT: return "number";
    default: {
        char *q = jx_alloc(p->c, t->n + 3);
        q[0] = '\'';
        memcpy(q + 1, t->p, t->n);
        q[t->n + 1] = '\'';
        return q;
    }
    }
}

static void expect_op(P *p, const char *op)
{
    token *t = cur(p);
    if (!is_op(t, op)) {
        char msg[64];
        snprintf(msg, sizeof msg, "expected '%s', got %%s", op);
        perr(p, t, msg, tok_desc(p, t));
    }
    p->i++;
}

static const jx_str *expect_name(P *p)
{
    token *t = cur(p);
    if (t->t != T_NAME) perr(p, t, "expected a name, got %s", tok_desc(p, t));
    p->i++;
    return jv_str(p->c, t->p, t->n).u.s;
}

static void expect_bend(P *p)
{
    token *t = cur(p);
    if (t->t != T_BEND) perr(p, t, "expected end of statement block '%%}', got %s", tok_desc(p, t));
    p->i++;
}

static jx_node *mk(P *p, jx_node_kind k, token *t)
{
    jx_node *n = jx_alloc(p->c, sizeof *n);
    n->kind = k;
    n->line = t->line;
    n->col = t->col;
    return n;
}

typedef struct { jx_node **v; int n, cap; } nvec;
static void nvec_push(P *p, nvec *v, jx_node *x)
{
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        jx_node **nv = jx_alloc(p->c, (size_t)nc * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}

static void enter(P *p)
{
    if (++p->depth > MAX_NEST) perr(p, cur(p), "template nested more than 200 levels deep%s", NULL);
}
static void leave(P *p) { p->depth--; }

static jx_node *parse_expression(P *p, bool with_condexpr);
static jx_node *parse_tuple(P *p, bool with_condexpr, const char *extra_end, bool explicit_parens);
static jx_node *parse_unary(P *p, bool with_filter);
static jx_node *parse_primary(P *p);
static jx_node *parse_postfix(P *p, jx_node *node);

/* call arguments after '(' — positional and name=value */
static void parse_call_args(P *p, jx_node *call)
{
    nvec args = {0}, kwv = {0};
    const jx_str **kwn = NULL;
    int nkw = 0, capkw = 0;
    expect_op(p, "(");
    while (!is_op(cur(p), ")")) {
        if (args.n || nkw) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) perr(p, cur(p), "*args and **kwargs in calls are not supported%s", NULL);
        if (cur(p)->t == T_NAME && is_op(peek(p, 1), "=")) {
            const jx_str *nm = expect_name(p);
            p->i++;
            if (nkw == capkw) {
                int nc = capkw ? capkw * 2 : 4;
                const jx_str **nk = jx_alloc(p->c, (size_t)nc * sizeof *nk);
                if (nkw) memcpy(nk, kwn, (size_t)nkw * sizeof *nk);
                kwn = nk;
                capkw = nc;
            }
            kwn[nkw++] = nm;
            nvec_push(p, &kwv, parse_expression(p, true));
        } else {
            if (nkw) perr(p, cur(p), "positional argument follows keyword argument%s", NULL);
            nvec_push(p, &args, parse_expression(p, true));
        }
    }
    p->i++;
    call->args = args.v;
    call->nargs = args.n;
    call->kwn = kwn;
    call->kwv = kwv.v;
    call->nkw = nkw;
}

static const jx_str *parse_dotted(P *p)
{
    token *t = cur(p);
    const jx_str *nm = expect_name(p);
    while (is_op(cur(p), ".") && peek(p, 1)->t == T_NAME) {
        p->i++;
        const jx_str *nx = expect_name(p);
        jx_buf b = {0};
        jx_buf_put(p->c, &b, nm->s, nm->len);
        jx_buf_putc(p->c, &b, '.');
        jx_buf_put(p->c, &b, nx->s, nx->len);
        nm = jv_str(p->c, b.p, b.n).u.s;
    }
    (void)t;
    return nm;
}

static jx_node *parse_filter(P *p, jx_node *node)
{
    token *t = cur(p);
    p->i++;   /* '|' */
    jx_node *f = mk(p, N_FILTER, cur(p));
    (void)t;
    f->s = parse_dotted(p);
    f->a = node;
    if (is_op(cur(p), "(")) parse_call_args(p, f);
    return f;
}

static jx_node *parse_filter_expr(P *p, jx_node *node)
{
    for (;;) {
        token *t = cur(p);
        if (is_op(t, "|")) node = parse_filter(p, node);
        else if (is_name(t, "is")) {
            p->i++;
            jx_node *tn = mk(p, N_TEST, t);
            if (is_name(cur(p), "not")) { p->i++; tn->op = 1; }
            tn->s = parse_dotted(p);
            tn->a = node;
            token *c = cur(p);
            if (is_op(c, "(")) parse_call_args(p, tn);
            else if ((c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT || is_op(c, "[") ||
                      is_op(c, "{") || is_op(c, "(")) &&
                     !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is")) perr(p, c, "you cannot chain multiple tests with is%s", NULL);
                jx_node *arg = parse_postfix(p, parse_primary(p));
                tn->args = jx_alloc(p->c, sizeof *tn->args);
                tn->args[0] = arg;
                tn->nargs = 1;
            }
            node = tn;
        } else if (is_op(t, "(")) {
            jx_node *call = mk(p, N_CALL, t);
            call->a = node;
            parse_call_args(p, call);
            node = call;
        } else break;
    }
    return node;
}

static jx_node *parse_subscript_arg(P *p)
{
    token *t = cur(p);
    jx_node *parts[3] = {NULL, NULL, NULL};
    if (!is_op(t, ":")) {
        jx_node *e = parse_expression(p, true);
        if (!is_op(cur(p), ":")) return e;
        parts[0] = e;
    }
    p->i++;  /* ':' */
    if (!is_op(cur(p), "]") && !is_op(cur(p), ",") && !is_op(cur(p), ":")) parts[1] = parse_expression(p, true);
    if (is_op(cur(p), ":")) {
        p->i++;
        if (!is_op(cur(p), "]") && !is_op(cur(p), ",")) parts[2] = parse_expression(p, true);
    }
    jx_node *s = mk(p, N_SLICE, t);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static jx_node *parse_postfix(P *p, jx_node *node)
{
    for (;;) {
        token *t = cur(p);
        if (is_op(t, ".")) {
            p->i++;
            token *a = cur(p);
            if (a->t == T_NAME) {
                jx_node *g = mk(p, N_GETATTR, t);
                g->a = node;
                g->s = expect_name(p);
                node = g;
            } else if (a->t == T_INT) {
                jx_node *g = mk(p, N_GETITEM, t);
                g->a = node;
                g->b = mk(p, N_CONST, a);
                g->b->cval = a->val;
                p->i++;
                node = g;
            } else perr(p, a, "expected a name after '.', got %s", tok_desc(p, a));
        } else if (is_op(t, "[")) {
            p->i++;
            enter(p);
            jx_node *arg = parse_subscript_arg(p);
            if (is_op(cur(p), ",")) {
                jx_node *tu = mk(p, N_TUPLE, t);
                nvec v = {0};
                nvec_push(p, &v, arg);
                while (is_op(cur(p), ",")) {
                    p->i++;
                    if (is_op(cur(p), "]")) break;
                    nvec_push(p, &v, parse_subscript_arg(p));
                }
                tu->args = v.v;
                tu->nargs = v.n;
                arg = tu;
            }
            expect_op(p, "]");
            leave(p);
            if (arg->kind == N_SLICE) {
                arg->a = node;
                node = arg;
            } else {
                jx_node *g = mk(p, N_GETITEM, t);
                g->a = node;
                g->b = arg;
                node = g;
            }
        } else if (is_op(t, "(")) {
            jx_node *call = mk(p, N_CALL, t);
            call->a = node;
            enter(p);
            parse_call_args(p, call);
            leave(p);
            node = call;
        } else break;
    }
    return node;
}

static jx_node *parse_primary(P *p)
{
    token *t = cur(p);
    jx_node *n;
    enter(p);
    if (t->t == T_NAME) {
        p->i++;
        n = mk(p, N_CONST, t);
        if (is_name(t, "true") || is_name(t, "True")) n->cval = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) n->cval = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) n->cval = jv_none();
        else {
            n->kind = N_NAME;
            n->s = jv_str(p->c, t->p, t->n).u.s;
        }
    } else if (t->t == T_STRING) {
        n = mk(p, N_CONST, t);
        jx_buf b = {0};
        jx_buf_put(p->c, &b, "", 0);
        while (cur(p)->t == T_STRING) {
            jx_buf_put(p->c, &b, cur(p)->val.u.s->s, cur(p)->val.u.s->len);
            p->i++;
        }
        n->cval = jv_str(p->c, b.p, b.n);
    } else if (t->t == T_INT || t->t == T_FLOAT) {
        p->i++;
        n = mk(p, N_CONST, t);
        n->cval = t->val;
    } else if (is_op(t, "(")) {
        p->i++;
        n = parse_tuple(p, true, NULL, true);
        expect_op(p, ")");
    } else if (is_op(t, "[")) {
        p->i++;
        n = mk(p, N_LIST, t);
        nvec v = {0};
        while (!is_op(cur(p), "]")) {
            if (v.n) expect_op(p, ",");
            if (is_op(cur(p), "]")) break;
            nvec_push(p, &v, parse_expression(p, true));
        }
        p->i++;
        n->args = v.v;
        n->nargs = v.n;
    } else if (is_op(t, "{")) {
        p->i++;
        n = mk(p, N_DICT, t);
        nvec k = {0}, v = {0};
        while (!is_op(cur(p), "}")) {
            if (k.n) expect_op(p, ",");
            if (is_op(cur(p), "}")) break;
            nvec_push(p, &k, parse_expression(p, true));
            expect_op(p, ":");
            nvec_push(p, &v, parse_expression(p, true));
        }
        p->i++;
        n->args = k.v;
        n->kwv = v.v;
        n->nargs = k.n;
    } else {
        perr(p, t, "unexpected %s", tok_desc(p, t));
    }
    leave(p);
    return n;
}

static jx_node *parse_unary(P *p, bool with_filter)
{
    token *t = cur(p);
    jx_node *n;
    enter(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        p->i++;
        n = mk(p, is_op(t, "-") ? N_NEG : N_POS, t);
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

static jx_node *bin(P *p, token *t, int op, jx_node *a, jx_node *b)
{
    jx_node *n = mk(p, N_BIN, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jx_node *parse_pow(P *p)
{
    jx_node *l = parse_unary(p, true);
    while (is_op(cur(p), "**")) {
        token *t = cur(p);
        p->i++;
        l = bin(p, t, OP_POW, l, parse_unary(p, true));
    }
    return l;
}

static jx_node *parse_math2(P *p)
{
    jx_node *l = parse_pow(p);
    for (;;) {
        token *t = cur(p);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!op) break;
        p->i++;
        l = bin(p, t, op, l, parse_pow(p));
    }
    return l;
}

static jx_node *parse_concat(P *p)
{
    jx_node *l = parse_math2(p);
    while (is_op(cur(p), "~")) {
        token *t = cur(p);
        p->i++;
        l = bin(p, t, OP_CONCAT, l, parse_math2(p));
    }
    return l;
}

static jx_node *parse_math1(P *p)
{
    jx_node *l = parse_concat(p);
    for (;;) {
        token *t = cur(p);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) break;
        p->i++;
        l = bin(p, t, op, l, parse_concat(p));
    }
    return l;
}

static jx_node *parse_compare(P *p)
{
    jx_node *l = parse_math1(p), *result = NULL;
    for (;;) {
        token *t = cur(p);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
               : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : 0;
        if (!op && is_name(t, "not") && is_name(peek(p, 1), "in")) { op = OP_NOTIN; p->i++; }
        if (!op) break;
        p->i++;
        jx_node *r = parse_math1(p);
        jx_node *cmp = bin(p, t, op, l, r);
        if (result) {
            jx_node *a = mk(p, N_AND, t);
            a->a = result;
            a->b = cmp;
            result = a;
        } else result = cmp;
        l = r;
    }
    return result ? result : l;
}

static jx_node *parse_not(P *p)
{
    token *t = cur(p);
    if (is_name(t, "not")) {
        p->i++;
        enter(p);
        jx_node *n = mk(p, N_NOT, t);
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static jx_node *parse_and(P *p)
{
    jx_node *l = parse_not(p);
    while (is_name(cur(p), "and")) {
        token *t = cur(p);
        p->i++;
        jx_node *n = mk(p, N_AND, t);
        n->a = l;
        n->b = parse_not(p);
        l = n;
    }
    return l;
}

static jx_node *parse_or(P *p)
{
    jx_node *l = parse_and(p);
    while (is_name(cur(p), "or")) {
        token *t = cur(p);
        p->i++;
        jx_node *n = mk(p, N_OR, t);
        n->a = l;
        n->b = parse_and(p);
        l = n;
    }
    return l;
}

static jx_node *parse_expression(P *p, bool with_condexpr)
{
    enter(p);
    jx_node *e = parse_or(p);
    if (with_condexpr) {
        while (is_name(cur(p), "if")) {
            token *t = cur(p);
            p->i++;
            jx_node *c = mk(p, N_COND, t);
            c->a = parse_or(p);
            c->b = e;
            if (is_name(cur(p), "else")) {
                p->i++;
                c->c = parse_expression(p, true);
            }
            e = c;
        }
    }
    leave(p);
    return e;
}

static bool tuple_end(P *p, const char *extra_end)
{
    token *t = cur(p);
    if (t->t == T_VEND || t->t == T_BEND || t->t == T_EOF || is_op(t, ")")) return true;
    return extra_end && is_name(t, extra_end);
}

static jx_node *parse_tuple(P *p, bool with_condexpr, const char *extra_end, bool explicit_parens)
{
    token *t = cur(p);
    nvec v = {0};
    bool is_tuple = false;
    for (;;) {
        if (v.n) expect_op(p, ",");
        if (tuple_end(p, extra_end)) break;
        nvec_push(p, &v, parse_expression(p, with_condexpr));
        if (is_op(cur(p), ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (v.n) return v.v[0];
        if (!explicit_parens) perr(p, cur(p), "expected an expression, got %s", tok_desc(p, cur(p)));
    }
    jx_node *n = mk(p, N_TUPLE, t);
    n->args = v.v;
    n->nargs = v.n;
    return n;
}

/* assignment target: name, (name, name...), or namespace attribute */
static jx_node *parse_assign_target(P *p, bool with_namespace, const char *extra_end)
{
    token *t = cur(p);
    if (with_namespace && t->t == T_NAME && is_op(peek(p, 1), ".") && peek(p, 2)->t == T_NAME) {
        jx_node *n = mk(p, N_GETATTR, t);
        jx_node *base = mk(p, N_NAME, t);
        base->s = expect_name(p);
        p->i++;
        n->a = base;
        n->s = expect_name(p);
        return n;
    }
    nvec v = {0};
    bool paren = false;
    if (is_op(t, "(")) { paren = true; p->i++; }
    for (;;) {
        token *nt = cur(p);
        jx_node *nm = mk(p, N_NAME, nt);
        nm->s = expect_name(p);
        nvec_push(p, &v, nm);
        if (!is_op(cur(p), ",")) break;
        p->i++;
        if (paren && is_op(cur(p), ")")) break;
        if (!paren && (tuple_end(p, extra_end) || is_op(cur(p), "="))) break;
    }
    if (paren) expect_op(p, ")");
    if (v.n == 1 && !paren) return v.v[0];
    jx_node *n = mk(p, N_TUPLE, t);
    n->args = v.v;
    n->nargs = v.n;
    return n;
}

static jx_node *parse_stmt(P *p);

/* Parse statements until a block tag whose name is one of `ends` (NULL-
 * terminated); leaves the parser at that name (after '{%'). */
static void parse_body(P *p, const char *const *ends, token *opener, jx_node ***out, int *nout)
{
    nvec v = {0};
    enter(p);
    for (;;) {
        token *t = cur(p);
        if (t->t == T_EOF) {
            if (!ends) break;
            char msg[200], want[120] = "";
            for (int k = 0; ends[k]; k++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", k ? " or " : "", ends[k]);
            snprintf(msg, sizeof msg, "unexpected end of template; the '%.*s' block opened at line %d, column %d needs %s",
                     (int)(opener->n < 20 ? opener->n : 20), opener->p ? opener->p : "", opener->line, opener->col, want);
            jx_fail(p->c, EMBER_ERR_FORMAT, t->line, t->col, "%s", msg);
        }
        if (t->t == T_BBEGIN && ends) {
            token *nm = peek(p, 1);
            bool hit = false;
            for (int k = 0; ends[k]; k++) if (is_name(nm, ends[k])) hit = true;
            if (hit) { p->i++; break; }
        }
        nvec_push(p, &v, parse_stmt(p));
    }
    leave(p);
    *out = v.v;
    *nout = v.n;
}

static jx_node *parse_if(P *p, token *t)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jx_node *n = mk(p, S_IF, t);
    n->a = parse_tuple(p, false, NULL, false);
    expect_bend(p);
    parse_body(p, ends, t, &n->body, &n->nbody);
    token *e = cur(p);
    p->i++;
    if (is_name(e, "elif")) {
        jx_node *sub = parse_if(p, e);
        n->els = jx_alloc(p->c, sizeof *n->els);
        n->els[0] = sub;
        n->nels = 1;
        return n;
    }
    if (is_name(e, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        expect_bend(p);
        parse_body(p, ends2, t, &n->els, &n->nels);
        p->i++;
    }
    expect_bend(p);
    return n;
}

static jx_node *parse_stmt(P *p)
{
    token *t = cur(p);
    if (t->t == T_TEXT) {
        p->i++;
        jx_node *n = mk(p, S_TEXT, t);
        n->s = t->val.u.s;
        return n;
    }
    if (t->t == T_VBEGIN) {
        p->i++;
        jx_node *n = mk(p, S_OUTPUT, t);
        n->a = parse_tuple(p, true, NULL, false);
        if (cur(p)->t != T_VEND) perr(p, cur(p), "expected end of print statement '}}', got %s", tok_desc(p, cur(p)));
        p->i++;
        return n;
    }
    if (t->t != T_BBEGIN) perr(p, t, "unexpected %s", tok_desc(p, t));
    p->i++;
    token *kw = cur(p);
    if (kw->t != T_NAME) perr(p, kw, "expected a statement name after '{%%', got %s", tok_desc(p, kw));
    p->i++;
    if (is_name(kw, "if")) return parse_if(p, kw);
    if (is_name(kw, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL};
        static const char *const ends2[] = {"endfor", NULL};
        jx_node *n = mk(p, S_FOR, kw);
        jx_node *tg = parse_assign_target(p, false, "in");
        if (tg->kind == N_TUPLE) { n->args = tg->args; n->nargs = tg->nargs; }
        else { n->args = jx_alloc(p->c, sizeof *n->args); n->args[0] = tg; n->nargs = 1; }
        if (!is_name(cur(p), "in")) perr(p, cur(p), "expected 'in' in for loop, got %s", tok_desc(p, cur(p)));
        p->i++;
        n->a = parse_tuple(p, false, "recursive", false);
        if (is_name(cur(p), "if")) { p->i++; n->b = parse_expression(p, true); }
        if (is_name(cur(p), "recursive")) perr(p, cur(p), "recursive for loops are not supported%s", NULL);
        expect_bend(p);
        parse_body(p, ends, kw, &n->body, &n->nbody);
        token *e = cur(p);
        p->i++;
        if (is_name(e, "else")) {
            expect_bend(p);
            parse_body(p, ends2, kw, &n->els, &n->nels);
            p->i++;
        }
        expect_bend(p);
        return n;
    }
    if (is_name(kw, "set")) {
        jx_node *tg = parse_assign_target(p, true, NULL);
        if (is_op(cur(p), "=")) {
            p->i++;
            jx_node *n = mk(p, S_SET, kw);
            n->a = tg;
            n->b = parse_tuple(p, true, NULL, false);
            expect_bend(p);
            return n;
        }
        static const char *const ends[] = {"endset", NULL};
        jx_node *n = mk(p, S_SETBLOCK, kw);
        n->a = tg;
        if (is_op(cur(p), "|")) {
            jx_node *f = NULL;
            while (is_op(cur(p), "|")) f = parse_filter(p, f);
            n->b = f;
        }
        expect_bend(p);
        parse_body(p, ends, kw, &n->body, &n->nbody);
        p->i++;
        expect_bend(p);
        return n;
    }
    if (is_name(kw, "macro") || is_name(kw, "call")) {
        bool is_call = is_name(kw, "call");
        jx_node *n = mk(p, is_call ? S_CALLBLOCK : S_MACRO, kw);
        if (!is_call) n->s = expect_name(p);
        /* parameters: args = names, kwv = defaults (NULL where none) */
        nvec names = {0}, defs = {0};
        if (is_op(cur(p), "(")) {
            p->i++;
            while (!is_op(cur(p), ")")) {
                if (names.n) expect_op(p, ",");
                if (is_op(cur(p), ")")) break;
                token *pt = cur(p);
                jx_node *pn = mk(p, N_NAME, pt);
                pn->s = expect_name(p);
                nvec_push(p, &names, pn);
                if (is_op(cur(p), "=")) { p->i++; nvec_push(p, &defs, parse_expression(p, true)); }
                else {
                    if (defs.n && defs.v[defs.n - 1]) perr(p, pt, "non-default argument follows default argument%s", NULL);
                    nvec_push(p, &defs, NULL);
                }
            }
            p->i++;
        } else if (!is_call) perr(p, cur(p), "expected '(' after macro name, got %s", tok_desc(p, cur(p)));
        n->args = names.v;
        n->nargs = names.n;
        n->kwv = defs.v;
        if (is_call) {
            n->a = parse_expression(p, true);
            if (n->a->kind != N_CALL) perr(p, kw, "expected a call expression in call block%s", NULL);
        }
        static const char *const mends[] = {"endmacro", NULL};
        static const char *const cends[] = {"endcall", NULL};
        expect_bend(p);
        parse_body(p, is_call ? cends : mends, kw, &n->body, &n->nbody);
        p->i++;
        expect_bend(p);
        return n;
    }
    if (is_name(kw, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        jx_node *n = mk(p, S_FILTERBLOCK, kw);
        jx_node *f = NULL;
        p->i--;
        /* reuse parse_filter by pretending the keyword is a '|' */
        do { f = parse_filter(p, f); } while (is_op(cur(p), "|"));
        n->a = f;
        expect_bend(p);
        parse_body(p, ends, kw, &n->body, &n->nbody);
        p->i++;
        expect_bend(p);
        return n;
    }
    if (is_name(kw, "with")) {
        static const char *const ends[] = {"endwith", NULL};
        jx_node *n = mk(p, S_WITH, kw);
        nvec tg = {0}, vals = {0};
        while (cur(p)->t != T_BEND) {
            if (tg.n) expect_op(p, ",");
            jx_node *nm = mk(p, N_NAME, cur(p));
            nm->s = expect_name(p);
            expect_op(p, "=");
            nvec_push(p, &tg, nm);
            nvec_push(p, &vals, parse_expression(p, true));
        }
        n->args = tg.v;
        n->nargs = tg.n;
        n->kwv = vals.v;
        expect_bend(p);
        parse_body(p, ends, kw, &n->body, &n->nbody);
        p->i++;
        expect_bend(p);
        return n;
    }
    if (is_name(kw, "generation")) {   /* transformers' AssistantTracker: renders its body */
        static const char *const ends[] = {"endgeneration", NULL};
        jx_node *n = mk(p, S_BODY, kw);
        expect_bend(p);
        parse_body(p, ends, kw, &n->body, &n->nbody);
        p->i++;
        expect_bend(p);
        return n;
    }
    if (is_name(kw, "break") || is_name(kw, "continue")) {
        jx_node *n = mk(p, is_name(kw, "break") ? S_BREAK : S_CONTINUE, kw);
        expect_bend(p);
        return n;
    }
    char nm[64];
    snprintf(nm, sizeof nm, "%.*s", (int)(kw->n < 60 ? kw->n : 60), kw->p);
    perr(p, kw, "unknown or misplaced tag '%s'", nm);
}

/* Check that break/continue sit inside a for loop (jinja2 rejects them at
 * compile time otherwise). */
static void check_loops(P *p, jx_node **v, int n, bool in_loop)
{
    for (int i = 0; i < n; i++) {
        jx_node *s = v[i];
        if ((s->kind == S_BREAK || s->kind == S_CONTINUE) && !in_loop) {
            token t = {.line = s->line, .col = s->col};
            perr(p, &t, "'%s' outside of a loop", s->kind == S_BREAK ? "break" : "continue");
        }
        bool inner = s->kind == S_FOR ? true : (s->kind == S_MACRO || s->kind == S_CALLBLOCK) ? false : in_loop;
        check_loops(p, s->body, s->nbody, inner);
        check_loops(p, s->els, s->nels, s->kind == S_FOR ? in_loop : inner);
    }
}

static ember_status parse_impl(const char *src, size_t len, ember_jinja_template **out, ember_jinja_error *err)
{
    if (err) memset(err, 0, sizeof *err);
    if (!out || (!src && len)) return ember_error(EMBER_ERR_INVALID_ARG, "ember_jinja_parse: NULL argument");
    *out = NULL;
    ember_jinja_template *t = calloc(1, sizeof *t);
    if (!t) return ember_error(EMBER_ERR_NOMEM, "ember_jinja_parse: out of memory");
    t->ctx.cap = (size_t)256 << 20;
    P p = {.c = &t->ctx, .cur_line = 1, .cur_col = 1};
    if (setjmp(t->ctx.jb)) {
        ember_status st = t->ctx.status;
        if (err) *err = t->ctx.err;
        ember_error(st, "chat template: %s", t->ctx.err.message);
        jx_arena_free(&t->ctx);
        free(t);
        return st;
    }
    /* normalise newlines (\r\n, \r -> \n) and drop one trailing newline */
    char *s = jx_alloc(&t->ctx, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    p.src = s;
    p.len = n;
    lex(&p);
    jx_node *root = mk(&p, S_BODY, &p.tok[0]);
    parse_body(&p, NULL, &p.tok[0], &root->body, &root->nbody);
    check_loops(&p, root->body, root->nbody, false);
    t->root = root;
    *out = t;
    return EMBER_OK;
}

ember_status ember_jinja_parse(const char *src, size_t len, ember_jinja_template **out, ember_jinja_error *err)
{
    /* number literals parse as Python parses them whatever the process locale is */
    locale_t cloc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    locale_t old = cloc ? uselocale(cloc) : (locale_t)0;
    ember_status st = parse_impl(src, len, out, err);
    if (cloc) {
        uselocale(old);
        freelocale(cloc);
    }
    return st;
}

void ember_jinja_free(ember_jinja_template *t)
{
    if (!t) return;
    jx_arena_free(&t->ctx);
    free(t);
}
