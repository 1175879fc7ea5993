/*
 * http.c — libmicrohttpd daemon, routes, authentication, JSON responses and
 * server-sent events (see server.h).
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION with an
 * internal polling thread). Every completion API goes through one handler
 * (handle_generate: the API's body -> the common request -> completion.h);
 * a non-stream answer waits for the finish in the access handler, a stream
 * is a response callback that blocks until the engine commits more text:
 * both are completion_next, one wait on the request's condition variable.
 * A client that goes away is noticed by the watcher thread (epoll on the
 * sockets of requests in flight, EPOLLRDHUP), which cancels its request, so
 * the engine frees the slot within one step and wakes the reader; the
 * completion notification cancels it as well.
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
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "base/status.h"
#include "chat/template.h"
#include "server/anthropic.h"
#include "server/responses.h"
#include "server/chat_tools.h"
#include "server/completion.h"
#include "server/embeddings.h"
#include "server/metrics.h"
#include "server/native.h"
#include "server/slots.h"
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
    completion_ctx cc;        /* the completion pipeline over e, text, cfg and ct */
    /* the client watcher: sockets of requests in flight (watch_add) */
    pthread_mutex_t w_mu;
    pthread_t w_thread;
    int w_ep, w_wake;
    struct watch_ent *w_ents;
    uint32_t w_cap;
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
    bool v1;            /* the URL had the /v1 prefix (the OpenAI shape where a native one shares the path) */
    const char *url;    /* the request's path, while it is routed */
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

static int32_t piece_fn(void *ud, ember_token t, char *buf, int32_t cap)
{
    server *s = ud;
    return s->text.token_piece(s->text.ud, t, buf, cap);
}

/* ---------- client watcher ---------- */

/* A request waits on its engine request only (completion_next); a client
 * that goes away while it waits is seen here: one thread waits on an epoll
 * set of the sockets of the requests in flight (EPOLLRDHUP: HTTP clients do
 * not half-close while waiting for an answer, so a hang-up means gone) and
 * cancels the request, which the engine then finishes within one step and
 * so wakes its reader. Each entry watches a dup of the socket, so the
 * descriptor number stays ours until watch_del even if libmicrohttpd closes
 * its own first. */
typedef struct watch_ent { uint32_t gen; bool used; int fd; engine_req *r; } watch_ent;

static void *watch_thread(void *arg)
{
    server *s = arg;
    struct epoll_event evs[32];
    for (;;) {
        int n = epoll_wait(s->w_ep, evs, 32, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return NULL;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == UINT64_MAX) return NULL;   /* watch_stop */
            uint32_t idx = (uint32_t)evs[i].data.u64, gen = (uint32_t)(evs[i].data.u64 >> 32);
            pthread_mutex_lock(&s->w_mu);
            if (idx < s->w_cap && s->w_ents[idx].used && s->w_ents[idx].gen == gen) engine_req_cancel(s->w_ents[idx].r);
            pthread_mutex_unlock(&s->w_mu);
        }
    }
}

/* Watch `fd` for `r` (r must stay alive until watch_del). Returns a handle,
 * or UINT64_MAX when it could not be watched (then only on_completed and the
 * write path notice a client gone). */
static uint64_t watch_add(server *s, int fd, engine_req *r)
{
    if (fd < 0 || s->w_ep < 0) return UINT64_MAX;
    int d = dup(fd);
    if (d < 0) return UINT64_MAX;
    pthread_mutex_lock(&s->w_mu);
    uint32_t idx = 0;
    while (idx < s->w_cap && s->w_ents[idx].used) idx++;
    if (idx == s->w_cap) {
        uint32_t cap = s->w_cap ? s->w_cap * 2 : 64;
        watch_ent *e = realloc(s->w_ents, sizeof *e * cap);
        if (!e) { pthread_mutex_unlock(&s->w_mu); close(d); return UINT64_MAX; }
        memset(e + s->w_cap, 0, sizeof *e * (cap - s->w_cap));
        s->w_ents = e;
        s->w_cap = cap;
    }
    watch_ent *e = &s->w_ents[idx];
    e->gen++;
    e->used = true;
    e->fd = d;
    e->r = r;
    uint64_t h = (uint64_t)e->gen << 32 | idx;
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT, .data.u64 = h};
    if (epoll_ctl(s->w_ep, EPOLL_CTL_ADD, d, &ev) != 0) {
        e->used = false;
        close(d);
        h = UINT64_MAX;
    }
    pthread_mutex_unlock(&s->w_mu);
    return h;
}

