/*
 * jinja_internal.h — types shared by the Jinja lexer/parser, the value model
 * and the evaluator. Not part of the public API (see jinja.h).
 *
 * Owns: the arena allocator (every AST node and every render-time value lives
 * in an arena, freed in one go), the value representation (Python-like:
 * None, bool, int, float, str, list, tuple, dict, plus Jinja's Undefined,
 * namespace, macro, loop object), and the AST node layout.
 * Must not: use global mutable state (renders run concurrently).
 *
 * Errors inside parse and render unwind with longjmp to the entry point
 * (jx_fail); everything allocated before lives in the arena, so nothing leaks.
 */
#ifndef EMBER_CHAT_JINJA_INTERNAL_H
#define EMBER_CHAT_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/jinja/jinja.h"

/* ---- arena and failure context ---------------------------------------- */

typedef struct jx_chunk {
    struct jx_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} jx_chunk;

typedef struct jx_ctx {
    jx_chunk *chunks;
    size_t total, cap;          /* bytes held by the arena, and its limit */
    jmp_buf jb;
    ember_status status;
    ember_jinja_error err;
} jx_ctx;

void *jx_alloc(jx_ctx *c, size_t n);                   /* zeroed; fails via jx_fail */
char *jx_strndup(jx_ctx *c, const char *s, size_t n);
void jx_arena_free(jx_ctx *c);
_Noreturn void jx_fail(jx_ctx *c, ember_status st, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* growable byte buffer living in the arena */
typedef struct jx_buf {
    char *p;
    size_t n, cap;
    size_t limit;               /* 0: no limit beyond the arena's */
} jx_buf;
void jx_buf_put(jx_ctx *c, jx_buf *b, const char *s, size_t n);
void jx_buf_puts(jx_ctx *c, jx_buf *b, const char *s);
void jx_buf_putc(jx_ctx *c, jx_buf *b, char ch);
void jx_buf_printf(jx_ctx *c, jx_buf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- values ------------------------------------------------------------ */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_LIST, JV_TUPLE, JV_DICT, JV_NS, JV_MACRO, JV_BUILTIN, JV_METHOD, JV_LOOP,
    JV_ITER,   /* a Python iterator (generator from map/select/..., list_reverseiterator)
                  or dict view (dict.items()/keys()/values()); u.l holds the items */
} jv_kind;

/* NUL-terminated too; markup: a jinja2 Markup (from |safe, |escape): adding a
 * plain str to it HTML-escapes the plain one, as markupsafe does. */
typedef struct jx_str { size_t len; bool markup; char s[]; } jx_str;
typedef struct jx_list jx_list;
typedef struct jx_dict jx_dict;
struct jx_macro;
struct jx_method;
struct jx_loop;

typedef struct jv {
    jv_kind k;
    union {
        bool b;
        int64_t i;
        double f;
        const jx_str *s;        /* JV_STR; JV_UNDEF: the missing name, or NULL */
        jx_list *l;             /* JV_LIST, JV_TUPLE */
        jx_dict *d;             /* JV_DICT, JV_NS */
        struct jx_macro *m;
        int builtin;            /* JV_BUILTIN: index into the globals table */
        struct jx_method *meth;
        struct jx_loop *loop;
    } u;
} jv;

struct jx_list {
    size_t n, cap;
    jv *v;
    /* JV_ITER only: */
    size_t pos;          /* items before pos were consumed (one-shot iterators) */
    bool view;           /* dict view: re-iterable, has len(), truthy when non-empty */
    const char *tname;   /* Python type name: "generator", "dict_items", ... */
};
struct jx_dict { size_t n, cap; jv *key; jv *val; };

struct jx_method { jv self; const char *name; };

static inline jv jv_undef(void) { jv v = {.k = JV_UNDEF}; v.u.s = NULL; return v; }
static inline jv jv_none(void) { jv v = {.k = JV_NONE}; return v; }
static inline jv jv_bool(bool b) { jv v = {.k = JV_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.k = JV_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.k = JV_FLOAT}; v.u.f = f; return v; }

jv jv_str(jx_ctx *c, const char *s, size_t n);
jv jv_cstr(jx_ctx *c, const char *s);
jv jv_list_new(jx_ctx *c, jv_kind k, size_t cap);   /* JV_LIST or JV_TUPLE */
jv jv_iter_from(jx_ctx *c, jv list, const char *tname, bool view);   /* wrap a list's items */
void jv_list_push(jx_ctx *c, jv *list, jv item);
jv jv_dict_new(jx_ctx *c, jv_kind k);               /* JV_DICT or JV_NS */
void jv_dict_set(jx_ctx *c, jx_dict *d, jv key, jv val);
bool jv_dict_get(const jx_dict *d, jv key, jv *out);
bool jv_dict_gets(const jx_dict *d, const char *key, jv *out);

bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
const char *jv_type_name(jv v);           /* Python type name, for messages */
bool jv_is_number(jv v);                  /* int, float or bool */
double jv_as_double(jv v);

/* Python str() and repr() of a value, appended to b. */
void jv_str_into(jx_ctx *c, jx_buf *b, jv v);
void jv_repr_into(jx_ctx *c, jx_buf *b, jv v);
jv jv_to_str(jx_ctx *c, jv v);            /* str(v) as a JV_STR */
jv jv_html_escape(jx_ctx *c, jv v);       /* markupsafe.escape(v): a Markup */
void jx_float_repr(char *out, size_t cap, double f);   /* Python repr(float) */

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent < 0 is
 * None; indent_str overrides (a str indent). Returns false (and fills
 * *bad_type) if v holds something JSON cannot carry. */
typedef struct jx_json_opts {
    bool ensure_ascii, sort_keys;
    int indent;                    /* -1: None */
    const char *indent_str;        /* non-NULL: str indent */
    const char *item_sep, *key_sep;
} jx_json_opts;
bool jv_to_json(jx_ctx *c, jx_buf *b, jv v, const jx_json_opts *o, int depth, const char **bad_type);

jv jv_from_json(jx_ctx *c, const json_t *j, int depth);

/* UTF-8 helpers: number of code points; byte offset of code point i. */
size_t jx_utf8_len(const char *s, size_t n);
size_t jx_utf8_offset(const char *s, size_t n, size_t cp);

/* ---- AST ---------------------------------------------------------------- */

typedef enum {
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE,
    N_NEG, N_POS, N_NOT, N_BIN, N_AND, N_OR, N_COND, N_CALL, N_FILTER, N_TEST,
    /* statements */
    S_TEXT, S_OUTPUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK,
    S_FILTERBLOCK, S_BREAK, S_CONTINUE, S_WITH, S_BODY,
} jx_node_kind;

typedef enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} jx_op;

