/*
 * embeddings.c — the embeddings endpoints (see embeddings.h): parse, tokenize,
 * submit one engine request per prompt (all at once, so they share steps
 * with each other and with chats), wait for each, normalize, write JSON.
 *
 * Owns: the request and answer JSON of the embeddings APIs. Must not: touch
 * sockets or the model.
 */
#include "server/embeddings.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

void embeddings_normalize(const float *in, float *out, int32_t n, int32_t norm)
{
    double sum = 0.0;
    if (norm < 0) {
        sum = 1.0;
    } else if (norm == 0) {   /* max absolute, scaled to the int16 range */
        for (int32_t i = 0; i < n; i++) if (fabs((double)in[i]) > sum) sum = fabs((double)in[i]);
        sum /= 32760.0;
    } else if (norm == 2) {
        for (int32_t i = 0; i < n; i++) sum += (double)in[i] * (double)in[i];
        sum = sqrt(sum);
    } else {                  /* p-norm (1: taxicab) */
        for (int32_t i = 0; i < n; i++) sum += pow(fabs((double)in[i]), (double)norm);
        sum = pow(sum, 1.0 / (double)norm);
    }
    const float scale = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int32_t i = 0; i < n; i++) out[i] = in[i] * scale;
}

/* One prompt's tokens. */
typedef struct embd_prompt {
    ember_token *toks;
    int32_t n, cap;
} embd_prompt;

static bool push_tok(embd_prompt *p, ember_token t)
{
    if (p->n == p->cap) {
        int32_t cap = p->cap ? p->cap * 2 : 64;
        ember_token *nt = realloc(p->toks, sizeof *nt * (size_t)cap);
        if (!nt) return false;
        p->toks = nt;
        p->cap = cap;
    }
    p->toks[p->n++] = t;
    return true;
}

static bool has_number(json_t *a)
{
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) if (json_is_number(v)) return true;
    return false;
}

/* A subprompt: a string, or an array of strings and token ids (llama-server's
 * tokenize_mixed: special tokens added only before a leading string). */
static bool tokenize_sub(const completion_ctx *ctx, json_t *v, const char *param, embd_prompt *p, oai_error *err)
{
    const server_text *t = ctx->text;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v))
        return oai_bad(err, param, "Invalid type for '%s': expected a string, an array of token ids, or an array of "
                       "them.", param);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (json_is_string(e)) {
            ember_token *toks = NULL;
            int32_t nt = 0;
            ember_status st = t->tokenize(t->ud, json_string_value(e), json_string_length(e), i == 0, true, &toks, &nt);
            if (st != EMBER_OK) {
                oai_error_set(err, 500, "server_error", NULL, NULL, "tokenizer: %s", ember_last_error());
                return false;
            }
            bool ok = true;
            for (int32_t k = 0; k < nt && ok; k++) ok = push_tok(p, toks[k]);
            free(toks);
            if (!ok) goto nomem;
        } else if (json_is_integer(e)) {
            const json_int_t id = json_integer_value(e);
            if (id < 0 || id >= t->n_vocab)
                return oai_bad(err, param, "Invalid token id %lld in '%s': expected a token id in [0, %d).",
                               (long long)id, param, t->n_vocab);
            if (!push_tok(p, (ember_token)id)) goto nomem;
        } else {
            return oai_bad(err, param, "Invalid '%s[%zu]': expected a string or a token id.", param, i);
        }
    }
    return true;
nomem:
    oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return false;
}

/* base64 (RFC 4648) of bytes[n], malloc'd and NUL-terminated. */
static char *base64(const unsigned char *b, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        *w++ = a[v >> 18 & 63];
        *w++ = a[v >> 12 & 63];
        *w++ = i + 1 < n ? a[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? a[v & 63] : '=';
    }
    *w = '\0';
    return o;
}

static json_t *float_array(const float *v, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++) json_array_append_new(a, json_real((double)v[i]));
    return a;
}

