/*
 * http.c — libmicrohttpd daemon, routes, authentication, JSON responses and
 * server-sent events (see server.h).
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION with an
 * internal polling thread). A non-stream completion waits on its request in
 * the access handler; a stream is a response callback that blocks until the
 * engine commits more text. Both poll the socket for POLLRDHUP every 50 ms
 * and cancel the request when the client has gone, so the engine frees the
 * slot within one step; the completion notification cancels it as well.
 *
 * Limits against slow and greedy clients (docs/security.md): connections in
 * all and per client address, a short idle timeout until a request is
 * complete (and between keep-alive requests), bodies refused from their
 * Content-Length or as soon as a chunked upload crosses the limit.
 *
 * Must not: touch the model, or hold a request's lock while writing.
 */
#include "server/server.h"

#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "base/status.h"
#include "chat/template.h"
#include "server/chat_tools.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/webui.h"

struct server {
    server_config cfg;
    engine *e;
    server_text text;
    struct MHD_Daemon *d;
    int port;
    int64_t created;
    atomic_uint_fast64_t n_http, n_http_errors, next_id;
    atomic_int n_active;      /* completions in flight (streams until their last byte) */
    chat_tools *ct;           /* grammars, tool calls, thinking */
    int thinking_default;     /* enable_thinking when neither the request nor --chat-template-kwargs sets it:
                                 -1 none (the template's own default), 0 false, 1 true (--reasoning) */
    /* parse/render memory of the requests being parsed and rendered, in all
     * (mem_enter): bytes reserved, and the cap */
    pthread_mutex_t mem_mu;
    pthread_cond_t mem_cv;
    size_t mem_used, mem_cap;
};

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_large;     /* the body passed cfg.max_body_bytes (announced or received); the rest is not kept */
    bool answered;      /* the 413 was queued before the body was read (announced Content-Length) */
    engine_req *req;    /* a non-stream request in flight (cancel on abort) */
} conn;

/* ---------- responses ---------- */

/* The value of Access-Control-Allow-Origin for this request, or NULL for
 * none. CORS is opt-in (--cors-origin): "*" lets every origin read answers;
 * a list ("https://a.example,http://localhost:3000") echoes the request's
 * Origin header when it is one of them, byte for byte (Fetch standard, CORS
 * protocol: the origin is serialized scheme://host[:port]). */
static const char *cors_allow_origin(const server *s, struct MHD_Connection *mc)
{
    const char *list = s->cfg.cors_origin;
    if (!list || !list[0]) return NULL;
    if (!strcmp(list, "*")) return "*";
    const char *o = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    if (!o || !o[0]) return NULL;
    size_t n = strlen(o);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t m = strcspn(p, ", ");
        if (m == n && !memcmp(p, o, n)) return o;
        p += m;
    }
    return NULL;
}

/* Headers every answer carries: Server, and the CORS ones when enabled. */
static void add_common_headers(const server *s, struct MHD_Connection *mc, struct MHD_Response *r)
{
    MHD_add_response_header(r, "Server", "ember/" EMBER_VERSION);
    const char *origin = cors_allow_origin(s, mc);
    if (s->cfg.cors_origin && strcmp(s->cfg.cors_origin, "*") != 0) MHD_add_response_header(r, "Vary", "Origin");
    if (origin) MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
}

static enum MHD_Result send_text_h(server *s, struct MHD_Connection *mc, unsigned status, const char *ctype, char *body,
                                   size_t len, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (allow) MHD_add_response_header(r, "Allow", allow);
    add_common_headers(s, mc, r);
    enum MHD_Result ret = MHD_queue_response(mc, status, r);
    MHD_destroy_response(r);
    return ret;
}


/* j (consumed) as the JSON body; `allow`: an Allow header (405) or NULL */
static enum MHD_Result send_json_h(server *s, struct MHD_Connection *mc, unsigned status, json_t *j, const char *allow)
{
    if (status >= 400) atomic_fetch_add(&s->n_http_errors, 1);
    char *body = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (!body) body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    if (!body) return MHD_NO;
    return send_text_h(s, mc, status, "application/json; charset=utf-8", body, strlen(body), allow);
}

static enum MHD_Result send_json(server *s, struct MHD_Connection *mc, unsigned status, json_t *j)
{
    return send_json_h(s, mc, status, j, NULL);
}

static enum MHD_Result send_error(server *s, struct MHD_Connection *mc, const oai_error *err)
{
    return send_json(s, mc, (unsigned)err->http_status, oai_error_json(err));
}

static enum MHD_Result fail(server *s, struct MHD_Connection *mc, int status, const char *type, const char *param,
                            const char *code, const char *msg)
{
    oai_error err;
    oai_error_set(&err, status, type, param, code, "%s", msg);
    return send_error(s, mc, &err);
}