typedef struct jx_node jx_node;
struct jx_node {
    jx_node_kind kind;
    int op;                     /* N_BIN: jx_op; N_TEST: negated; S_SET: has attr target */
    int line, col;
    jx_node *a, *b, *c, *d;
    jx_node **args; int nargs;  /* list items, call args, for/set targets, macro params */
    const jx_str **kwn; jx_node **kwv; int nkw;   /* kwargs; dict keys use args/kwv */
    jx_node **body; int nbody;
    jx_node **els; int nels;
    const jx_str *s;            /* name / attribute / filter / test / text */
    jv cval;                    /* N_CONST */
};

struct ember_jinja_template {
    jx_ctx ctx;                 /* owns the arena holding the AST */
    jx_node *root;              /* S_BODY */
};

struct jx_macro {
    const jx_node *def;         /* S_MACRO (or S_CALLBLOCK for caller) */
    struct jx_frame *closure;
    jv caller;                  /* JV_UNDEF or the caller macro */
};

typedef struct jx_frame {
    struct jx_frame *parent;
    jx_dict vars;
} jx_frame;

struct jx_loop {
    const jx_list *items;
    size_t index0;
    int depth;
};

#endif

/* ---- render state (jinja_eval.c, jinja_builtins.c) ------------------------ */

typedef struct jx_render {
    jx_ctx c;                           /* must stay first: jx_fail(&r->c) */
    uint64_t steps, max_steps;
    int depth, max_depth;               /* C recursion through eval/exec */
    int call_depth, max_call_depth;     /* nested macro calls */
    jx_buf *out;
    jx_frame *globals;
    bool use_fixed_now;
    int64_t fixed_now;
} jx_render;

typedef struct jx_args {
    jv *v; int n;                       /* positional */
    const jx_str **kn; jv *kv; int nk;  /* keyword */
} jx_args;

#ifndef EMBER_JINJA_PRINTF
#define EMBER_JINJA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#endif
_Noreturn void jx_rfail(jx_render *r, const jx_node *at, const char *fmt, ...) EMBER_JINJA_PRINTF(3, 4);
_Noreturn void jx_fail_undefined(jx_render *r, const jx_node *at, jv u);

/* argument `idx` by position, or by keyword `name`, or `dflt` */
jv jx_arg(const jx_args *a, int idx, const char *name, jv dflt);

jv jx_getattr(jx_render *r, const jx_node *at, jv obj, const char *name, size_t nlen);
jv jx_getitem(jx_render *r, const jx_node *at, jv obj, jv key);
jv jx_call(jx_render *r, const jx_node *at, jv callee, const jx_args *a, jv caller);
jv jx_apply_filter(jx_render *r, const jx_node *at, const char *name, jv in, const jx_args *a);
bool jx_apply_test(jx_render *r, const jx_node *at, const char *name, jv in, const jx_args *a);
jv jx_call_method(jx_render *r, const jx_node *at, jv self, const char *name, const jx_args *a);
jv jx_call_builtin(jx_render *r, const jx_node *at, int id, const jx_args *a);
int jx_builtin_lookup(const char *name);     /* -1 when not a global function */
bool jx_has_method(jv self, const char *name);
/* iterate: list of items for a for-loop / filter input (dict: keys, str: chars) */
jv jx_iter_list(jx_render *r, const jx_node *at, jv v);
int jx_compare(jx_render *r, const jx_node *at, jv a, jv b);   /* <0, 0, >0 or fails */
void jx_step(jx_render *r, const jx_node *at);
/* Python's "fmt % args" (printf-style): %s %r %d %i %f %F %e %E %g %G %x %X %o %c %%,
 * with flags, width and precision; args is a tuple or a single value. */
jv jx_percent_format(jx_render *r, const jx_node *at, jv fmt, jv args);
