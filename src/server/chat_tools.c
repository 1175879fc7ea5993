/*
 * chat_tools.c — grammar cache, tool_choice grammars and the reasoning-budget
 * hook (see chat_tools.h).
 *
 * Threading: HTTP threads call chat_tools_prepare; the cache (and the shared
 * grammar vocabulary, built on first use) is guarded by ct->mu. A cached
 * template state is only ever cloned by the engine thread (engine.h:
 * engine_req_params.grammar), never advanced, so clones of it share one warm
 * mask cache. The hook's state is touched only by the engine thread.
 * Must not: answer HTTP or decode.
 */
#include "server/chat_tools.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"

#define CACHE_MAX 32   /* distinct grammars kept warm; more are compiled per request */

typedef struct cached_grammar {
    char *gbnf;
    ember_grammar *g;
    ember_grammar_state *tmpl;
} cached_grammar;

struct chat_tools {
    const server_text *text;
    ember_tool_format tool_format;
    ember_reasoning_syntax reasoning;
    pthread_mutex_t mu;
    ember_grammar_vocab *gv;          /* built on first use */
    cached_grammar cache[CACHE_MAX];
    int n_cache;
};

ember_status chat_tools_new(const server_text *text, const server_config *cfg, chat_tools **out)
{
    (void)cfg;
    chat_tools *ct = calloc(1, sizeof *ct);
    if (!ct) return ember_error(EMBER_ERR_NOMEM, "chat_tools");
    ct->text = text;
    ember_chat_detect_format(text->chat_template, &ct->tool_format, &ct->reasoning);
    pthread_mutex_init(&ct->mu, NULL);
    *out = ct;
    return EMBER_OK;
}

void chat_tools_free(chat_tools *ct)
{
    if (!ct) return;
    for (int i = 0; i < ct->n_cache; i++) {
        ember_grammar_state_free(ct->cache[i].tmpl);
        ember_grammar_free(ct->cache[i].g);
        free(ct->cache[i].gbnf);
    }
    ember_grammar_vocab_free(ct->gv);
    pthread_mutex_destroy(&ct->mu);
    free(ct);
}

ember_tool_format chat_tools_tool_format(const chat_tools *ct) { return ct->tool_format; }
ember_reasoning_syntax chat_tools_reasoning(const chat_tools *ct) { return ct->reasoning; }

/* ---------- tool_choice grammars ---------- */

typedef struct sbuf { char *p; size_t n, cap; bool oom; } sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* GBNF literal for raw text: "..." with ", \ and control bytes escaped. */
static void sb_literal(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; sb_put(b, esc, 2); }
        else if (c == '\n') sb_put(b, "\\n", 2);
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\x%02X", c); sb_str(b, esc); }
        else sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, "\"", 1);
}

/* Copy GBNF text with every rule name prefixed by `pfx` (so the rules of
 * several compiled schemas can live in one grammar). Skips "literals",
 * [classes], <token refs>, {bounds} and # comments. */
static void sb_prefixed(sbuf *b, const char *g, const char *pfx)
{
    for (const char *p = g; *p;) {
        char c = *p;
        if (c == '"' || c == '[' || c == '<') {
            char close = c == '"' ? '"' : c == '[' ? ']' : '>';
            const char *q = p + 1;
            while (*q && *q != close) q += (*q == '\\' && q[1]) ? 2 : 1;
            if (*q) q++;
            sb_put(b, p, (size_t)(q - p));
            p = q;
        } else if (c == '{' || c == '#') {
            const char *q = p;
            while (*q && *q != (c == '{' ? '}' : '\n')) q++;
            sb_put(b, p, (size_t)(q - p));
            p = q;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            const char *q = p;
            while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-' ||
                   *q == '_')
                q++;
            sb_str(b, pfx);
            sb_put(b, p, (size_t)(q - p));
            p = q;
        } else {
            sb_put(b, p, 1);
            p++;
        }
    }
}

/* The text around one call's arguments, and between calls, per format
 * (each from the template that renders the format, see chat_tools.h). */
