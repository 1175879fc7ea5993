/*
 * serve_setup.c — model + vocabulary + template + KV pool + engine for
 * `ember serve` and `ember chat` (see serve_setup.h).
 */
#include "cli_common.h"
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

const char serve_spec_usage[] =
    "      --spec-type T           speculative decoding: none (default), ngram (prompt lookup), draft (-md),\n"
    "                              layerskip (the model's own first --spec-layers layers draft), draft-dflash\n"
    "                              (a DFlash block draft over the model's hidden states), draft-mtp\n"
    "                              (a Gemma 4 MTP assistant draft over the model's K/V); output stays\n"
    "                              identical (lossless)\n"
    "  -md, --model-draft, --spec-draft-model FILE\n"
    "                              draft model for --spec-type draft (same vocabulary as -m), draft-dflash\n"
    "                              (a dflash GGUF made by convert_hf_to_gguf.py --target-model-dir) or\n"
    "                              draft-mtp (a gemma4-assistant GGUF for a gemma4 -m)\n"
    "  -ngld, --spec-draft-ngl N   N != 0: the draft (draft, draft-dflash, draft-mtp) runs on the GPU: its\n"
    "                              weights, K/V (F16) and scratch (all of it, N is not a layer split); 0\n"
    "                              (default) or no GPU: on the CPU. The target's hidden states reach it\n"
    "                              through host memory\n"
    "      --spec-layers K         layers the layerskip draft runs before the LM head (default: half)\n"
    "      --spec-draft-n-max N    most draft tokens per slot and step (default 16, at most 32)\n"
    "      --spec-draft-n-min N    drop drafts shorter than N (default 0)\n"
    "      --spec-draft-p-min P    draft model stops when its top probability < P (default 0.75; draft-dflash,\n"
    "                              draft-mtp: 0, as llama.cpp)\n"
    "      --spec-adaptive on|off  per-slot draft length from measured acceptance and verify cost (default on)\n"
    "      --spec-row-cost C       cost of one more verified row relative to a 1-token step (default: measured\n"
    "                              from the server's own step times, starting from 0.35)\n"
    "      --spec-force-accept X   BENCHMARKS ONLY: accept X drafted tokens a step on average whatever the model\n"
    "                              draws (the output is not the model's), to time speculation at a chosen\n"
    "                              acceptance on random-weight files\n";

