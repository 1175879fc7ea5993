/*
 * serve_setup.c — model + vocabulary + template + KV pool + engine for
 * `ember serve` and `ember chat` (see serve_setup.h).
 */
#include "serve_setup.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/runtime_ember.h"
#include "gguf/gguf.h"

bool serve_parse_kv_type(const char *s, ember_kv_type *out)
{
    if (!strcmp(s, "f16")) *out = EMBER_KV_F16;
    else if (!strcmp(s, "q8_0")) *out = EMBER_KV_Q8_0;
    else if (!strcmp(s, "f32")) *out = EMBER_KV_F32;
    else return false;
    return true;
}

char *serve_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    size_t n;
    while (s && (n = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *t = realloc(s, cap * 2);
            if (!t) { free(s); s = NULL; break; }
            s = t;
            cap *= 2;
        }
    }
    fclose(f);
    if (s) s[len] = 0;
    return s;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

ember_status serve_model_open(const serve_opts *o, serve_model *m, FILE *log)
{
    memset(m, 0, sizeof *m);
    ember_status st;
    char *tmpl = NULL;
    ember_model_params mp = ember_model_default_params();
    if ((st = ember_model_load(o->model_path, &mp, &m->model)) != EMBER_OK) goto fail;
    m->vocab = ember_model_vocab(m->model);

    int32_t n_ctx_train = ember_model_n_ctx_train(m->model);
    m->n_ctx = o->n_ctx > 0 ? o->n_ctx : (n_ctx_train > 0 && n_ctx_train < 4096 ? n_ctx_train : 4096);
    if (n_ctx_train > 0 && m->n_ctx > n_ctx_train)
        fprintf(log, "ember: warning: -c %d is larger than the model's training context (%d)\n", m->n_ctx, n_ctx_train);
    int64_t pool = o->kv_pool > 0 ? o->kv_pool : (int64_t)m->n_ctx * o->n_parallel;
    if (pool < m->n_ctx) pool = m->n_ctx;
    if (pool > UINT32_MAX) pool = UINT32_MAX;
    m->pool_tokens = (uint32_t)pool;

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)m->n_ctx;
    cp.n_kv_tokens = m->pool_tokens;
    cp.n_seq_max = (uint32_t)o->n_parallel;
    cp.n_batch = (uint32_t)o->n_batch;
    cp.n_ubatch = (uint32_t)(o->n_batch < 512 ? o->n_batch : 512);
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    if ((st = ember_context_new(m->model, &cp, &m->ctx)) != EMBER_OK) goto fail;

    if (o->template_file) {
        tmpl = serve_read_file(o->template_file);
        if (!tmpl) { st = ember_error(EMBER_ERR_IO, "--chat-template-file %s: cannot read", o->template_file); goto fail; }
    }
    st = text_ember_new(o->model_path, m->vocab, tmpl, &m->text);
    free(tmpl);
    if (st != EMBER_OK) goto fail;
    if (text_ember_is_fallback(m->text))
        fprintf(log, "ember: warning: the model has no chat template; using ChatML (as llama-server does)\n");

    int32_t n_vocab = ember_model_n_vocab(m->model);
    m->rt = engine_runtime_ember(m->ctx, n_vocab);
    m->ev = text_ember_vocab(m->text);
    engine_config ec = {.n_slots = o->n_parallel, .n_ctx = m->n_ctx, .n_batch = o->n_batch,
                        .n_prefill_chunk = o->n_prefill_chunk, .n_queue_max = 256};
    if ((st = engine_new(&ec, &m->rt, &m->ev, &m->e)) != EMBER_OK) goto fail;

    static const char *kv_names[] = {"f16", "q8_0", "f32"};
    fprintf(log,
            "ember: model %s (%s, %d layers, n_vocab %d): weights %.1f MiB\n"
            "ember: %d slots x n_ctx %d; KV pool %u tokens shared by all slots (K %s, V %s): %.1f MiB; scratch %.1f MiB\n",
            o->model_path, ember_model_arch(m->model), ember_model_n_layer(m->model), n_vocab,
            mib(ember_model_size_bytes(m->model)), o->n_parallel, m->n_ctx, m->pool_tokens, kv_names[o->type_k],
            kv_names[o->type_v], mib(ember_context_kv_bytes(m->ctx)), mib(ember_context_scratch_bytes(m->ctx)));
    return EMBER_OK;
fail:
    fprintf(log, "ember: %s: %s\n", ember_status_name(st), ember_last_error());
    serve_model_close(m);
    return st;
}

void serve_model_close(serve_model *m)
{
    if (m->e) engine_free(m->e);
    text_ember_free(m->text);
    if (m->ctx) ember_context_free(m->ctx);
    if (m->model) ember_model_free(m->model);   /* owns the vocab */
    memset(m, 0, sizeof *m);
}