static int conn_fd(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The peer closed its side (or the socket broke). HTTP clients do not
 * half-close while waiting for an answer, so this means it went away. */
static bool client_gone(int fd)
{
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* ---------- parse/render memory ---------- */

/* A request's JSON body is parsed, normalized and rendered on its HTTP
 * thread. Pathological bodies (half a million empty messages in 15 MiB)
 * need ~16 bytes of jansson objects per body byte, and eight of them at once
 * would need gigabytes. So each request reserves MEM_PER_BODY_BYTE x its
 * body + MEM_BASE from a server-wide cap (MEM_CAP_DEFAULT, stated in
 * docs/security.md) before it parses, waiting while others hold it (one
 * request may always go alone), and gives it back once its prompt is
 * tokenized. jansson's allocations on the thread meanwhile are counted
 * (mem_malloc) and fail past the reservation, which the request answers
 * with 413: the bound holds whatever the body's shape. */
#define MEM_PER_BODY_BYTE 32
#define MEM_BASE ((size_t)1 << 20)
#define MEM_CAP_DEFAULT ((size_t)512 << 20)
#define MEM_TRIM_ABOVE ((size_t)32 << 20)

static _Thread_local struct { size_t limit, used; bool over; } tl_mem;   /* limit 0: not counting */

static void *mem_malloc(size_t n)
{
    if (tl_mem.limit) {
        if (tl_mem.used + n > tl_mem.limit) { tl_mem.over = true; return NULL; }
        tl_mem.used += n;
    }
    return malloc(n);
}

static size_t mem_enter(server *s, size_t body_len)
{
    size_t want = body_len > (s->mem_cap - MEM_BASE) / MEM_PER_BODY_BYTE ? s->mem_cap
                                                                          : body_len * MEM_PER_BODY_BYTE + MEM_BASE;
    pthread_mutex_lock(&s->mem_mu);
    while (s->mem_used && s->mem_used + want > s->mem_cap) pthread_cond_wait(&s->mem_cv, &s->mem_mu);
    s->mem_used += want;
    pthread_mutex_unlock(&s->mem_mu);
    tl_mem.limit = want;
    tl_mem.used = 0;
    tl_mem.over = false;
    return want;
}

static void mem_leave(server *s, size_t held)
{
    tl_mem.limit = 0;
    /* each connection thread mallocs from its own glibc arena, which keeps
     * freed pages: give a big request's back to the system, else the cap
     * bounds what is live but not what stays resident */
    if (held >= MEM_TRIM_ABOVE) malloc_trim(0);
    pthread_mutex_lock(&s->mem_mu);
    s->mem_used -= held;
    pthread_cond_broadcast(&s->mem_cv);
    pthread_mutex_unlock(&s->mem_mu);
}

/* The answer when a request ran past its reservation (tl_mem.over). */
static void mem_exceeded(const server *s, size_t held, oai_error *err)
{
    oai_error_set(err, 413, "invalid_request_error", NULL, "request_too_large",
                  "The request needs more than %zu MiB to parse and render (at most %d bytes per body byte; "
                  "the server holds %zu MiB for all requests being parsed): send fewer or larger values.",
                  held >> 20, MEM_PER_BODY_BYTE, s->mem_cap >> 20);
}

/* ---------- helpers ---------- */

static json_t *parse_body(conn *c, oai_error *err)
{
    if (c->len == 0) {
        oai_error_set(err, 400, "invalid_request_error", NULL, NULL, "The request body is empty; expected a JSON object.");
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(c->body, c->len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        oai_error_set(err, 400, "invalid_request_error", NULL, NULL,
                      "We could not parse the JSON body of your request: %s (line %d, column %d).", je.text, je.line,
                      je.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        oai_error_set(err, 400, "invalid_request_error", NULL, NULL, "The request body must be a JSON object.");
        return NULL;
    }
    return j;
}

static void make_id(server *s, const char *prefix, char *out, size_t cap)
{
    uint64_t n = atomic_fetch_add(&s->next_id, 1);
    uint64_t x = ((uint64_t)time(NULL) << 20) ^ (n * 0x9E3779B97F4A7C15ull);
    snprintf(out, cap, "%s%016llx%04llx", prefix, (unsigned long long)x, (unsigned long long)(n & 0xffff));
}

static int32_t piece_fn(void *ud, ember_token t, char *buf, int32_t cap)
{
    server *s = ud;
    return s->text.token_piece(s->text.ud, t, buf, cap);
}

/* --chat-template-kwargs merged with the request's own (new reference), over
 * the --reasoning default of enable_thinking. */
static json_t *template_kwargs(const server *s, const oai_req *rq)
{
    json_t *kw = json_object();
    if (s->thinking_default >= 0) json_object_set_new(kw, "enable_thinking", json_boolean(s->thinking_default));
    if (s->cfg.template_kwargs) json_object_update(kw, s->cfg.template_kwargs);
    if (rq->template_kwargs) json_object_update(kw, rq->template_kwargs);
    return kw;
}

/* A render that failed, as an answer: the template's own error, a message it
 * cannot continue and a render limit hit by the messages are the request's
 * (400); running out of memory or a broken context are the server's. */
static bool render_failed(ember_status st, oai_error *err)
{
    bool client = st == EMBER_ERR_FORMAT || st == EMBER_ERR_RANGE;
    oai_error_set(err, client ? 400 : 500, client ? "invalid_request_error" : "server_error", client ? "messages" : NULL,
                  NULL, "The chat template failed on these messages: %s", ember_last_error());
    return false;
}

/* Render the request's messages (with its add_generation_prompt /
 * continue_final). */
static bool render_chat(server *s, const oai_req *rq, char **prompt, oai_error *err)
{
    json_t *kw = template_kwargs(s, rq);
    ember_status st = s->text.apply_template(s->text.ud, rq->messages, rq->tools, kw, rq->add_generation_prompt,
                                             rq->continue_final, prompt);
    json_decref(kw);
    return st == EMBER_OK || render_failed(st, err);
}

/* A template that writes bos_token itself plus add_bos: keep one. */
static void drop_double_bos(const server *s, ember_token *toks, int32_t *n)
{
    if (s->text.bos >= 0 && *n >= 2 && toks[0] == s->text.bos && toks[1] == s->text.bos) {
        memmove(toks, toks + 1, sizeof *toks * (size_t)(*n - 1));
        (*n)--;
    }
}

static bool tokenize_prompt(server *s, const char *text, ember_token **toks, int32_t *n, oai_error *err)
{
    ember_status st = s->text.tokenize(s->text.ud, text, strlen(text), true, true, toks, n);
    if (st != EMBER_OK) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "tokenizer: %s", ember_last_error());
        return false;
    }
    drop_double_bos(s, *toks, n);
    return true;
}

/* The prompt tokens of a chat request: rendered and tokenized in one go when
 * the text side can (control-token text in contents stays text), else
 * rendered, then tokenized with parse_special. */
static bool chat_prompt_tokens(server *s, const oai_req *rq, ember_token **toks, int32_t *n, oai_error *err)
{
    if (!s->text.render_tokens) {
        char *prompt = NULL;
        bool ok = render_chat(s, rq, &prompt, err) && tokenize_prompt(s, prompt, toks, n, err);
        free(prompt);
        return ok;
    }
    json_t *kw = template_kwargs(s, rq);
    ember_status st = s->text.render_tokens(s->text.ud, rq->messages, rq->tools, kw, rq->add_generation_prompt,
                                            rq->continue_final, toks, n);
    json_decref(kw);
    if (st != EMBER_OK) return render_failed(st, err);
    drop_double_bos(s, *toks, n);
    return true;
}

/* ---------- streaming ---------- */

typedef struct stream {
    server *s;
    oai_req rq;
    engine_req *r;
    int fd;
    char id[64];
    int64_t created;
    size_t text_sent;
    int32_t toks_sent;
    bool first_sent, done;
    char *out;
    size_t out_len, out_off, out_cap;
    ember_chat_parser *parser;   /* chat with tools or thinking: deltas come from parser events */
    json_t *deltas;              /* the events' delta objects of one produce round */
    bool saw_tool_call;
} stream;

static void out_append(stream *st, const char *p, size_t n)
{
    if (st->out_len + n > st->out_cap) {
        size_t cap = st->out_cap ? st->out_cap : 1024;
        while (cap < st->out_len + n) cap *= 2;
        char *o = realloc(st->out, cap);
        if (!o) return;
        st->out = o;
        st->out_cap = cap;
    }
    memcpy(st->out + st->out_len, p, n);
    st->out_len += n;
}

static void out_event(stream *st, json_t *j)
{
    char *d = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!d) return;
    out_append(st, "data: ", 6);
    out_append(st, d, strlen(d));
    out_append(st, "\n\n", 2);
    free(d);
}

static void result_from(const stream *st, const engine_req *r, oai_result *res)
{
    *res = (oai_result){.id = st->id, .model = st->s->cfg.alias, .created = st->created, .finish = r->finish,
                        .n_prompt = r->n_prompt, .n_cached = r->n_cached, .n_generated = r->n_generated,
                        .draft_n = r->n_draft, .draft_n_accepted = r->n_draft_accepted,
                        .t_start = r->t_start, .t_first_token = r->t_first_token, .t_end = r->t_end};
}

static void on_chat_event(void *user, const ember_chat_event *ev)
{
    stream *st = user;
    if (ev->kind == EMBER_CHAT_EV_TOOL_START) st->saw_tool_call = true;
    /* no empty content / reasoning delta is ever sent */
    if ((ev->kind == EMBER_CHAT_EV_CONTENT || ev->kind == EMBER_CHAT_EV_REASONING) && ev->len == 0) return;
    json_t *d = NULL;
    if (ember_chat_event_delta(ev, &d) == EMBER_OK && d) json_array_append_new(st->deltas, d);
}

/* The parser path of stream_produce: feed the new text, send one chunk per
 * event (logprobs ride on the first), and the finish chunk at the end. */
static void stream_parsed(stream *st, const oai_result *res, const char *delta, size_t n_delta, int32_t tok_from,
                          int32_t tok_to, bool fin)
{
    if (!st->first_sent) out_event(st, oai_chat_role_chunk(&st->rq, res));
    if (n_delta) ember_chat_parser_feed(st->parser, delta, n_delta);
    if (fin && res->finish == ENGINE_FINISH_LENGTH) ember_chat_parser_finish_cut(st->parser);
    else if (fin) ember_chat_parser_finish(st->parser);
    bool lp_sent = tok_to <= tok_from || !st->rq.logprobs;   /* a chunk with neither delta nor logprobs is not sent */
    for (size_t i = 0; i < json_array_size(st->deltas); i++) {
        out_event(st, oai_chat_delta_chunk(&st->rq, res, json_incref(json_array_get(st->deltas, i)), NULL,
                                           lp_sent ? 0 : tok_from, lp_sent ? 0 : tok_to, piece_fn, st->s));
        lp_sent = true;
    }
    json_array_clear(st->deltas);
    if (!lp_sent) out_event(st, oai_chat_delta_chunk(&st->rq, res, NULL, NULL, tok_from, tok_to, piece_fn, st->s));
    if (fin) {
        const char *fr = st->saw_tool_call && res->finish != ENGINE_FINISH_LENGTH ? "tool_calls"
                                                                                  : oai_finish_reason(res->finish);
        out_event(st, oai_chat_delta_chunk(&st->rq, res, NULL, fr ? fr : "stop", 0, 0, piece_fn, st->s));
    }
}

/* Wait for news from the engine and format it as SSE events. Returns false
 * when the client went away. */
static bool stream_produce(stream *st)
{
    engine_req *r = st->r;
    engine_req_lock(r);
    while (r->text_len == st->text_sent && r->n_toks == st->toks_sent && r->finish == ENGINE_RUNNING && st->first_sent) {
        if (!engine_req_wait(r, 50)) {
            engine_req_unlock(r);
            if (client_gone(st->fd)) return false;
            engine_req_lock(r);
        }
    }
    size_t n_delta = r->text_len - st->text_sent;
    char *delta = malloc(n_delta + 1);
    if (delta && n_delta) memcpy(delta, r->text + st->text_sent, n_delta);
    int32_t tok_to = r->n_toks, tok_from = st->toks_sent;
    engine_tok *toks = NULL;
    if (tok_to > tok_from) {
        toks = malloc(sizeof *toks * (size_t)tok_to);
        if (toks) memcpy(toks + tok_from, r->toks + tok_from, sizeof *toks * (size_t)(tok_to - tok_from));
    }
    oai_result res;
    result_from(st, r, &res);
    engine_req_unlock(r);
    res.toks = toks;
    res.n_toks = tok_to;
    if (!delta) n_delta = 0;

    bool fin = res.finish != ENGINE_RUNNING;
    if (res.finish == ENGINE_FINISH_ERROR || res.finish == ENGINE_FINISH_CANCELLED) {
        oai_error err;
        engine_req_lock(r);
        oai_error_set(&err, res.finish == ENGINE_FINISH_ERROR ? 500 : 503, "server_error", NULL, NULL, "%s",
                      r->err[0] ? r->err : "the request was cancelled");
        engine_req_unlock(r);
        out_event(st, oai_error_json(&err));
    } else if (st->parser) {
        stream_parsed(st, &res, delta, n_delta, tok_from, toks ? tok_to : tok_from, fin);
    } else {
        if (st->rq.kind == OAI_CHAT && !st->first_sent) out_event(st, oai_chat_role_chunk(&st->rq, &res));
        if (n_delta > 0 || (toks && tok_to > tok_from && st->rq.logprobs))
            out_event(st, oai_chunk_json(st->rq.kind, &st->rq, &res, delta, n_delta, tok_from, toks ? tok_to : tok_from,
                                         false, piece_fn, st->s));
        if (fin) out_event(st, oai_chunk_json(st->rq.kind, &st->rq, &res, "", 0, 0, 0, true, piece_fn, st->s));
    }
    if (fin && st->rq.include_usage && res.finish != ENGINE_FINISH_ERROR && res.finish != ENGINE_FINISH_CANCELLED)
        out_event(st, oai_usage_chunk(&st->rq, &res));
    if (fin) {
        out_append(st, "data: [DONE]\n\n", 14);
        st->done = true;
    }
    st->first_sent = true;
    st->text_sent += n_delta;
    st->toks_sent = tok_to;
    free(delta);
    free(toks);
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream *st = cls;
    for (;;) {
        if (st->out_off < st->out_len) {
            size_t n = st->out_len - st->out_off;
            if (n > max) n = max;
            memcpy(buf, st->out + st->out_off, n);
            st->out_off += n;
            if (st->out_off == st->out_len) st->out_off = st->out_len = 0;
            return (ssize_t)n;
        }
        if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_produce(st)) {
            engine_req_cancel(st->r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls)
{
    stream *st = cls;
    atomic_fetch_sub(&st->s->n_active, 1);
    engine_req_cancel(st->r);    /* no-op when finished; frees the slot when the client left */
    engine_req_release(st->r);
    oai_req_free(&st->rq);
    ember_chat_parser_free(st->parser);
    json_decref(st->deltas);
    free(st->out);
    free(st);
}

/* ---------- completions ---------- */

/* Structured output, tool calls and thinking for one request: the grammar
 * (response_format / grammar / json_schema, or the one tool_choice required
 * / named needs), the reasoning-budget hook, and whether (and how) the
 * output goes through the chat parser. False with *err (400/500). */
static bool prepare_structured(server *s, const oai_req *rq, const ember_token *toks, int32_t n_toks,
                               engine_req_params *ep, ember_chat_parser_config *pcfg, bool *use_parser, oai_error *err)
{
    *use_parser = false;
    memset(pcfg, 0, sizeof *pcfg);
    char *tool_gbnf = NULL;
    const char *gbnf = rq->gbnf;
    bool open = false;
    int32_t budget = -1;
    if (rq->kind == OAI_CHAT) {
        ember_tool_format tf = chat_tools_uses_generic(s->ct, rq) ? EMBER_TOOL_FORMAT_GENERIC
                                                                  : chat_tools_tool_format(s->ct);
        ember_reasoning_syntax rs = chat_tools_reasoning(s->ct);
        const char *param = "tool_choice";
        ember_status st = chat_tools_choice_gbnf_tmpl(rq, tf, s->text.chat_template, &tool_gbnf, &param);
        if (st != EMBER_OK) {
            oai_error_set(err, st == EMBER_ERR_NOMEM ? 500 : 400, "invalid_request_error", param, NULL, "%s",
                          ember_last_error());
            return false;
        }
        if (tool_gbnf) gbnf = tool_gbnf;
        open = chat_tools_prompt_opens(s->ct, toks, n_toks);
        budget = rq->reasoning_budget != -2 ? rq->reasoning_budget
                 : s->cfg.has_reasoning_budget ? s->cfg.reasoning_budget : -1;
        pcfg->tool_format = rq->tools && rq->tool_choice != OAI_TOOL_CHOICE_NONE ? tf : EMBER_TOOL_FORMAT_NONE;
        pcfg->reasoning = s->cfg.reasoning_format_none ? EMBER_REASONING_NONE : rs;
        pcfg->reasoning_open_at_start = open && pcfg->reasoning != EMBER_REASONING_NONE;
        pcfg->stream_arguments = true;
        *use_parser = pcfg->tool_format != EMBER_TOOL_FORMAT_NONE || pcfg->reasoning != EMBER_REASONING_NONE;
    }
    ember_status st = chat_tools_prepare(s->ct, gbnf, budget, open, ep);
    free(tool_gbnf);
    if (st != EMBER_OK) {
        bool client = st == EMBER_ERR_FORMAT || st == EMBER_ERR_NOT_FOUND || st == EMBER_ERR_INVALID_ARG ||
                      st == EMBER_ERR_UNSUPPORTED;
        oai_error_set(err, client ? 400 : 500, client ? "invalid_request_error" : "server_error",
                      rq->gbnf ? rq->gbnf_param : "tool_choice", NULL, "%s", ember_last_error());
        return false;
    }
    return true;
}

/* Body -> validated request -> prompt tokens. False with *err. */
static bool completion_prompt(server *s, conn *c, oai_kind kind, oai_req *rq, ember_token **toks, int32_t *n_toks,
                              oai_error *err)
{
    memset(rq, 0, sizeof *rq);
    json_t *body = parse_body(c, err);
    if (!body) return false;
    bool ok = oai_parse(body, kind, s->text.n_vocab, rq, err);
    json_decref(body);
    if (!ok) return false;
    if (chat_tools_uses_generic(s->ct, rq)) {   /* a forced call, and the template has no call format */
        json_t *m = chat_tools_generic_messages(rq);
        if (!m) {
            oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return false;
        }
        json_decref(rq->messages);
        rq->messages = m;
    }
    if (kind == OAI_CHAT) return chat_prompt_tokens(s, rq, toks, n_toks, err);
    if (rq->prompt) return tokenize_prompt(s, rq->prompt, toks, n_toks, err);
    *toks = rq->prompt_tokens;
    *n_toks = rq->n_prompt_tokens;
    rq->prompt_tokens = NULL;
    return true;
}

static enum MHD_Result handle_completion(server *s, struct MHD_Connection *mc, conn *c, oai_kind kind)
{
    oai_error err;
    oai_req rq;
    ember_token *toks = NULL;
    int32_t n_toks = 0;
    size_t held = mem_enter(s, c->len);
    bool ok = completion_prompt(s, c, kind, &rq, &toks, &n_toks, &err);
    if (tl_mem.over) mem_exceeded(s, held, &err);
    ok = ok && !tl_mem.over;
    mem_leave(s, held);
    if (!ok) { free(toks); oai_req_free(&rq); return send_error(s, mc, &err); }

    engine_req_params ep = {.prompt = toks, .n_prompt = n_toks, .n_predict = rq.max_tokens, .sampling = rq.sampling,
                            .n_stop = rq.n_stop, .logprobs = rq.logprobs, .top_logprobs = rq.top_logprobs,
                            .ignore_eos = rq.ignore_eos};
    for (int32_t i = 0; i < rq.n_stop; i++) ep.stop[i] = rq.stop[i];
    ember_chat_parser_config pcfg;
    bool use_parser = false;
    if (!prepare_structured(s, &rq, toks, n_toks, &ep, &pcfg, &use_parser, &err)) {
        free(toks);
        oai_req_free(&rq);
        return send_error(s, mc, &err);
    }
    engine_req *r = NULL;
    ember_status st = engine_submit(s->e, &ep, &r);
    free(toks);
    if (st != EMBER_OK) {
        const char *param = kind == OAI_CHAT ? "messages" : "prompt";
        if (st == EMBER_ERR_RANGE) {
            /* OpenAI's code, llama-server's type and numbers (its clients key on either) */
            engine_stats es;
            engine_get_stats(s->e, &es, NULL);
            oai_error_set(&err, 400, OAI_ERR_EXCEED_CONTEXT, param, "context_length_exceeded", "%s",
                          ember_last_error());
            err.n_prompt_tokens = n_toks;
            err.n_ctx = es.n_ctx;
        } else if (st == EMBER_ERR_NOMEM || st == EMBER_ERR_IO)
            oai_error_set(&err, 503, "server_error", NULL, NULL, "%s", ember_last_error());
        else
            oai_error_set(&err, 400, "invalid_request_error", param, NULL, "%s", ember_last_error());
        oai_req_free(&rq);
        return send_error(s, mc, &err);
    }

    atomic_fetch_add(&s->n_active, 1);
    if (rq.stream) {
        stream *sm = calloc(1, sizeof *sm);
        if (!sm) {
            atomic_fetch_sub(&s->n_active, 1);
            engine_req_cancel(r);
            engine_req_release(r);
            oai_req_free(&rq);
            return MHD_NO;
        }
        sm->s = s;
        sm->rq = rq;
        sm->r = r;
        sm->fd = conn_fd(mc);
        sm->created = (int64_t)time(NULL);
        if (use_parser) {
            pcfg.tools = sm->rq.tools;
            pcfg.on_event = on_chat_event;
            pcfg.user = sm;
            sm->deltas = json_array();
            if (!sm->deltas || ember_chat_parser_new(&pcfg, &sm->parser) != EMBER_OK) { stream_free(sm); return MHD_NO; }
        }
        make_id(s, kind == OAI_CHAT ? "chatcmpl-" : "cmpl-", sm->id, sizeof sm->id);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sm, stream_free);
        if (!resp) { stream_free(sm); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_common_headers(s, mc, resp);
        enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }

    int fd = conn_fd(mc);
    c->req = r;
    engine_req_lock(r);
    double t_check = engine_now();
    while (r->finish == ENGINE_RUNNING) {
        engine_req_wait(r, 50);
        if (engine_now() - t_check >= 0.05) {   /* tokens may wake us often: check by time */
            t_check = engine_now();
            engine_req_unlock(r);
            if (client_gone(fd)) {
                engine_req_cancel(r);
                atomic_fetch_sub(&s->n_active, 1);
                c->req = NULL;
                engine_req_release(r);
                oai_req_free(&rq);
                return MHD_NO;
            }
            engine_req_lock(r);
        }
    }
    engine_req_unlock(r);
    c->req = NULL;
    enum MHD_Result ret;
    if (r->finish == ENGINE_FINISH_ERROR || r->finish == ENGINE_FINISH_CANCELLED) {
        oai_error_set(&err, r->finish == ENGINE_FINISH_ERROR ? 500 : 503, "server_error", NULL, NULL, "%s",
                      r->err[0] ? r->err : "the request was cancelled");
        ret = send_error(s, mc, &err);
    } else {
        char id[64];
        make_id(s, kind == OAI_CHAT ? "chatcmpl-" : "cmpl-", id, sizeof id);
        oai_result res = {.id = id, .model = s->cfg.alias, .created = (int64_t)time(NULL), .text = r->text,
                          .text_len = r->text_len, .finish = r->finish, .n_prompt = r->n_prompt,
                          .n_cached = r->n_cached, .n_generated = r->n_generated, .t_start = r->t_start,
                          .draft_n = r->n_draft, .draft_n_accepted = r->n_draft_accepted,
                          .t_first_token = r->t_first_token, .t_end = r->t_end, .toks = r->toks, .n_toks = r->n_toks};
        if (use_parser) {
            pcfg.tools = rq.tools;
            if (ember_chat_parse_whole_cut(&pcfg, r->text, r->text_len, r->finish == ENGINE_FINISH_LENGTH,
                                           &res.message) != EMBER_OK)
                res.message = NULL;
        }
        ret = send_json(s, mc, 200, oai_result_json(kind, &rq, &res, piece_fn, s));
        json_decref(res.message);
    }
    engine_req_release(r);
    oai_req_free(&rq);
    atomic_fetch_sub(&s->n_active, 1);
    return ret;
}

/* ---------- small endpoints ---------- */

static enum MHD_Result handle_tokenize(server *s, struct MHD_Connection *mc, conn *c)
{
    oai_error err;
    json_t *body = parse_body(c, &err);
    if (!body) return send_error(s, mc, &err);
    json_t *content = json_object_get(body, "content");
    json_t *as = json_object_get(body, "add_special");
    json_t *ps = json_object_get(body, "parse_special");
    json_t *wp = json_object_get(body, "with_pieces");
    enum MHD_Result ret;
    if (!json_is_string(content)) {
        ret = fail(s, mc, 400, "invalid_request_error", "content", NULL,
                   content ? "Invalid type for 'content': expected a string." : "Missing required parameter: 'content'.");
    } else if ((as && !json_is_boolean(as)) || (ps && !json_is_boolean(ps)) || (wp && !json_is_boolean(wp))) {
        ret = fail(s, mc, 400, "invalid_request_error", NULL, NULL,
                   "Invalid type: 'add_special', 'parse_special' and 'with_pieces' must be booleans.");
    } else {
        ember_token *toks = NULL;
        int32_t n = 0;
        ember_status st = s->text.tokenize(s->text.ud, json_string_value(content), json_string_length(content),
                                           json_is_true(as), ps ? json_is_true(ps) : true, &toks, &n);
        if (st != EMBER_OK) {
            ret = fail(s, mc, 500, "server_error", NULL, NULL, ember_last_error());
        } else {
            json_t *arr = json_array();
            for (int32_t i = 0; i < n; i++) {
                if (json_is_true(wp)) {
                    char buf[256];
                    int32_t m = s->text.token_piece(s->text.ud, toks[i], buf, sizeof buf);
                    if (m < 0 || m > (int32_t)sizeof buf) m = 0;
                    json_array_append_new(arr, json_pack("{s:i, s:o}", "id", toks[i], "piece",
                                                         oai_json_string(buf, (size_t)m)));
                } else {
                    json_array_append_new(arr, json_integer(toks[i]));
                }
            }
            free(toks);
            ret = send_json(s, mc, 200, json_pack("{s:o}", "tokens", arr));
        }
    }
    json_decref(body);
    return ret;
}

static enum MHD_Result handle_detokenize(server *s, struct MHD_Connection *mc, conn *c)
{
    oai_error err;
    json_t *body = parse_body(c, &err);
    if (!body) return send_error(s, mc, &err);
    json_t *tokens = json_object_get(body, "tokens");
    enum MHD_Result ret;
    if (!json_is_array(tokens)) {
        ret = fail(s, mc, 400, "invalid_request_error", "tokens", NULL,
                   tokens ? "Invalid type for 'tokens': expected an array of token ids."
                          : "Missing required parameter: 'tokens'.");
        json_decref(body);
        return ret;
    }
    size_t n = json_array_size(tokens), len = 0, cap = 256;
    char *out = malloc(cap);
    for (size_t i = 0; out && i < n; i++) {
        json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= s->text.n_vocab) {
            char msg[128];
            snprintf(msg, sizeof msg, "Invalid 'tokens[%zu]': expected a token id in [0, %d).", i, s->text.n_vocab);
            free(out);
            json_decref(body);
            return fail(s, mc, 400, "invalid_request_error", "tokens", NULL, msg);
        }
        char buf[256];
        int32_t m = s->text.token_piece(s->text.ud, (ember_token)json_integer_value(t), buf, sizeof buf);
        if (m < 0 || m > (int32_t)sizeof buf) m = 0;
        if (len + (size_t)m > cap) {
            while (len + (size_t)m > cap) cap *= 2;
            char *o = realloc(out, cap);
            if (!o) { free(out); out = NULL; break; }
            out = o;
        }
        memcpy(out + len, buf, (size_t)m);
        len += (size_t)m;
    }
    json_decref(body);
    if (!out) return fail(s, mc, 500, "server_error", NULL, NULL, "out of memory");
    ret = send_json(s, mc, 200, json_pack("{s:o}", "content", oai_json_string(out, len)));
    free(out);
    return ret;
}

static enum MHD_Result handle_apply_template(server *s, struct MHD_Connection *mc, conn *c)
{
    oai_error err;
    oai_req rq = {0};
    char *prompt = NULL;
    size_t held = mem_enter(s, c->len);
    json_t *body = parse_body(c, &err);
    bool ok = body && oai_parse_messages(body, &rq, &err) && render_chat(s, &rq, &prompt, &err);
    json_decref(body);
    oai_req_free(&rq);
    if (tl_mem.over) mem_exceeded(s, held, &err);
    ok = ok && !tl_mem.over;
    mem_leave(s, held);
    if (!ok) { free(prompt); return send_error(s, mc, &err); }
    enum MHD_Result ret = send_json(s, mc, 200, json_pack("{s:o}", "prompt", oai_json_string(prompt, strlen(prompt))));
    free(prompt);
    return ret;
}

static enum MHD_Result handle_models(server *s, struct MHD_Connection *mc)
{
    engine_stats st;
    engine_get_stats(s->e, &st, NULL);
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:{s:i, s:i, s:I, s:i}}", "id", s->cfg.alias, "object", "model",
                          "created", (json_int_t)s->created, "owned_by", "ember", "meta", "n_ctx", st.n_ctx,
                          "n_vocab", s->text.n_vocab, "size", (json_int_t)s->cfg.weight_bytes, "n_slots",
                          st.n_slots);
    return send_json(s, mc, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

static enum MHD_Result handle_slots(server *s, struct MHD_Connection *mc)
{
    engine_stats st;
    engine_get_stats(s->e, &st, NULL);
    engine_slot_info *info = calloc((size_t)st.n_slots, sizeof *info);
    if (!info) return fail(s, mc, 500, "server_error", NULL, NULL, "out of memory");
    engine_get_stats(s->e, &st, info);
    json_t *arr = json_array();
    for (int32_t i = 0; i < st.n_slots; i++)
        json_array_append_new(arr, json_pack("{s:i, s:i, s:b, s:I, s:i, s:i, s:i}", "id", info[i].id, "n_ctx", st.n_ctx,
                                             "is_processing", info[i].busy, "id_task", (json_int_t)info[i].req_id,
                                             "n_past", info[i].n_past, "n_prompt_tokens", info[i].n_prompt,
                                             "n_decoded", info[i].n_generated));
    free(info);
    return send_json(s, mc, 200, arr);
}

static enum MHD_Result handle_props(server *s, struct MHD_Connection *mc)
{
    engine_stats st;
    engine_get_stats(s->e, &st, NULL);
    json_t *j = json_pack("{s:{s:i, s:i}, s:i, s:s, s:s, s:s, s:o, s:{s:b, s:b}, s:I, s:I}",
                          "default_generation_settings", "n_ctx", st.n_ctx, "n_batch", st.n_batch, "total_slots",
                          st.n_slots, "model_path", s->cfg.model_path ? s->cfg.model_path : "", "model_alias",
                          s->cfg.alias, "build_info", "ember " EMBER_VERSION, "chat_template",
                          s->text.chat_template ? oai_json_string(s->text.chat_template, strlen(s->text.chat_template))
                                                : json_string(""),
                          "modalities", "vision", 0, "audio", 0, "kv_pool_tokens", (json_int_t)s->cfg.kv_pool_tokens,
                          "kv_bytes", (json_int_t)s->cfg.kv_bytes);
    /* llama-server's numbers: n_ctx the KV cache in all (-c), n_ctx_slot the most one slot
     * holds (also default_generation_settings.n_ctx, as llama-server reports it) */
    json_object_set_new(j, "n_ctx", json_integer(s->cfg.kv_pool_tokens ? (json_int_t)s->cfg.kv_pool_tokens
                                                                        : (json_int_t)st.n_ctx * st.n_slots));
    json_object_set_new(j, "n_ctx_slot", json_integer(st.n_ctx));
    return send_json(s, mc, 200, j);
}

static enum MHD_Result handle_metrics(server *s, struct MHD_Connection *mc)
{
    if (!s->cfg.metrics)
        return fail(s, mc, 501, "not_supported_error", NULL, NULL,
                    "This server does not serve metrics; start it with --metrics.");
    engine_stats st;
    engine_get_stats(s->e, &st, NULL);
    metrics_input in = {.st = &st, .kv_pool_tokens = s->cfg.kv_pool_tokens, .kv_bytes = s->cfg.kv_bytes,
                        .n_http = atomic_load(&s->n_http), .n_http_errors = atomic_load(&s->n_http_errors)};
    size_t len = 0;
    char *text = metrics_render(&in, &len);
    if (!text) return fail(s, mc, 500, "server_error", NULL, NULL, "out of memory");
    return send_text_h(s, mc, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
}

/* ---------- dispatch ---------- */

static bool authorized(server *s, struct MHD_Connection *mc)
{
    if (!s->cfg.api_key || !s->cfg.api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;   /* RFC 7235: the scheme is case-insensitive */
    const char *k = h + 7, *want = s->cfg.api_key;
    size_t nk = strlen(k), nw = strlen(want);
    unsigned diff = (unsigned)(nk ^ nw);
    for (size_t i = 0; i < nw; i++) diff |= (unsigned)(want[i] ^ (i < nk ? k[i] : 0));   /* constant time */
    return diff == 0;
}

static const char *strip_v1(const char *url) { return !strncmp(url, "/v1/", 4) ? url + 3 : url; }

static const char *too_large_message(const server *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "The request body is too large: this server accepts at most %zu bytes (--max-body-size).",
             s->cfg.max_body_bytes);
    return buf;
}

#define ALLOW_GET "GET, OPTIONS"
#define ALLOW_POST "POST, OPTIONS"

/* OPTIONS on any path (before authentication: browsers send CORS preflights
 * without credentials): 200 with an empty body and Allow, as llama-server
 * answers (some clients take only 200 as a passed preflight), plus the
 * preflight headers when the Origin may use this server (--cors-origin). */
static enum MHD_Result send_options(server *s, struct MHD_Connection *mc)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    add_common_headers(s, mc, r);
    if (cors_allow_origin(s, mc)) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result route(server *s, struct MHD_Connection *mc, const char *url, const char *method, conn *c)
{
    atomic_fetch_add(&s->n_http, 1);
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    const char *path = strip_v1(url);
    const char *allow = NULL;
    if (!strcmp(method, "OPTIONS")) return send_options(s, mc);
    if (get && (!strcmp(url, "/") || !strcmp(url, "/index.html"))) {   /* the web chat (webui.h): public, as llama-server's */
        struct MHD_Response *r = webui_response();
        if (!r) return MHD_NO;
        add_common_headers(s, mc, r);
        enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (!strcmp(path, "/health")) {
        if (!get) { allow = ALLOW_GET; goto method; }
        return send_json(s, mc, 200, json_pack("{s:s}", "status", "ok"));
    }
    if (!authorized(s, mc))
        return fail(s, mc, 401, OAI_ERR_AUTH, NULL, "invalid_api_key",
                    "Incorrect or missing API key. Send it as 'Authorization: Bearer KEY'.");
    if (c->too_large) {
        char msg[160];
        return fail(s, mc, 413, "invalid_request_error", NULL, "request_too_large",
                    too_large_message(s, msg, sizeof msg));
    }

    struct { const char *path; bool post; enum MHD_Result (*fn)(server *, struct MHD_Connection *, conn *); } posts[] = {
        {"/tokenize", true, handle_tokenize},
        {"/detokenize", true, handle_detokenize},
        {"/apply-template", true, handle_apply_template},
    };
    if (!strcmp(path, "/chat/completions")) {
        if (!post) { allow = ALLOW_POST; goto method; }
        return handle_completion(s, mc, c, OAI_CHAT);
    }
    if (!strcmp(path, "/completions")) {
        if (!post) { allow = ALLOW_POST; goto method; }
        return handle_completion(s, mc, c, OAI_COMPLETION);
    }
    for (size_t i = 0; i < sizeof posts / sizeof posts[0]; i++)
        if (!strcmp(path, posts[i].path)) {
            if (!post) { allow = ALLOW_POST; goto method; }
            return posts[i].fn(s, mc, c);
        }
    allow = ALLOW_GET;
    if (!strcmp(path, "/models")) { if (!get) goto method; return handle_models(s, mc); }
    if (!strcmp(path, "/slots")) { if (!get) goto method; return handle_slots(s, mc); }
    if (!strcmp(path, "/props")) { if (!get) goto method; return handle_props(s, mc); }
    if (!strcmp(path, "/metrics")) { if (!get) goto method; return handle_metrics(s, mc); }
    {
        char msg[300];
        snprintf(msg, sizeof msg, "Invalid URL (%s %.200s): no such endpoint.", method, url);
        return fail(s, mc, 404, "invalid_request_error", NULL, "not_found", msg);
    }
method: {
        /* RFC 9110 section 15.5.6: a 405 lists the methods the resource supports */
        char msg[300];
        snprintf(msg, sizeof msg, "Method %s is not allowed for %.200s (allowed: %s).", method, url, allow);
        oai_error err;
        oai_error_set(&err, 405, "invalid_request_error", NULL, "method_not_allowed", "%s", msg);
        return send_json_h(s, mc, 405, oai_error_json(&err), allow);
    }
}

/* A chunked upload crossed --max-body-size. libmicrohttpd 0.9.75 refuses to
 * queue an answer while it reads a body (MHD_queue_response says no), and
 * reading on would let a client stream for ever: write the 413 on the socket
 * ourselves (this connection's thread owns it and nothing was sent yet but a
 * possible "100 Continue") and return MHD_NO, which closes the connection
 * without reading the rest. The client may see a reset after the answer. */
static enum MHD_Result refuse_midway(server *s, struct MHD_Connection *mc)
{
    atomic_fetch_add(&s->n_http, 1);
    atomic_fetch_add(&s->n_http_errors, 1);
    int fd = conn_fd(mc);
    if (fd < 0) return MHD_NO;
    char msg[160];
    oai_error err;
    oai_error_set(&err, 413, "invalid_request_error", NULL, "request_too_large", "%s",
                  too_large_message(s, msg, sizeof msg));
    json_t *j = oai_error_json(&err);
    char *body = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (!body) return MHD_NO;
    const char *origin = cors_allow_origin(s, mc);
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Type: application/json; "
                     "charset=utf-8\r\nServer: ember/" EMBER_VERSION "\r\n%s%.200s%sContent-Length: %zu\r\n\r\n",
                     origin ? "Access-Control-Allow-Origin: " : "", origin ? origin : "", origin ? "\r\n" : "",
                     strlen(body));
    if (n > 0 && (size_t)n < sizeof head) {
        const char *parts[2] = {head, body};
        size_t lens[2] = {(size_t)n, strlen(body)};
        for (int i = 0; i < 2; i++)
            for (size_t off = 0; off < lens[i];) {
                ssize_t w = send(fd, parts[i] + off, lens[i] - off, MSG_NOSIGNAL);
                if (w > 0) { off += (size_t)w; continue; }
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && poll(&p, 1, 1000) > 0) continue;
                if (w < 0 && errno == EINTR) continue;
                i = 2;   /* the client is gone or stalls: give up */
                break;
            }
        shutdown(fd, SHUT_WR);
    }
    free(body);
    return MHD_NO;
}

/* Content-Length of the request, or -1 when absent (a chunked upload).
 * A value that does not fit is reported as SIZE_MAX (too large). */
static long long announced_length(struct MHD_Connection *mc)
{
    const char *v = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!v) return -1;
    unsigned long long n = 0;
    for (const char *p = v; *p >= '0' && *p <= '9'; p++) {
        if (n > (1ull << 60)) return 1ll << 60;
        n = n * 10 + (unsigned)(*p - '0');
    }
    return (long long)n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    server *s = cls;
    conn *c = *con_cls;
    if (!c) {
        /* the headers are in, the body is not read yet */
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        *con_cls = c;
        long long n = announced_length(mc);
        if (n >= 0 && (unsigned long long)n > s->cfg.max_body_bytes) {
            /* refuse before reading: libmicrohttpd then skips the body, sends this answer
             * (no "100 Continue") and closes the connection */
            c->too_large = c->answered = true;
            return route(s, mc, url, method, c);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (c->too_large) return MHD_YES;
        if (c->len + n > s->cfg.max_body_bytes) {
            /* a chunked upload crossed the limit: drop what was kept */
            c->too_large = true;
            free(c->body);
            c->body = NULL;
            c->len = c->cap = 0;
            return refuse_midway(s, mc);
        }
        if (c->len + n + 1 > c->cap) {
            size_t cap = c->cap ? c->cap : 4096;
            while (cap < c->len + n + 1) cap *= 2;
            char *b = realloc(c->body, cap);
            if (!b) { c->too_large = true; return MHD_YES; }
            c->body = b;
            c->cap = cap;
        }
        memcpy(c->body + c->len, upload_data, n);
        c->len += n;
        c->body[c->len] = 0;
        return MHD_YES;
    }
    if (c->answered) return MHD_YES;
    /* the whole request is in: from now on the connection may idle as long as --timeout */
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.timeout_s);
    return route(s, mc, url, method, c);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    server *s = cls;
    conn *c = *con_cls;
    /* a kept-alive connection waits for its next request under the short timeout */
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.header_timeout_s);
    if (!c) return;
    if (c->req) engine_req_cancel(c->req);
    free(c->body);
    free(c);
    *con_cls = NULL;
}

