/*
 * llama_logits.c — second oracle for the tiny qwen35 models: llama.cpp's own
 * forward pass (libllama, CPU) over the same GGUF. Not part of the ember
 * build; make_llamacpp_logits.py compiles it against the llama.cpp source tree
 * (the llama-cpp-python sdist's vendor/llama.cpp) and its libllama.so.
 *
 * usage: llama_logits MODEL.gguf N_UBATCH < ids  (whitespace-separated token ids)
 *        llama_logits --quantize-q8_0 IN.gguf OUT.gguf  (llama_model_quantize, as llama-quantize)
 * Decodes the ids as one sequence from position 0 in one batch (micro-batches
 * of N_UBATCH, F32 KV cache) and prints, one line per position, the n_vocab
 * logits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
    (void)level; (void)text; (void)ud;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: llama_logits MODEL.gguf N_UBATCH < ids\n"); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    if (argc == 4 && !strcmp(argv[1], "--quantize-q8_0")) {
        struct llama_model_quantize_params qp = llama_model_quantize_default_params();
        qp.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
        qp.nthread = 2;
        return llama_model_quantize(argv[2], argv[3], &qp) == 0 ? 0 : 1;
    }
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    /* no repacked / AMX weight buffers: the plain ggml CPU kernels (this
     * machine's AMX tiles raise SIGILL in a VM) */
    mp.use_extra_bufts = false;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    int32_t cap = 4096, n = 0, *ids = malloc(sizeof(int32_t) * (size_t)cap);
    while (n < cap && scanf("%d", &ids[n]) == 1) n++;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n < 512 ? 512 : n);
    cp.n_batch = (uint32_t)n;
    cp.n_ubatch = (uint32_t)atoi(argv[2]);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32;   /* as ember's oracle tests run: the math, not f16 rounding */
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create a context\n"); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int32_t i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) { fprintf(stderr, "llama_decode failed\n"); return 1; }
    const int32_t nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int32_t i = 0; i < n; i++) {
        const float *lg = llama_get_logits_ith(ctx, i);
        for (int32_t j = 0; j < nv; j++) printf(j ? " %.7g" : "%.7g", lg[j]);
        printf("\n");
    }
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}
