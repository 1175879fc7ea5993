/*
 * jinja_eval.c — evaluates the AST of jinja_parse.c against a JSON context,
 * with jinja2's semantics: Python operators, Undefined that prints as ''
 * but fails when used, per-iteration scopes in for loops, macros that see
 * their defining scope, namespace() objects as the only mutable values.
 *
 * Owns: statement execution, expression evaluation, scoping, limits (steps,
 * recursion, output size, memory) and the public ember_jinja_render.
 * Must not: abort, or leave memory behind on any failure (all render memory
 * is one arena; failures unwind by longjmp to ember_jinja_render).
 */
#include "chat/jinja/jinja_internal.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

void jx_rfail(jx_render *r, const jx_node *at, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jx_fail(&r->c, EMBER_ERR_FORMAT, at ? at->line : 0, at ? at->col : 0, "%s", msg);
}

void jx_fail_undefined(jx_render *r, const jx_node *at, jv u)
{
    jx_rfail(r, at, "%s", u.u.s ? u.u.s->s : "value is undefined");
}

void jx_step(jx_render *r, const jx_node *at)
{
    if (++r->steps > r->max_steps) {
        jx_fail(&r->c, EMBER_ERR_RANGE, at ? at->line : 0, at ? at->col : 0,
                "template exceeded %llu evaluation steps", (unsigned long long)r->max_steps);
    }
}

static void enter(jx_render *r, const jx_node *at)
{
    if (++r->depth > r->max_depth)
        jx_fail(&r->c, EMBER_ERR_RANGE, at->line, at->col, "template recursion deeper than %d", r->max_depth);
}

jv jx_arg(const jx_args *a, int idx, const char *name, jv dflt)
{
    if (idx >= 0 && idx < a->n) return a->v[idx];
    if (name)
        for (int i = 0; i < a->nk; i++)
            if (strcmp(a->kn[i]->s, name) == 0) return a->kv[i];
    return dflt;
}

static jv undef_named(jx_render *r, const char *fmt, const char *a, const char *b)
{
    char msg[300];
    snprintf(msg, sizeof msg, fmt, a, b);
    jv u = jv_undef();
    u.u.s = jv_cstr(&r->c, msg).u.s;
    return u;
}

/* ---- frames ------------------------------------------------------------- */

static jx_frame *frame_new(jx_render *r, jx_frame *parent)
{
    jx_frame *f = jx_alloc(&r->c, sizeof *f);
    f->parent = parent;
    return f;
}

static void frame_set(jx_render *r, jx_frame *f, const jx_str *name, jv v)
{
    jv k = {.k = JV_STR};
    k.u.s = name;
    jv_dict_set(&r->c, &f->vars, k, v);
}

static jv lookup(jx_render *r, jx_frame *f, const jx_str *name)
{
    jv k = {.k = JV_STR}, v;
    k.u.s = name;
    for (; f; f = f->parent)
        if (jv_dict_get(&f->vars, k, &v)) return v;
    int b = jx_builtin_lookup(name->s);
    if (b >= 0) {
        jv f2 = {.k = JV_BUILTIN};
        f2.u.builtin = b;
        return f2;
    }
    return undef_named(r, "'%s' is undefined", name->s, "");
}

/* ---- attribute and item access -------------------------------------------- */

static const char *obj_desc(jv v)
{
    switch (v.k) {
    case JV_DICT: return "dict object";
    case JV_LIST: return "list object";
    case JV_TUPLE: return "tuple object";
    case JV_STR: return "str object";
    case JV_NONE: return "None";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_BOOL: return "bool object";
    default: return "object";
    }
}