int serve_parse_spec_flag(int argc, char **argv, int *i, serve_opts *o)
{
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    bool is_spec = !strcmp(a, "--spec-type") || !strcmp(a, "-md") || !strcmp(a, "--model-draft") ||
                   !strcmp(a, "--spec-draft-model") || !strcmp(a, "--spec-draft-ngl") || !strcmp(a, "-ngld") ||
                   !strcmp(a, "--spec-draft-n-max") || !strcmp(a, "--draft-max") ||
                   !strcmp(a, "--spec-draft-n-min") || !strcmp(a, "--draft-min") ||
                   !strcmp(a, "--spec-draft-p-min") || !strcmp(a, "--draft-p-min") || !strcmp(a, "--spec-adaptive") ||
                   !strcmp(a, "--spec-row-cost") || !strcmp(a, "--spec-layers") || !strcmp(a, "--spec-early-exit") ||
                   !strcmp(a, "--spec-force-accept");
    if (!is_spec) return 0;
    if (!v) { fprintf(stderr, "ember: %s needs a value\n", a); return -1; }
    (*i)++;
    char *end;
    if (!strcmp(a, "--spec-type")) {
        if (!spec_parse_type(v, &o->spec.type)) {
            fprintf(stderr, "ember: --spec-type expects none, ngram, draft, layerskip, draft-dflash or draft-mtp, got '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft") || !strcmp(a, "--spec-draft-model")) {
        o->draft_path = v;
    } else if (!strcmp(a, "--spec-draft-ngl") || !strcmp(a, "-ngld")) {
        long x = strtol(v, &end, 10);
        if (*end || end == v || x < -1 || x > 100000) {
            fprintf(stderr, "ember: %s expects a layer count, got '%s'\n", a, v);
            return -1;
        }
        o->draft_ngl = (int32_t)x;
    } else if (!strcmp(a, "--spec-adaptive")) {
        if (!strcmp(v, "on")) o->spec.adaptive = true;
        else if (!strcmp(v, "off")) o->spec.adaptive = false;
        else { fprintf(stderr, "ember: --spec-adaptive expects on or off, got '%s'\n", v); return -1; }
    } else if (!strcmp(a, "--spec-layers") || !strcmp(a, "--spec-early-exit")) {
        long x = strtol(v, &end, 10);
        if (*end || end == v || x < 1 || x > 1024) {
            fprintf(stderr, "ember: %s expects a layer count >= 1, got '%s'\n", a, v);
            return -1;
        }
        o->spec.n_layer_draft = (int32_t)x;
    } else if (!strcmp(a, "--spec-force-accept")) {
        double x = strtod(v, &end);
        if (*end || end == v || !(x >= 0 && x <= SPEC_MAX_DRAFT)) {
            fprintf(stderr, "ember: --spec-force-accept expects a number of tokens in [0, %d], got '%s'\n", SPEC_MAX_DRAFT, v);
            return -1;
        }
        o->spec.force_accept = (float)x;
    } else if (!strcmp(a, "--spec-row-cost")) {
        double c = strtod(v, &end);
        if (*end || end == v || !(c > 0 && c <= 4)) {
            fprintf(stderr, "ember: --spec-row-cost expects a number in (0, 4], got '%s'\n", v);
            return -1;
        }
        o->spec.row_cost = (float)c;
        o->spec.row_cost_auto = false;
    } else if (strstr(a, "p-min")) {
        double p = strtod(v, &end);
        if (*end || end == v || !(p >= 0 && p <= 1)) {
            fprintf(stderr, "ember: %s expects a number in [0, 1], got '%s'\n", a, v);
            return -1;
        }
        o->spec.p_min = (float)p;
        o->p_min_given = true;
    } else {
        long x = strtol(v, &end, 10);
        bool is_max = strstr(a, "max") != NULL;
        if (*end || end == v || x < (is_max ? 1 : 0) || x > SPEC_MAX_DRAFT) {
            fprintf(stderr, "ember: %s expects an integer in [%d, %d], got '%s'\n", a, is_max ? 1 : 0, SPEC_MAX_DRAFT, v);
            return -1;
        }
        if (is_max) o->spec.n_max = (int32_t)x;
        else o->spec.n_min = (int32_t)x;
    }
    return 1;
}

/* The proposer for o->spec.type; *out NULL for none. */
static ember_status open_spec(const serve_opts *o, serve_model *m, FILE *log)
{
    spec_proposer prop;
    ember_status st;
    m->spec = NULL;
    if (o->draft_path && o->spec.type == SPEC_NONE) {
        fprintf(log, "ember: -md given: using --spec-type draft\n");
    }
    spec_type type = o->draft_path && o->spec.type == SPEC_NONE ? SPEC_DRAFT : o->spec.type;
    /* -ngld N != 0: the draft's weights, K/V and scratch on the GPU backend
     * (all of it: N is not a layer split), where one exists; else the CPU */
    ember_model_params dmp = ember_model_default_params();
    dmp.n_gpu_layers = o->draft_ngl;
    dmp.device = cli_device;
    if (o->draft_ngl != 0 && ember_gpu_count() == 0 && (type == SPEC_DRAFT || type == SPEC_DFLASH || type == SPEC_MTP))
        fprintf(log, "ember: --spec-draft-ngl %d: no GPU in this build or machine, the draft runs on the CPU\n", o->draft_ngl);
    switch (type) {
    case SPEC_NONE: return EMBER_OK;
    case SPEC_NGRAM: st = spec_ngram_new(o->spec.ngram_min, o->spec.ngram_max, &prop); break;
    case SPEC_DRAFT:
        if (!o->draft_path) return ember_error(EMBER_ERR_INVALID_ARG, "--spec-type draft needs -md FILE");
        st = spec_draft_new(o->draft_path, m->model, o->n_parallel, m->n_ctx, o->n_threads, &dmp, &prop);
        break;
    case SPEC_DFLASH:
        if (!o->draft_path) return ember_error(EMBER_ERR_INVALID_ARG, "--spec-type draft-dflash needs --spec-draft-model FILE");
        st = spec_dflash_new(o->draft_path, m->model, o->n_parallel, m->n_ctx, o->n_threads, o->spec.n_max, &dmp, &prop);
        break;
    case SPEC_MTP:
        if (!o->draft_path) return ember_error(EMBER_ERR_INVALID_ARG, "--spec-type draft-mtp needs --spec-draft-model FILE");
        st = spec_mtp_new(o->draft_path, m->model, o->n_parallel, m->n_ctx, o->n_threads, &dmp, &prop);
        break;
    case SPEC_LAYERSKIP: {
        int32_t k = o->spec.n_layer_draft > 0 ? o->spec.n_layer_draft : ember_model_n_layer(m->model) / 2;
        st = spec_layerskip_new(m->ctx, m->model, k, &prop);
        break;
    }
    default:
        return ember_error(EMBER_ERR_UNSUPPORTED, "--spec-type %s: unknown", spec_type_name(type));
    }
    if (st != EMBER_OK) return st;
    spec_params p = o->spec;
    p.type = type;
    /* llama.cpp drafts the whole DFlash block unless told (common.h:332 p_min 0.0) */
    if ((type == SPEC_DFLASH || type == SPEC_MTP) && !o->p_min_given) p.p_min = 0.0f;
    if ((st = spec_engine_new(&p, prop, o->n_parallel, &m->spec)) != EMBER_OK) return st;
    char line[512];
    spec_engine_describe(m->spec, line, sizeof line);
    fprintf(log, "ember: %s\n", line);
    return EMBER_OK;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

ember_status serve_model_open(const serve_opts *o, serve_model *m, FILE *log)
{
    memset(m, 0, sizeof *m);
    ember_status st;
    char *tmpl = NULL;
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = cli_n_gpu_layers;
    mp.device = cli_device;
    if ((st = ember_model_load(o->model_path, &mp, &m->model)) != EMBER_OK) goto fail;
    m->vocab = ember_model_vocab(m->model);

    /* -c is the KV cache in all, as in llama-server (its unified KV cache):
     * the slots share that pool, and any one may grow to all of it, up to the
     * model's training context (llama-server's n_ctx_slot(),
     * tools/server/server-context.cpp) or --kv-unified-per-slot */
    int32_t n_ctx_train = ember_model_n_ctx_train(m->model);
    int64_t per_slot_default = n_ctx_train > 0 && n_ctx_train < 4096 ? n_ctx_train : 4096;
    int64_t pool = o->n_ctx > 0 ? o->n_ctx : o->kv_pool > 0 ? o->kv_pool : per_slot_default * o->n_parallel;
    if (pool > INT32_MAX) pool = INT32_MAX;
    int64_t slot_ctx = pool;
    if (n_ctx_train > 0 && slot_ctx > n_ctx_train) slot_ctx = n_ctx_train;
    if (o->n_ctx_slot_max > 0 && slot_ctx > o->n_ctx_slot_max) slot_ctx = o->n_ctx_slot_max;
    m->n_ctx = (int32_t)slot_ctx;
    m->pool_tokens = (uint32_t)pool;

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)m->n_ctx;
    cp.n_kv_tokens = m->pool_tokens;
    cp.n_seq_max = (uint32_t)o->n_parallel;
    /* -b / -ub left out: 512 each on the CPU; 2048 each on a GPU, where a
     * prompt's micro-batch of 2048 tokens dequantizes each weight a quarter
     * as often as one of 512 (E4B-shaped, H100: served TTFT of a 3,000-token
     * prompt 0.20-0.21 s -> 0.18 s, of a 16,000-token one 1.06 s -> 0.90-0.93 s,
     * +490 MiB of activations; bench/results/cuda-h200.md, session 29) */
    const bool gpu = cli_on_gpu();
    m->n_batch = o->n_batch > 0 ? o->n_batch : gpu ? 2048 : 512;
    int32_t ub = o->n_ubatch > 0 ? o->n_ubatch : gpu ? 2048 : 512;
    if (o->n_ubatch <= 0 && ub > m->n_ctx) ub = m->n_ctx;   /* no prompt pass is longer than a slot (scratch) */
    cp.n_batch = (uint32_t)m->n_batch;
    cp.n_ubatch = (uint32_t)(m->n_batch < ub ? m->n_batch : ub);
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    if (o->n_ctx_checkpoints >= 0) cp.n_ctx_checkpoints = (uint32_t)o->n_ctx_checkpoints;
    if ((st = ember_context_new(m->model, &cp, &m->ctx)) != EMBER_OK) goto fail;
    /* A GPU backend uploads weights and allocates the KV cache on first
     * use: a one-token warm-up decode does that now, so the report below
     * says where the GPU memory goes (and the first request does not pay
     * for the upload). Nothing on the CPU. */
    bool warmed = false;
    if ((st = ember_context_warmup(m->ctx, &warmed)) != EMBER_OK) goto fail;
    if (warmed) {
        fprintf(log, "ember: after a one-token warm-up decode:\n");
        ember_context_print_memory(m->ctx, log);
    }

    if (o->template_file) {
        tmpl = serve_read_file(o->template_file);
        if (!tmpl) { st = ember_error(EMBER_ERR_IO, "--chat-template-file %s: cannot read", o->template_file); goto fail; }
    }
    size_t tmpl_len = 0;
    const char *model_tmpl = ember_model_chat_template(m->model, &tmpl_len);   /* from the loaded model */
    st = text_ember_new(model_tmpl, tmpl_len, m->vocab, tmpl, &m->text);
    free(tmpl);
    if (st != EMBER_OK) goto fail;
    if (text_ember_is_fallback(m->text))
        fprintf(log, "ember: warning: the model has no chat template; using ChatML (as llama-server does)\n");

    int32_t n_vocab = ember_model_n_vocab(m->model);
    m->rt = engine_runtime_ember(m->ctx, n_vocab, ember_model_n_embd(m->model));
    m->ev = text_ember_vocab(m->text);
    if ((st = open_spec(o, m, log)) != EMBER_OK) goto fail;
    engine_config ec = {.n_slots = o->n_parallel, .n_ctx = m->n_ctx, .n_batch = m->n_batch,
                        .n_prefill_chunk = o->n_prefill_chunk, .n_queue_max = 256, .ckpt_interval = o->ckpt_interval,
                        .spec = m->spec, .context_shift = o->context_shift};
    if ((st = engine_new(&ec, &m->rt, &m->ev, &m->e)) != EMBER_OK) goto fail;

    static const char *kv_names[] = {"f16", "q8_0", "f32"};
    fprintf(log,
            "ember: model %s (%s, %d layers, n_vocab %d): weights %.1f MiB\n"
            "ember: n_ctx %u (KV pool, tokens in all), n_slots %d, n_ctx_slot %d (K %s, V %s): %.1f MiB; "
            "scratch %.1f MiB (n_batch %d, n_ubatch %u)\n",
            o->model_path, ember_model_arch(m->model), ember_model_n_layer(m->model), n_vocab,
            mib(ember_model_size_bytes(m->model)), m->pool_tokens, o->n_parallel, m->n_ctx, kv_names[o->type_k],
            kv_names[o->type_v], mib(ember_context_kv_bytes(m->ctx)), mib(ember_context_scratch_bytes(m->ctx)), m->n_batch,
            cp.n_ubatch);
    if (ember_context_checkpoint_bytes_max(m->ctx) > 0)
        fprintf(log, "ember: recurrent-state snapshots (rollback + --ctx-checkpoints per slot): up to %.1f MiB more, "
                     "allocated as they are taken\n", mib(ember_context_checkpoint_bytes_max(m->ctx)));
    return EMBER_OK;
fail:
    fprintf(log, "ember: %s: %s\n", ember_status_name(st), ember_last_error());
    serve_model_close(m);
    return st;
}

void serve_model_close(serve_model *m)
{
    if (m->e) engine_free(m->e);
    spec_engine_free(m->spec);
    text_ember_free(m->text);
    if (m->ctx) ember_context_free(m->ctx);
    if (m->model) ember_model_free(m->model);   /* owns the vocab */
    memset(m, 0, sizeof *m);
}
