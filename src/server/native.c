/*
 * native.c — llama.cpp's native /completion API over the completion
 * pipeline (see native.h for the shapes and their sources).
 *
 * A native body is rewritten as an OpenAI completions body (its native-only
 * fields taken out, the prompt replaced by the token ids tokenized here) and
 * parsed by oai_parse, so sampling fields are validated once for every API.
 *
 * Must not: touch sockets or HTTP.
 */
#include "server/native.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

typedef struct native_item {
    oai_req rq;
    ember_token *toks;
    int32_t n_toks;
    int32_t index;
    completion c;
    bool started;
    int32_t tok_sent;      /* stream: token records sent */
    json_t *settings;      /* generation_settings */
} native_item;

struct native_run {
    const completion_ctx *ctx;
    native_item *items;
    int32_t n, cap;
    bool stream;
    int32_t n_probs;
    bool post;             /* post_sampling_probs: "prob" / "top_probs" after the sampler chain */
    bool return_tokens;
    int32_t cur;           /* stream: the request being read */
};

/* ---------- the prompt ---------- */

static bool toks_push(ember_token **a, int32_t *n, int32_t *cap, const ember_token *t, int32_t m)
{
    if (m <= 0) return true;
    if (*n + m > *cap) {
        int32_t c = *cap ? *cap : 64;
        while (c < *n + m) c *= 2;
        ember_token *na = realloc(*a, sizeof *na * (size_t)c);
        if (!na) return false;
        *a = na;
        *cap = c;
    }
    memcpy(*a + *n, t, sizeof *t * (size_t)m);
    *n += m;
    return true;
}

static bool tokenize_sp(const completion_ctx *ctx, const char *s, size_t len, bool add_special, bool parse_special,
                        ember_token **a, int32_t *n, int32_t *cap, oai_error *err)
{
    ember_token *t = NULL;
    int32_t m = 0;
    if (ctx->text->tokenize(ctx->text->ud, s, len, add_special, parse_special, &t, &m) != EMBER_OK) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "tokenizer: %s", ember_last_error());
        return false;
    }
    bool ok = toks_push(a, n, cap, t, m);
    free(t);
    if (!ok) oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return ok;
}

static bool tokenize_into(const completion_ctx *ctx, const char *s, size_t len, bool add_special,
                          ember_token **a, int32_t *n, int32_t *cap, oai_error *err)
{
    return tokenize_sp(ctx, s, len, add_special, true, a, n, cap, err);
}

static bool has_number(const json_t *a)
{
    for (size_t i = 0; i < json_array_size(a); i++)
        if (json_is_number(json_array_get(a, i))) return true;
    return false;
}

/* One prompt (string, ids, mixed array, {"prompt_string": ...}) as ids. */
static bool one_prompt(const completion_ctx *ctx, json_t *p, const char *param, ember_token **out, int32_t *n_out,
                       oai_error *err)
{
    ember_token *a = NULL;
    int32_t n = 0, cap = 0;
    if (json_is_object(p) && json_is_string(json_object_get(p, "prompt_string"))) p = json_object_get(p, "prompt_string");
    bool ok = true;
    if (json_is_string(p)) {
        ok = tokenize_into(ctx, json_string_value(p), json_string_length(p), true, &a, &n, &cap, err);
    } else if (json_is_array(p)) {
        for (size_t i = 0; ok && i < json_array_size(p); i++) {
            json_t *e = json_array_get(p, i);
            if (json_is_string(e)) {
                ok = tokenize_into(ctx, json_string_value(e), json_string_length(e), i == 0, &a, &n, &cap, err);
            } else if (json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < ctx->text->n_vocab) {
                ember_token t = (ember_token)json_integer_value(e);
                ok = toks_push(&a, &n, &cap, &t, 1);
                if (!ok) oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            } else {
                ok = oai_bad(err, "prompt", "Invalid '%s[%zu]': expected a token id in [0, %d) or a string.", param, i,
                             ctx->text->n_vocab);
            }
        }
    } else {
        ok = oai_bad(err, "prompt",
                     "Invalid '%s': \"prompt\" elements must be a string, a list of tokens, a JSON object containing a "
                     "prompt string, or a list of mixed strings & tokens.", param);
    }
    if (ok && n == 0) ok = oai_bad(err, "prompt", "Invalid '%s': the prompt is empty.", param);
    if (!ok) {
        free(a);
        return false;
    }
    *out = a;
    *n_out = n;
    return true;
}

/* ---------- logit_bias ---------- */

/* A bias value: a number, or false (ban). NAN when neither. */
static double bias_value(json_t *v)
{
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_false(v)) return -INFINITY;
    return NAN;
}

