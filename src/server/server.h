/*
 * server.h — the OpenAI-compatible HTTP server (libmicrohttpd + jansson).
 *
 * Owns: sockets, routes, authentication, request bodies, JSON and SSE
 * responses, client-disconnect detection, /metrics text.
 * Must not: touch the model (the engine thread owns it). HTTP threads only
 * parse, render the chat template, tokenize, enqueue and stream.
 *
 * Routes (one table in http.c): POST /v1/chat/completions, POST
 * /v1/completions, POST /completion and /completions without /v1 (llama.cpp's
 * native API, native.h), POST /infill, POST /v1/messages and /v1/messages/count_tokens
 * (Anthropic), POST /v1/responses and /v1/responses/input_tokens (OpenAI
 * Responses, responses.h), GET /v1/models, GET /health, GET /metrics, POST /tokenize,
 * POST /detokenize, POST /apply-template, GET /props, GET /slots, POST
 * /v1/embeddings (OpenAI) and /embeddings, /embedding (llama-server's native
 * shape; embeddings.h), POST /slots/{id}?action=save|restore|erase (slots.h)
 * (each also
 * with or without the /v1 prefix, as llama-server accepts them). Every
 * completion API is an adapter over completion.h.
 */
#ifndef EMBER_SERVER_SERVER_H
#define EMBER_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "engine/engine.h"

/* The text side of the model, shared by all HTTP threads (must be
 * thread-safe). `ud` is passed back to every call. */
typedef struct server_text {
    void *ud;
    int32_t n_vocab;
    /* text[len] -> malloc'd ids. add_special: BOS/EOS as the model says;
     * parse_special: control tokens written as text are recognised. */
    ember_status (*tokenize)(void *ud, const char *text, size_t len, bool add_special, bool parse_special,
                             ember_token **out, int32_t *n_out);
    /* bytes of one token (as engine_vocab.token_piece) */
    int32_t (*token_piece)(void *ud, ember_token t, char *buf, int32_t cap);
    /* Render a chat: messages (validated array), tools (array or NULL),
     * kwargs (object or NULL, e.g. enable_thinking), add_generation_prompt,
     * continue_final (the render ends inside the final message, right after
     * its text: chat/template.h continue_final_message; not with
     * add_generation_prompt). *out is malloc'd. Errors: EMBER_ERR_FORMAT
     * (the template failed, or changed the message to continue; the message
     * says where), EMBER_ERR_RANGE (a render limit was hit). */
    ember_status (*apply_template)(void *ud, json_t *messages, json_t *tools, json_t *kwargs, bool add_generation_prompt,
                                   bool continue_final, char **out);
    /* Optional: render and tokenize in one go, so that control-token text
     * inside message contents stays plain text (user content cannot forge
     * <|im_start|> and the like) while the template's own markers are parsed.
     * NULL: apply_template + tokenize(parse_special). */
    ember_status (*render_tokens)(void *ud, json_t *messages, json_t *tools, json_t *kwargs,
                                  bool add_generation_prompt, bool continue_final, ember_token **out, int32_t *n_out);
    ember_token bos;                 /* -1 if none (a doubled BOS is removed) */
    const struct ember_vocab *vocab; /* for grammar masks (NULL: grammars are refused) */
    const char *chat_template;       /* source, for /props (may be NULL) */
} server_text;

/* --reasoning (llama-server's -rea): whether templates are asked to think.
 * AUTO: thinking per request (chat_template_kwargs.enable_thinking,
 * reasoning_effort "none"), else the template's own default; a template that
 * reads enable_thinking as if always given gets true, as llama-server gives
 * it (chat/template.h ember_chat_template_assumes_enable_thinking). ON / OFF:
 * enable_thinking true / false unless the request or --chat-template-kwargs
 * says otherwise. */
typedef enum server_reasoning { SERVER_REASONING_AUTO = 0, SERVER_REASONING_ON, SERVER_REASONING_OFF } server_reasoning;

typedef struct server_config {
    const char *host;                /* --host, default 127.0.0.1 */
    int port;                        /* --port, default 8080; 0 picks a free port */
    const char *api_key;             /* --api-key; NULL: no authentication */
    const char *alias;               /* --alias: the model id clients see */
    const char *model_path;
    bool metrics;                    /* --metrics: enable GET /metrics */
    json_t *template_kwargs;         /* --chat-template-kwargs defaults (object or NULL) */
    const char *slot_save_path;      /* --slot-save-path DIR: POST /slots/{id}?action=save|restore|erase
                                        (slots.h); NULL: those answer 501 */
    json_t *sampling_defaults;       /* --temp, --seed, -n, --top-k, ...: request fields (temperature, seed,
                                        n_predict, top_k, ...) a request that leaves them out gets; object or NULL */
    size_t max_body_bytes;           /* --max-body-size: larger bodies get 413; 0: 16 MiB */
    const char *cors_origin;         /* --cors-origin: "*" or a comma-separated list of origins allowed to read
                                        answers from a browser; NULL: no CORS headers (same-origin only) */
    int max_connections;             /* --max-connections: open connections at once; 0: 512 */
    int max_connections_per_ip;      /* --max-connections-per-ip: from one client address; 0: 128; < 0: no cap */
    int header_timeout_s;            /* --header-timeout: seconds a connection may stay idle while its request
                                        (headers and body) is incomplete, or between keep-alive requests; 0: 10 */
    int timeout_s;                   /* --timeout: seconds a connection may stay idle once its request is
                                        complete (a client not reading its answer); 0: 600 */
    bool has_reasoning_budget;       /* --reasoning-budget given */
    int32_t reasoning_budget;        /* --reasoning-budget: thought tokens before it is closed; < 0 unlimited */
    bool reasoning_format_none;      /* --reasoning-format none: thoughts stay raw in content */
    server_reasoning reasoning;      /* --reasoning auto (default) | on | off */
    bool embedding;                  /* --embedding: serve /v1/embeddings, /embeddings, /embedding (else 501) */
    int32_t pooling;                 /* --pooling: ember_pooling of those embeddings (default: the GGUF's
                                        <arch>.pooling_type, else none, as llama.cpp) */
    /* memory facts for /metrics and /props */
    uint64_t kv_bytes, kv_pool_tokens, weight_bytes;
} server_config;

typedef struct server server;

/* Start listening (threads of libmicrohttpd) and serve `e` (already started).
 * Errors: EMBER_ERR_IO (address in use, bad host), EMBER_ERR_NOMEM. */
ember_status server_start(const server_config *cfg, engine *e, const server_text *text, server **out);
/* The port actually bound (useful with port 0). */
int server_port(const server *s);
/* Stop accepting connections (before engine_stop), keep serving open ones. */
void server_quiesce(server *s);
/* Wait (at most 3 s) for answers in flight to be sent, then close all
 * connections, join the HTTP threads and free. Call after engine_stop. */
void server_stop(server *s);

#endif
