/*
 * slots.c — slot save / restore / erase (see slots.h).
 *
 * Must not: touch sockets or HTTP.
 */
#include "server/slots.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define SLOT_MAGIC "EMBERSLT"
#define SLOT_VERSION 1u

static bool valid_filename(const char *f)
{
    size_t n = strlen(f);
    if (n == 0 || n > 255 || f[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char c = f[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

static void put_u32(unsigned char *p, uint32_t x)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(x >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static json_t *save(const completion_ctx *ctx, int32_t id, const char *name, const char *path, oai_error *err)
{
    double t0 = engine_now();
    ember_token *toks = NULL;
    int32_t n = 0;
    ember_status st = engine_slot_tokens(ctx->e, id, &toks, &n);
    if (st != EMBER_OK) {
        oai_error_set(err, st == EMBER_ERR_IO ? 503 : 500, "server_error", NULL, NULL, "%s", ember_last_error());
        return NULL;
    }
    size_t bytes = 20 + 4 * (size_t)n;
    unsigned char *buf = malloc(bytes);
    bool ok = buf != NULL;
    if (ok) {
        memcpy(buf, SLOT_MAGIC, 8);
        put_u32(buf + 8, SLOT_VERSION);
        put_u32(buf + 12, (uint32_t)ctx->text->n_vocab);
        put_u32(buf + 16, (uint32_t)n);
        for (int32_t i = 0; i < n; i++) put_u32(buf + 20 + 4 * (size_t)i, (uint32_t)toks[i]);
        FILE *f = fopen(path, "wb");
        ok = f && fwrite(buf, 1, bytes, f) == bytes;
        if (f && fclose(f) != 0) ok = false;
        if (!ok) oai_error_set(err, 500, "server_error", NULL, NULL, "Unable to save slot: %s", strerror(errno));
    } else {
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    free(buf);
    free(toks);
    if (!ok) return NULL;
    return json_pack("{s:i, s:s, s:i, s:I, s:{s:f}}", "id_slot", id, "filename", name, "n_saved", n, "n_written",
                     (json_int_t)bytes, "timings", "save_ms", (engine_now() - t0) * 1e3);
}

/* The tokens of a slot file, or false with *err (400). */
static bool read_slot_file(const completion_ctx *ctx, const char *path, ember_token **out, int32_t *n_out,
                           size_t *bytes, oai_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    unsigned char head[20];
    bool ok = f && fread(head, 1, 20, f) == 20 && !memcmp(head, SLOT_MAGIC, 8) && get_u32(head + 8) == SLOT_VERSION &&
              get_u32(head + 12) == (uint32_t)ctx->text->n_vocab && get_u32(head + 16) <= (1u << 24);
    uint32_t n = ok ? get_u32(head + 16) : 0;
    ember_token *t = ok ? malloc(sizeof *t * (n ? n : 1)) : NULL;
    for (uint32_t i = 0; ok && t && i < n; i++) {
        unsigned char b[4];
        ok = fread(b, 1, 4, f) == 4 && get_u32(b) < (uint32_t)ctx->text->n_vocab;
        t[i] = (ember_token)get_u32(b);
    }
    if (ok && !t) ok = false;
    if (ok && fgetc(f) != EOF) ok = false;   /* trailing bytes: not our file */
    if (f) fclose(f);
    if (!ok) {
        free(t);
        oai_bad(err, "filename",
                "Unable to restore slot: '%s' is missing or not an ember slot file for this model's vocabulary.",
                strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
        return false;
    }
    *out = t;
    *n_out = (int32_t)n;
    *bytes = 20 + 4 * (size_t)n;
    return true;
}

static json_t *restore(const completion_ctx *ctx, int32_t id, const char *name, const char *path, oai_error *err)
{
    double t0 = engine_now();
    ember_token *toks = NULL;
    int32_t n = 0;
    size_t bytes = 0;
    if (!read_slot_file(ctx, path, &toks, &n, &bytes, err)) return NULL;
    int32_t dropped = 0;
    ember_status st = EMBER_OK;
    if (n == 0) {
        st = engine_slot_erase(ctx->e, id, &dropped);
    } else {
        /* recompute the KV of the saved tokens in that slot: a request pinned to it that generates nothing */
        engine_req_params p = {.prompt = toks, .n_prompt = n, .n_predict = 0, .pin_slot = true, .id_slot = id,
                               .sampling = {.temp = 0, .top_k = 1, .top_p = 1, .repeat_penalty = 1}};
        engine_req *r = NULL;
        st = engine_submit(ctx->e, &p, &r);
        if (st == EMBER_OK) {
            engine_req_lock(r);
            while (r->finish == ENGINE_RUNNING) pthread_cond_wait(&r->cv, &r->mu);
            engine_finish fin = r->finish;
            char msg[256];
            snprintf(msg, sizeof msg, "%s", r->err);
            engine_req_unlock(r);
            engine_req_release(r);
            if (fin != ENGINE_FINISH_LENGTH && fin != ENGINE_FINISH_STOP)
                st = ember_error(fin == ENGINE_FINISH_CANCELLED ? EMBER_ERR_IO : EMBER_ERR_INTERNAL, "%s", msg);
        }
    }
    free(toks);
    if (st != EMBER_OK) {
        bool client = st == EMBER_ERR_RANGE || st == EMBER_ERR_INVALID_ARG;
        oai_error_set(err, client ? 400 : st == EMBER_ERR_IO || st == EMBER_ERR_NOMEM ? 503 : 500,
                      client ? "invalid_request_error" : "server_error", NULL, NULL, "Unable to restore slot: %s",
                      ember_last_error());
        return NULL;
    }
    return json_pack("{s:i, s:s, s:i, s:I, s:{s:f}}", "id_slot", id, "filename", name, "n_restored", n, "n_read",
                     (json_int_t)bytes, "timings", "restore_ms", (engine_now() - t0) * 1e3);
}

json_t *slots_action(const completion_ctx *ctx, const char *id_str, const char *action, json_t *body, oai_error *err)
{
    const char *dir = ctx->cfg->slot_save_path;
    if (!dir || !dir[0]) {
        oai_error_set(err, 501, "not_supported_error", NULL, NULL,
                      "This server does not support slots action. Start it with `--slot-save-path`");
        return NULL;
    }
    engine_stats es;
    engine_get_stats(ctx->e, &es, NULL);
    char *end;
    long id = strtol(id_str, &end, 10);
    if (!*id_str || *end || id < 0 || id >= es.n_slots) {
        oai_bad(err, NULL, "Invalid slot ID");
        return NULL;
    }
    bool is_save = action && !strcmp(action, "save"), is_restore = action && !strcmp(action, "restore");
    if (action && !strcmp(action, "erase")) {
        int32_t n = 0;
        ember_status st = engine_slot_erase(ctx->e, (int32_t)id, &n);
        if (st != EMBER_OK) {
            oai_error_set(err, st == EMBER_ERR_IO ? 503 : 500, "server_error", NULL, NULL, "%s", ember_last_error());
            return NULL;
        }
        return json_pack("{s:i, s:i}", "id_slot", (int)id, "n_erased", n);
    }
    if (!is_save && !is_restore) {
        oai_bad(err, NULL, "Invalid action");
        return NULL;
    }
    json_t *fn = json_object_get(body, "filename");
    if (!json_is_string(fn) || !valid_filename(json_string_value(fn))) {
        oai_bad(err, "filename", "Invalid filename");
        return NULL;
    }
    const char *name = json_string_value(fn);
    size_t nd = strlen(dir);
    char *path = malloc(nd + strlen(name) + 2);
    if (!path) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    sprintf(path, "%s%s%s", dir, nd && dir[nd - 1] == '/' ? "" : "/", name);
    json_t *j = is_save ? save(ctx, (int32_t)id, name, path, err) : restore(ctx, (int32_t)id, name, path, err);
    free(path);
    return j;
}