static bool put_bias(json_t *obj, ember_token t, double b)
{
    char key[16];
    snprintf(key, sizeof key, "%d", (int)t);
    if (b < -100) b = -100;   /* oai_parse's range; -100 bans (-inf) */
    if (b > 100) b = 100;
    return json_object_set_new(obj, key, json_real(b)) == 0;
}

static bool bias_text(const completion_ctx *ctx, const char *s, size_t len, double b, json_t *obj, oai_error *err)
{
    ember_token *t = NULL;
    int32_t m = 0;
    if (ctx->text->tokenize(ctx->text->ud, s, len, false, false, &t, &m) != EMBER_OK) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "tokenizer: %s", ember_last_error());
        return false;
    }
    for (int32_t i = 0; i < m; i++) put_bias(obj, t[i], b);
    free(t);
    return true;
}

/* llama-server's logit_bias (object or list form) as oai_parse's object
 * form {"id": bias} (new reference in *out; NULL when absent). */
static bool convert_logit_bias(const completion_ctx *ctx, json_t *lb, json_t **out, oai_error *err)
{
    *out = NULL;
    if (!lb || json_is_null(lb)) return true;
    if (!json_is_array(lb) && !json_is_object(lb))
        return oai_bad(err, "logit_bias", "Invalid type for 'logit_bias': expected an object or an array of [token, bias] pairs.");
    json_t *obj = json_object();
    if (!obj) return oai_bad(err, "logit_bias", "out of memory");
    bool ok = true;
    if (json_is_array(lb)) {
        for (size_t i = 0; ok && i < json_array_size(lb); i++) {
            json_t *el = json_array_get(lb, i);
            json_t *k = json_array_get(el, 0);
            double b = bias_value(json_array_get(el, 1));
            if (!json_is_array(el) || json_array_size(el) != 2 || isnan(b)) {
                ok = oai_bad(err, "logit_bias", "Invalid 'logit_bias[%zu]': expected [token id or text, number or false].", i);
            } else if (json_is_integer(k)) {
                json_int_t t = json_integer_value(k);
                if (t < 0 || t >= ctx->text->n_vocab)
                    ok = oai_bad(err, "logit_bias", "Invalid 'logit_bias[%zu]': %lld is not a token id in [0, %d).", i,
                                 (long long)t, ctx->text->n_vocab);
                else
                    put_bias(obj, (ember_token)t, b);
            } else if (json_is_string(k)) {
                ok = bias_text(ctx, json_string_value(k), json_string_length(k), b, obj, err);
            } else {
                ok = oai_bad(err, "logit_bias", "Invalid 'logit_bias[%zu][0]': expected a token id or a string.", i);
            }
        }
    } else {
        const char *key;
        json_t *v;
        json_object_foreach(lb, key, v) {
            double b = bias_value(v);
            if (isnan(b)) {
                ok = oai_bad(err, "logit_bias", "Invalid type for 'logit_bias[\"%s\"]': expected a number or false.", key);
                break;
            }
            char *end;
            long id = strtol(key, &end, 10);
            if (*key && !*end) {
                if (id < 0 || id >= ctx->text->n_vocab) {
                    ok = oai_bad(err, "logit_bias", "Invalid 'logit_bias': key '%s' is not a token id in [0, %d).", key,
                                 ctx->text->n_vocab);
                    break;
                }
                put_bias(obj, (ember_token)id, b);
            } else if (!(ok = bias_text(ctx, key, strlen(key), b, obj, err))) {
                break;
            }
        }
    }
    if (!ok) {
        json_decref(obj);
        return false;
    }
    *out = obj;
    return true;
}

/* ---------- the request ---------- */

static bool get_bool_field(json_t *body, const char *key, bool *out, oai_error *err)
{
    json_t *v = oai_opt(body, key);
    if (!v) return true;
    if (!json_is_boolean(v)) return oai_bad(err, key, "Invalid type for '%s': expected a boolean.", key);
    *out = json_is_true(v);
    return true;
}