typedef struct call_frame {
    const char *head_pre;     /* before the name */
    bool name_json;           /* the name as a JSON string (else raw) */
    const char *head_post;    /* after the name, before the arguments */
    const char *tail;         /* after the arguments */
    const char *sep;          /* between parallel calls */
    const char *open, *close; /* around all calls (Mistral's array form) */
    ember_schema_syntax syn;
} call_frame;

static bool frame_for(ember_tool_format f, const char *tmpl, call_frame *fr)
{
    switch (f) {
    case EMBER_TOOL_FORMAT_HERMES:
        *fr = (call_frame){"<tool_call>\n{\"name\": ", true, ", \"arguments\": ", "}\n</tool_call>", "\n", "", "",
                           EMBER_SCHEMA_JSON};
        return true;
    case EMBER_TOOL_FORMAT_LLAMA3:
        *fr = (call_frame){"{\"name\": ", true, ", \"parameters\": ", "}", NULL, "", "", EMBER_SCHEMA_JSON};
        return true;
    case EMBER_TOOL_FORMAT_GEMMA4:
        *fr = (call_frame){"<|tool_call>call:", false, "", "<tool_call|>", "", "", "", EMBER_SCHEMA_GEMMA4};
        return true;
    case EMBER_TOOL_FORMAT_QWEN3_CODER:
        *fr = (call_frame){"<tool_call>\n<function=", false, ">\n", "</function>\n</tool_call>", "\n", "", "",
                           EMBER_SCHEMA_XML_PARAMS};
        return true;
    case EMBER_TOOL_FORMAT_GENERIC:   /* chat/formats/generic.c */
        *fr = (call_frame){"{\"name\": ", true, ", \"arguments\": ", "}", ", ", "{\"tool_calls\": [", "]}",
                           EMBER_SCHEMA_JSON};
        return true;
    case EMBER_TOOL_FORMAT_MISTRAL:
        if (tmpl && strstr(tmpl, "[TOOL_CALLS][") && !strstr(tmpl, "[ARGS]"))   /* Mistral Nemo: a JSON array */
            *fr = (call_frame){"{\"name\": ", true, ", \"arguments\": ", "}", ", ", "[TOOL_CALLS][", "]",
                               EMBER_SCHEMA_JSON};
        else                                                                   /* Devstral, Small 3.2, Ministral 3 */
            *fr = (call_frame){"[TOOL_CALLS]", false, "[ARGS]", "", "", "", "", EMBER_SCHEMA_JSON};
        return true;
    default:
        return false;
    }
}

bool chat_tools_uses_generic(const chat_tools *ct, const oai_req *rq)
{
    /* "auto" under a client's own grammar (response_format / grammar) keeps that grammar and no tools */
    return ct->tool_format == EMBER_TOOL_FORMAT_NONE && rq->kind == OAI_CHAT && rq->tools &&
           rq->tool_choice != OAI_TOOL_CHOICE_NONE && !rq->gbnf;
}

/* An assistant message of the history with tool_calls, rewritten with its
 * calls as generic JSON content, as the model would have written them. NULL
 * when it has none (or out of memory: it is then left as it is). */