/* The float32 bytes of v[n], little-endian as OpenAI's base64 encoding. */
static json_t *float_base64(const float *v, int32_t n)
{
    unsigned char *b = malloc((size_t)n * 4);
    if (!b) return NULL;
    for (int32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    char *s = base64(b, (size_t)n * 4);
    free(b);
    json_t *j = s ? json_string(s) : NULL;
    free(s);
    return j;
}

json_t *embeddings_answer(const completion_ctx *ctx, json_t *body, bool oai, oai_error *err)
{
    const server_config *cfg = ctx->cfg;
    if (!cfg->embedding) {
        oai_error_set(err, 501, "not_supported_error", NULL, NULL, "%s",
                      "This server does not support embeddings. Start it with `--embeddings`");
        return NULL;
    }
    if (oai && cfg->pooling == EMBER_POOLING_NONE) {
        oai_error_set(err, 400, "invalid_request_error", NULL, NULL, "%s",
                      "Pooling type 'none' is not OAI compatible. Please use a different pooling type");
        return NULL;
    }
    const char *param = "input";
    json_t *input = oai_opt(body, "input");
    if (!input && (input = oai_opt(body, "content"))) {
        oai = false;   /* "content" is not OpenAI's: the native answer, as llama-server */
        param = "content";
    }
    if (!input) {
        oai_bad(err, "input", "\"input\" or \"content\" must be provided");
        return NULL;
    }
    bool use_base64 = false;
    json_t *fmt = oai_opt(body, "encoding_format");
    if (fmt) {
        if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "base64")) use_base64 = true;
        else if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "float") != 0) {
            oai_bad(err, "encoding_format", "The format to return the embeddings in. Can be either float or base64");
            return NULL;
        }
    }
    if (oai_opt(body, "dimensions")) {
        oai_bad(err, "dimensions", "%s", "'dimensions' is not supported: the embeddings have the model's own size "
                "(its n_embd); leave the field out.");
        return NULL;
    }
    int32_t norm = 2;
    json_t *jn = oai_opt(body, "embd_normalize");
    if (jn) {
        if (!json_is_integer(jn) || json_integer_value(jn) < -1 || json_integer_value(jn) > 64) {
            oai_bad(err, "embd_normalize", "Invalid 'embd_normalize': expected an integer in [-1, 64].");
            return NULL;
        }
        norm = (int32_t)json_integer_value(jn);
    }

    /* the prompts: a list of subprompts unless it is one array holding numbers */
    const bool list = json_is_array(input) && !has_number(input);
    const size_t n_prompts = list ? json_array_size(input) : 1;
    if (n_prompts == 0) {
        oai_bad(err, param, "\"input\" must not be empty");
        return NULL;
    }
    if (n_prompts > 2048) {
        oai_bad(err, param, "'%s' holds %zu prompts; at most 2048 per request.", param, n_prompts);
        return NULL;
    }
    embd_prompt *pr = calloc(n_prompts, sizeof *pr);
    engine_req **rq = calloc(n_prompts, sizeof *rq);
    json_t *out = NULL;
    bool ok = pr && rq;
    if (!ok) oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < n_prompts; i++) {
        ok = tokenize_sub(ctx, list ? json_array_get(input, i) : input, param, &pr[i], err);
        if (ok && pr[i].n == 0) ok = oai_bad(err, param, "Input content cannot be empty");
    }
    /* all at once, so the engine batches them; when the queue is full, the
     * next waits for this request's oldest one to finish (the queue drains
     * as slots free), so a long list is not refused for the queue's size */
    int64_t n_tokens = 0;
    size_t oldest = 0;
    for (size_t i = 0; ok && i < n_prompts; i++) {
        engine_req_params ep = {.prompt = pr[i].toks, .n_prompt = pr[i].n, .n_predict = -1, .embd = true,
                                .pooling = (ember_pooling)cfg->pooling};
        ember_status st = engine_submit(ctx->e, &ep, &rq[i]);
        if (st == EMBER_ERR_NOMEM && oldest < i) {
            engine_req *r = rq[oldest++];
            engine_req_lock(r);
            while (r->finish == ENGINE_RUNNING) engine_req_wait(r, 1000);
            engine_req_unlock(r);
            i--;
            continue;
        }
        if (st == EMBER_OK) { n_tokens += pr[i].n; continue; }
        rq[i] = NULL;
        ok = false;
        if (st == EMBER_ERR_RANGE) {
            engine_stats es;
            engine_get_stats(ctx->e, &es, NULL);
            oai_error_set(err, 400, OAI_ERR_EXCEED_CONTEXT, param, "context_length_exceeded", "%s", ember_last_error());
            err->n_prompt_tokens = pr[i].n;
            err->n_ctx = es.n_ctx;
        } else if (st == EMBER_ERR_NOMEM || st == EMBER_ERR_IO) {
            oai_error_set(err, 503, "server_error", NULL, NULL, "%s", ember_last_error());
        } else {
            oai_error_set(err, st == EMBER_ERR_INVALID_ARG ? 400 : 500,
                          st == EMBER_ERR_INVALID_ARG ? "invalid_request_error" : "server_error", NULL, NULL, "%s",
                          ember_last_error());
        }
    }
    if (!ok)   /* the ones already queued stop at once */
        for (size_t i = 0; rq && i < n_prompts; i++) if (rq[i]) engine_req_cancel(rq[i]);

    json_t *data = ok ? json_array() : NULL;
    float *v = NULL;
    for (size_t i = 0; rq && i < n_prompts; i++) {
        engine_req *r = rq[i];
        if (!r) continue;
        engine_req_lock(r);
        while (r->finish == ENGINE_RUNNING) engine_req_wait(r, 1000);   /* woken at the finish */
        const engine_finish f = r->finish;
        engine_req_unlock(r);
        if (ok && f != ENGINE_FINISH_STOP) {
            ok = false;
            const char *why = r->err[0] ? r->err
                              : f == ENGINE_FINISH_CANCELLED ? "the embedding request was cancelled"
                                                             : "the embedding request failed";
            oai_error_set(err, f == ENGINE_FINISH_CANCELLED ? 503 : 500, "server_error", NULL, NULL, "%s", why);
            for (size_t j = i + 1; j < n_prompts; j++) if (rq[j]) engine_req_cancel(rq[j]);   /* no use now */
        }
        if (ok && !v && !(v = malloc(sizeof *v * (size_t)r->n_embd))) {
            ok = false;
            oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        }
        if (ok) {
            json_t *e;
            if (oai) {   /* one pooled vector */
                embeddings_normalize(r->embd, v, r->n_embd, norm);
                json_t *vec = use_base64 ? float_base64(v, r->n_embd) : float_array(v, r->n_embd);
                e = json_pack("{s:o, s:I, s:s}", "embedding", vec, "index", (json_int_t)i, "object", "embedding");
                if (e && use_base64) json_object_set_new(e, "encoding_format", json_string("base64"));
            } else {     /* rows: normalized when pooled, raw per token (pooling none), as send_embedding */
                json_t *rows = json_array();
                for (int32_t k = 0; rows && k < r->n_embd_rows; k++) {
                    const float *row = r->embd + (size_t)k * (size_t)r->n_embd;
                    if (cfg->pooling != EMBER_POOLING_NONE) {
                        embeddings_normalize(row, v, r->n_embd, norm);
                        row = v;
                    }
                    json_array_append_new(rows, float_array(row, r->n_embd));
                }
                e = json_pack("{s:I, s:o}", "index", (json_int_t)i, "embedding", rows);
            }
            if (!e || json_array_append_new(data, e) != 0) {
                ok = false;
                oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            }
        }
        engine_req_release(r);
    }
    free(v);
    if (ok && oai) {
        json_t *model = json_object_get(body, "model");
        model = json_is_string(model) ? json_incref(model) : json_string(cfg->alias ? cfg->alias : "");
        out = json_pack("{s:o, s:s, s:{s:I, s:I}, s:o}", "model", model, "object", "list",
                        "usage", "prompt_tokens", (json_int_t)n_tokens, "total_tokens", (json_int_t)n_tokens, "data",
                        data);
        data = NULL;
    } else if (ok) {
        out = data;
        data = NULL;
    }
    json_decref(data);
    for (size_t i = 0; pr && i < n_prompts; i++) free(pr[i].toks);
    free(pr);
    free(rq);
    if (ok && !out) oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return out;
}
