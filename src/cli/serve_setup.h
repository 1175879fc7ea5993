/*
 * serve_setup.h — what `ember serve` and `ember chat` share: loading the
 * model, vocabulary, chat template and KV pool, and starting the engine.
 *
 * Must not: know about HTTP or the terminal.
 */
#ifndef EMBER_CLI_SERVE_SETUP_H
#define EMBER_CLI_SERVE_SETUP_H

#include <stdio.h>

#include "ember.h"
#include "engine/engine.h"
#include "server/text_ember.h"
#include "tokenizer/tokenizer.h"

typedef struct serve_opts {
    const char *model_path;     /* -m */
    int32_t n_ctx;              /* -c: KV cache tokens in all (the pool every slot draws from, as llama-server's
                                   -c); 0 = min(4096, n_ctx_train) x n_parallel */
    int32_t n_ctx_slot_max;     /* --kv-unified-per-slot: most tokens one slot may hold; 0 = the pool */
    int32_t n_parallel;         /* -np */
    int32_t n_threads;          /* -t; <= 0: all cores */
    int32_t n_batch;            /* -b: most tokens per step (0: 512 on the CPU, 2048 on a GPU) */
    int32_t n_ubatch;           /* -ub: tokens per forward pass (0: 512 on the CPU, 2048 on a GPU), at most n_batch */
    int32_t n_prefill_chunk;    /* --prefill-chunk */
    int32_t n_ctx_checkpoints;  /* --ctx-checkpoints: block checkpoints of a recurrent state per slot (-1: default 8) */
    int32_t ckpt_interval;      /* --checkpoint-min-step: tokens between them (0: 256) */
    int64_t kv_pool;            /* --kv-pool: the same as -c (older name); -c wins */
    ember_kv_type type_k, type_v;
    const char *template_file;  /* --chat-template-file */
    spec_params spec;           /* --spec-type, --spec-draft-n-max/-n-min/-p-min, --spec-adaptive */
    const char *draft_path;     /* -md / --spec-draft-model: draft model for --spec-type draft or draft-dflash */
    int32_t draft_ngl;          /* --spec-draft-ngl: != 0 runs the draft on the GPU backend (where one exists) */
    bool p_min_given;           /* --spec-draft-p-min was given (draft-dflash defaults to llama.cpp's 0) */
    bool context_shift;         /* --context-shift (engine_config.context_shift) */
} serve_opts;

typedef struct serve_model {
    ember_model *model;
    const ember_vocab *vocab;   /* owned by model */
    ember_context *ctx;
    text_ember *text;
    engine_runtime rt;
    engine_vocab ev;
    engine *e;
    spec_engine *spec;          /* NULL: no speculation */
    int32_t n_ctx;              /* n_ctx_slot: most tokens one slot holds = min(pool, n_ctx_train, --kv-unified-per-slot) */
    uint32_t pool_tokens;       /* n_ctx: the KV pool, tokens in all */
    int32_t n_batch;            /* -b as resolved (serve_opts.n_batch, or its default) */
} serve_model;

/* Load everything and create (not start) the engine; prints the memory plan
 * (weights, KV pool tokens and bytes, scratch) to `log`. On failure prints
 * the reason and returns it; nothing is held. */
ember_status serve_model_open(const serve_opts *o, serve_model *out, FILE *log);
void serve_model_close(serve_model *m);

/* Parse a KV type name (f16, q8_0, f32). */
bool serve_parse_kv_type(const char *s, ember_kv_type *out);
/* Parse one speculation flag at argv[*i] into o (advancing *i past its
 * value). Returns 1 if taken, 0 if not a speculation flag, -1 on a bad value
 * (message printed to stderr). */
int serve_parse_spec_flag(int argc, char **argv, int *i, serve_opts *o);
/* The help text of the speculation flags. */
extern const char serve_spec_usage[];
/* Read a whole file into a malloc'd NUL-terminated string; NULL on failure. */
char *serve_read_file(const char *path);

#endif
