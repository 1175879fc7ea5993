/*
 * serve.c — `ember serve`: the OpenAI-compatible server.
 *
 * Flags follow llama-server where they overlap (-m -c -np -t -b --host --port
 * --api-key --alias --chat-template-file --chat-template-kwargs -ctk -ctv
 * --metrics --reasoning --kv-unified-per-slot --embedding --pooling; the sampling defaults --temp
 * --seed -n --top-k ... in serve_sampling.c). -c is the KV cache in all,
 * as llama-server's unified cache: the slots share it, and one slot may
 * hold up to all of it (n_ctx_slot = min(-c, n_ctx_train,
 * --kv-unified-per-slot)). SIGINT/SIGTERM: stop accepting, cancel running requests (their
 * clients get a final event or a 503), drain, exit 0.
 *
 * Must not: parse HTTP (src/server) or schedule (src/engine).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>

#include "base/status.h"
#include "cli_common.h"
#include "serve_setup.h"
#include "serve_sampling.h"
#include "server/server.h"
#include "server/signals.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ember serve -m FILE [options]\n\n"
            "  -m, --model FILE            GGUF model\n"
            "  -c, --ctx-size N            KV cache tokens in all, shared by the slots (as llama-server); one slot\n"
            "                              may use all of it up to n_ctx_train; default min(4096, n_ctx_train) x -np;\n"
            "                              when it is full the newest request waits (its cache is recomputed later)\n"
            "  -np, --parallel N           slots decoding at once (default 4); more requests wait in a queue\n"
            "      --kv-unified-per-slot N most tokens one slot may hold (default: -c, capped by n_ctx_train)\n"
            "      --kv-pool N             the same as -c (older name)\n"
            "  -t, --threads N             CPU threads (default: all cores)\n"
            "  -b, --batch-size N          most tokens decoded per step (default 512; 2048 on a GPU)\n"
            "  -ub, --ubatch-size N        tokens per forward pass (default 512; 2048 on a GPU; at most -b)\n"
            "      --prefill-chunk N       most prompt tokens per step while others generate (default 128)\n"
            "  -ctxcp, --ctx-checkpoints N  models with recurrent layers (qwen35): state checkpoints kept per slot\n"
            "                              for the prefix cache (default 8, 0..64, 0 = none)\n"
            "  -cms, --checkpoint-min-step N  tokens between those checkpoints (default 256): a prefix-cache hit\n"
            "                              replays fewer than N tokens\n"
            "  -ctk, --cache-type-k T      K cache type: f16 (default), q8_0, f32\n"
            "  -ctv, --cache-type-v T      V cache type: f16 (default), q8_0, f32\n"
            "      --host ADDR             listen address (default 127.0.0.1)\n"
            "      --port N                listen port (default 8080; 0 picks a free one)\n"
            "      --api-key KEY           require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (except /health, GET /)\n"
            "      --api-key-file F        read KEY from the first line of file F (keeps it out of ps)\n"
            "      --alias NAME            model id reported to clients (default: the file name)\n"
            "      --chat-template-file F  Jinja chat template to use instead of the GGUF's\n"
            "      --chat-template-kwargs J  JSON object of default template variables, e.g. '{\"enable_thinking\":false}'\n"
            "      --metrics               serve Prometheus metrics at /metrics\n"
            "      --slot-save-path DIR    enable POST /slots/ID?action=save|restore|erase with files in DIR\n"
            "      --context-shift         generate past a slot's context: drop the older half of what follows the\n"
            "                              kept tokens (n_keep, BOS) and recompute the rest (default: off, the reply\n"
            "                              stops at the context, truncated)\n"
            "      --cors-origin LIST      let browsers on these origins read answers: '*' or a comma-separated list\n"
            "                              such as 'http://localhost:3000' (default: none, no CORS headers)\n"
            "      --max-body-size N       largest request body in bytes (default 16777216); larger ones get 413\n"
            "      --max-connections N     open connections at once, one thread each (default 512)\n"
            "      --max-connections-per-ip N  of those, from one client address (default 128; 0: no cap)\n"
            "      --header-timeout S      seconds a connection may idle before its request is complete, or\n"
            "                              between keep-alive requests (default 10)\n"
            "  -to, --timeout S            seconds a connection may idle once its request is in, e.g. a client\n"
            "                              not reading its answer (default 600)\n"
            "  -rea, --reasoning M         thinking: 'auto' (default: per request, else the template's own default;\n"
            "                              templates written for llama-server get enable_thinking=true), 'on', 'off'\n"
            "      --reasoning-budget N    close a thinking block after N tokens (-1: unlimited, default; a request\n"
            "                              that forces a tool call while thinking, with max_tokens and no budget,\n"
            "                              gets max_tokens / 4, so the call always has room)\n"
            "      --reasoning-format F    'auto' (default): thoughts in reasoning_content; 'none': raw in content\n"
            "      --embedding, --embeddings  also serve embeddings: POST /v1/embeddings (OpenAI), /embeddings and\n"
            "                              /embedding (llama-server's shape); the final hidden state after the\n"
            "                              output norm, pooled; CPU only (-ngl 0)\n"
            "      --pooling P             embeddings' pooling: none (one vector per token; not on /v1), mean, cls\n"
            "                              or last (default: the GGUF's <arch>.pooling_type, else none, as llama.cpp)\n");
    fputs(serve_sampling_usage, f);
    fputs(serve_spec_usage, f);
}

static bool int_arg(const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "ember serve: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, v ? v : "");
        return false;
    }
    *out = x;
    return true;
}

/* The API key from the first line of `path` (trailing CR/LF and spaces
 * dropped) into buf[n]. False, with a message on stderr, if the file cannot be
 * read or the key is empty or longer than n - 1 bytes. */