static jv loop_attr(jx_render *r, jv obj, const char *name)
{
    struct jx_loop *lp = obj.u.loop;
    int64_t n = (int64_t)lp->items->n, i = (int64_t)lp->index0;
    if (!strcmp(name, "index")) return jv_int(i + 1);
    if (!strcmp(name, "index0")) return jv_int(i);
    if (!strcmp(name, "revindex")) return jv_int(n - i);
    if (!strcmp(name, "revindex0")) return jv_int(n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(n);
    if (!strcmp(name, "depth")) return jv_int(lp->depth);
    if (!strcmp(name, "depth0")) return jv_int(lp->depth - 1);
    if (!strcmp(name, "previtem"))
        return i > 0 ? lp->items->v[i - 1] : undef_named(r, "there is no previous item%s%s", "", "");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? lp->items->v[i + 1] : undef_named(r, "there is no next item%s%s", "", "");
    if (!strcmp(name, "cycle")) {
        jv m = {.k = JV_METHOD};
        m.u.meth = jx_alloc(&r->c, sizeof *m.u.meth);
        m.u.meth->self = obj;
        m.u.meth->name = "cycle";
        return m;
    }
    return undef_named(r, "'LoopContext' object has no attribute '%s'%s", name, "");
}

jv jx_getattr(jx_render *r, const jx_node *at, jv obj, const char *name, size_t nlen)
{
    if (obj.k == JV_UNDEF) jx_fail_undefined(r, at, obj);
    if (name[0] == '_') return undef_named(r, "access to attribute '%s' of '%s' is unsafe", name, obj_desc(obj));
    if (obj.k == JV_LOOP) return loop_attr(r, obj, name);
    if (jx_has_method(obj, name)) {
        jv m = {.k = JV_METHOD};
        m.u.meth = jx_alloc(&r->c, sizeof *m.u.meth);
        m.u.meth->self = obj;
        m.u.meth->name = name;
        return m;
    }
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        jv v;
        if (jv_dict_get(obj.u.d, jv_str(&r->c, name, nlen), &v)) return v;
        if (obj.k == JV_NS) return undef_named(r, "'Namespace' object has no attribute '%s'%s", name, "");
    }
    return undef_named(r, "'%s' has no attribute '%s'", obj_desc(obj), name);
}

static int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + (int64_t)n : i; }

jv jx_getitem(jx_render *r, const jx_node *at, jv obj, jv key)
{
    if (obj.k == JV_UNDEF) jx_fail_undefined(r, at, obj);
    switch (obj.k) {
    case JV_DICT: case JV_NS: {
        jv v;
        if (jv_dict_get(obj.u.d, key, &v)) return v;
        break;
    }
    case JV_LIST: case JV_TUPLE:
        if (key.k == JV_INT || key.k == JV_BOOL) {
            int64_t i = norm_index(key.k == JV_INT ? key.u.i : key.u.b, obj.u.l->n);
            if (i >= 0 && (size_t)i < obj.u.l->n) return obj.u.l->v[i];
            return undef_named(r, "%s has no element %s", obj_desc(obj), "at that index");
        }
        break;
    case JV_STR:
        if (key.k == JV_INT) {
            size_t n = jx_utf8_len(obj.u.s->s, obj.u.s->len);
            int64_t i = norm_index(key.u.i, n);
            if (i >= 0 && (size_t)i < n) {
                size_t a = jx_utf8_offset(obj.u.s->s, obj.u.s->len, (size_t)i);
                size_t b = jx_utf8_offset(obj.u.s->s, obj.u.s->len, (size_t)i + 1);
                return jv_str(&r->c, obj.u.s->s + a, b - a);
            }
            return undef_named(r, "%s has no element %s", obj_desc(obj), "at that index");
        }
        break;
    case JV_LOOP:
        break;
    default:
        break;
    }
    if (key.k == JV_STR) return jx_getattr(r, at, obj, key.u.s->s, key.u.s->len);
    jx_buf b = {0};
    jv_repr_into(&r->c, &b, key);
    return undef_named(r, "'%s' has no item %s", obj_desc(obj), b.p ? b.p : "");
}

static jv do_slice(jx_render *r, const jx_node *at, jv obj, jv start, jv stop, jv step)
{
    if (obj.k == JV_UNDEF) jx_fail_undefined(r, at, obj);
    int64_t st = 1;
    if (step.k == JV_INT) st = step.u.i;
    else if (step.k != JV_NONE && step.k != JV_UNDEF) jx_rfail(r, at, "slice indices must be integers");
    if (st == 0) jx_rfail(r, at, "slice step cannot be zero");
    size_t n;
    bool is_str = obj.k == JV_STR;
    if (is_str) n = jx_utf8_len(obj.u.s->s, obj.u.s->len);
    else if (obj.k == JV_LIST || obj.k == JV_TUPLE) n = obj.u.l->n;
    else jx_rfail(r, at, "'%s' object is not subscriptable", jv_type_name(obj));   /* jinja2 compiles slices to a plain subscript */
    int64_t len = (int64_t)n, a, b;
    jv bounds[2] = {start, stop};
    int64_t res[2];
    for (int k = 0; k < 2; k++) {
        jv x = bounds[k];
        if (x.k == JV_NONE || x.k == JV_UNDEF) {
            res[k] = st > 0 ? (k == 0 ? 0 : len) : (k == 0 ? len - 1 : -1);
            continue;
        }
        if (x.k != JV_INT) jx_rfail(r, at, "slice indices must be integers or None");
        int64_t v = x.u.i;
        if (v < 0) {
            v += len;
            if (v < 0) v = st > 0 ? 0 : -1;
        } else if (v >= len) v = st > 0 ? len : len - 1;
        res[k] = v;
    }
    a = res[0];
    b = res[1];
    jv out = is_str ? jv_undef() : jv_list_new(&r->c, obj.k, 0);
    jx_buf sb = {0};
    if (is_str) jx_buf_put(&r->c, &sb, "", 0);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
        if (is_str) {
            size_t x = jx_utf8_offset(obj.u.s->s, obj.u.s->len, (size_t)i);
            size_t y = jx_utf8_offset(obj.u.s->s, obj.u.s->len, (size_t)i + 1);
            jx_buf_put(&r->c, &sb, obj.u.s->s + x, y - x);
        } else jv_list_push(&r->c, &out, obj.u.l->v[i]);
    }
    return is_str ? jv_str(&r->c, sb.p, sb.n) : out;
}

