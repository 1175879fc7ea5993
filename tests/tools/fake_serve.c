/*
 * fake_serve.c — the HTTP server in front of the toy model of
 * tests/common/fake_model.h, for testing the HTTP/OpenAI layer (routes,
 * validation, SSE, auth, disconnects, shutdown) fast and without weights.
 * Real-model behaviour is tested against `ember serve` itself.
 *
 * usage: fake_serve [--port N] [--parallel N] [-c N] [--pool N] [--api-key K]
 *                   [--metrics] [--delay-ms N]
 * Prints "listening on http://127.0.0.1:PORT" once ready; exits 0 on SIGTERM.
 * Tokens: bytes 0..255, BOS 256, EOS 257. Template: "<|ROLE|>CONTENT\n" per
 * message, then "<|assistant|>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fake_model.h"
#include "server/server.h"
#include "server/signals.h"

static ember_status fk_tokenize(void *ud, const char *text, size_t len, bool add_special, bool parse_special,
                                ember_token **out, int32_t *n_out)
{
    ember_token *t = malloc(sizeof *t * (len + 1));
    if (!t) return EMBER_ERR_NOMEM;
    int32_t n = 0;
    if (add_special) t[n++] = FAKE_BOS;
    for (size_t i = 0; i < len; i++) t[n++] = (unsigned char)text[i];
    *out = t;
    *n_out = n;
    return EMBER_OK;
}

static int32_t fk_piece(void *ud, ember_token t, char *buf, int32_t cap) { return fake_token_piece(ud, t, buf, cap); }

/* continue_final: the render stops right after the final message's content
 * (transformers' continue_final_message on this template). */
static ember_status fk_template(void *ud, json_t *messages, json_t *tools, json_t *kwargs, bool add_gen, bool cont,
                                char **out)
{
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    if (!s) return EMBER_ERR_NOMEM;
    s[0] = 0;
    for (size_t i = 0; i <= json_array_size(messages); i++) {
        char piece[4096];
        if (i < json_array_size(messages)) {
            json_t *m = json_array_get(messages, i);
            const char *c = json_string_value(json_object_get(m, "content"));
            bool last = i + 1 == json_array_size(messages);
            snprintf(piece, sizeof piece, "<|%s|>%s%s", json_string_value(json_object_get(m, "role")), c ? c : "",
                     cont && last ? "" : "\n");
        } else {
            snprintf(piece, sizeof piece, "%s", add_gen ? "<|assistant|>" : "");
        }
        size_t n = strlen(piece);
        if (len + n + 1 > cap) {
            while (len + n + 1 > cap) cap *= 2;
            s = realloc(s, cap);
            if (!s) return EMBER_ERR_NOMEM;
        }
        memcpy(s + len, piece, n + 1);
        len += n;
    }
    *out = s;
    return EMBER_OK;
}

int main(int argc, char **argv)
{
    int port = 0, parallel = 2, n_ctx = 256, delay_ms = 1;
    long pool = 0;
    const char *api_key = NULL;
    bool metrics = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--port") && v) port = atoi(argv[++i]);
        else if (!strcmp(a, "--parallel") && v) parallel = atoi(argv[++i]);
        else if (!strcmp(a, "-c") && v) n_ctx = atoi(argv[++i]);
        else if (!strcmp(a, "--pool") && v) pool = atol(argv[++i]);
        else if (!strcmp(a, "--api-key") && v) api_key = argv[++i];
        else if (!strcmp(a, "--delay-ms") && v) delay_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--metrics")) metrics = true;
        else { fprintf(stderr, "fake_serve: unknown argument %s\n", a); return 2; }
    }
    if (pool <= 0) pool = (long)n_ctx * parallel;
    server_block_signals();
    int32_t n_batch = 64;
    fake_model *m = fake_model_new(parallel, n_ctx, (uint32_t)pool, n_batch);
    m->delay_s = delay_ms / 1000.0;
    m->eos_mod = 0;
    engine_runtime rt = fake_runtime(m);
    engine_vocab vocab = fake_vocab();
    engine_config ec = {.n_slots = parallel, .n_ctx = n_ctx, .n_batch = n_batch, .n_queue_max = 64};
    engine *e;
    if (engine_new(&ec, &rt, &vocab, &e) != EMBER_OK || engine_start(e) != EMBER_OK) {
        fprintf(stderr, "fake_serve: %s\n", ember_last_error());
        return 1;
    }
    server_text text = {.ud = NULL, .n_vocab = FAKE_N_VOCAB, .tokenize = fk_tokenize, .token_piece = fk_piece,
                        .apply_template = fk_template, .bos = FAKE_BOS, .chat_template = "<fake>"};
    server_config sc = {.host = "127.0.0.1", .port = port, .api_key = api_key, .alias = "fake", .metrics = metrics,
                        .kv_pool_tokens = (uint64_t)pool};
    server *srv;
    if (server_start(&sc, e, &text, &srv) != EMBER_OK) {
        fprintf(stderr, "fake_serve: %s\n", ember_last_error());
        return 1;
    }
    printf("listening on http://127.0.0.1:%d\n", server_port(srv));
    fflush(stdout);
    int sig = server_wait_for_signal();
    fprintf(stderr, "fake_serve: signal %d, shutting down\n", sig);
    server_quiesce(srv);
    engine_stop(e);
    server_stop(srv);
    engine_free(e);
    int violations = m->n_violations;
    fake_model_free(m);
    fprintf(stderr, "fake_serve: stopped (%d decode contract violations)\n", violations);
    return violations ? 3 : 0;
}