static bool get_int_field(json_t *body, const char *key, int64_t lo, int64_t hi, int64_t *out, oai_error *err)
{
    json_t *v = oai_opt(body, key);
    if (!v) return true;
    if (!json_is_integer(v)) return oai_bad(err, key, "Invalid type for '%s': expected an integer.", key);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return oai_bad(err, key, "Invalid '%s': %lld is out of range; expected a value in [%lld, %lld].", key,
                       (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return true;
}

static json_t *ids_json(const ember_token *t, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(t[i]));
    return a;
}

/* generation_settings (server-task.cpp task_params::to_json) for the fields
 * ember has. */
static json_t *settings_json(const native_run *nr, const oai_req *rq)
{
    const ember_sampler_params *sp = &rq->sampling;
    json_t *stop = json_array(), *lb = json_array();
    for (int32_t i = 0; i < rq->n_stop; i++) json_array_append_new(stop, json_string(rq->stop[i]));
    for (int32_t i = 0; i < sp->n_logit_bias; i++) {
        float b = sp->logit_bias[i].bias;   /* a ban is -inf: null, as llama-server's JSON writes it */
        json_array_append_new(lb, json_pack("{s:o, s:i}", "bias", isinf(b) ? json_null() : json_real(b), "token",
                                            sp->logit_bias[i].token));
    }
    return json_pack("{s:I, s:f, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:o, s:i, s:i, s:i, s:i, s:b, s:b, s:o, s:i, s:i,"
                     " s:s, s:b, s:b, s:b}",
                     "seed", (json_int_t)sp->seed, "temperature", (double)sp->temp, "top_k", sp->top_k, "top_p",
                     (double)sp->top_p, "min_p", (double)sp->min_p, "repeat_last_n", sp->penalty_last_n,
                     "repeat_penalty", (double)sp->repeat_penalty, "presence_penalty", (double)sp->presence_penalty,
                     "frequency_penalty", (double)sp->frequency_penalty, "stop", stop, "max_tokens", rq->max_tokens,
                     "n_predict", rq->max_tokens, "n_keep", rq->n_keep, "n_discard", 0, "ignore_eos", rq->ignore_eos, "stream",
                     nr->stream, "logit_bias", lb, "n_probs", nr->n_probs, "min_keep", 0, "grammar",
                     rq->gbnf ? rq->gbnf : "", "timings_per_token", 0, "post_sampling_probs", nr->post, "cache_prompt",
                     !rq->no_prompt_cache);
}

static bool add_item(native_run *nr, json_t *base, const ember_token *toks, int32_t n_toks, int32_t index,
                     int64_t seed_add, oai_error *err)
{
    if (nr->n == nr->cap) {
        int32_t cap = nr->cap ? nr->cap * 2 : 4;
        native_item *it = realloc(nr->items, sizeof *it * (size_t)cap);
        if (!it) return oai_bad(err, NULL, "out of memory");
        nr->items = it;
        nr->cap = cap;
    }
    json_t *b = json_copy(base);
    json_t *p = ids_json(toks, n_toks);
    if (!b || !p || json_object_set_new(b, "prompt", p) != 0) {
        json_decref(b);
        return oai_bad(err, NULL, "out of memory");
    }
    if (seed_add) {
        json_t *s = oai_opt(b, "seed");
        if (json_is_integer(s) && json_integer_value(s) >= 0)   /* a given seed; -1 (random) stays random */
            json_object_set_new(b, "seed", json_integer(json_integer_value(s) + seed_add));
    }
    native_item *it = &nr->items[nr->n];
    memset(it, 0, sizeof *it);
    bool ok = oai_parse(b, OAI_COMPLETION, nr->ctx->text->n_vocab, &it->rq, err);
    json_decref(b);
    if (!ok) {
        oai_req_free(&it->rq);
        return false;
    }
    nr->n++;
    it->index = index;
    it->toks = it->rq.prompt_tokens;   /* completion_prompt would hand them over the same way */
    it->n_toks = it->rq.n_prompt_tokens;
    it->rq.prompt_tokens = NULL;
    it->rq.n_prompt_tokens = 0;
    return true;
}

/* Fields of a native body that oai_parse must not see (read here) or reads
 * under other rules. */
static const char *const native_only[] = {"prompt", "n_probs", "logprobs", "logit_bias", "n", "n_cmpl",
                                          "return_tokens", "cache_prompt", "id_slot", "post_sampling_probs",
                                          "max_tokens", "max_completion_tokens", "stop", "seed"};

native_run *native_prepare(const completion_ctx *ctx, json_t *body, oai_error *err)
{
    native_run *nr = calloc(1, sizeof *nr);
    if (!nr) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    nr->ctx = ctx;
    json_t *base = NULL, *lb = NULL;
    ember_token *toks = NULL;
    bool ok = false;
    bool cache_prompt = true, post = false;
    int64_t n_probs = 0, n_cmpl = 1, id_slot = -1;
    engine_stats es;
    engine_get_stats(ctx->e, &es, NULL);

    if (!get_bool_field(body, "stream", &nr->stream, err) || !get_bool_field(body, "return_tokens", &nr->return_tokens, err) ||
        !get_bool_field(body, "cache_prompt", &cache_prompt, err) || !get_bool_field(body, "post_sampling_probs", &post, err))
        goto out;
    nr->post = post;
    const char *np_key = oai_opt(body, "n_probs") ? "n_probs" : "logprobs";
    if (!get_int_field(body, np_key, 0, ENGINE_MAX_TOP_LOGPROBS, &n_probs, err)) goto out;
    const char *n_key = oai_opt(body, "n_cmpl") ? "n_cmpl" : "n";
    if (!get_int_field(body, n_key, 1, es.n_slots, &n_cmpl, err)) goto out;
    if (!get_int_field(body, "id_slot", -1, es.n_slots - 1, &id_slot, err)) goto out;
    nr->n_probs = (int32_t)n_probs;
    if (!convert_logit_bias(ctx, oai_opt(body, "logit_bias"), &lb, err)) goto out;

    base = json_copy(body);
    if (!base) { oai_bad(err, NULL, "out of memory"); goto out; }
    for (size_t i = 0; i < sizeof native_only / sizeof native_only[0]; i++) json_object_del(base, native_only[i]);
    if (lb) json_object_set(base, "logit_bias", lb);
    /* n_predict and its aliases; llama-server's default -1 (OpenAI's completions: 16) */
    if (!oai_opt(body, "n_predict")) {
        json_t *mt = oai_opt(body, "max_tokens");
        if (!mt) mt = oai_opt(body, "max_completion_tokens");
        json_object_set_new(base, "n_predict", mt ? json_incref(mt) : json_integer(-1));
    }
    /* stop: empty strings are dropped, as llama-server does */
    json_t *stop = oai_opt(body, "stop");
    if (json_is_array(stop)) {
        json_t *s2 = json_array();
        for (size_t i = 0; i < json_array_size(stop); i++) {
            json_t *w = json_array_get(stop, i);
            if (!json_is_string(w) || json_string_length(w) > 0) json_array_append(s2, w);
        }
        json_object_set_new(base, "stop", s2);
    } else if (stop) {
        json_object_set(base, "stop", stop);
    }
    /* seed: -1 (llama-server's default) means random */
    json_t *seed = oai_opt(body, "seed");
    if (seed && !(json_is_integer(seed) && json_integer_value(seed) == -1)) json_object_set(base, "seed", seed);

    json_t *p = json_object_get(body, "prompt");
    if (!p) { oai_bad(err, "prompt", "Missing required parameter: 'prompt'."); goto out; }
    size_t n_prompts = json_is_array(p) && !has_number(p) ? json_array_size(p) : 1;
    if (n_prompts == 0) { oai_bad(err, "prompt", "Invalid 'prompt': \"prompt\" must not be empty."); goto out; }
    for (size_t i = 0; i < n_prompts; i++) {
        json_t *one = n_prompts == 1 && !(json_is_array(p) && !has_number(p)) ? p : json_array_get(p, i);
        char param[32];
        if (one == p) snprintf(param, sizeof param, "prompt");
        else snprintf(param, sizeof param, "prompt[%zu]", i);
        int32_t n_toks = 0;
        if (!one_prompt(ctx, one, param, &toks, &n_toks, err)) goto out;
        for (int64_t j = 0; j < n_cmpl; j++)
            if (!add_item(nr, base, toks, n_toks, (int32_t)(i * (size_t)n_cmpl + (size_t)j), j, err)) goto out;
        free(toks);
        toks = NULL;
    }
    for (int32_t i = 0; i < nr->n; i++) {
        oai_req *rq = &nr->items[i].rq;
        rq->stream = nr->stream;
        /* token records for n_probs, tokens and stream chunks (their "tokens") */
        rq->logprobs = nr->n_probs > 0 || nr->return_tokens || nr->stream;
        rq->top_logprobs = nr->n_probs;
        rq->no_prompt_cache = !cache_prompt;
        rq->post_sampling_probs = nr->post && nr->n_probs > 0;
        rq->pin_slot = id_slot >= 0 && i == 0;   /* extra completions cannot pin, as llama-server's children */
        rq->id_slot = (int32_t)id_slot;
        nr->items[i].settings = settings_json(nr, rq);
    }
    ok = true;
out:
    json_decref(base);
    json_decref(lb);
    free(toks);
    if (!ok) {
        native_free(nr);
        return NULL;
    }
    return nr;
}

bool native_start(native_run *nr, oai_error *err)
{
    for (int32_t i = 0; i < nr->n; i++) {
        native_item *it = &nr->items[i];
        if (!completion_start(nr->ctx, &it->rq, it->toks, it->n_toks, "cmpl-", &it->c, err)) return false;
        it->started = true;
        free(it->toks);
        it->toks = NULL;
    }
    return true;
}

bool native_stream(const native_run *nr) { return nr->stream; }
int32_t native_count(const native_run *nr) { return nr->n; }
engine_req *native_engine_req(native_run *nr, int32_t i) { return nr->items[i].started ? nr->items[i].c.r : NULL; }

/* ---------- answers ---------- */

static json_t *bytes_json(const char *b, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* {id, token, bytes, logprob} of one token; {..., prob} after the sampler
 * chain (post_sampling_probs). */
static json_t *prob_entry(const native_run *nr, ember_token t, float logprob)
{
    char buf[256];
    int32_t m = nr->ctx->text->token_piece(nr->ctx->text->ud, t, buf, sizeof buf);
    if (m < 0 || m > (int32_t)sizeof buf) m = 0;
    /* -inf has no JSON: llama-server writes the lowest float instead */
    double lp = isinf(logprob) ? -3.4028234663852886e38 : (double)logprob;
    return json_pack("{s:i, s:o, s:o, s:f}", "id", t, "token", oai_json_string(buf, (size_t)m), "bytes",
                     bytes_json(buf, m), nr->post ? "prob" : "logprob", nr->post ? (double)expf(logprob) : lp);
}

/* completion_probabilities for records [from, to). */
static json_t *probs_json(const native_run *nr, const engine_tok *toks, int32_t from, int32_t to)
{
    json_t *out = json_array();
    for (int32_t i = from; i < to; i++) {
        const engine_tok *t = &toks[i];
        json_t *e = prob_entry(nr, t->token, t->logprob);
        json_t *top = json_array();
        for (int32_t k = 0; k < t->n_top && k < nr->n_probs; k++)
            json_array_append_new(top, prob_entry(nr, t->top[k], t->top_logprob[k]));
        json_object_set_new(e, nr->post ? "top_probs" : "top_logprobs", top);
        json_array_append_new(out, e);
    }
    return out;
}

static const char *stop_type(completion_stop s)
{
    switch (s) {
    case COMPLETION_STOP_EOG: return "eos";
    case COMPLETION_STOP_WORD: return "word";
    case COMPLETION_STOP_LENGTH: return "limit";
    default: return "none";
    }
}

static int32_t slot_of(engine_req *r)
{
    engine_req_lock(r);
    int32_t s = r->slot;
    engine_req_unlock(r);
    return s;
}

/* The prompt as text (llama-server detokenizes it with special tokens). */
static json_t *prompt_text(const native_run *nr, engine_req *r)
{
    size_t len = 0, cap = 256;
    char *s = malloc(cap);
    for (int32_t i = 0; s && i < r->p.n_prompt; i++) {
        char buf[256];
        const char *sp = NULL;
        size_t spn = 0;
        if (nr->ctx->text->vocab) sp = ember_token_to_piece(nr->ctx->text->vocab, r->p.prompt[i], true, &spn);
        int32_t m;
        if (sp && spn <= sizeof buf) {   /* control tokens written out */
            memcpy(buf, sp, spn);
            m = (int32_t)spn;
        } else {
            m = nr->ctx->text->token_piece(nr->ctx->text->ud, r->p.prompt[i], buf, sizeof buf);
        }
        if (m < 0 || m > (int32_t)sizeof buf) m = 0;
        if (len + (size_t)m > cap) {
            while (len + (size_t)m > cap) cap *= 2;
            char *ns = realloc(s, cap);
            if (!ns) { free(s); s = NULL; break; }
            s = ns;
        }
        memcpy(s + len, buf, (size_t)m);
        len += (size_t)m;
    }
    json_t *j = s ? oai_json_string(s, len) : json_string("");
    free(s);
    return j;
}

/* Records of a stop string's tokens are left out of completion_probabilities,
 * as llama-server does (it drops as many records as the word has tokens). */
static int32_t probs_kept(const native_run *nr, const completion *c, const completion_update *u)
{
    int32_t n = u->res.n_toks;
    if (u->stop != COMPLETION_STOP_WORD || c->stop_index < 0) return n;
    const char *w = c->rq.stop[c->stop_index];
    ember_token *t = NULL;
    int32_t m = 0;
    if (nr->ctx->text->tokenize(nr->ctx->text->ud, w, strlen(w), false, false, &t, &m) != EMBER_OK) m = 0;
    free(t);
    return m < n ? n - m : 0;
}

/* The final result object of item i (server_task_result_cmpl_final::
 * to_json_non_oaicompat). */
static json_t *final_json(const native_run *nr, native_item *it, const completion_update *u)
{
    const completion *c = &it->c;
    const oai_result *res = &u->res;
    bool st = nr->stream;
    json_t *toks = json_array();
    if (!st && nr->return_tokens && res->toks)
        for (int32_t i = 0; i < res->n_toks; i++) json_array_append_new(toks, json_integer(res->toks[i].token));
    const char *word = u->stop == COMPLETION_STOP_WORD && c->stop_index >= 0 ? c->rq.stop[c->stop_index] : "";
    int32_t cached = res->n_prompt + (res->n_generated > 0 ? res->n_generated - 1 : 0);
    /* llama-server's truncated: the context was shifted, or the reply stopped at the slot's context */
    engine_req_lock(c->r);
    bool truncated = c->r->n_ctx_shifts > 0;
    engine_req_unlock(c->r);
    truncated |= u->stop == COMPLETION_STOP_LENGTH && (c->rq.max_tokens < 0 || res->n_generated < c->rq.max_tokens);
    json_t *j = json_pack("{s:i, s:o, s:o, s:i, s:b, s:s, s:i, s:i, s:O, s:o, s:b, s:b, s:s, s:s, s:i, s:o}",
                          "index", it->index, "content", st ? json_string("") : oai_json_string(res->text, res->text_len),
                          "tokens", toks, "id_slot", slot_of(c->r), "stop", 1, "model", res->model,
                          "tokens_predicted", res->n_generated, "tokens_evaluated", res->n_prompt,
                          "generation_settings", it->settings, "prompt", prompt_text(nr, c->r), "has_new_line",
                          memchr(res->text, '\n', res->text_len) != NULL, "truncated", truncated, "stop_type",
                          stop_type(u->stop), "stopping_word", word, "tokens_cached", cached, "timings",
                          oai_timings_json(res));
    if (j && !st && nr->n_probs > 0 && res->toks)
        json_object_set_new(j, "completion_probabilities", probs_json(nr, res->toks, 0, probs_kept(nr, c, u)));
    return j;
}

static void failed(const completion *c, const completion_update *u, bool *cancelled, oai_error *err)
{
    *cancelled = u->stop == COMPLETION_CANCELLED;
    oai_error_set(err, u->stop == COMPLETION_ERROR ? 500 : 503, "server_error", NULL, NULL, "%s", c->err);
}

json_t *native_whole(native_run *nr, bool *cancelled, oai_error *err)
{
    *cancelled = false;
    json_t *arr = json_array();
    for (int32_t i = 0; i < nr->n; i++) {
        native_item *it = &nr->items[i];
        completion_update u;
        completion_next(&it->c, true, &u);
        if (u.stop == COMPLETION_ERROR || u.stop == COMPLETION_CANCELLED) {
            failed(&it->c, &u, cancelled, err);
            json_decref(arr);
            return NULL;
        }
        json_array_append_new(arr, final_json(nr, it, &u));
    }
    if (json_array_size(arr) == 1) {
        json_t *one = json_incref(json_array_get(arr, 0));
        json_decref(arr);
        return one;
    }
    return arr;
}

bool native_stream_next(native_run *nr, void (*emit)(void *ud, json_t *data), void *ud, bool *cancelled)
{
    *cancelled = false;
    if (nr->cur >= nr->n) return true;
    native_item *it = &nr->items[nr->cur];
    completion_update u;
    completion_next(&it->c, false, &u);
    if (u.stop == COMPLETION_ERROR || u.stop == COMPLETION_CANCELLED) {
        oai_error err;
        failed(&it->c, &u, cancelled, &err);
        emit(ud, native_error_json(&err));
        nr->cur = nr->n;
        return true;
    }
    const oai_result *res = &u.res;
    /* a token's record comes before its text: both go in one event once the text is there */
    int32_t from = it->tok_sent, to = u.tok_to;
    const engine_tok *recs = it->c.toks_buf;
    if (u.n_delta > 0 || (u.stop != COMPLETION_RUNNING && to > from)) {
        json_t *toks = json_array();
        for (int32_t i = from; recs && i < to; i++) json_array_append_new(toks, json_integer(recs[i].token));
        it->tok_sent = to;
        json_t *j = json_pack("{s:i, s:o, s:o, s:b, s:i, s:i, s:i}", "index", it->index, "content",
                              oai_json_string(u.delta, u.n_delta), "tokens", toks, "stop", 0, "id_slot",
                              slot_of(it->c.r), "tokens_predicted", res->n_generated, "tokens_evaluated",
                              res->n_prompt);
        if (j && nr->n_probs > 0 && recs && to > from)
            json_object_set_new(j, "completion_probabilities", probs_json(nr, recs, from, to));
        emit(ud, j);
    }
    if (u.stop == COMPLETION_RUNNING) return false;
    emit(ud, final_json(nr, it, &u));
    nr->cur++;
    return nr->cur >= nr->n;
}

/* ---------- /infill ---------- */

/* input_prefix / input_suffix: a string or a mixed array of strings and ids
 * (tokenize_mixed without BOS and without control-token parsing). */
static bool infill_part(const completion_ctx *ctx, json_t *body, const char *key, ember_token **a, int32_t *n,
                        int32_t *cap, oai_error *err)
{
    json_t *v = json_object_get(body, key);
    if (!v) return oai_bad(err, key, "\"%s\" is required", key);
    if (json_is_string(v)) return tokenize_sp(ctx, json_string_value(v), json_string_length(v), false, false, a, n, cap, err);
    if (!json_is_array(v)) return oai_bad(err, key, "Invalid type for '%s': expected a string or an array of strings and token ids.", key);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (json_is_string(e)) {
            if (!tokenize_sp(ctx, json_string_value(e), json_string_length(e), false, false, a, n, cap, err)) return false;
        } else if (json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < ctx->text->n_vocab) {
            ember_token t = (ember_token)json_integer_value(e);
            if (!toks_push(a, n, cap, &t, 1)) return oai_bad(err, NULL, "out of memory");
        } else {
            return oai_bad(err, key, "Invalid '%s[%zu]': expected a string or a token id in [0, %d).", key, i,
                           ctx->text->n_vocab);
        }
    }
    return true;
}

typedef struct tokbuf { ember_token *a; int32_t n, cap; } tokbuf;

static bool push1(tokbuf *b, ember_token t) { return toks_push(&b->a, &b->n, &b->cap, &t, 1); }

static bool push_text(const completion_ctx *ctx, tokbuf *b, const char *s, oai_error *err)
{
    return tokenize_sp(ctx, s, strlen(s), false, false, &b->a, &b->n, &b->cap, err);
}

/* The FIM prompt as llama-server lays it out (server-common.cpp
 * format_prompt_infill, the repo-level pattern of arXiv 2409.12186, PSM
 * order): [FIM_REP]myproject\n, then per input_extra chunk [FIM_SEP]name\n
 * (or a "--- snippet ---" line without FIM_SEP) and its text, then
 * [FIM_SEP]filename\n; the last n_ctx - n_batch - 2 n_predict tokens of that,
 * then [BOS] [FIM_PRE] prefix (its last 3/4 n_batch tokens) prompt [FIM_SUF]
 * suffix (its first n_batch/4 - 2 - |prompt| tokens) [FIM_MID]. */
static bool infill_tokens(const completion_ctx *ctx, json_t *body, tokbuf *out, oai_error *err)
{
    const struct ember_vocab *v = ctx->text->vocab;
    ember_token pre = ember_vocab_fim(v, EMBER_FIM_PRE), suf = ember_vocab_fim(v, EMBER_FIM_SUF),
                mid = ember_vocab_fim(v, EMBER_FIM_MID), rep = ember_vocab_fim(v, EMBER_FIM_REP),
                sep = ember_vocab_fim(v, EMBER_FIM_SEP);
    json_t *prompt = oai_opt(body, "prompt"), *extra = oai_opt(body, "input_extra");
    if (prompt && !json_is_string(prompt)) return oai_bad(err, "prompt", "\"prompt\" must be a string");
    if (extra && !json_is_array(extra))
        return oai_bad(err, "input_extra", "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}");
    for (size_t i = 0; i < json_array_size(extra); i++) {
        json_t *c = json_array_get(extra, i);
        if (!json_is_string(json_object_get(c, "text")))
            return oai_bad(err, "input_extra", "extra_context chunk must contain a \"text\" field with a string value");
        json_t *f = json_object_get(c, "filename");
        if (f && !json_is_string(f))
            return oai_bad(err, "input_extra", "extra_context chunk's \"filename\" field must be a string");
    }
    tokbuf px = {0}, sx = {0}, pr = {0}, ex = {0};
    bool ok = infill_part(ctx, body, "input_prefix", &px.a, &px.n, &px.cap, err) &&
              infill_part(ctx, body, "input_suffix", &sx.a, &sx.n, &sx.cap, err);
    if (ok && prompt)
        ok = tokenize_sp(ctx, json_string_value(prompt), json_string_length(prompt), false, true, &pr.a, &pr.n, &pr.cap, err);
    if (ok && rep >= 0) ok = push1(&ex, rep) && push_text(ctx, &ex, "myproject\n", err);
    for (size_t i = 0; ok && i < json_array_size(extra); i++) {
        json_t *c = json_array_get(extra, i), *f = json_object_get(c, "filename");
        if (sep >= 0) {
            char *name = NULL;
            const char *fn = f ? json_string_value(f) : "tmp";
            size_t len = strlen(fn);
            name = malloc(len + 2);
            ok = name != NULL;
            if (ok) {
                memcpy(name, fn, len);
                memcpy(name + len, "\n", 2);
                ok = push1(&ex, sep) && push_text(ctx, &ex, name, err);
            }
            free(name);
        } else {
            ok = push_text(ctx, &ex, "\n\n--- snippet ---\n\n", err);
        }
        json_t *t = json_object_get(c, "text");
        if (ok) ok = tokenize_sp(ctx, json_string_value(t), json_string_length(t), false, false, &ex.a, &ex.n, &ex.cap, err);
    }
    if (ok && sep >= 0) ok = push1(&ex, sep) && push_text(ctx, &ex, "filename\n", err);
    if (ok) {
        engine_stats es;
        engine_get_stats(ctx->e, &es, NULL);
        json_t *dn = json_object_get(ctx->cfg->sampling_defaults, "n_predict");
        int64_t n_predict = json_is_integer(dn) ? json_integer_value(dn) : -1;
        int32_t n_batch = es.n_batch, n_ctx = es.n_ctx;
        int32_t take_pre = px.n < 3 * (n_batch / 4) ? px.n : 3 * (n_batch / 4);
        int32_t room_suf = n_batch / 4 - (2 + pr.n);
        if (room_suf < 0) room_suf = 0;
        int32_t take_suf = sx.n < room_suf ? sx.n : room_suf;
        int64_t room_ex = (int64_t)n_ctx - n_batch - 2 * n_predict;
        if (room_ex < 0) room_ex = 0;
        int32_t take_ex = ex.n < room_ex ? ex.n : (int32_t)room_ex;
        ember_token bos = ctx->text->bos;
        ok = toks_push(&out->a, &out->n, &out->cap, ex.a + ex.n - take_ex, take_ex) &&
             (!(bos >= 0 && ember_vocab_add_bos(v)) || push1(out, bos)) && push1(out, pre) &&
             toks_push(&out->a, &out->n, &out->cap, px.a + px.n - take_pre, take_pre) &&
             toks_push(&out->a, &out->n, &out->cap, pr.a, pr.n) && push1(out, suf) &&
             toks_push(&out->a, &out->n, &out->cap, sx.a, take_suf) && push1(out, mid);
        if (!ok) oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    free(px.a);
    free(sx.a);
    free(pr.a);
    free(ex.a);
    return ok;
}

native_run *native_prepare_infill(const completion_ctx *ctx, json_t *body, oai_error *err)
{
    const struct ember_vocab *v = ctx->text->vocab;
    char why[128] = "";
    if (!v || ember_vocab_fim(v, EMBER_FIM_PRE) < 0) strcat(why, "prefix token is missing. ");
    if (!v || ember_vocab_fim(v, EMBER_FIM_SUF) < 0) strcat(why, "suffix token is missing. ");
    if (!v || ember_vocab_fim(v, EMBER_FIM_MID) < 0) strcat(why, "middle token is missing. ");
    if (why[0]) {
        oai_error_set(err, 501, "not_supported_error", NULL, NULL, "Infill is not supported by this model: %s", why);
        return NULL;
    }
    tokbuf t = {0};
    if (!infill_tokens(ctx, body, &t, err)) {
        free(t.a);
        return NULL;
    }
    json_t *b = json_copy(body);
    json_t *ids = ids_json(t.a, t.n);
    free(t.a);
    if (!b || !ids) {
        json_decref(b);
        json_decref(ids);
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    json_object_del(b, "input_prefix");
    json_object_del(b, "input_suffix");
    json_object_del(b, "input_extra");
    json_object_set_new(b, "prompt", ids);
    native_run *nr = native_prepare(ctx, b, err);
    json_decref(b);
    return nr;
}

json_t *native_error_json(const oai_error *err)
{
    json_t *e = json_pack("{s:i, s:s, s:s}", "code", err->http_status, "message", err->message, "type",
                          err->type ? err->type : "invalid_request_error");
    if (e && err->type && !strcmp(err->type, OAI_ERR_EXCEED_CONTEXT)) {
        json_object_set_new(e, "n_prompt_tokens", json_integer(err->n_prompt_tokens));
        json_object_set_new(e, "n_ctx", json_integer(err->n_ctx));
    }
    return json_pack("{s:o}", "error", e);
}

void native_free(native_run *nr)
{
    if (!nr) return;
    for (int32_t i = 0; i < nr->n; i++) {
        native_item *it = &nr->items[i];
        if (it->started) completion_free(&it->c);
        oai_req_free(&it->rq);
        free(it->toks);
        json_decref(it->settings);
    }
    free(nr->items);
    free(nr);
}