/* ---- operators ------------------------------------------------------------ */

static _Noreturn void bad_operands(jx_render *r, const jx_node *at, const char *op, jv a, jv b)
{
    if (a.k == JV_UNDEF) jx_fail_undefined(r, at, a);
    if (b.k == JV_UNDEF) jx_fail_undefined(r, at, b);
    jx_rfail(r, at, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static bool is_intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static int64_t as_int(jv v) { return v.k == JV_INT ? v.u.i : (int64_t)v.u.b; }

static jv repeat(jx_render *r, const jx_node *at, jv seq, int64_t times)
{
    if (times < 0) times = 0;
    if (seq.k == JV_STR) {
        if (seq.u.s->len && (uint64_t)times > (r->c.cap ? r->c.cap : (size_t)1 << 30) / seq.u.s->len)
            jx_fail(&r->c, EMBER_ERR_RANGE, at->line, at->col, "string repetition too large");
        jx_buf b = {0};
        jx_buf_put(&r->c, &b, "", 0);
        for (int64_t i = 0; i < times; i++) jx_buf_put(&r->c, &b, seq.u.s->s, seq.u.s->len);
        return jv_str(&r->c, b.p, b.n);
    }
    if (seq.u.l->n && (uint64_t)times > 10000000 / seq.u.l->n)
        jx_fail(&r->c, EMBER_ERR_RANGE, at->line, at->col, "list repetition too large");
    jv out = jv_list_new(&r->c, seq.k, 0);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) jv_list_push(&r->c, &out, seq.u.l->v[k]);
    return out;
}

static jv arith(jx_render *r, const jx_node *at, int op, jv a, jv b)
{
    static const char *opname[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    /* A string + undefined or none is the string: llama.cpp's Jinja does this
     * (common/jinja/runtime.cpp, "treating null/undefined as empty string for
     * string concatenation") and stock templates rely on it (firefunction-v2:
     * system_prompt_suffix + "\n" + functions). jinja2 raises here; this is
     * the one named difference (tests/golden/jinja/make_goldens.py,
     * "lenient_concat"). `~` is unchanged: jinja2 already prints undefined as ''
     * and none as 'None'. */
    if (op == OP_ADD && ((a.k == JV_STR && (b.k == JV_UNDEF || b.k == JV_NONE)) ||
                         (b.k == JV_STR && (a.k == JV_UNDEF || a.k == JV_NONE))))
        return a.k == JV_STR ? a : b;
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = as_int(a), y = as_int(b), z;
        switch (op) {
        case OP_ADD: if (__builtin_add_overflow(x, y, &z)) goto ovf; return jv_int(z);
        case OP_SUB: if (__builtin_sub_overflow(x, y, &z)) goto ovf; return jv_int(z);
        case OP_MUL: if (__builtin_mul_overflow(x, y, &z)) goto ovf; return jv_int(z);
        case OP_DIV: if (y == 0) jx_rfail(r, at, "division by zero"); return jv_float((double)x / (double)y);
        case OP_FLOORDIV: case OP_MOD: {
            if (y == 0) jx_rfail(r, at, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) goto ovf;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
            return jv_int(op == OP_FLOORDIV ? q : m);
        }
        case OP_POW:
            if (y >= 0) {
                int64_t acc = 1;
                for (int64_t k = 0; k < y; k++) {
                    if (__builtin_mul_overflow(acc, x, &acc)) goto ovf;
                    if (acc == 0 || acc == 1) break;
                    if (k > 64 && (acc == -1 || acc == 1)) break;
                }
                if (x == -1) acc = (y % 2) ? -1 : 1;
                return jv_int(acc);
            }
            return jv_float(pow((double)x, (double)y));
        }
    }
    if (jv_is_number(a) && jv_is_number(b)) {
        double x = jv_as_double(a), y = jv_as_double(b);
        switch (op) {
        case OP_ADD: return jv_float(x + y);
        case OP_SUB: return jv_float(x - y);
        case OP_MUL: return jv_float(x * y);
        case OP_DIV: if (y == 0) jx_rfail(r, at, "float division by zero"); return jv_float(x / y);
        case OP_FLOORDIV: if (y == 0) jx_rfail(r, at, "float floor division by zero"); return jv_float(floor(x / y));
        case OP_MOD: {
            if (y == 0) jx_rfail(r, at, "float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_float(m);
        }
        case OP_POW: return jv_float(pow(x, y));
        }
    }
    if (op == OP_ADD && a.k == JV_STR && b.k == JV_STR) {
        bool markup = a.u.s->markup || b.u.s->markup;   /* Markup + str escapes the str */
        if (markup) {
            a = jv_html_escape(&r->c, a);
            b = jv_html_escape(&r->c, b);
        }
        jx_buf s = {0};
        jx_buf_put(&r->c, &s, a.u.s->s, a.u.s->len);
        jx_buf_put(&r->c, &s, b.u.s->s, b.u.s->len);
        jv out = jv_str(&r->c, s.p, s.n);
        ((jx_str *)out.u.s)->markup = markup;
        return out;
    }
    if (op == OP_ADD && (a.k == JV_LIST || a.k == JV_TUPLE) && a.k == b.k) {
        jv out = jv_list_new(&r->c, a.k, a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(&r->c, &out, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(&r->c, &out, b.u.l->v[i]);
        return out;
    }
    if (op == OP_MUL && (a.k == JV_STR || a.k == JV_LIST || a.k == JV_TUPLE) && is_intlike(b))
        return repeat(r, at, a, as_int(b));
    if (op == OP_MUL && (b.k == JV_STR || b.k == JV_LIST || b.k == JV_TUPLE) && is_intlike(a))
        return repeat(r, at, b, as_int(a));
    if (op == OP_MOD && a.k == JV_STR) return jx_percent_format(r, at, a, b);
    bad_operands(r, at, opname[op], a, b);
ovf:
    jx_fail(&r->c, EMBER_ERR_RANGE, at->line, at->col, "integer overflow in '%s'", opname[op]);
}

int jx_compare(jx_render *r, const jx_node *at, jv a, jv b)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        if (is_intlike(a) && is_intlike(b)) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
        double x = jv_as_double(a), y = jv_as_double(b);
        return x < y ? -1 : x > y;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if ((a.k == JV_LIST || a.k == JV_TUPLE) && a.k == b.k) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jx_compare(r, at, a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.k == JV_UNDEF) jx_fail_undefined(r, at, a);
    if (b.k == JV_UNDEF) jx_fail_undefined(r, at, b);
    jx_rfail(r, at, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

static bool contains(jx_render *r, const jx_node *at, jv needle, jv hay)
{
    switch (hay.k) {
    case JV_STR:
        if (needle.k != JV_STR) jx_rfail(r, at, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        if (needle.u.s->len == 0) return true;
        return memmem(hay.u.s->s, hay.u.s->len, needle.u.s->s, needle.u.s->len) != NULL;
    case JV_LIST: case JV_TUPLE:
        for (size_t i = 0; i < hay.u.l->n; i++) if (jv_equal(hay.u.l->v[i], needle)) return true;
        return false;
    case JV_DICT: { jv v; return jv_dict_get(hay.u.d, needle, &v); }
    case JV_UNDEF: return false;
    case JV_ITER:   /* consumes a one-shot iterator up to the match, as Python does */
        for (size_t i = hay.u.l->pos; i < hay.u.l->n; i++)
            if (jv_equal(hay.u.l->v[i], needle)) {
                if (!hay.u.l->view) hay.u.l->pos = i + 1;
                return true;
            }
        if (!hay.u.l->view) hay.u.l->pos = hay.u.l->n;
        return false;
    default: jx_rfail(r, at, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

/* ---- expressions ------------------------------------------------------- */

static jv eval(jx_render *r, const jx_node *n, jx_frame *f);
static int exec_body(jx_render *r, jx_node *const *body, int nbody, jx_frame *f);

static void eval_args(jx_render *r, const jx_node *n, jx_frame *f, jx_args *a)
{
    a->n = n->nargs;
    a->v = n->nargs ? jx_alloc(&r->c, (size_t)n->nargs * sizeof(jv)) : NULL;
    for (int i = 0; i < n->nargs; i++) a->v[i] = eval(r, n->args[i], f);
    a->nk = n->nkw;
    a->kn = n->kwn;
    a->kv = n->nkw ? jx_alloc(&r->c, (size_t)n->nkw * sizeof(jv)) : NULL;
    for (int i = 0; i < n->nkw; i++) a->kv[i] = eval(r, n->kwv[i], f);
}

static jv eval_filter(jx_render *r, const jx_node *n, jx_frame *f, jv block_input)
{
    jv in = n->a ? (n->a->kind == N_FILTER ? eval_filter(r, n->a, f, block_input) : eval(r, n->a, f)) : block_input;
    jx_args a;
    eval_args(r, n, f, &a);
    return jx_apply_filter(r, n, n->s->s, in, &a);
}

static jv eval(jx_render *r, const jx_node *n, jx_frame *f)
{
    jx_step(r, n);
    enter(r, n);
    jv res;
    switch (n->kind) {
    case N_CONST: res = n->cval; break;
    case N_NAME: res = lookup(r, f, n->s); break;
    case N_LIST: case N_TUPLE:
        res = jv_list_new(&r->c, n->kind == N_LIST ? JV_LIST : JV_TUPLE, (size_t)n->nargs);
        for (int i = 0; i < n->nargs; i++) jv_list_push(&r->c, &res, eval(r, n->args[i], f));
        break;
    case N_DICT:
        res = jv_dict_new(&r->c, JV_DICT);
        for (int i = 0; i < n->nargs; i++) {
            jv k = eval(r, n->args[i], f);
            if (k.k == JV_LIST || k.k == JV_DICT || k.k == JV_UNDEF)
                jx_rfail(r, n->args[i], "unhashable dict key of type '%s'", jv_type_name(k));
            jv_dict_set(&r->c, res.u.d, k, eval(r, n->kwv[i], f));
        }
        break;
    case N_GETATTR: res = jx_getattr(r, n, eval(r, n->a, f), n->s->s, n->s->len); break;
    case N_GETITEM: {
        jv o = eval(r, n->a, f);
        res = jx_getitem(r, n, o, eval(r, n->b, f));
        break;
    }
    case N_SLICE: {
        jv o = eval(r, n->a, f);
        jv a = n->b ? eval(r, n->b, f) : jv_none(), b = n->c ? eval(r, n->c, f) : jv_none();
        jv s = n->d ? eval(r, n->d, f) : jv_none();
        res = do_slice(r, n, o, a, b, s);
        break;
    }
    case N_NEG: case N_POS: {
        jv v = eval(r, n->a, f);
        if (v.k == JV_UNDEF) jx_fail_undefined(r, n, v);
        if (!jv_is_number(v)) jx_rfail(r, n, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', jv_type_name(v));
        if (n->kind == N_POS) res = v.k == JV_BOOL ? jv_int(v.u.b) : v;
        else if (v.k == JV_FLOAT) res = jv_float(-v.u.f);
        else {
            if (as_int(v) == INT64_MIN) jx_rfail(r, n, "integer overflow");
            res = jv_int(-as_int(v));
        }
        break;
    }
    case N_NOT: res = jv_bool(!jv_truthy(eval(r, n->a, f))); break;
    case N_AND: { jv a = eval(r, n->a, f); res = jv_truthy(a) ? eval(r, n->b, f) : a; break; }
    case N_OR: { jv a = eval(r, n->a, f); res = jv_truthy(a) ? a : eval(r, n->b, f); break; }
    case N_COND:
        if (jv_truthy(eval(r, n->a, f))) res = eval(r, n->b, f);
        else res = n->c ? eval(r, n->c, f) : undef_named(r, "the inline if-expression evaluated to false and no else section was defined%s%s", "", "");
        break;
    case N_BIN: {
        jv a = eval(r, n->a, f), b = eval(r, n->b, f);
        switch (n->op) {
        case OP_CONCAT: {
            jx_buf s = {0};
            jx_buf_put(&r->c, &s, "", 0);
            jv_str_into(&r->c, &s, a);
            jv_str_into(&r->c, &s, b);
            res = jv_str(&r->c, s.p, s.n);
            break;
        }
        case OP_EQ: res = jv_bool(jv_equal(a, b)); break;
        case OP_NE: res = jv_bool(!jv_equal(a, b)); break;
        case OP_LT: res = jv_bool(jx_compare(r, n, a, b) < 0); break;
        case OP_LE: res = jv_bool(jx_compare(r, n, a, b) <= 0); break;
        case OP_GT: res = jv_bool(jx_compare(r, n, a, b) > 0); break;
        case OP_GE: res = jv_bool(jx_compare(r, n, a, b) >= 0); break;
        case OP_IN: res = jv_bool(contains(r, n, a, b)); break;
        case OP_NOTIN: res = jv_bool(!contains(r, n, a, b)); break;
        default: res = arith(r, n, n->op, a, b);
        }
        break;
    }
    case N_CALL: {
        jv callee = eval(r, n->a, f);
        jx_args a;
        eval_args(r, n, f, &a);
        res = jx_call(r, n, callee, &a, jv_undef());
        break;
    }
    case N_FILTER: res = eval_filter(r, n, f, jv_undef()); break;
    case N_TEST: {
        jv in = eval(r, n->a, f);
        jx_args a;
        eval_args(r, n, f, &a);
        bool t = jx_apply_test(r, n, n->s->s, in, &a);
        res = jv_bool(n->op ? !t : t);
        break;
    }
    default: jx_rfail(r, n, "internal: statement evaluated as expression");
    }
    r->depth--;
    return res;
}

/* ---- macros ------------------------------------------------------------- */

static jv call_macro(jx_render *r, const jx_node *at, struct jx_macro *m, const jx_args *a, jv caller)
{
    if (++r->call_depth > r->max_call_depth)
        jx_fail(&r->c, EMBER_ERR_RANGE, at->line, at->col, "macro calls nested deeper than %d", r->max_call_depth);
    const jx_node *def = m->def;
    jx_frame *f = frame_new(r, m->closure);
    bool *used = a->nk ? jx_alloc(&r->c, (size_t)a->nk) : NULL;
    for (int i = 0; i < def->nargs; i++) {
        const jx_str *pn = def->args[i]->s;
        jv v;
        bool got = false;
        if (i < a->n) { v = a->v[i]; got = true; }
        for (int k = 0; k < a->nk && !got; k++)
            if (strcmp(a->kn[k]->s, pn->s) == 0) { v = a->kv[k]; used[k] = true; got = true; }
        if (!got) {
            if (def->kwv && def->kwv[i]) v = eval(r, def->kwv[i], f);
            else v = undef_named(r, "parameter '%s' was not provided%s", pn->s, "");
        }
        frame_set(r, f, pn, v);
    }
    jv varargs = jv_list_new(&r->c, JV_TUPLE, 0);
    for (int i = def->nargs; i < a->n; i++) jv_list_push(&r->c, &varargs, a->v[i]);
    jv kwargs = jv_dict_new(&r->c, JV_DICT);
    for (int k = 0; k < a->nk; k++)
        if (!used[k]) {
            bool is_param = false;
            for (int i = 0; i < def->nargs; i++) if (!strcmp(def->args[i]->s->s, a->kn[k]->s)) is_param = true;
            if (!is_param) jv_dict_set(&r->c, kwargs.u.d, jv_cstr(&r->c, a->kn[k]->s), a->kv[k]);
        }
    frame_set(r, f, jv_cstr(&r->c, "varargs").u.s, varargs);
    frame_set(r, f, jv_cstr(&r->c, "kwargs").u.s, kwargs);
    if (caller.k != JV_UNDEF) frame_set(r, f, jv_cstr(&r->c, "caller").u.s, caller);
    else if (m->caller.k != JV_UNDEF) frame_set(r, f, jv_cstr(&r->c, "caller").u.s, m->caller);
    jx_buf buf = {0}, *old = r->out;
    buf.limit = old->limit;
    jx_buf_put(&r->c, &buf, "", 0);
    r->out = &buf;
    exec_body(r, def->body, def->nbody, f);
    r->out = old;
    r->call_depth--;
    return jv_str(&r->c, buf.p, buf.n);
}

jv jx_call(jx_render *r, const jx_node *at, jv callee, const jx_args *a, jv caller)
{
    switch (callee.k) {
    case JV_MACRO: return call_macro(r, at, callee.u.m, a, caller);
    case JV_BUILTIN: return jx_call_builtin(r, at, callee.u.builtin, a);
    case JV_METHOD: {
        jv self = callee.u.meth->self;
        if (self.k == JV_LOOP && !strcmp(callee.u.meth->name, "cycle")) {
            if (a->n == 0) jx_rfail(r, at, "no items for cycling given");
            return a->v[self.u.loop->index0 % (size_t)a->n];
        }
        return jx_call_method(r, at, self, callee.u.meth->name, a);
    }
    case JV_UNDEF: jx_fail_undefined(r, at, callee);
    default: jx_rfail(r, at, "'%s' object is not callable", jv_type_name(callee));
    }
}

/* ---- statements ---------------------------------------------------------- */

static void assign(jx_render *r, const jx_node *target, jx_frame *f, jv v)
{
    if (target->kind == N_NAME) { frame_set(r, f, target->s, v); return; }
    if (target->kind == N_GETATTR) {
        jv ns = lookup(r, f, target->a->s);
        if (ns.k != JV_NS) jx_rfail(r, target, "cannot assign attribute on non-namespace object");
        jv_dict_set(&r->c, ns.u.d, jv_str(&r->c, target->s->s, target->s->len), v);
        return;
    }
    /* tuple unpacking */
    jv items = jx_iter_list(r, target, v);
    if ((int)items.u.l->n != target->nargs)
        jx_rfail(r, target, "cannot unpack %zu values into %d names", items.u.l->n, target->nargs);
    for (int i = 0; i < target->nargs; i++) assign(r, target->args[i], f, items.u.l->v[i]);
}

static int exec_stmt(jx_render *r, const jx_node *s, jx_frame *f);

static int exec_body(jx_render *r, jx_node *const *body, int nbody, jx_frame *f)
{
    for (int i = 0; i < nbody; i++) {
        int fl = exec_stmt(r, body[i], f);
        if (fl != FLOW_NORMAL) return fl;
    }
    return FLOW_NORMAL;
}

static int exec_for(jx_render *r, const jx_node *s, jx_frame *f)
{
    jv seq = eval(r, s->a, f);
    if (seq.k == JV_UNDEF) seq = jv_list_new(&r->c, JV_LIST, 0);
    jv items = jx_iter_list(r, s->a, seq);
    if (s->b) {   /* {% for x in xs if cond %}: filter first, loop.* counts what remains */
        jv kept = jv_list_new(&r->c, JV_LIST, items.u.l->n);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jx_frame *tf = frame_new(r, f);
            jx_node tgt = {.kind = N_TUPLE, .args = s->args, .nargs = s->nargs, .line = s->line, .col = s->col};
            assign(r, s->nargs == 1 ? s->args[0] : &tgt, tf, items.u.l->v[i]);
            if (jv_truthy(eval(r, s->b, tf))) jv_list_push(&r->c, &kept, items.u.l->v[i]);
        }
        items = kept;
    }
    struct jx_loop *lp = jx_alloc(&r->c, sizeof *lp);
    lp->items = items.u.l;
    lp->depth = 1;
    jv loopv = {.k = JV_LOOP};
    loopv.u.loop = lp;
    const jx_str *loopname = jv_cstr(&r->c, "loop").u.s;
    jx_node tgt = {.kind = N_TUPLE, .args = s->args, .nargs = s->nargs, .line = s->line, .col = s->col};
    for (size_t i = 0; i < items.u.l->n; i++) {
        jx_step(r, s);
        lp->index0 = i;
        jx_frame *it = frame_new(r, f);
        frame_set(r, it, loopname, loopv);
        assign(r, s->nargs == 1 ? s->args[0] : &tgt, it, items.u.l->v[i]);
        int fl = exec_body(r, s->body, s->nbody, it);
        if (fl == FLOW_BREAK) break;
    }
    if (items.u.l->n == 0 && s->nels) return exec_body(r, s->els, s->nels, f);
    return FLOW_NORMAL;
}

static jv capture(jx_render *r, jx_node *const *body, int nbody, jx_frame *f)
{
    jx_buf buf = {0}, *old = r->out;
    buf.limit = old->limit;
    jx_buf_put(&r->c, &buf, "", 0);
    r->out = &buf;
    exec_body(r, body, nbody, f);
    r->out = old;
    return jv_str(&r->c, buf.p, buf.n);
}

static int exec_stmt(jx_render *r, const jx_node *s, jx_frame *f)
{
    jx_step(r, s);
    enter(r, s);
    int fl = FLOW_NORMAL;
    switch (s->kind) {
    case S_TEXT: jx_buf_put(&r->c, r->out, s->s->s, s->s->len); break;
    case S_OUTPUT: jv_str_into(&r->c, r->out, eval(r, s->a, f)); break;
    case S_BODY: fl = exec_body(r, s->body, s->nbody, f); break;
    case S_IF:
        if (jv_truthy(eval(r, s->a, f))) fl = exec_body(r, s->body, s->nbody, f);
        else fl = exec_body(r, s->els, s->nels, f);
        break;
    case S_FOR: fl = exec_for(r, s, f); break;
    case S_SET: assign(r, s->a, f, eval(r, s->b, f)); break;
    case S_SETBLOCK: {
        jv v = capture(r, s->body, s->nbody, f);
        if (s->b) v = eval_filter(r, s->b, f, v);
        assign(r, s->a, f, v);
        break;
    }
    case S_MACRO: {
        jv m = {.k = JV_MACRO};
        m.u.m = jx_alloc(&r->c, sizeof *m.u.m);
        m.u.m->def = s;
        m.u.m->closure = f;
        m.u.m->caller = jv_undef();
        frame_set(r, f, s->s, m);
        break;
    }
    case S_CALLBLOCK: {
        jv caller = {.k = JV_MACRO};
        caller.u.m = jx_alloc(&r->c, sizeof *caller.u.m);
        caller.u.m->def = s;
        caller.u.m->closure = f;
        caller.u.m->caller = jv_undef();
        jv callee = eval(r, s->a->a, f);
        jx_args a;
        eval_args(r, s->a, f, &a);
        jv_str_into(&r->c, r->out, jx_call(r, s->a, callee, &a, caller));
        break;
    }
    case S_FILTERBLOCK: {
        jv v = capture(r, s->body, s->nbody, f);
        jv_str_into(&r->c, r->out, eval_filter(r, s->a, f, v));
        break;
    }
    case S_WITH: {
        jx_frame *wf = frame_new(r, f);
        for (int i = 0; i < s->nargs; i++) frame_set(r, wf, s->args[i]->s, eval(r, s->kwv[i], f));
        fl = exec_body(r, s->body, s->nbody, wf);
        break;
    }
    case S_BREAK: fl = FLOW_BREAK; break;
    case S_CONTINUE: fl = FLOW_CONTINUE; break;
    default: jx_rfail(r, s, "internal: expression executed as statement");
    }
    r->depth--;
    return fl;
}

/* ---- entry point ----------------------------------------------------------- */

static ember_status render_impl(const ember_jinja_template *t, const json_t *context,
                                const ember_jinja_render_opts *opts, char **out, size_t *out_len,
                                ember_jinja_error *err)
{
    if (err) memset(err, 0, sizeof *err);
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_jinja_render: NULL argument");
    if (context && !json_is_object(context))
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_jinja_render: context must be a JSON object");
    ember_jinja_render_opts o = {0};
    if (opts) o = *opts;
    jx_render *r = calloc(1, sizeof *r);
    if (!r) return ember_error(EMBER_ERR_NOMEM, "ember_jinja_render: out of memory");
    r->c.cap = o.max_memory ? o.max_memory : (size_t)512 << 20;
    r->max_steps = o.max_steps ? o.max_steps : 10000000;
    r->max_call_depth = o.max_call_depth > 0 ? o.max_call_depth : 100;
    r->max_depth = 600 + 4 * r->max_call_depth;
    r->use_fixed_now = o.use_fixed_now != 0;
    r->fixed_now = o.fixed_now;
    if (setjmp(r->c.jb)) {
        ember_status st = r->c.status;
        if (err) *err = r->c.err;
        ember_error(st, "chat template: %s", r->c.err.message);
        jx_arena_free(&r->c);
        free(r);
        return st;
    }
    jx_buf *ob = jx_alloc(&r->c, sizeof *ob);
    ob->limit = o.max_output ? o.max_output : (size_t)64 << 20;
    jx_buf_put(&r->c, ob, "", 0);
    r->out = ob;
    jx_frame *g = frame_new(r, NULL);
    if (context) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)context, k, v) frame_set(r, g, jv_cstr(&r->c, k).u.s, jv_from_json(&r->c, v, 0));
    }
    r->globals = g;
    exec_body(r, t->root->body, t->root->nbody, g);
    char *res = malloc(ob->n + 1);
    if (!res) {
        jx_arena_free(&r->c);
        free(r);
        return ember_error(EMBER_ERR_NOMEM, "ember_jinja_render: out of memory for %zu bytes of output", ob->n);
    }
    memcpy(res, ob->p, ob->n + 1);
    *out = res;
    if (out_len) *out_len = ob->n;
    jx_arena_free(&r->c);
    free(r);
    return EMBER_OK;
}

ember_status ember_jinja_render(const ember_jinja_template *t, const json_t *context,
                                const ember_jinja_render_opts *opts, char **out, size_t *out_len,
                                ember_jinja_error *err)
{
    /* numbers print as Python prints them whatever the process locale is */
    locale_t cloc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    locale_t old = cloc ? uselocale(cloc) : (locale_t)0;
    ember_status st = render_impl(t, context, opts, out, out_len, err);
    if (cloc) {
        uselocale(old);
        freelocale(cloc);
    }
    return st;
}