static void watch_del(server *s, uint64_t h)
{
    if (h == UINT64_MAX) return;
    uint32_t idx = (uint32_t)h;
    pthread_mutex_lock(&s->w_mu);
    if (idx < s->w_cap && s->w_ents[idx].used && s->w_ents[idx].gen == (uint32_t)(h >> 32)) {
        epoll_ctl(s->w_ep, EPOLL_CTL_DEL, s->w_ents[idx].fd, NULL);
        close(s->w_ents[idx].fd);
        s->w_ents[idx].used = false;
        s->w_ents[idx].r = NULL;
    }
    pthread_mutex_unlock(&s->w_mu);
}

static bool watch_start(server *s)
{
    pthread_mutex_init(&s->w_mu, NULL);
    s->w_ep = epoll_create1(EPOLL_CLOEXEC);
    s->w_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    if (s->w_ep < 0 || s->w_wake < 0 || epoll_ctl(s->w_ep, EPOLL_CTL_ADD, s->w_wake, &ev) != 0 ||
        pthread_create(&s->w_thread, NULL, watch_thread, s) != 0) {
        if (s->w_ep >= 0) close(s->w_ep);
        if (s->w_wake >= 0) close(s->w_wake);
        s->w_ep = s->w_wake = -1;
        pthread_mutex_destroy(&s->w_mu);
        return false;
    }
    return true;
}

static void watch_stop(server *s)
{
    uint64_t one = 1;
    if (write(s->w_wake, &one, sizeof one) < 0) { /* the thread reads nothing: a failed write cannot happen here */ }
    pthread_join(s->w_thread, NULL);
    for (uint32_t i = 0; i < s->w_cap; i++)
        if (s->w_ents[i].used) close(s->w_ents[i].fd);
    free(s->w_ents);
    close(s->w_ep);
    close(s->w_wake);
    pthread_mutex_destroy(&s->w_mu);
}

/* ---------- streaming ---------- */

typedef enum api_kind { API_OPENAI = 0, API_ANTHROPIC, API_RESPONSES, API_NATIVE } api_kind;

typedef struct stream {
    server *s;
    api_kind api;
    completion c;
    uint64_t watch;
    int fd;
    bool done;
    char *out;
    size_t out_len, out_off, out_cap;
    json_t *deltas;              /* OpenAI: the parser events' delta objects of one update */
    anth_stream *anth;           /* Anthropic: the open blocks */
    resp_stream *resp;           /* Responses: the open item, the items done */
    native_run *nat;             /* native /completion: its requests (c unused) */
    uint64_t *nat_watch;         /* native: one watch per request */
    /* OpenAI n > 1: c is choice `choice`; the others wait in more[] (started
     * together, streamed one after another) */
    completion *more;
    uint64_t *more_watch;
    int32_t n_more, choice;
    int32_t n_generated_sum;     /* tokens of the choices finished before c */
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

/* One SSE event: "event: NAME\n" when named (Anthropic, Responses), "data: JSON\n\n". */
static void out_named(void *ud, const char *name, json_t *j)
{
    stream *st = ud;
    char *d = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!d) return;
    if (name) {
        out_append(st, "event: ", 7);
        out_append(st, name, strlen(name));
        out_append(st, "\n", 1);
    }
    out_append(st, "data: ", 6);
    out_append(st, d, strlen(d));
    out_append(st, "\n\n", 2);
    free(d);
}

static void out_event(stream *st, json_t *j)
{
    if (st->choice > 0) {   /* choices after the first: their index */
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        if (ch) json_object_set_new(ch, "index", json_integer(st->choice));
    }
    out_named(st, NULL, j);
}
static void out_data(void *st, json_t *j) { out_named(st, NULL, j); }

static void on_openai_event(void *user, const ember_chat_event *ev)
{
    stream *st = user;
    json_t *d = NULL;
    if (ember_chat_event_delta(ev, &d) == EMBER_OK && d) json_array_append_new(st->deltas, d);
}

/* OpenAI's finish_reason for a finished request. */
static const char *openai_finish(completion_stop stop)
{
    return stop == COMPLETION_STOP_TOOL ? "tool_calls" : stop == COMPLETION_STOP_LENGTH ? "length" : "stop";
}

/* An update as OpenAI chunks: with the parser, one chunk per event (logprobs
 * ride on the first), else one chunk of the new text; the finish chunk and
 * the usage chunk at the end. */
