/*
 * chat.c — `ember chat -m FILE`: an interactive terminal chat through the
 * model's own chat template.
 *
 * Each turn renders the whole conversation and submits it to the engine (one
 * slot); the prefix cache keeps the earlier turns' KV, so only the new
 * tokens are decoded. Replies stream as they are produced. Lines starting
 * with '/' are commands: /reset (forget the conversation), /exit. Ctrl-C
 * stops the current reply; Ctrl-D (end of input) quits.
 *
 * Must not: schedule, sample or render templates itself.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"
#include "serve_setup.h"

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) { interrupted = 1; }

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ember chat -m FILE [options]\n\n"
            "  -m, --model FILE            GGUF model\n"
            "  -c, --ctx-size N            context tokens (default min(4096, n_ctx_train))\n"
            "  -t, --threads N             CPU threads (default: all cores)\n"
            "  -n, --n-predict N           most tokens per reply (default: until the turn ends)\n"
            "      --temp X                temperature (default 0.7; 0 = greedy)\n"
            "      --top-k N / --top-p X / --min-p X   sampling filters (defaults 40 / 0.95 / 0.05)\n"
            "      --seed N                sampling seed (default: time)\n"
            "  -sys, --system TEXT         system prompt\n"
            "      --chat-template-file F  Jinja chat template to use instead of the GGUF's\n"
            "      --chat-template-kwargs J  JSON object of template variables\n"
            "Lines starting with '/': /reset, /exit. Ctrl-C stops a reply, Ctrl-D quits.\n");
}

/* Submit one turn and stream the reply to stdout; returns the reply text. */
static char *run_turn(serve_model *m, const char *prompt, const ember_sampler_params *sp, int32_t n_predict,
                      bool show_stats)
{
    server_text text = text_ember_server(m->text);
    ember_token *toks = NULL;
    int32_t n = 0;
    if (text.tokenize(text.ud, prompt, strlen(prompt), true, true, &toks, &n) != EMBER_OK) {
        fprintf(stderr, "ember chat: %s\n", ember_last_error());
        return NULL;
    }
    if (text.bos >= 0 && n >= 2 && toks[0] == text.bos && toks[1] == text.bos) memmove(toks, toks + 1, sizeof *toks * (size_t)--n);
    engine_req_params p = {.prompt = toks, .n_prompt = n, .n_predict = n_predict, .sampling = *sp};
    engine_req *r = NULL;
    ember_status st = engine_submit(m->e, &p, &r);
    free(toks);
    if (st != EMBER_OK) {
        fprintf(stderr, "ember chat: %s\n", ember_last_error());
        return NULL;
    }
    size_t shown = 0;
    engine_req_lock(r);
    for (;;) {
        if (r->text_len > shown) {
            fwrite(r->text + shown, 1, r->text_len - shown, stdout);
            fflush(stdout);
            shown = r->text_len;
        }
        if (r->finish != ENGINE_RUNNING) break;
        if (interrupted) { engine_req_cancel(r); interrupted = 0; }
        engine_req_wait(r, 50);
    }
    char *reply = strndup(r->text ? r->text : "", r->text_len);
    engine_finish f = r->finish;
    double tps = r->t_end > r->t_first_token && r->n_generated > 1 ? (r->n_generated - 1) / (r->t_end - r->t_first_token) : 0;
    int32_t n_gen = r->n_generated, n_cached = r->n_cached, n_prompt = r->n_prompt;
    char err[256];
    snprintf(err, sizeof err, "%s", r->err);
    engine_req_unlock(r);
    engine_req_release(r);
    printf("\n");
    if (f == ENGINE_FINISH_ERROR) fprintf(stderr, "ember chat: %s\n", err);
    if (f == ENGINE_FINISH_LENGTH) fprintf(stderr, "[reply cut at the token limit]\n");
    if (show_stats)
        fprintf(stderr, "[%d prompt tokens, %d from cache; %d generated, %.1f tok/s]\n", n_prompt, n_cached, n_gen, tps);
    return reply;
}