ember_status server_start(const server_config *cfg, engine *e, const server_text *text, server **out)
{
    *out = NULL;
    server *s = calloc(1, sizeof *s);
    if (!s) return ember_error(EMBER_ERR_NOMEM, "server");
    s->cfg = *cfg;
    if (!s->cfg.host) s->cfg.host = "127.0.0.1";
    if (!s->cfg.alias) s->cfg.alias = "ember";
    if (!s->cfg.max_body_bytes) s->cfg.max_body_bytes = 16u << 20;
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = 512;
    if (!s->cfg.max_connections_per_ip) s->cfg.max_connections_per_ip = 128;
    if (s->cfg.header_timeout_s <= 0) s->cfg.header_timeout_s = 10;
    if (s->cfg.timeout_s <= 0) s->cfg.timeout_s = 600;
    s->e = e;
    s->text = *text;
    s->created = (int64_t)time(NULL);
    ember_status cst = chat_tools_new(&s->text, &s->cfg, &s->ct);
    if (cst != EMBER_OK) { free(s); return cst; }
    s->mem_cap = MEM_CAP_DEFAULT;
    pthread_mutex_init(&s->mem_mu, NULL);
    pthread_cond_init(&s->mem_cv, NULL);
    json_set_alloc_funcs(mem_malloc, free);   /* process-wide; counts only inside mem_enter/mem_leave */
    s->thinking_default = s->cfg.reasoning == SERVER_REASONING_ON    ? 1
                          : s->cfg.reasoning == SERVER_REASONING_OFF ? 0
                          : ember_chat_template_assumes_enable_thinking(s->text.chat_template) ? 1 : -1;

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    struct sockaddr_in6 addr6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)cfg->port)};
    const struct sockaddr *sa;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC;
    if (inet_pton(AF_INET, s->cfg.host, &addr.sin_addr) == 1) {
        sa = (const struct sockaddr *)&addr;
    } else if (inet_pton(AF_INET6, s->cfg.host, &addr6.sin6_addr) == 1) {
        sa = (const struct sockaddr *)&addr6;
        flags |= MHD_USE_IPv6;
    } else {
        chat_tools_free(s->ct);
        free(s);
        return ember_error(EMBER_ERR_INVALID_ARG, "--host '%s' is not an IPv4 or IPv6 address",
                           cfg->host ? cfg->host : "");
    }
    /* Slow-loris budget: a connection idles at most header_timeout_s until its
     * whole request is in (on_request lifts it to timeout_s, on_completed puts
     * it back for the next keep-alive request); one client address holds at
     * most max_connections_per_ip of the max_connections (one thread each). */
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, sa,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)s->cfg.header_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)s->cfg.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)(s->cfg.max_connections_per_ip > 0 ? s->cfg.max_connections_per_ip : 0),
                            MHD_OPTION_END);
    if (!s->d) {
        chat_tools_free(s->ct);
        free(s);
        return ember_error(EMBER_ERR_IO, "cannot listen on %s:%d (address in use or not permitted)", cfg->host,
                           cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return EMBER_OK;
}

int server_port(const server *s) { return s->port; }

void server_quiesce(server *s)
{
    if (s && s->d) {
        MHD_socket fd = MHD_quiesce_daemon(s->d);
        if (fd != MHD_INVALID_SOCKET) close(fd);
    }
}

void server_stop(server *s)
{
    if (!s) return;
    /* let answers of cancelled requests reach their clients (at most 3 s) */
    for (int i = 0; i < 300 && atomic_load(&s->n_active) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s->d) MHD_stop_daemon(s->d);
    chat_tools_free(s->ct);
    pthread_mutex_destroy(&s->mem_mu);
    pthread_cond_destroy(&s->mem_cv);
    free(s);
}