static void openai_stream_update(stream *st, const completion_update *u)
{
    const oai_req *rq = &st->c.rq;
    const oai_result *res = &u->res;
    bool fin = u->stop != COMPLETION_RUNNING;
    if (u->stop == COMPLETION_ERROR || u->stop == COMPLETION_CANCELLED) {
        oai_error err;
        oai_error_set(&err, u->stop == COMPLETION_ERROR ? 500 : 503, "server_error", NULL, NULL, "%s", st->c.err);
        out_event(st, oai_error_json(&err));
    } else if (st->c.parser) {
        if (u->first) out_event(st, oai_chat_role_chunk(rq, res));
        int32_t tok_from = u->tok_from, tok_to = u->tok_to;
        bool lp_sent = tok_to <= tok_from || !rq->logprobs;   /* a chunk with neither delta nor logprobs is not sent */
        for (size_t i = 0; i < json_array_size(st->deltas); i++) {
            out_event(st, oai_chat_delta_chunk(rq, res, json_incref(json_array_get(st->deltas, i)), NULL,
                                               lp_sent ? 0 : tok_from, lp_sent ? 0 : tok_to, piece_fn, st->s));
            lp_sent = true;
        }
        json_array_clear(st->deltas);
        if (!lp_sent) out_event(st, oai_chat_delta_chunk(rq, res, NULL, NULL, tok_from, tok_to, piece_fn, st->s));
        if (fin) out_event(st, oai_chat_delta_chunk(rq, res, NULL, openai_finish(u->stop), 0, 0, piece_fn, st->s));
    } else {
        if (rq->kind == OAI_CHAT && u->first) out_event(st, oai_chat_role_chunk(rq, res));
        if (u->n_delta > 0 || (u->tok_to > u->tok_from && rq->logprobs))
            out_event(st, oai_chunk_json(rq->kind, rq, res, u->delta, u->n_delta, u->tok_from, u->tok_to, false,
                                         piece_fn, st->s));
        if (fin) out_event(st, oai_chunk_json(rq->kind, rq, res, "", 0, 0, 0, true, piece_fn, st->s));
    }
    bool last = st->choice >= st->n_more || u->stop == COMPLETION_ERROR || u->stop == COMPLETION_CANCELLED;
    if (fin && last && rq->include_usage && u->stop != COMPLETION_ERROR && u->stop != COMPLETION_CANCELLED) {
        oai_result all = *res;   /* usage counts the tokens of every choice */
        all.n_generated += st->n_generated_sum;
        out_event(st, oai_usage_chunk(rq, &all));
    }
    if (fin && last) out_append(st, "data: [DONE]\n\n", 14);
}

/* n > 1: the finished choice gives way to the next one. */
static bool stream_next_choice(stream *st, const completion_update *u)
{
    if (st->choice >= st->n_more) return false;
    st->n_generated_sum += u->res.n_generated;
    watch_del(st->s, st->watch);
    completion_free(&st->c);
    st->c = st->more[st->choice];
    memset(&st->more[st->choice], 0, sizeof st->more[st->choice]);
    st->watch = st->more_watch[st->choice];
    st->more_watch[st->choice] = UINT64_MAX;
    st->choice++;
    json_array_clear(st->deltas);
    return completion_stream_events(&st->c, on_openai_event, st) == EMBER_OK;
}

/* Wait for news from the engine and format it as SSE events. Returns false
 * when the client went away (its request was cancelled). */