static json_t *generic_history_calls(json_t *msg)
{
    json_t *calls = json_object_get(msg, "tool_calls");
    if (!json_is_array(calls) || !json_array_size(calls)) return NULL;
    json_t *list = json_array();
    for (size_t i = 0; list && i < json_array_size(calls); i++) {
        json_t *fn = json_object_get(json_array_get(calls, i), "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        json_t *a = json_is_string(args) ? json_loads(json_string_value(args), JSON_DECODE_ANY, NULL) : NULL;
        if (!a) a = json_is_object(args) ? json_incref(args) : json_object();
        json_array_append_new(list, json_pack("{s:O, s:o}", "name", json_is_string(name) ? name : json_string(""),
                                              "arguments", a));
    }
    json_t *wrap = list ? json_pack("{s:o}", "tool_calls", list) : NULL;
    char *text = wrap ? json_dumps(wrap, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(wrap);
    json_t *m = text ? json_copy(msg) : NULL;
    if (m) {
        json_object_set_new(m, "content", json_string(text));
        json_object_del(m, "tool_calls");
    }
    free(text);
    return m;
}

json_t *chat_tools_generic_messages(const oai_req *rq)
{
    sbuf d = {0};
    sb_str(&d, "You can call these functions (each described as a JSON object with its parameters as a JSON "
               "schema):\n");
    for (size_t i = 0; i < json_array_size(rq->tools); i++) {
        json_t *fn = json_object_get(json_array_get(rq->tools, i), "function");
        if (!json_is_string(json_object_get(fn, "name"))) continue;
        if (rq->tool_choice == OAI_TOOL_CHOICE_NAMED && strcmp(json_string_value(json_object_get(fn, "name")),
                                                              rq->tool_name) != 0)
            continue;
        char *t = json_dumps(fn, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
        if (t) { sb_str(&d, t); sb_str(&d, "\n"); }
        free(t);
    }
    sb_str(&d, "\nTo call functions, reply with only this JSON object: {\"tool_calls\": [{\"name\": \"FUNCTION\", "
               "\"arguments\": {ARGUMENTS}}]}");
    if (rq->parallel_tool_calls && rq->tool_choice != OAI_TOOL_CHOICE_NAMED)
        sb_str(&d, " (one object in the list per call; several calls may be made at once)");
    if (rq->tool_choice == OAI_TOOL_CHOICE_AUTO)
        sb_str(&d, "\nTo answer without calling a function, reply with only this JSON object: "
                   "{\"response\": \"...\"} (your answer as the string)");
    if (d.oom) { free(d.p); return NULL; }
    json_t *msgs = json_copy(rq->messages);   /* the array; messages are shared, not changed */
    for (size_t i = 0; msgs && i < json_array_size(msgs); i++) {
        json_t *m = generic_history_calls(json_array_get(msgs, i));
        if (m) json_array_set_new(msgs, i, m);
    }
    json_t *first = json_array_get(msgs, 0);
    json_t *c = json_object_get(first, "content");
    const char *role = json_string_value(json_object_get(first, "role"));
    if (msgs && role && !strcmp(role, "system") && json_is_string(c)) {
        json_t *sys = json_copy(first);
        sbuf t = {0};
        sb_put(&t, json_string_value(c), json_string_length(c));
        sb_str(&t, "\n\n");
        sb_str(&t, d.p);
        if (sys && !t.oom) json_object_set_new(sys, "content", json_stringn(t.p, t.n));
        free(t.p);
        if (sys) json_array_set_new(msgs, 0, sys);
    } else if (msgs) {
        json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", d.p));
    }
    free(d.p);
    return msgs;
}

ember_status chat_tools_choice_gbnf(const oai_req *rq, ember_tool_format f, char **out, const char **param)
{
    return chat_tools_choice_gbnf_tmpl(rq, f, NULL, out, param);
}

ember_status chat_tools_choice_gbnf_tmpl(const oai_req *rq, ember_tool_format f, const char *chat_template,
                                         char **out, const char **param)
{
    *out = NULL;
    *param = "tool_choice";
    /* generic under "auto": the reply is calls or {"response": TEXT}, both held by the grammar */
    bool answer = f == EMBER_TOOL_FORMAT_GENERIC && rq->tool_choice == OAI_TOOL_CHOICE_AUTO;
    if (!rq->tools ||
        (rq->tool_choice != OAI_TOOL_CHOICE_REQUIRED && rq->tool_choice != OAI_TOOL_CHOICE_NAMED && !answer))
        return EMBER_OK;
    call_frame fr;
    if (!frame_for(f, chat_template, &fr))
        return ember_error(EMBER_ERR_UNSUPPORTED,
                           "tool_choice '%s' cannot be enforced: the chat template has no known tool-call format "
                           "(supported: hermes, llama3, gemma4, qwen3_coder, mistral, generic)",
                           rq->tool_choice == OAI_TOOL_CHOICE_NAMED ? "function" : "required");
    sbuf b = {0};
    sbuf calls = {0};
    int n_calls = 0;
    ember_status st = EMBER_OK;
    for (size_t i = 0; i < json_array_size(rq->tools) && st == EMBER_OK; i++) {
        json_t *fn = json_object_get(json_array_get(rq->tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name) continue;
        if (rq->tool_choice == OAI_TOOL_CHOICE_NAMED && strcmp(name, rq->tool_name) != 0) continue;
        /* a function declared without parameters takes none (OpenAI: arguments "{}") */
        json_t *params = json_object_get(fn, "parameters");
        json_t *schema = json_is_object(params) ? json_deep_copy(params)
                         : json_pack("{s:s, s:{}, s:b}", "type", "object", "properties", "additionalProperties", 0);
        if (!schema) { st = ember_error(EMBER_ERR_NOMEM, "tool schema"); break; }
        /* a call carries the declared arguments only (OpenAI's strict mode) */
        if (!json_object_get(schema, "additionalProperties") && json_object_get(schema, "properties"))
            json_object_set_new(schema, "additionalProperties", json_false());
        char *g = NULL;
        st = ember_json_schema_to_gbnf_syntax(schema, fr.syn, &g);
        json_decref(schema);
        if (st != EMBER_OK) { *param = "tools"; break; }
        char pfx[32], call[32];
        snprintf(pfx, sizeof pfx, "t%zu-", i);
        snprintf(call, sizeof call, "call%zu", i);
        sb_prefixed(&b, g, pfx);
        sb_str(&b, "\n");
        free(g);
        sbuf head = {0};
        sb_str(&head, fr.head_pre);
        if (fr.name_json) {
            /* JSON text of the name */
            json_t *jn = json_string(name);
            char *qn = jn ? json_dumps(jn, JSON_ENCODE_ANY) : NULL;
            json_decref(jn);
            if (!qn) { free(head.p); st = ember_error(EMBER_ERR_NOMEM, "tool name"); break; }
            sb_str(&head, qn);
            free(qn);
        } else {
            sb_str(&head, name);
        }
        sb_str(&head, fr.head_post);
        sb_str(&b, call);
        sb_str(&b, " ::= ");
        sb_literal(&b, head.p ? head.p : "");
        free(head.p);
        sb_str(&b, " ");
        sb_str(&b, pfx);
        sb_str(&b, "root ");
        sb_literal(&b, fr.tail);
        sb_str(&b, "\n");
        sb_str(&calls, n_calls ? " | " : "");
        sb_str(&calls, call);
        n_calls++;
    }
    if (st == EMBER_OK && n_calls == 0) {
        if (rq->tool_choice == OAI_TOOL_CHOICE_NAMED)
            st = ember_error(EMBER_ERR_NOT_FOUND, "tool_choice names function '%s', which is not among 'tools'",
                             rq->tool_name);
        else
            st = ember_error(EMBER_ERR_INVALID_ARG, "tool_choice '%s' needs at least one function in 'tools'",
                             answer ? "auto" : "required");
    }
    if (st == EMBER_OK && answer) {   /* the answer's JSON string */
        json_t *str = json_pack("{s:s}", "type", "string");
        char *g = NULL;
        st = str ? ember_json_schema_to_gbnf_syntax(str, EMBER_SCHEMA_JSON, &g)
                 : ember_error(EMBER_ERR_NOMEM, "tool grammar");
        json_decref(str);
        if (st == EMBER_OK) {
            sb_prefixed(&b, g, "answer-");
            sb_str(&b, "\nanswer ::= \"{\\\"response\\\": \" answer-root \"}\"\n");
        }
        free(g);
    }
    if (st == EMBER_OK) {
        sb_str(&b, "call ::= ");
        sb_str(&b, calls.p);
        sb_str(&b, "\n");
        /* a named function is called exactly once (OpenAI), whatever parallel_tool_calls says */
        bool many = rq->tool_choice != OAI_TOOL_CHOICE_NAMED && rq->parallel_tool_calls && fr.sep;
        sb_str(&b, answer ? "root ::= answer | " : "root ::= ");
        if (*fr.open) { sb_literal(&b, fr.open); sb_str(&b, " "); }
        sb_str(&b, "call");
        if (many) {
            sb_str(&b, " ( ");
            if (*fr.sep) { sb_literal(&b, fr.sep); sb_str(&b, " "); }
            sb_str(&b, "call )*");
        }
        if (*fr.close) { sb_str(&b, " "); sb_literal(&b, fr.close); }
        sb_str(&b, "\n");
        if (b.oom || calls.oom) st = ember_error(EMBER_ERR_NOMEM, "tool grammar");
    }
    free(calls.p);
    if (st != EMBER_OK) { free(b.p); return st; }
    *out = b.p;
    return EMBER_OK;
}

/* ---------- a thought before a forced call ---------- */

/* GBNF for one byte class: [^...] of the given ASCII bytes. */
static void sb_not(sbuf *b, const char *bytes)
{
    sb_str(b, "[^");
    for (const char *c = bytes; *c; c++) {
        char e[4] = {*c, 0};
        if (*c == '\n') sb_str(b, "\\n");
        else if (*c == ']' || *c == '\\' || *c == '^' || *c == '-') { e[0] = '\\'; e[1] = *c; sb_str(b, e); }
        else sb_str(b, e);
    }
    sb_str(b, "]");
}

/* Rule `name` for the text after a proper prefix pre (pre[0] == lead) of
 * one of `pats`: any byte that continues none of them and is not `lead`, or
 * a `lead` (a new prefix begins), or a byte that continues one, followed by
 * the rule for the longer prefix; a completed pattern has no alternative.
 * Every pattern is ASCII, starts with `lead` and has no other `lead`. */
static void sb_avoid_rule(sbuf *b, const char *const *pats, size_t n_pats, const char *pre, size_t len, int *id)
{
    char next[16] = {0};
    size_t nn = 0;
    for (size_t i = 0; i < n_pats; i++)
        if (strlen(pats[i]) > len && !strncmp(pats[i], pre, len) && !strchr(next, pats[i][len]) && nn < 15)
            next[nn++] = pats[i][len];
    char excl[18];
    snprintf(excl, sizeof excl, "%s%c", next, pre[0]);
    int me = (*id)++;
    char nm[32];
    snprintf(nm, sizeof nm, "th-p%d", me);
    sbuf alts = {0};
    sb_not(&alts, excl);
    sb_str(&alts, " | ");
    char lead[2] = {pre[0], 0};
    sb_literal(&alts, lead);
    sb_str(&alts, " th-p0");
    sbuf sub = {0};
    for (size_t k = 0; k < nn; k++) {
        char longer[64];
        if (len + 1 >= sizeof longer) break;
        memcpy(longer, pre, len);
        longer[len] = next[k];
        bool done = false;
        for (size_t i = 0; i < n_pats; i++) done |= strlen(pats[i]) == len + 1 && !strncmp(pats[i], longer, len + 1);
        if (done) continue;   /* the whole pattern: not text */
        char ch[2] = {next[k], 0}, rn[32];
        snprintf(rn, sizeof rn, " th-p%d", *id);
        sb_str(&alts, " | ");
        sb_literal(&alts, ch);
        sb_str(&alts, rn);
        sb_avoid_rule(&sub, pats, n_pats, longer, len + 1, id);
    }
    sb_str(b, nm);
    sb_str(b, " ::= ");
    sb_put(b, alts.p ? alts.p : "", alts.n);
    sb_str(b, "\n");
    sb_put(b, sub.p ? sub.p : "", sub.n);
    if (alts.oom || sub.oom) b->oom = true;
    free(alts.p);
    free(sub.p);
}

ember_status chat_tools_after_thought(const char *gbnf, ember_reasoning_syntax r, ember_tool_format f, char **out)
{
    *out = NULL;
    const char *close = r == EMBER_REASONING_THINK     ? "</think>"
                        : r == EMBER_REASONING_GEMMA4  ? "<channel|>"
                        : r == EMBER_REASONING_MISTRAL ? "[/THINK]"
                                                       : NULL;
    if (!gbnf || !close) return ember_error(EMBER_ERR_INVALID_ARG, "chat_tools_after_thought: no grammar or thought");
    /* Qwen3.5 may call from inside the thought (parse.h): the call ends it too */
    bool call_ends = f == EMBER_TOOL_FORMAT_QWEN3_CODER && r == EMBER_REASONING_THINK;
    const char *pats[2] = {close, "<tool_call>"};
    sbuf b = {0};
    sb_prefixed(&b, gbnf, "fc-");
    sb_str(&b, "\nth-text ::= ( ");
    char lead[2] = {close[0], 0};
    sb_not(&b, lead);
    sb_str(&b, " | ");
    sb_literal(&b, lead);
    sb_str(&b, " th-p0 )*\n");
    int id = 0;
    sb_avoid_rule(&b, pats, call_ends ? 2 : 1, lead, 1, &id);
    sb_str(&b, "th-ws ::= [ \\t\\n]{0,4}\n");
    sb_str(&b, call_ends ? "root ::= th-text ( " : "root ::= th-text ");
    sb_literal(&b, close);
    sb_str(&b, call_ends ? " th-ws )? fc-root\n" : " th-ws fc-root\n");
    if (b.oom) { free(b.p); return ember_error(EMBER_ERR_NOMEM, "tool grammar"); }
    *out = b.p;
    return EMBER_OK;
}

/* ---------- per-request state (the engine hook) ---------- */

typedef struct req_state {
    chat_tools *ct;
    ember_grammar *g;                 /* uncached grammar (owned) */
    ember_grammar_state *tmpl;
    ember_chat_parser *parser;        /* reasoning only: tells the budget when a thought is open */
    ember_reasoning_budget budget;
    ember_token *force;
    int32_t n_force;
    int32_t force_at;                 /* forced tokens the slot has taken so far */
    const char *close_text;           /* the close text handed out */
    const char *close_pending;        /* budget 0 with the thought open from the prompt: close at once */
} req_state;

static void rs_free(void *ud)
{
    req_state *r = ud;
    if (!r) return;
    ember_grammar_state_free(r->tmpl);
    ember_grammar_free(r->g);
    ember_chat_parser_free(r->parser);
    free(r->force);
    free(r);
}

static void rs_on_token(void *ud, ember_token t, const char *piece, int32_t n, const ember_token **force,
                        int32_t *n_force)
{
    (void)t;
    req_state *r = ud;
    if (!r->parser) return;
    if (n > 0) ember_chat_parser_feed(r->parser, piece, (size_t)n);
    if (r->force_at < r->n_force) {
        if (t == r->force[r->force_at]) {
            r->force_at++;
        } else {
            /* the slot dropped the forced close: its grammar refused it (a
             * tool-call grammar inside a UTF-8 character of the thought);
             * offer it again while the thought is still open */
            r->force_at = r->n_force;
            if (ember_chat_parser_in_reasoning(r->parser)) r->close_pending = r->close_text;
        }
        if (r->force_at < r->n_force) return;   /* the slot still holds r->force */
    }
    /* budget_next is asked before each sample: this call decides the token
     * after `t` (the first one was asked in chat_tools_prepare) */
    const char *close = r->close_pending ? r->close_pending : ember_reasoning_budget_next(&r->budget, r->parser);
    r->close_pending = NULL;
    if (!close) return;
    r->close_text = close;
    const server_text *tx = r->ct->text;
    free(r->force);
    r->force = NULL;
    r->n_force = 0;
    r->force_at = 0;
    if (tx->tokenize(tx->ud, close, strlen(close), false, true, &r->force, &r->n_force) != EMBER_OK) return;
    *force = r->force;
    *n_force = r->n_force;
}

/* Under ct->mu. */
static ember_status grammar_vocab(chat_tools *ct)
{
    if (ct->gv) return EMBER_OK;
    if (!ct->text->vocab)
        return ember_error(EMBER_ERR_UNSUPPORTED, "this server has no vocabulary for grammar-constrained decoding");
    return ember_grammar_vocab_from_tokenizer(ct->text->vocab, &ct->gv);
}

ember_status chat_tools_prepare(chat_tools *ct, const char *gbnf, int32_t budget, bool open_at_start,
                                engine_req_params *p)
{
    p->grammar = NULL;
    p->hook = (engine_req_hook){0};
    req_state *r = NULL;
    bool want_budget = budget >= 0 && ct->reasoning != EMBER_REASONING_NONE;
    if (!gbnf && !want_budget) return EMBER_OK;
    r = calloc(1, sizeof *r);
    if (!r) return ember_error(EMBER_ERR_NOMEM, "request state");
    r->ct = ct;
    ember_status st = EMBER_OK;
    if (gbnf) {
        pthread_mutex_lock(&ct->mu);
        st = grammar_vocab(ct);
        for (int i = 0; st == EMBER_OK && i < ct->n_cache; i++)
            if (!strcmp(ct->cache[i].gbnf, gbnf)) p->grammar = ct->cache[i].tmpl;
        if (st == EMBER_OK && !p->grammar) {
            ember_grammar *g = NULL;
            ember_grammar_state *tmpl = NULL;
            st = ember_grammar_parse(gbnf, strlen(gbnf), NULL, &g);
            if (st == EMBER_OK) st = ember_grammar_state_new(g, ct->gv, &tmpl);
            if (st == EMBER_OK) {
                char *key = ct->n_cache < CACHE_MAX ? strdup(gbnf) : NULL;
                if (key) {
                    ct->cache[ct->n_cache++] = (cached_grammar){.gbnf = key, .g = g, .tmpl = tmpl};
                } else {
                    r->g = g;
                    r->tmpl = tmpl;
                }
                p->grammar = tmpl;
            } else {
                ember_grammar_free(g);
            }
        }
        pthread_mutex_unlock(&ct->mu);
    }
    if (st == EMBER_OK && want_budget) {
        ember_chat_parser_config cfg = {.tool_format = EMBER_TOOL_FORMAT_NONE, .reasoning = ct->reasoning,
                                        .reasoning_open_at_start = open_at_start};
        st = ember_chat_parser_new(&cfg, &r->parser);
        ember_reasoning_budget_init(&r->budget, budget, ct->reasoning);
        /* the question before the first sample (it counts that token); the
         * engine cannot force before it, so a budget of 0 closes one late */
        if (st == EMBER_OK) r->close_pending = ember_reasoning_budget_next(&r->budget, r->parser);
    }
    if (st != EMBER_OK) { rs_free(r); p->grammar = NULL; return st; }
    p->hook = (engine_req_hook){.ud = r, .on_token = want_budget ? rs_on_token : NULL, .free = rs_free};
    return EMBER_OK;
}

bool chat_tools_prompt_opens(const chat_tools *ct, const ember_token *toks, int32_t n)
{
    if (ct->reasoning == EMBER_REASONING_NONE || n <= 0) return false;
    char tail[16 * 64 + 1];
    size_t len = 0;
    for (int32_t i = n > 16 ? n - 16 : 0; i < n; i++) {
        char buf[256];
        int32_t m = ct->text->token_piece(ct->text->ud, toks[i], buf, sizeof buf);
        if (m <= 0 || m > (int32_t)sizeof buf || len + (size_t)m > sizeof tail - 1) continue;
        memcpy(tail + len, buf, (size_t)m);
        len += (size_t)m;
    }
    tail[len] = 0;
    return ember_chat_prompt_opens_reasoning(tail, len, ct->reasoning);
}