int cmd_chat(int argc, char **argv)
{
    serve_opts o = {.n_parallel = 1, .n_batch = 512, .n_prefill_chunk = 0, .n_ctx_checkpoints = -1, .type_k = EMBER_KV_F16,
                    .type_v = EMBER_KV_F16};
    ember_sampler_params sp = ember_sampler_default_params();
    sp.temp = 0.7f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.05f;
    sp.seed = (uint64_t)time(NULL);
    int32_t n_predict = -1;
    const char *system = NULL, *kwargs = NULL;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--verbose")) { verbose = true; continue; }
        if (!v) { fprintf(stderr, "ember chat: unknown option or missing value: %s\n", a); usage(stderr); return 2; }
        i++;
        char *end = NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o.model_path = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) o.n_ctx = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o.n_threads = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) n_predict = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "--temp")) sp.temp = strtof(v, &end);
        else if (!strcmp(a, "--top-k")) sp.top_k = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "--top-p")) sp.top_p = strtof(v, &end);
        else if (!strcmp(a, "--min-p")) sp.min_p = strtof(v, &end);
        else if (!strcmp(a, "--seed")) sp.seed = strtoull(v, &end, 10);
        else if (!strcmp(a, "-sys") || !strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "--chat-template-file")) o.template_file = v;
        else if (!strcmp(a, "--chat-template-kwargs")) kwargs = v;
        else { fprintf(stderr, "ember chat: unknown option '%s'\n", a); usage(stderr); return 2; }
        if (end && (*end || end == v)) { fprintf(stderr, "ember chat: bad value for %s: '%s'\n", a, v); return 2; }
    }
    if (!o.model_path) { fprintf(stderr, "ember chat: -m FILE is required\n"); usage(stderr); return 2; }
    json_t *kw = NULL;
    if (kwargs) {
        kw = json_loads(kwargs, 0, NULL);
        if (!json_is_object(kw)) { fprintf(stderr, "ember chat: --chat-template-kwargs must be a JSON object\n"); json_decref(kw); return 2; }
    }
    serve_model m;
    FILE *log = verbose ? stderr : fopen("/dev/null", "w");
    ember_status st = serve_model_open(&o, &m, log ? log : stderr);
    if (log && log != stderr) fclose(log);
    if (st != EMBER_OK) {
        fprintf(stderr, "ember chat: %s\n", ember_last_error());
        json_decref(kw);
        return 1;
    }
    engine_start(m.e);
    struct sigaction sa = {.sa_handler = on_sigint};
    sigaction(SIGINT, &sa, NULL);
    bool tty = isatty(0);
    server_text text = text_ember_server(m.text);
    json_t *msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
    if (tty) fprintf(stderr, "ember chat — %s. /reset clears, /exit or Ctrl-D quits.\n", o.model_path);
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        if (tty) { fprintf(stdout, "> "); fflush(stdout); }
        interrupted = 0;
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            json_array_clear(msgs);
            if (system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
            continue;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:s%}", "role", "user", "content", line, (size_t)len));
        char *prompt = NULL;
        if (text.apply_template(text.ud, msgs, NULL, kw, true, false, &prompt) != EMBER_OK) {
            fprintf(stderr, "ember chat: the chat template failed: %s\n", ember_last_error());
            json_array_remove(msgs, json_array_size(msgs) - 1);
            rc = 1;
            continue;
        }
        char *reply = run_turn(&m, prompt, &sp, n_predict, verbose || tty);
        free(prompt);
        if (!reply) { json_array_remove(msgs, json_array_size(msgs) - 1); rc = 1; continue; }
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", reply));
        free(reply);
    }
    free(line);
    json_decref(msgs);
    json_decref(kw);
    engine_stop(m.e);
    serve_model_close(&m);
    return rc;
}