static bool stream_produce(stream *st)
{
    if (st->api == API_NATIVE) {
        bool cancelled = false;
        st->done = native_stream_next(st->nat, out_data, st, &cancelled);
        return !(cancelled && client_gone(st->fd));
    }
    completion_update u;
    completion_next(&st->c, false, &u);
    if (u.stop == COMPLETION_CANCELLED && client_gone(st->fd)) return false;
    if (st->api == API_ANTHROPIC) anth_stream_update(st->anth, &st->c, &u);
    else if (st->api == API_RESPONSES) resp_stream_update(st->resp, &st->c, &u);
    else openai_stream_update(st, &u);
    if (u.stop != COMPLETION_RUNNING) {
        bool failed = u.stop == COMPLETION_ERROR || u.stop == COMPLETION_CANCELLED;
        st->done = failed || !stream_next_choice(st, &u);
    }
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
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
        if (!stream_produce(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls)
{
    stream *st = cls;
    watch_del(st->s, st->watch);
    for (int32_t i = 0; st->nat_watch && i < native_count(st->nat); i++) watch_del(st->s, st->nat_watch[i]);
    free(st->nat_watch);
    native_free(st->nat);
    for (int32_t i = 0; i < st->n_more; i++) {
        if (st->more_watch) watch_del(st->s, st->more_watch[i]);
        completion_free(&st->more[i]);
    }
    free(st->more);
    free(st->more_watch);
    atomic_fetch_sub(&st->s->n_active, 1);
    completion_free(&st->c);
    anth_stream_free(st->anth);
    resp_stream_free(st->resp);
    json_decref(st->deltas);
    free(st->out);
    free(st);
}

/* ---------- completions ---------- */

/* Body -> the common request -> prompt tokens, within the parse/render
 * memory reservation: `to_oai` (NULL for OpenAI's own bodies) rewrites
 * another API's body as an OpenAI one first. False with *err. */
static bool request_prompt(server *s, conn *c, oai_kind kind, json_t *(*to_oai)(json_t *, bool, oai_error *),
                           bool count_only, oai_req *rq, ember_token **toks, int32_t *n_toks, oai_error *err)
{
    memset(rq, 0, sizeof *rq);
    *toks = NULL;
    size_t held = mem_enter(s, c->len);
    json_t *body = parse_body(c, err);
    if (body && to_oai) {
        json_t *o = to_oai(body, count_only, err);
        json_decref(body);
        body = o;
    }
    if (body) oai_apply_defaults(body, s->cfg.sampling_defaults);
    bool ok = body && oai_parse(body, kind, s->text.n_vocab, rq, err);
    json_decref(body);
    ok = ok && completion_prompt(&s->cc, rq, toks, n_toks, err);
    if (tl_mem.over) mem_exceeded(s, held, err);
    ok = ok && !tl_mem.over;
    mem_leave(s, held);
    if (!ok) {
        free(*toks);
        *toks = NULL;
        oai_req_free(rq);
    }
    return ok;
}

static enum MHD_Result send_api_error(server *s, struct MHD_Connection *mc, api_kind api, const oai_error *err)
{
    if (api == API_ANTHROPIC) return send_json(s, mc, (unsigned)err->http_status, anth_error_json(err));
    if (api == API_NATIVE) return send_json(s, mc, (unsigned)err->http_status, native_error_json(err));
    return send_error(s, mc, err);
}

/* Submit the request, and for n > 1 its copies (seed + i, as llama-server's
 * child tasks), into sm->c and sm->more. At most --parallel choices (as
 * llama-server's n_cmpl). False with *err. */
static bool start_choices(server *s, oai_req *rq, const ember_token *toks, int32_t n_toks, const char *prefix,
                          stream *sm, oai_error *err)
{
    int32_t n = rq->n_choices > 1 ? rq->n_choices : 1;
    engine_stats es;
    engine_get_stats(s->e, &es, NULL);
    if (n > es.n_slots) {
        oai_error_set(err, 400, "invalid_request_error", "n", NULL,
                      "Invalid 'n': %d is more than this server's %d slots (--parallel).", n, es.n_slots);
        return false;
    }
    if (n > 1) {
        sm->more = calloc((size_t)(n - 1), sizeof *sm->more);
        sm->more_watch = malloc(sizeof *sm->more_watch * (size_t)(n - 1));
        if (!sm->more || !sm->more_watch) {
            oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return false;
        }
        for (int32_t i = 0; i < n - 1; i++) sm->more_watch[i] = UINT64_MAX;
        for (int32_t i = 0; i < n - 1; i++) {
            oai_req copy;
            if (!oai_req_clone(rq, &copy)) {
                oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
                return false;
            }
            copy.sampling.seed += (uint64_t)(i + 1);
            bool ok = completion_start(&s->cc, &copy, toks, n_toks, prefix, &sm->more[i], err);
            oai_req_free(&copy);
            if (!ok) return false;
            sm->n_more = i + 1;
            sm->more_watch[i] = watch_add(s, sm->fd, sm->more[i].r);
        }
    }
    if (!completion_start(&s->cc, rq, toks, n_toks, prefix, &sm->c, err)) return false;
    /* the extra choices share the first one's id and created */
    for (int32_t i = 0; i < sm->n_more; i++) {
        memcpy(sm->more[i].id, sm->c.id, sizeof sm->c.id);
        sm->more[i].created = sm->c.created;
    }
    return true;
}

/* A stream struct whose requests could not all start: free what did. */
static void stream_abandon(stream *sm)
{
    for (int32_t i = 0; i < sm->n_more; i++) {
        if (sm->more_watch) watch_del(sm->s, sm->more_watch[i]);
        completion_free(&sm->more[i]);
    }
    completion_free(&sm->c);
    free(sm->more);
    free(sm->more_watch);
    free(sm);
}

/* n > 1, whole answers: the other choices, each as its own result, appended
 * to j's choices with their index; usage counts every choice's tokens. */
static bool more_choices(server *s, stream *sm, oai_kind kind, json_t *j, oai_error *err)
{
    json_t *choices = json_object_get(j, "choices"), *usage = json_object_get(j, "usage");
    for (int32_t i = 0; i < sm->n_more; i++) {
        completion *c = &sm->more[i];
        completion_update u;
        completion_next(c, true, &u);
        if (u.stop == COMPLETION_ERROR || u.stop == COMPLETION_CANCELLED) {
            oai_error_set(err, u.stop == COMPLETION_ERROR ? 500 : 503, "server_error", NULL, NULL, "%s", c->err);
            return false;
        }
        json_t *msg = completion_message(c, &u);
        u.res.message = msg;
        json_t *one = oai_result_json(kind, &c->rq, &u.res, piece_fn, s);
        json_decref(msg);
        json_t *ch = json_array_get(json_object_get(one, "choices"), 0);
        if (ch) {
            json_object_set_new(ch, "index", json_integer(i + 1));
            json_array_append(choices, ch);
        }
        json_int_t ct = json_integer_value(json_object_get(usage, "completion_tokens")) + u.res.n_generated;
        json_object_set_new(usage, "completion_tokens", json_integer(ct));
        json_object_set_new(usage, "total_tokens",
                            json_integer(ct + json_integer_value(json_object_get(usage, "prompt_tokens"))));
        json_decref(one);
    }
    return true;
}

/* The one completion handler: every API's request goes through
 * request_prompt -> completion_start, and its answer through completion_next
 * (a stream per update, a whole answer at the finish); only the JSON differs. */
static enum MHD_Result handle_generate(server *s, struct MHD_Connection *mc, conn *c, api_kind api, oai_kind kind)
{
    oai_error err;
    oai_req rq;
    ember_token *toks = NULL;
    int32_t n_toks = 0;
    json_t *(*to_oai)(json_t *, bool, oai_error *) = api == API_ANTHROPIC ? anth_to_oai
                                                    : api == API_RESPONSES ? resp_to_oai : NULL;
    if (!request_prompt(s, c, kind, to_oai, false, &rq, &toks, &n_toks, &err)) {
        if (api == API_RESPONSES) resp_rename_param(&err);
        return send_api_error(s, mc, api, &err);
    }
    bool stream_it = rq.stream;
    stream *sm = calloc(1, sizeof *sm);
    const char *prefix = api == API_ANTHROPIC ? "msg_" : api == API_RESPONSES ? "resp_"
                       : kind == OAI_CHAT ? "chatcmpl-" : "cmpl-";
    if (!sm) { free(toks); oai_req_free(&rq); return MHD_NO; }
    sm->s = s;
    sm->api = api;
    sm->watch = UINT64_MAX;
    sm->fd = conn_fd(mc);
    bool ok = start_choices(s, &rq, toks, n_toks, prefix, sm, &err);
    free(toks);
    oai_req_free(&rq);
    if (!ok) { stream_abandon(sm); return send_api_error(s, mc, api, &err); }
    atomic_fetch_add(&s->n_active, 1);
    sm->watch = watch_add(s, sm->fd, sm->c.r);

    if (stream_it) {
        ember_status st = EMBER_OK;
        if (api == API_ANTHROPIC) {
            sm->anth = anth_stream_new(&sm->c, out_named, sm);
            st = sm->anth ? completion_stream_events(&sm->c, anth_stream_event, sm->anth) : EMBER_ERR_NOMEM;
        } else if (api == API_RESPONSES) {
            sm->resp = resp_stream_new(&sm->c, out_named, sm);
            st = sm->resp ? completion_stream_events(&sm->c, resp_stream_event, sm->resp) : EMBER_ERR_NOMEM;
        } else {
            sm->deltas = json_array();
            st = sm->deltas ? completion_stream_events(&sm->c, on_openai_event, sm) : EMBER_ERR_NOMEM;
        }
        if (st != EMBER_OK) { stream_free(sm); return MHD_NO; }
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sm, stream_free);
        if (!resp) { stream_free(sm); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_common_headers(s, mc, resp);
        enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }

    c->req = sm->c.r;
    completion_update u;
    completion_next(&sm->c, true, &u);
    c->req = NULL;
    enum MHD_Result ret;
    if (u.stop == COMPLETION_CANCELLED && client_gone(sm->fd)) {
        ret = MHD_NO;
    } else if (u.stop == COMPLETION_ERROR || u.stop == COMPLETION_CANCELLED) {
        oai_error_set(&err, u.stop == COMPLETION_ERROR ? 500 : 503, "server_error", NULL, NULL, "%s", sm->c.err);
        ret = send_api_error(s, mc, api, &err);
    } else {
        json_t *msg = completion_message(&sm->c, &u);
        u.res.message = msg;
        json_t *j = api == API_ANTHROPIC   ? anth_message_json(&sm->c, &u, msg)
                  : api == API_RESPONSES ? resp_response_json(&sm->c, &u, msg)
                                         : oai_result_json(kind, &sm->c.rq, &u.res, piece_fn, s);
        json_decref(msg);
        if (sm->n_more && !more_choices(s, sm, kind, j, &err)) {
            json_decref(j);
            ret = send_api_error(s, mc, api, &err);
        } else {
            ret = send_json(s, mc, 200, j);
        }
    }
    stream_free(sm);
    return ret;
}

static enum MHD_Result handle_chat(server *s, struct MHD_Connection *mc, conn *c)
{
    return handle_generate(s, mc, c, API_OPENAI, OAI_CHAT);
}

static enum MHD_Result handle_completions(server *s, struct MHD_Connection *mc, conn *c)
{
    return handle_generate(s, mc, c, API_OPENAI, OAI_COMPLETION);
}

static enum MHD_Result handle_messages(server *s, struct MHD_Connection *mc, conn *c)
{
    return handle_generate(s, mc, c, API_ANTHROPIC, OAI_CHAT);
}

/* POST /completion (and /completions without /v1): llama.cpp's native API
 * (native.h). A batch of prompts or n > 1 is several engine requests, each
 * watched for a client that leaves; a stream reads them one after another. */
static enum MHD_Result handle_native_with(server *s, struct MHD_Connection *mc, conn *c,
                                         native_run *(*prepare)(const completion_ctx *, json_t *, oai_error *))
{
    oai_error err;
    size_t held = mem_enter(s, c->len);
    json_t *body = parse_body(c, &err);
    if (body) oai_apply_defaults(body, s->cfg.sampling_defaults);
    native_run *nr = body ? prepare(&s->cc, body, &err) : NULL;
    json_decref(body);
    if (tl_mem.over) {
        mem_exceeded(s, held, &err);
        native_free(nr);
        nr = NULL;
    }
    mem_leave(s, held);
    if (!nr) return send_api_error(s, mc, API_NATIVE, &err);
    stream *sm = calloc(1, sizeof *sm);
    int32_t n = native_count(nr);
    uint64_t *w = calloc((size_t)n, sizeof *w);
    if (!sm || !w) { free(sm); free(w); native_free(nr); return MHD_NO; }
    if (!native_start(nr, &err)) {
        free(sm);
        free(w);
        native_free(nr);
        return send_api_error(s, mc, API_NATIVE, &err);
    }
    sm->s = s;
    sm->api = API_NATIVE;
    sm->nat = nr;
    sm->nat_watch = w;
    sm->watch = UINT64_MAX;
    sm->fd = conn_fd(mc);
    atomic_fetch_add(&s->n_active, 1);
    for (int32_t i = 0; i < n; i++) w[i] = watch_add(s, sm->fd, native_engine_req(nr, i));
    if (native_stream(nr)) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sm, stream_free);
        if (!resp) { stream_free(sm); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_common_headers(s, mc, resp);
        enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    c->req = native_engine_req(nr, 0);
    bool cancelled = false;
    json_t *j = native_whole(nr, &cancelled, &err);
    c->req = NULL;
    enum MHD_Result ret = cancelled && client_gone(sm->fd) ? MHD_NO
                          : j ? send_json(s, mc, 200, j)
                              : send_api_error(s, mc, API_NATIVE, &err);
    stream_free(sm);
    return ret;
}

static enum MHD_Result handle_native(server *s, struct MHD_Connection *mc, conn *c)
{
    return handle_native_with(s, mc, c, native_prepare);
}

/* POST /infill: a fill-in-the-middle prompt (native_prepare_infill), then as /completion. */
static enum MHD_Result handle_infill(server *s, struct MHD_Connection *mc, conn *c)
{
    return handle_native_with(s, mc, c, native_prepare_infill);
}

/* POST /slots/{id}?action=save|restore|erase (slots.h), llama-server's errors. */
static enum MHD_Result handle_slot_action(server *s, struct MHD_Connection *mc, conn *c)
{
    const char *url = !strncmp(c->url, "/v1/", 4) ? c->url + 3 : c->url;   /* as strip_v1 */
    oai_error err;
    json_t *body = c->len ? parse_body(c, &err) : json_object();
    if (!body) return send_api_error(s, mc, API_NATIVE, &err);
    const char *action = MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "action");
    json_t *j = slots_action(&s->cc, url + strlen("/slots/"), action, body, &err);
    json_decref(body);
    return j ? send_json(s, mc, 200, j) : send_api_error(s, mc, API_NATIVE, &err);
}

/* POST /v1/messages/count_tokens: {"input_tokens": N}, the prompt the same
 * request to /v1/messages would decode (rendered with the template). */
static enum MHD_Result handle_count_tokens(server *s, struct MHD_Connection *mc, conn *c)
{
    oai_error err;
    oai_req rq;
    ember_token *toks = NULL;
    int32_t n_toks = 0;
    if (!request_prompt(s, c, OAI_CHAT, anth_to_oai, true, &rq, &toks, &n_toks, &err))
        return send_api_error(s, mc, API_ANTHROPIC, &err);
    free(toks);
    oai_req_free(&rq);
    return send_json(s, mc, 200, json_pack("{s:i}", "input_tokens", n_toks));
}

static enum MHD_Result handle_responses(server *s, struct MHD_Connection *mc, conn *c)
{
    return handle_generate(s, mc, c, API_RESPONSES, OAI_CHAT);
}

/* POST /v1/responses/input_tokens: {"object": "response.input_tokens",
 * "input_tokens": N}, the prompt the same request to /v1/responses would
 * decode (openai/types/responses/input_token_count_response.py). */
static enum MHD_Result handle_responses_input_tokens(server *s, struct MHD_Connection *mc, conn *c)
{
    oai_error err;
    oai_req rq;
    ember_token *toks = NULL;
    int32_t n_toks = 0;
    if (!request_prompt(s, c, OAI_CHAT, resp_to_oai, true, &rq, &toks, &n_toks, &err)) {
        resp_rename_param(&err);
        return send_error(s, mc, &err);
    }
    free(toks);
    oai_req_free(&rq);
    return send_json(s, mc, 200, json_pack("{s:s, s:i}", "object", "response.input_tokens", "input_tokens", n_toks));
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
    bool ok = body && oai_parse_messages(body, &rq, &err) && completion_render_text(&s->cc, &rq, &prompt, &err);
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
    json_object_set_new(json_object_get(j, "default_generation_settings"), "params",
                        oai_default_settings_json(s->cfg.sampling_defaults));
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
    const char *k;
    if (h && !strncasecmp(h, "Bearer ", 7)) k = h + 7;   /* RFC 7235: the scheme is case-insensitive */
    else if (!h && (h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key"))) k = h;   /* Anthropic's header */
    else return false;
    const char *want = s->cfg.api_key;
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
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle_health(server *s, struct MHD_Connection *mc, conn *c)
{
    (void)c;
    return send_json(s, mc, 200, json_pack("{s:s}", "status", "ok"));
}
/* POST /v1/embeddings (OpenAI's shape), /embeddings and /embedding
 * (llama-server's native shape): embeddings.h. The body is parsed under the
 * parse-memory cap; the answer (n_embd floats per prompt) is not. */
static enum MHD_Result handle_embeddings(server *s, struct MHD_Connection *mc, conn *c)
{
    oai_error err;
    size_t held = mem_enter(s, c->len);
    json_t *body = parse_body(c, &err);
    if (tl_mem.over) {
        mem_exceeded(s, held, &err);
        json_decref(body);
        body = NULL;
    }
    mem_leave(s, held);
    json_t *j = body ? embeddings_answer(&s->cc, body, c->v1, &err) : NULL;
    json_decref(body);
    return j ? send_json(s, mc, 200, j) : send_error(s, mc, &err);
}

static enum MHD_Result get_models(server *s, struct MHD_Connection *mc, conn *c) { (void)c; return handle_models(s, mc); }
static enum MHD_Result get_slots(server *s, struct MHD_Connection *mc, conn *c) { (void)c; return handle_slots(s, mc); }
static enum MHD_Result get_props(server *s, struct MHD_Connection *mc, conn *c) { (void)c; return handle_props(s, mc); }
static enum MHD_Result get_metrics(server *s, struct MHD_Connection *mc, conn *c) { (void)c; return handle_metrics(s, mc); }

/* Every endpoint, one row each. path: with any "/v1" prefix stripped (both
 * forms are served, as llama-server does). open: answered without the API
 * key (health checks). api: the shape of its errors. */
typedef struct route_ent {
    const char *path;
    bool post;                   /* POST, else GET */
    bool open;
    api_kind api;
    enum MHD_Result (*fn)(server *, struct MHD_Connection *, conn *);
} route_ent;

static const route_ent routes[] = {
    {"/health", false, true, API_OPENAI, handle_health},
    {"/chat/completions", true, false, API_OPENAI, handle_chat},
    {"/completions", true, false, API_OPENAI, handle_completions},
    {"/completion", true, false, API_NATIVE, handle_native},
    {"/infill", true, false, API_NATIVE, handle_infill},
    {"/messages", true, false, API_ANTHROPIC, handle_messages},
    {"/messages/count_tokens", true, false, API_ANTHROPIC, handle_count_tokens},
    {"/responses", true, false, API_RESPONSES, handle_responses},
    {"/responses/input_tokens", true, false, API_RESPONSES, handle_responses_input_tokens},
    {"/tokenize", true, false, API_OPENAI, handle_tokenize},
    {"/detokenize", true, false, API_OPENAI, handle_detokenize},
    {"/apply-template", true, false, API_OPENAI, handle_apply_template},
    {"/embeddings", true, false, API_OPENAI, handle_embeddings},
    {"/embedding", true, false, API_OPENAI, handle_embeddings},
    {"/models", false, false, API_OPENAI, get_models},
    {"/slots", false, false, API_OPENAI, get_slots},
    {"/props", false, false, API_OPENAI, get_props},
    {"/metrics", false, false, API_OPENAI, get_metrics},
};

/* POST /slots/{id}: the one route with a parameter in its path */
static const route_ent slot_route = {"/slots/", true, false, API_NATIVE, handle_slot_action};

static enum MHD_Result route(server *s, struct MHD_Connection *mc, const char *url, const char *method, conn *c)
{
    atomic_fetch_add(&s->n_http, 1);
    c->url = url;
    if (!strcmp(method, "OPTIONS")) return send_options(s, mc);
    if (!strcmp(method, "GET") && (!strcmp(url, "/") || !strcmp(url, "/index.html"))) {
        /* the web chat (webui.h): public, as llama-server's */
        struct MHD_Response *r = webui_response();
        if (!r) return MHD_NO;
        add_common_headers(s, mc, r);
        enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    /* llama-server: /completion and /completions are its native API, /v1/completions OpenAI's */
    const char *path = !strcmp(url, "/completions") ? "/completion" : strip_v1(url);
    c->v1 = !strncmp(url, "/v1/", 4);
    const route_ent *re = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0] && !re; i++)
        if (!strcmp(path, routes[i].path)) re = &routes[i];
    if (!re && !strncmp(path, slot_route.path, strlen(slot_route.path))) re = &slot_route;
    /* errors before the handler (key, size, method) keep OpenAI's shape on native routes too */
    api_kind api = re && re->api == API_ANTHROPIC ? API_ANTHROPIC : API_OPENAI;
    oai_error err;
    /* an open route answers its method check before the key; the others after */
    bool method_ok = re && !strcmp(method, re->post ? "POST" : "GET");
    if (re && re->open && !method_ok) goto method;
    if (!(re && re->open) && !authorized(s, mc)) {
        oai_error_set(&err, 401, OAI_ERR_AUTH, NULL, "invalid_api_key", "%s",
                      "Incorrect or missing API key. Send it as 'Authorization: Bearer KEY' (or 'x-api-key: KEY').");
        return send_api_error(s, mc, api, &err);
    }
    if (c->too_large) {
        char msg[160];
        oai_error_set(&err, 413, "invalid_request_error", NULL, "request_too_large", "%s",
                      too_large_message(s, msg, sizeof msg));
        return send_api_error(s, mc, api, &err);
    }
    if (!re) {
        char msg[300];
        snprintf(msg, sizeof msg, "Invalid URL (%s %.200s): no such endpoint.", method, url);
        return fail(s, mc, 404, "invalid_request_error", NULL, "not_found", msg);
    }
    if (method_ok) return re->fn(s, mc, c);
method: {
        /* RFC 9110 section 15.5.6: a 405 lists the methods the resource supports */
        const char *allow = re->post ? ALLOW_POST : ALLOW_GET;
        char msg[300];
        snprintf(msg, sizeof msg, "Method %s is not allowed for %.200s (allowed: %s).", method, url, allow);
        oai_error_set(&err, 405, "invalid_request_error", NULL, "method_not_allowed", "%s", msg);
        return send_json_h(s, mc, 405, api == API_ANTHROPIC ? anth_error_json(&err) : oai_error_json(&err), allow);
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
    s->cc = (completion_ctx){.e = e, .text = &s->text, .cfg = &s->cfg, .ct = s->ct};
    s->cc.thinking_default = s->cfg.reasoning == SERVER_REASONING_ON    ? 1
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
    if (!watch_start(s)) {
        chat_tools_free(s->ct);
        pthread_mutex_destroy(&s->mem_mu);
        pthread_cond_destroy(&s->mem_cv);
        free(s);
        return ember_error(EMBER_ERR_INTERNAL, "server: cannot start the client watcher (epoll)");
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
        watch_stop(s);
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
    watch_stop(s);
    chat_tools_free(s->ct);
    pthread_mutex_destroy(&s->mem_mu);
    pthread_cond_destroy(&s->mem_cv);
    free(s);
}
