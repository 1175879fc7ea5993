/*
 * completion.c — the server's one completion pipeline (see completion.h):
 * request -> prompt tokens -> engine parameters -> engine request, and the
 * reader every API streams or answers from.
 *
 * Must not: touch sockets or HTTP, or know any API's response JSON.
 */
#include "server/completion.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "chat/template.h"

/* ---------- prompt ---------- */

/* --chat-template-kwargs merged with the request's own (new reference), over
 * the --reasoning default of enable_thinking. */
static json_t *template_kwargs(const completion_ctx *ctx, const oai_req *rq)
{
    json_t *kw = json_object();
    if (ctx->thinking_default >= 0) json_object_set_new(kw, "enable_thinking", json_boolean(ctx->thinking_default));
    if (ctx->cfg->template_kwargs) json_object_update(kw, ctx->cfg->template_kwargs);
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

bool completion_render_text(const completion_ctx *ctx, const oai_req *rq, char **prompt, oai_error *err)
{
    json_t *kw = template_kwargs(ctx, rq);
    ember_status st = ctx->text->apply_template(ctx->text->ud, rq->messages, rq->tools, kw, rq->add_generation_prompt,
                                                rq->continue_final, prompt);
    json_decref(kw);
    return st == EMBER_OK || render_failed(st, err);
}

/* A template that writes bos_token itself plus add_bos: keep one. */
static void drop_double_bos(const completion_ctx *ctx, ember_token *toks, int32_t *n)
{
    if (ctx->text->bos >= 0 && *n >= 2 && toks[0] == ctx->text->bos && toks[1] == ctx->text->bos) {
        memmove(toks, toks + 1, sizeof *toks * (size_t)(*n - 1));
        (*n)--;
    }
}

static bool tokenize_prompt(const completion_ctx *ctx, const char *text, ember_token **toks, int32_t *n,
                            oai_error *err)
{
    ember_status st = ctx->text->tokenize(ctx->text->ud, text, strlen(text), true, true, toks, n);
    if (st != EMBER_OK) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "tokenizer: %s", ember_last_error());
        return false;
    }
    drop_double_bos(ctx, *toks, n);
    return true;
}

/* The prompt tokens of a chat request: rendered and tokenized in one go when
 * the text side can (control-token text in contents stays text), else
 * rendered, then tokenized with parse_special. */
static bool chat_prompt_tokens(const completion_ctx *ctx, const oai_req *rq, ember_token **toks, int32_t *n,
                               oai_error *err)
{
    if (!ctx->text->render_tokens) {
        char *prompt = NULL;
        bool ok = completion_render_text(ctx, rq, &prompt, err) && tokenize_prompt(ctx, prompt, toks, n, err);
        free(prompt);
        return ok;
    }
    json_t *kw = template_kwargs(ctx, rq);
    ember_status st = ctx->text->render_tokens(ctx->text->ud, rq->messages, rq->tools, kw, rq->add_generation_prompt,
                                               rq->continue_final, toks, n);
    json_decref(kw);
    if (st != EMBER_OK) return render_failed(st, err);
    drop_double_bos(ctx, *toks, n);
    return true;
}

bool completion_prompt(const completion_ctx *ctx, oai_req *rq, ember_token **toks, int32_t *n_toks, oai_error *err)
{
    *toks = NULL;
    *n_toks = 0;
    if (rq->kind == OAI_CHAT && chat_tools_uses_generic(ctx->ct, rq)) {   /* a forced call, no call format */
        json_t *m = chat_tools_generic_messages(rq);
        if (!m) {
            oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return false;
        }
        json_decref(rq->messages);
        rq->messages = m;
    }
    if (rq->kind == OAI_CHAT) return chat_prompt_tokens(ctx, rq, toks, n_toks, err);
    if (rq->prompt) return tokenize_prompt(ctx, rq->prompt, toks, n_toks, err);
    *toks = rq->prompt_tokens;
    *n_toks = rq->n_prompt_tokens;
    rq->prompt_tokens = NULL;
    return true;
}

