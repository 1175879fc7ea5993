/*
 * oracle_llama.c — the tokenizer oracle: llama.cpp's own tokenizer (libllama),
 * driven over a pipe by make_goldens.py. Not part of the ember build; the
 * script compiles it against the llama.cpp source tree and libllama.so.
 *
 * Protocol (little-endian) on stdin, one record per string:
 *   u32 len, u8 flags (bit0 add_special, bit1 parse_special, bit2 want
 *   pieces), len bytes of text.
 * stdout per record: u32 n, n x i32 ids; if pieces were asked: then for each
 *   id, u32 len + bytes of llama_token_to_piece(id, special=true).
 * flags bit3 (vocab info; the text is ignored): u32 len + a JSON object
 *   {n_tokens, bos, eos, eot, pad, add_bos, add_eos, eog: [...], control: [...]}.
 */
#include <stdint.h>
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
    if (argc < 2) { fprintf(stderr, "usage: oracle_llama MODEL.gguf\n"); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    size_t cap = 1 << 20;
    char *text = malloc(cap);
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    size_t idcap = cap;
    for (;;) {
        uint32_t len; uint8_t flags;
        if (fread(&len, 4, 1, stdin) != 1) break;
        if (fread(&flags, 1, 1, stdin) != 1) return 1;
        if (len + 1 > cap) { cap = len + 1; text = realloc(text, cap); }
        if (len && fread(text, 1, len, stdin) != len) return 1;
        if (flags & 8) {
            int32_t nt = llama_vocab_n_tokens(vocab);
            size_t jcap = 64 + (size_t)nt * 24, k = 0;
            char *j = malloc(jcap);
            k += (size_t)snprintf(j + k, jcap - k,
                "{\"n_tokens\":%d,\"bos\":%d,\"eos\":%d,\"eot\":%d,\"pad\":%d,\"add_bos\":%s,\"add_eos\":%s,\"eog\":[",
                nt, llama_vocab_bos(vocab), llama_vocab_eos(vocab), llama_vocab_eot(vocab), llama_vocab_pad(vocab),
                llama_vocab_get_add_bos(vocab) ? "true" : "false", llama_vocab_get_add_eos(vocab) ? "true" : "false");
            const char *sep = "";
            for (int32_t t = 0; t < nt; t++)
                if (llama_vocab_is_eog(vocab, t)) { k += (size_t)snprintf(j + k, jcap - k, "%s%d", sep, t); sep = ","; }
            k += (size_t)snprintf(j + k, jcap - k, "],\"control\":[");
            sep = "";
            for (int32_t t = 0; t < nt; t++)
                if (llama_vocab_is_control(vocab, t)) { k += (size_t)snprintf(j + k, jcap - k, "%s%d", sep, t); sep = ","; }
            k += (size_t)snprintf(j + k, jcap - k, "]}");
            uint32_t uk = (uint32_t)k;
            fwrite(&uk, 4, 1, stdout);
            fwrite(j, 1, k, stdout);
            fflush(stdout);
            free(j);
            continue;
        }
        if (len + 16 > idcap) { idcap = len + 16; ids = realloc(ids, sizeof(int32_t) * idcap); }
        int32_t n = llama_tokenize(vocab, text, (int32_t)len, ids, (int32_t)idcap,
                                   flags & 1, (flags & 2) != 0);
        if (n < 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
        uint32_t un = (uint32_t)n;
        fwrite(&un, 4, 1, stdout);
        fwrite(ids, 4, un, stdout);
        if (flags & 4) {
            char piece[4096];
            for (int32_t i = 0; i < n; i++) {
                int32_t pl = llama_token_to_piece(vocab, ids[i], piece, sizeof piece, 0, true);
                if (pl < 0) pl = 0;
                uint32_t upl = (uint32_t)pl;
                fwrite(&upl, 4, 1, stdout);
                fwrite(piece, 1, upl, stdout);
            }
        }
        fflush(stdout);
    }
    llama_model_free(model);
    return 0;
}