static bool read_key_file(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "ember serve: --api-key-file: cannot open '%s'\n", path); return false; }
    bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    size_t len = ok ? strlen(buf) : 0;
    if (ok && len == n - 1 && buf[len - 1] != '\n') ok = false;   /* longer than the buffer */
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ')) buf[--len] = '\0';
    if (!ok || !len) { fprintf(stderr, "ember serve: --api-key-file: '%s' holds no key on its first line (or one over %zu bytes)\n", path, n - 1); return false; }
    return true;
}

int cmd_serve(int argc, char **argv)
{
    serve_opts o = {.n_parallel = 4, .n_batch = 0, .n_prefill_chunk = 128, .n_ctx_checkpoints = -1, .type_k = EMBER_KV_F16,
                    .type_v = EMBER_KV_F16, .spec = spec_default_params()};
    o.spec.row_cost_auto = true;   /* measured from step times unless --spec-row-cost is given */
    server_config sc = {.host = "127.0.0.1", .port = 8080, .pooling = -1};
    const char *kwargs = NULL;
    char alias_buf[256];
    static char api_key_buf[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
#define TAKE() (i++, v)
        int sp = serve_parse_spec_flag(argc, argv, &i, &o);
        if (sp < 0) return 2;
        if (sp > 0) continue;
        sp = serve_parse_sampling_flag(argc, argv, &i, &sc.sampling_defaults);
        if (sp < 0) return 2;
        if (sp > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) goto missing; o.model_path = TAKE(); }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!int_arg(a, TAKE(), 0, 1 << 24, &x)) return 2; o.n_ctx = (int32_t)x; }
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) { if (!int_arg(a, TAKE(), 1, 256, &x)) return 2; o.n_parallel = (int32_t)x; }
        else if (!strcmp(a, "--kv-unified-per-slot")) { if (!int_arg(a, TAKE(), 1, 1 << 24, &x)) return 2; o.n_ctx_slot_max = (int32_t)x; }
        else if (!strcmp(a, "--kv-pool")) { if (!int_arg(a, TAKE(), 0, 1L << 30, &x)) return 2; o.kv_pool = x; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!int_arg(a, TAKE(), -1, 1024, &x)) return 2; o.n_threads = (int32_t)x; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (!int_arg(a, TAKE(), 1, 1 << 16, &x)) return 2; o.n_batch = (int32_t)x; }
        else if (!strcmp(a, "--prefill-chunk")) { if (!int_arg(a, TAKE(), 0, 1 << 16, &x)) return 2; o.n_prefill_chunk = (int32_t)x; }
        else if (!strcmp(a, "-ctxcp") || !strcmp(a, "--ctx-checkpoints")) { if (!int_arg(a, TAKE(), 0, 64, &x)) return 2; o.n_ctx_checkpoints = (int32_t)x; }
        else if (!strcmp(a, "-cms") || !strcmp(a, "--checkpoint-min-step")) { if (!int_arg(a, TAKE(), 1, 1 << 20, &x)) return 2; o.ckpt_interval = (int32_t)x; }
        else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) {
            if (!v || !serve_parse_kv_type(TAKE(), &o.type_k)) { fprintf(stderr, "ember serve: %s expects f16, q8_0 or f32\n", a); return 2; }
        } else if (!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) {
            if (!v || !serve_parse_kv_type(TAKE(), &o.type_v)) { fprintf(stderr, "ember serve: %s expects f16, q8_0 or f32\n", a); return 2; }
        }
        else if (!strcmp(a, "--host")) { if (!v) goto missing; sc.host = TAKE(); }
        else if (!strcmp(a, "--port")) { if (!int_arg(a, TAKE(), 0, 65535, &x)) return 2; sc.port = (int)x; }
        else if (!strcmp(a, "--api-key")) { if (!v) goto missing; sc.api_key = TAKE(); }
        else if (!strcmp(a, "--api-key-file")) {
            if (!v) goto missing;
            const char *f = TAKE();
            if (!read_key_file(f, api_key_buf, sizeof api_key_buf)) return 2;
            sc.api_key = api_key_buf;
        }
        else if (!strcmp(a, "--alias")) { if (!v) goto missing; sc.alias = TAKE(); }
        else if (!strcmp(a, "--chat-template-file")) { if (!v) goto missing; o.template_file = TAKE(); }
        else if (!strcmp(a, "--chat-template-kwargs")) { if (!v) goto missing; kwargs = TAKE(); }
        else if (!strcmp(a, "--metrics")) { sc.metrics = true; }
        else if (!strcmp(a, "--embedding") || !strcmp(a, "--embeddings")) { sc.embedding = true; }
        else if (!strcmp(a, "--pooling")) {
            if (!v) goto missing;
            const char *p = TAKE();   /* llama-server's names (common/arg.cpp); rank (rerankers) is not served */
            if (!strcmp(p, "none")) sc.pooling = EMBER_POOLING_NONE;
            else if (!strcmp(p, "mean")) sc.pooling = EMBER_POOLING_MEAN;
            else if (!strcmp(p, "cls")) sc.pooling = EMBER_POOLING_CLS;
            else if (!strcmp(p, "last")) sc.pooling = EMBER_POOLING_LAST;
            else {
                fprintf(stderr, "ember serve: --pooling must be 'none', 'mean', 'cls' or 'last', got '%s'%s\n", p,
                        !strcmp(p, "rank") ? " (rank, for rerankers, is not supported)" : "");
                return 2;
            }
        }
        else if (!strcmp(a, "--context-shift")) { o.context_shift = true; }
        else if (!strcmp(a, "--no-context-shift")) { o.context_shift = false; }
        else if (!strcmp(a, "--slot-save-path")) { if (!v) goto missing; sc.slot_save_path = TAKE(); }
        else if (!strcmp(a, "--cors-origin")) { if (!v) goto missing; sc.cors_origin = TAKE(); }
        else if (!strcmp(a, "--max-body-size")) { if (!int_arg(a, TAKE(), 1, 1L << 40, &x)) return 2; sc.max_body_bytes = (size_t)x; }
        else if (!strcmp(a, "--max-connections")) { if (!int_arg(a, TAKE(), 1, 65536, &x)) return 2; sc.max_connections = (int)x; }
        else if (!strcmp(a, "--max-connections-per-ip")) {
            if (!int_arg(a, TAKE(), 0, 65536, &x)) return 2;
            sc.max_connections_per_ip = x ? (int)x : -1;
        }
        else if (!strcmp(a, "--header-timeout")) { if (!int_arg(a, TAKE(), 1, 86400, &x)) return 2; sc.header_timeout_s = (int)x; }
        else if (!strcmp(a, "-to") || !strcmp(a, "--timeout")) { if (!int_arg(a, TAKE(), 1, 86400, &x)) return 2; sc.timeout_s = (int)x; }
        else if (!strcmp(a, "--reasoning-budget")) {
            if (!int_arg(a, TAKE(), -1, INT32_MAX, &x)) return 2;
            sc.has_reasoning_budget = true;
            sc.reasoning_budget = (int32_t)x;
        } else if (!strcmp(a, "-rea") || !strcmp(a, "--reasoning")) {
            if (!v) goto missing;
            const char *m = TAKE();   /* llama-server's spellings (common/arg.cpp is_truthy / is_falsey / is_autoy) */
            if (!strcmp(m, "on") || !strcmp(m, "enabled") || !strcmp(m, "true") || !strcmp(m, "1"))
                sc.reasoning = SERVER_REASONING_ON;
            else if (!strcmp(m, "off") || !strcmp(m, "disabled") || !strcmp(m, "false") || !strcmp(m, "0"))
                sc.reasoning = SERVER_REASONING_OFF;
            else if (!strcmp(m, "auto") || !strcmp(m, "-1"))
                sc.reasoning = SERVER_REASONING_AUTO;
            else {
                fprintf(stderr, "ember serve: --reasoning must be 'on', 'off' or 'auto', got '%s'\n", m);
                return 2;
            }
        } else if (!strcmp(a, "--reasoning-format")) {
            if (!v) goto missing;
            const char *f = TAKE();
            if (strcmp(f, "none") && strcmp(f, "auto") && strcmp(f, "deepseek")) {
                fprintf(stderr, "ember serve: --reasoning-format must be 'auto', 'deepseek' or 'none'\n");
                return 2;
            }
            sc.reasoning_format_none = !strcmp(f, "none");
        }
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--device")) {
            if (cli_gpu_option(argc, argv, &i) < 0) return 2;
        } else if (!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) {
            if (!v) goto missing;
            if (!int_arg(a, TAKE(), 1, 1 << 16, &x)) return 2;
            o.n_ubatch = (int32_t)x;
        } else {
            fprintf(stderr, "ember serve: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "ember serve: %s needs a value\n", a);
        return 2;
    }
#undef TAKE
    if (!o.model_path) { fprintf(stderr, "ember serve: -m FILE is required\n"); usage(stderr); return 2; }
    if (sc.slot_save_path) {
        struct stat sb;
        if (stat(sc.slot_save_path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "ember serve: --slot-save-path '%s' is not a directory\n", sc.slot_save_path);
            return 2;
        }
    }
    if (kwargs) {
        json_error_t je;
        sc.template_kwargs = json_loads(kwargs, 0, &je);
        if (!json_is_object(sc.template_kwargs)) {
            fprintf(stderr, "ember serve: --chat-template-kwargs must be a JSON object (%s)\n", je.text);
            json_decref(sc.template_kwargs);
            return 2;
        }
    }
    if (!sc.alias) {
        const char *base = strrchr(o.model_path, '/');
        snprintf(alias_buf, sizeof alias_buf, "%s", base ? base + 1 : o.model_path);
        char *dot = strstr(alias_buf, ".gguf");
        if (dot) *dot = 0;
        sc.alias = alias_buf;
    }

    server_block_signals();   /* before any thread exists */
    serve_model m;
    if (serve_model_open(&o, &m, stderr) != EMBER_OK) { json_decref(sc.template_kwargs); return 1; }
    if (engine_start(m.e) != EMBER_OK) {
        fprintf(stderr, "ember serve: %s\n", ember_last_error());
        serve_model_close(&m);
        return 1;
    }
    if (sc.pooling < 0) sc.pooling = ember_model_pooling_type(m.model);
    if (sc.embedding && (sc.pooling < EMBER_POOLING_NONE || sc.pooling > EMBER_POOLING_LAST)) {
        fprintf(stderr, "ember serve: --embedding: the model's %s.pooling_type (%d) is not none, mean, cls or last; "
                "give --pooling\n", ember_model_arch(m.model), sc.pooling);
        serve_model_close(&m);
        json_decref(sc.template_kwargs);
        return 1;
    }
    if (sc.embedding && !ember_context_embeddings_supported(m.ctx)) {
        fprintf(stderr, "ember serve: --embedding: embeddings are computed on the CPU only for now (use -ngl 0)\n");
        serve_model_close(&m);
        json_decref(sc.template_kwargs);
        return 1;
    }
    sc.model_path = o.model_path;
    sc.kv_bytes = ember_context_kv_bytes(m.ctx);
    sc.kv_pool_tokens = m.pool_tokens;
    sc.weight_bytes = ember_model_size_bytes(m.model);
    server_text text = text_ember_server(m.text);
    server *srv;
    if (server_start(&sc, m.e, &text, &srv) != EMBER_OK) {
        fprintf(stderr, "ember serve: %s\n", ember_last_error());
        serve_model_close(&m);
        json_decref(sc.template_kwargs);
        return 1;
    }
    fprintf(stderr, "ember: listening on http://%s:%d (model id '%s'%s)\n", sc.host, server_port(srv), sc.alias,
            sc.api_key ? ", API key required" : "");
    int sig = server_wait_for_signal();
    fprintf(stderr, "ember: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server_quiesce(srv);
    engine_stop(m.e);
    server_stop(srv);
    serve_model_close(&m);
    json_decref(sc.template_kwargs);
    json_decref(sc.sampling_defaults);
    fprintf(stderr, "ember: stopped\n");
    return 0;
}