/* ---------- engine parameters ---------- */

/* Structured output, tool calls and thinking for one request: the grammar
 * (response_format / grammar / json_schema, or the one tool_choice required
 * / named needs), the reasoning-budget hook, and whether (and how) the
 * output goes through the chat parser. False with *err (400/500). */
static bool prepare_structured(const completion_ctx *ctx, const oai_req *rq, const ember_token *toks, int32_t n_toks,
                               engine_req_params *ep, ember_chat_parser_config *pcfg, bool *use_parser, oai_error *err)
{
    *use_parser = false;
    memset(pcfg, 0, sizeof *pcfg);
    char *tool_gbnf = NULL;
    const char *gbnf = rq->gbnf;
    bool open = false;
    int32_t budget = -1;
    if (rq->kind == OAI_CHAT) {
        ember_tool_format tf = chat_tools_uses_generic(ctx->ct, rq) ? EMBER_TOOL_FORMAT_GENERIC
                                                                    : chat_tools_tool_format(ctx->ct);
        ember_reasoning_syntax rs = chat_tools_reasoning(ctx->ct);
        const char *param = "tool_choice";
        ember_status st = chat_tools_choice_gbnf_tmpl(rq, tf, ctx->text->chat_template, &tool_gbnf, &param);
        if (st != EMBER_OK) {
            oai_error_set(err, st == EMBER_ERR_NOMEM ? 500 : 400, "invalid_request_error", param, NULL, "%s",
                          ember_last_error());
            return false;
        }
        open = chat_tools_prompt_opens(ctx->ct, toks, n_toks);
        if (tool_gbnf && open) {   /* the thought the prompt opened comes first, then the call */
            char *g = NULL;
            st = chat_tools_after_thought(tool_gbnf, rs, tf, &g);
            free(tool_gbnf);
            tool_gbnf = g;
            if (st != EMBER_OK) {
                oai_error_set(err, 500, "server_error", NULL, NULL, "%s", ember_last_error());
                return false;
            }
        }
        if (tool_gbnf) gbnf = tool_gbnf;
        budget = rq->reasoning_budget != -2 ? rq->reasoning_budget
                 : ctx->cfg->has_reasoning_budget ? ctx->cfg->reasoning_budget : -1;
        /* a forced call (required / named) after a thought the prompt opened:
         * without a budget a thought that never ends leaves no call within
         * max_tokens (llama-server then answers with none), so the thought
         * gets at most a quarter of max_tokens and the call the rest */
        if (tool_gbnf && open && budget < 0 && rq->max_tokens > 0) budget = rq->max_tokens / 4;
        pcfg->tool_format = rq->tools && rq->tool_choice != OAI_TOOL_CHOICE_NONE ? tf : EMBER_TOOL_FORMAT_NONE;
        pcfg->reasoning = ctx->cfg->reasoning_format_none ? EMBER_REASONING_NONE : rs;
        pcfg->reasoning_open_at_start = open && pcfg->reasoning != EMBER_REASONING_NONE;
        pcfg->stream_arguments = true;
        *use_parser = pcfg->tool_format != EMBER_TOOL_FORMAT_NONE || pcfg->reasoning != EMBER_REASONING_NONE;
    }
    ember_status st = chat_tools_prepare(ctx->ct, gbnf, budget, open, ep);
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

static void make_id(const char *prefix, char *out, size_t cap)
{
    static _Atomic uint64_t next_id;
    uint64_t n = next_id++;
    uint64_t x = ((uint64_t)time(NULL) << 20) ^ (n * 0x9E3779B97F4A7C15ull);
    snprintf(out, cap, "%s%016llx%04llx", prefix, (unsigned long long)x, (unsigned long long)(n & 0xffff));
}

bool completion_start(const completion_ctx *ctx, oai_req *rq, const ember_token *toks, int32_t n_toks,
                      const char *id_prefix, completion *c, oai_error *err)
{
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    c->stop_index = -1;
    engine_req_params ep = {.prompt = toks, .n_prompt = n_toks, .n_predict = rq->max_tokens,
                            .sampling = rq->sampling, .n_stop = rq->n_stop, .logprobs = rq->logprobs,
                            .top_logprobs = rq->top_logprobs, .ignore_eos = rq->ignore_eos,
                            .pin_slot = rq->pin_slot, .id_slot = rq->id_slot,
                            .no_prompt_cache = rq->no_prompt_cache, .post_sampling_probs = rq->post_sampling_probs,
                            /* llama-server: n_keep (-1: the whole prompt), plus the BOS */
                            .n_keep = (rq->n_keep < 0 ? n_toks : rq->n_keep) +
                                      (ctx->text->bos >= 0 && n_toks > 0 && toks[0] == ctx->text->bos)};
    for (int32_t i = 0; i < rq->n_stop; i++) ep.stop[i] = rq->stop[i];
    if (!prepare_structured(ctx, rq, toks, n_toks, &ep, &c->pcfg, &c->use_parser, err)) return false;
    ember_status st = engine_submit(ctx->e, &ep, &c->r);
    if (st != EMBER_OK) {
        c->r = NULL;
        const char *param = rq->kind == OAI_CHAT ? "messages" : "prompt";
        if (st == EMBER_ERR_RANGE) {
            /* OpenAI's code, llama-server's type and numbers (its clients key on either) */
            engine_stats es;
            engine_get_stats(ctx->e, &es, NULL);
            oai_error_set(err, 400, OAI_ERR_EXCEED_CONTEXT, param, "context_length_exceeded", "%s",
                          ember_last_error());
            err->n_prompt_tokens = n_toks;
            err->n_ctx = es.n_ctx;
        } else if (st == EMBER_ERR_NOMEM || st == EMBER_ERR_IO) {
            oai_error_set(err, 503, "server_error", NULL, NULL, "%s", ember_last_error());
        } else {
            oai_error_set(err, 400, "invalid_request_error", param, NULL, "%s", ember_last_error());
        }
        return false;
    }
    c->rq = *rq;
    memset(rq, 0, sizeof *rq);
    c->pcfg.tools = c->rq.tools;
    c->n_prompt = n_toks;
    make_id(id_prefix, c->id, sizeof c->id);
    c->created = (int64_t)time(NULL);
    return true;
}

/* ---------- the reader ---------- */

static void on_parser_event(void *user, const ember_chat_event *ev)
{
    completion *c = user;
    if (ev->kind == EMBER_CHAT_EV_TOOL_START) c->saw_tool_call = true;
    /* no empty content / reasoning delta is passed on */
    if ((ev->kind == EMBER_CHAT_EV_CONTENT || ev->kind == EMBER_CHAT_EV_REASONING) && ev->len == 0) return;
    if (c->on_event) c->on_event(c->on_event_user, ev);
}

ember_status completion_stream_events(completion *c, ember_chat_event_fn fn, void *user)
{
    c->on_event = fn;
    c->on_event_user = user;
    if (!c->use_parser || c->parser) return EMBER_OK;
    ember_chat_parser_config cfg = c->pcfg;
    cfg.on_event = on_parser_event;
    cfg.user = c;
    return ember_chat_parser_new(&cfg, &c->parser);
}

static completion_stop stop_of(const completion *c, engine_finish f)
{
    switch (f) {
    case ENGINE_RUNNING: return COMPLETION_RUNNING;
    case ENGINE_FINISH_STOP:
        if (c->saw_tool_call) return COMPLETION_STOP_TOOL;
        return c->stop_index >= 0 ? COMPLETION_STOP_WORD : COMPLETION_STOP_EOG;
    case ENGINE_FINISH_LENGTH: return COMPLETION_STOP_LENGTH;
    case ENGINE_FINISH_CANCELLED: return COMPLETION_CANCELLED;
    case ENGINE_FINISH_ERROR: break;
    }
    return COMPLETION_ERROR;
}

void completion_next(completion *c, bool until_done, completion_update *u)
{
    engine_req *r = c->r;
    memset(u, 0, sizeof *u);
    engine_req_lock(r);
    if (until_done) {
        while (r->finish == ENGINE_RUNNING) pthread_cond_wait(&r->cv, &r->mu);
    } else {
        while (c->first_read && r->finish == ENGINE_RUNNING && r->text_len == c->text_read &&
               r->n_toks == c->toks_read)
            pthread_cond_wait(&r->cv, &r->mu);
    }
    size_t from = until_done ? 0 : c->text_read;
    size_t n = r->text_len - from;
    char *d = realloc(c->delta_buf, n + 1);
    if (d) {
        c->delta_buf = d;
        if (n) memcpy(d, r->text + from, n);
        d[n] = 0;
    } else {
        n = 0;
    }
    int32_t tok_from = until_done ? 0 : c->toks_read, tok_to = r->n_toks;
    if (tok_to > tok_from) {
        engine_tok *t = realloc(c->toks_buf, sizeof *t * (size_t)tok_to);
        if (t) {
            c->toks_buf = t;
            memcpy(t + tok_from, r->toks + tok_from, sizeof *t * (size_t)(tok_to - tok_from));
        } else {
            tok_to = tok_from;
        }
    }
    engine_finish f = r->finish;
    if (f != ENGINE_RUNNING) {
        c->stop_index = r->stop_index;
        snprintf(c->err, sizeof c->err, "%s", r->err[0] ? r->err : "the request was cancelled");
    }
    u->res = (oai_result){.id = c->id, .model = c->ctx->cfg->alias, .created = c->created, .finish = f,
                          .n_prompt = r->n_prompt, .n_cached = r->n_cached, .n_generated = r->n_generated,
                          .draft_n = r->n_draft, .draft_n_accepted = r->n_draft_accepted, .t_start = r->t_start,
                          .t_first_token = r->t_first_token, .t_end = r->t_end};
    engine_req_unlock(r);

    u->delta = d ? c->delta_buf : "";
    u->n_delta = n;
    u->tok_from = tok_from;
    u->tok_to = tok_to;
    u->res.text = u->delta;
    u->res.text_len = n;
    u->res.toks = tok_to > tok_from ? c->toks_buf : NULL;
    u->res.n_toks = tok_to;
    u->first = !c->first_read;
    c->first_read = true;
    c->text_read = from + n;
    c->toks_read = tok_to;
    if (c->parser && f != ENGINE_FINISH_ERROR && f != ENGINE_FINISH_CANCELLED) {
        if (n) ember_chat_parser_feed(c->parser, u->delta, n);
        if (f == ENGINE_FINISH_LENGTH) ember_chat_parser_finish_cut(c->parser);
        else if (f != ENGINE_RUNNING) ember_chat_parser_finish(c->parser);
    }
    u->stop = stop_of(c, f);
}

json_t *completion_message(completion *c, const completion_update *u)
{
    if (!c->use_parser) return NULL;
    json_t *msg = NULL;
    if (ember_chat_parse_whole_cut(&c->pcfg, u->res.text, u->res.text_len, u->res.finish == ENGINE_FINISH_LENGTH,
                                   &msg) != EMBER_OK)
        return NULL;
    if (json_array_size(json_object_get(msg, "tool_calls")) > 0) c->saw_tool_call = true;
    return msg;
}

completion_stop completion_stop_of(const completion *c, const completion_update *u)
{
    return stop_of(c, u->res.finish);
}

void completion_free(completion *c)
{
    if (c->r) {
        engine_req_cancel(c->r);   /* no-op when finished; frees the slot when the client left */
        engine_req_release(c->r);
    }
    ember_chat_parser_free(c->parser);
    oai_req_free(&c->rq);
    free(c->delta_buf);
    free(c->toks_buf);
    memset(c, 0, sizeof *c);
}
